"""LogiCP server (Alg. 1): pretraining, STL clustering, per-cluster federated CP, training, re-clustering.

Round ``r`` runs these stages (``stages``):

* ``r ≤ n_pre``: ``pretrain`` (FedAvg on D^pre, Eq. 7); at ``r = n_pre`` also the first clustering and
  calibration (Alg. 1 lines 12–15).
* ``r > n_pre``: ``train`` (Eq. 19; aggregation to the global model θ^p and to every cluster model θ_k^s,
  lines 19–22), ``cluster.train`` (n_cluster epochs on P_k, lines 25–30; in-server when
  ``cluster_training="server"``), then ``cluster`` (push of the cluster encoder to its members, line 31;
  STL re-clustering, line 33), ``calibrate.scale`` / ``calibrate`` (federated split CP by the quantile of
  quantiles, line 34, Eq. 12–18).  With ``n_pre = 0`` round 1 starts with a clustering and calibration.
* ``evaluate`` every round (every client).

Clustering (§4.2): client i scores every cluster model by R_STL (Eq. 10) of its forecasts w.r.t. φ_i and
joins the argmin (``assign_rule="argmin"``, rules.stl.assign_argmin; ``"balanced"``: FedSTL code's greedy
with capacity ⌈N/K⌉).  First clustering: K copies of θ^p cannot separate clients, so, like the reference
code, clients are sorted by the R_STL of θ^p and cut into K equal groups (``initial_clustering="sorted"``);
each cluster model starts as the weighted mean of its members' pretrained models (§4.5).  An empty
cluster keeps its previous model.

Calibration (§4.3): per cluster, the participating members report |D^cal| (with their scores); the server
picks (ℓ, κ) = choose_ranks(min |D^cal|, members, α) — never hard-coded — and, for
``scale_mode="cluster"``, one σ (max of the members' Eq. 15 vectors).  Members send σ·Q_(ℓ)(R_i); the
server keeps Q̂_τ = κ-th smallest (Eq. 18).  If a member drops out of the ``calibrate`` stage, the
cluster keeps its previous region (ranks were chosen for the full membership).  Infeasible ranks
(members × windows too few for 1 − α) give Q̂ = +∞ (logged as ``calibrate.infeasible``).

Partial participation (§6.2): ``participation`` < 1 samples the round's clients once (seeded by (seed,
round)); every stage of the round uses the same clients, assignments stay fixed within the round, and
only participants are clustered and calibrated.  Evaluation covers every client.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.aggregate import weighted_average
from fednsl.federation.records import ArraySpec, ConfigValue, Message, Schema, weights_request_schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.methods.logicp.config import LogiCPConfig
from fednsl.methods.logicp.federated_cp import (
    CONFORMAL_METRICS,
    ClusterConformal,
    region_specs,
    weight_specs,
    with_prefix,
)
from fednsl.methods.logicp.losses import logicp_loss
from fednsl.tasks.timeseries.clients import pack_models
from fednsl.tasks.timeseries.federated import TSStrategy, weighted_metric_means
from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.training import sgd_epochs
from kg.seeding import derive_rng, derive_seed
from rules import stl

log = logging.getLogger("fednsl.logicp")

CLUSTER_STAGES = ("cluster", "calibrate.scale", "calibrate")
EVAL_EXTRA = (*CONFORMAL_METRICS, "t_conflicts", *(f"tstl_{m}" for m in ("mse", "mse_orig", "rho", "step_rho")))


def _copy(w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).copy() for k, v in w.items()}


_prefix = with_prefix


class PublicData:
    """D^pub of every client, published to the server once (``cluster_training="server"`` only):
    windows ``x (n, L)``, ``y (n, H)`` and the owner's band ``lower, upper (H,)``."""

    def __init__(self, parts: Mapping[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]):
        self.parts = dict(parts)

    def pooled(self, members: Sequence[str]) -> tuple[torch.Tensor, ...]:
        """P_k = ∪ D^pub of ``members``: x, y and per-sample bands."""
        keep = [self.parts[c] for c in members if len(self.parts[c][1])]
        if not keep:
            return ()
        xs, ys, los, ups = zip(*keep)
        lo = torch.cat([lo.expand(len(y), -1) for lo, y in zip(los, ys)])
        up = torch.cat([u.expand(len(y), -1) for u, y in zip(ups, ys)])
        return torch.cat(xs), torch.cat(ys), lo, up


