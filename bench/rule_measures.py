"""Rule confidence counts and logic accuracy on real DWIE documents vs straightforward references.

1. AMIE counts (support, body size, PCA body size, head size) of J chain rules on every document:
   ours = ``rules.measures.count_bodies`` (dense batched boolean products, bodies with a relation absent from the
   document skipped); reference = a plain loop over documents × rules composing per-token ``scipy.sparse`` CSR
   matrices for each rule from scratch (what one writes first). Bodies: the 39 DWIE golden rules plus random
   length-1..3 bodies whose tokens follow the gold token frequencies (relations and inverses), heads likewise.
2. Logic accuracy of the 39 golden rules: ours = ``rules.measures.logic_accuracy``; reference = LogiRE's
   ``Evaluator.check_rules`` algorithm (torch, per rule ``(chain[:, :, None] & atom[None]).sum(1) > 0``).
   Predictions = gold relations with 10% of the gold facts dropped and 0.05% of the other cells switched on
   (seeded); logic accuracy of the exact gold relations is reported too.

Both sides get identical inputs and must give identical counts (checked). Reported: seconds (min of repeats)
and ratio reference / ours.

    python -m bench.rule_measures [--bodies 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from bench._common import call_times, write_result
from kg.docred import read_docred
from rules.fol import RelationVocab, read_rules
from rules.measures import count_bodies, logic_accuracy

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


def reference_counts(heads: np.ndarray, bodies: np.ndarray, docs: list, R: int) -> np.ndarray:
    """(4, J) support, body, PCA body, head size by per-document, per-rule sparse composition."""
    out = np.zeros((4, len(heads)), dtype=np.int64)
    for doc in docs:
        N = doc.num_entities
        f = doc.facts

        def mat(tok: int) -> sp.csr_matrix:
            if tok == 2 * R:
                return sp.identity(N, dtype=bool, format="csr")
            sel = f[:, 1] == tok % R
            h, t = (f[sel, 2], f[sel, 0]) if tok >= R else (f[sel, 0], f[sel, 2])
            return sp.csr_matrix((np.ones(len(h), dtype=bool), (h, t)), shape=(N, N))

        for j in range(len(heads)):
            B = mat(int(bodies[j, 0]))
            for tok in bodies[j, 1:]:
                B = B @ mat(int(tok))
            H = mat(int(heads[j]))
            has = sp.diags(H.getnnz(axis=1) > 0, dtype=bool)
            out[:, j] += [
                B.multiply(H).count_nonzero(), B.count_nonzero(), (has @ B).count_nonzero(), H.count_nonzero()
            ]
    return out


def logire_check_rules(preds: list[torch.Tensor], rules: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """LogiRE evaluation.py check_rules, summed over documents."""
    total = torch.zeros(len(rules))
    correct = torch.zeros(len(rules))
    for p in preds:
        R = p.size(-1)
        tot, cor = [], []
        for head, chain in rules:
            head_preds = p[:, :, head]
            chain_preds = p[:, :, chain[0] % R]
            if chain[0] >= R:
                chain_preds = chain_preds.transpose(-1, -2)
            for idx in range(1, len(chain)):
                atom = p[:, :, chain[idx] % R]
                if chain[idx] >= R:
                    atom = atom.transpose(-1, -2)
                chain_preds = (chain_preds.unsqueeze(-1) & atom.unsqueeze(0)).sum(1) > 0
            tot.append(chain_preds.sum())
            cor.append((chain_preds & head_preds).sum())
        total += torch.stack(tot)
        correct += torch.stack(cor)
    return total.numpy().astype(np.int64), correct.numpy().astype(np.int64)


def _gold(doc, R: int) -> np.ndarray:
    gold = np.zeros((doc.num_entities, doc.num_entities, R), dtype=bool)
    gold[doc.facts[:, 0], doc.facts[:, 2], doc.facts[:, 1]] = True
    return gold


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = call_times(fn, repeats)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bodies", type=int, default=500, help="random bodies besides the 39 golden rules")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats (min is reported)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random bodies and prediction noise")
    args = ap.parse_args()
    torch.set_num_threads(2)

    dwie = shared_data_dir() / "dwie"
    corpus = read_docred(dwie / "docred_style")
    docs = list(corpus)
    vocab = RelationVocab(tuple(corpus.relations))
    R = vocab.num_relations
    golden = read_rules(dwie / "golden_rules.txt", vocab)
    rng = np.random.default_rng(args.seed)

    rel_freq = np.bincount(np.concatenate([d.facts[:, 1] for d in docs]), minlength=R).astype(float)
    tok_p = np.concatenate([rel_freq, rel_freq]) / (2 * rel_freq.sum())
    lengths = rng.integers(1, 4, args.bodies)
    rand = rng.choice(2 * R, size=(args.bodies, 3), p=tok_p)
    rand[np.arange(3)[None, :] >= lengths[:, None]] = 2 * R
    bodies = np.concatenate([np.array([r.tokens(vocab) for r in golden]), rand])
    heads = np.concatenate([[r.head for r in golden], rng.choice(R, size=args.bodies, p=rel_freq / rel_freq.sum())])
    J = len(heads)

    t_ours, ours = timed(lambda: count_bodies(heads, bodies, docs, R), args.repeats)
    t_ref, ref = timed(lambda: reference_counts(heads, bodies, docs, R), 1)
    ours_arr = np.stack([ours.support, ours.body_size, ours.pca_body_size, ours.head_size])
    if not np.array_equal(ours_arr, ref):
        raise SystemExit("count mismatch between rules.measures and the reference")

    preds = []
    for d in docs:
        gold = _gold(d, R)
        noisy = gold & (rng.random(gold.shape) >= 0.10)
        noisy |= ~gold & (rng.random(gold.shape) < 0.0005)
        preds.append(noisy)
    gold_logic = logic_accuracy([_gold(d, R) for d in docs], golden)
    idx_rules = [[r.head, list(r.body)] for r in golden]
    t_logic, logic = timed(lambda: logic_accuracy(preds, golden), args.repeats)
    tpreds = [torch.from_numpy(p) for p in preds]
    t_logire, (tot, cor) = timed(lambda: logire_check_rules(tpreds, idx_rules), args.repeats)
    if not (np.array_equal(tot, logic.body_counts) and np.array_equal(cor, logic.correct_counts)):
        raise SystemExit("logic accuracy counts differ from LogiRE's check_rules")

    payload = {
        "command": f"python -m bench.rule_measures --bodies {args.bodies} --repeats {args.repeats}",
        "data": f"DWIE docred-style dev+test: {len(docs)} documents, "
        f"mean {np.mean([d.num_entities for d in docs]):.1f} "
        f"entities, {sum(len(d.facts) for d in docs)} facts, R = {R}",
        "counts": {
            "rules": J,
            "seconds_ours": round(t_ours, 4),
            "seconds_reference": round(t_ref, 4),
            "ratio": round(t_ref / t_ours, 1),
            "reference": "per document x rule scipy.sparse CSR composition from scratch",
            "bodies_with_support": int((ours.support > 0).sum()),
            "golden_rules_std_confidence_on_gold": [
                None if np.isnan(x) else round(float(x), 4) for x in ours.std_confidence[: len(golden)]
            ],
        },
        "logic_accuracy": {
            "rules": len(golden),
            "value_on_gold": round(float(gold_logic.value), 4),
            "value_on_noisy_gold": round(float(logic.value), 4),
            "seconds_ours": round(t_logic, 4),
            "seconds_logire": round(t_logire, 4),
            "ratio": round(t_logire / t_logic, 1),
            "reference": "LogiRE evaluation.py check_rules (torch bool broadcast per rule)",
        },
    }
    path = write_result("rule_measures", payload)
    print(
        f"counts: {J} rules x {len(docs)} docs: ours {t_ours:.3f}s, reference {t_ref:.3f}s, "
        f"ratio {t_ref / t_ours:.1f}"
    )
    print(
        f"logic accuracy (gold {gold_logic.value:.4f}, noisy {logic.value:.4f}): ours {t_logic:.3f}s, "
        f"LogiRE {t_logire:.3f}s, ratio {t_logire / t_logic:.1f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
