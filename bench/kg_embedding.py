"""An embedding baseline from pykeen, scored by OUR evaluator (kg.linkpred), beside the rule learner (issue 18).

    python -m bench.kg_embedding --datasets kinship_rnnlogic umls_rnnlogic --model RotatE --seeds 0 1 2

pykeen is an optional bench extra (``pip install fednsl[kg]``; torch stays the CPU build through the constraints
file): nothing outside this script imports it. The model is trained by pykeen's LCWA loop (1-N scoring, ``--loss``
over all tails — softmax cross-entropy by default, set explicitly: pykeen's per-model default loss, Softplus for
ComplEx, left ComplEx at chance on Kinship's valid split while it fitted train — with inverse relations as extra
relations so head queries are tail queries on ``r⁻¹``),
on the train split with our entity and relation ids, checkpointed on filtered valid MRR every ``--eval-every``
epochs under ``--budget-s`` seconds of training; the best checkpoint's test metrics come from
:func:`kg.linkpred.evaluate_link_prediction` — the same filter (train ∪ valid ∪ test), head and tail queries and
ties by expectation as every fednsl-kg number, so the rows are comparable. Writes
bench/results/kg_embedding.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._common import RESULTS, mean_ci, write_result
from kg.kg_sources import load_kg
from kg.linkpred import evaluate_link_prediction
from kg.triples import KnowledgeGraph

REPO = Path(__file__).resolve().parents[1]
METRICS = ("mrr", "mr", "hits@1", "hits@3", "hits@10")


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


@dataclass(frozen=True)
class EmbeddingSettings:
    """One pykeen model's training settings (the defaults are this script's; ``bench.kg_completion --embedding``
    uses them too)."""

    model: str = "RotatE"
    loss: str = "CrossEntropyLoss"
    dim: int = 200
    lr: float = 0.01
    batch_size: int = 256
    label_smoothing: float = 0.1
    max_epochs: int = 200
    eval_every: int = 20
    budget_s: float = 120.0

    def describe(self) -> str:
        return (f"pykeen {self.model}, dim {self.dim}, LCWA (1-N, loss {self.loss}), Adam lr {self.lr}, batch "
                f"{self.batch_size}, label smoothing {self.label_smoothing}, at most {self.max_epochs} epochs and "
                f"{self.budget_s:.0f} s of training per run, best of valid MRR every {self.eval_every} epochs")


def require_pykeen(who: str) -> None:
    try:
        import pykeen  # noqa: F401
    except ImportError:
        raise SystemExit(f"{who}: pykeen is not installed (the optional 'kg' extra: pip install fednsl[kg])") from None


def inverse_augmented(triples: np.ndarray, num_relations: int) -> np.ndarray:
    """(n, 3) -> (2n, 3): every (h, r, t) plus (t, r + R, h), the id layout of kg.linkpred's head queries."""
    inv = np.stack([triples[:, 2], triples[:, 1] + num_relations, triples[:, 0]], axis=1)
    return np.concatenate([triples, inv]).astype(np.int64)


def make_scorer(model: Any) -> Any:
    """score_fn for kg.linkpred: queries (B, 2) [entity, relation in 0..2R-1] -> (B, E) tail scores."""

    @torch.no_grad()
    def score(queries: torch.Tensor) -> torch.Tensor:
        model.eval()
        return model.score_t(hr_batch=torch.as_tensor(queries, dtype=torch.long)).float()

    return score


def train_and_score(kg: KnowledgeGraph, args: EmbeddingSettings, seed: int) -> dict[str, Any]:
    """Train one pykeen model under the time budget; best-on-valid checkpoint; our filtered test metrics."""
    from pykeen.models import model_resolver
    from pykeen.training import LCWATrainingLoop
    from pykeen.triples import TriplesFactory

    R = kg.num_relations
    tf = TriplesFactory(
        mapped_triples=torch.from_numpy(inverse_augmented(kg.train, R)),
        entity_to_id={e: i for i, e in enumerate(kg.entities)},
        relation_to_id={**{r: i for i, r in enumerate(kg.relations)}, **{f"~{r}": i + R for i, r in enumerate(kg.relations)}},
    )
    model = model_resolver.make(args.model, triples_factory=tf, embedding_dim=args.dim, random_seed=seed,
                                loss=args.loss)
    loop = LCWATrainingLoop(model=model, triples_factory=tf, optimizer="Adam", optimizer_kwargs={"lr": args.lr})
    score = make_scorer(model)
    best: tuple[float, int, dict[str, torch.Tensor]] = (-1.0, 0, {})
    curve, epochs, t0 = [], 0, time.perf_counter()
    while epochs < args.max_epochs and time.perf_counter() - t0 < args.budget_s:
        epochs = min(epochs + args.eval_every, args.max_epochs)
        loop.train(triples_factory=tf, num_epochs=epochs, batch_size=args.batch_size, use_tqdm=False,
                   continue_training=epochs > args.eval_every, label_smoothing=args.label_smoothing)
        valid = evaluate_link_prediction(score, kg, "valid").compute()["mrr"]
        curve.append({"epoch": epochs, "train_s": time.perf_counter() - t0, "valid_mrr": valid})
        if valid > best[0]:
            best = (valid, epochs, {k: v.detach().clone() for k, v in model.state_dict().items()})
    train_s = time.perf_counter() - t0
    model.load_state_dict(best[2])
    test = evaluate_link_prediction(score, kg, "test").compute()
    return {"seed": seed, "epochs": epochs, "best_epoch": best[1], "best_valid_mrr": best[0], "train_s": train_s,
            "wall_s": time.perf_counter() - t0, "curve": curve, "settings": asdict(args),
            **{f"test_{k}": v for k, v in test.items()}}


