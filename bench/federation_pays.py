"""When does federation pay? Per-client test MRR of fednsl-kg federated against each client alone and against the
centralised union, on natural federated splits (issue 33).

    python -m bench.federation_pays --split kinship_entity_skew --seeds 0 1 2
    python -m bench.federation_pays --split kinship_entity --seeds 0 1 2
    python -m bench.federation_pays --split umls_entity_skew --seeds 0 1 2
    python -m bench.federation_pays --split kinship_triple_skew --seeds 0 1 2
    python -m bench.federation_pays --split kinship_entity_skew --settings federated-paper lambda-0   # ablations
    python -m bench.federation_pays --split kinship_entity_skew --settings pool-only centralised-pool-only \
        --merge federation_pays_kinship_entity_skew --name generator                                  # generator

Each seed splits the KG with the seed (``kg.kg_partition.partition_kg``: by entity, every client keeps the facts
between its own entities; by triple, clients share every relation), writes the parts as a federated folder and
runs, through :func:`fednsl.pipeline.train`, the dataset's config with

- ``federated``: the shipped loop — one server generator and pool, plus what a data-poor client lacks: each
  proposed body's leave-one-out evidence pooled over clients, from which every client starts its rule weights
  (``federated_confidence``), and its own mined bodies kept beside the proposal (``keep_own_rules``);
- ``federated-paper``: FedNSL's loop alone (both off: only the server's proposals and prior are shared);
- ``local-only``: every client alone, with the same machinery on its own data (its own generator, pool, weights);
- ``centralised``: one client holding the union of the parts (the upper bound; its test set is the union's);
- ablations: ``confidence-only``, ``own-rules-only``, ``with-weights`` (also the clients' fitted weights averaged
  as every client's start, ``federated_weights``), ``lambda-0`` (no KL toward the prior), ``select-client`` /
  ``select-head`` (each client scores with its own mined bodies alone where they rank its valid facts better,
  ``select_on_valid``), ``pool-only`` (the generator's share: only the pool's bodies are proposed, no generator
  sample, ``max_bodies`` = ``pool_top``), ``centralised-pool-only`` (the same on the union).

An ablation is also reported against the setting it removes a mechanism from (:data:`ABLATES`): the paired gain
of the mechanism per client and on the aggregate. ``--merge NAME`` adds a stored result's runs of the other
settings (same split and seeds), so an ablation run later is paired with the runs it is measured against.

Per client: test MRR mean ± 95 % t-interval over seeds, and the paired difference to local-only (mean and
t-interval of the per-seed differences). Writes bench/results/federation_pays_<split>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

from bench._common import RESULTS, mean_ci, write_result
from bench.kg_completion import collect
from fednsl.config import load_config
from fednsl.methods.fednsl_kg.config import resolve_source
from fednsl.pipeline import train
from kg.kg_partition import partition_kg, partition_report, read_federated_kg, write_federated_kg
from kg.kg_sources import load_kg

KINSHIP, UMLS = "configs/fednsl_kg_kinship.yaml", "configs/fednsl_kg_umls.yaml"
FB15K237, R10 = "configs/fednsl_kg_fb15k237.yaml", "configs/fednsl_kg_fb15k237_r10.yaml"
SKEWED = [0.7, 0.15, 0.15]
#: split -> (config, KG source, partition, shares, data-poor clients)
SPLITS: dict[str, tuple[str, str, str, list[float] | None, tuple[str, ...]]] = {
    "kinship_entity": (KINSHIP, "../shared/data/kg/kinship_rnnlogic", "entity", None, ()),
    "kinship_entity_skew": (KINSHIP, "../shared/data/kg/kinship_rnnlogic", "entity", SKEWED, ("c1", "c2")),
    "umls_entity": (UMLS, "../shared/data/kg/umls_rnnlogic", "entity", None, ()),
    "umls_entity_skew": (UMLS, "../shared/data/kg/umls_rnnlogic", "entity", SKEWED, ("c1", "c2")),
    "kinship_triple_skew": (KINSHIP, "../shared/data/kg/kinship_rnnlogic", "triple", [0.8, 0.1, 0.1], ("c1", "c2")),
    "fb15k237_entity": (FB15K237, "../shared/data/kg/fb15k237", "entity", None, ()),
    # FedLU's published split (10 clients, disjoint relations): the folder as it is, whatever the seed
    "r10": (R10, "../shared/data/kg/fb15k237_fedlu_r10", "folder", None, ()),
}
OFF = ["method_kwargs.federated_confidence=false", "method_kwargs.keep_own_rules=false"]
SETTINGS: dict[str, list[str]] = {
    "federated": [],
    "local-only": ["method_kwargs.local_only=true"],
    "centralised": [],  # the union as one KG: data overrides in :func:`overrides`
    "federated-paper": OFF,
    "confidence-only": [OFF[1]],
    "own-rules-only": [OFF[0]],
    "with-weights": ["method_kwargs.federated_weights=true"],
    "lambda-0": ["method_kwargs.kl_weight=0"],
    "select-client": ["method_kwargs.select_on_valid=client"],
    "select-head": ["method_kwargs.select_on_valid=head"],
    "pool-only": [],  # max_bodies = the config's pool_top: :func:`overrides`
    "centralised-pool-only": [],  # the union as one KG, the pool alone
}
#: ablation -> the setting it removes a mechanism from: reported as the paired gain (setting − ablation)
ABLATES = {
    "pool-only": "federated",
    "centralised-pool-only": "centralised",
    "lambda-0": "federated",
    "federated-paper": "federated",
    "confidence-only": "federated",
    "own-rules-only": "federated",
}
DEFAULT = ("federated", "local-only", "centralised")


def overrides(setting: str, folder: Path, seed: int, extra: list[str], config: str) -> list[str]:
    """The --set overrides of one run: the folder as clients (or as one KG for the centralised bound)."""
    data = (
        [f"data.source={folder}", "data.num_clients=1", "data.federated_folder=null"]
        if setting.startswith("centralised")
        else [f"data.federated_folder={folder}"]
    )
    if setting.endswith(
        "pool-only"
    ):  # no generator sample is proposed: the mined pool alone (and its posterior update)
        data.append(f"method_kwargs.max_bodies={load_config(config).method_kwargs['pool_top']}")
    return [f"seed={seed}", *data, *SETTINGS[setting], *extra]


def write_split(split: str, seed: int, out: Path) -> tuple[Path, dict[str, Any]]:
    """Partition the split's KG with ``seed`` into ``out`` (FedLU layout), or take a published federated folder as
    it is (``folder``); returns the folder the clients read and the kept / dropped counts."""
    _, source, by, shares, _ = SPLITS[split]
    if by == "folder":
        folder = Path(resolve_source(source))
        parts = read_federated_kg(folder)
        return folder, {"report": {"train": {"dropped": 0}}, "train": [len(p.train) for p in parts]}
    kg = load_kg(resolve_source(source))
    parts = partition_kg(kg, 3, by=by, seed=seed, shares=shares)  # type: ignore[arg-type]
    write_federated_kg(parts, out)
    return out, {"report": partition_report(kg, parts), "train": [len(p.train) for p in parts]}


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    m, ci = mean_ci([x - y for x, y in zip(a, b)])
    return {"mean": m, "ci95": ci, "low": m - ci, "high": m + ci, "n": len(a)}


def summarise(split: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per setting: aggregate and per-client MRR over seeds; per client: paired difference to local-only."""
    out: dict[str, Any] = {"settings": {}, "paired": {}}
    for name, rs in runs.items():
        central = name.startswith("centralised")
        per = {} if central else {c: [r["clients"][c]["test_mrr"] for r in rs] for c in rs[0]["clients"]}
        out["settings"][name] = {
            "test_mrr": [r["test_mrr"] for r in rs],
            "clients": per,
        }
    local = out["settings"].get("local-only")
    for name, s in out["settings"].items():
        if local is None or name == "local-only" or name.startswith("centralised"):
            continue
        out["paired"][name] = {c: paired(v, local["clients"][c]) for c, v in s["clients"].items()}
        poor = SPLITS[split][4]
        if poor:
            mean = [sum(s["clients"][c][i] for c in poor) / len(poor) for i in range(len(s["test_mrr"]))]
            base = [sum(local["clients"][c][i] for c in poor) / len(poor) for i in range(len(s["test_mrr"]))]
            out["paired"][name]["data-poor"] = paired(mean, base)
    out["ablations"] = {}
    for name, against in ABLATES.items():
        a, b = out["settings"].get(name), out["settings"].get(against)
        if a is None or b is None:
            continue
        gain = {c: paired(v, a["clients"][c]) for c, v in b["clients"].items() if c in a["clients"]}
        out["ablations"][name] = {
            "against": against,
            "aggregate": paired(b["test_mrr"], a["test_mrr"]),
            "clients": gain,
        }
    return out


