"""LR-XFL's local rule extraction for one class (``entropy_lens/logic/nn/entropy.py: explain_class``).

On boolean concepts b_n of the local data with labels y_n and the trained LEN:

1. keep the correctly handled samples: class-k samples the LEN scores > 0.5 for k, other samples it scores
   ≤ 0.5 (``_get_correct_data``; these are also the validation data of steps 2–4);
2. for every kept class-k sample, the minterm over the class's retained concepts (α̃ > 0.5, in ascending α
   order) — c_j if b_j else ¬c_j — simplified by dropping each literal in turn whenever the F1 on the kept
   data does not decrease (``_simplify_formula``); duplicates of an earlier raw minterm are skipped;
3. the connector: OR when retained concepts rarely co-occur in positive samples (trace/sum of the positive
   co-occurrence matrix > 0.9) or the largest negative co-occurrence row covers > 80 % of the literals,
   else AND;
4. join the top-k minterms by F1, greedily keeping a minterm only when it raises the F1 (``_aggregate_explanations``).

The explanation's accuracy is its F1 on the whole local data (the reference uses the local test split).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fednsl.methods.lrxfl.len import entropy_layer, len_outputs
from fednsl.methods.lrxfl.logic import cell_index, f1_macro, join, term_table


@dataclass
class LocalExplanation:
    table: np.ndarray | None  # truth table (2^C,) or None when no explanation was found
    accuracy: float  # F1 macro on the client's local data
    connector: str  # "AND" | "OR"


def explain_class(
    model: torch.nn.Sequential, bool_concepts: np.ndarray, y: np.ndarray, target: int, topk: int
) -> LocalExplanation:
    n_concepts = bool_concepts.shape[1]
    with torch.no_grad():
        scores = len_outputs(model, torch.from_numpy(bool_concepts.astype(np.float32)))[:, target].numpy()
    is_t = y == target
    keep_t = is_t & (scores > 0.5)
    keep_o = ~is_t & ~(scores > 0.5)
    val_cells = cell_index(np.concatenate([bool_concepts[keep_o], bool_concepts[keep_t]]))
    val_target = np.concatenate([np.zeros(keep_o.sum(), bool), np.ones(keep_t.sum(), bool)])
    positives = bool_concepts[keep_t]
    layer = entropy_layer(model)
    mask = layer.concept_mask()[target].numpy()
    order = np.argsort(layer.alphas()[target].numpy(), kind="stable")
    retained = [int(j) for j in order if mask[j]]

    co_pos = np.zeros((n_concepts, n_concepts))
    co_neg = np.zeros((n_concepts, n_concepts))
    seen_raw: set[tuple] = set()
    found: list[tuple[np.ndarray, float]] = []
    first_raw_len = 0
    for b in positives:
        for j in retained:
            if b[j]:
                for k in retained:
                    (co_pos if b[k] else co_neg)[j, k] += 1
        literals = [(j, bool(b[j])) for j in retained]
        key = tuple(literals)
        if not literals or key in seen_raw:
            continue
        if not seen_raw:
            first_raw_len = len(literals)
        seen_raw.add(key)
        table, acc = _simplify(literals, n_concepts, val_cells, val_target)
        found.append((table, acc))

    rules_length = first_raw_len * len(positives)
    trace_ratio = np.trace(co_pos) / co_pos.sum() if co_pos.sum() > 0 else 0.0
    neg_ratio = co_neg.sum(1).max() / rules_length if rules_length > 0 else 0.0
    connector = "OR" if trace_ratio > 0.9 or neg_ratio > 0.8 else "AND"

    chosen, _ = _aggregate(found, topk, connector, val_cells, val_target)
    if chosen is None:
        return LocalExplanation(None, 0.0, connector)
    all_cells = cell_index(bool_concepts)
    return LocalExplanation(chosen, f1_macro(chosen, all_cells, is_t), connector)


def _table(literals: list[tuple[int, bool]], n_concepts: int) -> np.ndarray:
    return term_table([j for j, v in literals if v], [j for j, v in literals if not v], n_concepts)


def _simplify(literals, n_concepts, cells, target) -> tuple[np.ndarray, float]:
    current = list(literals)
    base = f1_macro(_table(current, n_concepts), cells, target)
    for lit in list(literals):
        cand = [x for x in current if x != lit]
        if cand:
            acc = f1_macro(_table(cand, n_concepts), cells, target)
            if acc >= base:
                current, base = cand, acc
    return _table(current, n_concepts), base


def _aggregate(found, topk, connector, cells, target) -> tuple[np.ndarray | None, float]:
    ranked = sorted(found, key=lambda t: -t[1])[:topk]
    chosen: list[np.ndarray] = []
    best, best_table = 0.0, None
    for table, _ in ranked:
        if any(np.array_equal(table, c) for c in chosen):
            continue
        chosen.append(table)
        joined = join(chosen, connector)
        if joined.all() or not joined.any():  # 'True' / 'False' formulas are skipped
            chosen.pop()
            continue
        acc = f1_macro(joined, cells, target)
        if acc > best:
            best, best_table = acc, joined
        else:
            chosen.pop()
    return best_table, best
