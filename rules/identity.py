"""Rule identity: when two stored rule bodies are the same rule on the data.

Body tokens follow :class:`rules.fol.RelationVocab`: ``0..R-1`` relations, ``R..2R-1`` their inverses (``~r``),
``2R`` the stay (padding) token.

Only equivalences *measured on the training triples* are used — no logic beyond the threshold:

* **symmetric** relation ``r``: at least ``threshold`` of ``r``'s distinct facts ``r(a, b)`` have ``r(b, a)``;
  then the tokens ``r`` and ``~r`` are one class;
* **inverse pair** ``r ≠ s``: at least ``threshold`` of ``r``'s facts ``r(a, b)`` have ``s(b, a)`` *and* at least
  ``threshold`` of ``s``'s facts ``s(b, a)`` have ``r(a, b)``; then ``r ≡ ~s`` and ``~r ≡ s``.

Each share is counted *above chance*: with ``d_s`` the density of ``s`` (its facts over the ``E (E − 1)`` ordered
pairs of distinct entities), a share ``m`` counts as ``(m − d_s) / (1 − d_s)``, so that on a dense graph (Nations:
14 entities, densities up to .44) relations that are merely frequent are not one; on sparse graphs ``d_s ≈ 0``.

The default :data:`THRESHOLD` is .6, not near 1, because the facts are *training* facts: a split keeps each fact
with the train share (.8 in pykeen's splits, .88 on FB15k-237, .93 on WN18RR), so even a relation that is
symmetric on the whole KG has only that share of its training facts' reverses in train, and less where the KG
itself misses facts. Measured (docs/how-to/rules.md, *Rule identity on training splits*): the symmetric
relations of FB15k-237 (spouse, sibling, adjoins, award nominee, ...) at .77–.88, WN18RR's
``derivationally_related_form`` at .93, the planted KG's at .61–.78, while no pair of distinct relations that is
not an inverse pair reaches .6 above chance on the seven KGs checked.

Classes are closed under these (union-find), and every token maps to the smallest token id of its class
(:func:`equivalences`). :func:`canonical_body` replaces each atom by its representative and drops stay tokens
(the identity step), so ``sibling_of`` / ``~sibling_of`` and ``~parent_of`` / ``child_of`` give equal bodies when
the data says so. Nothing else is rewritten: in particular a back-and-forth step ``x, ~x`` (a *detour*, e.g.
``~parent_of, parent_of``: "a child of my parent" is me or a sibling) is **not** cancelled — it is not the
empty step on the data — only marked (:func:`is_detour`) so lists can show such rules after the others.
:func:`uses_head` marks bodies that contain the head relation (or an atom equivalent to it or to its inverse):
they predict the answer from the answer's own relation. :func:`group_rules` merges the bodies of one head by
canonical body and orders them for reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = [
    "THRESHOLD",
    "Group",
    "canonical_body",
    "equivalences",
    "group_rules",
    "is_detour",
    "relation_pairs",
    "uses_head",
]


#: the share of a relation's training facts, above chance, whose reverse (or inverse partner's fact) is also a
#: training fact for two tokens to be one (module doc): one value for mining (``mining.identity``), the reading
#: order and ``fednsl rules list``
THRESHOLD = 0.6


def relation_pairs(triples: np.ndarray, num_relations: int) -> tuple[np.ndarray, np.ndarray]:
    """``(facts, matched)``: ``facts[r]`` distinct facts of relation ``r``; ``matched[r, s]`` how many distinct
    pairs ``(a, b)`` have both ``r(a, b)`` and ``s(b, a)`` (so ``matched`` is symmetric)."""
    t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    num_r = int(num_relations)
    if t.size == 0:
        return np.zeros(num_r, np.int64), np.zeros((num_r, num_r), np.int64)
    if t[:, 1].min() < 0 or t[:, 1].max() >= num_r:
        raise ValueError(f"triples name relations outside [0, {num_r})")
    num_e = int(max(t[:, 0].max(), t[:, 2].max())) + 1
    fwd = t[:, 0] * num_e + t[:, 2]
    rev = t[:, 2] * num_e + t[:, 0]
    codes, inv = np.unique(np.concatenate([fwd, rev]), return_inverse=True)
    n = len(t)
    shape = (len(codes), num_r)
    ones = np.ones(n, dtype=np.int64)
    m_fwd = sp.csr_matrix((ones, (inv[:n], t[:, 1])), shape=shape)
    m_fwd.sum_duplicates()  # duplicate facts counted once
    m_fwd.data = np.minimum(m_fwd.data, 1)
    m_rev = sp.csr_matrix((ones, (inv[n:], t[:, 1])), shape=shape)
    m_rev.sum_duplicates()
    m_rev.data = np.minimum(m_rev.data, 1)
    facts = np.asarray(m_fwd.sum(axis=0)).ravel().astype(np.int64)
    matched = np.asarray((m_fwd.T @ m_rev).todense()).astype(np.int64)
    return facts, matched


def equivalences(triples: np.ndarray, num_relations: int, threshold: float = THRESHOLD) -> dict[int, int]:
    """Token → representative (smallest token id of its class) for all ``2R + 1`` tokens, from training
    triples ``(n, 3)`` = (head entity, relation, tail entity): symmetric relations (``r ≡ ~r``) and inverse pairs
    (``r ≡ ~s``) measured at ``threshold``, above chance (see the module doc). The stay token ``2R`` maps to
    itself."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    num_r = int(num_relations)
    facts, matched = relation_pairs(triples, num_r)
    t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    num_e = int(max(t[:, 0].max(), t[:, 2].max())) + 1 if t.size else 0
    density = facts / max(num_e * (num_e - 1), 1)
    parent = list(range(2 * num_r + 1))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x: int, y: int) -> None:
        a, b = find(x), find(y)
        if a != b:
            parent[max(a, b)] = min(a, b)

    def holds(k: int, n: int, chance: float) -> bool:
        """k of n facts matched, at least ``threshold`` of the way from chance to all: k - c n >= τ (1 - c) n."""
        return n > 0 and chance < 1.0 and k - chance * n >= threshold * (1.0 - chance) * n

    for r in range(num_r):
        if holds(int(matched[r, r]), int(facts[r]), float(density[r])):
            union(r, r + num_r)
        for s in range(r + 1, num_r):
            k = int(matched[r, s])
            if holds(k, int(facts[r]), float(density[s])) and holds(k, int(facts[s]), float(density[r])):
                union(r, s + num_r)
                union(r + num_r, s)
    return {x: find(x) for x in range(2 * num_r + 1)}


