"""pFedMe's Moreau-envelope inner/outer steps and server step against hand-derived updates."""

import numpy as np
import pytest
import torch
from torch import nn

from fednsl.federation.records import Message
from fednsl.methods.pfedme import moreau_inner_step, moreau_outer_step, pfedme_local_update
from fednsl.tasks.numeric.client import BatchStream
from fednsl.tasks.numeric.data import NumericDataConfig
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


def test_inner_and_outer_step_numbers():
    theta, grad, anchor = [torch.tensor([1.0, -2.0])], [torch.tensor([0.5, 1.0])], [torch.zeros(2)]
    # θ − ν(∇f + λ(θ − w) + μθ) with ν = 0.1, λ = 2: [1 − 0.1·(0.5 + 2)], [−2 − 0.1·(1 − 4)]
    out = moreau_inner_step(theta, grad, anchor, lr=0.1, lamda=2.0)
    np.testing.assert_allclose(out[0].numpy(), [0.75, -1.7], rtol=1e-6)
    out_mu = moreau_inner_step(theta, grad, anchor, lr=0.1, lamda=2.0, mu=0.5)
    np.testing.assert_allclose(out_mu[0].numpy(), [0.75 - 0.05, -1.7 + 0.1], rtol=1e-6)
    # w − ηλ(w − θ̂) with η = 0.05, λ = 2
    w = moreau_outer_step([torch.zeros(2)], [torch.tensor([0.75, -1.7])], eta=0.05, lamda=2.0)
    np.testing.assert_allclose(w[0].numpy(), [0.075, -0.17], rtol=1e-6)


def softmax_ce_grads(W, b, x, y):
    """Hand-derived ∇ of mean softmax cross-entropy for logits x Wᵀ + b."""
    z = x @ W.T + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return p.T @ x / len(y), p.mean(0)


def test_local_update_matches_a_numpy_reimplementation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 2)).astype(np.float32)
    y = rng.integers(0, 3, 12)
    model = nn.Linear(2, 3)
    W0, b0 = model.weight.detach().numpy().astype(np.float64), model.bias.detach().numpy().astype(np.float64)
    R, K, eta, nu, lam, bs = 2, 3, 0.05, 0.1, 4.0, 5
    batches = BatchStream(12, bs, torch.Generator().manual_seed(3))
    w, theta, _ = pfedme_local_update(model, torch.from_numpy(x), torch.from_numpy(y), batches, rounds=R, K=K,
                                      lr=eta, personal_lr=nu, lamda=lam)
    ref = BatchStream(12, bs, torch.Generator().manual_seed(3))
    wW, wb, tW, tb = W0.copy(), b0.copy(), W0.copy(), b0.copy()
    for _ in range(R):
        idx = ref.next().numpy()
        for _ in range(K):
            gW, gb = softmax_ce_grads(tW, tb, x[idx].astype(np.float64), y[idx])
            tW, tb = tW - nu * (gW + lam * (tW - wW)), tb - nu * (gb + lam * (tb - wb))
        wW, wb = wW - eta * lam * (wW - tW), wb - eta * lam * (wb - tb)
    np.testing.assert_allclose(w[0].numpy(), wW, atol=1e-5)
    np.testing.assert_allclose(w[1].numpy(), wb, atol=1e-5)
    np.testing.assert_allclose(theta[0].numpy(), tW, atol=1e-5)
    np.testing.assert_allclose(model.weight.detach().numpy(), tW, atol=1e-5)   # the model keeps θ̂ (deployed)


@pytest.mark.parametrize("beta", [1.0, 2.0, 0.5])
def test_server_step_is_beta_interpolation(beta):
    s = NumericWeightsStrategy({"w": np.zeros(2, np.float32)}, {}, NumericDataConfig(), server_lr=beta)
    replies = {"a": Message("train", 1, "a", arrays={"w": np.array([1.0, 2.0], np.float32)},
                            metrics={"num_examples": 1, "train_loss": 0.0}),
               "b": Message("train", 1, "b", arrays={"w": np.array([4.0, -1.0], np.float32)},
                            metrics={"num_examples": 3, "train_loss": 0.0})}
    s.aggregate_train(1, replies, {})
    avg = (np.array([1.0, 2.0]) + 3 * np.array([4.0, -1.0])) / 4
    np.testing.assert_allclose(s.weights["w"], (1 - beta) * 0 + beta * avg, rtol=1e-6)
