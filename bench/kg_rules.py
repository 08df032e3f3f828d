"""Rule-only link prediction, centralised: mined chain rules -> RulePredictor -> filtered test metrics.

Pipeline per dataset and seed (no generator, no EM — the predictor half of RNNLogic on mined rules):
  1. ``rules.kg_mining.mine_chain_rules`` on the train graph (closed paths of length ≤ 3 around ≤ 500 sampled
     facts per head relation, inverses included; the 1000 best supported bodies re-ranked by AMIE confidence; the
     top ``--rules`` kept per head);
  2. ``rules.kg_predictor.RulePredictor`` (defaults of ``PredictorConfig``) fitted on train with the train graph,
     early-stopped per head on filtered valid MRR;
  3. ``kg.linkpred.evaluate_link_prediction`` on test: head and tail queries, filtered by train ∪ valid ∪ test,
     ties by expectation (pessimistic beside it), no query skipped.
Wall time covers all three steps (data loading excluded), torch at ``--threads`` threads. Published figures
(RNNLogic split, from the issue / the project's anchors spec, not re-checked here) are printed beside ours.

    python -m bench.kg_rules [--datasets kinship_rnnlogic umls_rnnlogic] [--seeds 0 1 2] [--rules 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import RESULTS, write_result
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from kg.linkpred import evaluate_link_prediction
from rules.kg_mining import mine_chain_rules
from rules.kg_predictor import PredictorConfig, RulePredictor

REPO = Path(__file__).resolve().parents[1]

# filtered MRR / Hits@1 / Hits@10 on RNNLogic's split, as quoted in issue 18 (marked (R) in specs/anchors.md)
PUBLISHED = {
    "kinship_rnnlogic": {
        "Neural-LP": (0.302, 0.167, 0.596), "DRUM": (0.334, 0.183, 0.675),
        "RNNLogic w/o emb": (0.639, 0.495, 0.924), "RNNLogic with emb": (0.722, 0.598, 0.949),
        "RotatE": (0.651, 0.504, 0.932),
    },
    "umls_rnnlogic": {
        "Neural-LP": (0.483, 0.332, 0.775), "DRUM": (0.548, 0.358, 0.854),
        "RNNLogic w/o emb": (0.745, 0.630, 0.924), "RNNLogic with emb": (0.842, 0.772, 0.965),
        "RotatE": (0.744, 0.636, 0.939),
    },
}


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


def run_once(name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    kg = load_kg(shared_data_dir() / "kg" / name)
    E, R = kg.num_entities, kg.num_relations
    t0 = time.perf_counter()
    graph = SparseGraph.from_triples(kg.train, E, R)
    bodies = mine_chain_rules(graph, kg.train, 3, max_rules_per_head=args.rules, seed=seed)
    t1 = time.perf_counter()
    cfg = PredictorConfig(seed=seed)
    predictor = RulePredictor(bodies, E, cfg.aggregator, num_relations=R, config=cfg)
    log = predictor.fit(kg.train, kg.train, valid_triples=kg.valid)
    t2 = time.perf_counter()
    metrics = evaluate_link_prediction(predictor.score, kg, "test").compute()
    t3 = time.perf_counter()
    return {
        "dataset": name, "seed": seed, "rules_per_head": args.rules,
        "rules_total": sum(len(b) for b in bodies.values()),
        "mine_s": t1 - t0, "fit_s": t2 - t1, "eval_s": t3 - t2, "total_s": t3 - t0,
        "valid_mrr_mean_over_heads": float(np.mean([h.get("best_valid_mrr", 0.0) for h in log["heads"].values()])),
        "config": log["config"],
        **{f"test_{k}": v for k, v in metrics.items()},
    }


def table(name: str, runs: list[dict[str, Any]]) -> str:
    def ms(key: str) -> str:
        vals = [r[key] for r in runs]
        return f"{statistics.mean(vals):.3f} ± {statistics.pstdev(vals):.3f}"

    lines = [f"### {name} (filtered, ties by expectation; {len(runs)} seeds)", "",
             "| model | MRR | Hits@1 | Hits@10 |", "|---|---|---|---|",
             f"| ours: mined rules + RulePredictor | {ms('test_mrr')} | {ms('test_hits@1')} | {ms('test_hits@10')} |"]
    for model, (mrr, h1, h10) in PUBLISHED.get(name, {}).items():
        lines.append(f"| {model} (published) | {mrr:.3f} | {h1:.3f} | {h10:.3f} |")
    lines.append("")
    lines.append(f"Pessimistic MRR {ms('test_mrr_pessimistic')}; wall time per run "
                 f"{statistics.mean(r['total_s'] for r in runs):.0f} s (mine + fit + evaluate).")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["kinship_rnnlogic", "umls_rnnlogic"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rules", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="kg_rules")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs: list[dict[str, Any]] = []
    for name in args.datasets:
        for seed in args.seeds:
            res = run_once(name, seed, args)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()
                              if k != "config"}), flush=True)
            runs.append(res)
    command = (f"python -m bench.kg_rules --datasets {' '.join(args.datasets)} --seeds "
               f"{' '.join(map(str, args.seeds))} --rules {args.rules} --threads {args.threads}")
    path = write_result(args.out, {"command": command, "load_avg_1min": os.getloadavg()[0], "runs": runs})
    md = "\n\n".join(table(n, [r for r in runs if r["dataset"] == n]) for n in args.datasets)
    (RESULTS / f"{args.out}.md").write_text(f"Command: `{command}`\n\n{md}\n")
    print(md)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
