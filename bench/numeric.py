"""The FedNSL paper's numerical experiment (§4.1.1, §4.2.1, Fig. 2 a1–a6 and row 3): FedNSL vs five baselines.

Every method runs from its shipped config ``configs/numeric_<method>.yaml`` on the federation core's in-process
engine (what ``fednsl train`` runs, without its per-run plots) for each seed; the seed drives both the data draw
and the initialisation. Reported
for client 1, client 2 and their average, at the last round, mean ± std over seeds:

* training accuracy against the given labels (the paper's "unbalanced training accuracy", a1–a3) and against
  the true classes (spec §8.15);
* unseen-class test accuracy at each heterogeneity level (a4–a6 at 0 %, row 3 at 0 / 33 / 50 %).

The headline check compares FedNSL with the best baseline on the average training accuracy and the average
unseen test accuracy (paper: +17 % and +29 %). "FedNSL λ=…" rows are ablations of the KL weight, not
baselines (λ = 0: the same clients without the KL to the GMM prior, i.e. local training only).

Reference run side by side: scikit-learn's ``GaussianMixture`` fitted on the pooled client inputs of each seed
(what a server seeing all points would fit), against FedNSL's federated GMM (clients send soft statistics
only): matched component means (|Δμ| in data units) and the ratio of average log-likelihoods.

    python -m bench.numeric [--seeds 5] [--rounds R] [--methods fednsl,fedavg,...] [--quick]
    fednsl bench numeric [same options]

Writes bench/results/numeric.json, numeric.md and numeric_a.png (a1–a6), numeric_a_true.png (a1–a3 against true
labels), numeric_heterogeneity.png (row 3).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import click  # numpy loads inside the functions that use it: `fednsl bench ... --help` stays fast

METHODS: dict[str, tuple[str, str, tuple[str, ...]]] = {     # key → (label, shipped config, overrides)
    "fednsl": ("FedNSL", "numeric_fednsl", ()),
    # ablations of FedNSL's λ (spec §8.3 sweep; 0 = the same clients without the prior, local training only)
    "fednsl_lambda0": ("FedNSL λ=0", "numeric_fednsl", ("method_kwargs.kl_weight=0",)),
    "fednsl_lambda0.1": ("FedNSL λ=0.1", "numeric_fednsl", ("method_kwargs.kl_weight=0.1",)),
    "fednsl_lambda10": ("FedNSL λ=10", "numeric_fednsl", ("method_kwargs.kl_weight=10",)),
    "fedavg": ("FedAvg", "numeric_fedavg", ()),
    "pfedme": ("pFedMe", "numeric_pfedme", ()),
    "perfedavg": ("Per-FedAvg", "numeric_perfedavg", ()),
    "pfedbayes": ("pFedBayes", "numeric_pfedbayes", ()),
    "lrxfl": ("LR-XFL", "numeric_lrxfl", ()),
}
OURS = "fednsl"
BASELINES = ("fedavg", "pfedme", "perfedavg", "pfedbayes", "lrxfl")     # the headline's "best baseline" is one of these
CLIENTS = ("c1", "c2")
PAPER_HEADLINE = {"train_acc_given": 0.17, "unseen_acc_h0": 0.29}


# -- running ------------------------------------------------------------------------------------------------
def run_one(key: str, seed: int, rounds: int | None, work: Path) -> dict[str, Any]:
    """Train one method for one seed; per-client and average evaluate curves + the FedNSL GMM if any."""
    from fednsl.config import load_config
    from fednsl.pipeline import ENGINES, build_federation

    overrides = [*METHODS[key][2], f"seed={seed}"] + ([f"rounds={rounds}"] if rounds else [])
    cfg = load_config(METHODS[key][1], overrides)
    run_dir = work / f"{key}-seed{seed}"
    run_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    # the engine of `fednsl train` without its per-run plots (pipeline.train = this + plots + summary.json)
    result = ENGINES.get(cfg.engine)(build_federation(cfg), cfg, run_dir, progress=False).run()
    wall = time.perf_counter() - t0
    curves: dict[str, dict[str, list[float]]] = {}
    for row in result.rows:
        if row["stage"] != "evaluate" or not (row["scope"] == "server" or row["scope"].startswith("client:")):
            continue
        who = "avg" if row["scope"] == "server" else row["scope"].split(":", 1)[1]
        for m, v in row.items():
            if m.startswith(("train_acc", "unseen_acc")):
                curves.setdefault(m, {}).setdefault(who, []).append(float(v))
    out: dict[str, Any] = {"curves": curves, "wall_s": wall, "rounds": cfg.rounds, "data": cfg.data}
    gmm = getattr(result.federation.strategy, "gmm", None)
    if gmm is not None:
        out["gmm"] = {k: v.tolist() for k, v in gmm.arrays().items()}
    return out


def gmm_reference(run: dict[str, Any], seed: int) -> dict[str, float]:
    """scikit-learn GaussianMixture on the pooled inputs vs the federated GMM of one FedNSL run."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment
    from sklearn.mixture import GaussianMixture

    from fednsl.methods.fednsl_gmm.gmm import GMM, log_responsibilities
    from fednsl.registry import build_kwargs
    from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation

    data_cfg = build_kwargs(NumericDataConfig, run["data"], "data")
    pooled = np.concatenate([d.x_train for d in make_numeric_federation(data_cfg, seed).values()]).astype(np.float64)
    t0 = time.perf_counter()
    sk = GaussianMixture(data_cfg.classes, covariance_type="full", random_state=seed).fit(pooled)
    sk_s = time.perf_counter() - t0
    ours = GMM.from_arrays({k: np.asarray(v) for k, v in run["gmm"].items()})
    cost = np.linalg.norm(ours.means[:, None] - sk.means_[None], axis=2)
    rows, cols = linear_sum_assignment(cost)
    ll_ours = float(log_responsibilities(pooled, ours)[1].mean())
    ll_sk = float(sk.score(pooled))
    true_means = data_cfg.to_model_space(np.asarray(data_cfg.means))
    return {"max_abs_mean_diff_data_units": float(cost[rows, cols].max() * data_cfg.input_scale),
            "max_abs_mean_error_vs_truth_data_units":
                float(np.abs(ours.means - true_means).max() * data_cfg.input_scale),
            "component_k_is_class_k": bool(np.all(np.argmin(np.linalg.norm(
                ours.means[:, None] - true_means[None], axis=2), axis=1) == np.arange(data_cfg.classes))),
            "loglik_per_point_ours": ll_ours, "loglik_per_point_sklearn": ll_sk,
            "loglik_ratio_ours_over_sklearn": ll_ours / ll_sk if ll_sk else float("nan"),
            "sklearn_fit_s": sk_s}


