import numpy as np
import pytest

from fednsl.tasks.timeseries.baselines import last_period, seasonal_mean


def _loop(x, horizon, period, mean):
    n, length = x.shape
    out = np.zeros((n, horizon))
    for t in range(horizon):
        vals = [x[:, length + t - d * period] for d in range(1, 100) if 0 <= length + t - d * period < length]
        out[:, t] = np.mean(vals, axis=0) if mean else vals[0]
    return out


@pytest.mark.parametrize("length,horizon,period", [(120, 24, 24), (50, 24, 24), (30, 7, 5), (24, 30, 12)])
def test_naive_forecasts_match_loops(length, horizon, period):
    x = np.random.default_rng(0).normal(size=(4, length))
    np.testing.assert_allclose(seasonal_mean(x, horizon, period), _loop(x, horizon, period, True))
    np.testing.assert_allclose(last_period(x, horizon, period), _loop(x, horizon, period, False))


def test_mean_of_days_example():
    days = np.arange(5)[:, None] * 10 + np.arange(24)[None, :]  # day d, hour h: 10d + h
    x = days.reshape(1, -1).astype(float)
    np.testing.assert_allclose(seasonal_mean(x, 24), (20 + np.arange(24))[None])  # mean of 0,10,...,40 = 20
    np.testing.assert_allclose(last_period(x, 24), (40 + np.arange(24))[None])
    with pytest.raises(ValueError, match="no full period"):
        seasonal_mean(np.zeros((1, 10)), 4, 24)
