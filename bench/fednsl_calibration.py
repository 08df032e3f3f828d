"""FedNSL backbone calibration on real data: probabilities, threshold transfer, round-0 mining (issue 17, items 1, 5).

    python -m bench.fednsl_calibration                                   # DWIE, split seeds 0 1 2
    python -m bench.fednsl_calibration --split-seeds 0 --set data.max_docs=120   # smoke run

For each split seed and training loss (``pos_weight`` none | sqrt) the federated-features backbone is pre-trained
once (cached) and its raw logits are mapped by each calibration (none = σ, sigmoid = Platt, isotonic), fitted per
client and relation on the seen-combo cells of the client's hold-out documents (held-out training documents):

- per relation, AUC-PR (``sklearn.metrics.average_precision_score``) and expected calibration error (10 equal-width
  bins, :func:`kg.backbones.calibration.expected_calibration_error`) over all clients' test cells (seen and unseen
  combo), macro over relations with ≥ 1 test positive, and pooled over all cells (micro);
- selection of the defaults on hold-out only: the same measures plus Brier score on the hold-out cells, with the
  maps cross-fitted over two folds of hold-out documents (fit on one, score the other) — no test document;
- threshold transfer: unseen-combo F1 of the backbone alone at the threshold chosen on the client's own hold-out
  (:func:`fednsl.methods.fednsl.evaluation.best_threshold`) vs the oracle threshold (best on the unseen test
  cells); also at 0.5;
- round-0 mining (``mining_edges: backbone``): the cross-combo edges (x ≥ mining_threshold on non-combo pairs of
  training documents) that :meth:`FedNSLClient._mining_docs` adds, the length-2 bodies mined from them
  (:func:`rules.mining.mine_cooccurrence`) for the client's seen-combo triples, and the golden rules
  (``golden_rules.txt``) among the client's mined bodies.

Results: bench/results/fednsl_calibration.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score

from bench._common import RESULTS, write_result
from fednsl.common.torch_utils import torch_threads
from fednsl.config import load_config
from fednsl.methods.fednsl.backbone import FederatedFeatures
from fednsl.methods.fednsl.client import FedNSLClient
from fednsl.methods.fednsl.config import FedNSLConfig, FedNSLDataConfig
from fednsl.methods.fednsl.data import _subset, client_id, golden_rules, load_fednsl_corpus
from fednsl.methods.fednsl.evaluation import best_threshold, f1_from_counts
from fednsl.registry import build_kwargs
from kg.backbones import ClientDocs, build_backbone
from kg.backbones.calibration import (
    RelationCalibrator,
    expected_calibration_error,
    fit_relation_calibrator,
    shared_platt,
)
from kg.split import split_clients
from rules.mining import mine_cooccurrence

FITTED = ("none", "sigmoid", "isotonic")
#: ``sigmoid-federated``: the sigmoid maps after the ``calibrate`` round of ``calibration_sharing: federated`` (each
#: client adopts the positives-weighted mean Platt map for the relations it has no hold-out positives of).
METHODS = (*FITTED, "sigmoid-federated")


def federate(cals: list[RelationCalibrator]) -> list[RelationCalibrator]:
    """Copies of the clients' sigmoid calibrators after the federated calibration round (the backbone's
    ``_share_calibration``: :func:`shared_platt` over every client's own maps, then ``adopt_shared``)."""
    arrays = [c.platt_arrays() for c in cals]
    platt, has = shared_platt([a["platt"] for a in arrays], [a["positives"] for a in arrays])
    out = [copy.deepcopy(c) for c in cals]
    for c in out:
        c.adopt_shared(platt, has)
    return out


def f1_at(p: np.ndarray, y: np.ndarray, theta: float) -> float:
    pred = p >= theta
    return 100.0 * f1_from_counts(float((pred & (y > 0.5)).sum()), float(pred.sum()), float((y > 0.5).sum()))


