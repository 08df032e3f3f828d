"""Aggregation rules shared by methods.

:func:`weighted_average` is FedAvg's mean. :func:`aggregate` applies an :class:`AggregationRule`
(``federation.aggregation``, ``federation.trim_fraction``, ``federation.clip_norm``): each client's update is
clipped to an L2 norm bound relative to the global model, then combined by the weighted mean, the
coordinate-wise median or the coordinate-wise trimmed mean (Yin et al., ICML 2018). The mean lets one client
move the model arbitrarily far (finite 1e30 weights pass every schema check and poison it); the median and the
trimmed mean bound what a minority of clients can do, and norm clipping bounds each client's pull.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

log = logging.getLogger("fednsl.aggregate")

AGGREGATIONS = ("mean", "median", "trimmed_mean")


@dataclass(frozen=True)
class AggregationRule:
    """How a FedAvg-style server combines its clients' weights.

    ``kind``: ``mean`` (FedAvg's example-weighted mean), ``median`` (coordinate-wise) or ``trimmed_mean``
    (coordinate-wise: per coordinate, ``⌊trim_fraction·n⌋`` of the ``n`` values are cut at each end, as
    :func:`scipy.stats.trim_mean` does). The median and the trimmed mean count every client once (its
    ``num_examples`` does not weigh). ``clip_norm``: before combining, each client's update ``w_i − w`` (over all
    its floating-point arrays together) is scaled down to this L2 norm when longer; None: no clipping.
    """

    kind: str = "mean"
    trim_fraction: float = 0.2
    clip_norm: float | None = None

    def __post_init__(self) -> None:
        check_rule(self.kind, self.trim_fraction, self.clip_norm)

    @property
    def plain(self) -> bool:
        """FedAvg's mean, unclipped."""
        return self.kind == "mean" and self.clip_norm is None

    def describe(self) -> str:
        text = {"mean": "weighted mean", "median": "coordinate-wise median"}.get(
            self.kind, f"trimmed mean (trim_fraction {self.trim_fraction})"
        )
        return text + ("" if self.clip_norm is None else f" of updates clipped to norm {self.clip_norm}")


def check_rule(kind: Any, trim_fraction: Any, clip_norm: Any, where: str = "federation") -> None:
    """ValueError naming the option unless the three make an aggregation rule."""
    if kind not in AGGREGATIONS:
        raise ValueError(f"{where}.aggregation must be one of {list(AGGREGATIONS)}, got {kind!r}")
    if isinstance(trim_fraction, bool) or not isinstance(trim_fraction, (int, float)) or not 0 <= trim_fraction < 0.5:
        raise ValueError(f"{where}.trim_fraction must be a number in [0, 0.5), got {trim_fraction!r}")
    if clip_norm is not None and (
        isinstance(clip_norm, bool)
        or not isinstance(clip_norm, (int, float))
        or not (math.isfinite(clip_norm) and clip_norm > 0)
    ):
        raise ValueError(f"{where}.clip_norm must be a finite number > 0 (or null: no clipping), got {clip_norm!r}")


def _check(arrays: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float] | np.ndarray) -> np.ndarray:
    if not arrays:
        raise ValueError("aggregation needs at least one set of arrays")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(arrays),) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be {len(arrays)} non-negative numbers with a positive sum, got {weights}")
    names = list(arrays[0])
    for i, a in enumerate(arrays):
        if list(a) != names:
            raise ValueError(f"array set {i} has fields {list(a)}, expected {names}")
    return w / w.sum()


def weighted_average(
    arrays: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float] | np.ndarray
) -> dict[str, np.ndarray]:
    """FedAvg: ``Σ_i n_i·w_i / Σ_i n_i`` per named array (McMahan et al. 2017, Alg. 1).

    Accumulates in float64 and casts back to each array's dtype.
    """
    w = _check(arrays, weights)
    return {
        n: sum(wi * np.asarray(a[n], dtype=np.float64) for wi, a in zip(w, arrays)).astype(arrays[0][n].dtype)
        for n in arrays[0]
    }


