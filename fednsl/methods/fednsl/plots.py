"""FedNSL figures: F1 and logic accuracy over rounds (the paper's Fig. 2 b1–b2) for one run, and overlays of
several runs (with/without KL, λ sweep: b1–b3) for the ablation driver."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

from fednsl.plots import (
    LEGEND_PT,
    MIN_PT,
    TITLE_PT,
    Coincidences,
    coinciding,
    figure_legend,
    run_config,
    run_subtitle,
    save_figure,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["evaluate_curves", "fednsl_figure", "plot_fednsl", "plot_overlay", "CLAIM", "COLOURS", "MODELS", "STYLES"]


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
#: One marker and line weight per model, drawn bottom to top: the backbone wide and pale underneath, the
#: recalibration thinner with hollow markers above it, the rule model on top, so that lines with equal values
#: (recalibration only = backbone where the recalibration keeps the backbone's ranking, for instance) stay
#: visible one inside the other.
STYLES: dict[str, dict[str, Any]] = {
    "backbone": {"marker": "^", "ms": 9, "lw": 4.0, "alpha": 0.55, "zorder": 2},
    "recalibration only": {"marker": "s", "ms": 6, "lw": 1.8, "mfc": "none", "mew": 1.5, "zorder": 3},
    "FedNSL": {"marker": "o", "ms": 4, "lw": 1.6, "zorder": 4},
}
_DRAW_ORDER = ("backbone", "recalibration only", "FedNSL")
CLAIM = "FedNSL: rule model against recalibration only and the backbone (seen: solid, unseen: dashed)"


def _panel(
    ax: Any,
    curves: Mapping[str, list[tuple[int, float]]],
    metric: str,
    title: str,
    group: str = "",
    same: Coincidences | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """One panel: each model of :data:`MODELS`, seen (solid) and unseen (dashed), drawn in the order and style
    of :data:`STYLES`, integer round axis; returns {legend label: line}.  ``same`` records which lines coincide
    (for the legend), under the panel's ``tag``."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for label, prefix in sorted(MODELS, key=lambda m: _DRAW_ORDER.index(m[0])):
        for part in ("seen", "unseen"):
            lines[f"{label}, {part}"] = curves.get(f"{group}{prefix}{part}_{metric}") or []
    if same is not None:
        same.add(tag, lines)
    handles: dict[str, Any] = {}
    for key, pts in lines.items():
        if not pts:
            continue
        label, part = key.rsplit(", ", 1)
        xs, ys = zip(*sorted(pts))
        (line,) = ax.plot(xs, ys, "-" if part == "seen" else "--", color=COLOURS[label], **STYLES[label])
        handles[key] = line
    ax.set_title(title, fontsize=TITLE_PT)
    ax.set_xlabel("round")
    ax.set_xticks(sorted({r for pts in lines.values() for r, _ in pts}))
    ax.tick_params(labelsize=MIN_PT)
    ax.grid(alpha=0.3)
    return handles


def fednsl_figure(curves: Mapping[str, list[tuple[int, float]]], subtitle: str = "") -> Any | None:
    """The figure of :func:`plot_fednsl` from ``{metric: [(round, value)]}``; None without any curve."""
    if not curves:
        return None
    poor = any(k.startswith("poor_") for k in curves)
    panels = [("f1", "(b1) F1, mean over clients", "", "b1"), ("logic", "(b2) logic accuracy", "", "b2")]
    if poor:
        panels.append(("f1", "F1, data-poor clients", "poor_", "data-poor"))
    width = 5.2 if len(panels) <= 2 else 4.6  # at most MAX_PX pixels wide at DPI
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 4.4), squeeze=False, layout="constrained")
    same = Coincidences()
    handles: dict[str, Any] = {}
    for ax, (metric, title, group, tag) in zip(axes[0], panels):
        for k, line in _panel(ax, curves, metric, title, group, same, tag).items():
            handles.setdefault(k, line)
    order = [f"{label}, {part}" for label, _ in MODELS for part in ("seen", "unseen")]
    keys = [k for k in order if k in handles]
    fig.suptitle(CLAIM + (f"\n{subtitle}" if subtitle else ""), fontsize=TITLE_PT + 1)
    figure_legend(fig, [handles[k] for k in keys], [same.label(k) for k in keys], max_cols=3)
    return fig


def plot_fednsl(run_dir: Path | str) -> Path | None:
    """RUN_DIR/plots/fednsl_f1_logic.png — the claim: the rule model (seen: per-triple rules; unseen: the
    transfer route) against recalibration only (φ zeroed; on unseen cells transferred as the rules) and the
    backbone alone, seen and unseen, F1 and logic
    accuracy (the paper's Fig. 2 b1–b2); a third panel for the data-poor clients of the shared split.  Titled
    with the data the run used; lines with equal values are drawn one inside the other and the legend says so
    (e.g. "recalibration only, unseen (= backbone, unseen)")."""
    run_dir = Path(run_dir)
    fig = fednsl_figure(evaluate_curves(run_dir), run_subtitle(run_config(run_dir)))
    if fig is None:
        return None
    return save_figure(fig, run_dir / "plots" / "fednsl_f1_logic.png", len(fig.axes))


def plot_overlay(
    runs: Mapping[str, Sequence[Path | str]], metrics: Sequence[tuple[str, str]], path: Path | str, title: str = ""
) -> Path:
    """One panel per (metric, panel title); one line per run group (mean over the group's runs/seeds, ± std
    shaded), each group with its own marker; a group whose mean equals an earlier one's in a panel is drawn on
    top, thinner, with hollow markers, and that panel's legend says "(= earlier)"."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    markers = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False, layout="constrained")
    for ax, (metric, panel_title) in zip(axes[0], metrics):
        groups: dict[str, tuple[list[int], Any, Any]] = {}
        for label, dirs in runs.items():
            series: dict[int, list[float]] = {}
            for d in dirs:
                for rnd, v in evaluate_curves(d).get(metric, []):
                    series.setdefault(rnd, []).append(v)
            xs = sorted(series)
            groups[label] = (xs, np.array([np.mean(series[x]) for x in xs]), np.array([np.std(series[x]) for x in xs]))
        covers = coinciding({k: list(zip(xs, mean.tolist())) for k, (xs, mean, _) in groups.items()})
        for i, (label, (xs, mean, std)) in enumerate(groups.items()):
            if not xs:
                continue
            on_top = label in covers
            (line,) = ax.plot(
                xs,
                mean,
                marker=markers[i % len(markers)],
                ms=7 if on_top else 4,
                mfc="none" if on_top else None,
                lw=1.0 if on_top else 1.8,
                zorder=3 if on_top else 2,
                label=f"{label} (= {covers[label]})" if on_top else label,
            )
            if len(runs[label]) > 1:
                ax.fill_between(xs, mean - std, mean + std, alpha=0.15, color=line.get_color())
        ax.set_title(panel_title, fontsize=TITLE_PT)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=MIN_PT)
        if ax.lines:
            ax.legend(fontsize=LEGEND_PT)
    if title:
        fig.suptitle(title, fontsize=TITLE_PT + 1)
    return save_figure(fig, Path(path), len(metrics))
