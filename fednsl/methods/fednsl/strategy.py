"""FedNSL server (Algorithm 1 lines 12–15, spec §2): rule generator T_θ, rule pool, aggregation of posteriors.

Round 1 runs ``train.stats`` first (spec §8.8): clients upload their local co-occurrence body distributions
per triple; the server aggregates them (weighted by instances, §8.9) into its rule pool, learns the set of
triples, and pre-trains T_θ on the pool (Eq. 6). Every round then:

1. ``configure_train``: N ancestral samples per triple → J unique bodies, log T_θ and counts n_j (Eq. 5);
2. clients fit their weights and reply posteriors (Eq. 9–11; :mod:`.client`);
3. ``aggregate_train``: per triple the instance-weighted mean of the client posteriors (§8.9), mixed into the
   pool (LogiRE momentum or A.10 mixture), T_θ retrained on the pool (Eq. 6), everything recorded in the
   :class:`rules.store.RuleStore`;
4. ``evaluate``: the server sends the round's aggregated posterior (``global_posterior``) and, under
   ``transfer: published``, the owners' instance-weighted mean scorer; clients report F1 / Ign-F1 / logic
   counts of every evaluated variant (rule model, backbone, recalibration only, both transfer routes) and
   per-document counts; the server sums the counts, averages the F1s (also over the data-poor clients of the
   shared split: ``poor_*``) and keeps the per-document counts of the last round for
   RUN_DIR/eval_documents.npz (the ablation's bootstrap); ``evaluate(rnd)`` adds the recall of planted /
   golden rules among the top-k bodies of the pool.

Bad input that does not stop a round: a triple no client answers for (no owner this round) and a rule set whose
prior puts (almost) all mass on one body are logged with one line each and counted in the round's metrics
(``triples_without_owner``, ``degenerate_priors``).

All server randomness is derived from (run seed, round, purpose), so a resumed run repeats it exactly.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.federation.records import Message, Schema
from fednsl.federation.roles import Metrics, Stage, Strategy
from fednsl.methods.fednsl.config import FedNSLConfig
from fednsl.methods.fednsl.evaluation import f1_from_counts, logic_from_counts
from fednsl.methods.fednsl.messages import (
    EVAL_REQUEST_SCHEMA,
    EVAL_SCHEMA,
    EVAL_VARIANTS,
    RULES_REQUEST_SCHEMA,
    RuleSet,
    rules_from_message,
    rules_to_arrays,
    scorer_config,
    stats_schema,
    train_schema,
)
from fednsl.methods.fednsl.posterior import normalise_rows
from kg.seeding import derive_seed
from rules.generator import GeneratorConfig, RuleGenerator, TypeConstraints, sample_rules, train_generator
from rules.pool import RulePool, aggregate_distributions
from rules.store import RuleStore

__all__ = ["FedNSLStrategy", "rule_ranks", "rule_recall", "degenerate_priors", "DEGENERATE_MASS"]

#: A triple's prior is degenerate when one body holds at least this share of the renormalised T_θ.
DEGENERATE_MASS = 0.999


def degenerate_priors(rules: RuleSet) -> torch.Tensor:
    """(T,) bool: triples with at least two bodies whose renormalised prior puts ≥ DEGENERATE_MASS on one."""
    p = rules.prior("renormalised")
    return (rules.mask.sum(-1) >= 2) & (p.amax(-1) >= DEGENERATE_MASS)


log = logging.getLogger("fednsl.methods.fednsl")


def rule_ranks(
    pool: Mapping[tuple[int, int, int], Mapping[tuple[int, ...], float]],
    rules: Sequence[tuple[int, Sequence[int]]],
) -> list[int | None]:
    """Best 1-based rank of each rule's body (head, body tokens) among the bodies of the triples of its head, or
    None when no triple of the head holds it (the body never entered the pool).

    The trivial pass-through body [head] is left out of the ranking (it is always on top: every labelled fact
    is its own length-1 path). Ties are broken by body tokens, as in the pool's listing.
    """
    out: list[int | None] = []
    for head, body in rules:
        body = tuple(int(b) for b in body)
        best: int | None = None
        for (h, _, _), dist in pool.items():
            if h != head or body not in dist or body == (head,):
                continue
            ranked = [b for b, _ in sorted(dist.items(), key=lambda kv: (-kv[1], kv[0])) if b != (head,)]
            rank = ranked.index(body) + 1
            best = rank if best is None else min(best, rank)
        out.append(best)
    return out


def rule_recall(
    pool: Mapping[tuple[int, int, int], Mapping[tuple[int, ...], float]],
    rules: Sequence[tuple[int, Sequence[int]]],
    k: int,
) -> tuple[float, list[bool]]:
    """Share of ``rules`` (head, body tokens) whose body is among the top-k bodies of some triple of its head
    (:func:`rule_ranks`). Returns (recall, per-rule hit list); NaN recall when ``rules`` is empty."""
    hits = _in_top(rule_ranks(pool, rules), k)
    return (float(np.mean(hits)) if hits else math.nan), hits


def _in_top(ranks: Sequence[int | None], k: int) -> list[bool]:
    return [r is not None and r <= k for r in ranks]


class FedNSLStrategy(Strategy):
    """Server of FedNSL (module docstring)."""

    def __init__(
        self,
        cfg: FedNSLConfig,
        relations: Sequence[str],
        entity_types: Sequence[str],
        seed: int,
        *,
        golden_rules: Sequence[tuple[int, Sequence[int]]] = (),
        golden_kind: str = "golden",
        meta: Mapping[str, Any] | None = None,
        client_roles: Mapping[str, str] | None = None,
    ):
        self.cfg = cfg
        self.client_roles = dict(client_roles or {})
        self.round_aggregate: dict[str, torch.Tensor] | None = None  # the round's aggregate sent at evaluation
        self.aggregate_round = -1
        self.eval_documents: dict[str, dict[str, np.ndarray]] = {}
        self.relations = tuple(relations)
        self.types = tuple(entity_types)
        self.R = len(self.relations)
        self.seed = int(seed)
        self.golden = [(int(h), tuple(int(b) for b in body)) for h, body in golden_rules]
        self.golden_kind = golden_kind
        g = cfg.gen
        self.gen_config = GeneratorConfig(
            num_relations=self.R,
            num_types=max(1, len(self.types)),
            max_body_len=cfg.max_body_len,
            d_model=g.d_model,
            nhead=g.nhead,
            num_encoder_layers=g.num_encoder_layers,
            num_decoder_layers=g.num_decoder_layers,
            dim_feedforward=g.dim_feedforward,
            dropout=g.dropout,
            positional=g.positional,
        )
        self.model = RuleGenerator(
            self.gen_config, torch.Generator().manual_seed(derive_seed(seed, 0, "generator-init"))
        )
        self.pool = RulePool(self.R, cfg.max_body_len)
        self.triples = torch.zeros(0, 3, dtype=torch.long)
        self.constraints: TypeConstraints | None = None
        self.initialised = False
        self.current: RuleSet | None = None
        self.current_round = 0
        self.store = RuleStore(
            self.relations,
            self.types,
            body_length=cfg.max_body_len,
            meta={"method": "fednsl", "seed": self.seed, **dict(meta or {})},
        )
        self.last_gen_loss: float | None = None

    # -- stages ----------------------------------------------------------------------------------------------
    def declare_stages(self) -> tuple[Stage, ...]:
        return (
            Stage(
                "train.stats",
                self.configure_train_stats,
                self.aggregate_train_stats,
                reply=lambda: stats_schema(self.R, len(self.types), self.cfg.max_body_len),
                request=Schema(config=("max_body_len",)),
                essential=True,
            ),
            Stage(
                "train",
                self.configure_train,
                self.aggregate_train,
                reply=train_schema(self.cfg.transfer),
                request=RULES_REQUEST_SCHEMA,
            ),
            Stage(
                "evaluate",
                self.configure_evaluate,
                self.aggregate_evaluate,
                reply=EVAL_SCHEMA,
                request=EVAL_REQUEST_SCHEMA,
            ),
        )

    def stages(self, rnd: int) -> Sequence[str]:
        if not self.initialised:
            return ("train.stats", "train", "evaluate")
        return ("train", "evaluate")

    # -- round 0: co-occurrence statistics ------------------------------------------------------------------
    def configure_train_stats(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train.stats", rnd, config={"max_body_len": self.cfg.max_body_len})

    def aggregate_train_stats(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        dists, weights = [], []
        pad = 2 * self.R
        invalid = 0
        for cid, msg in replies.items():
            a = msg.arrays
            d: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
            w: dict[tuple[int, int, int], float] = {}
            for k, t in enumerate(a["triples"].tolist()):
                t = tuple(int(x) for x in t)
                if not (0 <= t[0] < self.R and 0 <= t[1] < len(self.types) and 0 <= t[2] < len(self.types)):
                    log.warning(
                        "round %d train.stats: client %s sent triple %s outside the vocabulary (R=%d, "
                        "%d types); ignored",
                        rnd,
                        cid,
                        t,
                        self.R,
                        len(self.types),
                    )
                    invalid += 1
                    continue
                body_probs = {}
                for body, p, m in zip(a["bodies"][k].tolist(), a["probs"][k].tolist(), a["mask"][k].tolist()):
                    if m and p > 0:
                        toks = tuple(x for x in body if x != pad)
                        if toks:
                            body_probs[toks] = body_probs.get(toks, 0.0) + float(p)
                if body_probs and int(a["instances"][k]) > 0:
                    d[t] = body_probs
                    w[t] = float(a["instances"][k])
            dists.append(d)
            weights.append(w)
        agg = aggregate_distributions(dists, weights)
        if not agg:
            raise RuntimeError(
                f"round {rnd}: no client uploaded rule statistics (replies from {sorted(replies)}, "
                f"failures {dict(failures)}); FedNSL cannot build its initial rule pool"
            )
        self.pool = RulePool.from_distributions(agg, self.R, self.cfg.max_body_len)
        self.triples = torch.tensor(self.pool.triples, dtype=torch.long).reshape(-1, 3)
        if self.cfg.gen.type_constraints:
            self.constraints = TypeConstraints.from_pairs(self.pool.triples, self.R, max(1, len(self.types)), "any")
        t0 = time.perf_counter()
        losses = self._train_generator(rnd, self.cfg.gen.pretrain_epochs, "pretrain")
        self.initialised = True
        out: Metrics = {
            "triples": len(self.pool),
            "pool_chains": self.pool.num_chains,
            "pretrain_loss": losses[-1] if losses else 0.0,
            "time_generator_s": time.perf_counter() - t0,
        }
        if invalid:
            out["invalid_triples"] = invalid
        return out

    def _train_generator(self, rnd: int, epochs: int, purpose: str) -> list[float]:
        if epochs <= 0 or self.pool.num_chains == 0:
            return []
        g = self.cfg.gen
        with torch_threads(self.cfg.num_threads):
            losses = train_generator(
                self.model,
                self.pool,
                epochs=epochs,
                batch_size=g.batch_size,
                lr=g.lr,
                samples_per_epoch=g.samples_per_epoch,
                generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, purpose)),
                uniform_mix=g.uniform_mix,
                lr_gamma=g.lr_gamma,
            )
        self.last_gen_loss = losses[-1] if losses else None
        return losses

    # -- training round --------------------------------------------------------------------------------------
    def _sample(self, rnd: int) -> RuleSet:
        gen = torch.Generator().manual_seed(derive_seed(self.seed, rnd, "sample"))
        with torch_threads(self.cfg.num_threads):
            s = sample_rules(
                self.model, self.triples, self.cfg.num_samples, generator=gen, constraints=self.constraints
            )
        lp = torch.where(s.mask, s.log_prior.double(), torch.zeros((), dtype=torch.float64))
        rules = RuleSet(self.triples.clone(), s.bodies, lp, s.counts, s.mask)
        self._check_priors(rnd, rules)
        return rules

    def _check_priors(self, rnd: int, rules: RuleSet) -> int:
        """Log (one line) and remember the triples whose prior puts all mass on one body; returns the count."""
        bad = degenerate_priors(rules)
        self.degenerate = int(bad.sum())
        if self.degenerate:
            names = [self.store.triple_name(_triple(rules.triples[t])) for t in torch.nonzero(bad)[:3, 0]]
            log.warning(
                "round %d: the server prior puts >= %.3f of its mass on one body for %d triple(s) (e.g. %s); "
                "their KL pulls every posterior onto that body; the round goes on",
                rnd,
                DEGENERATE_MASS,
                self.degenerate,
                ", ".join(names),
            )
        return self.degenerate

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        if not self.initialised:
            raise RuntimeError("FedNSL: the rule pool is empty; train.stats must run first")
        if self.current is None or self.current_round != rnd:
            self.current = self._sample(rnd)
            self.current_round = rnd
        return Message(
            "train", rnd, arrays=rules_to_arrays(self.current), config=scorer_config(self.cfg.scorer_options())
        )

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        assert self.current is not None
        rules = self.current
        T, J = rules.mask.shape
        t0 = time.perf_counter()
        num = torch.zeros(T, J, dtype=torch.float64)
        den = torch.zeros(T, dtype=torch.float64)
        pub_w = torch.zeros(T, J, dtype=torch.float64)
        pub_b = torch.zeros(T, dtype=torch.float64)
        pub_n = torch.zeros(T, dtype=torch.float64)
        iterations: list[float] = []
        client_post: dict[str, dict[tuple[int, int, int], np.ndarray]] = {}
        client_inst: dict[str, dict[tuple[int, int, int], int]] = {}
        stray = 0
        keys = [tuple(int(x) for x in t) for t in rules.triples.tolist()]
        for cid, msg in replies.items():
            q = torch.as_tensor(msg.arrays["posterior"], dtype=torch.float64)
            m = torch.as_tensor(msg.arrays["mask"], dtype=torch.bool)
            n = torch.as_tensor(msg.arrays["instances"], dtype=torch.float64)
            if q.shape != (T, J):
                raise ValueError(
                    f"client {cid}: posterior has shape {tuple(q.shape)}, the round's rule set is {(T, J)}"
                )
            outside = m & ~rules.mask
            stray += int(outside.sum())
            m = m & rules.mask
            q = normalise_rows(q, m)
            use = m.any(-1) & (n > 0)
            num += q * (n * use)[:, None]
            den += n * use
            if "scorer_weights" in msg.arrays and "scorer_bias" in msg.arrays:
                wgt = n * use
                pub_w += torch.as_tensor(msg.arrays["scorer_weights"], dtype=torch.float64) * rules.mask * wgt[:, None]
                pub_b += torch.as_tensor(msg.arrays["scorer_bias"], dtype=torch.float64) * wgt
                pub_n += wgt
            if "scorer_iterations" in msg.metrics:
                iterations.append(float(msg.metrics["scorer_iterations"]))
            for t in torch.nonzero(use).flatten().tolist():
                client_post.setdefault(cid, {})[keys[t]] = q[t][rules.mask[t]].numpy()
                client_inst.setdefault(cid, {})[keys[t]] = int(n[t])
        has = den > 0
        agg = torch.where(has[:, None], num / den.clamp_min(1e-300)[:, None], torch.zeros_like(num))
        # what evaluation sends back: the aggregated posterior (T_θ renormalised where no client answered) and
        # the owners' instance-weighted mean scorer
        kl_prior = rules.prior("renormalised")
        self.round_aggregate = {
            "global_posterior": torch.where(has[:, None], agg, kl_prior) * rules.mask,
            "published_weights": pub_w / pub_n.clamp_min(1e-300)[:, None],
            "published_bias": pub_b / pub_n.clamp_min(1e-300),
            "published_mask": pub_n > 0,
        }
        self.aggregate_round = rnd
        orphans = ~has & rules.mask.any(-1)
        if bool(orphans.any()):
            names = [self.store.triple_name(keys[t]) for t in torch.nonzero(orphans)[:3, 0].tolist()]
            log.warning(
                "round %d: %d triple(s) have no owner this round (no client sent a posterior for them, e.g. %s); "
                "their pool entries keep the previous distribution",
                rnd,
                int(orphans.sum()),
                ", ".join(names),
            )
        pad = 2 * self.R
        posteriors: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
        for t in torch.nonzero(has).flatten().tolist():
            d = {}
            for body, p, mk in zip(rules.bodies[t].tolist(), agg[t].tolist(), rules.mask[t].tolist()):
                if mk and p > 0:
                    d[tuple(x for x in body if x != pad)] = p
            posteriors[keys[t]] = d
        self.pool.update(
            posteriors,
            self.cfg.pool_mode,  # type: ignore[arg-type]
            self.cfg.pool_ratio,
            num_samples=self.cfg.pool_samples,
            generator=torch.Generator().manual_seed(derive_seed(self.seed, rnd, "pool")),
        )
        t1 = time.perf_counter()
        losses = self._train_generator(rnd, self.cfg.gen.epochs, "generator")
        t2 = time.perf_counter()
        self._record(rnd, rules, agg, has, client_post, client_inst)
        if stray:
            log.warning("round %d: %d posterior entries on bodies the server did not send were ignored", rnd, stray)
        out: Metrics = {
            "triples_updated": int(has.sum()),
            "triples_without_posterior": int(orphans.sum()),
            "triples_without_owner": int(orphans.sum()),
            "degenerate_priors": int(getattr(self, "degenerate", 0)),
            "pool_chains": self.pool.num_chains,
            "generator_loss": losses[-1] if losses else 0.0,
            "time_aggregate_s": t1 - t0,
            "time_generator_s": t2 - t1,
        }
        empty = int((~rules.mask.any(-1)).sum())
        if empty:
            out["triples_without_bodies"] = empty
        if stray:
            out["stray_entries"] = stray
        if iterations:
            out["scorer_iterations_max"] = max(iterations)
            out["scorer_iterations_mean"] = float(np.mean(iterations))
        return out

    def _record(
        self,
        rnd: int,
        rules: RuleSet,
        agg: torch.Tensor,
        has: torch.Tensor,
        client_post: Mapping[str, Mapping[tuple[int, int, int], np.ndarray]],
        client_inst: Mapping[str, Mapping[tuple[int, int, int], int]],
    ) -> None:
        keys = [tuple(int(x) for x in t) for t in rules.triples.tolist()]
        prior = rules.prior("renormalised")
        for t, key in enumerate(keys):
            m = rules.mask[t]
            if not bool(m.any()):
                continue
            self.store.add_triple(
                key,
                rules.bodies[t][m].numpy(),
                prior[t][m].numpy(),
                log_prior=rules.log_prior[t][m].numpy(),
                sample_counts=rules.counts[t][m].numpy(),
                round=rnd,
            )
            if bool(has[t]):
                self.store.record_global(key, agg[t][m].numpy())
            for cid, posts in client_post.items():
                if key in posts:
                    self.store.record_client(key, cid, posts[key], n_instances=client_inst[cid][key])

    # -- evaluation --------------------------------------------------------------------------------------------
    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        if self.current is None or self.current_round != rnd:
            self.current = self._sample(rnd)
            self.current_round = rnd
        arrays = rules_to_arrays(self.current)
        if self.round_aggregate is not None and self.aggregate_round == rnd:
            arrays["global_posterior"] = self.round_aggregate["global_posterior"].numpy()
            if self.cfg.transfer == "published":
                for k in ("published_weights", "published_bias", "published_mask"):
                    arrays[k] = self.round_aggregate[k].numpy()
        return Message("evaluate", rnd, arrays=arrays, config=scorer_config(self.cfg.scorer_options()))

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        out: Metrics = {}
        if not replies:
            return out
        poor = {c for c, role in self.client_roles.items() if role == "poor"}
        groups = [("", dict(replies))]
        if poor:
            groups.append(("poor_", {c: m for c, m in replies.items() if c in poor}))
        for group, reps in groups:
            if reps:
                out.update(self._aggregate_group(group, reps))
        holdout = {k for r in replies.values() for k in r.metrics if k.startswith("holdout_")}
        for k in sorted(holdout):
            out[k] = float(np.mean([r.metrics[k] for r in replies.values() if k in r.metrics]))
        self.eval_documents = {
            cid: {k: np.asarray(v) for k, v in r.arrays.items() if k.startswith(("docs_", "doclogic_"))}
            for cid, r in replies.items()
        }
        return out

    @staticmethod
    def _aggregate_group(group: str, replies: Mapping[str, Message]) -> Metrics:
        """Mean per-client F1 / Ign-F1, micro-F1 and summed logic counts of every variant (prefix ``group``)."""
        out: Metrics = {}
        for prefix in EVAL_VARIANTS:
            for part in ("seen", "unseen"):
                key = f"{prefix}{part}"
                f1s = [r.metrics[f"{key}_f1"] for r in replies.values() if f"{key}_f1" in r.metrics]
                if not f1s:
                    continue
                out[f"{group}{key}_f1"] = float(np.mean(f1s))
                if prefix != "backbone_":
                    out[f"{group}{key}_ign_f1"] = float(
                        np.mean([r.metrics.get(f"{key}_ign_f1", 0.0) for r in replies.values()])
                    )
                    tp = sum(r.metrics.get(f"{key}_tp", 0) for r in replies.values())
                    npred = sum(r.metrics.get(f"{key}_n_pred", 0) for r in replies.values())
                    ngold = sum(r.metrics.get(f"{key}_n_gold", 0) for r in replies.values())
                    out[f"{group}{key}_micro_f1"] = f1_from_counts(tp, npred, ngold)
                name = f"doclogic_body_{key}"
                body = [r.arrays[name].sum(0) for r in replies.values() if name in r.arrays]
                corr = [r.arrays[f"doclogic_correct_{key}"].sum(0) for r in replies.values() if name in r.arrays]
                if body:
                    value = logic_from_counts(np.sum(body, axis=0), np.sum(corr, axis=0))
                    if not math.isnan(value):
                        out[f"{group}{key}_logic"] = value
        return out

    def evaluate(self, rnd: int) -> Metrics:
        if not self.golden:
            return {}
        ranks = rule_ranks(self.pool.distributions(), self.golden)
        k = self.cfg.top_k
        return {
            f"{self.golden_kind}_recall_top{k}": float(np.mean(_in_top(ranks, k))),
            f"{self.golden_kind}_in_pool": float(np.mean([r is not None for r in ranks])),
        }

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.clone() for k, v in self.model.state_dict().items()},
            "pool": self.pool.state_dict(),
            "triples": self.triples.clone(),
            "initialised": self.initialised,
            "current": None if self.current is None else rules_to_arrays(self.current),
            "current_round": self.current_round,
            "store": json.dumps(self.store.to_json(), allow_nan=False),
            "last_gen_loss": self.last_gen_loss,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.pool.load_state_dict(state["pool"])
        self.triples = state["triples"].clone()
        self.initialised = bool(state["initialised"])
        if self.cfg.gen.type_constraints and len(self.pool):
            self.constraints = TypeConstraints.from_pairs(self.pool.triples, self.R, max(1, len(self.types)), "any")
        self.current = None if state["current"] is None else rules_from_message(state["current"])
        self.current_round = int(state["current_round"])
        self.store = RuleStore.from_json(json.loads(state["store"]))
        self.last_gen_loss = state.get("last_gen_loss")

    # -- outputs ---------------------------------------------------------------------------------------------
    def finalize(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        if self.golden:
            ranks = rule_ranks(self.pool.distributions(), self.golden)
            k = self.cfg.top_k
            vocab = self.store.vocab
            hits = _in_top(ranks, k)
            self.store.meta[f"{self.golden_kind}_recall_top{k}"] = float(np.mean(hits))
            self.store.meta[f"{self.golden_kind}_rules"] = [
                {"rule": f"{self.relations[h]} <- {vocab.format_body(b)}", "in_top_k": hit, "best_rank": r}
                for (h, b), hit, r in zip(self.golden, hits, ranks)
            ]
        self.store.meta["pool_top"] = {
            self.store.triple_name(t): [
                [f"{self.relations[t[0]]} <- {self.store.vocab.format_body(b)}", p]
                for b, p in sorted(d.items(), key=lambda kv: -kv[1])[: self.cfg.top_k + 1]
            ]
            for t, d in self.pool.distributions().items()
        }
        self.store.save(run_dir)
        if self.eval_documents:
            flat: dict[str, Any] = {
                f"{cid}/{k}": v for cid, arrs in self.eval_documents.items() for k, v in arrs.items()
            }
            roles = np.array([f"{cid}={self.client_roles.get(cid, 'all')}" for cid in sorted(self.eval_documents)])
            np.savez_compressed(run_dir / "eval_documents.npz", roles=roles, **flat)
        from fednsl.methods.fednsl.plots import plot_fednsl

        plot_fednsl(run_dir)


def _triple(row: Any) -> tuple[int, int, int]:
    """A (head type, relation, tail type) row of ``RuleSet.triples`` as ints."""
    a, r, b = (int(x) for x in row)
    return a, r, b
