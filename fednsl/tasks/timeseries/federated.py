"""Building blocks of federated forecasting methods (time-series baselines, FedSTL, LogiCP).

* :class:`TSTrainConfig` — options every forecasting method shares (``method_kwargs``): model,
  property template, SGD settings (FedSTL App.: SGD, batch 64, weight decay 1e-4; code momentum 0.5).
* :class:`ForecastClient` — a client holding one :class:`~fednsl.tasks.timeseries.data.ClientSeries`, a
  forecaster and its mined property φ_i (mined once, on its training targets: the data never changes
  during a run).  Helpers for the local objective (MSE + λ·L_p) and for evaluation.
* :class:`TSStrategy` — server base: evaluation on every client each time (not a sample), optional
  all-clients last training round (FedSTL code), weighted-mean aggregation of evaluation metrics.
* :func:`ts_setup` — data + template + model factory from a :class:`~fednsl.config.RunConfig`.

Evaluation replies (declared in :data:`EVAL_SCHEMA`) carry, per client, with prefixes
``""`` (the client's deployed model), ``"s_"`` (its cluster model, "-S"), ``"t_"`` (teacher-corrected
client forecast, "-T"), ``"naive_mean_"`` / ``"naive_last_"`` (seasonal baselines):
``mse`` (normalised), ``mse_orig`` (original units), ``rho`` (% forecasts with ρ(φ_i, ŷ) ≥ 0),
``step_rho`` (% steps inside the band); plus ``truth_rho`` / ``truth_step_rho`` (how often the
ground truth itself satisfies the mined property) and ``num_examples``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np
import torch
from torch import nn

from fednsl.common.torch_utils import torch_threads
from fednsl.config import RunConfig
from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Client, Metrics, SchemaSource, Stage, Strategy
from fednsl.registry import Headline, build_kwargs
from fednsl.tasks.timeseries.baselines import NAIVE
from fednsl.tasks.timeseries.data import PERIOD, ClientSeries, TSData, TSDataConfig, load_timeseries
from fednsl.tasks.timeseries.models import Forecaster, ModelConfig, build_forecaster
from fednsl.tasks.timeseries.properties import (
    LP_KINDS,
    ClientProperty,
    PropertyConfig,
    make_template,
    mine_property,
    property_loss,
)
from fednsl.tasks.timeseries.training import METRIC_NAMES, Objective, forecast_metrics, predict
from kg.seeding import derive_seed
from rules import stl

EVAL_PREFIXES = ("", "s_", "t_", "naive_mean_", "naive_last_")
EVAL_METRICS = (
    "num_examples",
    *(p + m for p in EVAL_PREFIXES for m in METRIC_NAMES),
    "truth_rho",
    "truth_step_rho",
    "cluster",
)
EVAL_SCHEMA = Schema(metrics=EVAL_METRICS)
#: what ``fednsl train`` ends with for a forecaster: the test MSE against the naive seasonal forecast, and STL
#: property satisfaction (``@register_method(headline=...)`` of the forecasting methods)
FORECAST_HEADLINE = (
    Headline("test MSE", "evaluate/mse", "evaluate/naive_mean_mse", "naive forecast"),
    Headline("property satisfaction ρ%", "evaluate/rho", "evaluate/naive_mean_rho", "naive"),
)
SPLITS = ("train", "val", "test")


@dataclass
class TSTrainConfig:
    """``method_kwargs`` shared by the forecasting methods."""

    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields
    property: dict[str, Any] = field(default_factory=dict)  # PropertyConfig fields (for ρ%, L_p, teacher)
    lr: float = 0.05  # client SGD learning rate (paper: ≤ 1e-3 over far more steps)
    momentum: float = 0.5  # FedSTL code
    weight_decay: float = 1e-4  # FedSTL App.
    batch_size: int = 64  # FedSTL App.
    local_epochs: int = 10  # FedSTL App.: 10 for the baselines
    max_batches: int | None = None  # cap on batches per epoch (code: local_updates = 10)
    grad_clip: float | None = None  # gradient-norm clip (LogiCP code: 0.5 for the transformer)
    final_round_all: bool = True  # last round trains every client (FedSTL code)
    eval_split: str = "test"  # split the evaluate stage scores
    threads: int = 1  # torch intra-op threads per client call (0: leave as is)

    def __post_init__(self) -> None:
        self.model_config()
        self.property_config()
        if self.eval_split not in SPLITS:
            raise ValueError(f"eval_split must be one of {SPLITS}, got {self.eval_split!r}")
        if self.lr <= 0 or self.batch_size < 1 or self.local_epochs < 0:
            raise ValueError("need lr > 0, batch_size >= 1, local_epochs >= 0")

    def model_config(self) -> ModelConfig:
        return build_kwargs(ModelConfig, self.model, "method_kwargs.model")

    def property_config(self) -> PropertyConfig:
        return build_kwargs(PropertyConfig, self.property, "method_kwargs.property")

    def sgd_config(self) -> dict[str, Any]:
        """The SGD settings sent to clients in ``msg.config``."""
        return {
            "lr": self.lr,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "batch_size": self.batch_size,
            "local_epochs": self.local_epochs,
            "max_batches": self.max_batches,
            "grad_clip": self.grad_clip,
        }


def sgd_kwargs(c: Mapping[str, Any], epochs_key: str = "local_epochs") -> dict[str, Any]:
    """``sgd_epochs`` keyword arguments from a message config (see :meth:`TSTrainConfig.sgd_config`)."""
    return {
        "epochs": int(c[epochs_key]),
        "batch_size": int(c["batch_size"]),
        "lr": float(c["lr"]),
        "momentum": float(c["momentum"]),
        "weight_decay": float(c["weight_decay"]),
        "max_batches": None if c.get("max_batches") is None else int(c["max_batches"]),
        "grad_clip": None if c.get("grad_clip") is None else float(c["grad_clip"]),
    }


@dataclass
class TSSetup:
    """What a forecasting method builder needs: the data, the template and a model factory."""

    data: TSData
    model_cfg: ModelConfig
    template: stl.Template
    margin: float
    run_seed: int

    def new_model(self, seed: int) -> Forecaster:
        return build_forecaster(self.model_cfg, self.data.input_len, self.data.horizon, seed)

    def model_seed(self, purpose: str, index: int = 0) -> int:
        """Deterministic init seed for (run seed, purpose, index). The purpose enters as its UTF-8 bytes (one
        entropy word each), as it always has, so that published time-series numbers reproduce bit for bit."""
        return derive_seed(self.run_seed, index, *purpose.encode())

    def summary(self) -> dict[str, Any]:
        return {
            **self.data.summary(),
            "model": self.model_cfg.name,
            "template": self.template.name,
            "template_params": len(self.template.params),
        }


def ts_setup(config: RunConfig, cfg: TSTrainConfig) -> TSSetup:
    """Load ``config.data`` and resolve the model and property template."""
    data_cfg = build_kwargs(TSDataConfig, config.data, "data (time series)")
    data = load_timeseries(data_cfg, config.seed)
    pcfg = cfg.property_config()
    return TSSetup(data, cfg.model_config(), make_template(pcfg, data.horizon), pcfg.margin, config.seed)


class ForecastClient(Client):
    """Private windows, a forecaster and the mined property φ_i; only declared fields leave."""

    def __init__(
        self,
        cid: str,
        data: ClientSeries,
        model: Forecaster,
        template: stl.Template,
        margin: float = 0.0,
        eval_split: str = "test",
        threads: int = 1,
    ) -> None:
        self.cid, self.data, self.model = cid, data, model
        self.eval_split, self.threads = eval_split, int(threads)
        self.x = torch.from_numpy(data.x_train)
        self.y = torch.from_numpy(data.y_train)
        self.prop: ClientProperty = mine_property(template, data.y_train, margin)
        self._reference: dict[str, dict[str, float]] = {}

    def handle(self, message: Message) -> Message:
        with torch_threads(self.threads):
            return super().handle(message)

    # -- data -------------------------------------------------------------------------------------
    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return (torch.from_numpy(getattr(self.data, f"x_{name}")), torch.from_numpy(getattr(self.data, f"y_{name}")))

    @property
    def num_examples(self) -> int:
        return len(self.y)

    # -- objectives -------------------------------------------------------------------------------
    def objective(self, lam: float = 0.0, lp: str = "l1", prop: ClientProperty | None = None) -> Objective:
        """FedSTL Eq. 2: ``MSE(ŷ, y) + λ·L_p(φ, ŷ)`` (φ = own property unless given)."""
        if lp not in LP_KINDS:
            raise ValueError(f"lp must be one of {LP_KINDS}, got {lp!r}")
        prop = self.prop if prop is None else prop
        if lam == 0.0:
            return lambda pred, y: (pred - y).pow(2).mean()
        return lambda pred, y: (pred - y).pow(2).mean() + lam * property_loss(pred, prop, lp)

    # -- evaluation -------------------------------------------------------------------------------
    def reference_metrics(self, split: str) -> dict[str, float]:
        """Naive seasonal baselines and the truth's own satisfaction rate on ``split`` (cached)."""
        if split not in self._reference:
            x, y = self.split(split)
            out: dict[str, float] = {}
            for name, fn in NAIVE.items() if x.shape[1] >= PERIOD else ():  # need one full day of input
                pred = torch.from_numpy(fn(x.numpy(), y.shape[1]).astype(np.float32))
                out.update(forecast_metrics(pred, y, self.prop, self.data.scale, prefix=f"{name}_"))
            truth = forecast_metrics(y, y, self.prop, self.data.scale, prefix="truth_")
            out.update({k: v for k, v in truth.items() if k in ("truth_rho", "truth_step_rho")})
            self._reference[split] = out
        return dict(self._reference[split])

    def evaluation(
        self, model: nn.Module, split: str | None = None, cluster_model: nn.Module | None = None, teacher: bool = True
    ) -> dict[str, float]:
        """Metrics of the deployed ``model`` (and teacher / cluster rows) on ``split``."""
        split = split or self.eval_split
        x, y = self.split(split)
        pred = predict(model, x)
        out: dict[str, float] = {"num_examples": len(y)}
        out.update(forecast_metrics(pred, y, self.prop, self.data.scale))
        if teacher and self.prop.lower is not None:
            out.update(forecast_metrics(self.prop.project(pred), y, self.prop, self.data.scale, prefix="t_"))
        if cluster_model is not None:
            out.update(forecast_metrics(predict(cluster_model, x), y, self.prop, self.data.scale, prefix="s_"))
        out.update(self.reference_metrics(split))
        return out

    def seed_generator(self, msg: Message) -> torch.Generator:
        return torch.Generator().manual_seed(msg.config_int("seed"))


