"""Rule bodies as token tuples: padding, the inverse-head mirror, and the per-query-relation rule sets.

Token ids follow :class:`rules.fol.RelationVocab`: 0..R-1 relations, R..2R-1 their inverses, 2R stay/pad.
A rule of the inverse head r+R, ``~r(X,Y) <- b1..bL``, is the rule ``r(X,Y) <- ~bL..~b1`` read backwards, so the
server keeps rules per forward head r only and each client asks them in both query directions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from fednsl.tasks.rule_learning.proposal import Body, strip

__all__ = ["inverse_token", "merge_directions", "mirror", "query_rule_sets"]


def inverse_token(tok: int, num_relations: int) -> int:
    """r ↔ r+R."""
    return tok + num_relations if tok < num_relations else tok - num_relations


def mirror(body: Iterable[int], num_relations: int) -> Body:
    """The body of the same rule asked from the inverse head: (b1..bL) → (~bL..~b1)."""
    return tuple(inverse_token(int(t), num_relations) for t in reversed(tuple(body)))


def query_rule_sets(
    heads: np.ndarray, bodies: np.ndarray, mask: np.ndarray, num_relations: int, keep: Iterable[int] | None = None
) -> dict[int, list[Body]]:
    """Server proposal (T,), (T, J, L), (T, J) → bodies per query relation 0..2R-1 for ``RulePredictor``.

    Head r gets its J_r bodies in order; head r+R gets their mirrors in the same order, so body j of either
    direction is rule j of head r. ``keep``: forward heads to include (default all).
    """
    wanted = None if keep is None else {int(r) for r in keep}
    out: dict[int, list[Body]] = {}
    for t, r in enumerate(np.asarray(heads).tolist()):
        if wanted is not None and r not in wanted:
            continue
        fwd = [strip(b, num_relations) for b, m in zip(bodies[t].tolist(), mask[t].tolist()) if m]
        out[int(r)] = fwd
        out[int(r) + num_relations] = [mirror(b, num_relations) for b in fwd]
    return out


def merge_directions(scores: Mapping[int, np.ndarray], head: int, num_relations: int, size: int) -> np.ndarray | None:
    """Mean of a forward head's and its inverse head's per-body scores (J,); None when neither was scored."""
    parts = [np.asarray(scores[h], dtype=np.float64) for h in (head, head + num_relations) if h in scores]
    parts = [p for p in parts if p.shape == (size,)]
    return None if not parts else np.mean(parts, axis=0)
