"""FedNSL numeric-variant options (``method_kwargs``).

The paper gives no optimiser settings for the numeric experiment; the client optimiser therefore matches the
FedAvg baseline (SGD, lr 0.005, B = 20, one local epoch), so that the KL prior is the only difference in the
local objective. λ (``kl_weight``) is unspecified in the paper (spec §8.3 suggests a sweep over
{0, 0.01, 0.1, 1, 10}); 1.0 is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

ESTEPS = ("product", "gmm", "classifier")


@dataclass
class FedNSLGMMConfig:
    hidden: int = 64  # client MLP 2 → 64 → 3 (App. A.6)
    lr: float = 0.005  # client SGD learning rate
    local_epochs: int = 1
    batch_size: int = 20
    kl_weight: float = 1.0  # λ of Eq. (2): CE + λ·KL(p_w(·|x) ‖ r_GMM(·|x))
    kl_direction: str = "reverse"  # "reverse": KL(p_w ‖ r) (spec §8.3 default); "forward": KL(r ‖ p_w)
    estep: str = "product"  # client posterior sent to the server, see FedNSLGMMClient.em
    em_steps: int = 1  # federated EM iterations per round
    reg_covar: float = 1e-6  # added to covariance diagonals (scikit-learn's default)
    resp_floor: float = 1e-6  # responsibilities are floored at this before the KL (numerical safety)

    def __post_init__(self) -> None:
        where = "method_kwargs (fednsl-gmm)"
        if self.kl_direction not in ("reverse", "forward"):
            raise ValueError(f"{where}: kl_direction must be 'reverse' or 'forward', got {self.kl_direction!r}")
        if self.estep not in ESTEPS:
            raise ValueError(f"{where}: estep must be one of {ESTEPS}, got {self.estep!r}")
        if self.em_steps < 1 or self.kl_weight < 0 or not 0 < self.resp_floor < 1:
            raise ValueError(
                f"{where}: need em_steps >= 1, kl_weight >= 0, 0 < resp_floor < 1; got "
                f"{self.em_steps}, {self.kl_weight}, {self.resp_floor}"
            )


def em_stage_names(em_steps: int) -> tuple[str, ...]:
    """The stages of one round's federated EM: ``em`` for one step, else ``em.1`` … ``em.E``."""
    return ("em",) if em_steps == 1 else tuple(f"em.{i + 1}" for i in range(em_steps))
