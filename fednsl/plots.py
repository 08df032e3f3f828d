"""PNG plots of a run: ``metrics.png`` (the method's key server metrics over rounds) and one curated figure per
method that shows its claim (target line, in-run baselines overlaid, one colour per series across panels).

A method declares its figure with :class:`PlotSpec` in ``fednsl/methods/<m>/plots.py`` and registers it with
:func:`register_plot`; :func:`plot_run` (called by the pipeline after the last round) finds it by the run's
method name.  Methods without a spec keep the generic ``metrics.png`` of every server curve.  matplotlib is
imported only when a figure is drawn.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fednsl.registry import Registry

BOOKKEEPING = ("time_s", "bytes_down", "bytes_up", "replies", "dropped", "aborted")
Role = Literal["method", "variant", "baseline", "reference"]
#: PNG text key holding the number of panels drawn (read back by tests and tools).
PANELS_KEY = "fednsl:panels"
DPI = 110


@dataclass(frozen=True)
class Series:
    """One line: ``key`` is ``"stage/metric"`` of a server curve.  ``role``: the method's own rows are
    solid (``method``, ``variant``), in-run baselines dashed grey shades, references (ground truth) dotted."""

    key: str
    label: str
    role: Role = "method"


@dataclass(frozen=True)
class Panel:
    """One axes: its series, y label, and an optional horizontal target (a number, or a function of the
    run's config dict, e.g. ``100·(1 − α)``)."""

    title: str
    series: tuple[Series, ...]
    ylabel: str = ""
    target: float | Callable[[Mapping[str, Any]], float | None] | None = None
    target_label: str = "target"
    integer_y: bool = False


@dataclass(frozen=True)
class PlotSpec:
    """A method's curated figure (``plots/<name>.png``) and the key metrics of its ``metrics.png``."""

    name: str
    claim: str
    panels: tuple[Panel, ...]
    key_metrics: tuple[str, ...] = field(default=())

    def metrics(self) -> tuple[str, ...]:
        """``key_metrics``, or every series of the panels when none are declared."""
        if self.key_metrics:
            return self.key_metrics
        return tuple(dict.fromkeys(s.key for p in self.panels for s in p.series))


PLOT_SPECS: Registry[PlotSpec] = Registry("plot spec")


def register_plot(*methods: str) -> Callable[[PlotSpec], PlotSpec]:
    """Register ``spec`` as the curated figure of each method name in ``methods``."""

    def deco(spec: PlotSpec) -> PlotSpec:
        for m in methods:
            PLOT_SPECS.register(m)(spec)
        return spec

    return deco


def plot_spec(method: str) -> PlotSpec | None:
    """The registered spec of ``method`` (method packages register theirs when imported), or None."""
    from fednsl.registry import load_methods

    load_methods()
    return PLOT_SPECS.get(method) if method in PLOT_SPECS else None


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


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _round_axis(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)


def _save(fig: Any, path: Path, panels: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={PANELS_KEY: str(panels)})
    _pyplot().close(fig)
    return path


def plot_curves(series: Mapping[str, Sequence[tuple[int, float]]], path: Path, title: str = "") -> Path | None:
    """One panel per curve (sorted by name), written to ``path``; returns None when there is nothing to plot."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    plt = _pyplot()
    n = len(series)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows + 0.4), squeeze=False, layout="constrained")
    for ax, (name, pts) in zip(axes.flat, sorted(series.items())):
        xs, ys = zip(*sorted(pts))
        ax.plot(xs, ys, marker="o", ms=3)
        ax.set_title(name, fontsize=9)
        _round_axis(ax)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return _save(fig, path, n)


_GREYS = ("#555555", "#999999", "#333333", "#bbbbbb")
_OWN = ("C0", "C1", "C2", "C4", "C5", "C6", "C8", "C9")  # tab10 without red (targets), grey and olive
_LINESTYLE = {"method": "-", "variant": "-", "baseline": "--", "reference": ":"}


def series_colours(spec: PlotSpec) -> dict[str, str]:
    """One colour per series label, the same in every panel: the method's rows take tab10 colours (never the
    red of target lines) in order of first appearance, baselines shades of grey, references black."""
    out: dict[str, str] = {}
    own, grey = 0, 0
    for p in spec.panels:
        for s in p.series:
            if s.label in out:
                continue
            if s.role == "reference":
                out[s.label] = "black"
            elif s.role == "baseline":
                out[s.label] = _GREYS[grey % len(_GREYS)]
                grey += 1
            else:
                out[s.label] = _OWN[own % len(_OWN)]
                own += 1
    return out


def plot_curated(
    spec: PlotSpec,
    series: Mapping[str, Sequence[tuple[int, float]]],
    path: Path,
    config: Mapping[str, Any] | None = None,
    subtitle: str = "",
) -> Path | None:
    """The method's claim figure: the spec's panels that have data, one legend for the figure."""
    panels = [p for p in spec.panels if any(series.get(s.key) for s in p.series)]
    if not panels:
        return None
    plt = _pyplot()
    colours = series_colours(spec)
    cols = min(2, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.3 * rows + 0.9), squeeze=False, layout="constrained")
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes.flat, panels):
        for s in panel.series:
            pts = series.get(s.key)
            if not pts:
                continue
            xs, ys = zip(*sorted(pts))
            (line,) = ax.plot(
                xs,
                ys,
                _LINESTYLE[s.role],
                color=colours[s.label],
                marker="o" if s.role in ("method", "variant") else None,
                ms=3,
                lw=1.8 if s.role == "method" else 1.3,
            )
            handles.setdefault(s.label, line)
        target = panel.target(config or {}) if callable(panel.target) else panel.target
        if target is not None:
            t = ax.axhline(target, color="tab:red", ls="--", lw=1.2)
            handles.setdefault(f"{panel.target_label} ({target:g})", t)
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(panel.ylabel)
        _round_axis(ax)
        if panel.integer_y:
            from matplotlib.ticker import MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(spec.claim + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(5, len(handles)), fontsize=8)
    return _save(fig, path, len(panels))


def link_prediction_spec(keys: Iterable[str]) -> PlotSpec | None:
    """A generic link-prediction figure from whichever server curves are MRR / Hits@k (``stage/…mrr…``,
    ``stage/…hits@k…``); None when there are none.  Used for methods that register no spec."""
    keys = sorted(keys)
    mrr = [k for k in keys if "mrr" in k.split("/", 1)[-1]]
    hits = [k for k in keys if "hits@" in k.split("/", 1)[-1]]
    if not mrr:
        return None

    def panel(title: str, group: list[str], ylabel: str) -> Panel:
        return Panel(title, tuple(Series(k, k, "method" if i == 0 else "variant") for i, k in enumerate(group)), ylabel)

    panels: tuple[Panel, ...] = (panel("Mean reciprocal rank (higher is better)", mrr, "MRR"),)
    if hits:
        panels += (panel("Hits@k (higher is better)", hits, "hits"),)
    return PlotSpec("link_prediction", "Link prediction: ranking quality over rounds", panels)


def _run_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    from kg.yaml_io import load_yaml

    loaded = load_yaml(path.read_text())
    return loaded if isinstance(loaded, dict) else {}


def plot_run(
    run_dir: Path, rows: Iterable[Mapping[str, Any]], title: str = "", method: str | None = None
) -> list[Path]:
    """Write ``RUN_DIR/plots/metrics.png`` (the method's key server curves; every curve when the method
    declares no :class:`PlotSpec`) and the method's curated figure ``plots/<spec.name>.png``."""
    run_dir = Path(run_dir)
    config = _run_config(run_dir)
    method = method or config.get("method")
    spec = plot_spec(str(method)) if method else None
    all_curves = curves(rows)
    shown = all_curves if spec is None else {k: all_curves[k] for k in spec.metrics() if all_curves.get(k)}
    out = [plot_curves(shown, run_dir / "plots" / "metrics.png", title)]
    curated = spec if spec is not None else link_prediction_spec(all_curves)
    if curated is not None:
        sub = title or str(config.get("name") or "")
        out.append(plot_curated(curated, all_curves, run_dir / "plots" / f"{curated.name}.png", config, sub))
    return [p for p in out if p is not None]


