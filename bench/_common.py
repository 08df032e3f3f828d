"""Shared helpers for benchmark scripts: result files, machine facts, timed calls."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d")}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % t-interval over seeds (0 for one value)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2:
        return float(arr.mean()), 0.0
    from scipy.stats import t

    return float(arr.mean()), float(t.ppf(0.975, arr.size - 1) * arr.std(ddof=1) / math.sqrt(arr.size))


def call_times(fn: Callable[[], T], repeats: int) -> tuple[list[float], T]:
    """Wall seconds of each of ``repeats`` (at least 1) calls of ``fn``, and the last call's result."""
    times = []
    for _ in range(max(int(repeats), 1)):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out
