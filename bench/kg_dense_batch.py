"""Path counting on small KGs: all the bodies of a trie level in one dense batched product vs body by body.

Workload (what ``fednsl_kg_own`` does on a small KG): the train graph with simple paths; the mined bodies of every
head (``rules.kg_mining.mine_chain_rule_support``, 300 sampled facts a head, then the 200 most confident of the
pool taken by length, as the own-KG config mines). Two timings per dataset, each ours against its reference in
the same process, one thread:

* ``grounding``: every head's training queries (both directions, 512 at a time, each query's own fact removed),
  as the predictor grounds them. Ours: ``SparseGraph.path_entries`` batched over the bodies' prefix trie
  (``kg.grounding.dense_batch``); reference: the same call with ``batched=False``, the body-by-body sparse
  products of ``iter_path_counts`` that the predictor used before 29 Nov. The entries must be equal.
* ``confidences``: the AMIE counts of every head's pool (the bodies re-ranked by confidence). Ours:
  ``head_statistics`` over all heads at once (each distinct body's path matrix once); reference: one head at a
  time (``head_statistics`` of that head's pool alone: what sharing across heads saves, the per-level batching
  being in both). The counts must be equal.

    python -m bench.kg_dense_batch [--datasets umls_pykeen umls_rnnlogic kinship_rnnlogic synthetic] [--repeats 3]

Data: ``$FEDNSL_SHARED_DATA/kg/<name>/`` (pykeen's UMLS files in ``umls_pykeen/``), or ``synthetic``: the embedded
planted-rule KG, sparse (0.05 E² directed edges), where the batched products lose and ``SparseGraph`` does not
use them (``stacks_bodies``). A missing folder is skipped with a message naming it. The 1-minute load average is recorded (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import call_times, write_result
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from rules.kg_mining import (
    directed_triples,
    head_statistics,
    mine_chain_rule_support,
    rank_heads_bodies,
    supported_pool,
)

REPO = Path(__file__).resolve().parents[1]


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall seconds of ``repeats`` calls and the last call's result."""
    times, out = call_times(fn, repeats)
    return statistics.median(times), out


def _canonical(entries: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """(body, row, col, count, total) sorted by body, row, col (the body-by-body path may leave columns unsorted)."""
    order = np.lexsort((entries[2], entries[1], entries[0]))
    return [x[order] for x in entries]


def run_dataset(name: str, repeats: int) -> dict[str, Any] | None:
    folder = Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data")) / "kg" / name
    if name.startswith("synthetic"):
        kg = load_kg(name)  # the embedded planted-rule KG
    elif not folder.is_dir():
        print(f"skipped {name}: {folder} not found")
        return None
    else:
        kg = load_kg(folder)
    E, R = kg.num_entities, kg.num_relations
    graph = SparseGraph.from_triples(kg.train, E, R, paths="simple")
    support = mine_chain_rule_support(graph, kg.train, 3, samples_per_relation=300, seed=0)
    ranked = {q: sorted(t, key=lambda b: (-t[b], b)) for q, t in support.items()}
    pools = {q: supported_pool(r, 1000, by_length=True) for q, r in ranked.items() if r}
    bodies = rank_heads_bodies(graph, support, min_support=1, max_rules=200, pool_by_length=True)
    facts = directed_triples(kg.train, R)
    queries = {q: facts[facts[:, 1] == q] for q in bodies if bodies[q]}

    def ground(batched: bool) -> list[tuple[np.ndarray, ...]]:
        out = []
        for q, rows in queries.items():
            for lo in range(0, len(rows), 512):
                chunk = rows[lo : lo + 512]
                p = graph.path_entries(bodies[q], chunk[:, 0], chunk, batched=batched)
                out.append((p.body, p.row, p.col, p.count, p.total))
        return out

    def per_head() -> dict[int, Any]:
        return {q: head_statistics(graph, {q: pool})[q] for q, pool in pools.items()}

    with torch.inference_mode():
        t_ours, ours = _timed(lambda: ground(True), repeats)
        t_ref, ref = _timed(lambda: ground(False), repeats)
        same = all(all(np.array_equal(x, y) for x, y in zip(_canonical(a), _canonical(b))) for a, b in zip(ours, ref))
        c_ours, stats = _timed(lambda: head_statistics(graph, pools), repeats)
        c_ref, stats_ref = _timed(per_head, repeats)
    counts_equal = all(
        np.array_equal(stats[q].support, stats_ref[q].support)
        and np.array_equal(stats[q].body_size, stats_ref[q].body_size)
        for q in pools
    )
    return {
        "dataset": name,
        "entities": E,
        "relations": R,
        "heads": len(queries),
        "edges_per_entity_pair": graph.num_edges / E**2,
        "stacks_bodies": graph.stacks_bodies,
        "bodies": int(sum(len(b) for b in bodies.values())),
        "train_queries": int(sum(len(r) for r in queries.values())),
        "pool_bodies": int(sum(len(p) for p in pools.values())),
        "distinct_pool_bodies": len({b for p in pools.values() for b in p}),
        "grounding_s": {"batched": t_ours, "body_by_body": t_ref, "speedup": t_ref / t_ours},
        "entries_equal": bool(same),
        "confidences_s": {"all_heads": c_ours, "per_head": c_ref, "speedup": c_ref / c_ours},
        "counts_equal": bool(counts_equal),
        "load_avg_1min": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["umls_pykeen", "umls_rnnlogic", "kinship_rnnlogic", "synthetic"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="kg_dense_batch")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [r for r in (run_dataset(n, args.repeats) for n in args.datasets) if r is not None]
    print(
        "| set | E | edges / E² | heads | bodies | grounding: batched / body by body | confidences: all heads / per head |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        g, c = r["grounding_s"], r["confidences_s"]
        print(
            f"| {r['dataset']} | {r['entities']} | {r['edges_per_entity_pair']:.2f} | {r['heads']} | {r['bodies']} | "
            f"{g['batched']:.2f} s / "
            f"{g['body_by_body']:.2f} s = {g['speedup']:.1f}× (equal: {r['entries_equal']}) | {c['all_heads']:.2f} s / "
            f"{c['per_head']:.2f} s = {c['speedup']:.1f}× (equal: {r['counts_equal']}) |"
        )
    print(f"wrote {write_result(args.out, {'command': 'python -m bench.kg_dense_batch', 'runs': rows})}")


if __name__ == "__main__":
    main()
