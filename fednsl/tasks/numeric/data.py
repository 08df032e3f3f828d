"""The FedNSL numerical experiment's data (Xing et al., App. A.5; spec fednsl.md §3, §8.15).

600 two-dimensional points, 200 per class, from three Gaussians

    class 0: μ=[20, 20], Σ=[[0.5, 0.1], [0.1, 0.5]]
    class 1: μ=[10, 10], Σ=[[0.5, 0.2], [0.2, 0.5]]
    class 2: μ=[ 2,  2], Σ=[[0.5,-0.3], [-0.3, 0.5]]

and two clients, each missing one class ("unseen class" u_i: client 1 → class 2, client 2 → class 0):

* train: every point of the two seen classes with its label, plus ``relabelled`` (150) points of the unseen
  class with labels drawn uniformly from {0, 1, 2} (the given labels; the true label u_i is kept for the
  true-label accuracy of spec §8.15);
* unseen test: the remaining 50 points of the unseen class (true label u_i).

Heterogeneity (Fig. 2 row 3): at level h ∈ {0, 0.33, 0.5} a share round(h·50) of the unseen-test points is
replaced by fresh draws from the shifted Gaussian N(μ_{u_i} + δ_i, Σ_{u_i}); δ_i is ``shifts[i]`` (default
client 1: +[3, 3], client 2: −[3, 3], i.e. both towards the shared class 1). The paper does not give the
shift; it is an explicit config entry here.

Inputs are given to the models as ``(x − input_center) / input_scale`` (default center [10, 10], scale 10: a
fixed, data-independent map to roughly [−1, 1]). The paper does not state its preprocessing; the baselines'
published learning rates were tuned on inputs in [0, 1], and raw inputs of magnitude 20 make SGD at those
rates diverge. ``input_center: [0, 0], input_scale: 1`` gives the raw points.

Everything is seeded from one integer through numpy ``default_rng`` streams (no global RNG).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kg.seeding import derive_rng, seed_sequence

PAPER_MEANS = [[20.0, 20.0], [10.0, 10.0], [2.0, 2.0]]
PAPER_COVARIANCES = [[[0.5, 0.1], [0.1, 0.5]], [[0.5, 0.2], [0.2, 0.5]], [[0.5, -0.3], [-0.3, 0.5]]]


@dataclass
class NumericDataConfig:
    """``data:`` block of the numeric configs (App. A.5 values as defaults)."""

    name: str = "numeric"
    means: list = field(default_factory=lambda: [list(m) for m in PAPER_MEANS])  # (K, D)
    covariances: list = field(default_factory=lambda: [[list(r) for r in c] for c in PAPER_COVARIANCES])  # (K,D,D)
    points_per_class: int = 200
    unseen_classes: list = field(default_factory=lambda: [2, 0])  # one entry per client: its unseen class
    relabelled: int = 150  # unseen-class points put into training with uniformly random labels
    heterogeneity: list = field(default_factory=lambda: [0.0, 0.33, 0.5])  # shares of shifted unseen-test data
    shifts: list = field(default_factory=lambda: [[3.0, 3.0], [-3.0, -3.0]])  # δ_i per client (D,)
    input_center: list = field(default_factory=lambda: [10.0, 10.0])  # model input = (x - center) / scale
    input_scale: float = 10.0

    def __post_init__(self) -> None:
        where = "data (numeric)"
        if self.name != "numeric":
            raise ValueError(f"{where}: unknown data.name {self.name!r}; available: 'numeric'")
        means = np.asarray(self.means, dtype=np.float64)
        covs = np.asarray(self.covariances, dtype=np.float64)
        if means.ndim != 2 or covs.shape != (means.shape[0], means.shape[1], means.shape[1]):
            raise ValueError(
                f"{where}: means must be (K, D) and covariances (K, D, D); got {means.shape} and {covs.shape}"
            )
        for k, c in enumerate(covs):
            if not np.allclose(c, c.T) or np.linalg.eigvalsh(c).min() <= 0:
                raise ValueError(f"{where}: covariances[{k}] is not symmetric positive definite: {c.tolist()}")
        k = means.shape[0]
        if not all(isinstance(u, int) and 0 <= u < k for u in self.unseen_classes) or not self.unseen_classes:
            raise ValueError(f"{where}: unseen_classes must be class indices in [0, {k}), got {self.unseen_classes}")
        if len(self.shifts) != len(self.unseen_classes) or np.asarray(self.shifts).shape[-1:] != (means.shape[1],):
            raise ValueError(
                f"{where}: shifts needs one {means.shape[1]}-vector per client "
                f"({len(self.unseen_classes)}), got {self.shifts}"
            )
        if not 0 <= self.relabelled < self.points_per_class:
            raise ValueError(
                f"{where}: relabelled must be in [0, points_per_class={self.points_per_class}), got {self.relabelled}"
            )
        if np.asarray(self.input_center).shape != (means.shape[1],) or not self.input_scale > 0:
            raise ValueError(
                f"{where}: input_center must be a {means.shape[1]}-vector and input_scale > 0, got "
                f"{self.input_center}, {self.input_scale}"
            )
        if not self.heterogeneity or any(not 0 <= h <= 1 for h in self.heterogeneity):
            raise ValueError(f"{where}: heterogeneity levels must be in [0, 1], got {self.heterogeneity}")
        if len({level_name(h) for h in self.heterogeneity}) != len(self.heterogeneity):
            raise ValueError(f"{where}: heterogeneity levels {self.heterogeneity} round to the same percentage")

    @property
    def classes(self) -> int:
        return len(self.means)

    @property
    def features(self) -> int:
        return len(self.means[0])

    def to_model_space(self, x: np.ndarray) -> np.ndarray:
        """Raw points (n, D) → model inputs (float32)."""
        return ((np.asarray(x, dtype=np.float64) - np.asarray(self.input_center)) / self.input_scale).astype(np.float32)

    def client_ids(self) -> list[str]:
        """``c1``, ``c2``, … (the paper's client 1, client 2)."""
        return [f"c{i + 1}" for i in range(len(self.unseen_classes))]


def level_name(h: float) -> str:
    """Metric suffix of a heterogeneity level: 0.33 → ``h33``."""
    return f"h{int(round(100 * h))}"


@dataclass
class NumericClientData:
    """One client's arrays. ``y_train`` holds the given (noisy) labels, ``y_true`` the generating class."""

    x_train: np.ndarray  # (n, D) float32, model space (see NumericDataConfig.to_model_space)
    y_train: np.ndarray  # (n,) int64, given labels (what the client trains on)
    y_true: np.ndarray  # (n,) int64, true classes (for evaluation only)
    unseen_class: int
    unseen: dict[str, tuple[np.ndarray, np.ndarray]]  # level name → (x (m, D) float32, y (m,) int64)


def sample_class(rng: np.random.Generator, cfg: NumericDataConfig, k: int, n: int, shift=None) -> np.ndarray:
    """``n`` draws from class ``k``'s Gaussian (mean moved by ``shift``), float64 (n, D)."""
    mean = np.asarray(cfg.means[k], dtype=np.float64)
    if shift is not None:
        mean = mean + np.asarray(shift, dtype=np.float64)
    return rng.multivariate_normal(mean, np.asarray(cfg.covariances[k], dtype=np.float64), size=n, method="cholesky")


def make_numeric_federation(cfg: NumericDataConfig, seed: int) -> dict[str, NumericClientData]:
    """The two (or more) clients' data of App. A.5, deterministic in ``seed``."""
    root = seed_sequence(seed, 0xA5)
    pool_ss, *client_ss = root.spawn(1 + len(cfg.unseen_classes))
    pool_rng = np.random.default_rng(pool_ss)
    points = [sample_class(pool_rng, cfg, k, cfg.points_per_class) for k in range(cfg.classes)]
    out: dict[str, NumericClientData] = {}
    for i, (cid, u) in enumerate(zip(cfg.client_ids(), cfg.unseen_classes)):
        rng = np.random.default_rng(client_ss[i])
        order = rng.permutation(cfg.points_per_class)
        train_u, test_u = points[u][order[: cfg.relabelled]], points[u][order[cfg.relabelled :]]
        seen = [k for k in range(cfg.classes) if k != u]
        x = np.concatenate([points[k] for k in seen] + [train_u])
        y_true = np.concatenate([np.full(cfg.points_per_class, k) for k in seen] + [np.full(cfg.relabelled, u)])
        y_given = y_true.copy()
        y_given[len(y_given) - cfg.relabelled :] = rng.integers(0, cfg.classes, size=cfg.relabelled)
        unseen: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for h in cfg.heterogeneity:
            n_shift = int(round(h * len(test_u)))
            level_rng = derive_rng(seed, 0xA5, i, int(round(1000 * h)))
            shifted = sample_class(level_rng, cfg, u, n_shift, shift=cfg.shifts[i])
            xt = np.concatenate([shifted, test_u[n_shift:]])
            unseen[level_name(h)] = (cfg.to_model_space(xt), np.full(len(xt), u, dtype=np.int64))
        out[cid] = NumericClientData(
            cfg.to_model_space(x), y_given.astype(np.int64), y_true.astype(np.int64), u, unseen
        )
    return out
