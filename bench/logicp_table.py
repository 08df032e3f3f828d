"""LogiCP Tables 1, 4 and 7 (He, An, Ma, JAIR 2026) at reduced size: MSE, γ%, coverage and width.

Run: ``python -m bench.logicp_table`` (or ``fednsl bench logicp``; FHWA when ../shared/data is present, else
the synthetic set) or ``--quick`` (CI size, synthetic, about a minute).  Writes
``bench/results/logicp_table.json`` and ``.md`` (``--name`` changes the stem).

* **Table 1** — per model (RNN, GRU, LSTM, Transformer) × method, over ≥ 3 seeds: FedAvg, IFCA, IFCA-S,
  CP-IFCA, CP-IFCA-S, Fed-Bayes, FedSTL, FedSTL-S, FedSTL-T, LogiCP, LogiCP-S, LogiCP-T, and the naive
  seasonal forecasts (mean of the input days, last day) — the reference every learned row is compared
  with side by side (column ``÷naive`` = MSE / naive-mean MSE).
* **Table 4** — Transformer, MSE and coverage v for several client counts (paper: 1 / 50 / 100 / 300).
* **Table 7** — 1 − α ∈ {90, 85, 80, 75, 70} %: MSE, coverage and width of LogiCP(-S) and CP-IFCA(-S) (and,
  with ``--ablations``, LogiCP with random / loss-based clusters: Table 8).

Metrics are those of the last evaluation (test windows of every client), averaged over clients weighted
by test windows, then mean ± std over seeds.  MSE: FHWA in the shipped per-day z-score units (the paper's
scale), other sets on the per-client min-max scale.  γ% = share of forecast steps inside the client's
mined operational-range band (the reference code's satisfaction rate).  Coverage: **joint** (whole 24-step
horizon inside the band: what the method guarantees, ≥ 1 − α) / **per-step** (share of (window, step)
pairs inside: what the paper's tables count).  Width: mean over steps of 2·Q̂_τ on the min-max scale
(and in original units).  ``nominal`` is the exact coverage cov(ℓ, κ) of the ranks the server chose.
Every cell is one shipped config (configs/logicp_*.yaml, ts_fedavg.yaml, ts_ifca.yaml, fedstl_*.yaml) with
size overrides, run through the in-process engine.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import click

RESULTS = Path(__file__).resolve().parent / "results"

MODELS = ("rnn", "gru", "lstm", "transformer")
TITLES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM", "transformer": "Transformer"}
ALPHAS = (0.1, 0.15, 0.2, 0.25, 0.3)

# run key → shipped config per dataset family ("fhwa" or anything else → synthetic-style config)
CONFIGS = {"fedavg": "ts_fedavg", "ifca": "ts_ifca", "cp_ifca": "logicp_cp_ifca", "fedbayes": "logicp_fedbayes",
           "fedstl": "fedstl_synthetic", "logicp": "logicp_synthetic",
           "logicp_random": "logicp_synthetic", "logicp_loss": "logicp_synthetic", "logicp_argmin": "logicp_synthetic"}
TABLE1_ROWS = [  # (label, run key, metric prefix)
    ("FedAvg", "fedavg", ""), ("IFCA", "ifca", ""), ("IFCA-S", "ifca", "s_"), ("CP-IFCA", "cp_ifca", ""),
    ("CP-IFCA-S", "cp_ifca", "s_"), ("Fed-Bayes", "fedbayes", ""), ("FedSTL", "fedstl", ""),
    ("FedSTL-S", "fedstl", "s_"), ("FedSTL-T", "fedstl", "t_"), ("LogiCP", "logicp", ""), ("LogiCP-S", "logicp", "s_"),
    ("LogiCP-T", "logicp", "t_"), ("Naive: mean of input days", "logicp", "naive_mean_"),
    ("Naive: last day", "logicp", "naive_last_"),
]
TABLE4_ROWS = [r for r in TABLE1_ROWS if r[1] != "fedbayes"]
TABLE7_ROWS = [("CP-IFCA", "cp_ifca", ""), ("CP-IFCA-S", "cp_ifca", "s_"), ("LogiCP", "logicp", ""),
               ("LogiCP-S", "logicp", "s_"), ("Random clustering", "logicp_random", ""),
               ("Loss-based clustering", "logicp_loss", ""), ("LogiCP, per-client argmin", "logicp_argmin", "")]

PAPER_T1 = {  # LogiCP Table 1 (FHWA, 100 clients): (MSE, γ%)
    "FedAvg": {"rnn": (.129, 78.58), "gru": (.159, 82.39), "lstm": (.116, 85.26), "transformer": (.023, 75.83)},
    "IFCA": {"rnn": (.113, 78.76), "gru": (.138, 82.65), "lstm": (.115, 85.05), "transformer": (.051, 75.14)},
    "IFCA-S": {"rnn": (.105, 81.11), "gru": (.140, 82.66), "lstm": (.122, 85.89), "transformer": (.056, 74.47)},
    "CP-IFCA": {"rnn": (.121, 80.57), "gru": (.153, 84.08), "lstm": (.178, 84.15), "transformer": (.039, 76.69)},
    "CP-IFCA-S": {"rnn": (.127, 80.10), "gru": (.146, 84.25), "lstm": (.164, 85.07), "transformer": (.045, 75.73)},
    "Fed-Bayes": {"rnn": (.051, 86.17), "gru": (.093, 83.67), "lstm": (.102, 82.68), "transformer": (.596, 74.30)},
    "FedSTL": {"rnn": (.061, 85.95), "gru": (.120, 86.59), "lstm": (.184, 86.49), "transformer": (.022, 78.80)},
    "FedSTL-S": {"rnn": (.065, 85.80), "gru": (.112, 86.79), "lstm": (.170, 86.66), "transformer": (.019, 78.24)},
    "FedSTL-T": {"rnn": (.051, 90.59), "gru": (.092, 92.40), "lstm": (.144, 90.28), "transformer": (.015, 86.20)},
    "LogiCP": {"rnn": (.048, 85.09), "gru": (.109, 87.16), "lstm": (.091, 86.94), "transformer": (.0027, 83.63)},
    "LogiCP-S": {"rnn": (.052, 85.08), "gru": (.110, 86.44), "lstm": (.094, 86.28), "transformer": (.0038, 78.94)},
    "LogiCP-T": {"rnn": (.030, 89.75), "gru": (.062, 89.25), "lstm": (.060, 89.39), "transformer": (.0021, 88.89)},
}
PAPER_T4 = {  # Table 4 (FHWA, Transformer): clients → (MSE, v%)
    "FedAvg": {300: (.018, None), 100: (.023, None), 50: (.046, None), 1: (.034, None)},
    "IFCA": {300: (.022, None), 100: (.051, None), 50: (.056, None), 1: (.057, None)},
    "IFCA-S": {300: (.019, None), 100: (.056, None), 50: (.060, None)},
    "CP-IFCA": {300: (.038, 96.53), 100: (.039, 96.83), 50: (.041, 96.79), 1: (.039, 98.92)},
    "CP-IFCA-S": {300: (.040, 96.50), 100: (.045, 96.51), 50: (.049, 96.46), 1: (.032, 100.0)},
    "FedSTL": {300: (.019, None), 100: (.022, None), 50: (.026, None), 1: (.025, None)},
    "FedSTL-S": {300: (.019, None), 100: (.019, None), 50: (.023, None)},
    "FedSTL-T": {300: (.019, None), 100: (.015, None), 50: (.018, None), 1: (.020, None)},
    "LogiCP": {300: (.0034, 97.20), 100: (.0027, 98.14), 50: (.0026, 98.54), 1: (.0084, 100.0)},
    "LogiCP-S": {300: (.0034, 98.36), 100: (.0038, 98.65), 50: (.0041, 98.72), 1: (.0079, 100.0)},
    "LogiCP-T": {300: (.0024, 98.18), 100: (.0021, 98.77), 50: (.0021, 98.95), 1: (.0050, 100.0)},
}
PAPER_T7 = {  # Tables 7–8 (FHWA, 50 clients, Transformer): (coverage %, width) per 1 − α = 90 … 70 %
    "CP-IFCA": [(97.43, .396), (96.78, .383), (97.10, .392), (96.51, .380), (93.99, .341)],
    "CP-IFCA-S": [(97.22, .396), (96.50, .383), (96.96, .392), (96.24, .380), (93.43, .341)],
    "LogiCP": [(98.01, .129), (97.45, .119), (97.59, .121), (97.27, .117), (95.32, .099)],
    "LogiCP-S": [(98.35, .129), (97.78, .119), (97.98, .121), (97.63, .117), (95.06, .099)],
    "Random clustering": [(97.81, .486), (97.03, .451), (96.79, .443), (96.02, .423), (92.55, .359)],
    "Loss-based clustering": [(97.76, .491), (97.38, .469), (97.60, .467), (96.39, .435), (93.18, .368)],
}

SIZES = {
    # ≈ 1 CPU-hour: Table 1 (4 models × 6 runs × 3 seeds), Table 4 (Transformer; 1 / 5 / 10 / 20 clients × 5
    # runs × 2 seeds), Table 7 (5 α × (2 runs × 2 seeds + 3 ablation runs × 1 seed), 10 clients)
    "default": {"clients": 10, "max_train": 48, "max_test": 20, "rounds": 8, "pretrain_rounds": 2, "local_epochs": 4,
                "cluster_epochs": 1, "clusters": 3, "days": 60, "counts": [1, 5, 10, 20], "seeds_small": 2,
                "alpha_clients": 10, "alpha_clusters": 3, "seeds_ablation": 1},
    # CI smoke size (synthetic, RNN + Transformer, one seed)
    "quick": {"clients": 4, "max_train": 40, "max_test": 8, "rounds": 2, "pretrain_rounds": 1, "local_epochs": 1,
              "cluster_epochs": 1, "clusters": 2, "days": 50, "counts": [1, 4], "seeds_small": 1,
              "alpha_clients": 4, "alpha_clusters": 2, "seeds_ablation": 1},
}
LR = {"rnn": 0.1, "gru": 0.1, "lstm": 0.1, "transformer": 0.02}
TRANSFORMER = {"d_model": 16, "ff": 32, "enc_layers": 1, "dec_layers": 1}
KEYS = ("mse", "mse_orig", "step_rho", "rho", "cov_joint", "cov_step", "s_cov_joint", "s_cov_step", "width",
        "width_orig")


def overrides(run: str, model: str, data: str, size: dict[str, Any], clients: int, clusters: int, alpha: float,
              fhwa_path: str | None) -> list[str]:
    """``--set`` overrides turning a shipped config into one cell."""
    mdl = {"name": model, **(TRANSFORMER if model == "transformer" else {})}
    out = [f"rounds={size['rounds']}", "federation.fraction=1.0", "federation.min_clients=1",
           f"method_kwargs.local_epochs={size['local_epochs']}", f"method_kwargs.model={json.dumps(mdl)}"]
    if run != "fedbayes":
        out += [f"method_kwargs.lr={LR[model]}", "method_kwargs.momentum=0.9"]
    else:
        out += ["method_kwargs.personal_lr=0.01", "method_kwargs.global_lr=0.01", "method_kwargs.personal_steps=2"]
    if data == "fhwa":
        d: dict[str, Any] = {"name": "fhwa", "num_clients": clients, "max_train": size["max_train"], "max_val": 4,
                             "max_test": size["max_test"], **({"path": fhwa_path} if fhwa_path else {})}
    elif data == "synthetic":
        d = {"name": "synthetic", "num_clients": clients, "groups": 4, "days": size["days"],
             "max_train": size["max_train"], "max_test": size["max_test"]}
    else:
        d = {"name": data, "num_clients": clients, "max_train": size["max_train"], "max_test": size["max_test"]}
    out.append(f"data={json.dumps(d)}")
    k = min(clusters, clients)
    if run in ("ifca", "cp_ifca", "fedstl") or run.startswith("logicp"):
        out.append(f"method_kwargs.num_clusters={k}")
    if run in ("cp_ifca",) or run.startswith("logicp"):
        out.append(f"method_kwargs.alpha={alpha}")
    if run == "fedstl":
        out.append(f"method_kwargs.cluster_epochs={size['cluster_epochs']}")
    if run.startswith("logicp"):
        out += [f"method_kwargs.cluster_epochs={size['cluster_epochs']}",
                f"method_kwargs.pretrain_rounds={size['pretrain_rounds']}"]
        if run == "logicp_random":
            out.append("method_kwargs.clustering=random")
        if run == "logicp_loss":
            out.append("method_kwargs.clustering=loss")
        if run == "logicp_argmin":
            out.append("method_kwargs.assign_rule=argmin")
    return out


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """One run: the final evaluation metrics (server means), the calibration metrics and the wall time."""
    import warnings

    import torch

    from fednsl.config import load_config
    from fednsl.federation.runner import InProcessRunner
    from fednsl.pipeline import build_federation

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    cfg = load_config(CONFIGS[job["run"]], overrides(job["run"], job["model"], job["data"], job["size"],
                                                     job["clients"], job["clusters"], job["alpha"],
                                                     job["fhwa_path"]) + [f"seed={job['seed']}"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        res = InProcessRunner(build_federation(cfg), cfg, Path(tmp), progress=False).run()
    server = [r for r in res.rows if r["scope"] == "server"]
    final = [r for r in server if r["stage"] == "evaluate"][-1]
    metrics = {k: float(v) for k, v in final.items() if isinstance(v, (int, float)) and "." not in k and k != "round"}
    cal = [r for r in server if r["stage"] == "calibrate" and "nominal_coverage" in r]
    if cal:
        metrics["nominal"] = 100.0 * float(cal[-1]["nominal_coverage"])
    return {**{k: job[k] for k in ("table", "run", "model", "seed", "clients", "alpha")},
            "wall_s": time.perf_counter() - t0, "metrics": metrics}


def _stats(vals: list[float]) -> tuple[float, float]:
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def summarise(cells: list[dict[str, Any]], rows: list[tuple[str, str, str]], key: str, mse_key: str
              ) -> dict[str, dict[Any, dict[str, Any]]]:
    """Mean ± std over seeds per (row label, column value of ``key``)."""
    out: dict[str, dict[Any, dict[str, Any]]] = {}
    for label, run, prefix in rows:
        for col in sorted({c[key] for c in cells if c["run"] == run}, key=str):
            got = [c["metrics"] for c in cells if c["run"] == run and c[key] == col]
            if not got or f"{prefix}mse" not in got[0]:
                continue
            e: dict[str, Any] = {"seeds": len(got)}
            for m in ("mse", "mse_orig", "step_rho", "rho"):
                vals = [g[f"{prefix}{m}"] for g in got if f"{prefix}{m}" in g]
                if vals:
                    e[m], e[f"{m}_std"] = _stats(vals)
            e["mse_main"], e["mse_main_std"] = e[mse_key], e[f"{mse_key}_std"]
            cov_p = "s_" if prefix == "s_" else ""
            if prefix in ("", "s_", "t_") and f"{cov_p}cov_joint" in got[0]:
                for m in ("cov_joint", "cov_step"):
                    e[m], e[f"{m}_std"] = _stats([g[f"{cov_p}{m}"] for g in got])
                for m in ("width", "width_orig", "nominal", "qhat_finite"):
                    vals = [g[m] for g in got if m in g]
                    if vals:
                        e[m], e[f"{m}_std"] = _stats(vals)
            naive = statistics.fmean(g[f"naive_mean_{mse_key}"] for g in got)
            e["over_naive"] = e["mse_main"] / naive if naive > 0 else float("nan")
            out.setdefault(label, {})[col] = e
    return out


def _f(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.{digits}f}" if abs(v) >= 10 ** (-digits + 1) else f"{v:.2e}"


def _cov(e: dict[str, Any]) -> str:
    if "cov_joint" not in e:
        return "–"
    mark = "†" if e.get("qhat_finite", 1.0) < 1.0 else ""   # some clients' clusters had no finite region
    return f"{e['cov_joint']:.1f} / {e['cov_step']:.1f}{mark}"


def _width(e: dict[str, Any]) -> str:
    return f"{e['width']:.3f} ({_f(e.get('width_orig'), 3)})" if "width" in e else "–"


def markdown(p: dict[str, Any]) -> str:
    s, unit = p["size"], p["mse_unit"]
    lines = [f"### Table 1 — {p['data']}: {s['clients']} clients, {s['rounds']} rounds ({s['pretrain_rounds']} "
             f"pretraining for LogiCP), K = {s['clusters']}, α = 0.1, seeds {p['seeds']} (mean ± std over seeds)", "",
             f"MSE in {unit}; γ = % forecast steps inside the mined band; coverage = joint / per-step %; width = "
             "mean 2·Q̂ (min-max scale; original units in brackets); ÷naive = MSE / naive-mean MSE; † = some "
             "clusters were too small for 1 − α (region (−∞, ∞), counted as covered; width over the others).", ""]
    for m in p["models"]:
        t = p["table1"]
        lines += [f"**{TITLES[m]}**", "", "| method | MSE | γ % | coverage % | width | ÷naive | paper MSE / γ |",
                  "|---|---|---|---|---|---|---|"]
        for label, _, _ in TABLE1_ROWS:
            e = t.get(label, {}).get(m)
            if e is None:
                continue
            paper = PAPER_T1.get(label, {}).get(m)
            lines.append(f"| {label} | {_f(e['mse_main'])} ± {_f(e['mse_main_std'])} | {e['step_rho']:.1f} | {_cov(e)} | "
                         f"{_width(e)} | {e['over_naive']:.2f} | "
                         f"{'–' if paper is None else f'{paper[0]} / {paper[1]}'} |")
        lines.append("")
    if p.get("table4"):
        counts = p["counts"]
        lines += [f"### Table 4 — Transformer, {p['data']}, client counts {counts} (seeds {p['seeds_small']}); "
                  "MSE / coverage joint, per-step %", "",
                  "| method | " + " | ".join(f"{n} clients" for n in counts) + " | paper 300 / 100 / 50 / 1 |",
                  "|---|" + "---|" * (len(counts) + 1)]
        for label, _, _ in TABLE4_ROWS:
            row = p["table4"].get(label)
            if not row:
                continue
            cells = []
            for n in counts:
                e = row.get(n) or row.get(str(n))
                cells.append("–" if e is None else f"{_f(e['mse_main'])} / {_cov(e)}")
            pp = PAPER_T4.get(label, {})
            paper = " · ".join("–" if n not in pp else (f"{pp[n][0]}" + (f" / {pp[n][1]}" if pp[n][1] else ""))
                               for n in (300, 100, 50, 1))
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {paper} |")
        lines.append("")
    if p.get("table7"):
        alphas = p["alphas"]
        lines += [f"### Table 7 — Transformer, {p['data']}, {p['size']['alpha_clients']} clients, "
                  f"K = {p['size']['alpha_clusters']} (seeds {p['seeds_small']}): MSE | coverage joint / per-step % "
                  "(nominal cov(ℓ, κ)) | width", "",
                  "| method | " + " | ".join(f"1−α = {round(100 * (1 - a))} %" for a in alphas) + " |",
                  "|---|" + "---|" * len(alphas)]
        for label, _, _ in TABLE7_ROWS:
            row = p["table7"].get(label)
            if not row:
                continue
            cells = []
            for a in alphas:
                e = row.get(a) or row.get(str(a))
                if e is None:
                    cells.append("–")
                    continue
                nom = f" ({e['nominal']:.1f})" if "nominal" in e else ""
                cells.append(f"{_f(e['mse_main'])} \\| {_cov(e)}{nom} \\| {_width(e)}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines += ["", "Paper (Tables 7–8, FHWA, 50 clients, Transformer), coverage % / width:", "",
                  "| method | " + " | ".join(f"{round(100 * (1 - a))} %" for a in ALPHAS) + " |",
                  "|---|" + "---|" * len(ALPHAS)]
        for label, vals in PAPER_T7.items():
            lines.append(f"| {label} | " + " | ".join(f"{c} / {w}" for c, w in vals) + " |")
        lines.append("")
    lines += [f"Command: `{p['command']}` — wall time {p['wall_s']:.0f} s ({p['machine'].get('cpus')} cores, "
              f"{p['jobs']} worker processes)."]
    return "\n".join(lines) + "\n"


def job_key(job: dict[str, Any]) -> str:
    """What identifies a cell's result (for ``--resume``)."""
    return json.dumps({k: job[k] for k in ("table", "run", "model", "seed", "clients", "clusters", "alpha", "data",
                                           "size", "fhwa_path")}, sort_keys=True)


