"""FedSTL Table 2 reproduction: MSE and property satisfaction ρ% per model × method, over seeds.

Run: ``python -m bench.fedstl_table`` (≈ 10 min on 2 busy cores; FHWA when ../shared/data is present,
else the synthetic set) or ``--quick`` (CI size, synthetic, under a minute).  Writes
``bench/results/fedstl_table.json`` and ``.md`` (``--name`` changes the file stem).

Every cell is one shipped config (configs/ts_*.yaml, configs/fedstl_synthetic.yaml) with size
overrides, run through the in-process engine for each seed.  Rows (as in the paper): FedAvg, FedProx,
FedRep, Ditto, IFCA (client models), IFCA-S (cluster models), FedSTL-S (cluster models), FedSTL (client
models), FedSTL-T (teacher-projected client forecasts), plus FedSTL with the balanced rule, and the
naive seasonal references side by side (mean of the input days, last day) — the "reference
implementation" every learned row is compared with (column ``÷naive`` = MSE / naive-mean MSE).

MSE is reported in original units (FHWA: the shipped per-day z-scores, the paper's scale) and on the
per-client min-max scale; ρ% = share of test forecasts whose robustness w.r.t. the client's mined
operational-range property is ≥ 0.  Mean ± std over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("rnn", "gru", "lstm", "transformer")
MODEL_TITLES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM", "transformer": "Transformer"}

# (row label, run key, metric prefix)
ROWS = [
    ("FedAvg", "ts_fedavg", ""), ("FedProx", "ts_fedprox", ""), ("FedRep", "ts_fedrep", ""),
    ("Ditto", "ts_ditto", ""), ("IFCA", "ts_ifca", ""), ("IFCA-S", "ts_ifca", "s_"),
    ("FedSTL-S", "fedstl", "s_"), ("FedSTL", "fedstl", ""), ("FedSTL-T", "fedstl", "t_"),
    ("FedSTL (balanced)", "fedstl_balanced", ""), ("FedSTL-T (balanced)", "fedstl_balanced", "t_"),
    ("Naive: mean of input days", "ts_fedavg", "naive_mean_"), ("Naive: last day", "ts_fedavg", "naive_last_"),
]
RUNS = {"ts_fedavg": "ts_fedavg", "ts_fedprox": "ts_fedprox", "ts_fedrep": "ts_fedrep", "ts_ditto": "ts_ditto",
        "ts_ifca": "ts_ifca", "fedstl": "fedstl_synthetic", "fedstl_balanced": "fedstl_synthetic"}

# FedSTL Table 2 (FHWA, 100 clients): (MSE, ρ%) per model
PAPER = {
    "FedAvg": {"rnn": (.128, 78.96), "gru": (.154, 80.51), "lstm": (.126, 81.80), "transformer": (.588, 78.01)},
    "FedProx": {"rnn": (.128, 78.86), "gru": (.154, 80.43), "lstm": (.126, 81.93), "transformer": (.588, 78.05)},
    "FedRep": {"rnn": (.164, 80.04), "gru": (.279, 80.08), "lstm": (.214, 81.08), "transformer": (.929, 57.01)},
    "Ditto": {"rnn": (.124, 79.17), "gru": (.153, 80.41), "lstm": (.128, 81.48), "transformer": (.591, 78.05)},
    "IFCA": {"rnn": (.117, 77.89), "gru": (.140, 77.47), "lstm": (.121, 80.41), "transformer": (.063, 73.43)},
    "IFCA-S": {"rnn": (.107, 78.89), "gru": (.134, 77.66), "lstm": (.110, 81.51), "transformer": (.061, 72.79)},
    "FedSTL-S": {"rnn": (.096, 81.67), "gru": (.148, 81.71), "lstm": (.111, 83.44), "transformer": (.025, 77.03)},
    "FedSTL": {"rnn": (.095, 81.70), "gru": (.152, 81.83), "lstm": (.119, 83.32), "transformer": (.029, 78.99)},
    "FedSTL-T": {"rnn": (.076, 100.0), "gru": (.118, 100.0), "lstm": (.099, 100.0), "transformer": (.287, 100.0)},
}

SIZES = {
    # ≈ 10 minutes on 2 shared cores for 4 models × 7 runs × 3 seeds
    "default": {"clients": 10, "max_train": 48, "max_test": 20, "rounds": 6, "fraction": 0.5, "local_epochs": 4,
                "cluster_epochs": 1, "clusters": 3, "days": 60},
    # CI smoke size
    "quick": {"clients": 6, "max_train": 16, "max_test": 8, "rounds": 2, "fraction": 0.5, "local_epochs": 1,
              "cluster_epochs": 1, "clusters": 2, "days": 20},
}
LR = {"rnn": 0.1, "gru": 0.1, "lstm": 0.1, "transformer": 0.02}
TRANSFORMER = {"d_model": 16, "ff": 32, "enc_layers": 1, "dec_layers": 1}


def overrides(run: str, model: str, data: str, size: dict[str, Any], fhwa_path: str | None) -> list[str]:
    """``--set`` overrides turning a shipped config into one table cell."""
    e = size["local_epochs"]
    out = [f"rounds={size['rounds']}", f"federation.fraction={size['fraction']}", "federation.min_clients=1",
           f"method_kwargs.local_epochs={e}", f"method_kwargs.lr={LR[model]}", "method_kwargs.momentum=0.9",
           f"method_kwargs.model={json.dumps({'name': model, **(TRANSFORMER if model == 'transformer' else {})})}"]
    if data == "fhwa":
        d = {"name": "fhwa", "num_clients": size["clients"], "max_train": size["max_train"], "max_val": 4,
             "max_test": size["max_test"], **({"path": fhwa_path} if fhwa_path else {})}
    elif data == "synthetic":
        d = {"name": "synthetic", "num_clients": size["clients"], "groups": 4, "days": size["days"],
             "max_train": size["max_train"], "max_test": size["max_test"]}
    else:
        d = {"name": data, "num_clients": size["clients"], "max_train": size["max_train"], "max_test": size["max_test"]}
    out.append(f"data={json.dumps(d)}")
    if run == "ts_ifca":
        out.append(f"method_kwargs.num_clusters={size['clusters']}")
    if run == "ts_fedrep":
        out.append(f"method_kwargs.head_epochs={round(0.8 * e)}")
    if run.startswith("fedstl"):
        out += [f"method_kwargs.num_clusters={size['clusters']}", f"method_kwargs.cluster_epochs={size['cluster_epochs']}",
                f"method_kwargs.rule={'balanced' if run == 'fedstl_balanced' else 'argmin'}"]
    return out


def run_cell(job: tuple[str, str, int, str, dict[str, Any], str | None]) -> dict[str, Any]:
    """One (run, model, seed): the final evaluation metrics and the wall time."""
    import torch

    from fednsl.config import load_config
    from fednsl.federation.runner import InProcessRunner
    from fednsl.pipeline import build_federation

    run, model, seed, data, size, fhwa_path = job
    torch.set_num_threads(1)
    cfg = load_config(RUNS[run], overrides(run, model, data, size, fhwa_path) + [f"seed={seed}"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        res = InProcessRunner(build_federation(cfg), cfg, Path(tmp), progress=False).run()
    final = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    metrics = {k: float(v) for k, v in final.items() if isinstance(v, (int, float)) and "." not in k and k != "round"}
    return {"run": run, "model": model, "seed": seed, "wall_s": time.perf_counter() - t0, "metrics": metrics}


def summarise(cells: list[dict[str, Any]], models: list[str]) -> dict[str, Any]:
    """Mean ± std over seeds per (row, model)."""
    table: dict[str, dict[str, Any]] = {}
    for label, run, prefix in ROWS:
        for model in models:
            got = [c["metrics"] for c in cells if c["run"] == run and c["model"] == model]
            if not got or f"{prefix}mse" not in got[0]:
                continue
            entry: dict[str, Any] = {"seeds": len(got)}
            for m in ("mse", "mse_orig", "rho", "step_rho"):
                vals = [g[f"{prefix}{m}"] for g in got if f"{prefix}{m}" in g]
                if vals:
                    entry[m] = statistics.fmean(vals)
                    entry[f"{m}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            naive = statistics.fmean(g["naive_mean_mse"] for g in got)
            entry["mse_over_naive"] = entry["mse"] / naive if naive > 0 else float("nan")
            table.setdefault(label, {})[model] = entry
    return table


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:.4f}" if abs(v) >= 1e-3 else f"{v:.2e}"


def markdown(payload: dict[str, Any]) -> str:
    models, table = payload["models"], payload["table"]
    unit = payload["unit"]
    head = "| method | " + " | ".join(f"{MODEL_TITLES[m]} MSE | ρ% | ÷naive" for m in models) + " |"
    sep = "|---|" + "---|---|---|" * len(models)
    lines = [f"### Ours: {payload['data']} ({payload['size']['clients']} clients, {payload['size']['rounds']} rounds, "
             f"seeds {payload['seeds']}; MSE in {unit}, mean ± std)", "", head, sep]
    for label, _, _ in ROWS:
        if label not in table:
            continue
        cells = []
        for m in models:
            e = table[label].get(m)
            if e is None:
                cells.append("– | – | –")
                continue
            cells.append(f"{_fmt(e['mse_orig'])} ± {_fmt(e['mse_orig_std'])} | {e['rho']:.1f} ± {e['rho_std']:.1f} | "
                         f"{e['mse_over_naive']:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "### Paper (FedSTL Table 2, FHWA, 100 clients, MSE / ρ%)", "",
              "| method | " + " | ".join(f"{MODEL_TITLES[m]} MSE | ρ%" for m in MODELS) + " |",
              "|---|" + "---|---|" * len(MODELS)]
    for label, vals in PAPER.items():
        lines.append(f"| {label} | " + " | ".join(f"{vals[m][0]:.3f} | {vals[m][1]:.2f}" for m in MODELS) + " |")
    lines += ["", f"Command: `{payload['command']}` — wall time {payload['wall_s']:.0f} s "
              f"({payload['machine'].get('cpus')} cores)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import sys

    from bench._common import write_result
    from fednsl.timeseries.data import default_fhwa_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI size: synthetic data, tiny runs")
    ap.add_argument("--data", default=None, help="dataset (default: fhwa when present, else synthetic; quick: synthetic)")
    ap.add_argument("--fhwa-path", default=None, help="FHWA .npz (default: $FEDNSL_SHARED_DATA/fhwa_logicp/...)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated models")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (≥ 3 for the table)")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated runs: " + ",".join(RUNS))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (1 torch thread each)")
    ap.add_argument("--rounds", type=int, default=None, help="override the size preset's rounds")
    ap.add_argument("--clients", type=int, default=None, help="override the size preset's client count")
    ap.add_argument("--name", default="fedstl_table", help="result file stem under bench/results/")
    args = ap.parse_args(argv)

    size = dict(SIZES["quick" if args.quick else "default"])
    if args.rounds:
        size["rounds"] = args.rounds
    if args.clients:
        size["clients"] = args.clients
    fhwa = Path(args.fhwa_path) if args.fhwa_path else default_fhwa_path()
    data = args.data or ("synthetic" if args.quick or not fhwa.exists() else "fhwa")
    models = [m for m in args.models.split(",") if m]
    runs = [r for r in args.runs.split(",") if r]
    unknown = [m for m in models if m not in MODELS] + [r for r in runs if r not in RUNS]
    if unknown:
        raise SystemExit(f"unknown model(s)/run(s): {unknown}")
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [(r, m, s, data, size, str(fhwa) if data == "fhwa" else None) for m in models for r in runs for s in seeds]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            cells = list(pool.map(run_cell, jobs))
    else:
        cells = [run_cell(j) for j in jobs]
    wall = time.perf_counter() - t0
    from fednsl.timeseries.data import TSDataConfig, load_timeseries
    unit = load_timeseries(TSDataConfig(name=data, num_clients=1, **({"path": str(fhwa)} if data == "fhwa" else {}))).unit
    payload: dict[str, Any] = {
        "data": data, "unit": unit, "models": models, "seeds": seeds, "runs": runs, "size": size,
        "learning_rates": LR, "transformer": TRANSFORMER, "wall_s": wall,
        "command": "python -m bench.fedstl_table " + " ".join(argv if argv is not None else sys.argv[1:]),
        "table": summarise(cells, models), "paper": {k: {m: list(v) for m, v in d.items()} for k, d in PAPER.items()},
        "cells": cells,
    }
    path = write_result(args.name, payload)
    payload["machine"] = json.loads(path.read_text())["machine"]
    md = markdown(payload)
    path.with_suffix(".md").write_text(md)
    print(md)
    return payload


if __name__ == "__main__":
    main()
