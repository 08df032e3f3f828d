"""SparseGraph path counting on FB15k-237 and WN18RR vs a naive per-query path expansion, side by side.

Ours, three ways: ``scipy_csr`` = ``SparseGraph.path_counts_sparse`` (sparse frontier × CSR, scipy CSR (B, E)
result, one thread — what the predictor consumes); ``scipy_dense`` = ``path_counts(backend="scipy")`` (same, plus
the dense (B, E) float32 tensor the interface returns); ``torch_dense`` = ``path_counts(backend="torch")`` (dense
(E, B) frontier × transposed CSR via torch.sparse.mm, 2 threads). Also ``iter_path_counts`` over all bodies at once
(prefix trie shared), as the predictor calls it.
Reference: per-query Python path expansion — for each start entity, a dict {entity: walk count} pushed through a
dict-of-lists adjacency one body relation at a time (what a straightforward rule-application loop does). It runs
on the first ``--ref-queries`` starts only (it is slow) and is reported per 1,000 queries; its counts must equal
ours exactly on those starts (``max_abs_diff``).

Workload (the predictor's): the train graph (inverses added); ``--bodies`` (body, starts) pairs — the head
relation of a random test fact, one of its 20 most confident mined bodies (``rules.kg_mining``), and ``--queries``
start entities = heads of train facts of that relation (what training grounds). Reported per dataset: graph build time and bytes, ms per 1,000 queries per body (median and mean over
bodies) for each implementation, the speed-up ratio, the documented ``memory_estimate`` for the batch used and the
measured peak extra resident memory of one batch (in a fresh process per implementation, VmHWM reset through
/proc/self/clear_refs after the graph is built). The 1-minute load
average is recorded: the machine is shared, so wall times are inflated when other jobs run.

    python -m bench.kg_grounding [--queries 1000] [--bodies 20] [--ref-queries 20] [--datasets fb15k237 wn18rr]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import write_result
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from rules.kg_mining import mine_chain_rules

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def rule_workload(kg: Any, graph: SparseGraph, n: int, queries: int, rng: np.random.Generator,
                  heads_out: list[int] | None = None) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """``n`` (body, starts) pairs as the predictor grounds them: head relations of random test facts, for each a
    mined body of that head (random among its 20 most confident, lengths 1-3), and as starts the heads of
    ``queries`` facts of that relation drawn from train (with replacement when it has fewer). ``heads_out``: gets
    each pair's head relation appended."""
    R = kg.num_relations
    heads: list[int] = []
    directed = np.concatenate([kg.test, np.stack([kg.test[:, 2], kg.test[:, 1] + R, kg.test[:, 0]], 1)])
    while len(heads) < n:
        q = int(directed[rng.integers(directed.shape[0]), 1])
        if q not in heads:
            heads.append(q)
    mined = mine_chain_rules(graph, kg.train, 3, max_rules_per_head=20, samples_per_relation=100, heads=heads,
                             seed=int(rng.integers(2**31)))
    train_dir = np.concatenate([kg.train, np.stack([kg.train[:, 2], kg.train[:, 1] + R, kg.train[:, 0]], 1)])
    out = []
    for q in heads:
        if not mined.get(q):
            continue
        body = mined[q][int(rng.integers(len(mined[q])))]
        pool = train_dir[train_dir[:, 1] == q, 0]
        out.append((body, rng.choice(pool, size=queries, replace=pool.size < queries)))
        if heads_out is not None:
            heads_out.append(q)
    return out


def naive_counts(adj: dict[tuple[int, int], list[int]], body: tuple[int, ...], start: int) -> dict[int, int]:
    """Walk counts from ``start`` along ``body`` by explicit per-query expansion."""
    walks = {start: 1}
    for q in body:
        nxt: dict[int, int] = defaultdict(int)
        for node, c in walks.items():
            for v in adj.get((node, q), ()):
                nxt[v] += c
        walks = nxt
    return walks


