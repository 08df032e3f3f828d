"""Records of the rule store: per-triple and per-client arrays (:class:`TripleRecord`, :class:`ClientRecord`),
rows and diffs of the rule tables (:class:`RuleRow`, :class:`RuleDiff`), and the JSON/numeric helpers they use."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rules.measures import RuleCounts

__all__ = [
    "FORMAT",
    "VERSION",
    "ClientId",
    "ClientRecord",
    "RankedRule",
    "RuleDiff",
    "RuleRow",
    "Triple",
    "TripleRecord",
    "kl_divergence",
    "total_variation",
]

FORMAT = "fednsl-rules"
#: 2: a store may hold a reading order (``order`` in the header, ``ranked`` per triple; :class:`RankedRule`);
#: a store without one is written as version 1, so readers of version 1 still read it
VERSION = 2
Triple = tuple[int, int, int]
ClientId = str


# --- small numeric helpers --------------------------------------------------------------------


def _vec(x: Any, n: int | None, what: str, dtype: type = np.float64) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr: np.ndarray = np.asarray(x, dtype=dtype).reshape(-1)
    if n is not None and arr.shape != (n,):
        raise ValueError(f"{what}: expected {n} values (one per body), got {arr.shape[0]}")
    return arr


def _json_floats(arr: np.ndarray | None) -> list[float | str] | None:
    if arr is None:
        return None
    return [float(v) if math.isfinite(v) else str(float(v)) for v in np.asarray(arr, dtype=np.float64).tolist()]


def _from_json_floats(data: Sequence[float | str] | None) -> np.ndarray | None:
    if data is None:
        return None
    return np.array([float(v) for v in data], dtype=np.float64)


def _json_scalar(x: float | None) -> float | str | None:
    if x is None:
        return None
    return float(x) if math.isfinite(x) else str(float(x))


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """TV(p, q) = ½ Σ_j |p_j − q_j|."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = 1e-9) -> float:
    """KL(p‖q) = Σ_j p_j log(p_j / q_j) after smoothing both with ``eps`` and renormalising
    (posteriors estimated from samples can hold zeros)."""
    p = np.asarray(p, dtype=np.float64) + eps
    q = np.asarray(q, dtype=np.float64) + eps
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * (np.log(p) - np.log(q))))


# --- records ----------------------------------------------------------------------------------


@dataclass
class ClientRecord:
    """One client's view of a triple: posterior (J,) over the triple's bodies (Eq. 9/10), scorer weights
    w_i (J,) and bias (Eq. 8, LogiRE RuleScorer), #local query instances, local confidence counts."""

    posterior: np.ndarray
    weights: np.ndarray | None = None
    bias: float | None = None
    n_instances: int = 0
    counts: RuleCounts | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "posterior": _json_floats(self.posterior),
            "weights": _json_floats(self.weights),
            "bias": _json_scalar(self.bias),
            "n_instances": int(self.n_instances),
            "counts": self.counts.to_dict() if self.counts is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientRecord:
        bias = data.get("bias")
        return cls(
            posterior=_from_json_floats(data["posterior"]),  # type: ignore[arg-type]
            weights=_from_json_floats(data.get("weights")),
            bias=None if bias is None else float(bias),
            n_instances=int(data.get("n_instances", 0)),
            counts=RuleCounts.from_dict(data["counts"]) if data.get("counts") is not None else None,
        )


@dataclass(frozen=True)
class RankedRule:
    """One rule of a triple's recorded reading order (:mod:`rules.reading_order`): ``bodies`` the indices of the
    stored bodies that are this one rule on the training triples, the shown one first; ``explains`` the share of
    the head's training facts it newly explains beyond the rules above it, ``loo_conf`` its leave-one-out
    confidence (None: not measured); ``uses_head`` / ``detour`` its marks."""

    bodies: tuple[int, ...]
    explains: float | None = None
    loo_conf: float | None = None
    uses_head: bool = False
    detour: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "bodies": list(self.bodies),
            "explains": _json_scalar(self.explains),
            "loo_conf": _json_scalar(self.loo_conf),
            "uses_head": self.uses_head,
            "detour": self.detour,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankedRule:
        def num(x: Any) -> float | None:
            return None if x is None else float(x)

        return cls(
            bodies=tuple(int(j) for j in data["bodies"]),
            explains=num(data.get("explains")),
            loo_conf=num(data.get("loo_conf")),
            uses_head=bool(data.get("uses_head", False)),
            detour=bool(data.get("detour", False)),
        )


