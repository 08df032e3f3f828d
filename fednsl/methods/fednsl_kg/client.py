"""fednsl-kg client: mines candidate bodies (round 1), fits the rule predictor on its local KG part and
computes rule posteriors (E-step, FedNSL Eq. 9–11), evaluates filtered ranking on its test part.

Only declared arrays leave the client (:mod:`.messages`): bodies, supports, posteriors, AMIE counts and the
exact sums of its ranking metrics — never a triple, an entity id or a predictor weight.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.methods.fednsl_kg.bodies import merge_directions, mirror, query_rule_sets
from fednsl.methods.fednsl_kg.config import FedNSLKGConfig, check_mining
from fednsl.methods.fednsl_kg.messages import (
    COUNT_FIELDS,
    EVIDENCE_PARTS,
    SIGNATURE_FIELDS,
    encode_rank_sums,
    sum_signatures,
)
from fednsl.tasks.rule_learning import Proposal, pad_bodies
from kg.grounding.sparse import SparseGraph
from kg.linkpred import FilterIndex, RankingMetrics, evaluate_link_prediction
from kg.triples import KnowledgeGraph
from rules.identity import THRESHOLD, canonical_body, equivalences
from rules.kg_mining import mine_chain_rule_support, rank_heads_bodies
from rules.kg_predictor import CHOICE_KEYS, PredictorConfig, RulePredictor, counted_paths
from rules.measures import RuleCounts
from rules.posterior import posterior_from_scores
from rules.workers import spawn_map, workers_pay

logger = logging.getLogger(__name__)


__all__ = ["FedNSLKGClient", "Scorer", "amie_counts", "mine_forward_rules", "one_per_identity", "type_signature_counts"]


def mine_forward_rules(
    graph: SparseGraph, train: np.ndarray, max_len: int, seed: int, options: Mapping[str, Any]
) -> dict[int, dict[tuple[int, ...], int]]:
    """Mined bodies with supports per forward head r (0..R-1): the inverse head r+R's bodies are mirrored onto r
    and their supports added. ``options``: ``max_rules_per_head`` (default 200, after merging), ``min_support``
    (default 1), ``rank_by`` (``support``, the default, or ``confidence``: the ``pool_per_head`` best supported
    bodies (default 1000) re-ranked by AMIE confidence on the local graph before the cap, counted from at most
    ``confidence_starts`` sampled start entities — the order of ``rules.kg_mining.mine_chain_rules``; with
    ``pool_by_length`` the pool holds the ``pool_per_head`` best supported bodies of each length),
    ``identity`` (default false: when true, one body per rule identity before the cap — bodies equal up to the
    symmetric and inverse relations measured on ``train`` at ``identity_threshold``, default
    :data:`rules.identity.THRESHOLD` (:func:`rules.identity.equivalences`), are one body, :func:`one_per_identity` — so
    that spellings of one rule do not crowd the cap; a KG without such relations mines exactly as without it),
    ``workers`` (default 1: mine the heads in this many worker processes, the same result: every head samples
    from its own seed) and the keyword arguments of :func:`rules.kg_mining.mine_chain_rule_support`."""
    check_mining(options)
    opts = dict(options)
    workers = int(opts.pop("workers", 1))
    train = np.asarray(train)
    R = graph.num_relations
    eq = None
    if opts.pop("identity", False):
        eq = equivalences(train, R, float(opts.pop("identity_threshold", THRESHOLD)))
    opts.pop("identity_threshold", None)
    job = (graph, train, max_len, seed, opts, eq)
    if workers == 1 or R < 2:
        return _mine_relations(job, list(range(R)))
    # the relations dealt out by their facts (the work of mining their two heads) into 4 groups a worker, the
    # busiest first, which the workers take as they become free
    counts = np.bincount(train[:, 1], minlength=R)
    groups: list[list[int]] = [[] for _ in range(min(4 * workers, R))]
    for i, r in enumerate(sorted(range(R), key=lambda r: (-int(counts[r]), r))):
        groups[i % len(groups)].append(r)
    parts = spawn_map(_mine_relations, groups, workers, job)
    return {r: part[r] for r in range(R) for part in parts if r in part}


def _mine_relations(job: tuple[Any, ...], relations: list[int]) -> dict[int, dict[tuple[int, ...], int]]:
    """:func:`mine_forward_rules` for the forward heads ``relations`` (mining their own and their inverse heads)."""
    graph, train, max_len, seed, options, eq = job
    opts = dict(options)
    cap = opts.pop("max_rules_per_head", 200)
    min_support = int(opts.pop("min_support", 1))
    rank_by = opts.pop("rank_by", "support")
    pool = int(opts.pop("pool_per_head", 1000))
    by_length = bool(opts.pop("pool_by_length", False))
    confidence_starts = opts.pop("confidence_starts", None)
    R = graph.num_relations
    heads = sorted({*relations, *(r + R for r in relations)})
    per_head: dict[int, dict[tuple[int, ...], int]] = {}
    for q, table in mine_chain_rule_support(graph, train, max_len, seed=seed, heads=heads, **opts).items():
        r = q if q < R else q - R
        slot = per_head.setdefault(r, {})
        for body, n in table.items():  # tuples of Python ints
            b = body if q < R else mirror(body, R)
            slot[b] = slot.get(b, 0) + n
    out = {}
    ranked_by_head = rank_heads_bodies(
        graph,
        dict(sorted(per_head.items())),
        rank_by=rank_by,
        pool_per_head=pool,
        min_support=min_support,
        max_rules=None if cap is None or eq is not None else int(cap),
        confidence_starts=confidence_starts,
        seed=seed,
        pool_by_length=by_length,
    )
    for r, table in sorted(per_head.items()):
        ranked = ranked_by_head[r]
        if eq is not None:
            ranked = one_per_identity(ranked, eq, R)[: None if cap is None else int(cap)]
        out[r] = {b: table[b] for b in ranked}
    return out


def one_per_identity(ranked: list[tuple[int, ...]], eq: Mapping[int, int], num_relations: int) -> list[tuple[int, ...]]:
    """``ranked`` bodies with one body per canonical body (:func:`rules.identity.canonical_body`): the class takes
    the place of its best ranked member and is written as its member with the fewest inverse atoms
    (``parent_of, parent_of`` rather than ``parent_of, ~child_of``), ties by rank."""
    classes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for b in ranked:
        classes.setdefault(canonical_body(b, eq, 2 * num_relations), []).append(b)
    return [
        min(members, key=lambda m: sum(num_relations <= t < 2 * num_relations for t in m))
        for members in classes.values()
    ]


def amie_counts(graph: SparseGraph, head: int, bodies: list[tuple[int, ...]]) -> RuleCounts:
    """AMIE counts of ``bodies`` for ``head`` on ``graph`` (no edge removed): support = #(x, y) with body and
    head(x, y), body_size = #(x, y) with body, pca_body_size = #(x, y) with body and ∃y' head(x, y'), head_size =
    #head facts. One pass over the start entities, in :meth:`SparseGraph.default_batch_size` batches."""
    J = len(bodies)
    support, body_size, pca = (np.zeros(J, dtype=np.int64) for _ in range(3))
    head_adj = graph.adjacency[head]
    has_head = np.diff(head_adj.indptr) > 0
    if J:
        starts_all = graph.sources([b[0] for b in bodies])
        step = graph.default_batch_size()
        for lo in range(0, starts_all.size, step):
            starts = starts_all[lo : lo + step]
            head_rows = head_adj[starts]
            functional = has_head[starts]
            for j, mat in graph.iter_path_counts(bodies, starts):
                mat = mat.tocsr()
                nnz_rows = np.diff(mat.indptr)
                body_size[j] += int(nnz_rows.sum())
                pca[j] += int(nnz_rows[functional].sum())
                support[j] += int(head_rows.multiply(mat).count_nonzero())
    return RuleCounts(support, body_size, pca, np.full(J, int(head_adj.nnz), dtype=np.int64))


