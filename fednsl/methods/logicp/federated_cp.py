"""Per-cluster federated split conformal prediction as two mixins, shared by LogiCP and CP-IFCA.

:class:`ConformalClient` (client side) and :class:`ClusterConformal` (server side) implement the stages
``calibrate.scale`` (σ_i on D^nor, Eq. 15; only for ``scale_mode="cluster"``) and ``calibrate``
(ℓ^(i) on D^cal, Eq. 16–17 → Q̂_k, Eq. 18) with the pure functions of
:mod:`~fednsl.methods.logicp.calibration`, plus the coverage / width metrics of the evaluation.

The server needs, per client, its cluster (``self.assign``) and its calibration size (``self.n_cal``,
reported by the client in an earlier stage of the round); it picks (ℓ, κ) per cluster with
:func:`rules.conformal.choose_ranks` and never sees a residual.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from fednsl.common.torch_utils import set_weights
from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Metrics, Stage, handles
from fednsl.methods.logicp.calibration import (
    client_quantile,
    client_scale,
    cluster_ranks,
    cluster_region,
    cluster_scale,
    subsample_calibration,
)
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.registry import Headline
from fednsl.tasks.timeseries.data import ClientSeries
from fednsl.tasks.timeseries.federated import FORECAST_HEADLINE
from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.training import predict
from rules.conformal import coverage, interval_width

CONFORMAL_METRICS = ("cov_joint", "cov_step", "s_cov_joint", "s_cov_step", "width", "width_orig", "qhat_finite")
#: what ``fednsl train`` ends with for federated conformal prediction (logicp, cp-ifca): the joint coverage
#: against the target 1 − α, then the test MSE
CONFORMAL_HEADLINE = (
    Headline("coverage", "evaluate/cov_joint", "config:method_kwargs.alpha", "target", 0.1, complement=True),
    FORECAST_HEADLINE[0],
)
#: Request flag standing for Q̂ = +∞ (infeasible ranks): arrays on the wire must be finite.
TRIVIAL_REGION = "qhat_trivial"


def region_specs(horizon: int) -> tuple[ArraySpec, ...]:
    """Request fields of a cluster region: ``qhat (H,)`` or the flag ``qhat_trivial (1,)`` (Q̂ = +∞)."""
    return (
        ArraySpec("qhat", "quantiles", "float", (int(horizon),), required=False),
        ArraySpec(TRIVIAL_REGION, "mask", "bool", (1,), required=False),
    )


def weight_specs(weights: Mapping[str, np.ndarray], prefix: str = "") -> tuple[ArraySpec, ...]:
    """Optional request fields ``<prefix><name>`` of a model's weights, each of the server's shape."""
    return tuple(
        ArraySpec(f"{prefix}{k}", "weights", shape=tuple(np.shape(v)), required=False) for k, v in weights.items()
    )


def received_region(msg: Message, horizon: int) -> np.ndarray | None:
    """Q̂ ``(H,)`` a request carries (+∞ for the trivial region), or None when it carries none."""
    if TRIVIAL_REGION in msg.arrays:
        return np.full(int(horizon), np.inf)
    q = msg.arrays.get("qhat")
    return None if q is None else np.asarray(q, dtype=float)


def prefixed(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """Arrays whose name starts with ``prefix``, with the prefix removed."""
    n = len(prefix)
    return {k[n:]: v for k, v in arrays.items() if k.startswith(prefix)}


def with_prefix(w: Mapping[str, np.ndarray], prefix: str, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    return {f"{prefix}{k}": w[k] for k in (keys if keys is not None else w)}


class ConformalClient:
    """Client mixin.  Needs ``self.x, self.y`` (training windows), ``self.model``, ``self.data``, ``self.cid``;
    call :meth:`init_parts` in ``__init__``."""

    cid: str
    data: ClientSeries
    x: torch.Tensor
    y: torch.Tensor
    model: Forecaster
    parts: dict[str, np.ndarray]

    def init_parts(self, split: SplitConfig, seed: int) -> None:
        """Partition the training windows (kept as ``x_full, y_full``; ``part`` indexes them)."""
        self.x_full, self.y_full = self.x, self.y
        self.parts = split.partition(len(self.y), np.random.default_rng(seed))

    def part(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``(x, y)`` of one subset (pretrain, cal, nor, public, train; D^pre falls back to D^tr when
        empty), ``pretrain+train`` (the private windows outside D^cal and D^nor) or ``private`` (everything
        but D^pub)."""
        if name in ("private", "pretrain+train"):
            names = ("pretrain", "cal", "nor", "train") if name == "private" else ("pretrain", "train")
            idx = np.sort(np.concatenate([self.parts[p] for p in names]))
        else:
            idx = self.parts[name]
            if name == "pretrain" and len(idx) == 0:
                idx = self.parts["train"]
        t = torch.from_numpy(idx)
        return self.x_full[t], self.y_full[t]

    def part_sizes(self) -> dict[str, int]:
        return {p: int(len(i)) for p, i in self.parts.items()}

    def net(self, weights: Mapping[str, np.ndarray]) -> Forecaster:
        """A copy of the client's architecture holding ``weights``."""
        out = copy.deepcopy(self.model)
        set_weights(out, weights)
        return out

    def deployed_model(self) -> Forecaster:
        """The model whose residuals calibrate when ``calibrate_with="client"`` (override)."""
        return self.model

    def calibration_model(self, msg: Message) -> Forecaster:
        cluster = prefixed(msg.arrays, "cluster.")
        return self.net(cluster) if msg.config.get("calibrate_with") == "cluster" and cluster else self.deployed_model()

    def residuals(self, model: Forecaster, part: str) -> np.ndarray:
        """Y − Ŷ on one subset, ``(n, H)`` float64 — never leaves the client."""
        x, y = self.part(part)
        return (y - predict(model, x)).numpy().astype(np.float64)

    @handles("calibrate.scale")
    def calibrate_scale(self, msg: Message) -> Message:
        """Eq. 15 on D^nor: σ_i (H,)."""
        if msg.config.get("skip"):
            return msg.reply(self.cid)
        sigma = client_scale(self.residuals(self.calibration_model(msg), "nor"))
        return msg.reply(self.cid, arrays={"sigma": sigma})

    @handles("calibrate")
    def calibrate(self, msg: Message) -> Message:
        """Eq. 16–17 on ``n_use`` windows of D^cal drawn at random: the local quantile vector (H,)."""
        c = msg.config
        if c.get("skip"):
            return msg.reply(self.cid)
        model = self.calibration_model(msg)
        mode = str(c["scale_mode"])
        if mode == "cluster":
            sigma: np.ndarray | None = np.asarray(msg.arrays["sigma"], dtype=float)
        elif mode == "client":
            sigma = client_scale(self.residuals(model, "nor"))
        else:
            sigma = None
        e = self.residuals(model, "cal")
        keep = subsample_calibration(len(e), msg.config_int("n_use"), np.random.default_rng(msg.config_int("seed")))
        return msg.reply(self.cid, arrays={"quantiles": client_quantile(e[keep], msg.config_int("ell"), sigma)})

    def conformal_metrics(
        self, y: torch.Tensor, rows: Sequence[tuple[str, torch.Tensor]], qhat: np.ndarray | None
    ) -> dict[str, float]:
        """Joint / per-step coverage (%) of ``pred ± Q̂`` for each ``(prefix, pred)`` row and the width
        mean_τ 2·Q̂_τ (normalised units, and original units via the client's scaler)."""
        if qhat is None:
            return {}
        q = np.asarray(qhat, dtype=float)
        out: dict[str, float] = {}
        for prefix, p in rows:
            cov = coverage(y.numpy(), p.numpy() - q, p.numpy() + q)
            out[f"{prefix}cov_joint"] = 100.0 * cov.joint
            out[f"{prefix}cov_step"] = 100.0 * cov.marginal
        finite = bool(np.isfinite(q).all())
        out["qhat_finite"] = int(finite)
        if finite:
            w = interval_width(q, self.data.scale)
            assert w.original is not None  # a unit scale was given
            out["width"], out["width_orig"] = w.normalized, float(w.original)
        return out