def _rep(eq: Mapping[int, int], token: int) -> int:
    return int(eq.get(int(token), int(token)))


def canonical_body(body: Sequence[int], eq: Mapping[int, int], stay: int | None = None) -> tuple[int, ...]:
    """Each atom replaced by its class representative; stay tokens (``stay``, default: the largest key of
    ``eq``, i.e. ``2R``) left out. Tokens missing from ``eq`` stand for themselves."""
    if stay is None:
        stay = max(eq) if eq else -1
    return tuple(_rep(eq, b) for b in body if int(b) != stay)


def _inverse(token: int, num_relations: int) -> int:
    return token + num_relations if token < num_relations else token - num_relations


def _num_relations(eq: Mapping[int, int], num_relations: int | None) -> int:
    if num_relations is not None:
        return int(num_relations)
    if not eq:
        raise ValueError("give num_relations or a full token map (equivalences(...)) to infer it from")
    return max(eq) // 2


def is_detour(body: Sequence[int], eq: Mapping[int, int], num_relations: int | None = None) -> bool:
    """The body has two consecutive atoms ``x, y`` with ``y`` equivalent to ``~x`` (a step there and back; stay
    tokens left out first), e.g. ``~parent_of, parent_of`` or, for symmetric ``sibling_of``, ``sibling_of,
    sibling_of``. ``num_relations`` defaults to R of a full token map ``eq``."""
    num_relations = _num_relations(eq, num_relations)
    stay = 2 * num_relations
    atoms = [int(b) for b in body if int(b) != stay]
    return any(_rep(eq, y) == _rep(eq, _inverse(x, num_relations)) for x, y in zip(atoms, atoms[1:], strict=False))


def uses_head(head: int, body: Sequence[int], eq: Mapping[int, int], num_relations: int | None = None) -> bool:
    """The body contains the head relation itself: an atom equal or equivalent to ``head`` or ``~head``.

    One exception: a one-atom body other than the head token itself (``h <- ~h`` for symmetric ``h``,
    ``child_of <- ~parent_of``) is the measured symmetry/inverse rule, which predicts ``h(x, y)`` from a
    *different* fact; it is not marked. ``h <- h`` (the identity) is."""
    num_relations = _num_relations(eq, num_relations)
    stay = 2 * num_relations
    atoms = [int(b) for b in body if int(b) != stay]
    h = int(head) % num_relations
    if len(atoms) == 1:
        return atoms[0] == h
    own = {_rep(eq, h), _rep(eq, h + num_relations)}
    return any(_rep(eq, a) in own for a in atoms)


@dataclass(frozen=True)
class Group:
    """Stored bodies of one head that are one rule on the data (same canonical body).

    ``members`` index the input list, best score first; ``index`` (the shown rule) is the best-scoring member
    that does not use the head relation, else the best member."""

    canonical: tuple[int, ...]
    index: int
    body: tuple[int, ...]
    score: float
    members: tuple[int, ...]
    uses_head: bool
    detour: bool

    @property
    def variants(self) -> int:
        """How many stored bodies collapse into this rule (1: none besides the shown one)."""
        return len(self.members)

    def sort_key(self) -> tuple[bool, bool, float, int]:
        return (self.uses_head, self.detour, -self.score, len(self.canonical))


def group_rules(
    head: int,
    bodies_with_scores: Sequence[tuple[Sequence[int], float]],
    eq: Mapping[int, int],
    num_relations: int | None = None,
) -> list[Group]:
    """One :class:`Group` per canonical body, ordered: rules neither using the head nor making a detour first,
    then detours, then head-using rules (detours last among them); within each, higher score first, shorter
    canonical body first among equal scores, then by input position. ``head`` in ``0..R-1``."""
    num_relations = _num_relations(eq, num_relations)
    by_key: dict[tuple[int, ...], list[int]] = {}
    stay = 2 * num_relations
    for i, (body, _) in enumerate(bodies_with_scores):
        by_key.setdefault(canonical_body(body, eq, stay), []).append(i)
    groups: list[Group] = []
    for key, idx in by_key.items():
        members = sorted(idx, key=lambda i: (-float(bodies_with_scores[i][1]), i))
        selfish = {i: uses_head(head, bodies_with_scores[i][0], eq, num_relations) for i in members}
        shown = next((i for i in members if not selfish[i]), members[0])
        body = tuple(int(b) for b in bodies_with_scores[shown][0])
        groups.append(
            Group(
                canonical=key,
                index=shown,
                body=body,
                score=float(bodies_with_scores[shown][1]),
                members=tuple(members),
                uses_head=selfish[shown],
                detour=is_detour(body, eq, num_relations),
            )
        )
    groups.sort(key=lambda g: (*g.sort_key(), g.index))
    return groups
