import numpy as np
import pytest
import torch
from torch import nn

from fednsl.tasks.timeseries.properties import PropertyConfig, make_template, mine_property
from fednsl.tasks.timeseries.training import forecast_metrics, minibatches, predict, sgd_epochs


def _linear(seed=0):
    m = nn.Linear(3, 2)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.copy_(torch.randn(2, 3, generator=g))
        m.bias.copy_(torch.randn(2, generator=g))
    return m


def test_one_full_batch_step_is_plain_gradient_descent():
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(1))
    y = torch.randn(6, 2, generator=torch.Generator().manual_seed(2))
    m = _linear()
    W, b = m.weight.detach().numpy().astype(np.float64), m.bias.detach().numpy().astype(np.float64)
    X, Y = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
    r = X @ W.T + b - Y                      # f = mean(r²) over 6·2 entries
    gW, gb = 2 * r.T @ X / r.size, 2 * r.sum(0) / r.size
    sgd_epochs(m, x, y, epochs=1, batch_size=6, lr=0.1, gen=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(m.weight.detach().numpy(), W - 0.1 * gW, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.bias.detach().numpy(), b - 0.1 * gb, rtol=1e-5, atol=1e-6)


def test_only_given_params_move_and_runs_are_seeded():
    x, y = torch.randn(20, 3), torch.randn(20, 2)
    m = _linear()
    w0 = m.weight.detach().clone()
    sgd_epochs(m, x, y, epochs=2, batch_size=4, lr=0.1, gen=torch.Generator().manual_seed(0), params=[m.bias])
    torch.testing.assert_close(m.weight.detach(), w0)
    assert m.weight.requires_grad
    a, b = _linear(), _linear()
    before = torch.get_rng_state()
    for net in (a, b):
        sgd_epochs(net, x, y, epochs=3, batch_size=4, lr=0.05, momentum=0.9, weight_decay=1e-4,
                   gen=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before)
    torch.testing.assert_close(a.weight, b.weight, rtol=0, atol=0)
    assert sum(1 for _ in minibatches(20, 4, torch.Generator(), max_batches=2)) == 2


def test_dropout_training_is_reproducible_and_leaves_global_rng():
    from fednsl.tasks.timeseries.models import build_forecaster
    x, y = torch.rand(8, 30), torch.rand(8, 6)
    nets = [build_forecaster({"name": "transformer", "d_model": 8, "ff": 8, "enc_layers": 1, "dec_layers": 1,
                              "dropout": 0.3}, 30, 6, 0) for _ in range(2)]
    before = torch.get_rng_state()
    for net in nets:
        sgd_epochs(net, x, y, epochs=1, batch_size=4, lr=0.05, gen=torch.Generator().manual_seed(3))
    assert torch.equal(torch.get_rng_state(), before)
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_forecast_metrics_by_hand():
    y = torch.zeros(4, 24)
    prop = mine_property(make_template(PropertyConfig(), 24), np.stack([np.zeros(24), np.ones(24)]))
    pred = torch.full((4, 24), 0.5)
    pred[0, 3] = 2.0     # one step outside the band [0, 1] in forecast 0
    pred[1, :] = -1.0    # forecast 1 entirely outside
    m = forecast_metrics(pred, y, prop, scale=10.0)
    mse = float((pred ** 2).mean())
    assert m["mse"] == pytest.approx(mse) and m["mse_orig"] == pytest.approx(100 * mse)
    assert m["rho"] == pytest.approx(50.0)
    assert m["step_rho"] == pytest.approx(100 * (96 - 25) / 96)
    assert predict(nn.Linear(3, 2), torch.zeros(0, 3)).shape[0] == 0
