"""Messages between server and clients: named arrays, typed config scalars and metrics.

The three record kinds mirror Flower's ``RecordDict`` (``ArrayRecord``, ``ConfigRecord``,
``MetricRecord``) so the Flower engine is a 1:1 translation. A message declares its schema
(:class:`Schema`); the receiving side calls :func:`validate`, which rejects a bad message with an
:class:`InvalidMessageError` naming the sender and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping, NoReturn, Sequence, Union

import numpy as np

ConfigValue = Union[int, float, str, bool, bytes, list, None]
MetricValue = Union[int, float]
ArrayKind = Literal["weights", "distribution", "quantiles", "ids", "counts", "scores", "mask"]
DtypeKind = Literal["float", "int", "bool"]

SERVER = "server"
COUNT_METRICS = ("num_examples",)


@dataclass
class Message:
    """One message of the round protocol.

    ``kind`` names the exchange ("train", "evaluate", or a method-specific one such as
    "train.stats"); ``round`` tags it so replies of another round are never mixed in.
    """

    kind: str
    round: int
    sender: str = SERVER
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    config: dict[str, ConfigValue] = field(default_factory=dict)
    metrics: dict[str, MetricValue] = field(default_factory=dict)

    def reply(
        self,
        sender: str,
        arrays: Mapping[str, np.ndarray] | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
        config: Mapping[str, ConfigValue] | None = None,
    ) -> "Message":
        """A reply of the same kind and round (the round tag is what keeps rounds apart)."""
        return Message(
            kind=self.kind,
            round=self.round,
            sender=sender,
            arrays={k: np.asarray(v) for k, v in (arrays or {}).items()},
            config=dict(config or {}),
            metrics={k: _as_metric(k, v) for k, v in (metrics or {}).items()},
        )

    def config_int(self, key: str) -> int:
        """``config[key]`` as an ``int``; anything else (a bool, a float, a string) is a ``TypeError`` naming it."""
        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{self.kind} message config {key!r} must be an int, got {value!r}")
        return int(value)

    def config_float(self, key: str, default: float | None = None) -> float:
        """``config[key]`` (or ``default`` when absent) as a ``float``; a non-number is a ``TypeError`` naming it."""
        value = self.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{self.kind} message config {key!r} must be a number, got {value!r}")
        return float(value)

    def config_str(self, key: str) -> str | None:
        """``config[key]`` as a ``str``, ``None`` when absent; anything else is a ``TypeError`` naming it."""
        value = self.config.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{self.kind} message config {key!r} must be a string, got {value!r}")
        return value

    def nbytes(self) -> int:
        """Payload size in bytes (arrays only), for communication accounting."""
        return int(sum(np.asarray(a).nbytes for a in self.arrays.values()))


def _as_metric(name: str, value: object) -> MetricValue:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if hasattr(value, "item"):
        return _as_metric(name, value.item())  # 0-d tensors / arrays
    raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}")


class InvalidMessageError(ValueError):
    """A message failed validation; names who sent it and which field is wrong."""

    def __init__(self, sender: str, field_name: str, reason: str, kind: str = "", rnd: int | None = None):
        self.sender, self.field, self.reason = sender, field_name, reason
        where = f" ({kind}, round {rnd})" if kind else ""
        super().__init__(f"invalid message from {sender}{where}: field {field_name!r}: {reason}")


@dataclass(frozen=True)
class ArraySpec:
    """Declaration of one array field.

    ``shape`` entries are ints (fixed), strings (symbolic sizes that must agree across the
    fields of one message, e.g. "T" triples, and with the request the message answers when the
    request schema names the same symbol) or None (any). ``kind="distribution"`` adds
    non-negativity and normalisation to 1 along ``axis``; with ``mask`` naming a boolean field
    of the same shape, masked-out entries must be 0 and rows with no valid entry may sum to 0.
    ``kind="ids"`` and ``"counts"`` arrays must be non-negative; ``high`` bounds ids from above
    (exclusive). ``like`` ties the shape to an array of the request (a model's weights).
    """

    name: str
    kind: ArrayKind
    dtype: DtypeKind = "float"
    shape: tuple[int | str | None, ...] | None = None
    axis: int = -1
    mask: str | None = None
    required: bool = True
    atol: float = 1e-4
    like: str | None = None  # must have exactly the shape of the request's array of this name
    high: int | str | None = None  # ids: every value < high (an int, or a symbolic size bound by the request)


@dataclass(frozen=True)
class Schema:
    """What a message of one kind may carry. Anything undeclared is rejected.

    What a schema can prevent: undeclared fields, wrong dtypes, shapes that disagree with the request,
    non-finite values, ids out of range, negative or too large counts, distributions that do not sum to 1.
    What it cannot: a client encoding information in the *values* of declared fields (a covert channel
    within the bounds), or a finite but poisoned model update; these need secure aggregation or robust
    aggregation (FedAvg-style servers offer ``federation.aggregation`` and ``federation.clip_norm``,
    :mod:`fednsl.federation.aggregate`).
    """

    arrays: tuple[ArraySpec, ...] = ()
    metrics: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    any_metrics: bool = False  # accept any metric name (e.g. per-class evaluation metrics)
    any_config: bool = False  # accept any config entry (server requests carrying a method's options)
    required_metrics: tuple[str, ...] = ()  # metrics that must be present (the aggregation reads them)
    counts: tuple[str, ...] = COUNT_METRICS  # metrics that are counts: integers >= 0 (bounded by limits)

    def array_names(self) -> set[str]:
        return {a.name for a in self.arrays}


_DTYPE_CHECK = {
    "float": lambda d: np.issubdtype(d, np.floating),
    "int": lambda d: np.issubdtype(d, np.integer),
    "bool": lambda d: d == np.bool_,
}


def bind_request(request: Message, schema: Schema) -> dict[str, int]:
    """The symbolic sizes the request's arrays give the symbols of ``schema`` (e.g. {"T": 12, "J": 40})."""
    sizes: dict[str, int] = {}
    for spec in schema.arrays:
        arr = request.arrays.get(spec.name)
        if arr is None or spec.shape is None or np.ndim(arr) != len(spec.shape):
            continue
        for want, got in zip(spec.shape, np.shape(arr)):
            if isinstance(want, str):
                sizes.setdefault(want, int(got))
    return sizes


def validate(
    message: Message,
    schema: Schema,
    expected_kind: str | None = None,
    expected_round: int | None = None,
    *,
    request: Message | None = None,
    bound: Mapping[str, int] | None = None,
    limits: Mapping[str, float] | None = None,
) -> None:
    """Check ``message`` against ``schema``; raise :class:`InvalidMessageError` on the first problem.

    For a reply: ``request`` is the message it answers (for ``ArraySpec.like``), ``bound`` the symbolic
    sizes the request fixed (:func:`bind_request`), ``limits`` upper bounds of count metrics from the
    server's state.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError("?", "message", f"expected a Message, got {type(message).__name__}")
    s, k, r = message.sender, message.kind, message.round

    def fail(name: str, reason: str) -> NoReturn:
        raise InvalidMessageError(s, name, reason, kind=k, rnd=r)

    if expected_kind is not None and message.kind != expected_kind:
        fail("kind", f"expected {expected_kind!r}, got {message.kind!r}")
    if expected_round is not None and message.round != expected_round:
        fail("round", f"reply tagged round {message.round}, expected {expected_round}")
    declared = schema.array_names()
    for name in message.arrays:
        if name not in declared:
            fail(name, f"undeclared array (schema allows {sorted(declared)})")
    for name in message.config:
        if not schema.any_config and name not in schema.config:
            fail(name, f"undeclared config entry (schema allows {sorted(schema.config)})")
    if not schema.any_metrics:
        for name in message.metrics:
            if name not in schema.metrics:
                fail(name, f"undeclared metric (schema allows {sorted(schema.metrics)})")
    for name, value in message.metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            fail(name, f"metric must be int or float, got {type(value).__name__}")
        if isinstance(value, float) and not np.isfinite(value):
            fail(name, f"metric is not finite ({value})")
    for name in schema.required_metrics:
        if name not in message.metrics:
            fail(name, "missing required metric")
    for name in schema.counts:
        if name not in message.metrics:
            continue
        value = message.metrics[name]
        if value < 0 or value != int(value):
            fail(name, f"a count must be an integer >= 0, got {value}")
        top = (limits or {}).get(name)
        if top is not None and value > top:
            fail(name, f"count {value} exceeds the server's bound {top:g}")

    for spec in schema.arrays:
        if spec.required and spec.name not in message.arrays:
            fail(spec.name, "missing required array")
    sizes: dict[str, int] = dict(bound or {})
    for spec in schema.arrays:
        if spec.name not in message.arrays:
            continue
        arr = message.arrays[spec.name]
        if not isinstance(arr, np.ndarray):
            fail(spec.name, f"expected a numpy array, got {type(arr).__name__}")
        if not _DTYPE_CHECK[spec.dtype](arr.dtype):
            fail(spec.name, f"dtype {arr.dtype} is not {spec.dtype}")
        if spec.shape is not None:
            if arr.ndim != len(spec.shape):
                fail(spec.name, f"expected {len(spec.shape)} dims {spec.shape}, got shape {arr.shape}")
            for dim, (want, got) in enumerate(zip(spec.shape, arr.shape)):
                if isinstance(want, int) and want != got:
                    fail(spec.name, f"dim {dim} is {got}, expected {want}")
                if isinstance(want, str):
                    if sizes.setdefault(want, got) != got:
                        source = "the request" if bound and want in bound else "another field"
                        fail(spec.name, f"dim {dim} ({want}) is {got}, but {source} has {want}={sizes[want]}")
        if spec.like is not None:
            ref = None if request is None else request.arrays.get(spec.like)
            if ref is not None and tuple(arr.shape) != tuple(np.shape(ref)):
                fail(
                    spec.name,
                    f"shape {tuple(arr.shape)} differs from the request's {spec.like!r} {tuple(np.shape(ref))}",
                )
        if spec.dtype == "float" and arr.size and not np.all(np.isfinite(arr)):
            fail(spec.name, f"{int((~np.isfinite(arr)).sum())} non-finite values (NaN/inf)")
        if spec.kind in ("distribution", "counts", "ids") and arr.size and np.any(arr < 0):
            fail(spec.name, f"negative entries (min {arr.min():.3g})")
        if spec.high is not None and arr.size:
            high = spec.high if isinstance(spec.high, int) else sizes.get(spec.high)
            if high is not None and np.any(arr >= high):
                fail(spec.name, f"value {arr.max()} out of range (must be < {high})")
        if spec.kind == "distribution" and arr.size:
            _check_distribution(spec, arr, message, fail)


def _check_distribution(
    spec: ArraySpec, arr: np.ndarray, message: Message, fail: Callable[[str, str], NoReturn]
) -> None:
    if arr.ndim == 0:
        fail(spec.name, "a distribution needs at least one axis, got a 0-d array")
    if spec.mask is not None:
        mask = message.arrays.get(spec.mask)
        if mask is None or mask.shape != arr.shape:
            fail(spec.name, f"mask field {spec.mask!r} missing or of another shape")
        if np.any(arr[~mask.astype(bool)] != 0):
            fail(spec.name, f"non-zero probability on entries masked out by {spec.mask!r}")
        has_valid = mask.astype(bool).any(axis=spec.axis)
    else:
        has_valid = np.ones(np.delete(arr.shape, spec.axis % arr.ndim), dtype=bool)
    totals = arr.sum(axis=spec.axis, dtype=np.float64)
    bad = has_valid & (np.abs(totals - 1.0) > spec.atol)
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(spec.name, f"{int(bad.sum())} rows do not sum to 1 (first at index {idx}: sum {totals[idx]:.6f})")


def to_numpy_arrays(arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Convert torch tensors / lists to numpy arrays (detached, on CPU)."""
    out: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        out[name] = np.asarray(value)
    return out


def weights_schema(names: Sequence[str], extra_metrics: Sequence[str] = ()) -> Schema:
    """Schema of a model-weights reply (FedAvg and friends): one float array per parameter.

    Each reply array must have the shape of the request's array of the same name (the global weights sent).
    """
    return Schema(
        arrays=tuple(ArraySpec(n, "weights", like=n) for n in names),
        metrics=("num_examples", *extra_metrics),
        required_metrics=("num_examples", *extra_metrics),
    )


def weights_request_schema(weights: Mapping[str, np.ndarray]) -> Schema:
    """Schema of a request carrying model weights (any subset of ``weights``, each of the server's shape).

    Any config entry is allowed (a method's training options travel there).
    """
    return Schema(
        arrays=tuple(ArraySpec(k, "weights", shape=tuple(np.shape(v)), required=False) for k, v in weights.items()),
        any_config=True,
    )