def relation_measures(y: np.ndarray, p: np.ndarray, min_pos: int = 1) -> dict[str, Any]:
    """Per-relation AUC-PR and ECE of (M, R) labels/probabilities, macro over relations with ≥ min_pos positives."""
    rows = {}
    for r in range(y.shape[1]):
        npos = int(y[:, r].sum())
        if npos < min_pos:
            continue
        rows[r] = {"pos": npos, "auc_pr": float(average_precision_score(y[:, r], p[:, r])),
                   "ece": expected_calibration_error(y[:, r], p[:, r])}
    return {
        "per_relation": rows,
        "macro_auc_pr": float(np.mean([v["auc_pr"] for v in rows.values()])) if rows else float("nan"),
        "macro_ece": float(np.mean([v["ece"] for v in rows.values()])) if rows else float("nan"),
        "micro_auc_pr": float(average_precision_score(y.ravel(), p.ravel())) if y.any() else float("nan"),
        "micro_ece": expected_calibration_error(y, p),
        "brier": float(np.mean((p - y) ** 2)),
        "gold_median": float(np.median(p[y > 0.5])) if y.any() else float("nan"),
        "nonedge_p99": float(np.percentile(p[y < 0.5], 99)) if (y < 0.5).any() else float("nan"),
        "gold_above_0.5": float(np.mean(p[y > 0.5] >= 0.5)) if y.any() else float("nan"),
    }


def fit(z: np.ndarray, y: np.ndarray, method: str, min_pos: int, where: str, names: Any) -> RelationCalibrator:
    return fit_relation_calibrator(z, y, method, min_pos, where, names)


def mining(client: ClientDocs, part: Any, bb: FederatedFeatures, cal: RelationCalibrator, threshold: float,
           golden: list[tuple[int, tuple[int, ...]]], R: int) -> dict[str, Any]:
    """Round-0 mining of one client exactly as FedNSLClient does it (its ``_mining_docs``, edges 'backbone')."""
    values = {}
    for d in part.train:
        x = cal.predict(bb.logits(d))
        x[np.arange(d.num_entities), np.arange(d.num_entities)] = 0.0
        values[d.doc_id] = x
    ns = SimpleNamespace(partition=part, mining_edges="backbone", mining_threshold=threshold, values=values)
    docs, extra = FedNSLClient._mining_docs(ns)  # type: ignore[arg-type]
    mined = mine_cooccurrence(docs, R, max_len=2)
    combo = part.seen
    triples = [t for t in mined.counts if t[1] in combo.head_types and t[2] in combo.tail_types]
    bodies = {(t[0], b) for t in triples for b in mined.counts[t]}
    len2 = {rb for rb in bodies if len(rb[1]) == 2}
    heads = {t[0] for t in triples}
    relevant = [g for g in golden if g[0] in heads]
    return {"cross_combo_edges": int(extra), "triples": len(triples), "bodies": len(bodies),
            "bodies_len2": len(len2), "golden_relevant": len(relevant),
            "golden_found": sum(g in bodies for g in relevant),
            "golden_len2_relevant": sum(len(g[1]) == 2 for g in relevant),
            "golden_len2_found": sum(len(g[1]) == 2 and g in bodies for g in relevant)}


