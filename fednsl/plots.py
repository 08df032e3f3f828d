"""PNG plots of a run's curves (server-scope metrics over rounds)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BOOKKEEPING = ("time_s", "bytes_down", "bytes_up", "replies", "dropped", "aborted")


def curves(rows: Iterable[Mapping[str, Any]], scope: str = "server") -> dict[str, list[tuple[int, float]]]:
    """``{"stage/metric": [(round, value), ...]}`` for every numeric metric of ``scope``."""
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        if r.get("scope") != scope:
            continue
        for k, v in r.items():
            if k in ("round", "scope", "stage") or not isinstance(v, (int, float)):
                continue
            if any(k.endswith(b) for b in BOOKKEEPING):
                continue
            out[f"{r['stage']}/{k}"].append((int(r["round"]), float(v)))
    return dict(out)


def plot_curves(series: Mapping[str, Sequence[tuple[int, float]]], path: Path, title: str = "") -> Path | None:
    """One panel per curve, written to ``path``; returns None when there is nothing to plot."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    n = len(series)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (name, pts) in zip(axes.flat, sorted(series.items())):
        xs, ys = zip(*sorted(pts))
        ax.plot(xs, ys, marker="o", ms=3)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(run_dir: Path, rows: Iterable[Mapping[str, Any]], title: str = "") -> list[Path]:
    """Write ``RUN_DIR/plots/metrics.png`` (all server curves)."""
    p = plot_curves(curves(rows), Path(run_dir) / "plots" / "metrics.png", title)
    return [p] if p else []
