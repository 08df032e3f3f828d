"""STL benchmark: robustness vs rtamt, and mining + clustering for 500 clients vs per-client loops.

Run: ``python -m bench.stl`` (``--quick`` for a smoke run).  Writes ``bench/results/stl.json``.

1. Robustness: a batch of 1000 traces × 120 steps (two signals), several formulas; ours (one
   batched, vectorised torch call) against rtamt 0.4.10's offline discrete-time monitor (one
   ``evaluate`` per trace, the dict form), side by side, with the largest value difference at
   the comparable start times.
2. Mining: every Table 1 template with 1/5/10/15 conjuncts ("formulas", as in FedSTL Tables 3–4)
   for 500 clients × 16 traces × 180 steps; ours (vectorised over clients) against a
   straightforward per-client loop calling the same miner one client at a time (the loop is
   timed on ``--loop-clients`` clients and scaled to 500 when fewer); results must be equal.
3. Clustering (FedSTL Alg. 1 for 500 clients, K = 5 cluster models): alignment matrix from the
   cluster models' predictions + argmin / balanced assignment, against per-client loops
   (instantiated formula per client; FedSTL code's repeated global argmin).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import call_times
from rules import stl

RESULTS = Path(__file__).resolve().parent / "results" / "stl.json"

ROBUSTNESS_FORMULAS = [
    "always[0:23](x <= 2)",
    "eventually[2:10](x - y > 0.5)",
    "(x < 1) until[0:10] (y > 0.5)",
    "always[0:10]((x >= 0.5) -> eventually[1:5](y <= 0))",
    "always[0:20](eventually[0:5](x >= 0) and (y < 2))",
]

# FedSTL Tables 3-4: mining time (s) for 500 clients, 1 / 5 / 10 / 15 formulas
PAPER_MINING_S = {
    "operational_range": (0.0032, 0.0166, 0.0317, 0.0469),
    "existence": (0.0052, 0.0253, 0.0521, 0.0769),
    "until": (0.0111, 0.0532, 0.1101, 0.1607),
    "intra_task": (0.0065, 0.0327, 0.0647, 0.0966),
    "temporal_implication": (0.0239, 0.1216, 0.2443, 0.3588),
    "nested_intra_task": (0.0251, 0.1224, 0.2421, 0.3684),
    "multiple_eventualities": (0.0274, 0.1390, 0.2832, 0.4173),
}
COUNTS = (1, 5, 10, 15)


def template_for(name: str, count: int) -> stl.Template:
    """The benchmarked layout of each Table 1 row with ``count`` conjuncts."""
    if name in ("operational_range", "existence", "intra_task"):
        return stl.get_template(name, count=count, width=2)
    if name == "until":
        return stl.get_template(name, count=count)
    if name in ("temporal_implication", "nested_intra_task"):
        return stl.get_template(name, count=count, width=6, reaction=(1, 3))
    return stl.get_template(name, count=count, width=6)


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Median wall time over ``repeat`` runs (after one warm-up when repeat > 1) and the result."""
    if repeat > 1:
        fn()
    times, out = call_times(fn, repeat)
    return statistics.median(times), out


