"""FedNSL figures: F1 and logic accuracy over rounds (the paper's Fig. 2 b1–b2) for one run, and overlays of
several runs (with/without KL, λ sweep: b1–b3) for the ablation driver."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["evaluate_curves", "plot_fednsl", "plot_overlay", "COLOURS", "MODELS"]


def evaluate_curves(run_dir: Path | str) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(round, value)]} of the server's evaluate-stage metrics in RUN_DIR/metrics.jsonl."""
    path = Path(run_dir) / "metrics.jsonl"
    out: dict[str, list[tuple[int, float]]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("scope") != "server" or row.get("stage") not in ("evaluate", "round"):
            continue
        for k, v in row.items():
            if k in ("round", "scope", "stage") or not isinstance(v, (int, float)):
                continue
            out.setdefault(k, []).append((int(row["round"]), float(v)))
    return out


#: One colour per model in every FedNSL figure; seen = solid line, unseen = dashed.
COLOURS = {"FedNSL": "tab:blue", "recalibration only": "tab:orange", "backbone": "tab:gray"}
MODELS = (("FedNSL", ""), ("recalibration only", "recal_"), ("backbone", "backbone_"))


def _panel(ax, curves: Mapping[str, list[tuple[int, float]]], metric: str, title: str, group: str = "") -> bool:
    """One panel: each model of :data:`MODELS`, seen (solid) and unseen (dashed), integer round axis."""
    from matplotlib.ticker import MaxNLocator

    drawn = False
    for label, prefix in MODELS:
        for part, style in (("seen", "-"), ("unseen", "--")):
            pts = curves.get(f"{group}{prefix}{part}_{metric}")
            if not pts:
                continue
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, style, color=COLOURS[label], label=f"{label} {part}", marker="o", ms=3)
            drawn = True
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    return drawn


def plot_fednsl(run_dir: Path | str) -> Path | None:
    """RUN_DIR/plots/fednsl_f1_logic.png — the claim: the rule model (seen: per-triple rules; unseen: the
    transfer route) against recalibration only (φ zeroed) and the backbone alone, seen and unseen, F1 and logic
    accuracy (the paper's Fig. 2 b1–b2); a third panel for the data-poor clients of the shared split."""
    run_dir = Path(run_dir)
    curves = evaluate_curves(run_dir)
    if not curves:
        return None
    poor = any(k.startswith("poor_") for k in curves)
    fig, axes = plt.subplots(1, 3 if poor else 2, figsize=(15 if poor else 10, 3.8))
    _panel(axes[0], curves, "f1", "(b1) F1, mean over clients")
    _panel(axes[1], curves, "logic", "(b2) logic accuracy")
    if poor:
        _panel(axes[2], curves, "f1", "F1, data-poor clients", group="poor_")
    fig.tight_layout()
    path = run_dir / "plots" / "fednsl_f1_logic.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_overlay(
    runs: Mapping[str, Sequence[Path | str]], metrics: Sequence[tuple[str, str]], path: Path | str, title: str = ""
) -> Path:
    """One panel per (metric, panel title); one line per run group (mean over the group's runs/seeds)."""
    import numpy as np

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False)
    for ax, (metric, panel_title) in zip(axes[0], metrics):
        for label, dirs in runs.items():
            series: dict[int, list[float]] = {}
            for d in dirs:
                for rnd, v in evaluate_curves(d).get(metric, []):
                    series.setdefault(rnd, []).append(v)
            if not series:
                continue
            xs = sorted(series)
            mean = np.array([np.mean(series[x]) for x in xs])
            std = np.array([np.std(series[x]) for x in xs])
            ax.plot(xs, mean, marker="o", ms=3, label=label)
            if len(dirs) > 1:
                ax.fill_between(xs, mean - std, mean + std, alpha=0.15)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("round")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
