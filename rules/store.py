"""The rule store: what a FedNSL run learned, per rule-head category ("triple", spec §2).

Per triple t = (head relation, head entity type, tail entity type) the store keeps the candidate bodies of
the latest round (J_t padded token tuples, spec §2 step 1) with

- the server's prior over them (T_θ renormalised over the J bodies; optional log-probs and sample counts n_j),
- the global (aggregated) posterior (spec §2 step 5),
- each client's posterior (Eq. 9/10), scorer weights w_i (Eq. 8) and bias, number of local instances,
- AMIE confidence counts (:class:`rules.measures.RuleCounts`), either set globally or per client -- counts are
  additive, so the global counts default to the sum over the clients that reported them.

A strategy calls :meth:`RuleStore.add_triple` when it broadcasts bodies and :meth:`RuleStore.record_client` /
:meth:`RuleStore.record_global` when posteriors come back (or :meth:`RuleStore.record_round` once per round),
then :meth:`RuleStore.save` writes ``RUN_DIR/rules.json`` (machine-readable, self-describing: relation and type
names included) and ``RUN_DIR/rules.tsv`` (one rule per line). :meth:`RuleStore.load` reads ``rules.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from rules.fol import MAX_BODY_LENGTH, RelationVocab, Rule
from rules.formats import ScoredRule
from rules.measures import RuleCounts, count_bodies

__all__ = [
    "FORMAT",
    "ClientRecord",
    "RuleRow",
    "RuleStore",
    "RuleDiff",
    "TripleRecord",
    "kl_divergence",
    "total_variation",
]

FORMAT = "fednsl-rules"
VERSION = 1
Triple = tuple[int, int, int]
ClientId = str


# --- small numeric helpers --------------------------------------------------------------------


def _vec(x: Any, n: int | None, what: str, dtype: type = np.float64) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=dtype).reshape(-1)
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


# --- the store --------------------------------------------------------------------------------


@dataclass
class RuleStore:
    """Learned rules of a run: relation/type names plus one :class:`TripleRecord` per triple.

    relations: R relation names (token layout of :class:`rules.fol.RelationVocab`); types: entity type names
    (None: shown as ids); body_length: L of the padded bodies (3); meta: free-form run information.
    """

    relations: tuple[str, ...]
    types: tuple[str, ...] | None = None
    body_length: int = MAX_BODY_LENGTH
    triples: dict[Triple, TripleRecord] = field(default_factory=dict)
    rounds: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.relations = tuple(self.relations)
        self.types = tuple(self.types) if self.types is not None else None

    @cached_property
    def vocab(self) -> RelationVocab:
        return RelationVocab(self.relations)

    # --- names ----------------------------------------------------------------------------------
    def type_name(self, t: int) -> str:
        if self.types is None:
            return str(t)
        return self.types[t]

    def triple_name(self, triple: Triple) -> str:
        """``head[head_type->tail_type]``."""
        h, th, tt = triple
        return f"{self.relations[h]}[{self.type_name(th)}->{self.type_name(tt)}]"

    def relation_id(self, head: str | int) -> int:
        if isinstance(head, str) and not head.lstrip("-").isdigit():
            return self.vocab.relation_id(head)
        h = int(head)
        if not 0 <= h < len(self.relations):
            raise ValueError(f"relation id {h} outside [0, {len(self.relations)})")
        return h

    def type_id(self, t: str | int) -> int:
        if isinstance(t, str) and not t.isdigit():
            if self.types is None or t not in self.types:
                raise ValueError(f"unknown entity type {t!r}; known: {list(self.types or [])}")
            return self.types.index(t)
        return int(t)

    def rule_text(self, triple: Triple, tokens: Iterable[int]) -> str:
        return f"{self.relations[triple[0]]} <- {self.vocab.format_body(tokens)}"

    @property
    def clients(self) -> list[ClientId]:
        seen: dict[ClientId, None] = {}
        for rec in self.triples.values():
            seen.update(dict.fromkeys(rec.clients))
        return sorted(seen, key=lambda c: (len(c), c))

    # --- recording ------------------------------------------------------------------------------
    def _check_triple(self, triple: Sequence[int]) -> Triple:
        t = tuple(int(v) for v in triple)
        if len(t) != 3:
            raise ValueError(f"a triple is (head relation, head type, tail type), got {triple}")
        if not 0 <= t[0] < len(self.relations):
            raise ValueError(f"triple {t}: head relation outside [0, {len(self.relations)})")
        if self.types is not None and not (0 <= t[1] < len(self.types) and 0 <= t[2] < len(self.types)):
            raise ValueError(f"triple {t}: entity type outside [0, {len(self.types)})")
        return t  # type: ignore[return-value]

    def _record(self, triple: Sequence[int]) -> TripleRecord:
        t = self._check_triple(triple)
        if t not in self.triples:
            raise KeyError(f"triple {self.triple_name(t)} {t} has no bodies yet: call add_triple first")
        return self.triples[t]

    def add_triple(
        self,
        triple: Sequence[int],
        bodies: Sequence[Sequence[int]] | np.ndarray,
        prior: Sequence[float] | np.ndarray,
        *,
        log_prior: Sequence[float] | np.ndarray | None = None,
        sample_counts: Sequence[int] | np.ndarray | None = None,
        round: int | None = None,
    ) -> TripleRecord:
        """Start a triple's round: its J candidate bodies (J, ≤L) tokens and the server prior (J,).

        Replaces any earlier state of the triple (earlier posteriors refer to earlier bodies).
        """
        t = self._check_triple(triple)
        b = np.asarray(bodies.detach().cpu().numpy() if hasattr(bodies, "detach") else bodies, dtype=np.int64)
        if b.ndim != 2 or b.shape[1] > self.body_length or b.shape[1] < 1:
            raise ValueError(f"triple {self.triple_name(t)}: bodies must be (J, 1..{self.body_length}), got {b.shape}")
        stay = self.vocab.stay
        if b.size and (b.min() < 0 or b.max() > stay):
            raise ValueError(f"triple {self.triple_name(t)}: body tokens outside [0, 2R+1={stay + 1})")
        if b.shape[1] < self.body_length:
            b = np.concatenate([b, np.full((b.shape[0], self.body_length - b.shape[1]), stay)], axis=1)
        J = b.shape[0]
        r = self.rounds[-1] if round is None and self.rounds else (round or 0)
        rec = TripleRecord(
            triple=t,
            bodies=b,
            prior=_vec(prior, J, f"{self.triple_name(t)} prior"),
            log_prior=None if log_prior is None else _vec(log_prior, J, f"{self.triple_name(t)} log_prior"),
            sample_counts=None
            if sample_counts is None
            else _vec(sample_counts, J, f"{self.triple_name(t)} sample_counts", np.int64),
            round=int(r),
        )
        self.triples[t] = rec
        if int(r) not in self.rounds:
            self.rounds.append(int(r))
            self.rounds.sort()
        return rec

    def record_client(
        self,
        triple: Sequence[int],
        client: ClientId | int,
        posterior: Sequence[float] | np.ndarray,
        *,
        weights: Sequence[float] | np.ndarray | None = None,
        bias: float | None = None,
        n_instances: int = 0,
        counts: RuleCounts | None = None,
    ) -> None:
        """A client's posterior (J,) (Eq. 9/10), optional scorer weights (J,) + bias and local counts."""
        rec = self._record(triple)
        name = self.triple_name(rec.triple)
        J = rec.num_bodies
        if counts is not None and len(counts) != J:
            raise ValueError(f"{name}: client {client} counts cover {len(counts)} rules, triple has {J}")
        rec.clients[str(client)] = ClientRecord(
            posterior=_vec(posterior, J, f"{name} posterior of client {client}"),
            weights=None if weights is None else _vec(weights, J, f"{name} weights of client {client}"),
            bias=None if bias is None else float(bias),
            n_instances=int(n_instances),
            counts=counts,
        )

    def record_global(self, triple: Sequence[int], posterior: Sequence[float] | np.ndarray) -> None:
        """The aggregated posterior (J,) of a triple."""
        rec = self._record(triple)
        rec.posterior = _vec(posterior, rec.num_bodies, f"{self.triple_name(rec.triple)} global posterior")

    def set_counts(self, triple: Sequence[int], counts: RuleCounts, client: ClientId | int | None = None) -> None:
        """Confidence counts of a triple's J bodies, globally or for one client."""
        rec = self._record(triple)
        if len(counts) != rec.num_bodies:
            raise ValueError(
                f"{self.triple_name(rec.triple)}: counts cover {len(counts)} rules, triple has {rec.num_bodies}"
            )
        if client is None:
            rec.counts = counts
        else:
            if str(client) not in rec.clients:
                raise KeyError(f"client {client!r} has no record for {self.triple_name(rec.triple)}")
            rec.clients[str(client)].counts = counts

    def compute_counts(
        self,
        docs: Sequence[Any],
        *,
        client: ClientId | int | None = None,
        by_type: bool = True,
        triples: Iterable[Sequence[int]] | None = None,
    ) -> None:
        """Count every triple's bodies on ``docs`` (see :func:`rules.measures.count_bodies`) and store the counts
        (globally, or for ``client``). ``by_type``: restrict pairs to the triple's entity types (the documents
        then need ``entity_types``)."""
        docs = list(docs)
        keys = [self._check_triple(t) for t in triples] if triples is not None else list(self.triples)
        for t in keys:
            rec = self._record(t)
            counts = count_bodies(
                t[0], rec.bodies, docs, len(self.relations), pair_types=(t[1], t[2]) if by_type else None
            )
            self.set_counts(t, counts, client)

    def record_round(
        self,
        round: int,
        triples: Sequence[Sequence[int]],
        bodies: Any,
        prior: Any,
        *,
        mask: Any = None,
        log_prior: Any = None,
        sample_counts: Any = None,
        posterior: Any = None,
        client_posteriors: Mapping[Any, Any] | None = None,
        client_weights: Mapping[Any, Any] | None = None,
        client_bias: Mapping[Any, Any] | None = None,
        client_instances: Mapping[Any, Any] | None = None,
    ) -> None:
        """Record a whole round at once.

        Every array argument is either a mapping ``{triple: array}``, a list aligned with ``triples`` (ragged J_t),
        or a padded array (T, J_max, ...) with ``mask`` (T, J_max) marking real bodies. Client arguments map a
        client id to such a container; a client lacking a triple (``None`` or missing key) is skipped.
        ``client_bias``/``client_instances`` hold one number per triple.
        """
        m = None if mask is None else np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask, bool)
        if int(round) not in self.rounds:
            self.rounds.append(int(round))
            self.rounds.sort()

        def get(container: Any, t: int, key: Triple, masked: bool = True) -> Any:
            if container is None:
                return None
            if isinstance(container, Mapping) and key not in container:
                return None
            return _row_of(container, t, key, m if masked else None)

        for t, raw in enumerate(triples):
            key = self._check_triple(raw)
            self.add_triple(
                key,
                get(bodies, t, key),
                get(prior, t, key),
                log_prior=get(log_prior, t, key),
                sample_counts=get(sample_counts, t, key),
                round=round,
            )
            if posterior is not None and (g := get(posterior, t, key)) is not None:
                self.record_global(key, g)
            for client, posts in (client_posteriors or {}).items():
                p = get(posts, t, key)
                if p is None:
                    continue
                w = get((client_weights or {}).get(client), t, key)
                b = get((client_bias or {}).get(client), t, key, masked=False)
                n = get((client_instances or {}).get(client), t, key, masked=False)
                self.record_client(
                    key,
                    client,
                    p,
                    weights=w,
                    bias=None if b is None else float(np.asarray(b)),
                    n_instances=0 if n is None else int(np.asarray(n)),
                )

    # --- queries --------------------------------------------------------------------------------
    def find_triples(self, head: str | int | None = None, types: tuple[Any, Any] | None = None) -> list[Triple]:
        """Triples (sorted by name) with the given head relation and/or (head type, tail type)."""
        h = None if head is None else self.relation_id(head)
        ty = None if types is None else (self.type_id(types[0]), self.type_id(types[1]))
        out = [t for t in self.triples if (h is None or t[0] == h) and (ty is None or t[1:] == ty)]
        return sorted(out, key=lambda t: (self.triple_name(t), t))

    def rows(
        self, head: str | int | None = None, client: ClientId | int | None = None, top: int | None = None
    ) -> list[RuleRow]:
        """Rules grouped by triple, each group sorted by probability (client posterior with ``client``, else
        global posterior, else prior), at most ``top`` per triple. With ``client``, triples the client has
        no posterior for are left out."""
        c = None if client is None else str(client)
        out: list[RuleRow] = []
        for t in self.find_triples(head):
            rec = self.triples[t]
            if c is not None and c not in rec.clients:
                continue
            prob = rec.probabilities(c)
            post = rec.global_posterior()
            counts = rec.global_counts()
            crec = rec.clients.get(c) if c is not None else None
            order = np.argsort(-prob, kind="stable")[: top if top is not None else None]
            for j in order.tolist():
                out.append(
                    RuleRow(
                        triple=t,
                        triple_name=self.triple_name(t),
                        index=j,
                        tokens=tuple(int(v) for v in rec.bodies[j]),
                        rule=self.rule_text(t, rec.bodies[j]),
                        probability=float(prob[j]),
                        prior=float(rec.prior[j]),
                        posterior=None if post is None else float(post[j]),
                        client=c,
                        client_posterior=None if crec is None else float(crec.posterior[j]),
                        weight=None if crec is None or crec.weights is None else float(crec.weights[j]),
                        measures=None if counts is None else counts.measures(j),
                    )
                )
        return out

    def head_distribution(self, client: ClientId | int, head: int) -> dict[tuple[int, ...], float] | None:
        """A client's posterior over stay-free bodies of one head relation, its triples merged with weights
        #instances (equal weights when none reported); None when the client has no triple of ``head``."""
        c = str(client)
        recs = [rec for t, rec in self.triples.items() if t[0] == head and c in rec.clients]
        if not recs:
            return None
        w = np.array([rec.clients[c].n_instances for rec in recs], dtype=np.float64)
        if w.sum() <= 0:
            w = np.ones_like(w)
        dist: dict[tuple[int, ...], float] = {}
        for rec, wt in zip(recs, w / w.sum()):
            for j, p in enumerate(rec.clients[c].posterior.tolist()):
                key = self.vocab.strip(rec.bodies[j])
                dist[key] = dist.get(key, 0.0) + wt * p
        return dist

    def diff(
        self,
        a: ClientId | int,
        b: ClientId | int,
        *,
        by: str = "head",
        top: int = 5,
        head: str | int | None = None,
        eps: float = 1e-9,
    ) -> list[RuleDiff]:
        """TV, KL(a‖b), KL(b‖a) and the ``top`` bodies with the largest |p_a − p_b|, sorted by TV (largest first).

        by="triple": per triple both clients have posteriors for. by="head": per head relation both clients have
        triples of, each client's triples merged (:meth:`head_distribution`; bodies compared after dropping stay
        tokens, a body one client lacks has probability 0 there) -- the comparison that works when clients own
        different entity-type combinations (spec §4), as in the FedNSL DWIE split.
        """
        if by not in ("triple", "head"):
            raise ValueError(f"by must be 'triple' or 'head', got {by!r}")
        ca, cb = str(a), str(b)
        known = set(self.clients)
        for c in (ca, cb):
            if c not in known:
                raise KeyError(f"client {c!r} not in the store; clients: {sorted(known)}")
        out = []
        if by == "triple":
            for t in self.find_triples(head):
                rec = self.triples[t]
                if ca not in rec.clients or cb not in rec.clients:
                    continue
                p, q = rec.clients[ca].posterior, rec.clients[cb].posterior
                texts = [self.rule_text(t, body) for body in rec.bodies]
                out.append(self._diff(self.triple_name(t), t[0], t, texts, p, q, top, eps))
        else:
            heads = sorted({t[0] for t in self.find_triples(head)})
            for h in heads:
                da, db = self.head_distribution(ca, h), self.head_distribution(cb, h)
                if da is None or db is None:
                    continue
                keys = list(dict.fromkeys([*da, *db]))
                p = np.array([da.get(k, 0.0) for k in keys])
                q = np.array([db.get(k, 0.0) for k in keys])
                texts = [f"{self.relations[h]} <- {self.vocab.format_body(k)}" for k in keys]
                out.append(self._diff(self.relations[h], h, None, texts, p, q, top, eps))
        return sorted(out, key=lambda d: -d.total_variation)

    @staticmethod
    def _diff(
        name: str,
        head: int,
        triple: Triple | None,
        texts: list[str],
        p: np.ndarray,
        q: np.ndarray,
        top: int,
        eps: float,
    ) -> RuleDiff:
        order = np.argsort(-np.abs(p - q), kind="stable")[:top]
        return RuleDiff(
            name=name,
            head=head,
            triple=triple,
            total_variation=total_variation(p, q),
            kl_ab=kl_divergence(p, q, eps),
            kl_ba=kl_divergence(q, p, eps),
            top=[(texts[j], float(p[j]), float(q[j])) for j in order.tolist()],
        )

    def scored_rules(self, head: str | int | None = None) -> tuple[list[ScoredRule], list[float], int]:
        """Unique chain rules over all triples for export (AnyBURL/AMIE know no entity types): counts summed over
        the triples sharing a rule (pairs of different type combinations are disjoint, so support and body size
        add up exactly); also each rule's largest probability and the number of identity (all-stay) bodies
        left out. Rules without counts carry ``None`` counts."""
        merged: dict[Rule, dict[str, Any]] = {}
        skipped = 0
        for t in self.find_triples(head):
            rec = self.triples[t]
            prob = rec.probabilities()
            counts = rec.global_counts()
            for j in range(rec.num_bodies):
                body = self.vocab.strip(rec.bodies[j])
                if not body:
                    skipped += 1
                    continue
                rule = Rule(t[0], body)
                entry = merged.setdefault(rule, {"p": 0.0, "c": None, "all": True})
                entry["p"] = max(entry["p"], float(prob[j]))
                if counts is None:
                    entry["all"] = False
                else:
                    c = counts.take([j])
                    entry["c"] = c if entry["c"] is None else entry["c"] + c
        rules, probs = [], []
        for rule, e in sorted(merged.items(), key=lambda kv: (kv[0].head, -kv[1]["p"])):
            c: RuleCounts | None = e["c"] if e["all"] else None
            if c is None:
                rules.append(ScoredRule(rule))
            else:
                m = c.measures(0)
                rules.append(
                    ScoredRule(
                        rule,
                        support=int(m["support"]),
                        body_size=int(m["body_size"]),
                        pca_body_size=int(m["pca_body_size"]),
                        head_size=int(m["head_size"]),
                    )
                )
            probs.append(e["p"])
        return rules, probs, skipped

    # --- serialisation --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        triples = []
        for t in sorted(self.triples):
            rec = self.triples[t]
            triples.append(
                {
                    "triple": list(t),
                    "name": self.triple_name(t),
                    "round": rec.round,
                    "bodies": rec.bodies.tolist(),
                    "rules": [self.rule_text(t, b) for b in rec.bodies],
                    "prior": _json_floats(rec.prior),
                    "log_prior": _json_floats(rec.log_prior),
                    "sample_counts": None if rec.sample_counts is None else rec.sample_counts.tolist(),
                    "posterior": _json_floats(rec.posterior),
                    "counts": None if rec.counts is None else rec.counts.to_dict(),
                    "clients": {c: cr.to_json() for c, cr in sorted(rec.clients.items())},
                }
            )
        return {
            "format": FORMAT,
            "version": VERSION,
            "relations": list(self.relations),
            "types": None if self.types is None else list(self.types),
            "body_length": self.body_length,
            "token_layout": "c<R: relation c; R<=c<2R: inverse of c-R ('~name'); c=2R: stay/padding (identity)",
            "rounds": list(self.rounds),
            "clients": self.clients,
            "meta": self.meta,
            "triples": triples,
        }

    def to_json_text(self) -> str:
        """Strict JSON (no NaN/Infinity literals): header fields indented, one line per triple."""
        data = self.to_json()
        triples = data.pop("triples")
        head = json.dumps(data, indent=1, allow_nan=False)
        body = ",\n".join("  " + json.dumps(t, allow_nan=False) for t in triples)
        return head[:-2] + ',\n "triples": [\n' + body + ("\n" if body else "") + " ]\n}\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "<json>") -> RuleStore:
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{source}: not a rule store (field 'format' is {data.get('format')!r}, expected {FORMAT!r})"
            )
        if int(data.get("version", 0)) > VERSION:
            raise ValueError(f"{source}: rule store version {data['version']} is newer than this reader ({VERSION})")
        store = cls(
            relations=tuple(data["relations"]),
            types=None if data.get("types") is None else tuple(data["types"]),
            body_length=int(data.get("body_length", MAX_BODY_LENGTH)),
            rounds=[int(r) for r in data.get("rounds", [])],
            meta=dict(data.get("meta", {})),
        )
        for i, item in enumerate(data.get("triples", [])):
            where = f"{source}: triples[{i}]"
            try:
                t = store._check_triple(item["triple"])
                bodies = np.asarray(item["bodies"], dtype=np.int64).reshape(-1, store.body_length)
                rec = TripleRecord(
                    triple=t,
                    bodies=bodies,
                    prior=_from_json_floats(item["prior"]),  # type: ignore[arg-type]
                    log_prior=_from_json_floats(item.get("log_prior")),
                    sample_counts=None
                    if item.get("sample_counts") is None
                    else np.asarray(item["sample_counts"], dtype=np.int64),
                    posterior=_from_json_floats(item.get("posterior")),
                    counts=RuleCounts.from_dict(item["counts"]) if item.get("counts") is not None else None,
                    clients={str(c): ClientRecord.from_json(v) for c, v in item.get("clients", {}).items()},
                    round=int(item.get("round", 0)),
                )
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{where}: {err}") from err
            texts = item.get("rules")
            if texts is not None:
                mine = [store.rule_text(t, b) for b in rec.bodies]
                if list(texts) != mine:
                    if len(texts) != len(mine):
                        raise ValueError(f"{where}: {len(texts)} rule texts for {len(mine)} bodies")
                    bad = next(j for j, (x, y) in enumerate(zip(texts, mine)) if x != y)
                    raise ValueError(
                        f"{where}: rule text {texts[bad]!r} does not match its tokens ({mine[bad]!r}); "
                        "the relation names do not fit the body ids"
                    )
            J = rec.num_bodies
            for what, arr in (("prior", rec.prior), ("posterior", rec.posterior), ("log_prior", rec.log_prior)):
                if arr is not None and arr.shape != (J,):
                    raise ValueError(f"{where}: field {what!r} has {arr.shape[0]} values for {J} bodies")
            store.triples[t] = rec
        return store

    def to_tsv(self) -> str:
        """One rule per line: triple, rule text, tokens, prior, global posterior, per client posterior and
        weight, confidence counts and measures (empty cells where unknown; a column that is empty on every
        line, e.g. weights that never left their clients, is left out)."""
        clients = self.clients
        header = ["triple", "rule", "tokens", "prior", "posterior"]
        for c in clients:
            header += [f"posterior[{c}]", f"weight[{c}]"]
        header += [*RuleCounts.FIELDS, *RuleCounts.MEASURES]

        def f(x: float | None) -> str:
            return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"

        table: list[list[str]] = []
        for t in self.find_triples():
            rec = self.triples[t]
            post = rec.global_posterior()
            counts = rec.global_counts()
            order = np.argsort(-(post if post is not None else rec.prior), kind="stable")
            for j in order.tolist():
                row = [
                    self.triple_name(t),
                    self.rule_text(t, rec.bodies[j]),
                    " ".join(str(int(v)) for v in rec.bodies[j]),
                    f(float(rec.prior[j])),
                    f(None if post is None else float(post[j])),
                ]
                for c in clients:
                    cr = rec.clients.get(c)
                    row.append(f(None if cr is None else float(cr.posterior[j])))
                    row.append(f(None if cr is None or cr.weights is None else float(cr.weights[j])))
                if counts is None:
                    row += [""] * (len(RuleCounts.FIELDS) + len(RuleCounts.MEASURES))
                else:
                    m = counts.measures(j)
                    row += [str(int(m[k])) for k in RuleCounts.FIELDS] + [f(m[k]) for k in RuleCounts.MEASURES]
                table.append(row)
        keep = [i for i in range(len(header)) if i < 5 or any(row[i] for row in table)]
        return "".join("\t".join(line[i] for i in keep) + "\n" for line in [header, *table])

    def save(self, run_dir: str | Path) -> tuple[Path, Path]:
        """Write ``run_dir/rules.json`` and ``run_dir/rules.tsv``; returns both paths."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        jpath, tpath = run_dir / "rules.json", run_dir / "rules.tsv"
        jpath.write_text(self.to_json_text(), encoding="utf-8")
        tpath.write_text(self.to_tsv(), encoding="utf-8")
        return jpath, tpath

    @classmethod
    def load(cls, run_dir: str | Path) -> RuleStore:
        """Read ``run_dir/rules.json`` (``run_dir`` may also be the JSON file itself)."""
        path = Path(run_dir)
        if path.is_dir():
            path = path / "rules.json"
        if not path.exists():
            raise FileNotFoundError(f"no rule store at {path} (a FedNSL run writes RUN_DIR/rules.json)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from err
        return cls.from_json(data, source=str(path))

