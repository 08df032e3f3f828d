"""Knowledge models (KMs) of a KIFL client (Fan et al. 2022, Def. 4.2) and how users declare them.

Two interfaces, both evaluated on a client's raw feature rows ``x`` of shape (n, d):

* :class:`PredictionKM` (P-KM g_p): ``predict(x) -> int64 (n,)`` class ids in [0, k), ``-1`` = abstain (an
  extension of the paper: the combination then uses λ = 0 on that row).
* :class:`RangeKM` (R-KM g_r): ``allowed(x) -> bool (n, k)``, the admissible classes (MultiHot(k)).

Both see the features through an :class:`InputView` (the paper's App. B operators: a mask Φ_Ω keeping some
columns, eq. 8, after an optional p×p max-pool of an image, eq. 9).

User-facing declaration (``method_kwargs.knowledge`` in a config, per client id or ``all``)::

    prediction: {callable: "mypkg.kms:coke_grade", kwargs: {c: 55.0}, features: [2, 4, 5]}
    range:      {rules: "kms/company1.rules"}                 # rules.knowledge file ('range ... <- ...')
    prediction: {rules: "kms/company1.rules"}                 # the same file's 'class ... <- ...' rules
    prediction: {fit: logreg, feature_fraction: 0.3}          # fitted on the client's knowledge slice
    range:      {fit: tree_rules, max_depth: 4}               # see fednsl.methods.kifl.fitted
    range: null                                               # no R-KM: every class admissible

A callable gets the viewed rows (float64) plus its ``kwargs`` and returns class ids (n,), scores/one-hot (n, k)
(argmax; an all-zero row abstains) for a P-KM, or a (n, k) 0/1 or bool mask for an R-KM. Outputs of the wrong
shape or dtype, ids outside [0, k) and rows that admit no class raise :class:`KnowledgeModelError` naming the
client. KMs never leave the client: only θ does (Alg. 1).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rules.knowledge import KnowledgeRules, read_knowledge

__all__ = [
    "CallablePredictionKM",
    "CallableRangeKM",
    "EstimatorPredictionKM",
    "FullRangeKM",
    "InputView",
    "KnowledgeModelError",
    "LookupRangeKM",
    "PredictionKM",
    "RangeKM",
    "RulesPredictionKM",
    "RulesRangeKM",
    "check_allowed",
    "check_prediction",
    "import_callable",
    "km_from_spec",
]


class KnowledgeModelError(ValueError):
    """A knowledge model produced something unusable; the message names the client and the KM."""

    def __init__(self, client: str, km: str, reason: str):
        self.client, self.km, self.reason = client, km, reason
        super().__init__(f"client {client!r}: {km}: {reason}")


# --- input operators (App. B) ----------------------------------------------------------------------


@dataclass(frozen=True)
class InputView:
    """Φ: optional p×p max-pool of an image (eq. 9), then a column mask Ω (eq. 8). Identity by default."""

    features: tuple[int, ...] | None = None
    pool: int = 1
    image_shape: tuple[int, ...] | None = None  # (H, W) or (C, H, W) of a flattened image row

    def __post_init__(self) -> None:
        if self.pool < 1:
            raise ValueError(f"pool must be >= 1, got {self.pool}")
        if self.pool > 1 and self.image_shape is None:
            raise ValueError("a max-pool view needs image data (the data set has no image shape)")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"knowledge models take (n, d) rows, got shape {x.shape}")
        if self.pool > 1:
            assert self.image_shape is not None
            shape = self.image_shape if len(self.image_shape) == 3 else (1, *self.image_shape)
            c, h, w = shape
            p = self.pool
            if h % p or w % p:
                raise ValueError(f"image {h}x{w} is not divisible by the pool size {p}")
            x = x.reshape(len(x), c, h // p, p, w // p, p).max(axis=(3, 5)).reshape(len(x), -1)
        if self.features is not None:
            if self.features and max(self.features) >= x.shape[1]:
                raise ValueError(f"feature mask uses column {max(self.features)} but the view has {x.shape[1]}")
            x = x[:, list(self.features)]
        return x

    def out_shape(self) -> tuple[int, ...] | None:
        """Image shape after pooling (None for tabular data)."""
        if self.image_shape is None:
            return None
        shape = self.image_shape if len(self.image_shape) == 3 else (1, *self.image_shape)
        return (shape[0], shape[1] // self.pool, shape[2] // self.pool)


# --- interfaces ------------------------------------------------------------------------------------


class PredictionKM(ABC):
    """P-KM g_p: X → OneHot(k), given as class ids (-1 = abstain)."""

    name: str = "prediction KM"

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        """(n,) int64 class ids in [0, k) or -1."""


class RangeKM(ABC):
    """R-KM g_r: X → MultiHot(k), given as a bool mask."""

    name: str = "range KM"

    @abstractmethod
    def allowed(self, x: np.ndarray) -> np.ndarray:
        """(n, k) bool admissible classes."""


def check_prediction(client: str, km: str, out: Any, n: int, k: int) -> np.ndarray:
    """Validate and normalise a P-KM output to int64 (n,) with -1 for abstentions."""
    arr = np.asarray(out)
    if arr.ndim == 2 and arr.shape == (n, k):
        if not np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_:
            raise KnowledgeModelError(client, km, f"scores must be numeric, got dtype {arr.dtype}")
        scores = arr.astype(np.float64)
        if not np.all(np.isfinite(scores)):
            raise KnowledgeModelError(client, km, "scores contain NaN or inf")
        pred = scores.argmax(axis=1).astype(np.int64)
        pred[~scores.any(axis=1)] = -1
        return pred
    if arr.ndim != 1 or arr.shape[0] != n:
        raise KnowledgeModelError(
            client,
            km,
            f"output has shape {arr.shape}; expected class ids ({n},) or "
            f"scores ({n}, {k}) for {n} rows and k={k} classes",
        )
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise KnowledgeModelError(client, km, f"class ids must be integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise KnowledgeModelError(client, km, "class ids must be whole numbers")
    pred = arr.astype(np.int64)
    bad = (pred < -1) | (pred >= k)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise KnowledgeModelError(client, km, f"class id {int(pred[i])} at row {i} outside [0, {k}) (-1 means abstain)")
    return pred


def check_allowed(client: str, km: str, out: Any, n: int, k: int) -> np.ndarray:
    """Validate an R-KM output: (n, k) bool or 0/1; every row must admit at least one class."""
    arr = np.asarray(out)
    if arr.shape != (n, k):
        raise KnowledgeModelError(
            client, km, f"output has shape {arr.shape}; expected ({n}, {k}) (a MultiHot row per input, k={k} classes)"
        )
    if arr.dtype != np.bool_:
        if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isin(arr, (0, 1))):
            raise KnowledgeModelError(
                client,
                km,
                f"output must be bool or 0/1 (MultiHot), got dtype {arr.dtype}"
                + ("" if not np.issubdtype(arr.dtype, np.number) else " with values other than 0 and 1"),
            )
        arr = arr.astype(bool)
    empty = ~arr.any(axis=1)
    if np.any(empty):
        i = int(np.argmax(empty))
        raise KnowledgeModelError(
            client,
            km,
            f"range excludes every class on {int(empty.sum())} of {n} rows "
            f"(first: row {i}); an R-KM must admit at least one class",
        )
    return arr


# --- adapters --------------------------------------------------------------------------------------


class CallablePredictionKM(PredictionKM):
    """A Python function of the viewed rows: ids (n,) or scores (n, k)."""

    def __init__(self, fn: Callable[..., Any], num_classes: int, view: InputView = InputView(), name: str = ""):
        self.fn, self.k, self.view = fn, num_classes, view
        self.name = name or f"prediction KM {getattr(fn, '__name__', type(fn).__name__)}"

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.fn(self.view(x)))  # validated (and named) by the client: check_prediction


class CallableRangeKM(RangeKM):
    """A Python function of the viewed rows returning a (n, k) bool / 0-1 mask."""

    def __init__(self, fn: Callable[..., Any], num_classes: int, view: InputView = InputView(), name: str = ""):
        self.fn, self.k, self.view = fn, num_classes, view
        self.name = name or f"range KM {getattr(fn, '__name__', type(fn).__name__)}"

    def allowed(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.fn(self.view(x)))  # validated (and named) by the client: check_allowed


class RulesPredictionKM(PredictionKM):
    """The ``class C <- body`` / ``default C`` lines of a :mod:`rules.knowledge` file."""

    def __init__(self, rules: KnowledgeRules, view: InputView = InputView()):
        self.rules, self.view = rules, view
        self.name = f"prediction rules {rules.source}"
        if not rules.score_rules and rules.default is None:
            raise ValueError(
                f"{rules.source}: no 'class ... <- ...' rule and no 'default' line: not a prediction knowledge model"
            )

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.rules.predict(self.view(x))


class RulesRangeKM(RangeKM):
    """The ``range {S} <- body`` lines of a :mod:`rules.knowledge` file."""

    def __init__(self, rules: KnowledgeRules, view: InputView = InputView()):
        self.rules, self.view = rules, view
        self.name = f"range rules {rules.source}"
        if not rules.range_rules:
            raise ValueError(f"{rules.source}: no 'range {{...}} <- ...' rule: not a range knowledge model")

    def allowed(self, x: np.ndarray) -> np.ndarray:
        return self.rules.allowed(self.view(x))


class EstimatorPredictionKM(PredictionKM):
    """A fitted estimator with ``predict`` (scikit-learn style) on the viewed rows, returning class ids."""

    def __init__(self, estimator: Any, view: InputView = InputView(), name: str = "estimator P-KM"):
        self.estimator, self.view, self.name = estimator, view, name

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.estimator.predict(self.view(x))).astype(np.int64)


class FullRangeKM(RangeKM):
    """No range knowledge: every class is admissible."""

    name = "no range KM (all classes)"

    def __init__(self, num_classes: int):
        self.k = num_classes

    def allowed(self, x: np.ndarray) -> np.ndarray:
        return np.ones((len(x), self.k), dtype=bool)


class LookupRangeKM(RangeKM):
    """The paper's §7 R-KM: a hash map from a feature row (its bytes) to an admissible set; unknown rows → all."""

    name = "lookup range KM"

    def __init__(self, x: np.ndarray, sets: np.ndarray):
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        sets = np.asarray(sets, dtype=bool)
        self.k = sets.shape[1]
        self.table = {row.tobytes(): s for row, s in zip(x, sets)}

    def allowed(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        full = np.ones(self.k, dtype=bool)
        return np.stack([self.table.get(row.tobytes(), full) for row in x]) if len(x) else np.ones((0, self.k), bool)


# --- declaration from config -----------------------------------------------------------------------


def import_callable(path: str, where: str) -> Callable[..., Any]:
    """``"package.module:function"`` (or ``package.module.function``) → the function."""
    if ":" in path:
        mod_name, _, attr = path.partition(":")
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ValueError(f"{where}: callable {path!r} must be 'module:function'")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"{where}: cannot import module {mod_name!r} for callable {path!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{where}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{where}: {path!r} is not callable")
    return obj


