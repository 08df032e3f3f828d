"""PNG plots of a run: ``metrics.png`` (the method's key server metrics over rounds, at most
:data:`MAX_PANELS` panels; every metric stays in ``metrics.jsonl`` / ``metrics.csv``) and one curated figure per
method that shows its claim (target line, in-run baselines overlaid, one colour and marker per series across
panels, coinciding lines drawn distinguishable and named in the legend).

A method declares its figure with :class:`PlotSpec` in ``fednsl/methods/<m>/plots.py`` and registers it with
:func:`register_plot`; :func:`plot_run` (called by the pipeline after the last round) finds it by the run's
method name.  Methods without a spec get a ``metrics.png`` of their headline metrics and the next most telling
curves (:func:`overview_metrics`), and link-prediction runs the generic ``link_prediction.png``.  Every figure is
readable at 100 % zoom: at most :data:`MAX_PX` pixels a side at :data:`DPI`, text of at least :data:`MIN_PT`
points, human labels (:func:`human_label`), the legend inside the saved image, and a title that names the data
the run used (:func:`run_subtitle`).  matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fednsl.plot_labels import CLIENT_KEY, DATA_KEYS, data_label, human_label, run_subtitle
from fednsl.registry import Headline, Registry

BOOKKEEPING = ("time_s", "bytes_down", "bytes_up", "replies", "dropped", "aborted")
Role = Literal["method", "variant", "baseline", "reference"]
#: PNG text keys: the number of panels drawn, the figure's title and its legend labels (one a line); read back
#: by tests and tools.
PANELS_KEY = "fednsl:panels"
TITLE_KEY = "fednsl:title"
LEGEND_KEY = "fednsl:legend"
DPI = 110
#: the most panels of ``metrics.png``; the most pixels a saved figure has in either direction; the smallest font.
MAX_PANELS = 12
MAX_PX = 1600
MIN_PT = 9
TITLE_PT = 10
LEGEND_PT = 9


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


# -- coinciding lines ----------------------------------------------------------------------------------------------
def _same(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]], rel: float = 1e-9) -> bool:
    a, b = sorted(a), sorted(b)
    return len(a) == len(b) and all(
        ra == rb and abs(va - vb) <= rel * max(1.0, abs(va), abs(vb)) for (ra, va), (rb, vb) in zip(a, b)
    )


def coinciding(lines: Mapping[str, Sequence[tuple[int, float]]]) -> dict[str, str]:
    """``{label: earlier label}`` for each line (in drawing order) whose points equal those of an earlier one
    (same rounds, values equal to 1e-9 relative): the later line would hide the earlier."""
    out: dict[str, str] = {}
    items = [(k, v) for k, v in lines.items() if v]
    for i, (label, pts) in enumerate(items):
        for other, other_pts in items[:i]:
            if other not in out and _same(pts, other_pts):
                out[label] = other
                break
    return out


class Coincidences:
    """Which lines coincide in which panel, for legend labels that say so: "A (= B)" when A equals B in every
    panel that draws both, "A (= B in b2)" when only in some (panels named by their tag)."""

    def __init__(self) -> None:
        self._both: dict[tuple[str, str], list[str]] = defaultdict(list)
        self._same: dict[tuple[str, str], list[str]] = defaultdict(list)

    def add(self, tag: str, lines: Mapping[str, Sequence[tuple[int, float]]]) -> dict[str, str]:
        """Record one panel's lines (drawing order); returns :func:`coinciding` of them."""
        drawn = [k for k, v in lines.items() if v]
        for i, a in enumerate(drawn):
            for b in drawn[:i]:
                self._both[(a, b)].append(tag)
        same = coinciding(lines)
        for a, b in same.items():
            self._same[(a, b)].append(tag)
        return same

    def label(self, label: str) -> str:
        notes = []
        for (a, b), tags in self._same.items():
            if a != label:
                continue
            notes.append(f"= {b}" if tags == self._both[(a, b)] else f"= {b} in {', '.join(tags)}")
        return f"{label} ({'; '.join(notes)})" if notes else label


# -- drawing -------------------------------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _round_axis(ax: Any, rounds: Iterable[float] | None = None) -> None:
    """Integer round ticks (each round when there are few; a one-round axis is centred on it), grid, no
    offset notation on y.  ``rounds``: those drawn (default: the x data of the axes' lines)."""
    from matplotlib.ticker import MaxNLocator

    if rounds is None:
        rounds = (x for line in ax.lines for x in line.get_xdata())
    rounds = sorted({float(x) for x in rounds})
    if 0 < len(rounds) <= 10:
        ax.set_xticks(rounds)
        if len(rounds) == 1:
            ax.set_xlim(rounds[0] - 0.5, rounds[0] + 0.5)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=MIN_PT)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")


