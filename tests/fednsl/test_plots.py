"""Curated plots: every method with a :class:`PlotSpec` writes its claim figure and a ``metrics.png`` of its key
metrics only, from a tiny run; the images have the expected size and panel count; colours and axes follow
the rules (one colour per series across panels, integer rounds, the coverage target line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from fednsl.pipeline import train
from fednsl.plots import (
    LEGEND_KEY,
    MAX_PANELS,
    MAX_PX,
    MIN_PT,
    PANELS_KEY,
    TITLE_KEY,
    Panel,
    PlotSpec,
    Series,
    coinciding,
    curated_figure,
    curves,
    curves_figure,
    data_label,
    human_label,
    link_prediction_spec,
    overview_metrics,
    plot_curated,
    plot_run,
    plot_spec,
    run_subtitle,
    series_colours,
)
from fednsl.registry import headline_of
from tests.fednsl.federation.tiny_configs import tiny

OWNED = (
    "logicp",
    "cp-ifca",
    "ts-fedbayes",
    "fedstl",
    "ts-fedavg",
    "ts-fedprox",
    "ts-fedrep",
    "ts-ditto",
    "ts-ifca",
    "kifl",
    "fedavg",
    "fedavg-numeric",
    "fednsl-gmm",
    "lrxfl",
    "perfedavg",
    "pfedbayes",
    "pfedme",
)


def _panels(path: Path) -> tuple[int, tuple[int, int]]:
    with Image.open(path) as im:
        return int(im.info[PANELS_KEY]), im.size


@pytest.mark.parametrize("method", OWNED)
def test_tiny_run_writes_the_curated_figure_and_key_metrics(method: str, tmp_path: Path):
    spec = plot_spec(method)
    assert spec is not None, f"{method} registers no PlotSpec"
    out = tmp_path / "run"
    result = train(tiny(method, rounds=2), out=out, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    assert f"plots/{spec.name}.png" in summary["plots"] and "plots/metrics.png" in summary["plots"]

    have = curves(result.rows)
    expected = sum(1 for p in spec.panels if any(have.get(s.key) for s in p.series))
    n, (w, h) = _panels(out / "plots" / f"{spec.name}.png")
    assert n == expected >= 1
    rows = (n + 1) // 2
    assert 500 <= w <= 1200 and 300 + 280 * (rows - 1) <= h <= 450 * rows + 200, (w, h)
    _assert_human(_info(out / "plots" / f"{spec.name}.png")[LEGEND_KEY].splitlines())

    keys = [k for k in spec.metrics() if have.get(k)]
    n, (w, h) = _panels(out / "plots" / "metrics.png")
    assert n == len(keys) <= 6, f"metrics.png of {method} has {n} panels; key metrics {keys}"
    assert w <= 1400 and h <= 800, (w, h)


def test_colours_are_consistent_across_panels_and_baselines_are_grey():
    spec = plot_spec("logicp")
    assert spec is not None
    colours = series_colours(spec)
    seen: dict[str, str] = {}
    for p in spec.panels:
        for s in p.series:
            assert seen.setdefault(s.label, colours[s.label]) == colours[s.label]
    own = [colours[s.label] for p in spec.panels for s in p.series if s.role in ("method", "variant")]
    assert len(set(own)) == len({s.label for p in spec.panels for s in p.series if s.role in ("method", "variant")})
    assert "C3" not in own  # red is kept for target lines
    assert all(colours[s.label].startswith("#") for p in spec.panels for s in p.series if s.role == "baseline")


def test_coverage_target_line_and_integer_round_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import matplotlib.pyplot as plt

    drawn = {}
    real_close = plt.close

    def keep(fig=None):
        if fig is not None:
            drawn["fig"] = fig
        return real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    spec = plot_spec("logicp")
    assert spec is not None
    series = {"evaluate/cov_joint": [(1, 80.0), (2, 85.0), (3, 88.0)], "evaluate/mse": [(1, 0.1), (2, 0.05), (3, 0.04)]}
    path = plot_curated(spec, series, tmp_path / "c.png", {"method_kwargs": {"alpha": 0.2}})
    assert path is not None and _panels(path)[0] == 2
    ax = drawn["fig"].axes[0]
    assert any(list(line.get_ydata()) == [80.0, 80.0] for line in ax.lines)  # 100·(1 − 0.2)
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_methods_without_spec_keep_every_curve(tmp_path: Path):
    rows = [
        {"round": r, "scope": "server", "stage": "evaluate", **{f"m{i}": float(r + i) for i in range(4)}}
        for r in (1, 2)
    ]
    paths = plot_run(tmp_path, rows, method="no-such-method")
    assert [p.name for p in paths] == ["metrics.png"] and _panels(paths[0])[0] == 4


def test_panels_without_data_are_left_out(tmp_path: Path):
    spec = PlotSpec("x", "claim", (Panel("a", (Series("evaluate/a", "A"),)), Panel("b", (Series("evaluate/b", "B"),))))
    assert spec.metrics() == ("evaluate/a", "evaluate/b")
    path = plot_curated(spec, {"evaluate/a": [(1, 1.0), (2, 2.0)]}, tmp_path / "x.png")
    assert path is not None and _panels(path)[0] == 1
    assert plot_curated(spec, {}, tmp_path / "y.png") is None


def test_generic_link_prediction_figure_for_methods_without_spec(tmp_path: Path):
    rows = [
        {
            "round": r,
            "scope": "server",
            "stage": "evaluate",
            "mrr": 0.1 * r,
            "hits@1": 0.05 * r,
            "hits@10": 0.2 * r,
            "loss": 1.0 / r,
        }
        for r in (1, 2, 3)
    ]
    spec = link_prediction_spec(curves(rows))
    assert spec is not None and [len(p.series) for p in spec.panels] == [1, 2]
    paths = plot_run(tmp_path, rows, method="no-such-method")
    assert [p.name for p in paths] == ["metrics.png", "link_prediction.png"]
    assert _panels(paths[0])[0] == 4 and _panels(paths[1])[0] == 2
    assert link_prediction_spec(["evaluate/accuracy"]) is None


# -- issue 35: readable figures ------------------------------------------------------------------------------------
def _demo_rows(rounds: int = 3) -> list[dict]:
    """Server rows shaped like `make demo` (fednsl, 49 curves): headline F1s, the backbone and recalibration
    variants (recal unseen = backbone unseen, as on the planted corpus), logic, hold-out, rule recovery, train."""
    rows: list[dict] = []
    for r in range(1, rounds + 1):
        ev: dict = {"round": r, "scope": "server", "stage": "evaluate"}
        for prefix, base in (("", 0.85), ("backbone_", 0.70), ("recal_", 0.71), ("prior_", 0.80), ("published_", 0.85)):
            for part in ("seen", "unseen"):
                for metric, shift in (("f1", 0.0), ("ign_f1", 0.0), ("micro_f1", 0.01), ("logic", -0.1)):
                    moving = 0.0 if prefix in ("backbone_", "recal_") else 0.01 * r
                    ev[f"{prefix}{part}_{metric}"] = base + shift + moving + (0.03 if part == "seen" else 0.0)
        for k in [k for k in ev if k.startswith("recal_unseen")]:
            ev[k] = ev[k.replace("recal_", "backbone_")]
        ev.update({f"holdout_{p}unseen_f1": 0.5 + 0.01 * r for p in ("", "backbone_", "recal_", "prior_")})
        ev["evaluate.time_s"] = 1.0
        rows.append(ev)
        rows.append(
            {
                "round": r,
                "scope": "server",
                "stage": "round",
                "planted_recall_top5": 0.6 + 0.1 * r,
                "planted_in_pool": 1.0,
            }
        )
        rows.append(
            {
                "round": r,
                "scope": "server",
                "stage": "train",
                "triples_updated": 17,
                "pool_chains": 3000 + r,
                "generator_loss": 2.0 / r,
                "degenerate_priors": 0,
                "time_generator_s": 0.5,
                "scorer_iterations_max": 30 + r,
            }
        )
    rows.append({"round": 1, "scope": "server", "stage": "train.stats", "pretrain_loss": 2.0, "triples": 17})
    return rows


def _kg_rows(rounds: int = 3, clients: int = 3) -> list[dict]:
    """Server rows shaped like a fednsl-kg run with ``clients`` clients."""
    rows: list[dict] = []
    for r in range(1, rounds + 1):
        ev: dict = {
            "round": r,
            "scope": "server",
            "stage": "evaluate",
            "test_mrr": 0.8 + 0.01 * r,
            "test_mr": 9.0 / r,
            "test_count": 224,
        }
        for k in (1, 3, 10):
            ev[f"test_hits@{k}"] = ev[f"test_hits@{k}_pessimistic"] = 0.7 + 0.02 * k + 0.01 * r
        ev["test_mrr_pessimistic"] = ev["test_mrr"] - 0.001
        ev.update({f"c{i}.test_mrr": 0.75 + 0.02 * i + 0.01 * r for i in range(clients)})
        rows.append(ev)
        rows.append(
            {"round": r, "scope": "server", "stage": "round", "planted_recall_top5": 0.2, "planted_in_pool": 0.7}
        )
        rows.append({"round": r, "scope": "server", "stage": "train", "generator_loss": 1.5 / r, "heads_updated": 8})
    return rows


def _write_config(run_dir: Path, **config) -> None:
    import yaml

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))


def _info(path: Path) -> dict:
    with Image.open(path) as im:
        return {**im.info, "size": im.size}


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _assert_readable(fig) -> None:
    """Every text of the figure at least MIN_PT points; its legends inside the figure (the renderer's tight
    boxes, after the constrained layout ran)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    small = [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_text() and t.get_visible() and t.get_fontsize() < MIN_PT
    ]
    assert not small, small
    page = fig.bbox
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]:
        box = legend.get_tightbbox(renderer)
        assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1, (
            box,
            page,
        )


