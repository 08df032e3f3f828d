"""The FedNSL client objective (BCE + λ·KL of Eq. 2, 9–11) on a DWIE-sized problem: fused against per-equation.

Ours: :func:`fednsl.methods.fednsl.scorer.scorer_objective` (the fit's objective: one φ·w product for the logits
and Eq. 9, softmax over the bodies; its constant parts gathered per call here, once per fit in ``fit_scorer``).
Reference, side by side: :func:`~fednsl.methods.fednsl.scorer.reference_objective`, the same loss assembled from
:mod:`rules.posterior`'s per-equation functions (score_h → instance_log_posterior →
triple_posterior → kl_divergence). Both in float64, one torch thread, value and gradient in (w, b) per evaluation;
the difference of their losses and gradients is reported. Then one L-BFGS fit (``fit_scorer``) with its iterations.

The problem has the shape of the largest DWIE client fit (``configs/fednsl_dwie.yaml``, round 2): ``--cells``
labelled cells, 90 triples, up to 29 bodies, 23 % non-zero φ, 1 % positive cells, λ = 0.1, δ = 1e-5.

    python -m bench.fednsl_scorer [--cells 92000] [--repeats 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import torch

from bench._common import write_result
from fednsl.methods.fednsl.messages import ScorerOptions
from fednsl.methods.fednsl.scorer import Instances, fit_scorer, reference_objective, scorer_objective
from fednsl.tasks.rule_learning import Proposal


def dwie_shaped(cells: int, seed: int) -> tuple[Instances, Proposal]:
    """A random problem with the shape of a DWIE client fit (module docstring)."""
    g = np.random.default_rng(seed)
    T, J = 90, 29
    n_bodies = g.integers(5, J + 1, T)
    mask = np.arange(J)[None, :] < n_bodies[:, None]
    log_t = np.where(mask, np.log(g.dirichlet(np.ones(J), size=T)), 0.0)
    tri = g.integers(0, T, cells)
    phi = g.random((cells, J)) * (g.random((cells, J)) < 0.23) * mask[tri]
    phi[:, 0] = g.random(cells) * 0.01  # the body [r]: the backbone's own (small) value, on every cell
    y = (g.random(cells) < 0.01 + 0.5 * phi[:, 1]).astype(float)
    rules = Proposal(torch.zeros(T, 3, dtype=torch.long), torch.zeros(T, J, 3, dtype=torch.long),
                    torch.tensor(log_t), torch.ones(T, J, dtype=torch.long) * torch.tensor(mask), torch.tensor(mask))
    return Instances(torch.tensor(phi), torch.tensor(g.random(cells)), torch.tensor(tri), torch.tensor(y)), rules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=92000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fednsl_scorer")
    args = ap.parse_args()
    torch.set_num_threads(1)
    inst, rules = dwie_shaped(args.cells, args.seed)
    opts = ScorerOptions(kl_weight=0.1, weight_decay=1e-5, steps=250)
    g = torch.Generator().manual_seed(args.seed)
    w0 = (torch.rand(rules.num_heads, rules.num_bodies, generator=g, dtype=torch.float64) * 2 - 1) * rules.mask
    b0 = torch.rand(rules.num_heads, generator=g, dtype=torch.float64) * 2 - 1
    u0 = torch.zeros(rules.num_heads, dtype=torch.float64)
    timings: dict[str, list[float]] = {"fused": [], "reference": []}
    grads: dict[str, tuple[float, torch.Tensor, torch.Tensor]] = {}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name in timings:
            w, b = w0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
            t = time.perf_counter()
            if name == "fused":
                loss = scorer_objective(inst, rules, w, u0, b, opts)[0]
            else:
                loss = reference_objective(inst, rules, w, u0, b, opts)
            loss.backward()
            timings[name].append(time.perf_counter() - t)
            assert w.grad is not None and b.grad is not None
            grads[name] = (float(loss.detach()), w.grad, b.grad)
    med = {k: statistics.median(v[1:]) * 1000 for k, v in timings.items()}
    (lf, gwf, gbf), (lr, gwr, gbr) = grads["fused"], grads["reference"]
    t = time.perf_counter()
    fit = fit_scorer(inst, rules, opts, torch.Generator().manual_seed(args.seed))
    fit_s = time.perf_counter() - t
    out: dict[str, Any] = {
        "command": "python -m bench.fednsl_scorer " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items()),
        "load_avg_1min": os.getloadavg()[0],
        "cells": args.cells,
        "triples": rules.num_heads,
        "bodies": rules.num_bodies,
        "ms_per_evaluation": med,
        "speedup_vs_reference": med["reference"] / med["fused"],
        "loss_abs_diff": abs(lf - lr),
        "grad_max_abs_diff": max(float((gwf - gwr).abs().max()), float((gbf - gbr).abs().max())),
        "fit_s": fit_s,
        "fit_iterations": fit.iterations,
        "fit_evaluations": len(fit.history["loss"]),
        "fit_converged": fit.converged,
    }
    path = write_result(args.out, out)
    print(f"objective + gradient, {args.cells} cells: fused {med['fused']:.0f} ms, per-equation "
          f"{med['reference']:.0f} ms ({out['speedup_vs_reference']:.1f}x); |Δloss| {out['loss_abs_diff']:.1e}, "
          f"max |Δgrad| {out['grad_max_abs_diff']:.1e}; fit {fit_s:.1f} s, {fit.iterations} L-BFGS iterations "
          f"-> {path}")


if __name__ == "__main__":
    main()