def bench_dataset(name: str, args: argparse.Namespace) -> dict[str, Any]:
    kg = load_kg(shared_data_dir() / "kg" / name)
    E, R = kg.num_entities, kg.num_relations
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    graph = SparseGraph.from_triples(kg.train, E, R)
    build_s = time.perf_counter() - t0
    work = rule_workload(kg, graph, args.bodies, args.queries, rng)
    batch = min(args.queries, graph.default_batch_size())

    adj: dict[tuple[int, int], list[int]] = defaultdict(list)
    for h, r, t in np.unique(kg.train, axis=0).tolist():
        adj[(h, r)].append(t)
        adj[(t, r + R)].append(h)

    per_body: list[dict[str, Any]] = []
    max_diff = 0.0
    for body, starts in work:
        row: dict[str, Any] = {"body": list(body)}
        graph.path_counts_sparse(body, starts[:8])
        t = time.perf_counter()
        graph.path_counts_sparse(body, starts)  # one call: its memory is bounded by the non-zeros, not B · E
        row["scipy_csr_ms_per_1000"] = (time.perf_counter() - t) * 1000 * 1000 / args.queries
        for backend in ("scipy", "torch"):
            graph.path_counts(body, starts[:8], backend=backend)  # warm-up (torch CSR build, caches)
            t = time.perf_counter()
            out = graph.path_counts(body, starts, backend=backend, batch_size=batch)
            row[f"{backend}_dense_ms_per_1000"] = (time.perf_counter() - t) * 1000 * 1000 / args.queries
            if backend == "scipy":
                ours = out[: args.ref_queries].numpy()
                row["nonzero_fraction"] = float((out > 0).float().mean())
            del out
        ref = np.zeros((args.ref_queries, E), dtype=np.float64)
        t = time.perf_counter()
        for i, s in enumerate(starts[: args.ref_queries].tolist()):
            for node, c in naive_counts(adj, body, s).items():
                ref[i, node] = c
        row["reference_ms_per_1000"] = (time.perf_counter() - t) * 1000 * 1000 / args.ref_queries
        max_diff = max(max_diff, float(np.abs(ref - ours).max()))
        per_body.append(row)


    # peak extra resident memory of one batch per implementation, each in a fresh process (freed memory kept by
    # the allocator would hide it here)
    peaks = {impl: _peak_in_subprocess(name, impl, work, batch) for impl in IMPLS}
    keys = [f"{impl}_ms_per_1000" for impl in IMPLS] + ["reference_ms_per_1000"]
    med = {k: statistics.median(r[k] for r in per_body) for k in keys}
    mean = {k: statistics.mean(r[k] for r in per_body) for k in keys}
    return {
        "dataset": name,
        "entities": E,
        "relations": R,
        "train_facts": int(kg.train.shape[0]),
        "directed_edges": graph.num_edges,
        "build_s": build_s,
        "graph_mb": graph.graph_bytes() / 2**20,
        "queries": args.queries,
        "reference_queries": args.ref_queries,
        "batch_size": batch,
        "memory_estimate_mb": graph.memory_estimate(batch) / 2**20,
        "peak_extra_rss_mb_one_batch": peaks,
        "median_ms_per_1000_queries_per_body": med,
        "mean_ms_per_1000_queries_per_body": mean,
        "speedup_of_means_vs_reference": {impl: mean["reference_ms_per_1000"] / mean[f"{impl}_ms_per_1000"]
                                          for impl in IMPLS},
        "speedup_vs_reference": {impl: med["reference_ms_per_1000"] / med[f"{impl}_ms_per_1000"] for impl in IMPLS},
        "max_abs_diff_vs_reference": max_diff,
        "per_body": per_body,
    }


IMPLS = ("scipy_csr", "scipy_dense", "torch_dense")


def _peak_in_subprocess(name: str, impl: str, work: list[tuple[tuple[int, ...], np.ndarray]], batch: int) -> float:
    """Peak extra resident MB of grounding every body once on its starts (one dense batch of ``batch``; all starts
    for scipy_csr), in a fresh process: the kernel's high-water mark after the calls minus the resident size before
    them (graph already built)."""
    payload = json.dumps({"name": name, "impl": impl, "bodies": [list(b) for b, _ in work],
                          "starts": [(s if impl == "scipy_csr" else s[:batch]).tolist() for _, s in work]})
    # a fixed mmap threshold stops glibc from keeping the graph build's freed temporaries for later reuse, which
    # would hide the call's allocations from the high-water mark
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
    proc = subprocess.run([sys.executable, "-m", "bench.kg_grounding", "--memory-probe", payload],
                          capture_output=True, text=True, check=True, cwd=REPO, env=env)
    return float(proc.stdout.strip().splitlines()[-1])


def _memory_probe(payload: str) -> None:
    job = json.loads(payload)
    torch.set_num_threads(2)
    kg = load_kg(shared_data_dir() / "kg" / job["name"])
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    if job["impl"] == "torch_dense":
        graph._torch_transposed()
    del kg
    _reset_peak()
    before = _status_kb("VmRSS")
    for body, starts_list in zip(job["bodies"], job["starts"]):
        starts = np.asarray(starts_list, dtype=np.int64)
        if job["impl"] == "scipy_csr":
            out: Any = graph.path_counts_sparse(body, starts)
        else:
            out = graph.path_counts(body, starts, backend=job["impl"].split("_")[0], batch_size=starts.size)
        del out
    print((_status_kb("VmHWM") - before) / 1024)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-probe":
        _memory_probe(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fb15k237", "wn18rr"])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--bodies", type=int, default=20)
    ap.add_argument("--ref-queries", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="kg_grounding")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for name in args.datasets:
        res = bench_dataset(name, args)
        med = res["median_ms_per_1000_queries_per_body"]
        ms = ", ".join(f"{k.removesuffix('_ms_per_1000')} {v:.1f}" for k, v in med.items())
        print(f"{name}: E={res['entities']} ms per 1000 queries per body: {ms}; speed-up vs reference "
              f"{ {k: round(v, 1) for k, v in res['speedup_vs_reference'].items()} }; memory estimate "
              f"{res['memory_estimate_mb']:.0f} MB, peak {res['peak_extra_rss_mb_one_batch']}, "
              f"max |diff| {res['max_abs_diff_vs_reference']}", flush=True)
        results.append(res)
    path = write_result(args.out, {
        "command": "python -m bench.kg_grounding " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(v) if isinstance(v, list) else v}" for k, v in vars(args).items()),
        "load_avg_1min": os.getloadavg()[0],
        "results": results,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
