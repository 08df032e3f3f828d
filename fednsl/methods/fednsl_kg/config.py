"""fednsl-kg options: ``method_kwargs`` (:class:`FedNSLKGConfig`, nested ``generator``) and ``data``
(:class:`KGDataConfig`). Unknown keys raise an error naming the section and listing the valid ones."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fednsl.config import REPO_ROOT
from fednsl.registry import build_kwargs
from fednsl.tasks.rule_learning.options import GeneratorOptions
from rules.kg_mining import RANK_BY
from rules.kg_predictor import PredictorConfig

__all__ = [
    "KG_GENERATOR_DEFAULTS",
    "MINING_OPTIONS",
    "check_mining",
    "FedNSLKGConfig",
    "KGDataConfig",
    "resolve_source",
]


#: ``method_kwargs.generator`` defaults of fednsl-kg, sized for CPU: a KG has one rule-head category per relation,
#: far fewer than DWIE's; no type constraints on sampled bodies (turn them on for typed KGs with
#: ``type_constraints: true``).
KG_GENERATOR_DEFAULTS: dict[str, Any] = {
    "d_model": 64,
    "nhead": 4,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "dim_feedforward": 128,
    "batch_size": 64,
    "samples_per_epoch": 4000,
    "type_constraints": False,
}


_CHOICES = {
    "aggregator": ("sum", "max", "noisy-or"),
    "pool_mode": ("momentum", "mixture"),
    "eval_filter": ("local", "global"),
    "valid_filter": ("eval", "train_valid"),
    "counts": ("every", "last", "never"),
    "select_on_valid": ("off", "client", "head"),
}


#: the options of ``method_kwargs.mining`` (:func:`fednsl.methods.fednsl_kg.client.mine_forward_rules`)
MINING_OPTIONS = (
    "samples_per_relation",
    "max_neighbors",
    "max_rules_per_head",
    "min_support",
    "rank_by",
    "pool_per_head",
    "pool_by_length",
    "confidence_starts",
    "identity",
    "identity_threshold",
    "workers",
)


def check_mining(options: Mapping[str, Any]) -> None:
    """ValueError naming the option when ``method_kwargs.mining`` holds an unknown option, a ``rank_by`` other than
    support or confidence, ``workers`` outside 1..64, or a ``pool_by_length`` that is not a boolean or comes without
    ``rank_by: confidence`` (where it would do nothing)."""
    unknown = sorted(set(options) - set(MINING_OPTIONS))
    if unknown:
        raise ValueError(
            f"method_kwargs.mining (fednsl-kg): unknown option(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(MINING_OPTIONS)}"
        )
    rank_by = options.get("rank_by", "support")
    if rank_by not in RANK_BY:
        raise ValueError(f"method_kwargs.mining (fednsl-kg): rank_by={rank_by!r}; expected 'support' or 'confidence'")
    workers = options.get("workers", 1)
    if not isinstance(workers, int) or not 1 <= workers <= 64:
        raise ValueError(f"method_kwargs.mining (fednsl-kg): workers must be an integer 1..64, got {workers!r}")
    by_length = options.get("pool_by_length", False)
    if not isinstance(by_length, bool):
        raise ValueError(f"method_kwargs.mining (fednsl-kg): pool_by_length must be true or false, got {by_length!r}")
    if by_length and rank_by != "confidence":
        raise ValueError(
            "method_kwargs.mining (fednsl-kg): pool_by_length shapes the pool that rank_by: confidence re-ranks; "
            f"with rank_by={rank_by!r} it would do nothing"
        )


@dataclass
class FedNSLKGConfig:
    """Method options (``method_kwargs``).

    E-step (FedNSL Eq. 9–11 on the RNNLogic predictor): per head r and body j the client's evidence is the
    predictor's rule score s_j (``RulePredictor.rule_scores``, z-scored over the head's bodies when
    ``standardize_scores``); H_j = s_j / ``temperature`` + ``prior_weight`` ·
    log p_θ(j) (Eq. 9, RNNLogic's H); the posterior minimises −E_q[H] − entropy(q) + ``kl_weight`` · KL(q ‖ p_θ)
    (Eq. 2 with the Eq. 11 KL toward the server prior), whose solution is q ∝ exp((H_j + λ log p_θ(j)) / (1 + λ)).
    """

    max_body_len: int = 3
    num_samples: int = 100  # N ancestral generator samples per head relation (Eq. 5)
    pool_top: int = 40  # the pool's most probable bodies per head, always proposed
    max_bodies: int = 80  # J: at most this many bodies per head per round
    mining: dict[str, Any] = field(default_factory=dict)  # MINING_OPTIONS (client.mine_forward_rules)
    support_starts: int = 2000  # at most this many start entities per head when counting mined supports
    aggregator: Literal["sum", "max", "noisy-or"] = "sum"  # RulePredictor aggregation over rules
    predictor: dict[str, Any] = field(default_factory=dict)  # rules.kg_predictor.PredictorConfig fields
    report_valid: bool = True  # clients report their local valid MRR after fitting (one extra ranking pass)
    counts: str = "every"  # AMIE counts for the rule store: every round, the last round only, or never
    temperature: float = 0.5  # τ on the standardised rule scores
    standardize_scores: bool = True
    prior_weight: float = 0.0
    kl_weight: float = 0.1  # λ of Eq. 2 / 11
    pool_mode: str = "momentum"
    pool_ratio: float = 0.5  # posterior share mixed into the pool per round
    local_only: bool = False  # each client alone: its own generator and pool, no server prior from others
    # federation that pays (docs/methods/fednsl-kg.md, "When does federation pay?"): clients send each proposed
    # body's leave-one-out evidence (hits, reached pairs on their training queries); the server sums it over the
    # learner's clients and sends the pooled confidences with the next proposal, from which every client starts its
    # rule weights (a data-poor client starts from weights estimated on all clients' facts)
    federated_confidence: bool = True
    keep_own_rules: bool = True  # a client's own mined bodies stay in its predictor beside the server's proposal
    # clients send their fitted rule and type-prior weights; the server averages them (weighted by training queries,
    # FedAvg) and sends them with the next proposal; clients start from them and keep them per head unless their
    # own training improves their valid MRR (the personal part, Ditto-style). Off: on Kinship by entity it does worse
    # than the pooled confidences alone (bench/results/federation_pays_kinship_entity_skew.md)
    federated_weights: bool = False
    # joining cannot hurt on valid: each client also fits its own mined bodies alone (once, kept over rounds) and
    # scores with whichever predictor ranks its valid facts better — over all its valid queries (``client``) or per
    # head relation and direction (``head``); ``off``: always the federated predictor
    select_on_valid: str = "off"
    eval_filter: str = "local"  # local: a client filters with its own train ∪ valid ∪ test; global: all parts
    # the filter of the predictor's early stopping (and of its choices on valid): "eval", the evaluation's filter
    # above (the filtered setting: every known fact but the answer is removed from a valid query's ranking);
    # "train_valid", train ∪ valid only (before 29 Nov). On dense KGs a valid query's unfiltered test answers
    # outrank it and early stopping reads noise: UMLS, mined rules, seed 0, test MRR .829 -> .862
    valid_filter: str = "eval"
    eval_batch_size: int = 0  # queries per scoring call (0: kg.linkpred's memory-bounded default)
    top_k: int = 5  # planted-rule recall is measured among the top-k bodies of each head
    num_threads: int = 0  # torch threads for server and clients (0: unchanged)
    generator: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"method_kwargs (fednsl-kg): {name}={getattr(self, name)!r}; expected one of {allowed}"
                )
        if not 1 <= self.max_body_len <= 3:
            raise ValueError(f"method_kwargs (fednsl-kg): max_body_len must be 1..3, got {self.max_body_len}")
        for name in ("num_samples", "max_bodies"):
            if getattr(self, name) < 1:
                raise ValueError(f"method_kwargs (fednsl-kg): {name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.pool_ratio <= 1.0:
            raise ValueError(f"method_kwargs (fednsl-kg): pool_ratio must be in [0, 1], got {self.pool_ratio}")
        if self.temperature <= 0 or self.kl_weight < 0:
            raise ValueError("method_kwargs (fednsl-kg): temperature must be > 0 and kl_weight >= 0")
        check_mining(self.mining)
        predictor = build_kwargs(PredictorConfig, self.predictor, "method_kwargs.predictor (fednsl-kg)")
        try:  # the values, in the predictor's own words, before any round
            predictor.check()
        except ValueError as exc:
            raise ValueError(f"method_kwargs.predictor (fednsl-kg): {exc}") from None

    @property
    def gen(self) -> GeneratorOptions:
        return GeneratorOptions.build(self.generator, "method_kwargs.generator (fednsl-kg)", KG_GENERATOR_DEFAULTS)

    @property
    def pool_samples(self) -> int:
        """Posterior samples per head in the pool's mixture mode: N, as for proposals."""
        return self.num_samples


@dataclass
class KGDataConfig:
    """``data``: where the KG comes from and how it is split over clients.

    source: a folder with train/valid/test, ``pykeen:NAME``, or ``synthetic`` / ``synthetic:<seed>`` (the planted-
    rule KG of :mod:`kg.kg_synthetic`; ``synthetic`` holds its keyword arguments). ``federated_folder``: FedLU's
    ``clientK/{train,valid,test}.txt[.gz]`` layout instead (then ``source``/``num_clients``/``partition`` are
    ignored). ``partition`` (:mod:`kg.kg_partition`, seeded with the run seed): ``relation`` (disjoint relation
    sets), ``triple`` (the triples dealt out) or ``entity`` (the entities dealt out; a client keeps the triples
    between its own entities, and triples between two clients' entities are dropped). ``shares``: with
    ``partition: triple`` or ``entity``, one positive weight per client, part sizes (triples, or entities)
    proportional to them (e.g. ``[0.8, 0.1, 0.1]``: one data-rich, two data-poor clients).
    ``entity_types``: false ignores the KG's ``entity_types`` file (every rule head untyped, the ablation of typed
    heads).
    """

    source: str = "synthetic"
    num_clients: int = 1
    partition: str = "relation"
    shares: list[float] | None = None
    federated_folder: str | None = None
    synthetic: dict[str, Any] = field(default_factory=dict)
    entity_types: bool = True

    def __post_init__(self) -> None:
        if self.partition not in ("relation", "triple", "entity"):
            raise ValueError(
                f"data (fednsl-kg): partition={self.partition!r}; expected 'relation', 'triple' or 'entity'"
            )
        if self.num_clients < 1:
            raise ValueError(f"data (fednsl-kg): num_clients must be >= 1, got {self.num_clients}")
        if self.shares is not None and (
            self.partition not in ("triple", "entity") or len(self.shares) != self.num_clients
        ):
            raise ValueError(
                f"data (fednsl-kg): shares={self.shares} needs partition: triple or entity and one share per client "
                f"(num_clients={self.num_clients})"
            )


def resolve_source(path: str) -> str:
    """A data source from config: ``synthetic[:seed]`` and ``pykeen:NAME`` unchanged; ``documents:PATH`` with PATH
    resolved; an absolute path as is; ``../shared/data/...`` under ``$FEDNSL_SHARED_DATA`` when set; otherwise
    relative to the repository root."""
    if path == "synthetic" or path.startswith(("synthetic:", "pykeen:")):
        return path
    if path.startswith("documents:"):
        return "documents:" + resolve_source(path.removeprefix("documents:"))
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return str(p)
    shared = os.environ.get("FEDNSL_SHARED_DATA")
    if shared and p.parts[:3] == ("..", "shared", "data"):
        return str(Path(shared).joinpath(*p.parts[3:]))
    repo = REPO_ROOT / p
    return str(repo.resolve() if repo.exists() or not p.exists() else p.resolve())
