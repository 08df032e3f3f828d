"""Flower processes die with the fednsl process that started them, even after ``kill -9``.

SIGTERM, SIGHUP and Ctrl-C are handled by the process itself (:func:`~fednsl.engines.flower_procs.stop_signals_interrupt`
stops everything it started). SIGKILL cannot be handled, so three layers make sure nothing outlives it:

1. Every child fednsl starts (SuperLink, SuperNodes, ``flwr run``, ``flwr`` commands) asks the kernel for SIGKILL
   when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)`` between fork and exec, :func:`die_with_parent`).
2. A :class:`ProcessLedger` records each process group fednsl started (pid, start time, command) in a pid file,
   ``RUN_DIR/flower/pids.json``, and starts a watchdog process (``python -m fednsl.engines.flower_guard``, in its own
   session) that follows those groups and everything descended from them. When its parent — the fednsl process —
   is gone, the watchdog sends SIGTERM to all of them (SuperExec, ServerApp, ClientApps and fednsl workers included,
   also those Flower started in sessions of their own), SIGKILL after 3 s, removes the pid file and exits.
3. Should the watchdog be gone too, the next start in the same folder (:meth:`ProcessLedger.open`) reaps what the
   pid file names: a recorded process only while it still runs the recorded command with the recorded start time,
   and the members of its process group only when they run a command of this Python installation.

Only Linux has ``PR_SET_PDEATHSIG`` and ``/proc``; elsewhere the ledger still records the groups and the watchdog
still stops them (by process group), but leftovers of a vanished watchdog are not reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("fednsl.flower")

PIDS_FILE = "pids.json"
PR_SET_PDEATHSIG = 1
TERM_GRACE_S = 3.0  # between the watchdog's SIGTERM and its SIGKILL
POLL_S = 0.2  # how often the watchdog looks for its parent
SCAN_S = 1.0  # how often it lists the processes of the recorded groups (a /proc scan: ~2 ms per 100 processes)


# -- /proc ---------------------------------------------------------------------------------------------------
PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, start time in clock ticks since boot, state) of a process, None when there is none."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19]), fields[0]


def _table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (ppid, pgid, start, state) of every process (zombies left out)."""
    out = {}
    for entry in PROC.glob("[0-9]*"):
        st = _stat(int(entry.name))
        if st is not None and st[3] != "Z":
            out[int(entry.name)] = st
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def start_time(pid: int) -> int:
    """When ``pid`` started (clock ticks since boot; 0 where there is no /proc): tells a process from a later one
    that got the same pid."""
    st = _stat(pid)
    return st[2] if st is not None else 0


def _alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    if st is None:
        return False
    return st[3] != "Z" and (start == 0 or st[2] == start)


