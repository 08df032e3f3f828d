"""YAML reading with YAML 1.2 numbers: ``1e-5`` is a float (PyYAML's YAML 1.1 resolver reads it as a string).

Every user-facing YAML — run configs, ``--set key=value`` values, generator configs — goes through
:func:`load_yaml`, so ``scorer_weight_decay: 1e-5`` and ``--set lr=3e-4`` mean numbers, as users expect.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["YamlLoader", "load_yaml"]

# YAML 1.2 core schema floats (plus 1.1's ".inf"/".nan" spellings, which the safe loader already reads).
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose implicit float resolver follows YAML 1.2 (exponents without a dot)."""


YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """Parse ``text`` safely (no object construction) with YAML 1.2 floats."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 - YamlLoader is a SafeLoader
