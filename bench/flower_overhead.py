"""Per-round overhead of the Flower engines against the in-process runner, with FedNSL-sized payloads.

The same run goes through three engines side by side: ``inprocess`` (the reference), ``flower-sim`` (Flower's
simulation runtime on Ray, one actor; all simulations share one Ray start, reported separately) and ``flower``
(a SuperLink and one SuperNode process per client on 127.0.0.1). Flower 1.41 starts a fresh ClientApp process
for every message (also with ``flower-supernode --isolation process``, which only moves the task launcher out of
the SuperNode), so the deployment is also run beside ``flower-bare``: a bare Flower app (:mod:`bench.flower_bare`,
Message API, ``@app.train()``) exchanging messages of the same sizes on the same kind of local federation; the
target is fednsl's steady round ≤ 1.5× the bare app's.
The run is FedAvg with an MLP of J=50 inputs, T=150 hidden units and J outputs: each message carries two T×J
float32 weight matrices plus biases (61 KB), the size of a FedNSL rule message (T≈150 rule-head triples × J≈50
candidate bodies). Local work is one SGD step on 6 samples (well under a millisecond), so a round's time is the
engine's overhead. Rounds evaluate only at the last round, so rounds 2..R-1 are one ``train`` exchange each.

Reported per engine and client count: start-up (wall time minus the rounds), round 1, the steady-state round
(median of rounds 2..R-1) and its ratio to the in-process steady-state round.

    python -m bench.flower_overhead [--rounds 8] [--clients 2 10] [--deploy-rounds 4] [--deploy-clients 2 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench._common import write_result
from fednsl.config import RunConfig
from fednsl.pipeline import train

T, J = 150, 50


def config(clients: int, rounds: int) -> RunConfig:
    return RunConfig(method="fedavg", rounds=rounds, seed=0, name="flower_overhead",
                     method_kwargs={"hidden": T, "lr": 0.05, "local_epochs": 1, "batch_size": 32},
                     data={"num_clients": clients, "samples_per_client": 8, "features": J, "classes": J},
                     federation={"min_clients": 1, "evaluate_every": rounds, "client_timeout_s": 900.0})


def measure(engine: str, clients: int, rounds: int, root: Path) -> dict[str, Any]:
    cfg = replace(config(clients, rounds), engine=engine)
    t0 = time.perf_counter()
    result = train(cfg, root / f"{engine}-{clients}", progress=False)
    wall = time.perf_counter() - t0
    by_round = {r["round"]: r for r in result.rows if r["scope"] == "server" and r["stage"] == "round"}
    train_rows = {r["round"]: r for r in result.rows if r["scope"] == "server" and r["stage"] == "train"}
    times = [by_round[r]["round_time_s"] for r in range(1, rounds + 1)]
    steady = statistics.median(times[1:-1]) if rounds > 2 else times[-1]
    return {"engine": engine, "clients": clients, "rounds": rounds, "wall_s": wall,
            "startup_s": wall - sum(times), "round1_s": times[0], "steady_round_s": steady, "round_times_s": times,
            "bytes_per_round": train_rows[2]["train.bytes_down"] + train_rows[2]["train.bytes_up"]
            if 2 in train_rows else None,
            "replies": [train_rows[r]["train.replies"] for r in sorted(train_rows)]}


def measure_bare(clients: int, rounds: int, root: Path) -> dict[str, Any]:
    """The same message sizes through a bare Flower app (:mod:`bench.flower_bare`) on a fresh local federation."""
    import tomli_w

    from fednsl.engines.flower_local import LocalFederation
    from fednsl.engines.flower_submit import submit_and_wait

    repo = str(Path(__file__).resolve().parents[1])  # SuperNodes import bench.flower_bare from here
    if repo not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    work = root / f"bare-{clients}"
    out = work / "times.json"
    app = work / "app"
    app.mkdir(parents=True)
    (app / "pyproject.toml").write_text(tomli_w.dumps({
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": "bare-flower-app", "version": "1.0.0", "license": "MIT", "dependencies": []},
        "tool": {"hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
                 "flwr": {"app": {"publisher": "fednsl-bench",
                                  "components": {"serverapp": "bench.flower_bare:server_app",
                                                 "clientapp": "bench.flower_bare:client_app"},
                                  "config": {"rounds": rounds, "num-nodes": clients, "T": T, "J": J,
                                             "out": str(out)}}}}}))
    t0 = time.perf_counter()
    with LocalFederation(clients, work / "local", start_timeout_s=120) as fed:
        run = submit_and_wait(app, fed.flwr_home, timeout_s=1800, log_path=work / "flwr-run.log")
        if not run.ok:
            raise RuntimeError(f"bare Flower run ended with {run.status}:\n{run.log[-3000:]}\n{fed.logs()}")
    wall = time.perf_counter() - t0
    times = json.loads(out.read_text())["round_times_s"]
    steady = statistics.median(times[1:-1]) if rounds > 2 else times[-1]
    return {"engine": "flower-bare", "clients": clients, "rounds": rounds, "wall_s": wall,
            "startup_s": wall - sum(times), "round1_s": times[0], "steady_round_s": steady, "round_times_s": times}


def table(rows: list[dict[str, Any]]) -> str:
    ref = {r["clients"]: r["steady_round_s"] for r in rows if r["engine"] == "inprocess"}
    bare = {r["clients"]: r["steady_round_s"] for r in rows if r["engine"] == "flower-bare"}
    out = ["| engine | clients | start-up (s) | round 1 (s) | steady round (s) | × in-process | × bare Flower |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = r["steady_round_s"] / ref[r["clients"]] if r["clients"] in ref else float("nan")
        vs_bare = (f"{r['steady_round_s'] / bare[r['clients']]:.2f}"
                   if r["engine"] in ("flower", "flower-bare") and r["clients"] in bare else "")
        out.append(f"| {r['engine']} | {r['clients']} | {r['startup_s']:.2f} | {r['round1_s']:.3f} | "
                   f"{r['steady_round_s']:.3f} | {ratio:.3g} | {vs_bare} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8,
                    help="rounds per in-process / simulation run (>= 3: rounds 2..R-1 are the steady state)")
    ap.add_argument("--deploy-rounds", type=int, default=4, help="rounds per deployment run (>= 3)")
    ap.add_argument("--clients", type=int, nargs="+", default=[2, 10],
                    help="client counts for in-process and simulation")
    ap.add_argument("--deploy-clients", type=int, nargs="*", default=[2, 10],
                    help="client counts for the deployment engine (one SuperNode process each)")
    args = ap.parse_args()

    from fednsl.engines.flower import ray_runtime

    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        print(f"{row['engine']:>10s} {row['clients']:4d} clients: start-up {row['startup_s']:7.2f}s, "
              f"round 1 {row['round1_s']:7.3f}s, steady round {row['steady_round_s']:7.3f}s", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in args.clients:
            record(measure("inprocess", k, args.rounds, root))
        t0 = time.perf_counter()
        with ray_runtime(1):
            ray_start = time.perf_counter() - t0
            print(f"Ray start: {ray_start:.1f}s", flush=True)
            for k in args.clients:
                record(measure("flower-sim", k, args.rounds, root))
        for k in args.deploy_clients:  # side by side: the bare Flower app, then fednsl's deployment
            record(measure_bare(k, args.deploy_rounds, root))
            record(measure("flower", k, args.deploy_rounds, root))
    ref = {r["clients"]: r["steady_round_s"] for r in rows if r["engine"] == "inprocess"}
    bare = {r["clients"]: r["steady_round_s"] for r in rows if r["engine"] == "flower-bare"}
    for r in rows:
        r["ratio_vs_inprocess"] = r["steady_round_s"] / ref[r["clients"]] if r["clients"] in ref else None
        if r["engine"] == "flower" and r["clients"] in bare:
            r["ratio_vs_bare_flower"] = r["steady_round_s"] / bare[r["clients"]]
    md = table(rows)
    print(md)
    path = write_result("flower_overhead", {
        "command": "python -m bench.flower_overhead " + " ".join(sys.argv[1:]),
        "payload": {"T": T, "J": J, "bytes_per_message": 4 * (2 * T * J + T + J)},
        "ray_start_s": ray_start, "rows": rows, "table": md})
    print("results:", path)


if __name__ == "__main__":
    main()
