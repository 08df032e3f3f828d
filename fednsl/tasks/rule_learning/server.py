"""The one rule-learning server of FedNSL (Algorithm 1 lines 12–15), under both rule learners: ``fednsl``
(documents) and ``fednsl-kg`` (knowledge graphs) subclass :class:`RuleLearningStrategy` and fill in its hooks.

A round, per :class:`Learner` (T_θ, its rule pool, its rule store and the round's proposal):

1. ``train.stats`` (round 1, until it succeeds): clients send rule statistics; :meth:`~RuleLearningStrategy.read_stats`
   (hook) turns each reply into per-head body distributions and instance weights; the server averages them over
   clients (spec §8.9, :func:`rules.pool.aggregate_distributions`) into the pool and pre-trains T_θ on it (Eq. 6);
2. ``train``: :meth:`~RuleLearningStrategy.propose` (hook) draws the round's :class:`.Proposal` (Eq. 5), sent with
   :meth:`~RuleLearningStrategy.train_config` (hook); clients reply posteriors (E-step, :mod:`rules.posterior`);
3. the update (M-step): per head the instance-weighted mean of the clients' posteriors (each row renormalised over
   the bodies the server sent), mixed into the pool (LogiRE momentum or the A.10 mixture), T_θ retrained on the
   pool (Eq. 6), everything recorded in the :class:`rules.store.RuleStore`; :meth:`~RuleLearningStrategy.after_update`
   (hook) keeps what a method needs beside (the documents' published scorer);
4. ``evaluate``: the method's own stage (:meth:`~RuleLearningStrategy.evaluate_stage`), plus the recall of known
   rules (planted or golden) among the top-k bodies of the shared pool (:meth:`~RuleLearningStrategy.evaluate`).

Learners: one shared learner (:data:`GLOBAL`) for all clients, or one per client (``local_only``: each client
alone, its rules saved under ``RUN_DIR/local/<client>/``). All server randomness derives from (run seed, round,
purpose); a learner's purposes carry its name when ``scoped`` (the KG server's), else the names the documents
server has always used, so that both reproduce their earlier runs seed for seed.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
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
from fednsl.tasks.rule_learning.options import ServerOptions
from fednsl.tasks.rule_learning.proposal import PROPOSAL_SCHEMA, Proposal, strip
from fednsl.tasks.rule_learning.recall import rule_ranks
from kg.seeding import derive_seed
from rules.generator import RuleGenerator, SampledRules, TypeConstraints, sample_rules, train_generator
from rules.measures import RuleCounts
from rules.pool import RulePool, aggregate_distributions
from rules.posterior import normalise_rows
from rules.store import RuleStore

__all__ = [
    "DEGENERATE_MASS",
    "GLOBAL",
    "Learner",
    "RuleLearningStrategy",
    "Stats",
    "Update",
    "degenerate_priors",
    "posterior_prior_tv",
]

GLOBAL = "global"
#: A head's prior is degenerate when one body holds at least this share of the renormalised T_θ.
DEGENERATE_MASS = 0.999

log = logging.getLogger("fednsl.tasks.rule_learning")

Head = tuple[int, int, int]
#: one client's round-1 statistics: {head: {body: weight}} and {head: instance weight}
Stats = tuple[dict[Head, dict[tuple[int, ...], float]], dict[Head, float]]


@dataclass
class Update:
    """One learner's round after the posterior mean: its proposal, the replies, each reply's posterior renormalised
    over the bodies sent (T, J) with its instance weight per head (T,) (:meth:`RuleLearningStrategy.client_posterior`),
    the aggregated posterior ``agg`` (T, J) and ``has`` (T,) the heads some client answered for."""

    learner: Learner
    rnd: int
    proposal: Proposal
    replies: Mapping[str, Message]
    posteriors: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    agg: torch.Tensor
    has: torch.Tensor


def posterior_prior_tv(agg: torch.Tensor, p: Proposal) -> torch.Tensor:
    """(T,) total-variation distance ½ Σ_j |q_tj − p_θ(j)| between the aggregated posterior ``agg`` (T, J) and the
    server's prior of the proposal (T_θ renormalised over each head's bodies): how much the clients' E-step
    (Eq. 9–11) moved the distribution the M-step (Eq. 6) trains on. 0 = the clients sent the prior back."""
    return 0.5 * (agg.double() - p.prior("renormalised").double()).abs().sum(-1)


def degenerate_priors(p: Proposal) -> torch.Tensor:
    """(T,) bool: heads with at least two bodies whose renormalised prior puts ≥ :data:`DEGENERATE_MASS` on one."""
    return (p.mask.sum(-1) >= 2) & (p.prior("renormalised").amax(-1) >= DEGENERATE_MASS)


class Learner:
    """Server state of one group of clients: T_θ, its pool and rule store, the round's proposal."""

    def __init__(self, name: str, members: Sequence[str], server: RuleLearningStrategy, scoped: bool):
        self.name, self.members, self.scoped = name, tuple(members), scoped
        s = server
        init = torch.Generator().manual_seed(derive_seed(s.seed, 0, self.purpose("init")))
        self.model = RuleGenerator(s.gen_config, init)
        self.pool = RulePool(s.R, s.cfg.max_body_len)
        self.signature: dict[int, tuple[int, int]] = {}  # relation -> (domain type, range type); typed KGs
        self.constraints: TypeConstraints | None = None
        group = {"group": name} if scoped else {}
        self.store = RuleStore(
            s.relations,
            s.types or None,
            body_length=s.cfg.max_body_len,
            meta={"method": s.method_name, "seed": s.seed, **group, **s.meta},
        )
        self.proposal: Proposal | None = None
        self.proposal_round = 0
        self.degenerate = 0  # heads of the proposal with a one-body prior
        self.last_gen_loss: float | None = None

    def purpose(self, what: str) -> str:
        """The seed purpose of ``what`` (init, pretrain, generator, sample, pool) for this learner."""
        if self.scoped:
            return f"{what}:{self.name}"
        return "generator-init" if what == "init" else what

    def key(self, r: int) -> Head:
        """The rule-head category of relation r: (r, domain type, range type) (0, 0 untyped)."""
        return (int(r), *self.signature.get(int(r), (0, 0)))

    def heads(self) -> torch.Tensor:
        """(T, 3) the pool's heads, sorted: the rows of every proposal."""
        return torch.tensor(self.pool.triples, dtype=torch.long).reshape(-1, 3)


