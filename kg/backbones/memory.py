"""Memory estimates for per-document relation scores, checked before anything is allocated.

A document of ``N`` entities and ``R`` relations gets (N, N, R) float32 scores, (N, N, P) pair features and,
while a pair-scoring backbone runs, per-pair hidden activations. Memory grows as N², so one document of a
few thousand entities can exhaust a machine (one of 2,000 entities reached 14 GB before this check).
:func:`document_bytes` gives the estimate; :func:`check_documents` refuses, with the estimate and the option
that changes the limit, any document above it; :func:`rows_per_chunk` sizes the row blocks in which pair
activations are computed so they stay within a fixed budget.
"""

from __future__ import annotations

from collections.abc import Iterable

from kg.documents import Document

FLOAT_BYTES = 4
DEFAULT_LIMIT_GB = 4.0
CHUNK_BUDGET_BYTES = 256 * 2**20  # pair activations computed at once (rows of the (N, N, ·) grid)


def document_bytes(n: int, num_relations: int, pair_dim: int) -> int:
    """Peak bytes of one document: per ordered pair its logits, sigmoid and values copy (3·R), its pair
    features (P) and, as a training document, its label row and feature copy (R + P); plus one block of pair
    activations (:data:`CHUNK_BUDGET_BYTES`). That is 4·N²·(4R + 2P) bytes + the block."""
    return FLOAT_BYTES * n * n * (4 * num_relations + 2 * pair_dim) + (CHUNK_BUDGET_BYTES if n else 0)


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GB"


def check_documents(docs: Iterable[Document], num_relations: int, pair_dim: int, limit_gb: float, option: str) -> None:
    """Raise ValueError naming the largest document whose estimate exceeds ``limit_gb`` (set by ``option``)."""
    worst = max(docs, key=lambda d: d.num_entities, default=None)
    if worst is None:
        return
    need = document_bytes(worst.num_entities, num_relations, pair_dim)
    if need > limit_gb * 2**30:
        raise ValueError(
            f"document {worst.doc_id} has {worst.num_entities} entities: its relation scores need about "
            f"{_gb(need)} (4 bytes x N^2 x (4R+2P) with R={num_relations}, P={pair_dim}), above the limit of "
            f"{limit_gb:g} GB; raise {option} or leave such documents out"
        )


def rows_per_chunk(n: int, bytes_per_pair: int, budget: int = CHUNK_BUDGET_BYTES) -> int:
    """Rows of an (n, n, ·) grid whose activations (``bytes_per_pair`` each) fit in ``budget`` (at least 1)."""
    return max(1, min(n, budget // max(1, n * bytes_per_pair)))
