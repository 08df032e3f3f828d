"""FedNSL numeric variant: federated EM vs scikit-learn on pooled data, the KL term, the E-step modes, a run."""

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fednsl.config import RunConfig
from fednsl.federation.records import Message
from fednsl.methods.fednsl_gmm import (
    GMM,
    FedNSLGMMConfig,
    FedNSLGMMStrategy,
    init_from_posteriors,
    kl_to_prior,
    log_responsibilities,
    m_step,
    prior_log_probs,
    sufficient_stats,
)
from fednsl.pipeline import train
from fednsl.tasks.numeric.data import NumericDataConfig
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


def blobs(seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[2.0, 2.0], [0.0, 0.0], [-2.0, 1.0]])
    x = np.concatenate([rng.multivariate_normal(m, [[0.4, 0.1], [0.1, 0.3]], 80) for m in means])
    return x[rng.permutation(len(x))]


def start():
    return GMM(np.array([0.3, 0.3, 0.4]), np.array([[1.5, 1.0], [0.5, -0.5], [-1.0, 0.5]]),
               np.repeat(np.eye(2)[None] * 1.5, 3, axis=0))


def federated_em(parts, gmm, steps, reg=1e-6):
    for _ in range(steps):
        stats = [sufficient_stats(x, np.exp(log_responsibilities(x, gmm)[0])) for x in parts]
        gmm = m_step(*(sum(s[i] for s in stats) for i in range(3)), reg_covar=reg)
    return gmm


@pytest.mark.parametrize("steps", [1, 5])
def test_federated_em_equals_sklearn_on_pooled_points(steps):
    x = blobs()
    parts = [x[:70], x[70:200], x[200:]]            # three clients, unequal sizes
    g0 = start()
    ours = federated_em(parts, g0, steps)
    sk = GaussianMixture(3, covariance_type="full", weights_init=g0.weights, means_init=g0.means,
                         precisions_init=np.linalg.inv(g0.covariances), max_iter=steps, tol=0.0, reg_covar=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sk.fit(x)
    np.testing.assert_allclose(ours.weights, sk.weights_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.means, sk.means_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.covariances, sk.covariances_, rtol=1e-8, atol=1e-12)


def test_log_responsibilities_match_scipy_densities():
    x, g = blobs()[:20], start()
    dens = np.stack([w * multivariate_normal(m, c).pdf(x) for w, m, c in zip(g.weights, g.means, g.covariances)], 1)
    log_r, ll = log_responsibilities(x, g)
    np.testing.assert_allclose(np.exp(log_r), dens / dens.sum(1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(ll, np.log(dens.sum(1)), rtol=1e-10)


def test_init_from_classifier_posteriors_uses_pooled_covariance():
    x = blobs()
    q = np.random.default_rng(0).dirichlet(np.ones(3), len(x))
    g = init_from_posteriors(*sufficient_stats(x, q))
    np.testing.assert_allclose(g.means, (q.T @ x) / q.sum(0)[:, None], rtol=1e-9)
    for c in g.covariances:
        np.testing.assert_allclose(c, np.cov(x.T, bias=True) + 1e-6 * np.eye(2), rtol=1e-9)
    np.testing.assert_allclose(g.weights, q.sum(0) / len(x), rtol=1e-9)


def test_kl_to_prior_hand_computed():
    logits = torch.tensor([[0.0, np.log(3.0), 0.0]])          # p = (0.2, 0.6, 0.2)
    log_r = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    p, r = np.array([0.2, 0.6, 0.2]), np.array([0.5, 0.25, 0.25])
    assert kl_to_prior(logits, log_r, "reverse").item() == pytest.approx(float((p * np.log(p / r)).sum()), rel=1e-6)
    assert kl_to_prior(logits, log_r, "forward").item() == pytest.approx(float((r * np.log(r / p)).sum()), rel=1e-6)


def test_prior_floor_keeps_log_probs_finite_and_normalised():
    g = GMM(np.array([0.5, 0.5]), np.array([[0.0, 0.0], [100.0, 100.0]]), np.repeat(np.eye(2)[None], 2, 0))
    lp = prior_log_probs(np.zeros((1, 2)), g, 1e-6)
    assert torch.isfinite(lp).all()
    assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-6)
    assert lp[0, 1].exp().item() == pytest.approx(1e-6, rel=1e-3)


def small_config(**kw):
    return RunConfig(method="fednsl-gmm", rounds=3, seed=0, name="t", method_kwargs=kw,
                     federation={"min_clients": 2})


def test_em_stages_initialise_then_increase_the_likelihood(tmp_path):
    cfg = small_config(estep="gmm", em_steps=3, local_epochs=1)
    cfg.rounds = 2
    res = train(cfg, tmp_path / "run", progress=False)
    strat = res.federation.strategy
    assert isinstance(strat, FedNSLGMMStrategy)
    assert strat.stages(1) == ("train", "em.1", "em.2", "em.3", "evaluate")
    em_rows = [r for r in res.rows if r["scope"] == "server" and r["stage"].startswith("em")]
    assert len(em_rows) == 6 and "loglik_per_point" not in em_rows[0]     # the first EM stage initialises
    ll = [r["loglik_per_point"] for r in em_rows[1:]]
    assert all(b >= a - 1e-9 for a, b in zip(ll, ll[1:]))                 # EM never decreases the likelihood
    assert (tmp_path / "run" / "gmm.json").exists()


def test_components_bind_to_classes(tmp_path):
    cfg = small_config(estep="product", em_steps=2, local_epochs=3)
    strat = train(cfg, tmp_path / "run", progress=False).federation.strategy
    data = NumericDataConfig()
    truth = data.to_model_space(np.asarray(data.means))
    nearest = np.linalg.norm(strat.gmm.means[:, None] - truth[None], axis=2).argmin(1)
    assert nearest.tolist() == [0, 1, 2]


def test_em_reply_carries_statistics_only():
    cfg = small_config()
    from fednsl.pipeline import build_federation

    fed = build_federation(cfg)
    client = fed.clients["c1"]
    reply = client.handle(Message("em", 1, config={"estep": "init", "seed": 0}))
    assert set(reply.arrays) == {"resp_sum", "resp_x", "resp_xx"}
    assert reply.arrays["resp_sum"].sum() == pytest.approx(len(client.y))
    from fednsl.federation.records import validate

    validate(reply, fed.strategy.reply_schema("em"))


def test_product_posterior_is_prior_times_evidence():
    from fednsl.pipeline import build_federation

    client = build_federation(small_config()).clients["c2"]
    g = GMM(np.array([0.2, 0.3, 0.5]), np.array([[1.0, 1.0], [0.0, 0.0], [-0.8, -0.8]]),
            np.repeat(np.eye(2)[None] * 0.5, 3, 0))
    q, _ = client.posterior("product", g)
    with torch.no_grad():
        p = torch.softmax(client.model(client.x), 1).double().numpy()
    r = np.exp(log_responsibilities(client.data.x_train, g)[0])
    expected = r * p / (r * p).sum(1, keepdims=True)
    np.testing.assert_allclose(q, expected, rtol=1e-6, atol=1e-12)


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="estep"):
        FedNSLGMMConfig(estep="magic")
    with pytest.raises(ValueError, match="kl_direction"):
        FedNSLGMMConfig(kl_direction="both")
