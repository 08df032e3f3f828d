"""Baselines of LogiCP Tables 1–8 that the time-series layer does not provide.

* ``cp_ifca`` — **CP-IFCA** (LogiCP §5.3 (3)): IFCA (Ghosh et al. 2020; ``ts_ifca``: each client trains the
  cluster model with the lowest MSE on its data) plus the *same* per-cluster federated split CP as LogiCP
  (:mod:`~fednsl.methods.logicp.federated_cp`): after each training round the clients of every cluster
  calibrate (Eq. 12–18) with their own (client-row) models.  Training is IFCA's (MSE); clients train on
  D^tr and keep D^cal, D^nor apart (``split``).  Rows: CP-IFCA (client models) and CP-IFCA-S (cluster
  models, ``s_``), each with coverage and width.
* ``ts_fedbayes`` — **Fed-Bayes** (LogiCP §5.3 (5), pFedBayes, Zhang et al. ICML 2022) read as a
  *Bayesian last layer*: the forecaster's output layer (``head`` of the recurrent models,
  ``linear_mapping`` of the transformer) has mean-field Gaussian weights w ~ N(μ, softplus(ρ)²); the rest
  is deterministic.  Per minibatch, ``personal_steps`` Adam steps on the body and the personal posterior
  q_i for  Σ (y − ŷ)²/(2 s²) + ζ/n_batches · KL(q_i ‖ v)  (ŷ with w sampled by reparameterisation), then one
  step moving the local copy v of the global distribution towards q_i (ζ/n_batches · KL(q_i ‖ v)), as in
  :mod:`fednsl.methods.pfedbayes`; the server averages the bodies and v (FedAvg).  Clients deploy the
  global body with their posterior mean μ_i (the exact predictive mean of a linear Gaussian layer).
  Hyper-parameters from the authors' code as LogiCP reports them: ζ = 10, weight scale 0.1, ρ offset −3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch.func import functional_call

from fednsl.common import bnn
from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.config import RunConfig
from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Metrics, Stage, handles
from fednsl.federation.runner import Federation
from fednsl.methods.logicp.calibration import SCALE_MODES
from fednsl.methods.logicp.data import logicp_setup
from fednsl.methods.logicp.federated_cp import (
    CONFORMAL_HEADLINE,
    CONFORMAL_METRICS,
    TRIVIAL_REGION,
    ClusterConformal,
    ConformalClient,
    received_region,
    region_specs,
)
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.timeseries.clients import TSIFCAClient, unpack_models
from fednsl.tasks.timeseries.configs import TSIFCAConfig
from fednsl.tasks.timeseries.federated import FORECAST_HEADLINE, ForecastClient, TSTrainConfig, make_clients
from fednsl.tasks.timeseries.models import Forecaster, RecurrentForecaster
from fednsl.tasks.timeseries.strategies import TSAverageStrategy, TSIFCAStrategy
from fednsl.tasks.timeseries.training import minibatches, predict


# --- CP-IFCA -----------------------------------------------------------------------------------------------
@dataclass
class CPIFCAConfig(TSIFCAConfig):
    """IFCA options plus the conformal ones of LogiCP (α, σ mode, calibration split)."""

    alpha: float = 0.1
    scale_mode: str = "cluster"
    calibrate_with: str = "client"
    split: dict[str, Any] = field(default_factory=dict)  # cal / nor shares (pretrain, public: 0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.alpha < 1:
            raise ValueError(f"method_kwargs (cp-ifca).alpha must lie in (0, 1), got {self.alpha}")
        if self.scale_mode not in SCALE_MODES:
            raise ValueError(
                f"method_kwargs (cp-ifca).scale_mode must be one of {SCALE_MODES}, got {self.scale_mode!r}"
            )
        if self.calibrate_with not in ("client", "cluster"):
            raise ValueError("method_kwargs (cp-ifca).calibrate_with must be 'client' or 'cluster'")
        self.split_config()

    def split_config(self) -> SplitConfig:
        shares = {"pretrain": 0.0, "public": 0.0, "cal": 0.21, "nor": 0.12, **self.split}
        return build_kwargs(SplitConfig, shares, "method_kwargs (cp-ifca).split")


class CPIFCAClient(ConformalClient, TSIFCAClient):
    """An IFCA client that trains on D^tr and calibrates on D^cal / D^nor."""

    def __init__(
        self,
        cid: str,
        data: Any,
        model: Forecaster,
        template: Any,
        margin: float,
        eval_split: str,
        split: SplitConfig,
        split_seed: int,
    ) -> None:
        super().__init__(cid, data, model, template, margin, eval_split)
        self.init_parts(split, split_seed)
        self.x, self.y = self.part("train")

    def train(self, msg: Message) -> Message:
        reply = super().train(msg)
        reply.arrays["n_cal"] = np.array([len(self.parts["cal"])], dtype=np.int64)
        return reply

    def evaluate(self, msg: Message) -> Message:
        qhat = received_region(msg, self.data.horizon)
        region = {"qhat", TRIVIAL_REGION}
        plain = dataclasses.replace(msg, arrays={k: v for k, v in msg.arrays.items() if k not in region})
        reply = super().evaluate(plain)
        j = int(reply.metrics["cluster"])
        cluster = self.net(unpack_models(plain.arrays, msg.config_int("num_clusters"))[j])
        x, y = self.split(str(msg.config.get("split") or self.eval_split))
        rows = [("", predict(self.model, x)), ("s_", predict(cluster, x))]
        return msg.reply(self.cid, metrics={**reply.metrics, **self.conformal_metrics(y, rows, qhat)})


class CPIFCAStrategy(ClusterConformal, TSIFCAStrategy):
    """IFCA server + per-cluster calibration of the clients that trained this round."""

    def __init__(self, initial: Sequence[Mapping[str, np.ndarray]], cfg: CPIFCAConfig, rounds: int, horizon: int):
        super().__init__(initial, cfg, rounds, cfg.selection_split)
        self.horizon = int(horizon)
        self.init_conformal()
        self._trained: list[str] = []

    def declare_stages(self) -> tuple[Stage, ...]:
        train = Stage(
            "train",
            self.configure_train,
            self.aggregate_train,
            reply=self.train_reply_schema,
            request=self.train_request_schema,
        )
        evaluate = self.evaluate_stage(request=self.evaluate_request_schema, extra_metrics=CONFORMAL_METRICS)
        return (train, *self.conformal_stages(), evaluate)

    def evaluate_request_schema(self) -> Schema:
        """IFCA's evaluate request plus the region Q̂ of the client's cluster."""
        base = super().evaluate_request_schema()
        return Schema(arrays=(*base.arrays, *region_specs(self.horizon)), config=base.config)

    def train_reply_schema(self) -> Schema:
        base = super().train_reply_schema()
        return Schema(
            arrays=(*base.arrays, ArraySpec("n_cal", "counts", "int", (1,))),
            metrics=base.metrics,
            required_metrics=base.required_metrics,
        )

    def stages(self, rnd: int) -> Sequence[str]:
        cal = ("calibrate.scale", "calibrate") if self.cfg.scale_mode == "cluster" else ("calibrate",)
        return ("train", *cal, "evaluate")

    def sample_clients(self, stage: str, rnd: int, clients: Sequence[str]) -> Sequence[str] | None:
        if stage.startswith("calibrate"):
            return [c for c in self._trained if c in clients]
        return super().sample_clients(stage, rnd, clients)

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        self.n_cal.update({c: int(r.arrays["n_cal"][0]) for c, r in replies.items()})
        self.assign.update({c: int(r.arrays["cluster"][0]) for c, r in replies.items()})
        self._trained = sorted(replies)
        plain = {
            c: dataclasses.replace(r, arrays={k: v for k, v in r.arrays.items() if k != "n_cal"})
            for c, r in replies.items()
        }
        return super().aggregate_train(rnd, plain, failures)

    def cluster_weights(self, k: int) -> dict[str, np.ndarray] | None:
        return self.models[k]

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:  # type: ignore[override]
        base = super().configure_evaluate(rnd, clients)
        return {
            c: Message("evaluate", rnd, arrays={**base.arrays, **self.region(c)}, config=base.config) for c in clients
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "conformal": self.conformal_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.load_conformal_state(state["conformal"])


@register_method(
    "cp-ifca",
    doc="CP-IFCA: IFCA + per-cluster federated conformal prediction (LogiCP baseline)",
    headline=CONFORMAL_HEADLINE,
)
def build_cp_ifca(config: RunConfig) -> Federation:
    cfg = build_kwargs(CPIFCAConfig, config.method_kwargs, "method_kwargs (cp-ifca)")
    setup = logicp_setup(config, cfg)
    split = cfg.split_config()
    ids = sorted(setup.data.clients)
    init = [get_weights(setup.new_model(setup.model_seed("ifca", j))) for j in range(cfg.num_clusters)]
    clients = make_clients(
        setup,
        lambda cid, series, model: CPIFCAClient(
            cid,
            series,
            model,
            setup.template,
            setup.margin,
            cfg.eval_split,
            split,
            setup.model_seed("split", ids.index(cid)),
        ),
    )
    strategy = CPIFCAStrategy(init, cfg, config.rounds, setup.data.horizon)
    return Federation(
        strategy,
        clients,
        {
            **setup.summary(),
            "num_clusters": cfg.num_clusters,
            "train_examples": int(sum(c.num_examples for c in clients.values())),
        },
    )


# --- Fed-Bayes (Bayesian last layer) ----------------------------------------------------------------------
@dataclass
class TSFedBayesConfig(TSTrainConfig):
    """pFedBayes on the output layer (module docstring); SGD fields of the base are unused except
    ``batch_size``, ``local_epochs`` and ``max_batches``."""

    zeta: float = 10.0  # ζ: KL weight (authors' code)
    weight_scale: float = 0.1  # std of the initial means
    rho_offset: float = -3.0  # initial ρ (σ = softplus(ρ))
    personal_lr: float = 0.001  # Adam on the body and q_i
    global_lr: float = 0.001  # Adam on the local copy v
    personal_steps: int = 5  # q_i steps per minibatch (authors: 5)
    eps_std: float = 1.0  # reparameterisation noise ε ~ N(0, eps_std²)
    noise_std: float = 0.1  # s: Gaussian likelihood std in normalised units

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.personal_steps < 1 or self.noise_std <= 0 or self.zeta < 0:
            raise ValueError("method_kwargs (ts-fedbayes): need personal_steps >= 1, noise_std > 0, zeta >= 0")


def last_layer(model: Forecaster) -> str:
    """Name of the output layer: ``head`` (recurrent) or ``linear_mapping`` (transformer)."""
    return "head" if isinstance(model, RecurrentForecaster) else "linear_mapping"


BAYES = ("mu.weight", "mu.bias", "rho.weight", "rho.bias")


def init_bayes(model: Forecaster, weight_scale: float, rho_offset: float, seed: int) -> dict[str, np.ndarray]:
    """v (and q_i) at the start: μ ~ N(0, weight_scale²), ρ = rho_offset, shaped like the output layer."""
    gen = torch.Generator().manual_seed(seed)
    layer = getattr(model, last_layer(model))
    out = {}
    for name in ("weight", "bias"):
        shape = getattr(layer, name).shape
        out[f"bayes.mu.{name}"] = (torch.randn(shape, generator=gen) * weight_scale).numpy()
        out[f"bayes.rho.{name}"] = np.full(tuple(shape), rho_offset, dtype=np.float32)
    return out


class TSFedBayesClient(ForecastClient):
    """Deterministic body + Gaussian output layer; keeps q_i across rounds."""

    def __init__(
        self,
        cid: str,
        data: Any,
        model: Forecaster,
        template: Any,
        margin: float,
        eval_split: str,
        initial: Mapping[str, np.ndarray],
    ) -> None:
        super().__init__(cid, data, model, template, margin, eval_split)
        self.last = last_layer(model)
        self.body_keys = [k for k in model.state_dict() if not k.startswith(self.last + ".")]
        self.q = {k: torch.nn.Parameter(torch.from_numpy(np.array(initial[f"bayes.{k}"]))) for k in BAYES}
        self.v = {k: torch.nn.Parameter(torch.from_numpy(np.array(initial[f"bayes.{k}"]))) for k in BAYES}

    def _out(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, {f"{self.last}.weight": w, f"{self.last}.bias": b}, (x,))

    def _load(self, arrays: Mapping[str, np.ndarray]) -> None:
        set_weights(self.model, {k: arrays[k] for k in self.body_keys})
        with torch.no_grad():
            for k in BAYES:
                self.v[k].copy_(torch.from_numpy(np.asarray(arrays[f"bayes.{k}"])))

    @handles("train")
    def train(self, msg: Message) -> Message:
        c = msg.config
        self._load(msg.arrays)
        gen = self.seed_generator(msg)
        body = [p for n, p in self.model.named_parameters() if n in set(self.body_keys)]
        mus, rhos = [self.q["mu.weight"], self.q["mu.bias"]], [self.q["rho.weight"], self.q["rho.bias"]]
        mus_v, rhos_v = [self.v["mu.weight"], self.v["mu.bias"]], [self.v["rho.weight"], self.v["rho.bias"]]
        opt_p = torch.optim.Adam(body + mus + rhos, lr=msg.config_float("personal_lr"))
        opt_v = torch.optim.Adam(mus_v + rhos_v, lr=msg.config_float("global_lr"))
        bs, zeta, eps = msg.config_int("batch_size"), msg.config_float("zeta"), msg.config_float("eps_std")
        n_batches = max(1, -(-len(self.y) // bs))
        cap = None if c.get("max_batches") is None else msg.config_int("max_batches")
        if cap is not None:
            n_batches = min(n_batches, cap)
        s2 = 2.0 * msg.config_float("noise_std") ** 2
        total, steps = 0.0, 0
        self.model.train()
        for _ in range(msg.config_int("local_epochs")):
            for idx in minibatches(len(self.y), bs, gen, cap):
                x, y = self.x[idx], self.y[idx]
                for _ in range(msg.config_int("personal_steps")):
                    w, b = bnn.sample(mus, rhos, eps, gen)
                    pred = self._out(x, w, b)
                    kl = bnn.gaussian_kl(
                        mus,
                        [bnn.sigma(r) for r in rhos],
                        [m.detach() for m in mus_v],
                        [bnn.sigma(r).detach() for r in rhos_v],
                    )
                    loss = (pred - y).pow(2).sum() / s2 + zeta / n_batches * kl
                    opt_p.zero_grad()
                    loss.backward()
                    opt_p.step()
                total += float((pred.detach() - y).pow(2).mean())
                steps += 1
                kl_v = (
                    zeta
                    / n_batches
                    * bnn.gaussian_kl(
                        [m.detach() for m in mus],
                        [bnn.sigma(r).detach() for r in rhos],
                        mus_v,
                        [bnn.sigma(r) for r in rhos_v],
                    )
                )
                opt_v.zero_grad()
                kl_v.backward()
                opt_v.step()
        arrays = get_weights(self.model, self.body_keys)
        arrays.update({f"bayes.{k}": p.detach().numpy().copy() for k, p in self.v.items()})
        return msg.reply(
            self.cid, arrays=arrays, metrics={"num_examples": len(self.y), "train_loss": total / max(steps, 1)}
        )

    def deployed(self, arrays: Mapping[str, np.ndarray]) -> Forecaster:
        """Global body + personal posterior mean μ_i (exact predictive mean of the Gaussian layer)."""
        set_weights(self.model, {k: arrays[k] for k in self.body_keys})
        set_weights(
            self.model,
            {
                f"{self.last}.weight": self.q["mu.weight"].detach().numpy(),
                f"{self.last}.bias": self.q["mu.bias"].detach().numpy(),
            },
        )
        return self.model

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        model = self.deployed(msg.arrays)
        return msg.reply(self.cid, metrics=self.evaluation(model, msg.config_str("split")))

    def state_dict(self) -> dict[str, Any]:
        return {
            "q": {k: p.detach().clone() for k, p in self.q.items()},
            "v": {k: p.detach().clone() for k, p in self.v.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with torch.no_grad():
            for key in ("q", "v"):
                for k, p in getattr(self, key).items():
                    p.copy_(torch.as_tensor(state[key][k]))


@register_method(
    "ts-fedbayes",
    doc="Fed-Bayes for forecasters: pFedBayes on a Bayesian output layer (LogiCP baseline)",
    headline=FORECAST_HEADLINE,
)
def build_ts_fedbayes(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSFedBayesConfig, config.method_kwargs, "method_kwargs (ts-fedbayes)")
    setup = logicp_setup(config, cfg)
    probe = setup.new_model(setup.model_seed("global"))
    initial = init_bayes(probe, cfg.weight_scale, cfg.rho_offset, setup.model_seed("bayes"))
    body = [k for k in probe.state_dict() if not k.startswith(last_layer(probe) + ".")]
    weights = {**get_weights(probe, body), **initial}
    clients = make_clients(
        setup,
        lambda cid, series, model: TSFedBayesClient(
            cid, series, model, setup.template, setup.margin, cfg.eval_split, initial
        ),
    )
    extra = {k: getattr(cfg, k) for k in ("zeta", "personal_lr", "global_lr", "personal_steps", "eps_std", "noise_std")}
    strategy = TSAverageStrategy(weights, cfg, config.rounds, extra)
    return Federation(
        strategy, clients, {**setup.summary(), "train_examples": int(sum(c.num_examples for c in clients.values()))}
    )


__all__ = [
    "CPIFCAClient",
    "CPIFCAConfig",
    "CPIFCAStrategy",
    "TSFedBayesClient",
    "TSFedBayesConfig",
    "build_cp_ifca",
    "build_ts_fedbayes",
    "init_bayes",
    "last_layer",
]
