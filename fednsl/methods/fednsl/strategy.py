"""FedNSL server on documents (Algorithm 1 lines 12–15, spec §2), on the shared
:class:`~fednsl.tasks.rule_learning.server.RuleLearningStrategy` (statistics → pool → T_θ pre-training, proposals,
the instance-weighted posterior mean → pool update → T_θ retraining → rule store).

What is the documents' own (the hooks):

- round-1 statistics (spec §8.8) are the clients' co-occurrence body distributions per (relation, head type, tail
  type) triple, weighted by the triple's labelled facts (§8.9); triples outside the vocabulary are logged, counted
  (``invalid_triples``) and ignored;
- a proposal is the unique bodies among N ancestral samples per triple (Eq. 5), with log T_θ and the counts n_j;
- the scorer's options travel with the proposal; under ``transfer: published`` the owners' instance-weighted mean
  scorer is kept after the update;
- ``evaluate``: the server sends the round's aggregated posterior (``global_posterior``) and, under ``transfer:
  published``, the owners' mean scorer; clients report F1 / Ign-F1 / logic counts of every evaluated variant
  (rule model, backbone, recalibration only, both transfer routes) and per-document counts; the server sums the
  counts, averages the F1s (also over the data-poor clients of the shared split: ``poor_*``) and keeps the
  per-document counts of the last round for RUN_DIR/eval_documents.npz (the ablation's bootstrap).

All server randomness is derived from (run seed, round, purpose), so a resumed run repeats it exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.methods.fednsl.config import FedNSLConfig
from fednsl.methods.fednsl.evaluation import impossible_counts, merge_variant_metrics
from fednsl.methods.fednsl.messages import (
    EVAL_REQUEST_SCHEMA,
    EVAL_SCHEMA,
    scorer_config,
    stats_schema,
    train_schema,
)
from fednsl.tasks.rule_learning import GLOBAL, Learner, Proposal, RuleLearningStrategy, Stats, Update, strip

__all__ = ["FedNSLStrategy"]

log = logging.getLogger("fednsl.methods.fednsl")


class FedNSLStrategy(RuleLearningStrategy):
    """Server of FedNSL on documents (module docstring)."""

    method_name = "fednsl"
    unit = "triples"
    scoped = False  # the seed purposes this server has always used
    cfg: FedNSLConfig

    def __init__(
        self,
        cfg: FedNSLConfig,
        relations: Sequence[str],
        entity_types: Sequence[str],
        clients: Sequence[str],
        seed: int,
        *,
        golden_rules: Sequence[tuple[int, Sequence[int]]] = (),
        golden_kind: str = "golden",
        meta: Mapping[str, Any] | None = None,
        client_roles: Mapping[str, str] | None = None,
    ):
        super().__init__(
            cfg,
            relations,
            entity_types,
            clients,
            seed,
            reference_rules=golden_rules,
            reference_kind=golden_kind,
            meta=meta,
        )
        self.client_roles = dict(client_roles or {})
        self.round_aggregate: dict[str, torch.Tensor] | None = None  # the round's aggregate sent at evaluation
        self.aggregate_round = -1
        self.eval_documents: dict[str, dict[str, np.ndarray]] = {}

    # -- hooks of the rule-learning server ------------------------------------------------------------------------
    def stats_schema(self) -> Schema:
        return stats_schema(self.R, len(self.types), self.cfg.max_body_len)

    def read_stats(self, learner: Learner, rnd: int, replies: Mapping[str, Message], metrics: Metrics) -> list[Stats]:
        """Per reply: {triple: {body: probability}} and {triple: labelled facts}; unknown triples are skipped."""
        out: list[Stats] = []
        invalid = 0
        for cid, msg in replies.items():
            a = msg.arrays
            d: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
            w: dict[tuple[int, int, int], float] = {}
            for k, row in enumerate(a["triples"].tolist()):
                t = (int(row[0]), int(row[1]), int(row[2]))
                if not (0 <= t[0] < self.R and 0 <= t[1] < len(self.types) and 0 <= t[2] < len(self.types)):
                    log.warning(
                        "round %d train.stats: client %s sent triple %s outside the vocabulary (R=%d, %d types); "
                        "ignored",
                        rnd,
                        cid,
                        t,
                        self.R,
                        len(self.types),
                    )
                    invalid += 1
                    continue
                body_probs: dict[tuple[int, ...], float] = {}
                for body, p, m in zip(a["bodies"][k].tolist(), a["probs"][k].tolist(), a["mask"][k].tolist()):
                    toks = strip(body, self.R)
                    if m and p > 0 and toks:
                        body_probs[toks] = body_probs.get(toks, 0.0) + float(p)
                if body_probs and int(a["instances"][k]) > 0:
                    d[t] = body_probs
                    w[t] = float(a["instances"][k])
            out.append((d, w))
        if invalid:
            metrics["invalid_triples"] = metrics.get("invalid_triples", 0) + invalid
        return out

    def propose(self, learner: Learner, rnd: int) -> Proposal:
        """The unique bodies of N ancestral samples of T_θ per triple, with log T_θ and the counts n_j (Eq. 5)."""
        s = self.sample(learner, rnd)
        lp = torch.where(s.mask, s.log_prior.double(), torch.zeros((), dtype=torch.float64))
        return Proposal(learner.heads(), s.bodies, lp, s.counts, s.mask)

    def train_config(self, rnd: int) -> dict[str, Any]:
        return scorer_config(self.cfg.scorer_options())

    def train_schema(self) -> Schema:
        return train_schema(self.cfg.transfer)

    def after_update(self, u: Update) -> Metrics:
        """Keep what evaluation sends back: the aggregated posterior (T_θ renormalised where no client answered) and
        the owners' instance-weighted mean scorer."""
        p, has = u.proposal, u.has
        T, J = p.mask.shape
        pub_w = torch.zeros(T, J, dtype=torch.float64)
        pub_b = torch.zeros(T, dtype=torch.float64)
        pub_n = torch.zeros(T, dtype=torch.float64)
        rec_u = torch.zeros(T, dtype=torch.float64)
        rec_b = torch.zeros(T, dtype=torch.float64)
        iterations: list[float] = []
        for cid, msg in u.replies.items():
            wgt = u.posteriors[cid][1]
            if "scorer_weights" in msg.arrays:  # transfer "published": its train schema requires all four arrays
                pub_w += torch.as_tensor(msg.arrays["scorer_weights"], dtype=torch.float64) * p.mask * wgt[:, None]
                pub_b += torch.as_tensor(msg.arrays["scorer_bias"], dtype=torch.float64) * wgt
                rec_u += torch.as_tensor(msg.arrays["recal_slope"], dtype=torch.float64) * wgt
                rec_b += torch.as_tensor(msg.arrays["recal_bias"], dtype=torch.float64) * wgt
                pub_n += wgt
            if "scorer_iterations" in msg.metrics:
                iterations.append(float(msg.metrics["scorer_iterations"]))
        self.round_aggregate = {
            "global_posterior": torch.where(has[:, None], u.agg, p.prior("renormalised")) * p.mask,
            "published_weights": pub_w / pub_n.clamp_min(1e-300)[:, None],
            "published_bias": pub_b / pub_n.clamp_min(1e-300),
            "published_mask": pub_n > 0,
            "published_recal_slope": rec_u / pub_n.clamp_min(1e-300),
            "published_recal_bias": rec_b / pub_n.clamp_min(1e-300),
        }
        self.aggregate_round = u.rnd
        out: Metrics = {
            "triples_without_posterior": int((~has & p.mask.any(-1)).sum()),
        }
        empty = int((~p.mask.any(-1)).sum())
        if empty:
            out["triples_without_bodies"] = empty
        if iterations:
            out["scorer_iterations_max"] = max(iterations)
            out["scorer_iterations_mean"] = float(np.mean(iterations))
        return out

    def store_meta(self, learner: Learner) -> dict[str, Any]:
        vocab = learner.store.vocab
        return {
            "pool_top": {
                learner.store.triple_name(t): [
                    [f"{self.relations[t[0]]} <- {vocab.format_body(b)}", p]
                    for b, p in sorted(d.items(), key=lambda kv: -kv[1])[: self.cfg.top_k + 1]
                ]
                for t, d in learner.pool.distributions().items()
            }
        }

    def write_outputs(self, run_dir: Path) -> None:
        """RUN_DIR/eval_documents.npz (the last round's per-document counts) and the F1 / logic plots."""
        if self.eval_documents:
            flat: dict[str, Any] = {
                f"{cid}/{k}": v for cid, arrs in self.eval_documents.items() for k, v in arrs.items()
            }
            roles = np.array([f"{cid}={self.client_roles.get(cid, 'all')}" for cid in sorted(self.eval_documents)])
            np.savez_compressed(run_dir / "eval_documents.npz", roles=roles, **flat)
        from fednsl.methods.fednsl.plots import plot_fednsl

        plot_fednsl(run_dir)

    # -- evaluation -----------------------------------------------------------------------------------------------
    def evaluate_stage(self) -> Stage:
        return Stage(
            "evaluate", self.configure_evaluate, self.aggregate_evaluate, reply=EVAL_SCHEMA, request=EVAL_REQUEST_SCHEMA
        )

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        learner = self.learners[GLOBAL]
        arrays = self.proposal(learner, rnd).to_arrays()
        if self.round_aggregate is not None and self.aggregate_round == rnd:
            arrays["global_posterior"] = self.round_aggregate["global_posterior"].numpy()
            if self.cfg.transfer == "published":
                arrays.update({k: v.numpy() for k, v in self.round_aggregate.items() if k.startswith("published_")})
        return Message("evaluate", rnd, arrays=arrays, config=scorer_config(self.cfg.scorer_options()))

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        out: Metrics = {}
        refused = {cid: why for cid, msg in replies.items() if (why := impossible_counts(msg)) is not None}
        for cid, why in refused.items():
            log.warning("round %d: the evaluate reply of client %s is left out: %s", rnd, cid, why)
        replies = {cid: msg for cid, msg in replies.items() if cid not in refused}
        if refused:
            out["evaluations_rejected"] = len(refused)
        if not replies:
            return out
        poor = {c for c, role in self.client_roles.items() if role == "poor"}
        groups = [("", dict(replies))]
        if poor:
            groups.append(("poor_", {c: m for c, m in replies.items() if c in poor}))
        for group, reps in groups:
            if reps:
                out.update(merge_variant_metrics(group, reps))
        holdout = {k for r in replies.values() for k in r.metrics if k.startswith("holdout_")}
        for k in sorted(holdout):
            out[k] = float(np.mean([r.metrics[k] for r in replies.values() if k in r.metrics]))
        self.eval_documents = {
            cid: {k: np.asarray(v) for k, v in r.arrays.items() if k.startswith(("docs_", "doclogic_"))}
            for cid, r in replies.items()
        }
        return out
