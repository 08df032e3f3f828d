"""A small planted-rule knowledge graph (family trees) with known chain rules, for the demo and CI.

Generation (all from one ``numpy`` generator seeded by ``seed``, so the same arguments give the same KG):

1. ``num_families`` family trees of ``generations`` generations. Generation 0 is a founding couple; every
   person of a later generation is a child of a couple of the previous one; each child marries, with
   probability ``marriage_prob``, a newcomer (an in-law with no parents in the KG), and each couple has
   ``1..max_children`` children. Both spouses are parents of every child of the couple.
2. Base relations ``parent_of``, ``spouse_of`` (both directions) and ``sibling_of`` (distinct children of the
   same couple, both directions); derived relations computed exactly from their definitions:
   ``child_of``, ``grandparent_of``, ``grandchild_of``, ``great_grandparent_of``, ``uncle_of`` (uncles and aunts).
3. Noise: every triple is dropped with probability ``drop``; then ``noise`` × (kept triples) random triples
   (uniform head, relation, tail, no self-loops, not already present) are added.
4. The kept triples are shuffled and split ``split`` (default 80/10/10) into train, valid and test.

Planted rules (:data:`PLANTED`; ``~r`` is the inverse of ``r``, id ``r + R``) hold with confidence 1 on the
clean graph. After step 3 a rule's confidence — the share of (X, Y) pairs joined by a body path that also
have the head triple, over train ∪ valid ∪ test — is about ``1 - drop`` (the stated confidence), lowered a
little by noise triples that open new body paths. :func:`rule_confidence` measures it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kg.triples import KnowledgeGraph

__all__ = ["PLANTED", "RELATIONS", "PlantedRule", "planted_kg", "rule_confidence"]

RELATIONS = (
    "parent_of",
    "child_of",
    "spouse_of",
    "sibling_of",
    "grandparent_of",
    "grandchild_of",
    "great_grandparent_of",
    "uncle_of",
)

# head <- body, by relation name; "~" marks an inverse body atom (as in rules.fol and the rule exports)
PLANTED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("child_of", ("~parent_of",)),
    ("spouse_of", ("~spouse_of",)),
    ("sibling_of", ("~sibling_of",)),
    ("grandchild_of", ("~grandparent_of",)),
    ("grandparent_of", ("parent_of", "parent_of")),
    ("grandchild_of", ("child_of", "child_of")),
    ("parent_of", ("spouse_of", "parent_of")),
    ("uncle_of", ("sibling_of", "parent_of")),
    ("great_grandparent_of", ("parent_of", "parent_of", "parent_of")),
    ("great_grandparent_of", ("grandparent_of", "parent_of")),
    ("uncle_of", ("sibling_of", "~child_of")),
)


@dataclass(frozen=True)
class PlantedRule:
    """``head(X, Y) <- body[0](X, Z1), ..., body[-1](Z_{L-1}, Y)``; ids: head in 0..R-1, body in 0..2R-1."""

    head: int
    body: tuple[int, ...]
    head_name: str
    body_names: tuple[str, ...]
    confidence: float  # stated: 1 - drop

    def __str__(self) -> str:
        n = len(self.body)
        vars_ = ["X", *(f"Z{i}" for i in range(1, n)), "Y"]
        atoms = ", ".join(f"{b}({vars_[i]},{vars_[i + 1]})" for i, b in enumerate(self.body_names))
        return f"{self.head_name}(X,Y) <- {atoms}"


def _relation_id(name: str) -> int:
    """Id of ``r`` (0..R-1) or of its inverse ``~r`` (R..2R-1); the older spelling ``inv_r`` is read too."""
    for prefix in ("~", "inv_"):
        if name.startswith(prefix):
            return RELATIONS.index(name[len(prefix) :]) + len(RELATIONS)
    return RELATIONS.index(name)


def _families(
    rng: np.random.Generator, num_families: int, generations: int, max_children: int, marriage_prob: float
) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]]:
    """People count, (parent, child) pairs and (spouse, spouse) couples."""
    people = 0
    parent_child: list[tuple[int, int]] = []
    couples: list[tuple[int, int]] = []
    for _ in range(num_families):
        a, b = people, people + 1
        people += 2
        level = [(a, b)]
        couples.append((a, b))
        for _gen in range(1, generations):
            nxt: list[tuple[int, int]] = []
            for x, y in level:
                for _ in range(int(rng.integers(1, max_children + 1))):
                    child = people
                    people += 1
                    parent_child += [(x, child), (y, child)]
                    if rng.random() < marriage_prob:
                        inlaw = people
                        people += 1
                        couples.append((child, inlaw))
                        nxt.append((child, inlaw))
            level = nxt
    return people, parent_child, couples


def _closure(num: int, parent_child: list[tuple[int, int]], couples: list[tuple[int, int]]) -> dict[str, set]:
    parents: dict[int, set[int]] = {}
    children: dict[int, set[int]] = {}
    for p, c in parent_child:
        parents.setdefault(c, set()).add(p)
        children.setdefault(p, set()).add(c)
    rel: dict[str, set[tuple[int, int]]] = {r: set() for r in RELATIONS}
    rel["parent_of"] = set(parent_child)
    rel["child_of"] = {(c, p) for p, c in parent_child}
    rel["spouse_of"] = {(a, b) for a, b in couples} | {(b, a) for a, b in couples}
    for kids in children.values():
        rel["sibling_of"] |= {(x, y) for x in kids for y in kids if x != y}
    for p, c in parent_child:
        for g in children.get(c, ()):
            rel["grandparent_of"].add((p, g))
            rel["grandchild_of"].add((g, p))
            for gg in children.get(g, ()):
                rel["great_grandparent_of"].add((p, gg))
    for x, z in rel["sibling_of"]:
        for y in children.get(z, ()):
            rel["uncle_of"].add((x, y))
    return rel


def planted_kg(
    num_families: int = 10,
    generations: int = 4,
    max_children: int = 3,
    marriage_prob: float = 0.85,
    drop: float = 0.1,
    noise: float = 0.02,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
) -> tuple[KnowledgeGraph, list[PlantedRule]]:
    """The planted-rule family KG and its rules (module doc). Defaults: about 200–270 people, 1,100–1,600 triples (seed 0: 196 entities, 1,126 triples)."""
    if not (0 <= drop < 1 and noise >= 0 and generations >= 1 and max_children >= 1 and num_families >= 1):
        raise ValueError("planted_kg needs 0 <= drop < 1, noise >= 0 and positive sizes")
    if len(split) != 3 or min(split) < 0 or abs(sum(split) - 1) > 1e-9:
        raise ValueError(f"split must be three shares summing to 1, got {tuple(split)}")
    rng = np.random.default_rng(seed)
    num_e, parent_child, couples = _families(rng, num_families, generations, max_children, marriage_prob)
    rel = _closure(num_e, parent_child, couples)
    triples = np.asarray([(h, RELATIONS.index(r), t) for r in RELATIONS for h, t in sorted(rel[r])], dtype=np.int64)
    triples = triples[rng.random(len(triples)) >= drop]
    present = {tuple(x) for x in triples.tolist()}
    extra: list[tuple[int, int, int]] = []
    target = round(noise * len(triples))
    while len(extra) < target:
        h, r, t = int(rng.integers(num_e)), int(rng.integers(len(RELATIONS))), int(rng.integers(num_e))
        if h != t and (h, r, t) not in present:
            present.add((h, r, t))
            extra.append((h, r, t))
    if extra:
        triples = np.concatenate([triples, np.asarray(extra, dtype=np.int64)])
    triples = triples[rng.permutation(len(triples))]
    n_train = round(split[0] * len(triples))
    n_valid = round(split[1] * len(triples))
    kg = KnowledgeGraph(
        name=f"synthetic:{seed}",
        entities=tuple(f"person{i:04d}" for i in range(num_e)),
        relations=RELATIONS,
        train=triples[:n_train],
        valid=triples[n_train : n_train + n_valid],
        test=triples[n_train + n_valid :],
    )
    rules = [
        PlantedRule(
            head=_relation_id(h),
            body=tuple(_relation_id(b) for b in body),
            head_name=h,
            body_names=body,
            confidence=1.0 - drop,
        )
        for h, body in PLANTED
    ]
    return kg, rules


def rule_confidence(
    kg: KnowledgeGraph, head: int, body: Sequence[int], splits: Sequence[str] = ("train", "valid", "test")
) -> tuple[int, int, float]:
    """(support, body pairs, confidence) of ``head(X,Y) <- body`` over the named splits.

    Body pairs: distinct (X, Y) joined by at least one body path; support: those with ``head(X, Y)``.
    ``head`` and ``body`` ids in ``0..2R-1`` (inverses allowed). Sparse products; (E, E) per step.
    """
    num_e, num_r = kg.num_entities, kg.num_relations
    trip = kg.with_inverses(kg.all_triples(splits))

    def adjacency(r: int) -> sp.csr_matrix:
        sel = trip[trip[:, 1] == r]
        data = np.ones(len(sel), dtype=np.int64)
        return sp.csr_matrix((data, (sel[:, 0], sel[:, 2])), shape=(num_e, num_e))

    if not 0 <= head < 2 * num_r or any(not 0 <= b < 2 * num_r for b in body) or not body:
        raise ValueError(f"rule ids must lie in 0..{2 * num_r - 1} and the body must be non-empty")
    reach = adjacency(body[0])
    for b in body[1:]:
        reach = reach @ adjacency(b)
        reach.data[:] = 1
    reach = (reach > 0).astype(np.int64)
    support = int(reach.multiply(adjacency(head) > 0).sum())
    pairs = int(reach.sum())
    return support, pairs, support / pairs if pairs else float("nan")
