"""fednsl-kg server: FedNSL's V-EM loop (Algorithm 1) over a knowledge graph's relations.

Rule-head categories are (r, t_h, t_t) for every forward relation r (the inverse head r+R shares r's rules read
backwards, :mod:`.bodies`): on an untyped KG t_h = t_t = 0; on a typed KG (an ``entity_types`` file) the domain
and range type of r, the (head type, tail type) pair most frequent among r's training triples over the group's
clients (ties to the smaller ids), so T_θ reads the head's types as FedNSL's generator does on DWIE. Round 1 runs
``train.stats``: clients send mined bodies with their supports (and their type-signature counts); the server
builds its rule pool (support-weighted, instance-weighted over clients) and pre-trains T_θ on it (Eq. 6). Every
round then:

1. ``configure_train``: per head the pool's ``pool_top`` most probable bodies plus the unique bodies among N
   ancestral samples of T_θ (Eq. 5), at most ``max_bodies``; the prior p_θ is T_θ renormalised over them;
2. clients fit the predictor and reply posteriors (E-step, :mod:`.client`);
3. ``aggregate_train``: per head the instance-weighted mean of the client posteriors, mixed into the pool, T_θ
   retrained on the pool (M-step); bodies, prior, posteriors and the clients' summed AMIE counts go to the
   :class:`rules.store.RuleStore`;
4. ``evaluate``: the clients' exact ranking sums are merged (:class:`kg.linkpred.RankingMetrics`).

``local_only``: every client is its own group with its own T_θ and pool (the lower bound: each client alone);
its rules are saved under ``RUN_DIR/local/<client>/``. All server randomness derives from (seed, round, purpose).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Metrics, Stage, Strategy
from fednsl.methods.fednsl_kg.bodies import pad_bodies, strip
from fednsl.methods.fednsl_kg.config import FedNSLKGConfig
from fednsl.methods.fednsl_kg.messages import (
    COUNT_FIELDS,
    EVAL_SCHEMA,
    RULES_REQUEST_SCHEMA,
    SIGNATURE_FIELDS,
    TRAIN_SCHEMA,
    decode_rank_sums,
    stats_schema,
    sum_signatures,
)
from kg.linkpred import RankingMetrics
from kg.seeding import derive_seed
from rules.generator import (
    GeneratorConfig,
    RuleGenerator,
    sample_rules,
    train_generator,
)
from rules.measures import RuleCounts
from rules.pool import RulePool, aggregate_distributions
from rules.store import RuleStore

__all__ = ["GLOBAL", "FedNSLKGStrategy", "planted_recall"]

GLOBAL = "global"
TEST_KEYS = ("mrr", "mr", "hits@1", "hits@3", "hits@10")


def planted_recall(
    pool: Mapping[tuple[int, int, int], Mapping[tuple[int, ...], float]],
    rules: Sequence[tuple[int, Sequence[int]]],
    k: int,
    signature: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[float, list[bool]]:
    """Share of (forward head, body) rules whose body is among the k most probable pool bodies of its head
    (keyed (r, t_h, t_t) by ``signature``, (r, 0, 0) without one)."""
    hits = []
    for head, body in rules:
        dist = pool.get((int(head), *(signature or {}).get(int(head), (0, 0))), {})
        ranked = [b for b, _ in sorted(dist.items(), key=lambda kv: (-kv[1], kv[0]))]
        hits.append(tuple(int(x) for x in body) in ranked[:k])
    return (float(np.mean(hits)) if hits else math.nan), hits


@dataclass
class Proposal:
    """One round's rules for a group: heads (T,), bodies (T, J, L), log_prior (T, J), sample counts, mask."""

    heads: np.ndarray
    bodies: np.ndarray
    log_prior: np.ndarray
    counts: np.ndarray
    mask: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        return {"heads": self.heads, "bodies": self.bodies, "log_prior": self.log_prior, "mask": self.mask}