def _cli_args() -> list[str]:
    """The options this run was given (``fednsl bench logicp …`` or ``python -m bench.logicp_table …``)."""
    args = sys.argv[1:]
    return args[2:] if args[:2] == ["bench", "logicp"] else args


def build_jobs(data: str, size: dict[str, Any], models: list[str], seeds: list[int], tables: set[str],
               ablations: bool, fhwa_path: str | None) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    base = {"data": data, "size": size, "fhwa_path": fhwa_path}
    small = seeds[: size["seeds_small"]]
    if "1" in tables:
        for m in models:
            for run in ("fedavg", "ifca", "cp_ifca", "fedbayes", "fedstl", "logicp"):
                for s in seeds:
                    jobs.append({**base, "table": "1", "run": run, "model": m, "seed": s, "clients": size["clients"],
                                 "clusters": size["clusters"], "alpha": 0.1})
    if "4" in tables:
        for n in size["counts"]:
            for run in ("fedavg", "ifca", "cp_ifca", "fedstl", "logicp"):
                for s in small:
                    jobs.append({**base, "table": "4", "run": run, "model": "transformer", "seed": s, "clients": n,
                                 "clusters": size["clusters"], "alpha": 0.1})
    if "7" in tables:
        runs = ["cp_ifca", "logicp"] + (["logicp_random", "logicp_loss", "logicp_argmin"] if ablations else [])
        for a in ALPHAS:
            for run in runs:
                for s in (small if run in ("cp_ifca", "logicp") else small[: size["seeds_ablation"]]):
                    jobs.append({**base, "table": "7", "run": run, "model": "transformer", "seed": s,
                                 "clients": size["alpha_clients"], "clusters": size["alpha_clusters"], "alpha": a})
    return jobs