def _assert_human(labels: list[str]) -> None:
    assert labels
    for label in labels:
        assert "_" not in label and "/" not in label, f"raw metric key in a label: {label!r}"


def test_human_labels_of_metric_keys():
    assert human_label("evaluate/test_mrr") == "test MRR"
    assert human_label("evaluate/test_hits@10_pessimistic") == "test Hits@10 (pessimistic ties)"
    assert human_label("evaluate/c1.test_mrr") == "client c1: test MRR"
    assert human_label("evaluate/recal_unseen_f1") == "recalibration only unseen F1"
    assert human_label("round/planted_recall_top5") == "planted rules in the top 5"
    assert human_label("round/golden_in_pool") == "golden rules in the pool"
    assert human_label("train/generator_loss", stage=True) == "generator loss (train)"
    assert human_label("train/time_fit_s") == "time fit (s)"


@pytest.mark.parametrize(
    ("data", "label"),
    [
        ({"source": "synthetic"}, "synthetic"),
        ({"source": "synthetic:3"}, "synthetic:3"),
        ({"source": "/home/me/my_kg/"}, "my_kg"),
        ({"source": "pykeen:Nations"}, "Nations (pykeen)"),
        ({"source": "documents:../shared/data/dwie"}, "dwie (documents)"),
        ({"source": "synthetic", "federated_folder": "/data/fb_r10"}, "fb_r10"),
        ({"path": "/data/corpus"}, "corpus"),
        ({"name": "wine", "path": None}, "wine"),
        ({}, ""),
    ],
)
def test_data_label_names_the_data_used(data: dict, label: str):
    assert data_label({"data": data}) == label


