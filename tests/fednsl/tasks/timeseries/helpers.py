"""Tiny forecasting problems shared by the FedSTL / time-series baseline tests."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fednsl.config import RunConfig
from fednsl.tasks.timeseries.data import ClientSeries
from fednsl.tasks.timeseries.models import Forecaster

TINY_DATA = {"name": "synthetic", "num_clients": 4, "groups": 2, "days": 14, "input_len": 48}
TINY_MODEL = {"name": "rnn", "hidden": 4, "layers": 1}


def tiny_config(method: str, rounds: int = 2, seed: int = 0, **kwargs) -> RunConfig:
    mk = {"model": dict(TINY_MODEL), "local_epochs": 1, "lr": 0.05, "momentum": 0.0, **kwargs}
    return RunConfig(method=method, rounds=rounds, seed=seed, method_kwargs=mk, data=dict(TINY_DATA),
                     federation={"fraction": 0.5})


class LinearForecaster(Forecaster):
    """Body z = B x (L → k, shared), head ŷ = A z + c (k → H, private): gradients derivable by hand."""

    default_shared = ("body",)

    def __init__(self, input_len: int, horizon: int, k: int = 2, seed: int = 0) -> None:
        super().__init__(input_len, horizon)
        g = torch.Generator().manual_seed(seed)
        self.body = nn.Linear(input_len, k, bias=False)
        self.head = nn.Linear(k, horizon)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        self._set_shared(None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def linear_grads(B: np.ndarray, A: np.ndarray, c: np.ndarray, X: np.ndarray, Y: np.ndarray):
    """∂/∂(B, A, c) of f = mean((A B x + c − y)²) over all n·H entries (float64)."""
    Z = X @ B.T
    R = Z @ A.T + c - Y
    s = 2.0 / R.size
    gA = s * R.T @ Z
    gc = s * R.sum(0)
    gB = s * (R @ A).T @ X
    return gB, gA, gc


def series(n: int = 6, length: int = 5, horizon: int = 3, seed: int = 0) -> ClientSeries:
    rng = np.random.default_rng(seed)
    x = rng.random((n, length)).astype(np.float32)
    y = rng.random((n, horizon)).astype(np.float32)
    return ClientSeries(x, y, x[:2], y[:2], x[:2], y[:2])
