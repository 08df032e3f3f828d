"""Knowledge-Injected FL (Fan et al. 2022) §7: the five approaches, the low-data study and the λ study.

For each data set (shipped config ``configs/kifl_<name>.yaml``) and seed, on the federation core's in-process
engine (what ``fednsl train`` runs):

* **Table 3** (§7.4): per client, test accuracy (TA) and percentage of violations (POV, eq. 7) of
  P-KM alone, ML (local, no KM), MLwKM (local through T^m), FL (FedAvg, no KM) and FLwKM (Alg. 1) at the
  config's λ and data fraction, with the config's honest R-KM (decision rules fitted on a private knowledge
  slice) and, as ``paper`` rows, with the paper's lookup R-KM (true label + P-KM label + random classes, which
  reads the test labels: §7.2 / FedMech.jl ``buildRangeModel``).
* **Table 2** (§7.3): FLwKM TA against the share of local data used to train.
* **Fig. 4** (§7.5): FLwKM TA against λ ∈ {0, 0.1, ..., 0.5}.

Reference run side by side: an engine-free PyTorch loop of Algorithm 1 (sampling, E local epochs through
T^m, unweighted mean) over the same clients, KM outputs and seeds; reported as the FLwKM accuracy
difference and the wall-time ratio (engine / loop). Mean ± std over seeds.

    python -m bench.kifl [--datasets digits,fashion_mnist] [--seeds 3] [--quick] [--covtype PATH]

Writes bench/results/kifl.json and kifl.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import click  # numpy loads inside the functions that use it: `fednsl bench ... --help` stays fast

APPROACHES = ("P-KM", "ML", "MLwKM", "FL", "FLwKM")
FLAGS = {"ML": (False, False), "MLwKM": (True, False), "FL": (False, True), "FLwKM": (True, True)}  # with_km, fed
FRACTIONS = {"fashion_mnist": (0.01, 0.05, 0.1, 0.3), "covtype": (0.01, 0.05, 0.1, 0.3),
             "digits": (0.05, 0.1, 0.3, 0.5)}
LAMBDAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
#: Table 3 settings: R-KM (honest decision rules / the paper's label-reading lookup) × evaluation of the federated
#: rows (Alg. 1's θ / FedMech.jl's: each client's model after its local epochs from the last θ, "finetune")
VARIANTS = {"rules": (), "rules+ft": ("finetune",), "paper+ft": ("lookup", "finetune")}
VARIANT_LABELS = {"rules": "honest rule R-KM, federated rows evaluated at Alg. 1's θ",
                  "rules+ft": "honest rule R-KM, federated rows evaluated after E local epochs from θ (FedMech.jl)",
                  "paper+ft": "paper's lookup R-KM (reads test labels), FedMech.jl evaluation"}
QUICK = {"rounds": 3, "max_samples": 600, "local_epochs": 2}


def _config(name: str, overrides: Sequence[str]) -> Any:
    from fednsl.config import load_config

    return load_config(f"kifl_{name}", list(overrides))


def run_once(ds: Any, name: str, seed: int, overrides: Sequence[str], cache: dict, work: Path) -> dict[str, Any]:
    """One federation; returns per-client TA/POV (last evaluation) and the P-KM's."""
    from fednsl.methods.kifl import KIFLConfig, KIFLDataConfig, build_kifl_federation
    from fednsl.pipeline import ENGINES
    from fednsl.registry import build_kwargs

    cfg = _config(name, [*overrides, f"seed={seed}"])
    kcfg = build_kwargs(KIFLConfig, cfg.method_kwargs, "method_kwargs")
    dcfg = build_kwargs(KIFLDataConfig, cfg.data, "data")
    fed = build_kifl_federation(ds, kcfg, dcfg, seed, cache)
    run_dir = Path(tempfile.mkdtemp(dir=work))
    t0 = time.perf_counter()
    result = ENGINES.get(cfg.engine)(fed, cfg, run_dir, progress=False).run()
    wall = time.perf_counter() - t0
    last = max(r["round"] for r in result.rows if r["stage"] == "evaluate")
    out: dict[str, Any] = {"wall_s": wall, "clients": {}}
    for r in result.rows:
        if r["stage"] == "evaluate" and r["round"] == last and r["scope"].startswith("client:"):
            n = max(r["num_examples"], 1)
            out["clients"][r["scope"][7:]] = {"TA": r["correct"] / n, "POV": r["violations"] / n}
    out["pkm"] = {cid: {"TA": c.pkm_counts()["correct"] / max(len(c.data.y_test), 1),
                        "POV": c.pkm_counts()["violations"] / max(len(c.data.y_test), 1)}
                  for cid, c in fed.clients.items()}
    out["knowledge"] = {cid: c.knowledge_summary() for cid, c in fed.clients.items()}
    out["train_sizes"] = {cid: len(c.data.y_train) for cid, c in fed.clients.items()}
    out["_fed"] = fed
    out["_cfg"] = cfg
    return out