class TSStrategy(Strategy):
    """Server base for forecasting methods (see the module docstring)."""

    def __init__(self, cfg: TSTrainConfig, rounds: int) -> None:
        self.cfg, self.rounds = cfg, int(rounds)

    def sample_clients(self, stage: str, rnd: int, clients: Sequence[str]) -> Sequence[str] | None:
        if stage == "evaluate":
            return list(clients)
        if stage == "train" and self.cfg.final_round_all and rnd == self.rounds:
            return list(clients)
        return None

    def may_end_after(self, rnd: int) -> bool:
        """Not with ``final_round_all`` unless round ``rnd`` was the planned last: its training took every client."""
        return not self.cfg.final_round_all or rnd >= self.rounds

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message | dict[str, Message]:
        return Message("evaluate", rnd, config={"split": self.cfg.eval_split})

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        return weighted_metric_means(replies.values(), skip=("num_examples", "cluster"))

    def evaluate_stage(self, request: SchemaSource | None = None, extra_metrics: Sequence[str] = ()) -> Stage:
        """The evaluate stage every forecasting method shares (metrics only leave the clients)."""
        reply = Schema(metrics=(*EVAL_SCHEMA.metrics, *extra_metrics)) if extra_metrics else EVAL_SCHEMA
        return Stage("evaluate", self.configure_evaluate, self.aggregate_evaluate, reply=reply, request=request)


