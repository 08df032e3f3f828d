"""LogiCP client (Alg. 1, client side).

A client holds its training windows split into D^pre / D^cal / D^nor / D^tr / D^pub
(:mod:`~fednsl.methods.logicp.splits`), a forecaster θ_i^c (shared encoder from its cluster + private
head) and its mined property φ_i (a per-step band for the default operational-range template).

Stages (what leaves the client is in brackets — weights, σ / quantile vectors, counts and K scores):

* ``pretrain``: FedAvg on D^pre with MSE (Eq. 7)                                 [weights]
* ``train``: local epochs on D^tr with ω1·MSE + ω2·L_STL + (1−ω1−ω2)·L_CP (Eq. 19) [weights]
* ``cluster.train``: the cluster model, trained on this client's D^pub with the same loss [weights]
* ``cluster``: load the pushed cluster encoder (Alg. 1 line 31); score every cluster model by
  R_STL (Eq. 10) of its forecasts on D^tr w.r.t. φ_i (or by MSE / not at all)    [K scores, |D^cal|]
* ``calibrate.scale``: σ_i on D^nor (Eq. 15)                                      [σ vector (H,)]
* ``calibrate``: ℓ^(i) = σ·Q_(ℓ)(R_i) on D^cal (Eq. 16–17)                        [quantile vector (H,)]
* ``evaluate``: MSE, γ (share of steps inside φ_i's band), joint / per-step coverage of the cluster's
  region and its width, for the client model, the cluster model ("-S") and the runtime-corrected
  forecast ("-T", Eq. 23–25).                                                     [metrics]

Arrays addressed to the client: ``push.<name>`` (weights to load into θ_i^c: the full global model on
first contact, the cluster's shared encoder afterwards), ``c<j>.<name>`` (cluster models to score),
``cluster.<name>`` (the own cluster's full model), ``qhat`` (H,) or ``qhat_trivial`` (Q̂ = +∞) and ``sigma`` (H,).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import numpy as np
import torch

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.methods.logicp.correction import conflicts, correct
from fednsl.methods.logicp.federated_cp import ConformalClient, prefixed, received_region
from fednsl.methods.logicp.losses import LossWeights, logicp_loss, mse_loss, stl_loss
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.tasks.timeseries.clients import unpack_models
from fednsl.tasks.timeseries.data import ClientSeries
from fednsl.tasks.timeseries.federated import ForecastClient, sgd_kwargs
from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.training import forecast_metrics, predict, sgd_epochs
from rules import stl


class LogiCPClient(ConformalClient, ForecastClient):
    """See the module docstring.  ``split_seed`` fixes the partition of the training windows."""

    def __init__(
        self,
        cid: str,
        data: ClientSeries,
        model: Forecaster,
        template: stl.Template,
        margin: float,
        eval_split: str,
        split: SplitConfig,
        split_seed: int,
    ) -> None:
        super().__init__(cid, data, model, template, margin, eval_split)
        self.init_parts(split, split_seed)
        self.band = self.prop.lower is not None and self.prop.upper is not None

    def sizes(self) -> dict[str, int]:
        return self.part_sizes()

    def _load_push(self, msg: Message) -> None:
        push = prefixed(msg.arrays, "push.")
        if push:
            set_weights(self.model, push)

    def logicp_objective(
        self, c: Mapping[str, Any], qhat: np.ndarray | None
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Eq. 19 for this client's property and the cluster region ``qhat`` (None: no CP term)."""
        weights = LossWeights(float(c["omega_mse"]), float(c["omega_stl"]))
        q = None if qhat is None else torch.as_tensor(np.asarray(qhat), dtype=torch.float32)
        kind, cp_kind = str(c["stl_loss"]), str(c["cp_loss"])
        lo, up = (self.prop.lower, self.prop.upper) if self.band else (None, None)
        return lambda pred, y: logicp_loss(
            pred, y, lower=lo, upper=up, qhat=q, weights=weights, stl_kind=kind, cp_kind=cp_kind, prop=self.prop
        )

    # -- stages -------------------------------------------------------------------------------------
    @handles("pretrain")
    def pretrain(self, msg: Message) -> Message:
        """Alg. 1 lines 5–9: θ^p → local MSE epochs on D^pre (Eq. 7)."""
        set_weights(self.model, msg.arrays)
        x, y = self.part("pretrain")
        loss = sgd_epochs(
            self.model,
            x,
            y,
            gen=self.seed_generator(msg),
            objective=lambda p, t: mse_loss(p, t),
            **sgd_kwargs(msg.config),
        )
        return msg.reply(self.cid, arrays=get_weights(self.model), metrics={"num_examples": len(y), "train_loss": loss})

    @handles("train")
    def train(self, msg: Message) -> Message:
        """Alg. 1 lines 19–20: local epochs on the private training windows with Eq. 19."""
        self._load_push(msg)
        qhat = received_region(msg, self.data.horizon)
        x, y = self.part(str(msg.config.get("local_data", "pretrain+train")))
        loss = sgd_epochs(
            self.model,
            x,
            y,
            gen=self.seed_generator(msg),
            objective=self.logicp_objective(msg.config, qhat),
            **sgd_kwargs(msg.config),
        )
        return msg.reply(self.cid, arrays=get_weights(self.model), metrics={"num_examples": len(y), "train_loss": loss})

    @handles("cluster.train")
    def cluster_train(self, msg: Message) -> Message:
        """Alg. 1 lines 28–30, federated: the cluster model on this client's D^pub with Eq. 19."""
        weights = prefixed(msg.arrays, "cluster.")
        x, y = self.part("public")
        if msg.config.get("skip") or not weights or len(y) == 0:
            return msg.reply(self.cid, metrics={"num_examples": 0, "train_loss": 0.0})
        net = self.net(weights)
        loss = sgd_epochs(
            net,
            x,
            y,
            gen=self.seed_generator(msg),
            objective=self.logicp_objective(msg.config, received_region(msg, self.data.horizon)),
            **sgd_kwargs(msg.config, "cluster_epochs"),
        )
        return msg.reply(self.cid, arrays=get_weights(net), metrics={"num_examples": len(y), "train_loss": loss})

    def alignment(self, pred: torch.Tensor) -> float:
        """R_STL (Eq. 10) of forecasts ``(n, H)`` w.r.t. φ_i: mean over windows and steps of the per-step
        violation g_τ (band templates), else the mean violation degree of the whole formula."""
        if self.band:
            return float(stl_loss(pred, self.prop.lower, self.prop.upper, "l1"))
        return float(stl_loss(pred, kind="violation", prop=self.prop))

    @handles("cluster")
    def cluster(self, msg: Message) -> Message:
        """Alg. 1 lines 31 and 33: load the pushed encoder, then score the candidate cluster models."""
        self._load_push(msg)
        c = msg.config
        k = msg.config_int("num_candidates")
        measure = str(c["measure"])
        x, y = self.part(str(c.get("split", "train")))
        cap = None if c.get("max_samples") is None else msg.config_int("max_samples")
        if cap is not None and len(y) > cap:
            keep = torch.from_numpy(np.unique(np.linspace(0, len(y) - 1, cap).round().astype(np.int64)))
            x, y = x[keep], y[keep]
        scores = np.zeros(k)
        if measure != "none":
            candidates = {n: v for n, v in msg.arrays.items() if re.match(r"c\d+\.", n)}
            for j, w in enumerate(unpack_models(candidates, k) if k else []):
                pred = predict(self.net(w), x)
                scores[j] = self.alignment(pred) if measure == "stl" else float(mse_loss(pred, y))
        return msg.reply(
            self.cid,
            arrays={"scores": scores.astype(np.float64), "n_cal": np.array([len(self.parts["cal"])], dtype=np.int64)},
        )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        """Client row, cluster row ("s_"), corrected rows ("t_": CP priority, "tstl_": STL priority) and
        the conformal metrics of the cluster's region on the evaluation split."""
        self._load_push(msg)
        split = str(msg.config.get("split") or self.eval_split)
        glob = prefixed(msg.arrays, "global.")
        model = self.net(glob) if glob else self.model
        cluster_w = prefixed(msg.arrays, "cluster.")
        cluster = self.net(cluster_w) if cluster_w else None
        out = self.evaluation(model, split, cluster_model=cluster, teacher=False)
        qhat = received_region(msg, self.data.horizon)
        x, y = self.split(split)
        pred = predict(model, x)
        if self.band and qhat is not None:
            q = torch.as_tensor(np.asarray(qhat), dtype=pred.dtype)
            lo, up = self.prop.need_band("the runtime correction")  # self.band: both bounds are set
            for prefix, prio in (("t_", "cp"), ("tstl_", "stl")):
                out.update(
                    forecast_metrics(correct(pred, q, lo, up, prio), y, self.prop, self.data.scale, prefix=prefix)
                )
            out["t_conflicts"] = 100.0 * float(conflicts(pred, q, lo, up).float().mean())
        elif self.band:
            out.update(forecast_metrics(self.prop.project(pred), y, self.prop, self.data.scale, prefix="tstl_"))
        rows = [("", pred)] + ([("s_", predict(cluster, x))] if cluster is not None else [])
        out.update(self.conformal_metrics(y, rows, qhat))
        return msg.reply(self.cid, metrics=out)

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"model": get_weights(self.model)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        set_weights(self.model, state["model"])


__all__ = ["LogiCPClient"]
