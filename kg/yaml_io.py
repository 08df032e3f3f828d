"""YAML reading with YAML 1.2 numbers: ``1e-5`` is a float (PyYAML's YAML 1.1 resolver reads it as a string).

Every user-facing YAML — run configs, ``--set key=value`` values, generator configs — goes through
:func:`load_yaml`, so ``scorer_weight_decay: 1e-5`` and ``--set lr=3e-4`` mean numbers, as users expect.

Anchors and aliases (``&a``, ``*a``) are refused (:class:`YamlAliasError`): no config needs them, and an alias
can make a few bytes stand for gigabytes once the value is copied (the "billion laughs") or for a value that
contains itself (``&x [*x]``). :func:`yaml_error_line` puts a parser error on one line for messages.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.nodes import Node

__all__ = ["YamlAliasError", "YamlLoader", "load_yaml", "yaml_error_line"]

# YAML 1.2 core schema floats (plus 1.1's ".inf"/".nan" spellings, which the safe loader already reads).
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class YamlAliasError(ComposerError):
    """The text uses a YAML anchor (``&name``) or alias (``*name``), which :func:`load_yaml` refuses."""


class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose implicit float resolver follows YAML 1.2 (exponents without a dot), and which
    refuses anchors and aliases (:class:`YamlAliasError`)."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise YamlAliasError(
                None,
                None,
                f"YAML anchors and aliases are not allowed (found {sign}{event.anchor})",
                event.start_mark,
            )
        return super().compose_node(parent, index)


YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """Parse ``text`` safely (no object construction, no anchors or aliases) with YAML 1.2 floats."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 - YamlLoader is a SafeLoader


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """``exc`` on one line: ``line L, column C: <problem> (<context>)``, without the quoted source lines."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    problem = (exc.problem or "").replace("'\\x00'", "the end of the text")
    text = " ".join(problem.split()) or "invalid YAML"
    if exc.context:
        text += f" ({' '.join(exc.context.split())})"
    mark = exc.problem_mark or exc.context_mark
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}" if mark is not None else text
