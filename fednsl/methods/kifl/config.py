"""KIFL options: ``method_kwargs`` (:class:`KIFLConfig`) and ``data`` (:class:`KIFLDataConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fednsl.methods.kifl.combine import CONFLICT_POLICIES

DEFAULT_KNOWLEDGE: dict[str, Any] = {
    "all": {"prediction": {"fit": "logreg", "feature_fraction": 0.3}, "range": {"fit": "tree_rules"}},
}


@dataclass
class KIFLDataConfig:
    name: str = "digits"  # fashion_mnist | covtype | digits | wine | breast_cancer
    path: str | None = None  # file/folder of the real data (covtype.data.gz, FashionMNIST idx folder)
    num_clients: int = 5  # M (§7.1: 5)
    classes_per_client: int = 5  # label skew (§7.1: each client sees 5 classes)
    train_fraction: float = 0.01  # share of a client's pool the model trains on (§7.3: 1/5/10/30 %)
    km_fraction: float = 0.5  # share of the pool only the client's fitted KMs see (disjoint)
    test_ratio: float = 0.1  # per-client test share when the data set has no official test split
    max_samples: int | None = None  # subsample the data set first (quick runs)


@dataclass
class KIFLConfig:
    lam: float = 0.3  # λ^m, trust in the P-KM (§7: 0.3)
    lam_per_client: dict[str, float] = field(default_factory=dict)  # client id → λ^m overriding `lam`
    with_km: bool = True  # train/predict through T^m (eq. 3); False = plain softmax (ML / FL rows)
    federated: bool = True  # Algorithm 1; False = each client trains alone (ML / MLwKM rows)
    model: str = "mlp"  # server model: mlp (Covtype) | lenet5 (FashionMNIST)
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    optimizer: str = "adam"  # adam (FedMech.jl) | sgd
    lr: float = 1e-3  # η
    momentum: float = 0.0  # sgd only
    weight_decay: float = 0.0
    local_epochs: int = 5  # E
    batch_size: int = 32  # C
    aggregation: str = "uniform"  # Alg. 1 line 10: (1/|S_t|) Σ θ^m; "examples" = weighted by |D^m|
    server_lr: float = 1.0
    finetune_epochs: int = 0  # local epochs from θ before evaluating (never uploaded)
    conflict: str = "drop_pkm"  # Assumption 5.1 repair: drop_pkm | union | error
    eps: float = 1e-12  # -log(f_y + eps) in the loss (eq. 5)
    knowledge: dict[str, Any] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_KNOWLEDGE.items()})

    def __post_init__(self) -> None:
        for cid, lam in [("lam", self.lam), *self.lam_per_client.items()]:
            if not 0.0 <= float(lam) <= 1.0:
                raise ValueError(f"method_kwargs (kifl): λ for {cid} must be in [0, 1], got {lam}")
        if self.conflict not in CONFLICT_POLICIES:
            raise ValueError(
                f"method_kwargs (kifl): conflict must be one of {CONFLICT_POLICIES}, got {self.conflict!r}"
            )
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"method_kwargs (kifl): optimizer must be adam or sgd, got {self.optimizer!r}")
        if self.aggregation not in ("uniform", "examples"):
            raise ValueError(f"method_kwargs (kifl): aggregation must be uniform or examples, got {self.aggregation!r}")
        if self.local_epochs < 1 or self.batch_size < 1 or self.finetune_epochs < 0:
            raise ValueError("method_kwargs (kifl): local_epochs and batch_size must be >= 1, finetune_epochs >= 0")
        if not isinstance(self.knowledge, dict):
            raise ValueError("method_kwargs (kifl): knowledge must map client ids (or 'all') to KM declarations")
