"""Reading a windowed time-series ``.npz`` (the FHWA layout) with one clear error per defect.

The layout: ``{train,val,test}_{x,y}`` float arrays of shape (clients, windows, steps), x with the input
length, y with the horizon. :func:`read_windows_npz` rejects a file that is not a readable zip of ``.npy``
arrays, pickled/object/string arrays, arrays that are not 3-D, client/window/step counts that disagree, and
zero windows — each with a ValueError naming the file and the array. :func:`check_finite` stops at the first
NaN/inf naming the client, array, window and step, or imputes it when ``data.impute`` asks.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

SPLITS = ("train", "val", "test")
ARRAYS = tuple(f"{s}_{xy}" for s in SPLITS for xy in ("x", "y"))
IMPUTE = ("none", "interpolate")


def read_windows_npz(path: Path, need: tuple[str, ...] = ARRAYS) -> dict[str, np.ndarray]:
    """The arrays ``need`` of ``path``, checked for the layout above (ValueError naming file and array)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in need if k not in z.files]
            if missing:
                raise ValueError(f"{path}: missing arrays {missing} (have {z.files})")
            arr = {}
            for k in need:
                try:
                    arr[k] = z[k]
                except ValueError as exc:  # object arrays need pickles, which are refused
                    raise ValueError(
                        f"{path}: array {k!r} cannot be read without unpickling ({exc}); expected a numeric array"
                    ) from None
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise ValueError(
            f"{path}: truncated or corrupt .npz archive ({exc}); expected a complete zip of .npy arrays {list(need)}"
        ) from None
    except OSError as exc:
        raise ValueError(f"{path}: not an .npz archive ({exc}); expected a zip of .npy arrays {list(need)}") from None
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path}: not an .npz archive ({exc}); expected a zip of .npy arrays {list(need)}") from None
    for k, a in arr.items():
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"{path}: array {k!r} has dtype {a.dtype}; expected numbers")
        if a.ndim != 3:
            raise ValueError(f"{path}: array {k!r} has shape {a.shape}; expected 3-D (clients, windows, steps)")
    clients = {k: a.shape[0] for k, a in arr.items()}
    if len(set(clients.values())) != 1:
        raise ValueError(f"{path}: the arrays disagree on the number of clients {clients}")
    for s in SPLITS:
        x, y = arr.get(f"{s}_x"), arr.get(f"{s}_y")
        if x is not None and y is not None and x.shape[1] != y.shape[1]:
            raise ValueError(f"{path}: {s}_x has {x.shape[1]} windows but {s}_y has {y.shape[1]}")
        for k, a in ((f"{s}_x", x), (f"{s}_y", y)):
            if a is not None and (a.shape[1] == 0 or a.shape[2] == 0):
                raise ValueError(f"{path}: array {k!r} has shape {a.shape}; expected at least one window and step")
    for xy in ("x", "y"):
        steps = {f"{s}_{xy}": arr[f"{s}_{xy}"].shape[2] for s in SPLITS if f"{s}_{xy}" in arr}
        if len(set(steps.values())) > 1:
            raise ValueError(f"{path}: the {xy} arrays disagree on the window length {steps}")
    if not clients or next(iter(clients.values())) == 0:
        raise ValueError(f"{path}: no clients (the arrays have 0 rows)")
    return arr


def check_finite(
    arr: dict[str, np.ndarray], names: list[str], path: Path, impute: str = "none", clients: int | None = None
) -> dict[str, np.ndarray]:
    """Stop at the first NaN/inf of the first ``clients`` rows, or fill them (``impute="interpolate"``).

    Interpolation is linear along the steps of each window (edges take the nearest finite value); a window
    with no finite step is an error either way. ``names[i]`` is the client id of row ``i``.
    """
    if impute not in IMPUTE:
        raise ValueError(f"data.impute must be one of {list(IMPUTE)}, got {impute!r}")
    n = len(names) if clients is None else clients
    out = dict(arr)
    for k, a in arr.items():
        part = a[:n]
        bad = ~np.isfinite(part)
        if not bad.any():
            continue
        c, w, t = (int(i) for i in np.argwhere(bad)[0])
        where = f"{path}: client {names[c]!r}, array {k!r}, window {w}, step {t} is {part[c, w, t]}"
        if impute == "none":
            raise ValueError(
                f"{where} ({int(bad.sum())} non-finite values in {k!r}); fix the data or set data.impute=interpolate"
            )
        fixed = np.array(a, dtype=np.float64)
        for ci, wi in {(int(i), int(j)) for i, j, _ in np.argwhere(bad)}:
            row = fixed[ci, wi]
            ok = np.isfinite(row)
            if not ok.any():
                raise ValueError(
                    f"{path}: client {names[ci]!r}, array {k!r}, window {wi} has no finite value to interpolate from"
                )
            steps = np.arange(len(row))
            fixed[ci, wi] = np.interp(steps, steps[ok], row[ok])
        out[k] = fixed.astype(a.dtype)
    return out