def test_metrics_overview_is_bounded_and_led_by_the_headline(tmp_path: Path):
    """The fault: 46–49 panels at 1386×5654 px.  Now at most MAX_PANELS panels, MAX_PX a side, the method's
    headline metrics and their references first, curves equal to a shown one left out."""
    rows = _demo_rows()
    _write_config(tmp_path, name="fednsl_synthetic", method="fednsl", data={"path": "synthetic", "num_clients": 4})
    assert len(curves(rows)) > 40
    paths = plot_run(tmp_path, rows)
    info = _info(tmp_path / "plots" / "metrics.png")
    assert 4 <= int(info[PANELS_KEY]) <= MAX_PANELS
    assert max(info["size"]) <= MAX_PX, info["size"]
    assert [p.name for p in paths] == ["metrics.png"]  # fednsl's figure is the strategy's, not a spec's

    shown = overview_metrics(curves(rows), None, headline_of("fednsl"))
    assert len(shown) == MAX_PANELS
    assert shown[:4] == [
        "evaluate/seen_f1",
        "evaluate/backbone_seen_f1",
        "evaluate/unseen_f1",
        "evaluate/backbone_unseen_f1",
    ]
    assert "evaluate/seen_ign_f1" not in shown and "evaluate/published_unseen_f1" not in shown  # equal to shown
    assert not any("time" in k or k.endswith("degenerate_priors") or k.startswith("train.stats/") for k in shown)
    assert "round/planted_recall_top5" in shown

    # methods without a spec or headline are bounded too
    many = [
        {"round": r, "scope": "server", "stage": "evaluate", **{f"m{i}": float(r * i + 1) for i in range(46)}}
        for r in (1, 2)
    ]
    path = plot_run(tmp_path / "other", many, method="no-such-method")[0]
    assert int(_info(path)[PANELS_KEY]) == MAX_PANELS and max(_info(path)["size"]) <= MAX_PX


