"""LR-XFL server: rule-based client selection and rule-weighted model aggregation.

Per class k (maple1606/LR-XFL ``experiments/global_logic_aggregate.py`` and ``mnist.py``):

1. ``client_selection_class``: group the clients' class-k rules by formula; a client whose rule is matched by
   another client's more accurate copy is dropped; each formula keeps its supporters.
2. ``_global_aggregate_explanations``: take the top-``global_topk_explanations`` distinct rules by accuracy
   and beam-search (width ``beam_width``) over sequences of them joined by the majority connector of the
   clients, scoring each joined rule by its F1 on validation data; the best sequence is the global rule.
   The released code keeps only the last step's beam, whose sequences always contain every top-k rule; here
   the best sequence over all steps is kept (what the beam search is for).
3. Engagement: with ``large`` every supporter of a rule in the best sequence is engaged for class k
   (``small``: its best-accuracy holders); a class without any rule engages every client.

Global weights = Σ_u a_u w_u / Σ_u a_u with a_u = number of classes client u is engaged in (uniform if all 0)
(``weighted_weights``). Deviation: the reference scores rules on a validation split held by the server; a
federated server holds no data, so it scores them on the sum of the clients' (concept cell, label) counts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

import numpy as np

from fednsl.federation.aggregate import weighted_average
from fednsl.federation.records import ArraySpec, Message, Schema, weights_request_schema
from fednsl.federation.roles import Metrics, Stage, Strategy
from fednsl.methods.lrxfl.config import LRXFLConfig
from fednsl.methods.lrxfl.logic import ConceptSpace, f1_macro_from_counts, join, to_dnf
from fednsl.tasks.numeric.client import eval_schema, mean_over_clients
from fednsl.tasks.numeric.data import NumericDataConfig

RULE_ARRAYS = ("rule_table", "rule_valid", "rule_acc", "rule_or", "cell_counts")


def select_clients(rules: Mapping[str, tuple[np.ndarray, float]]) -> dict[bytes, dict[str, Any]]:
    """Group one class's rules {client: (table, acc)} by formula → {key: {table, acc, best, support}}."""
    groups: dict[bytes, dict[str, Any]] = {}
    for cid, (table, acc) in rules.items():
        key = np.packbits(table).tobytes()
        g = groups.setdefault(key, {"table": table, "acc": acc, "best": [], "support": []})
        g["support"].append(cid)
        if acc > g["acc"] or not g["best"]:
            g["acc"], g["best"] = acc, [cid]
        elif acc == g["acc"]:
            g["best"].append(cid)
    return groups


def beam_search(
    candidates: Sequence[tuple[bytes, np.ndarray, float]],
    connector: str,
    pos: np.ndarray,
    neg: np.ndarray,
    beam_width: int,
) -> tuple[list[bytes], float, np.ndarray | None]:
    """Best sequence of candidate rules (by F1 of their join on the counts) found by beam search."""
    beam: list[tuple[float, list[int]]] = [(0.0, [])]
    best: tuple[float, list[int]] = (0.0, [])
    for _ in range(len(candidates)):
        nxt = []
        for _, seq in beam:
            for i in range(len(candidates)):
                if i in seq:
                    continue
                new = seq + [i]
                joined = join([candidates[j][1] for j in new], connector)
                if joined.all() or not joined.any():
                    continue
                nxt.append((f1_macro_from_counts(joined, pos, neg), new))
        if not nxt:
            break
        beam = sorted(nxt, key=lambda t: -t[0])[:beam_width]
        if beam[0][0] > best[0]:
            best = beam[0]
    if not best[1]:
        return [], 0.0, None
    return ([candidates[i][0] for i in best[1]], best[0], join([candidates[i][1] for i in best[1]], connector))


