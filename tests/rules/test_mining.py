"""Co-occurrence mining vs brute force, networkx and a line-by-line port of LogiRE's ERuleReader.read_raw."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import networkx as nx
import numpy as np
import pytest
import torch

from rules.mining import (
    mine_cooccurrence,
    path_bodies,
    triples_from_documents,
    type_constraints_from_documents,
)


@dataclass
class Doc:
    """Minimal stand-in for kg.documents.Document (facts (F,3) rows (head, relation, tail))."""

    facts: np.ndarray
    entity_types: np.ndarray

    @property
    def num_entities(self) -> int:
        return len(self.entity_types)


def random_doc(rng: np.random.Generator, n: int, f: int, r: int, e: int, self_loops: bool) -> Doc:
    rows = []
    while len(rows) < f:
        a, b = rng.integers(0, n, 2)
        if a == b and not self_loops:
            continue
        rows.append((int(a), int(rng.integers(0, r)), int(b)))
    if rows and rng.random() < 0.5:
        rows.append(rows[0])  # a duplicated label row
    return Doc(np.array(rows, dtype=np.int64).reshape(-1, 3), rng.integers(0, e, n))


# ---- brute force: all edge sequences, filtered by LogiRE's node rule --------------------------------------------
def brute_bodies(facts: np.ndarray, r: int, source: int, max_len: int) -> dict[int, set[tuple[int, ...]]]:
    edges = [(a, rel, b) for a, rel, b in facts.tolist()] + [(b, rel + r, a) for a, rel, b in facts.tolist()]
    out: dict[int, set[tuple[int, ...]]] = {}
    for k in range(1, max_len + 1):
        for seq in itertools.product(edges, repeat=k):
            if seq[0][0] != source or any(seq[i][2] != seq[i + 1][0] for i in range(k - 1)):
                continue
            nodes = [e[2] for e in seq]  # v_1..v_k
            if len(set(nodes)) != k or (k >= 2 and source in nodes[1:]):
                continue
            out.setdefault(nodes[-1], set()).add(tuple(e[1] for e in seq))
    return out


# ---- literal port of LogiRE reader.ERuleReader.read_raw (one document) ------------------------------------------
def logire_counts(doc: Doc, r_num: int, max_step: int, rule_counter: dict) -> None:
    def append_chain(chains, rs):
        ret = []
        for chain, chain_nodes in chains:
            for rr, rnode in rs:
                if rnode[0] not in chain_nodes:
                    ret.append((chain + rr, chain_nodes + rnode))
        return ret

    entity_types = doc.entity_types.tolist()
    paths: dict = {}
    meta_paths = {1: paths}
    for h, r, t in doc.facts.tolist():
        if h not in paths:
            paths[h] = {t: [([r], [t])]}
        elif t not in paths[h]:
            paths[h][t] = [([r], [t])]
        else:
            paths[h][t].append(([r], [t]))
        if t not in paths:
            paths[t] = {h: [([r + r_num], [h])]}
        elif h not in paths[t]:
            paths[t][h] = [([r + r_num], [h])]
        else:
            paths[t][h].append(([r + r_num], [h]))
    for step in range(2, max_step + 1):
        prev_paths = meta_paths[step - 1]
        paths = {}
        for h in prev_paths:
            for inode, prev_chain in prev_paths[h].items():
                if inode in meta_paths[1]:
                    for t, rs in meta_paths[1][inode].items():
                        if h == t:
                            continue
                        new_chain = append_chain(prev_chain, rs)
                        if not new_chain:
                            continue
                        if h not in paths:
                            paths[h] = {t: new_chain}
                        elif t not in paths[h]:
                            paths[h][t] = new_chain
                        else:
                            paths[h][t].extend(new_chain)
        meta_paths[step] = paths
    for h in meta_paths[1]:
        for t, rs in meta_paths[1][h].items():
            c_meta_paths = set()
            for step in range(1, max_step + 1):
                if h in meta_paths[step] and t in meta_paths[step][h]:
                    for path in meta_paths[step][h][t]:
                        c_meta_paths.add(tuple(path[0]))
            for r in rs:
                if r[0][0] >= r_num:
                    continue
                triple = (r[0][0], entity_types[h], entity_types[t])
                rule_counter.setdefault(triple, Counter()).update(c_meta_paths)


@pytest.mark.parametrize("seed", range(6))
def test_path_bodies_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    doc = random_doc(rng, n=6, f=8, r=3, e=2, self_loops=seed % 2 == 0)
    for source in range(6):
        mine = path_bodies(doc.facts, 3, source, max_len=3)
        assert mine == brute_bodies(doc.facts, 3, source, 3)


@pytest.mark.parametrize("seed", range(4))
def test_path_bodies_match_networkx_simple_edge_paths(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    doc = random_doc(rng, n=7, f=10, r=3, e=2, self_loops=False)
    graph = nx.MultiDiGraph()
    for a, r, b in doc.facts.tolist():
        graph.add_edge(a, b, key=r)
        graph.add_edge(b, a, key=r + 3)
    for h in graph.nodes:
        mine = path_bodies(doc.facts, 3, h, max_len=3)
        for t in graph.nodes:
            if t == h:
                continue
            ref = {tuple(k for _, _, k in p) for p in nx.all_simple_edge_paths(graph, h, t, cutoff=3)}
            assert mine.get(t, set()) == ref, (h, t)


@pytest.mark.parametrize("seed", range(8))
def test_mining_matches_logire_reader(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    docs = [random_doc(rng, n=int(rng.integers(2, 8)), f=int(rng.integers(1, 12)), r=4, e=3, self_loops=True) for _ in range(5)]
    ref: dict = {}
    for d in docs:
        logire_counts(d, 4, 3, ref)
    mined = mine_cooccurrence(docs, num_relations=4, max_len=3)
    assert {t: dict(c) for t, c in mined.counts.items()} == {t: dict(c) for t, c in ref.items()}
    # instances = number of fact rows per triple; every triple contains the identity rule [r]
    inst = Counter((r, int(d.entity_types[h]), int(d.entity_types[t])) for d in docs for h, r, t in d.facts.tolist())
    assert mined.instances == dict(inst)
    for (r, _, _), counter in mined.counts.items():
        assert counter[(r,)] >= 1


def test_hand_computed_example() -> None:
    # 0 -in(0)-> 1 -in(0)-> 2 and 0 -in(0)-> 2; types 0,0,1. R = 2 (relations 0, 1), inverse = +2.
    doc = Doc(np.array([[0, 0, 1], [1, 0, 2], [0, 0, 2], [2, 1, 0]]), np.array([0, 0, 1]))
    mined = mine_cooccurrence([doc], num_relations=2)
    # fact (0,0,2): paths 0→2: [0], [3] (inverse of fact (2,1,0)), [0,0] via 1  → triple (0, 0, 1)
    # fact (0,0,1): paths 0→1: [0], [0,2] (0→2, then 2→1 inverse of (1,0,2)), [3,2] → triple (0, 0, 0)
    # fact (1,0,2): paths 1→2: [0], [2,0] (1→0 inverse, 0→2), [2,3] → triple (0, 0, 1)
    # fact (2,1,0): paths 2→0: [1], [2] (inverse of (0,0,2)), [2,2] via 1 → triple (1, 1, 0)
    assert dict(mined.counts[(0, 0, 1)]) == {(0,): 2, (3,): 1, (0, 0): 1, (2, 0): 1, (2, 3): 1}
    assert dict(mined.counts[(0, 0, 0)]) == {(0,): 1, (0, 2): 1, (3, 2): 1}
    assert dict(mined.counts[(1, 1, 0)]) == {(1,): 1, (2,): 1, (2, 2): 1}
    assert mined.instances == {(0, 0, 1): 2, (0, 0, 0): 1, (1, 1, 0): 1}
    probs = mined.distributions()[(0, 0, 1)]
    assert probs[(0,)] == pytest.approx(2 / 6) and sum(probs.values()) == pytest.approx(1.0)
    assert path_bodies(doc.facts, 2, 0, max_len=1) == {1: {(0,)}, 2: {(0,), (3,)}}


def test_untyped_facts_start_no_count_and_bad_ids_raise() -> None:
    doc = Doc(np.array([[0, 0, 1], [1, 1, 2]]), np.array([0, -1, 1]))
    mined = mine_cooccurrence([doc], num_relations=2)
    assert mined.skipped_untyped == 2 and mined.counts == {}
    with pytest.raises(ValueError, match="relation id"):
        mine_cooccurrence([Doc(np.array([[0, 5, 1]]), np.array([0, 0]))], num_relations=2)
    with pytest.raises(ValueError, match="entity id"):
        mine_cooccurrence([Doc(np.array([[0, 0, 3]]), np.array([0, 0]))], num_relations=2)


def test_triples_and_type_constraints_from_documents() -> None:
    docs = [
        Doc(np.array([[0, 0, 1], [1, 1, 2]]), np.array([0, 1, 2])),
        Doc(torch.tensor([[0, 0, 1]]), torch.tensor([2, 1])),
    ]
    triples = triples_from_documents(docs)
    assert triples.tolist() == [[0, 0, 1], [0, 2, 1], [1, 1, 2]]
    tc = type_constraints_from_documents(docs, num_relations=3, unobserved="forbid")
    assert tc.num_types == 3 and tc.num_relations == 3
    a = tc.allowed
    assert a[0].nonzero().tolist() == [[0, 1], [2, 1]]
    assert a[3].nonzero().tolist() == [[1, 0], [1, 2]]  # inverse swaps
    assert not a[2].any() and torch.equal(a[6], torch.eye(3, dtype=torch.bool))
    tc_any = type_constraints_from_documents(docs, num_relations=3)
    assert tc_any.allowed[2].all() and tc_any.allowed[5].all()


@pytest.mark.data
def test_mining_on_dwie_matches_logire_reader(dwie_dir) -> None:
    from kg.io import load_corpus

    corpus = load_corpus(dwie_dir / "dwie_annos.tar.gz")
    docs = corpus.split("train")
    r = len(corpus.relations)
    ref: dict = {}
    for d in docs[:200]:
        logire_counts(d, r, 3, ref)
    mined = mine_cooccurrence(docs[:200], num_relations=r)
    assert {t: dict(c) for t, c in mined.counts.items()} == {t: dict(c) for t, c in ref.items()}
    triples = triples_from_documents(docs)
    assert r == 65 and 140 <= triples.shape[0] <= 170  # spec §5.3: ≈145 on LogiRE's 602-document train split
    tc = type_constraints_from_documents(docs, r, len(corpus.entity_types))
    for (rel, th, tt), counter in mined.counts.items():  # mined bodies are type-consistent by construction
        assert all(tc.body_is_consistent(th, tt, list(b)) for b in counter)