def coordinate_median(arrays: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per named array, the median over clients of every coordinate (each client counts once)."""
    _check(arrays, np.ones(len(arrays)))
    return {
        n: np.median(np.stack([np.asarray(a[n], dtype=np.float64) for a in arrays]), axis=0).astype(arrays[0][n].dtype)
        for n in arrays[0]
    }


def trimmed_mean(arrays: Sequence[Mapping[str, np.ndarray]], fraction: float) -> dict[str, np.ndarray]:
    """Per named array and coordinate, the mean of the clients' values without the ``⌊fraction·n⌋`` smallest and
    largest (:func:`scipy.stats.trim_mean`'s cut; each client counts once)."""
    _check(arrays, np.ones(len(arrays)))
    if not 0 <= fraction < 0.5:
        raise ValueError(f"trim fraction must be in [0, 0.5), got {fraction}")
    n = len(arrays)
    cut = int(fraction * n)
    if cut == 0 and n > 1:
        log.warning("trimmed mean of %d clients with trim_fraction %s cuts none: it is their plain mean", n, fraction)
    out = {}
    for name in arrays[0]:
        stacked = np.sort(np.stack([np.asarray(a[name], dtype=np.float64) for a in arrays]), axis=0)
        out[name] = stacked[cut : n - cut].mean(axis=0).astype(arrays[0][name].dtype)
    return out


def _norm(parts: Sequence[np.ndarray]) -> float:
    """L2 norm of the concatenated ``parts`` without overflow for finite values (scaled by the largest entry)."""
    peak = max((float(np.max(np.abs(p))) for p in parts if p.size), default=0.0)
    if peak == 0.0 or not math.isfinite(peak):
        return peak
    return peak * math.sqrt(sum(float(np.sum(np.square(p / peak))) for p in parts))


def clip_updates(
    arrays: Sequence[Mapping[str, np.ndarray]], reference: Mapping[str, np.ndarray], clip_norm: float
) -> list[dict[str, np.ndarray]]:
    """Each client's arrays with its update ``w_i − reference`` scaled to L2 norm ``≤ clip_norm``.

    The norm is taken over all floating-point arrays of the client together; other arrays are left as sent.
    """
    out = []
    for client in arrays:
        floats = [k for k, v in client.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]
        missing = [k for k in floats if k not in reference]
        if missing:
            raise ValueError(f"clip_norm: no global value for {missing} to clip the update against")
        delta = {
            k: np.asarray(client[k], dtype=np.float64) - np.asarray(reference[k], dtype=np.float64) for k in floats
        }
        norm = _norm(list(delta.values()))
        scale = 1.0 if norm <= clip_norm else clip_norm / norm
        out.append(
            {
                k: (
                    (np.asarray(reference[k], dtype=np.float64) + scale * delta[k]).astype(np.asarray(v).dtype)
                    if k in delta and scale < 1.0
                    else v
                )
                for k, v in client.items()
            }
        )
    return out


def aggregate(
    arrays: Sequence[Mapping[str, np.ndarray]],
    weights: Sequence[float] | np.ndarray,
    rule: AggregationRule | None = None,
    reference: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Combine the clients' ``arrays`` by ``rule`` (None: FedAvg's weighted mean, :func:`weighted_average`).

    ``weights``: the clients' example counts (used by the mean); ``reference``: the global model the updates
    are measured from (needed by ``clip_norm``).
    """
    if rule is None or rule.plain:
        return weighted_average(arrays, weights)
    _check(arrays, weights)
    if rule.clip_norm is not None:
        if reference is None:
            raise ValueError("clip_norm needs the global model to measure the clients' updates from")
        arrays = clip_updates(arrays, reference, rule.clip_norm)
    if rule.kind == "median":
        return coordinate_median(arrays)
    if rule.kind == "trimmed_mean":
        return trimmed_mean(arrays, rule.trim_fraction)
    return weighted_average(arrays, weights)


def use_aggregation(strategy: Any, federation: Any) -> None:
    """Give ``strategy`` the rule of a ``federation`` config section (:class:`~fednsl.config.FederationConfig`).

    A strategy takes it when it has an ``aggregation`` attribute (FedAvg's server and the methods built on it);
    a rule other than the plain mean is refused for any other strategy, so that it is never silently ignored.
    """
    rule = AggregationRule(federation.aggregation, federation.trim_fraction, federation.clip_norm)
    if hasattr(strategy, "aggregation"):
        strategy.aggregation = rule
        if not rule.plain:
            log.info("aggregation: %s", rule.describe())
    elif not rule.plain:
        raise ValueError(
            f"federation.aggregation={rule.kind!r} / clip_norm={rule.clip_norm}: the server of this method "
            f"({type(strategy).__name__}) does not combine weights with FedAvg's shared aggregation; it supports "
            "only the default (aggregation: mean, clip_norm: null). Methods that take it (one global model): "
            "fedavg, fedavg-numeric, pfedme, perfedavg, pfedbayes, kifl, ts-fedavg, ts-fedprox, ts-fedrep, "
            "ts-ditto, ts-fedbayes"
        )
