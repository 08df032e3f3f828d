"""The FedNSL message schemas: every field that may cross the client → server boundary, declared once.

Server → client (``train`` and ``evaluate``): the round's rule set (Eq. 5) — ``triples`` (T, 3) ids,
``bodies`` (T, J, L) ids, ``log_prior`` (T, J) log T_θ (0 where masked), ``counts`` (T, J) n_j, ``mask`` (T, J).

Client → server:

- ``train.stats`` (round 1, spec §8.8): the client's co-occurrence body distributions per local triple —
  ``triples`` (K, 3) ids, ``bodies`` (K, B, L) ids, ``probs`` (K, B) distribution over the real bodies
  (``mask``), ``instances`` (K,) number of labelled facts per triple;
- ``train``: ``posterior`` (T, J) distribution over each triple's bodies (Eq. 10; rows of triples without local
  instances are all zero, ``mask`` false), ``instances`` (T,) counts;
- ``evaluate``: scalar metrics and, with golden rules, per-rule logic counts (K_g,) for the seen/unseen tests
  of the rule model and of the backbone alone.

The runner validates every reply (distributions: non-negative, rows sum to 1 over the mask, masked entries 0,
finite) and rejects undeclared fields — the privacy boundary: only probabilities, ids and counts leave a
client (scorer weights, documents and backbone values never do).
"""

from __future__ import annotations

from fednsl.federation.records import ArraySpec, Schema

__all__ = ["RULE_ARRAYS", "STATS_SCHEMA", "TRAIN_SCHEMA", "EVAL_SCHEMA", "EVAL_METRICS", "LOGIC_ARRAYS",
           "RULES_REQUEST_SCHEMA", "TRAIN_METRICS", "STATS_METRICS", "stats_schema"]

RULE_ARRAYS = ("triples", "bodies", "log_prior", "counts", "mask")

STATS_METRICS = ("num_examples", "triples", "bodies", "documents", "extra_edges", "skipped_untyped", "time_s")
STATS_SCHEMA = Schema(
    arrays=(
        ArraySpec("triples", "ids", "int", ("K", 3)),
        ArraySpec("bodies", "ids", "int", ("K", "B", "L")),
        ArraySpec("probs", "distribution", "float", ("K", "B"), mask="mask"),
        ArraySpec("mask", "mask", "bool", ("K", "B")),
        ArraySpec("instances", "counts", "int", ("K",)),
    ),
    metrics=STATS_METRICS,
)



def stats_schema(num_relations: int, num_types: int, max_body_len: int) -> Schema:
    """:data:`STATS_SCHEMA` bound to the server's vocabulary: relation tokens < 2R (2R = padding), type and
    relation ids of triples below max(R, types) (each column is checked again on aggregation), bodies of
    exactly ``max_body_len`` tokens."""
    top = max(num_relations, num_types, 1)
    return Schema(
        arrays=(
            ArraySpec("triples", "ids", "int", ("K", 3), high=top),
            ArraySpec("bodies", "ids", "int", ("K", "B", max_body_len), high=2 * num_relations + 1),
            ArraySpec("probs", "distribution", "float", ("K", "B"), mask="mask"),
            ArraySpec("mask", "mask", "bool", ("K", "B")),
            ArraySpec("instances", "counts", "int", ("K",)),
        ),
        metrics=STATS_METRICS,
    )


TRAIN_METRICS = ("num_examples", "positives", "train_loss", "bce", "kl", "triples_fitted", "triples_local",
                 "facts_unknown_triple", "empty_documents", "time_grounding_s", "time_fit_s", "time_posterior_s",
                 "grounded_cells", "cached_bodies")
TRAIN_SCHEMA = Schema(
    arrays=(
        ArraySpec("posterior", "distribution", "float", ("T", "J"), mask="mask"),
        ArraySpec("mask", "mask", "bool", ("T", "J")),
        ArraySpec("instances", "counts", "int", ("T",)),
    ),
    metrics=TRAIN_METRICS,
)

# server → client: the round's rule set; T triples and J bodies per triple bind the train reply's sizes
RULES_REQUEST_SCHEMA = Schema(
    arrays=(
        ArraySpec("triples", "ids", "int", ("T", 3)),
        ArraySpec("bodies", "ids", "int", ("T", "J", None)),
        ArraySpec("log_prior", "scores", "float", ("T", "J")),
        ArraySpec("counts", "counts", "int", ("T", "J")),
        ArraySpec("mask", "mask", "bool", ("T", "J")),
    ),
    any_config=True,
)

_PRF = ("f1", "precision", "recall", "ign_f1", "tp", "n_pred", "n_gold", "tp_in_train")
EVAL_METRICS = tuple(
    f"{model}{part}_{m}" for model in ("", "backbone_") for part in ("seen", "unseen") for m in (*_PRF, "logic")
) + ("threshold_personal", "threshold_transfer", "threshold_backbone", "time_grounding_s", "time_eval_s",
     "facts_unknown_triple_seen", "facts_unknown_triple_unseen", "num_examples")
LOGIC_ARRAYS = tuple(f"logic_{kind}_{model}{part}" for model in ("", "backbone_") for part in ("seen", "unseen")
                     for kind in ("body", "correct"))
EVAL_SCHEMA = Schema(
    arrays=tuple(ArraySpec(name, "counts", "int", ("G",), required=False) for name in LOGIC_ARRAYS),
    metrics=EVAL_METRICS,
)
