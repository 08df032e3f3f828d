"""Semiring matrix products over gathered operand pairs: the inner loop of :func:`kg.grounding.path_scores`.

One call computes, for every pair g and document b,

    out[b, g] = S[b, parents[g]] ⊗ V[b, tokens[g]]          (all (B, N, N) matrices)

with ⊗ the max-product product (A ⊗ B)[i, j] = max_k A[i, k]·B[k, j] (FedNSL Eq. 8, LogiRE's max-plus in log space)
or the sum-product product (ordinary matmul: it counts weighted paths). Max-product never materialises the
(N, N, N) product tensor: a compiled numba kernel (CPU, float32/float64) streams over the intermediate entity k
with four output rows in L1, skipping k where S[i, k] <= eps (eps = 0 skips only exact zeros, e.g. padded
entities and the off-diagonal of the stay matrix); the portable torch fallback (GPU, other dtypes, autograd) loops
over k on chunks of pairs.

Threads: the numba kernels are serial and release the GIL; slices of pairs run on the calling thread plus helper
threads, ``torch.get_num_threads()`` in all. (numba's own ``parallel=True`` uses an OpenMP pool whose spinning
workers slowed every later torch op in the process 10-50x on a busy machine, so it is not used.)
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

try:  # numba is optional: the torch fallback gives identical results, only slower on CPU.
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is absent (then only HAVE_NUMBA is read)
    HAVE_NUMBA = False

BACKENDS = ("auto", "numba", "torch")
# CPU fallback: keep every elementwise op below torch's parallel grain size (32768 elements), so it runs in the
# calling thread; an OpenMP region per tiny op costs 10-50x the work itself on a busy machine.
_TORCH_CHUNK_ELEMS = 1 << 15


if HAVE_NUMBA:

    @numba.njit(fastmath=True, cache=True, nogil=True)
    def _maxprod_nb(S, V, pidx, tidx, oidx, eps, out, g0, g1):  # pragma: no cover - compiled
        """out[b, oidx[g]] = S[b, pidx[g]] ⊗_max V[b, tidx[g]]; four output rows per sweep over k (register reuse
        of V[k]); partial values <= eps contribute nothing (a - a keeps the dtype, so the j-loop vectorises)."""
        n_docs = S.shape[0]
        n_rows = S.shape[2]
        n_inner = S.shape[3]
        n_cols = V.shape[3]
        for bg in range(n_docs * (g1 - g0)):
            b = bg // (g1 - g0)
            g = g0 + bg % (g1 - g0)
            A = S[b, pidx[g]]
            W = V[b, tidx[g]]
            O = out[b, oidx[g]]  # noqa: E741  (the output matrix O of the equation)
            r0 = np.empty(n_cols, S.dtype)
            r1 = np.empty(n_cols, S.dtype)
            r2 = np.empty(n_cols, S.dtype)
            r3 = np.empty(n_cols, S.dtype)
            i = 0
            while i + 4 <= n_rows:
                for j in range(n_cols):
                    r0[j] = 0.0
                    r1[j] = 0.0
                    r2[j] = 0.0
                    r3[j] = 0.0
                for k in range(n_inner):
                    a0 = A[i, k]
                    a1 = A[i + 1, k]
                    a2 = A[i + 2, k]
                    a3 = A[i + 3, k]
                    if a0 <= eps and a1 <= eps and a2 <= eps and a3 <= eps:
                        continue
                    if a0 <= eps:
                        a0 = a0 - a0
                    if a1 <= eps:
                        a1 = a1 - a1
                    if a2 <= eps:
                        a2 = a2 - a2
                    if a3 <= eps:
                        a3 = a3 - a3
                    w = W[k]
                    for j in range(n_cols):
                        x = w[j]
                        r0[j] = max(r0[j], a0 * x)
                        r1[j] = max(r1[j], a1 * x)
                        r2[j] = max(r2[j], a2 * x)
                        r3[j] = max(r3[j], a3 * x)
                O[i] = r0
                O[i + 1] = r1
                O[i + 2] = r2
                O[i + 3] = r3
                i += 4
            while i < n_rows:
                for j in range(n_cols):
                    r0[j] = 0.0
                for k in range(n_inner):
                    a0 = A[i, k]
                    if a0 <= eps:
                        continue
                    w = W[k]
                    for j in range(n_cols):
                        r0[j] = max(r0[j], a0 * w[j])
                O[i] = r0
                i += 1

    @numba.njit(fastmath=True, cache=True, nogil=True)
    def _maxprod_arg_nb(S, V, pidx, tidx, oidx, eps, out, g0, g1, arg):  # pragma: no cover - compiled
        n_docs = S.shape[0]
        n_rows = S.shape[2]
        n_inner = S.shape[3]
        n_cols = V.shape[3]
        for bg in range(n_docs * (g1 - g0)):
            b = bg // (g1 - g0)
            g = g0 + bg % (g1 - g0)
            p = pidx[g]
            t = tidx[g]
            o = oidx[g]
            for i in range(n_rows):
                row = out[b, o, i]
                arow = arg[b, o, i]
                for j in range(n_cols):
                    row[j] = 0.0
                    arow[j] = 0
                for k in range(n_inner):
                    a = S[b, p, i, k]
                    if a <= eps:
                        continue
                    vk = V[b, t, k]
                    for j in range(n_cols):
                        v = a * vk[j]
                        if v > row[j]:
                            row[j] = v
                            arow[j] = k

    @numba.njit(cache=True, nogil=True)
    def _fill_channels_nb(values, table):  # pragma: no cover - compiled
        """table[b, c, h, t] = values[b, h, t, c] for c < C (channel-major copy of the values)."""
        n_docs, n_heads, n_tails, n_ch = values.shape
        for b in range(n_docs):
            for h in range(n_heads):
                for t in range(n_tails):
                    for c in range(n_ch):
                        table[b, c, h, t] = values[b, h, t, c]

    @numba.njit(cache=True, nogil=True)
    def _gather_rows_nb(table, rows, out, j0, j1):  # pragma: no cover - compiled
        """out[b, j] = table[b, rows[j]] for j in [j0, j1)."""
        for b in range(table.shape[0]):
            for j in range(j0, j1):
                out[b, j] = table[b, rows[j]]


def fill_channels(values: torch.Tensor, table: torch.Tensor, backend: str) -> None:
    """table[:, :C] = values (B, N, N, C) permuted to (B, C, N, N); single-threaded numba copy on the numba backend
    (a torch copy opens an OpenMP region, slow to start on a busy machine)."""
    if backend == "numba":
        _fill_channels_nb(values.detach().contiguous().numpy(), table.numpy())
    else:
        table[:, : values.shape[-1]] = values.permute(0, 3, 1, 2)


def gather_rows(table: torch.Tensor, rows: np.ndarray, backend: str) -> torch.Tensor:
    """out[:, j] = table[:, rows[j]] → (B, J, N, N)."""
    if backend != "numba":
        return table.index_select(1, torch.as_tensor(rows, device=table.device))
    n_docs, _, n1, n2 = table.shape
    out = table.new_empty(n_docs, len(rows), n1, n2)
    if len(rows):
        args = (table.numpy(), _as_index(rows), out.numpy())
        _run_sliced(_gather_rows_nb, args, len(rows), n_docs * len(rows) * n1 * n2)
    return out


def numba_usable(S: torch.Tensor, V: torch.Tensor) -> bool:
    """Whether the numba kernel can take these operands (CPU, same float32/float64 dtype, no autograd)."""
    needs_grad = torch.is_grad_enabled() and (S.requires_grad or V.requires_grad)
    return (
        HAVE_NUMBA
        and S.device.type == "cpu"
        and V.device.type == "cpu"
        and S.dtype == V.dtype
        and S.dtype in (torch.float32, torch.float64)
        and not needs_grad
    )


def pick_backend(backend: str, S: torch.Tensor, V: torch.Tensor) -> str:
    """Resolve ``backend`` ("auto" | "numba" | "torch") for these operands; raise if "numba" cannot run."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "numba" if numba_usable(S, V) else "torch"
    if backend == "numba" and not numba_usable(S, V):
        raise ValueError(
            "backend='numba' needs numba installed and CPU float32/float64 tensors without autograd "
            f"(got numba={'yes' if HAVE_NUMBA else 'no'}, device={S.device}, dtype={S.dtype})"
        )
    return backend


