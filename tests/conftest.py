"""Shared fixtures: where the real data lives, a skip when it is absent, and one torch thread for tiny models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``$FEDNSL_SHARED_DATA`` or ``<repo>/../shared/data`` (the layout CI uses)."""
    return Path(os.environ.get("FEDNSL_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ``../shared/data``; skips the test with a clear message when it is absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(
            f"real data not found at {path}: put the shared data folder beside the repo "
            "or set FEDNSL_SHARED_DATA (see datasets/README.md)"
        )
    return path


@pytest.fixture(scope="session")
def dwie_dir(shared_data: Path) -> Path:
    path = shared_data / "dwie"
    if not (path / "dwie_annos.tar.gz").exists():
        pytest.skip(f"DWIE annotations not found under {path}")
    return path


@pytest.fixture(scope="session")
def fhwa_path(shared_data: Path) -> Path:
    path = shared_data / "fhwa_logicp" / "fhwa_100_clients.npz"
    if not path.exists():
        pytest.skip(f"FHWA traffic set not found at {path}")
    return path


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is much faster than two on a shared 2-core machine.

    Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    from fednsl.common.torch_utils import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that write fednsl's cache write it under the test's own folder (``FEDNSL_CACHE``)."""
    monkeypatch.setenv("FEDNSL_CACHE", str(tmp_path / "cache"))
