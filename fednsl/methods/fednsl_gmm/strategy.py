"""FedNSL numeric server: the 3-GMM global prior, learned by federated EM from clients' soft statistics.

Round k: ``train`` (broadcast the GMM; clients fit their MLPs with CE + λ·KL toward its responsibilities),
``em`` (or ``em.1`` … ``em.E`` for ``em_steps`` = E; broadcast the GMM, clients reply Σq, Σq·x, Σq·xxᵀ,
the server runs the M-step of :mod:`fednsl.methods.fednsl_gmm.gmm`), ``evaluate``. The first EM stage of the
run initialises the GMM from the classifiers' posteriors (App. A.6). No point ever leaves a client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

import numpy as np

from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Metrics, Stage, Strategy
from fednsl.methods.fednsl_gmm.config import FedNSLGMMConfig, em_stage_names
from fednsl.methods.fednsl_gmm.gmm import GMM, init_from_posteriors, m_step
from fednsl.tasks.numeric.client import eval_schema, mean_over_clients
from fednsl.tasks.numeric.data import NumericDataConfig

TRAIN_SCHEMA = Schema(
    metrics=("num_examples", "train_loss", "train_kl"), required_metrics=("num_examples", "train_loss", "train_kl")
)


class FedNSLGMMStrategy(Strategy):
    def __init__(self, cfg: FedNSLGMMConfig, data_cfg: NumericDataConfig):
        self.cfg, self.data_cfg = cfg, data_cfg
        self.k, self.d = data_cfg.classes, data_cfg.features
        self.gmm: GMM | None = None
        self._ll: float | None = None

    def em_stages(self) -> tuple[str, ...]:
        return em_stage_names(self.cfg.em_steps)

    def declare_stages(self) -> tuple[Stage, ...]:
        """train, then ``em_steps`` EM stages (``em`` or ``em.1``…), then evaluate."""
        return (
            Stage(
                "train", self.configure_train, self.aggregate_train, reply=TRAIN_SCHEMA, request=self.gmm_request_schema
            ),
            *(
                Stage(
                    name,
                    self._configure_em(name),
                    self.aggregate_em,
                    reply=self.em_reply_schema,
                    request=self.gmm_request_schema,
                )
                for name in self.em_stages()
            ),
            Stage(
                "evaluate",
                self.configure_evaluate,
                self.aggregate_evaluate,
                reply=lambda: eval_schema(self.data_cfg),
                request=Schema(),
            ),
        )

    def _gmm_arrays(self) -> dict[str, np.ndarray]:
        return self.gmm.arrays() if self.gmm is not None else {}

    def gmm_request_schema(self) -> Schema:
        """The global GMM (absent before the first EM step): K components in D dimensions."""
        k, d = self.k, self.d
        return Schema(
            arrays=(
                ArraySpec("gmm_weights", "distribution", shape=(k,), required=False),
                ArraySpec("gmm_means", "scores", shape=(k, d), required=False),
                ArraySpec("gmm_covariances", "scores", shape=(k, d, d), required=False),
            ),
            any_config=True,
        )

    def em_reply_schema(self) -> Schema:
        k, d = self.k, self.d
        return Schema(
            arrays=(
                ArraySpec("resp_sum", "counts", shape=(k,)),
                ArraySpec("resp_x", "scores", shape=(k, d)),
                ArraySpec("resp_xx", "scores", shape=(k, d, d)),
            ),
            metrics=("num_examples", "loglik"),
            required_metrics=("num_examples",),
        )

    def _configure_em(self, stage: str):
        def configure(rnd: int, clients: Sequence[str]) -> Message:
            return Message(
                stage, rnd, arrays=self._gmm_arrays(), config={"estep": "init" if self.gmm is None else self.cfg.estep}
            )

        return configure

    # -- stages ------------------------------------------------------------------------------------------
    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        c = self.cfg
        return Message(
            "train",
            rnd,
            arrays=self._gmm_arrays(),
            config={
                "lr": c.lr,
                "local_epochs": c.local_epochs,
                "batch_size": c.batch_size,
                "kl_weight": c.kl_weight,
                "kl_direction": c.kl_direction,
                "resp_floor": c.resp_floor,
            },
        )

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        return {
            k: float(np.average([r.metrics[k] for r in replies.values()], weights=n))
            for k in ("train_loss", "train_kl")
        }

    def aggregate_em(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        # sums of arrays over the replies (``sum`` types its start value 0 in)
        n = cast(np.ndarray, sum(np.asarray(r.arrays["resp_sum"], np.float64) for r in replies.values()))
        s = cast(np.ndarray, sum(np.asarray(r.arrays["resp_x"], np.float64) for r in replies.values()))
        ss = cast(np.ndarray, sum(np.asarray(r.arrays["resp_xx"], np.float64) for r in replies.values()))
        lls = [r.metrics["loglik"] for r in replies.values() if "loglik" in r.metrics]
        self._ll = float(sum(lls) / n.sum()) if len(lls) == len(replies) else None
        self.gmm = (
            init_from_posteriors(n, s, ss, self.cfg.reg_covar)
            if self.gmm is None
            else m_step(n, s, ss, self.cfg.reg_covar)
        )
        out: Metrics = {f"gmm_weight_{k}": float(w) for k, w in enumerate(self.gmm.weights)}
        if self._ll is not None:
            out["loglik_per_point"] = self._ll
        return out

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        return mean_over_clients(replies)

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
        out = {
            "model_space": {k: v.tolist() for k, v in self.gmm.arrays().items()},
            "data_space": {
                "gmm_weights": self.gmm.weights.tolist(),
                "gmm_means": (self.gmm.means * sc + ctr).tolist(),
                "gmm_covariances": (self.gmm.covariances * sc**2).tolist(),
            },
            "component_to_class": list(range(self.k)),
        }
        (Path(run_dir) / "gmm.json").write_text(json.dumps(out, indent=2))
