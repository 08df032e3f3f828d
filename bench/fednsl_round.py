"""FedNSL wall time and per-round split on real data, plus the grounding engine against a reference.

    python -m bench.fednsl_round                      # configs/fednsl_dwie.yaml, 10 rounds, 4 clients
    python -m bench.fednsl_round --rounds 2 --set data.max_docs=200

Runs the config end to end (RUN_DIR under --out) and reports, from its metrics.jsonl:

- wall time and process CPU time of the whole run (the machine may be shared: CPU time is what a dedicated
  machine with ``num_threads`` = 1 would need), and of the data/backbone phase;
- per round: grounding (φ of the round's new bodies, train + evaluation parts), scorer fitting (BCE + λ·KL),
  posterior (Eq. 9–10), generator training (Eq. 6, server), aggregation, evaluation, and communication
  (bytes down/up; the in-process engine has no network, so its transfer time is the exchange time not spent in
  client or server compute);
- the reference ratio: grounding one client's bodies over 3 successive rounds with the run's φ engine
  (:class:`fednsl.methods.fednsl.features.PhiCache`: one path-score pass per document for the union of its new
  bodies, cached by body across rounds) vs. the LogiRE way without cache (per round, per triple and document,
  full (J, N, N) path scores with :func:`kg.grounding.path_scores`, gathered at the query cells).

JSON: bench/results/fednsl_round.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fednsl.common.torch_utils import torch_threads
from fednsl.config import load_config
from fednsl.methods.fednsl.features import PhiCache
from fednsl.pipeline import train
from kg.grounding import path_scores


def per_round(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    out = []
    for rnd in sorted({r["round"] for r in rows}):
        rr = [r for r in rows if r["round"] == rnd]
        clients = [r for r in rr if r["scope"].startswith("client:")]
        server = {r["stage"]: r for r in rr if r["scope"] == "server"}

        def csum(stage: str, key: str) -> float:
            return float(sum(r.get(key, 0.0) for r in clients if r["stage"] == stage))

        train_s = server.get("train", {})
        ev = server.get("evaluate", {})
        stats = server.get("train.stats", {})
        ground = csum("train", "time_grounding_s") + csum("evaluate", "time_grounding_s")
        fit = csum("train", "time_fit_s")
        post = csum("train", "time_posterior_s")
        gen = float(train_s.get("time_generator_s", 0.0)) + float(stats.get("time_generator_s", 0.0))
        agg = float(train_s.get("time_aggregate_s", 0.0))
        eval_client = csum("evaluate", "time_eval_s") - csum("evaluate", "time_grounding_s")
        exch = float(train_s.get("train.time_s", 0.0)) + float(ev.get("evaluate.time_s", 0.0)) \
            + float(stats.get("train.stats.time_s", 0.0))
        client_compute = ground + fit + post + eval_client + csum("train.stats", "time_s")
        comm = max(0.0, exch - client_compute - gen - agg)
        out.append({
            "round": rnd, "round_time_s": float(server.get("round", {}).get("round_time_s", 0.0)),
            "grounding_s": ground, "scorer_fit_s": fit, "posterior_s": post, "generator_s": gen,
            "aggregate_s": agg, "evaluate_s": eval_client, "communication_s": comm,
            "bytes_down": int(train_s.get("train.bytes_down", 0) + ev.get("evaluate.bytes_down", 0)),
            "bytes_up": int(train_s.get("train.bytes_up", 0) + ev.get("evaluate.bytes_up", 0)
                            + stats.get("train.stats.bytes_up", 0)),
        })
    return out


def grounding_reference(federation: Any, rounds: int = 3) -> dict[str, float]:
    """One client's train part over ``rounds`` successive rule sets sampled by the final generator.

    Ours: one :class:`PhiCache` across the rounds (union of a document's new bodies per path_scores call, cached
    by body). Reference (LogiRE's way, no cache): per round, per document and per triple, full (J_t, N, N) path
    scores of the triple's bodies with :func:`kg.grounding.path_scores`, gathered at the triple's cells.
    """
    strategy = federation.strategy
    cid = sorted(federation.clients)[0]
    client = federation.clients[cid]
    table = client.tables["train"]
    pad = 2 * client.R
    rule_sets = [strategy.propose(strategy.learners["global"], 10_000 + k) for k in range(rounds)]
    ours = ref = 0.0
    diff = 0.0
    bodies_total = 0
    with torch_threads(1):
        cache = PhiCache(table, "graph")
        for rnd, rules in enumerate(rule_sets, start=1):
            per_triple = [(t, (a, b), rules.bodies[t][rules.mask[t]]) for t, (r, a, b) in
                          enumerate(rules.heads.tolist()) if (a, b) in table.groups and bool(rules.mask[t].any())]
            bodies_total += sum(len(x[2]) for x in per_triple)
            t0 = time.process_time()
            requests: dict[tuple[int, int], list[tuple[int, ...]]] = {}
            for _, ab, bodies in per_triple:
                requests.setdefault(ab, []).extend(tuple(x for x in row if x != pad) for row in bodies.tolist())
            cache.ensure(requests, rnd)
            got = [cache.features(ab, bodies, rnd) for _, ab, bodies in per_triple]
            ours += time.process_time() - t0
            t0 = time.process_time()
            want = []
            for _, ab, bodies in per_triple:
                g = table.groups[ab]
                cols = []
                for d in sorted(g.doc_slices):
                    sl = g.doc_slices[d]
                    full = path_scores(cache.channels(d)[None], bodies)[0]
                    cols.append(full[:, torch.from_numpy(g.head[sl]), torch.from_numpy(g.tail[sl])])
                want.append(torch.cat(cols, 1))
            ref += time.process_time() - t0
            diff = max([diff] + [float((a - b).abs().max()) for a, b in zip(got, want) if a.numel()])
    return {"client": cid, "rounds": rounds, "bodies": bodies_total, "cells": table.num_cells,
            "ours_cpu_s": ours, "reference_cpu_s": ref, "speedup": ref / max(ours, 1e-9), "max_abs_diff": diff}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="fednsl_dwie", help="config name or YAML path")
    ap.add_argument("--rounds", type=int, default=None, help="override rounds")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-fednsl-round"), help="run directory")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="use an empty FEDNSL_CACHE (times the backbone's embedding and FedAvg phase too)")
    args = ap.parse_args(argv)
    if args.fresh_cache:
        import os
        import tempfile

        os.environ["FEDNSL_CACHE"] = tempfile.mkdtemp(prefix="fednsl-bench-cache-")
    ov = list(args.overrides) + ([f"rounds={args.rounds}"] if args.rounds else [])
    cfg = load_config(args.config, ov)
    if args.out.exists():
        import shutil

        shutil.rmtree(args.out)
    w0, c0 = time.perf_counter(), time.process_time()
    result = train(cfg, args.out, progress=False)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    summary = json.loads((args.out / "summary.json").read_text())
    rounds = per_round(result.rows)
    totals = {k: float(np.sum([r[k] for r in rounds])) for k in rounds[0] if k.endswith("_s") and k != "round_time_s"}
    ref = grounding_reference(result.federation)
    final = {k: v for k, v in summary.get("final", {}).get("evaluate", {}).items() if not k.startswith("evaluate.")}
    out = {"config": args.config, "overrides": ov, "rounds": cfg.rounds, "wall_time_s": wall, "cpu_time_s": cpu,
           "data_timings_s": summary["data"].get("timings", {}), "backbone": summary["data"].get("backbone", {}),
           "per_round": rounds, "totals_s": totals, "grounding_reference": ref, "final_evaluate": final,
           "final_round": summary.get("final", {}).get("round", {})}
    res = Path(__file__).resolve().parent / "results"
    res.mkdir(parents=True, exist_ok=True)
    (res / "fednsl_round.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("wall_time_s", "cpu_time_s", "data_timings_s", "totals_s",
                                          "grounding_reference", "final_evaluate")}, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
