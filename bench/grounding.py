"""Path-grounding engine vs LogiRE's max-plus PathScorer on DWIE-sized documents.

Reference, run side by side: ``kg.grounding.reference.logire_path_scores`` — LogiRE's PathScorer (log-space
transitions, per body step a [B, N, N, N, chunk] broadcast and a max over the intermediate entity), with the
bodies split into chunks of at most 2^25 broadcast elements so that N = 60 × 2000 bodies fits in memory (LogiRE
itself runs all bodies in one broadcast). Ours: ``kg.grounding.path_scores`` (prefix trie + numba max-product
kernel; also timed with ``backend="torch"``, the fallback used without numba). Both get the same values; the
reference gets them already in log space (its native input, not timed).

Settings: B = 4 real DWIE documents with close to N = 30 / 60 entities (padded to N), R = 65 (C = 131 tokens),
J = 500 / 2000 bodies of length ≤ 3, either
  * random: every token uniform over the 131 tokens, or
  * generator-like: per (relation, head type, tail type) triple, Ns = 50 draws from 0.9 × the triple's gold-path
    body frequencies mined from all DWIE documents (length-1..3 simple paths over gold edges, inverses included,
    as LogiRE's co-occurrence reader) + 0.1 × uniform over all mined bodies, deduplicated per triple and
    concatenated over triples (duplicates across triples kept, as the generator's samples are).
Fuzzy values: σ(logit) with logit ~ N(-4, 2) for non-edges and N(+2, 2) for gold edges.

``--bodies-file`` swaps the mined generator-like bodies for real generator samples (a torch-saved int64 (J', 3)
tensor; the first J rows are used, so J' must be at least 2000).

Reported per setting: wall ms (min and median of repeats, torch.set_num_threads(2)), speed ratios, max |Δ|
between the two outputs, and peak extra memory of one call (MB: in a fresh subprocess, the peak resident size
during the call, reset via /proc/self/clear_refs, minus the resident size before it; the (B, J, N, N) output is
included for both). The 1-minute load average is recorded: the machine is shared, so
wall times are inflated when other jobs run (3 reference calls per setting, interleaved with ours).

    python -m bench.grounding [--repeats 5] [--quick] [--bodies-file generator_samples.pt]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from bench._common import call_times, write_result
from kg.grounding import build_plan, logire_path_scores, path_scores, to_log_transitions, with_inverse_and_stay

REPO = Path(__file__).resolve().parents[1]
N_REL = 65
STAY = 2 * N_REL
MAX_LEN = 3
N_DOCS = 4
NS = 50
REF_BUDGET = 1 << 25  # broadcast elements per reference chunk (128 MiB of float32)
NER = ("location", "organization", "person", "misc", "event", "ethnicity", "time", "role", "money", "other")


def shared_data_dir() -> Path:
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


@dataclass
class Doc:
    """A DWIE document graph: entity types and gold relations as (head, relation id, tail)."""

    name: str
    types: list[int]
    edges: list[tuple[int, int, int]]


def load_dwie(path: Path) -> list[Doc]:
    """Read DWIE annotations (tar.gz of per-document JSON): entities = concepts with ≥1 mention, coarse type =
    first of the 10 NER tags, relations between kept concepts (relation ids = docred-style rel2id − 1)."""
    rel2id_path = path.parent / "docred_style" / "meta" / "rel2id.json"
    docs: list[Doc] = []
    raw: list[dict[str, Any]] = []
    with tarfile.open(path) as tf:
        for member in tf.getmembers():
            if member.isfile() and member.name.endswith(".json"):
                fh = tf.extractfile(member)
                if fh is not None:
                    raw.append(json.load(fh))
    if rel2id_path.exists():
        rel2id = {k: v - 1 for k, v in json.loads(rel2id_path.read_text()).items() if k != "Na"}
    else:
        rel2id = {p: i for i, p in enumerate(sorted({r["p"] for d in raw for r in d["relations"]}))}
    if len(rel2id) != N_REL:
        raise ValueError(f"{rel2id_path}: expected {N_REL} relations, found {len(rel2id)}")
    for d in raw:
        mentioned = {m["concept"] for m in d["mentions"]}
        keep, types = {}, []
        for c in d["concepts"]:
            if c["concept"] not in mentioned:
                continue
            tags = {t[len("type::") :] for t in (c.get("tags") or []) if t.startswith("type::")}
            ner = next((i for i, name in enumerate(NER) if name in tags), NER.index("other"))
            keep[c["concept"]] = len(types)
            types.append(ner)
        edges = [
            (keep[r["s"]], rel2id[r["p"]], keep[r["o"]])
            for r in d["relations"]
            if r["s"] in keep and r["o"] in keep and r["p"] in rel2id
        ]
        docs.append(Doc(str(d["id"]), types, edges))
    return docs


def mine_bodies(docs: list[Doc]) -> dict[tuple[int, int, int], Counter]:
    """Per triple (r, type_h, type_t): counts of bodies of the simple gold paths h → t of length 1..3 (inverse
    edges r + R included; the direct edge [r] itself counts, as in LogiRE's co-occurrence mining)."""
    table: dict[tuple[int, int, int], Counter] = defaultdict(Counter)
    for doc in docs:
        adj: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for h, r, t in doc.edges:
            adj[h].append((r, t))
            adj[t].append((r + N_REL, h))
        for h, r, t in doc.edges:
            stack: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = [(h, (), (h,))]
            while stack:
                node, body, seen = stack.pop()
                for tok, nxt in adj[node]:
                    if nxt == t:
                        full = body + (tok,)
                        table[(r, doc.types[h], doc.types[t])][full + (STAY,) * (MAX_LEN - len(full))] += 1
                    elif nxt not in seen and len(body) + 1 < MAX_LEN:
                        stack.append((nxt, body + (tok,), seen + (nxt,)))
    return table


def generator_like_bodies(
    table: dict[tuple[int, int, int], Counter], n_bodies: int, rng: np.random.Generator
) -> torch.Tensor:
    """Ns = 50 draws per triple from 0.9·(its mined body frequencies) + 0.1·uniform(all mined bodies), unique
    per triple, concatenated over triples in random order until ``n_bodies``."""
    triples = sorted(table)
    vocab = sorted({b for c in table.values() for b in c})
    index = {b: i for i, b in enumerate(vocab)}
    out: list[tuple[int, ...]] = []
    while len(out) < n_bodies:
        for ti in rng.permutation(len(triples)):
            counter = table[triples[ti]]
            p = np.full(len(vocab), 0.1 / len(vocab))
            total = sum(counter.values())
            for body, cnt in counter.items():
                p[index[body]] += 0.9 * cnt / total
            draws = rng.choice(len(vocab), size=NS, p=p / p.sum())
            out.extend(vocab[i] for i in dict.fromkeys(draws.tolist()))
            if len(out) >= n_bodies:
                break
    return torch.tensor(out[:n_bodies], dtype=torch.int64)


def random_bodies(n_bodies: int, rng: np.random.Generator) -> torch.Tensor:
    return torch.as_tensor(rng.integers(0, 2 * N_REL + 1, size=(n_bodies, MAX_LEN)), dtype=torch.int64)


def doc_values(docs: list[Doc], n: int, gen: torch.Generator) -> tuple[torch.Tensor, list[str], list[int]]:
    """Values (B, n, n, 2R+1) for the B documents with the most entities ≤ n: σ(N(-4,2)) noise, σ(N(2,2)) on gold
    edges; entities beyond a document's count are padding."""
    chosen = sorted((d for d in docs if len(d.types) <= n), key=lambda d: (-len(d.types), d.name))[:N_DOCS]
    logits = torch.randn(N_DOCS, n, n, N_REL, generator=gen) * 2.0 - 4.0
    for b, d in enumerate(chosen):
        for h, r, t in d.edges:
            logits[b, h, t, r] = torch.randn((), generator=gen) * 2.0 + 2.0
    counts = [len(d.types) for d in chosen]
    return with_inverse_and_stay(torch.sigmoid(logits), counts), [d.name for d in chosen], counts


def ref_chunk(n: int) -> int:
    return max(1, REF_BUDGET // (N_DOCS * n**3))


def run_ours(values: torch.Tensor, bodies: torch.Tensor) -> torch.Tensor:
    return path_scores(values, bodies)


def run_ref(log_values: torch.Tensor, bodies: torch.Tensor) -> torch.Tensor:
    return logire_path_scores(log_values, bodies, chunk_size=ref_chunk(log_values.shape[1]))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def measure_memory(case_file: str, impl: str) -> float:
    """Peak extra resident memory (MB) of one call in this fresh process: the kernel's high-water mark (VmHWM,
    reset through /proc/self/clear_refs just before the call) minus the resident size before it."""
    torch.set_num_threads(2)
    case = torch.load(case_file)
    values, bodies = case["values"], case["bodies"]
    log_values = to_log_transitions(values)
    fn: Callable[[], torch.Tensor]
    fn = (lambda: run_ours(values, bodies)) if impl == "ours" else (lambda: run_ref(log_values, bodies))
    # compile/warm the kernels on a tiny case so that JIT memory is not counted
    path_scores(values[:1, :3, :3], bodies[:2])
    logire_path_scores(log_values[:1, :3, :3], bodies[:2])
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak-RSS counter (VmHWM) to the current RSS
    before = _status_kb("VmRSS")
    out = fn()
    peak = _status_kb("VmHWM")
    del out
    return (peak - before) / 1024


def timed(fn: Callable[[], torch.Tensor], repeats: int) -> list[float]:
    """Wall-clock ms of each call."""
    return [t * 1e3 for t in call_times(fn, repeats)[0]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed calls of ours per reference call (3 reference calls per setting)"
    )
    parser.add_argument("--quick", action="store_true", help="N = 30 only, 2 repeats (smoke run)")
    parser.add_argument("--seed", type=int, default=0, help="seed for values and bodies")
    parser.add_argument(
        "--bodies-file",
        help="torch-saved int64 (J', 3) generator samples to use instead of the mined generator-like bodies",
    )
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("--memory-impl", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_case:
        print(json.dumps({"peak_mb": measure_memory(args.memory_case, args.memory_impl)}))
        return

    torch.set_num_threads(2)
    annos = shared_data_dir() / "dwie" / "dwie_annos.tar.gz"
    if not annos.exists():
        sys.exit(f"DWIE annotations not found at {annos} (set FEDNSL_SHARED_DATA)")
    t0 = time.perf_counter()
    docs = load_dwie(annos)
    table = mine_bodies(docs)
    print(f"loaded {len(docs)} DWIE docs, mined bodies for {len(table)} triples in {time.perf_counter() - t0:.1f}s")
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    sampled = None
    if args.bodies_file:
        sampled = torch.load(args.bodies_file)
        ok = isinstance(sampled, torch.Tensor) and sampled.dtype == torch.int64 and sampled.dim() == 2
        if not ok or sampled.shape[0] < 2000:
            sys.exit(f"{args.bodies_file}: expected an int64 tensor of shape (J' >= 2000, L)")
    gen_kind = "generator-samples" if sampled is not None else "generator-like"
    sizes = (30,) if args.quick else (30, 60)
    repeats = 2 if args.quick else args.repeats
    rows = []
    tmp = tempfile.TemporaryDirectory()
    for n in sizes:
        values, names, counts = doc_values(docs, n, gen)
        log_values = to_log_transitions(values)
        for n_bodies in (500, 2000):
            for kind in ("random", gen_kind):
                if kind == "random":
                    bodies = random_bodies(n_bodies, rng)
                elif sampled is not None:
                    bodies = sampled[:n_bodies]
                else:
                    bodies = generator_like_bodies(table, n_bodies, rng)
                plan = build_plan(bodies, STAY)
                ours_out = run_ours(values, bodies)  # warm-up (numba compile on first call)
                ref_out = run_ref(log_values, bodies)
                diff = float((ref_out.exp().permute(0, 3, 1, 2) - ours_out).abs().max())
                del ours_out, ref_out
                ref_reps = max(1, min(3, repeats))
                t_ours, t_ref = [], []
                for _ in range(ref_reps):  # interleave so that load from other processes hits both alike
                    t_ref += timed(lambda: run_ref(log_values, bodies), 1)
                    t_ours += timed(lambda: run_ours(values, bodies), repeats)
                t_torch = timed(lambda: path_scores(values, bodies, backend="torch"), 2)
                case_file = os.path.join(tmp.name, f"case_{n}_{n_bodies}_{kind}.pt")
                torch.save({"values": values, "bodies": bodies}, case_file)
                mem = {}
                for impl in ("ours", "ref"):
                    res = subprocess.run(
                        [sys.executable, "-m", "bench.grounding", "--memory-case", case_file, "--memory-impl", impl],
                        cwd=REPO, capture_output=True, text=True, check=True,
                    )
                    mem[impl] = json.loads(res.stdout.strip().splitlines()[-1])["peak_mb"]
                w_ours, w_ref = t_ours, t_ref
                row = {
                    "n_entities": n,
                    "doc_entity_counts": counts,
                    "docs": names,
                    "bodies": kind,
                    "n_bodies": n_bodies,
                    "distinct_bodies": int(torch.unique(bodies, dim=0).shape[0]),
                    "body_length_counts": {
                        str(k): int(v) for k, v in sorted(Counter(plan.body_level.tolist()).items())
                    },
                    "ours_products": plan.n_products,
                    "ref_products": n_bodies * (MAX_LEN - 1),
                    "ref_chunk": ref_chunk(n),
                    "ours_ms_min": min(w_ours),
                    "ours_ms_median": statistics.median(w_ours),
                    "ref_ms_min": min(w_ref),
                    "ref_ms_median": statistics.median(w_ref),
                    "ratio_min": min(w_ref) / min(w_ours),
                    "ratio_median": statistics.median(w_ref) / statistics.median(w_ours),
                    "ours_torch_backend_ms_min": min(t_torch),
                    "ratio_torch_backend": min(w_ref) / min(t_torch),
                    "max_abs_diff": diff,
                    "ours_peak_mb": mem["ours"],
                    "ref_peak_mb": mem["ref"],
                    "load_avg_1min": os.getloadavg()[0],
                }
                rows.append(row)
                print(
                    f"N={n:3d} J={n_bodies:5d} {kind:15s} ours {row['ours_ms_min']:8.1f} ms  "
                    f"ref {row['ref_ms_min']:9.1f} ms  "
                    f"ratio {row['ratio_min']:6.1f}x (median {row['ratio_median']:6.1f}x)  |d|={diff:.1e}  "
                    f"peak MB ours {mem['ours']:7.1f} ref {mem['ref']:7.1f}  "
                    f"(products {plan.n_products} vs {row['ref_products']})",
                    flush=True,
                )
    tmp.cleanup()
    import numba

    path = write_result(
        "grounding",
        {
            "command": "python -m bench.grounding"
            + (" --quick" if args.quick else f" --repeats {args.repeats}")
            + (f" --bodies-file {args.bodies_file}" if args.bodies_file else ""),
            "numba": numba.__version__,
            "threads": torch.get_num_threads(),
            "n_docs": N_DOCS,
            "n_relations": N_REL,
            "max_body_length": MAX_LEN,
            "values": "sigmoid(N(-4,2)) off gold edges, sigmoid(N(2,2)) on gold edges; "
            "inverse = transpose; stay = identity",
            "reference": "LogiRE PathScorer max-plus in log space, bodies chunked to <= 2^25 broadcast elements",
            "target": "ratio >= 30 on generator-like bodies, max_abs_diff <= 1e-4",
            "settings": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
