"""Shared helpers for benchmark scripts: result files and machine facts."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


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