def figure_legend(fig: Any, handles: Sequence[Any], labels: Sequence[str], max_cols: int = 4) -> Any:
    """One legend for the figure, below the panels (outside them), with as many columns (at most ``max_cols``)
    as fit the figure's width; returns it (None without handles)."""
    if not handles:
        return None
    renderer = fig.canvas.get_renderer()
    legend = None
    for ncol in range(min(max_cols, len(handles)), 0, -1):
        legend = fig.legend(list(handles), list(labels), loc="outside lower center", ncol=ncol, fontsize=LEGEND_PT)
        if legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width or ncol == 1:
            break
        legend.remove()
    return legend


def save_figure(fig: Any, path: Path, panels: int) -> Path:
    """Write ``fig`` with its tight bounding box (the legend included) at :data:`DPI`, less when that would
    exceed :data:`MAX_PX` pixels a side; the panel count, title and legend labels go to the PNG's text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    labels += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    meta = {PANELS_KEY: str(panels), TITLE_KEY: title, LEGEND_KEY: "\n".join(labels)}
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    pad = 0.1
    dpi = min(float(DPI), (MAX_PX - 2) / (max(box.width, box.height) + 2 * pad))
    fig.savefig(path, dpi=dpi, metadata=meta, bbox_inches="tight", pad_inches=pad)
    _pyplot().close(fig)
    return path


def _grid(n: int) -> tuple[int, int]:
    """(rows, columns) of ``n`` panels: one row up to 3, then 3 columns up to 6, then 4."""
    cols = n if n <= 3 else 3 if n <= 6 else 4
    return (n + cols - 1) // cols, cols


def curves_figure(series: Mapping[str, Sequence[tuple[int, float]]], title: str = "") -> Any | None:
    """The ``metrics.png`` figure: one panel per curve in the given order (at most :data:`MAX_PANELS`; the
    rest are left out), titled by :func:`human_label`; None when there is nothing to plot."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    keys = list(series)[:MAX_PANELS]
    plt = _pyplot()
    rows, cols = _grid(len(keys))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows + 0.5), squeeze=False, layout="constrained")
    for ax, name in zip(axes.flat, keys):
        xs, ys = zip(*sorted(series[name]))
        ax.plot(xs, ys, marker="o", ms=4)
        ax.set_title(human_label(name, stage=True), fontsize=TITLE_PT)
        _round_axis(ax)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=TITLE_PT + 1)
    return fig


def plot_curves(series: Mapping[str, Sequence[tuple[int, float]]], path: Path, title: str = "") -> Path | None:
    """:func:`curves_figure` written to ``path``; returns None when there is nothing to plot."""
    fig = curves_figure(series, title)
    if fig is None:
        return None
    return save_figure(fig, path, sum(1 for ax in fig.axes if ax.axison))


_GREYS = ("#555555", "#999999", "#333333", "#bbbbbb")
_OWN = ("C0", "C1", "C2", "C4", "C5", "C6", "C8", "C9")  # tab10 without red (targets), grey and olive
_LINESTYLE = {"method": "-", "variant": "-", "baseline": "--", "reference": ":"}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


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


def series_markers(spec: PlotSpec) -> dict[str, str]:
    """One marker per series label, the same in every panel, distinct within a figure (up to 10 labels)."""
    labels = dict.fromkeys(s.label for p in spec.panels for s in p.series)
    return {label: _MARKERS[i % len(_MARKERS)] for i, label in enumerate(labels)}


def _panel_tags(n: int) -> list[str]:
    return [f"({chr(ord('a') + i)})" for i in range(n)] if n > 1 else [""]