def _pair(p: dict[str, float]) -> str:
    """mean [95% interval]; the mean alone (one seed) where there is no interval."""
    if p.get("n", 2) < 2:
        return f"{p['mean']:+.3f} (one seed)"
    return f"{p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]"


def _fmt(values: list[float]) -> str:
    m, ci = mean_ci(values)
    return f"{m:.3f} ± {ci:.3f}" if ci else f"{m:.3f}"


def markdown(
    split: str,
    seeds: list[int],
    summary: dict[str, Any],
    commands: list[str],
    splits: list[Any],
    runs: dict[str, list[dict[str, Any]]],
) -> str:
    config, source, by, shares, poor = SPLITS[split]
    settings = summary["settings"]
    clients = sorted(next(iter(s["clients"] for s in settings.values() if s["clients"]), {}))
    lines = [
        f"# When does federation pay? {split}",
        "",
        f"{source} split by {by} over {len(splits[0]['train'])} clients (shares {shares or 'equal'}; "
        f"{'as published' if by == 'folder' else 'seeded with the run seed'}; "
        f"data-poor clients: {', '.join(poor) or 'none'}), config `{config}`, seeds {seeds}. Test MRR, mean ± "
        "95% t-interval over seeds (each client's own test triples, filtered with its own facts; the centralised "
        "bound is one model on the union of the parts, scored on the union's test triples).",
        "",
        "| setting | aggregate | " + " | ".join(clients) + " |",
        "|---|---|" + "---|" * len(clients),
    ]
    for name, s in settings.items():
        cells = [_fmt(s["clients"][c]) if c in s["clients"] else "–" for c in clients]
        lines.append(f"| {name} | {_fmt(s['test_mrr'])} | " + " | ".join(cells) + " |")
    if summary["paired"]:
        lines += [
            "",
            "Paired difference to local-only (per seed, then mean [95% interval]):",
            "",
            "| setting | " + " | ".join([*clients, *(["data-poor mean"] if poor else [])]) + " |",
            "|---|" + "---|" * (len(clients) + bool(poor)),
        ]
        for name, per in summary["paired"].items():
            cells = [_pair(p) for p in per.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if summary.get("ablations"):
        lines += [
            "",
            "What each mechanism adds: the setting with it minus the ablation without it, paired per seed, mean [95% "
            "interval]:",
            "",
            "| ablation | against | aggregate | " + " | ".join(clients) + " |",
            "|---|---|---|" + "---|" * len(clients),
        ]
        for name, ab in summary["ablations"].items():
            cells = [_pair(ab["clients"][c]) if c in ab["clients"] else "–" for c in clients]
            lines.append(f"| {name} | {ab['against']} | {_pair(ab['aggregate'])} | " + " | ".join(cells) + " |")
    sent = {name: rs[0].get("bytes_per_round") for name, rs in runs.items() if rs}
    lines += [
        "",
        "Bytes per round, all clients together, client → server / server → clients (first seed): "
        + "; ".join(
            f"{name} " + ", ".join(f"{b['up'] / 1e6:.2f} / {b['down'] / 1e6:.2f} MB" for b in per)
            for name, per in sent.items()
            if per
        ),
    ]
    lines += [
        "",
        "Training triples per client and seed: "
        + "; ".join(
            f"seed {s}: {' / '.join(map(str, sp['train']))} (dropped: {sp['report']['train']['dropped']})"
            for s, sp in zip(seeds, splits)
        ),
        "",
        "Commands (the folder is written by this bench per seed):",
        "",
    ]
    lines += [f"- `{re.sub(r'/tmp/fednsl-federation-pays-[^/]+/', 'DIR/', c)}`" for c in commands]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--split", choices=sorted(SPLITS))
    ap.add_argument("--render", nargs="+", metavar="NAME", help="rewrite these stored results' .md (no runs)")
    ap.add_argument("--plot", nargs="+", metavar="NAME", help="draw these stored results into --figure")
    ap.add_argument("--figure", type=Path, default=Path("docs/img/federation_pays.png"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(DEFAULT))
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra config override (repeatable)")
    ap.add_argument("--name", default="", help="suffix of the result files (runs of other settings side by side)")
    ap.add_argument(
        "--merge",
        metavar="NAME",
        help="add the runs of these stored results (same split and seeds) for the settings not run now",
    )
    args = ap.parse_args()
    if args.render or args.plot:
        for name in args.render or ():
            render(name)
        if args.plot:
            plot(args.plot, args.figure)
        return
    if args.split is None:
        ap.error("--split is required (or --render / --plot)")
    config = SPLITS[args.split][0]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.settings}
    commands: list[str] = []
    splits: list[dict[str, Any]] = []
    name = f"federation_pays_{args.split}{'_' + args.name if args.name else ''}"

    def save(summary: dict[str, Any] | None) -> None:
        """The runs so far (after every run, so a crash keeps them; ``--render`` summarises a partial file)."""
        done = {k: v for k, v in runs.items() if v}
        if args.merge:
            done, cmds = merged(args.merge, args.split, args.seeds, done, commands)
        else:
            cmds = commands
        write_result(
            name,
            {
                "split": args.split,
                "seeds": args.seeds,
                "splits": splits,
                "summary": summary,
                "runs": done,
                "commands": cmds,
            },
        )

    with tempfile.TemporaryDirectory(prefix="fednsl-federation-pays-") as tmp:
        for seed in args.seeds:
            folder = Path(tmp) / f"{args.split}-seed{seed}"
            folder, counts = write_split(args.split, seed, folder)
            splits.append(counts)
            for setting in args.settings:
                sets = overrides(setting, folder, seed, args.extra, config)
                commands.append(
                    f"{setting}: fednsl train {config} " + " ".join(f"--set {shlex.quote(o)}" for o in sets)
                )
                result = train(load_config(config, sets), Path(tmp) / f"{setting}-seed{seed}", progress=False)
                runs[setting].append(collect(result.run_dir))
                print(
                    f"{args.split} seed {seed} {setting}: test MRR {runs[setting][-1]['test_mrr']:.4f} "
                    + " ".join(f"{c} {v['test_mrr']:.4f}" for c, v in runs[setting][-1]["clients"].items()),
                    flush=True,
                )
                save(None)
    full, cmds = merged(args.merge, args.split, args.seeds, runs, commands) if args.merge else (runs, commands)
    summary = summarise(args.split, full)
    save(summary)
    (RESULTS / f"{name}.md").write_text(markdown(args.split, args.seeds, summary, cmds, splits, full))
    print((RESULTS / f"{name}.md").read_text())


def merged(
    name: str, split: str, seeds: list[int], runs: dict[str, list[dict[str, Any]]], commands: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """``runs`` with the stored result ``name``'s runs of the settings not in it first (refused unless the split and
    seeds are the same), and the commands of both."""
    data = json.loads((RESULTS / f"{name}.json").read_text())
    if data["split"] != split or data["seeds"] != seeds:
        raise SystemExit(f"--merge {name}: split {data['split']} seeds {data['seeds']}, not {split} seeds {seeds}")
    stored = {k: v for k, v in data["runs"].items() if k not in runs}
    kept = [c for c in data["commands"] if c.split(":", 1)[0] in stored]
    return {**stored, **runs}, kept + commands


def render(name: str) -> None:
    """Rewrite ``bench/results/<name>.md`` from its stored .json (nothing is re-run)."""
    data = json.loads((RESULTS / f"{name}.json").read_text())
    summary = summarise(data["split"], data["runs"])
    text = markdown(data["split"], data["seeds"], summary, data["commands"], data["splits"], data["runs"])
    (RESULTS / f"{name}.md").write_text(text)


def plot(names: list[str], out: Path) -> None:
    """One figure: each data-poor client's test MRR alone, with FedNSL's loop and with the exchange (mean over
    seeds, the seeds as dots), one panel per stored split result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [
        ("local-only", "alone", "#999999"),
        ("federated-paper", "FedNSL's loop", "#d95f02"),
        ("federated", "with the exchange", "#1b9e77"),
    ]
    fig, axes = plt.subplots(1, len(names), figsize=(min(4.2 * len(names), 14.5), 3.4), squeeze=False)  # ≤ 1600 px
    for ax, name in zip(axes[0], names):
        data = json.loads((RESULTS / f"{name}.json").read_text())
        runs, poor = (
            data["runs"],
            SPLITS[data["split"]][4] or tuple(sorted(next(iter(data["runs"].values()))[0]["clients"])),
        )
        for k, (setting, label, colour) in enumerate(shown):
            if setting not in runs:
                continue
            for i, c in enumerate(poor):
                vals = [r["clients"][c]["test_mrr"] for r in runs[setting]]
                x = i + (k - 1) * 0.25
                ax.bar(x, sum(vals) / len(vals), 0.24, color=colour, label=label if i == 0 else None)
                ax.scatter([x] * len(vals), vals, s=8, color="black", zorder=3)
        ax.set_xticks(range(len(poor)), [f"client {c}" for c in poor])
        ax.set_title(data["split"].replace("_", " "), fontsize=10)
        ax.set_ylabel("test MRR")
        ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=8, loc="upper left")
    title = (
        "Test MRR alone, in FedNSL's loop, with the exchange: the data-poor clients (every client with equal shares)"
    )
    fig.suptitle(title + "; bars: mean, dots: seeds", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
