"""Document graphs: DGL heterographs for message passing / metapath walks, and dense relation tensors.

Channel convention (spec §5.2, shared with ``kg.grounding``): for ``R`` relations a dense tensor has
``2R + 1`` channels; channel ``r < R`` is relation ``r``, channel ``R + r`` its inverse (the transpose:
``T[i, j, R + r] = T[j, i, r]``) and channel ``2R`` the identity "stay" channel (1 on the diagonal), which
lets shorter rule bodies be padded to a fixed length. The DGL graph uses the same relations as edge
types: ``names[r]`` and ``"~" + names[r]`` (the inverse, ``~r`` as in ``golden_rules.txt``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from kg.documents import DataError, Document

__all__ = [
    "ENTITY",
    "etype_names",
    "channel_to_etype",
    "to_dgl",
    "batch_dgl",
    "relation_tensor",
    "batch_relation_tensors",
    "facts_from_tensor",
]

#: The single node type of a document graph.
ENTITY = "entity"


def etype_names(num_relations: int, relation_names: Sequence[str] | None = None) -> list[str]:
    """The ``2R`` edge-type names: ``[n_0, ..., n_{R-1}, ~n_0, ..., ~n_{R-1}]`` (default ``n_r = "r<r>"``)."""
    if relation_names is None:
        relation_names = [f"r{r}" for r in range(num_relations)]
    if len(relation_names) != num_relations:
        raise ValueError(f"{len(relation_names)} relation names for {num_relations} relations")
    names = [str(n) for n in relation_names]
    for n in names:
        if "." in n:  # HeteroGraphConv keys its ModuleDict by edge type, which forbids "."
            raise ValueError(f"relation name {n!r} contains '.', which DGL module dictionaries do not accept")
    return names + ["~" + n for n in names]


def channel_to_etype(channel: int, num_relations: int, relation_names: Sequence[str] | None = None) -> str | None:
    """Edge type of tensor channel ``c`` (``None`` for the stay channel ``2R``), e.g. for metapath walks."""
    if channel == 2 * num_relations:
        return None
    if not 0 <= channel < 2 * num_relations:
        raise ValueError(f"channel {channel} out of range [0, {2 * num_relations}]")
    return etype_names(num_relations, relation_names)[channel]


def to_dgl(doc: Document, num_relations: int, relation_names: Sequence[str] | None = None) -> Any:
    """DGL heterograph of ``doc``: one node type ``"entity"`` (``ndata["type"]`` = (N,) int64 type ids),
    edge type ``names[r]`` with an edge ``h -> t`` for each fact ``(h, r, t)`` and ``"~" + names[r]``
    with ``t -> h``. All ``2R`` edge types are present (possibly empty) so graphs batch with ``dgl.batch``.
    """
    from kg.dgl_compat import import_dgl

    dgl = import_dgl()
    names = etype_names(num_relations, relation_names)
    facts = doc.facts
    if facts.size and (facts[:, 1].max() >= num_relations or facts[:, 1].min() < 0):
        raise DataError(f"relation id {int(facts[:, 1].max())} out of range [0, {num_relations})", doc_id=doc.doc_id)
    data = {}
    for r in range(num_relations):
        sel = facts[facts[:, 1] == r]
        h = torch.as_tensor(sel[:, 0], dtype=torch.int64)
        t = torch.as_tensor(sel[:, 2], dtype=torch.int64)
        data[(ENTITY, names[r], ENTITY)] = (h, t)
        data[(ENTITY, names[num_relations + r], ENTITY)] = (t, h)
    g = dgl.heterograph(data, num_nodes_dict={ENTITY: doc.num_entities}, idtype=torch.int64)
    g.nodes[ENTITY].data["type"] = torch.as_tensor(doc.entity_types, dtype=torch.int64)
    return g


def batch_dgl(docs: Sequence[Document], num_relations: int, relation_names: Sequence[str] | None = None) -> Any:
    """``dgl.batch`` of :func:`to_dgl` over ``docs`` (node ids are offset per document)."""
    from kg.dgl_compat import import_dgl

    return import_dgl().batch([to_dgl(d, num_relations, relation_names) for d in docs])


def relation_tensor(
    doc: Document, num_relations: int, values: Any = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Dense (N, N, 2R + 1) tensor of ``doc``.

    ``values`` None: gold 0/1, ``T[h, t, r] = 1`` for every fact ``(h, r, t)``. Otherwise ``values`` is an
    (N, N, R) array of fuzzy probabilities in [0, 1] (e.g. sigmoid of backbone logits) used as channels
    ``0..R-1``. In both cases ``T[..., R + r] = T[..., r]^T`` and ``T[..., 2R] = I_N``.
    """
    n, r_ = doc.num_entities, num_relations
    if values is None:
        base = torch.zeros((n, n, r_), dtype=dtype)
        if doc.num_facts:
            f = torch.as_tensor(doc.facts, dtype=torch.int64)
            if int(f[:, 1].max()) >= r_ or int(f[:, 1].min()) < 0:
                raise DataError(f"relation id {int(f[:, 1].max())} out of range [0, {r_})", doc_id=doc.doc_id)
            base[f[:, 0], f[:, 2], f[:, 1]] = 1
    else:
        base = torch.as_tensor(values).to(dtype)
        if tuple(base.shape) != (n, n, r_):
            raise DataError(
                f"values have shape {tuple(base.shape)}, expected (N, N, R) = ({n}, {n}, {r_})", doc_id=doc.doc_id
            )
        if base.numel() and (bool(torch.isnan(base).any()) or base.min() < 0 or base.max() > 1):
            raise DataError("values must be probabilities in [0, 1] (apply a sigmoid to logits)", doc_id=doc.doc_id)
    out = torch.empty((n, n, 2 * r_ + 1), dtype=dtype)
    out[..., :r_] = base
    out[..., r_ : 2 * r_] = base.transpose(0, 1)
    out[..., 2 * r_] = torch.eye(n, dtype=dtype)
    return out


