"""Score a rule set — learned here or by another tool (AnyBURL, AMIE, RNNLogic files) — on one protocol: the
fednsl-kg predictor fits the rules' weights on the KG's train split (each head early-stopped on valid) and the
filtered ranking of :mod:`kg.linkpred` evaluates it (train ∪ valid ∪ test filter, ties by expectation)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from fednsl.methods.fednsl_kg.bodies import mirror
from kg.linkpred import RankingMetrics, evaluate_link_prediction, known_answers
from kg.triples import KnowledgeGraph
from rules.fol import Rule
from rules.kg_predictor import PredictorConfig, RulePredictor

__all__ = ["rule_sets_from_rules", "score_rules"]


def rule_sets_from_rules(
    rules: Iterable[Rule], num_relations: int, top: int | None = None
) -> dict[int, list[tuple[int, ...]]]:
    """Rules (forward heads, as the rule readers return them) → bodies per query relation 0..2R-1 (the inverse
    head gets the mirrored bodies). ``top``: keep each head's first ``top`` rules (file order)."""
    fwd: dict[int, list[tuple[int, ...]]] = {}
    for rule in rules:
        head, body = int(rule.head), tuple(int(b) for b in rule.body)
        if head >= num_relations:  # an inverse head: ~h <- b  ==  h <- mirror(b)
            head, body = head - num_relations, mirror(body, num_relations)
        slot = fwd.setdefault(head, [])
        if body not in slot and (top is None or len(slot) < top):
            slot.append(body)
    out: dict[int, list[tuple[int, ...]]] = {}
    for r, bodies in sorted(fwd.items()):
        out[r] = bodies
        out[r + num_relations] = [mirror(b, num_relations) for b in bodies]
    return out


def score_rules(
    rules: Sequence[Rule],
    kg: KnowledgeGraph,
    *,
    aggregator: str = "sum",
    split: str = "test",
    predictor: dict[str, Any] | None = None,
    seed: int = 0,
    top: int | None = None,
    batch_size: int | None = None,
) -> tuple[RankingMetrics, dict[str, Any]]:
    """Fit the predictor on ``rules`` over ``kg`` and rank ``split``; returns the metrics state and a log
    (rules used, heads, how bodies were grounded, seconds). With no rules the predictor is its per-entity bias
    alone (a no-rule baseline)."""
    R = kg.num_relations
    for rule in rules:
        if not 0 <= rule.head < 2 * R or any(not 0 <= b < 2 * R for b in rule.body):
            raise ValueError(f"rule {rule} uses a relation id outside 0..{2 * R - 1} of {kg.name}")
    rule_sets = rule_sets_from_rules(rules, R, top)
    cfg = PredictorConfig(**{**(predictor or {}), "aggregator": aggregator})
    model = RulePredictor(rule_sets, kg.num_entities, aggregator, num_relations=R, config=cfg)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    known = known_answers(kg)  # early stopping filters valid as the evaluation filters the split
    valid = kg.valid if len(kg.valid) else None
    fit = model.fit(kg.train, kg.train, seed=seed, valid_triples=valid, filter_triples=known.triples(), num_relations=R)
    t1 = time.perf_counter()
    metrics = evaluate_link_prediction(model.score, kg, split, batch_size, known)
    return metrics, {
        "rules": sum(len(b) for h, b in rule_sets.items() if h < R),
        "heads": sum(h < R for h in rule_sets),
        "grounded_on": fit.get("paths", cfg.paths),  # walks or simple (for paths auto: the choice on valid)
        "constant_rules": int(fit.get("constant_rules", 0)),  # those kept (for constants auto: 0 when not chosen)
        # constants auto: "on" or "off", and the valid MRR pooled over all heads each way
        **(
            {"constants_chosen": fit["constants"], "constants_valid_mrr": fit["constants_valid_mrr"]}
            if "constants" in fit
            else {}
        ),
        "fit_s": t1 - t0,
        "eval_s": time.perf_counter() - t1,
    }
