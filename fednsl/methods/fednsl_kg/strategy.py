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
from fednsl.methods.fednsl_kg.messages import (
    COUNT_FIELDS,
    EVAL_SCHEMA,
    SIGNATURE_FIELDS,
    TRAIN_REQUEST_SCHEMA,
    TRAIN_SCHEMA,
    decode_rank_sums,
    stats_schema,
    sum_signatures,
)
from fednsl.tasks.rule_learning import GLOBAL, Learner, Proposal, RuleLearningStrategy, Stats, Update, strip
from kg.linkpred import RankingMetrics
from rules.measures import RuleCounts

__all__ = ["GLOBAL", "FedNSLKGStrategy", "head_signature"]

TEST_KEYS = ("mrr", "mr", "hits@1", "hits@3", "hits@10")

log = logging.getLogger("fednsl.methods.fednsl_kg")


def head_signature(replies: Sequence[Message], num_types: int) -> dict[int, tuple[int, int]]:
    """Each relation's most frequent (head type, tail type) over the replies' summed signature counts (sparse: only
    the pairs some client holds, so T may be large); empty on an untyped KG."""
    parts = [m.arrays for m in replies if len(m.arrays[SIGNATURE_FIELDS[0]])]
    if not parts:
        return {}
    heads, types, counts = (np.concatenate([a[f] for a in parts]) for f in SIGNATURE_FIELDS)
    rel, pairs, sums = sum_signatures(heads, types, counts, num_types)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -sums, rel))  # per relation: largest count, then smaller ids
    first = order[np.r_[True, rel[order][1:] != rel[order][:-1]]]
    return {int(rel[i]): (int(pairs[i, 0]), int(pairs[i, 1])) for i in first}


def _listed(key: Any) -> list[Any]:
    """A weights-table key as JSON: a head [r, a, b] or a (head, body) pair [[r, a, b], [body…]]."""
    return [list(k) for k in key] if isinstance(key[0], tuple) else list(key)


