"""FedNSL client (Algorithm 1 lines 4–9): ground the server's candidate bodies on local documents, fit rule
weights by BCE + λ·KL, send the rule posterior; evaluate the personalised relation scores.

Private to the client: its documents and gold facts, the backbone values x (N, N, R) of its documents, the
path values φ, the fitted weights. What leaves it is declared in :mod:`.messages`.

Data parts (see :mod:`.features`): ``train`` (seen combo, training documents), ``holdout`` (seen combo,
threshold hold-out), ``seen_test`` (seen combo, test documents), ``unseen_test`` (the neighbour combo in the
same test documents, never trained on), ``unseen_holdout`` (the neighbour combo in the hold-out documents: the
``holdout_*`` metrics that choose the transfer route without touching test documents).

Evaluation scores every variant of :data:`.messages.EVAL_VARIANTS` from the one fitted state of the round:
the rule model (seen: the personal per-triple scorer; unseen: the configured ``transfer`` route), the backbone
alone, recalibration only (the scorer's fit with φ zeroed; unseen: the owners' published (ū_t, b̄_t) under
``transfer: published``), and both transfer routes on the unseen cells. Logic counts compose the golden bodies
over a document's full predictions (seen ∪ unseen query cells, every relation the client scores) and count
them at the pairs of each part's query cells. Thresholds come from the
client's own seen-combo hold-out only.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast, get_args

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.methods.fednsl.evaluation import PRF, best_threshold, document_logic_counts, logic_from_counts, prf_counts
from fednsl.methods.fednsl.features import CellTable, Part, PathScore, PhiCache
from fednsl.methods.fednsl.messages import ScorerOptions, scorer_options_from
from fednsl.methods.fednsl.scorer import (
    FittedScorer,
    Instances,
    Recalibration,
    TransferScorer,
    fit_recalibration,
    fit_scorer,
    fit_transfer,
    posterior_of,
    predict_logits,
    published_logits,
    recalibration_logits,
)
from fednsl.tasks.rule_learning import Proposal
from kg.split import ClientPartition, query_mask
from rules.mining import mine_cooccurrence

__all__ = ["FedNSLClient"]

log = logging.getLogger("fednsl.methods.fednsl")

PARTS = ("train", "holdout", "seen_test", "unseen_test", "unseen_holdout")


@dataclass
class _Block:
    """One triple's instances inside an :class:`Instances`: rows [start, end) are the cells of type pair ab."""

    t: int
    ab: tuple[int, int]
    start: int
    end: int


@dataclass
class _Built:
    inst: Instances
    blocks: list[_Block]
    in_train: np.ndarray  # (M,) bool
    total_gold: int
    unknown: int  # gold facts whose triple the server does not know


@dataclass
class _Fit:
    """The fitted state of one round (reused by ``evaluate`` of the same round and rule set)."""

    rnd: int
    rules: Proposal
    fitted: FittedScorer
    transfer: TransferScorer
    recal: Recalibration
    built: _Built
    opts: ScorerOptions


class _MiningDoc:
    """A lightweight document for co-occurrence mining (facts + types)."""

    def __init__(self, doc_id: str, facts: np.ndarray, entity_types: np.ndarray):
        self.doc_id, self.facts, self.entity_types = doc_id, facts, entity_types
        self.num_entities = int(entity_types.shape[0])


