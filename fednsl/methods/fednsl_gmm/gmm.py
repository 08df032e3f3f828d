"""Federated EM for a full-covariance Gaussian mixture from soft sufficient statistics (numpy, float64).

Clients hold points x_n and posteriors q_n(k); they send only, per component k,

    N_k = Σ_n q_nk,   S_k = Σ_n q_nk x_n,   SS_k = Σ_n q_nk x_n x_nᵀ

and the server's M-step is scikit-learn's ``GaussianMixture._m_step`` written in these sums:

    Ñ_k = N_k + 10·eps,  π_k = Ñ_k / Σ_j Ñ_j,  μ_k = S_k / Ñ_k,  Σ_k = SS_k / Ñ_k − μ_k μ_kᵀ + reg·I.

With q = the mixture's own responsibilities (:func:`log_responsibilities`) one federated round is exactly
one EM iteration of ``GaussianMixture`` on the pooled points (tests check it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

EPS = np.finfo(np.float64).eps


@dataclass
class GMM:
    weights: np.ndarray  # (K,)
    means: np.ndarray  # (K, D)
    covariances: np.ndarray  # (K, D, D)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"gmm_weights": self.weights, "gmm_means": self.means, "gmm_covariances": self.covariances}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "GMM | None":
        if "gmm_means" not in arrays:
            return None
        return cls(
            np.asarray(arrays["gmm_weights"], np.float64),
            np.asarray(arrays["gmm_means"], np.float64),
            np.asarray(arrays["gmm_covariances"], np.float64),
        )


def log_gaussian(x: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> np.ndarray:
    """log N(x_n | μ_k, Σ_k) for all n, k: (n, K), via Cholesky factors."""
    x = np.asarray(x, np.float64)
    n, d = x.shape
    out = np.empty((n, len(means)))
    for k, (mu, cov) in enumerate(zip(means, covariances)):
        chol = np.linalg.cholesky(cov)
        z = np.linalg.solve(chol, (x - mu).T)  # (D, n)
        out[:, k] = -0.5 * (d * np.log(2 * np.pi) + (z**2).sum(0)) - np.log(np.diag(chol)).sum()
    return out


def log_responsibilities(x: np.ndarray, gmm: GMM) -> tuple[np.ndarray, np.ndarray]:
    """(log r (n, K), log p(x_n) (n,)): r_nk = π_k N(x_n|μ_k,Σ_k) / Σ_j π_j N(x_n|μ_j,Σ_j)."""
    joint = log_gaussian(x, gmm.means, gmm.covariances) + np.log(gmm.weights)
    ll = logsumexp(joint, axis=1)
    return joint - ll[:, None], ll


def sufficient_stats(x: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N (K,), S (K, D), SS (K, D, D)) of points x (n, D) under soft assignments q (n, K)."""
    x = np.asarray(x, np.float64)
    q = np.asarray(q, np.float64)
    return q.sum(0), q.T @ x, np.einsum("nk,nd,ne->kde", q, x, x)


def m_step(n: np.ndarray, s: np.ndarray, ss: np.ndarray, reg_covar: float = 1e-6) -> GMM:
    """scikit-learn's full-covariance M-step from summed sufficient statistics."""
    nk = np.asarray(n, np.float64) + 10 * EPS
    means = s / nk[:, None]
    covs = ss / nk[:, None, None] - np.einsum("kd,ke->kde", means, means)
    covs = 0.5 * (covs + covs.transpose(0, 2, 1)) + reg_covar * np.eye(s.shape[1])[None]
    return GMM(nk / nk.sum(), means, covs)


def init_from_posteriors(n: np.ndarray, s: np.ndarray, ss: np.ndarray, reg_covar: float = 1e-6) -> GMM:
    """App. A.6: means from classifier-posterior statistics, every covariance = the pooled data covariance.

    ``n, s, ss`` are statistics under the classifiers' posteriors p_w(k|x); Σ_k N_k is the point count and
    Σ_k S_k, Σ_k SS_k the plain first and second moments, so the pooled covariance needs no extra message.
    """
    from_post = m_step(n, s, ss, reg_covar)
    total = float(np.sum(n))
    mean = s.sum(0) / total
    cov = ss.sum(0) / total - np.outer(mean, mean) + reg_covar * np.eye(s.shape[1])
    return GMM(from_post.weights, from_post.means, np.repeat(cov[None], len(n), axis=0))