def reference_alg1(fed: Any, cfg: Any) -> tuple[dict[str, float], float]:
    """Algorithm 1 written directly in PyTorch over the same clients (no engine, no messages)."""
    import numpy as np
    import torch

    from fednsl.common.torch_utils import get_weights, set_weights
    from fednsl.federation.runner import client_seed, sample_clients

    strat = fed.strategy
    theta = {k: v.copy() for k, v in strat.initial_weights.items()}
    ids = sorted(fed.clients)
    kc = strat.cfg
    t0 = time.perf_counter()
    for rnd in range(1, cfg.rounds + 1):
        chosen = sample_clients(ids, cfg.federation.fraction, cfg.federation.min_clients, cfg.seed, rnd, "train")
        ups = []
        for cid in chosen:
            c = fed.clients[cid]
            set_weights(c.model, theta)
            gen = torch.Generator().manual_seed(client_seed(cfg.seed, rnd, "train", ids.index(cid)))
            opt = torch.optim.Adam(c.model.parameters(), lr=kc.lr)
            c.model.train()
            for _ in range(kc.local_epochs):
                order = torch.randperm(len(c.y_train), generator=gen)
                for s in range(0, len(order), kc.batch_size):
                    idx = order[s:s + kc.batch_size]
                    logits = c.model(c.x_train[idx])
                    s_ = torch.softmax(logits.masked_fill(~torch.from_numpy(c.km_train.allowed)[idx], -float("inf")), 1)
                    p = torch.from_numpy(c.km_train.pkm)[idx]
                    lam = c.lam * (p >= 0).float()
                    g = torch.nn.functional.one_hot(p.clamp(min=0), logits.shape[1]).float()
                    f = (1 - lam)[:, None] * s_ + lam[:, None] * g
                    loss = -torch.log(f[torch.arange(len(idx)), c.y_train[idx]] + kc.eps).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            ups.append(get_weights(c.model))
        # line 10: θ ← (1/|S_t|) Σ θ^m (float64 accumulation), applied as the FedAvg server step θ + η_s(avg − θ)
        avg = {k: sum((1.0 / len(ups)) * u[k].astype(np.float64) for u in ups).astype(theta[k].dtype) for k in theta}
        theta = {k: (theta[k] + kc.server_lr * (avg[k] - theta[k])).astype(avg[k].dtype) for k in theta}
    acc = {cid: fed.clients[cid].test_counts(theta)["correct"] / max(len(fed.clients[cid].data.y_test), 1)
           for cid in ids}
    return acc, time.perf_counter() - t0


def _ms(values: Sequence[float]) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "n": int(len(v))}