def test_metrics_overview_panels_have_human_titles_and_readable_fonts():
    rows = _kg_rows()
    fig = curves_figure({k: curves(rows)[k] for k in overview_metrics(curves(rows), None, headline_of("fednsl-kg"))})
    assert fig is not None
    _assert_human([ax.get_title() for ax in fig.axes if ax.axison])
    assert fig.axes[0].get_title() == "test MRR"  # the headline first
    _assert_readable(fig)


def test_link_prediction_figure_has_human_labels_and_its_legend_inside(tmp_path: Path):
    """The fault: legend labels ``evaluate/c0.test_mrr`` …, a legend wider than the figure (clipped)."""
    rows = _kg_rows(clients=4)
    spec = link_prediction_spec(curves(rows))
    assert spec is not None
    assert [p.title.split(" (")[0] for p in spec.panels] == [
        "Mean reciprocal rank",
        "Hits@k",
        "MRR per client",
        "Rules recovered",
    ]
    fig = curated_figure(spec, curves(rows))
    labels = _legend_labels(fig)
    _assert_human(labels)
    assert "test Hits@1" in labels and "client c0: test MRR" in labels
    _assert_readable(fig)

    _write_config(tmp_path, name="fednsl_kg_synthetic", method="fednsl-kg", data={"source": "synthetic"})
    plot_run(tmp_path, rows)
    info = _info(tmp_path / "plots" / "link_prediction.png")
    assert max(info["size"]) <= MAX_PX and int(info[PANELS_KEY]) == 4
    _assert_human(info[LEGEND_KEY].splitlines())


def test_titles_name_the_data_actually_used(tmp_path: Path):
    """The fault: the config's name ("fednsl_kg_synthetic") as the title of a run on the user's own KG."""
    _write_config(
        tmp_path,
        name="fednsl_kg_synthetic",
        method="fednsl-kg",
        data={"source": "/home/me/family_kg", "num_clients": 3},
    )
    plot_run(tmp_path, _kg_rows(), title="fednsl_kg_synthetic (fednsl-kg)")
    for name in ("metrics.png", "link_prediction.png"):
        title = _info(tmp_path / "plots" / name)[TITLE_KEY]
        assert "family_kg" in title and "fednsl_kg_synthetic" not in title, title
        assert "fednsl-kg on family_kg · 3 clients" in title
    assert run_subtitle({"name": "x"}, "fallback") == "fallback"


def _line(ax, label_colour: str, style: str):
    return next(line for line in ax.lines if line.get_color() == label_colour and line.get_linestyle() == style)