class _Group:
    """Server state of one group of clients: T_θ, its pool, its rule store and the round's proposal."""

    def __init__(self, name: str, members: Sequence[str], strategy: FedNSLKGStrategy):
        s = strategy
        self.name, self.members = name, tuple(members)
        self.model = RuleGenerator(s.gen_config, torch.Generator().manual_seed(derive_seed(s.seed, 0, f"init:{name}")))
        self.pool = RulePool(s.R, s.cfg.max_body_len)
        self.signature: dict[int, tuple[int, int]] = {}  # r -> (domain type, range type); empty: untyped
        self.store = RuleStore(
            s.relations,
            s.types or None,
            body_length=s.cfg.max_body_len,
            meta={"method": "fednsl-kg", "seed": s.seed, "group": name, **s.meta},
        )
        self.proposal: Proposal | None = None
        self.proposal_round = 0
        self.last_gen_loss: float | None = None

    def key(self, r: int) -> tuple[int, int, int]:
        """The rule-head category of forward relation r: (r, domain type, range type)."""
        return (int(r), *self.signature.get(int(r), (0, 0)))

    def set_signature(self, replies: Sequence[Message], num_types: int) -> None:
        """Each relation's most frequent (head type, tail type) over the replies' summed signature counts (sparse:
        only the pairs some client holds, so T may be large)."""
        parts = [m.arrays for m in replies if len(m.arrays[SIGNATURE_FIELDS[0]])]
        if not parts:
            self.signature = {}
            return
        heads, types, counts = (np.concatenate([a[f] for a in parts]) for f in SIGNATURE_FIELDS)
        rel, pairs, sums = sum_signatures(heads, types, counts, num_types)
        order = np.lexsort((pairs[:, 1], pairs[:, 0], -sums, rel))  # per relation: largest count, then smaller ids
        first = order[np.r_[True, rel[order][1:] != rel[order][:-1]]]
        self.signature = {int(rel[i]): (int(pairs[i, 0]), int(pairs[i, 1])) for i in first}


