"""Small name → component registries (PyKEEN/class-resolver style).

``METHODS`` maps a method name from config (``method: fednsl``) to a :class:`MethodSpec`: the builder
``build(config: RunConfig) -> Federation``, its headline and its ``rule_documents`` hook. Method modules register
their builders on import (:func:`register_method`, whose arguments declare the headline and the hook next to the
builder). Which module provides which method is declared once, statically, as Python entry points of the group
``fednsl.methods`` in ``pyproject.toml`` (``[project.entry-points."fednsl.methods"]``, ``name = "module:builder"``).

Why entry points, not a table of module strings here: the declaration is standard package metadata that tools
read without importing anything (``importlib.metadata``, pip, plugin scanners), each value names the builder
itself (``module:function``, checked against what the module registers by ``tests/fednsl/test_registry.py``),
this module imports no method (methods import it: :func:`register_method`), and another installed package can
add a method by declaring an entry point of the same group. ``METHODS.get(name)`` imports only the module of
that one entry point, on first use; nothing heavy loads for ``fednsl --help``, and the installed metadata is
read once, on the first lookup of a method name. :func:`load_methods` imports all of them (and any other
subpackage of :mod:`fednsl.methods`). After editing the entry points, reinstall (``make venv`` does when
``pyproject.toml`` changes; by hand: ``pip install --no-deps -e .``).

Each method declares its *headline*: the summary metric(s) that ``fednsl train`` ends with and what each is
compared with (:class:`Headline`, :func:`headline_of`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Any, Callable, Generic, Mapping, TypeVar

T = TypeVar("T")

#: the entry-point group that declares the methods: ``name = "module:builder"``
METHOD_ENTRY_POINTS = "fednsl.methods"


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class Registry(Generic[T]):
    """A named collection of components with a clear error for unknown names.

    ``lazy`` (called once, on the first lookup) maps further names to ``"module"`` or ``"module:attr"``: the
    module registers the name when imported (resolved by :meth:`get`).
    """

    def __init__(self, what: str, lazy: Callable[[], Mapping[str, str]] | None = None):
        self.what = what
        self._items: dict[str, T] = {}
        self._docs: dict[str, str] = {}
        self._lazy_source = lazy
        self._lazy_names: dict[str, str] | None = None

    @property
    def _lazy(self) -> dict[str, str]:
        if self._lazy_names is None:
            source = self._lazy_source() if self._lazy_source is not None else {}
            self._lazy_names = {normalize(k): v for k, v in source.items()}
        return self._lazy_names

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
        if key not in self._items and key in self._lazy:
            module = self._lazy[key].partition(":")[0]
            importlib.import_module(module)
            if key not in self._items:
                raise RuntimeError(f"{module} was imported but registers no {self.what} {key!r}")
        if key not in self._items:
            raise KeyError(f"unknown {self.what} {name!r}; known: {', '.join(self.names()) or '(none)'}")
        return self._items[key]

    def names(self) -> list[str]:
        """Registered and lazily registered names, sorted."""
        return sorted(set(self._items) | set(self._lazy))

    def loaded(self) -> list[str]:
        """The names registered so far (imported), sorted."""
        return sorted(self._items)

    def module_of(self, name: str) -> str | None:
        """The module that registers ``name`` on import (None: registered directly or unknown)."""
        target = self._lazy.get(normalize(name))
        return target.partition(":")[0] if target is not None else None

    def doc(self, name: str) -> str:
        return self._docs.get(normalize(name), "")

    def __contains__(self, name: str) -> bool:
        return normalize(name) in self._items or normalize(name) in self._lazy


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


@dataclass(frozen=True)
class Headline:
    """One number ``fednsl train`` ends with: a metric of the run's summary.json and what it is compared with.

    ``metric`` / ``reference``: ``"stage/name"`` (``summary["final"][stage][name]``, the server's last-round
    metrics), a top-level summary key, or ``"config:dotted.key"`` (the run's resolved config; with
    ``reference_default`` when the config leaves it out). ``reference_label`` names the reference in the line
    (e.g. "backbone"); ``complement``: the reference shown is 1 − the value read (target coverage 1 − α).
    """

    label: str
    metric: str
    reference: str | None = None
    reference_label: str = ""
    reference_default: float | None = None
    complement: bool = False


@dataclass
class MethodSpec:
    """A registered method: its builder, one line of doc, its headline metric(s), and for rule learners that
    leave confidence counts to the pipeline, ``rule_documents``: ``function(config, federation | None) ->
    {client id: documents}`` (:mod:`fednsl.rule_counts`)."""

    name: str
    build: Callable[..., Any]
    doc: str
    headline: tuple[Headline, ...] = ()
    rule_documents: Callable[..., Any] | None = None


@cache
def method_entry_points() -> dict[str, str]:
    """Method name → ``"module:builder"``, as declared by the installed packages (entry-point group
    :data:`METHOD_ENTRY_POINTS`); read once per process."""
    from importlib.metadata import entry_points

    return {normalize(ep.name): ep.value for ep in entry_points(group=METHOD_ENTRY_POINTS)}


METHODS: Registry[MethodSpec] = Registry("method", method_entry_points)


def register_method(
    name: str,
    doc: str = "",
    *,
    headline: Sequence[Headline] = (),
    rule_documents: Callable[..., Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a method builder ``build(config: RunConfig) -> Federation``.

    ``headline``: what ``fednsl train`` ends with (:class:`Headline`); ``rule_documents``: the method's hook for
    the rule confidence counts (:class:`MethodSpec`). Declare the name as an entry point too (module docstring).
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = MethodSpec(
            name=name,
            build=fn,
            doc=doc or (fn.__doc__ or "").strip().split("\n")[0],
            headline=tuple(headline),
            rule_documents=rule_documents,
        )
        METHODS.register(name)(spec)
        return fn

    return deco


_LOADED = False


def load_methods() -> Registry[MethodSpec]:
    """Import the module of every method entry point and every subpackage of :mod:`fednsl.methods`, so that
    all builders (also of methods without an entry point) are registered."""
    global _LOADED
    if not _LOADED:
        import fednsl.methods as pkg

        for target in method_entry_points().values():
            importlib.import_module(target.partition(":")[0])
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"fednsl.methods.{info.name}")
        _LOADED = True
    return METHODS


def _spec(method: str) -> MethodSpec | None:
    try:
        return METHODS.get(method)
    except KeyError:
        return None


def rule_documents_hook(method: str) -> Callable[..., Any] | None:
    """The ``rule_documents`` function ``method`` registers (its module imported now), or None."""
    spec = _spec(method)
    return spec.rule_documents if spec is not None else None


def headline_of(method: str) -> tuple[Headline, ...]:
    """The declared headline of ``method`` (its module imported now; empty for an unknown method)."""
    spec = _spec(method)
    return spec.headline if spec is not None else ()


#: every engine ``--engine NAME`` accepts: name → (what it is, the pip extra it needs or ""). The engine classes
#: are registered in :data:`fednsl.pipeline.ENGINES` (Flower's on first use); a test keeps both lists equal.
ENGINE_TABLE: dict[str, tuple[str, str]] = {
    "inprocess": ("clients as objects of this process, run in threads (default)", ""),
    "decentralised": ("peer to peer: every client also aggregates (no server)", ""),
    "flower-sim": ("Flower's simulation runtime (Ray), one virtual SuperNode per client", "flower"),
    "flower": ("a local Flower SuperLink with one SuperNode per client on 127.0.0.1", "flower"),
}


def engine_notes() -> dict[str, str]:
    """Engine name → one line for ``fednsl methods`` (saying when its extra is not installed)."""
    import importlib.util

    out = {}
    for name, (what, extra) in ENGINE_TABLE.items():
        missing = extra == "flower" and importlib.util.find_spec("flwr") is None
        out[name] = what + (f" (needs: pip install 'fednsl[{extra}]')" if missing else "")
    return out
