"""Per-FedAvg options (``method_kwargs``).

Fallah, Mokhtari, Ozdaglar, "Personalized Federated Learning with Theoretical Guarantees: A Model-Agnostic
Meta-Learning Approach", NeurIPS 2020, Alg. 1 (local meta-update w ← w − β ∇̃F_i(w), F_i(w) = f_i(w − α∇f_i(w))).
The authors released no code; the defaults are the Per-FedAvg runs in the comparison of Dinh et al. (NeurIPS
2020; CharlieDinh/pFedMe README, "Synthetic … NonConvex case, same parameters"): α = 0.005, β = 0.001,
τ = 20 local steps, batch size 20, first-order variant (Per-FedAvg (FO), as that code implements).
``variant="hf"`` is Per-FedAvg (HF) with the Hessian-vector product on an independent batch D'' computed exactly
by automatic differentiation (the paper approximates the same product by finite differences).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PerFedAvgConfig:
    hidden: int = 64  # MLP 2 → 64 → 3 (FedNSL App. A.6)
    alpha: float = 0.005  # α: inner (personalisation) step
    beta: float = 0.001  # β: outer (meta) step
    local_steps: int = 20  # τ
    batch_size: int = 20  # |D| = |D'| = |D''|
    variant: str = "fo"  # "fo" | "hf"
    server_lr: float = 1.0  # FedAvg averaging of the returned w_i

    def __post_init__(self) -> None:
        if self.variant not in ("fo", "hf"):
            raise ValueError(f"method_kwargs (perfedavg): variant must be 'fo' or 'hf', got {self.variant!r}")
        if self.local_steps < 1 or self.batch_size < 1:
            raise ValueError("method_kwargs (perfedavg): local_steps and batch_size must be >= 1")