def coverage_check(
    achieved: float, nominal: Sequence[float], level_sd: Sequence[float], n_test: Sequence[int]
) -> dict[str, Any]:
    """Is a run's joint coverage (in %) within what sampling explains?

    Per cluster k: nominal coverage c_k = cov(ℓ, κ) (exact, Eq. 14), the SD s_k of the calibration-conditional
    coverage F(Q̂) over calibration draws (``RankChoice.level_sd``) and n_k test windows.  The test-window
    average has mean Σ w_k c_k (w_k = n_k / n) and, for independent windows, variance
    Σ w_k² (s_k² + c_k(1 − c_k)/n_k).  ``z`` = (achieved − mean) / SD; z < −3 is more under-coverage than
    sampling explains (the windows are not exchangeable: drift, or test windows unlike the calibration ones).
    """
    c, s, n = (np.asarray(v, dtype=float) for v in (nominal, level_sd, n_test))
    if not len(c) or n.sum() <= 0:
        return {}
    w = n / n.sum()
    mean = float((w * c).sum())
    sd = float(np.sqrt((w**2 * (s**2 + c * (1 - c) / np.maximum(n, 1))).sum()))
    z = (achieved / 100.0 - mean) / sd if sd > 0 else 0.0
    if z < -3:
        verdict = "below what sampling explains: calibration and test windows are not exchangeable (drift?)"
    elif achieved / 100.0 < mean:
        verdict = "below the nominal coverage but within sampling error (small calibration sets), not a violation"
    else:
        verdict = "at or above the nominal coverage"
    note = (
        f"joint coverage {achieved:.1f} % vs nominal {100 * mean:.2f} % (exact cov(l, kappa)); expected run-to-run "
        f"SD {100 * sd:.1f} points ({int(n.sum())} test windows, calibration-conditional SD "
        f"{100 * float(s.max()):.1f} points per cluster); z = {z:.2f}: {verdict}"
    )
    return {"achieved": achieved, "nominal": 100 * mean, "sd": 100 * sd, "z": z, "note": note}


