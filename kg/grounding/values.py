"""Build the (B, N, N, 2R+1) channel tensor the grounding engine reads from per-relation values (B, N, N, R)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def with_inverse_and_stay(
    rel_values: torch.Tensor, n_entities: Sequence[int] | torch.Tensor | None = None
) -> torch.Tensor:
    """Stack relations, inverses and the stay channel.

    Args:
        rel_values: (B, N, N, R) values in [0, 1], rel_values[b, h, t, r] = x_r(h, t).
        n_entities: real entity count per document (B,); entities ≥ n_entities[b] are padding and get all-zero rows
            and columns in every channel (including stay). None = no padding.

    Returns:
        (B, N, N, 2R+1): channels r (relation r), R+r (inverse: x_r transposed over the entity axes), 2R (identity
        on real entities).
    """
    if rel_values.dim() != 4 or rel_values.shape[1] != rel_values.shape[2]:
        raise ValueError(f"rel_values must have shape (B, N, N, R), got {tuple(rel_values.shape)}")
    b, n = rel_values.shape[:2]
    if n_entities is None:
        mask = torch.ones(b, n, dtype=torch.bool, device=rel_values.device)
    else:
        counts = torch.as_tensor(n_entities, device=rel_values.device).reshape(-1)
        if counts.shape[0] != b:
            raise ValueError(f"n_entities has {counts.shape[0]} entries for {b} documents")
        mask = torch.arange(n, device=rel_values.device)[None, :] < counts[:, None]
    pair = (mask[:, :, None] & mask[:, None, :]).to(rel_values.dtype)[..., None]
    x = rel_values * pair
    eye = torch.diag_embed(mask.to(rel_values.dtype))[..., None]
    return torch.cat([x, x.transpose(1, 2), eye], dim=-1)
