"""The E-step in closed form (:func:`rules.posterior.posterior_from_scores`, FedNSL Eq. 2 with the Eq. 11 KL),
checked against the objective it minimises."""

from __future__ import annotations

import numpy as np
import pytest

from rules.posterior import posterior_from_scores


def test_posterior_minimises_the_kl_regularised_objective() -> None:
    """q = softmax((H + λ log p)/(1+λ)) minimises −E_q[H] − entropy(q) + λ KL(q‖p) (Eq. 2/11): no random
    distribution does better."""
    rng = np.random.default_rng(1)
    s, p = rng.normal(size=6), rng.dirichlet(np.ones(6))
    lam, tau, w = 0.7, 0.5, 0.2
    q = posterior_from_scores(s, np.log(p), temperature=tau, prior_weight=w, kl_weight=lam, standardize=False)
    H = s / tau + w * np.log(p)

    def objective(x: np.ndarray) -> float:
        return float(-(x * H).sum() + (x * np.log(x)).sum() + lam * (x * (np.log(x) - np.log(p))).sum())
    best = objective(q)
    for _ in range(500):
        assert objective(rng.dirichlet(np.ones(6) * 0.5) + 1e-12) >= best - 1e-9
    assert posterior_from_scores(s, np.zeros(6), temperature=1, prior_weight=0, kl_weight=0,
                                 standardize=False) == pytest.approx(np.exp(s) / np.exp(s).sum())