_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0


def _run_sliced(kernel, args: tuple, n_pairs: int, work: int, tail: tuple = ()) -> None:
    """Run ``kernel(*args, g0, g1, *tail)`` over slices of [0, n_pairs) on up to torch.get_num_threads() threads
    (``work``: total elementary operations, to skip threads for small jobs).

    The calling thread works too and helpers take slices from a shared iterator, so a helper that the OS schedules
    late (a busy machine) finds no work left instead of holding up the level.
    """
    global _POOL, _POOL_SIZE
    n_threads = max(1, torch.get_num_threads())
    # below ~1M multiply-max operations a thread hand-off costs more than it saves
    n_threads = min(n_threads, n_pairs, max(1, work // (1 << 20)))
    if n_threads == 1:
        kernel(*args, 0, n_pairs, *tail)
        return
    if _POOL is None or _POOL_SIZE < n_threads - 1:
        if _POOL is not None:
            _POOL.shutdown(wait=False)
        _POOL = ThreadPoolExecutor(max_workers=n_threads - 1, thread_name_prefix="kg-grounding")
        _POOL_SIZE = n_threads - 1
    n_slices = min(n_pairs, 4 * n_threads)
    bounds = np.linspace(0, n_pairs, n_slices + 1).astype(np.int64).tolist()
    todo = iter(range(n_slices))  # next() on a range iterator is atomic under the GIL
    lock = threading.Lock()
    left = [n_slices]
    done = threading.Event()
    errors: list[BaseException] = []

    def take_slices() -> None:
        for s in todo:
            try:
                kernel(*args, bounds[s], bounds[s + 1], *tail)
            except BaseException as err:  # re-raised in the calling thread
                errors.append(err)
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    for _ in range(n_threads - 1):
        _POOL.submit(take_slices)
    take_slices()
    done.wait()
    if errors:
        raise errors[0]


def _as_index(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def maxprod_pairs(
    S: torch.Tensor,
    V: torch.Tensor,
    parents: np.ndarray,
    tokens: np.ndarray,
    out: torch.Tensor,
    out_index: np.ndarray,
    *,
    eps: float = 0.0,
    arg: torch.Tensor | None = None,
    backend: str = "auto",
) -> None:
    """out[:, out_index[g]] = S[:, parents[g]] ⊗_max V[:, tokens[g]] for every g (in place).

    Shapes: S (B, P, N, K), V (B, C, K, M), out (B, G', N, M); ``arg`` (B, G', N, M) int32, if given, receives the
    first maximising k. Entries S[b, p, i, k] <= eps are skipped (eps = 0: exact).
    """
    if len(parents) == 0:
        return
    if pick_backend(backend, S, V) == "numba":
        args = (
            S.detach().numpy(),
            V.detach().numpy(),
            _as_index(parents),
            _as_index(tokens),
            _as_index(out_index),
            float(eps),
            out.numpy(),
        )
        work = len(parents) * S.shape[0] * S.shape[2] * S.shape[3] * V.shape[3]
        if arg is None:
            _run_sliced(_maxprod_nb, args, len(parents), work)
        else:
            _run_sliced(_maxprod_arg_nb, args, len(parents), work, (arg.numpy(),))
        return
    _maxprod_torch(S, V, parents, tokens, out, out_index, eps=eps, arg=arg)


def _maxprod_torch(
    S: torch.Tensor,
    V: torch.Tensor,
    parents: np.ndarray,
    tokens: np.ndarray,
    out: torch.Tensor,
    out_index: np.ndarray,
    *,
    eps: float,
    arg: torch.Tensor | None,
) -> None:
    """Portable max-product: loop over the intermediate entity k on chunks of pairs (no (N, N, N) tensor)."""
    n_docs, _, n_rows, n_inner = S.shape
    n_cols = V.shape[-1]
    chunk = max(1, _TORCH_CHUNK_ELEMS // max(1, n_docs * n_rows * n_cols))
    if S.device.type != "cpu":
        chunk *= 64
    dev = S.device
    for g0 in range(0, len(parents), chunk):
        p = torch.as_tensor(parents[g0 : g0 + chunk], device=dev)
        t = torch.as_tensor(tokens[g0 : g0 + chunk], device=dev)
        o_idx = torch.as_tensor(out_index[g0 : g0 + chunk], device=dev)
        A = S.index_select(1, p)  # index_select/index_copy_: advanced indexing spawns threads per tiny op
        A = A.masked_fill(A <= eps, 0)
        Bm = V.index_select(1, t)
        best = torch.zeros(n_docs, len(p), n_rows, n_cols, dtype=out.dtype, device=dev)
        best_k = torch.zeros(best.shape, dtype=torch.int32, device=dev) if arg is not None else None
        for k in range(n_inner):
            prod = A[..., k : k + 1] * Bm[..., k : k + 1, :]
            if best_k is None:
                best = torch.maximum(best, prod)
            else:
                better = prod > best
                best = torch.where(better, prod, best)
                best_k.masked_fill_(better, k)
        out.index_copy_(1, o_idx, best)
        if arg is not None and best_k is not None:  # best_k exists exactly when arg does
            arg.index_copy_(1, o_idx, best_k)


def sumprod_pairs(
    S: torch.Tensor,
    V: torch.Tensor,
    parents: np.ndarray,
    tokens: np.ndarray,
    out: torch.Tensor,
    out_index: np.ndarray,
) -> None:
    """out[:, out_index[g]] = S[:, parents[g]] @ V[:, tokens[g]] (sum-product = batched matmul, chunked)."""
    if len(parents) == 0:
        return
    n_docs, _, n_rows, n_inner = S.shape
    chunk = max(1, (1 << 22) // max(1, n_docs * n_rows * n_inner))
    dev = S.device
    for g0 in range(0, len(parents), chunk):
        p = torch.as_tensor(parents[g0 : g0 + chunk], device=dev)
        t = torch.as_tensor(tokens[g0 : g0 + chunk], device=dev)
        o_idx = torch.as_tensor(out_index[g0 : g0 + chunk], device=dev)
        out.index_copy_(1, o_idx, torch.matmul(S.index_select(1, p), V.index_select(1, t)))
