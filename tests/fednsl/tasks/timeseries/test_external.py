"""Loaders of the LogiCP temperature (Dayton) and electricity (UCI) sets, on small files written in the
original formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fednsl.config import RunConfig
from fednsl.tasks.timeseries.external import (
    ExternalDataConfig,
    command,
    load_external,
    prepare_ct,
    prepare_electricity,
    read_dayton,
)

DAYS = np.arange(np.datetime64("1995-01-01"), np.datetime64("1995-07-01"))   # 181 days


def city_series(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(len(DAYS))
    return np.round(50 + 20 * np.sin(2 * np.pi * t / 365) + rng.normal(0, 3, len(t)), 1)


def write_dayton_dir(root: Path) -> dict[str, np.ndarray]:
    root.mkdir()
    out = {}
    for i, name in enumerate(("ALALGIER", "USNYCITY", "FRPARIS")):
        v = city_series(i)
        if name == "USNYCITY":
            v[[10, 11, 40]] = -99.0          # three missing days (1.7 %): kept, interpolated
        if name == "FRPARIS":
            v[20:60] = -99.0                 # 22 % missing: dropped
        ymd = DAYS.astype(object)
        lines = [f"{d.month:>3} {d.day:>13} {d.year:>13} {x:>13.1f}" for d, x in zip(ymd, v)]
        lines.append(f"{1:>3} {0:>13} {200:>13} {-99.0:>13.1f}")   # archive junk row: dropped
        (root / f"{name}.txt").write_text("\n".join(lines) + "\n")
        out[name] = v
    return out


def test_prepare_and_load_ct_from_city_files(tmp_path: Path):
    raw = write_dayton_dir(tmp_path / "allsites")
    out = tmp_path / "ct.npz"
    rep = prepare_ct(tmp_path / "allsites", out, start="1995-01-01", end="1995-06-30")
    assert rep["kept"] == ["ALALGIER", "USNYCITY"] and set(rep["dropped"]) == {"FRPARIS"}
    with np.load(out) as z:
        series = z["series"]
        assert str(z["step"]) == "1D" and series.shape == (2, len(DAYS))
    np.testing.assert_array_equal(series[0], raw["ALALGIER"])
    assert np.isnan(series[1, [10, 11, 40]]).all()
    data = load_external(ExternalDataConfig(name="ct_temperature", path=str(out), input_len=30, horizon=7, stride=7,
                                            val_frac=0.1, test_frac=0.1))
    assert sorted(data.clients) == ["e0", "e1"] and data.horizon == 7
    c = data.clients["e1"]
    x0 = c.to_original(c.x_train[0])
    filled = raw["USNYCITY"].copy()
    idx = np.arange(len(filled))
    ok = filled != -99.0
    filled = np.interp(idx, idx[ok], filled[ok])              # linear interpolation of the gaps
    np.testing.assert_allclose(x0, filled[:30], atol=1e-4)
    np.testing.assert_allclose(c.to_original(c.y_train[0]), filled[30:37], atol=1e-4)
    assert c.x_train.min() >= -1e-6 and c.x_train.max() <= 1 + 1e-6   # min-max on the training part


def test_csv_layout_gives_the_same_series(tmp_path: Path):
    raw = write_dayton_dir(tmp_path / "allsites")
    rows = ["Region,Country,State,City,Month,Day,Year,AvgTemperature"]
    for name, (country, state, city) in {"ALALGIER": ("Algeria", "", "Algiers"),
                                         "USNYCITY": ("US", "New York", "New York City")}.items():
        for d, v in zip(DAYS.astype(object), raw[name]):
            rows.append(f"Africa,{country},{state},{city},{d.month},{d.day},{d.year},{v}")
    (tmp_path / "city_temperature.csv").write_text("\n".join(rows) + "\n")
    csv = read_dayton(tmp_path / "city_temperature.csv")
    txt = read_dayton(tmp_path / "allsites")
    assert sorted(csv) == ["Algeria/Algiers", "US/New York/New York City"]
    for a, b in (("Algeria/Algiers", "ALALGIER"), ("US/New York/New York City", "USNYCITY")):
        np.testing.assert_array_equal(csv[a][0], txt[b][0])
        np.testing.assert_array_equal(csv[a][1], txt[b][1])
    (tmp_path / "bad.csv").write_text("City,Temp\nx,1\n")
    with pytest.raises(ValueError, match="AvgTemperature"):
        read_dayton(tmp_path / "bad.csv")


def write_uci(path: Path, days: int = 3) -> np.ndarray:
    stamps = np.arange(np.datetime64("2011-01-01T00:15"), np.datetime64("2011-01-01T00:15") + days * 96 * 15,
                       np.timedelta64(15, "m"))
    rng = np.random.default_rng(0)
    vals = rng.uniform(1, 10, size=(len(stamps), 3)).round(6)
    vals[: 2 * 96, 2] = 0.0                          # MT_003 starts late: dropped
    lines = ['"";"MT_001";"MT_002";"MT_003"']
    for s, row in zip(stamps, vals):
        ts = str(s).replace("T", " ") + ":00"
        lines.append(f'"{ts}";' + ";".join(f"{v:.6f}".replace(".", ",") for v in row))
    path.write_text("\n".join(lines) + "\n")
    return vals


def test_prepare_and_load_uci_electricity(tmp_path: Path):
    vals = write_uci(tmp_path / "LD2011_2014.txt")
    out = tmp_path / "el.npz"
    rep = prepare_electricity(tmp_path / "LD2011_2014.txt", out, resample=60)
    assert rep["kept"] == ["MT_001", "MT_002"] and "MT_003" in rep["dropped"]
    with np.load(out) as z:
        series, start = z["series"], str(z["start"])
    assert series.shape == (2, 72) and start.startswith("2011-01-01T00:00")
    # hour 0 = mean of the readings stamped 00:15, 00:30, 00:45, 01:00
    np.testing.assert_allclose(series[:, 0], vals[:4, :2].mean(0), rtol=1e-9)
    np.testing.assert_allclose(series[:, 5], vals[20:24, :2].mean(0), rtol=1e-9)
    data = load_external(ExternalDataConfig(name="uci_electricity", path=str(out), input_len=24, horizon=12,
                                            stride=6, val_frac=0.2, test_frac=0.2))
    assert len(data.clients) == 2 and data.clients["e0"].x_train.shape[1] == 24


def test_errors_and_cli(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="python -m fednsl.tasks.timeseries.external ct"):
        load_external(ExternalDataConfig(name="ct_temperature", path=str(tmp_path / "none.npz")))
    with pytest.raises(ValueError, match="data.name"):
        ExternalDataConfig(name="weather")
    write_dayton_dir(tmp_path / "allsites")
    from click.testing import CliRunner

    res = CliRunner().invoke(command, ["ct", "--src", str(tmp_path / "allsites"), "--out", str(tmp_path / "c.npz"),
                                       "--start", "1995-01-01", "--end", "1995-06-30", "--clients", "1"])
    assert res.exit_code == 0, res.output
    assert "1 clients (of 2 eligible; 1 dropped)" in res.output
    with np.load(tmp_path / "c.npz") as z:
        assert len(z["names"]) == 1


def test_logicp_runs_on_a_prepared_temperature_file(tmp_path: Path):
    write_dayton_dir(tmp_path / "allsites")
    prepare_ct(tmp_path / "allsites", tmp_path / "ct.npz", start="1995-01-01", end="1995-06-30", max_missing=0.5)
    from fednsl.federation.runner import InProcessRunner
    from fednsl.pipeline import build_federation

    cfg = RunConfig(method="logicp", rounds=2, seed=0, name="ct",
                    data={"name": "ct_temperature", "path": str(tmp_path / "ct.npz"), "input_len": 24, "horizon": 6,
                          "stride": 2, "val_frac": 0.1, "test_frac": 0.1},
                    method_kwargs={"num_clusters": 1, "pretrain_rounds": 1, "local_epochs": 1, "cluster_epochs": 1,
                                   "alpha": 0.2, "model": {"name": "rnn", "hidden": 4}, "property": {"width": 2}},
                    federation={"min_clients": 1})
    fed = build_federation(cfg)
    assert len(fed.clients) == 3
    (tmp_path / "r").mkdir()
    res = InProcessRunner(fed, cfg, tmp_path / "r", progress=False).run()
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    assert np.isfinite(last["mse"]) and np.isfinite(last["width"])
