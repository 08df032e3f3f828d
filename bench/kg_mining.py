"""Closed-path mining: the compiled search over a head's sampled triples against the per-triple numpy search.

Workload: ``rules.kg_mining.mine_chain_rule_support`` with length-3 bodies, ``--samples`` sampled facts a head
(500, as the FB15k-237 and WN18RR configs mine; 300 in ``fednsl_kg_own``) and 64 neighbours at h and t, seed 0.
Ours is the library's call. The reference is the search the library used until 7 Dec 2026, kept here: numpy
array operations per sampled triple (meet in the middle at h's and t's neighbours, as ours), with the same
neighbour draws. Both run in the same process, one thread, in turn (ours, reference, ours, ...), and the
supports must be equal. The compiled kernel is loaded (or compiled) once before timing.

``--confidences``: also the AMIE counts of each head's 300 best supported bodies from 1,000 sampled starts
(``rule_statistics(..., max_starts=1000)``, as the FB15k-237 config re-ranks its pool) on a walks graph without
dense products: counted by sets in the compiled loop against sparse products (``by_sets=False``), in turn, the
counts equal. ``--heads N``: the first N heads (by id) only.

    python -m bench.kg_mining [--datasets fb15k237 wn18rr kinship_rnnlogic umls_rnnlogic pykeen:umls synthetic]
                              [--samples 500] [--repeats 3] [--confidences [--heads N]]

Data: ``$FEDNSL_SHARED_DATA/kg/<name>/``; ``pykeen:NAME`` and ``synthetic`` need no shared data. A missing folder
is skipped with a message naming it. The 1-minute load average is recorded (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import write_result
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from rules.kg_mining import _OutEdges as OutEdges
from rules.kg_mining import directed_triples, mine_chain_rule_support, rule_statistics

REPO = Path(__file__).resolve().parents[1]
Body = tuple[int, ...]


def _cap(rel: np.ndarray, node: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if rel.size <= k:
        return rel, node
    pick = np.sort(rng.choice(rel.size, size=k, replace=False))
    return rel[pick], node[pick]


def _group(node: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For edges sorted by node: unique nodes, start offset and count of each group."""
    uniq, start, count = np.unique(node, return_index=True, return_counts=True)
    return uniq, start, count


