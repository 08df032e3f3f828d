"""LR-XFL options (``method_kwargs``).

Zhang, Yu, Yang, Lin, "LR-XFL: Logical Reasoning-based Explainable Federated Learning", AAAI 2024; defaults are
the values of the authors' code (maple1606/LR-XFL ``experiments/mnist.py``): Explainer(hidden [20], l1 = 1e-4,
temperature 0.7, lr 0.01, AdamW), 20 local epochs on full-batch data, logic generation threshold 0.7, 50 local
explanations, top-5 explanations and beam width 4 at the server, "large" user engagement (every client whose rule
is in the global rule gains aggregation weight).

Concepts are not part of the FedNSL experiment: LR-XFL needs boolean concepts, so here c = [x_d > t] for every
feature d and every threshold t of a fixed, data-independent grid (``concept_thresholds``, in raw data units);
the LEN sees their fuzzy version σ((x_d − t)/τ) (``concept_temperature`` τ, raw units).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LRXFLConfig:
    hidden: int = 20
    lr: float = 0.01
    local_epochs: int = 20
    l1: float = 1e-4
    temperature: float = 0.7
    concept_thresholds: list = field(default_factory=lambda: [4.0, 8.0, 12.0, 16.0])
    concept_temperature: float = 0.5
    logic_generation_threshold: float = 0.7
    local_topk_explanations: int = 50
    global_topk_explanations: int = 5
    beam_width: int = 4
    user_engagement_scale: str = "large"  # "large": all supporters of a chosen rule; "small": its best holders

    def __post_init__(self) -> None:
        where = "method_kwargs (lrxfl)"
        if self.user_engagement_scale not in ("large", "small"):
            raise ValueError(
                f"{where}: user_engagement_scale must be 'large' or 'small', got {self.user_engagement_scale!r}"
            )
        if not self.concept_thresholds or len(self.concept_thresholds) > 6:
            raise ValueError(
                f"{where}: concept_thresholds needs 1–6 values (2^(features×thresholds) cells), "
                f"got {self.concept_thresholds}"
            )
        if min(self.hidden, self.local_epochs, self.global_topk_explanations, self.beam_width) < 1:
            raise ValueError(f"{where}: hidden, local_epochs, global_topk_explanations, beam_width must be >= 1")
