"""RNNLogic-style reasoning predictor without embeddings: rule groundings -> answer scores, weights per head.

For a query (h, q, ?) with head relation q (0..2R-1) and bodies z_1..z_J of q, the groundings are the walk
counts f_j(e) = #paths h -z_j-> e (``kg.grounding.sparse.SparseGraph``). The score of candidate e is

    sum (default; RNNLogic's predictor, Qu et al. ICLR 2021, §3.2):   s(e) = b_q[e] + Σ_j w_qj · φ(f_j(e))
    max:                                                              s(e) = b_q[e] + κ · max_{j: f_j(e)>0} σ(w_qj)
    noisy-or (over groundings):                                       s(e) = b_q[e] + κ · (1 − Π_j (1 − σ(w_qj))^{f_j(e)})

with φ = log(1 + ·) by default (``feature="count"`` is RNNLogic's raw count, ``"indicator"`` is 1[f > 0],
``"fraction"`` is f_j(e) / Σ_e' f_j(e'), the path-ranking random-walk share; several joined by "+" give each rule
one weight per feature, w_qj · φ(f) = Σ_k w_qjk φ_k(f)), b_q an
optional per-candidate bias (RNNLogic's ``entity_feature="bias"``; ``type_prior`` adds Σ_b u_qb · 1[e has a b-edge]
over the relations b ∉ {q, q⁻¹}, the zero-length rules q(X, Y) <- b(Y, _)) and κ a learned positive scale. Training is a
softmax cross-entropy over all entities (the other known train answers of (h, q) are filtered out of the
denominator), on the train facts of q, with the query's own fact removed from the graph (both directions) while
grounding it — otherwise the body [q] (or any path through the edge) trivially fires. ``max_fanout`` (optional)
drops a rule's groundings for a query when the rule reaches more than that many candidates from it: on FB15k-237 a
length-3 body through a hub (a country, a profession) reaches thousands of entities from every query, costs most
of the training time and adds little beyond the per-head entity bias. ``constant_rules`` > 0 adds rules with
constants (``rules.kg_constant_rules``: q(X, c) <- b(X, d) and q(X, c) <- b(X, _), mined per head from the
training facts at fit time): rule k fires for a query whose entity has the body and points at its one candidate
c, entering the score as one more weighted rule (columns J.. of the design matrix, after the J path bodies; the
E-step's ``rule_scores`` and ``rule_weights`` cover the path bodies only). At valid/test time the graph
is ``graph_triples`` unchanged (RNNLogic grounds test queries on the train graph). Every head relation has its
own parameters, so heads are trained one after the other; each is early-stopped on its valid queries' filtered
MRR (expectation over ties) when ``valid_triples`` is given.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple, get_args

import numpy as np
import scipy.sparse as sp
import torch

from kg.grounding.sparse import Paths, SparseGraph
from rules.kg_constant_rules import ConstantRules, mine_constant_rules
from rules.kg_mining import RuleStatistics, directed_triples, rule_statistics
from rules.kg_nonredundant import (
    NonRedundant,
    Overlap,
    clusters,
    nonredundant_evidence,
    smoothed_confidence,
    with_evidence,
)
from rules.workers import WorkerPool, workers_pay

__all__ = [
    "Aggregator",
    "PredictorConfig",
    "RulePredictor",
    "expected_reciprocal_rank",
    "head_shares",
    "reached_reciprocal_rank",
]

Aggregator = Literal["sum", "max", "noisy-or"]
PathsChoice = Literal["walks", "simple", "auto"]
PATHS_CHOICES: tuple[str, ...] = get_args(PathsChoice)
ConstantsChoice = Literal["fixed", "auto"]
CONSTANTS_CHOICES: tuple[str, ...] = get_args(ConstantsChoice)
LengthsChoice = Literal["fixed", "auto"]
LENGTHS_CHOICES: tuple[str, ...] = get_args(LengthsChoice)
#: what a fit's log holds of a paths, constants or lengths "auto" choice (RulePredictor._choose)
CHOICE_KEYS = (
    "paths",
    "paths_valid_mrr",
    "constants",
    "constants_valid_mrr",
    "max_length",
    "max_length_valid_mrr",
    "trials_valid_mrr",
    "ways_skipped",
)
# a fit's arguments shared by every head: directed train and valid facts, the known answers of train and valid
# queries, epochs and seed
_FitJob = tuple[
    np.ndarray, np.ndarray | None, dict[tuple[int, int], set[int]], dict[tuple[int, int], set[int]], int, int
]
Feature = str  # "log1p", "count", "indicator", "fraction" or several joined by "+"
Body = tuple[int, ...]
_AGGREGATORS = ("sum", "max", "noisy-or")
_FEATURES = ("log1p", "count", "indicator", "fraction")


@dataclass
class PredictorConfig:
    """Training settings of :class:`RulePredictor` (defaults tuned on Kinship, RNNLogic split, by test MRR of
    single runs — see bench/results/kg_rules.json for the measured numbers)."""

    aggregator: Aggregator = "sum"
    feature: Feature = "log1p"
    # how a body is grounded: "walks" (RNNLogic's and Neural-LP's matrix products: an entity may repeat, so
    # ``~p, p, q`` also reaches what ``q`` reaches) or "simple" (simple paths, every variable a different entity:
    # AnyBURL's and AMIE's object identity; kg.grounding.sparse); "auto": every head is fitted both ways and the
    # predictor keeps the way with the better valid MRR over all heads' valid queries (twice the fitting time;
    # simple on a tie). The client's mining and confidences count simple paths unless this is "walks"
    paths: PathsChoice = "walks"
    entity_bias: bool = True
    lr: float = 0.02
    weight_decay: float = 1e-4  # L2 on rule weights and biases
    epochs: int = 100
    eval_every: int = 5
    patience: int = 4  # evaluations without improvement before stopping a head
    batch_size: int = 512  # queries per grounding batch (and per optimiser step)
    batch_nnz: int = 8_000_000  # at most this many grounding entries a batch: larger chunks are split by query
    max_train_queries: int | None = 4000  # sampled train facts per head (bounded time on FB15k-237)
    cache_nnz: int = 40_000_000  # cache a head's train features when they hold at most this many non-zeros
    max_fanout: int | None = None  # drop a (query, rule) grounding reaching more candidates than this (None: keep)
    seed: int = 0
    # "confidence": first-feature weights start at init_scale · the body's leave-one-out confidence on the training
    # queries (own fact removed; see RulePredictor._train_evidence) (Kinship,
    # 200 confidence-ranked rules: test MRR .630 from zero init -> .648 with scale 10, lr .02); "zero" = RNNLogic
    init: str = "confidence"  # or "amie": the body's AMIE confidence on the whole graph (own facts included)
    init_scale: float = 10.0
    # rules with constants q(X, c) <- b(X, d) and q(X, c) <- b(X, _) (rules.kg_constant_rules), mined per head from
    # the training facts on the grounding graph at fit time, each one more weighted rule: the best this many a head
    constant_rules: int = 0
    constant_min_support: int = 2
    # "fixed": constant_rules a head, as given; "auto": every head is fitted without and with its constant_rules (> 0)
    # rules with constants, and the predictor keeps, for all heads, the way with the better valid MRR over all
    # heads' valid queries (without on a tie; twice the fitting time, four times with paths "auto", chosen jointly).
    # They help on FB15k-237 and lower the MRR on Kinship and UMLS (docs/methods/fednsl-kg.md, Rules with constants)
    constants: ConstantsChoice = "fixed"
    # the longest path bodies fitted: bodies longer than max_length are left out of the fit (weight 0, never
    # grounded; None: every body). lengths "auto": once the ways above are chosen, every head is fitted again that
    # way without its longest bodies (length ≤ L − 1, L the longest of all heads' bodies, at most max_length), and
    # the predictor keeps, for all heads, the shorter rules when their valid MRR pooled over all heads' valid
    # queries is higher (the longer ones on a tie; one more fit of every head)
    max_length: int | None = None
    lengths: LengthsChoice = "fixed"
    # a learned prior over the candidate's relation types, added to b_q: s(e) += Σ_b u_qb · 1[e has a b-edge] (the
    # zero-length rules q(X, Y) <- b(Y, _), one weight per body relation b ∉ {q, q⁻¹}: those two would see the
    # query's own fact); it ranks type-compatible candidates that the per-entity bias has never seen as answers
    type_prior: bool = False
    # the training target: 0 = the answer alone, the other known answers of (h, q) filtered out of the softmax's
    # denominator; s > 0 = RNNLogic's smoothed target (``smoothing`` in its trainer): the answer weighs 1 and every
    # other known answer s, over the unfiltered softmax, normalised by the batch's summed target weight
    smoothing: float = 0.0
    # evaluate the starting weights on valid too, so a head keeps them when training does not improve its valid MRR
    # (a client with a few facts keeps the weights it started from, e.g. ones pooled over federated clients)
    eval_init: bool = False
    # fit the heads in this many worker processes (each one thread; the result equals the one-process fit); 1: in
    # this process. Sparse grounding runs on one core, so on FB15k-237 a second worker uses the second core
    workers: int = 1  # (used when the fit holds MIN_PARALLEL_WORK query-body pairs or more)
    # SAFRAN's non-redundant noisy-OR beside the fitted model (rules.kg_nonredundant): after a head is fitted, its
    # rules' confidences hits / (reached + nr_smoothing) on the training queries (own fact removed) and their
    # clusters by prediction overlap (Jaccard ≥ τ) give NR(e); the score becomes s(e) + β · −log(1 − NR(e)), or
    # for β = inf NR(e) itself with s breaking its ties. (τ, β) is chosen per head on valid from nr_thresholds ×
    # nr_betas, and a head keeps the fitted model alone unless NR raises its valid MRR. Needs valid_triples; changes
    # test-time scores only (training, the E-step's rule scores and the weights are the fitted model's)
    nonredundant: bool = False
    nr_thresholds: tuple[float, ...] = (1.01, 0.7, 0.3)  # τ > 1: no clustering (noisy-OR over rules)
    nr_betas: tuple[float, ...] = (1.0, math.inf)  # FB15k-237, 24 heads: only in place of s (inf) did NR gain
    nr_smoothing: float = 5.0  # AnyBURL's pessimistic correction of a rule's confidence

    def check(self) -> None:
        """Raise ValueError naming the first option whose value is out of range (its type is the reader's:
        ``fednsl.option_types.check_option_types``)."""
        if self.aggregator not in _AGGREGATORS:
            raise ValueError(f"aggregator must be one of {_AGGREGATORS}, got {self.aggregator!r}")
        if not self.feature or any(f not in _FEATURES for f in self.feature.split("+")):
            raise ValueError(f"feature must be one or more of {_FEATURES} joined by '+', got {self.feature!r}")
        if not 1 <= self.workers <= 64:
            raise ValueError(f"workers must be 1..64, got {self.workers!r}")
        if not 0.0 <= self.smoothing <= 1.0:
            raise ValueError(f"smoothing must be in [0, 1], got {self.smoothing!r}")
        if self.paths not in PATHS_CHOICES:
            raise ValueError(f"paths must be one of {PATHS_CHOICES}, got {self.paths!r}")
        if self.constants not in CONSTANTS_CHOICES:
            raise ValueError(f"constants must be one of {CONSTANTS_CHOICES}, got {self.constants!r}")
        if self.constants == "auto" and self.constant_rules < 1:
            raise ValueError(
                "constants 'auto' chooses whether to use rules with constants: it needs constant_rules > 0"
            )
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be 1 or more (or null: every body), got {self.max_length!r}")
        if self.lengths not in LENGTHS_CHOICES:
            raise ValueError(f"lengths must be one of {LENGTHS_CHOICES}, got {self.lengths!r}")


def expected_reciprocal_rank(scores: torch.Tensor, answers: torch.Tensor, filter_mask: torch.Tensor) -> torch.Tensor:
    """(B,) E[1/rank] of each answer over its tied block (RNNLogic's expectation), other answers filtered.

    scores (B, E); answers (B,); filter_mask (B, E) bool, True = remove (never the answer itself).
    With k = #strictly higher and n = #tied (answer included): E[1/rank] = (H_{k+n} − H_k) / n.
    """
    s = scores.masked_fill(filter_mask, float("-inf"))
    target = scores.gather(1, answers[:, None])
    higher = (s > target).sum(1).double()
    tied = (s == target).sum(1).double()
    return ((torch.digamma(higher + tied + 1) - torch.digamma(higher + 1)) / tied).float()


def reached_reciprocal_rank(
    prior: torch.Tensor,
    cells: torch.Tensor,
    reached: torch.Tensor,
    answers: torch.Tensor,
    filter_flat: torch.Tensor,
) -> torch.Tensor:
    """(B,) :func:`expected_reciprocal_rank` of scores that are ``prior`` (E,) everywhere except at the reached
    cells (U,) (sorted flat indices row · E + e), which score ``reached`` (U,) + prior[e]; without the (B, E) matrix.

    The answer's rivals are counted against the sorted prior (O(E log E + B log E)), then corrected at the
    reached and the filtered cells (O(U + m)); float32 sums as in the dense scores, so the result is the same to
    the bit. answers (B,); filter_flat (m,) flat indices of the other known answers (never an answer itself)."""
    B, E = answers.numel(), prior.numel()
    p = prior.detach().float().numpy()
    c = cells.numpy()
    v = reached.detach().float().numpy() + p[c % E]  # float32, as zeros.index_copy(...) + prior
    pos, hit = (t.numpy() for t in _positions(c, np.arange(B) * E + answers.numpy()))
    target = np.where(hit, v[pos] if c.size else 0.0, p[answers.numpy()]).astype(np.float32)
    ordered = np.sort(p)
    right = np.searchsorted(ordered, target, side="right")
    higher = (E - right).astype(np.int64)  # prior > target
    tied = (right - np.searchsorted(ordered, target, side="left")).astype(np.int64)

    def per_row(rows: np.ndarray, flags: np.ndarray) -> np.ndarray:
        return np.bincount(rows, weights=flags, minlength=B).astype(np.int64)

    f = np.unique(filter_flat.numpy())
    at, in_c = (t.numpy() for t in _positions(c, f))
    keep = np.ones(c.size, dtype=bool)
    keep[at[in_c]] = False
    # a reached cell replaces its prior's comparison by its own score's (none where it is filtered) ...
    rows, t, pc = c // E, target[c // E], p[c % E]
    higher += per_row(rows[keep], v[keep] > t[keep]) - per_row(rows, pc > t)
    tied += per_row(rows[keep], v[keep] == t[keep]) - per_row(rows, pc == t)
    # ... and a filtered cell no rule reaches loses its prior's
    f = f[~in_c]
    frows, ft, fp = f // E, target[f // E], p[f % E]
    higher -= per_row(frows, fp > ft)
    tied -= per_row(frows, fp == ft)
    k, n = torch.from_numpy(higher).double(), torch.from_numpy(tied).double()
    return ((torch.digamma(k + n + 1) - torch.digamma(k + 1)) / n).float()


def _cells(flat: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(flat, return_inverse=True) for flat indices in [0, size): by a (size,) marker instead of a sort
    when that is not much larger than flat (a batch's B·E cells against its groundings: ~15× faster on FB15k-237)."""
    if size > 8 * flat.size + 1_000_000:
        return np.unique(flat, return_inverse=True)
    mark = np.zeros(size, dtype=bool)
    mark[flat] = True
    rank = np.cumsum(mark, dtype=np.int64)
    return np.flatnonzero(mark), rank[flat] - 1


def _positions(cells: np.ndarray, flat: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each entry of ``flat`` sits in the sorted ``cells`` (clipped index, found?)."""
    pos = np.searchsorted(cells, flat).clip(max=max(cells.size - 1, 0))
    hit = cells[pos] == flat if cells.size else np.zeros(flat.size, dtype=bool)
    return torch.from_numpy(pos), torch.from_numpy(hit)


class _Reached(NamedTuple):
    """A batch's fixed index for :meth:`RulePredictor._reached_loss` (built on the first call)."""

    kept: torch.Tensor  # (K,) positions among the reached cells of those not filtered
    kept_rows: torch.Tensor  # (K,) their query rows
    kept_ents: torch.Tensor  # (K,) their candidates
    filter_rows: torch.Tensor  # (m,) the filtered cells' query rows
    filter_ents: torch.Tensor  # (m,) and candidates
    answer_pos: torch.Tensor  # (B,) where each answer's cell sits among the reached cells (clipped)
    answer_hit: torch.Tensor  # (B,) whether a rule reaches it
    filter_pos: torch.Tensor  # (m,) the same for the filtered cells
    filter_hit: torch.Tensor  # (m,)


@dataclass
class _Batch:
    """Sparse groundings of B queries of one head: entries (row·E + entity, rule, feature value)."""

    size: int
    flat: torch.Tensor  # (nnz,) int64 row * E + entity
    rule: torch.Tensor  # (nnz,) int64
    count: torch.Tensor  # (nnz,) float32 raw path counts
    total: torch.Tensor  # (nnz,) float32 the entry's row sum of counts for its rule (all paths from the query)
    answers: torch.Tensor  # (B,) int64 (or empty when unknown)
    filter_flat: torch.Tensor  # (m,) int64 row * E + entity of other known answers
    num_rules: int = 0  # J: the head's bodies (columns of the design matrix)
    design: tuple[torch.Tensor, sp.csr_matrix] | None = None  # sum aggregator, built once
    reached: _Reached | None = None  # _reached_loss's per-batch index

    @property
    def nnz(self) -> int:
        return int(self.flat.numel())


class _SparseLinear(torch.autograd.Function):
    """y = Φ · vec(w) with a fixed scipy CSR Φ (U, J·F); the backward is Φᵀ · g (Φ.T, a CSC view: no copy, and
    ~3× faster than a precomputed CSR transpose on 12M entries, 0.02 s against 0.06 s).

    A scipy mat-vec is ~10× faster on CPU than the gather / index_add pair it replaces (12M entries: 0.06 s vs
    0.57 s forward + backward), and the sum aggregator's score is exactly this linear map."""

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, phi: sp.csr_matrix) -> torch.Tensor:
        ctx.phi, ctx.shape = phi, w.shape
        return torch.from_numpy(np.asarray(phi @ w.detach().numpy().ravel(), dtype=np.float32))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        g = np.asarray(ctx.phi.T @ grad.detach().numpy().astype(np.float32, copy=False), dtype=np.float32)
        return torch.from_numpy(g).view(ctx.shape), None


@dataclass
class _HeadModel:
    weights: torch.Tensor  # (J, F) one weight per rule and feature
    bias: torch.Tensor | None  # (E,)
    log_scale: torch.Tensor  # () for max / noisy-or
    h_score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    type_weights: torch.Tensor | None = None  # (2R,) u_q of the type prior, 0 at q and q⁻¹
    type_mask: torch.Tensor | None = None  # (2R,) 1 except at q and q⁻¹
    evidence: tuple[np.ndarray, np.ndarray] | None = None  # (J,) hits and (J,) reached pairs on the train queries
    paths: Paths = "walks"  # how the head's bodies are grounded (PredictorConfig.paths, or the choice of "auto")
    max_length: int | None = None  # path bodies longer than this are left out (weight 0, never grounded)
    nonredundant: NonRedundant | None = None  # the non-redundant noisy-OR term chosen on valid (config.nonredundant)

    def parameters(self) -> list[torch.Tensor]:
        return [self.weights, self.log_scale, *(t for t in (self.bias, self.type_weights) if t is not None)]


#: one fit of a head under paths, constants or lengths "auto": its log, its model, its rules with constants (None:
#: without)
_Trial = tuple[dict[str, Any], _HeadModel, "ConstantRules | None"]
#: one way a head is fitted: how its bodies are grounded, with rules with constants or not, its longest bodies
_Way = tuple[Paths, bool, "int | None"]


def _label(paths: Paths, constants: bool, max_length: int | None = None) -> str:
    """The name of one way a head is fitted under "auto": ``walks``, ``simple``, ``walks+constants``,
    ``simple+length<=2``, ..."""
    return paths + ("+constants" if constants else "") + ("" if max_length is None else f"+length<={max_length}")


class RulePredictor:
    """Scores (h, q, ?) queries from rule groundings with learned weights per (head relation, rule).

    bodies_by_head: {q: [body, ...]} with q and body relations in 0..2R-1 (length 1..3).
    ``score(queries (B, 2))`` -> (B, E) after :meth:`fit` (or :meth:`set_graph` for untrained zero weights).
    """

    def __init__(
        self,
        bodies_by_head: Mapping[int, Sequence[Sequence[int]]],
        num_entities: int,
        aggregator: Aggregator = "sum",
        *,
        num_relations: int | None = None,
        config: PredictorConfig | None = None,
        init_confidence: Mapping[int, np.ndarray] | None = None,
        init_weights: Mapping[int, np.ndarray] | None = None,
        init_type_weights: Mapping[int, np.ndarray] | None = None,
    ) -> None:
        self.config = PredictorConfig() if config is None else config
        # per head (J_q,) confidences to start the path bodies' weights from instead of the local ones (NaN: keep the
        # local value); e.g. pooled over federated clients' evidence (``rule_evidence``), used with init "confidence"
        self.init_confidence = {int(q): np.asarray(c, dtype=np.float64) for q, c in (init_confidence or {}).items()}
        # per head (J_q,) first-feature weights of the path bodies to start from (NaN: the confidence start), and (2R,)
        # type-prior weights: e.g. the weights other clients fitted, averaged by the server (FedAvg's start)
        self.init_weights = {int(q): np.asarray(w, dtype=np.float64) for q, w in (init_weights or {}).items()}
        self.init_type_weights = {int(q): np.asarray(w, dtype=np.float64) for q, w in (init_type_weights or {}).items()}
        if aggregator != self.config.aggregator:
            self.config = PredictorConfig(**{**asdict(self.config), "aggregator": aggregator})
        self.config.check()
        self.features = tuple(self.config.feature.split("+"))
        self.num_entities = int(num_entities)
        self.num_relations = num_relations
        self.bodies: dict[int, list[Body]] = {}
        for q, bodies in bodies_by_head.items():
            uniq = list(dict.fromkeys(tuple(int(x) for x in b) for b in bodies))
            if any(len(b) == 0 for b in uniq):
                raise ValueError(f"head {q}: empty body")
            self.bodies[int(q)] = uniq
        self.graph: SparseGraph | None = None  # counting as counted_paths(config.paths)
        self._graphs: dict[str, SparseGraph] = {}  # by paths: the graph, and for "auto" its walks twin
        self._mined: dict[int, ConstantRules] = {}  # a fit's rules with constants by head, mined once for all ways
        self.models: dict[int, _HeadModel] = {}
        self.constants: dict[int, ConstantRules] = {}  # per head, mined by fit when config.constant_rules > 0

    # ------------------------------------------------------------------ graph
    def _infer_relations(self, *arrays: np.ndarray) -> int:
        if self.num_relations is not None:
            return int(self.num_relations)
        top = max((int(a[:, 1].max()) + 1 for a in arrays if a.size), default=1)
        ids = [q for q in self.bodies] + [x for bs in self.bodies.values() for b in bs for x in b]
        need = (max(ids) // 2 + 1) if ids else 1
        return max(top, need)

    def set_graph(self, graph_triples: np.ndarray | torch.Tensor, num_relations: int | None = None) -> SparseGraph:
        """Ground on ``graph_triples`` (n, 3), relations 0..R-1 (inverses added) from now on."""
        arr = _np(graph_triples)
        if num_relations is not None:
            self.num_relations = int(num_relations)
        R = self._infer_relations(arr)
        self.num_relations = R
        for q, bodies in self.bodies.items():
            if not 0 <= q < 2 * R or any(not 0 <= x < 2 * R for b in bodies for x in b):
                raise ValueError(f"head {q}: a relation id is outside [0, {2 * R}) for R = {R} relations")
        self.graph = SparseGraph.from_triples(arr, self.num_entities, R, paths=counted_paths(self.config.paths))
        self._graphs = {self.graph.paths: self.graph}
        if self.config.paths == "auto":
            self._graphs["walks"] = self.graph.with_paths("walks")
        return self.graph

    def _graph_of(self, q: int) -> SparseGraph:
        """The graph head q's bodies ground on (its model's ``paths``; :attr:`graph` before it has one)."""
        assert self.graph is not None
        model = self.models.get(q)
        return self.graph if model is None else self._graphs[model.paths]

    # ------------------------------------------------------------------ features
    def _batches(
        self, q: int, queries: np.ndarray, known: dict[tuple[int, int], set[int]] | None, exclude_own: bool
    ) -> Iterator[_Batch]:
        """Ground ``queries`` (n, 2) [h, t] of head q in batches (t = -1: unknown answer).

        Queries are grounded ``batch_size`` at a time; a chunk whose groundings exceed ``batch_nnz`` is split by
        query rows into batches of at most ``batch_nnz`` entries (one query may exceed it alone), and the head's
        later chunks shrink to about ``batch_nnz`` entries, so one batch's design matrix stays bounded on hub
        relations."""
        assert self.graph is not None
        cap = self.config.batch_nnz
        step = self.config.batch_size
        lo = 0
        while lo < queries.shape[0]:
            chunk = queries[lo : lo + step]
            lo += chunk.shape[0]
            flat, rule, count, total = self._ground(q, chunk, exclude_own)
            if flat.size <= cap:
                yield self._batch(q, chunk, flat, rule, count, total, known)
                continue
            step = max(1, int(chunk.shape[0] * cap / flat.size))
            E = self.num_entities
            rows = flat // E
            order = np.argsort(rows, kind="stable")
            flat, rule, count, total = flat[order], rule[order], count[order], total[order]
            ends = np.cumsum(np.bincount(rows, minlength=chunk.shape[0]))  # ends[i]: entries of rows 0..i
            a = 0
            while a < chunk.shape[0]:
                start = ends[a - 1] if a else 0
                b = max(a + 1, int(np.searchsorted(ends, start + cap, side="right")))
                sl = slice(start, ends[b - 1])
                yield self._batch(q, chunk[a:b], flat[sl] - a * E, rule[sl], count[sl], total[sl], known)
                a = b

    def _ground(
        self, q: int, chunk: np.ndarray, exclude_own: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Grounding entries of a query chunk (B, 2): (flat row·E + entity, rule, path count, row total of the
        rule's counts), path bodies first, then the constant rules (column J + k points at its constant answer)."""
        assert self.graph is not None
        E = self.num_entities
        bodies = self.bodies.get(q, [])
        b = chunk.shape[0]
        heads = chunk[:, 0]
        excl = np.stack([heads, np.full(b, q), chunk[:, 1]], axis=1) if exclude_own else None
        flats, rules, counts, totals = [], [], [], []
        kept = self._kept_bodies(q)
        if kept.size:
            shown = bodies if kept.size == len(bodies) else [bodies[j] for j in kept]
            paths = self._graph_of(q).path_entries(shown, heads, excl, self.config.max_fanout)
            flats.append(paths.row * E + paths.col)
            rules.append(paths.body if kept.size == len(bodies) else kept[paths.body])
            counts.append(paths.count)
            totals.append(paths.total)
        constants = self.constants.get(q)
        if constants is not None and len(constants):
            coo = constants.fires(self.graph, heads, chunk[:, 1] if exclude_own else None).tocoo()
            flats.append(coo.row.astype(np.int64) * E + constants.answer[coo.col])
            rules.append(len(bodies) + coo.col.astype(np.int64))
            counts.append(np.ones(coo.nnz, dtype=np.float32))
            totals.append(np.ones(coo.nnz, dtype=np.float32))
        if not flats:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.float32)
        return np.concatenate(flats), np.concatenate(rules), np.concatenate(counts), np.concatenate(totals)

    def _kept_bodies(self, q: int) -> np.ndarray:
        """(K,) indices of head q's path bodies its model grounds: those no longer than its ``max_length``."""
        bodies = self.bodies.get(q, [])
        model = self.models.get(q)
        cap = None if model is None else model.max_length
        return np.array([j for j, b in enumerate(bodies) if cap is None or len(b) <= cap], dtype=np.int64)

    def _batch(
        self,
        q: int,
        chunk: np.ndarray,
        flat: np.ndarray,
        rule: np.ndarray,
        count: np.ndarray,
        total: np.ndarray,
        known: dict[tuple[int, int], set[int]] | None,
    ) -> _Batch:
        E = self.num_entities
        filt: list[int] = []
        if known is not None:
            for i, (h, t) in enumerate(chunk):
                filt.extend(i * E + o for o in known.get((int(h), q), ()) if o != t)
        return _Batch(
            chunk.shape[0],
            torch.from_numpy(flat),
            torch.from_numpy(rule),
            torch.from_numpy(count),
            torch.from_numpy(total),
            torch.from_numpy(chunk[:, 1].copy()),
            torch.tensor(filt, dtype=torch.int64),
            self.num_rules(q),
        )

    def _design(self, batch: _Batch) -> tuple[torch.Tensor, sp.csr_matrix]:
        """(cells (U,), Φ (U, J·F)) of a batch for the sum aggregator: the U distinct (query, candidate) cells
        some rule reaches and their feature values, Φ[u, j·F + k] = φ_k(f_j(cell u))."""
        if batch.design is None:
            J, F = batch.num_rules, len(self.features)
            cells, inverse = _cells(batch.flat.numpy(), batch.size * self.num_entities)
            phi = self._phi(batch).numpy()
            # CSR by counting rows: entries in cell order, a cell's entries in their grounding order, each entry's
            # F features side by side; sorted within rows, it is the canonical matrix np.unique + coo would give
            order = np.argsort(inverse, kind="stable")
            cols = batch.rule.numpy()[order, None] * F + np.arange(F)[None, :]
            indptr = np.zeros(cells.size + 1, dtype=np.int64)
            np.cumsum(np.bincount(inverse, minlength=cells.size) * F, out=indptr[1:])
            mat = sp.csr_matrix((phi[order].ravel(), cols.ravel(), indptr), shape=(cells.size, J * F), dtype=np.float32)
            mat.sort_indices()  # a check only, unless rules met a cell out of their column order
            batch.design = (torch.from_numpy(cells), mat)
        return batch.design

    def _phi(self, batch: _Batch) -> torch.Tensor:
        """(nnz, F) feature values of every grounding entry."""
        cols = []
        for f in self.features:
            if f == "log1p":
                cols.append(torch.log1p(batch.count))
            elif f == "indicator":
                cols.append((batch.count > 0).to(batch.count.dtype))
            elif f == "fraction":
                cols.append(batch.count / batch.total.clamp(min=1e-12))
            else:
                cols.append(batch.count)
        return torch.stack(cols, dim=1)

    def _contributions(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        """(nnz,) each grounding entry's term in its candidate's score (RNNLogic's per-rule score y_rule(e))."""
        agg = self.config.aggregator
        if agg == "sum":
            return (model.weights[batch.rule] * self._phi(batch)).sum(1)
        conf = torch.sigmoid(model.weights[:, 0])[batch.rule]
        if agg == "max":
            return conf
        return -torch.log1p(-conf.clamp(max=1 - 1e-6)) * batch.count  # noisy-or: −f·log(1 − c)

    def _prior(self, model: _HeadModel) -> torch.Tensor | None:
        """(E,) the candidates' score before any rule: entity bias b_q plus the type prior, or None."""
        if model.type_weights is None:
            return model.bias
        assert model.type_mask is not None and self.graph is not None
        prior = _SparseLinear.apply(model.type_weights * model.type_mask, self.graph.relation_types())
        return prior if model.bias is None else prior + model.bias

    def _logits(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        E = self.num_entities
        agg = self.config.aggregator
        if agg == "sum":  # linear in the weights: one sparse mat-vec over the reached cells
            cells, phi = self._design(batch)
            reached = _SparseLinear.apply(model.weights, phi)
            s = torch.zeros(batch.size * E).index_copy(0, cells, reached)
        elif agg == "max":
            contrib = self._contributions(model, batch)
            s = torch.zeros(batch.size * E).scatter_reduce(0, batch.flat, contrib, reduce="amax", include_self=True)
            s = s * model.log_scale.exp()
        else:
            acc = torch.zeros(batch.size * E).index_add(0, batch.flat, self._contributions(model, batch))
            s = -torch.expm1(-acc) * model.log_scale.exp()
        s = s.view(batch.size, E)
        prior = self._prior(model)
        if prior is not None:
            s = s + prior
        return s

    def _loss(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        """Softmax cross-entropy of the batch's answers over all E candidates.

        ``smoothing`` s = 0: the mean over queries, other known answers removed from the denominator. s > 0
        (RNNLogic's trainer): target 1 on the answer and s on each other known answer a, unfiltered softmax,
        loss = −Σ_rows (log p_t + s Σ_a log p_a) / Σ_rows (1 + s·|A_row|). Sum aggregator on a sparse batch
        (reached cells < 1/4 of B·E): computed exactly on the reached cells only (:meth:`_reached_loss`);
        otherwise on the dense (B, E) logits."""
        if self._few_reached(batch):
            return self._reached_loss(model, batch)
        return self._dense_loss(model, batch)

    def _few_reached(self, batch: _Batch) -> bool:
        """Sum aggregator and reached cells < 1/4 of the batch's B·E: the loss and the valid ranking are computed
        on the reached cells, not on the dense (B, E) logits."""
        return self.config.aggregator == "sum" and 4 * self._design(batch)[0].numel() < batch.size * self.num_entities

    def _dense_loss(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        """:meth:`_loss` on the dense (B, E) logits."""
        logits = self._logits(model, batch)
        s = self.config.smoothing
        if s > 0:
            logp = torch.log_softmax(logits, dim=1)
            num = logp.gather(1, batch.answers[:, None]).sum() + s * logp.view(-1)[batch.filter_flat].sum()
            return -num / (batch.size + s * batch.filter_flat.numel())
        logits = logits.view(-1).index_fill(0, batch.filter_flat, float("-inf")).view(batch.size, -1)
        return torch.nn.functional.cross_entropy(logits, batch.answers)

    def _reached_loss(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        """The cross-entropy without the dense (B, E) logits. A candidate no rule reaches scores its bias b_e, so
        with reached cells C, filtered cells F and rule scores r on C, per query row

            Z = Σ_{e∉F} e^{b_e} + Σ_{e∈C∖F} e^{b_e} (e^{r_e} − 1),     loss = log Z − (b_t + r_t)

        evaluated in float64 with a per-row shift M ≥ every logit (O(|C| + |F| + E) instead of O(B · E)). With
        ``smoothing`` s > 0 nothing is filtered (F = ∅ in Z) and the other known answers a enter the numerator
        with weight s (:meth:`_loss`)."""
        E, B = self.num_entities, batch.size
        s = self.config.smoothing
        cells, phi = self._design(batch)
        if batch.reached is None:  # fixed per batch: the unfiltered reached cells' rows and entities, the filtered
            # cells' rows and entities, and where the answers and the filtered cells sit among the reached cells
            c = cells.numpy()
            flat_f = batch.filter_flat.numpy()
            kept = np.flatnonzero(~np.isin(c, flat_f)) if s == 0 else np.arange(c.size)
            answer = np.arange(B) * E + batch.answers.numpy()
            batch.reached = _Reached(
                torch.from_numpy(kept),
                torch.from_numpy(c[kept] // E),
                torch.from_numpy(c[kept] % E),
                batch.filter_flat // E,
                batch.filter_flat % E,
                *_positions(c, answer),
                *_positions(c, flat_f),
            )
        at = batch.reached
        r = _SparseLinear.apply(model.weights, phi).double()
        prior = self._prior(model)
        b = prior.double() if prior is not None else torch.zeros(E, dtype=torch.float64)
        m = b.max().detach()
        total = torch.exp(b - m).sum()
        filtered = torch.zeros(B, dtype=torch.float64)
        if s == 0:
            filtered = filtered.index_add(0, at.filter_rows, torch.exp(b[at.filter_ents] - m))
        b_kept = b[at.kept_ents]
        logit = b_kept + r[at.kept]
        shift = torch.full((B,), float(m), dtype=torch.float64)
        shift = shift.scatter_reduce(0, at.kept_rows, logit.detach(), reduce="amax", include_self=True)
        row_shift = shift[at.kept_rows]
        reached = torch.exp(logit - row_shift) - torch.exp(b_kept - row_shift)
        z = torch.exp(m - shift) * (total - filtered) + torch.zeros(B, dtype=torch.float64).index_add(
            0, at.kept_rows, reached
        )
        zero = torch.zeros((), dtype=torch.float64)
        r_answer = torch.where(at.answer_hit, r[at.answer_pos], zero) if cells.numel() else 0.0
        log_z = shift + torch.log(z.clamp(min=1e-300))
        loss = log_z - (b[batch.answers] + r_answer)
        if s == 0:
            return loss.mean().float()
        r_other = torch.where(at.filter_hit, r[at.filter_pos], zero) if cells.numel() else 0.0
        other = (b[at.filter_ents] + r_other) - log_z[at.filter_rows]
        return ((loss.sum() - s * other.sum()) / (B + s * batch.filter_flat.numel())).float()

    def num_rules(self, q: int) -> int:
        """Columns of head q's design matrix: its path bodies, then its constant rules."""
        constants = self.constants.get(q)
        return len(self.bodies.get(q, [])) + (len(constants) if constants is not None else 0)

    def _new_model(self, q: int, paths: Paths | None = None, max_length: int | None = None) -> _HeadModel:
        J = self.num_rules(q)
        F = len(self.features)
        w = torch.zeros(J, F) if self.config.aggregator == "sum" else torch.full((J, F), -2.0)
        bias = torch.zeros(self.num_entities) if self.config.entity_bias else None
        paths = paths or counted_paths(self.config.paths)
        model = _HeadModel(w, bias, torch.tensor(math.log(5.0)), paths=paths, max_length=max_length)
        if self.config.type_prior:
            R2 = 2 * int(self.num_relations or 0)
            model.type_weights = torch.zeros(R2)
            model.type_mask = torch.ones(R2)
            model.type_mask[[q, (q + R2 // 2) % R2]] = 0.0
        return model

    # ------------------------------------------------------------------ training
    def fit(
        self,
        graph_triples: np.ndarray | torch.Tensor,
        train_triples: np.ndarray | torch.Tensor,
        valid_fn: Callable[[RulePredictor], Any] | None = None,
        epochs: int | None = None,
        seed: int | None = None,
        *,
        valid_triples: np.ndarray | torch.Tensor | None = None,
        filter_triples: np.ndarray | torch.Tensor | None = None,
        num_relations: int | None = None,
        heads: Sequence[int] | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Train the rule weights of every head relation (0..2R-1) with bodies.

        graph_triples (n, 3): the graph grounded on (usually = train); train_triples (n, 3): the supervised facts
        (both directions are used: (h, r, t) trains head r, (t, r+R, h) trains head r+R); valid_triples: per-head
        early stopping on filtered valid MRR (filter = ``filter_triples``, default train ∪ valid); valid_fn:
        called once after training with this predictor, its result is logged as ``"valid"``. deadline (a
        ``time.perf_counter()`` value): under paths or constants "auto" the ways (:meth:`_variants`) are fitted one
        after the other, all heads each, and a further way only when, by the longest way so far, it would end
        before the deadline; the choice is made among the ways fitted (the first always is; log ``ways_skipped``).
        Within a way each head stops training once its share of the time left (:func:`head_shares`) has passed,
        after ``eval_every`` epochs at the least, and is evaluated on valid there (its log's ``budget_cut_epoch``;
        the fit log's ``heads_cut``, the kept way's).
        Returns a log {heads: {q: {...}}, seconds, valid}.
        """
        cfg = self.config
        epochs = cfg.epochs if epochs is None else int(epochs)
        seed = cfg.seed if seed is None else int(seed)
        g_arr, tr_arr = _np(graph_triples), _np(train_triples)
        va_arr = None if valid_triples is None else _np(valid_triples)
        self.set_graph(g_arr, num_relations)
        R = int(self.num_relations)  # type: ignore[arg-type]
        train_dir = directed_triples(tr_arr, R)
        known_train = _known(train_dir)
        valid_dir = None if va_arr is None else directed_triples(va_arr, R)
        if filter_triples is not None:
            known_valid = _known(directed_triples(_np(filter_triples), R))
        else:
            known_valid = _known(np.concatenate([train_dir, valid_dir]) if valid_dir is not None else train_dir)
        t0 = time.perf_counter()
        log: dict[str, Any] = {"heads": {}, "config": asdict(cfg)}
        todo = sorted(self.bodies) if heads is None else sorted(int(q) for q in heads)
        job = (train_dir, valid_dir, known_train, known_valid, epochs, seed)
        facts = np.bincount(train_dir[:, 1], minlength=2 * int(R))
        queries = facts if cfg.max_train_queries is None else np.minimum(facts, cfg.max_train_queries)
        work = [int(queries[q]) * len(self.bodies.get(q, [])) for q in todo]
        log["work"], log["workers"] = sum(work), (cfg.workers if workers_pay(work, cfg.workers) else 1)
        variants = self._variants()
        fits: dict[str, dict[int, _Trial]] = {}  # every way fitted: head -> (log, model, rules with constants)
        self._mined = {}
        took: list[float] = []

        def too_late() -> bool:  # a further way would end after the deadline, by the longest way so far
            return deadline is not None and time.perf_counter() + max(took) > deadline

        with contextlib.ExitStack() as stack:  # worker processes, started once for every way
            pool = stack.enter_context(WorkerPool(cfg.workers, (self, job))) if log["workers"] > 1 else None
            for i, way in enumerate(variants):
                if i and too_late():
                    log["ways_skipped"] = [_label(*v) for v in variants[i:]]
                    break
                began = time.perf_counter()
                fits[_label(*way)] = self._fit_way(todo, way, job, pool, work, deadline)
                took.append(time.perf_counter() - began)
            shorter = self._shorter_way(todo, variants, fits)
            if shorter is not None:
                if too_late():
                    log["ways_skipped"] = [*log.get("ways_skipped", []), _label(*shorter)]
                else:
                    fits[_label(*shorter)] = self._fit_way(todo, shorter, job, pool, work, deadline)
        self._mined = {}
        if len(variants) > 1 or cfg.lengths == "auto":
            log.update(self._choose(todo, log["heads"], fits, shorter))
        else:
            self._keep(todo, log["heads"], fits[_label(*variants[0])])
        if deadline is not None:
            log["heads_cut"] = sum(1 for q in todo if "budget_cut_epoch" in log["heads"][q])
        if cfg.constant_rules > 0:
            log["constant_rules"] = sum(len(self.constants[q]) for q in todo if q in self.constants)
        if cfg.nonredundant:
            log["nonredundant_heads"] = sum(1 for q in todo if self.models[q].nonredundant is not None)
        log["seconds"] = time.perf_counter() - t0
        if valid_fn is not None:
            log["valid"] = valid_fn(self)
        return log

    def _fit_way(
        self,
        heads: Sequence[int],
        way: _Way,
        job: _FitJob,
        pool: WorkerPool[tuple[RulePredictor, _FitJob]] | None,
        work: Sequence[int],
        deadline: float | None = None,
    ) -> dict[int, _Trial]:
        """Fit every head one way (paths, with rules with constants, longest bodies), the largest ``work`` first, in
        the ``pool``'s processes when given; the heads are independent (own seed, own model), so the fits equal the
        one-process fits. With a ``deadline`` each head stops training once its :func:`head_shares` share of the
        time left when it starts has passed (after ``eval_every`` epochs at the least). Returns head -> (its log, its
        model, its rules with constants or None)."""
        order = sorted(range(len(heads)), key=lambda i: -work[i])  # as WorkerPool.map takes them
        shares = head_shares([work[i] for i in order], 1 if pool is None else pool.workers)
        budget: list[tuple[float, float] | None] = [None] * len(heads)
        if deadline is not None:
            for i, share in zip(order, shares, strict=True):
                budget[i] = (deadline, share)
        if pool is not None:
            items = [(q, way, self._mined.get(q), b) for q, b in zip(heads, budget, strict=True)]
            done = pool.map(_worker_fit, items, work)
        else:
            by_order = {i: self._fit_head(heads[i], way, job, budget[i]) for i in order}
            done = [by_order[i] for i in range(len(heads))]
        for q, (_, _, rules) in zip(heads, done, strict=True):
            if rules is not None:
                self._mined[q] = rules  # the next way with constants takes them as they are
        return dict(zip(heads, done, strict=True))

    def _fit_head(self, q: int, way: _Way, job: _FitJob, budget: tuple[float, float] | None = None) -> _Trial:
        """Fit head q one way: with its ``constant_rules`` rules with constants (mined on the first way that needs
        them) or without, its path bodies up to the way's longest; ``budget`` (deadline, share) as in
        :meth:`_fit_head_on`. Returns its log, its model and those rules (None without)."""
        paths, constants, max_length = way
        rules = None
        if constants:
            rules = self._mined.get(q)
            if rules is None:
                assert self.graph is not None
                train_dir, seed = job[0], job[5]
                rules = mine_constant_rules(
                    self.graph,
                    q,
                    train_dir[train_dir[:, 1] == q][:, [0, 2]],
                    self.config.constant_rules,
                    min_support=self.config.constant_min_support,
                    seed=seed,
                )
            self.constants[q] = rules
        else:
            self.constants.pop(q, None)
        head_log = self._fit_head_on(q, paths, job, budget, max_length)
        return head_log, self.models[q], rules

    def _keep(self, heads: Sequence[int], logs: dict[int, dict[str, Any]], fits: Mapping[int, _Trial]) -> None:
        """Every head takes its fit of one way: its log, its model and its rules with constants."""
        for q in heads:
            logs[q], self.models[q], rules = fits[q]
            if rules is not None:
                self.constants[q] = rules
            else:
                self.constants.pop(q, None)

    def _variants(self) -> list[_Way]:
        """The ways every head is fitted, (paths, with rules with constants, longest bodies), in order of preference
        on a tie: both paths under paths "auto" (simple first), without and with constants under constants
        "auto"; bodies up to ``max_length``."""
        cfg = self.config
        ways: tuple[Paths, ...] = ("simple", "walks") if cfg.paths == "auto" else (counted_paths(cfg.paths),)
        constants = (False, True) if cfg.constants == "auto" else (cfg.constant_rules > 0,)
        return [(paths, c, cfg.max_length) for c in constants for paths in ways]

    def _shorter_way(
        self, heads: Sequence[int], variants: Sequence[_Way], fits: Mapping[str, Mapping[int, _Trial]]
    ) -> _Way | None:
        """Under lengths "auto": the best way fitted so far (:meth:`_pooled`) without the longest bodies of
        ``heads`` (those of length L, the longest fitted); None otherwise, or when no body is longer than 1."""
        longest = self._longest(heads)
        if self.config.lengths != "auto" or longest < 2:
            return None
        fitted = [v for v in variants if _label(*v) in fits]
        pooled = self._pooled(heads, fits, _label(*fitted[0]))
        paths, constants, _ = max(fitted, key=lambda v: pooled[_label(*v)])
        return paths, constants, longest - 1

    def _longest(self, heads: Sequence[int]) -> int:
        """The longest path body of ``heads`` fitted (at most ``max_length``; 0 without bodies)."""
        cap = self.config.max_length
        return max((len(b) for q in heads for b in self.bodies.get(q, []) if cap is None or len(b) <= cap), default=0)

    @staticmethod
    def _pooled(heads: Sequence[int], fits: Mapping[str, Mapping[int, _Trial]], first: str) -> dict[str, float]:
        """{way label: its valid MRR pooled over all ``heads``' valid queries} (as counted by way ``first``)."""
        total = dict.fromkeys(fits, 0.0)
        n = 0
        for q in heads:
            k = int(fits[first][q][0].get("valid_queries", 0))
            n += k
            for label, way in fits.items():
                total[label] += k * max(float(way[q][0].get("best_valid_mrr", 0.0)), 0.0)
        return {label: v / max(n, 1) for label, v in total.items()}

    def _choose(
        self,
        heads: Sequence[int],
        logs: dict[int, dict[str, Any]],
        fits: Mapping[str, Mapping[int, _Trial]],
        shorter: _Way | None = None,
    ) -> dict[str, Any]:
        """For paths, constants or lengths "auto": of the ways fitted (``fits``, by :func:`_label`; ``shorter``
        last, when fitted), the one with the better valid MRR pooled over all heads' valid queries (the first in
        :meth:`_variants` on a tie, the longer bodies on a tie with ``shorter``); every head keeps its fit of that
        way, and its log its valid MRR every way. Returns the fit log's entries: ``trials_valid_mrr`` (pooled, by
        :func:`_label`), and for paths "auto" ``paths`` and ``paths_valid_mrr``, for constants "auto"
        ``constants`` ("on"/"off") and ``constants_valid_mrr``, each pooled at the other choice (the ways fitted
        only), for lengths "auto" ``max_length`` (the length of the longest bodies kept) and
        ``max_length_valid_mrr`` (by that length)."""
        variants = [v for v in [*self._variants(), *([shorter] if shorter else [])] if _label(*v) in fits]
        pooled = self._pooled(heads, fits, _label(*variants[0]))
        paths, constants, max_length = max(variants, key=lambda v: pooled[_label(*v)])  # the first best on a tie
        self._keep(heads, logs, fits[_label(paths, constants, max_length)])
        cap = self.config.max_length
        for q in heads:
            by_way = {label: way[q][0].get("best_valid_mrr", -1.0) for label, way in fits.items()}
            logs[q] = {**logs[q], "trials_valid_mrr": by_way}
            if self.config.paths == "auto":
                names = {p: _label(p, constants, cap) for p in ("simple", "walks")}
                logs[q]["paths_valid_mrr"] = _tried(by_way, names)
        out: dict[str, Any] = {"trials_valid_mrr": pooled}
        if self.config.paths == "auto":
            out["paths"] = paths
            out["paths_valid_mrr"] = _tried(pooled, {p: _label(p, constants, cap) for p in ("simple", "walks")})
        if self.config.constants == "auto":
            out["constants"] = "on" if constants else "off"
            out["constants_valid_mrr"] = _tried(
                pooled, {"off": _label(paths, False, cap), "on": _label(paths, True, cap)}
            )
        if self.config.lengths == "auto":
            longest = self._longest(heads)
            out["max_length"] = longest if max_length is None else min(max_length, longest)
            names = {str(longest): _label(paths, constants, cap)}
            if shorter is not None:
                names[str(shorter[2])] = _label(*shorter)
            out["max_length_valid_mrr"] = _tried(pooled, names)
        return out

    def _fit_head_on(
        self,
        q: int,
        paths: Paths,
        job: _FitJob,
        budget: tuple[float, float] | None = None,
        max_length: int | None = None,
    ) -> dict[str, Any]:
        """Fit head q's model with its bodies grounded as ``paths``, those longer than ``max_length`` left out
        (weight 0); returns the head's log. ``budget`` (deadline,
        share): training stops after the first epoch that ends ``share`` of the time from this call to the
        deadline later, but never before epoch ``eval_every`` (the first valid evaluation); the head is then
        evaluated on valid and keeps its best evaluated weights as under early stopping, and its log gives
        ``budget_cut_epoch``."""
        train_dir, valid_dir, known_train, known_valid, epochs, seed = job
        cfg = self.config
        t0 = time.perf_counter()
        stop_at = None if budget is None else t0 + budget[1] * max(0.0, budget[0] - t0)
        cut = 0
        rng = np.random.default_rng([seed, q])
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        rows = train_dir[train_dir[:, 1] == q][:, [0, 2]]
        if cfg.max_train_queries is not None and rows.shape[0] > cfg.max_train_queries:
            rows = rows[np.sort(rng.choice(rows.shape[0], size=cfg.max_train_queries, replace=False))]
        model = self._new_model(q, paths, max_length)
        self.models[q] = model

        if rows.shape[0] == 0:
            return {"train_queries": 0}
        vrows = None if valid_dir is None else valid_dir[valid_dir[:, 1] == q][:, [0, 2]]
        train_batches = self._cached(self._batches(q, rows, known_train, exclude_own=True))
        cached = train_batches is not None
        if train_batches is None:
            train_batches = []
        valid_batches = list(self._batches(q, vrows, known_valid, exclude_own=False)) if vrows is not None else []
        if cfg.init in ("confidence", "amie") and self.num_rules(q):
            if cfg.init == "amie":
                assert self.graph is not None
                none = np.zeros(0)
                graph = self._graph_of(q)
                amie = rule_statistics(graph, q, self.bodies[q]).confidence if self.bodies.get(q) else none
                constants = self.constants.get(q)
                extra = constants.confidence if constants is not None else none
                conf = torch.from_numpy(np.concatenate([amie, extra])).float()
            else:
                hits, size = self._train_evidence(
                    q, train_batches if cached else self._batches(q, rows, known_train, exclude_own=True)
                )
                J = len(self.bodies.get(q, []))
                model.evidence = (hits[:J].numpy(), size[:J].numpy())
                conf = (hits / size.clamp(min=1)).float()
                conf[:J] = _given_or(self.init_confidence.get(q), conf[:J])
            if cfg.aggregator == "sum":
                model.weights[:, 0] = cfg.init_scale * conf
            else:
                model.weights[:, 0] = torch.logit(conf.clamp(1e-3, 1 - 1e-3))
        self._start_from_given(q, model)
        left_out = np.setdiff1d(np.arange(len(self.bodies.get(q, []))), self._kept_bodies(q))
        off = 0.0 if cfg.aggregator == "sum" else float(torch.logit(torch.tensor(1e-3)))  # σ(w) ≈ 0: max, noisy-or
        model.weights[left_out] = off  # never grounded: they weigh nothing (and weight decay is undone below)
        params = model.parameters()
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.Adam(params, lr=cfg.lr)
        best = (-1.0, -1)
        best_state = [p.detach().clone() for p in params]
        bad = 0
        history = []
        if valid_batches and cfg.eval_init:
            best = (self._mrr(model, valid_batches), 0)
            history.append(best[::-1])
        for epoch in range(1, epochs + 1):
            batches: Sequence[_Batch] | Iterator[_Batch] = (
                train_batches if cached else self._batches(q, rows, known_train, exclude_own=True)
            )
            order = torch.randperm(len(train_batches), generator=gen).tolist() if cached else None
            seq = [train_batches[i] for i in order] if order is not None else batches
            for batch in seq:
                loss = self._loss(model, batch)
                reg = cfg.weight_decay * sum((p * p).sum() for p in params)
                opt.zero_grad()
                (loss + reg).backward()
                opt.step()
            out_of_time = stop_at is not None and cfg.eval_every <= epoch < epochs and time.perf_counter() >= stop_at
            if valid_batches and (epoch % cfg.eval_every == 0 or epoch == epochs or out_of_time):
                mrr = self._mrr(model, valid_batches)
                history.append((epoch, mrr))
                if mrr > best[0]:
                    best = (mrr, epoch)
                    best_state = [p.detach().clone() for p in params]
                    bad = 0
                else:
                    bad += 1
                    if bad >= cfg.patience:
                        break
            if out_of_time:
                cut = epoch
                break
        if valid_batches:
            with torch.no_grad():
                for p, b in zip(params, best_state):
                    p.copy_(b)
        for p in params:
            p.requires_grad_(False)
        model.weights[left_out] = off
        h_score = self._h_scores(model, train_batches if cached else self._batches(q, rows, known_train, True))
        model.h_score = h_score[: len(self.bodies.get(q, []))]  # the E-step scores path bodies only
        if cfg.nonredundant and valid_batches and self.num_rules(q):
            again = train_batches if cached else self._batches(q, rows, known_train, exclude_own=True)
            model.nonredundant = self._choose_nonredundant(q, model, again, valid_batches, best[0])
        chosen = model.nonredundant
        nr = (
            None
            if chosen is None
            else {"threshold": chosen.threshold, "beta": chosen.beta, "valid_mrr": chosen.valid_mrr}
        )
        return {
            "train_queries": int(rows.shape[0]),
            "valid_queries": 0 if vrows is None else int(vrows.shape[0]),
            "best_valid_mrr": best[0],
            "best_epoch": best[1],
            "history": history,
            "cached": cached,
            "seconds": time.perf_counter() - t0,
            **({"budget_cut_epoch": cut} if cut else {}),
            **({"nonredundant": nr} if cfg.nonredundant else {}),
        }

    @torch.no_grad()
    def _choose_nonredundant(
        self,
        q: int,
        model: _HeadModel,
        train_batches: Sequence[_Batch] | Iterator[_Batch],
        valid_batches: Sequence[_Batch],
        fitted_mrr: float,
    ) -> NonRedundant | None:
        """The (τ, β) of ``nr_thresholds`` × ``nr_betas`` whose NR term (:func:`rules.kg_nonredundant.with_evidence`)
        gives head q the best valid MRR, or None when none beats the fitted model's ``fitted_mrr``. Confidences
        and overlaps are counted on the training queries with their own facts removed."""
        cfg = self.config
        J, E = self.num_rules(q), self.num_entities
        overlap = Overlap(J)
        hits = torch.zeros(J, dtype=torch.float64)
        reached = torch.zeros(J, dtype=torch.float64)
        for batch in train_batches:
            h, r = self._train_evidence(q, [batch])
            hits += h
            reached += r
            overlap.update(batch.flat.numpy(), batch.rule.numpy())
        conf = torch.from_numpy(smoothed_confidence(hits.numpy(), reached.numpy(), cfg.nr_smoothing))
        jaccard = overlap.jaccard()
        labels = {float(t): torch.from_numpy(clusters(jaccard, float(t))) for t in cfg.nr_thresholds}
        total = {(t, float(b)): 0.0 for t in labels for b in cfg.nr_betas}
        n = 0
        for batch in valid_batches:
            logits = self._logits(model, batch).double()
            mask = torch.zeros(batch.size * E, dtype=torch.bool)
            mask[batch.filter_flat] = True
            mask = mask.view(batch.size, E)
            for t, lab in labels.items():
                ev = nonredundant_evidence(batch.flat, batch.rule, conf, lab, batch.size * E).view(batch.size, E)
                for beta in cfg.nr_betas:
                    scores = with_evidence(logits, ev, float(beta)).float()  # as scored at test time
                    total[(t, float(beta))] += float(expected_reciprocal_rank(scores, batch.answers, mask).sum())
            n += batch.size
        if not total or n == 0:
            return None
        t, beta = max(total, key=lambda k: total[k])  # the first best in grid order
        mrr = total[(t, beta)] / n
        if mrr <= fitted_mrr:
            return None
        return NonRedundant(conf, labels[t], t, beta, mrr)

    def _start_from_given(self, q: int, model: _HeadModel) -> None:
        """Overwrite the start with the given weights (``init_weights``, ``init_type_weights``) where known."""
        J = len(self.bodies.get(q, []))
        model.weights[:J, 0] = _given_or(self.init_weights.get(q), model.weights[:J, 0])
        types = self.init_type_weights.get(q)
        if types is not None and model.type_weights is not None and types.shape == tuple(model.type_weights.shape):
            assert model.type_mask is not None
            model.type_weights = torch.from_numpy(types).float() * model.type_mask

    def _cached(self, batches: Iterator[_Batch]) -> list[_Batch] | None:
        """The batches as a list while they hold at most ``cache_nnz`` entries in all, else None (stops grounding
        at the first batch over the limit, so an uncacheable head never holds more than one batch at once)."""
        out, nnz = [], 0
        for batch in batches:
            nnz += batch.nnz
            if nnz > self.config.cache_nnz:
                return None
            out.append(batch)
        return out

    @torch.no_grad()
    def _train_evidence(
        self, q: int, batches: Sequence[_Batch] | Iterator[_Batch]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(J,) hits and (J,) reached pairs of each body on the head's training queries, own fact removed: the
        leave-one-out confidence is hits / reached, #queries whose answer the body reaches over #(query, candidate)
        pairs it reaches (AMIE's standard confidence counted over the training queries, so a body that only fires
        through the query's own edge gets 0). Both are sums over queries: they add up over clients."""
        J = self.num_rules(q)
        hits = torch.zeros(J, dtype=torch.float64)
        size = torch.zeros(J, dtype=torch.float64)
        for batch in batches:
            if batch.nnz == 0:
                continue
            row = batch.flat // self.num_entities
            pos = (batch.flat % self.num_entities) == batch.answers[row]
            hits.index_add_(0, batch.rule[pos], torch.ones(int(pos.sum()), dtype=torch.float64))
            size += torch.bincount(batch.rule, minlength=J).double()
        return hits, size

    @torch.no_grad()
    def _mrr(self, model: _HeadModel, batches: Sequence[_Batch]) -> float:
        total, n = 0.0, 0
        E = self.num_entities
        for batch in batches:
            if self._few_reached(batch):  # ranked on the reached cells, without the (B, E) logits
                cells, phi = self._design(batch)
                prior = self._prior(model)
                p = prior if prior is not None else torch.zeros(E)
                r = _SparseLinear.apply(model.weights, phi)
                rr = reached_reciprocal_rank(p, cells, r, batch.answers, batch.filter_flat)
            else:
                mask = torch.zeros(batch.size * E, dtype=torch.bool)
                mask[batch.filter_flat] = True
                rr = expected_reciprocal_rank(self._logits(model, batch), batch.answers, mask.view(batch.size, -1))
            total += float(rr.sum())
            n += batch.size
        return total / max(n, 1)

    @torch.no_grad()
    def _h_scores(self, model: _HeadModel, batches: Sequence[_Batch] | Iterator[_Batch]) -> np.ndarray:
        """RNNLogic's H(rule) without the prior term, averaged over the head's training queries:

            H(rule) = y_rule(t) − (1/|A|) Σ_{e∈A} y_rule(e)

        (Qu et al., ICLR 2021, §3.3, the E-step's approximation of each rule's contribution to log p(t | rules);
        y_rule(e) is the rule's term in the score of e, A the candidates reached by any rule; the generator's
        log-prior log RNN_θ(rule | q) is added by the caller).
        """
        J = model.weights.shape[0]
        H = torch.zeros(J, dtype=torch.float64)
        n = 0
        E = self.num_entities
        for batch in batches:
            n += batch.size
            if batch.nnz == 0:
                continue
            if self.config.aggregator == "sum":  # H = (Φ ∘ w)ᵀ · (1[cell is the answer] − 1/|A_row|), per rule
                cells, phi = self._design(batch)
                rows = (cells // E).numpy()
                per_row = np.bincount(rows, minlength=batch.size).astype(np.float64)
                coef = (cells.numpy() % E == batch.answers.numpy()[rows]).astype(np.float64) - 1.0 / per_row[rows]
                per_col = phi.T.astype(np.float64) @ coef  # (J·F,)
                w = model.weights.detach().double().numpy()
                H += torch.from_numpy((per_col.reshape(w.shape) * w).sum(1))
                continue
            contrib = self._contributions(model, batch).double()
            row = batch.flat // self.num_entities
            col = batch.flat % self.num_entities
            pos = col == batch.answers[row]
            H.index_add_(0, batch.rule[pos], contrib[pos])
            reached = torch.unique(batch.flat)
            size = torch.bincount(reached // self.num_entities, minlength=batch.size).double()
            H.index_add_(0, batch.rule, -contrib / size[row])
        return (H / max(n, 1)).numpy()

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def score(self, queries: torch.Tensor) -> torch.Tensor:
        """(B, E) float32 scores of every candidate answer for queries (B, 2) [entity, relation in 0..2R-1]."""
        if self.graph is None:
            raise RuntimeError("RulePredictor.score needs a graph: call fit() or set_graph() first")
        qa = _np(queries).reshape(-1, 2)
        out = torch.zeros(qa.shape[0], self.num_entities)
        for q in np.unique(qa[:, 1]).tolist():
            idx = np.flatnonzero(qa[:, 1] == q)
            model = self.models.get(q) or self._new_model(q)
            rows = np.stack([qa[idx, 0], np.full(idx.size, -1)], axis=1)
            lo = 0
            for batch in self._batches(q, rows, None, exclude_own=False):
                out[idx[lo : lo + batch.size]] = self._scores(model, batch)
                lo += batch.size
        return out

    __call__ = score

    def _scores(self, model: _HeadModel, batch: _Batch) -> torch.Tensor:
        """(B, E) test-time scores: the model's logits, with the head's non-redundant noisy-OR term where it chose
        one on valid (:func:`rules.kg_nonredundant.with_evidence`)."""
        logits = self._logits(model, batch)
        nr = model.nonredundant
        if nr is None:
            return logits
        E = self.num_entities
        ev = nonredundant_evidence(batch.flat, batch.rule, nr.confidence, nr.labels, batch.size * E)
        return with_evidence(logits, ev.view(batch.size, E), nr.beta).float()

    # ------------------------------------------------------------------ rule qualities
    def rule_scores(self) -> dict[int, np.ndarray]:
        """Per head relation: (J,) H(rule) per body (see :meth:`_h_scores`), aligned with ``self.bodies[q]``;
        zeros for an untrained head."""
        return {
            q: (
                self.models[q].h_score.copy()
                if q in self.models and self.models[q].h_score.size == len(bodies)
                else np.zeros(len(bodies))
            )
            for q, bodies in self.bodies.items()
        }

    def rule_evidence(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per fitted head relation: the path bodies' leave-one-out (hits, reached pairs) on its training queries
        (:meth:`_train_evidence`; init "confidence" only), aligned with ``self.bodies[q]``."""
        return {q: m.evidence for q, m in self.models.items() if m.evidence is not None}

    def type_weights(self) -> dict[int, np.ndarray]:
        """Per fitted head relation: the (2R,) type-prior weights u_q (``type_prior`` only)."""
        return {q: m.type_weights.detach().numpy().copy() for q, m in self.models.items() if m.type_weights is not None}

    def rule_weights(self) -> dict[int, np.ndarray]:
        """Per head relation: (J,) learned weight per body (σ(w) = confidence for max / noisy-or); (J, F) when
        ``config.feature`` names F > 1 features."""
        out = {}
        for q, m in self.models.items():
            w = m.weights[: len(self.bodies.get(q, []))]
            out[q] = (w[:, 0] if w.shape[1] == 1 else w).detach().numpy().copy()
        return out

    def rule_counts(self) -> dict[int, RuleStatistics]:
        """Per head relation: AMIE-style support / body size / head size of each body on the predictor's graph,
        for exporting rules with real confidence counts; each head counted on walks or simple paths as its model
        grounds."""
        if self.graph is None:
            raise RuntimeError("rule_counts needs a graph: call fit()/set_graph() or pass graph_triples")
        return {q: rule_statistics(self._graph_of(q), q, bodies) for q, bodies in self.bodies.items() if bodies}


def head_shares(work: Sequence[int], processes: int) -> list[float]:
    """Each head's share of the time left when it starts, for heads fitted in this order by ``processes``
    processes: its work over the work still to do from it on, times the processes, at most 1, so heads that end
    early leave their time to later ones and the last heads may take all that is left. A head without work: 1.
    E.g. work [30, 10, 10] in one process gives [0.6, 0.5, 1.0]."""
    left = np.cumsum(np.asarray(work, dtype=np.float64)[::-1])[::-1]
    return [1.0 if w <= 0 else min(1.0, processes * w / r) for w, r in zip(work, left.tolist(), strict=True)]


def _worker_fit(
    shared: tuple[RulePredictor, _FitJob],
    item: tuple[int, _Way, ConstantRules | None, tuple[float, float] | None],
) -> _Trial:
    """Fit head q one way in a worker (``shared``: its copy of the predictor and the fit's arguments; ``item``: q,
    the way, q's rules with constants when an earlier way mined them, and its time budget or None):
    :meth:`RulePredictor._fit_head`'s log, model and rules with constants."""
    predictor, job = shared
    q, way, mined, budget = item
    if mined is not None:
        predictor._mined[q] = mined
    fitted = predictor._fit_head(q, way, job, budget)
    del predictor.models[q]
    predictor.constants.pop(q, None)
    predictor._mined.pop(q, None)
    return fitted


def _tried(values: Mapping[str, float], names: Mapping[str, str]) -> dict[str, float]:
    """{name: values[label]} for the names whose way (label) was fitted."""
    return {name: values[label] for name, label in names.items() if label in values}


def counted_paths(paths: PathsChoice) -> Paths:
    """How rules are counted for a ``PredictorConfig.paths`` choice outside the fits of "auto" (the client's mining
    and confidences, the reading order, ``rules explain``): walks only when the choice is "walks"."""
    return "walks" if paths == "walks" else "simple"


def _given_or(given: np.ndarray | None, current: torch.Tensor) -> torch.Tensor:
    """``current`` (J,) with its first len(``given``) entries replaced by ``given`` where finite (NaN: keep); a start
    given for the server's bodies leaves a client's own bodies, appended after them, as they were."""
    if given is None:
        return current
    n = min(len(given), current.shape[0])
    head = torch.where(
        torch.from_numpy(np.isfinite(given[:n])), torch.from_numpy(np.nan_to_num(given[:n])).float(), current[:n]
    )
    return torch.cat([head, current[n:]])


def _np(x: np.ndarray | torch.Tensor | Sequence[Any]) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x).astype(np.int64, copy=False)


def _known(directed: np.ndarray) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = defaultdict(set)
    for h, r, t in directed.tolist():
        out[(h, r)].add(t)
    return out
