"""Small name → component registries (PyKEEN/class-resolver style).

``METHODS`` maps a method name from config (``method: fednsl``) to a builder
``build(config: RunConfig) -> Federation``. Method subpackages register themselves on import;
:func:`load_methods` imports every subpackage of :mod:`fednsl.methods`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Generic, Mapping, TypeVar

T = TypeVar("T")


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class Registry(Generic[T]):
    """A named collection of components with a clear error for unknown names."""

    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, T] = {}
        self._docs: dict[str, str] = {}

    def register(self, name: str, doc: str = "") -> Callable[[T], T]:
        def deco(obj: T) -> T:
            key = normalize(name)
            if key in self._items and self._items[key] is not obj:
                raise ValueError(f"{self.what} {name!r} registered twice")
            self._items[key] = obj
            self._docs[key] = doc
            return obj

        return deco

    def get(self, name: str) -> T:
        key = normalize(name)
        if key not in self._items:
            raise KeyError(f"unknown {self.what} {name!r}; known: {', '.join(sorted(self._items)) or '(none)'}")
        return self._items[key]

    def names(self) -> list[str]:
        return sorted(self._items)

    def doc(self, name: str) -> str:
        return self._docs.get(normalize(name), "")

    def __contains__(self, name: str) -> bool:
        return normalize(name) in self._items


def build_kwargs(cls: type[T], kwargs: Mapping[str, Any] | None, where: str) -> T:
    """Instantiate a kwargs dataclass, rejecting unknown keys with the list of valid ones."""
    kwargs = dict(kwargs or {})
    if not is_dataclass(cls):
        return cls(**kwargs)
    valid = {f.name for f in fields(cls)}
    unknown = sorted(set(kwargs) - valid)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {unknown}; valid: {sorted(valid)}")
    from fednsl.option_types import check_option_types

    check_option_types(cls, kwargs, where)
    return cls(**kwargs)


@dataclass
class MethodSpec:
    name: str
    build: Callable[..., Any]
    doc: str


METHODS: Registry[MethodSpec] = Registry("method")


def register_method(name: str, doc: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a method builder ``build(config: RunConfig) -> Federation``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        METHODS.register(name)(MethodSpec(name=name, build=fn, doc=doc or (fn.__doc__ or "").strip().split("\n")[0]))
        return fn

    return deco


_LOADED = False


def load_methods() -> Registry[MethodSpec]:
    """Import every method subpackage so its builders register."""
    global _LOADED
    if not _LOADED:
        import fednsl.methods as pkg

        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"fednsl.methods.{info.name}")
        _LOADED = True
    return METHODS
