"""The reading order of a knowledge-graph run's rules: one line per rule, ranked by what it explains.

A rule list is read top-down. Per triple the stored bodies that are one rule on the training triples (a
symmetric relation written ``r`` or ``~r``, an inverse pair written ``r`` or ``~s``: :mod:`rules.identity`) are
grouped into one rule, shown as its most probable form, and the rules are ranked by what each explains beyond the
rules above it on the training facts (:func:`rules.marginal.contributions`): plain rules, then detours, then rules
that use the head relation, each tier ranked by what it adds to the tiers above, rules that add nothing by
probability.

:func:`grouped` does this for the rows of ``fednsl rules list``; :func:`record_order` measures it once for a whole
store and records it (``TripleRecord.ranked``, ``RuleStore.reading_order``), so that ``rules.tsv``, ``fednsl rules
export`` and ``fednsl rules list`` show the same order without the training triples; :func:`recorded_groups`
reads the recorded order back as :func:`grouped` gives it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kg.grounding.sparse import Paths, SparseGraph
from rules.identity import THRESHOLD, Group, equivalences, group_rules
from rules.marginal import Contribution, contributions
from rules.store.records import RankedRule, RuleRow, Triple
from rules.workers import spawn_map, workers_pay

if TYPE_CHECKING:
    from rules.store import RuleStore

__all__ = [
    "BY",
    "DEFAULT_THRESHOLD",
    "MAX_FACTS",
    "Shown",
    "Training",
    "grouped",
    "recorded_equivalences",
    "recorded_groups",
    "record_order",
    "store_equivalences",
]

#: relations count as symmetric / inverse when this share of their training facts (above chance) has the reverse
#: fact: the one threshold of rules.identity, also the one mining uses
DEFAULT_THRESHOLD = THRESHOLD
#: at most this many training facts of a head are walked (sampled with seed 0), as in rules.marginal
MAX_FACTS = 2000
#: the ``by`` of a recorded order
BY = "contribution"


@dataclass(frozen=True)
class Training:
    """A KG run's training triples (all clients) and the graph they make."""

    triples: np.ndarray  # (n, 3) int64: head entity, relation, tail entity
    graph: SparseGraph

    @classmethod
    def of(cls, triples: np.ndarray, num_entities: int, num_relations: int, paths: Paths = "walks") -> Training:
        """``paths``: how the rules ground on it (walks or simple paths, the run's ``predictor.paths``)."""
        t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        return cls(t, SparseGraph.from_triples(t, int(num_entities), int(num_relations), paths=paths))


@dataclass(frozen=True)
class Shown:
    """A canonical rule as a list shows it: how many stored rules it stands for, their texts (the shown one
    left out), its marks, and what it explains beyond the rules above it (None: not measured)."""

    variants: int
    variant_rules: list[str]
    uses_head: bool
    detour: bool
    of: int  # canonical rules of the triple (before --top)
    explains: float | None = None  # share of the head's training facts it newly explains (rules.marginal)
    loo_conf: float | None = None


def store_equivalences(store: RuleStore, data: Training | None, threshold: float) -> dict[int, int]:
    """Token → representative measured on the training triples (:func:`rules.identity.equivalences`); the
    identity when they are unknown."""
    num_r = len(store.relations)
    if data is None:
        return {t: t for t in range(2 * num_r + 1)}
    return equivalences(data.triples, num_r, threshold)


def grouped(
    store: RuleStore, rows: list[RuleRow], eq: Mapping[int, int], top: int | None, data: Training | None = None
) -> tuple[list[RuleRow], dict[int, Shown]]:
    """One row per canonical rule of each triple (:func:`rules.identity.group_rules` on the rows' probabilities),
    ranked by marginal contribution on the training ``data`` (:func:`rules.marginal.contributions`) when given,
    at most ``top`` per triple, and row position → its group."""
    out: list[RuleRow] = []
    groups: dict[int, Shown] = {}
    for trows, found in _groups(store, rows, eq, data):
        for g, ranked in found[: top if top is not None else None]:
            texts = [trows[i].rule for i in g.members if i != g.index]
            groups[len(out)] = Shown(g.variants, texts, g.uses_head, g.detour, len(found), *ranked)
            out.append(trows[g.index])
    return out, groups


def _groups(
    store: RuleStore, rows: list[RuleRow], eq: Mapping[int, int], data: Training | None, workers: int = 1
) -> list[tuple[list[RuleRow], list[tuple[Group, tuple[float | None, float | None]]]]]:
    """Per triple of ``rows`` (in their order): its rows and its groups in reading order, each with
    ``(explains, loo_conf)`` (None, None when ``data`` is None). ``workers`` > 1: the heads are measured in that
    many worker processes when they hold :data:`rules.workers.MIN_PARALLEL_WORK` (fact, rule) pairs or more."""
    num_r = len(store.relations)
    by_triple: dict[Triple, list[RuleRow]] = {}
    for r in rows:
        by_triple.setdefault(r.triple, []).append(r)
    found = {
        triple: group_rules(int(triple[0]) % num_r, [(r.tokens, r.probability) for r in trows], eq, num_r)
        for triple, trows in by_triple.items()
    }
    jobs: dict[Triple, _Job] = {}
    if data is not None:
        for triple, groups in found.items():
            if groups:
                head = int(triple[0]) % num_r
                jobs[triple] = (
                    head,
                    [tuple(t for t in g.body if t < 2 * num_r) for g in groups],  # stay (padding) tokens dropped
                    data.triples[data.triples[:, 1] == head][:, [0, 2]],
                    [g.score for g in groups],
                    [2 * g.uses_head + g.detour for g in groups],  # plain rules, detours, then head-using ones
                )
    measured = _measured(data.graph, jobs, workers) if data is not None else {}
    out: list[tuple[list[RuleRow], list[tuple[Group, tuple[float | None, float | None]]]]] = []
    for triple, trows in by_triple.items():
        groups = found[triple]
        if triple not in measured:
            out.append((trows, [(g, (None, None)) for g in groups]))
            continue
        c = measured[triple]
        n = max(c.facts, 1)
        out.append((trows, [(groups[i], (float(c.gain[i]) / n, float(c.confidence[i]))) for i in c.order]))
    return out


