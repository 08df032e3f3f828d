"""The FedNSL message schemas: every field that may cross the client → server boundary, declared once.

Server → client (``train`` and ``evaluate``): the round's proposal (Eq. 5), the rule learners' one wire format
(:class:`fednsl.tasks.rule_learning.Proposal`, :data:`~fednsl.tasks.rule_learning.PROPOSAL_SCHEMA`): ``heads``
(T, 3) triples (relation, head type, tail type), ``bodies`` (T, J, L) ids, ``log_prior`` (T, J) log T_θ (0 where
masked), ``counts`` (T, J) n_j, ``mask`` (T, J).

Client → server:

- ``train.stats`` (round 1, spec §8.8): the client's co-occurrence body distributions per local triple —
  ``triples`` (K, 3) ids, ``bodies`` (K, B, L) ids, ``probs`` (K, B) distribution over the real bodies
  (``mask``), ``instances`` (K,) number of labelled facts per triple;
- ``train``: ``posterior`` (T, J) distribution over each triple's bodies (Eq. 10; rows of triples without local
  instances are all zero, ``mask`` false), ``instances`` (T,) counts; with ``transfer: published`` (beyond the
  paper) also the fitted per-triple scorer parameters :data:`PUBLISHED_FIELDS`: ``scorer_weights`` (T, J)
  rule weights w_t and ``scorer_bias`` (T,) biases b_t, and the recalibration-only baseline's ``recal_slope``
  (T,) u_t and ``recal_bias`` (T,) b_t (all zero for triples without local instances);
- ``evaluate``: scalar metrics and, with golden rules, per-rule logic counts (K_g,) for the seen/unseen tests
  of the rule model and of the backbone alone, and per-test-document counts (:data:`DOC_ARRAYS`: true
  positives, predictions, gold facts, true positives in train; logic body/correct counts per rule) that the
  ablation bootstraps over documents.

Server → client, ``evaluate`` only (after the round's aggregation, :data:`EVAL_REQUEST_SCHEMA`):
``global_posterior`` (T, J) the instance-weighted mean of the clients' posteriors (the aggregated posterior of
Eq. 10 that the ``transfer: prior`` route scores unseen cells with) and, with ``transfer: published``,
``published_weights`` (T, J), ``published_bias`` (T,) and ``published_mask`` (T,) (the owners' mean scorer),
``published_recal_slope`` / ``published_recal_bias`` (T,) (the owners' mean recalibration-only (u_t, b_t)).

The runner validates every reply (distributions: non-negative, rows sum to 1 over the mask, masked entries 0,
finite) and rejects undeclared fields — the privacy boundary: only probabilities, ids and counts leave a
client, plus — only under ``transfer: published`` — the per-triple scorer weights and biases named in
:data:`PUBLISHED_FIELDS` (documents, backbone values and path values never do).

Both sides build and read the scorer options the server sends with the proposal through this module
(:class:`ScorerOptions`, :data:`SCORER_KEYS`, :func:`scorer_config` / :func:`scorer_options_from`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fednsl.federation.records import ArraySpec, ConfigValue, Schema
from fednsl.tasks.rule_learning.proposal import PROPOSAL_SCHEMA
from rules.posterior import KLDirection

__all__ = [
    "STATS_SCHEMA",
    "TRAIN_SCHEMA",
    "EVAL_SCHEMA",
    "EVAL_METRICS",
    "LOGIC_ARRAYS",
    "TRAIN_METRICS",
    "STATS_METRICS",
    "SCORER_KEYS",
    "ScorerOptions",
    "scorer_config",
    "scorer_options_from",
    "stats_schema",
    "train_schema",
    "EVAL_REQUEST_SCHEMA",
    "PUBLISHED_FIELDS",
    "DOC_ARRAYS",
    "EVAL_VARIANTS",
    "TRANSFER_ROUTES",
]


@dataclass(frozen=True)
class ScorerOptions:
    """Hyper-parameters of the client fit (all from config). Defaults are the fixed Eq. 11 of issue 17: the
    renormalised T_θ in the posterior *and* in the KL, posteriors over all labelled cells, no pass-through
    feature (the body [r] carries x_r), KL on the BCE's per-cell scale, an L-BFGS fit to a gradient
    tolerance."""

    kl_weight: float = 0.1
    kl_direction: KLDirection = "reverse"
    prior_source: Literal["renormalised", "counts", "mixed"] = "renormalised"
    count_correction: bool = False
    pass_through: bool = False
    posterior_instances: Literal["all", "positive"] = "all"
    kl_scale: Literal["per_cell", "per_triple"] = "per_cell"
    optimizer: Literal["lbfgs", "adam"] = "lbfgs"
    tol: float = 1e-5
    steps: int = 150
    lr: float = 0.1
    weight_decay: float = 1e-3
    bias_init: Literal["uniform", "base_rate"] = "base_rate"
    transfer: Literal["prior", "published"] = "published"
    transfer_steps: int = 100
    transfer_top: int = 5


# The options the server sends with every rule set (all but the client-local ``transfer_steps``), in order.
SCORER_KEYS = tuple(f.name for f in dataclasses.fields(ScorerOptions) if f.name != "transfer_steps")


def scorer_config(options: ScorerOptions) -> dict[str, ConfigValue]:
    """The ``config`` of a ``train``/``evaluate`` message: :data:`SCORER_KEYS` as plain bool/int/float/str."""
    defaults = ScorerOptions()
    return {k: type(getattr(defaults, k))(getattr(options, k)) for k in SCORER_KEYS}


def scorer_options_from(config: Mapping[str, Any], default: ScorerOptions) -> ScorerOptions:
    """Scorer options sent by the server in ``msg.config`` (falling back to the client's defaults)."""
    return dataclasses.replace(default, **{k: config[k] for k in SCORER_KEYS if k in config})


#: Routes from the global prior to the unseen cells (issue 17 item 2): "prior" = the aggregated posterior over
#: φ (paper-faithful), "published" = the owners' mean per-triple scorer (beyond the paper).
TRANSFER_ROUTES = ("prior", "published")
#: Fields a client adds to its ``train`` reply under ``transfer: published`` (float parameters, not
#: distributions: the only such fields that may leave a client).
PUBLISHED_FIELDS = ("scorer_weights", "scorer_bias", "recal_slope", "recal_bias")

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


TRAIN_METRICS = (
    "num_examples",
    "positives",
    "train_loss",
    "bce",
    "kl",
    "triples_fitted",
    "triples_local",
    "facts_unknown_triple",
    "empty_documents",
    "time_grounding_s",
    "time_fit_s",
    "time_posterior_s",
    "grounded_cells",
    "cached_bodies",
    "scorer_iterations",
    "scorer_converged",
    "degenerate_priors",
)
_TRAIN_ARRAYS = (
    ArraySpec("posterior", "distribution", "float", ("T", "J"), mask="mask"),
    ArraySpec("mask", "mask", "bool", ("T", "J")),
    ArraySpec("instances", "counts", "int", ("T",)),
)
TRAIN_SCHEMA = Schema(arrays=_TRAIN_ARRAYS, metrics=TRAIN_METRICS)


def train_schema(transfer: str) -> Schema:
    """The ``train`` reply schema: :data:`TRAIN_SCHEMA`, plus :data:`PUBLISHED_FIELDS` (declared weights) when
    ``transfer == "published"``."""
    if transfer not in TRANSFER_ROUTES:
        raise ValueError(f"transfer must be one of {TRANSFER_ROUTES}, got {transfer!r}")
    if transfer != "published":
        return TRAIN_SCHEMA
    return Schema(
        arrays=(
            *_TRAIN_ARRAYS,
            ArraySpec("scorer_weights", "weights", "float", ("T", "J")),
            ArraySpec("scorer_bias", "weights", "float", ("T",)),
            ArraySpec("recal_slope", "weights", "float", ("T",)),
            ArraySpec("recal_bias", "weights", "float", ("T",)),
        ),
        metrics=TRAIN_METRICS,
    )


# server → client at evaluation: the rule set plus the round's aggregate (optional fields)
EVAL_REQUEST_SCHEMA = Schema(
    arrays=(
        *PROPOSAL_SCHEMA.arrays,
        ArraySpec("global_posterior", "distribution", "float", ("T", "J"), mask="mask", required=False),
        ArraySpec("published_weights", "weights", "float", ("T", "J"), required=False),
        ArraySpec("published_bias", "weights", "float", ("T",), required=False),
        ArraySpec("published_mask", "mask", "bool", ("T",), required=False),
        ArraySpec("published_recal_slope", "weights", "float", ("T",), required=False),
        ArraySpec("published_recal_bias", "weights", "float", ("T",), required=False),
    ),
    any_config=True,
)

#: Evaluated models (metric prefixes), all from one fitted state: the full FedNSL model (""), the backbone
#: alone, recalibration only (the scorer's own fit with φ zeroed, u_t·x_r + b_t: the client's own (u_t, b_t) on
#: seen cells; on unseen cells the owners' published mean (ū_t, b̄_t) under ``transfer: published`` — the route
#: of the rule weights — else, and for unpublished triples, the client's pooled (u, b)), and each transfer
#: route on the unseen cells.
EVAL_VARIANTS = ("", "backbone_", "recal_", "prior_", "published_")
_PRF = ("f1", "precision", "recall", "ign_f1", "tp", "n_pred", "n_gold", "tp_in_train")
EVAL_METRICS = (
    tuple(f"{model}{part}_{m}" for model in EVAL_VARIANTS for part in ("seen", "unseen") for m in (*_PRF, "logic"))
    + tuple(f"holdout_{model}unseen_f1" for model in EVAL_VARIANTS)
    + (
        "threshold_personal",
        "threshold_transfer",
        "threshold_backbone",
        "threshold_recal",
        "threshold_recal_pooled",
        "published_triples",
        "time_grounding_s",
        "time_eval_s",
        "facts_unknown_triple_seen",
        "facts_unknown_triple_unseen",
        "num_examples",
    )
)
LOGIC_ARRAYS = tuple(
    f"logic_{kind}_{model}{part}"
    for model in ("", "backbone_")
    for part in ("seen", "unseen")
    for kind in ("body", "correct")
)
#: Per-test-document counts of every variant and part: ``docs_<variant><part>`` (D, 4) = (tp, n_pred, n_gold,
#: tp_in_train) and, with golden rules, ``doclogic_body_<variant><part>`` / ``doclogic_correct_...`` (D, G).
DOC_ARRAYS = tuple(f"docs_{model}{part}" for model in EVAL_VARIANTS for part in ("seen", "unseen"))
DOC_LOGIC_ARRAYS = tuple(
    f"doclogic_{kind}_{model}{part}"
    for model in EVAL_VARIANTS
    for part in ("seen", "unseen")
    for kind in ("body", "correct")
)
EVAL_SCHEMA = Schema(
    arrays=tuple(ArraySpec(name, "counts", "int", ("G",), required=False) for name in LOGIC_ARRAYS)
    + tuple(ArraySpec(name, "counts", "int", (None, 4), required=False) for name in DOC_ARRAYS)
    + tuple(ArraySpec(name, "counts", "int", (None, "G"), required=False) for name in DOC_LOGIC_ARRAYS),
    metrics=EVAL_METRICS,
)
