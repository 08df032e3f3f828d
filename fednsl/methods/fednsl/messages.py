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

Both sides build and read these messages through this module: the rule set (:class:`RuleSet`,
:func:`rules_to_arrays` / :func:`rules_from_message`) and the scorer options the server sends with it
(:class:`ScorerOptions`, :data:`SCORER_KEYS`, :func:`scorer_config` / :func:`scorer_options_from`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from fednsl.federation.records import ArraySpec, ConfigValue, Schema
from fednsl.methods.fednsl.posterior import KLDirection, PriorSource, prior_distribution

__all__ = [
    "RULE_ARRAYS",
    "STATS_SCHEMA",
    "TRAIN_SCHEMA",
    "EVAL_SCHEMA",
    "EVAL_METRICS",
    "LOGIC_ARRAYS",
    "RULES_REQUEST_SCHEMA",
    "TRAIN_METRICS",
    "STATS_METRICS",
    "SCORER_KEYS",
    "RuleSet",
    "ScorerOptions",
    "rules_from_message",
    "rules_to_arrays",
    "scorer_config",
    "scorer_options_from",
    "stats_schema",
]

RULE_ARRAYS = ("triples", "bodies", "log_prior", "counts", "mask")


@dataclass
class RuleSet:
    """One round's candidate bodies as the server sent them (Eq. 5).

    triples (T, 3) long (r, type_h, type_t); bodies (T, J, L) long padded with 2R; log_prior (T, J) float
    (0 where masked); counts (T, J) long n_j; mask (T, J) bool.
    """

    triples: torch.Tensor
    bodies: torch.Tensor
    log_prior: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor

    @property
    def num_triples(self) -> int:
        return int(self.triples.shape[0])

    @property
    def num_bodies(self) -> int:
        return int(self.bodies.shape[1])

    def prior(self, source: PriorSource = "counts") -> torch.Tensor:
        return prior_distribution(self.log_prior.double(), self.counts, self.mask, source)


def rules_to_arrays(rules: RuleSet) -> dict[str, np.ndarray]:
    """The rule arrays of a ``train``/``evaluate`` message (log prior zeroed where masked)."""
    lp = torch.where(rules.mask, rules.log_prior.double(), torch.zeros((), dtype=torch.float64))
    return {
        "triples": rules.triples.numpy().astype(np.int64),
        "bodies": rules.bodies.numpy().astype(np.int64),
        "log_prior": lp.numpy(),
        "counts": rules.counts.numpy().astype(np.int64),
        "mask": rules.mask.numpy().astype(bool),
    }


def rules_from_message(arrays: Mapping[str, np.ndarray]) -> RuleSet:
    """The round's rule set from a server message (or a checkpoint of one)."""
    missing = [k for k in RULE_ARRAYS if k not in arrays]
    if missing:
        raise ValueError(f"server message lacks the rule arrays {missing}")
    mask = torch.as_tensor(np.asarray(arrays["mask"], dtype=bool))
    return RuleSet(
        torch.as_tensor(np.asarray(arrays["triples"], dtype=np.int64)),
        torch.as_tensor(np.asarray(arrays["bodies"], dtype=np.int64)),
        torch.as_tensor(np.asarray(arrays["log_prior"], dtype=np.float64)),
        torch.as_tensor(np.asarray(arrays["counts"], dtype=np.int64)),
        mask,
    )


@dataclass(frozen=True)
class ScorerOptions:
    """Hyper-parameters of the client fit (all from config)."""

    kl_weight: float = 0.1
    kl_direction: KLDirection = "reverse"
    prior_source: PriorSource = "counts"
    count_correction: bool = False
    pass_through: bool = True
    posterior_instances: Literal["all", "positive"] = "positive"
    steps: int = 150
    lr: float = 0.1
    weight_decay: float = 0.0
    bias_init: Literal["uniform", "base_rate"] = "base_rate"
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
)
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
) + (
    "threshold_personal",
    "threshold_transfer",
    "threshold_backbone",
    "time_grounding_s",
    "time_eval_s",
    "facts_unknown_triple_seen",
    "facts_unknown_triple_unseen",
    "num_examples",
)
LOGIC_ARRAYS = tuple(
    f"logic_{kind}_{model}{part}"
    for model in ("", "backbone_")
    for part in ("seen", "unseen")
    for kind in ("body", "correct")
)
EVAL_SCHEMA = Schema(
    arrays=tuple(ArraySpec(name, "counts", "int", ("G",), required=False) for name in LOGIC_ARRAYS),
    metrics=EVAL_METRICS,
)
