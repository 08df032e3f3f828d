"""Path scores φ_j(h, t) for a batch of documents and rule bodies (FedNSL Eq. 8; LogiRE PathScorer, spec §5.2).

For a body b = (b_1, ..., b_L) over tokens (c < R: relation c; R <= c < 2R: inverse of relation c-R; stay token
2R = identity/padding), and a document with fuzzy edge values x ∈ [0, 1] (values[b, h, t, c]):

    max-product:  φ_b(h, t) = max_{e_1..e_{L-1}} Π_{k=1}^{L} x_{b_k}(e_{k-1}, e_k),   e_0 = h, e_L = t
    sum-product:  κ_b(h, t) = Σ_{e_1..e_{L-1}} Π_{k=1}^{L} x_{b_k}(e_{k-1}, e_k)

Entity paths may revisit entities (as in LogiRE); a stay token keeps the path at the same entity. The max-product
value equals exp of LogiRE's max-plus score over log-values. Both are chain products of the (N, N) channel
matrices in the matching semiring, computed once per distinct body prefix (:mod:`kg.grounding.plan`).
"""

from __future__ import annotations

import numpy as np
import torch

from kg.grounding.checks import GroundingInputError, check_bodies, check_semiring, check_values, tensor_amax
from kg.grounding.kernels import fill_channels, gather_rows, maxprod_pairs, pick_backend, sumprod_pairs
from kg.grounding.memory import check_table_memory
from kg.grounding.plan import BodyPlan, build_plan


def stay_acts_as_identity(values: torch.Tensor, stay_id: int) -> bool:
    """True if dropping stay tokens from bodies cannot change any path score.

    Holds when the (diagonal) stay channel D has entries in {0, 1} and D[e, e] = 0 only for entities e with no
    edge at all (zero rows and columns in every other channel, e.g. padded entities): then M·D = D·M = M for every
    channel M and D·D = D, in both semirings.
    """
    diag = values[..., stay_id].diagonal(dim1=1, dim2=2)  # (B, N)
    if not bool(((diag == 0) | (diag == 1)).all()):
        return False
    off = diag == 0
    if not bool(off.any()):
        return True
    # the stay channel is zero on these rows/columns already (diagonal, D[e, e] = 0), so all channels may be checked
    row_max = tensor_amax(values, (2, 3)).to(off.device)  # (B, N): entity as head
    col_max = tensor_amax(values, (1, 3)).to(off.device)  # (B, N): entity as tail
    return not bool(((row_max != 0) & off).any()) and not bool(((col_max != 0) & off).any())


def prepare(
    values: torch.Tensor,
    bodies: torch.Tensor | BodyPlan,
    stay_id: int | None,
    validate: bool,
) -> BodyPlan:
    """Validate inputs and return the body trie (canonical when the stay channel acts as the identity)."""
    if isinstance(bodies, BodyPlan):
        if stay_id is not None and stay_id != bodies.stay_id:
            raise GroundingInputError(f"stay_id={stay_id} differs from the plan's stay_id={bodies.stay_id}")
        stay_id = bodies.stay_id
        raw = bodies.bodies
    else:
        raw = bodies
    if validate:
        stay = check_values(values, stay_id)
        raw = check_bodies(raw, values.shape[-1])
    else:
        stay = values.shape[-1] - 1 if stay_id is None else stay_id
        raw = raw.detach().cpu()
    canonical = stay_acts_as_identity(values.detach(), stay)
    if isinstance(bodies, BodyPlan) and bodies.canonical == canonical:
        return bodies
    return build_plan(raw, stay, canonical=canonical)


def level_offsets(plan: BodyPlan, n_channels: int) -> list[int]:
    """Row offset of each trie level in the node table: channels (level 1) first, then levels 2, 3, ..."""
    offsets = [0, n_channels]
    for parents in plan.parents:
        offsets.append(offsets[-1] + len(parents))
    return offsets


def body_rows(plan: BodyPlan, offsets: list[int]) -> np.ndarray:
    """Table row holding each body's result: the stay channel (all-stay body), a channel, or a trie node."""
    level = plan.body_level
    node = plan.prefix_nodes[np.arange(len(level)), np.maximum(level - 1, 0)]
    rows = np.asarray(offsets, dtype=np.int64)[np.maximum(level - 1, 0)] + node
    return np.where(level == 0, plan.stay_id, rows).astype(np.int64)