def run_one(config: str, overrides: list[str], split_seed: int, pos_weight: str, min_pos: int) -> dict[str, Any]:
    ov = overrides + [f"data.split_seed={split_seed}", f"method_kwargs.backbone.pos_weight={pos_weight}"]
    cfg = load_config(config, ov)
    method = build_kwargs(FedNSLConfig, cfg.method_kwargs, "method_kwargs (fednsl)")
    data = build_kwargs(FedNSLDataConfig, cfg.data, "data (fednsl)")
    corpus = _subset(load_fednsl_corpus(data, cfg.seed), data.max_docs, data.split_seed)
    parts = split_clients(corpus, data.num_clients, data.groups, seed=data.split_seed, test_ratio=data.test_ratio,
                          holdout=data.holdout)
    ids = [client_id(k, len(parts)) for k in range(len(parts))]
    cdocs = [ClientDocs(cid, p.seen, list(p.train), list(p.holdout), list(p.test)) for cid, p in zip(ids, parts)]
    name, opts = method.backbone_spec()
    bb = build_backbone(name, opts, "method_kwargs.backbone")
    assert isinstance(bb, FederatedFeatures), "the calibration bench needs the federated-features backbone"
    t0 = time.perf_counter()
    with torch_threads(method.num_threads):
        summary = bb.prepare(cdocs, corpus.relations, corpus.entity_types, cfg.seed, corpus.documents)
    prep_s = time.perf_counter() - t0
    raw_logits, memo = bb.logits, {}

    def logits(doc: Any) -> np.ndarray:  # each document's logits once (cells, folds and mining reuse them)
        if doc.doc_id not in memo:
            memo[doc.doc_id] = raw_logits(doc)
        return memo[doc.doc_id]

    bb.logits = logits  # type: ignore[method-assign]
    gold, _ = golden_rules(corpus, data)
    names = list(corpus.relations.names)
    R = len(names)
    test_y, hold_y = [], []
    test_p: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
    hold_p: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
    clients: dict[str, Any] = {}
    cells, cals, fold_cals = [], [], []
    for c, part in zip(cdocs, parts):
        zh, yh = bb.calibration_cells(c)
        zs, ys = bb.cells(c.test, part.seen)
        zu, yu = bb.cells(c.test, part.unseen)
        test_y += [ys, yu]
        # hold-out selection: two folds of hold-out documents, each scored by the map fitted on the other
        folds = [c.holdout[0::2], c.holdout[1::2]]
        fold_cells = [bb.cells(f, part.seen) for f in folds]
        hold_y += [fc[1] for fc in fold_cells]
        cells.append((zh, yh, zs, ys, zu, yu, fold_cells))
        cals.append({m: fit(zh, yh, m, min_pos, f"bench client {c.cid}", names) for m in FITTED})
        fold_cals.append({m: [fit(*fold_cells[1 - k], m, min_pos, f"bench fold {k} client {c.cid}", names)
                              for k in range(2)] for m in FITTED})
    for client_cals, shared in zip(cals, federate([x["sigmoid"] for x in cals])):
        client_cals["sigmoid-federated"] = shared
    for k in range(2):
        for fc, shared in zip(fold_cals, federate([x["sigmoid"][k] for x in fold_cals])):
            fc.setdefault("sigmoid-federated", []).append(shared)
    for c, part, (zh, yh, zs, ys, zu, yu, fold_cells), cal_c, fold_c in zip(cdocs, parts, cells, cals, fold_cals):
        row: dict[str, Any] = {"combo": part.seen.name, "unseen": part.unseen.name,
                               "holdout_docs": len(c.holdout), "holdout_pos": int(yh.sum()),
                               "unseen_test_gold": int(yu.sum())}
        for m in METHODS:
            for k in range(2):
                hold_p[m].append(fold_c[m][k].predict(fold_cells[k][0]))
            cal = cal_c[m]
            ps, pu, ph = cal.predict(zs), cal.predict(zu), cal.predict(zh)
            test_p[m] += [ps, pu]
            own = best_threshold(ph.ravel(), yh.ravel(), int(yh.sum()))
            oracle = best_threshold(pu.ravel(), yu.ravel(), int(yu.sum()))
            row[m] = {"own_threshold": own, "oracle_threshold": oracle,
                      "unseen_f1_own": f1_at(pu, yu, own), "unseen_f1_oracle": f1_at(pu, yu, oracle),
                      "unseen_f1_at_0.5": f1_at(pu, yu, 0.5), "seen_f1_own": f1_at(ps, ys, own),
                      "own_maps": cal.summary()["own_maps"], "shared_maps": cal.summary()["shared_maps"],
                      "mining": mining(c, part, bb, cal, method.mining_threshold, gold, R)}
        clients[c.cid] = row
    Y, YH = np.concatenate(test_y), np.concatenate(hold_y)
    out = {"split_seed": split_seed, "pos_weight": pos_weight, "prepare_s": prep_s,
           "cache_key": summary.get("cache_key"), "cached": summary.get("cached"), "clients": clients,
           "test": {m: relation_measures(Y, np.concatenate(test_p[m])) for m in METHODS},
           "holdout_crossfit": {m: relation_measures(YH, np.concatenate(hold_p[m])) for m in METHODS},
           "relation_names": names, "mining_threshold": method.mining_threshold}
    return out