# -- summarising --------------------------------------------------------------------------------------------
def _stats(values: Sequence[float]) -> dict[str, Any]:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
            "values": [float(v) for v in a]}


def summarise(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    import numpy as np

    final: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    for key, by_seed in runs.items():
        metrics = sorted(next(iter(by_seed.values()))["curves"])
        final[key], curves[key] = {}, {}
        for m in metrics:
            final[key][m], curves[key][m] = {}, {}
            for who in (*CLIENTS, "avg"):
                series = np.array([by_seed[s]["curves"][m][who] for s in sorted(by_seed)])
                final[key][m][who] = _stats(series[:, -1])
                curves[key][m][who] = {"mean": series.mean(0).tolist(),
                                       "std": (series.std(0, ddof=1) if len(series) > 1 else
                                               np.zeros(series.shape[1])).tolist()}
    return {"final": final, "curves": curves}


def headline(final: dict[str, Any]) -> dict[str, Any]:
    """FedNSL minus the best baseline (average over clients) per metric; the paper's claims where it has one."""
    out: dict[str, Any] = {}
    if OURS not in final:
        return out
    baselines = [k for k in final if k in BASELINES]
    for m in final[OURS]:
        ours = final[OURS][m]["avg"]["mean"]
        entry: dict[str, Any] = {"fednsl": ours}
        if baselines:
            best = max(baselines, key=lambda k: final[k][m]["avg"]["mean"])
            b = final[best][m]["avg"]["mean"]
            entry.update({"best_baseline": METHODS[best][0], "best_baseline_value": b,
                          "gain_points": ours - b, "ratio_fednsl_over_best": ours / b if b else float("nan")})
            if m in PAPER_HEADLINE:
                claim = PAPER_HEADLINE[m]
                entry["paper_claim_gain"] = claim
                entry["reproduced"] = bool(ours - b >= claim or (b and ours / b - 1 >= claim))
        out[m] = entry
    return out


# -- outputs ------------------------------------------------------------------------------------------------
def _label(key: str) -> str:
    return METHODS[key][0]


def plot_panels(curves: dict[str, Any], path: Path, train_metric: str, rows: int = 2) -> Path:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(train_metric, w, f"(a{i + 1}) training acc. ({'given' if 'given' in train_metric else 'true'} "
               f"labels), {t}") for i, (w, t) in enumerate(zip((*CLIENTS, "avg"), ("client 1", "client 2", "average")))]
    if rows == 2:
        panels += [("unseen_acc_h0", w, f"(a{i + 4}) unseen test acc., {t}")
                   for i, (w, t) in enumerate(zip((*CLIENTS, "avg"), ("client 1", "client 2", "average")))]
    fig, axes = plt.subplots(rows, 3, figsize=(13, 3.6 * rows), squeeze=False)
    for ax, (metric, who, title) in zip(axes.flat, panels):
        for key, per in curves.items():
            c = per[metric][who]
            mean, std = np.asarray(c["mean"]), np.asarray(c["std"])
            x = np.arange(1, len(mean) + 1)
            ax.plot(x, mean, label=_label(key), lw=2.2 if key == OURS else 1.4)
            ax.fill_between(x, mean - std, mean + std, alpha=0.15)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("communication round")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94 if rows == 2 else 0.88))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_heterogeneity(final: dict[str, Any], levels: Sequence[str], path: Path) -> Path:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    keys = list(final)
    width = 0.8 / len(keys)
    for ax, who, title in zip(axes, (*CLIENTS, "avg"), ("client 1", "client 2", "average")):
        for i, key in enumerate(keys):
            means = [final[key][f"unseen_acc_{lv}"][who]["mean"] for lv in levels]
            stds = [final[key][f"unseen_acc_{lv}"][who]["std"] for lv in levels]
            ax.bar(np.arange(len(levels)) + (i - (len(keys) - 1) / 2) * width, means, width, yerr=stds,
                   label=_label(key), capsize=2)
        ax.set_xticks(np.arange(len(levels)), [f"{lv[1:]}%" + (" (homo)" if lv == "h0" else " (hetero)")
                                               for lv in levels])
        ax.set_title(f"unseen test acc. vs heterogeneity, {title}", fontsize=10)
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(payload: dict[str, Any]) -> str:
    final, levels = payload["final"], payload["levels"]
    seeds, rounds = payload["config"]["seeds"], payload["config"]["rounds"]
    lines = [f"# Numerical experiment (FedNSL §4.1.1): {len(seeds)} seeds, {rounds} rounds, last round, "
             "mean ± std", ""]
    metrics = [("train_acc_given", "train acc (given labels)"), ("train_acc_true", "train acc (true labels)")] + \
        [(f"unseen_acc_{lv}", f"unseen test acc {lv[1:]}% shifted") for lv in levels]
    for m, title in metrics:
        lines += [f"## {title}", "", "| method | client 1 | client 2 | average |", "|---|---|---|---|"]
        for key in final:
            cells = [f"{final[key][m][w]['mean']:.3f} ± {final[key][m][w]['std']:.3f}" for w in (*CLIENTS, "avg")]
            lines.append(f"| {_label(key)} | " + " | ".join(cells) + " |")
        lines.append("")
    if payload.get("headline"):
        lines += ["## FedNSL vs best baseline (average over clients)", "",
                  "| metric | FedNSL | best baseline | gain (points) | paper claim | reproduced |",
                  "|---|---|---|---|---|---|"]
        for m, h in payload["headline"].items():
            if "best_baseline" not in h:
                continue
            claim = f"+{h['paper_claim_gain']:.2f}" if "paper_claim_gain" in h else "—"
            rep = ("yes" if h["reproduced"] else "no") if "reproduced" in h else "—"
            lines.append(f"| {m} | {h['fednsl']:.3f} | {h['best_baseline']} {h['best_baseline_value']:.3f} | "
                         f"{h['gain_points']:+.3f} | {claim} | {rep} |")
        lines.append("")
    if payload.get("reference"):
        r = payload["reference"]
        lines += ["## Federated GMM vs scikit-learn GaussianMixture on the pooled points (reference)", "",
                  f"max |Δμ| {r['max_abs_mean_diff_data_units']['mean']:.2e} data units (mean over seeds; largest "
                  f"{max(r['max_abs_mean_diff_data_units']['values']):.2e}); log-likelihood ratio "
                  f"ours/sklearn {r['loglik_ratio_ours_over_sklearn']['mean']:.4f}; component k = class k in "
                  f"{r['component_k_is_class_k_share']:.0%} of seeds", ""]
    lines += ["Wall time per run (s): " + ", ".join(f"{_label(k)} {v:.1f}" for k, v in payload["wall_s"].items()),
              ""]
    return "\n".join(lines)


