"""Choosing the ranks (ell, kappa) of the quantile-of-quantiles estimator (LogiCP Eq 12–14).

Never hard-code ranks: they depend on the calibration size per client n, the number of
clients m in the cluster and alpha. ``choose_ranks`` returns the feasible pair (coverage
>= 1 - alpha by the exact formula of ``rules.conformal.coverage``) with the *smallest*
coverage. Criterion: cov(ell, kappa) = E[F(Q̂)], the expected probability mass below the
threshold, i.e. the expected quantile level of Q̂ — the distribution-free measure of the
interval's size (the smaller, the narrower in expectation). Ties (equal within 1e-12) go to
the pair whose conditional coverage F(Q̂) has the smaller standard deviation, then to the
larger kappa. This is Humbert et al.'s rule ("smallest coverage >= 1 - alpha", spec §3.4).

m = 1 is split conformal: ell = ⌈(n+1)(1-alpha)⌉, kappa = 1, coverage ell/(n+1).
If even (ell, kappa) = (n, m) misses the target (n·m/(n·m+1) < 1 - alpha), no finite
threshold is valid: the choice is reported infeasible (``feasible=False``, the interval is
the whole line) with the per-client calibration size that would make it feasible.

alpha is read as the decimal the user wrote (0.1 means exactly 1/10) so that boundary cases
such as n = 99, alpha = 0.1 (ell/(n+1) = 0.9 exactly) are decided exactly.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import lru_cache

from rules.conformal.coverage import (
    _check_sizes,
    qq_coverage,
    qq_coverage_fraction,
    qq_level_moments,
    quadrature_is_exact,
)

__all__ = ["RankChoice", "choose_ranks", "meets_target", "split_conformal_rank", "alpha_fraction", "AUTHORS_RANKS"]

#: Ranks hard-coded in the LogiCP reference code (utils_training.py): n_cal=90, m=10, any alpha.
AUTHORS_RANKS = {"n_cal": 90, "n_clients": 10, "ell": 79, "kappa": 7, "single_client_ell": 81}

#: Decisions closer than this to the target are settled in rational arithmetic.
_TIE_MARGIN = 1e-9
#: Largest n·m for which a rational tie-break is attempted (above: treated as infeasible).
_RATIONAL_MAX_DEGREE = 20_000
#: n·m up to which the chosen pair's coverage is always certified in rationals (~0.1 s).
_CERTIFY_MAX_DEGREE = 1_000


def alpha_fraction(alpha: float | Fraction | str) -> Fraction:
    """alpha as an exact rational, read from its shortest decimal form (0.1 -> 1/10)."""
    a = alpha if isinstance(alpha, Fraction) else Fraction(str(alpha))
    if not 0 < a < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return a


def split_conformal_rank(n: int, alpha: float | Fraction | str) -> int:
    """Single-site split-conformal rank ⌈(n+1)(1-alpha)⌉ (may exceed n: then infeasible)."""
    n, _ = _check_sizes(n, 1)
    t = (n + 1) * (1 - alpha_fraction(alpha))
    return math.ceil(t)


@dataclass(frozen=True)
class RankChoice:
    """Ranks for one cluster. ``coverage`` is the exact marginal coverage of the pair (when
    infeasible: the best achievable, n·m/(n·m+1), reached by ell = n, kappa = m).

    method: "split" (m = 1), "quantile-of-quantiles" (m > 1) or "infeasible".
    certified: "rational" (exact Fraction arithmetic) or "quadrature" (exact Gauss–Legendre
    rule, float rounding only; "composite-quadrature" for n·m > 8190).
    level_sd: standard deviation of the calibration-conditional coverage F(Q̂).
    min_n_cal: smallest calibration size per client for which the target is feasible.
    """

    n_cal: int
    n_clients: int
    alpha: float
    ell: int | None
    kappa: int | None
    coverage: float
    level_sd: float
    feasible: bool
    method: str
    certified: str
    min_n_cal: int

    @property
    def target(self) -> float:
        return 1.0 - self.alpha

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = self.target
        return d


def _min_n_cal(m: int, a: Fraction) -> int:
    # max coverage with n per client is n·m/(n·m+1) >= 1 - a  <=>  n·m >= (1 - a)/a
    return max(1, math.ceil((1 - a) / (a * m)))


def _feasible(n: int, m: int, ell: int, kappa: int, target: Fraction) -> bool:
    cov = qq_coverage(n, m, ell, kappa)
    gap = cov - float(target)
    if gap > _TIE_MARGIN:
        return True
    if gap < -_TIE_MARGIN:
        return False
    if n * m <= _RATIONAL_MAX_DEGREE:
        return qq_coverage_fraction(n, m, ell, kappa) >= target
    return False  # too close to call and too large to settle exactly: be conservative


@lru_cache(maxsize=4096)
def _choose(n: int, m: int, a: Fraction) -> RankChoice:
    target = 1 - a
    min_n = _min_n_cal(m, a)
    quad = "quadrature" if quadrature_is_exact(n, m) else "composite-quadrature"
    if n < min_n:  # even (ell, kappa) = (n, m) under-covers
        return RankChoice(n, m, float(a), None, None, n * m / (n * m + 1), 0.0, False, "infeasible", "rational", min_n)
    if m == 1:
        ell = split_conformal_rank(n, a)
        split_cov = Fraction(ell, n + 1)
        _, sd = qq_level_moments(n, 1, ell, 1)
        if split_cov < target:
            raise RuntimeError(f"internal error: split rank {ell} covers {split_cov} < {target}")
        return RankChoice(n, 1, float(a), ell, 1, float(split_cov), sd, True, "split", "rational", min_n)
    # Frontier walk: ell*(kappa) = smallest feasible ell for each kappa; it is non-increasing
    # in kappa because coverage increases in both ranks. O(n + m) coverage evaluations.
    frontier: list[tuple[int, int]] = []
    ell = n
    for kappa in range(1, m + 1):
        if not _feasible(n, m, ell, kappa, target):
            continue
        while ell > 1 and _feasible(n, m, ell - 1, kappa, target):
            ell -= 1
        frontier.append((ell, kappa))
    if not frontier:  # cannot happen when n >= min_n ((n, m) covers n·m/(n·m+1))
        raise RuntimeError(f"internal error: no feasible ranks for n={n}, m={m}, alpha={a}")
    covs = [qq_coverage(n, m, ell_k, kappa_k) for ell_k, kappa_k in frontier]
    best = min(covs)
    ties = [fk for fk, c in zip(frontier, covs, strict=True) if c - best <= 1e-12]
    if len(ties) > 1:  # smaller sd of F(Q̂), then larger kappa
        ties.sort(key=lambda fk: (qq_level_moments(n, m, *fk)[1], -fk[1]))
    ell_best, kappa_best = ties[0]
    _, sd = qq_level_moments(n, m, ell_best, kappa_best)
    certified = quad
    cov = qq_coverage(n, m, ell_best, kappa_best)
    if n * m <= _CERTIFY_MAX_DEGREE or abs(cov - float(target)) <= _TIE_MARGIN:
        exact = qq_coverage_fraction(n, m, ell_best, kappa_best)
        if exact < target:
            raise RuntimeError(f"internal error: ranks ({ell_best}, {kappa_best}) cover {exact} < {target}")
        cov, certified = float(exact), "rational"
    elif not cov >= float(target):
        raise RuntimeError(f"internal error: ranks ({ell_best}, {kappa_best}) cover {cov} < {target}")
    return RankChoice(n, m, float(a), ell_best, kappa_best, cov, sd, True, "quantile-of-quantiles", certified, min_n)


def meets_target(n_cal: int, n_clients: int, ell: int, kappa: int, alpha: float | Fraction | str) -> bool:
    """Whether cov(ell, kappa) >= 1 - alpha, decided in rationals when within 1e-9 of the target."""
    n, m = _check_sizes(operator.index(n_cal), operator.index(n_clients))
    return _feasible(n, m, operator.index(ell), operator.index(kappa), 1 - alpha_fraction(alpha))


def choose_ranks(n_cal: int, n_clients: int, alpha: float | Fraction | str) -> RankChoice:
    """Ranks (ell, kappa) with exact coverage >= 1 - alpha and the smallest such coverage.

    n_cal: calibration scores per client (all clients of the cluster hold the same number);
    n_clients: clients m in the cluster; alpha: miscoverage level in (0, 1). Cached.
    """
    n, m = _check_sizes(operator.index(n_cal), operator.index(n_clients))
    return _choose(n, m, alpha_fraction(alpha))