def markdown(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, command: str) -> str:
    lines = [f"# pykeen {args.model} scored by kg.linkpred (filtered, ties by expectation, head + tail queries)", "",
             f"Command: `{command}`", "",
             f"Settings: {settings_of(args).describe()}; torch threads {args.threads}; mean ± 95 % t-interval over "
             f"seeds {args.seeds}.", "",
             "| dataset | MRR | Hits@1 | Hits@10 | MR | epochs | wall time (s) |", "|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        cells = []
        for key, digits in (("test_mrr", 3), ("test_hits@1", 3), ("test_hits@10", 3), ("test_mr", 1)):
            m, ci = mean_ci([r[key] for r in runs])
            cells.append(f"{m:.{digits}f} ± {ci:.{digits}f}" if ci else f"{m:.{digits}f}")
        ep = "/".join(str(r["epochs"]) for r in runs)
        wall, wci = mean_ci([r["wall_s"] for r in runs])
        lines.append(f"| {name} | {' | '.join(cells)} | {ep} | {wall:.0f} ± {wci:.0f} |")
    return "\n".join(lines) + "\n"


def settings_of(args: argparse.Namespace) -> EmbeddingSettings:
    return EmbeddingSettings(model=args.model, loss=args.loss, dim=args.dim, lr=args.lr, batch_size=args.batch_size,
                             label_smoothing=args.label_smoothing, max_epochs=args.max_epochs,
                             eval_every=args.eval_every, budget_s=args.budget_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["kinship_rnnlogic", "umls_rnnlogic"],
                    help="folders under ../shared/data/kg, or pykeen:NAME / synthetic sources")
    ap.add_argument("--model", default=EmbeddingSettings.model, help="a pykeen model name (RotatE, ComplEx, ...)")
    ap.add_argument("--loss", default=EmbeddingSettings.loss, help="a pykeen loss name (softmax cross-entropy by default)")
    ap.add_argument("--dim", type=int, default=EmbeddingSettings.dim)
    ap.add_argument("--lr", type=float, default=EmbeddingSettings.lr)
    ap.add_argument("--batch-size", type=int, default=EmbeddingSettings.batch_size)
    ap.add_argument("--label-smoothing", type=float, default=EmbeddingSettings.label_smoothing)
    ap.add_argument("--max-epochs", type=int, default=EmbeddingSettings.max_epochs)
    ap.add_argument("--eval-every", type=int, default=EmbeddingSettings.eval_every)
    ap.add_argument("--budget-s", type=float, default=EmbeddingSettings.budget_s, help="training seconds per run (checked between evals)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="kg_embedding")
    args = ap.parse_args()
    require_pykeen("bench.kg_embedding")
    torch.set_num_threads(args.threads)
    results: dict[str, list[dict[str, Any]]] = {}
    for name in args.datasets:
        kg = load_kg(name if ":" in name or name == "synthetic" else shared_data_dir() / "kg" / name)
        for seed in args.seeds:
            res = train_and_score(kg, settings_of(args), seed)
            results.setdefault(name, []).append(res)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items() if k != "curve"}),
                  flush=True)
    command = (f"python -m bench.kg_embedding --datasets {' '.join(args.datasets)} --model {args.model} --loss {args.loss} "
               f"--dim {args.dim} "
               f"--lr {args.lr} --batch-size {args.batch_size} --label-smoothing {args.label_smoothing} --max-epochs "
               f"{args.max_epochs} --eval-every {args.eval_every} --budget-s {args.budget_s:g} --seeds "
               f"{' '.join(map(str, args.seeds))} --threads {args.threads}")
    path = write_result(args.out, {"command": command, "load_avg_1min": os.getloadavg()[0], "results": results})
    md = markdown(results, args, command)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