def type_signature_counts(part: KnowledgeGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(relation, head type, tail type) counts of ``part``'s training triples, as flat arrays: relations (S,),
    type pairs (S, 2), counts (S,), sorted by (relation, head type, tail type). Empty for an untyped KG."""
    if part.entity_types is None or not len(part.train):
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    types = part.entity_types[part.train[:, [0, 2]]]
    return sum_signatures(part.train[:, 1], types, np.ones(len(part.train), dtype=np.int64), part.num_types)


class FedNSLKGClient(Client):
    """One KG part (same entity/relation ids as every other part) and its fitted predictor."""

    def __init__(self, cid: str, part: KnowledgeGraph, cfg: FedNSLKGConfig, filter_index: FilterIndex):
        self.cid, self.part, self.cfg, self.filter_index = cid, part, cfg, filter_index
        self.R, self.E = part.num_relations, part.num_entities
        self.predictor: RulePredictor | None = None  # fitted on the server's proposal (the E-step reads it)
        self.local: RulePredictor | None = None  # fitted on the client's own mined bodies alone (select_on_valid)
        self.local_seed: int | None = None
        self.use_local: set[int] = set()  # query relations (0..2R-1) scored by ``local``
        self._graph: SparseGraph | None = None
        self.mined: dict[int, list[tuple[int, ...]]] = {}  # round-1 bodies per forward head, best supported first
        self._local_log: dict[str, Any] | None = None
        # ``predictor.paths`` or ``constants: auto``: what the first fit chose on valid (``paths``, ``constants``)
        # and the pooled valid MRR each way; later fits use that alone (the graph is the same every round, so is
        # the choice)
        self.valid_choice: dict[str, Any] | None = None
        present = np.concatenate([part.train[:, 1], part.valid[:, 1], part.test[:, 1]])
        self.relations = np.unique(present)  # forward heads this client asks queries of
        self.train_counts = np.bincount(part.train[:, 1], minlength=self.R).astype(np.int64)

    @property
    def graph(self) -> SparseGraph:
        if self._graph is None:
            self._graph = SparseGraph.from_triples(
                self.part.train, self.E, self.R, paths=counted_paths(self._predictor_config().paths)
            )
            logger.info(
                "%s: sparse graph of %d facts, %.1f MB; grounding needs at most %.0f MB (graph + one batch)",
                self.cid,
                len(self.part.train),
                self._graph.graph_bytes() / 2**20,
                self._graph.memory_estimate() / 2**20,
            )
        return self._graph

    # -- round 1: candidate bodies ------------------------------------------------------------------------------
    @handles("train.stats")
    def train_stats(self, msg: Message) -> Message:
        """Mine chain-rule bodies on the local training graph; send them per forward head with their supports."""
        t0 = time.perf_counter()
        L = msg.config_int("max_body_len")
        with torch_threads(self.cfg.num_threads):
            mined = mine_forward_rules(self.graph, self.part.train, L, msg.config_int("seed"), self.cfg.mining)
        heads, bodies, support = [], [], []
        self.mined = {int(r): list(table) for r, table in mined.items() if self.train_counts[r]}
        for r, table in mined.items():
            if not self.train_counts[r]:
                continue
            for b, n in table.items():
                heads.append(r)
                bodies.append(b)
                support.append(n)
        arrays = {
            "heads": np.asarray(heads, dtype=np.int64),
            "bodies": pad_bodies(bodies, self.R, L),
            "support": np.asarray(support, dtype=np.int64),
            "instances": self.train_counts.copy(),
            **dict(zip(SIGNATURE_FIELDS, type_signature_counts(self.part))),
        }
        return msg.reply(
            self.cid,
            arrays=arrays,
            metrics={
                "num_examples": len(self.part.train),
                "mined_rules": len(bodies),
                "time_s": time.perf_counter() - t0,
            },
        )

    def _valid_filter(self) -> np.ndarray | None:
        """The known facts that early stopping filters valid answers with: the evaluation's filter
        (``valid_filter: eval``, the filtered setting) or None for the predictor's train ∪ valid."""
        return self.filter_index.triples() if self.cfg.valid_filter == "eval" else None

    # -- E-step ----------------------------------------------------------------------------------------------
    def _valid_mrr(self, predictor: RulePredictor) -> float:
        m = evaluate_link_prediction(
            predictor.score, self.part, "valid", self.cfg.eval_batch_size or None, self.filter_index
        )
        return float(m.compute()["mrr"])

    def fit(
        self,
        p: Proposal,
        seed: int,
        start: Mapping[str, np.ndarray] | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Fit a fresh predictor on the server's rules (both query directions) for this client's relations, plus
        its own mined bodies after them (``keep_own_rules``): trained on the local train facts, each head
        early-stopped on the local valid facts. Rule weights start from the server's averaged weights where it sent
        them (``start_weights``/``start_known``; a head then keeps them unless training improves its valid MRR),
        else from the pooled ``confidence`` (T, J, 2) where known (≥ 0), else from the local leave-one-out one.
        ``deadline`` (``time.perf_counter()``): the ways of an "auto" choice fitted before it (``RulePredictor.fit``)."""
        start = dict(start or {})
        confidence = start.get("confidence")
        rule_sets = query_rule_sets(
            np.asarray(p.relations, dtype=np.int64), p.bodies.numpy(), p.mask.numpy(), self.R, keep=self.relations
        )
        init: dict[int, np.ndarray] = {}
        weights: dict[int, np.ndarray] = {}
        types: dict[int, np.ndarray] = {}
        sw, sk = start.get("start_weights"), start.get("start_known")
        tw, tk = start.get("start_type_weights"), start.get("start_type_known")
        for t, r in enumerate(p.relations):
            J_t = int(p.mask[t].sum())
            if confidence is not None and r in rule_sets:
                c = np.where(confidence[t, :J_t] >= 0, confidence[t, :J_t], np.nan)
                init[r], init[r + self.R] = c[:, 0], c[:, 1]
            for k, q in enumerate((r, r + self.R)):
                if sw is not None and sk is not None and q in rule_sets:
                    weights[q] = np.where(sk[t, :J_t, k], sw[t, :J_t, k], np.nan)
                if tw is not None and tk is not None and bool(tk[t, k]):
                    types[q] = tw[t, k]
            if self.cfg.keep_own_rules and r in rule_sets:
                self._add_own(rule_sets, r)
        given = bool(weights or types)
        pcfg = self._predictor_config(eval_init=given)
        pcfg = self._chosen(pcfg)
        self.predictor = RulePredictor(
            rule_sets,
            self.E,
            self.cfg.aggregator,
            num_relations=self.R,
            config=pcfg,
            init_confidence=init,
            init_weights=weights,
            init_type_weights=types,
        )
        valid = self.part.valid if len(self.part.valid) else None
        report = self._valid_mrr if (self.cfg.report_valid and valid is not None) else None
        with torch_threads(self.cfg.num_threads):
            fit_log = dict(
                self.predictor.fit(
                    self.part.train,
                    self.part.train,
                    report,
                    seed=seed,
                    valid_triples=valid,
                    filter_triples=self._valid_filter(),
                    num_relations=self.R,
                    deadline=deadline,
                )
                or {}
            )
            if self.cfg.select_on_valid != "off" and valid is not None:
                fit_log.update(self._select(fit_log, seed))
        if "trials_valid_mrr" in fit_log:
            self.valid_choice = {k: fit_log[k] for k in CHOICE_KEYS if k in fit_log}
        elif self.valid_choice is not None:
            fit_log.update(self.valid_choice, choice_kept=True)
        return fit_log

    def _chosen(self, pcfg: PredictorConfig) -> PredictorConfig:
        """``pcfg`` with its "auto" paths, constants and lengths fixed to what the first fit chose on valid (as given
        when nothing was chosen yet)."""
        choice = self.valid_choice or {}
        if pcfg.paths == "auto" and "paths" in choice:
            pcfg = dataclasses.replace(pcfg, paths=choice["paths"])
        if pcfg.constants == "auto" and "constants" in choice:
            keep = pcfg.constant_rules if choice["constants"] == "on" else 0
            pcfg = dataclasses.replace(pcfg, constants="fixed", constant_rules=keep)
        if pcfg.lengths == "auto" and "max_length" in choice:
            pcfg = dataclasses.replace(pcfg, lengths="fixed", max_length=int(choice["max_length"]))
        return pcfg

    def _predictor_config(self, **defaults: Any) -> PredictorConfig:
        """``method_kwargs.predictor`` over ``defaults``, with the method's aggregator."""
        return PredictorConfig(**{**defaults, **self.cfg.predictor, "aggregator": self.cfg.aggregator})

    def _add_own(self, rule_sets: dict[int, list[tuple[int, ...]]], r: int) -> None:
        """Append this client's round-1 mined bodies of forward head ``r`` not already in ``rule_sets[r]``, and
        their mirrors to the inverse head ``r + R`` (in place)."""
        sent = set(rule_sets.get(r, []))
        own = [b for b in self.mined.get(r, []) if b not in sent]
        rule_sets[r] = rule_sets.get(r, []) + own
        rule_sets[r + self.R] = rule_sets.get(r + self.R, []) + [mirror(b, self.R) for b in own]

    def _fit_local(self, seed: int) -> dict[str, Any]:
        """Fit :attr:`local` on the round-1 mined bodies alone (local leave-one-out confidences), once: the local
        data does not change over rounds; its seed is kept in the client state so a resumed run refits it alike."""
        if self.local_seed is None:
            self.local_seed = seed
        rule_sets: dict[int, list[tuple[int, ...]]] = {}
        for r in self.relations.tolist():
            self._add_own(rule_sets, int(r))
        pcfg = self._predictor_config()
        self.local = RulePredictor(rule_sets, self.E, self.cfg.aggregator, num_relations=self.R, config=pcfg)
        return dict(
            self.local.fit(
                self.part.train,
                self.part.train,
                seed=self.local_seed,
                valid_triples=self.part.valid,
                filter_triples=self._valid_filter(),
                num_relations=self.R,
            )
            or {}
        )

    def _select(self, fit_log: Mapping[str, Any], seed: int) -> dict[str, Any]:
        """Choose between the federated and the local predictor on this client's valid facts (``select_on_valid``):
        ``client`` compares the filtered valid MRR over all valid queries; ``head`` each query relation's best
        early-stopping valid MRR. Ties keep the federated predictor."""
        if self.local is None or self._local_log is None:
            self._local_log = self._fit_local(seed)
        local_log = self._local_log
        assert self.local is not None
        if self.cfg.select_on_valid == "client":
            fed = fit_log.get("valid")  # already ranked when report_valid
            fed = self._valid_mrr(self.predictor_checked) if fed is None else float(fed)
            own = self._valid_mrr(self.local)
            self.use_local = set(range(2 * self.R)) if own > fed else set()
            return {"valid_mrr_federated": fed, "valid_mrr_local": own, "heads_local": len(self.use_local)}
        fed_heads, own_heads = fit_log.get("heads", {}), local_log.get("heads", {})
        self.use_local = {
            q
            for q, h in own_heads.items()
            if h.get("valid_queries", 0) and h["best_valid_mrr"] > fed_heads.get(q, {}).get("best_valid_mrr", -1.0)
        }
        return {"heads_local": len(self.use_local)}

    @property
    def predictor_checked(self) -> RulePredictor:
        if self.predictor is None:
            raise RuntimeError(f"client {self.cid}: no fitted predictor (evaluate before any train stage)")
        return self.predictor

    def score(self, queries: torch.Tensor) -> torch.Tensor:
        """(B, E) scores of queries (B, 2): the federated predictor's, or the local one's for the query relations
        chosen on valid (:meth:`_select`)."""
        return self.scorer().score(queries)

    def scorer(self) -> Scorer:
        """What scores this client's queries, as one picklable object (evaluation workers receive it)."""
        return Scorer(self.predictor_checked, self.local, frozenset(self.use_local))

    @handles("train")
    def train(self, msg: Message) -> Message:
        p = Proposal.from_arrays(msg.arrays)
        mask, log_prior = p.mask.numpy(), p.log_prior.numpy()
        T, J = mask.shape
        t0 = time.perf_counter()
        # under the run's time_budget_s, the budget's seconds left bound the ways an "auto" choice fits
        deadline = t0 + msg.config_float("time_left_s") if "time_left_s" in msg.config else None
        log = self.fit(p, msg.config_int("seed"), msg.arrays, deadline)
        t1 = time.perf_counter()
        assert self.predictor is not None
        sent = {q: int(p.mask[t].sum()) for t, r in enumerate(p.relations) for q in (r, r + self.R)}
        scores = {q: s[: sent.get(q, 0)] for q, s in self.predictor.rule_scores().items()}  # the server's bodies
        with torch_threads(self.cfg.num_threads):
            counts = (
                {
                    r: amie_counts(self.graph, r, p.bodies_of(t, self.R))
                    for t, r in enumerate(p.relations)
                    if self.train_counts[r]
                }
                if bool(msg.config.get("counts", True))
                else {}
            )
        posterior = np.zeros((T, J), dtype=np.float64)
        out_mask = np.zeros((T, J), dtype=bool)
        instances = np.zeros(T, dtype=np.int64)
        count_arrays = {name: np.zeros((T, J), dtype=np.int64) for name in COUNT_FIELDS}
        fitted = 0
        for t, r in enumerate(p.relations):
            m = mask[t]
            J_t = int(m.sum())
            if r in counts:
                for name in COUNT_FIELDS:
                    count_arrays[name][t, :J_t] = getattr(counts[r], name)
            s = merge_directions(scores, r, self.R, J_t)
            n = int(self.train_counts[r])
            if s is None or n == 0 or J_t == 0:
                continue
            lp = log_prior[t, :J_t] if bool(msg.config.get("use_prior", True)) else np.zeros(J_t)
            posterior[t, :J_t] = posterior_from_scores(
                s,
                lp,
                temperature=self.cfg.temperature,
                prior_weight=self.cfg.prior_weight,
                kl_weight=self.cfg.kl_weight,
                standardize=self.cfg.standardize_scores,
            )
            out_mask[t, :J_t] = True
            instances[t] = n
            fitted += 1
        metrics = {
            "num_examples": len(self.part.train),
            "heads_fitted": fitted,
            "rules": int(mask.sum()),
            "time_fit_s": t1 - t0,
            "time_counts_s": time.perf_counter() - t1,
        }
        if log.get("valid") is not None:
            metrics["valid_mrr"] = float(log["valid"])
        for key in ("valid_mrr_federated", "valid_mrr_local", "heads_local"):
            if key in log:
                metrics[key] = float(log[key])
        if "nonredundant_heads" in log:  # heads whose valid MRR chose the non-redundant noisy-OR (predictor option)
            metrics["heads_nonredundant"] = float(log["nonredundant_heads"])
            metrics["heads_with_valid"] = float(_heads_with_valid(log))
        if "paths" in log:  # predictor.paths auto: 1 when the valid MRR chose simple paths over walks
            metrics["simple_paths"] = float(log["paths"] == "simple")
        if "constants" in log:  # predictor.constants auto: 1 when the valid MRR chose rules with constants
            metrics["constant_rules_on"] = float(log["constants"] == "on")
        if "max_length" in log:  # predictor.lengths auto: the length of the longest rules the valid MRR kept
            metrics["rule_length"] = float(log["max_length"])
        if "ways_skipped" in log:  # the ways of that choice the time budget left unfitted
            metrics["ways_not_fitted"] = float(len(log["ways_skipped"]))
        if "heads_cut" in log:  # heads whose training the time budget ended before early stopping did
            metrics["heads_cut_by_budget"] = float(log["heads_cut"])
            if log["heads_cut"]:
                logger.info(
                    "%s: the time budget ended training after fewer epochs on %d of %d heads (a larger "
                    "time_budget_s lets them train until early stopping)",
                    self.cid,
                    log["heads_cut"],
                    len(log["heads"]),
                )
        chosen = _choices_on_valid(log)
        if chosen:
            logger.info("%s: chosen on valid: %s", self.cid, "; ".join(chosen))
        arrays = {"posterior": posterior, "mask": out_mask, "instances": instances, **count_arrays}
        if self.cfg.federated_confidence:
            arrays["evidence"] = self._evidence(p)
        if self.cfg.federated_weights:
            arrays.update(self._weights(p, log))
        return msg.reply(self.cid, arrays=arrays, metrics=metrics)

    def _weights(self, p: Proposal, log: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The fitted weights of the proposal's bodies (T, J, 2), the type prior's (T, 2, 2R) when it has one, and
        the training queries of each head direction (T, 2) (0: not fitted here)."""
        assert self.predictor is not None
        T, J = p.mask.shape
        rule_w = np.zeros((T, J, 2))
        type_w = np.zeros((T, 2, 2 * self.R))
        queries = np.zeros((T, 2), dtype=np.int64)
        fitted, found_types = self.predictor.rule_weights(), self.predictor.type_weights()
        heads = log.get("heads", {})
        for t, r in enumerate(p.relations):
            J_t = int(p.mask[t].sum())
            for k, q in enumerate((r, r + self.R)):
                n = int(heads.get(q, {}).get("train_queries", 0))
                if q not in fitted or n == 0:
                    continue
                w = fitted[q]
                rule_w[t, :J_t, k] = (w if w.ndim == 1 else w[:, 0])[:J_t]
                if q in found_types:
                    type_w[t, k] = found_types[q]
                queries[t, k] = n
        out = {"rule_weights": rule_w, "weight_queries": queries}
        if found_types:
            out["type_weights"] = type_w
        return out

    def _evidence(self, p: Proposal) -> np.ndarray:
        """(T, J, 4) the proposal bodies' leave-one-out (hits, reached) on this client's training queries, forward
        head then inverse head (:data:`.messages.EVIDENCE_PARTS`); zero where a head has no training query."""
        assert self.predictor is not None
        T, J = p.mask.shape
        out = np.zeros((T, J, len(EVIDENCE_PARTS)), dtype=np.int64)
        found = self.predictor.rule_evidence()
        for t, r in enumerate(p.relations):
            J_t = int(p.mask[t].sum())
            for k, q in enumerate((r, r + self.R)):
                if q in found:
                    hits, reached = found[q]
                    out[t, :J_t, 2 * k] = np.rint(hits[:J_t])
                    out[t, :J_t, 2 * k + 1] = np.rint(reached[:J_t])
        return out

    def state_dict(self) -> dict[str, Any]:
        """The round-1 mined bodies (kept beside the server's proposals in later rounds), the seed of the local
        predictor (``select_on_valid``) and what the first fit chose on valid (``paths``, ``constants: auto``), so
        a resumed run refits alike."""
        state = {"mined": json.dumps([[r, [list(b) for b in bs]] for r, bs in sorted(self.mined.items())])}
        if self.local_seed is not None:
            state["local_seed"] = str(self.local_seed)
        if self.valid_choice is not None:
            state["valid_choice"] = json.dumps(self.valid_choice, allow_nan=False)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "mined" in state:
            self.mined = {int(r): [tuple(b) for b in bs] for r, bs in json.loads(state["mined"])}
        if "local_seed" in state:
            self.local_seed = int(state["local_seed"])
        for key in ("valid_choice", "paths_choice"):  # (runs before 29 Nov saved the paths alone as paths_choice)
            if key in state:
                self.valid_choice = json.loads(state[key])

    # -- evaluation ------------------------------------------------------------------------------------------
    def ranking(self) -> RankingMetrics:
        """Filtered ranking of this client's test queries (head and tail) under its fitted predictor."""
        self.predictor_checked  # noqa: B018 (raises before any train stage)
        if not len(self.part.test):
            return RankingMetrics()
        scorer = self.scorer()
        workers = self._predictor_config().workers
        relations, work = _test_work(self.part, scorer.predictor)
        if workers_pay(work, workers):
            # the relations' queries ranked in worker processes, the largest first; rank sums are exact integers,
            # so their total equals the one-process ranking
            shared = (scorer, self.part, self.filter_index, self.cfg.eval_batch_size or None)
            return sum(spawn_map(_rank_relation, relations, workers, shared, work), RankingMetrics())
        with torch_threads(self.cfg.num_threads), torch.no_grad():
            return evaluate_link_prediction(
                scorer.score, self.part, "test", self.cfg.eval_batch_size or None, self.filter_index
            )

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        t0 = time.perf_counter()
        m = self.ranking()
        return msg.reply(
            self.cid,
            arrays={"rank_sums": encode_rank_sums(m)},
            metrics={"num_examples": len(self.part.test), "queries": m.count, "time_eval_s": time.perf_counter() - t0},
        )


@dataclasses.dataclass(frozen=True)
class Scorer:
    """A client's scores: the federated predictor's, and the local predictor's for the query relations chosen on
    valid (``use_local``, 0..2R-1)."""

    predictor: RulePredictor
    local: RulePredictor | None = None
    use_local: frozenset[int] = frozenset()

    def score(self, queries: torch.Tensor) -> torch.Tensor:
        """(B, E) float32 scores of queries (B, 2) [entity, relation in 0..2R-1]."""
        out = self.predictor.score(queries)
        if self.use_local and self.local is not None:
            rows = torch.from_numpy(np.isin(np.asarray(queries)[:, 1], sorted(self.use_local)))
            if bool(rows.any()):
                out[rows] = self.local.score(queries[rows])
        return out


def _test_work(part: KnowledgeGraph, predictor: RulePredictor) -> tuple[list[int], list[int]]:
    """The test relations and, per relation, its test queries × its rules (bodies and rules with constants), both
    directions: the evaluation's size on the scale of :data:`rules.workers.MIN_PARALLEL_WORK`."""
    counts = np.bincount(part.test[:, 1], minlength=part.num_relations)
    relations = [r for r, n in enumerate(counts.tolist()) if n]
    work = [int(counts[r]) * (predictor.num_rules(r) + predictor.num_rules(r + part.num_relations)) for r in relations]
    return relations, work


def _rank_relation(shared: tuple[Scorer, KnowledgeGraph, FilterIndex, int | None], relation: int) -> RankingMetrics:
    """The filtered ranking of the test facts of one relation, head and tail queries (an evaluation worker's
    item; module level so that it pickles)."""
    scorer, part, index, batch_size = shared
    triples = part.test[part.test[:, 1] == relation]
    with torch.no_grad():
        return evaluate_link_prediction(scorer.score, part, batch_size=batch_size, filter_with=index, triples=triples)


def _choices_on_valid(fit_log: Mapping[str, Any]) -> list[str]:
    """What the predictor chose on the valid split, one phrase each (paths, constants and lengths: auto, in this fit
    or kept from the client's first; the heads that took the non-redundant noisy-OR)."""
    out = []
    kept = ", kept from the first fit" if fit_log.get("choice_kept") else ""
    for key, name in (("paths", "paths"), ("constants", "rules with constants"), ("max_length", "rules up to length")):
        if key in fit_log:
            each = " / ".join(f"{p} {v:.4f}" for p, v in fit_log.get(f"{key}_valid_mrr", {}).items())
            out.append(f"{name} {fit_log[key]}{kept} (valid MRR {each})")
    if fit_log.get("ways_skipped"):
        out.append(f"not fitted within the time budget{kept}: {', '.join(fit_log['ways_skipped'])}")
    if "nonredundant_heads" in fit_log:
        out.append(
            f"non-redundant noisy-OR on {fit_log['nonredundant_heads']} of {_heads_with_valid(fit_log)} heads with "
            "valid queries"
        )
    return out


def _heads_with_valid(fit_log: Mapping[str, Any]) -> int:
    """Query relations of the fit with valid queries (the heads the noisy-OR choice was made on)."""
    return sum(1 for h in fit_log.get("heads", {}).values() if h.get("valid_queries"))
