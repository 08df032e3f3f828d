"""Options (``method_kwargs``) of the forecasting baselines; defaults from FedSTL's appendix."""

from __future__ import annotations

from dataclasses import dataclass

from fednsl.tasks.timeseries.federated import TSTrainConfig


@dataclass
class TSFedAvgConfig(TSTrainConfig):
    """FedAvg (McMahan et al. 2017): 10 local epochs, weighted mean of whole models."""


@dataclass
class TSFedProxConfig(TSTrainConfig):
    """FedProx (Li et al. 2020): local loss + μ/2·‖w − w_global‖²."""

    mu: float = 0.1  # FedSTL App.: μ = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu < 0:
            raise ValueError(f"mu must be >= 0, got {self.mu}")


@dataclass
class TSFedRepConfig(TSTrainConfig):
    """FedRep (Collins et al. 2021): ``head_epochs`` on the private head (body frozen), then
    ``local_epochs − head_epochs`` on the shared body (head frozen); the server averages bodies."""

    head_epochs: int | None = None  # None: round(0.8·local_epochs) (FedSTL App.: 8 of the 10 local epochs)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head_epochs is None:
            self.head_epochs = round(0.8 * self.local_epochs)
        if not 0 <= self.head_epochs <= self.local_epochs:
            raise ValueError(f"head_epochs must be in [0, local_epochs={self.local_epochs}], got {self.head_epochs}")


@dataclass
class TSDittoConfig(TSTrainConfig):
    """Ditto (Li et al. 2021): global model by FedAvg; personal v_i on f_i(v) + λ/2·‖v − w^t‖²."""

    lam: float = 1.0  # FedSTL App.: λ = 1
    personal_epochs: int | None = None  # epochs on v_i per round (None: local_epochs)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")


@dataclass
class TSIFCAConfig(TSTrainConfig):
    """IFCA (Ghosh et al. 2020): K cluster models; each client trains the one with the lowest loss."""

    num_clusters: int = 5  # FedSTL App.: K = 5
    selection_split: str = "train"  # data a client scores the K models on

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_clusters < 1:
            raise ValueError(f"num_clusters must be >= 1, got {self.num_clusters}")
        if self.selection_split not in ("train", "val"):
            raise ValueError(f"selection_split must be 'train' or 'val', got {self.selection_split!r}")
