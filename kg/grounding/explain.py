"""Argmax entity paths behind max-product path scores, and re-scoring of cached paths (spec §8.6(a)).

``best_paths`` answers "which entity path grounds body j between h and t in document d?" (a ``rules explain``
command, and the path cache of Fast-FedNSL); ``path_values`` evaluates Π x along given (cached) entity paths for
new fuzzy values (FedNSL Eq. 21/22 with the graph search replaced by the cached path).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kg.grounding.checks import GroundingInputError, check_bodies, check_queries, check_values
from kg.grounding.engine import node_table, prepare


@dataclass(frozen=True)
class BestPaths:
    """Argmax paths for Q queries × J bodies.

    Attributes:
        entities: (Q, J, L+1) int64 entity path e_0 = head, ..., e_L = tail (a stay step repeats the entity).
        edge_values: (Q, J, L) values[doc, e_{k-1}, e_k, b_k] along the path.
        scores: (Q, J) product of the edge values (left to right) = path_scores(...)[doc, j, head, tail].
    """

    entities: torch.Tensor
    edge_values: torch.Tensor
    scores: torch.Tensor


def _edge_values(
    values: torch.Tensor, bodies: torch.Tensor, doc: torch.Tensor, entities: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather values[doc_q, e_{k-1}, e_k, b_jk] → (Q, J, L) and their left-to-right product (Q, J)."""
    dev = values.device
    entities = entities.to(dev)
    q, j, _ = entities.shape
    d = doc.to(dev)[:, None, None].expand(q, j, bodies.shape[1])
    tok = bodies.to(dev)[None].expand(q, j, bodies.shape[1])
    edge = values[d, entities[..., :-1], entities[..., 1:], tok]
    score = edge[..., 0]
    for k in range(1, edge.shape[-1]):
        score = score * edge[..., k]
    return edge, score


def path_values(
    values: torch.Tensor,
    bodies: torch.Tensor,
    doc_index: torch.Tensor | int,
    entities: torch.Tensor,
    *,
    stay_id: int | None = None,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Π x along given entity paths (Fast-FedNSL cached-path scoring).

    Args:
        values: (B, N, N, C) fuzzy values in [0, 1].
        bodies: (J, L) int64 tokens.
        doc_index: int or (Q,) document of each query.
        entities: (Q, J, L+1) int64 entity paths, e.g. ``best_paths(...).entities`` from an earlier round.

    Returns:
        (scores (Q, J), edge_values (Q, J, L)).
    """
    if validate:
        check_values(values, stay_id)
        bodies = check_bodies(bodies, values.shape[-1])
    else:
        bodies = bodies.detach().cpu()
    entities = torch.as_tensor(entities)
    n_docs, n = values.shape[0], values.shape[1]
    if entities.dim() != 3 or entities.shape[1:] != (bodies.shape[0], bodies.shape[1] + 1):
        raise GroundingInputError(
            f"entities must have shape (Q, J, L+1) = (Q, {bodies.shape[0]}, {bodies.shape[1] + 1}), "
            f"got {tuple(entities.shape)}"
        )
    if entities.dtype.is_floating_point or entities.dtype == torch.bool:
        raise GroundingInputError(f"entities must hold integer entity ids, got dtype {entities.dtype}")
    entities = entities.to(torch.int64)
    if entities.numel() and (bool((entities < 0).any()) or bool((entities >= n).any())):
        raise GroundingInputError(f"entities has ids outside [0, {n})")
    doc, _, _ = check_queries(doc_index, 0, 0, n_docs, max(n, 1))
    if len(doc) == 1 and entities.shape[0] != 1:
        doc = doc.expand(entities.shape[0])
    if len(doc) != entities.shape[0]:
        raise GroundingInputError(f"doc_index has {len(doc)} entries but entities has Q = {entities.shape[0]} paths")
    edge, score = _edge_values(values, bodies, doc, entities)
    return score, edge


def best_paths(
    values: torch.Tensor,
    bodies: torch.Tensor,
    doc_index: torch.Tensor | int,
    head: torch.Tensor | int,
    tail: torch.Tensor | int,
    *,
    stay_id: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> BestPaths:
    """Argmax entity path of every body for each query (doc_index, head, tail) under max-product (Eq. 8).

    Runs the max-product trie DP on the queried documents while recording the maximising intermediate entity of
    every node, then walks back from each tail. Ties go to the smallest entity id; when the score is 0 every path
    has value 0 and the returned one is arbitrary. Queries broadcast: ints or (Q,) tensors.
    """
    if validate:
        check_values(values, stay_id)
        bodies = check_bodies(bodies, values.shape[-1])
    else:
        bodies = bodies.detach().cpu()
    n_docs, n = values.shape[0], values.shape[1]
    doc, head_q, tail_q = check_queries(doc_index, head, tail, n_docs, n)
    used, doc_pos = torch.unique(doc, return_inverse=True)
    sub = values.detach()[used.to(values.device)]
    plan = prepare(sub, bodies, stay_id, validate=False)
    _, offsets, arg = node_table(sub, plan, "max-product", eps=0.0, backend=backend, want_arg=True)
    if arg is None:  # node_table always returns it with want_arg=True
        raise RuntimeError("node_table returned no argmax table")
    arg = arg.cpu()
    n_channels = values.shape[-1]
    n_q, (n_bodies, length) = len(doc), bodies.shape

    level = torch.as_tensor(plan.body_level)  # (J,)
    canon = torch.full((n_q, n_bodies, length + 1), -1, dtype=torch.int64)
    canon[:, :, 0] = head_q[:, None]
    has_edge = level > 0
    canon[:, has_edge, level[has_edge]] = tail_q[:, None].expand(n_q, int(has_edge.sum()))
    prefix = torch.as_tensor(plan.prefix_nodes)
    for k in range(plan.max_level, 1, -1):
        js = torch.nonzero(level >= k).flatten()
        if len(js) == 0:
            continue
        rows = prefix[js, k - 1] + (offsets[k - 1] - n_channels)
        nxt = canon[:, js, k]
        canon[:, js, k - 1] = arg[doc_pos[:, None], rows[None, :], head_q[:, None], nxt].to(torch.int64)

    if plan.canonical:
        # map canonical positions back to the original tokens: a stay step repeats the current entity
        non_stay = (bodies != plan.stay_id).to(torch.int64)  # (J, L)
        count = torch.cumsum(non_stay, dim=1)  # number of non-stay tokens among positions 1..k
        pos = torch.cat([torch.zeros(n_bodies, 1, dtype=torch.int64), count], dim=1)  # (J, L+1)
        entities = torch.gather(canon, 2, pos[None].expand(n_q, n_bodies, length + 1))
        entities[:, :, length] = tail_q[:, None]
    else:
        entities = canon
    edge, score = _edge_values(values.detach(), bodies, doc, entities)
    return BestPaths(entities=entities, edge_values=edge, scores=score)