def run_comparison(seeds: Sequence[int], rounds: int | None = None, methods: Sequence[str] | None = None,
                   out_dir: Path | None = None, name: str = "numeric", echo=print) -> dict[str, Any]:
    """Run every method for every seed, write ``<name>.json/.md`` and the PNGs into ``out_dir``."""
    import numpy as np
    import torch

    from bench._common import machine

    methods = list(methods or METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; available: {sorted(METHODS)}")
    out_dir = Path(out_dir) if out_dir is not None else Path(__file__).resolve().parent / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # 2→64→3 models: one thread per run is fastest
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="fednsl-bench-numeric-") as tmp:
            for key in methods:
                runs[key] = {}
                for s in seeds:
                    runs[key][s] = run_one(key, s, rounds, Path(tmp))
                    echo(f"{_label(key):>10s} seed {s}: {runs[key][s]['wall_s']:.1f}s  avg unseen acc "
                         f"{runs[key][s]['curves']['unseen_acc_h0']['avg'][-1]:.3f}")
    finally:
        torch.set_num_threads(threads)
    summary = summarise(runs)
    first = runs[methods[0]][seeds[0]]
    levels = sorted({m[len("unseen_acc_"):] for m in first["curves"] if m.startswith("unseen_acc_")},
                    key=lambda lv: int(lv[1:]))
    payload: dict[str, Any] = {
        "config": {"seeds": list(seeds), "rounds": first["rounds"], "methods": methods, "torch_threads_per_run": 1,
                   "configs": {k: f"configs/{METHODS[k][1]}.yaml" + (f" --set {' '.join(METHODS[k][2])}"
                                                                      if METHODS[k][2] else "") for k in methods}},
        "levels": levels, **summary, "headline": headline(summary["final"]),
        "wall_s": {k: float(np.mean([r["wall_s"] for r in v.values()])) for k, v in runs.items()},
    }
    if OURS in runs:
        refs = [gmm_reference(runs[OURS][s], s) for s in seeds if "gmm" in runs[OURS][s]]
        if refs:
            payload["reference"] = {k: _stats([r[k] for r in refs]) for k in refs[0] if k != "component_k_is_class_k"}
            payload["reference"]["component_k_is_class_k_share"] = float(np.mean([r["component_k_is_class_k"]
                                                                                    for r in refs]))
    (out_dir / f"{name}.json").write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    (out_dir / f"{name}.md").write_text(markdown(payload))
    plot_panels(summary["curves"], out_dir / f"{name}_a.png", "train_acc_given")
    plot_panels(summary["curves"], out_dir / f"{name}_a_true.png", "train_acc_true", rows=1)
    plot_heterogeneity(summary["final"], levels, out_dir / f"{name}_heterogeneity.png")
    return payload


