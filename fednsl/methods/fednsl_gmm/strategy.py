"""FedNSL numeric server: the 3-GMM global prior, learned by federated EM from clients' soft statistics.

Round k: ``train`` (broadcast the GMM; clients fit their MLPs with CE + λ·KL toward its responsibilities),
``em`` (or ``em.1`` … ``em.E`` for ``em_steps`` = E; broadcast the GMM, clients reply Σq, Σq·x, Σq·xxᵀ,
the server runs the M-step of :mod:`fednsl.methods.fednsl_gmm.gmm`), ``evaluate``. The first EM stage of the
run initialises the GMM from the classifiers' posteriors (App. A.6). No point ever leaves a client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Metrics, Strategy
from fednsl.methods.fednsl_gmm.config import FedNSLGMMConfig
from fednsl.methods.fednsl_gmm.gmm import GMM, init_from_posteriors, m_step
from fednsl.tasks.numeric.client import eval_schema, mean_over_clients
from fednsl.tasks.numeric.data import NumericDataConfig


def is_em(stage: str) -> bool:
    return stage == "em" or stage.startswith("em.")


class FedNSLGMMStrategy(Strategy):
    def __init__(self, cfg: FedNSLGMMConfig, data_cfg: NumericDataConfig):
        self.cfg, self.data_cfg = cfg, data_cfg
        self.k, self.d = data_cfg.classes, data_cfg.features
        self.gmm: GMM | None = None
        self._ll: float | None = None

    def stages(self, rnd: int) -> Sequence[str]:
        em = ("em",) if self.cfg.em_steps == 1 else tuple(f"em.{i + 1}" for i in range(self.cfg.em_steps))
        return ("train", *em, "evaluate")

    def _gmm_arrays(self) -> dict[str, np.ndarray]:
        return self.gmm.arrays() if self.gmm is not None else {}

    # -- dispatch the em.* stages to one pair of methods ---------------------------------------------
    def configure(self, stage: str, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        if is_em(stage):
            msg = Message(stage, rnd, arrays=self._gmm_arrays(),
                          config={"estep": "init" if self.gmm is None else self.cfg.estep})
            return {c: msg for c in clients}
        return super().configure(stage, rnd, clients)

    def aggregate(self, stage: str, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        if is_em(stage):
            return self.aggregate_em(rnd, replies, failures)
        return super().aggregate(stage, rnd, replies, failures)

    # -- stages ------------------------------------------------------------------------------------------
    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        c = self.cfg
        return Message("train", rnd, arrays=self._gmm_arrays(),
                       config={"lr": c.lr, "local_epochs": c.local_epochs, "batch_size": c.batch_size,
                               "kl_weight": c.kl_weight, "kl_direction": c.kl_direction, "resp_floor": c.resp_floor})

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        return {k: float(np.average([r.metrics[k] for r in replies.values()], weights=n))
                for k in ("train_loss", "train_kl")}

    def aggregate_em(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = sum(np.asarray(r.arrays["resp_sum"], np.float64) for r in replies.values())
        s = sum(np.asarray(r.arrays["resp_x"], np.float64) for r in replies.values())
        ss = sum(np.asarray(r.arrays["resp_xx"], np.float64) for r in replies.values())
        lls = [r.metrics["loglik"] for r in replies.values() if "loglik" in r.metrics]
        self._ll = float(sum(lls) / n.sum()) if len(lls) == len(replies) else None
        self.gmm = init_from_posteriors(n, s, ss, self.cfg.reg_covar) if self.gmm is None else \
            m_step(n, s, ss, self.cfg.reg_covar)
        out: Metrics = {f"gmm_weight_{k}": float(w) for k, w in enumerate(self.gmm.weights)}
        if self._ll is not None:
            out["loglik_per_point"] = self._ll
        return out

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        return mean_over_clients(replies)

    def reply_schema(self, stage: str) -> Schema:
        if stage == "train":
            return Schema(metrics=("num_examples", "train_loss", "train_kl"))
        if is_em(stage):
            k, d = self.k, self.d
            return Schema(arrays=(ArraySpec("resp_sum", "counts", shape=(k,)),
                                  ArraySpec("resp_x", "scores", shape=(k, d)),
                                  ArraySpec("resp_xx", "scores", shape=(k, d, d))),
                          metrics=("num_examples", "loglik"))
        if stage == "evaluate":
            return eval_schema(self.data_cfg)
        return super().reply_schema(stage)

    def state_dict(self) -> dict[str, Any]:
        return {"gmm": None if self.gmm is None else {k: v.copy() for k, v in self.gmm.arrays().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        g = state.get("gmm")
        self.gmm = None if g is None else GMM.from_arrays({k: np.asarray(v) for k, v in g.items()})

    def finalize(self, run_dir: Path) -> None:
        """``gmm.json``: the final global prior, in model-input space and in the raw data space."""
        if self.gmm is None:
            return
        sc, ctr = self.data_cfg.input_scale, np.asarray(self.data_cfg.input_center)
        out = {"model_space": {k: v.tolist() for k, v in self.gmm.arrays().items()},
               "data_space": {"gmm_weights": self.gmm.weights.tolist(),
                              "gmm_means": (self.gmm.means * sc + ctr).tolist(),
                              "gmm_covariances": (self.gmm.covariances * sc ** 2).tolist()},
               "component_to_class": list(range(self.k))}
        (Path(run_dir) / "gmm.json").write_text(json.dumps(out, indent=2))
