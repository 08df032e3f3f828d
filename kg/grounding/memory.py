"""The grounding table's memory, estimated before it is allocated.

:func:`~kg.grounding.engine.node_table` holds one (N, N) matrix per channel, per trie node (and, for
explanations, an int32 arg-max per node) and per body of the output, for each of B documents:
B · rows · N² · itemsize bytes. A document of 2,000 entities makes each matrix 16 MB, so a few hundred rules
need gigabytes. :func:`check_table_memory` refuses, with the estimate and the setting to change, a table above
the limit: ``FEDNSL_GROUNDING_MEMORY_GB`` (environment, default :data:`DEFAULT_LIMIT_GB`).
"""

from __future__ import annotations

import os

from kg.grounding.checks import GroundingInputError

DEFAULT_LIMIT_GB = 4.0
ENV = "FEDNSL_GROUNDING_MEMORY_GB"


def limit_bytes() -> float:
    """The grounding memory limit in bytes (``$FEDNSL_GROUNDING_MEMORY_GB``, default 4 GB)."""
    raw = os.environ.get(ENV, "")
    try:
        gb = float(raw) if raw.strip() else DEFAULT_LIMIT_GB
    except ValueError:
        raise GroundingInputError(f"{ENV}={raw!r} must be a number of gigabytes") from None
    return gb * 2**30


def table_bytes(n_docs: int, n: int, rows: int, itemsize: int) -> int:
    """Bytes of ``rows`` (N, N) matrices for each of ``n_docs`` documents."""
    return n_docs * rows * n * n * itemsize


def check_table_memory(n_docs: int, n: int, rows: int, itemsize: int) -> None:
    """Raise GroundingInputError when the table would exceed :func:`limit_bytes`."""
    need, limit = table_bytes(n_docs, n, rows, itemsize), limit_bytes()
    if need > limit:
        raise GroundingInputError(
            f"grounding {n_docs} document(s) of {n} entities with {rows} (N, N) matrices needs about "
            f"{need / 2**30:.1f} GB, above the limit of {limit / 2**30:g} GB; set {ENV} higher, ground fewer "
            "documents or rules at once, or leave out documents this large"
        )