class RuleLearningStrategy(Strategy):
    """FedNSL's server loop (module docstring). Subclasses set :attr:`method_name` and :attr:`unit` and implement
    :meth:`read_stats`, :meth:`propose`, :meth:`train_config` and :meth:`evaluate_stage`."""

    method_name = "rule-learning"
    unit = "heads"  # what a pool row is called in the metrics ("heads_updated", "triples_updated", …)
    scoped = True  # learners' seed purposes carry their name

    def __init__(
        self,
        cfg: ServerOptions,
        relations: Sequence[str],
        types: Sequence[str],
        clients: Sequence[str],
        seed: int,
        *,
        local_only: bool = False,
        reference_rules: Sequence[tuple[int, Sequence[int]]] = (),
        reference_kind: str = "planted",
        meta: Mapping[str, Any] | None = None,
    ):
        self.cfg = cfg
        self.relations = tuple(relations)
        self.R = len(self.relations)
        self.types = tuple(types)
        self.T = max(1, len(self.types))
        self.seed = int(seed)
        self.meta = dict(meta or {})
        self.reference = [(int(h), tuple(int(b) for b in body)) for h, body in reference_rules]
        self.reference_kind = reference_kind
        self.gen_config = cfg.gen.model_config(self.R, self.T, cfg.max_body_len)
        ids = sorted(clients)
        groups = {c: [c] for c in ids} if local_only else {GLOBAL: ids}
        self.learners = {name: Learner(name, members, self, self.scoped) for name, members in groups.items()}
        self.learner_of = {c: name for name, g in self.learners.items() for c in g.members}
        self.initialised = False

    # -- hooks ---------------------------------------------------------------------------------------------------
    def stats_schema(self) -> Schema:
        """The ``train.stats`` reply schema (bound to the server's vocabulary)."""
        raise NotImplementedError

    def read_stats(self, learner: Learner, rnd: int, replies: Mapping[str, Message], metrics: Metrics) -> list[Stats]:
        """Each reply's round-1 statistics (in reply order); may set ``learner.signature`` and add metrics."""
        raise NotImplementedError

    def propose(self, learner: Learner, rnd: int) -> Proposal:
        """The round's proposal of ``learner`` (Eq. 5); :meth:`sample` draws T_θ's bodies."""
        raise NotImplementedError

    def train_config(self, rnd: int) -> dict[str, Any]:
        """The config of the ``train`` request (sent with the proposal)."""
        raise NotImplementedError

    def train_schema(self) -> Schema:
        """The ``train`` reply schema: at least ``posterior`` (T, J), ``mask`` (T, J), ``instances`` (T,)."""
        raise NotImplementedError

    def train_arrays(self, learner: Learner, rnd: int, p: Proposal) -> dict[str, np.ndarray]:
        """Arrays sent with the proposal beside its own (declared in :meth:`train_request_schema`)."""
        return {}

    def train_request_schema(self) -> Schema:
        """The ``train`` request schema: the proposal's, plus what :meth:`train_arrays` adds."""
        return PROPOSAL_SCHEMA

    def evaluate_stage(self) -> Stage:
        """The method's ``evaluate`` stage."""
        raise NotImplementedError

    def refuse(self, learner: Learner, rnd: int, cid: str, msg: Message) -> str | None:
        """Why a ``train`` reply cannot be used (counts beyond what the server knows of the client), or None."""
        return None

    def rule_counts(self, rnd: int, msg: Message, t: int, m: np.ndarray) -> RuleCounts | None:
        """A client's AMIE counts of head row ``t``'s bodies ``m`` for the rule store, if it sends them."""
        return None

    def after_update(self, u: Update) -> Metrics:
        """Called after the posterior mean of a round (before the pool update); returns extra metrics."""
        return {}

    def store_meta(self, learner: Learner) -> dict[str, Any]:
        """Entries added to a learner's rule-store meta when the run ends."""
        return {}

    def write_outputs(self, run_dir: Path) -> None:
        """Files a method writes beside the rule stores when the run ends."""

    def extra_state(self) -> dict[str, Any]:
        """Method state kept in checkpoints beside the learners'."""
        return {}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`extra_state`."""

    # -- stages ----------------------------------------------------------------------------------------------
    def declare_stages(self) -> tuple[Stage, ...]:
        """``train.stats`` (round 1 until it succeeds), ``train`` (E-step / M-step), ``evaluate``."""
        return (
            Stage(
                "train.stats",
                self.configure_train_stats,
                self.aggregate_train_stats,
                reply=self.stats_schema,
                request=Schema(config=("max_body_len",)),
                essential=True,
            ),
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=self.train_schema,
                request=self.train_request_schema,
            ),
            self.evaluate_stage(),
        )

    def stages(self, rnd: int) -> Sequence[str]:
        return ("train", "evaluate") if self.initialised else ("train.stats", "train", "evaluate")

    def by_learner(self, replies: Mapping[str, Message]) -> dict[str, dict[str, Message]]:
        """Replies grouped by learner name (reply order kept)."""
        out: dict[str, dict[str, Message]] = {}
        for cid, msg in replies.items():
            name = self.learner_of.get(cid, GLOBAL)  # a client unknown at start joins the shared learner
            if name not in self.learners:
                log.warning("a reply from client %s, which belongs to no learner, was ignored", cid)
                continue
            out.setdefault(name, {})[cid] = msg
        return out

    @property
    def shared(self) -> Learner | None:
        """The learner of all clients, or None under ``local_only``."""
        return self.learners.get(GLOBAL)

    # -- round 1: statistics → pool → pre-training (Eq. 6) --------------------------------------------------------
    def configure_train_stats(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train.stats", rnd, config={"max_body_len": self.cfg.max_body_len})

    def aggregate_train_stats(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        metrics: Metrics = {}
        losses: list[float] = []
        t0 = time.perf_counter()
        for name, group in self.by_learner(replies).items():
            learner = self.learners[name]
            stats = self.read_stats(learner, rnd, group, metrics)
            agg = aggregate_distributions([d for d, _ in stats], [w for _, w in stats])
            learner.pool = RulePool.from_distributions(agg, self.R, self.cfg.max_body_len)
            self._set_constraints(learner)
            losses += self._train_generator(learner, rnd, self.cfg.gen.pretrain_epochs, "pretrain")[-1:]
        if all(len(g.pool) == 0 for g in self.learners.values()):
            raise RuntimeError(
                f"round {rnd}: no client sent any rule (replies {sorted(replies)}, failures {dict(failures)}); "
                f"{self.method_name} cannot build its rule pool"
            )
        self.initialised = True
        return {
            self.unit: sum(len(g.pool) for g in self.learners.values()),
            "pool_chains": sum(g.pool.num_chains for g in self.learners.values()),
            "pretrain_loss": float(np.mean(losses)) if losses else 0.0,
            "time_generator_s": time.perf_counter() - t0,
            **metrics,
        }

    def _set_constraints(self, learner: Learner) -> None:
        if self.cfg.gen.type_constraints and len(learner.pool):
            learner.constraints = TypeConstraints.from_pairs(learner.pool.triples, self.R, self.T, "any")
        else:
            learner.constraints = None

    def _train_generator(self, learner: Learner, rnd: int, epochs: int, purpose: str) -> list[float]:
        if epochs <= 0 or learner.pool.num_chains == 0:
            return []
        g = self.cfg.gen
        with torch_threads(self.cfg.num_threads):
            losses = train_generator(
                learner.model,
                learner.pool,
                epochs=epochs,
                batch_size=g.batch_size,
                lr=g.lr,
                samples_per_epoch=g.samples_per_epoch,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, learner.purpose(purpose))),
                uniform_mix=g.uniform_mix,
                lr_gamma=g.lr_gamma,
            )
        learner.last_gen_loss = losses[-1] if losses else None
        return losses

    # -- proposals (Eq. 5) -----------------------------------------------------------------------------------------
    def sample(self, learner: Learner, rnd: int) -> SampledRules:
        """N ancestral samples of T_θ per pool head (type-constrained when the options say so)."""
        gen = torch.Generator().manual_seed(derive_seed(self.seed, rnd, learner.purpose("sample")))
        with torch_threads(self.cfg.num_threads):
            return sample_rules(
                learner.model, learner.heads(), self.cfg.num_samples, generator=gen, constraints=learner.constraints
            )

    def proposal(self, learner: Learner, rnd: int) -> Proposal:
        """The round's proposal of ``learner`` (drawn once per round)."""
        if learner.proposal is None or learner.proposal_round != rnd:
            learner.proposal = self.propose(learner, rnd)
            learner.proposal_round = rnd
            self._check_prior(learner, rnd, learner.proposal)
        return learner.proposal

    def _check_prior(self, learner: Learner, rnd: int, p: Proposal) -> None:
        """Log (one line) and count the heads whose prior puts all mass on one body: their KL pulls every posterior
        onto that body (``degenerate_priors`` in the round's metrics)."""
        bad = degenerate_priors(p)
        learner.degenerate = int(bad.sum())
        if learner.degenerate:
            log.warning(
                "round %d: the server prior puts >= %.3f of its mass on one body for %d %s (e.g. %s); their KL pulls "
                "every posterior onto that body; the round goes on",
                rnd,
                DEGENERATE_MASS,
                learner.degenerate,
                self.unit,
                _examples(learner, p, bad),
            )

    def configure_train(self, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        if not self.initialised:
            raise RuntimeError(f"{self.method_name}: the rule pool is empty; train.stats must run first")
        config = self.train_config(rnd)
        msgs = {}
        for name, g in self.learners.items():
            if any(c in clients for c in g.members):
                p = self.proposal(g, rnd)
                arrays = {**p.to_arrays(), **self.train_arrays(g, rnd, p)}
                msgs[name] = Message("train", rnd, arrays=arrays, config=config)
        return {c: msgs[self.learner_of[c]] for c in clients}

    # -- the update (M-step) -------------------------------------------------------------------------------------
    @staticmethod
    def client_posterior(p: Proposal, cid: str, msg: Message) -> tuple[torch.Tensor, torch.Tensor, int]:
        """A reply's posterior (T, J) renormalised over the bodies sent, its weight per head (T,) (instances where
        it has a posterior, else 0) and the number of entries it put on bodies the server did not send."""
        q = torch.as_tensor(np.asarray(msg.arrays["posterior"]), dtype=torch.float64)
        m = torch.as_tensor(np.asarray(msg.arrays["mask"]), dtype=torch.bool)
        n = torch.as_tensor(np.asarray(msg.arrays["instances"]), dtype=torch.float64)
        if q.shape != p.mask.shape:
            raise ValueError(
                f"client {cid}: posterior has shape {tuple(q.shape)}, the round's rules {tuple(p.mask.shape)}"
            )
        stray = int((m & ~p.mask).sum())
        m = m & p.mask
        use = m.any(-1) & (n > 0)
        return normalise_rows(q, m), n * use, stray

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        t0 = time.perf_counter()
        updated = orphans = stray = 0
        losses: list[float] = []
        extra: Metrics = {}
        gen_s = 0.0
        refused = 0
        tv: list[torch.Tensor] = []
        for name, group in self.by_learner(replies).items():
            learner = self.learners[name]
            p = self.proposal(learner, rnd)
            T, J = p.mask.shape
            for cid, msg in list(group.items()):
                reason = self.refuse(learner, rnd, cid, msg)
                if reason is not None:
                    log.warning("round %d: the train reply of client %s is left out: %s", rnd, cid, reason)
                    del group[cid]
                    refused += 1
            num = torch.zeros(T, J, dtype=torch.float64)
            den = torch.zeros(T, dtype=torch.float64)
            posts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
            for cid, msg in group.items():
                q, w, s = self.client_posterior(p, cid, msg)
                num += q * w[:, None]
                den += w
                stray += s
                posts[cid] = (q, w)
            has = den > 0
            agg = torch.where(has[:, None], num / den.clamp_min(1e-300)[:, None], torch.zeros_like(num))
            tv.append(posterior_prior_tv(agg, p)[has])
            u = Update(learner, rnd, p, group, posts, agg, has)
            extra.update(self.after_update(u))
            orphans += self._warn_orphans(learner, rnd, p, has)
            keys = p.keys()
            posteriors = {
                keys[t]: {
                    strip(row, self.R): pr
                    for row, pr, mk in zip(p.bodies[t].tolist(), agg[t].tolist(), p.mask[t].tolist())
                    if mk and pr > 0
                }
                for t in torch.nonzero(has).flatten().tolist()
            }
            learner.pool.update(
                posteriors,
                self.cfg.pool_mode,  # type: ignore[arg-type]
                self.cfg.pool_ratio,
                num_samples=self.cfg.pool_samples,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, learner.purpose("pool"))),
            )
            t1 = time.perf_counter()
            losses += self._train_generator(learner, rnd, self.cfg.gen.epochs, "generator")[-1:]
            gen_s += time.perf_counter() - t1
            self._record(u)
            updated += int(has.sum())
        if stray:
            log.warning("round %d: %d posterior entries on bodies the server did not send were ignored", rnd, stray)
        out: Metrics = {
            f"{self.unit}_updated": updated,
            f"{self.unit}_without_owner": orphans,
            "degenerate_priors": sum(g.degenerate for g in self.learners.values()),
            "pool_chains": sum(g.pool.num_chains for g in self.learners.values()),
            "generator_loss": float(np.mean(losses)) if losses else 0.0,
            "time_aggregate_s": time.perf_counter() - t0 - gen_s,
            "time_generator_s": gen_s,
            **extra,
        }
        tvs = torch.cat(tv) if tv else torch.zeros(0, dtype=torch.float64)
        if tvs.numel():
            out["posterior_prior_tv"] = float(tvs.mean())
            out["posterior_prior_tv_max"] = float(tvs.max())
        if stray:
            out["stray_entries"] = stray
        if refused:
            out["replies_refused"] = refused
        return out

    def _warn_orphans(self, learner: Learner, rnd: int, p: Proposal, has: torch.Tensor) -> int:
        orphans = ~has & p.mask.any(-1)
        if bool(orphans.any()):
            log.warning(
                "round %d: %d %s have no owner this round (no client sent a posterior for them, e.g. %s); "
                "their pool entries keep the previous distribution",
                rnd,
                int(orphans.sum()),
                self.unit,
                _examples(learner, p, orphans),
            )
        return int(orphans.sum())

    def _record(self, u: Update) -> None:
        """The round's bodies, prior, aggregated and per-client posteriors (and counts) into the rule store."""
        learner, rnd, p, agg, has = u.learner, u.rnd, u.proposal, u.agg, u.has
        prior = p.prior("renormalised")
        for t, key in enumerate(p.keys()):
            m = p.mask[t]
            if not bool(m.any()):
                continue
            learner.store.add_triple(
                key,
                p.bodies[t][m].numpy(),
                prior[t][m].numpy(),
                log_prior=p.log_prior[t][m].numpy(),
                sample_counts=p.counts[t][m].numpy(),
                round=rnd,
            )
            if bool(has[t]):
                learner.store.record_global(key, agg[t][m].numpy())
            mn = m.numpy()
            counts = {cid: self.rule_counts(rnd, msg, t, mn) for cid, msg in u.replies.items()}
            for cid, (q, w) in u.posteriors.items():
                if w[t] > 0:
                    learner.store.record_client(key, cid, q[t][m].numpy(), n_instances=int(w[t]), counts=counts[cid])
            given = [c for c in counts.values() if c is not None]
            if given:
                learner.store.set_counts(key, functools.reduce(operator.add, given))

    # -- known rules ----------------------------------------------------------------------------------------------
    def evaluate(self, rnd: int) -> Metrics:
        """Recall of the reference (planted / golden) rules among the top-k bodies of the shared pool."""
        if not self.reference or self.shared is None:
            return {}
        ranks = rule_ranks(self.shared.pool.distributions(), self.reference)
        k = self.cfg.top_k
        return {
            f"{self.reference_kind}_recall_top{k}": float(np.mean([r is not None and r <= k for r in ranks])),
            f"{self.reference_kind}_in_pool": float(np.mean([r is not None for r in ranks])),
        }

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        learners = {
            name: {
                "model": {k: v.clone() for k, v in g.model.state_dict().items()},
                "pool": g.pool.state_dict(),
                "store": json.dumps(g.store.to_json(), allow_nan=False),
                "proposal": None if g.proposal is None else g.proposal.to_arrays(),
                "proposal_round": g.proposal_round,
                "signature": json.dumps(sorted((r, *t) for r, t in g.signature.items())),
                "last_gen_loss": g.last_gen_loss,
            }
            for name, g in self.learners.items()
        }
        return {"learners": learners, "initialised": self.initialised, **self.extra_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, gs in state["learners"].items():
            g = self.learners[name]
            g.model.load_state_dict(gs["model"])
            g.pool.load_state_dict(gs["pool"])
            g.store = RuleStore.from_json(json.loads(gs["store"]))
            g.proposal = None if gs["proposal"] is None else Proposal.from_arrays(gs["proposal"])
            g.proposal_round = int(gs["proposal_round"])
            g.signature = {int(r): (int(th), int(tt)) for r, th, tt in json.loads(gs["signature"])}
            g.last_gen_loss = gs.get("last_gen_loss")
            self._set_constraints(g)
        self.initialised = bool(state["initialised"])
        self.load_extra_state(state)

    # -- outputs ---------------------------------------------------------------------------------------------
    def finalize(self, run_dir: Path) -> None:
        """Each learner's rule store (with the reference rules' ranks) under RUN_DIR (local ones under local/),
        then the method's own files."""
        run_dir = Path(run_dir)
        k = self.cfg.top_k
        for name, g in self.learners.items():
            if self.reference and name == GLOBAL:
                ranks = rule_ranks(g.pool.distributions(), self.reference)
                hits = [r is not None and r <= k for r in ranks]
                g.store.meta[f"{self.reference_kind}_recall_top{k}"] = float(np.mean(hits))
                g.store.meta[f"{self.reference_kind}_rules"] = [
                    {"rule": g.store.rule_text(g.key(h), b), "in_top_k": hit, "best_rank": r}
                    for (h, b), hit, r in zip(self.reference, hits, ranks)
                ]
            g.store.meta.update(self.store_meta(g))
            g.store.save(run_dir if name == GLOBAL else run_dir / "local" / name)
        self.write_outputs(run_dir)


def _examples(learner: Learner, p: Proposal, rows: torch.Tensor) -> str:
    """The names of the first three heads of ``p`` where ``rows`` (T,) is true, for a log line."""
    keys = p.keys()
    return ", ".join(learner.store.triple_name(keys[t]) for t in torch.nonzero(rows)[:3, 0].tolist())
