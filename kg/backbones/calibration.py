"""Per-relation probability calibration of backbone scores, and the measures that check it.

A relation classifier trained on heavily imbalanced cells (DWIE: ~1 positive per 1000 entity-pair cells and
relation) outputs σ(logit) values far below the frequency with which such cells are edges. FedNSL multiplies
these values along rule bodies (Eq. 8) and thresholds them when mining round-0 co-occurrence edges, so they
must be probabilities. A client maps its logits z_r(h, t) to calibrated values with a monotone map fitted on
its own held-out *training* documents (never test documents), one map per relation:

- ``isotonic``: :class:`sklearn.isotonic.IsotonicRegression` of the label on z (non-decreasing step function,
  clipped outside the fitted range);
- ``sigmoid``: Platt scaling, :class:`sklearn.linear_model.LogisticRegression` on the single feature z,
  p = σ(a z + b);
- ``none``: identity, p = σ(z).

Fallback: a relation with fewer than ``min_positives`` positive or no negative calibration cell (or whose Platt
slope is ≤ 0, i.e. a map that would reverse the ranking) has no map of its own; it uses the client's pooled map
(one map fitted on all relations' cells together), or σ(z) when the pooled cells also lack a positive or a
negative or give a decreasing map. The fallbacks are listed on one log line per client.

Sharing (federated calibration): a client has no own map for the relations of the entity-type combos it never
sees, yet it must score them (FedNSL's unseen combos). Each client's Platt maps travel as two floats per relation,
(a_r, b_r), with the relation's positive calibration count n_r (:meth:`RelationCalibrator.platt_arrays`); the
aggregate of every client's maps is the positives-weighted mean (a_r, b_r) = Σ_c n_cr (a_cr, b_cr) / Σ_c n_cr
(:func:`shared_platt`), and a client adopts it for the relations it has no own map for
(:meth:`RelationCalibrator.adopt_shared`); its own maps stay. Isotonic maps are step functions and are not shared.

Measures: :func:`expected_calibration_error` (equal-width bins, the bins of
:func:`sklearn.calibration.calibration_curve` with ``strategy="uniform"``) and
:func:`sklearn.metrics.average_precision_score` for AUC-PR (used directly by the bench).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CALIBRATIONS",
    "RelationCalibrator",
    "fit_relation_calibrator",
    "expected_calibration_error",
    "sigmoid",
    "PlattMap",
    "shared_platt",
]

log = logging.getLogger("fednsl.backbones")

CALIBRATIONS = ("isotonic", "sigmoid", "none")


def sigmoid(z: np.ndarray) -> np.ndarray:
    """σ(z) in float64, overflow-free."""
    z = np.asarray(z, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -z))


@dataclass(frozen=True)
class PlattMap:
    """p = σ(a z + b): a Platt map given by its parameters (a shared map, :func:`shared_platt`)."""

    slope: float
    intercept: float

    def predict_proba(self, z: np.ndarray) -> np.ndarray:
        """(M, 2) [1 − p, p] of logits ``z`` (M,) or (M, 1), as sklearn's classifiers return them."""
        p = sigmoid(self.slope * np.asarray(z, dtype=np.float64).ravel() + self.intercept)
        return np.stack([1.0 - p, p], 1)


def _platt_parameters(model: Any) -> tuple[float, float] | None:
    """(a, b) of a Platt map (sklearn's LogisticRegression or :class:`PlattMap`), None for other maps."""
    if isinstance(model, PlattMap):
        return model.slope, model.intercept
    if hasattr(model, "coef_") and hasattr(model, "intercept_"):
        return float(model.coef_[0, 0]), float(model.intercept_[0])
    return None


