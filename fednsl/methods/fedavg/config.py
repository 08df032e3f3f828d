"""FedAvg options (``method_kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FedAvgConfig:
    hidden: int = 32
    lr: float = 0.1          # client SGD learning rate
    local_epochs: int = 1    # E in McMahan et al. (2017)
    batch_size: int = 32     # B
    server_lr: float = 1.0   # 1.0 = plain FedAvg (server applies the averaged weights)