def _mean(xs: list[float]) -> str:
    a = np.asarray(xs, dtype=np.float64)
    return f"{a.mean():.4g}" if len(a) == 1 else f"{a.mean():.4g} ± {a.std(ddof=1):.2g}"


def seeds(rs: list[dict[str, Any]]) -> str:
    return ",".join(str(r["split_seed"]) for r in sorted(rs, key=lambda r: r["split_seed"]))


def render(runs: list[dict[str, Any]], command: str) -> str:
    methods = [m for m in METHODS if all(m in r["test"] for r in runs)]
    lines = [
        "# FedNSL backbone calibration (DWIE)", "", f"Command: `{command}`", "",
        f"Split seeds: {sorted({r['split_seed'] for r in runs})}; mean ± std over the seeds listed in each row. "
        "Calibration maps are fitted "
        "per client and relation on the seen-combo cells of the client's hold-out documents; 'none' = σ(logit).", "",
        "## Hold-out (selection; maps cross-fitted over 2 folds of hold-out documents)", "",
        "| loss | seeds | calibration | micro AUC-PR | macro AUC-PR | micro ECE | macro ECE | Brier |",
        "|---|---|---|---|---|---|---|---|",
    ]
    losses = sorted({r["pos_weight"] for r in runs}, key=lambda s: ("none", "sqrt", "balanced").index(s))
    for pw in losses:
        rs = [r for r in runs if r["pos_weight"] == pw]
        for m in methods:
            h = [r["holdout_crossfit"][m] for r in rs]
            lines.append(f"| {pw} | {seeds(rs)} | {m} | " + " | ".join(_mean([x[k] for x in h]) for k in
                         ("micro_auc_pr", "macro_auc_pr", "micro_ece", "macro_ece", "brier")) + " |")
    lines += ["", "## Test documents (all clients, seen + unseen combo cells)", "",
              "| loss | seeds | calibration | micro AUC-PR | macro AUC-PR | micro ECE | macro ECE | Brier | gold-edge median x "
              "| non-edge 99th pct x | gold edges with x ≥ 0.5 |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for pw in losses:
        rs = [r for r in runs if r["pos_weight"] == pw]
        for m in methods:
            h = [r["test"][m] for r in rs]
            lines.append(f"| {pw} | {seeds(rs)} | {m} | " + " | ".join(_mean([x[k] for x in h]) for k in
                         ("micro_auc_pr", "macro_auc_pr", "micro_ece", "macro_ece", "brier", "gold_median",
                          "nonedge_p99", "gold_above_0.5")) + " |")
    lines += ["", "## Unseen-combo F1 of the backbone alone (mean over clients), threshold transfer", "",
              "| loss | seeds | calibration | own hold-out θ | oracle θ | gap | at θ = 0.5 | seen F1 (own θ) |",
              "|---|---|---|---|---|---|---|---|"]
    for pw in losses:
        rs = [r for r in runs if r["pos_weight"] == pw]
        for m in methods:
            def cm(key: str, rs=rs, m=m) -> list[float]:
                return [float(np.mean([c[m][key] for c in r["clients"].values()])) for r in rs]
            own, orc = cm("unseen_f1_own"), cm("unseen_f1_oracle")
            lines.append(f"| {pw} | {seeds(rs)} | {m} | {_mean(own)} | {_mean(orc)} | {_mean(list(np.subtract(orc, own)))} | "
                         f"{_mean(cm('unseen_f1_at_0.5'))} | {_mean(cm('seen_f1_own'))} |")
    lines += ["", "## Round-0 mining (`mining_edges: backbone`, threshold "
              f"{runs[0]['mining_threshold']}), per client, first split seed", "",
              "| loss | calibration | client (combo) | cross-combo edges | length-2 bodies | golden found / relevant "
              "| length-2 golden found / relevant |",
              "|---|---|---|---|---|---|---|"]
    first = min(r["split_seed"] for r in runs)
    for pw in losses:
        r = next(x for x in runs if x["pos_weight"] == pw and x["split_seed"] == first)
        for m in methods:
            for cid, c in r["clients"].items():
                g = c[m]["mining"]
                lines.append(f"| {pw} | {m} | {cid} ({c['combo']}) | {g['cross_combo_edges']} | {g['bodies_len2']} | "
                             f"{g['golden_found']} / {g['golden_relevant']} | {g['golden_len2_found']} / {g['golden_len2_relevant']} |")
    lines += ["", "Sum over the clients, mean ± std over seeds:", "",
              "| loss | seeds | calibration | cross-combo edges | length-2 bodies | golden found | length-2 golden found |",
              "|---|---|---|---|---|---|---|"]
    for pw in losses:
        rs = [r for r in runs if r["pos_weight"] == pw]
        for m in methods:
            def tot(key: str, rs=rs, m=m) -> str:
                return _mean([sum(c[m]["mining"][key] for c in r["clients"].values()) for r in rs])
            lines.append(f"| {pw} | {seeds(rs)} | {m} | {tot('cross_combo_edges')} | {tot('bodies_len2')} | "
                         f"{tot('golden_found')} | {tot('golden_len2_found')} |")
    lines += ["", "## Per relation (first split seed; relations with ≥ 20 test positives): AUC-PR / ECE", "",
              "| relation | test pos | " + " | ".join(f"{pw}/{m}" for pw in losses for m in methods) + " |",
              "|---|---|" + "---|" * (len(losses) * len(methods))]
    r0 = {pw: next(x for x in runs if x["pos_weight"] == pw and x["split_seed"] == first) for pw in losses}
    base = r0[losses[0]]["test"]["none"]["per_relation"]
    names = r0[losses[0]]["relation_names"]
    for rel in sorted(base, key=lambda k: -base[k]["pos"]):
        if base[rel]["pos"] < 20:
            continue
        cells = []
        for pw in losses:
            for m in methods:
                v = r0[pw]["test"][m]["per_relation"][rel]
                cells.append(f"{v['auc_pr']:.2f} / {v['ece']:.4f}")
        lines.append(f"| {names[int(rel)]} | {base[rel]['pos']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="fednsl_dwie", help="config name or YAML path")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override")
    ap.add_argument("--split-seeds", type=int, nargs="+", default=[0, 1, 2], help="data.split_seed values")
    ap.add_argument("--losses", nargs="+", default=["none", "sqrt"], help="backbone pos_weight values")
    ap.add_argument("--min-positives", type=int, default=3, help="calibration_min_positives")
    ap.add_argument("--name", default="fednsl_calibration", help="result file stem under bench/results")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="JSON",
                    help="only combine the runs of earlier result files (e.g. one per split seed) into --name")
    args = ap.parse_args(argv)
    command = "python -m bench.fednsl_calibration " + " ".join(argv if argv is not None else sys.argv[1:])
    runs = []
    if args.merge:
        commands = []
        for path in args.merge:
            blob = json.loads(path.read_text())
            runs += blob["runs"]
            commands.append(blob["command"])
        md = render(runs, " ; ".join(commands))
        write_result(args.name, {"command": " ; ".join(commands), "merged_from": [str(p) for p in args.merge],
                                 "runs": runs})
        (RESULTS / f"{args.name}.md").write_text(md)
        print(md)
        return {"runs": runs}
    for s in args.split_seeds:
        for pw in args.losses:
            t0 = time.perf_counter()
            runs.append(run_one(args.config, list(args.overrides), s, pw, args.min_positives))
            print(f"split seed {s}, pos_weight {pw}: {time.perf_counter() - t0:.0f} s", flush=True)
    md = render(runs, command.strip())
    write_result(args.name, {"command": command.strip(), "config": args.config, "overrides": args.overrides,
                             "runs": json.loads(json.dumps(runs, default=str))})
    (RESULTS / f"{args.name}.md").write_text(md)
    print(md)
    return {"runs": runs}


if __name__ == "__main__":
    main()