def curated_figure(
    spec: PlotSpec,
    series: Mapping[str, Sequence[tuple[int, float]]],
    config: Mapping[str, Any] | None = None,
    subtitle: str = "",
) -> Any | None:
    """The method's claim figure (the spec's panels that have data, lettered (a), (b), … when more than one; one
    legend below them); None when no panel has data.  A line equal to an earlier one of its panel is drawn on
    top, thinner, with hollow markers, and its legend label says "(= earlier)"."""
    panels = [p for p in spec.panels if any(series.get(s.key) for s in p.series)]
    if not panels:
        return None
    plt = _pyplot()
    colours, markers = series_colours(spec), series_markers(spec)
    rows, cols = (len(panels) + 1) // 2 if len(panels) > 1 else 1, min(2, len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.3 * rows + 1.0), squeeze=False, layout="constrained")
    handles: dict[str, Any] = {}
    same = Coincidences()
    for ax, panel, tag in zip(axes.flat, panels, _panel_tags(len(panels))):
        lines = {s.label: series.get(s.key) or [] for s in panel.series}
        covers = same.add(tag.strip("()"), lines)
        rounds = {r for pts in lines.values() for r, _ in pts}
        for s in panel.series:
            pts = lines[s.label]
            if not pts:
                continue
            xs, ys = zip(*sorted(pts))
            on_top = s.label in covers
            (line,) = ax.plot(
                xs,
                ys,
                _LINESTYLE[s.role],
                color=colours[s.label],
                marker=markers[s.label],
                ms=7 if on_top else 4,
                mfc="none" if on_top else colours[s.label],
                lw=(1.8 if s.role == "method" else 1.3) * (0.6 if on_top else 1.0),
                zorder=3 if on_top else 2,
            )
            handles.setdefault(s.label, line)
        target = panel.target(config or {}) if callable(panel.target) else panel.target
        if target is not None:
            t = ax.axhline(target, color="tab:red", ls="--", lw=1.2, zorder=1)
            handles.setdefault(f"{panel.target_label} ({target:g})", t)
        ax.set_title(f"{tag} {panel.title}".strip(), fontsize=TITLE_PT)
        ax.set_ylabel(panel.ylabel)
        _round_axis(ax, rounds)
        if panel.integer_y:
            from matplotlib.ticker import MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(spec.claim + (f"\n{subtitle}" if subtitle else ""), fontsize=TITLE_PT + 1)
    figure_legend(fig, list(handles.values()), [same.label(k) for k in handles])
    return fig


def plot_curated(
    spec: PlotSpec,
    series: Mapping[str, Sequence[tuple[int, float]]],
    path: Path,
    config: Mapping[str, Any] | None = None,
    subtitle: str = "",
) -> Path | None:
    """:func:`curated_figure` written to ``path``; None when no panel has data."""
    fig = curated_figure(spec, series, config, subtitle)
    if fig is None:
        return None
    return save_figure(fig, path, sum(1 for ax in fig.axes if ax.axison))


def link_prediction_spec(keys: Iterable[str]) -> PlotSpec | None:
    """A generic link-prediction figure from whichever server curves are MRR / Hits@k (``stage/…mrr…``,
    ``stage/…hits@k…``); None when there are none.  Used for methods that register no spec.  Panels: MRR (and
    its pessimistic-ties value), Hits@k by k, MRR per client (two clients or more), and the share of planted or
    golden rules recovered when the run reports it; labels by :func:`human_label`."""
    keys = sorted(keys)

    def name(k: str) -> str:
        return k.split("/", 1)[-1]

    per_client = [k for k in keys if CLIENT_KEY.match(name(k)) and "mrr" in name(k)]
    mrr = [k for k in keys if "mrr" in name(k) and k not in per_client]
    mrr.sort(key=lambda k: ("pessimistic" in k, k))
    hits = [k for k in keys if "hits@" in name(k) and "pessimistic" not in name(k) and not CLIENT_KEY.match(name(k))]
    hits.sort(key=lambda k: (re.sub(r"hits@\d+", "", k), int(re.findall(r"hits@(\d+)", k)[0])))
    rules = [k for k in keys if re.fullmatch(r"(planted|golden)_(recall_top\d+|in_pool)", name(k))]
    if not mrr:
        return None

    def panel(title: str, group: list[str], ylabel: str, lead: bool = True) -> Panel:
        roles: list[Role] = ["method" if i == 0 and lead else "variant" for i in range(len(group))]
        return Panel(title, tuple(Series(k, human_label(k), r) for k, r in zip(group, roles)), ylabel)

    panels: tuple[Panel, ...] = (panel("Mean reciprocal rank (higher is better)", mrr, "MRR"),)
    if hits:
        panels += (panel("Hits@k (higher is better)", hits, "share of queries"),)
    if len(per_client) > 1:
        panels += (panel("MRR per client (higher is better)", per_client, "MRR", lead=False),)
    if rules:
        panels += (panel("Rules recovered (share)", rules, "share of rules"),)
    return PlotSpec("link_prediction", "Link prediction: ranking quality over rounds", panels)


# -- the metrics overview ------------------------------------------------------------------------------------------
_QUALITY = re.compile(
    r"(^|_)(f1|acc|accuracy|mrr|mr|hits@\d+|logic|recall|precision|loss|mse|mae|rmse|rho|cov|coverage|auc|pov|nll"
    r"|error)(_|$)"
)
_NOT_KEY = re.compile(r"(^|_)(time|count|queries|examples|num)(_|$)|_s$")
_STAGE_ORDER = ("evaluate", "round", "train")


def _headline_keys(ref: str | None, all_curves: Mapping[str, Any]) -> list[str]:
    """The curve keys a headline metric names: ``stage/name`` itself, a bare ``name`` in any stage (evaluate
    first); none for ``config:`` references."""
    if not ref or ref.startswith("config:"):
        return []
    if "/" in ref:
        return [ref]
    found = [k for k in all_curves if k.split("/", 1)[-1] == ref]
    return sorted(found, key=lambda k: not k.startswith("evaluate/"))