_VIEW_KEYS = {"features", "pool"}
_SOURCE_KEYS = {"callable", "rules", "fit"}


def make_view(spec: Mapping[str, Any], image_shape: tuple[int, ...] | None, where: str) -> InputView:
    feats = spec.get("features")
    if feats is not None:
        if not isinstance(feats, (list, tuple)) or not all(isinstance(f, int) and f >= 0 for f in feats):
            raise ValueError(f"{where}.features must be a list of column indices (>= 0), got {feats!r}")
        feats = tuple(int(f) for f in feats)
    try:
        return InputView(feats, int(spec.get("pool", 1)), image_shape)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def km_from_spec(
    spec: Mapping[str, Any] | None,
    kind: str,
    num_classes: int,
    *,
    where: str,
    image_shape: tuple[int, ...] | None = None,
    feature_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    base_dir: Path | None = None,
    fit: Callable[[str, Mapping[str, Any], InputView], PredictionKM | RangeKM] | None = None,
) -> PredictionKM | RangeKM | None:
    """Build one KM from its config mapping; ``kind`` is "prediction" or "range". ``None`` → no KM.

    ``fit(name, options, view)`` builds the data-fitted KMs (``fit: ...``); it is supplied by the client
    builder, which owns the client's knowledge slice.
    """
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where} must be a mapping with one of {sorted(_SOURCE_KEYS)}, got {spec!r}")
    sources = sorted(_SOURCE_KEYS & set(spec))
    if len(sources) != 1:
        raise ValueError(f"{where}: give exactly one of {sorted(_SOURCE_KEYS)}, got {sources or 'none'}")
    source = sources[0]
    view = make_view(spec, image_shape, where)
    if source == "callable":
        unknown = sorted(set(spec) - {"callable", "kwargs"} - _VIEW_KEYS)
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {unknown} for a callable KM; valid: callable, kwargs, features, pool"
            )
        fn = import_callable(str(spec["callable"]), where)
        kwargs = spec.get("kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise ValueError(f"{where}.kwargs must be a mapping")
        bound = partial(fn, **kwargs) if kwargs else fn
        name = f"{kind} KM {spec['callable']}"
        cls = CallablePredictionKM if kind == "prediction" else CallableRangeKM
        return cls(bound, num_classes, view, name=name)
    if source == "rules":
        unknown = sorted(set(spec) - {"rules"} - _VIEW_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown} for a rule-file KM; valid: rules, features, pool")
        path = Path(str(spec["rules"]))
        if not path.is_absolute() and base_dir is not None and not path.exists():
            path = base_dir / path
        names = None if view.features is not None or view.pool > 1 else feature_names
        rules = read_knowledge(path, num_classes, feature_names=names, class_names=class_names)
        return RulesPredictionKM(rules, view) if kind == "prediction" else RulesRangeKM(rules, view)
    if fit is None:
        raise ValueError(f"{where}: 'fit' KMs need the client's knowledge slice (no fitter given)")
    options = {k: v for k, v in spec.items() if k not in ("fit", *_VIEW_KEYS)}
    return fit(str(spec["fit"]), options, view)
