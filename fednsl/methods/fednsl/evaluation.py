"""Relation-extraction metrics of a FedNSL client: threshold on a hold-out, F1, Ign-F1, logic accuracy.

- Threshold (spec §8.12, LogiRE ``evaluate``): sort the hold-out scores, take the cut maximising F1 with recall
  over all hold-out gold facts; predictions are ``score >= θ``. No gold fact in the hold-out → θ = +∞.
- F1 over all (document, head, tail, relation) cells of a part's query pairs; facts in cells whose triple is
  unknown (never predicted) count as misses.
- Ign-F1 (DocRED definition): precision ignoring true positives whose fact (head name, relation, tail name)
  is among the client's own training facts, recall unchanged.
- Logic accuracy (LogiRE, spec §5.5): :func:`rules.measures.logic_accuracy` on the thresholded predictions of
  each document; the per-rule body/correct counts are additive, so clients send counts and the server sums.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fednsl.federation.records import Message
from fednsl.methods.fednsl.messages import EVAL_VARIANTS
from rules.measures import logic_accuracy

__all__ = [
    "best_threshold",
    "PRF",
    "prf_counts",
    "logic_counts",
    "logic_from_counts",
    "document_logic_counts",
    "f1_from_counts",
    "merge_variant_metrics",
]


def best_threshold(scores: np.ndarray, labels: np.ndarray, total_gold: int) -> float:
    """θ maximising F1 of ``scores >= θ`` (ties broken towards the higher threshold)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    if total_gold <= 0 or scores.size == 0 or not labels.any():
        return math.inf
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    # only cut where the next score differs (a threshold cannot split ties)
    last_of_tie = np.r_[s[1:] != s[:-1], True]
    tp = np.cumsum(y)
    k = np.arange(1, len(s) + 1)
    prec = tp / k
    rec = tp / total_gold
    f1 = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-300), 0.0)
    f1 = np.where(last_of_tie, f1, -1.0)
    i = int(np.argmax(f1))
    return float(s[i])


@dataclass
class PRF:
    """Counts of one evaluation: predicted, gold and true positives (+ those in train, for Ign-F1)."""

    tp: int = 0
    n_pred: int = 0
    n_gold: int = 0
    tp_in_train: int = 0

    def __add__(self, other: PRF) -> PRF:
        return PRF(
            self.tp + other.tp,
            self.n_pred + other.n_pred,
            self.n_gold + other.n_gold,
            self.tp_in_train + other.tp_in_train,
        )

    @property
    def precision(self) -> float:
        return self.tp / self.n_pred if self.n_pred else 0.0

    @property
    def recall(self) -> float:
        return self.tp / self.n_gold if self.n_gold else 0.0

    @property
    def f1(self) -> float:
        return f1_from_counts(self.tp, self.n_pred, self.n_gold)

    @property
    def ign_f1(self) -> float:
        denom = self.n_pred - self.tp_in_train
        p = (self.tp - self.tp_in_train) / denom if denom > 0 else 0.0
        r = self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    def metrics(self, prefix: str) -> dict[str, float]:
        return {
            f"{prefix}f1": self.f1,
            f"{prefix}precision": self.precision,
            f"{prefix}recall": self.recall,
            f"{prefix}ign_f1": self.ign_f1,
            f"{prefix}tp": self.tp,
            f"{prefix}n_pred": self.n_pred,
            f"{prefix}n_gold": self.n_gold,
            f"{prefix}tp_in_train": self.tp_in_train,
        }


def f1_from_counts(tp: float, n_pred: float, n_gold: float) -> float:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def prf_counts(pred: np.ndarray, gold: np.ndarray, in_train: np.ndarray, total_gold: int) -> PRF:
    """Counts for boolean predictions over candidate cells; ``total_gold`` = all gold facts of the part."""
    pred = np.asarray(pred, dtype=bool)
    gold = np.asarray(gold, dtype=bool)
    tp_mask = pred & gold
    return PRF(int(tp_mask.sum()), int(pred.sum()), int(total_gold), int((tp_mask & np.asarray(in_train, bool)).sum()))


