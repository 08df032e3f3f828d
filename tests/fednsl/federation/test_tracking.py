"""Progress bars (terminal only, -q, headline on the round bar), the metrics log's run.log lines, writes that fail
for want of room (one error naming the file, nothing lost), and the run lock."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fednsl.federation import tracking
from fednsl.federation.tracking import (
    Checkpoints,
    MetricsLog,
    RunDirBusyError,
    RunWriteError,
    progress_bar,
    progress_disabled,
    progress_enabled,
    progress_lines,
    progress_note,
    round_postfix,
    run_lock,
)


class _Tty:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


def test_bars_only_on_a_terminal_and_never_with_quiet(monkeypatch) -> None:
    monkeypatch.setattr(tracking.sys, "stdout", _Tty(True))
    monkeypatch.setattr(tracking.sys, "stderr", _Tty(True))
    assert progress_enabled()
    assert not progress_bar(range(3), file=_Tty(True)).disable
    assert progress_bar(range(3), enabled=False, file=_Tty(True)).disable
    with progress_disabled():
        with progress_disabled(False):
            assert not progress_enabled()
        assert progress_bar(range(3), file=_Tty(True)).disable
    assert progress_enabled()
    monkeypatch.setattr(tracking.sys, "stdout", _Tty(False))  # `fednsl train ... > log`
    assert not progress_enabled()
    assert progress_bar(range(3), file=_Tty(True)).disable


class _Written(_Tty):
    def __init__(self, tty: bool) -> None:
        super().__init__(tty)
        self.text, self.flushes = "", 0

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        self.flushes += 1


def test_progress_lines_go_to_stdout_flushed_where_no_bar_can_show(monkeypatch) -> None:
    """`fednsl train ... | cat`: each progress line reaches the pipe at once (a pipe is block-buffered)."""
    out, err = _Written(False), _Written(True)
    monkeypatch.setattr(tracking.sys, "stdout", out)
    monkeypatch.setattr(tracking.sys, "stderr", err)
    assert progress_lines()
    progress_note("run round 1/2 · 0.1 s")
    assert out.text == "run round 1/2 · 0.1 s\n" and out.flushes == 1 and err.text == ""
    progress_note("not this", enabled=False)
    with progress_disabled():  # -q
        assert not progress_lines()
        progress_note("nor this")
    assert out.text.count("\n") == 1
    monkeypatch.setattr(tracking.sys, "stdout", _Written(True))  # a terminal: bars, and notes above them
    assert not progress_lines()
    progress_note("done; writing plots…")
    assert "done; writing plots…" in err.text

def test_round_postfix_shows_the_headline_with_its_reference() -> None:
    latest = {"evaluate": {"seen_f1": 0.8661, "backbone_seen_f1": 0.7369, "unseen_f1": 0.81}, "round": {"x": 1.0}}
    assert round_postfix("fednsl", latest) == "seen F1 0.866 (backbone 0.737) · unseen F1 0.81"
    # a method without a declared headline (the backbone's FedAvg phase) shows its losses
    assert round_postfix("not-declared", {"train": {"train_loss": 0.51234, "n": 3}}) == "train_loss 0.512"
    assert round_postfix("fednsl", {}) == ""


def test_metrics_log_keeps_latest_server_metrics_and_logs_them(tmp_path, caplog) -> None:
    m = MetricsLog(tmp_path)
    with caplog.at_level(logging.INFO, logger="fednsl.tracking"):
        m.log(1, "server", "evaluate", {"seen_f1": 0.5, "evaluate.time_s": 1.0})
        m.log(1, "client:c0", "evaluate", {"seen_f1": 0.25})
        m.log(2, "server", "evaluate", {"seen_f1": 0.75})
    assert m.latest == {"evaluate": {"seen_f1": 0.75}}
    assert [r.getMessage() for r in caplog.records] == ["round 1 evaluate: seen_f1=0.5", "round 2 evaluate: seen_f1=0.75"]
    m.truncate_after(1)  # rewriting the files on resume logs nothing again
    assert [r["round"] for r in m.rows()] == [1, 1] and len(caplog.records) == 2
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1:] == [
        "1,server,evaluate,seen_f1,0.5", "1,server,evaluate,evaluate.time_s,1.0", "1,client:c0,evaluate,seen_f1,0.25"]


def _no_room(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _metrics(run: Path, rounds: int) -> MetricsLog:
    run.mkdir(exist_ok=True)
    m = MetricsLog(run)
    for rnd in range(1, rounds + 1):
        m.log(rnd, "server", "round", {"loss": 1.0 / rnd})
        m.log(rnd, "client:c0", "train", {"loss": 2.0 / rnd})
    return m


def test_a_full_disk_while_logging_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _metrics(tmp_path, 1)
    monkeypatch.setattr(Path, "open", _no_room)
    with pytest.raises(RunWriteError) as info:
        m.log(2, "server", "round", {"loss": 0.5})
    assert str(info.value) == f"could not write {tmp_path / 'metrics.jsonl'} (No space left on device)"
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)


def test_truncate_after_loses_nothing_when_the_disk_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _metrics(tmp_path, 3)
    before = [(p.name, p.read_bytes()) for p in (m.jsonl, m.csv)]
    monkeypatch.setattr(tracking.os, "replace", _no_room)
    with pytest.raises(RunWriteError, match="metrics.jsonl"):
        m.truncate_after(2)
    assert [(p.name, p.read_bytes()) for p in (m.jsonl, m.csv)] == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv", "metrics.jsonl"]  # no .tmp left
    monkeypatch.undo()
    m.truncate_after(2)
    assert [r["round"] for r in m.rows()] == [1, 1, 2, 2]
    fresh = _metrics(tmp_path / "fresh", 2)
    assert m.jsonl.read_bytes() == fresh.jsonl.read_bytes() and m.csv.read_bytes() == fresh.csv.read_bytes()


def test_a_torn_last_row_is_dropped_on_truncate(tmp_path: Path) -> None:
    m = _metrics(tmp_path, 2)
    with m.jsonl.open("a") as f:
        f.write('{"round": 3, "scope": "ser')  # the disk filled up mid-row
    m.truncate_after(2)
    assert [r["round"] for r in m.rows()] == [1, 1, 2, 2] and m.jsonl.read_text().endswith("}\n")


def test_a_checkpoint_that_cannot_be_written_leaves_the_older_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = Checkpoints(tmp_path, keep=2)
    ck.save(1, {"round": 1, "clients": {}, "strategy": {}})
    monkeypatch.setattr(Path, "write_bytes", _no_room)
    with pytest.raises(RunWriteError) as info:
        ck.save(2, {"round": 2, "clients": {}, "strategy": {}})
    assert str(info.value) == f"could not write {ck.dir / 'round_0002.pt'} (No space left on device)"
    assert [p.name for p in ck.dir.iterdir()] == ["round_0001.pt"]
    found = ck.latest()
    assert found is not None and found[0] == 1


def test_run_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    with run_lock(tmp_path) as path:
        assert path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunDirBusyError, match=rf"is in use by another fednsl run \(pid {os.getpid()}\)"):
            with run_lock(tmp_path):
                pass
        code = (
            "from pathlib import Path; from fednsl.federation.tracking import run_lock; "
            f"run_lock(Path({str(tmp_path)!r})).__enter__()"
        )
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert other.returncode == 1 and "RunDirBusyError" in other.stderr
    with run_lock(tmp_path):  # released at the end of the block
        pass