def _expand(group_of_item: np.ndarray, start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cross each item with the members of its group: (item index, member offset) for every pair."""
    rep = count[group_of_item]
    item = np.repeat(np.arange(group_of_item.size), rep)
    first = np.repeat(start[group_of_item], rep)
    within = np.arange(item.size) - np.repeat(np.cumsum(rep) - rep, rep)
    return item, first + within


def _closed_path_codes(
    out: OutEdges,
    h: int,
    q: int,
    t: int,
    inv: np.ndarray,
    max_len: int,
    max_neighbors: int,
    rng: np.random.Generator,
    base: int,
) -> np.ndarray:
    """Distinct body codes of simple paths h -> t (length ≤ max_len) avoiding the edge h -q-> t itself.

    Code of (b1..bL) = Σ (b_i + 1) · base^(i-1) with base = 2R + 1 (0 = no relation), so lengths don't collide.
    """
    codes: list[np.ndarray] = []
    r1, n1 = out.of(h)
    # length 1: a different relation between h and t (the triple's own edge is excluded)
    direct = (n1 == t) & (r1 != q)
    codes.append(r1[direct] + 1)
    if max_len >= 2:
        r1, n1 = _cap(r1, n1, max_neighbors, rng)
        keep = (n1 != h) & (n1 != t)
        r1, n1 = r1[keep], n1[keep]
        o1 = np.argsort(n1, kind="stable")
        r1, n1 = r1[o1], n1[o1]
        rt, nt = out.of(t)  # t -b-> z  <=>  z -inv(b)-> t
        rt, nt = _cap(rt, nt, max_neighbors, rng)
        keep = (nt != h) & (nt != t)
        r3, n3 = inv[rt[keep]], nt[keep]
        o3 = np.argsort(n3, kind="stable")
        r3, n3 = r3[o3], n3[o3]
        u1, s1, c1 = _group(n1)
        u3, s3, c3 = _group(n3)
        # length 2: h -b1-> z -b2-> t with z ∉ {h, t}
        common, i1, i3 = np.intersect1d(u1, u3, assume_unique=True, return_indices=True)
        if common.size:
            a, off1 = _expand(i1, s1, c1)
            b, off3 = _expand(i3[a], s3, c3)
            codes.append((r1[off1[b]] + 1) + (r3[off3] + 1) * base)
        if max_len >= 3 and u1.size and u3.size:
            # length 3: h -b1-> y -b2-> z -b3-> t, y ≠ z, y, z ∉ {h, t}
            starts, ends = out.ptr[u1], out.ptr[u1 + 1]
            lens = ends - starts
            yi = np.repeat(np.arange(u1.size), lens)
            pos = np.repeat(starts, lens) + (np.arange(yi.size) - np.repeat(np.cumsum(lens) - lens, lens))
            b2, z = out.rel[pos], out.dst[pos]
            zi = np.searchsorted(u3, z)
            zi = np.minimum(zi, u3.size - 1)
            hit = (u3[zi] == z) & (z != u1[yi])
            yi, b2, zi = yi[hit], b2[hit], zi[hit]
            if yi.size:
                a, off1 = _expand(yi, s1, c1)
                b, off3 = _expand(zi[a], s3, c3)
                codes.append((r1[off1[b]] + 1) + (b2[a[b]] + 1) * base + (r3[off3] + 1) * base * base)
    found = np.sort(np.concatenate(codes))  # distinct by sorting: numpy's hash-based np.unique is slower here
    return found[np.r_[True, found[1:] != found[:-1]]] if found.size else found


def reference_support(
    graph: SparseGraph, triples: np.ndarray, max_len: int, samples: int, max_neighbors: int, seed: int
) -> dict[int, dict[Body, int]]:
    """The supports as the per-triple search counted them (same sampling and draws as the library)."""
    R = graph.num_relations
    facts = np.unique(directed_triples(triples, R), axis=0)
    inv = np.concatenate([np.arange(R, 2 * R), np.arange(R)]).astype(np.int64)
    base = 2 * R + 1
    out = OutEdges(graph)
    facts = facts[np.argsort(facts[:, 1], kind="stable")]
    bounds = np.searchsorted(facts[:, 1], np.arange(2 * R + 1))
    result: dict[int, dict[Body, int]] = {}
    for q in range(2 * R):
        rows = facts[bounds[q] : bounds[q + 1]]
        rng = np.random.default_rng([seed, q])
        if rows.shape[0] > samples:
            rows = rows[np.sort(rng.choice(rows.shape[0], size=samples, replace=False))]
        per_triple = [
            _closed_path_codes(out, int(h), q, int(t), inv, max_len, max_neighbors, rng, base) for h, _, t in rows
        ]
        if not per_triple:
            result[q] = {}
            continue
        codes, counts = np.unique(np.concatenate(per_triple), return_counts=True)
        result[q] = {_body(int(c), base): int(n) for c, n in zip(codes, counts)}
    return result


def _body(code: int, base: int) -> Body:
    out = []
    while code:
        out.append(code % base - 1)
        code //= base
    return tuple(out)


def time_confidences(graph: SparseGraph, supports: dict[int, dict[Body, int]], heads: int | None) -> dict[str, Any]:
    """Seconds of each head's pool counts by sets and by sparse products (one call each, in turn), and equality."""
    took = {"sets": 0.0, "products": 0.0}
    equal = True
    chosen = sorted(q for q, t in supports.items() if t)[:heads]
    for q in chosen:
        pool = sorted(supports[q], key=lambda b: (-supports[q][b], b))[:300]
        counts = []
        for label, by_sets in (("sets", True), ("products", False)):
            t0 = time.perf_counter()
            counts.append(rule_statistics(graph, q, pool, dense=False, max_starts=1000, by_sets=by_sets))
            took[label] += time.perf_counter() - t0
        a, b = counts
        equal &= np.array_equal(a.support, b.support) and np.array_equal(a.body_size, b.body_size)
    return {"heads": len(chosen), "seconds": took, "speedup": took["products"] / took["sets"], "counts_equal": equal}


def run_dataset(
    name: str, samples: int, repeats: int, confidences: bool = False, heads: int | None = None
) -> dict[str, Any] | None:
    folder = Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data")) / "kg" / name
    if name.startswith(("synthetic", "pykeen:")):
        kg = load_kg(name)
    elif not folder.is_dir():
        print(f"skipped {name}: {folder} not found")
        return None
    else:
        kg = load_kg(folder)
    train = np.asarray(kg.train)
    graph = SparseGraph.from_triples(train, kg.num_entities, kg.num_relations)
    args = (3, samples, 64, 0)
    mine_chain_rule_support(graph, train[:50], 3, samples_per_relation=5)  # load or compile the kernel first
    times: dict[str, list[float]] = {"ours": [], "reference": []}
    results: dict[str, Any] = {}
    for _ in range(max(repeats, 1)):
        for label in ("ours", "reference"):
            t0 = time.perf_counter()
            if label == "ours":
                results[label] = mine_chain_rule_support(
                    graph, train, args[0], samples_per_relation=samples, max_neighbors=args[2], seed=args[3]
                )
            else:
                results[label] = reference_support(graph, train, *args)
            times[label].append(time.perf_counter() - t0)
    ours, ref = statistics.median(times["ours"]), statistics.median(times["reference"])
    conf = None
    if confidences:
        rule_statistics(graph, 0, [(0,)], dense=False, max_starts=5, by_sets=True)  # load or compile first
        conf = time_confidences(graph, results["ours"], heads)
    return {
        "dataset": name,
        "entities": kg.num_entities,
        "relations": kg.num_relations,
        "train_facts": len(train),
        "bodies": int(sum(len(t) for t in results["ours"].values())),
        "seconds": {"ours": ours, "reference": ref, "all": times},
        "speedup": ref / ours,
        "supports_equal": results["ours"] == results["reference"],
        "confidences": conf,
        "load_avg_1min": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fb15k237", "wn18rr", "kinship_rnnlogic", "pykeen:umls"])
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--confidences", action="store_true")
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--out", default="kg_mining_kernel")
    args = ap.parse_args()
    torch.set_num_threads(1)
    runs = (run_dataset(n, args.samples, args.repeats, args.confidences, args.heads) for n in args.datasets)
    rows = [r for r in runs if r is not None]
    print("| set | E | R | bodies | compiled search | per-triple numpy (reference) | speed-up | supports equal |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        print(
            f"| {r['dataset']} | {r['entities']} | {r['relations']} | {r['bodies']} | {s['ours']:.2f} s | "
            f"{s['reference']:.2f} s | {r['speedup']:.1f}× | {r['supports_equal']} |"
        )
    for r in rows:
        c = r["confidences"]
        if c is not None:
            print(
                f"confidences, {r['dataset']}, {c['heads']} heads: by sets {c['seconds']['sets']:.2f} s, sparse "
                f"products {c['seconds']['products']:.2f} s = {c['speedup']:.1f}× (equal: {c['counts_equal']})"
            )
    command = f"python -m bench.kg_mining --datasets {' '.join(args.datasets)} --samples {args.samples}"
    if args.confidences:
        command += " --confidences" + ("" if args.heads is None else f" --heads {args.heads}")
    print(f"wrote {write_result(args.out, {'command': command, 'runs': rows})}")


if __name__ == "__main__":
    main()
