"""Input validation for the path-grounding engine (clear errors naming the argument and the offending entry)."""

from __future__ import annotations

import numpy as np
import torch

SEMIRINGS = ("max-product", "sum-product")
_NUMPY_DTYPES = (torch.float32, torch.float64)


def tensor_amax(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Max over ``dims``; single-threaded numpy for CPU float32/float64 (a torch reduction opens an OpenMP region
    whose cost dwarfs the work on a busy machine), torch otherwise."""
    if x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES and not x.requires_grad:
        return torch.from_numpy(np.asarray(x.numpy().max(axis=dims)))
    return x.amax(dim=dims)


def value_range(x: torch.Tensor) -> tuple[float, float]:
    """(min, max) of ``x`` in one pass; NaN anywhere gives NaN."""
    if x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES:
        a = x.detach().numpy()
        return float(a.min()), float(a.max())
    lo, hi = torch.aminmax(x.detach())
    return float(lo), float(hi)


class GroundingInputError(ValueError):
    """Raised when ``values``, ``bodies`` or a query handed to :mod:`kg.grounding` is malformed."""


def resolve_stay_id(n_channels: int, stay_id: int | None) -> int:
    """The stay/padding token id: ``stay_id`` if given, else ``C - 1`` (= 2R for C = 2R+1 channels)."""
    if stay_id is None:
        return n_channels - 1
    if isinstance(stay_id, bool) or not isinstance(stay_id, int):
        raise GroundingInputError(f"stay_id must be an int, got {type(stay_id).__name__}")
    if not 0 <= stay_id < n_channels:
        raise GroundingInputError(f"stay_id={stay_id} is outside the channel range [0, {n_channels})")
    return stay_id


def check_semiring(semiring: str) -> str:
    """Return ``semiring`` if it is one of :data:`SEMIRINGS`, else raise."""
    if semiring not in SEMIRINGS:
        raise GroundingInputError(f"semiring must be one of {SEMIRINGS}, got {semiring!r}")
    return semiring


def check_values(values: torch.Tensor, stay_id: int | None, *, check_range: bool = True) -> int:
    """Validate ``values`` (B, N, N, C) and return the resolved stay id.

    Checks: a floating tensor of rank 4 with equal entity axes; no NaN; (if ``check_range``) every entry in [0, 1];
    the stay channel ``values[..., stay_id]`` is diagonal (zero off the diagonal), as the identity/padding token
    must be.
    """
    if not isinstance(values, torch.Tensor):
        raise GroundingInputError(f"values must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 4:
        raise GroundingInputError(
            f"values must have shape (B, N, N, C) (documents, entities, entities, channels), got {tuple(values.shape)}"
        )
    b, n1, n2, c = values.shape
    if n1 != n2:
        raise GroundingInputError(f"values entity axes differ: shape {tuple(values.shape)} has N={n1} vs N={n2}")
    if c < 1:
        raise GroundingInputError("values has no channels (C = 0)")
    if not values.dtype.is_floating_point:
        raise GroundingInputError(
            f"values must be a floating tensor (probabilities in [0, 1]), got dtype {values.dtype}"
        )
    stay = resolve_stay_id(c, stay_id)
    if b == 0 or n1 == 0:
        return stay
    v = values.detach()
    lo, hi = value_range(v)
    if lo != lo or hi != hi or (check_range and not (lo >= 0 and hi <= 1)):
        nan = torch.isnan(v)
        if bool(nan.any()):
            idx = tuple(int(i) for i in nan.nonzero()[0])
            raise GroundingInputError(f"values contains NaN, first at index {idx} (doc, head, tail, channel)")
        bad = (v < 0) | (v > 1)
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise GroundingInputError(
            f"values must be probabilities in [0, 1]; values{list(idx)} = {float(v[idx]):.6g} "
            "(doc, head, tail, channel)"
        )
    off = v[..., stay] * (1 - torch.eye(n1, dtype=v.dtype, device=v.device))
    if bool((off != 0).any()):
        idx = tuple(int(i) for i in (off != 0).nonzero()[0])
        raise GroundingInputError(
            f"the stay channel values[..., {stay}] must be diagonal (the identity/padding token), but "
            f"values[{idx[0]}, {idx[1]}, {idx[2]}, {stay}] = {float(off[idx]):.6g}; pass the right stay_id"
        )
    return stay


def check_bodies(bodies: torch.Tensor, n_channels: int) -> torch.Tensor:
    """Validate ``bodies`` (J, L) int64 token ids in [0, C) and return them on the CPU."""
    if not isinstance(bodies, torch.Tensor):
        raise GroundingInputError(f"bodies must be a torch.Tensor of int64 token ids, got {type(bodies).__name__}")
    if bodies.dtype != torch.int64:
        raise GroundingInputError(f"bodies must have dtype torch.int64, got {bodies.dtype}")
    if bodies.dim() != 2:
        raise GroundingInputError(f"bodies must have shape (J, L), got {tuple(bodies.shape)}")
    if bodies.shape[1] < 1:
        raise GroundingInputError("bodies must have length L >= 1 (pad short bodies with the stay token)")
    bodies = bodies.detach().cpu()
    if bodies.numel():
        bad = (bodies < 0) | (bodies >= n_channels)
        if bool(bad.any()):
            j, k = (int(i) for i in bad.nonzero()[0])
            raise GroundingInputError(
                f"bodies[{j}, {k}] = {int(bodies[j, k])} is not a token id in [0, {n_channels}) "
                f"(C = {n_channels} channels)"
            )
    return bodies


def check_queries(
    doc_index: torch.Tensor | int, head: torch.Tensor | int, tail: torch.Tensor | int, n_docs: int, n_entities: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Broadcast (doc_index, head, tail) to three int64 vectors (Q,) and check their ranges."""
    out = []
    for name, x, hi in (("doc_index", doc_index, n_docs), ("head", head, n_entities), ("tail", tail, n_entities)):
        t = torch.as_tensor(x)
        if t.dtype.is_floating_point or t.dtype == torch.bool or t.is_complex():
            raise GroundingInputError(f"{name} must hold integer indices, got dtype {t.dtype}")
        if t.dim() > 1:
            raise GroundingInputError(f"{name} must be an int or a 1-D tensor, got shape {tuple(t.shape)}")
        t = t.to(torch.int64).reshape(-1).cpu()
        if t.numel() and (bool((t < 0).any()) or bool((t >= hi).any())):
            raise GroundingInputError(f"{name} has entries outside [0, {hi}): {t.tolist()[:10]}")
        out.append(t)
    try:
        d, h, t = torch.broadcast_tensors(*out)
    except RuntimeError as err:
        raise GroundingInputError(
            f"doc_index, head and tail must broadcast to one length, got {[len(o) for o in out]}"
        ) from err
    return d.contiguous(), h.contiguous(), t.contiguous()
