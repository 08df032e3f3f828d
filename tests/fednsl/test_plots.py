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
    PANELS_KEY,
    Panel,
    PlotSpec,
    Series,
    curves,
    link_prediction_spec,
    plot_curated,
    plot_run,
    plot_spec,
    series_colours,
)
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

    keys = [k for k in spec.metrics() if have.get(k)]
    n, (w, h) = _panels(out / "plots" / "metrics.png")
    assert n == len(keys) <= 6, f"metrics.png of {method} has {n} panels; key metrics {keys}"
    assert w <= 1400 and h <= 800, (w, h)


def test_colours_are_consistent_across_panels_and_baselines_are_grey():
    spec = plot_spec("logicp")
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
