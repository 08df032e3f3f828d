"""FedNSL options: ``method_kwargs`` (:class:`FedNSLConfig`, with nested ``generator`` and ``backbone``) and
``data`` (:class:`FedNSLDataConfig`). Unknown keys raise an error listing the valid ones.

Defaults follow LogiRE where the FedNSL paper is silent (spec §8.13): N = 50 samples per triple, bodies of
length ≤ 3, pool momentum 0.1, generator Adam 1e-3 with StepLR γ = 0.9; the per-round generator budget and the
scorer's fit are scaled to CPU runs (docs/methods/fednsl.md, Options).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fednsl.config import REPO_ROOT
from fednsl.methods.fednsl.messages import SCORER_KEYS, ScorerOptions
from fednsl.tasks.rule_learning.options import GeneratorOptions

__all__ = ["GeneratorOptions", "FedNSLConfig", "FedNSLDataConfig", "resolve_data_path"]


_CHOICES = {
    "kl_direction": ("reverse", "forward"),
    "prior_source": ("renormalised", "counts", "mixed"),
    "posterior_instances": ("all", "positive"),
    "pool_mode": ("momentum", "mixture"),
    "path_score": ("graph", "cached_path", "max_edge"),
    "mining_edges": ("backbone", "combo", "all"),
    "scorer_bias_init": ("base_rate", "uniform"),
    "kl_scale": ("per_cell", "per_triple"),
    "scorer_optimizer": ("lbfgs", "adam"),
    "transfer": ("prior", "published"),
}


@dataclass
class FedNSLConfig:
    """``method_kwargs`` of ``method: fednsl``."""

    num_samples: int = 50  # N ancestral samples per triple (Eq. 5)
    max_body_len: int = 3
    kl_weight: float = 0.1  # λ (Eq. 2)
    kl_direction: str = "reverse"  # KL(q‖p) (reverse) or KL(p‖q) (forward); spec §8.3
    # the same p_θ in the posterior (Eq. 9) and in the KL (Eq. 11): renormalised T_θ, or n_j/N ("counts": the
    # posterior too), or mixed (the old reading: log T_θ in Eq. 9, n_j/N in the KL)
    prior_source: str = "renormalised"
    count_correction: bool = False  # LogiRE's /n_j in H and ·n_j in q (spec §8.1); off: q ∝ T_θ·exp(½yw φ)
    posterior_instances: str = "all"  # instances averaged into q_t: all labelled cells (LogiRE), or positives
    pass_through: bool = False  # x_r(h,t) as an extra feature outside the KL (old); off: the body [r] carries it
    kl_scale: str = "per_cell"  # KL weighted by each triple's cells / all cells (the BCE's scale), or per_triple
    scorer_optimizer: str = "lbfgs"  # lbfgs (to scorer_tol) or adam (scorer_steps steps of scorer_lr)
    scorer_tol: float = (
        1e-5  # L-BFGS tolerance on the max-abs gradient of the loss summed over cells; iterations logged
    )
    scorer_steps: int = 150  # max L-BFGS iterations / Adam steps
    scorer_lr: float = 0.1  # Adam only
    scorer_weight_decay: float = 1e-3  # L2 on (w, u) (makes the fit strictly convex so L-BFGS converges)
    scorer_bias_init: str = "base_rate"  # b_t at the local positive-rate logit, or "uniform" U(-1,1) (LogiRE)
    transfer: str = "published"  # route to unseen cells: prior (aggregated posterior) | published (owners' scorer)
    transfer_top: int = 5  # transfer scorer: best of the k most probable bodies
    pool_mode: str = "momentum"  # server pool update (spec §8.9): LogiRE momentum or A.10 mixture
    pool_ratio: float = 0.1
    pool_samples: int = 1000  # posterior samples per triple in mixture mode
    path_score: str = "graph"  # Fast-FedNSL (App. A.8): graph | cached_path | max_edge
    fast_after: int = 3  # I: rounds < I always use the graph search
    mining_edges: str = "backbone"  # round-0 co-occurrence edges: seen-combo gold (+ backbone edges elsewhere)
    mining_threshold: float = 0.5  # backbone value above which a non-combo pair counts as an edge
    top_k: int = 5  # planted / golden rule recall in the top-k bodies per triple
    min_instances: int = 1  # a triple is fitted locally when it has at least this many instances
    num_threads: int = 1  # torch threads for FedNSL's own work (0 = torch default); small models
    # run much faster single-threaded, above all on busy machines
    generator: dict[str, Any] = field(default_factory=dict)
    backbone: dict[str, Any] = field(default_factory=lambda: {"name": "federated-features"})

    def __post_init__(self) -> None:
        for name, valid in _CHOICES.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"method_kwargs.{name} must be one of {valid}, got {getattr(self, name)!r}")
        if self.transfer == "published" and self.pass_through:
            raise ValueError(
                "method_kwargs.transfer: published publishes (w, b) only; it needs pass_through: false "
                "(the body [r] carries x_r)"
            )
        if self.kl_weight < 0:
            raise ValueError(f"method_kwargs.kl_weight (λ) must be >= 0, got {self.kl_weight}")
        if not 0.0 <= self.pool_ratio <= 1.0:
            raise ValueError(f"method_kwargs.pool_ratio must be in [0, 1], got {self.pool_ratio}")
        for name in ("num_samples", "max_body_len", "top_k", "min_instances"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"method_kwargs.{name} must be >= 1, got {getattr(self, name)}")
        if self.scorer_steps < 0 or self.scorer_lr <= 0 or self.scorer_tol <= 0 or self.scorer_weight_decay < 0:
            raise ValueError(
                "method_kwargs.scorer_steps and scorer_weight_decay must be >= 0, scorer_lr and scorer_tol > 0"
            )
        if not isinstance(self.backbone, dict) or "name" not in self.backbone:
            raise ValueError(
                "method_kwargs.backbone must be a mapping with a 'name' (federated-features, logire-dump, oracle)"
            )
        self.gen = GeneratorOptions.build(self.generator, "method_kwargs.generator")

    def scorer_options(self) -> ScorerOptions:
        """The client-fit options of this config: each :data:`~.messages.SCORER_KEYS` entry is the option of the
        same name here, or ``scorer_<name>`` (``steps``, ``lr``, ``weight_decay``, ``bias_init``, ``optimizer``,
        ``tol``)."""
        return ScorerOptions(**{k: getattr(self, k if hasattr(self, k) else f"scorer_{k}") for k in SCORER_KEYS})

    def backbone_spec(self) -> tuple[str, dict[str, Any]]:
        opts = dict(self.backbone)
        return str(opts.pop("name")), opts

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["generator"] = asdict(self.gen)
        return out


@dataclass
class FedNSLDataConfig:
    """``data`` of ``method: fednsl``: where documents come from and how they are split over clients."""

    path: str = "synthetic"  # dataset dir/file (dwie, docred, synthetic) or "synthetic[:k=v,...]"
    format: str = "auto"
    synthetic: dict[str, Any] = field(default_factory=dict)  # PlantedRuleConfig fields (path == "synthetic")
    synthetic_seed: int = 0
    num_clients: int = 4
    split: str = "paper"  # paper: one client per combo (cycle); shared: a data-rich and a data-poor client per combo
    poor_share: float = 0.2  # shared split: the data-poor client's share of its combo's documents
    groups: Any = None  # [[types of A], [types of B]], "a,b|c,d", or None (corpus default)
    split_seed: int = 0
    test_ratio: float = 0.25
    holdout: float = 0.1  # share of each client's train documents held out for thresholds
    max_docs: int | None = None  # keep a seeded subset of this many documents (smoke runs)
    golden_rules: str | None = "auto"  # rule file for logic accuracy; auto: planted rules / golden_rules.txt
    skip_bad: bool = False

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"data.num_clients must be >= 1, got {self.num_clients}")
        if self.split not in ("paper", "shared"):
            raise ValueError(f"data.split must be 'paper' or 'shared', got {self.split!r}")
        if not 0.0 < self.poor_share < 0.5:
            raise ValueError(f"data.poor_share must be in (0, 0.5), got {self.poor_share}")
        if self.max_docs is not None and self.max_docs < self.num_clients:
            raise ValueError(f"data.max_docs={self.max_docs} is smaller than data.num_clients={self.num_clients}")


def resolve_data_path(path: str) -> Path | str:
    """A data path from config: absolute as is; ``../shared/data/...`` under ``$FEDNSL_SHARED_DATA`` when set;
    otherwise relative to the repository root (falling back to the working directory). ``synthetic[:...]``
    specs are returned unchanged."""
    if path == "synthetic" or path.startswith("synthetic:"):
        return path
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return p
    shared = os.environ.get("FEDNSL_SHARED_DATA")
    parts = p.parts
    if shared and len(parts) >= 3 and parts[:3] == ("..", "shared", "data"):
        return Path(shared).joinpath(*parts[3:])
    repo = REPO_ROOT / p
    if repo.exists() or not p.exists():
        return repo.resolve() if repo.exists() else repo
    return p.resolve()
