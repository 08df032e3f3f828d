"""pFedBayes: the Gaussian KL, the KL-to-global update of the local copy v, and the personal loss."""

import numpy as np
import pytest
import torch
from torch.distributions import Normal, kl_divergence

from fednsl.federation.records import Message
from fednsl.methods.pfedbayes import PFedBayesClient, bnn, global_copy_loss, personal_loss
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


def params(seed, n=4):
    g = torch.Generator().manual_seed(seed)
    mus = [torch.randn(3, generator=g, dtype=torch.float64).requires_grad_() for _ in range(n // 2)]
    rhos = [(torch.randn(3, generator=g, dtype=torch.float64) - 1).requires_grad_() for _ in range(n // 2)]
    return mus, rhos


def test_gaussian_kl_matches_torch_distributions():
    (mq, rq), (mp, rp) = params(0), params(1)
    sq, sp = [bnn.sigma(r) for r in rq], [bnn.sigma(r) for r in rp]
    ref = sum(kl_divergence(Normal(a, b), Normal(c, d)).sum() for a, b, c, d in zip(mq, sq, mp, sp))
    assert bnn.gaussian_kl(mq, sq, mp, sp).item() == pytest.approx(ref.item(), rel=1e-12)


def test_global_copy_step_is_the_hand_derived_kl_gradient_step():
    (mq, rq), (mv, rv) = params(2), params(3)
    zeta, n_batches, lr = 10.0, 20, 0.01
    loss = global_copy_loss(mq, rq, mv, rv, zeta, n_batches)
    loss.backward()
    c = zeta / n_batches
    for m_q, r_q, m_v, r_v in zip(mq, rq, mv, rv):
        s_q, s_v = bnn.sigma(r_q).detach(), bnn.sigma(r_v).detach()
        d_mu = c * (m_v.detach() - m_q.detach()) / s_v ** 2
        d_sigma = c * (1 / s_v - (s_q ** 2 + (m_q.detach() - m_v.detach()) ** 2) / s_v ** 3)
        d_rho = d_sigma * torch.sigmoid(r_v.detach())                  # dσ/dρ of softplus
        np.testing.assert_allclose(m_v.grad.numpy(), d_mu.numpy(), rtol=1e-10)
        np.testing.assert_allclose(r_v.grad.numpy(), d_rho.numpy(), rtol=1e-10)
        assert m_q.grad is None and r_q.grad is None                   # q_i is held fixed
        # one SGD step moves v's mean towards q's
        new = m_v.detach() - lr * m_v.grad
        assert torch.all((new - m_q.detach()).abs() <= (m_v.detach() - m_q.detach()).abs())


def test_personal_loss_kl_gradient_and_fixed_global():
    (mq, rq), (mv, rv) = params(4, n=2), params(5, n=2)
    logits = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 2])
    loss = personal_loss(logits, y, mq, rq, mv, rv, zeta=10.0, n_batches=20)
    loss.backward()
    s_v = bnn.sigma(rv[0]).detach()
    np.testing.assert_allclose(mq[0].grad.numpy(), (0.5 * (mq[0] - mv[0]) / s_v ** 2).detach().numpy(), rtol=1e-10)
    assert mv[0].grad is None and rv[0].grad is None                   # v is held fixed
    # the likelihood term is a sum (not a mean) over the batch: −Σ log softmax = 2·log 3 for zero logits
    kl = bnn.gaussian_kl(mq, [bnn.sigma(r) for r in rq], mv, [bnn.sigma(r) for r in rv]).item()
    assert loss.item() == pytest.approx(2 * np.log(3) + 0.5 * kl, rel=1e-10)


def test_client_round_moves_v_towards_q_and_sends_only_the_distribution():
    cfg = NumericDataConfig()
    data = make_numeric_federation(cfg, 0)["c1"]
    init = bnn.init_distribution(2, 8, 3, 0.1, -3.0, seed=0)
    client = PFedBayesClient("c1", data, init, personal_lr=0.01, lr=0.01)
    msg = Message("train", 1, arrays=init, config={"zeta": 10.0, "local_epochs": 3, "personal_steps": 2,
                                                    "batch_size": 50, "eps_std": 1.0, "seed": 7})
    reply = client.train(msg)
    assert set(reply.arrays) == set(init)
    mu_p = [m.detach() for m in client.mus]
    sig_p = [bnn.sigma(r).detach() for r in client.rhos]
    before = bnn.gaussian_kl(mu_p, sig_p, [torch.from_numpy(init[f"mu.{n}"]) for n in bnn.LAYERS],
                             [bnn.sigma(torch.from_numpy(init[f"rho.{n}"])) for n in bnn.LAYERS])
    after = bnn.gaussian_kl(mu_p, sig_p, [torch.from_numpy(reply.arrays[f"mu.{n}"]) for n in bnn.LAYERS],
                            [bnn.sigma(torch.from_numpy(reply.arrays[f"rho.{n}"])) for n in bnn.LAYERS])
    assert after.item() < before.item()
