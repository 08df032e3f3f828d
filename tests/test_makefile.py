"""Make targets: `make test` says in one line when the SPIN tests will be skipped; `make test-fast` exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def test_spin_missing_is_reported_in_one_line() -> None:
    out = _make("spin-check", "SPIN=no-such-spin-program")
    assert out.returncode == 0
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "SPIN model-checking tests will be skipped" in lines[0]
    assert "apt-get install -y spin gcc" in lines[0]


def test_spin_present_prints_nothing() -> None:
    out = _make("spin-check", "SPIN=sh")  # any program on PATH stands for spin
    assert out.returncode == 0 and (out.stdout.strip() == "" or shutil.which("gcc") is None)


def test_test_targets_run_the_check_and_pytest() -> None:
    """`make -n` lists the recipes without running them (the venv stamp is taken as built)."""
    for target, marker in (("test", "pytest -q"), ("test-fast", 'pytest -q -m "not slow and not flower"')):
        out = subprocess.run(["make", "-n", "-C", str(ROOT), "-o", ".venv/.installed", target],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "command -v spin" in out.stdout and marker in out.stdout, out.stdout