class FedNSLKGStrategy(Strategy):
    """Server of fednsl-kg (module docstring)."""

    def __init__(
        self,
        cfg: FedNSLKGConfig,
        relations: Sequence[str],
        clients: Sequence[str],
        seed: int,
        *,
        types: Sequence[str] = (),
        rounds: int = 1,
        planted: Sequence[tuple[int, Sequence[int]]] = (),
        meta: Mapping[str, Any] | None = None,
    ):
        self.cfg = cfg
        self.relations = tuple(relations)
        self.R = len(self.relations)
        self.types = tuple(types)
        self.T = max(1, len(self.types))
        self.seed = int(seed)
        self.rounds = int(rounds)
        self.meta = dict(meta or {})
        self.planted = [(int(h), tuple(int(b) for b in body)) for h, body in planted]
        g = cfg.gen
        self.gen_config = GeneratorConfig(
            num_relations=self.R,
            num_types=self.T,
            max_body_len=cfg.max_body_len,
            d_model=g.d_model,
            nhead=g.nhead,
            num_encoder_layers=g.num_encoder_layers,
            num_decoder_layers=g.num_decoder_layers,
            dim_feedforward=g.dim_feedforward,
            dropout=g.dropout,
            positional=g.positional,
        )
        ids = sorted(clients)
        groups = {c: [c] for c in ids} if cfg.local_only else {GLOBAL: ids}
        self.groups = {name: _Group(name, members, self) for name, members in groups.items()}
        self.group_of = {c: name for name, g in self.groups.items() for c in g.members}
        self.initialised = False
        self.last_eval: dict[str, Any] = {}

    # -- stages ----------------------------------------------------------------------------------------------
    def declare_stages(self) -> tuple[Stage, ...]:
        """``train.stats`` (mined rules, round 1 until it succeeds), ``train`` (E-step / M-step), ``evaluate``."""
        return (
            Stage(
                "train.stats",
                self.configure_train_stats,
                self.aggregate_train_stats,
                reply=lambda: stats_schema(self.R, self.T),
                request=Schema(config=("max_body_len",)),
                essential=True,
            ),
            Stage(
                "train", self.configure_train, self.aggregate_train, reply=TRAIN_SCHEMA, request=RULES_REQUEST_SCHEMA
            ),
            Stage("evaluate", self.configure_evaluate, self.aggregate_evaluate, reply=EVAL_SCHEMA, request=Schema()),
        )

    def stages(self, rnd: int) -> Sequence[str]:
        return ("train", "evaluate") if self.initialised else ("train.stats", "train", "evaluate")

    def _by_group(self, replies: Mapping[str, Message]) -> dict[str, dict[str, Message]]:
        out: dict[str, dict[str, Message]] = {}
        for cid, msg in replies.items():
            out.setdefault(self.group_of[cid], {})[cid] = msg
        return out

    # -- round 1: mined rules --------------------------------------------------------------------------------
    def configure_train_stats(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train.stats", rnd, config={"max_body_len": self.cfg.max_body_len})

    def aggregate_train_stats(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        t0 = time.perf_counter()
        losses = []
        for name, group_replies in self._by_group(replies).items():
            group = self.groups[name]
            group.set_signature(list(group_replies.values()), self.T)
            dists, weights = [], []
            for msg in group_replies.values():
                a = msg.arrays
                d: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
                for r, row, sup in zip(a["heads"].tolist(), a["bodies"], a["support"].tolist()):
                    if not 0 <= r < self.R:
                        raise ValueError(f"client {msg.sender}: mined head {r} outside 0..{self.R - 1}")
                    body = strip(row, self.R)
                    if body:
                        d.setdefault(group.key(r), {})[body] = float(sup) + 1.0  # add-one: every mined body stays
                dists.append(d)
                weights.append({group.key(r): float(n) for r, n in enumerate(a["instances"].tolist())})
            agg = aggregate_distributions(dists, weights)
            group.pool = RulePool.from_distributions(agg, self.R, self.cfg.max_body_len)
            losses += self._train_generator(group, rnd, self.cfg.gen.pretrain_epochs, "pretrain")
        if all(len(g.pool) == 0 for g in self.groups.values()):
            raise RuntimeError(
                f"round {rnd}: no client mined any rule (replies {sorted(replies)}, failures "
                f"{dict(failures)}); fednsl-kg cannot build its rule pool"
            )
        self.initialised = True
        return {
            "heads": sum(len(g.pool) for g in self.groups.values()),
            "pool_chains": sum(g.pool.num_chains for g in self.groups.values()),
            "pretrain_loss": float(np.mean(losses)) if losses else 0.0,
            "time_generator_s": time.perf_counter() - t0,
        }

    def _train_generator(self, group: _Group, rnd: int, epochs: int, purpose: str) -> list[float]:
        if epochs <= 0 or group.pool.num_chains == 0:
            return []
        g = self.cfg.gen
        with torch_threads(self.cfg.num_threads):
            losses = train_generator(
                group.model,
                group.pool,
                epochs=epochs,
                batch_size=g.batch_size,
                lr=g.lr,
                samples_per_epoch=g.samples_per_epoch,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, f"{purpose}:{group.name}")),
                uniform_mix=g.uniform_mix,
                lr_gamma=g.lr_gamma,
            )
        group.last_gen_loss = losses[-1] if losses else None
        return losses[-1:]

    # -- proposals (Eq. 5) ------------------------------------------------------------------------------------
    def propose(self, group: _Group, rnd: int) -> Proposal:
        """Per head of the pool: its top ``pool_top`` bodies, then T_θ's sampled bodies by count, ≤ ``max_bodies``."""
        c = self.cfg
        heads = [t[0] for t in group.pool.triples]
        triples = torch.tensor([group.key(h) for h in heads], dtype=torch.long).reshape(-1, 3)
        with torch_threads(c.num_threads):
            sampled = sample_rules(
                group.model,
                triples,
                c.num_samples,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, f"sample:{group.name}")),
            )
        per_head: list[list[tuple[int, ...]]] = []
        per_counts: list[list[int]] = []
        for t, h in enumerate(heads):
            dist = group.pool.distribution(group.key(h))
            chosen = [b for b, _ in sorted(dist.items(), key=lambda kv: (-kv[1], kv[0]))][: c.pool_top]
            cnt = dict.fromkeys(chosen, 0)
            bodies_t, _, counts_t = sampled.per_triple()[t]
            for row, n in zip(bodies_t.tolist(), counts_t.tolist()):
                body = strip(row, self.R)
                if body in cnt:
                    cnt[body] += int(n)
                elif len(cnt) < c.max_bodies:
                    cnt[body] = int(n)
            per_head.append(list(cnt)[: c.max_bodies])
            per_counts.append([cnt[b] for b in per_head[-1]])
        T, J, L = len(heads), max((len(b) for b in per_head), default=1), c.max_body_len
        bodies = np.full((T, J, L), 2 * self.R, dtype=np.int64)
        mask = np.zeros((T, J), dtype=bool)
        counts = np.zeros((T, J), dtype=np.int64)
        for t, bs in enumerate(per_head):
            bodies[t, : len(bs)] = pad_bodies(bs, self.R, L)
            mask[t, : len(bs)] = True
            counts[t, : len(bs)] = per_counts[t]
        log_prior = np.zeros((T, J), dtype=np.float64)
        if T:
            group.model.eval()
            with torch.no_grad(), torch_threads(c.num_threads):
                flat = torch.from_numpy(bodies.reshape(T * J, L))
                lp = group.model.log_prob(triples.repeat_interleave(J, 0), flat).reshape(T, J).double()
            lp = lp.masked_fill(~torch.from_numpy(mask), float("-inf"))
            lp = torch.log_softmax(lp, dim=1)  # T_θ renormalised over the proposed bodies
            log_prior = torch.where(torch.from_numpy(mask), lp, torch.zeros_like(lp)).numpy()
        return Proposal(np.asarray(heads, dtype=np.int64), bodies, log_prior, counts, mask)

    def _proposal(self, group: _Group, rnd: int) -> Proposal:
        if group.proposal is None or group.proposal_round != rnd:
            group.proposal = self.propose(group, rnd)
            group.proposal_round = rnd
        return group.proposal

    def configure_train(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        if not self.initialised:
            raise RuntimeError("fednsl-kg: the rule pool is empty; train.stats must run first")
        out = {}
        for cid in clients:
            p = self._proposal(self.groups[self.group_of[cid]], rnd)
            out[cid] = Message(
                "train", rnd, arrays=p.arrays(), config={"use_prior": True, "counts": self._counts_round(rnd)}
            )
        return out

    def _counts_round(self, rnd: int) -> bool:
        return self.cfg.counts == "every" or (self.cfg.counts == "last" and rnd >= self.rounds)

    # -- M-step ------------------------------------------------------------------------------------------------
    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        t0 = time.perf_counter()
        updated, losses = 0, []
        for name, group_replies in self._by_group(replies).items():
            group = self.groups[name]
            p = self._proposal(group, rnd)
            T, J = p.mask.shape
            num = np.zeros((T, J))
            den = np.zeros(T)
            counts = {f: np.zeros((T, J), dtype=np.int64) for f in COUNT_FIELDS}
            for cid, msg in group_replies.items():
                a = msg.arrays
                if a["posterior"].shape != (T, J):
                    raise ValueError(
                        f"client {cid}: posterior has shape {a['posterior'].shape}, the round's rules {(T, J)}"
                    )
                m = a["mask"].astype(bool) & p.mask
                n = a["instances"].astype(np.float64) * m.any(1)
                num += np.where(m, a["posterior"], 0.0) * n[:, None]
                den += n
                for f in COUNT_FIELDS:
                    counts[f] += np.where(p.mask, a[f], 0)
            has = den > 0
            agg = np.where(has[:, None], num / np.maximum(den, 1e-300)[:, None], 0.0)
            agg[has] /= agg[has].sum(1, keepdims=True)
            posteriors = {}
            for t in np.nonzero(has)[0].tolist():
                posteriors[group.key(int(p.heads[t]))] = {
                    strip(p.bodies[t, j], self.R): float(agg[t, j])
                    for j in np.nonzero(p.mask[t])[0].tolist()
                    if agg[t, j] > 0
                }
            group.pool.update(
                posteriors,
                self.cfg.pool_mode,  # type: ignore[arg-type]
                self.cfg.pool_ratio,
                num_samples=self.cfg.num_samples,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, f"pool:{name}")),
            )
            losses += self._train_generator(group, rnd, self.cfg.gen.epochs, "generator")
            self._record(group, rnd, p, agg, has, group_replies, counts if self._counts_round(rnd) else None)
            updated += int(has.sum())
        return {
            "heads_updated": updated,
            "pool_chains": sum(g.pool.num_chains for g in self.groups.values()),
            "generator_loss": float(np.mean(losses)) if losses else 0.0,
            "time_aggregate_s": time.perf_counter() - t0,
        }

    def _record(
        self,
        group: _Group,
        rnd: int,
        p: Proposal,
        agg: np.ndarray,
        has: np.ndarray,
        replies: Mapping[str, Message],
        counts: Mapping[str, np.ndarray] | None,
    ) -> None:
        for t, r in enumerate(p.heads.tolist()):
            m = p.mask[t]
            if not m.any():
                continue
            key = group.key(r)
            group.store.add_triple(
                key,
                p.bodies[t][m],
                np.exp(p.log_prior[t][m]),
                log_prior=p.log_prior[t][m],
                sample_counts=p.counts[t][m],
                round=rnd,
            )
            if has[t]:
                group.store.record_global(key, agg[t][m])
            for cid, msg in replies.items():
                a = msg.arrays
                cm = a["mask"][t].astype(bool) & m
                if not cm.any():
                    continue
                c = None if counts is None else RuleCounts(*(a[f][t][m] for f in COUNT_FIELDS))
                group.store.record_client(key, cid, a["posterior"][t][m], n_instances=int(a["instances"][t]), counts=c)
            if counts is not None:
                group.store.set_counts(key, RuleCounts(*(counts[f][t][m] for f in COUNT_FIELDS)))

    # -- evaluation --------------------------------------------------------------------------------------------
    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        total = RankingMetrics()
        per_client: dict[str, dict[str, float]] = {}
        for cid, msg in replies.items():
            m = decode_rank_sums(msg.arrays["rank_sums"], int(msg.metrics["queries"]))
            total.merge(m)
            per_client[cid] = {f"test_{k}": v for k, v in m.compute().items()}
        agg = total.compute()
        out: Metrics = {f"test_{k}": float(v) for k, v in agg.items() if not math.isnan(v)}
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

    def evaluate(self, rnd: int) -> Metrics:
        if not self.planted or self.cfg.local_only:
            return {}
        g = self.groups[GLOBAL]
        recall, _ = planted_recall(g.pool.distributions(), self.planted, self.cfg.top_k, g.signature)
        return {} if math.isnan(recall) else {f"planted_recall_top{self.cfg.top_k}": recall}

    def summary_metrics(self) -> dict[str, Any]:
        """Top-level entries of summary.json: the final aggregate test metrics and the per-client ones."""
        return dict(self.last_eval)

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        groups = {}
        for name, g in self.groups.items():
            groups[name] = {
                "model": {k: v.clone() for k, v in g.model.state_dict().items()},
                "pool": g.pool.state_dict(),
                "store": json.dumps(g.store.to_json(), allow_nan=False),
                "proposal": None
                if g.proposal is None
                else {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in vars(g.proposal).items()},
                "proposal_round": g.proposal_round,
                "signature": json.dumps(sorted((r, *t) for r, t in g.signature.items())),
            }
        return {"groups": groups, "initialised": self.initialised, "last_eval": json.dumps(self.last_eval)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, gs in state["groups"].items():
            g = self.groups[name]
            g.model.load_state_dict(gs["model"])
            g.pool.load_state_dict(gs["pool"])
            g.store = RuleStore.from_json(json.loads(gs["store"]))
            g.proposal = (
                None if gs["proposal"] is None else Proposal(**{k: v.numpy() for k, v in gs["proposal"].items()})
            )
            g.proposal_round = int(gs["proposal_round"])
            g.signature = {int(r): (int(th), int(tt)) for r, th, tt in json.loads(gs.get("signature", "[]"))}
        self.initialised = bool(state["initialised"])
        self.last_eval = json.loads(state["last_eval"])

    # -- outputs ---------------------------------------------------------------------------------------------
    def finalize(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        for name, g in self.groups.items():
            if self.planted and not self.cfg.local_only:
                recall, hits = planted_recall(g.pool.distributions(), self.planted, self.cfg.top_k, g.signature)
                g.store.meta[f"planted_recall_top{self.cfg.top_k}"] = None if math.isnan(recall) else recall
                g.store.meta["planted_rules"] = [
                    {"rule": g.store.rule_text(g.key(h), b), "in_top_k": hit} for (h, b), hit in zip(self.planted, hits)
                ]
            g.store.meta["test"] = {k: v for k, v in self.last_eval.items() if k != "clients"}
            g.store.save(run_dir if name == GLOBAL else run_dir / "local" / name)