def bench_dataset(name: str, seeds: Sequence[int], quick: bool, path: str | None, work: Path,
                  studies: Sequence[str], fractions: Sequence[float] | None = None,
                  on_seed: Any = None) -> dict[str, Any]:
    """All studies of one data set; ``on_seed(partial)`` gets the summary over the seeds done so far."""
    from fednsl.methods.kifl.data import load_dataset

    base: list[str] = [f"data.path={path}"] if path else []
    if quick:
        base += [f"rounds={QUICK['rounds']}", f"data.max_samples={QUICK['max_samples']}",
                 f"method_kwargs.local_epochs={QUICK['local_epochs']}", f"federation.evaluate_every={QUICK['rounds']}"]
        if name == "fashion_mnist":
            base += ["method_kwargs.knowledge.all.prediction.epochs=1"]
    cfg0 = _config(name, base)
    ds = load_dataset(cfg0.data["name"], cfg0.data.get("path"))
    paper_range = ["method_kwargs.knowledge.all.range={fit: paper_lookup, extra_classes: %d}" % (
        2 if name == "fashion_mnist" else 1)]
    runs: dict[str, dict[int, Any]] = {}
    extra: dict[str, Any] = {"reference": []}
    for seed in seeds:
        cache: dict = {}
        t_seed = time.perf_counter()
        if "table" in studies:
            for variant, rk in VARIANTS.items():
                for appr, (km, fed) in FLAGS.items():
                    key = f"{appr}|{variant}"
                    ov = [*base, *(paper_range if "lookup" in rk else []), f"method_kwargs.with_km={str(km).lower()}",
                          f"method_kwargs.federated={str(fed).lower()}"]
                    if "finetune" in rk and fed:
                        ov.append(f"method_kwargs.finetune_epochs={cfg0.method_kwargs['local_epochs']}")
                    r = run_once(ds, name, seed, ov, cache, work)
                    runs.setdefault(key, {})[seed] = r
                    runs.setdefault(f"P-KM|{variant}", {})[seed] = {"clients": r["pkm"], "knowledge": r["knowledge"]}
                    if key == "FLwKM|rules" and seed == seeds[0]:
                        ref_acc, ref_wall = reference_alg1(r["_fed"], r["_cfg"])
                        ours = {c: v["TA"] for c, v in r["clients"].items()}
                        extra["reference"].append({
                            "seed": seed, "max_abs_TA_diff": float(max(abs(ours[c] - ref_acc[c]) for c in ours)),
                            "engine_wall_s": r["wall_s"], "reference_wall_s": ref_wall,
                            "wall_ratio": r["wall_s"] / max(ref_wall, 1e-9)})
        if "data" in studies:
            for frac in fractions or FRACTIONS.get(name, (0.01, 0.05, 0.1, 0.3)):
                r = run_once(ds, name, seed, [*base, f"data.train_fraction={frac}"], cache, work)
                runs.setdefault(f"data|{frac}", {})[seed] = r
        if "lambda" in studies:
            for lam in LAMBDAS:
                r = run_once(ds, name, seed, [*base, f"method_kwargs.lam={lam}"], cache, work)
                runs.setdefault(f"lambda|{lam}", {})[seed] = r
        print(f"[kifl] {name} seed {seed}: {time.perf_counter() - t_seed:.1f}s", file=sys.stderr, flush=True)
        if on_seed is not None:
            done = list(seeds[: list(seeds).index(seed) + 1])
            on_seed(_summarise(name, ds, cfg0, base, quick, {k: {s_: v[s_] for s_ in done} for k, v in runs.items()},
                               done, extra))
    return _summarise(name, ds, cfg0, base, quick, runs, list(seeds), extra)


