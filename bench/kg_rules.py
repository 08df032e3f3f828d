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
(the dataset config's ``paper:`` block, each figure commented with its source as checked) are printed beside ours.

    python -m bench.kg_rules [--datasets kinship_rnnlogic umls_rnnlogic] [--seeds 0 1 2] [--rules 200]

Large graphs (FB15k-237, WN18RR) need the budget options: ``--confidence-starts`` (confidence estimated from
sampled start entities), ``--pool`` (bodies re-ranked per head), ``--max-fanout`` (a rule reaching more candidates
than this from a query is dropped for it), ``--train-queries`` and ``--epochs``; peak resident memory is reported.

    python -m bench.kg_rules --datasets fb15k237 --seeds 0 --rules 40 --pool 200 --samples 200 --neighbors 32 \
        --confidence-starts 1000 --max-fanout 1000 --train-queries 1000 --epochs 10 --threads 2 --out kg_rules_fb15k237
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import RESULTS, write_result
from bench.kg_completion import CONFIGS, paper_rows
from fednsl.config import load_config, parse_override
from fednsl.pipeline import peak_rss_mb
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from kg.linkpred import evaluate_link_prediction
from rules.kg_mining import mine_chain_rules
from rules.kg_predictor import CHOICE_KEYS, PredictorConfig, RulePredictor

REPO = Path(__file__).resolve().parents[1]

#: the config whose ``paper:`` block holds each dataset's published figures (sources as checked, one home)
PAPER_CONFIG = {"kinship_rnnlogic": "kinship", "umls_rnnlogic": "umls", "fb15k237": "fb15k237", "wn18rr": "wn18rr"}


def published_rows(name: str) -> list[str]:
    """Markdown rows of the published figures for dataset folder ``name`` (none for a dataset without a config)."""
    key = PAPER_CONFIG.get(name)
    return paper_rows(load_config(str(REPO / CONFIGS[key]), []).paper, extra_columns=0, hits3=False) if key else []


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


def predictor_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (values read as YAML) naming fields of :class:`PredictorConfig`."""
    known = {f.name for f in fields(PredictorConfig)}
    out = {}
    for item in items:
        path, value = parse_override(item)
        if len(path) != 1 or path[0] not in known:
            raise SystemExit(f"--predictor {item!r}: not a PredictorConfig field (one of {', '.join(sorted(known))})")
        out[path[0]] = value
    return out


def run_once(name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    kg = load_kg(shared_data_dir() / "kg" / name)
    E, R = kg.num_entities, kg.num_relations
    t0 = time.perf_counter()
    graph = SparseGraph.from_triples(kg.train, E, R)
    heads = None
    if args.heads:  # a seeded sample of query relations: a quick valid-MRR ablation, no test evaluation
        heads = sorted(np.random.default_rng(seed).choice(2 * R, size=min(args.heads, 2 * R), replace=False).tolist())
    bodies = mine_chain_rules(
        graph,
        kg.train,
        3,
        max_rules_per_head=args.rules,
        seed=seed,
        pool_per_head=args.pool,
        pool_by_length=args.pool_by_length,
        samples_per_relation=args.samples,
        max_neighbors=args.neighbors,
        confidence_starts=args.confidence_starts,
        heads=heads,
    )
    if heads is not None:
        bodies = {q: bodies.get(q, []) for q in heads}
    t1 = time.perf_counter()
    print(f"  {name} seed {seed}: mined {sum(len(b) for b in bodies.values())} bodies in {t1 - t0:.0f}s", flush=True)
    cfg = PredictorConfig(
        seed=seed,
        max_fanout=args.max_fanout,
        max_train_queries=args.train_queries,
        constant_rules=args.constant_rules,
        aggregator=args.aggregator,
        feature=args.feature,
        **({} if args.epochs is None else {"epochs": args.epochs}),
        **({} if args.cache_nnz is None else {"cache_nnz": args.cache_nnz}),
        **predictor_overrides(args.predictor),
    )
    predictor = RulePredictor(bodies, E, cfg.aggregator, num_relations=R, config=cfg)
    known = None if args.valid_filter == "train+valid" else np.concatenate([kg.train, kg.valid, kg.test])
    log = predictor.fit(kg.train, kg.train, valid_triples=kg.valid, filter_triples=known)
    t2 = time.perf_counter()
    print(f"  {name} seed {seed}: predictor fitted in {t2 - t1:.0f}s", flush=True)
    metrics = {} if heads is not None else evaluate_link_prediction(predictor.score, kg, "test").compute()
    t3 = time.perf_counter()
    fitted = [h for h in log["heads"].values() if h.get("valid_queries")]
    weighted = sum(h["best_valid_mrr"] * h["valid_queries"] for h in fitted) / max(
        1, sum(h["valid_queries"] for h in fitted)
    )
    return {
        "dataset": name,
        "seed": seed,
        "rules_per_head": args.rules,
        "valid_filter": args.valid_filter,
        "pool_by_length": args.pool_by_length,
        "rules_total": sum(len(b) for b in bodies.values()),
        "constant_rules_total": log.get("constant_rules", 0),
        "mine_s": t1 - t0,
        "fit_s": t2 - t1,
        "eval_s": t3 - t2,
        "total_s": t3 - t0,
        "peak_rss_mb": peak_rss_mb(),
        "load_avg_1min": os.getloadavg()[0],
        "heads": heads,
        "valid_mrr_mean_over_heads": float(np.mean([h.get("best_valid_mrr", 0.0) for h in log["heads"].values()])),
        "valid_mrr": float(weighted),  # over valid queries: each head's early-stopping MRR weighted by its queries
        "config": log["config"],
        # what paths or constants "auto" chose on valid, and the pooled valid MRR each way
        **{k: log[k] for k in CHOICE_KEYS if k in log},
        **{f"test_{k}": v for k, v in metrics.items()},
    }


def table(name: str, runs: list[dict[str, Any]]) -> str:
    def ms(key: str) -> str:
        vals = [r[key] for r in runs]
        return f"{statistics.mean(vals):.3f} ± {statistics.pstdev(vals):.3f}"

    lines = [
        f"### {name} (filtered, ties by expectation; {len(runs)} seeds)",
        "",
        "| model | MRR | Hits@1 | Hits@10 |",
        "|---|---|---|---|",
        f"| ours: mined rules + RulePredictor | {ms('test_mrr')} | {ms('test_hits@1')} | {ms('test_hits@10')} |",
    ]
    lines += published_rows(name)
    lines.append("")
    lines.append(
        f"Pessimistic MRR {ms('test_mrr_pessimistic')}; wall time per run "
        f"{statistics.mean(r['total_s'] for r in runs):.0f} s (mine + fit + evaluate)."
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["kinship_rnnlogic", "umls_rnnlogic"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rules", type=int, default=200)
    ap.add_argument("--pool", type=int, default=1000, help="bodies re-ranked by confidence per head")
    ap.add_argument(
        "--pool-by-length", action="store_true", help="re-rank the --pool most supported bodies of each length"
    )
    ap.add_argument("--samples", type=int, default=500, help="sampled facts per head for mining")
    ap.add_argument("--neighbors", type=int, default=64, help="edges kept per frontier node when mining")
    ap.add_argument("--confidence-starts", type=int, default=None, help="sampled start entities for confidence")
    ap.add_argument("--max-fanout", type=int, default=None, help="drop a (query, rule) grounding wider than this")
    ap.add_argument("--train-queries", type=int, default=4000, help="sampled training facts per head")
    ap.add_argument("--epochs", type=int, default=None, help="predictor epochs (default: PredictorConfig's)")
    ap.add_argument("--constant-rules", type=int, default=0, help="rules with constants per head (0: none)")
    ap.add_argument("--aggregator", default="sum", choices=["sum", "max", "noisy-or"])
    ap.add_argument("--feature", default="log1p", help="PredictorConfig.feature, e.g. log1p+indicator")
    ap.add_argument("--cache-nnz", type=int, default=None, help="PredictorConfig.cache_nnz (memory against time)")
    ap.add_argument(
        "--predictor", nargs="*", default=[], metavar="KEY=VALUE", help="other PredictorConfig fields, e.g. lr=0.01"
    )
    ap.add_argument(
        "--valid-filter",
        choices=("all", "train+valid"),
        default="all",
        help="facts filtered from valid rankings in early stopping: all splits, as test is ranked (default), or "
        "train ∪ valid (results before 29 Nov)",
    )
    ap.add_argument("--heads", type=int, default=None, help="only this many sampled query relations; valid MRR only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="kg_rules")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs: list[dict[str, Any]] = []
    for name in args.datasets:
        for seed in args.seeds:
            res = run_once(name, seed, args)
            print(
                json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items() if k != "config"}),
                flush=True,
            )
            runs.append(res)
    command = "python -m bench.kg_rules " + " ".join(sys.argv[1:])
    path = write_result(args.out, {"command": command, "load_avg_1min": os.getloadavg()[0], "runs": runs})
    if args.heads:
        md = "\n".join(
            f"- {r['dataset']} seed {r['seed']}: valid MRR {r['valid_mrr']:.4f} on heads {r['heads']}" for r in runs
        )
    else:
        md = "\n\n".join(table(n, [r for r in runs if r["dataset"] == n]) for n in args.datasets)
    (RESULTS / f"{args.out}.md").write_text(f"Command: `{command}`\n\n{md}\n")
    print(md)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
