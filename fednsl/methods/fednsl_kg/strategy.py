"""fednsl-kg server: FedNSL's V-EM loop (Algorithm 1) over a knowledge graph's relations, on the shared
:class:`~fednsl.tasks.rule_learning.server.RuleLearningStrategy`.

What is the KG's own (the hooks):

- rule heads are (r, t_h, t_t) for every forward relation r (the inverse head r+R shares r's rules read backwards,
  :mod:`.bodies`): on an untyped KG t_h = t_t = 0; on a typed KG the (head type, tail type) pair most frequent
  among r's training triples over the learner's clients (ties to the smaller ids, :func:`head_signature`), so T_θ
  reads the head's types as FedNSL's generator does on DWIE;
- round-1 statistics are mined bodies with their supports: the pool starts from them, support-weighted (add-one,
  so every mined body stays) and instance-weighted over clients;
- a proposal is, per head, the pool's ``pool_top`` most probable bodies plus the unique bodies among N ancestral
  samples of T_θ (Eq. 5), at most ``max_bodies``; the prior p_θ is T_θ renormalised over them;
- clients send AMIE counts with their posteriors (every round, the last or never: ``counts``), summed in the store;
- with ``federated_confidence`` clients also send each body's leave-one-out evidence (hits and reached pairs on
  their training queries); the server sums it over the learner's clients (the latest round a body was proposed)
  and sends the pooled confidence Σ hits / Σ reached with the next proposal, from which clients start their rule
  weights — sufficient statistics, so a data-poor client's weights start from all clients' facts;
- with ``federated_weights`` clients also send their fitted rule and type-prior weights; the server averages them
  per (head, body) and per head, weighted by the training queries they were fitted on (FedAvg), and sends the
  averages with the next proposal as the weights to start from; each client keeps them per head unless its own
  training improves its valid MRR (the personal part);
- evaluation merges the clients' exact ranking sums (:class:`kg.linkpred.RankingMetrics`).

``local_only``: every client is its own learner (the lower bound: each client alone).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.methods.fednsl_kg.config import FedNSLKGConfig
from fednsl.methods.fednsl_kg.exchange import Exchange, refusal
from fednsl.methods.fednsl_kg.messages import (
    COUNT_FIELDS,
    EVAL_SCHEMA,
    TRAIN_REQUEST_SCHEMA,
    TRAIN_SCHEMA,
    decode_rank_sums,
    head_signature,
    stats_schema,
)
from fednsl.tasks.rule_learning import GLOBAL, Learner, Proposal, RuleLearningStrategy, Stats, Update, strip
from kg.linkpred import RankingMetrics
from rules.measures import RuleCounts

__all__ = ["GLOBAL", "FedNSLKGStrategy"]

TEST_KEYS = ("mrr", "mr", "hits@1", "hits@3", "hits@10")

log = logging.getLogger("fednsl.methods.fednsl_kg")


#: the train-reply metrics that say what a client's fit chose on its valid split
CHOSEN_METRICS = (
    "simple_paths",
    "constant_rules_on",
    "rule_length",
    "ways_not_fitted",
    "heads_cut_by_budget",
    "heads_nonredundant",
    "heads_with_valid",
)


def _described(got: Mapping[str, float]) -> dict[str, Any]:
    """A client's CHOSEN_METRICS as summary.json shows them: the paths chosen, whether rules with constants were
    chosen, the length of the longest rules kept, the heads that took the non-redundant noisy-OR of those with
    valid queries."""
    out: dict[str, Any] = {}
    if "simple_paths" in got:
        out["paths"] = "simple" if got["simple_paths"] else "walks"
    if "constant_rules_on" in got:
        out["constant_rules"] = "on" if got["constant_rules_on"] else "off"
    if "rule_length" in got:
        out["rule_length"] = int(got["rule_length"])
    if got.get("ways_not_fitted"):  # the choice was made among the ways fitted within the time budget
        out["ways_not_fitted"] = int(got["ways_not_fitted"])
    if got.get("heads_cut_by_budget"):  # heads whose training the time budget ended
        out["heads_cut_by_budget"] = int(got["heads_cut_by_budget"])
    if "heads_nonredundant" in got:
        out["nonredundant_heads"] = int(got["heads_nonredundant"])
        out["heads_with_valid_queries"] = int(got.get("heads_with_valid", 0))
    return out


class FedNSLKGStrategy(RuleLearningStrategy):
    """Server of fednsl-kg (module docstring)."""

    method_name = "fednsl-kg"
    unit = "heads"
    cfg: FedNSLKGConfig

    def __init__(
        self,
        cfg: FedNSLKGConfig,
        relations: Sequence[str],
        clients: Sequence[str],
        seed: int,
        *,
        types: Sequence[str] = (),
        num_entities: int | None = None,
        rounds: int = 1,
        planted: Sequence[tuple[int, Sequence[int]]] = (),
        meta: Mapping[str, Any] | None = None,
    ):
        super().__init__(
            cfg, relations, types, clients, seed, local_only=cfg.local_only, reference_rules=planted, meta=meta
        )
        self.rounds = int(rounds)
        self.num_entities = num_entities  # bounds what a client's ranking sums may say (None: unchecked)
        self.facts: dict[str, np.ndarray] = {}  # client -> (R,) training facts per relation, from round 1
        self.last_eval: dict[str, Any] = {}
        self.chosen: dict[str, dict[str, float]] = {}  # client -> what its last fit chose on valid (CHOSEN_METRICS)
        self.exchange = {name: Exchange() for name in self.learners}  # pooled evidence and averaged weights

    # -- hooks of the rule-learning server ------------------------------------------------------------------------
    def stats_schema(self) -> Schema:
        return stats_schema(self.R, self.T)

    def read_stats(self, learner: Learner, rnd: int, replies: Mapping[str, Message], metrics: Metrics) -> list[Stats]:
        """Mined (head, body, support) rows → support + 1 per body; instances per relation as head weights."""
        learner.signature = head_signature(list(replies.values()), self.T)
        out: list[Stats] = []
        for cid, msg in replies.items():
            a = msg.arrays
            self.facts[cid] = np.asarray(a["instances"], dtype=np.int64)
            d: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
            for r, row, sup in zip(a["heads"].tolist(), a["bodies"], a["support"].tolist()):
                if not 0 <= r < self.R:
                    raise ValueError(f"client {msg.sender}: mined head {r} outside 0..{self.R - 1}")
                body = strip(row, self.R)
                if body:
                    d.setdefault(learner.key(r), {})[body] = float(sup) + 1.0  # add-one: every mined body stays
            out.append((d, {learner.key(r): float(n) for r, n in enumerate(a["instances"].tolist())}))
        return out

    def propose(self, learner: Learner, rnd: int) -> Proposal:
        """Per head of the pool: its top ``pool_top`` bodies, then T_θ's sampled bodies by count, ≤ ``max_bodies``;
        the log prior is T_θ renormalised over them."""
        c = self.cfg
        sampled = self.sample(learner, rnd).per_triple()
        keys = learner.pool.triples
        per_head: list[list[tuple[int, ...]]] = []
        per_counts: list[list[int]] = []
        for t, key in enumerate(keys):
            dist = learner.pool.distribution(key)
            chosen = [b for b, _ in sorted(dist.items(), key=lambda kv: (-kv[1], kv[0]))][: c.pool_top]
            cnt = dict.fromkeys(chosen, 0)
            bodies_t, _, counts_t = sampled[t]
            for row, n in zip(bodies_t.tolist(), counts_t.tolist()):
                body = strip(row, self.R)
                if body in cnt:
                    cnt[body] += int(n)
                elif len(cnt) < c.max_bodies:
                    cnt[body] = int(n)
            per_head.append(list(cnt)[: c.max_bodies])
            per_counts.append([cnt[b] for b in per_head[-1]])
        p = Proposal.from_bodies(keys, per_head, per_counts, self.R, c.max_body_len)
        T, J, L = p.bodies.shape
        if T:
            learner.model.eval()
            with torch.no_grad(), torch_threads(c.num_threads):
                lp = learner.model.log_prob(p.heads.repeat_interleave(J, 0), p.bodies.reshape(T * J, L))
            lp = lp.reshape(T, J).double().masked_fill(~p.mask, float("-inf"))
            lp = torch.log_softmax(lp, dim=1)  # T_θ renormalised over the proposed bodies
            p.log_prior = torch.where(p.mask, lp, torch.zeros_like(lp))
        return p

    def train_config(self, rnd: int) -> dict[str, Any]:
        return {"use_prior": True, "counts": self._counts_round(rnd)}

    def train_schema(self) -> Schema:
        return TRAIN_SCHEMA

    def train_request_schema(self) -> Schema:
        return TRAIN_REQUEST_SCHEMA

    def train_arrays(self, learner: Learner, rnd: int, p: Proposal) -> dict[str, np.ndarray]:
        """The pooled ``confidence`` and the averaged weights to start from (``start_*``), as configured."""
        ex = self.exchange[learner.name]
        return {
            **(ex.confidence(p, self.R) if self.cfg.federated_confidence else {}),
            **(ex.start_weights(p, self.R) if self.cfg.federated_weights else {}),
        }

    def after_update(self, u: Update) -> Metrics:
        """Pool the replies' evidence and average their weights (:class:`.exchange.Exchange`); keep what each
        client's fit chose on its valid split (summary.json's ``chosen_on_valid``)."""
        for cid, msg in u.replies.items():
            got = {k: float(msg.metrics[k]) for k in CHOSEN_METRICS if k in msg.metrics}
            if got:
                self.chosen[cid] = got
        out: Metrics = {**self.exchange[u.learner.name].absorb(u.proposal, u.replies, self.R)}
        return out

    def _counts_round(self, rnd: int) -> bool:
        return self.cfg.counts == "every" or (self.cfg.counts == "last" and rnd >= self.rounds)

    def may_end_after(self, rnd: int) -> bool:
        """Not with ``counts: last`` unless round ``rnd`` counted: the counts come from the last round's clients."""
        return self.cfg.counts != "last" or self._counts_round(rnd)

    def refuse(self, learner: Learner, rnd: int, cid: str, msg: Message) -> str | None:
        """Counts beyond the client's round-1 training facts (:func:`.exchange.refusal`)."""
        return refusal(self.facts.get(cid), self.proposal(learner, rnd), msg, self.num_entities)

    def rule_counts(self, rnd: int, msg: Message, t: int, m: np.ndarray) -> RuleCounts | None:
        if not self._counts_round(rnd):
            return None
        return RuleCounts(*(np.asarray(msg.arrays[f])[t][m] for f in COUNT_FIELDS))

    def store_meta(self, learner: Learner) -> dict[str, Any]:
        return {"test": {k: v for k, v in self.last_eval.items() if k != "clients"}}

    def extra_state(self) -> dict[str, Any]:
        return {
            "last_eval": json.dumps(self.last_eval),
            "chosen": json.dumps(self.chosen),
            "exchange": json.dumps({name: ex.to_json() for name, ex in self.exchange.items()}),
            "facts": json.dumps({cid: n.tolist() for cid, n in self.facts.items()}),
        }

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.last_eval = json.loads(state["last_eval"])
        self.chosen = json.loads(state.get("chosen", "{}"))
        self.facts = {cid: np.asarray(n, dtype=np.int64) for cid, n in json.loads(state.get("facts", "{}")).items()}
        for name, text in json.loads(state.get("exchange", "{}")).items():
            self.exchange[name] = Exchange.from_json(text)

    # -- evaluation: filtered link prediction ---------------------------------------------------------------------
    def evaluate_stage(self) -> Stage:
        return Stage("evaluate", self.configure_evaluate, self.aggregate_evaluate, reply=EVAL_SCHEMA, request=Schema())

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        total = RankingMetrics()
        per_client: dict[str, dict[str, float]] = {}
        rejected = 0
        for cid, msg in replies.items():
            m = decode_rank_sums(msg.arrays["rank_sums"], int(msg.metrics["queries"]))
            bad = [] if self.num_entities is None else m.violations(self.num_entities)
            if bad:
                log.warning(
                    "round %d: client %s reported ranking sums that %d queries over %d entities cannot give (%s); "
                    "its evaluation is left out",
                    rnd,
                    cid,
                    m.count,
                    self.num_entities,
                    ", ".join(bad),
                )
                rejected += 1
                continue
            total.merge(m)
            per_client[cid] = {f"test_{k}": v for k, v in m.compute().items()}
        agg = total.compute()
        out: Metrics = {f"test_{k}": float(v) for k, v in agg.items() if not math.isnan(v)}
        if rejected:
            out["evaluations_rejected"] = rejected
        for cid, vals in per_client.items():
            out[f"{cid}.test_mrr"] = vals["test_mrr"] if not math.isnan(vals["test_mrr"]) else 0.0
        self.last_eval = {
            **{f"test_{k}": float(agg[k]) for k in TEST_KEYS},
            "test_mrr_pessimistic": float(agg["mrr_pessimistic"]),
            "test_queries": int(total.count),
            "clients": per_client,
            "round": rnd,
        }
        return out

    def summary_metrics(self) -> dict[str, Any]:
        """Top-level entries of summary.json: the final aggregate test metrics and the per-client ones, and what
        each client's last fit chose on its valid split (``predictor.paths: auto``, ``predictor.nonredundant``)."""
        out = dict(self.last_eval)
        if self.chosen:
            out["chosen_on_valid"] = {cid: _described(got) for cid, got in self.chosen.items()}
        return out
