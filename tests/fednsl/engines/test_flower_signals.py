"""``kill -TERM`` / ``kill -HUP`` of ``fednsl train --engine flower`` stops everything it started, like Ctrl-C;
after ``kill -9`` everything it started dies with it (``fednsl.engines.flower_guard``).

A real ``fednsl train`` process with a local federation (SuperLink, 2 SuperNodes, ``flwr run``, the ServerApp):
once round 1 is logged, the signal goes to the ``fednsl`` process only; afterwards none of its descendants may
be left (every process group it started is empty) and the SuperLink's port must be free again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("flwr")
pytestmark = [pytest.mark.flower, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, state) of every process, from /proc."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def _descendants(root: int) -> set[int]:
    table, found, todo = _proc_table(), set(), [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, _) in table.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _alive(pids: set[int], pgids: set[int]) -> list[int]:
    return [pid for pid, (_, pgid, state) in _proc_table().items()
            if state != "Z" and (pid in pids or pgid in pgids)]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise TimeoutError(what)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to list process groups")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_signal_stops_superlink_supernodes_and_flwr_run(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "FEDNSL_FLOWER_RUN_TIMEOUT_S": "600"}
    for key in ("FEDNSL_FLOWER_SUPERLINK", "FEDNSL_FLOWER_ROOT_CERTIFICATES", "FEDNSL_FLOWER_LOCAL_TLS"):
        env.pop(key, None)
    argv = [sys.executable, "-m", "fednsl.cli.main", "train", "fedavg_blobs", "--engine", "flower", "--out", str(out),
            "--set", "rounds=500", "--set", "data.num_clients=2", "--set", "data.samples_per_client=40", "--quiet"]
    log = (tmp_path / "train.log").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    children: set[int] = set()
    groups: set[int] = set()
    try:
        metrics = out / "metrics.jsonl"

        def round_one_done() -> bool:
            assert proc.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
            return metrics.exists() and any(json.loads(x).get("stage") == "round"
                                            for x in metrics.read_text().splitlines() if x.strip())

        _wait(round_one_done, 240, "round 1 did not finish")
        children = _descendants(proc.pid)
        table = _proc_table()
        groups = {table[p][1] for p in children if p in table} - {proc.pid}
        assert len(groups) >= 4, f"expected SuperLink, 2 SuperNodes and flwr run groups, got {groups}"
        conn = tomllib.loads((out / "flower" / "local" / "cli-home" / "config.toml").read_text())
        port = int(conn["superlink"]["fednsl"]["address"].rsplit(":", 1)[1])
        assert not _port_free(port)

        os.kill(proc.pid, sig)  # the fednsl process only, not its group: its children must not outlive it
        proc.wait(timeout=90)
        assert proc.returncode != 0
        _wait(lambda: not _alive(children, groups), 30, f"left running: {_alive(children, groups)}")
        assert _port_free(port)
        assert not (out / "flower" / "pids.json").exists()  # removed by the watchdog, or on the clean stop
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _alive(children, groups):  # only what this test started
            os.kill(pid, signal.SIGKILL)
        log.close()