@click.command("numeric")
@click.option("--seeds", type=int, default=5, show_default=True, help="Number of seeds (0 … N−1) per method.")
@click.option("--rounds", type=int, default=None, help="Override every config's number of rounds.")
@click.option("--methods", default=",".join(METHODS), show_default=True,
              help="Comma-separated subset of: " + ", ".join(METHODS) + ".")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Output folder (default: bench/results).")
@click.option("--quick", is_flag=True, help="Smoke run: 2 seeds × 3 rounds (overrides --seeds/--rounds).")
def command(seeds: int, rounds: int | None, methods: str, out_dir: Path | None, quick: bool) -> None:
    """FedNSL's numerical experiment against five baselines, over several seeds.

    FedNSL vs pFedMe, Per-FedAvg, pFedBayes, LR-XFL and FedAvg (Fig. 2 a1–a6 and the heterogeneity row);
    writes numeric.json, numeric.md and numeric_*.png.
    """
    if quick:
        seeds, rounds = 2, 3
    if seeds < 1:
        raise click.BadParameter("need at least one seed", param_hint="--seeds")
    try:
        payload = run_comparison(list(range(seeds)), rounds, [m.strip() for m in methods.split(",") if m.strip()],
                                 out_dir, echo=click.echo)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    for m, h in payload["headline"].items():
        if "paper_claim_gain" in h:
            click.echo(f"{m}: FedNSL {h['fednsl']:.3f} vs {h['best_baseline']} {h['best_baseline_value']:.3f} "
                       f"(gain {h['gain_points']:+.3f}; paper +{h['paper_claim_gain']:.2f}; "
                       f"reproduced: {'yes' if h['reproduced'] else 'no'})")
    click.echo(f"results: {(out_dir or Path(__file__).resolve().parent / 'results') / 'numeric.json'}")


if __name__ == "__main__":
    command()
