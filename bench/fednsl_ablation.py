"""FedNSL ablations of the paper's Fig. 2 (b1–b3): with vs without the KL term, a λ sweep, several seeds.

    python -m bench.fednsl_ablation                                  # synthetic default, λ ∈ {0,0.01,0.1,1,10}, seeds 0-2
    python -m bench.fednsl_ablation --config fednsl_dwie --rounds 10 --out runs/ablation-dwie
    python -m bench.fednsl_ablation --lambdas 0 0.1 --seeds 0 --set data.max_docs=200

Every (λ, seed) run is a normal ``fednsl train`` run under OUT/lam<λ>-seed<s>/ (kept; an existing finished run is
reused). Written: OUT/ablation.md (results table with the exact commands), OUT/ablation.json, and the plots
OUT/plots/ablation_f1.png (b1: F1 seen/unseen, KL vs no KL), OUT/plots/ablation_logic.png (b2: logic accuracy),
OUT/plots/ablation_lambda.png (b3: unseen F1 per λ). JSON and table also go to bench/results/fednsl_ablation_<config>.{json,md}.
λ = 0 is "W/O. KL"; the config's own λ (or the first non-zero one) is "W. KL".
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np

from fednsl.config import load_config
from fednsl.methods.fednsl.plots import evaluate_curves, plot_overlay
from fednsl.pipeline import train

METRICS = ("seen_f1", "unseen_f1", "seen_ign_f1", "unseen_ign_f1", "seen_logic", "unseen_logic",
           "backbone_seen_f1", "backbone_unseen_f1", "backbone_seen_logic", "backbone_unseen_logic")


def run_one(config: str, overrides: list[str], out: Path) -> dict[str, Any]:
    if not (out / "summary.json").exists():
        if out.exists():
            import shutil

            shutil.rmtree(out)
        t0 = time.perf_counter()
        train(load_config(config, overrides), out, progress=False)
        print(f"  {out.name}: {time.perf_counter() - t0:.0f}s", flush=True)
    curves = evaluate_curves(out)
    final = {k: v[-1][1] for k, v in curves.items() if v}
    return {"dir": str(out), "final": final, "wall_time_s": json.loads((out / "summary.json").read_text())["wall_time_s"]}


def mean_std(values: list[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    return float(np.mean(vals)), float(np.std(vals))


def fmt(m: float, s: float) -> str:
    return "–" if math.isnan(m) else f"{100 * m:.1f} ± {100 * s:.1f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="fednsl_synthetic", help="config name or YAML path")
    ap.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.01, 0.1, 1.0, 10.0], help="KL weights λ")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="run seeds")
    ap.add_argument("--rounds", type=int, default=None, help="override the config's rounds")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("runs/ablation"), help="output folder")
    args = ap.parse_args(argv)

    base = list(args.overrides) + ([f"rounds={args.rounds}"] if args.rounds else [])
    cfg = load_config(args.config, base)
    default_lam = float(cfg.method_kwargs.get("kl_weight", 0.1))
    results: dict[str, Any] = {"config": args.config, "overrides": base, "runs": {}}
    t0 = time.perf_counter()
    for lam in args.lambdas:
        for seed in args.seeds:
            name = f"lam{lam:g}-seed{seed}"
            ov = base + [f"seed={seed}", f"method_kwargs.kl_weight={lam}"]
            print(f"run {name}", flush=True)
            results["runs"][name] = {"lambda": lam, "seed": seed, "overrides": ov,
                                     **run_one(args.config, ov, args.out / name)}
    results["total_time_s"] = time.perf_counter() - t0

    def group(lam: float) -> list[dict[str, Any]]:
        return [r for r in results["runs"].values() if r["lambda"] == lam]

    rows = []
    for lam in args.lambdas:
        runs = group(lam)
        stats = {m: mean_std([r["final"].get(m, math.nan) for r in runs]) for m in METRICS}
        recall_key = next((k for r in runs for k in r["final"] if k.endswith("recall_top5")), None)
        rec = mean_std([r["final"].get(recall_key, math.nan) for r in runs]) if recall_key else (math.nan, math.nan)
        rows.append({"lambda": lam, "stats": stats, "recall": rec, "recall_key": recall_key,
                     "time_s": float(np.mean([r["wall_time_s"] for r in runs]))})
    for r in rows:  # the side-by-side reference: the backbone alone, in the same runs
        s = r["stats"]
        r["ratio"] = {part: (s[f"{part}_f1"][0] / s[f"backbone_{part}_f1"][0]
                             if s[f"backbone_{part}_f1"][0] else math.nan) for part in ("seen", "unseen")}
    results["table"] = [{"lambda": r["lambda"], **{m: list(v) for m, v in r["stats"].items()},
                         "rule_recall_top5": list(r["recall"]), "mean_wall_time_s": r["time_s"],
                         "f1_ratio_vs_backbone": r["ratio"]} for r in rows]

    with_kl = default_lam if default_lam in args.lambdas and default_lam > 0 else next(
        (x for x in args.lambdas if x > 0), None)
    plots = args.out / "plots"
    dirs = {lam: [r["dir"] for r in group(lam)] for lam in args.lambdas}
    if 0.0 in dirs and with_kl is not None:
        pair = {f"W. KL (λ={with_kl:g})": dirs[with_kl], "W/O. KL": dirs[0.0]}
        plot_overlay(pair, [("seen_f1", "(b1) F1 seen"), ("unseen_f1", "(b1) F1 unseen")], plots / "ablation_f1.png",
                     "FedNSL: with vs without KL (mean ± std over seeds)")
        plot_overlay(pair, [("seen_logic", "(b2) logic accuracy seen"), ("unseen_logic", "(b2) logic accuracy unseen")],
                     plots / "ablation_logic.png", "FedNSL: with vs without KL")
    plot_overlay({f"λ={lam:g}": d for lam, d in dirs.items()}, [("unseen_f1", "(b3) F1 unseen"),
                                                             ("seen_f1", "F1 seen")],
                 plots / "ablation_lambda.png", "FedNSL: KL coefficient sweep")

    cmd = "python -m bench.fednsl_ablation " + " ".join(
        [f"--config {args.config}", "--lambdas " + " ".join(f"{x:g}" for x in args.lambdas),
         "--seeds " + " ".join(map(str, args.seeds))] + ([f"--rounds {args.rounds}"] if args.rounds else [])
        + [f"--set {shlex.quote(o)}" for o in args.overrides] + [f"--out {args.out}"])
    rk = next((r["recall_key"] for r in rows if r["recall_key"]), None)
    head = ["λ", "F1 seen", "F1 unseen", "Ign-F1 seen", "Ign-F1 unseen", "logic seen", "logic unseen",
            "backbone F1 seen", "backbone F1 unseen", "backbone logic seen", "backbone logic unseen"]
    if rk:
        head.append(rk.replace("_recall_top5", " rules in top-5"))
    head.append("wall s/run")
    lines = [f"Command: `{cmd}`", "",
             f"Final round, mean ± std over seeds {args.seeds} (percent).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["stats"]
        cells = [f"{r['lambda']:g}" + (" (W/O. KL)" if r["lambda"] == 0 else "")]
        cells += [fmt(*s[m]) for m in METRICS]
        if rk:
            cells.append(fmt(*r["recall"]))
        cells.append(f"{r['time_s']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.md").write_text(table)
    (args.out / "ablation.json").write_text(json.dumps(results, indent=1, default=str))
    res_dir = Path(__file__).resolve().parent / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    stem = f"fednsl_ablation_{Path(args.config).stem}"
    (res_dir / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str))
    (res_dir / f"{stem}.md").write_text(table)
    print(table)
    print(f"wrote {args.out / 'ablation.md'}, {args.out / 'ablation.json'}, plots in {plots}")
    return results


if __name__ == "__main__":
    main()