def apply_pairs(
    prev: torch.Tensor,
    V: torch.Tensor,
    parents: np.ndarray,
    tokens: np.ndarray,
    dest: torch.Tensor,
    dest_index: np.ndarray,
    stay_id: int,
    semiring: str,
    *,
    eps: float,
    backend: str,
    arg: torch.Tensor | None = None,
    arg_index: np.ndarray | None = None,
) -> None:
    """dest[:, dest_index[g]] = prev[:, parents[g]] ⊗ V[:, tokens[g]] (in place).

    ``arg[:, arg_index[g]]`` (int32, optional) receives the maximising intermediate entity. Stay tokens (raw plans
    only) are a diagonal scaling of the columns: prev[:, p] · diag(D), whose argmax is the column itself.
    """
    if len(parents) == 0:
        return
    arg_at = dest_index if arg_index is None else arg_index
    is_stay = tokens == stay_id
    gen = np.nonzero(~is_stay)[0]
    if len(gen):
        if semiring == "max-product":
            if arg is None:
                maxprod_pairs(prev, V, parents[gen], tokens[gen], dest, dest_index[gen], eps=eps, backend=backend)
            else:
                # the argmax kernel writes values and argmax at the same index: run it on a scratch pair
                tmp = dest.new_empty(dest.shape[0], len(gen), *dest.shape[2:])
                tmp_arg = torch.empty(tmp.shape, dtype=torch.int32, device=dest.device)
                order = np.arange(len(gen))
                maxprod_pairs(prev, V, parents[gen], tokens[gen], tmp, order, eps=eps, arg=tmp_arg, backend=backend)
                dest.index_copy_(1, torch.as_tensor(dest_index[gen], device=dest.device), tmp)
                arg.index_copy_(1, torch.as_tensor(arg_at[gen], device=dest.device), tmp_arg)
        else:
            sumprod_pairs(prev, V, parents[gen], tokens[gen], dest, dest_index[gen])
    st = np.nonzero(is_stay)[0]
    if len(st):
        n = V.shape[-1]
        d = V[:, stay_id].diagonal(dim1=1, dim2=2)  # (B, N)
        scaled = prev.index_select(1, torch.as_tensor(parents[st], device=V.device)) * d[:, None, None, :]
        dest.index_copy_(1, torch.as_tensor(dest_index[st], device=V.device), scaled)
        if arg is not None:
            eye_arg = torch.arange(n, dtype=torch.int32, device=V.device).expand(arg.shape[0], len(st), n, n)
            arg.index_copy_(1, torch.as_tensor(arg_at[st], device=V.device), eye_arg.contiguous())


def node_table(
    values: torch.Tensor,
    plan: BodyPlan,
    semiring: str,
    *,
    eps: float,
    backend: str,
    want_arg: bool = False,
) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
    """Run the trie DP. Returns (T, offsets, arg): T (B, C + #nodes, N, N) holds the channel matrices in rows
    [0, C) and each level-k node in rows offsets[k-1] + node; arg (B, #nodes, N, N) int32 (rows shifted by C) holds
    the maximising intermediate entity of each node when ``want_arg``."""
    n_docs, n, _, n_channels = values.shape
    offsets = level_offsets(plan, n_channels)
    check_table_memory(
        n_docs,
        n,
        offsets[-1] + (offsets[-1] - n_channels if want_arg else 0) + len(plan.body_level),
        values.element_size(),
    )
    table = values.new_empty(n_docs, offsets[-1], n, n)
    backend = pick_backend(backend, table, table)
    fill_channels(values, table, backend)
    arg = None
    if want_arg:
        arg = torch.empty(n_docs, offsets[-1] - n_channels, n, n, dtype=torch.int32, device=values.device)
    for k, (parents, tokens) in enumerate(zip(plan.parents, plan.tokens), start=2):
        parent_rows = parents if k == 2 else parents + offsets[k - 2]
        dest = offsets[k - 1] + np.arange(len(parents))
        apply_pairs(
            table,
            table,
            parent_rows,
            tokens,
            table,
            dest,
            plan.stay_id,
            semiring,
            eps=eps,
            backend=backend,
            arg=arg,
            arg_index=None if arg is None else dest - n_channels,
        )
    return table, offsets, arg


def path_scores(
    values: torch.Tensor,
    bodies: torch.Tensor | BodyPlan,
    semiring: str = "max-product",
    *,
    stay_id: int | None = None,
    eps: float = 0.0,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Path scores of every body for every entity pair of every document.

    Args:
        values: (B, N, N, C) fuzzy edge values in [0, 1]; C = 2R+1 channels (relations, inverses, stay).
            Padded entities are all-zero rows/columns.
        bodies: (J, L) int64 token ids (L ≤ 3 in FedNSL, any L supported), short bodies padded with ``stay_id``;
            or a :class:`BodyPlan` from :func:`kg.grounding.build_plan` to reuse across batches.
        semiring: "max-product" (φ, FedNSL Eq. 8) or "sum-product" (weighted path count, rule confidence).
        stay_id: the stay/padding token (default C - 1). Its channel must be diagonal.
        eps: max-product only: partial path values <= eps are skipped. The result is then an underestimate by
            at most (L-1)·eps in absolute terms (0 = exact; use eps ≤ 5e-5 to stay within 1e-4 for L = 3).
        backend: "auto" (numba kernel on CPU float32/float64 without autograd, else torch), "numba" or "torch".
        validate: check shapes, dtypes, token range, NaN and [0, 1] range (cheap; disable only in hot loops
            whose inputs were checked upstream).

    Returns:
        (B, J, N, N) tensor of values' dtype and device: out[b, j, h, t] = φ_j(h, t) in document b.
    """
    check_semiring(semiring)
    if eps < 0 or (eps > 0 and semiring != "max-product"):
        raise GroundingInputError(f"eps must be >= 0 and is only defined for max-product (got {eps} with {semiring})")
    plan = prepare(values, bodies, stay_id, validate)
    backend = pick_backend(backend, values, values)
    table, offsets, _ = node_table(values, plan, semiring, eps=eps, backend=backend)
    return gather_rows(table, body_rows(plan, offsets), backend)
