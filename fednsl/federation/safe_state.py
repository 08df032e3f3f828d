"""Checkpoint payloads that load without unpickling code: numpy arrays become tagged byte tensors.

``torch.load(weights_only=True)`` accepts tensors, numbers, strings and dicts/lists/tuples only, so a
crafted ``.pt`` file cannot run code when it is read. States hold numpy arrays too; :func:`encode`
stores each as ``{TAG: uint8 tensor of its bytes, "dtype": dtype.str, "shape": [...]}`` and
:func:`decode` rebuilds it bit-exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

TAG = "__fednsl_ndarray__"


def encode(obj: Any) -> Any:
    """``obj`` with every numpy array/scalar replaced by a tagged dict of plain types and a tensor."""
    if isinstance(obj, (np.ndarray, np.generic)):
        arr = np.asarray(obj)
        if arr.dtype.hasobject or arr.dtype.fields is not None:
            raise TypeError(f"cannot checkpoint a numpy array of dtype {arr.dtype} (object/structured)")
        raw = np.ascontiguousarray(arr).tobytes()
        return {
            TAG: torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8),
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "scalar": isinstance(obj, np.generic),
        }
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [encode(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(encode(v) for v in obj)
    return obj


def decode(obj: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, dict):
        if TAG in obj:
            data = obj[TAG].numpy().tobytes()
            arr = np.frombuffer(data, dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
            return arr[()] if obj.get("scalar") else arr
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(decode(v) for v in obj)
    return obj
