"""Planted-rule generator: determinism, type consistency, planted rules hold at the stated confidence."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from kg.documents import DataError, Document, validate_corpus
from kg.io import load_corpus
from kg.synthetic import (
    MANIFEST,
    RULES_FILE,
    PlantedRule,
    PlantedRuleConfig,
    generate,
    parse_rule,
    read_rules,
    write,
)


def _groundings(doc: Document, rule: PlantedRule, relations) -> set[tuple[int, int]]:
    """Reference: all (x, y), x != y, reachable from x by following the body's edges one atom at a time
    (adjacency lists, ``~r`` followed backwards) — independent of the generator's matrix products."""
    succ: dict[tuple[str, int], set[int]] = {}
    for h, r, t in doc.facts.tolist():
        succ.setdefault((relations[r], h), set()).add(t)
        succ.setdefault(("~" + relations[r], t), set()).add(h)
    out = set()
    for x in range(doc.num_entities):
        frontier = {x}
        for atom in rule.body:
            frontier = {b for a in frontier for b in succ.get((atom, a), ())}
        out |= {(x, y) for y in frontier if y != x}
    return out


def _confidence(corpus, rule: PlantedRule) -> tuple[int, float]:
    body = hit = 0
    head = corpus.relations.index(rule.head)
    for doc in corpus:
        g = _groundings(doc, rule, corpus.relations)
        facts = {(int(h), int(t)) for h, r, t in doc.facts if r == head}
        body += len(g)
        hit += len(g & facts)
    return body, hit / max(body, 1)


@pytest.fixture(scope="module")
def default():
    return generate(PlantedRuleConfig(num_documents=120), seed=0)


def test_deterministic_in_seed() -> None:
    cfg = PlantedRuleConfig(num_documents=20)
    a, ra = generate(cfg, seed=3)
    b, rb = generate(cfg, seed=3)
    c, _ = generate(cfg, seed=4)
    assert a.documents == b.documents and ra == rb
    assert a.documents != c.documents
    validate_corpus(a)


def test_planted_rules_hold_at_stated_confidence(default) -> None:
    corpus, rules = default
    for rule in rules:
        n, conf = _confidence(corpus, rule)
        assert n >= 80, rule.text  # enough groundings for the check to mean something
        se = np.sqrt(rule.confidence * (1 - rule.confidence) / n)
        assert abs(conf - rule.confidence) < 4 * se + 1e-9, (rule.text, n, conf)


@pytest.mark.parametrize("confidence", [1.0, 0.5])
def test_confidence_setting(confidence: float) -> None:
    corpus, rules = generate(PlantedRuleConfig(num_documents=60, rule_confidence=confidence,
                                               rules=("works_in <- member_of, based_in", "hosts <- ~based_in")),
                             seed=1)
    for rule in rules:
        n, conf = _confidence(corpus, rule)
        if confidence == 1.0:
            assert conf == 1.0
        else:
            assert abs(conf - 0.5) < 4 * np.sqrt(0.25 / n)


def test_rules_are_type_consistent_and_heads_derived(default) -> None:
    corpus, rules = default
    types = corpus.entity_types
    lengths = {len(r.body) for r in rules}
    assert lengths == {1, 2, 3} and any(b.startswith("~") for r in rules for b in r.body)
    heads = {r.head for r in rules}
    for doc in corpus:
        for h, r, t in doc.facts:
            name = corpus.relations[int(r)]
            if name in heads:
                rule = next(x for x in rules if x.head == name)
                assert types[int(doc.entity_types[h])] == rule.head_type
                assert types[int(doc.entity_types[t])] == rule.tail_type
    # every combo of the default groups has a planted head
    groups = {t: k for k, g in enumerate(corpus.meta["ner_groups"]) for t in g}
    assert {(groups[r.head_type], groups[r.tail_type]) for r in rules} == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_derived_facts_not_in_text(default) -> None:
    corpus, rules = default
    doc = corpus.documents[0]
    text = " ".join(doc.tokens)
    assert all(r.head.replace("_", " ") not in text for r in rules)
    for m in doc.mentions:
        assert doc.tokens[m.start] == m.text == doc.entity_names[m.entity]


def test_write_and_load(tmp_path: Path) -> None:
    cfg = PlantedRuleConfig(num_documents=30)
    write(tmp_path, cfg, seed=5)
    assert (tmp_path / "train_annotated.json").exists() and (tmp_path / "test.json").exists()
    corpus, rules = generate(cfg, seed=5)
    back = load_corpus(tmp_path)
    assert back.meta["format"] == "synthetic" and back.meta["planted_rules"] == [r.text for r in rules]
    by_id = {d.doc_id: d for d in back}
    assert len(back) == 30 and all(by_id[d.doc_id] == d for d in corpus)
    assert back.relations == corpus.relations and back.entity_types == corpus.entity_types
    assert [parse_rule(r.text) for r in rules] == read_rules(tmp_path / RULES_FILE)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["seed"] == 5 and manifest["rules"][0]["confidence"] == 0.9


def test_random_rules() -> None:
    corpus, rules = generate(PlantedRuleConfig(num_documents=10, rules=(), num_random_rules=4), seed=2)
    assert [r.head for r in rules] == [f"derived_{k}" for k in range(4)]
    assert all(1 <= len(r.body) <= 3 for r in rules)


@pytest.mark.parametrize("rules, message", [
    (("works_in <- member_of, in0",), "not type-consistent"),
    (("in0 <- based_in",), "is a base relation"),
    (("a <- b_rel",), "neither a base relation nor a planted head"),
    (("x <- member_of, y", "y <- ~member_of, x"), "cyclic"),
    (("works_in member_of",), "must read"),
])
def test_bad_configs(rules, message) -> None:
    with pytest.raises(DataError, match=message):
        generate(PlantedRuleConfig(num_documents=2, rules=rules), seed=0)


def test_config_from_dict_round_trip() -> None:
    cfg = PlantedRuleConfig(num_documents=7, rule_confidences=(("hosts <- ~based_in", 0.5),))
    assert PlantedRuleConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(DataError, match="unknown synthetic config keys"):
        PlantedRuleConfig.from_dict({"nope": 1})
    _, rules = generate(cfg, seed=0)
    assert next(r for r in rules if r.head == "hosts").confidence == 0.5
    assert dataclasses.is_dataclass(cfg)
