"""pFedBayes options (``method_kwargs``).

Zhang, Li, Li, Xu, Wang, "Personalized Federated Learning via Variational Bayesian Inference", ICML 2022,
Alg. 1. Defaults are the authors' published settings (AllenBeau/pFedBayes ``main.py``): ζ = 10, Adam learning
rates 0.001 for the personal posterior and for the local copy of the global distribution, batch size 100,
20 local epochs with 5 personal steps each (``userpFedbayes.py``), initial means ~ N(0, 0.1²) and ρ = −3
(σ = softplus(ρ)), server averaging with β = 1. The reparameterisation noise is ε ~ N(0, I) as in the
paper's algorithm (the released code draws ε ~ N(0, 0.001²): set ``eps_std: 0.001`` for that).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PFedBayesConfig:
    hidden: int = 64  # Bayesian MLP 2 → 64 → 3 (FedNSL App. A.6 architecture)
    learning_rate: float = 0.001  # Adam step of the local copy v of the global distribution
    personal_learning_rate: float = 0.001  # Adam step of the personal posterior q_i
    zeta: float = 10.0  # ζ: weight of KL(q_i ‖ v) (scaled by 1/local_epochs as in the code)
    local_epochs: int = 20  # minibatches per round
    personal_steps: int = 5  # q_i steps per minibatch
    batch_size: int = 100
    weight_scale: float = 0.1  # std of the initial means
    rho_offset: float = -3.0  # initial ρ
    eps_std: float = 1.0  # std of the reparameterisation noise ε
    beta: float = 1.0  # server step (1 = plain weighted mean)
    eval_samples: int = 10  # Monte-Carlo samples of the predictive at evaluation

    def __post_init__(self) -> None:
        if min(self.local_epochs, self.personal_steps, self.batch_size, self.eval_samples) < 1:
            raise ValueError(
                "method_kwargs (pfedbayes): local_epochs, personal_steps, batch_size and eval_samples must be >= 1"
            )