class LogiCPStrategy(ClusterConformal, TSStrategy):
    """See the module docstring.  ``shared_keys``: the state-dict keys of the cluster-shared encoder."""

    def __init__(
        self,
        initial: Mapping[str, np.ndarray],
        cfg: LogiCPConfig,
        rounds: int,
        seed: int,
        horizon: int,
        shared_keys: Sequence[str],
        model_factory: Callable[[], Forecaster] | None = None,
        public: PublicData | None = None,
    ) -> None:
        super().__init__(cfg, rounds)
        self.cfg: LogiCPConfig = cfg
        self.seed, self.horizon = int(seed), int(horizon)
        self.shared_keys = list(shared_keys)
        self.global_w = _copy(initial)
        self.clusters: list[dict[str, np.ndarray]] | None = None
        self.init_conformal()
        self.seen: set[str] = set()
        self.model_factory = model_factory
        self.public = public
        if cfg.cluster_training == "server" and (model_factory is None or public is None):
            raise ValueError("cluster_training='server' needs the clients' published D^pub and a model factory")
        # transient within a round (never needed across a checkpoint)
        self._pretrained: dict[str, tuple[dict[str, np.ndarray], int]] = {}

    # -- schedule ---------------------------------------------------------------------------------
    def stages(self, rnd: int) -> Sequence[str]:
        n_pre, out = self.cfg.pretrain_rounds, []
        clustering = [s for s in CLUSTER_STAGES if s != "calibrate.scale" or self.cfg.scale_mode == "cluster"]
        if rnd <= n_pre:
            out.append("pretrain")
            if rnd == n_pre:
                out += clustering
        else:
            if self.clusters is None:
                out += clustering
            out.append("train")
            if self.cfg.cluster_training == "federated" and self.cfg.cluster_epochs > 0:
                out.append("cluster.train")
            out += clustering
        out.append("evaluate")
        return out

    def participants(self, rnd: int, clients: Sequence[str]) -> list[str]:
        """This round's clients (same for every stage): all, or a seeded share ``participation``."""
        ids = sorted(clients)
        p = self.cfg.participation
        if p >= 1.0:
            return ids
        rng = derive_rng(self.seed, rnd, 0x10C1C9)
        k = max(1, math.ceil(p * len(ids)))
        return sorted(ids[i] for i in rng.choice(len(ids), size=min(k, len(ids)), replace=False))

    def sample_clients(self, stage: str, rnd: int, clients: Sequence[str]) -> Sequence[str] | None:
        if stage == "evaluate":
            return list(clients)
        return self.participants(rnd, clients)

    def _push(self, cid: str, encoder: bool = True) -> dict[str, np.ndarray]:
        """Weights a client loads: the whole global model on first contact; afterwards its cluster's shared
        encoder (Alg. 1 line 31) when ``encoder``, else nothing."""
        if cid not in self.seen:
            self.seen.add(cid)
            return _prefix(self.global_w, "push.")
        if not encoder:
            return {}
        k = self.assign.get(cid, -1)
        if self.clusters is None or k < 0:
            return {}
        return _prefix(self.clusters[k], "push.", self.shared_keys)

    # -- pretraining (Alg. 1 lines 4–11) ----------------------------------------------------------------
    def configure_pretrain(self, rnd: int, clients: Sequence[str]) -> Message:
        self.seen.update(clients)
        epochs = self.cfg.pretrain_epochs if self.cfg.pretrain_epochs is not None else self.cfg.local_epochs
        return Message("pretrain", rnd, arrays=self.global_w, config={**self.cfg.sgd_config(), "local_epochs": epochs})

    def aggregate_pretrain(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = [r.metrics["num_examples"] for r in replies.values()]
        self.global_w = weighted_average([r.arrays for r in replies.values()], n)
        if rnd == self.cfg.pretrain_rounds:
            self._pretrained = {c: (_copy(r.arrays), int(r.metrics["num_examples"])) for c, r in replies.items()}
        return _loss(replies)

    # -- training (lines 17–30) ---------------------------------------------------------------------
    def configure_train(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        config = {**self.cfg.sgd_config(), **self.cfg.loss_config()}
        return {
            c: Message("train", rnd, arrays={**self._push(c, encoder=False), **self.region(c)}, config=config)
            for c in clients
        }

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        n = {c: r.metrics["num_examples"] for c, r in replies.items()}
        self.global_w = weighted_average([r.arrays for r in replies.values()], list(n.values()))
        if self.clusters is not None:
            for k in range(self.cfg.num_clusters):
                mem = [c for c in self.members(k, list(replies)) if n[c] > 0]
                if mem:
                    self.clusters[k] = weighted_average([replies[c].arrays for c in mem], [n[c] for c in mem])
        out = _loss(replies)
        if self.cfg.cluster_training == "server" and self.cfg.cluster_epochs > 0 and self.clusters is not None:
            out.update(self._server_cluster_training(rnd, list(replies)))
        return out

    def _server_cluster_training(self, rnd: int, participants: Sequence[str]) -> Metrics:
        """Alg. 1 lines 25–30 in the server: n_cluster epochs on P_k (the participants' D^pub)."""
        assert self.clusters is not None and self.public is not None and self.model_factory is not None
        cfg, losses = self.cfg, []
        sgd: dict[str, Any] = {
            "epochs": cfg.cluster_epochs,
            "batch_size": cfg.batch_size,
            "lr": cfg.lr,
            "momentum": cfg.momentum,
            "weight_decay": cfg.weight_decay,
            "max_batches": cfg.max_batches,
            "grad_clip": cfg.grad_clip,
        }
        weights, stl_kind = cfg.loss_weights(), cfg.stl_loss if cfg.stl_loss != "violation" else "l1"
        for k in range(cfg.num_clusters):
            pooled = self.public.pooled(self.members(k, participants))
            if not pooled:
                continue
            x, y, lo, up = pooled
            h = y.shape[1]
            q = torch.as_tensor(self.qhat[k], dtype=torch.float32) if np.isfinite(self.qhat[k]).all() else None

            def objective(
                pred: torch.Tensor, packed: torch.Tensor, _q: torch.Tensor | None = q, _h: int = h
            ) -> torch.Tensor:
                # targets carry each sample's owner band: packed = [y | lower | upper]
                return logicp_loss(
                    pred,
                    packed[:, :_h],
                    lower=packed[:, _h : 2 * _h],
                    upper=packed[:, 2 * _h :],
                    qhat=_q,
                    weights=weights,
                    stl_kind=stl_kind,
                    cp_kind=cfg.cp_loss,
                )

            net = self.model_factory()
            set_weights(net, self.clusters[k])
            gen = torch.Generator().manual_seed(derive_seed(self.seed, rnd, k, 0xC1))
            losses.append(sgd_epochs(net, x, torch.cat([y, lo, up], dim=1), gen=gen, objective=objective, **sgd))
            self.clusters[k] = get_weights(net)
        return {"cluster_train_loss": float(np.mean(losses))} if losses else {}

    def configure_cluster_train(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        config = {**self.cfg.sgd_config(), **self.cfg.loss_config(), "cluster_epochs": self.cfg.cluster_epochs}
        out = {}
        for c in clients:
            k = self.assign.get(c, -1)
            if k < 0 or self.clusters is None:
                out[c] = Message("cluster.train", rnd, config={**config, "skip": True})
            else:
                out[c] = Message(
                    "cluster.train",
                    rnd,
                    config=config,
                    arrays={**_prefix(self.clusters[k], "cluster."), **self.region(c)},
                )
        return out

    def aggregate_cluster_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        if self.clusters is not None:
            for k in range(self.cfg.num_clusters):
                mem = [c for c in self.members(k, list(replies)) if replies[c].metrics["num_examples"] > 0]
                if mem:
                    self.clusters[k] = weighted_average(
                        [replies[c].arrays for c in mem], [replies[c].metrics["num_examples"] for c in mem]
                    )
        return _loss({c: r for c, r in replies.items() if r.metrics["num_examples"] > 0})

    # -- clustering (lines 13, 31, 33) ----------------------------------------------------------------
    def _candidates(self) -> list[dict[str, np.ndarray]]:
        return [self.global_w] if self.clusters is None else self.clusters

    def configure_cluster(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        cands = self._candidates()
        measure = "none" if self.cfg.clustering == "random" else self.cfg.clustering
        if self.clusters is None and self.cfg.initial_clustering == "random":
            measure = "none"
        packed = pack_models(cands) if measure != "none" else {}
        config: dict[str, ConfigValue] = {
            "num_candidates": len(cands) if measure != "none" else 0,
            "measure": measure,
            "split": "train" if self.cfg.cluster_split == "train" else "private",
            "max_samples": self.cfg.max_cluster_samples,
        }
        return {c: Message("cluster", rnd, arrays={**self._push(c), **packed}, config=config) for c in clients}

    def aggregate_cluster(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        ids = sorted(replies)
        if not ids:
            return {}
        self.n_cal.update({c: int(replies[c].arrays["n_cal"][0]) for c in ids})
        k = self.cfg.num_clusters
        before = {c: self.assign.get(c, -1) for c in ids}
        rng = derive_rng(self.seed, rnd, 0xA55)
        first = self.clusters is None
        if first or self.cfg.clustering == "random":
            new = [c for c in ids if self.assign.get(c, -1) < 0] if not first else ids
            if first and self.cfg.initial_clustering == "sorted" and self.cfg.clustering != "random":
                score = np.array([float(replies[c].arrays["scores"][0]) for c in ids])
                order = [ids[i] for i in np.argsort(score, kind="stable")]
            else:
                order = [new[i] for i in rng.permutation(len(new))]
            for j, chunk in enumerate(np.array_split(np.array(order, dtype=object), k)):
                for c in chunk:
                    self.assign[str(c)] = j
        else:
            loss = np.stack([np.asarray(replies[c].arrays["scores"], dtype=float) for c in ids], axis=1)  # (K, N)
            rule = stl.assign_argmin(loss) if self.cfg.assign_rule == "argmin" else stl.assign_balanced(loss)
            self.assign.update({c: int(j) for c, j in zip(ids, rule)})
        if first:
            self.clusters = []
            for j in range(k):
                mem = [c for c in self.members(j, ids) if c in self._pretrained and self._pretrained[c][1] > 0]
                if mem:
                    self.clusters.append(
                        weighted_average([self._pretrained[c][0] for c in mem], [self._pretrained[c][1] for c in mem])
                    )
                else:
                    self.clusters.append(_copy(self.global_w))
            self._pretrained = {}
        sizes = np.bincount([self.assign[c] for c in ids], minlength=k)
        out: Metrics = {f"cluster{j}_size": int(s) for j, s in enumerate(sizes)}
        out["clusters_nonempty"] = int((sizes > 0).sum())
        out["moved"] = int(sum(before[c] >= 0 and before[c] != self.assign[c] for c in ids))
        if not first and self.cfg.clustering != "random":
            out["alignment"] = float(np.mean([replies[c].arrays["scores"][self.assign[c]] for c in ids]))
        return out

    # -- calibration (lines 14, 34): ClusterConformal ------------------------------------------------
    def cluster_weights(self, k: int) -> dict[str, np.ndarray] | None:
        return None if self.clusters is None else self.clusters[k]

    # -- evaluation -----------------------------------------------------------------------------------
    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        config: dict[str, ConfigValue] = {"split": self.cfg.eval_split}
        out = {}
        for c in clients:
            k = self.assign.get(c, -1)
            if self.clusters is None or k < 0:
                out[c] = Message("evaluate", rnd, arrays=_prefix(self.global_w, "global."), config=config)
            else:
                out[c] = Message(
                    "evaluate",
                    rnd,
                    config=config,
                    arrays={**self._push(c, encoder=False), **_prefix(self.clusters[k], "cluster."), **self.region(c)},
                )
        return out

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        self.record_coverage(replies)
        return weighted_metric_means(replies.values(), skip=("num_examples", "cluster"))

    # -- runtime assignment of a new client (no retraining) ------------------------------------------
    def assign_new_client(self, client: Any, rnd: int | None = None) -> tuple[int, np.ndarray]:
        """§4.5 / §3.3: a client that took no part in training scores the trained cluster models by R_STL
        on its own data and joins the argmin.  Nothing is trained or recalibrated; the strategy's state
        is unchanged.  Returns (cluster, scores (K,))."""
        if self.clusters is None:
            raise RuntimeError("LogiCP: no cluster models yet (run at least the first clustering)")
        measure = "stl" if self.cfg.clustering == "random" else self.cfg.clustering
        msg = Message(
            "cluster",
            self.rounds if rnd is None else rnd,
            arrays=pack_models(self.clusters),
            config={
                "num_candidates": len(self.clusters),
                "measure": measure,
                "split": "train",
                "max_samples": self.cfg.max_cluster_samples,
                "seed": 0,
            },
        )
        scores = np.asarray(client.handle(msg).arrays["scores"], dtype=float)
        return int(np.argmin(scores)), scores

    def deploy_message(self, k: int, split: str | None = None) -> Message:
        """The evaluate message of a new client deployed in cluster ``k``: the cluster model as its model,
        the cluster's region."""
        assert self.clusters is not None
        arrays = {**_prefix(self.clusters[k], "push."), **_prefix(self.clusters[k], "cluster.")}
        if self.ranks[k] is not None:
            arrays["qhat"] = self.qhat[k].copy()
        return Message(
            "evaluate", self.rounds, arrays=arrays, config={"split": split or self.cfg.eval_split, "seed": 0}
        )

    # -- schemas, state, outputs ----------------------------------------------------------------------
    def declare_stages(self) -> tuple[Stage, ...]:
        return (
            Stage(
                "pretrain",
                self.configure_pretrain,
                self.aggregate_pretrain,
                reply=self.weights_reply_schema,
                request=lambda: weights_request_schema(self.global_w),
            ),
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=self.weights_reply_schema,
                request=self.train_request_schema,
            ),
            Stage(
                "cluster.train",
                self.configure_cluster_train,
                self.aggregate_cluster_train,
                reply=lambda: self.weights_reply_schema(required=False),
                request=self.cluster_train_request_schema,
            ),
            Stage(
                "cluster",
                self.configure_cluster,
                self.aggregate_cluster,
                reply=Schema(
                    arrays=(ArraySpec("scores", "scores", "float", (None,)), ArraySpec("n_cal", "counts", "int", (1,)))
                ),
                request=self.cluster_request_schema,
            ),
            *self.conformal_stages(),
            self.evaluate_stage(request=self.evaluate_request_schema, extra_metrics=EVAL_EXTRA),
        )

    # Request schemas (server → client), checked before anything is sent: every array is a model of the
    # server's shapes under a declared prefix, or the cluster's region; config entries are named.
    def _train_options(self) -> tuple[str, ...]:
        return (*self.cfg.sgd_config(), *self.cfg.loss_config(), "seed")

    def train_request_schema(self) -> Schema:
        """Eq. 19 training: ``push.<w>`` (first contact) and the region Q̂ of the client's cluster."""
        return Schema(
            arrays=(*weight_specs(self.global_w, "push."), *region_specs(self.horizon)), config=self._train_options()
        )

    def cluster_train_request_schema(self) -> Schema:
        """Alg. 1 lines 28–30: the cluster model ``cluster.<w>`` and its region, or ``skip``."""
        return Schema(
            arrays=(*weight_specs(self.global_w, "cluster."), *region_specs(self.horizon)),
            config=(*self._train_options(), "cluster_epochs", "skip"),
        )

    def cluster_request_schema(self) -> Schema:
        """Eq. 10 scoring: ``push.<w>`` and the K candidate models ``c<j>.<w>``."""
        cands = tuple(s for j in range(self.cfg.num_clusters) for s in weight_specs(self.global_w, f"c{j}."))
        return Schema(
            arrays=(*weight_specs(self.global_w, "push."), *cands),
            config=("num_candidates", "measure", "split", "max_samples", "seed"),
        )

    def evaluate_request_schema(self) -> Schema:
        """Evaluation: the global model (before the first clustering) or ``push.`` / ``cluster.`` and Q̂."""
        arrays = tuple(weight_specs(self.global_w, p) for p in ("global.", "push.", "cluster."))
        return Schema(
            arrays=(*(a for group in arrays for a in group), *region_specs(self.horizon)), config=("split", "seed")
        )

    def weights_reply_schema(self, required: bool = True) -> Schema:
        """A client's copy of the global model: every array of the server's shape."""
        return Schema(
            arrays=tuple(
                ArraySpec(n, "weights", shape=tuple(np.shape(v)), required=required) for n, v in self.global_w.items()
            ),
            metrics=("num_examples", "train_loss"),
            required_metrics=("num_examples", "train_loss"),
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "global": _copy(self.global_w),
            "clusters": None if self.clusters is None else [_copy(m) for m in self.clusters],
            "seen": sorted(self.seen),
            **self.conformal_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.global_w = _copy(state["global"])
        self.clusters = None if state["clusters"] is None else [_copy(m) for m in state["clusters"]]
        self.seen = set(state["seen"])
        self.load_conformal_state(state)

    def summary(self) -> dict[str, Any]:
        """Clusters, regions and ranks (written to RUN_DIR/logicp.json)."""
        return {"assignment": dict(sorted(self.assign.items())), "clusters": self.conformal_summary()}

    def summary_metrics(self) -> dict[str, Any]:
        """summary.json's ``coverage_check``: the final joint coverage against the exact nominal one."""
        report = self.coverage_report()
        return {"coverage_check": report} if report else {}

    def finalize(self, run_dir: Path) -> None:
        summary = self.summary()
        report = self.coverage_report()
        if report:
            summary["coverage_check"] = report
            level = logging.WARNING if report["z"] < 0 else logging.INFO  # below nominal: say why, visibly
            log.log(level, "LogiCP coverage: %s", report["note"])
        (Path(run_dir) / "logicp.json").write_text(json.dumps(summary, indent=2, default=str))


def _loss(replies: Mapping[str, Message]) -> Metrics:
    n = [r.metrics["num_examples"] for r in replies.values()]
    vals = [
        (r.metrics["train_loss"], w)
        for r, w in zip(replies.values(), n)
        if np.isfinite(r.metrics["train_loss"]) and w > 0
    ]
    return {"train_loss": float(np.average([v for v, _ in vals], weights=[w for _, w in vals]))} if vals else {}


__all__ = ["CLUSTER_STAGES", "EVAL_EXTRA", "LogiCPStrategy", "PublicData"]
