"""KIFL client (Fan et al. 2022, Alg. 1 lines 3-9): local SGD/Adam on eq. (5) through its own T^m (eq. 3).

The client holds its data and its knowledge models; the KMs are evaluated once on its rows (they are fixed
functions, Def. 4.1b) and never leave it. Replies carry θ^m and counts only: ``num_examples`` after training,
``num_examples`` / ``correct`` / ``violations`` (POV numerator, eq. 7) after evaluation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.methods.kifl.combine import knowledge_injected, nll, resolve_conflicts
from fednsl.methods.kifl.config import KIFLConfig
from fednsl.methods.kifl.data import ClientSplit
from fednsl.methods.kifl.knowledge import (
    FullRangeKM,
    PredictionKM,
    RangeKM,
    check_allowed,
    check_prediction,
)

__all__ = ["ClientKnowledge", "KIFLClient", "KMOutputs"]


@dataclass
class KMOutputs:
    """KM outputs on a block of rows: admissible mask (R-KM, and after the Assumption 5.1 repair) and P-KM ids."""

    allowed_rkm: np.ndarray  # (n, k) bool, g_r as given (POV is measured against it)
    allowed: np.ndarray  # (n, k) bool, used by T^m
    pkm: np.ndarray  # (n,) int64, -1 = no P-KM term on that row
    pkm_raw: np.ndarray  # (n,) int64, the P-KM's own answer
    conflicts: int  # rows where the P-KM class was not admissible


class ClientKnowledge:
    """A client's P-KM and R-KM with output checks that name the client."""

    def __init__(
        self, cid: str, num_classes: int, pkm: PredictionKM | None, rkm: RangeKM | None, conflict: str = "drop_pkm"
    ):
        self.cid, self.k, self.pkm, self.conflict = cid, num_classes, pkm, conflict
        self.rkm: RangeKM = rkm if rkm is not None else FullRangeKM(num_classes)

    def evaluate(self, x: np.ndarray) -> KMOutputs:
        n = len(x)
        if self.pkm is None:
            pkm = np.full(n, -1, dtype=np.int64)
        else:
            pkm = check_prediction(self.cid, self.pkm.name, self.pkm.predict(x), n, self.k)
        allowed = check_allowed(self.cid, self.rkm.name, self.rkm.allowed(x), n, self.k)
        fixed, pkm_used, conflicts = resolve_conflicts(allowed, pkm, self.conflict, self.cid)
        return KMOutputs(allowed, fixed, pkm_used, pkm, conflicts)


