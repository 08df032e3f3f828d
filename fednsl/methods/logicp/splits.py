"""Per-client partition of the training windows into LogiCP's subsets (§2, §4.3, §4.5; spec §6.11).

D_i = D_i^pri ∪ D_i^pub.  D_i^pri holds D^pre (FedAvg pretraining, Eq. 7), D^cal (conformal calibration),
D^nor (multi-horizon normalisation, Eq. 15; disjoint from D^cal) and D^tr (local training, Eq. 19);
D^pub is the part trained on at the cluster level (P_k = ∪ D_i^pub).  Windows are assigned by a seeded
random permutation ("random temporal sampling", §2), which does not look at the values, so the windows
of D^cal stay exchangeable with each other and with test windows of the same distribution.

Default fractions follow the reference code's 420-window split (89 train | 90 cal | 50 nor | 91 pre |
100 pub ≈ 0.21 | 0.21 | 0.12 | 0.22 | 0.24).  The paper's 50/50 private/public is ``public: 0.5``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARTS = ("pretrain", "cal", "nor", "public", "train")


@dataclass
class SplitConfig:
    """``method_kwargs.split``: shares of a client's training windows (``train`` gets the rest)."""

    pretrain: float = 0.22
    cal: float = 0.21
    nor: float = 0.12
    public: float = 0.24

    def __post_init__(self) -> None:
        shares = {"pretrain": self.pretrain, "cal": self.cal, "nor": self.nor, "public": self.public}
        bad = {k: v for k, v in shares.items() if not 0 <= v < 1}
        if bad:
            raise ValueError(f"method_kwargs.split: shares must lie in [0, 1), got {bad}")
        if sum(shares.values()) >= 1:
            raise ValueError(
                f"method_kwargs.split: pretrain + cal + nor + public = {sum(shares.values()):.3f} "
                "leaves no window for local training (must be < 1)"
            )
        if self.cal <= 0:
            raise ValueError("method_kwargs.split.cal must be > 0: conformal calibration needs windows")

    def partition(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Disjoint sorted index arrays ``{part: (n_part,)}`` covering ``range(n)``.

        Sizes: ``round(share·n)`` each, train = the rest; cal and train keep at least one window (when
        rounding leaves none for training, the largest of pretrain / nor / public gives one up, then cal)."""
        if n < 2:
            raise ValueError(f"a LogiCP client needs >= 2 training windows (calibration + training), got {n}")
        sizes = {p: int(round(getattr(self, p) * n)) for p in PARTS[:-1]}
        sizes["cal"] = max(1, sizes["cal"])
        while sum(sizes.values()) > n - 1:  # keep >= 1 window for local training
            others = [p for p in ("pretrain", "nor", "public") if sizes[p] > 0]
            sizes[max(others, key=lambda p: sizes[p]) if others else "cal"] -= 1
        order = rng.permutation(n)
        out, start = {}, 0
        for p in PARTS[:-1]:
            out[p] = np.sort(order[start : start + sizes[p]])
            start += sizes[p]
        out["train"] = np.sort(order[start:])
        return out


__all__ = ["PARTS", "SplitConfig"]
