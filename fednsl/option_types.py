"""Type checks of option dataclasses (``method_kwargs``, ``data``, ...) against their field annotations.

YAML and ``--set`` give strings, numbers, lists and mappings; a value of the wrong kind (``num_clients=abc``,
``local_epochs=2.5``) would otherwise reach arithmetic deep inside a method and end in a TypeError traceback.
:func:`check_option_types` raises one ValueError naming the option and the expected type instead. Only the
plain annotation forms are checked (int, float, str, bool, None, X | Y, list/tuple/Sequence, dict/Mapping,
nested option dataclasses); anything else (Any, Literal, callables) is left to the class.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}


def _accepts(tp: Any, value: Any) -> bool | None:
    """True/False when ``tp`` is a checkable annotation, None when it is not (then the value is not judged)."""
    if tp is Any:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_accepts(a, value) for a in typing.get_args(tp)]
        return None if any(v is None for v in verdicts) else any(verdicts)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp is type(None):
        return value is None
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin in (dict, Mapping) or tp is dict:
        return isinstance(value, Mapping)
    if isinstance(tp, type) and is_dataclass(tp):
        return isinstance(value, (Mapping, tp))
    return None


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp in _WORDS:
        return _WORDS[tp]
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        return "a list"
    if origin in (dict, Mapping) or tp is dict or (isinstance(tp, type) and is_dataclass(tp)):
        return "a mapping"
    return str(tp)


def check_option_types(cls: type, kwargs: Mapping[str, Any], where: str) -> None:
    """Raise ValueError ``"<where>: <name> must be <type>, got <value>"`` for the first ill-typed option."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: leave the checks to the class itself
        return
    for f in fields(cls):
        if f.name not in kwargs or f.name not in hints:
            continue
        value = kwargs[f.name]
        if _accepts(hints[f.name], value) is False:
            raise ValueError(
                f"{where}: {f.name} must be {_describe(hints[f.name])}, got {value!r} ({type(value).__name__})"
            )