class LRXFLStrategy(Strategy):
    def __init__(
        self, initial: dict[str, np.ndarray], cfg: LRXFLConfig, data_cfg: NumericDataConfig, space: ConceptSpace
    ):
        self.weights = {k: v.copy() for k, v in initial.items()}
        self.cfg, self.data_cfg, self.space = cfg, data_cfg, space
        self.k = data_cfg.classes
        self.global_rules: dict[int, dict[str, Any]] = {}

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        c = self.cfg
        return Message(
            "train",
            rnd,
            arrays=self.weights,
            config={
                "lr": c.lr,
                "local_epochs": c.local_epochs,
                "l1": c.l1,
                "logic_generation_threshold": c.logic_generation_threshold,
                "local_topk_explanations": c.local_topk_explanations,
            },
        )

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        ids = list(replies)
        # a sum of arrays over the replies (``sum`` types its start value 0 in)
        counts = cast(np.ndarray, sum(np.asarray(r.arrays["cell_counts"], np.float64) for r in replies.values()))
        engaged_count = {cid: 0 for cid in ids}
        f1s = []
        for k in range(self.k):
            rules = {
                cid: (np.asarray(r.arrays["rule_table"][k], bool), float(r.arrays["rule_acc"][k]))
                for cid, r in replies.items()
                if bool(r.arrays["rule_valid"][k])
            }
            connectors = [("OR" if r.arrays["rule_or"][k] else "AND") for cid, r in replies.items() if cid in rules]
            votes = Counter(connectors)
            connector = max(votes, key=lambda name: votes[name]) if connectors else "AND"
            groups = select_clients(rules)
            if not groups:
                engaged = set(ids)
                self.global_rules[k] = {"table": None, "f1": 0.0, "connector": connector}
            else:
                ranked = sorted(groups.items(), key=lambda kv: -kv[1]["acc"])[: self.cfg.global_topk_explanations]
                cands = [(key, g["table"], g["acc"]) for key, g in ranked]
                pos, neg = counts[:, k], counts.sum(1) - counts[:, k]
                keys, f1, table = beam_search(cands, connector, pos, neg, self.cfg.beam_width)
                field = "support" if self.cfg.user_engagement_scale == "large" else "best"
                engaged = {cid for key in keys for cid in groups[key][field]}
                self.global_rules[k] = {"table": table, "f1": f1, "connector": connector}
                f1s.append(f1)
            for cid in engaged:
                engaged_count[cid] += 1
        a = np.array([engaged_count[cid] for cid in ids], dtype=np.float64)
        weights = a if a.sum() > 0 else np.ones(len(ids))
        names = list(self.weights)
        self.weights = weighted_average([{n: r.arrays[n] for n in names} for r in replies.values()], weights)
        out: Metrics = {
            "rule_f1_mean": float(np.mean(f1s)) if f1s else 0.0,
            "train_loss": float(np.mean([r.metrics["train_loss"] for r in replies.values()])),
            "model_acc": float(np.mean([r.metrics["model_acc"] for r in replies.values()])),
        }
        out.update({f"agg_weight_{cid}": float(w / weights.sum()) for cid, w in zip(ids, weights)})
        return out

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("evaluate", rnd, arrays=self.weights)

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        return mean_over_clients(replies)

    def declare_stages(self) -> tuple[Stage, ...]:
        request = lambda: weights_request_schema(self.weights)  # noqa: E731
        return (
            Stage("train", self.configure_train, self.aggregate_train, reply=self.train_reply_schema, request=request),
            Stage(
                "evaluate",
                self.configure_evaluate,
                self.aggregate_evaluate,
                reply=lambda: eval_schema(self.data_cfg),
                request=request,
            ),
        )

    def train_reply_schema(self) -> Schema:
        k, cells = self.k, self.space.cells
        return Schema(
            arrays=tuple(ArraySpec(n, "weights", like=n) for n in self.weights)
            + (
                ArraySpec("rule_table", "mask", dtype="bool", shape=(k, cells)),
                ArraySpec("rule_valid", "mask", dtype="bool", shape=(k,)),
                ArraySpec("rule_acc", "scores", shape=(k,)),
                ArraySpec("rule_or", "mask", dtype="bool", shape=(k,)),
                ArraySpec("cell_counts", "counts", shape=(cells, k)),
            ),
            metrics=("num_examples", "train_loss", "model_acc"),
            required_metrics=("num_examples", "train_loss", "model_acc"),
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "weights": {k: v.copy() for k, v in self.weights.items()},
            "global_rules": {k: dict(v) for k, v in self.global_rules.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.weights = {k: np.asarray(v).copy() for k, v in state["weights"].items()}
        self.global_rules = {int(k): dict(v) for k, v in state.get("global_rules", {}).items()}

    def finalize(self, run_dir: Path) -> None:
        """``rules.tsv``: the last round's global rule per class (DNF over the threshold concepts) and its F1."""
        lines = ["class\trule\tf1\tconnector"]
        for k in range(self.k):
            g = self.global_rules.get(k, {"table": None, "f1": 0.0, "connector": "AND"})
            text = (
                "(none)"
                if g["table"] is None
                else to_dnf(np.asarray(g["table"], bool), self.space, sorted(self.cfg.concept_thresholds))
            )
            lines.append(f"{k}\t{text}\t{g['f1']:.4f}\t{g['connector']}")
        (Path(run_dir) / "rules.tsv").write_text("\n".join(lines) + "\n")