class ClusterConformal:
    """Server mixin.  Needs ``self.cfg`` (``alpha``, ``scale_mode``, ``calibrate_with``, ``num_clusters``),
    ``self.horizon``; call :meth:`init_conformal` in ``__init__``; keep ``self.assign`` (cid → cluster)
    and ``self.n_cal`` (cid → |D^cal|) up to date; override :meth:`cluster_weights`."""

    cfg: Any
    horizon: int

    def init_conformal(self) -> None:
        k, h = self.cfg.num_clusters, self.horizon
        self.assign: dict[str, int] = {}
        self.n_cal: dict[str, int] = {}
        self.qhat = np.full((k, h), np.inf)
        self.sigma = np.ones((k, h))
        self.ranks: list[dict[str, Any] | None] = [None] * k
        self._calib: dict[int, dict[str, Any]] = {}

    def cluster_weights(self, k: int) -> dict[str, np.ndarray] | None:
        """Full weights of cluster ``k``'s model (for ``calibrate_with="cluster"``)."""
        return None

    def members(self, k: int, among: Sequence[str] | None = None) -> list[str]:
        pool = self.assign if among is None else {c: self.assign.get(c, -1) for c in among}
        return sorted(c for c, j in pool.items() if j == k)

    def region(self, cid: str) -> dict[str, np.ndarray]:
        """``{"qhat": Q̂}`` of the client's cluster once it has been calibrated (``{"qhat_trivial": [True]}``
        when the ranks were infeasible: Q̂ = +∞, the whole line), else ``{}``."""
        k = self.assign.get(cid, -1)
        if k < 0 or self.ranks[k] is None:
            return {}
        if not np.isfinite(self.qhat[k]).all():
            return {TRIVIAL_REGION: np.ones(1, dtype=bool)}
        return {"qhat": self.qhat[k].copy()}

    def _calibration_arrays(self, cid: str) -> dict[str, np.ndarray]:
        if self.cfg.calibrate_with != "cluster":
            return {}
        w = self.cluster_weights(self.assign[cid])
        return {} if w is None else with_prefix(w, "cluster.")

    def configure_calibrate_scale(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        config = {"calibrate_with": self.cfg.calibrate_with}
        return {
            c: Message("calibrate.scale", rnd, arrays=self._calibration_arrays(c), config=config)
            if self.assign.get(c, -1) >= 0
            else Message("calibrate.scale", rnd, config={"skip": True})
            for c in clients
        }

    def aggregate_calibrate_scale(
        self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]
    ) -> Metrics:
        for k in range(self.cfg.num_clusters):
            mem = [c for c in self.members(k, list(replies)) if "sigma" in replies[c].arrays]
            if mem:
                self.sigma[k] = cluster_scale(np.stack([replies[c].arrays["sigma"] for c in mem]))
        return {}

    def configure_calibrate(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        self._calib = {}
        out = {}
        for k in range(self.cfg.num_clusters):
            mem = self.members(k, clients)
            if not mem:
                continue
            choice = cluster_ranks([self.n_cal[c] for c in mem], self.cfg.alpha)
            self._calib[k] = {"members": mem, "choice": choice}
            config = {
                "calibrate_with": self.cfg.calibrate_with,
                "scale_mode": self.cfg.scale_mode,
                "ell": choice.ell or 0,
                "n_use": choice.n_cal,
                "skip": not choice.feasible,
            }
            arrays = {"sigma": self.sigma[k].copy()} if self.cfg.scale_mode == "cluster" else {}
            for c in mem:
                out[c] = Message("calibrate", rnd, arrays={**arrays, **self._calibration_arrays(c)}, config=config)
        for c in clients:
            out.setdefault(c, Message("calibrate", rnd, config={"skip": True}))
        return out

    def aggregate_calibrate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        infeasible, kept = 0, 0
        for k, info in self._calib.items():
            choice, mem = info["choice"], info["members"]
            if not choice.feasible:
                infeasible += 1
                warnings.warn(
                    f"round {rnd}: cluster {k} ({len(mem)} clients x {choice.n_cal} calibration windows) "
                    f"cannot reach coverage {1 - self.cfg.alpha:g}; its region is (-inf, inf)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.qhat[k] = np.inf
                self.ranks[k] = choice.to_dict()
                continue
            if any(c not in replies or "quantiles" not in replies[c].arrays for c in mem):
                kept += 1  # ranks were chosen for the full membership: keep the previous region
                continue
            local = np.stack([np.asarray(replies[c].arrays["quantiles"], dtype=float) for c in mem])
            self.qhat[k] = cluster_region(local, int(choice.kappa))
            self.ranks[k] = choice.to_dict()
        finite = [k for k in self._calib if np.isfinite(self.qhat[k]).all()]
        out: Metrics = {"infeasible": infeasible, "kept_previous": kept}
        if finite:
            out["width"] = float(np.mean([2.0 * self.qhat[k].mean() for k in finite]))
            ranks = [self.ranks[k] for k in finite]
            out["nominal_coverage"] = float(np.mean([r["coverage"] for r in ranks if r]))
        self._calib = {}
        return out

    def _cluster_weight_specs(self) -> tuple[ArraySpec, ...]:
        w = self.cluster_weights(0) if self.cfg.num_clusters else None
        return () if w is None else weight_specs(w, "cluster.")

    def calibrate_scale_request(self) -> Schema:
        """Server → client for Eq. 15: the cluster model (``calibrate_with="cluster"``) and two options."""
        return Schema(arrays=self._cluster_weight_specs(), config=("calibrate_with", "skip", "seed"))

    def calibrate_request(self) -> Schema:
        """Server → client for Eq. 16–17: the ranks ℓ and n_use, the cluster's σ ``(H,)``, the cluster model."""
        sigma = ArraySpec("sigma", "quantiles", "float", (self.horizon,), required=False)
        return Schema(
            arrays=(sigma, *self._cluster_weight_specs()),
            config=("calibrate_with", "scale_mode", "ell", "n_use", "skip", "seed"),
        )

    def conformal_stages(self) -> tuple[Stage, ...]:
        """``calibrate.scale`` (Eq. 15: σ_i, H values) and ``calibrate`` (Eq. 16–17: the local quantiles)."""
        return (
            Stage(
                "calibrate.scale",
                self.configure_calibrate_scale,
                self.aggregate_calibrate_scale,
                reply=Schema(arrays=(ArraySpec("sigma", "quantiles", "float", (self.horizon,), required=False),)),
                request=self.calibrate_scale_request,
            ),
            Stage(
                "calibrate",
                self.configure_calibrate,
                self.aggregate_calibrate,
                reply=Schema(arrays=(ArraySpec("quantiles", "quantiles", "float", (self.horizon,), required=False),)),
                request=self.calibrate_request,
            ),
        )

    def conformal_state(self) -> dict[str, Any]:
        return {
            "assign": dict(self.assign),
            "n_cal": dict(self.n_cal),
            "qhat": self.qhat.copy(),
            "sigma": self.sigma.copy(),
            "ranks": list(self.ranks),
        }

    def load_conformal_state(self, state: Mapping[str, Any]) -> None:
        self.assign = dict(state["assign"])
        self.n_cal = dict(state["n_cal"])
        self.qhat = np.asarray(state["qhat"], dtype=float).copy()
        self.sigma = np.asarray(state["sigma"], dtype=float).copy()
        self.ranks = list(state["ranks"])

    def record_coverage(self, replies: Mapping[str, Message]) -> None:
        """Keep the evaluation's joint coverage and test-window counts per cluster for :meth:`coverage_report`."""
        rows = [(c, r.metrics) for c, r in replies.items() if "cov_joint" in r.metrics and self.assign.get(c, -1) >= 0]
        n = sum(int(m.get("num_examples", 0)) for _, m in rows)
        if not rows or n == 0:
            self._coverage_seen = None
            return
        achieved = sum(float(m["cov_joint"]) * int(m.get("num_examples", 0)) for _, m in rows) / n
        per: dict[int, int] = {}
        for c, m in rows:
            per[self.assign[c]] = per.get(self.assign[c], 0) + int(m.get("num_examples", 0))
        self._coverage_seen = (achieved, per)

    def coverage_report(self) -> dict[str, Any]:
        """:func:`coverage_check` of the last evaluation ({} before one, or with an infinite region)."""
        seen = getattr(self, "_coverage_seen", None)
        if seen is None:
            return {}
        achieved, per = seen
        ks = [k for k in sorted(per) if self.ranks[k] is not None and np.isfinite(self.qhat[k]).all()]
        if len(ks) != len(per):
            return {}
        r = [self.ranks[k] for k in ks]
        return coverage_check(
            achieved,
            [x["coverage"] for x in r],
            [x["level_sd"] for x in r],
            [per[k] for k in ks],
        )

    def conformal_summary(self) -> list[dict[str, Any]]:
        return [
            {
                "members": self.members(j),
                "ranks": self.ranks[j],
                "qhat": [float(v) for v in self.qhat[j]],
                "width": float(2 * self.qhat[j].mean()) if np.isfinite(self.qhat[j]).all() else None,
            }
            for j in range(self.cfg.num_clusters)
        ]


__all__ = [
    "CONFORMAL_METRICS",
    "TRIVIAL_REGION",
    "ClusterConformal",
    "coverage_check",
    "ConformalClient",
    "prefixed",
    "received_region",
    "region_specs",
    "weight_specs",
    "with_prefix",
]