def _summarise(name: str, ds: Any, cfg0: Any, base: list[str], quick: bool, runs: dict[str, dict[int, Any]],
               seeds: list[int], extra: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    clients = sorted(next(iter(runs.values()))[seeds[0]]["clients"])
    summary: dict[str, Any] = {}
    for key, by_seed in runs.items():
        summary[key] = {cid: {m: _ms([by_seed[s]["clients"][cid][m] for s in seeds]) for m in ("TA", "POV")}
                        for cid in clients}
        summary[key]["mean"] = {m: _ms([np.mean([by_seed[s]["clients"][c][m] for c in clients]) for s in seeds])
                                for m in ("TA", "POV")}
    know = [runs[k][s]["knowledge"] for k in runs if k.startswith("FLwKM|rules") for s in seeds]
    knowledge = {cid: {m: _ms([k[cid][m] for k in know]) for m in ("rkm_mean_size", "rkm_label_coverage")}
                 for cid in clients} if know else {}
    sizes = {cid: _ms([runs[k][s]["train_sizes"][cid] for s in seeds])["mean"]
             for k in runs if k == "FLwKM|rules" for cid in clients}
    return {"dataset": name, "source": ds.source, "seeds": list(seeds), "quick": quick, "overrides": base,
            "config": cfg0.to_dict(), "summary": summary, "knowledge": knowledge, "train_sizes": sizes, **extra}


def merge_results(files: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Combine result files of single seeds (as written by separate processes) into mean ± std over seeds."""
    out: dict[str, Any] = {"machine": files[0]["machine"], "wall_s": sum(f["wall_s"] for f in files), "results": {}}
    names = sorted({n for f in files for n in f["results"]})
    for name in names:
        parts = [f["results"][name] for f in files if name in f["results"]]
        if any(len(p["seeds"]) != 1 for p in parts):
            raise click.ClickException("--merge takes result files of one seed each")
        base = dict(parts[0])

        def combine(get: Any) -> dict[str, float]:
            return _ms([get(p) for p in parts])

        summary: dict[str, Any] = {}
        for key, by_client in base["summary"].items():
            summary[key] = {cid: {m: combine(lambda p, k=key, c=cid, m=m: p["summary"][k][c][m]["mean"])
                                  for m in ("TA", "POV")} for cid in by_client}
        knowledge = {cid: {m: combine(lambda p, c=cid, m=m: p["knowledge"][c][m]["mean"]) for m in v}
                     for cid, v in base.get("knowledge", {}).items()}
        base.update(summary=summary, knowledge=knowledge, seeds=sorted(s for p in parts for s in p["seeds"]),
                    reference=[r for p in parts for r in p.get("reference", [])])
        out["results"][name] = base
    return out


def _fmt(s: dict[str, float]) -> str:
    return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}"


def markdown(results: dict[str, Any]) -> str:
    import numpy as np

    lines = []
    for name, res in results.items():
        cfg = _config(name, res["overrides"]) if name else None
        paper = cfg.paper if cfg is not None else {}
        sm = res["summary"]
        clients = [c for c in next(iter(sm.values())) if c != "mean"]
        lines += [f"### {name} ({res['source']}), seeds {res['seeds']}{' (quick)' if res['quick'] else ''}", ""]
        for variant, label in VARIANT_LABELS.items():
            if f"FLwKM|{variant}" not in sm:
                continue
            lines += [f"TA / POV (%), {label}; paper's Table 3 in brackets", "",
                      "| client | " + " | ".join(APPROACHES) + " |", "|---" * (len(APPROACHES) + 1) + "|"]
            for i, cid in enumerate([*clients, "mean"]):
                cells = []
                for a in APPROACHES:
                    s = sm[f"{a}|{variant}"][cid]
                    pp = paper.get(a, {})
                    ref = ""
                    if pp and cid != "mean":
                        ref = f" [{pp['TA'][i]} / {pp['POV'][i]}]"
                    elif pp:
                        ref = f" [{np.mean(pp['TA']):.0f} / {np.mean(pp['POV']):.0f}]"
                    cells.append(f"{_fmt(s['TA'])} / {_fmt(s['POV'])}{ref}")
                lines.append(f"| {cid} | " + " | ".join(cells) + " |")
            lines.append("")
        fr = [k for k in sm if k.startswith("data|")]
        if fr:
            t2 = paper.get("table2_FLwKM_TA", {})
            lines += ["FLwKM TA (%) against the share of local data (Table 2; paper in brackets where the share matches)",
                      "", "| client | " + " | ".join(k.split("|")[1] for k in fr) + " |", "|---" * (len(fr) + 1) + "|"]
            for i, cid in enumerate([*clients, "mean"]):
                cells = []
                for k in fr:
                    frac = k.split("|")[1]
                    ref = f" [{t2[frac][i]}]" if frac in t2 and cid != "mean" else ""
                    cells.append(_fmt(sm[k][cid]["TA"]) + ref)
                lines.append(f"| {cid} | " + " | ".join(cells) + " |")
            lines.append("")
        la = [k for k in sm if k.startswith("lambda|")]
        if la:
            lines += ["FLwKM TA (%) against λ (Fig. 4)", "", "| client | " + " | ".join(k.split("|")[1] for k in la)
                      + " |", "|---" * (len(la) + 1) + "|"]
            for cid in [*clients, "mean"]:
                lines.append(f"| {cid} | " + " | ".join(_fmt(sm[k][cid]["TA"]) for k in la) + " |")
            lines.append("")
        if res.get("knowledge"):
            lines += ["R-KM (rules) on the test rows: mean admissible classes / share of true labels admitted", "",
                      "| client | classes admitted | label coverage (%) |", "|---|---|---|"]
            for cid, k in res["knowledge"].items():
                lines.append(f"| {cid} | {k['rkm_mean_size']['mean']:.2f} | {100 * k['rkm_label_coverage']['mean']:.1f} |")
            lines.append("")
        for ref in res.get("reference", []):
            lines.append(f"Reference (engine-free Alg. 1 loop, seed {ref['seed']}): max |ΔTA| = "
                         f"{100 * ref['max_abs_TA_diff']:.2f} points, wall-time ratio engine/loop = {ref['wall_ratio']:.2f}")
        lines.append("")
    return "\n".join(lines)


@click.command("kifl")
@click.option("--datasets", default="digits,fashion_mnist", show_default=True,
              help="comma-separated: digits, fashion_mnist, covtype (covtype needs --covtype PATH)")
@click.option("--seeds", default=3, show_default=True, type=int, help="number of seeds (first-seed, first-seed+1, ...)")
@click.option("--first-seed", default=0, show_default=True, type=int, help="first seed (to split seeds over processes)")
@click.option("--merge", "merge_files", multiple=True,
              help="instead of running: merge these result JSONs (one seed each, same data set) into --out")
@click.option("--studies", default="table,data,lambda", show_default=True,
              help="comma-separated: table (Table 3), data (Table 2), lambda (Fig. 4)")
@click.option("--quick", is_flag=True, help="reduced size (3 rounds, 600 samples, 2 local epochs) for a smoke run")
@click.option("--covtype", "covtype_path", default=None, help="path to covtype.data.gz or the LIBSVM covtype file")
@click.option("--fashion-mnist", "fmnist_path", default=None,
              help="folder of the FashionMNIST idx files (default: /usr/share/datasets/fashion-mnist)")
@click.option("--fractions", default=None,
              help="comma-separated data shares for the Table 2 study (default: 0.01,0.05,0.1,0.3; digits 0.05,0.1,0.3,0.5)")
@click.option("--threads", default=1, show_default=True,
              help="torch intra-op threads (1: small-batch training on a shared 2-core machine is far faster)")
@click.option("--out", default=None, help="output JSON path (default bench/results/kifl[_quick].json; Markdown beside it)")
def command(datasets: str, seeds: int, studies: str, quick: bool, covtype_path: str | None,
            fmnist_path: str | None, fractions: str | None, threads: int, out: str | None, first_seed: int,
            merge_files: tuple[str, ...]) -> None:
    """KIFL §7: five approaches (TA/POV), data-size and λ studies; JSON + Markdown in bench/results/."""
    from bench._common import machine, write_result

    if merge_files:
        merged = merge_results([json.loads(Path(f).read_text()) for f in merge_files])
        path = Path(out or "bench/results/kifl.json")
        command_line = "python -m bench.kifl " + " ".join(sys.argv[1:])
        runs = sorted({r["command"] for r in (json.loads(Path(f).read_text()) for f in merge_files)})
        path.write_text(json.dumps({"machine": merged.pop("machine"), "commands": runs, "merged_by": command_line,
                                    **merged}, indent=2, default=str))
        path.with_suffix(".md").write_text(f"# KIFL §7 benchmark ({time.strftime('%Y-%m-%d')})\n\n"
                                           + "".join(f"`{c}`\n\n" for c in runs) + markdown(merged["results"]))
        click.echo(markdown(merged["results"]))
        return
    if "torch" not in sys.modules:     # OMP's thread count is per thread: the engine's client threads need it too
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    paths = {"covtype": covtype_path, "fashion_mnist": fmnist_path}
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    fracs = [float(f) for f in fractions.split(",")] if fractions else None
    command_line = "python -m bench.kifl " + " ".join(sys.argv[1:])

    def write(partial: dict[str, Any]) -> Path:
        wall = time.perf_counter() - t0
        payload = {"wall_s": wall, "command": command_line, "results": partial}
        if out:
            path = Path(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str))
        else:
            path = write_result("kifl_quick" if quick else "kifl", payload)
        path.with_suffix(".md").write_text(f"# KIFL §7 benchmark ({time.strftime('%Y-%m-%d')}, {wall:.0f} s)\n\n"
                                           f"`{command_line}`\n\n" + markdown(partial))
        return path

    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            res = bench_dataset(name, list(range(first_seed, first_seed + seeds)), quick, paths.get(name), Path(tmp),
                                [s.strip() for s in studies.split(",")], fracs,
                                on_seed=lambda part, name=name: write({**results, name: part}))
            results[name] = res
    wall = time.perf_counter() - t0
    path = write(results)
    md = markdown(results)
    click.echo(md)
    click.echo(f"wrote {path} ({wall:.1f} s)")


if __name__ == "__main__":
    command()
