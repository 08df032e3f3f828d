"""Small name → component registries (PyKEEN/class-resolver style).

``METHODS`` maps a method name from config (``method: fednsl``) to a builder
``build(config: RunConfig) -> Federation``. Method modules register their builders on import
(:func:`register_method`); :data:`METHOD_TABLE` names the module of every shipped method, so that
``METHODS.get(name)`` imports only that one module, on first use (nothing heavy loads for ``fednsl --help``).
:func:`load_methods` imports all of them (and any other subpackage of :mod:`fednsl.methods`).

Each entry of :data:`METHOD_TABLE` also declares the method's *headline*: the summary metric(s) that
``fednsl train`` ends with and what each is compared with (:class:`Headline`).
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
    """A named collection of components with a clear error for unknown names.

    ``lazy`` maps further names to the module that registers them when imported (resolved by :meth:`get`).
    """

    def __init__(self, what: str, lazy: Mapping[str, str] | None = None):
        self.what = what
        self._items: dict[str, T] = {}
        self._docs: dict[str, str] = {}
        self._lazy = {normalize(k): v for k, v in (lazy or {}).items()}

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
            importlib.import_module(self._lazy[key])
            if key not in self._items:
                raise RuntimeError(f"{self._lazy[key]} was imported but registers no {self.what} {key!r}")
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
        return self._lazy.get(normalize(name))

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


@dataclass
class MethodSpec:
    name: str
    build: Callable[..., Any]
    doc: str


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


@dataclass(frozen=True)
class MethodEntry:
    """A shipped method: the module that registers it, its headline metric(s), and for rule learners that
    leave confidence counts to the pipeline, ``rule_documents``: ``"module:function"`` with
    ``function(config, federation | None) -> {client id: documents}`` (:mod:`fednsl.rule_counts`)."""

    module: str
    headline: tuple[Headline, ...]
    rule_documents: str | None = None


_NUMERIC = (  # FedNSL §4.1.1 numerical experiment: the two numbers its bench compares (bench/numeric.py)
    Headline("train acc (given labels)", "evaluate/train_acc_given"),
    Headline("unseen acc", "evaluate/unseen_acc_h0"),
)
_FORECAST = (  # forecasters: test MSE against the naive seasonal forecast, and STL property satisfaction
    Headline("test MSE", "evaluate/mse", "evaluate/naive_mean_mse", "naive forecast"),
    Headline("property satisfaction ρ%", "evaluate/rho", "evaluate/naive_mean_rho", "naive"),
)
_CONFORMAL = (  # federated conformal prediction: joint coverage against the target 1 − α, then the MSE
    Headline("coverage", "evaluate/cov_joint", "config:method_kwargs.alpha", "target", 0.1, complement=True),
    *_FORECAST[:1],
)

#: every shipped method: name → module + headline. ``tests/fednsl/test_registry.py`` checks that each module
#: registers its names, that every registered method is listed, and that each headline key is written.
METHOD_TABLE: dict[str, MethodEntry] = {
    "fednsl": MethodEntry(
        "fednsl.methods.fednsl",
        (
            Headline("seen F1", "evaluate/seen_f1", "evaluate/backbone_seen_f1", "backbone"),
            Headline("unseen F1", "evaluate/unseen_f1", "evaluate/backbone_unseen_f1", "backbone"),
        ),
        rule_documents="fednsl.methods.fednsl.rule_documents:rule_documents",
    ),
    "fednsl-kg": MethodEntry(
        "fednsl.methods.fednsl_kg",
        (Headline("test MRR", "test_mrr"), Headline("Hits@10", "test_hits@10")),
    ),
    "fedavg": MethodEntry("fednsl.methods.fedavg", (Headline("accuracy", "evaluate/accuracy"),)),
    "fednsl-gmm": MethodEntry("fednsl.methods.fednsl_gmm", _NUMERIC),
    "fedavg-numeric": MethodEntry("fednsl.methods.fedavg.numeric", _NUMERIC),
    "pfedme": MethodEntry("fednsl.methods.pfedme", _NUMERIC),
    "perfedavg": MethodEntry("fednsl.methods.perfedavg", _NUMERIC),
    "pfedbayes": MethodEntry("fednsl.methods.pfedbayes", _NUMERIC),
    "lrxfl": MethodEntry("fednsl.methods.lrxfl", _NUMERIC),
    "kifl": MethodEntry(
        "fednsl.methods.kifl",
        (Headline("accuracy", "evaluate/accuracy"), Headline("rule violations (POV)", "evaluate/pov")),
    ),
    "fedstl": MethodEntry("fednsl.methods.fedstl", _FORECAST),
    "logicp": MethodEntry("fednsl.methods.logicp", _CONFORMAL),
    "cp-ifca": MethodEntry("fednsl.methods.logicp.baselines", _CONFORMAL),
    "ts-fedbayes": MethodEntry("fednsl.methods.logicp.baselines", _FORECAST),
    **{
        name: MethodEntry("fednsl.methods.ts_baselines", _FORECAST)
        for name in ("ts-fedavg", "ts-fedprox", "ts-fedrep", "ts-ditto", "ts-ifca")
    },
}

METHODS: Registry[MethodSpec] = Registry("method", {name: e.module for name, e in METHOD_TABLE.items()})


def register_method(name: str, doc: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a method builder ``build(config: RunConfig) -> Federation``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        METHODS.register(name)(MethodSpec(name=name, build=fn, doc=doc or (fn.__doc__ or "").strip().split("\n")[0]))
        return fn

    return deco


_LOADED = False


def load_methods() -> Registry[MethodSpec]:
    """Import every method module of :data:`METHOD_TABLE` and every subpackage of :mod:`fednsl.methods`, so
    that all builders (also of methods missing from the table) are registered."""
    global _LOADED
    if not _LOADED:
        import fednsl.methods as pkg

        for entry in METHOD_TABLE.values():
            importlib.import_module(entry.module)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"fednsl.methods.{info.name}")
        _LOADED = True
    return METHODS


def rule_documents_hook(method: str) -> Callable[..., Any] | None:
    """The ``rule_documents`` function a method declares (imported now), or None."""
    entry = METHOD_TABLE.get(normalize(method))
    if entry is None or entry.rule_documents is None:
        return None
    module, _, attr = entry.rule_documents.partition(":")
    return getattr(importlib.import_module(module), attr)


def headline_of(method: str) -> tuple[Headline, ...]:
    """The declared headline of ``method`` (empty for a method not in :data:`METHOD_TABLE`)."""
    entry = METHOD_TABLE.get(normalize(method))
    return entry.headline if entry is not None else ()


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