def alpha_target(config: Mapping[str, Any]) -> float | None:
    """100·(1 − α) from ``method_kwargs.alpha`` (the coverage target of conformal methods)."""
    alpha = (config.get("method_kwargs") or {}).get("alpha")
    return None if alpha is None else 100.0 * (1.0 - float(alpha))


NAIVE = (
    Series("evaluate/naive_last_{m}", "naive: repeat last day", "baseline"),
    Series("evaluate/naive_mean_{m}", "naive: mean day", "baseline"),
)


def forecast_panels(rows: Sequence[tuple[str, str]]) -> tuple[Panel, ...]:
    """Test MSE and STL satisfaction ρ of a forecasting method: its rows ``(metric prefix, label)`` (the first
    is the method, the rest variants) against the naive forecasts and, for ρ, the ground truth."""

    def own(metric: str) -> tuple[Series, ...]:
        return tuple(
            Series(f"evaluate/{prefix}{metric}", label, "method" if i == 0 else "variant")
            for i, (prefix, label) in enumerate(rows)
        )

    naive = lambda m: tuple(Series(s.key.format(m=m), s.label, s.role) for s in NAIVE)  # noqa: E731
    return (
        Panel("Test MSE (normalised; lower is better)", (*own("mse"), *naive("mse")), "MSE"),
        Panel(
            "STL satisfaction ρ: test windows inside the band (%)",
            (*own("rho"), *naive("rho"), Series("evaluate/truth_rho", "ground truth", "reference")),
            "ρ (%)",
        ),
    )


def numeric_panels(label: str, extra: Sequence[Panel] = ()) -> tuple[Panel, ...]:
    """The numeric experiments (Fig. 2 a1–a6): accuracy on unseen classes per heterogeneity level and the
    training accuracy against the true and the given (partly relabelled) labels."""
    return (
        Panel(
            f"{label}: accuracy on unseen-class test sets",
            tuple(
                Series(f"evaluate/unseen_acc_h{h}", f"heterogeneity {h} %", "method" if h == 0 else "variant")
                for h in (0, 33, 50)
            ),
            "accuracy",
        ),
        Panel(
            f"{label}: training accuracy",
            (
                Series("evaluate/train_acc_true", "train, true labels", "variant"),
                Series("evaluate/train_acc_given", "train, given labels", "baseline"),
            ),
            "accuracy",
        ),
        *extra,
    )


NUMERIC_KEYS = (
    "evaluate/unseen_acc_h0",
    "evaluate/unseen_acc_h33",
    "evaluate/unseen_acc_h50",
    "evaluate/train_acc_true",
    "evaluate/train_acc_given",
    "train/train_loss",
)


__all__ = [
    "NUMERIC_KEYS",
    "PANELS_KEY",
    "PLOT_SPECS",
    "Panel",
    "PlotSpec",
    "Series",
    "alpha_target",
    "curves",
    "forecast_panels",
    "link_prediction_spec",
    "numeric_panels",
    "plot_curated",
    "plot_curves",
    "plot_run",
    "plot_spec",
    "register_plot",
    "series_colours",
]