def weighted_metric_means(replies: Sequence[Message] | Any, skip: Sequence[str] = ("num_examples",)) -> Metrics:
    """Per metric, the mean over the replies that carry it, weighted by ``num_examples``."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    for r in replies:
        n = float(r.metrics.get("num_examples", 1))
        for k, v in r.metrics.items():
            if k in skip:
                continue
            sums[k] = sums.get(k, 0.0) + n * float(v)
            weights[k] = weights.get(k, 0.0) + n
    return {k: sums[k] / weights[k] for k in sums if weights[k] > 0}


C = TypeVar("C", bound=Client)
ClientFactory = Callable[[str, ClientSeries, Forecaster], C]


def make_clients(setup: TSSetup, factory: ClientFactory[C]) -> dict[str, C]:
    """One client per data client; client ``i``'s model is initialised from ``model_seed("client", i)``
    (its private head starts there; shared layers are overwritten by the server's)."""
    return {
        cid: factory(cid, series, setup.new_model(setup.model_seed("client", i)))
        for i, (cid, series) in enumerate(sorted(setup.data.clients.items()))
    }


__all__ = [
    "EVAL_METRICS",
    "EVAL_PREFIXES",
    "EVAL_SCHEMA",
    "ForecastClient",
    "SPLITS",
    "TSSetup",
    "TSStrategy",
    "TSTrainConfig",
    "make_clients",
    "sgd_kwargs",
    "ts_setup",
    "weighted_metric_means",
]
