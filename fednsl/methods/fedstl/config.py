"""FedSTL options (``method_kwargs``), resolving the paper's gaps as in spec §6 (defaults from the code)."""

from __future__ import annotations

from dataclasses import dataclass

from fednsl.tasks.timeseries.federated import TSTrainConfig
from fednsl.tasks.timeseries.properties import LP_KINDS

RULES = ("argmin", "balanced")
MEASURES = ("lp", "violation", "robustness", "unsatisfied")
CLUSTER_PROPERTIES = ("cluster", "owner")
HEAD_INITS = ("cluster", "own")


@dataclass
class FedSTLConfig(TSTrainConfig):
    """FedSTL (An et al., AAAI'24) Alg. 1–2.

    ``local_epochs`` = τ (client epochs on Eq. 2), ``cluster_epochs`` = κ (cluster epochs on Eq. 4);
    paper main text 6 + 4, appendix 8 + 2, code 10 + 2 (default)."""

    num_clusters: int = 5  # K (FedSTL App.: 5)
    rule: str = "argmin"  # CLUSTER_ID line 10: "argmin" (paper) | "balanced" (code's greedy)
    capacity: int | None = None  # balanced: members per cluster (None: ceil(participants / K))
    cluster_every: int = 1  # m: run CLUSTER_ID every m rounds (code: every round)
    cluster_measure: str = "lp"  # Alg. 1 line 8: "lp" (L_p, paper) or a rules.stl measure
    lam: float = 1.0  # λ of Eq. 2 / 4 (unreported; code: 1)
    lp: str = "l1"  # L_p: "l1" (paper), "squared" (code), "violation" (LogiCP g)
    cluster_epochs: int = 2  # κ (code: cluster_fine_tune_iter = 2)
    cluster_lr: float | None = None  # η_j of Eq. 4 (None: lr)
    cluster_property: str = "cluster"  # Eq. 4 φ_j: "cluster" (mined on the cluster's data) | "owner" (each
    #                                   sample under its owner's φ_i)
    head_init: str = "cluster"  # a client's head before its first update: "cluster" (copy of the cluster
    #                                   head it joins) | "own" (its random initial head)
    shared_fraction: float = 0.5  # share of each client's training windows sent as D_i^s (code: 50 %)
    sample_size: int | None = None  # windows per client scored by CLUSTER_ID (None: min over clients)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_clusters < 1:
            raise ValueError(f"num_clusters must be >= 1, got {self.num_clusters}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        if self.cluster_measure not in MEASURES:
            raise ValueError(f"cluster_measure must be one of {MEASURES}, got {self.cluster_measure!r}")
        if self.lp not in LP_KINDS:
            raise ValueError(f"lp must be one of {LP_KINDS}, got {self.lp!r}")
        if self.cluster_property not in CLUSTER_PROPERTIES:
            raise ValueError(f"cluster_property must be one of {CLUSTER_PROPERTIES}, got {self.cluster_property!r}")
        if not 0.0 < self.shared_fraction <= 1.0:
            raise ValueError(f"shared_fraction must be in (0, 1], got {self.shared_fraction}")
        if self.cluster_every < 1 or self.cluster_epochs < 0 or self.lam < 0:
            raise ValueError("need cluster_every >= 1, cluster_epochs >= 0, lam >= 0")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"head_init must be one of {HEAD_INITS}, got {self.head_init!r}")
        if self.cluster_property == "owner" and self.lp == "violation":
            raise ValueError("cluster_property='owner' needs a band L_p (lp='l1' or 'squared')")
