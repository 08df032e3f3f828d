"""A slow, obviously-correct sampler (a Python loop per triple, sample and step) that :func:`sample_rules` is
tested and benchmarked against; not used in runs."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rules.generator.constraints import TypeConstraints
from rules.generator.model import RuleGenerator
from rules.generator.sampling import SampledRules, _finish, _gumbel, _prepare_triples, _report_uncompletable


def _py_allowed(head: int, tail: int, prefix: tuple[int, ...], length: int, r: int, table: list | None) -> list[bool]:
    """Pure-Python allowed-next-token list for one (triple, prefix): independent of ``_Validity``.

    ``table`` = ``TypeConstraints.allowed.tolist()`` or None (well-formedness only).
    """
    pad, v = 2 * r, 2 * r + 1
    if pad in prefix:
        return [tok == pad for tok in range(v)]
    if table is None:
        return [tok != pad or len(prefix) > 0 for tok in range(v)]
    e = len(table[0])
    memo: dict[tuple[frozenset[int], int], bool] = {}

    def image(types: frozenset[int], tok: int) -> frozenset[int]:
        return frozenset(d for s in types for d in range(e) if table[tok][s][d])

    def completable(types: frozenset[int], steps: int) -> bool:
        """Some type in ``types`` reaches ``tail`` with at most ``steps`` real tokens."""
        key = (types, steps)
        if key not in memo:
            memo[key] = tail in types or (
                steps > 0 and any(completable(image(types, tok), steps - 1) for tok in range(pad) if image(types, tok))
            )
        return memo[key]

    types = frozenset([head])
    for tok in prefix:
        types = image(types, tok)
    remaining = length - 1 - len(prefix)
    out = []
    for tok in range(v):
        if tok == pad:
            out.append(len(prefix) > 0 and tail in types)
        else:
            nxt = image(types, tok)
            out.append(bool(nxt) and completable(nxt, remaining))
    return out


@torch.no_grad()
def sample_rules_reference(
    model: RuleGenerator,
    triples: torch.Tensor | Sequence[Sequence[int]],
    num_samples: int = 50,
    generator: torch.Generator | None = None,
    constraints: TypeConstraints | None = None,
) -> SampledRules:
    """Naive reference for ``sample_rules``: a Python loop per triple, per sample, per step (batch of one).

    Draws the same Gumbel noise tensors (T, N, V) per step from ``generator`` and checks validity with a
    pure-Python type-set search, so its output equals ``sample_rules`` (up to float rounding in near-ties).
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    tri = _prepare_triples(model, triples)
    t_count, n, length, v, device = tri.shape[0], num_samples, c.max_body_len, c.vocab_size, tri.device
    noise = [_gumbel((t_count, n, v), generator, device) for _ in range(length)]
    table = constraints.allowed.cpu().tolist() if constraints is not None else None
    was_training = model.training
    model.eval()
    bodies, logps, rows, dead = [], [], [], []
    allowed_memo: dict[tuple[int, tuple[int, ...]], list[bool]] = {}

    def allowed(ti: int, head: int, tail: int, prefix: tuple[int, ...]) -> list[bool]:
        if (ti, prefix) not in allowed_memo:
            allowed_memo[ti, prefix] = _py_allowed(head, tail, prefix, length, c.num_relations, table)
        return allowed_memo[ti, prefix]

    try:
        for ti in range(t_count):
            r, head, tail = (int(x) for x in tri[ti])
            memory = model.encode(tri[ti : ti + 1])
            if not any(allowed(ti, head, tail, ())):
                dead.append(ti)
            for si in range(n):
                prefix: list[int] = []
                lp = 0.0
                for step in range(length):
                    allow = torch.tensor(allowed(ti, head, tail, tuple(prefix)))
                    if not allow.any():
                        allow[c.pad] = True
                    logits = model.decode(memory, torch.tensor([prefix], dtype=torch.long, device=device))[0, -1]
                    step_lp = torch.log_softmax(logits.float().masked_fill(~allow.to(device), float("-inf")), -1)
                    tok = int((step_lp + noise[step][ti, si]).argmax())
                    lp += float(step_lp[tok])
                    prefix.append(tok)
                bodies.append(prefix)
                logps.append(lp)
                rows.append(ti)
    finally:
        model.train(was_training)
    unc = torch.tensor(dead, dtype=torch.long, device=device)
    _report_uncompletable(tri, unc)
    return _finish(
        torch.tensor(rows, dtype=torch.long, device=device).reshape(-1),
        torch.tensor(bodies, dtype=torch.long, device=device).reshape(-1, length),
        torch.tensor(logps, dtype=torch.float32, device=device),
        t_count,
        n,
        c.pad,
        unc,
    )
