"""Flower's processes: locating its commands, their environment, process groups, ports.

Every Flower process fednsl starts runs in its own session/process group (``setsid``) and is stopped by group
(a SuperNode's ``flower-superexec`` and ClientApp children are in its group), with bounded waits. It dies with the
fednsl process even after ``kill -9`` (:mod:`~fednsl.engines.flower_guard`: parent-death signal, pid file and
watchdog).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from fednsl.engines.flower_guard import ProcessLedger, spawn

QUIET_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def flower_bin(name: str) -> str:
    """Path of a Flower command (``flwr``, ``flower-superlink``...) next to this Python, else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name!r} not found next to {sys.executable} or on PATH: pip install 'fednsl[flower]'")
    return found


def flower_env(flwr_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for Flower processes: telemetry and update checks off, private FLWR_HOME, this venv first."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env["FLWR_HOME"] = str(flwr_home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra or {})
    return env


class ManagedProcess:
    """A child in its own session/process group (``setsid``), logging to a file, stopped by process group.

    It dies with this process (:func:`~fednsl.engines.flower_guard.spawn`); with a ``ledger`` its group is in the
    run folder's pid file, whose watchdog stops the group (and what it started) if this process is killed.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str],
        ledger: ProcessLedger | None = None,
    ):
        self.name, self.argv, self.log_path = name, list(argv), Path(log_path)
        self.ledger = ledger
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = self.log_path.open("ab")
        self.proc = spawn(
            self.argv,
            ledger=ledger,
            name=name,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
        )
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group

    def alive(self) -> bool:
        return self.proc.poll() is None

    def group_alive(self) -> bool:
        """Whether any process of the group still runs (zombies waiting to be reaped do not count)."""
        proc_dir = Path("/proc")
        if proc_dir.is_dir():
            for stat in proc_dir.glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[2]) == self.pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
                    return True
            return False
        try:
            os.killpg(self.pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the group, wait, then SIGKILL whatever is left of it (bounded waits)."""
        self.signal(signal.SIGTERM)
        self.wait_stopped(timeout_s)

    def wait_stopped(self, timeout_s: float = 10.0) -> None:
        """After SIGTERM: wait up to ``timeout_s`` for the group to exit, then SIGKILL what is left."""
        deadline = time.monotonic() + timeout_s
        while (self.proc.poll() is None or self.group_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.group_alive():
            self.signal(signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if not self._log.closed:
            self._log.close()
        if self.ledger is not None and not self.group_alive():
            self.ledger.forget(self.pgid)

    def kill(self) -> None:
        """SIGKILL the whole group now (a crash, for tests)."""
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def wait_for_port(host: str, port: int, timeout_s: float, proc: ManagedProcess | None = None) -> None:
    """Return once ``host:port`` accepts TCP connections; raise if ``proc`` dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited with code {proc.proc.returncode}:\n{proc.log_tail()}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    tail = proc.log_tail() if proc is not None else ""
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s:.0f}s\n{tail}")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: handled like Ctrl-C, so every ``finally`` stops the processes it started."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (as SIGINT raises
    ``KeyboardInterrupt``); outside it, and in other threads, the handlers are left as they were.

    Only the first signal raises; later ones are ignored, so they cannot interrupt the clean-up they started.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    old = {sig: signal.signal(sig, raise_terminated) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