@dataclass
class TripleRecord:
    """State of one triple in the latest round that touched it."""

    triple: Triple
    bodies: np.ndarray  # (J, L) int64 padded body tokens
    prior: np.ndarray  # (J,) server prior probabilities
    log_prior: np.ndarray | None = None  # (J,) log T_θ(body | triple)
    sample_counts: np.ndarray | None = None  # (J,) n_j among the N ancestral samples
    posterior: np.ndarray | None = None  # (J,) aggregated posterior
    counts: RuleCounts | None = None  # global confidence counts
    clients: dict[ClientId, ClientRecord] = field(default_factory=dict)
    round: int = 0
    ranked: list[RankedRule] | None = None  # recorded reading order (rules.reading_order), best first

    @property
    def num_bodies(self) -> int:
        return int(self.bodies.shape[0])

    def global_posterior(self) -> np.ndarray | None:
        """Recorded aggregated posterior, else the mean of client posteriors weighted by #instances
        (spec §8.9; plain mean when no client reported instances), else None."""
        if self.posterior is not None:
            return self.posterior
        if not self.clients:
            return None
        post = np.stack([c.posterior for c in self.clients.values()])
        w = np.array([c.n_instances for c in self.clients.values()], dtype=np.float64)
        if w.sum() <= 0:
            w = np.ones_like(w)
        return (w[:, None] * post).sum(0) / w.sum()

    def global_counts(self) -> RuleCounts | None:
        """Recorded global counts, else the sum of the clients' counts (None when nobody reported any)."""
        if self.counts is not None:
            return self.counts
        parts = [c.counts for c in self.clients.values() if c.counts is not None]
        if not parts:
            return None
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total

    def probabilities(self, client: ClientId | None = None) -> np.ndarray:
        """Client posterior (client given), else global posterior, else prior."""
        if client is not None:
            rec = self.clients.get(str(client))
            if rec is None:
                raise KeyError(f"client {client!r} has no posterior for triple {self.triple}")
            return rec.posterior
        post = self.global_posterior()
        return self.prior if post is None else post

    def reading_order(self) -> list[tuple[int, int, RankedRule]] | None:
        """``(body index, rank, rule)`` for every body in the recorded reading order (rank 0-based, shared by
        the bodies of one rule, the shown one first); None when no order is recorded."""
        if self.ranked is None:
            return None
        return [(j, k, rule) for k, rule in enumerate(self.ranked) for j in rule.bodies]

    def check_ranked(self) -> None:
        """ValueError unless the recorded order lists every body exactly once."""
        if self.ranked is None:
            return
        seen = sorted(j for rule in self.ranked for j in rule.bodies)
        if seen != list(range(self.num_bodies)) or any(not rule.bodies for rule in self.ranked):
            raise ValueError(
                f"the recorded reading order does not list each of the {self.num_bodies} bodies once "
                f"(it lists {len(seen)} body indices)"
            )


@dataclass(frozen=True)
class RuleRow:
    """One rule of one triple, as listed by :meth:`RuleStore.rows`."""

    triple: Triple
    triple_name: str
    index: int
    tokens: tuple[int, ...]
    rule: str
    probability: float  # client posterior / global posterior / prior (the sort key)
    prior: float
    posterior: float | None
    client: ClientId | None = None
    client_posterior: float | None = None
    weight: float | None = None
    measures: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["triple"] = list(self.triple)
        out["tokens"] = list(self.tokens)
        if self.measures is not None:
            out["measures"] = {k: _json_scalar(v) for k, v in self.measures.items()}
        return out


@dataclass(frozen=True)
class RuleDiff:
    """How two clients' rule distributions differ for one triple (``by="triple"``) or one head relation
    (``by="head"``, triples merged): TV, KL both ways, the bodies with the largest gaps."""

    name: str  # triple name, or the head relation name
    head: int
    triple: Triple | None  # None when compared by head relation
    total_variation: float
    kl_ab: float
    kl_ba: float
    top: list[tuple[str, float, float]]  # (rule text, p_a, p_b) sorted by |p_a - p_b|

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "head": self.head,
            "triple": None if self.triple is None else list(self.triple),
            "total_variation": self.total_variation,
            "kl_ab": self.kl_ab,
            "kl_ba": self.kl_ba,
            "top": [{"rule": r, "p_a": a, "p_b": b} for r, a, b in self.top],
        }


def _row_of(x: Any, t: int, triple: Triple, mask: np.ndarray | None) -> Any:
    """The t-th triple's entry of a mapping {triple: arr}, a ragged list, or a padded (T, J, ...) array."""
    if isinstance(x, Mapping):
        return x[triple]
    row = x[t]
    if mask is not None:
        return np.asarray(row.detach().cpu().numpy() if hasattr(row, "detach") else row)[mask[t]]
    return row
