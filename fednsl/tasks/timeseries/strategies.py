"""Servers of the forecasting baselines.

* :class:`TSAverageStrategy` — FedAvg-style server for FedAvg, FedProx (whole model), Ditto (whole
  global model) and FedRep (shared body only): ``Σ_i n_i·w_i / Σ_i n_i`` over whatever arrays it
  holds, plus method-specific entries in the clients' config.
* :class:`TSIFCAStrategy` — K cluster models; each reply names the cluster it trained; cluster ``j``
  becomes the weighted mean of its replies (unchanged when none chose it).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from fednsl.federation.aggregate import AggregationRule, aggregate, weighted_average
from fednsl.federation.records import ArraySpec, Message, Schema, weights_request_schema, weights_schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.tasks.timeseries.clients import pack_models
from fednsl.tasks.timeseries.federated import TSStrategy, TSTrainConfig


def _copy(w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).copy() for k, v in w.items()}


def _train_loss(replies: Mapping[str, Message]) -> Metrics:
    n = [r.metrics["num_examples"] for r in replies.values()]
    losses = [r.metrics["train_loss"] for r in replies.values()]
    ok = [(loss, w) for loss, w in zip(losses, n) if np.isfinite(loss)]
    return {"train_loss": float(np.average([a for a, _ in ok], weights=[b for _, b in ok]))} if ok else {}


class TSAverageStrategy(TSStrategy):
    """Weighted mean of the clients' copies of ``initial``'s arrays (FedAvg, McMahan et al. 2017)."""

    def __init__(
        self,
        initial: Mapping[str, np.ndarray],
        cfg: TSTrainConfig,
        rounds: int,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(cfg, rounds)
        self.weights = _copy(initial)
        self.extra = dict(extra_config or {})
        self.aggregation = AggregationRule()  # federation.aggregation / clip_norm (set by the pipeline)

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train", rnd, arrays=self.weights, config={**self.cfg.sgd_config(), **self.extra})

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        self.weights = aggregate([r.arrays for r in replies.values()], n, self.aggregation, reference=self.weights)
        return _train_loss(replies)

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd, arrays=self.weights, config={"split": self.cfg.eval_split})

    def declare_stages(self) -> tuple[Stage, ...]:
        request = lambda: weights_request_schema(self.weights)  # noqa: E731
        return (
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=lambda: weights_schema(list(self.weights), extra_metrics=("train_loss",)),
                request=request,
            ),
            self.evaluate_stage(request),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"weights": _copy(self.weights)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.weights = _copy(state["weights"])


class TSIFCAStrategy(TSStrategy):
    """IFCA server (Ghosh et al. 2020, Alg. 1): K models, per-cluster weighted averaging."""

    def __init__(
        self,
        initial: Sequence[Mapping[str, np.ndarray]],
        cfg: TSTrainConfig,
        rounds: int,
        selection_split: str = "train",
    ) -> None:
        super().__init__(cfg, rounds)
        self.models = [_copy(m) for m in initial]
        self.selection_split = selection_split
        self.sizes = np.zeros(len(self.models), dtype=np.int64)  # clients per cluster, last round

    def _config(self) -> dict[str, Any]:
        return {"num_clusters": len(self.models), "selection_split": self.selection_split}

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message(
            "train", rnd, arrays=pack_models(self.models), config={**self.cfg.sgd_config(), **self._config()}
        )

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        chosen = {cid: int(r.arrays["cluster"][0]) for cid, r in replies.items()}
        bad = {c: j for c, j in chosen.items() if not 0 <= j < len(self.models)}
        if bad:
            raise ValueError(f"IFCA replies name unknown clusters: {bad}")
        sizes = np.zeros(len(self.models), dtype=np.int64)
        for j in range(len(self.models)):
            members = [r for cid, r in replies.items() if chosen[cid] == j]
            if not members:
                continue
            sizes[j] = len(members)
            arrays = [{k: v for k, v in r.arrays.items() if k != "cluster"} for r in members]
            self.models[j] = weighted_average(arrays, [r.metrics["num_examples"] for r in members])
        self.sizes = sizes
        out = _train_loss(replies)
        out.update({f"cluster{j}_size": int(s) for j, s in enumerate(sizes)})
        return out

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message(
            "evaluate", rnd, arrays=pack_models(self.models), config={"split": self.cfg.eval_split, **self._config()}
        )

    def declare_stages(self) -> tuple[Stage, ...]:
        return (
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=self.train_reply_schema,
                request=self.train_request_schema,
            ),
            self.evaluate_stage(self.evaluate_request_schema),
        )

    def packed_model_specs(self) -> tuple[ArraySpec, ...]:
        """The K models as request fields ``c<j>.<name>`` (:func:`pack_models`), each of the server's shape."""
        return tuple(
            ArraySpec(f"c{j}.{k}", "weights", shape=tuple(np.shape(v)))
            for j, m in enumerate(self.models)
            for k, v in m.items()
        )

    def train_request_schema(self) -> Schema:
        """Server → client (Alg. 1 line 3): the K models, the SGD options and the IFCA options."""
        return Schema(arrays=self.packed_model_specs(), config=(*self.cfg.sgd_config(), *self._config(), "seed"))

    def evaluate_request_schema(self) -> Schema:
        return Schema(arrays=self.packed_model_specs(), config=("split", *self._config(), "seed"))

    def train_reply_schema(self) -> Schema:
        """One model of the server's shapes, and which of the K clusters it belongs to."""
        base = weights_schema(list(self.models[0]), extra_metrics=("train_loss",))
        arrays = tuple(ArraySpec(k, "weights", shape=tuple(v.shape)) for k, v in self.models[0].items())
        return Schema(
            arrays=(*arrays, ArraySpec("cluster", "ids", "int", (1,), high=len(self.models))),
            metrics=base.metrics,
            required_metrics=base.required_metrics,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"models": [_copy(m) for m in self.models], "sizes": self.sizes.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.models = [_copy(m) for m in state["models"]]
        self.sizes = np.asarray(state["sizes"]).copy()
