"""FedSTL server: the K cluster devices S_j (FedSTL Alg. 1–2).

Each cluster holds a full model — shared layers ϕ_j and a cluster head — and the desensitised samples
D_i^s its members sent (P_j = ∪_{i∈S_j} D_i^s).  Per round ``t``:

1. clients are sampled (rate ``federation.fraction``; all clients in the last round when
   ``final_round_all``, as in the code);
2. every ``cluster_every`` rounds, CLUSTER_ID (Alg. 1, :mod:`~fednsl.methods.fedstl.cluster_id`)
   re-assigns the sampled clients by property alignment; other clients keep their cluster;
3. each sampled client receives its cluster's ϕ_j (line 4; with ``head_init="cluster"`` the cluster head
   too, which a client adopts only before its first update) and returns ϕ_i after τ local epochs;
4. each cluster with returns: ϕ_j ← Σ n_i ϕ_i / Σ n_i (line 13, weighted by training windows), then
   κ epochs of SGD on Eq. 4 ``MSE + λ·L_p(φ_j, ŷ)`` over P_j (lines 14–16) for the whole cluster
   model; φ_j is mined on P_j's targets (``cluster_property="cluster"``) or each sample keeps its
   owner's φ_i (``"owner"``).  Clusters without returns keep their model (spec §6.5).

Round 1 starts with a ``share`` stage (every client sends D_i^s and φ_i) followed by CLUSTER_ID over all
clients, which gives everyone an initial cluster.  Cluster models start from different seeds.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fednsl.common.torch_utils import get_weights, set_weights, torch_threads
from fednsl.federation.aggregate import weighted_average
from fednsl.federation.records import ArraySpec, Message, Schema, weights_request_schema, weights_schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.methods.fedstl.cluster_id import cluster_id
from fednsl.methods.fedstl.config import FedSTLConfig
from fednsl.tasks.timeseries.federated import TSStrategy
from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.properties import ClientProperty, band_loss, mine_property, property_loss, stack_bands
from fednsl.tasks.timeseries.training import Objective, sgd_epochs
from kg.seeding import derive_seed
from rules import stl

log = logging.getLogger("fednsl.fedstl")


def _copy(w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).copy() for k, v in w.items()}


# The purpose word this seed has always used (the bytes of "cluster"), kept so that published FedSTL numbers
# reproduce bit for bit; new purposes pass strings to derive_seed.
_CLUSTER_PURPOSE = int.from_bytes(b"cluster\0", "little")


class FedSTLStrategy(TSStrategy):
    def __init__(
        self,
        cfg: FedSTLConfig,
        rounds: int,
        seed: int,
        template: stl.Template,
        horizon: int,
        initial: Sequence[Mapping[str, np.ndarray]],
        model_factory: Callable[[], Forecaster],
    ) -> None:
        super().__init__(cfg, rounds)
        self.cfg: FedSTLConfig = cfg
        self.seed, self.template, self.horizon = int(seed), template, int(horizon)
        self.models = [_copy(m) for m in initial]
        self.net = model_factory()  # scratch network for cluster training / prediction
        self.shared_keys = self.net.shared_keys()
        self.samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # cid -> (x_s, y_s)
        self.property_vectors: dict[str, np.ndarray] = {}
        self.assignment: dict[str, int] = {}
        self.sent: dict[str, int] = {}  # cluster each client was sent this round
        self.history: list[dict[str, Any]] = []

    @property
    def K(self) -> int:
        return len(self.models)

    # -- stages -------------------------------------------------------------------------------------
    def stages(self, rnd: int) -> Sequence[str]:
        return ("share", "train", "evaluate") if not self.samples else ("train", "evaluate")

    def sample_clients(self, stage: str, rnd: int, clients: Sequence[str]) -> Sequence[str] | None:
        if stage == "share":
            return list(clients)
        return super().sample_clients(stage, rnd, clients)

    def configure_share(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("share", rnd, config={"shared_fraction": self.cfg.shared_fraction})

    def aggregate_share(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        for cid, r in replies.items():
            self.samples[cid] = (np.asarray(r.arrays["x_s"], np.float32), np.asarray(r.arrays["y_s"], np.float32))
            self.property_vectors[cid] = np.asarray(r.arrays["property"], np.float32)
        ids = sorted(self.samples)
        assign, _ = self._cluster_id(ids)
        self.assignment.update(zip(ids, (int(a) for a in assign)))
        self._log(rnd, "initial", ids)
        return {"shared_windows": int(sum(len(v[1]) for v in self.samples.values())), **self._sizes()}

    # -- CLUSTER_ID (Alg. 1) ---------------------------------------------------------------------------
    def prop(self, cid: str) -> ClientProperty:
        return ClientProperty.from_vector(self.template, self.property_vectors[cid], self.horizon)

    def _nets(self) -> list[Forecaster]:
        nets = []
        for w in self.models:
            net = copy.deepcopy(self.net)
            set_weights(net, w)
            nets.append(net)
        return nets

    def _cluster_id(self, ids: Sequence[str]) -> tuple[np.ndarray, torch.Tensor]:
        """Assignment of ``ids`` (clients with a sample) and the ``(K, N)`` loss matrix."""
        s = min(len(self.samples[c][0]) for c in ids)
        if self.cfg.sample_size is not None:
            s = min(s, self.cfg.sample_size)
        x = torch.from_numpy(np.stack([self.samples[c][0][:s] for c in ids]))
        cap = self.cfg.capacity if self.cfg.capacity is not None else math.ceil(len(ids) / self.K)
        with torch_threads(self.cfg.threads):
            assign, loss = cluster_id(
                self._nets(),
                x,
                [self.prop(c) for c in ids],
                rule=self.cfg.rule,
                capacity=cap,
                measure=self.cfg.cluster_measure,
                lp=self.cfg.lp,
            )
        return assign, loss

    def _sizes(self) -> dict[str, int]:
        counts = np.bincount(np.array(list(self.assignment.values()), dtype=np.int64), minlength=self.K)
        return {**{f"cluster{j}_size": int(n) for j, n in enumerate(counts)}, "clusters_used": int((counts > 0).sum())}

    def _log(self, rnd: int, event: str, ids: Sequence[str]) -> None:
        self.history.append(
            {
                "round": rnd,
                "event": event,
                "clients": list(ids),
                "assignment": {c: int(self.assignment[c]) for c in sorted(self.assignment)},
            }
        )

    # -- train ---------------------------------------------------------------------------------------
    def configure_train(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        known = [c for c in clients if c in self.samples]
        if known and (rnd - 1) % self.cfg.cluster_every == 0 and not (rnd == 1 and self.history):
            assign, _ = self._cluster_id(known)
            self.assignment.update(zip(known, (int(a) for a in assign)))
            self._log(rnd, "cluster_id", known)
        fallback = int(np.bincount(list(self.assignment.values()) or [0], minlength=self.K).argmax())
        config = {**self.cfg.sgd_config(), "lam": self.cfg.lam, "lp": self.cfg.lp, "head_init": self.cfg.head_init}
        self.sent = {c: int(self.assignment.get(c, fallback)) for c in clients}
        keys = self.shared_keys if self.cfg.head_init == "own" else list(self.models[0])
        return {
            c: Message("train", rnd, arrays={k: self.models[j][k] for k in keys}, config=config)
            for c, j in self.sent.items()
        }

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        out: Metrics = {}
        cluster_losses = []
        for j in range(self.K):
            members = [r for c, r in replies.items() if self.sent.get(c) == j]
            if not members:
                continue
            avg = weighted_average([r.arrays for r in members], [r.metrics["num_examples"] for r in members])
            self.models[j] = {**self.models[j], **avg}
            loss = self._train_cluster(rnd, j)
            if np.isfinite(loss):
                cluster_losses.append(loss)
        n = [r.metrics["num_examples"] for r in replies.values()]
        out["train_loss"] = float(np.average([r.metrics["train_loss"] for r in replies.values()], weights=n))
        out["lp_before"] = float(np.average([r.metrics["lp_before"] for r in replies.values()], weights=n))
        if cluster_losses:
            out["cluster_loss"] = float(np.mean(cluster_losses))
        out.update(self._sizes())
        return out

    def cluster_data(self, j: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """P_j: the members' shared samples (members = clients currently assigned to ``j``)."""
        members = sorted(c for c, a in self.assignment.items() if a == j and c in self.samples)
        if not members:
            return torch.empty(0, 0), torch.empty(0, 0), []
        x = torch.from_numpy(np.concatenate([self.samples[c][0] for c in members]))
        y = torch.from_numpy(np.concatenate([self.samples[c][1] for c in members]))
        return x, y, members

    def cluster_property(self, j: int) -> ClientProperty | None:
        """φ_j mined on the cluster's data P_j (None when the cluster has no member)."""
        _, y, members = self.cluster_data(j)
        return mine_property(self.template, y.numpy()) if members else None

    def _train_cluster(self, rnd: int, j: int) -> float:
        """κ epochs of SGD on Eq. 4 over P_j (whole cluster model); returns the mean objective."""
        x, y, members = self.cluster_data(j)
        if not members or self.cfg.cluster_epochs == 0 or len(y) == 0:
            return float("nan")
        cfg = self.cfg
        lam, lp = cfg.lam, cfg.lp
        aux: tuple[torch.Tensor, ...] = ()
        objective: Objective
        if cfg.cluster_property == "cluster":
            prop = mine_property(self.template, y.numpy())

            def cluster_objective(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
                mse = (p - t).pow(2).mean()
                return mse + lam * property_loss(p, prop, lp) if lam else mse

            objective = cluster_objective
        else:  # each sample under its owner's band
            lo, up = stack_bands([self.prop(c) for c in members])
            sizes = torch.tensor([len(self.samples[c][1]) for c in members])
            aux = (lo.repeat_interleave(sizes, 0), up.repeat_interleave(sizes, 0))

            def band_objective(
                p: torch.Tensor, t: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor
            ) -> torch.Tensor:
                mse = (p - t).pow(2).mean()
                return mse + lam * band_loss(p, lower, upper, lp) if lam else mse

            objective = band_objective

        net = self.net
        set_weights(net, self.models[j])
        gen = torch.Generator().manual_seed(derive_seed(self.seed, rnd, j, _CLUSTER_PURPOSE))
        with torch_threads(cfg.threads):
            loss = sgd_epochs(
                net,
                x,
                y,
                epochs=cfg.cluster_epochs,
                batch_size=cfg.batch_size,
                lr=cfg.cluster_lr or cfg.lr,
                momentum=cfg.momentum,
                weight_decay=cfg.weight_decay,
                max_batches=cfg.max_batches,
                grad_clip=cfg.grad_clip,
                gen=gen,
                objective=objective,
                aux=aux,
            )
        self.models[j] = get_weights(net)
        return loss

    # -- evaluate ------------------------------------------------------------------------------------
    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        fallback = int(np.bincount(list(self.assignment.values()) or [0], minlength=self.K).argmax())
        out = {}
        for c in clients:
            j = int(self.assignment.get(c, fallback))
            out[c] = Message(
                "evaluate", rnd, arrays=self.models[j], config={"split": self.cfg.eval_split, "cluster": j}
            )
        return out

    def declare_stages(self) -> tuple[Stage, ...]:
        request = lambda: weights_request_schema(self.models[0])  # noqa: E731
        return (
            Stage(
                "share",
                self.configure_share,
                self.aggregate_share,
                reply=self.share_reply_schema,
                request=Schema(config=("shared_fraction",)),
            ),
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=lambda: weights_schema(self.shared_keys, extra_metrics=("train_loss", "lp_before")),
                request=request,
            ),
            self.evaluate_stage(request),
        )

    def share_reply_schema(self) -> Schema:
        return Schema(
            arrays=(
                ArraySpec("x_s", "scores", "float", ("S", self.net.input_len)),
                ArraySpec("y_s", "scores", "float", ("S", self.horizon)),
                ArraySpec("property", "scores", "float", (len(self.template.params),)),
            ),
            metrics=("num_examples", "num_shared"),
        )

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "models": [_copy(m) for m in self.models],
            "samples": dict(self.samples),
            "property_vectors": dict(self.property_vectors),
            "assignment": dict(self.assignment),
            "history": list(self.history),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.models = [_copy(m) for m in state["models"]]
        self.samples = {c: (np.asarray(x), np.asarray(y)) for c, (x, y) in state["samples"].items()}
        self.property_vectors = {c: np.asarray(v) for c, v in state["property_vectors"].items()}
        self.assignment = {c: int(a) for c, a in state["assignment"].items()}
        self.history = list(state["history"])

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        out = super().aggregate_evaluate(rnd, replies, failures)
        self._last_eval = dict(out)
        return out

    def grouping_report(self) -> dict[str, Any]:
        """Did CLUSTER_ID find groups, and do the forecasts beat the naive ones?  ``note`` says it in words."""
        sizes = self._sizes()
        used, rule = int(sizes["clusters_used"]), self.cfg.rule
        members = {j: sorted(c for c, a in self.assignment.items() if a == j) for j in range(self.K)}
        notes = [f"CLUSTER_ID ({rule}) uses {used} of K={self.K} clusters, sizes {[len(m) for m in members.values()]}"]
        if used == 1 and len(self.assignment) > 1:
            why = (
                "every client's lowest-loss cluster is the same one: the cluster that wins the first assignment "
                "(from randomly initialised models) trains on everyone's data and stays the best fit for all; "
                "rule: balanced (the authors' code, capacity ceil(N/K)) spreads the clients"
                if rule == "argmin"
                else "the capacity allows one cluster to hold every client"
            )
            notes[0] += f": no groups found ({why})"
        ev = getattr(self, "_last_eval", {})
        naive = {k: ev[k] for k in ("naive_mean_mse", "naive_last_mse") if k in ev}
        if "mse" in ev and naive:
            best = min(naive, key=lambda k: naive[k])
            rows = {k: ev[k] for k in ("mse", "s_mse", "t_mse") if k in ev}
            verdict = "beats" if min(rows.values()) < naive[best] else "does not beat"
            notes.append(
                "test MSE "
                + ", ".join(f"{k} {v:.5f}" for k, v in rows.items())
                + f" vs {best} {naive[best]:.5f}: FedSTL {verdict} the naive forecast"
            )
        return {"clusters_used": used, "members": members, "note": "; ".join(notes)}

    def summary_metrics(self) -> dict[str, Any]:
        """summary.json's ``grouping_check`` (:meth:`grouping_report`)."""
        return {"grouping_check": self.grouping_report()} if self.assignment else {}

    def finalize(self, run_dir: Path) -> None:
        """``clusters.json``: final assignment, cluster sizes, cluster properties φ_j and the history."""
        if self.assignment:
            note = self.grouping_report()["note"]
            level = logging.WARNING if "no groups found" in note or "does not beat" in note else logging.INFO
            log.log(level, "FedSTL grouping: %s", note)
        props = {}
        for j in range(self.K):
            p = self.cluster_property(j)
            if p is not None:
                props[str(j)] = {
                    "formula": str(stl.instantiate(self.template, {k: float(v[0]) for k, v in p.params.items()})),
                    "lower": p.lower.tolist() if p.lower is not None else None,
                    "upper": p.upper.tolist() if p.upper is not None else None,
                }
        payload = {
            "assignment": {c: int(a) for c, a in sorted(self.assignment.items())},
            **self._sizes(),
            "cluster_properties": props,
            "history": self.history,
        }
        if self.assignment:
            payload["grouping_check"] = self.grouping_report()
        (Path(run_dir) / "clusters.json").write_text(json.dumps(payload, indent=1))
