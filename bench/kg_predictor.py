"""RulePredictor training time on large KGs: the sparse formulation against the direct one, side by side.

Both fit the same heads on the same mined bodies with the same seed; only the arithmetic differs:

- reference (direct): each grounding entry's term w_j · φ(f_j(e)) gathered per entry and scattered into dense
  (B, E) logits with ``index_add``; softmax cross-entropy over the dense logits;
- ours: the sum aggregator's scores as one scipy sparse mat-vec over the reached cells (``_SparseLinear``), and on
  sparse batches the exact cross-entropy over reached cells only (``RulePredictor._reached_loss``).

The valid MRR of every head must agree (the bench fails otherwise); the ratio of fit times is the result.

    python -m bench.kg_predictor --datasets fb15k237 wn18rr --heads 6 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from bench._common import write_result
from bench.kg_rules import shared_data_dir
from kg.grounding.sparse import SparseGraph
from kg.kg_sources import load_kg
from rules.kg_mining import directed_triples, mine_chain_rules
from rules.kg_predictor import PredictorConfig, RulePredictor


def _direct_logits(self: RulePredictor, model: Any, batch: Any) -> torch.Tensor:
    E = self.num_entities
    s = torch.zeros(batch.size * E).index_add(0, batch.flat, self._contributions(model, batch)).view(batch.size, E)
    return s + model.bias if model.bias is not None else s


def _direct_loss(self: RulePredictor, model: Any, batch: Any) -> torch.Tensor:
    logits = self._logits(model, batch).view(-1).index_fill(0, batch.filter_flat, float("-inf"))
    return torch.nn.functional.cross_entropy(logits.view(batch.size, -1), batch.answers)


@contextmanager
def direct_arithmetic() -> Iterator[None]:
    """Swap the predictor's sum-aggregator arithmetic for the direct formulation while inside."""
    saved = RulePredictor._logits, RulePredictor._loss
    RulePredictor._logits, RulePredictor._loss = _direct_logits, _direct_loss  # type: ignore[method-assign]
    try:
        yield
    finally:
        RulePredictor._logits, RulePredictor._loss = saved  # type: ignore[method-assign]


def run(name: str, n_heads: int, seed: int) -> dict[str, Any]:
    kg = load_kg(shared_data_dir() / "kg" / name)
    E, R = kg.num_entities, kg.num_relations
    graph = SparseGraph.from_triples(kg.train, E, R)
    counts = np.bincount(directed_triples(kg.train, R)[:, 1], minlength=2 * R)
    heads = [int(q) for q in np.argsort(-counts)[:: max(1, (2 * R) // n_heads)][:n_heads]]
    bodies = mine_chain_rules(
        graph,
        kg.train,
        3,
        max_rules_per_head=40,
        rank_by="support",
        samples_per_relation=200,
        max_neighbors=32,
        seed=seed,
        heads=heads,
    )
    cfg = PredictorConfig(epochs=10, eval_every=5, patience=1, max_train_queries=1000, max_fanout=1000, seed=seed)
    out: dict[str, Any] = {"dataset": name, "heads": heads}
    for label in ("direct", "ours"):
        predictor = RulePredictor(bodies, E, num_relations=R, config=cfg)
        t0 = time.perf_counter()
        if label == "direct":
            with direct_arithmetic():
                log = predictor.fit(kg.train, kg.train, valid_triples=kg.valid, heads=heads)
        else:
            log = predictor.fit(kg.train, kg.train, valid_triples=kg.valid, heads=heads)
        out[f"{label}_s"] = time.perf_counter() - t0
        out[f"{label}_valid_mrr"] = [round(log["heads"][q]["best_valid_mrr"], 4) for q in heads]
    if not np.allclose(out["direct_valid_mrr"], out["ours_valid_mrr"], atol=2e-3):
        raise SystemExit(f"{name}: valid MRR differs: {out['direct_valid_mrr']} vs {out['ours_valid_mrr']}")
    out["speedup"] = out["direct_s"] / out["ours_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fb15k237", "wn18rr"])
    ap.add_argument("--heads", type=int, default=6, help="head relations fitted (spread over frequency ranks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.datasets:
        res = run(name, args.heads, args.seed)
        print(
            f"{name}: direct {res['direct_s']:.1f}s, ours {res['ours_s']:.1f}s -> {res['speedup']:.1f}x "
            f"(valid MRR per head identical: {res['ours_valid_mrr']})",
            flush=True,
        )
        rows.append(res)
    command = "python -m bench.kg_predictor " + " ".join(sys.argv[1:])
    print(
        f"wrote {write_result('kg_predictor', {'command': command, 'load_avg_1min': os.getloadavg()[0], 'runs': rows})}"
    )


if __name__ == "__main__":
    main()