@click.command("logicp", help="LogiCP Tables 1, 4, 7 (MSE / γ% / coverage / width) at reduced size; "
                               "results in bench/results/logicp_table.{json,md}.")
@click.option("--quick", is_flag=True, help="CI size: synthetic data, RNN + Transformer, one seed, tiny runs.")
@click.option("--data", default=None, help="Dataset (default: fhwa when present, else synthetic; --quick: synthetic).")
@click.option("--fhwa-path", default=None, help="FHWA .npz (default: $FEDNSL_SHARED_DATA/fhwa_logicp/...).")
@click.option("--models", default=None, help="Comma-separated models for Table 1 (default all four; quick: rnn,transformer).")
@click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds (Table 1 uses all; 4 and 7 the first ones).")
@click.option("--tables", default="1,4,7", show_default=True, help="Which tables to run (comma-separated of 1,4,7).")
@click.option("--ablations/--no-ablations", default=True, show_default=True,
              help="Add Table 8's random / loss-based clustering rows and a per-client-argmin row to Table 7.")
@click.option("--jobs", type=int, default=2, show_default=True, help="Worker processes (1 torch thread each).")
@click.option("--name", default="logicp_table", show_default=True, help="Result file stem under bench/results/.")
@click.option("--resume", is_flag=True, help="Reuse the finished cells in bench/results/<name>.cells.jsonl.")
def command(quick: bool, data: str | None, fhwa_path: str | None, models: str | None, seeds: str, tables: str,
            ablations: bool, jobs: int, name: str, resume: bool) -> None:
    main(quick, data, fhwa_path, models, seeds, tables, ablations, jobs, name, resume)


