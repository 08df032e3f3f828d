"""What every numeric-experiment client shares: the evaluation of its deployed model and minibatch streams.

Metrics of the evaluate stage (spec §8.15), all on the client's *deployed* model (the personalised model for
personalised methods, the global one for FedAvg / LR-XFL):

* ``train_acc_given``: accuracy on the local training set against the given labels (with the random relabels,
  the paper's "unbalanced training accuracy", Fig. 2 a1–a3);
* ``train_acc_true``: the same against the true classes;
* ``train_loss_given``: mean cross-entropy against the given labels;
* ``unseen_acc_h<pct>``: accuracy on the unseen-class test set at each heterogeneity level (a4–a6, row 3).

The server averages each metric over clients with equal weights (the paper's "average" of client 1 and 2).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import torch

from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Client, Metrics, handles
from fednsl.registry import Headline
from fednsl.tasks.numeric.data import NumericClientData, NumericDataConfig, level_name

Predictor = Callable[[torch.Tensor], torch.Tensor]  # x (n, D) float32 → class probabilities (n, K)

BASE_EVAL_METRICS = ("num_examples", "train_acc_given", "train_acc_true", "train_loss_given")
#: what ``fednsl train`` ends with for a method on this experiment: the two numbers its bench compares
#: (bench/numeric.py); the methods pass it to ``@register_method(headline=...)``
NUMERIC_HEADLINE = (
    Headline("train acc (given labels)", "evaluate/train_acc_given"),
    Headline("unseen acc", "evaluate/unseen_acc_h0"),
)


def eval_metric_names(cfg: NumericDataConfig) -> tuple[str, ...]:
    return BASE_EVAL_METRICS + tuple(f"unseen_acc_{level_name(h)}" for h in cfg.heterogeneity)


def eval_schema(cfg: NumericDataConfig) -> Schema:
    """Evaluate replies carry metrics only: no arrays leave the client."""
    return Schema(metrics=eval_metric_names(cfg))


def mean_over_clients(replies: Mapping[str, Message]) -> Metrics:
    """Unweighted mean over clients of every evaluate metric (the paper's client average)."""
    keys = sorted({k for r in replies.values() for k in r.metrics if k != "num_examples"})
    return {k: float(np.mean([r.metrics[k] for r in replies.values() if k in r.metrics])) for k in keys}


class BatchStream:
    """Endless minibatches of indices: reshuffled (seeded) passes over ``n`` items, like a cycled DataLoader."""

    def __init__(self, n: int, batch_size: int, gen: torch.Generator):
        if n < 1 or batch_size < 1:
            raise ValueError(f"BatchStream needs n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
        self.n, self.bs, self.gen = n, min(batch_size, n), gen
        self._order = torch.randperm(n, generator=gen)
        self._pos = 0

    def next(self) -> torch.Tensor:
        if self._pos + self.bs > self.n:
            self._order = torch.randperm(self.n, generator=self.gen)
            self._pos = 0
        idx = self._order[self._pos : self._pos + self.bs]
        self._pos += self.bs
        return idx


class NumericClient(Client):
    """Base client: private :class:`NumericClientData`; subclasses say what model they deploy."""

    def __init__(self, cid: str, data: NumericClientData):
        self.cid, self.data = cid, data
        self.x = torch.from_numpy(data.x_train)
        self.y = torch.from_numpy(data.y_train)

    def deployed(self, msg: Message) -> Predictor:
        """The client's model as used for prediction after this round (probabilities)."""
        raise NotImplementedError

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        predict = self.deployed(msg)
        with torch.no_grad():
            p = predict(self.x)
            pred = p.argmax(1).numpy()
            nll = float(-torch.log(p[torch.arange(len(self.y)), self.y].clamp_min(1e-12)).mean())
            metrics: dict[str, float] = {
                "num_examples": len(self.y),
                "train_acc_given": float((pred == self.data.y_train).mean()),
                "train_acc_true": float((pred == self.data.y_true).mean()),
                "train_loss_given": nll,
            }
            for name, (xu, yu) in self.data.unseen.items():
                pu = predict(torch.from_numpy(xu)).argmax(1).numpy()
                metrics[f"unseen_acc_{name}"] = float((pu == yu).mean())
        return msg.reply(self.cid, metrics=metrics)


def softmax_predictor(model: torch.nn.Module) -> Predictor:
    def predict(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(model(x), dim=1)

    return predict


def client_data_summary(parts: Mapping[str, NumericClientData]) -> dict:
    """The ``summary`` of a numeric federation (sizes only)."""
    return {
        "clients": len(parts),
        "train_examples": int(sum(len(d.y_train) for d in parts.values())),
        "unseen_classes": {c: d.unseen_class for c, d in parts.items()},
        "relabelled_noisy": {c: int((d.y_train != d.y_true).sum()) for c, d in parts.items()},
    }
