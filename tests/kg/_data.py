"""Shared, cached loads of the real data for the kg tests (one parse per test session)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kg.documents import Corpus


@lru_cache(maxsize=4)
def dwie(path: Path) -> Corpus:
    """DWIE read from the shared annotations (``dwie_annos.tar.gz`` + LogiRE meta), cached."""
    from kg.dwie import read_dwie

    return read_dwie(path)


@lru_cache(maxsize=4)
def docred(path: Path) -> Corpus:
    from kg.docred import read_docred

    return read_docred(path)
