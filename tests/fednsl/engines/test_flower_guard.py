"""Children started through :mod:`fednsl.engines.flower_guard` die with their parent, ``kill -9`` included.

Plain processes stand for Flower's: a parent Python process opens a ledger and spawns a child (as fednsl spawns
the SuperLink), which starts one grandchild in its own process group (as a SuperNode starts its SuperExec) and
one in a session of its own (as the SuperLink starts its SuperExec). The test SIGKILLs the parent and checks that
all of them are gone within seconds; and that a later start reaps, from the pid file, what a killed parent and
watchdog left, but only processes that still run the recorded command. No Flower needed (the real deployment is
checked by ``test_flower_signals.py``, marked ``flower``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fednsl.engines.flower_guard import PIDS_FILE, ProcessLedger, die_with_parent, start_time
from fednsl.engines.flower_procs import ManagedProcess

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc").is_dir(), reason="PR_SET_PDEATHSIG and /proc: Linux"
)

REPO = Path(__file__).resolve().parents[3]
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]

CHILD = r"""
import os, subprocess, sys, time
out = sys.argv[1]
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
same = subprocess.Popen(sleep)  # in the child's process group
own = subprocess.Popen(sleep, start_new_session=True)  # escapes the group (a session of its own)
with open(out + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {same.pid} {own.pid}")
os.replace(out + ".tmp", out)
time.sleep(600)
"""

PARENT = r"""
import sys, time
from pathlib import Path
from fednsl.engines.flower_guard import PIDS_FILE, ProcessLedger, spawn
tmp, mode, child = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ledger = ProcessLedger(tmp / PIDS_FILE).open() if mode == "ledger" else None
spawn([sys.executable, "-c", child, str(tmp / "tree")], ledger=ledger, name="child")
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class Tree:
    """The parent, its child and the two grandchildren; kills whatever is left at the end (only these)."""

    def __init__(self, tmp: Path, mode: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.tmp = tmp
        self.parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(tmp), mode, CHILD], env=env, start_new_session=True
        )
        tree = tmp / "tree"
        assert wait_for(tree.exists, 60), "the child did not start"
        self.child, self.same, self.own = (int(x) for x in tree.read_text().split())
        self.watchdog: int | None = None
        if mode == "ledger":
            data = json.loads((tmp / PIDS_FILE).read_text())
            self.watchdog = int(data["watchdog"]["pid"])
            assert [p["pid"] for p in data["procs"]] == [self.child]
        time.sleep(1.5)  # the watchdog has listed the tree (it does every second)

    def pids(self) -> list[int]:
        return [self.child, self.same, self.own] + ([self.watchdog] if self.watchdog else [])

    def kill_parent(self) -> None:
        os.kill(self.parent.pid, signal.SIGKILL)
        self.parent.wait(timeout=10)

    def cleanup(self) -> None:
        if self.parent.poll() is None:
            self.parent.kill()
            self.parent.wait()
        for pid in self.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_children_and_grandchildren_die_with_a_killed_parent(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "ledger")
    try:
        assert all(alive(p) for p in tree.pids())
        tree.kill_parent()
        assert wait_for(lambda: not any(alive(p) for p in tree.pids()), 10), [p for p in tree.pids() if alive(p)]
        assert not (tmp_path / PIDS_FILE).exists()  # the watchdog removed it after stopping everything
    finally:
        tree.cleanup()


def test_the_parent_death_signal_alone_kills_the_direct_child(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "bare")  # no ledger, no watchdog: only PR_SET_PDEATHSIG
    try:
        tree.kill_parent()
        assert wait_for(lambda: not alive(tree.child), 5)
    finally:
        tree.cleanup()


def test_the_next_start_reaps_what_a_killed_parent_and_watchdog_left(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "ledger")
    try:
        assert tree.watchdog is not None
        os.kill(tree.watchdog, signal.SIGKILL)  # the watchdog goes first: nobody stops the grandchildren now
        assert wait_for(lambda: not alive(tree.watchdog), 5)
        tree.kill_parent()
        assert wait_for(lambda: not alive(tree.child), 5)  # the parent death signal
        assert alive(tree.same) and (tmp_path / PIDS_FILE).exists()
        hit = ProcessLedger(tmp_path / PIDS_FILE).reap_leftovers()
        assert tree.same in hit and not alive(tree.same)
        assert not (tmp_path / PIDS_FILE).exists()
    finally:
        tree.cleanup()


def _unused_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_a_recorded_pid_is_killed_only_while_it_runs_the_recorded_command(tmp_path: Path) -> None:
    proc = subprocess.Popen(SLEEP, start_new_session=True)
    path = tmp_path / PIDS_FILE
    try:
        start = start_time(proc.pid)
        assert start > 0

        def ledger(owner: dict, argv: list[str], start: int) -> ProcessLedger:
            entry = {"name": "x", "pid": proc.pid, "start": start, "argv": argv}
            path.write_text(json.dumps({"owner": owner, "watchdog": None, "bin": "/nonexistent", "procs": [entry]}))
            return ProcessLedger(path)

        dead = {"pid": _unused_pid(), "start": 1}
        assert ledger(dead, ["something", "else"], start).reap_leftovers() == []  # another command now
        assert ledger(dead, SLEEP, start + 1).reap_leftovers() == []  # another process with the same pid
        assert alive(proc.pid)
        with pytest.raises(RuntimeError, match="still running"):  # the owner runs: its processes are its own
            ledger({"pid": proc.pid, "start": start}, SLEEP, start).reap_leftovers()
        assert alive(proc.pid) and path.exists()
        assert ledger(dead, SLEEP, start).reap_leftovers() == [proc.pid]
        proc.wait(timeout=10)
        assert not path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_clean_stop_leaves_no_pid_file_and_no_watchdog(tmp_path: Path) -> None:
    with ProcessLedger(tmp_path / PIDS_FILE) as ledger:
        assert ledger.watchdog is not None
        dog = ledger.watchdog.pid
        proc = ManagedProcess("sleeper", SLEEP, tmp_path / "sleeper.log", os.environ, ledger)
        data = json.loads((tmp_path / PIDS_FILE).read_text())
        assert [p["pid"] for p in data["procs"]] == [proc.pgid] and data["watchdog"]["pid"] == dog
        proc.stop()
        assert json.loads((tmp_path / PIDS_FILE).read_text())["procs"] == []
    assert not (tmp_path / PIDS_FILE).exists() and not alive(dog)


def test_no_death_signal_from_other_threads() -> None:
    """The kernel sends it when the forking *thread* ends, so only the main thread asks for it."""
    import threading

    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(die_with_parent()))
    t.start()
    t.join()
    assert got == [None] and callable(die_with_parent())
