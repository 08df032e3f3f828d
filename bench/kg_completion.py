"""Rule-only link prediction with fednsl-kg, beside the published rule learners (issue 18).

    python -m bench.kg_completion --dataset kinship --seeds 0 1 2
    python -m bench.kg_completion --dataset umls --seeds 0 1 2
    python -m bench.kg_completion --dataset r10 --seeds 0 1 2        # federated vs local-only vs centralised
    python -m bench.kg_completion --dataset fb15k237 --seeds 0       # one seed (2-core budget; stated in the table)
    python -m bench.kg_completion --dataset wn18rr --seeds 0
    python -m bench.kg_completion --dataset synthetic --seeds 0 1 2 --set rounds=2
    python -m bench.kg_completion --dataset dwie --seeds 0 1 2       # typed rule heads vs the untyped ablation
    python -m bench.kg_completion --dataset kinship_skew --seeds 0 1 2   # 80/10/10 triple split: federated vs local
    python -m bench.kg_completion --dataset kinship --embedding RotatE    # + a pykeen model in the same table

Each seed runs the dataset's config (``configs/fednsl_kg_<dataset>.yaml``, overridable with ``--set``) end to end
through :func:`fednsl.pipeline.train` and reads the final filtered test metrics from summary.json (ties by
expectation, head + tail queries, train ∪ valid ∪ test filter), the wall time of the run, and MRR after each
round against the cumulative wall time (the MRR-vs-time curve to set beside AnyBURL's points in the issue).
Numbers are mean ± 95% t-interval over seeds. The published figures come from the config's ``paper:`` block
(specs/kg_completion.md). ``--embedding MODEL`` trains a pykeen model (:mod:`bench.kg_embedding`, the optional
``kg`` extra) on the same KG for each seed in the same invocation, scores it with the same evaluator and puts its
row in the same table. Writes bench/results/kg_completion_<dataset>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import RESULTS, mean_ci, write_result
from fednsl.common.torch_utils import torch_threads
from fednsl.config import load_config
from fednsl.pipeline import train
from kg.kg_sources import load_kg

CONFIGS = {"synthetic": "configs/fednsl_kg_synthetic.yaml", "kinship": "configs/fednsl_kg_kinship.yaml",
           "umls": "configs/fednsl_kg_umls.yaml", "fb15k237": "configs/fednsl_kg_fb15k237.yaml",
           "wn18rr": "configs/fednsl_kg_wn18rr.yaml", "r10": "configs/fednsl_kg_fb15k237_r10.yaml",
           "dwie": "configs/fednsl_kg_dwie.yaml", "kinship_skew": "configs/fednsl_kg_kinship.yaml"}
SKEW = ["data.num_clients=3", "data.partition=triple", "data.shares=[0.8, 0.1, 0.1]"]
METRICS = ("test_mrr", "test_mr", "test_hits@1", "test_hits@3", "test_hits@10")
SETTINGS = {  # dataset -> setting name -> extra overrides; other datasets run one setting, "centralised"
    "r10": {  # the centralised run reads the ten clients' union as one KG
        "federated": [],
        "local-only": ["method_kwargs.local_only=true"],
        "centralised": ["data.federated_folder=null", "data.source=../shared/data/kg/fb15k237_fedlu_r10"],
    },
    "dwie": {"typed": [], "untyped": ["data.entity_types=false"]},  # rule heads (r, domain, range) vs (r, 0, 0)
    # Kinship by triple over one data-rich and two data-poor clients (they share every relation)
    "kinship_skew": {"federated": SKEW, "local-only": [*SKEW, "method_kwargs.local_only=true"]},
}



def collect(run_dir: Path, wall: float | None = None) -> dict[str, Any]:
    """Final metrics, wall time and the MRR-after-each-round curve of a finished run directory."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if "test_mrr" not in summary:  # e.g. the client timed out and the round lost its quorum
        dropped = [stage for stage, m in summary.get("final", {}).items() if m.get(f"{stage}.dropped")]
        sys.exit(f"{run_dir}: no test metrics in summary.json (clients dropped in {sorted(dropped) or 'no stage'}; "
                 f"see {run_dir / 'run.log'}, and raise federation.client_timeout_s if a client timed out)")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve, ends, elapsed = [], {}, 0.0
    sent: dict[int, dict[str, float]] = {}  # round -> bytes up / down, summed over its stages (evaluation included)
    for row in (r for r in rows if r["scope"] == "server"):
        for way in ("up", "down"):
            key = f"{row['stage']}.bytes_{way}"
            if key in row:
                sent.setdefault(row["round"], {"up": 0.0, "down": 0.0})[way] += float(row[key])
        if row["stage"] == "round":
            elapsed += float(row.get("round_time_s", 0.0))
            ends[row["round"]] = elapsed
        if row["stage"] == "evaluate" and "test_mrr" in row:
            curve.append({"round": row["round"], "mrr": row["test_mrr"], "round_end_s": None})
    for point in curve:
        point["round_end_s"] = ends.get(point["round"])
    return {"wall_s": summary["wall_time_s"] if wall is None else wall, **{k: summary[k] for k in METRICS},
            "test_mrr_pessimistic": summary["test_mrr_pessimistic"], "peak_rss_mb": summary.get("peak_rss_mb"),
            "clients": summary.get("clients", {}), "bytes_per_round": [sent[r] for r in sorted(sent)],
            "curve": curve, "data": summary.get("data", {})}


