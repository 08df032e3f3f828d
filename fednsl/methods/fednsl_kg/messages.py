"""The fednsl-kg message schemas: every field that may leave a client, declared once.

Rules are keyed by their *forward* head relation r in 0..R-1 (the rule layer's convention: a rule for the
inverse head r+R, ``~r(X,Y) <- b1..bL``, is the same logical rule as ``r(X,Y) <- ~bL..~b1``). Bodies are token
ids in 0..2R-1 padded with 2R (stay), length L = ``max_body_len``.

Server → client (``train``): the round's proposal in the rule learners' one wire format
(:class:`fednsl.tasks.rule_learning.Proposal`): ``heads`` (T, 3) rule heads (forward relation, domain type, range
type), ``bodies`` (T, J, L), ``log_prior`` (T, J) log p_θ(body | head) renormalised over the J bodies (0 where
masked), ``counts`` (T, J) sample counts, ``mask`` (T, J); with ``federated_confidence``, from round 2 on,
``confidence`` (T, J, 2): each body's leave-one-out confidence pooled over the learner's clients (forward and inverse
head; −1 where unknown); with ``federated_weights``, the clients' averaged weights to start from: ``start_weights``
(T, J, 2) and ``start_type_weights`` (T, 2, 2R) with their masks ``start_known`` (T, J, 2) and ``start_type_known``
(T, 2); config ``use_prior`` and ``counts`` (whether to send AMIE counts this round).

Client → server:

- ``train.stats`` (round 1): mined candidate rules as a flat list — ``heads`` (K,), ``bodies`` (K, L),
  ``support`` (K,) number of local training triples of the head the body reaches; ``instances`` (R,) local
  training triples per relation; on a typed KG the (relation, head type, tail type) counts of the local
  training triples as ``signature_heads`` (S,), ``signature_types`` (S, 2) and ``signature_counts`` (S,) (S = 0
  untyped), from which the server keys each relation's rule head by its domain and range type. Never a triple.
- ``train`` (E-step): ``posterior`` (T, J) distribution over each head's bodies (rows of heads without local
  training triples are zero with ``mask`` false), ``instances`` (T,), and the additive AMIE counts
  ``support``, ``body_size``, ``pca_body_size``, ``head_size`` (T, J) of every body on the local training graph
  (:class:`rules.measures.RuleCounts`; the server sums them, so the store's counts are exact over clients); with
  ``federated_confidence`` also ``evidence`` (T, J, 4): per body the leave-one-out hits and reached (query,
  candidate) pairs on the client's training queries of the forward and of the inverse head (:data:`EVIDENCE_PARTS`,
  sums over queries, never a query or an entity); with ``federated_weights`` its fitted predictor weights:
  ``rule_weights`` (T, J, 2) per body and query direction, ``type_weights`` (T, 2, 2R) the type prior's, and
  ``weight_queries`` (T, 2) the training queries they were fitted on (the server's averaging weights).
- ``evaluate``: the exact sums of the filtered-ranking state (:class:`kg.linkpred.RankingMetrics`: fixed-point
  integers, one row per sum in :func:`rank_sum_names` order, written as ``LIMBS`` base-2^62 int64 limbs) in
  ``rank_sums`` (S, LIMBS) and the query count; the server's merge equals one ranking over all clients' queries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.tasks.rule_learning.proposal import PROPOSAL_SCHEMA
from kg.linkpred import RankingMetrics

__all__ = [
    "COUNT_FIELDS",
    "EVIDENCE_PARTS",
    "TRAIN_REQUEST_SCHEMA",
    "EVAL_METRICS",
    "EVAL_SCHEMA",
    "LIMBS",
    "STATS_METRICS",
    "stats_schema",
    "sum_signatures",
    "head_signature",
    "TRAIN_METRICS",
    "TRAIN_SCHEMA",
    "SIGNATURE_FIELDS",
    "decode_rank_sums",
    "encode_rank_sums",
    "rank_sum_names",
]

COUNT_FIELDS = ("support", "body_size", "pca_body_size", "head_size")
#: ``evidence`` (T, J, 4): per body, the leave-one-out hits and reached pairs on the client's training queries of
#: the forward head, then of the inverse head (sums over queries: they add up over clients)
EVIDENCE_PARTS = ("hits", "reached", "hits_inverse", "reached_inverse")
SIGNATURE_FIELDS = ("signature_heads", "signature_types", "signature_counts")  # train.stats: typed heads

STATS_METRICS = ("num_examples", "mined_rules", "time_s")


def stats_schema(num_relations: int, num_types: int = 1) -> Schema:
    """``train.stats`` reply: K mined (forward head, body) rules with supports; heads < R, body tokens <= 2R (pad);
    S (relation, head type, tail type) training-triple counts, types < T."""
    return Schema(
        arrays=(
            ArraySpec("heads", "ids", "int", ("K",), high=num_relations),
            ArraySpec("bodies", "ids", "int", ("K", None), high=2 * num_relations + 1),
            ArraySpec("support", "counts", "int", ("K",)),
            ArraySpec("instances", "counts", "int", (num_relations,)),
            ArraySpec("signature_heads", "ids", "int", ("S",), high=num_relations),
            ArraySpec("signature_types", "ids", "int", ("S", 2), high=num_types),
            ArraySpec("signature_counts", "counts", "int", ("S",)),
        ),
        metrics=STATS_METRICS,
    )


def sum_signatures(
    heads: np.ndarray, pairs: np.ndarray, counts: np.ndarray, num_types: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``signature_*`` arrays summed over equal (relation, head type, tail type): heads (n,), type pairs (n, 2)
    and counts (n,) in; relations (S,), pairs (S, 2), sums (S,) out, sorted by (relation, head type, tail type).
    Sparse: only the triples present, so T may be large."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    keys = (np.asarray(heads, dtype=np.int64) * num_types + pairs[:, 0]) * num_types + pairs[:, 1]
    uniq, inverse = np.unique(keys, return_inverse=True)
    sums = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(sums, inverse, np.asarray(counts, dtype=np.int64))
    return uniq // (num_types * num_types), np.stack([uniq // num_types % num_types, uniq % num_types], 1), sums


TRAIN_METRICS = (
    "num_examples",
    "heads_fitted",
    "rules",
    "valid_mrr",
    "valid_mrr_federated",
    "valid_mrr_local",
    "heads_local",
    "heads_nonredundant",
    "heads_with_valid",
    "simple_paths",
    "constant_rules_on",
    "rule_length",
    "ways_not_fitted",
    "heads_cut_by_budget",
    "time_fit_s",
    "time_counts_s",
)
TRAIN_SCHEMA = Schema(
    arrays=(
        ArraySpec("posterior", "distribution", "float", ("T", "J"), mask="mask"),
        ArraySpec("mask", "mask", "bool", ("T", "J")),
        ArraySpec("instances", "counts", "int", ("T",)),
        *(ArraySpec(name, "counts", "int", ("T", "J")) for name in COUNT_FIELDS),
        ArraySpec("evidence", "counts", "int", ("T", "J", len(EVIDENCE_PARTS)), required=False),
        ArraySpec("rule_weights", "weights", "float", ("T", "J", 2), required=False),
        ArraySpec("type_weights", "weights", "float", ("T", 2, None), required=False),
        ArraySpec("weight_queries", "counts", "int", ("T", 2), required=False),
    ),
    metrics=TRAIN_METRICS,
)

#: server -> client: the proposal plus, once known, each body's confidence pooled over the learner's clients,
#: (T, J, 2) forward and inverse head, −1 where no client has evidence yet (arrays must be finite)
TRAIN_REQUEST_SCHEMA = Schema(
    arrays=(
        *PROPOSAL_SCHEMA.arrays,
        ArraySpec("confidence", "scores", "float", ("T", "J", 2), required=False),
        ArraySpec("start_weights", "weights", "float", ("T", "J", 2), required=False),
        ArraySpec("start_known", "mask", "bool", ("T", "J", 2), required=False),
        ArraySpec("start_type_weights", "weights", "float", ("T", 2, None), required=False),
        ArraySpec("start_type_known", "mask", "bool", ("T", 2), required=False),
    ),
    any_config=True,
)

# Exact ranking sums: non-negative Python integers (2^-96 fixed point) split into int64 limbs of 62 bits.
LIMB_BITS = 62
LIMBS = 4
EVAL_METRICS = ("num_examples", "queries", "time_eval_s")


def rank_sum_names() -> list[str]:
    """The fixed order of :class:`kg.linkpred.RankingMetrics` sums in ``rank_sums``."""
    return sorted(RankingMetrics().state_dict()["sums"])


EVAL_SCHEMA = Schema(
    arrays=(ArraySpec("rank_sums", "counts", "int", (len(rank_sum_names()), LIMBS)),), metrics=EVAL_METRICS
)


def encode_rank_sums(metrics: RankingMetrics) -> np.ndarray:
    """RankingMetrics → (S, LIMBS) int64 limbs (exact; raises if a sum needs more than LIMBS·62 bits)."""
    sums = metrics.state_dict()["sums"]
    out = np.zeros((len(sums), LIMBS), dtype=np.int64)
    mask = (1 << LIMB_BITS) - 1
    for i, name in enumerate(rank_sum_names()):
        v = int(sums[name])
        if v < 0 or v >> (LIMB_BITS * LIMBS):
            raise ValueError(f"ranking sum {name} does not fit {LIMBS} limbs")
        for k in range(LIMBS):
            out[i, k] = (v >> (LIMB_BITS * k)) & mask
    return out


def decode_rank_sums(limbs: np.ndarray, count: int) -> RankingMetrics:
    """Inverse of :func:`encode_rank_sums` given the number of queries."""
    names = rank_sum_names()
    if limbs.shape != (len(names), LIMBS):
        raise ValueError(f"rank_sums has shape {limbs.shape}, expected {(len(names), LIMBS)}")
    sums = {n: str(sum(int(limbs[i, k]) << (LIMB_BITS * k) for k in range(LIMBS))) for i, n in enumerate(names)}
    return RankingMetrics.from_state_dict(
        {"hits_at": list(RankingMetrics().hits_at), "count": int(count), "sums": sums}
    )


def head_signature(replies: Sequence[Message], num_types: int) -> dict[int, tuple[int, int]]:
    """Each relation's most frequent (head type, tail type) over the replies' summed signature counts (sparse: only
    the pairs some client holds, so T may be large); empty on an untyped KG."""
    parts = [m.arrays for m in replies if len(m.arrays[SIGNATURE_FIELDS[0]])]
    if not parts:
        return {}
    heads, types, counts = (np.concatenate([a[f] for a in parts]) for f in SIGNATURE_FIELDS)
    rel, pairs, sums = sum_signatures(heads, types, counts, num_types)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -sums, rel))  # per relation: largest count, then smaller ids
    first = order[np.r_[True, rel[order][1:] != rel[order][:-1]]]
    return {int(rel[i]): (int(pairs[i, 0]), int(pairs[i, 1])) for i in first}
