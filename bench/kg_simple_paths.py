"""Simple-path counts against walk counts, side by side, on the predictor's workload (FB15k-237, WN18RR, ...).

Ours: ``SparseGraph(paths="simple").iter_path_counts`` — the walk products with the inclusion–exclusion corrections
of ``SparseGraph._simple_step`` (no entity twice on a path). Reference pair: the same call on the same graph with
``paths="walks"`` (RNNLogic's matrix products), timed body by body in alternation, so both see the same load; the
ratio simple / walks is reported per body (median, mean). Exactness: on the first ``--ref-queries`` starts of
each body, the simple counts must equal a naive per-query enumeration of the simple paths (``max_abs_diff``).

Workload: ``--bodies`` (body, starts) pairs from ``bench.kg_grounding.rule_workload`` — a random test fact's head
relation, one of its 20 most confident mined bodies, and ``--queries`` heads of train facts of that relation,
each query's own fact excluded, as the predictor grounds its training queries.

    python -m bench.kg_simple_paths [--datasets fb15k237 wn18rr] [--queries 1000] [--bodies 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from typing import Any

import numpy as np

from bench._common import write_result
from bench.kg_grounding import rule_workload, shared_data_dir
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg


def naive_simple_counts(
    adj: dict[tuple[int, int], list[int]], body: tuple[int, ...], start: int, drop: set[tuple[int, int, int]]
) -> dict[int, int]:
    """Simple-path counts from ``start`` along ``body`` by depth-first enumeration (edges in ``drop`` removed)."""
    out: dict[int, int] = defaultdict(int)

    def walk(path: tuple[int, ...]) -> None:
        k = len(path) - 1
        if k == len(body):
            out[path[-1]] += 1
            return
        for v in adj.get((path[-1], body[k]), ()):
            if v not in path and (path[-1], body[k], v) not in drop:
                walk((*path, v))

    walk((start,))
    return out


def _timed(graph: SparseGraph, body: tuple[int, ...], starts: np.ndarray, exclude: np.ndarray) -> tuple[float, Any]:
    t = time.perf_counter()
    ((_, mat),) = graph.iter_path_counts([body], starts, exclude=exclude)
    return time.perf_counter() - t, mat


def bench_dataset(name: str, args: argparse.Namespace) -> dict[str, Any]:
    kg = load_kg(shared_data_dir() / "kg" / name)
    E, R = kg.num_entities, kg.num_relations
    walks = SparseGraph.from_triples(kg.train, E, R)
    simple = walks.with_paths("simple")
    heads: list[int] = []
    work = rule_workload(kg, walks, args.bodies, args.queries, np.random.default_rng(args.seed), heads)
    adj: dict[tuple[int, int], list[int]] = defaultdict(list)  # (u, relation 0..2R-1) -> v
    for h, r, t in np.unique(kg.train, axis=0).tolist():
        adj[(h, r)].append(t)
        adj[(t, r + R)].append(h)
    rows, max_diff = [], 0.0
    for q, (body, starts) in zip(heads, work):
        own = np.array([own_tail(adj, int(s), q) for s in starts])
        exclude = np.stack([starts, np.full(starts.size, q), own], 1)
        exclude[own < 0] = -1
        _timed(simple, body, starts[:8], exclude[:8])  # warm-up (2-cycle and self-loop caches)
        t_w, t_s = [], []
        for _ in range(args.repeats):
            t_w.append(_timed(walks, body, starts, exclude)[0])
            secs, mat = _timed(simple, body, starts, exclude)
            t_s.append(secs)
        ours = mat.tocsr()[: args.ref_queries].toarray()
        for i, s in enumerate(starts[: args.ref_queries].tolist()):
            h, _, t = exclude[i].tolist()
            drop = set() if h < 0 else {(h, q, t), (t, (q + R) % (2 * R), h)}
            ref = np.zeros(E)
            for node, c in naive_simple_counts(adj, body, s, drop).items():
                ref[node] = c
            max_diff = max(max_diff, float(np.abs(ref - ours[i]).max()))
        w, s_ = statistics.median(t_w), statistics.median(t_s)
        rows.append(
            {
                "body": list(body),
                "walks_ms_per_1000": w * 1e6 / args.queries,
                "simple_ms_per_1000": s_ * 1e6 / args.queries,
                "ratio": s_ / w,
            }
        )
    ratios = [r["ratio"] for r in rows]
    return {
        "dataset": name,
        "queries": args.queries,
        "bodies": len(rows),
        "repeats": args.repeats,
        "median_walks_ms_per_1000": statistics.median(r["walks_ms_per_1000"] for r in rows),
        "median_simple_ms_per_1000": statistics.median(r["simple_ms_per_1000"] for r in rows),
        "median_ratio_simple_over_walks": statistics.median(ratios),
        "mean_ratio_simple_over_walks": statistics.mean(ratios),
        "max_abs_diff_vs_enumeration": max_diff,
        "load_avg_1min": os.getloadavg()[0],
        "per_body": rows,
    }


def own_tail(adj: dict[tuple[int, int], list[int]], h: int, q: int) -> int:
    """A train tail of (h, q): the query's own fact, left out while it is grounded (-1: none)."""
    tails = adj.get((h, q), [])
    return int(tails[0]) if tails else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fb15k237", "wn18rr"])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--bodies", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per body and way (median kept)")
    ap.add_argument("--ref-queries", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="kg_simple_paths")
    args = ap.parse_args()
    results = []
    for name in args.datasets:
        res = bench_dataset(name, args)
        results.append(res)
        print(
            f"{name}: {res['bodies']} bodies x {args.queries} queries; walks {res['median_walks_ms_per_1000']:.1f} "
            f"ms, simple {res['median_simple_ms_per_1000']:.1f} ms per 1,000 queries (medians); simple / walks "
            f"median {res['median_ratio_simple_over_walks']:.2f}, mean {res['mean_ratio_simple_over_walks']:.2f}; "
            f"max |diff| vs enumeration {res['max_abs_diff_vs_enumeration']:g}; load {res['load_avg_1min']:.1f}",
            flush=True,
        )
    write_result(args.out, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
