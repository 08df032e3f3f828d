"""Clients of the forecasting baselines (FedAvg / FedProx, FedRep, Ditto, IFCA)."""

from __future__ import annotations

import copy
from typing import Any, Mapping

import numpy as np

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.tasks.timeseries.federated import ForecastClient, sgd_kwargs
from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.training import sgd_epochs
from fednsl.tasks.timeseries.updates import fedrep_update, ifca_select, proximal_term


def unpack_models(arrays: Mapping[str, np.ndarray], k: int) -> list[dict[str, np.ndarray]]:
    """``{"c<j>.<name>": …}`` → one weight dict per model ``j = 0 … k-1``."""
    out: list[dict[str, np.ndarray]] = [{} for _ in range(k)]
    for key, v in arrays.items():
        head, _, name = key.partition(".")
        out[int(head[1:])][name] = v
    return out


def pack_models(models: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {f"c{j}.{k}": v for j, m in enumerate(models) for k, v in m.items()}


class TSFedAvgClient(ForecastClient):
    """FedAvg / FedProx: E local epochs from the global model (plus μ/2‖w − w_g‖² when ``mu`` > 0)."""

    @handles("train")
    def train(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        mu = msg.config_float("mu", 0.0)
        params = list(self.model.parameters())
        reg = proximal_term(params, [p.detach() for p in params], mu) if mu > 0 else None
        loss = sgd_epochs(
            self.model, self.x, self.y, gen=self.seed_generator(msg), regulariser=reg, **sgd_kwargs(msg.config)
        )
        return msg.reply(
            self.cid,
            arrays=get_weights(self.model, list(msg.arrays)),
            metrics={"num_examples": self.num_examples, "train_loss": loss},
        )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        return msg.reply(self.cid, metrics=self.evaluation(self.model, msg.config_str("split")))


class TSFedRepClient(ForecastClient):
    """FedRep: the global body + this client's private head (kept across rounds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head = get_weights(self.model, self.model.head_keys())

    @handles("train")
    def train(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        set_weights(self.model, self.head)
        c = msg.config
        sgd = sgd_kwargs(c)
        epochs = sgd.pop("epochs")
        head_epochs = msg.config_int("head_epochs")
        h_loss, b_loss = fedrep_update(
            self.model,
            self.x,
            self.y,
            head_epochs=head_epochs,
            body_epochs=epochs - head_epochs,
            gen=self.seed_generator(msg),
            **sgd,
        )
        self.head = get_weights(self.model, self.model.head_keys())
        loss = b_loss if epochs > head_epochs else h_loss
        return msg.reply(
            self.cid,
            arrays=get_weights(self.model, list(msg.arrays)),
            metrics={"num_examples": self.num_examples, "train_loss": loss},
        )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        set_weights(self.model, self.head)
        return msg.reply(self.cid, metrics=self.evaluation(self.model, msg.config_str("split")))

    def state_dict(self) -> dict[str, Any]:
        return {"head": self.head}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.head = {k: np.asarray(v) for k, v in state["head"].items()}


class TSDittoClient(ForecastClient):
    """Ditto: trains the received global w^t (E epochs, returned) and its personal v_i on
    f_i(v) + λ/2‖v − w^t‖² (kept; deployed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.personal: dict[str, np.ndarray] | None = None

    @handles("train")
    def train(self, msg: Message) -> Message:
        c = msg.config
        gen = self.seed_generator(msg)
        sgd = sgd_kwargs(c)
        # personal model: from v_i (or w^t the first time), regularised towards w^t
        set_weights(self.model, msg.arrays)
        params = list(self.model.parameters())
        anchor = [p.detach().clone() for p in params]
        if self.personal is not None:
            set_weights(self.model, self.personal)
        p_sgd = {**sgd, "epochs": msg.config_int("personal_epochs")}
        sgd_epochs(
            self.model,
            self.x,
            self.y,
            gen=gen,
            regulariser=proximal_term(params, anchor, msg.config_float("lam")),
            **p_sgd,
        )
        self.personal = get_weights(self.model)
        # global model: E epochs of plain local training from w^t
        set_weights(self.model, msg.arrays)
        loss = sgd_epochs(self.model, self.x, self.y, gen=gen, **sgd)
        return msg.reply(
            self.cid,
            arrays=get_weights(self.model, list(msg.arrays)),
            metrics={"num_examples": self.num_examples, "train_loss": loss},
        )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        set_weights(self.model, self.personal if self.personal is not None else msg.arrays)
        return msg.reply(self.cid, metrics=self.evaluation(self.model, msg.config_str("split")))

    def state_dict(self) -> dict[str, Any]:
        return {"personal": self.personal}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        p = state.get("personal")
        self.personal = None if p is None else {k: np.asarray(v) for k, v in p.items()}


class TSIFCAClient(ForecastClient):
    """IFCA: picks the cluster model with the lowest loss on its data, trains it E epochs; keeps the
    result as its own (client-row) model."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local: dict[str, np.ndarray] | None = None

    def _select(self, msg: Message) -> tuple[int, list[dict[str, np.ndarray]]]:
        models = unpack_models(msg.arrays, msg.config_int("num_clusters"))
        x, y = self.split(str(msg.config.get("selection_split", "train")))
        nets = []
        for w in models:
            net = _clone_arch(self.model)
            set_weights(net, w)
            nets.append(net)
        return ifca_select(nets, x, y), models

    @handles("train")
    def train(self, msg: Message) -> Message:
        j, models = self._select(msg)
        set_weights(self.model, models[j])
        loss = sgd_epochs(self.model, self.x, self.y, gen=self.seed_generator(msg), **sgd_kwargs(msg.config))
        self.local = get_weights(self.model)
        return msg.reply(
            self.cid,
            arrays={**get_weights(self.model, list(models[j])), "cluster": np.array([j], dtype=np.int64)},
            metrics={"num_examples": self.num_examples, "train_loss": loss},
        )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        j, models = self._select(msg)
        cluster = _clone_arch(self.model)
        set_weights(cluster, models[j])
        set_weights(self.model, self.local if self.local is not None else models[j])
        out = self.evaluation(self.model, msg.config_str("split"), cluster_model=cluster)
        return msg.reply(self.cid, metrics={**out, "cluster": j})

    def state_dict(self) -> dict[str, Any]:
        return {"local": self.local}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        p = state.get("local")
        self.local = None if p is None else {k: np.asarray(v) for k, v in p.items()}


def _clone_arch(model: Forecaster) -> Forecaster:
    """A copy of ``model`` (same architecture; weights to be overwritten)."""
    return copy.deepcopy(model)
