"""Building a batch's design matrix Φ (RulePredictor._design): ours against np.unique + scipy's COO route.

Φ (U, J·F) holds the feature values of a batch's groundings, one row per distinct (query, candidate) cell. The
reference finds the cells with ``np.unique(flat, return_inverse=True)`` and builds ``sp.csr_matrix((data, (row,
col)))`` (scipy sorts and checks for duplicates). Ours counts the cells on a (B·E,) marker and orders the rows
with one stable sort (``rules.kg_predictor._cells`` and ``RulePredictor._design``). The two matrices must be the
same entry for entry (the bench fails otherwise); the ratio of the medians is the result.

The batches are the training batches of the heads with the most groundings among ``--heads`` sampled heads of
FB15k-237 (the config's predictor options: 1,000 queries a head, fan-out cap 1,000, rules with constants,
log1p + indicator features), timed in turn, ours and the reference, ``--repeats`` times each.

    python -m bench.kg_design --heads 24 --batches 4 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from bench._common import write_result
from bench.kg_rules import shared_data_dir
from kg.kg_sources import load_kg
from rules.kg_constant_rules import mine_constant_rules
from rules.kg_mining import directed_triples, mine_chain_rules
from rules.kg_predictor import PredictorConfig, RulePredictor


def reference_design(predictor: RulePredictor, batch: Any) -> tuple[np.ndarray, sp.csr_matrix]:
    """Φ by np.unique and scipy's COO -> CSR (the construction before 28 Nov)."""
    F = len(predictor.features)
    cells, inverse = np.unique(batch.flat.numpy(), return_inverse=True)
    phi = predictor._phi(batch).numpy()
    cols = batch.rule.numpy()[:, None] * F + np.arange(F)[None, :]
    mat = sp.csr_matrix(
        (phi.ravel(), (np.repeat(inverse, F), cols.ravel())),
        shape=(cells.size, batch.num_rules * F),
        dtype=np.float32,
    )
    return cells, mat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=24, help="sampled head relations to draw the batches from")
    ap.add_argument("--batches", type=int, default=4, help="the largest training batches timed")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    kg = load_kg(shared_data_dir() / "kg" / "fb15k237")
    E, R = kg.num_entities, kg.num_relations
    cfg = PredictorConfig(
        seed=args.seed, max_fanout=1000, max_train_queries=1000, constant_rules=1000, feature="log1p+indicator"
    )
    heads = sorted(np.random.default_rng(args.seed).choice(2 * R, size=args.heads, replace=False).tolist())
    predictor = RulePredictor({}, E, num_relations=R, config=cfg)
    graph = predictor.set_graph(kg.train, R)
    bodies = mine_chain_rules(
        graph, kg.train, 3, max_rules_per_head=100, pool_per_head=300, samples_per_relation=500,
        max_neighbors=64, confidence_starts=1000, seed=args.seed, heads=heads,
    )  # fmt: skip
    predictor.bodies = {q: bodies.get(q, []) for q in heads}
    train = directed_triples(kg.train, R)
    batches = []
    for q in heads:
        rows = train[train[:, 1] == q][:, [0, 2]]
        predictor.constants[q] = mine_constant_rules(graph, q, rows, 1000, min_support=2, seed=args.seed)
        rows = rows[: cfg.max_train_queries]
        batches += [(q, b) for b in predictor._batches(q, rows, None, exclude_own=True)]
    batches = sorted(batches, key=lambda qb: -qb[1].nnz)[: args.batches]
    results = []
    for q, batch in batches:
        ours, ref = [], []
        for _ in range(args.repeats):
            batch.design = None
            t0 = time.perf_counter()
            cells, phi = predictor._design(batch)
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            want_cells, want = reference_design(predictor, batch)
            ref.append(time.perf_counter() - t0)
        same = np.array_equal(cells.numpy(), want_cells) and all(
            np.array_equal(a, b)
            for a, b in [(phi.indptr, want.indptr), (phi.indices, want.indices), (phi.data, want.data)]
        )
        if not same:
            raise SystemExit(f"head {q}: the design matrices differ")
        row = {
            "head": q,
            "groundings": batch.nnz,
            "cells": int(cells.numel()),
            "ours_s": statistics.median(ours),
            "reference_s": statistics.median(ref),
        }
        row["speedup"] = row["reference_s"] / row["ours_s"]
        print(
            f"head {q}: {batch.nnz:,} groundings, {row['cells']:,} cells: ours {row['ours_s']:.3f}s, "
            f"reference {row['reference_s']:.3f}s -> {row['speedup']:.1f}x (same matrix)",
            flush=True,
        )
        results.append(row)
    command = "python -m bench.kg_design " + " ".join(sys.argv[1:])
    out = {"command": command, "load_avg_1min": os.getloadavg()[0], "batches": results}
    print(f"wrote {write_result('kg_design', out)}")


if __name__ == "__main__":
    main()