class KIFLClient(Client):
    """Private data + KMs + a copy of the server model; trains and predicts through T^m when ``with_km``."""

    def __init__(
        self,
        cid: str,
        data: ClientSplit,
        model: nn.Module,
        knowledge: ClientKnowledge,
        lam: float,
        cfg: KIFLConfig,
        scale: Callable[[np.ndarray], np.ndarray],
    ):
        self.cid, self.data, self.model, self.knowledge = cid, data, model, knowledge
        self.lam, self.cfg, self.scale = float(lam), cfg, scale
        self.x_train = torch.from_numpy(scale(data.x_train))
        self.y_train = torch.from_numpy(data.y_train)
        self.x_test = torch.from_numpy(scale(data.x_test))
        self.y_test = torch.from_numpy(data.y_test)
        self.km_train = knowledge.evaluate(data.x_train)
        self.km_test = knowledge.evaluate(data.x_test)
        self.initial = get_weights(model)
        self.local_weights: dict[str, np.ndarray] | None = None  # ML / MLwKM: this client's own θ

    # -- the personalised model f^m ------------------------------------------------------------------
    def probs(self, x: torch.Tensor, km: KMOutputs, rows: slice | torch.Tensor | None = None) -> torch.Tensor:
        """f^m(θ; x) = T^m(f(θ; x)) (eq. 3) when ``with_km``, else softmax(f(θ; x)); (n, k)."""
        logits = self.model(x)
        if not self.cfg.with_km:
            return torch.softmax(logits, dim=-1)
        sel = slice(None) if rows is None else rows
        allowed = torch.from_numpy(km.allowed)[sel]
        pkm = torch.from_numpy(km.pkm)[sel]
        return knowledge_injected(logits, allowed, pkm, self.lam)

    def predict_proba(self, x_raw: np.ndarray, weights: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """f^m on arbitrary raw rows (evaluates the KMs on them); ``weights`` default: the current model."""
        if weights is not None:
            set_weights(self.model, dict(weights))
        self.model.eval()
        km = self.knowledge.evaluate(x_raw)
        with torch.no_grad():
            return self.probs(torch.from_numpy(self.scale(x_raw)), km).numpy()

    def _loss(self, idx: torch.Tensor) -> torch.Tensor:
        x, y = self.x_train[idx], self.y_train[idx]
        if not self.cfg.with_km:
            return nn.functional.cross_entropy(self.model(x), y)
        return nll(self.probs(x, self.km_train, idx), y, self.cfg.eps)

    def _fit(self, epochs: int, seed: int, lr: float, batch_size: int) -> float:
        """Alg. 1 lines 4-8: E epochs over random batches of size C; returns the mean batch loss."""
        gen = torch.Generator().manual_seed(int(seed))
        params = self.model.parameters()
        if self.cfg.optimizer == "adam":
            opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=lr, weight_decay=self.cfg.weight_decay)
        else:
            opt = torch.optim.SGD(params, lr=lr, momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay)
        self.model.train()
        total, seen = 0.0, 0
        n = len(self.y_train)
        for _ in range(epochs):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                opt.zero_grad()
                loss = self._loss(idx)
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
                seen += len(idx)
        return total / max(seen, 1)

    # -- stages --------------------------------------------------------------------------------------
    @handles("train")
    def train(self, msg: Message) -> Message:
        start = msg.arrays if self.cfg.federated else (self.local_weights or self.initial)
        set_weights(self.model, dict(start))
        self._fit(
            msg.config_int("local_epochs"),
            msg.config_int("seed"),
            msg.config_float("lr"),
            msg.config_int("batch_size"),
        )
        n = len(self.y_train)
        if self.cfg.federated:
            return msg.reply(self.cid, arrays=get_weights(self.model), metrics={"num_examples": n})
        self.local_weights = get_weights(self.model)
        return msg.reply(self.cid, metrics={"num_examples": n})

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        counts = self.test_counts(
            msg.arrays if self.cfg.federated else (self.local_weights or self.initial), seed=msg.config_int("seed")
        )
        return msg.reply(self.cid, metrics=counts)

    def test_counts(self, weights: Mapping[str, np.ndarray], seed: int = 0) -> dict[str, int]:
        """Counts on the local test set: examples, correct argmax predictions, R-KM violations (eq. 7)."""
        set_weights(self.model, dict(weights))
        if self.cfg.finetune_epochs > 0:
            self._fit(self.cfg.finetune_epochs, seed, self.cfg.lr, self.cfg.batch_size)
        self.model.eval()
        with torch.no_grad():
            pred = torch.cat(
                [
                    self.probs(self.x_test[s : s + 4096], self.km_test, slice(s, s + 4096)).argmax(1)
                    for s in range(0, len(self.y_test), 4096)
                ]
            ).numpy()
        y = self.data.y_test
        viol = ~self.km_test.allowed_rkm[np.arange(len(y)), pred]
        return {"num_examples": int(len(y)), "correct": int((pred == y).sum()), "violations": int(viol.sum())}

    def pkm_counts(self) -> dict[str, int]:
        """The P-KM alone on the local test set (abstentions count as wrong and are not violations)."""
        y, p = self.data.y_test, self.km_test.pkm_raw
        answered = p >= 0
        viol = answered & ~self.km_test.allowed_rkm[np.arange(len(y)), np.where(answered, p, 0)]
        return {
            "num_examples": int(len(y)),
            "correct": int((p == y).sum()),
            "violations": int(viol.sum()),
            "abstained": int((~answered).sum()),
        }

    def knowledge_summary(self) -> dict[str, float]:
        """R-KM size and coverage of the true test label, P-KM/R-KM conflicts (local diagnostics)."""
        a, y = self.km_test.allowed_rkm, self.data.y_test
        return {
            "rkm_mean_size": float(a.sum(1).mean()) if len(y) else 0.0,
            "rkm_label_coverage": float(a[np.arange(len(y)), y].mean()) if len(y) else 1.0,
            "conflicts_test": int(self.km_test.conflicts),
            "conflicts_train": int(self.km_train.conflicts),
        }

    # -- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"local_weights": None if self.local_weights is None else copy.deepcopy(self.local_weights)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        lw = state.get("local_weights")
        self.local_weights = None if lw is None else {k: np.asarray(v).copy() for k, v in lw.items()}