#: one head's reading-order measurement: head, its canonical bodies, its training facts (n, 2), ties, tiers
_Job = tuple[int, list[tuple[int, ...]], np.ndarray, list[float], list[int]]


def _measure(graph: SparseGraph, job: _Job) -> Contribution:
    """:func:`rules.marginal.contributions` of one head's canonical rules (a worker's item)."""
    head, bodies, facts, tie, tiers = job
    return contributions(graph, head, bodies, facts, max_facts=MAX_FACTS, tie=tie, tiers=tiers)


def _measured(graph: SparseGraph, jobs: Mapping[Triple, _Job], workers: int) -> dict[Triple, Contribution]:
    """Every job measured, here or (``workers`` > 1 and enough (fact, rule) pairs) in worker processes, the
    largest first; each is seeded on its own, so both give the same result."""
    keys = list(jobs)
    size = [min(len(jobs[k][2]), MAX_FACTS) * len(jobs[k][1]) for k in keys]
    if workers_pay(size, workers):
        return dict(zip(keys, spawn_map(_measure, [jobs[k] for k in keys], workers, graph, size), strict=True))
    return {k: _measure(graph, jobs[k]) for k in keys}


def record_order(
    store: RuleStore, data: Training, threshold: float = DEFAULT_THRESHOLD, workers: int = 1
) -> dict[str, Any]:
    """Measure the reading order of every triple of ``store`` on the training ``data`` and record it in the
    store (``TripleRecord.ranked`` per triple, how it was measured in ``store.reading_order``); returns what was
    recorded there (with ``rules``: the canonical rules, ``seconds``: the time it took). ``workers``: processes
    for a large store (:func:`_groups`)."""
    t0 = time.perf_counter()
    eq = store_equivalences(store, data, threshold)
    num_rules = 0
    for rec in store.triples.values():  # a triple without bodies has nothing to rank
        rec.ranked = []
    for trows, found in _groups(store, store.rows(), eq, data, workers):
        rec = store.triples[trows[0].triple]
        rec.ranked = [
            RankedRule(
                bodies=(trows[g.index].index, *(trows[i].index for i in g.members if i != g.index)),
                explains=explains,
                loo_conf=conf,
                uses_head=g.uses_head,
                detour=g.detour,
            )
            for g, (explains, conf) in found
        ]
        num_rules += len(found)
    store.reading_order = {
        "by": BY,
        "threshold": float(threshold),
        "max_facts": MAX_FACTS,
        "training_triples": int(data.triples.shape[0]),
        "equivalences": [int(eq[t]) for t in range(2 * len(store.relations) + 1)],
    }
    return {**store.reading_order, "rules": num_rules, "seconds": time.perf_counter() - t0}


def recorded_equivalences(store: RuleStore, threshold: float) -> dict[int, int] | None:
    """The token equivalences recorded with the store's reading order, when one is recorded for every triple at
    ``threshold``; else None (measure them on the training triples then)."""
    info = store.reading_order
    if not store.ranked or info is None or info.get("by") != BY or float(info.get("threshold", -1)) != threshold:
        return None
    reps = info.get("equivalences")
    size = 2 * len(store.relations) + 1
    if not isinstance(reps, list) or len(reps) != size:
        return None
    return {t: int(r) for t, r in enumerate(reps)}


def recorded_groups(store: RuleStore, rows: list[RuleRow], top: int | None) -> tuple[list[RuleRow], dict[int, Shown]]:
    """:func:`grouped` from the recorded reading order (no training triples needed): ``rows`` are all rows of
    the triples to show (``store.rows(head=...)``), at most ``top`` rules per triple are kept."""
    by_body = {(r.triple, r.index): r for r in rows}
    triples = list(dict.fromkeys(r.triple for r in rows))
    out: list[RuleRow] = []
    groups: dict[int, Shown] = {}
    for t in triples:
        ranked = store.triples[t].ranked or []
        for rule in ranked[: top if top is not None else None]:
            texts = [by_body[(t, j)].rule for j in rule.bodies[1:]]
            groups[len(out)] = Shown(
                len(rule.bodies), texts, rule.uses_head, rule.detour, len(ranked), rule.explains, rule.loo_conf
            )
            out.append(by_body[(t, rule.bodies[0])])
    return out, groups
