"""KIFL server: Algorithm 1 of Fan et al. (2022), FedAvg on the knowledge-injected local losses.

Federated (FL / FLwKM): broadcast θ, clients run E local epochs through T^m, the server sets
θ ← (1/|S_t|) Σ_{m∈S_t} θ^m (line 10, ``aggregation: uniform``; ``examples`` weights by |D^m| as FedAvg does).
|S_t| = ⌈τM⌉ is the runner's ``federation.fraction`` sampling. Local (ML / MLwKM): nothing is averaged and
no weights travel; each client keeps its own θ^m. Evaluation aggregates counts into TA and POV (eq. 7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from fednsl.common.fedavg import FedAvgStrategy
from fednsl.federation.aggregate import aggregate
from fednsl.federation.records import ArraySpec, ConfigValue, Message, Schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.methods.kifl.config import KIFLConfig

EVAL_COUNTS = ("num_examples", "correct", "violations")


class KIFLStrategy(FedAvgStrategy):
    def __init__(self, initial: dict[str, np.ndarray], cfg: KIFLConfig):
        super().__init__(initial, cfg)  # same lr / local_epochs / batch_size / server_lr
        self.cfg: KIFLConfig = cfg
        self.shapes = {k: tuple(v.shape) for k, v in initial.items()}
        self.initial_weights = {k: v.copy() for k, v in initial.items()}  # θ_0 (reference runs, local mode)
        self.last_eval: dict[str, dict[str, float]] = {}  # client → counts of the last evaluation

    def _train_config(self) -> dict[str, ConfigValue]:
        return {"lr": self.cfg.lr, "local_epochs": self.cfg.local_epochs, "batch_size": self.cfg.batch_size}

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        arrays = self.weights if self.cfg.federated else {}
        return Message("train", rnd, arrays=arrays, config=self._train_config())

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        if not self.cfg.federated:
            return {"examples": float(sum(r.metrics["num_examples"] for r in replies.values()))}
        n = [r.metrics["num_examples"] for r in replies.values()]
        w = [1.0] * len(n) if self.cfg.aggregation == "uniform" else n
        avg = aggregate([r.arrays for r in replies.values()], w, self.aggregation, reference=self.weights)
        lr = self.cfg.server_lr
        self.weights = {k: (self.weights[k] + lr * (avg[k] - self.weights[k])).astype(avg[k].dtype) for k in avg}
        return {"examples": float(sum(n))}

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd, arrays=self.weights if self.cfg.federated else {})

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        self.last_eval = {cid: dict(r.metrics) for cid, r in replies.items()}
        tot = {k: sum(r.metrics[k] for r in replies.values()) for k in EVAL_COUNTS}
        per = [r.metrics["correct"] / max(r.metrics["num_examples"], 1) for r in replies.values()]
        n = max(tot["num_examples"], 1)
        return {
            "accuracy": tot["correct"] / n,
            "pov": tot["violations"] / n,
            "mean_client_accuracy": float(np.mean(per)) if per else 0.0,
        }

    def finalize(self, run_dir: Path) -> None:
        """``clients.tsv``: per-client test accuracy (TA) and percentage of violations (POV, eq. 7), last evaluation."""
        lines = ["client\tnum_examples\tTA\tPOV"]
        for cid, m in sorted(self.last_eval.items()):
            n = max(m["num_examples"], 1)
            lines.append(f"{cid}\t{int(m['num_examples'])}\t{m['correct'] / n:.4f}\t{m['violations'] / n:.4f}")
        (Path(run_dir) / "clients.tsv").write_text("\n".join(lines) + "\n")

    def declare_stages(self) -> tuple[Stage, ...]:
        request = Schema(
            arrays=tuple(ArraySpec(k, "weights", shape=s, required=False) for k, s in self.shapes.items()),
            any_config=True,
        )
        return (
            Stage("train", self.configure_train, self.aggregate_train, reply=self.train_reply_schema, request=request),
            Stage(
                "evaluate",
                self.configure_evaluate,
                self.aggregate_evaluate,
                reply=Schema(metrics=EVAL_COUNTS, required_metrics=EVAL_COUNTS, counts=EVAL_COUNTS),
                request=request,
            ),
        )

    def train_reply_schema(self) -> Schema:
        if not self.cfg.federated:
            return Schema(metrics=("num_examples",), required_metrics=("num_examples",))
        return Schema(
            arrays=tuple(ArraySpec(k, "weights", shape=s) for k, s in self.shapes.items()),
            metrics=("num_examples",),
            required_metrics=("num_examples",),
        )
