"""`fednsl train` with its output piped (no terminal, so no bar): one line per round on stdout, flushed as the round
ends, then a line naming the work after the last round, then fednsl's two closing lines; `-q` drops the progress."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fednsl.config import dump_config
from fednsl.federation.loop import _closing_work, round_line
from tests.fednsl.federation.tiny_configs import tiny

ROOT = Path(__file__).resolve().parents[3]


def _train(tmp_path: Path, method: str, *extra: str) -> list[str]:
    cfg = tmp_path / f"{method}.yaml"
    dump_config(tiny(method, rounds=3), cfg)
    out = subprocess.run(
        [sys.executable, "-m", "fednsl.cli.main", "train", str(cfg), "--out", str(tmp_path / "run"), *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "it/s" not in out.stderr and "round/s" not in out.stderr  # no bar either
    return [ln for ln in out.stdout.splitlines() if not ln.startswith("WARNING fednsl")]


@pytest.mark.slow
def test_piped_train_prints_one_line_per_round_then_the_result(tmp_path: Path) -> None:
    lines = _train(tmp_path, "fedavg")
    name = "fedavg_blobs"
    rounds = [ln for ln in lines if ln.startswith(f"{name} round ")]
    assert len(rounds) == 3, lines
    elapsed = []
    for rnd, line in enumerate(rounds, 1):
        m = re.fullmatch(rf"{name} round {rnd}/3 · (\d+\.\d) s · accuracy \d\.\d+", line)
        assert m, line
        elapsed.append(float(m.group(1)))
    assert elapsed == sorted(elapsed)
    assert lines[:3] == rounds  # nothing before them
    assert lines[3] == f"{name}: rounds done; writing plots…"
    assert lines[4].startswith(f"wrote {tmp_path / 'run'}/:")
    assert lines[5].startswith("fedavg: accuracy ") and lines[5].endswith("summary.json") and len(lines) == 6


@pytest.mark.slow
def test_quiet_prints_no_progress_lines(tmp_path: Path) -> None:
    lines = _train(tmp_path, "fedavg", "-q")
    assert len(lines) == 2 and lines[0].startswith("wrote ") and lines[1].startswith("fedavg: accuracy "), lines


def test_round_line_and_the_closing_note_by_hand() -> None:
    assert round_line("fednsl_synthetic (p2p)", 2, 5, 47.44, "seen F1 0.889") == (
        "fednsl_synthetic (p2p) round 2/5 · 47.4 s · seen F1 0.889"
    )
    assert round_line("x", 1, 1, 0.04) == "x round 1/1 · 0.0 s"
    assert _closing_work("fednsl") == "writing rule counts and plots"  # a rule learner: counts on client documents
    assert _closing_work("fedstl") == "writing plots"