def shared_platt(platt: Sequence[np.ndarray], positives: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The aggregate of clients' Platt maps: ``platt`` per client (R, 2) (a_r, b_r), ``positives`` per client (R,)
    n_r (0 where the client has no own Platt map for r). Returns (R, 2) Σ_c n_cr (a_cr, b_cr) / Σ_c n_cr and (R,)
    bool: the relations some client has a map for (their rows are meaningful; the others are 0)."""
    if not platt:
        raise ValueError("shared_platt: no client maps")
    a = np.stack([np.asarray(p, dtype=np.float64) for p in platt])  # (C, R, 2)
    n = np.stack([np.asarray(c, dtype=np.float64) for c in positives])  # (C, R)
    if a.ndim != 3 or a.shape[2] != 2 or n.shape != a.shape[:2]:
        raise ValueError(f"shared_platt: expected (R, 2) maps and (R,) counts per client, got {a.shape}, {n.shape}")
    tot = n.sum(0)
    has = tot > 0
    mean = np.einsum("cr,crk->rk", n, a) / np.where(has, tot, 1.0)[:, None]
    return np.where(has[:, None], mean, 0.0), has


def _fit_map(method: str, z: np.ndarray, y: np.ndarray) -> Any:
    """One sklearn map from logits z (M,) to P(y = 1); y (M,) in {0, 1} with both classes present.

    None when a Platt fit has a non-positive slope (the scores rank the cells backwards on this set): a
    calibration map must keep the backbone's ranking, so such a relation falls back too."""
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        return IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(z, y)
    from sklearn.linear_model import LogisticRegression

    # Platt scaling: a nearly unregularised 1-feature logistic regression (C large); lbfgs is deterministic.
    model = LogisticRegression(C=1e4, max_iter=1000).fit(z.reshape(-1, 1), y.astype(np.int64))
    return model if float(model.coef_[0, 0]) > 0 else None


def _apply_map(model: Any, z: np.ndarray) -> np.ndarray:
    if model is None:
        return sigmoid(z)
    if hasattr(model, "predict_proba"):
        return model.predict_proba(z.reshape(-1, 1))[:, 1]
    return np.asarray(model.predict(z), dtype=np.float64)


@dataclass
class RelationCalibrator:
    """Per-relation maps logit → probability (module docstring).

    ``maps[r]``: the relation's own fitted map (or the adopted shared one, r in ``shared``), or None when it falls
    back; ``pooled``: the client's pooled map (None: σ); ``counts[r]`` = (positives, negatives) of relation r in
    the calibration cells.
    """

    method: str
    maps: list[Any]
    pooled: Any = None
    counts: list[tuple[int, int]] = field(default_factory=list)
    fallback: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)  # relations using the shared map (:meth:`adopt_shared`)

    @property
    def num_relations(self) -> int:
        return len(self.maps)

    def predict(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated probabilities of ``logits`` (..., R) → float32 (..., R) in [0, 1]."""
        z = np.asarray(logits, dtype=np.float64)
        if z.shape[-1] != self.num_relations:
            raise ValueError(f"calibrator: logits have {z.shape[-1]} relations, expected {self.num_relations}")
        flat = z.reshape(-1, self.num_relations)
        out = np.empty_like(flat)
        if flat.shape[0] == 0:
            return out.astype(np.float32).reshape(z.shape)
        if self.method == "none":
            out = sigmoid(flat)
        else:  # one call per distinct map (most relations share the pooled one): elementwise, so the same values
            groups: dict[int, tuple[Any, list[int]]] = {}
            for r, model in enumerate(self.maps):
                used = model if model is not None else self.pooled
                groups.setdefault(id(used), (used, []))[1].append(r)
            for used, cols in groups.values():
                out[:, cols] = _apply_map(used, flat[:, cols].ravel()).reshape(-1, len(cols))
        return np.clip(out, 0.0, 1.0).astype(np.float32).reshape(z.shape)

    def platt_arrays(self) -> dict[str, np.ndarray]:
        """What the client shares (module docstring): ``platt`` (R, 2) float64 (a_r, b_r) of its own Platt maps
        and ``positives`` (R,) int64 their positive calibration counts; rows without an own Platt map are 0."""
        platt = np.zeros((self.num_relations, 2), dtype=np.float64)
        positives = np.zeros(self.num_relations, dtype=np.int64)
        for r, model in enumerate(self.maps):
            ab = _platt_parameters(model) if r not in self.shared else None
            if ab is not None:
                platt[r] = ab
                positives[r] = self.counts[r][0] if self.counts else 1
        return {"platt": platt, "positives": positives}

    def adopt_shared(self, platt: np.ndarray, has: np.ndarray) -> int:
        """Use the shared map (:func:`shared_platt`) for every relation without an own map that has one;
        returns how many relations adopted it."""
        if platt.shape != (self.num_relations, 2) or has.shape != (self.num_relations,):
            raise ValueError(
                f"calibrator: shared maps {platt.shape} / {has.shape} do not match {self.num_relations} relations"
            )
        adopted = 0
        for r in list(self.fallback):
            if has[r] and float(platt[r, 0]) > 0:
                self.maps[r] = PlattMap(float(platt[r, 0]), float(platt[r, 1]))
                self.fallback.remove(r)
                self.shared.append(r)
                adopted += 1
        return adopted

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "own_maps": int(sum(m is not None for m in self.maps)) - len(self.shared),
            "shared_maps": len(self.shared),
            "fallback_relations": len(self.fallback),
            "pooled": self.pooled is not None,
        }


def fit_relation_calibrator(
    logits: np.ndarray,
    labels: np.ndarray,
    method: str = "sigmoid",
    min_positives: int = 1,
    where: str = "calibration",
    relation_names: Sequence[str] | None = None,
) -> RelationCalibrator:
    """Fit one map per relation on calibration cells: ``logits`` (M, R) float, ``labels`` (M, R) in {0, 1}.

    Relations with < ``min_positives`` positives or no negative fall back (module docstring); ``where`` (e.g.
    ``"client c1"``) names the client on the log line listing them with their counts.
    """
    if method not in CALIBRATIONS:
        raise ValueError(f"{where}: calibration must be one of {CALIBRATIONS}, got {method!r}")
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    if z.ndim != 2 or z.shape != y.shape:
        raise ValueError(f"{where}: logits {z.shape} and labels {y.shape} must both be (M, R)")
    if not np.isfinite(z).all():
        raise ValueError(f"{where}: calibration logits must be finite")
    y = (y > 0.5).astype(np.float64)
    R = z.shape[1]
    pos = y.sum(0).astype(np.int64)
    neg = (y.shape[0] - pos).astype(np.int64)
    counts = [(int(p), int(n)) for p, n in zip(pos, neg)]
    if method == "none":
        return RelationCalibrator(method, [None] * R, None, counts, [])
    maps: list[Any] = []
    fallback: list[int] = []
    for r in range(R):
        model = _fit_map(method, z[:, r], y[:, r]) if pos[r] >= max(int(min_positives), 1) and neg[r] >= 1 else None
        maps.append(model)
        if model is None:
            fallback.append(r)
    pooled = None
    if fallback:
        if 0 < y.sum() < y.size:
            pooled = _fit_map(method, z.ravel(), y.ravel())
        names = relation_names or [str(r) for r in range(R)]
        listed = ", ".join(f"{names[r]} (pos {counts[r][0]}, neg {counts[r][1]})" for r in fallback)
        target = "the client's pooled map" if pooled is not None else "σ(logit) (no usable pooled map)"
        log.warning(
            "%s: %d of %d relation(s) have < %d positive or no negative calibration cell of %d (or a decreasing "
            "Platt fit); where no shared map is adopted (federated calibration), they use %s: %s",
            where,
            len(fallback),
            R,
            max(int(min_positives), 1),
            z.shape[0],
            target,
            listed,
        )
    return RelationCalibrator(method, maps, pooled, counts, fallback)


def expected_calibration_error(labels: np.ndarray, probs: np.ndarray, n_bins: int = 10) -> float:
    """ECE = Σ_b (n_b / n) |mean(y in b) − mean(p in b)| over ``n_bins`` equal-width bins of [0, 1].

    Bin assignment is that of :func:`sklearn.calibration.calibration_curve` (``strategy="uniform"``): interior
    edges searched from the left, so a value on an edge belongs to the lower bin. Empty input → 0.
    """
    y = np.asarray(labels, dtype=np.float64).ravel()
    p = np.asarray(probs, dtype=np.float64).ravel()
    if y.shape != p.shape:
        raise ValueError(f"ECE: {y.size} labels but {p.size} probabilities")
    if p.size == 0:
        return 0.0
    if p.min() < 0 or p.max() > 1:
        raise ValueError("ECE: probabilities must lie in [0, 1]")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(edges[1:-1], p)
    sum_p = np.bincount(ids, weights=p, minlength=n_bins)
    sum_y = np.bincount(ids, weights=y, minlength=n_bins)
    return float(np.abs(sum_y - sum_p).sum() / p.size)