def logic_counts(
    predictions: Sequence[np.ndarray],
    rules: Sequence[tuple[int, Sequence[int]]],
    masks: Sequence[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(body counts (K,), body∧head counts (K,)) of the golden rules over per-document (N, N, R) predictions.

    Body truth is the boolean composition of the predicted relation matrices (inverse token = transpose), as in
    LogiRE's evaluator; ``masks`` (N, N) per document restrict the counted pairs (x, y) to the cells the client
    predicts (its query cells; the diagonal is never a query). Without masks this equals
    :func:`rules.measures.logic_accuracy`'s counts.
    """
    k = len(rules)
    body_tot = np.zeros(k, dtype=np.int64)
    correct = np.zeros(k, dtype=np.int64)
    if k == 0 or not predictions:
        return body_tot, correct
    if masks is None:
        res = logic_accuracy(list(predictions), list(rules))
        return res.body_counts.astype(np.int64), res.correct_counts.astype(np.int64)
    for pred, mask in zip(predictions, masks):
        pred = np.asarray(pred, dtype=bool)
        n, _, R = pred.shape
        if n == 0:
            continue
        mask = np.asarray(mask, dtype=bool)
        if not mask.any():
            continue

        def mat(tok: int) -> np.ndarray:
            if tok < R:
                return pred[:, :, tok]
            if tok < 2 * R:
                return pred[:, :, tok - R].T
            return np.eye(n, dtype=bool)

        for i, (head, body) in enumerate(rules):
            toks = [int(t) for t in body]
            m = mat(toks[0]).astype(np.int64)
            for tok in toks[1:]:
                if not m.any():
                    break
                m = ((m @ mat(tok).astype(np.int64)) > 0).astype(np.int64)
            b = (m > 0) & mask
            body_tot[i] += int(b.sum())
            correct[i] += int((b & pred[:, :, int(head)]).sum())
    return body_tot, correct


def document_logic_counts(
    parts: Sequence[np.ndarray], mask: np.ndarray, rules: Sequence[tuple[int, Sequence[int]]]
) -> tuple[np.ndarray, np.ndarray]:
    """(body (K,), body∧head (K,)) of one document as LogiRE counts them over its *full* predictions: the
    union of the (N, N, R) predictions of every part the client scores in the document (seen and unseen query
    cells, every relation), bodies composed over that union, counted at the pairs (x, y) of ``mask`` (N, N)
    (one part's query cells; LogiRE's mask is every off-diagonal pair, spec §5)."""
    full = np.zeros_like(np.asarray(parts[0], dtype=bool))
    for p in parts:
        full |= np.asarray(p, dtype=bool)
    return logic_counts([full], rules, [mask])


def logic_from_counts(body: np.ndarray, correct: np.ndarray) -> float:
    """LogiRE logic accuracy: mean over rules with a non-empty body of correct/body (NaN when none)."""
    body = np.asarray(body, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    valid = body > 0
    return float((correct[valid] / body[valid]).mean()) if valid.any() else math.nan


def impossible_counts(msg: Message) -> str | None:
    """Why an ``evaluate`` reply's counts cannot be true, or None: a count above the query cells it evaluated
    (``num_examples``), true positives above predictions or gold facts, a logic rule correct more often than its
    body fired."""
    cells = float(msg.metrics.get("num_examples", 0))
    over = [k for k, v in msg.metrics.items() if k.endswith(("_tp", "_n_pred", "_n_gold")) and float(v) > cells]
    over += [k for k, a in msg.arrays.items() if np.asarray(a).size and float(np.max(a)) > cells]
    if over:
        return f"{', '.join(sorted(over)[:3])} exceed the {int(cells)} cells it evaluated"
    for k, a in msg.arrays.items():
        counts = np.asarray(a)
        if k.startswith("docs_"):
            if counts.ndim != 2 or counts.shape[1] != 4:
                return f"{k}: shape {counts.shape}, expected (documents, 4)"
            if ((counts[:, 0] > counts[:, 1]) | (counts[:, 0] > counts[:, 2])).any():
                return f"{k}: more true positives than predictions or gold facts"
        body = msg.arrays.get(k.replace("_correct_", "_body_")) if "_correct_" in k else None
        if body is not None:
            if np.shape(body) != counts.shape:
                return f"{k}: shape {counts.shape} unlike its body counts' {np.shape(body)}"
            if (counts > np.asarray(body)).any():
                return f"{k}: a rule correct more often than its body fired"
    return None


def merge_variant_metrics(group: str, replies: Mapping[str, Message]) -> dict[str, float]:
    """Mean per-client F1 / Ign-F1, micro-F1 and summed logic counts of every variant (prefix ``group``)."""
    out: dict[str, float] = {}
    for prefix in EVAL_VARIANTS:
        for part in ("seen", "unseen"):
            key = f"{prefix}{part}"
            f1s = [r.metrics[f"{key}_f1"] for r in replies.values() if f"{key}_f1" in r.metrics]
            if not f1s:
                continue
            out[f"{group}{key}_f1"] = float(np.mean(f1s))
            if prefix != "backbone_":
                out[f"{group}{key}_ign_f1"] = float(
                    np.mean([r.metrics.get(f"{key}_ign_f1", 0.0) for r in replies.values()])
                )
                tp = sum(r.metrics.get(f"{key}_tp", 0) for r in replies.values())
                npred = sum(r.metrics.get(f"{key}_n_pred", 0) for r in replies.values())
                ngold = sum(r.metrics.get(f"{key}_n_gold", 0) for r in replies.values())
                out[f"{group}{key}_micro_f1"] = f1_from_counts(tp, npred, ngold)
            name = f"doclogic_body_{key}"
            body = [r.arrays[name].sum(0) for r in replies.values() if name in r.arrays]
            corr = [r.arrays[f"doclogic_correct_{key}"].sum(0) for r in replies.values() if name in r.arrays]
            if body:
                value = logic_from_counts(np.sum(body, axis=0), np.sum(corr, axis=0))
                if not math.isnan(value):
                    out[f"{group}{key}_logic"] = value
    return out