def test_fednsl_figure_keeps_coinciding_lines_distinguishable(tmp_path: Path):
    """The fault: recalibration only (unseen) equal to the backbone (unseen) and drawn under it, invisible.
    Now: own marker, width and z-order per model (the one on top thinner, hollow markers), the legend says
    which lines coincide, text ≥ MIN_PT, legend inside, ≤ MAX_PX."""
    import matplotlib.colors as mcolors

    from fednsl.methods.fednsl.plots import COLOURS, fednsl_figure, plot_fednsl

    cs = curves(_demo_rows())
    flat = {k.split("/", 1)[1]: v for k, v in cs.items() if k.startswith(("evaluate/", "round/"))}
    fig = fednsl_figure(flat, "fednsl on synthetic · 4 clients")
    assert fig is not None
    ax = fig.axes[0]
    recal = _line(ax, COLOURS["recalibration only"], "--")
    backbone = _line(ax, COLOURS["backbone"], "--")
    assert list(recal.get_ydata()) == list(backbone.get_ydata())  # they do coincide
    assert recal.get_zorder() > backbone.get_zorder()
    assert recal.get_linewidth() < backbone.get_linewidth()
    assert recal.get_marker() != backbone.get_marker()
    assert recal.get_markerfacecolor() == "none" or not mcolors.same_color(
        recal.get_markerfacecolor(), backbone.get_markerfacecolor()
    )
    labels = _legend_labels(fig)
    assert "recalibration only, unseen (= backbone, unseen)" in labels
    assert "recalibration only, seen" in labels  # not equal: no note
    _assert_readable(fig)

    run = tmp_path / "run"
    _write_config(run, name="fednsl_synthetic", method="fednsl", data={"path": "/data/my_docs", "num_clients": 4})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in _demo_rows()) + "\n")
    path = plot_fednsl(run)
    assert path is not None
    info = _info(path)
    assert max(info["size"]) <= MAX_PX and int(info[PANELS_KEY]) == 2
    assert "fednsl on my_docs · 4 clients" in info[TITLE_KEY]
    assert "recalibration only, unseen (= backbone, unseen)" in info[LEGEND_KEY].splitlines()


def test_curated_figure_marks_coinciding_series():
    spec = PlotSpec(
        "x",
        "claim",
        (
            Panel("p", (Series("evaluate/a", "model A"), Series("evaluate/b", "model B", "variant"))),
            Panel("q", (Series("evaluate/a2", "model A"), Series("evaluate/b2", "model B", "variant"))),
        ),
    )
    same = [(1, 0.5), (2, 0.6)]
    fig = curated_figure(
        spec, {"evaluate/a": same, "evaluate/b": list(same), "evaluate/a2": same, "evaluate/b2": [(1, 0.1), (2, 0.2)]}
    )
    assert fig is not None
    labels = _legend_labels(fig)
    assert labels == ["model A", "model B (= model A in a)"]
    a, b = fig.axes[0].lines
    assert b.get_zorder() > a.get_zorder() and b.get_marker() != a.get_marker() and b.get_markerfacecolor() == "none"
    assert b.get_linewidth() < a.get_linewidth()
    assert coinciding({"A": same, "B": [(1, 0.5), (2, 0.6 + 1e-13)], "C": [(1, 0.5)]}) == {"B": "A"}
    _assert_readable(fig)


@pytest.mark.parametrize("method", ["fednsl", "fednsl-kg"])
def test_tiny_runs_of_the_methods_without_spec_write_readable_figures(method: str, tmp_path: Path):
    out = tmp_path / "run"
    train(tiny(method, rounds=2), out=out, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    figure = "plots/fednsl_f1_logic.png" if method == "fednsl" else "plots/link_prediction.png"
    assert {"plots/metrics.png", figure} <= set(summary["plots"])
    for name in summary["plots"]:
        info = _info(out / name)
        assert max(info["size"]) <= MAX_PX, (name, info["size"])
        assert "tiny-" not in info[TITLE_KEY] and "synthetic" in info[TITLE_KEY], info[TITLE_KEY]
    assert int(_info(out / "plots" / "metrics.png")[PANELS_KEY]) <= MAX_PANELS
    _assert_human(_info(out / figure)[LEGEND_KEY].splitlines())


def test_overlay_of_equal_run_groups_says_so(tmp_path: Path):
    from fednsl.methods.fednsl.plots import plot_overlay

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in _demo_rows()) + "\n")
    path = plot_overlay(
        {"λ=0": [tmp_path / "a"], "λ=0.1": [tmp_path / "b"]}, [("unseen_f1", "F1 unseen")], tmp_path / "o.png", "sweep"
    )
    info = _info(path)
    assert info[LEGEND_KEY].splitlines() == ["λ=0", "λ=0.1 (= λ=0)"] and max(info["size"]) <= MAX_PX
