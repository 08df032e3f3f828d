"""pFedMe options (``method_kwargs``).

Dinh, Tran, Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS 2020, Alg. 1. Defaults are
the paper's synthetic-data, non-convex (DNN) setting as published with its code (CharlieDinh/pFedMe README,
"Synthetic … NonConvex case, same parameters"): η = 0.005 (``lr``), personal learning rate 0.01, λ = 20,
β = 1, R = 20 local rounds, K = 5 inner steps, |D| = 20. ``mu`` is the optional L2 term of the code's
``pFedMeOptimizer`` (not in the paper; 0 here).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PFedMeConfig:
    hidden: int = 64  # MLP 2 → 64 → 3 (FedNSL App. A.6)
    lr: float = 0.005  # η: local update of w_i (Alg. 1 line 7)
    personal_learning_rate: float = 0.01  # step of the K inner steps solving the Moreau envelope (Eq. 7)
    lamda: float = 20.0  # λ: proximal weight in F_i(w) = min_θ f_i(θ) + λ/2 ‖θ − w‖²
    beta: float = 1.0  # β: server step w ← (1 − β) w + β · mean_i w_i (Alg. 1 line 9)
    local_rounds: int = 20  # R
    K: int = 5  # inner steps per local round
    batch_size: int = 20  # |D|
    mu: float = 0.0

    def __post_init__(self) -> None:
        if self.local_rounds < 1 or self.K < 1 or self.batch_size < 1 or self.lamda < 0:
            raise ValueError(
                "method_kwargs (pfedme): need local_rounds, K, batch_size >= 1 and lamda >= 0, got "
                f"{self.local_rounds}, {self.K}, {self.batch_size}, {self.lamda}"
            )
