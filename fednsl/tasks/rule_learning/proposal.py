"""The server's proposal (FedNSL Eq. 5): per rule head the candidate bodies, the prior over them and the sample
counts — one dataclass, one declared schema, one codec, for every rule learner.

A rule head is a category ``(relation, head type, tail type)`` (types 0 on an untyped KG). Bodies are token ids
of :class:`rules.fol.RelationVocab` (0..R-1 relations, R..2R-1 their inverses) padded with the stay token 2R.

Wire format (``train`` and ``evaluate`` requests, :data:`PROPOSAL_SCHEMA`): ``heads`` (T, 3), ``bodies`` (T, J,
L), ``log_prior`` (T, J) the server's log prior up to a per-head constant (0 where masked; its softmax over the
mask is p_θ), ``counts`` (T, J) n_j (multiplicity among the N ancestral samples), ``mask`` (T, J) real bodies,
a prefix of each row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fednsl.federation.records import ArraySpec, Schema
from rules.posterior import PriorSource, prior_distribution

__all__ = ["PROPOSAL_ARRAYS", "PROPOSAL_SCHEMA", "Body", "Proposal", "pad_bodies", "strip"]

Body = tuple[int, ...]

PROPOSAL_ARRAYS = ("heads", "bodies", "log_prior", "counts", "mask")

#: server → client: the round's proposal; T heads and J bodies per head bind the reply's sizes. The config of
#: the message is the method's own (the scorer's options, whether to use the prior, …).
PROPOSAL_SCHEMA = Schema(
    arrays=(
        ArraySpec("heads", "ids", "int", ("T", 3)),
        ArraySpec("bodies", "ids", "int", ("T", "J", None)),
        ArraySpec("log_prior", "scores", "float", ("T", "J")),
        ArraySpec("counts", "counts", "int", ("T", "J")),
        ArraySpec("mask", "mask", "bool", ("T", "J")),
    ),
    any_config=True,
)


def strip(row: Iterable[int], num_relations: int) -> Body:
    """A padded token row → its real tokens."""
    pad = 2 * num_relations
    return tuple(int(t) for t in row if int(t) != pad)


def pad_bodies(bodies: Sequence[Sequence[int]], num_relations: int, length: int) -> np.ndarray:
    """(J,) token tuples → (J, length) int64 padded with 2R."""
    out = np.full((len(bodies), length), 2 * num_relations, dtype=np.int64)
    for j, b in enumerate(bodies):
        out[j, : len(b)] = b
    return out


@dataclass
class Proposal:
    """One round's candidate bodies of one learner, as the server sends them (Eq. 5).

    heads (T, 3) long (relation, head type, tail type); bodies (T, J, L) long padded with 2R; log_prior (T, J)
    float64 (0 where masked); counts (T, J) long n_j; mask (T, J) bool.
    """

    heads: torch.Tensor
    bodies: torch.Tensor
    log_prior: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor

    @property
    def num_heads(self) -> int:
        return int(self.heads.shape[0])

    @property
    def num_bodies(self) -> int:
        return int(self.bodies.shape[1])

    @property
    def relations(self) -> list[int]:
        """(T,) the head relation of every row."""
        return [int(r) for r in self.heads[:, 0].tolist()]

    def keys(self) -> list[tuple[int, int, int]]:
        """(T,) the rule-head categories as tuples (the keys of the pool and the rule store)."""
        return [(int(r), int(a), int(b)) for r, a, b in self.heads.tolist()]

    def prior(self, source: PriorSource = "renormalised") -> torch.Tensor:
        """p_θ (T, J): T_θ renormalised over each head's bodies, or n_j / Σ n (``counts``); 0 where masked."""
        return prior_distribution(self.log_prior.double(), self.counts, self.mask, source)

    def bodies_of(self, t: int, num_relations: int) -> list[Body]:
        """The real bodies of row ``t``, unpadded, in order."""
        return [strip(row, num_relations) for row in self.bodies[t][self.mask[t]].tolist()]

    def same_as(self, other: Proposal) -> bool:
        """Equal heads, bodies, counts and mask (the prior may differ by rounding only where they are equal)."""
        return all(torch.equal(getattr(self, f), getattr(other, f)) for f in ("heads", "bodies", "counts", "mask"))

    # -- codec ------------------------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of a ``train``/``evaluate`` message (log prior zeroed where masked)."""
        lp = torch.where(self.mask, self.log_prior.double(), torch.zeros((), dtype=torch.float64))
        return {
            "heads": self.heads.numpy().astype(np.int64),
            "bodies": self.bodies.numpy().astype(np.int64),
            "log_prior": lp.numpy(),
            "counts": self.counts.numpy().astype(np.int64),
            "mask": self.mask.numpy().astype(bool),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Proposal:
        """The proposal of a server message (or of a checkpoint of one)."""
        missing = [k for k in PROPOSAL_ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"server message lacks the proposal arrays {missing}")
        return cls(
            torch.as_tensor(np.asarray(arrays["heads"], dtype=np.int64)).reshape(-1, 3),
            torch.as_tensor(np.asarray(arrays["bodies"], dtype=np.int64)),
            torch.as_tensor(np.asarray(arrays["log_prior"], dtype=np.float64)),
            torch.as_tensor(np.asarray(arrays["counts"], dtype=np.int64)),
            torch.as_tensor(np.asarray(arrays["mask"], dtype=bool)),
        )

    @classmethod
    def from_bodies(
        cls,
        heads: Sequence[tuple[int, int, int]],
        bodies: Sequence[Sequence[Body]],
        counts: Sequence[Sequence[int]],
        num_relations: int,
        length: int,
    ) -> Proposal:
        """A proposal from per-head body lists (counts alike), padded to the longest list; log prior 0."""
        T, J = len(heads), max((len(b) for b in bodies), default=1)
        padded = np.full((T, J, length), 2 * num_relations, dtype=np.int64)
        mask = np.zeros((T, J), dtype=bool)
        n = np.zeros((T, J), dtype=np.int64)
        for t, bs in enumerate(bodies):
            padded[t, : len(bs)] = pad_bodies(bs, num_relations, length)
            mask[t, : len(bs)] = True
            n[t, : len(bs)] = counts[t]
        return cls(
            torch.tensor(list(heads), dtype=torch.long).reshape(-1, 3),
            torch.from_numpy(padded),
            torch.zeros(T, J, dtype=torch.float64),
            torch.from_numpy(n),
            torch.from_numpy(mask),
        )
