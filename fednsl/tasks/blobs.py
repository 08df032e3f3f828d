"""A small synthetic classification task and MLP for FedAvg and the weight-sharing baselines.

Each client gets Gaussian-blob samples whose class proportions follow a Dirichlet(α) draw
(label skew, the usual non-IID benchmark), split into train and test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kg.seeding import isolated_global_rng


@dataclass
class BlobsConfig:
    name: str = "blobs"
    num_clients: int = 10
    samples_per_client: int = 200
    features: int = 10
    classes: int = 3
    dirichlet_alpha: float = 0.5  # label skew: smaller = more heterogeneous
    class_sep: float = 1.0
    test_ratio: float = 0.25

    def __post_init__(self) -> None:
        for name, low, high in SIZE_BOUNDS:
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"data.{name} must be from {low} to {high:,}, got {value:,}")
        per_client = self.samples_per_client * self.features
        if per_client > MAX_VALUES_PER_CLIENT or per_client * self.num_clients > MAX_VALUES:
            raise ValueError(
                f"data.num_clients × data.samples_per_client × data.features = {per_client * self.num_clients:,} "
                f"values is too large (at most {MAX_VALUES_PER_CLIENT:,} per client and {MAX_VALUES:,} in all)"
            )
        if not self.dirichlet_alpha > 0:
            raise ValueError(f"data.dirichlet_alpha must be > 0, got {self.dirichlet_alpha}")
        if not self.class_sep >= 0:
            raise ValueError(f"data.class_sep must be >= 0, got {self.class_sep}")
        if not 0 <= self.test_ratio < 1:
            raise ValueError(f"data.test_ratio must be in [0, 1), got {self.test_ratio}")


# sizes a synthetic set may have: far above any experiment, far below what exhausts a machine's memory
SIZE_BOUNDS = (
    ("num_clients", 1, 10_000),
    ("samples_per_client", 1, 1_000_000),
    ("features", 1, 100_000),
    ("classes", 1, 10_000),
)
MAX_VALUES_PER_CLIENT = 20_000_000  # one client's features (float64 while drawn: 160 MB)
MAX_VALUES = 100_000_000  # all clients' features (float32: 400 MB)


@dataclass
class ClientData:
    x_train: np.ndarray  # (n, d) float32
    y_train: np.ndarray  # (n,) int64
    x_test: np.ndarray
    y_test: np.ndarray


def make_blobs_federation(cfg: BlobsConfig, seed: int) -> dict[str, ClientData]:
    """Per-client train/test data; seeded and independent of torch's global RNG."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, cfg.class_sep, size=(cfg.classes, cfg.features))
    out: dict[str, ClientData] = {}
    width = len(str(cfg.num_clients - 1))
    for i in range(cfg.num_clients):
        props = rng.dirichlet(np.full(cfg.classes, cfg.dirichlet_alpha))
        y = rng.choice(cfg.classes, size=cfg.samples_per_client, p=props)
        x = centers[y] + rng.normal(size=(cfg.samples_per_client, cfg.features))
        n_test = int(round(cfg.test_ratio * cfg.samples_per_client))
        out[f"c{i:0{width}d}"] = ClientData(
            x[n_test:].astype(np.float32),
            y[n_test:].astype(np.int64),
            x[:n_test].astype(np.float32),
            y[:n_test].astype(np.int64),
        )
    return out


@isolated_global_rng
def mlp(features: int, hidden: int, classes: int, seed: int) -> nn.Module:
    """``features → hidden → classes`` ReLU MLP, initialised from ``seed`` (not the global RNG)."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
    with torch.no_grad():
        for p in model.parameters():
            bound = 1.0 / np.sqrt(p.shape[-1] if p.dim() > 1 else hidden)
            p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=gen))
    return model