def overview_metrics(
    all_curves: Mapping[str, Sequence[tuple[int, float]]],
    spec: PlotSpec | None = None,
    headline: Sequence[Headline] = (),
    limit: int = MAX_PANELS,
) -> list[str]:
    """The curves of ``metrics.png``, at most ``limit``: the spec's key metrics when a spec is registered;
    otherwise the method's headline metrics and their references, then the other curves taken in turn from the
    evaluate, round, train and other stages (quality metrics such as F1, MRR, accuracy or loss before counts,
    shorter names first), leaving out timings, counts, per-client copies, all-zero curves, curves of one round
    in a longer run and curves equal to one already shown.  Every metric stays in ``metrics.jsonl`` / ``metrics.csv``."""
    have = {k: v for k, v in all_curves.items() if v}
    if spec is not None:
        return [k for k in spec.metrics() if k in have][:limit]
    chosen: list[str] = []
    for h in headline:
        for ref in (h.metric, h.reference):
            for k in _headline_keys(ref, have):
                if k in have and k not in chosen:
                    chosen.append(k)

    def name(k: str) -> str:
        return k.split("/", 1)[-1]

    order = list(have)
    longest = max((len(v) for v in have.values()), default=0)
    rest = [
        k
        for k in order
        if k not in chosen
        and not _NOT_KEY.search(name(k))
        and not CLIENT_KEY.match(name(k))
        and any(v != 0.0 for _, v in have[k])
        and (len(have[k]) > 1 or longest == 1)
    ]
    stages = list(dict.fromkeys(k.split("/", 1)[0] for k in rest))
    stages.sort(key=lambda s: _STAGE_ORDER.index(s) if s in _STAGE_ORDER else len(_STAGE_ORDER))

    def rank(k: str) -> tuple[int, int, int]:
        return len(name(k).split("_")), len(set(v for _, v in have[k])) == 1, order.index(k)

    for quality in (True, False):
        queues = {
            s: sorted(
                (k for k in rest if k.startswith(s + "/") and bool(_QUALITY.search(name(k))) == quality), key=rank
            )
            for s in stages
        }
        while len(chosen) < limit and any(queues.values()):
            for s in stages:
                while queues[s]:
                    k = queues[s].pop(0)
                    if not any(_same(have[k], have[c]) for c in chosen):
                        chosen.append(k)
                        break
                if len(chosen) >= limit:
                    break
    return chosen[:limit]


def run_config(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/config.yaml as a dict ({} when there is none)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return {}
    from kg.yaml_io import load_yaml

    loaded = load_yaml(path.read_text())
    return loaded if isinstance(loaded, dict) else {}


def plot_run(
    run_dir: Path, rows: Iterable[Mapping[str, Any]], title: str = "", method: str | None = None
) -> list[Path]:
    """Write ``RUN_DIR/plots/metrics.png`` (the key server curves of :func:`overview_metrics`, at most
    :data:`MAX_PANELS`) and the method's curated figure ``plots/<spec.name>.png`` (the generic
    ``link_prediction.png`` for link-prediction methods without a spec).  Both are titled with the data the run
    used (:func:`run_subtitle` of RUN_DIR/config.yaml), ``title`` when the config names none."""
    from fednsl.registry import headline_of

    run_dir = Path(run_dir)
    config = run_config(run_dir)
    method = method or config.get("method")
    spec = plot_spec(str(method)) if method else None
    all_curves = curves(rows)
    sub = run_subtitle(config, title or str(config.get("name") or ""))
    shown = overview_metrics(all_curves, spec, headline_of(str(method)) if method else ())
    out = [plot_curves({k: all_curves[k] for k in shown}, run_dir / "plots" / "metrics.png", sub)]
    curated = spec if spec is not None else link_prediction_spec(all_curves)
    if curated is not None:
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
    "Coincidences",
    "DATA_KEYS",
    "LEGEND_KEY",
    "MAX_PANELS",
    "MAX_PX",
    "MIN_PT",
    "NUMERIC_KEYS",
    "PANELS_KEY",
    "PLOT_SPECS",
    "Panel",
    "PlotSpec",
    "Series",
    "TITLE_KEY",
    "alpha_target",
    "coinciding",
    "curated_figure",
    "curves",
    "curves_figure",
    "data_label",
    "figure_legend",
    "forecast_panels",
    "human_label",
    "link_prediction_spec",
    "numeric_panels",
    "overview_metrics",
    "plot_curated",
    "plot_curves",
    "plot_run",
    "plot_spec",
    "register_plot",
    "run_config",
    "run_subtitle",
    "save_figure",
    "series_colours",
    "series_markers",
]