# -- layer 1: the kernel kills a child when its parent dies ------------------------------------------------------
@functools.cache
def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the child gets ``sig`` when this process dies; None where that cannot be set.

    The kernel sends the signal when the *thread* that forked the child ends, so it is only set for children
    started from the main thread (whose end is the process's); the watchdog covers the others.
    """
    prctl = _prctl()
    if prctl is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def set_death_signal() -> None:  # runs in the child between fork and exec: no allocation-heavy work here
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), sig)

    return set_death_signal


def spawn(
    argv: Sequence[str], *, ledger: ProcessLedger | None = None, name: str = "", **popen: Any
) -> subprocess.Popen:
    """``Popen(argv)`` leading a new session and process group, dying with this process (:func:`die_with_parent`),
    recorded in ``ledger`` (whose watchdog then stops its group too)."""
    proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=die_with_parent(), **popen)
    if ledger is not None:
        ledger.record(name or Path(argv[0]).name, proc.pid, argv)
    return proc


# -- what to stop ----------------------------------------------------------------------------------------------
def _descendants(roots: Iterable[int], table: Mapping[int, tuple[int, int, int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _runs(pid: int, argv: Sequence[str]) -> bool:
    """Whether ``pid`` runs ``argv`` (a script's interpreter may stand before it: ``python /venv/bin/flwr ...``)."""
    cl, argv = _cmdline(pid), list(argv)
    return bool(argv) and (cl == argv or (len(cl) > len(argv) and cl[-len(argv) :] == argv))


def _ours(pid: int, bin_dir: str) -> bool:
    """Whether ``pid`` runs a command of this Python installation (the venv's python, flower-*, flwr*)."""
    prefix = bin_dir.rstrip(os.sep) + os.sep
    return any(a.startswith(prefix) for a in _cmdline(pid)[:2])


def recorded_processes(data: Mapping[str, Any], table: Mapping[int, tuple[int, int, int, str]]) -> dict[int, int]:
    """pid -> start of the processes a ledger's ``data`` stands for, as they run now: each recorded leader that still
    runs its recorded command with its recorded start time, with its descendants; and the members of a recorded
    process group (and their descendants) that started after its leader and run a command of ``data["bin"]``."""
    out: dict[int, int] = {}
    bin_dir = str(data.get("bin", ""))
    for entry in data.get("procs", []):
        pid, start, argv = int(entry["pid"]), int(entry["start"]), list(entry["argv"])
        roots = []
        if pid in table and table[pid][2] == start and _runs(pid, argv):
            roots.append(pid)
        if bin_dir:
            roots += [
                p
                for p, (_, pgid, st, _) in table.items()
                if pgid == pid and p != pid and st >= start and _ours(p, bin_dir)
            ]
        for p in {*roots, *_descendants(roots, table)}:
            out[p] = table[p][2]
    return out


def terminate(targets: Mapping[int, int], grace_s: float = TERM_GRACE_S) -> list[int]:
    """SIGTERM every ``pid -> start`` still alive, SIGKILL those left after ``grace_s``; the pids signalled."""
    hit = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [p for p, st in targets.items() if _alive(p, st)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        hit += [p for p in alive if p not in hit]
        deadline = time.monotonic() + wait_s
        while any(_alive(p, st) for p, st in targets.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
    return hit


# -- layer 2 and 3: the pid file and its watchdog ---------------------------------------------------------------
def read_ledger(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ProcessLedger:
    """The pid file of the process groups this process starts for one run folder, and their watchdog.

    ``open()`` (or ``with``) first reaps what a killed earlier owner of the file left running, then starts the
    watchdog; :func:`spawn` / ``record`` add a group, ``forget`` removes a stopped one; ``close()`` stops the
    watchdog and removes the file once nothing recorded is left.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.procs: dict[int, dict[str, Any]] = {}
        self.watchdog: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._open = False

    # -- life -------------------------------------------------------------------------------------------------
    def open(self) -> ProcessLedger:
        if self._open:
            return self
        self.reap_leftovers()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open = True
        self._write()
        self.watchdog = subprocess.Popen(
            [sys.executable, "-m", "fednsl.engines.flower_guard", str(self.path), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in this process's group: Ctrl-C and group signals do not reach it
            close_fds=True,
        )
        self._write()
        return self

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self.watchdog is not None:
            self.watchdog.terminate()
            try:
                self.watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait(timeout=5)
            self.watchdog = None
        with self._lock:
            if self.procs:
                self._write_locked()  # something did not stop: the next start reaps it
            else:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> ProcessLedger:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- entries ----------------------------------------------------------------------------------------------
    def record(self, name: str, pid: int, argv: Sequence[str]) -> None:
        with self._lock:
            self.procs[pid] = {"name": name, "pid": pid, "start": start_time(pid), "argv": [str(a) for a in argv]}
            self._write_locked()

    def forget(self, pid: int) -> None:
        with self._lock:
            if self.procs.pop(pid, None) is not None and self._open:
                self._write_locked()

    def _write(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        me = os.getpid()
        dog = self.watchdog
        data = {
            "owner": {"pid": me, "start": start_time(me)},
            "watchdog": {"pid": dog.pid, "start": start_time(dog.pid)} if dog is not None else None,
            "bin": str(Path(sys.executable).parent),
            "procs": list(self.procs.values()),
        }
        tmp = self.path.with_name(self.path.name + f".{me}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)

    # -- layer 3 ----------------------------------------------------------------------------------------------
    def reap_leftovers(self) -> list[int]:
        """Stop what the pid file's earlier owner left running (it must be dead; RuntimeError while it runs);
        returns the pids signalled. Nothing is done without /proc (the commands cannot be checked there)."""
        data = read_ledger(self.path)
        if data is None:
            return []
        owner = data.get("owner") or {}
        opid, ostart = int(owner.get("pid", 0)), int(owner.get("start", 0))
        if opid and ostart and _alive(opid, ostart):
            if opid == os.getpid():
                return []
            raise RuntimeError(f"{self.path}: its Flower processes belong to process {opid}, which is still running")
        if not PROC.is_dir():
            return []
        table = _table()
        targets = recorded_processes(data, table)
        dog = data.get("watchdog") or {}
        if (
            dog
            and _alive(int(dog["pid"]), int(dog["start"]))
            and "fednsl.engines.flower_guard" in _cmdline(int(dog["pid"]))
        ):
            targets[int(dog["pid"])] = int(dog["start"])
        hit = terminate(targets) if targets else []
        if hit:
            log.warning("%s: stopped %d process(es) a killed earlier run left running: %s", self.path, len(hit), hit)
        self.path.unlink(missing_ok=True)
        return hit


# -- the watchdog process ----------------------------------------------------------------------------------------
def watch(path: Path, owner: int, poll_s: float = POLL_S, scan_s: float = SCAN_S) -> None:
    """Until ``owner`` (our parent) is gone, follow the processes the pid file stands for; then stop them all.

    Processes started since the last scan are found at the end as descendants of those seen (or as members of a
    recorded group)."""
    seen: dict[int, int] = {}  # pid -> start of every process of the recorded groups seen so far (still alive)
    data: dict[str, Any] = {}
    next_scan = 0.0
    while os.getppid() == owner:
        if time.monotonic() >= next_scan:
            next_scan = time.monotonic() + scan_s
            data = read_ledger(path) or data
            if PROC.is_dir() and data.get("procs"):
                table = _table()
                seen = {p: st for p, st in seen.items() if p in table and table[p][2] == st}
                seen.update(recorded_processes(data, table))
        time.sleep(poll_s)
    data = read_ledger(path) or data
    targets = dict(seen)
    if PROC.is_dir():
        table = _table()
        targets.update(recorded_processes(data, table))
        live = [p for p, st in targets.items() if p in table and table[p][2] == st]
        targets.update({p: table[p][2] for p in _descendants(live, table)})  # children started since the last look
        terminate(targets)
    else:
        for entry in data.get("procs", []):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(entry["pid"]), sig)
                time.sleep(TERM_GRACE_S if sig == signal.SIGTERM else 0)
    path.unlink(missing_ok=True)


def main(argv: Sequence[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by its owner's SIGTERM, or ends when the owner is gone
    watch(Path(argv[0]), int(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