def batch_relation_tensors(
    docs: Sequence[Document],
    num_relations: int,
    values: Sequence[Any] | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack :func:`relation_tensor` over ``docs``, zero-padded to the largest N.

    Returns ``(T, mask)``: T (B, Nmax, Nmax, 2R + 1) and mask (B, Nmax) bool (True = real entity). Padded
    entities are all-zero in every channel, the stay channel included, so no path passes through them.
    ``values``: None (gold) or one (N_b, N_b, R) array per document.
    """
    if values is not None and len(values) != len(docs):
        raise ValueError(f"{len(values)} value arrays for {len(docs)} documents")
    sizes = [d.num_entities for d in docs]
    nmax = max(sizes, default=0)
    out = torch.zeros((len(docs), nmax, nmax, 2 * num_relations + 1), dtype=dtype)
    mask = torch.zeros((len(docs), nmax), dtype=torch.bool)
    for b, doc in enumerate(docs):
        n = sizes[b]
        out[b, :n, :n] = relation_tensor(doc, num_relations, None if values is None else values[b], dtype=dtype)
        mask[b, :n] = True
    return out, mask


def facts_from_tensor(tensor: torch.Tensor | np.ndarray, num_relations: int, threshold: float = 0.5) -> np.ndarray:
    """Inverse of the gold tensor: (F, 3) rows ``(h, r, t)`` with ``T[h, t, r] > threshold`` (channels < R)."""
    t = torch.as_tensor(tensor)[..., :num_relations]
    h, tail, r = torch.nonzero(t > threshold, as_tuple=True)
    rows = np.stack([h.numpy(), r.numpy(), tail.numpy()], axis=1) if h.numel() else np.zeros((0, 3), np.int64)
    return np.unique(rows.astype(np.int64), axis=0) if len(rows) else rows.astype(np.int64)
