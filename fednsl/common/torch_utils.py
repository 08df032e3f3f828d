"""Torch helpers every task and method shares: model weights as named numpy arrays (what messages carry)
and scoping of torch's intra-op thread count."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

__all__ = ["get_weights", "set_weights", "torch_threads"]


def get_weights(model: nn.Module, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Named numpy copies of the state dict (restricted to ``keys`` if given, in that order)."""
    sd = model.state_dict()
    names = list(sd) if keys is None else list(keys)
    return {k: sd[k].detach().cpu().numpy().copy() for k in names}


def set_weights(model: nn.Module, arrays: Mapping[str, np.ndarray], keys: Sequence[str] | None = None) -> None:
    """Copy ``arrays`` into ``model``'s state (only ``keys`` if given, else every array); unknown names or
    shape mismatches raise."""
    sd = model.state_dict()
    names = list(arrays) if keys is None else list(keys)
    with torch.no_grad():
        for k in names:
            if k not in sd:
                raise KeyError(f"{type(model).__name__} has no parameter {k!r}")
            v = torch.as_tensor(np.asarray(arrays[k]))
            if v.shape != sd[k].shape:
                raise ValueError(f"{k}: shape {tuple(v.shape)} does not match the model's {tuple(sd[k].shape)}")
            sd[k].copy_(v)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` intra-op threads in the *calling* thread (0: unchanged), then restore.

    The in-process engine runs each client in a fresh thread; a fresh thread does not inherit the main
    thread's ``torch.set_num_threads`` and competing OpenMP pools then slow small models down by orders of
    magnitude on a loaded machine. Small models are fastest with one thread."""
    if n <= 0:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