class FedNSLClient(Client):
    """One FedNSL client over a :class:`kg.split.ClientPartition` and its backbone values."""

    def __init__(
        self,
        cid: str,
        partition: ClientPartition,
        values: Mapping[str, np.ndarray],
        num_relations: int,
        options: ScorerOptions,
        *,
        golden_rules: Sequence[tuple[int, Sequence[int]]] = (),
        path_score: str = "graph",
        fast_after: int = 3,
        max_body_len: int = 3,
        mining_edges: str = "backbone",
        mining_threshold: float = 0.5,
        min_instances: int = 1,
        num_threads: int = 1,
    ):
        self.cid = cid
        self.partition = partition
        self.R = num_relations
        self.options = options
        self.golden = [(int(h), tuple(int(b) for b in body)) for h, body in golden_rules]
        self.max_body_len = max_body_len
        self.mining_edges = mining_edges
        self.mining_threshold = mining_threshold
        self.min_instances = min_instances
        self.num_threads = num_threads
        self.values = {d.doc_id: values[d.doc_id] for d in partition.documents}
        train_facts = {
            (d.entity_names[h], int(r), d.entity_names[t])
            for d in partition.seen_train
            for h, r, t in d.facts.tolist()
            if query_mask(d, partition.seen)[h, t]
        }
        docs = {
            "train": (partition.train, partition.seen),
            "holdout": (partition.holdout, partition.seen),
            "seen_test": (partition.test, partition.seen),
            "unseen_test": (partition.test, partition.unseen),
            "unseen_holdout": (partition.holdout, partition.unseen),
        }
        self.tables: dict[str, CellTable] = {}
        self.caches: dict[str, PhiCache] = {}
        if path_score not in get_args(PathScore):
            raise ValueError(f"path_score must be one of {get_args(PathScore)}, got {path_score!r}")
        mode = cast(PathScore, path_score)
        for name, (dl, combo) in docs.items():
            part = Part(name, list(dl), combo, [self.values[d.doc_id] for d in dl])
            table = CellTable(part, num_relations, train_facts if name != "train" else None)
            self.tables[name] = table
            self.caches[name] = PhiCache(table, mode, fast_after)
        self._masks = {name: [query_mask(d, t.part.combo) for d in t.part.docs] for name, t in self.tables.items()}
        self._fit: _Fit | None = None

    # -- round 0: co-occurrence statistics (spec §8.8) ---------------------------------------------------------
    def _mining_docs(self) -> tuple[list[_MiningDoc], int]:
        out, extra = [], 0
        combo = self.partition.seen
        for d in self.partition.train:
            if d.num_entities == 0:
                continue
            qm = query_mask(d, combo)
            facts = d.facts
            if facts.size:
                in_combo = qm[facts[:, 0], facts[:, 2]]
                keep = facts if self.mining_edges == "all" else facts[in_combo]
            else:
                keep = facts.reshape(0, 3)
            if self.mining_edges == "backbone":
                x = self.values[d.doc_id]
                h, t, r = np.nonzero(x >= self.mining_threshold)
                off = (~qm[h, t]) & (h != t)
                pred = np.stack([h[off], r[off], t[off]], 1).astype(np.int64)
                extra += len(pred)
                keep = np.concatenate([keep, pred]) if len(pred) else keep
            out.append(
                _MiningDoc(
                    d.doc_id,
                    np.unique(keep.reshape(-1, 3), axis=0) if keep.size else keep.reshape(0, 3),
                    d.entity_types,
                )
            )
        return out, extra

    def handle(self, message: Message) -> Message:
        with torch_threads(self.num_threads):
            return super().handle(message)

    @handles("train.stats")
    def train_stats(self, msg: Message) -> Message:
        t0 = time.perf_counter()
        L = msg.config_int("max_body_len") if "max_body_len" in msg.config else self.max_body_len
        docs, extra = self._mining_docs()
        mined = mine_cooccurrence(docs, self.R, max_len=L)
        combo = self.partition.seen
        triples = sorted(t for t in mined.counts if t[1] in combo.head_types and t[2] in combo.tail_types)
        dists = mined.distributions()
        K = len(triples)
        B = max((len(dists[t]) for t in triples), default=0)
        pad = 2 * self.R
        tri = np.zeros((K, 3), dtype=np.int64)
        bodies = np.full((K, B, L), pad, dtype=np.int64)
        probs = np.zeros((K, B), dtype=np.float64)
        mask = np.zeros((K, B), dtype=bool)
        inst = np.zeros(K, dtype=np.int64)
        for k, t in enumerate(triples):
            tri[k] = t
            items = sorted(dists[t].items(), key=lambda kv: (-kv[1], kv[0]))
            for j, (body, p) in enumerate(items):
                bodies[k, j, : len(body)] = body
                probs[k, j] = p
                mask[k, j] = True
            probs[k] /= probs[k].sum()
            inst[k] = mined.instances.get(t, 0)
        return msg.reply(
            self.cid,
            arrays={"triples": tri, "bodies": bodies, "probs": probs, "mask": mask, "instances": inst},
            metrics={
                "num_examples": int(inst.sum()),
                "triples": K,
                "bodies": int(mask.sum()),
                "documents": len(docs),
                "extra_edges": extra,
                "skipped_untyped": mined.skipped_untyped,
                "time_s": time.perf_counter() - t0,
            },
        )

    # -- grounding: instances of a part ---------------------------------------------------------------------
    def _build(self, part: str, rules: Proposal, rnd: int) -> _Built:
        table, cache = self.tables[part], self.caches[part]
        pad = 2 * self.R
        triples = rules.heads.tolist()
        requests: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        rows = []
        for t, (r, a, b) in enumerate(triples):
            if (a, b) not in table.groups or not bool(rules.mask[t].any()):
                continue
            bodies = rules.bodies[t][rules.mask[t]]
            canon = [tuple(x for x in row if x != pad) for row in bodies.tolist()]
            requests.setdefault((a, b), []).extend(canon)
            rows.append((t, r, (a, b)))
        cache.ensure(requests, rnd)
        J = rules.num_bodies
        phis, xs, tris, ys, ins, blocks = [], [], [], [], [], []
        start = 0
        for t, r, ab in rows:
            g = table.groups[ab]
            m = rules.mask[t]
            feats = cache.features(ab, rules.bodies[t][m], rnd)  # (J_t, c)
            c = len(g)
            phi = torch.zeros(c, J)
            phi[:, m] = feats.T
            phis.append(phi)
            xs.append(torch.from_numpy(g.x[:, r]))
            tris.append(torch.full((c,), t, dtype=torch.long))
            ys.append(torch.from_numpy(g.gold[:, r].astype(np.float32)))
            ins.append(g.in_train[:, r])
            blocks.append(_Block(t, ab, start, start + c))
            start += c
        # gold facts whose (r, type_h, type_t) the server's triple list does not cover
        covered = {(r, ab) for _, r, ab in rows}
        total_gold, unknown = 0, 0
        for ab, g in table.groups.items():
            per_rel = g.gold.sum(0)
            total_gold += int(per_rel.sum())
            for r in np.flatnonzero(per_rel).tolist():
                if (r, ab) not in covered:
                    unknown += int(per_rel[r])
        if phis:
            inst = Instances(torch.cat(phis), torch.cat(xs), torch.cat(tris), torch.cat(ys))
            in_train = np.concatenate(ins)
        else:
            inst = Instances(torch.zeros(0, J), torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0))
            in_train = np.zeros(0, dtype=bool)
        return _Built(inst, blocks, in_train, total_gold, unknown)

    def _fit_round(self, rnd: int, rules: Proposal, opts: ScorerOptions, seed: int) -> tuple[_Fit, dict[str, float]]:
        t0 = time.perf_counter()
        built = self._build("train", rules, rnd)
        t1 = time.perf_counter()
        gen = torch.Generator().manual_seed(seed)
        fitted = fit_scorer(built.inst, rules, opts, gen)
        counts = built.inst.counts_per_triple(rules.num_heads)
        fitted.fitted = counts >= self.min_instances
        transfer = fit_transfer(built.inst, rules, opts)
        recal = fit_recalibration(built.inst, rules, opts, torch.Generator().manual_seed(seed))
        recal.fitted = recal.fitted & fitted.fitted
        t2 = time.perf_counter()
        if opts.optimizer == "lbfgs" and not fitted.converged and len(built.inst):
            log.info(
                "round %d client %s: the scorer fit stopped after %d L-BFGS iterations (scorer_steps) before "
                "reaching scorer_tol=%g",
                rnd,
                self.cid,
                fitted.iterations,
                opts.tol,
            )
        self._fit = _Fit(rnd, rules, fitted, transfer, recal, built, opts)
        timing = {"time_grounding_s": t1 - t0, "time_fit_s": t2 - t1}
        return self._fit, timing

    # -- training round (Eq. 2, 8–11) -------------------------------------------------------------------------
    @handles("train")
    def train(self, msg: Message) -> Message:
        rules = Proposal.from_arrays(msg.arrays)
        opts = scorer_options_from(msg.config, self.options)
        fit, timing = self._fit_round(msg.round, rules, opts, msg.config_int("seed"))
        fitted, built = fit.fitted, fit.built
        t0 = time.perf_counter()
        with torch.no_grad():
            q, n = posterior_of(built.inst, rules, fitted.weights.double(), fitted.bias.double(), opts)
        T = rules.num_heads
        has = (n > 0) & rules.mask.any(-1)
        mask = rules.mask & has[:, None]
        q = torch.where(mask, q.double(), torch.zeros((), dtype=torch.float64))
        tot = q.sum(-1, keepdim=True)
        q = torch.where(tot > 0, q / tot.clamp_min(1e-300), torch.zeros_like(q))
        mask = mask & (tot > 0)
        instances = torch.where(mask.any(-1), n.round().long(), torch.zeros(T, dtype=torch.long))
        timing["time_posterior_s"] = time.perf_counter() - t0
        h = fitted.history
        cache = self.caches["train"]
        metrics = {
            "num_examples": len(built.inst),
            "positives": int(built.inst.y.sum()),
            "train_loss": h["loss"][-1] if h["loss"] else 0.0,
            "bce": h["bce"][-1] if h["bce"] else 0.0,
            "kl": h["kl"][-1] if h["kl"] else 0.0,
            "triples_fitted": int(fitted.fitted.sum()),
            "triples_local": int(mask.any(-1).sum()),
            "facts_unknown_triple": built.unknown,
            "empty_documents": sum(d.num_entities == 0 for d in self.partition.documents),
            "grounded_cells": cache.computed,
            "cached_bodies": cache.cached_bodies(),
            "scorer_iterations": fitted.iterations,
            "scorer_converged": int(fitted.converged),
            **timing,
        }
        arrays = {"posterior": q.numpy(), "mask": mask.numpy(), "instances": instances.numpy().astype(np.int64)}
        if opts.transfer == "published":  # declared weights (messages.PUBLISHED_FIELDS), owned triples only
            own = fitted.fitted & (instances > 0)
            arrays["scorer_weights"] = torch.where(own[:, None], fitted.weights.double(), 0.0).numpy()
            arrays["scorer_bias"] = torch.where(own, fitted.bias.double(), 0.0).numpy()
            arrays["recal_slope"] = torch.where(own, fit.recal.slope.double(), 0.0).numpy()
            arrays["recal_bias"] = torch.where(own, fit.recal.intercept.double(), 0.0).numpy()
        return msg.reply(self.cid, arrays=arrays, metrics=metrics)

    # -- evaluation ---------------------------------------------------------------------------------------------
    def _doc_predictions(self, part: str, built: _Built, pred: np.ndarray, rules: Proposal) -> list[np.ndarray]:
        table = self.tables[part]
        docs = table.part.docs
        out = [np.zeros((d.num_entities, d.num_entities, self.R), dtype=bool) for d in docs]
        for blk in built.blocks:
            g = table.groups[blk.ab]
            r = int(rules.heads[blk.t, 0])
            sel = pred[blk.start : blk.end]
            if not sel.any():
                continue
            for d, h, t in zip(g.doc[sel], g.head[sel], g.tail[sel]):
                out[int(d)][h, t, r] = True
        return out

    def _cell_docs(self, part: str, built: _Built) -> np.ndarray:
        """(M,) document index (within the part) of every instance row."""
        groups = self.tables[part].groups
        if not built.blocks:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([groups[blk.ab].doc for blk in built.blocks])

    def _doc_gold(self, part: str) -> np.ndarray:
        """(D,) gold facts per document of the part (all query cells, known triples or not)."""
        table = self.tables[part]
        out = np.zeros(len(table.part.docs), dtype=np.int64)
        for g in table.groups.values():
            np.add.at(out, g.doc, g.gold.sum(1).astype(np.int64))
        return out

    def score_unseen(self, msg: Message) -> dict[str, np.ndarray]:
        """Unseen-test logits of both transfer routes and of the recalibration-only baseline for an ``evaluate``
        message (``prior``, ``published``, ``recal``) —
        what the server sent decides them (tests perturb the message and check that they move)."""
        rules = Proposal.from_arrays(msg.arrays)
        opts = scorer_options_from(msg.config, self.options)
        fit = self._ensure_fit(msg, rules, opts)[0]
        routes = self._routes(msg, rules, fit)
        built = self._build("unseen_test", rules, msg.round)
        return {name: fn(built.inst)[0] for name, fn in routes.items()}

    def _ensure_fit(self, msg: Message, rules: Proposal, opts: ScorerOptions) -> tuple[_Fit, float]:
        fit = self._fit
        if fit is None or fit.rnd != msg.round or not fit.rules.same_as(rules) or fit.opts != opts:
            fit, timing = self._fit_round(msg.round, rules, opts, msg.config_int("seed"))
            return fit, timing["time_grounding_s"]
        return fit, 0.0

    def _routes(self, msg: Message, rules: Proposal, fit: _Fit) -> dict[str, Any]:
        """{route: instances -> (logits (M,), uses-published (M,) bool)} for the unseen cells."""
        opts = fit.opts
        gp = msg.arrays.get("global_posterior")
        dist = None if gp is None else torch.as_tensor(np.asarray(gp, dtype=np.float64))
        transfer = fit.transfer if dist is None else fit_transfer(fit.built.inst, rules, opts, dist)

        def prior_route(inst: Instances) -> tuple[np.ndarray, np.ndarray]:
            s = predict_logits(inst, rules, fit.fitted, transfer, opts, personalised=False, dist=dist)
            return s.numpy(), np.zeros(len(inst), dtype=bool)

        pw, pb, pm = (msg.arrays.get(k) for k in ("published_weights", "published_bias", "published_mask"))

        def published_route(inst: Instances) -> tuple[np.ndarray, np.ndarray]:
            base, _ = prior_route(inst)
            if pw is None or pb is None or pm is None or len(inst) == 0:
                return base, np.zeros(len(inst), dtype=bool)
            use = np.asarray(pm, dtype=bool)[inst.tri.numpy()]
            s = published_logits(inst, torch.as_tensor(np.asarray(pw)), torch.as_tensor(np.asarray(pb))).numpy()
            return np.where(use, s, base), use

        ru, rb = (msg.arrays.get(k) for k in ("published_recal_slope", "published_recal_bias"))

        def recal_route(inst: Instances) -> tuple[np.ndarray, np.ndarray]:
            """Recalibration only on unseen cells: the owners' mean (ū_t, b̄_t) where published (the rule
            weights' route), else the client's pooled (u, b)."""
            base = fit.recal.logits(inst, False).numpy()
            if ru is None or rb is None or pm is None or len(inst) == 0:
                return base, np.zeros(len(inst), dtype=bool)
            use = np.asarray(pm, dtype=bool)[inst.tri.numpy()]
            s = recalibration_logits(inst, torch.as_tensor(np.asarray(ru)), torch.as_tensor(np.asarray(rb))).numpy()
            return np.where(use, s, base), use

        return {"prior": prior_route, "published": published_route, "recal": recal_route}

    def _logic_docs(
        self, part: str, own: Sequence[np.ndarray], other: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-document golden-rule (body, correct) counts (D, G): bodies composed over the document's full
        predictions (this part's ``own`` ∪ the other part's ``other``, (N, N, R) per document), counted at the
        pairs (x, y) of this part's query cells."""
        body = np.zeros((len(own), len(self.golden)), dtype=np.int64)
        corr = np.zeros_like(body)
        for d, (p, q, m) in enumerate(zip(own, other, self._masks[part])):
            body[d], corr[d] = document_logic_counts([p, q], m, self.golden)
        return body, corr

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        t_start = time.perf_counter()
        rules = Proposal.from_arrays(msg.arrays)
        opts = scorer_options_from(msg.config, self.options)
        fit, tg = self._ensure_fit(msg, rules, opts)
        fitted, recal = fit.fitted, fit.recal
        routes = self._routes(msg, rules, fit)
        rnd = msg.round
        # thresholds: the client's own seen-combo hold-out only
        hold = self._build("holdout", rules, rnd)
        y_hold = hold.inst.y.numpy() > 0.5
        hold_personal = fitted.fitted[hold.inst.tri].numpy()
        hold_logits = predict_logits(hold.inst, rules, fitted, fit.transfer, opts, True).numpy()
        prior_hold = routes["prior"](hold.inst)[0]
        th = {
            "personal": best_threshold(np.where(hold_personal, hold_logits, -np.inf), y_hold, hold.total_gold),
            "transfer": best_threshold(prior_hold, y_hold, hold.total_gold),
            "backbone": best_threshold(hold.inst.passthrough.numpy(), y_hold, hold.total_gold),
            "recal": best_threshold(recal.logits(hold.inst, True).numpy(), y_hold, hold.total_gold),
            "recal_pooled": best_threshold(recal.logits(hold.inst, False).numpy(), y_hold, hold.total_gold),
        }

        def unseen_preds(inst: Instances) -> dict[str, np.ndarray]:
            out = {}
            for name in ("prior", "published"):
                s, published = routes[name](inst)
                out[f"{name}_"] = np.where(published, s >= th["personal"], s >= th["transfer"])
            out[""] = out[f"{opts.transfer}_"]
            out["backbone_"] = inst.passthrough.numpy() >= th["backbone"]
            s, published = routes["recal"](inst)
            out["recal_"] = np.where(published, s >= th["recal"], s >= th["recal_pooled"])
            return out

        def seen_preds(inst: Instances) -> dict[str, np.ndarray]:
            personal = fitted.fitted[inst.tri].numpy()
            logits = predict_logits(inst, rules, fitted, fit.transfer, opts, True).numpy()
            return {
                "": np.where(personal, logits >= th["personal"], logits >= th["transfer"]),
                "backbone_": inst.passthrough.numpy() >= th["backbone"],
                "recal_": recal.logits(inst, True).numpy() >= th["recal"],
            }

        metrics: dict[str, float] = {}
        arrays: dict[str, np.ndarray] = {}
        uh = self._build("unseen_holdout", rules, rnd)
        for variant, p in unseen_preds(uh.inst).items():
            c = prf_counts(p, uh.inst.y.numpy() > 0.5, uh.in_train, uh.total_gold)
            if c.n_gold:
                metrics[f"holdout_{variant}unseen_f1"] = c.f1
        parts = {"seen": "seen_test", "unseen": "unseen_test"}
        builts = {key: self._build(part, rules, rnd) for key, part in parts.items()}
        all_preds = {
            "seen": seen_preds(builts["seen"].inst),
            "unseen": unseen_preds(builts["unseen"].inst),
        }
        # the document's full predictions (LogiRE composes bodies over all of them): this part's cells of the
        # variant united with the other part's cells of its companion (the bench's rows: seen "" pairs with the
        # configured route, prior_/published_ with the rule model's seen cells)
        doc_preds = {
            (key, prefix): self._doc_predictions(parts[key], builts[key], p, rules)
            for key, preds in all_preds.items()
            for prefix, p in preds.items()
        }

        def companion(key: str, prefix: str) -> tuple[str, str]:
            other = "unseen" if key == "seen" else "seen"
            return other, prefix if prefix in all_preds[other] else ""

        for key, part in parts.items():
            built = builts[key]
            y = built.inst.y.numpy() > 0.5
            preds = all_preds[key]
            if key == "unseen":
                pm = msg.arrays.get("published_mask")
                if pm is not None:
                    metrics["published_triples"] = int(np.asarray(pm, bool)[np.unique(built.inst.tri.numpy())].sum())
            cell_doc = self._cell_docs(part, built)
            doc_gold = self._doc_gold(part)
            ndocs = len(doc_gold)
            for prefix, p in preds.items():
                counts: PRF = prf_counts(p, y, built.in_train, built.total_gold)
                metrics.update(counts.metrics(f"{prefix}{key}_"))
                tp = p & y
                per_doc = np.stack(
                    [
                        np.bincount(cell_doc[tp], minlength=ndocs),
                        np.bincount(cell_doc[p], minlength=ndocs),
                        doc_gold,
                        np.bincount(cell_doc[tp & built.in_train], minlength=ndocs),
                    ],
                    1,
                ).astype(np.int64)
                arrays[f"docs_{prefix}{key}"] = per_doc
                if self.golden:
                    body_d, corr_d = self._logic_docs(part, doc_preds[(key, prefix)], doc_preds[companion(key, prefix)])
                    body, correct = body_d.sum(0), corr_d.sum(0)
                    arrays[f"doclogic_body_{prefix}{key}"] = body_d
                    arrays[f"doclogic_correct_{prefix}{key}"] = corr_d
                    if prefix in ("", "backbone_"):
                        arrays[f"logic_body_{prefix}{key}"] = body
                        arrays[f"logic_correct_{prefix}{key}"] = correct
                    value = logic_from_counts(body, correct)
                    if not math.isnan(value):
                        metrics[f"{prefix}{key}_logic"] = value
            metrics[f"facts_unknown_triple_{key}"] = built.unknown
        for name, value in th.items():
            if math.isfinite(value):
                metrics[f"threshold_{name}"] = value
        metrics["num_examples"] = int(sum(t.num_cells for k, t in self.tables.items() if k != "train"))
        metrics["time_grounding_s"] = tg
        metrics["time_eval_s"] = time.perf_counter() - t_start
        return msg.reply(self.cid, arrays=arrays, metrics=metrics)

    # -- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Bodies grounded by the graph search before Fast-FedNSL's switch (they keep graph values after it)."""
        return {
            "graph_bodies": {k: sorted(c.graph_bodies()) for k, c in self.caches.items() if c.mode == "cached_path"}
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k, items in dict(state.get("graph_bodies", {})).items():
            if k in self.caches:
                self.caches[k].allow_graph(items)
