"""`fednsl train --engine flower-sim` without -v prints only fednsl's own lines (one per round, as the output is not
a terminal, and the two closing lines): none of Flower's deprecation notices (twice before) or DEBUG lines (about a
dozen before), no progress bar (not a terminal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fednsl.config import dump_config
from tests.fednsl.federation.tiny_configs import tiny

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.flower]


def test_flower_sim_run_is_quiet_without_v(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    cfg = tmp_path / "tiny.yaml"
    dump_config(tiny("fedavg"), cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "HF_HUB_", "TRANSFORMERS_"))}
    out = subprocess.run(
        [sys.executable, "-m", "fednsl.cli.main", "train", str(cfg), "--engine", "flower-sim", "--out",
         str(tmp_path / "run"), "--set", "federation.client_timeout_s=600"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert not any("DEBUG" in ln or "DEPRECATED" in ln or "flwr" in ln for ln in lines), lines
    lines = [ln for ln in lines if not ln.startswith("WARNING fednsl")]  # fednsl's own (e.g. a slow client)
    progress = [ln for ln in out.stdout.splitlines() if " round " in ln or ln.endswith("writing plots…")]
    assert len(progress) == 3, progress  # piped: one line per round (2) and the note after the last
    lines = [ln for ln in lines if ln not in progress]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"wrote {tmp_path / 'run'}/:")
    assert lines[1].startswith("fedavg: accuracy ") and lines[1].endswith("summary.json")
