"""The ``flwr`` CLI: a private connection file, ``flwr run --stream`` until the run ends, its status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from fednsl.engines.flower_guard import ProcessLedger, die_with_parent, spawn
from fednsl.engines.flower_procs import flower_bin, flower_env

CONNECTION = "fednsl"


def write_connection(
    flwr_home: Path, address: str, *, root_certificates: Path | None = None, name: str = CONNECTION
) -> Path:
    """``FLWR_HOME/config.toml`` with one SuperLink connection (TLS when ``root_certificates`` is given)."""
    conn: dict[str, object] = {"address": address}
    if root_certificates is not None:
        conn["root-certificates"] = str(Path(root_certificates).resolve())
    else:
        conn["insecure"] = True
    path = Path(flwr_home) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps({"superlink": {"default": name, name: conn}}))
    return path


def flwr_cli(args: Sequence[str], flwr_home: Path, *, timeout_s: float = 120.0) -> str:
    """Run ``flwr ARGS`` with the private FLWR_HOME; return stdout, raise with its output on failure."""
    argv = [flower_bin("flwr"), *args]
    try:
        res = subprocess.run(
            argv,
            env=flower_env(flwr_home),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),  # killed with this process (kill -9 included)
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"`flwr {' '.join(args)}` did not finish in {timeout_s:.0f}s") from exc
    if res.returncode != 0:
        raise RuntimeError(
            f"`flwr {' '.join(args)}` failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        )
    return res.stdout


@dataclass
class FlowerRun:
    """Outcome of one ``flwr run``: its id, final status and (streamed) log."""

    run_id: int
    status: str
    log: str

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed"


def submit_and_wait(
    app_dir: Path,
    flwr_home: Path,
    *,
    timeout_s: float = 86400.0,
    connection: str = CONNECTION,
    log_path: Path | None = None,
    ledger: ProcessLedger | None = None,
) -> FlowerRun:
    """``flwr run APP CONNECTION --stream`` (returns when the run ends), then its status from ``flwr ls``.

    ``flwr run`` dies with this process; ``ledger`` records it for the run folder's watchdog."""
    argv = [flower_bin("flwr"), "run", str(Path(app_dir).resolve()), connection, "--stream"]
    log_path = Path(log_path or Path(app_dir) / "flwr-run.log")
    with log_path.open("w") as out:
        proc = spawn(
            argv,
            ledger=ledger,
            name="flwr-run",
            env=flower_env(flwr_home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except BaseException:  # Ctrl-C, SIGTERM/SIGHUP (Terminated): stop `flwr run` and the run, then go on
            _stop_client(proc)
            _stop_run(log_path, flwr_home, connection)
            raise
        finally:
            if ledger is not None and proc.poll() is not None:
                ledger.forget(proc.pid)
    text = log_path.read_text(errors="replace")
    found = re.search(r"started run (\d+)", text)
    if found is None:
        raise RuntimeError(f"`flwr run` did not start a run:\n{text[-3000:]}")
    run_id = int(found.group(1))
    if timed_out:
        try:
            flwr_cli(["stop", str(run_id), connection], flwr_home, timeout_s=60)
        except (RuntimeError, TimeoutError) as exc:
            raise TimeoutError(f"Flower run {run_id} did not finish in {timeout_s:.0f}s; `flwr stop` failed: {exc}")
        raise TimeoutError(f"Flower run {run_id} did not finish in {timeout_s:.0f}s; stopped it")
    return FlowerRun(run_id, run_status(run_id, flwr_home, connection=connection), text)


def _stop_client(proc: subprocess.Popen) -> None:
    """SIGTERM the ``flwr run`` process group, SIGKILL it after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def _stop_run(log_path: Path, flwr_home: Path, connection: str) -> None:
    """Best effort ``flwr stop RUN_ID`` for an interrupted run (bounded: 15 s; errors are ignored)."""
    found = re.search(r"started run (\d+)", log_path.read_text(errors="replace")) if log_path.exists() else None
    if found is not None:
        try:
            flwr_cli(["stop", found.group(1), connection], flwr_home, timeout_s=15)
        except (RuntimeError, TimeoutError, OSError):
            pass


def run_status(run_id: int, flwr_home: Path, *, connection: str = CONNECTION) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``finished:completed``, ``finished:failed``)."""
    out = flwr_cli(["ls", connection, "--run-id", str(run_id), "--format", "json"], flwr_home, timeout_s=60)
    runs = json.loads(out[out.index("{") :]).get("runs", [])
    return str(runs[0]["status"]) if runs else "unknown"
