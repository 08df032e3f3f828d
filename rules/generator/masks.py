"""Validity of bodies during decoding, batched: well-formedness and the optional type chain (:class:`_Validity`),
and :func:`check_bodies` for complete bodies."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rules.generator.constraints import TypeConstraints


class _Validity:
    """Per-row decoding state giving the allowed next tokens (B, V) at each step.

    Rows are (triple, prefix) pairs. Without constraints: step 0 → any real token; later → any token until a
    pad was emitted, then only pad. With constraints it additionally tracks the set S of types the prefix can
    end at and allows a real token c only if some type in its image reaches the tail type within the remaining
    steps (C table), and pad only if the tail type is in S (the chain is complete). This look-ahead means a
    row never gets stuck; rows with no allowed first token are "uncompletable" (reported, given pad to keep
    the softmax finite, and dropped by the caller).
    """

    def __init__(self, triples: torch.Tensor, max_len: int, num_relations: int, constraints: TypeConstraints | None):
        self.b = triples.shape[0]
        self.v = 2 * num_relations + 1
        self.pad = 2 * num_relations
        self.max_len = max_len
        self.step = 0
        self.device = triples.device
        self.ended = torch.zeros(self.b, dtype=torch.bool, device=self.device)
        self.constraints = constraints
        if constraints is not None:
            if constraints.num_relations != num_relations:
                raise ValueError(
                    f"TypeConstraints has R={constraints.num_relations} relations, the generator R={num_relations}"
                )
            e = constraints.num_types
            if triples.numel() and int(triples[:, 1:].max()) >= e:
                raise ValueError(f"triple entity type >= TypeConstraints.num_types={e}")
            self.allowed = constraints.allowed.to(self.device)
            # (E, V*E): move[s, c*E + d] = allowed[c, s, d]
            self.move = self.allowed.permute(1, 0, 2).reshape(e, -1).float()
            self.tail = triples[:, 2]
            self.types = F.one_hot(triples[:, 1], e).bool()  # S: (B, E)
            self.reach = constraints.completion_table(self.tail, max_len)  # (B, L+1, E)
            self._next: torch.Tensor | None = None

    def mask(self) -> torch.Tensor:
        """Allowed next tokens (B, V) bool at the current step."""
        allow = torch.zeros(self.b, self.v, dtype=torch.bool, device=self.device)
        if self.constraints is None:
            allow[:, : self.pad] = True
        else:
            remaining = self.max_len - 1 - self.step
            nxt = (self.types.float() @ self.move > 0).view(self.b, self.v, -1)  # (B, V, E) image of S per token
            self._next = nxt
            ok = (nxt & self.reach[:, remaining, None, :]).any(-1)
            allow[:, : self.pad] = ok[:, : self.pad]
        if self.step > 0:
            if self.constraints is None:
                allow[:, self.pad] = True
            else:
                allow[:, self.pad] = self.types.gather(1, self.tail[:, None]).squeeze(1)
        allow[self.ended] = False
        allow[self.ended, self.pad] = True
        return allow

    def advance(self, tokens: torch.Tensor) -> None:
        """Consume the chosen tokens (B,) of the current step (call after ``mask``)."""
        if self.constraints is not None:
            assert self._next is not None
            real = tokens != self.pad
            new = self._next[torch.arange(self.b, device=self.device), tokens]
            self.types = torch.where(real[:, None], new, self.types)
        self.ended = self.ended | (tokens == self.pad)
        self.step += 1


def check_bodies(bodies: torch.Tensor, num_relations: int) -> torch.Tensor:
    """Well-formedness (B,) bool of padded bodies (B, L): tokens in [0, 2R], first token real, no real after pad."""
    pad = 2 * num_relations
    in_range = ((bodies >= 0) & (bodies <= pad)).all(-1)
    is_pad = bodies == pad
    first_real = ~is_pad[:, 0] if bodies.shape[1] else torch.zeros_like(in_range)
    after_pad = torch.cummax(is_pad.long(), dim=1).values.bool()
    return in_range & first_real & ~(after_pad & ~is_pad).any(-1)