def main(quick: bool = False, data: str | None = None, fhwa_path: str | None = None, models: str | None = None,
         seeds: str = "0,1,2", tables: str = "1,4,7", ablations: bool = True, jobs: int = 2,
         name: str = "logicp_table", resume: bool = False) -> dict[str, Any]:
    from bench._common import write_result
    from fednsl.tasks.timeseries.data import default_fhwa_path

    size = dict(SIZES["quick" if quick else "default"])
    fhwa = Path(fhwa_path) if fhwa_path else default_fhwa_path()
    data = data or ("synthetic" if quick or not fhwa.exists() else "fhwa")
    model_list = [m for m in (models or ("rnn,transformer" if quick else ",".join(MODELS))).split(",") if m]
    bad = [m for m in model_list if m not in MODELS]
    if bad:
        raise click.BadParameter(f"unknown model(s) {bad}; choose from {list(MODELS)}", param_hint="--models")
    seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    if quick:
        seed_list = seed_list[:1]
    table_set = {t.strip() for t in tables.split(",") if t.strip()}
    if not table_set <= {"1", "4", "7"}:
        raise click.BadParameter(f"tables must be among 1, 4, 7, got {sorted(table_set)}", param_hint="--tables")
    job_list = build_jobs(data, size, model_list, seed_list, table_set, ablations, str(fhwa) if data == "fhwa" else None)
    t0 = time.perf_counter()
    cache = RESULTS / f"{name}.cells.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if resume and cache.exists():
        for line in cache.read_text().splitlines():
            c = json.loads(line)
            done[c["key"]] = c
    elif cache.exists():
        cache.unlink()
    todo = [j for j in job_list if job_key(j) not in done]
    if done:
        click.echo(f"reusing {len(job_list) - len(todo)} finished cells from {cache}", err=True)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_cell, j): job_key(j) for j in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            c = {**fut.result(), "key": futures[fut]}
            done[c["key"]] = c
            RESULTS.mkdir(parents=True, exist_ok=True)
            with cache.open("a") as f:
                f.write(json.dumps(c) + "\n")
            click.echo(f"[{i}/{len(todo)} {time.perf_counter() - t0:.0f}s] table {c['table']} {c['run']} {c['model']} "
                       f"seed {c['seed']} clients {c['clients']} alpha {c['alpha']}: mse {c['metrics'].get('mse', 0):.4g} "
                       f"({c['wall_s']:.0f}s)", err=True)
    cells = [done[job_key(j)] for j in job_list]
    wall = time.perf_counter() - t0
    mse_key = "mse_orig" if data == "fhwa" else "mse"
    unit = "the shipped per-day z-score units (paper scale)" if data == "fhwa" else "the per-client min-max scale"
    by = {t: [c for c in cells if c["table"] == t] for t in ("1", "4", "7")}
    payload: dict[str, Any] = {
        "data": data, "mse_unit": unit, "models": model_list, "seeds": seed_list,
        "seeds_small": seed_list[: size["seeds_small"]], "size": size, "counts": size["counts"], "alphas": list(ALPHAS),
        "learning_rates": LR, "transformer": TRANSFORMER, "jobs": jobs, "wall_s": wall,
        "command": "python -m bench.logicp_table " + " ".join(_cli_args()),
        "table1": summarise(by["1"], TABLE1_ROWS, "model", mse_key),
        "table4": summarise(by["4"], TABLE4_ROWS, "clients", mse_key),
        "table7": summarise(by["7"], TABLE7_ROWS, "alpha", mse_key),
        "paper": {"table1": {k: {m: list(v) for m, v in d.items()} for k, d in PAPER_T1.items()},
                  "table4": {k: {str(n): list(v) for n, v in d.items()} for k, d in PAPER_T4.items()},
                  "table7": PAPER_T7},
        "cells": cells,
    }
    path = write_result(name, payload)
    payload["machine"] = json.loads(path.read_text())["machine"]
    md = markdown(payload)
    path.with_suffix(".md").write_text(md)
    click.echo(md)
    return payload


if __name__ == "__main__":
    command()
