"""Entity-type constraints on rule bodies (:class:`TypeConstraints`): which relation chains can connect a head
type to a tail type."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class TypeConstraints:
    """Which entity-type transitions each token may make.

    ``allowed[c, s, d]`` (V, E, E) bool: token c may lead from an entity of type s to one of type d.
    Invariants (checked): inverse tokens are the transposes of their relations, stay is the identity.
    A body b_1..b_l is type-consistent for triple (r, h, t) iff there are types h = τ_0, τ_1, …, τ_l = t with
    ``allowed[b_k, τ_{k-1}, τ_k]`` for every k.
    """

    allowed: torch.Tensor

    def __post_init__(self) -> None:
        a = self.allowed
        if a.dtype != torch.bool or a.dim() != 3 or a.shape[0] % 2 != 1 or a.shape[1] != a.shape[2]:
            raise ValueError(
                f"TypeConstraints.allowed must be a bool tensor (2R+1, E, E), got {a.dtype} {tuple(a.shape)}"
            )
        r = (a.shape[0] - 1) // 2
        if not torch.equal(a[r : 2 * r], a[:r].transpose(1, 2)):
            raise ValueError(
                "TypeConstraints.allowed: inverse tokens (R..2R-1) must be the transposes of relations 0..R-1"
            )
        if not torch.equal(a[2 * r], torch.eye(a.shape[1], dtype=torch.bool, device=a.device)):
            raise ValueError("TypeConstraints.allowed: the stay token 2R must keep the type (identity)")

    @property
    def num_relations(self) -> int:
        return (self.allowed.shape[0] - 1) // 2

    @property
    def num_types(self) -> int:
        return self.allowed.shape[1]

    @classmethod
    def from_pairs(
        cls,
        pairs: Iterable[tuple[int, int, int]],
        num_relations: int,
        num_types: int,
        unobserved: Literal["any", "forbid"] = "any",
    ) -> TypeConstraints:
        """Build from observed (relation, source type, target type) triples.

        Inverse tokens get the swapped pairs, stay keeps the type. ``unobserved`` decides relations never seen in
        ``pairs``: "any" (types unknown → unconstrained, the default: "consistent where types are known") or
        "forbid" (the token can never be used).
        """
        rel = torch.zeros(num_relations, num_types, num_types, dtype=torch.bool)
        for r, s, d in pairs:
            if not (0 <= r < num_relations and 0 <= s < num_types and 0 <= d < num_types):
                raise ValueError(f"type pair ({r}, {s}, {d}) out of range for R={num_relations}, E={num_types}")
            rel[r, s, d] = True
        if unobserved == "any":
            unseen = ~rel.flatten(1).any(1)
            rel[unseen] = True
        elif unobserved != "forbid":
            raise ValueError(f"unobserved must be 'any' or 'forbid', got {unobserved!r}")
        allowed = torch.cat([rel, rel.transpose(1, 2), torch.eye(num_types, dtype=torch.bool)[None]], 0)
        return cls(allowed)

    def to(self, device: torch.device | str) -> TypeConstraints:
        return TypeConstraints(self.allowed.to(device))

    def completion_table(self, tail_types: torch.Tensor, max_steps: int) -> torch.Tensor:
        """C (B, max_steps+1, E) bool: C[b, k, s] = type s reaches tail_types[b] with at most k real tokens."""
        e = self.num_types
        real = self.allowed[: 2 * self.num_relations].to(tail_types.device).any(0).float()  # (E, E) one-step moves
        cur = F.one_hot(tail_types, e).bool()
        out = [cur]
        for _ in range(max_steps):
            cur = cur | ((cur.float() @ real.T) > 0)
            out.append(cur)
        return torch.stack(out, 1)

    def body_is_consistent(self, head_type: int, tail_type: int, body: Sequence[int]) -> bool:
        """Pure-Python reference: does some type chain h=τ_0..τ_l=t fit the real tokens of ``body``?"""
        pad = 2 * self.num_relations
        allowed = self.allowed.cpu().tolist()
        types = {head_type}
        for tok in body:
            if tok == pad:
                break
            types = {d for s in types for d in range(self.num_types) if allowed[tok][s][d]}
        return tail_type in types