def traces(rng: np.random.Generator, shape: tuple[int, ...], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Daily-profile-like signals: sine + client/trace offsets + noise."""
    t = np.arange(shape[-1])
    out = {}
    for j, n in enumerate(names):
        level = rng.normal(size=shape[:-2] + (1, 1)) if len(shape) == 3 else 0.0
        out[n] = (np.sin(t / 4 + j) + level + 0.3 * rng.normal(size=shape)).round(4)
    return out


# --- 1. robustness vs rtamt -----------------------------------------------------------------------
def bench_robustness(batch: int, length: int, rtamt_traces: int, seed: int) -> list[dict[str, Any]]:
    import rtamt

    rng = np.random.default_rng(seed)
    data = traces(rng, (batch, length), ("x", "y"))
    sig64 = {k: torch.from_numpy(v) for k, v in data.items()}
    sig32 = {k: v.float() for k, v in sig64.items()}
    rows = []
    for text in ROBUSTNESS_FORMULAS:
        f = stl.parse(text)
        ours64, rho = timed(lambda: stl.robustness(f, sig64), repeat=5)
        ours32, _ = timed(lambda: stl.robustness(f, sig32), repeat=5)
        req = {k: v.clone().requires_grad_(True) for k, v in sig32.items() if k in f.signals()}
        grad_s, _ = timed(lambda: stl.robustness(f, req).sum().backward(), repeat=5)
        spec = rtamt.StlDiscreteTimeSpecification()
        for n in f.signals():
            spec.declare_var(n, "float")
        spec.spec = str(f)
        spec.parse()
        n_ref = min(rtamt_traces, batch)
        diff = 0.0
        t0 = time.perf_counter()
        for b in range(n_ref):
            d = {"time": list(range(length))}
            d.update({n: data[n][b].tolist() for n in f.signals()})
            ref = np.array([v for _, v in spec.evaluate(d)])[: length - f.horizon]
            diff = max(diff, float(np.abs(ref - rho[b].numpy()).max()))
        rt = (time.perf_counter() - t0) * batch / n_ref
        rows.append({
            "formula": text, "batch": batch, "T": length, "start_times": length - f.horizon,
            "ours_float64_s": ours64, "ours_float32_s": ours32, "ours_float32_fwd_bwd_s": grad_s,
            "rtamt_s": rt, "rtamt_traces_timed": n_ref, "ratio_rtamt_over_ours_float64": rt / ours64,
            "max_abs_diff_vs_rtamt": diff,
        })
        print(f"robustness {text:55s} ours {ours64 * 1e3:8.2f} ms  rtamt {rt:7.2f} s  "
              f"x{rt / ours64:8.0f}  diff {diff:.1e}", flush=True)
    return rows


# --- 2. mining ------------------------------------------------------------------------------------
def bench_mining(clients: int, samples: int, length: int, loop_clients: int, counts: tuple[int, ...],
                 seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for name in stl.TEMPLATES:
        for count in counts:
            tpl = template_for(name, count)
            data = traces(rng, (clients, samples, length), tpl.signals)
            sig = {k: torch.from_numpy(v) for k, v in data.items()}
            method = "closed" if tpl.closed_form is not None else "search"
            ours, params = timed(lambda: stl.mine(tpl, sig), repeat=3 if method == "closed" else 1)
            n_loop = clients if method == "closed" else min(loop_clients, clients)
            t0 = time.perf_counter()
            looped = [stl.mine(tpl, {k: v[c : c + 1] for k, v in sig.items()}) for c in range(n_loop)]
            loop_s = (time.perf_counter() - t0) * clients / n_loop
            equal = all(float(looped[c][p][0]) == float(params[p][c]) for c in range(n_loop)
                        for p in tpl.params)
            rho_min = tpl.robustness(sig, params).amin(1)
            paper = PAPER_MINING_S[name][COUNTS.index(count)] if count in COUNTS else None
            rows.append({
                "template": name, "formulas": count, "clients": clients, "samples": samples, "T": length,
                "method": method, "ours_s": ours, "loop_s_500": loop_s, "loop_clients_timed": n_loop,
                "ratio_loop_over_ours": loop_s / ours, "equal_to_loop": equal,
                "worst_sample_robustness_max_abs": float(rho_min.abs().max()), "paper_s": paper,
            })
            print(f"mining {name:24s} x{count:2d} {method:6s} ours {ours:8.4f} s  loop {loop_s:8.3f} s "
                  f"x{loop_s / ours:7.1f}  equal {equal}  paper {paper}", flush=True)
    return rows


# --- 3. clustering --------------------------------------------------------------------------------
def reference_balanced(loss: np.ndarray, capacity: int) -> np.ndarray:
    """FedSTL code's loop: repeated global argmin over the masked K×N matrix."""
    work = loss.copy()
    n_k, n = work.shape
    out = np.full(n, -1)
    fill = np.zeros(n_k, dtype=int)
    for _ in range(n):
        k, i = np.unravel_index(np.argmin(work), work.shape)
        out[i] = k
        fill[k] += 1
        work[:, i] = np.inf
        if fill[k] >= capacity:
            work[k, :] = np.inf
    return out


def bench_clustering(clients: int, clusters: int, samples: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    tpl = stl.operational_range(count=12, width=2)
    data = torch.from_numpy(traces(rng, (clients, samples, 24), ("x",))["x"])
    shift = torch.from_numpy(rng.normal(scale=0.5, size=(clusters, 1, 1, 1)))
    preds = data[None] + shift + 0.1 * torch.from_numpy(rng.normal(size=(clusters, *data.shape)))
    mine_s, params = timed(lambda: stl.mine(tpl, data), repeat=3)
    align_s, loss = timed(lambda: stl.alignment_matrix(tpl, params, preds), repeat=3)
    formulas = stl.instantiate_clients(tpl, params)
    loop_align_s, loss_loop = timed(lambda: stl.alignment_matrix_from_formulas(formulas, preds))
    cap = -(-clients // clusters)
    arg_s, a1 = timed(lambda: stl.assign_argmin(loss), repeat=5)
    loop_arg_s, a1_loop = timed(lambda: torch.tensor([int(torch.argmin(loss[:, i])) for i in range(clients)]))
    bal_s, a2 = timed(lambda: stl.assign_balanced(loss, cap), repeat=5)
    loop_bal_s, a2_loop = timed(lambda: reference_balanced(loss.numpy(), cap))
    total_ours, res = timed(lambda: stl.cluster_id(tpl, data, preds, rule="balanced"), repeat=3)
    loop_mine_s, _ = timed(lambda: [stl.mine(tpl, data[c : c + 1]) for c in range(clients)])
    total_loop = loop_mine_s + loop_align_s + loop_bal_s
    out = {
        "clients": clients, "clusters": clusters, "samples": samples, "T": 24,
        "template": str(tpl.name) + " (12 two-step windows)",
        "mine_s": mine_s, "alignment_s": align_s, "alignment_loop_s": loop_align_s,
        "alignment_ratio": loop_align_s / align_s,
        "alignment_max_abs_diff": float((loss - loss_loop).abs().max()),
        "argmin_s": arg_s, "argmin_loop_s": loop_arg_s, "argmin_equal": bool(torch.equal(a1, a1_loop)),
        "balanced_s": bal_s, "balanced_reference_s": loop_bal_s,
        "balanced_ratio": loop_bal_s / bal_s,
        "balanced_equal": bool(np.array_equal(a2.numpy(), a2_loop)),
        "cluster_id_total_s": total_ours, "loop_total_s": total_loop,
        "total_ratio": total_loop / total_ours,
        "cluster_sizes": np.bincount(res.assignment.numpy(), minlength=clusters).tolist(),
    }
    print(f"clustering N={clients} K={clusters}: ours {total_ours:.4f} s (mine {mine_s:.4f}, align "
          f"{align_s:.4f}, balanced {bal_s:.4f}) loop {total_loop:.3f} s  x{total_loop / total_ours:.1f}",
          flush=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: rtamt and the loops are single-threaded)")
    ap.add_argument("--rtamt-traces", type=int, default=1000,
                    help="traces monitored by rtamt per formula (time scaled to the full batch)")
    ap.add_argument("--loop-clients", type=int, default=25,
                    help="clients the per-client search loop is timed on (scaled to 500)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON output path")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    q = args.quick
    result = {
        "meta": {
            "python": platform.python_version(), "torch": torch.__version__,
            "rtamt": __import__("importlib.metadata").metadata.version("rtamt"),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "quick": q, "seed": args.seed,
            "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "robustness": bench_robustness(100 if q else 1000, 120, 20 if q else args.rtamt_traces, args.seed),
        "mining": bench_mining(50 if q else 500, 16, 180, 5 if q else args.loop_clients,
                               (1, 5) if q else COUNTS, args.seed),
        "clustering": bench_clustering(50 if q else 500, 5, 16, args.seed),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
