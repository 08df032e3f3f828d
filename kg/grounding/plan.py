"""Prefix trie over rule bodies: every distinct body prefix is computed once (shared by all bodies that start with it).

A body (b_1, ..., b_L) is grounded as the chain product M_{b_1} ⊗ M_{b_2} ⊗ ... ⊗ M_{b_L} (⊗ = max-product or
sum-product matrix product, FedNSL Eq. 8). Level k of the trie holds the distinct prefixes of length k; a level-k
node is (parent node at level k-1, token b_k). Level-1 nodes are the channels themselves (node id = token id).

*Canonical* plans drop stay tokens (exact when the stay channel acts as the identity on every entity that has an
edge, see :func:`kg.grounding.engine.stay_acts_as_identity`): then [r1, STAY, r2], [r1, r2, STAY] and
[STAY, r1, r2] share one node, and an all-stay body is the stay matrix itself (level 0). *Raw* plans keep stays as
tokens (applied as a diagonal scaling), which is exact for any diagonal stay channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class BodyPlan:
    """Trie over the prefixes of ``bodies`` (J, L).

    Attributes:
        bodies: (J, L) int64 token ids as given (CPU).
        stay_id: the stay/padding token.
        canonical: whether stay tokens were dropped.
        parents: ``parents[k]`` (n_k,) parent node of each level-(k+2) node (for level 2: a token id).
        tokens: ``tokens[k]`` (n_k,) token applied by each level-(k+2) node.
        body_level: (J,) length of each body's (canonical) token sequence, 0..L.
        prefix_nodes: (J, L) node id of the body's prefix of length k+1 at level k+1, -1 beyond ``body_level``
            (level-1 node id = token id; level ≥ 2 ids index ``parents[k-1]``/``tokens[k-1]``).
    """

    bodies: torch.Tensor
    stay_id: int
    canonical: bool
    parents: tuple[np.ndarray, ...]
    tokens: tuple[np.ndarray, ...]
    body_level: np.ndarray
    prefix_nodes: np.ndarray

    @property
    def max_level(self) -> int:
        """Longest (canonical) body length in the plan."""
        return int(self.body_level.max()) if len(self.body_level) else 0

    @property
    def n_products(self) -> int:
        """Number of N×N semiring matrix products the plan needs (one per node at levels ≥ 2)."""
        return int(sum(len(p) for p in self.parents))


def build_plan(bodies: torch.Tensor, stay_id: int, canonical: bool = True) -> BodyPlan:
    """Build the prefix trie for ``bodies`` (J, L) int64 token ids (vectorised: one ``np.unique`` per level).

    Node ids at level k ≥ 2 are assigned in sorted order of (parent node, token).
    """
    if not isinstance(bodies, torch.Tensor) or bodies.dtype != torch.int64 or bodies.dim() != 2:
        raise ValueError("bodies must be an int64 tensor of shape (J, L)")
    tok = bodies.detach().cpu().numpy().astype(np.int64)
    n_bodies, length = tok.shape
    if canonical:
        is_stay = tok == stay_id
        order = np.argsort(is_stay, axis=1, kind="stable")  # non-stay tokens first, in body order
        seq = np.take_along_axis(tok, order, axis=1)
        body_level = (~is_stay).sum(axis=1).astype(np.int64)
    else:
        seq = tok
        body_level = np.full(n_bodies, length, dtype=np.int64)
    prefix_nodes = np.full((n_bodies, length), -1, dtype=np.int64)
    if length and n_bodies:
        prefix_nodes[:, 0] = np.where(body_level >= 1, seq[:, 0], -1)
    parents: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    width = int(tok.max()) + 1 if tok.size else 1
    for k in range(1, length):
        rows = np.nonzero(body_level > k)[0]
        if len(rows) == 0:
            break
        parent = prefix_nodes[rows, k - 1]
        key = parent * width + seq[rows, k]
        uniq, inverse = np.unique(key, return_inverse=True)
        parents.append(uniq // width)
        tokens.append(uniq % width)
        prefix_nodes[rows, k] = inverse.reshape(-1)
    return BodyPlan(
        bodies=bodies.detach().cpu(),
        stay_id=stay_id,
        canonical=canonical,
        parents=tuple(parents),
        tokens=tuple(tokens),
        body_level=body_level,
        prefix_nodes=prefix_nodes,
    )