def _keyed(item: list[Any]) -> Any:
    """Inverse of :func:`_listed`."""
    return tuple(tuple(k) for k in item) if isinstance(item[0], list) else tuple(item)


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
        # per learner: (head, body) -> summed leave-one-out evidence (EVIDENCE_PARTS) of the latest round it was sent
        self.evidence: dict[str, dict[tuple[tuple[int, int, int], tuple[int, ...]], np.ndarray]] = {
            name: {} for name in self.learners
        }
        # per learner: (head, body) -> (2,) query-weighted mean rule weight per direction and (2,) summed queries;
        # head -> (2, 2R) mean type-prior weights and (2,) summed queries
        self.weights: dict[str, dict[Any, tuple[np.ndarray, np.ndarray]]] = {name: {} for name in self.learners}

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
        """``confidence`` (T, J, 2): each proposed body's pooled leave-one-out confidence, −1 where unknown; the
        averaged weights to start from (``start_*``)."""
        return {**self._confidence(learner, p), **self._start_weights(learner, p)}

    def _start_weights(self, learner: Learner, p: Proposal) -> dict[str, np.ndarray]:
        table = self.weights[learner.name]
        if not self.cfg.federated_weights or not table:
            return {}
        T, J = p.mask.shape
        w, known = np.zeros((T, J, 2)), np.zeros((T, J, 2), dtype=bool)
        types, types_known = None, np.zeros((T, 2), dtype=bool)
        for t, key in enumerate(p.keys()):
            for j, body in enumerate(p.bodies_of(t, self.R)):
                if (key, body) in table:
                    mean, n = table[(key, body)]
                    w[t, j], known[t, j] = mean, n > 0
            if key in table:
                mean, n = table[key]
                types = np.zeros((T, 2, mean.shape[1])) if types is None else types
                types[t], types_known[t] = mean, n > 0
        out: dict[str, np.ndarray] = {"start_weights": w, "start_known": known}
        if types is not None:
            out.update(start_type_weights=types, start_type_known=types_known)
        return out

    def _confidence(self, learner: Learner, p: Proposal) -> dict[str, np.ndarray]:
        table = self.evidence[learner.name]
        if not self.cfg.federated_confidence or not table:
            return {}
        T, J = p.mask.shape
        out = np.full((T, J, 2), -1.0)
        for t, key in enumerate(p.keys()):
            for j, body in enumerate(p.bodies_of(t, self.R)):
                e = table.get((key, body))
                if e is not None:
                    for k in range(2):
                        if e[2 * k + 1] > 0:
                            out[t, j, k] = e[2 * k] / e[2 * k + 1]
        return {"confidence": out}

    def after_update(self, u: Update) -> Metrics:
        """Sum the replies' leave-one-out evidence per (head, body) over the learner's clients; average their fitted
        weights, weighted by training queries."""
        keys = u.proposal.keys()
        bodies = [u.proposal.bodies_of(t, self.R) for t in range(len(keys))]
        parts = [np.asarray(m.arrays["evidence"]) for m in u.replies.values() if "evidence" in m.arrays]
        if parts:
            total = np.sum(parts, axis=0)
            table = self.evidence[u.learner.name]
            for t, key in enumerate(keys):
                for j, body in enumerate(bodies[t]):
                    table[(key, body)] = total[t, j]
        fitted = [m.arrays for m in u.replies.values() if "rule_weights" in m.arrays]
        if fitted:
            n = np.sum([a["weight_queries"] for a in fitted], axis=0).astype(np.float64)  # (T, 2)
            div = np.maximum(n, 1.0)
            rule_w = np.sum([a["rule_weights"] * a["weight_queries"][:, None, :] for a in fitted], axis=0)
            weights = self.weights[u.learner.name]
            for t, key in enumerate(keys):
                for j, body in enumerate(bodies[t]):
                    weights[(key, body)] = (rule_w[t, j] / div[t], n[t])
            typed = [a for a in fitted if "type_weights" in a]
            if typed:
                type_w = np.sum([a["type_weights"] * a["weight_queries"][:, :, None] for a in typed], axis=0)
                for t, key in enumerate(keys):
                    weights[key] = (type_w[t] / div[t][:, None], n[t])
        return {"evidence_clients": len(parts), "weight_clients": len(fitted)}

    def _counts_round(self, rnd: int) -> bool:
        return self.cfg.counts == "every" or (self.cfg.counts == "last" and rnd >= self.rounds)

    def refuse(self, learner: Learner, rnd: int, cid: str, msg: Message) -> str | None:
        """Counts beyond the client's round-1 training facts n_r: instances > n_r, evidence hits > n_r or reached
        pairs > n_r · E, weights fitted on more than n_r queries."""
        facts = self.facts.get(cid)
        if facts is None:
            return "the server has no round-1 statistics of this client, so no bound on its counts"
        p = self.proposal(learner, rnd)
        n = facts[np.asarray(p.relations, dtype=np.int64)] if p.num_heads else np.zeros(0, np.int64)
        a = msg.arrays
        E = self.num_entities or np.iinfo(np.int64).max // max(1, int(n.max(initial=1)))
        checks: list[tuple[str, np.ndarray]] = [("instances", np.asarray(a["instances"]) > n)]
        if "evidence" in a:
            ev = np.asarray(a["evidence"])
            checks.append(("evidence hits", np.asarray(ev[..., 0::2] > n[:, None, None])))
            checks.append(("evidence reached pairs", np.asarray(ev[..., 1::2] > n[:, None, None] * E)))
        if "weight_queries" in a:
            checks.append(("weight queries", np.asarray(np.asarray(a["weight_queries"]) > n[:, None])))
        bad = [name for name, rows in checks if rows.any()]
        return f"{', '.join(bad)} exceed its {int(n.sum())} training facts of these relations" if bad else None

    def rule_counts(self, rnd: int, msg: Message, t: int, m: np.ndarray) -> RuleCounts | None:
        if not self._counts_round(rnd):
            return None
        return RuleCounts(*(np.asarray(msg.arrays[f])[t][m] for f in COUNT_FIELDS))

    def store_meta(self, learner: Learner) -> dict[str, Any]:
        return {"test": {k: v for k, v in self.last_eval.items() if k != "clients"}}

    def extra_state(self) -> dict[str, Any]:
        evidence = {
            name: [[list(key), list(body), [int(x) for x in e]] for (key, body), e in table.items()]
            for name, table in self.evidence.items()
        }
        weights = {
            name: [[_listed(k), mean.tolist(), n.tolist()] for k, (mean, n) in table.items()]
            for name, table in self.weights.items()
        }
        return {
            "last_eval": json.dumps(self.last_eval),
            "evidence": json.dumps(evidence),
            "weights": json.dumps(weights),
            "facts": json.dumps({cid: n.tolist() for cid, n in self.facts.items()}),
        }

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.last_eval = json.loads(state["last_eval"])
        self.facts = {cid: np.asarray(n, dtype=np.int64) for cid, n in json.loads(state.get("facts", "{}")).items()}
        for name, rows in json.loads(state.get("evidence", "{}")).items():
            self.evidence[name] = {(tuple(key), tuple(body)): np.asarray(e, dtype=np.int64) for key, body, e in rows}
        for name, rows in json.loads(state.get("weights", "{}")).items():
            self.weights[name] = {_keyed(k): (np.asarray(mean), np.asarray(n)) for k, mean, n in rows}

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
        """Top-level entries of summary.json: the final aggregate test metrics and the per-client ones."""
        return dict(self.last_eval)
