"""Per-FedAvg's MAML step (FO and HF) against the closed form on a least-squares problem."""

import numpy as np
import pytest
import torch
from torch import nn

from fednsl.methods.perfedavg import hessian_vector_product, maml_step
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


def mse(pred, target):
    return 0.5 * ((pred.squeeze(-1) - target) ** 2).mean()


def problem(seed=0):
    rng = np.random.default_rng(seed)
    batches = [(rng.normal(size=(6, 3)), rng.normal(size=6)) for _ in range(3)]
    w0 = rng.normal(size=3)
    model = nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0[None]))
    tb = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in batches]
    return model, w0, batches, tb


def grad(w, a, b):
    return a.T @ (a @ w - b) / len(b)      # ∇ ½ mean((Aw − b)²)


def test_first_order_step():
    model, w, (d, d1, _), tb = problem()
    alpha, beta = 0.1, 0.05
    maml_step(model, tb[0], tb[1], None, alpha, beta, loss_fn=mse)
    w_tilde = w - alpha * grad(w, *d)
    expected = w - beta * grad(w_tilde, *d1)
    np.testing.assert_allclose(model.weight.detach().numpy()[0], expected, rtol=1e-10)


def test_hessian_free_step():
    model, w, (d, d1, d2), tb = problem(1)
    alpha, beta = 0.1, 0.05
    maml_step(model, tb[0], tb[1], tb[2], alpha, beta, loss_fn=mse)
    w_tilde = w - alpha * grad(w, *d)
    hessian = d2[0].T @ d2[0] / len(d2[1])
    expected = w - beta * (np.eye(3) - alpha * hessian) @ grad(w_tilde, *d1)
    np.testing.assert_allclose(model.weight.detach().numpy()[0], expected, rtol=1e-10)


def test_hessian_vector_product():
    model, w, (_, _, d2), tb = problem(2)
    v = [torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)]
    hv = hessian_vector_product(model, tb[2], v, loss_fn=mse)
    np.testing.assert_allclose(hv[0].numpy()[0], d2[0].T @ d2[0] @ np.array([1.0, -2.0, 0.5]) / 6, rtol=1e-10)


def test_config_rejects_unknown_variant():
    from fednsl.methods.perfedavg import PerFedAvgConfig

    with pytest.raises(ValueError, match="variant"):
        PerFedAvgConfig(variant="maml2")
