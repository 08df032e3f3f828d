"""FedAvg server: weighted mean of client weights (McMahan et al. 2017).

Shared by every weight-averaging method (``fedavg``, the numeric baselines, KIFL) and by FedNSL's
federated backbone, so it lives below the method packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from fednsl.federation.aggregate import AggregationRule, aggregate
from fednsl.federation.records import Message, Schema, weights_request_schema, weights_schema
from fednsl.federation.roles import Metrics, Stage, Strategy

# hidden units of a FedAvg MLP: far above any experiment, far below what exhausts a machine's memory
HIDDEN_MAX = 65_536
# weights of all the MLP copies a run holds (the server's and every client's): 400 MB as float32
MAX_MODEL_VALUES = 100_000_000


def check_hidden(hidden: int, where: str = "method_kwargs.hidden") -> None:
    """ValueError naming ``where`` unless ``hidden`` is from 1 to :data:`HIDDEN_MAX`."""
    if not 1 <= hidden <= HIDDEN_MAX:
        raise ValueError(f"{where} must be from 1 to {HIDDEN_MAX:,}, got {hidden:,}")


def check_model_size(features: int, hidden: int, classes: int, copies: int) -> None:
    """ValueError unless ``copies`` MLPs ``features → hidden → classes`` hold at most :data:`MAX_MODEL_VALUES`
    weights together."""
    per_model = (features + 1) * hidden + (hidden + 1) * classes
    if per_model * copies > MAX_MODEL_VALUES:
        raise ValueError(
            f"method_kwargs.hidden={hidden:,} with data.features={features:,} and data.classes={classes:,}: "
            f"{copies:,} models (the server's and every client's) of {per_model:,} weights each are too large "
            f"(at most {MAX_MODEL_VALUES:,} weights in all)"
        )


EVAL_SCHEMA = Schema(
    metrics=("num_examples", "loss", "accuracy"), required_metrics=("num_examples", "loss", "accuracy")
)


@dataclass
class FedAvgConfig:
    """FedAvg options (``method_kwargs`` of ``fedavg``)."""

    hidden: int = 32
    lr: float = 0.1  # client SGD learning rate
    local_epochs: int = 1  # E in McMahan et al. (2017)
    batch_size: int = 32  # B
    server_lr: float = 1.0  # 1.0 = plain FedAvg (server applies the averaged weights)

    def __post_init__(self) -> None:
        check_hidden(self.hidden)


class FedAvgOptions(Protocol):
    """What :class:`FedAvgStrategy` reads of its options: :class:`FedAvgConfig`, or a method's own config
    with the same fields (KIFL's)."""

    @property
    def lr(self) -> float: ...
    @property
    def local_epochs(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def server_lr(self) -> float: ...


class FedAvgStrategy(Strategy):
    def __init__(self, initial: dict[str, np.ndarray], cfg: FedAvgOptions):
        self.weights = {k: v.copy() for k, v in initial.items()}
        self.cfg = cfg
        self.example_limits: dict[str, int] = {}  # client -> most examples it holds (known at enrolment)
        self.aggregation = AggregationRule()  # federation.aggregation / clip_norm (set by the pipeline)

    def declare_stages(self) -> tuple[Stage, ...]:
        return (
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=self.train_reply_schema,
                request=self.weights_request_schema,
                limits=self.count_limits,
            ),
            Stage(
                "evaluate",
                self.configure_evaluate,
                self.aggregate_evaluate,
                reply=self.evaluate_reply_schema,
                request=self.weights_request_schema,
                limits=self.count_limits,
            ),
        )

    def count_limits(self, cid: str) -> dict[str, float]:
        """``num_examples`` of a reply is at most what the client enrolled with (when the server knows it)."""
        return {"num_examples": self.example_limits[cid]} if cid in self.example_limits else {}

    def weights_request_schema(self) -> Schema:
        """The global weights, each of the shape the server holds."""
        return weights_request_schema(self.weights)

    def train_reply_schema(self) -> Schema:
        return weights_schema(list(self.weights), extra_metrics=("train_loss",))

    def evaluate_reply_schema(self) -> Schema:
        return EVAL_SCHEMA

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message(
            "train",
            rnd,
            arrays=self.weights,
            config={"lr": self.cfg.lr, "local_epochs": self.cfg.local_epochs, "batch_size": self.cfg.batch_size},
        )

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        avg = aggregate([r.arrays for r in replies.values()], n, self.aggregation, reference=self.weights)
        lr = self.cfg.server_lr
        self.weights = {k: (self.weights[k] + lr * (avg[k] - self.weights[k])).astype(avg[k].dtype) for k in avg}
        losses = [r.metrics["train_loss"] for r in replies.values()]
        return {"train_loss": float(np.average(losses, weights=n))}

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd, arrays=self.weights)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        return {k: float(np.average([r.metrics[k] for r in replies.values()], weights=n)) for k in ("loss", "accuracy")}

    def state_dict(self) -> dict[str, Any]:
        return {"weights": {k: v.copy() for k, v in self.weights.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.weights = {k: np.asarray(v).copy() for k, v in state["weights"].items()}
