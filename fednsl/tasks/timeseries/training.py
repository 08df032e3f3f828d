"""Local optimisation and evaluation of forecasters (shared by every time-series method).

* :func:`sgd_epochs` — ``epochs`` passes of minibatch SGD (momentum, weight decay) over ``(x, y)`` on
  ``objective(pred, y_batch) + regulariser()``, updating only ``params`` (default: all).  Batches are
  drawn with an explicit ``torch.Generator``; ``max_batches`` caps batches per epoch (the FedSTL code's
  ``local_updates``).  A fresh optimiser per call (momentum restarts each round, as in the code).
* :func:`predict` — batched inference without gradients.
* :func:`forecast_metrics` — MSE (normalised and original units), ρ% (share of forecasts whose
  robustness w.r.t. the client's property is ≥ 0) and the per-step satisfaction rate.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from fednsl.tasks.timeseries.properties import ClientProperty
from kg.seeding import seeded_global_rng

Objective = Callable[..., torch.Tensor]  # (pred, y_batch, *aux_batch) -> scalar


def mse_objective(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (pred - y).pow(2).mean()


def minibatches(
    n: int, batch_size: int, gen: torch.Generator, max_batches: int | None = None
) -> Iterator[torch.Tensor]:
    """Index batches of one shuffled pass over ``n`` items (at most ``max_batches``)."""
    order = torch.randperm(n, generator=gen)
    for b, start in enumerate(range(0, n, batch_size)):
        if max_batches is not None and b >= max_batches:
            return
        yield order[start : start + batch_size]


def _uses_dropout(model: nn.Module) -> bool:
    """Whether training samples dropout masks (from the global RNG)."""
    return any(
        (isinstance(m, nn.Dropout) and m.p > 0) or (isinstance(m, nn.RNNBase) and m.dropout > 0)
        for m in model.modules()
    )


def sgd_epochs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    gen: torch.Generator,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    params: Sequence[nn.Parameter] | None = None,
    objective: Objective = mse_objective,
    regulariser: Callable[[], torch.Tensor] | None = None,
    max_batches: int | None = None,
    grad_clip: float | None = None,
    aux: Sequence[torch.Tensor] = (),
) -> float:
    """Minibatch SGD; returns the mean objective (without the regulariser) over the steps taken.

    ``aux``: per-row tensors (same first dimension as ``y``) passed, batched alongside, to
    ``objective(pred, y_batch, *aux_batch)`` — e.g. per-sample property bands."""
    params = list(model.parameters()) if params is None else list(params)
    if epochs <= 0 or not params or len(y) == 0:
        return float("nan")
    train_set = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in train_set]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    dropout = _uses_dropout(model)
    # dropout draws from the global RNG: seed a forked copy from gen (reproducible, restored afterwards)
    fork = seeded_global_rng(int(torch.randint(0, 2**62, (1,), generator=gen))) if dropout else contextlib.nullcontext()
    total, steps = 0.0, 0
    was_training = model.training
    with fork:
        model.train()
        for p in frozen:
            p.requires_grad_(False)
        try:
            for _ in range(epochs):
                for idx in minibatches(len(y), batch_size, gen, max_batches):
                    opt.zero_grad(set_to_none=True)
                    loss = objective(model(x[idx]), y[idx], *(a[idx] for a in aux))
                    full = loss + regulariser() if regulariser is not None else loss
                    full.backward()
                    if grad_clip is not None:
                        nn.utils.clip_grad_norm_(params, grad_clip)
                    opt.step()
                    total += float(loss.detach())
                    steps += 1
        finally:
            for p in frozen:
                p.requires_grad_(True)
            model.train(was_training)
    return total / max(steps, 1)


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor | np.ndarray, batch_size: int = 1024) -> torch.Tensor:
    """``model(x)`` in eval mode, batched; ``(n, L) → (n, H)``."""
    x = torch.as_tensor(x)
    was = model.training
    model.eval()
    try:
        if len(x) == 0:
            return torch.empty(0, getattr(model, "horizon", 0))
        return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    finally:
        model.train(was)


METRIC_NAMES = ("mse", "mse_orig", "rho", "step_rho")


@torch.no_grad()
def forecast_metrics(
    pred: torch.Tensor, y: torch.Tensor, prop: ClientProperty | None, scale: float, prefix: str = ""
) -> dict[str, float]:
    """``{prefix}mse`` (normalised), ``{prefix}mse_orig`` (= mse·scale², original units),
    ``{prefix}rho`` (% of forecasts with ρ(φ_i, ŷ) ≥ 0) and ``{prefix}step_rho`` (% of steps inside
    the band; band templates only)."""
    pred, y = torch.as_tensor(pred, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    mse = float((pred - y).pow(2).mean())
    out = {f"{prefix}mse": mse, f"{prefix}mse_orig": mse * float(scale) ** 2}
    if prop is not None:
        out[f"{prefix}rho"] = 100.0 * float(prop.satisfied(pred).float().mean())
        if prop.lower is not None:
            out[f"{prefix}step_rho"] = 100.0 * float(prop.step_satisfied(pred).float().mean())
    return out


__all__ = ["METRIC_NAMES", "Objective", "forecast_metrics", "minibatches", "mse_objective", "predict", "sgd_epochs"]