def run_once(config: str, overrides: list[str], out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = train(load_config(config, overrides), out, progress=False)
    return collect(result.run_dir, time.perf_counter() - t0)


def command(dataset: str, seed: int, extra: list[str]) -> str:
    sets = " ".join(f"--set {shlex.quote(o)}" for o in [f"seed={seed}", *extra])
    return f"fednsl train {CONFIGS[dataset]} {sets}"


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± 95 % interval of each metric over the runs; a metric some run lacks (the peak memory of runs made
    before summary.json recorded it) is left out."""
    out = {}
    for k in (*METRICS, "test_mrr_pessimistic", "wall_s", "peak_rss_mb"):
        values = [r.get(k) for r in runs]
        if any(v is None for v in values):
            continue
        m, ci = mean_ci(values)
        out[k] = {"mean": m, "ci95": ci, "values": values}
    return out


def fmt(stat: dict[str, Any] | None, digits: int = 3) -> str:
    if stat is None:
        return "–"
    return f"{stat['mean']:.{digits}f} ± {stat['ci95']:.{digits}f}" if stat["ci95"] else f"{stat['mean']:.{digits}f}"


def _source(name: str) -> str:
    return "measured by the issue's author, 2 cores" if name.startswith("AnyBURL") else "published"


def paper_rows(paper: dict[str, Any], extra_columns: int = 4, hits3: bool = True) -> list[str]:
    """Markdown rows (model, MRR, Hits@1, [Hits@3: not published,] Hits@10, then ``extra_columns`` empty cells)
    of a config's ``paper:`` block."""
    tail = " |" * extra_columns
    h3 = " – |" if hits3 else ""
    rows = []
    for name, value in paper.items():
        if name in ("source", "metrics", "note", "target"):
            continue
        if isinstance(value, list):
            cells = ["–" if v is None else f"{v:.3f}" for v in value]
            rows.append(f"| {name} ({_source(name)}) | {cells[0]} | {cells[1]} |{h3} {cells[2]} |{tail}")
        elif isinstance(value, (int, float)):
            rows.append(f"| {name} ({_source(name)}) | {value:.3f} | – |{h3} – |{tail}")
    return rows


COLUMNS = ("*MRR, pessimistic*: ties ranked below the answer (what an evaluator that breaks ties against the answer "
           "reports). *Peak memory*: the run's peak resident memory (summary.json `peak_rss_mb`; – for runs made "
           "before it was recorded).")


def table(settings: dict[str, dict[str, Any]], paper: dict[str, Any]) -> list[str]:
    """The results table: one row per setting (mean ± 95 % interval over seeds), then the published rows."""
    lines = ["| model | MRR | Hits@1 | Hits@3 | Hits@10 | MR | MRR, pessimistic | wall time (s) | peak memory (MB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in settings.items():
        a = s["aggregate"]
        label = s.get("label", f"**fednsl-kg {name}**")
        lines.append(f"| {label} | {fmt(a['test_mrr'])} | {fmt(a['test_hits@1'])} | "
                     f"{fmt(a['test_hits@3'])} | {fmt(a['test_hits@10'])} | {fmt(a['test_mr'], 1)} | "
                     f"{fmt(a.get('test_mrr_pessimistic'))} | {fmt(a['wall_s'], 0)} | {fmt(a.get('peak_rss_mb'), 0)} |")
    return lines + paper_rows(paper)


def markdown(dataset: str, settings: dict[str, dict[str, Any]], paper: dict[str, Any], seeds: list[int],
             collected: bool = False) -> str:
    load = ("collected from finished runs (--from-runs), so the load during them is not recorded" if collected
            else f"load average {os.getloadavg()[0]:.1f} when the last run ended")
    beside = "".join(f", beside {s['label'].removesuffix(' (this run)')}" for s in settings.values()
                     if s.get("kind") == "embedding")
    lines = [f"# fednsl-kg on {dataset}: filtered link prediction (rule-only{beside})", "",
             f"Seeds {seeds}; mean ± 95% t-interval" + (" (one seed: no interval)" if len(seeds) < 2 else "") +
             "; filtered ranking against train ∪ valid ∪ test, head and tail queries, ties by expectation "
             f"(RNNLogic); machine: 2 CPU cores, {load} (other sessions' jobs inflate wall times). Published "
             "figures: the config's `paper:` block, each figure commented with its source as checked "
             "(docs/methods/fednsl-kg.md).", "", *table(settings, paper), "", COLUMNS]
    lines += [f"*{s['label']}*: {s['describe']}; our evaluator, the same filter and queries as the fednsl-kg rows."
              for s in settings.values() if s.get("kind") == "embedding"]
    if dataset == "r10":
        lines += ["", ("Why federated ≈ local-only here: FedLU's R10 split gives each client disjoint relations, and a "
                  "client grounds rules on its own facts only, so every body it can use is made of its own relations; "
                  "the shared generator and pool propose other clients' relations, which it cannot ground. The "
                  "triple partition, where clients share relations, is measured in docs/methods/fednsl-kg.md "
                  "(Kinship: no gain either). The centralised bound grounds on the union graph.")]
    if dataset == "kinship_skew":
        lines += ["", ("Kinship (RNNLogic split) by triple over 3 clients with shares 0.8 / 0.1 / 0.1 (c0 data-rich, c1 "
                  "and c2 data-poor; seeded with the run seed), each client filtering with its own facts (local "
                  "filter): *federated* shares one rule pool and generator; *local-only* gives each client its own. "
                  "Every client holds every relation, so the server can carry rules a poor client cannot find alone; "
                  "it cannot carry the paths the poor client's graph lacks.")]
    if dataset == "dwie":
        lines += ["", ("*typed*: rule heads (relation, domain type, range type), the types of DWIE's entities (the most "
                  "frequent type pair of each relation's training facts), read by the generator as on DWIE's document "
                  "task; *untyped*: the same run with `data.entity_types=false`, every head (relation, 0, 0). The "
                  "predictor and the evaluation are the same in both; only what the generator is conditioned on, and "
                  "so which bodies it proposes, differs.")]
    lines += ["", "Commands (one per seed):", ""]
    for name, s in settings.items():
        lines += [f"- {name}: `{c}`" for c in s["commands"]]
    lines += ["", "MRR after each round against cumulative wall time (first seed):", "",
              "| setting | round | wall time (s) | MRR |", "|---|---|---|---|"]
    for name, s in settings.items():
        for p in s["runs"][0]["curve"] if s.get("kind") != "embedding" else ():
            lines.append(f"| {name} | {p['round']} | {p['round_end_s']:.0f} | {p['mrr']:.3f} |")
    for name, s in settings.items():
        if s.get("kind") == "embedding":
            curve = s["runs"][0]["curve"]
            lines += ["", f"{name}, valid MRR against training time (first seed): " +
                      ", ".join(f"epoch {p['epoch']} {p['train_s']:.0f} s {p['valid_mrr']:.3f}" for p in curve)]
    sent = {name: s["runs"][0].get("bytes_per_round") for name, s in settings.items()}
    if any(sent.values()):
        lines += ["", "Bytes sent per round, all clients together, client → server / server → clients (first seed):", ""]
        lines += [f"- {name}: " + ", ".join(f"round {i} {b['up']:,.0f} / {b['down']:,.0f}" for i, b in enumerate(per, 1))
                  for name, per in sent.items() if per]
    if any(len(s["runs"][0].get("clients", {})) > 1 for s in settings.values()):
        lines += ["", "Per-client test MRR (mean ± 95% t-interval over the seeds):", ""]
        for name, s in settings.items():
            per = s["runs"][0].get("clients", {})
            if len(per) > 1:
                stats = {c: mean_ci([r["clients"][c]["test_mrr"] for r in s["runs"]]) for c in sorted(per)}
                lines.append(f"- {name}: " + ", ".join(
                    f"{c} {fmt({'mean': m, 'ci95': ci})}" for c, (m, ci) in stats.items()))
    return "\n".join(lines) + "\n"


def render(dataset: str) -> None:
    """Replace the table of a stored result's .md with one re-aggregated from its .json (new columns; nothing is
    re-run, the text around the table is kept)."""
    payload = json.loads((RESULTS / f"kg_completion_{dataset}.json").read_text())
    settings = {name: {**s, "aggregate": aggregate(s["runs"])} for name, s in payload["settings"].items()}
    md = RESULTS / f"kg_completion_{dataset}.md"
    lines = md.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    note = [] if COLUMNS in lines else ["", COLUMNS]
    md.write_text("\n".join([*lines[:start], *table(settings, payload["paper"]), *note, *lines[end:]]) + "\n")
    print(f"wrote {md}")


def embedding_setting(config: str, overrides: list[str], seeds: list[int], model: str, budget_s: float,
                      max_epochs: int, eval_every: int, threads: int, invocation: str) -> dict[str, Any]:
    """Train and score a pykeen ``model`` on the config's KG (``data.source``) for each seed: one table setting."""
    from bench.kg_embedding import EmbeddingSettings, require_pykeen, train_and_score

    require_pykeen("bench.kg_completion --embedding")
    es = EmbeddingSettings(model=model, budget_s=budget_s, max_epochs=max_epochs, eval_every=eval_every)
    kg = load_kg(load_config(config, overrides).data["source"])
    runs = []
    for seed in seeds:
        with torch_threads(threads):
            runs.append(train_and_score(kg, es, seed))
        r = runs[-1]
        print(f"pykeen {model} seed {seed}: MRR {r['test_mrr']:.4f} ({r['wall_s']:.0f}s)", flush=True)
    return {"aggregate": aggregate(runs), "runs": runs, "commands": [invocation], "kind": "embedding",
            "label": f"pykeen {model} (this run)", "describe": f"{es.describe()}, torch threads {threads}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--settings", nargs="+", default=None,
                    help="r10: which of federated, local-only, centralised; dwie: typed, untyped; "
                         "kinship_skew: federated, local-only")
    ap.add_argument("--out", type=Path, default=None, help="Run directories (default: a temporary folder).")
    ap.add_argument("--from-runs", action="store_true",
                    help="Do not train: collect the finished runs <out>/<setting>-seed<S> (e.g. after a timeout).")
    ap.add_argument("--render", action="store_true",
                    help="Do not train: rewrite bench/results/kg_completion_<dataset>.md from its .json.")
    ap.add_argument("--embedding", metavar="MODEL", default=None,
                    help="Also train this pykeen model (RotatE, ComplEx, ...) per seed and add its row (needs pykeen).")
    ap.add_argument("--embedding-budget-s", type=float, default=400.0, help="training seconds per embedding run")
    ap.add_argument("--embedding-epochs", type=int, default=50, help="at most this many epochs per embedding run")
    ap.add_argument("--embedding-eval-every", type=int, default=10, help="valid MRR every this many epochs")
    ap.add_argument("--embedding-threads", type=int, default=2, help="torch threads of the embedding runs")
    args = ap.parse_args()
    if args.render:
        render(args.dataset)
        return
    config = CONFIGS[args.dataset]
    # kinship_skew runs the Kinship config on a federated split: its published (centralised) rows do not apply
    paper = {} if args.dataset == "kinship_skew" else load_config(config, []).paper
    wanted = SETTINGS.get(args.dataset, {"centralised": []})
    if args.settings:
        wanted = {k: v for k, v in wanted.items() if k in args.settings}
    if args.from_runs and args.out is None:
        ap.error("--from-runs needs --out")
    if args.embedding and args.dataset == "r10":
        ap.error("--embedding needs one KG; r10 is ten clients' KGs")
    root = args.out or Path(tempfile.mkdtemp(prefix=f"kg_{args.dataset}_"))
    settings: dict[str, dict[str, Any]] = {}
    for name, extra in wanted.items():
        runs, commands = [], []
        for seed in args.seeds:
            ov = [f"seed={seed}", *extra, *args.overrides]
            run_dir = root / f"{name}-seed{seed}"
            if args.from_runs:
                if not (run_dir / "summary.json").exists():
                    print(f"{run_dir}: not finished, left out", flush=True)
                    continue
                runs.append(collect(run_dir))
            else:
                runs.append(run_once(config, ov, run_dir))
            commands.append(command(args.dataset, seed, [*extra, *args.overrides]))
            r = runs[-1]
            print(f"{args.dataset} {name} seed {seed}: MRR {r['test_mrr']:.4f} H@1 {r['test_hits@1']:.4f} "
                  f"H@10 {r['test_hits@10']:.4f} ({r['wall_s']:.0f}s)", flush=True)
        if runs:
            settings[name] = {"aggregate": aggregate(runs), "runs": runs, "commands": commands}
    if args.embedding:
        invocation = "python -m bench.kg_completion " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        settings[f"pykeen {args.embedding}"] = embedding_setting(
            config, args.overrides, args.seeds, args.embedding, args.embedding_budget_s, args.embedding_epochs,
            args.embedding_eval_every, args.embedding_threads, invocation)
    payload = {"dataset": args.dataset, "config": config, "seeds": args.seeds, "overrides": args.overrides,
               "settings": settings, "paper": paper}
    path = write_result(f"kg_completion_{args.dataset}", payload)
    md = RESULTS / f"kg_completion_{args.dataset}.md"
    md.write_text(markdown(args.dataset, settings, paper, args.seeds, collected=args.from_runs))
    print(f"wrote {path} and {md}")


if __name__ == "__main__":
    main()
