"""``--engine flower``: run a fednsl config on a SuperLink (a running one, or a local federation).

The app directory (:mod:`fednsl.engines.flower_app`) holds only a ``pyproject.toml`` naming
``fednsl.engines.flower:server_app`` / ``:client_app`` and carrying the resolved fednsl config, so SuperLink and
SuperNodes must run in a Python environment with ``fednsl[flower]`` installed; runtime dependency installation
stays off. Runs are submitted with the documented ``flwr run APP CONNECTION --stream``
(:mod:`fednsl.engines.flower_submit`) against a private ``FLWR_HOME``. The pieces: processes
(:mod:`~fednsl.engines.flower_procs`), TLS and node keys (:mod:`~fednsl.engines.flower_tls`), the local
federation (:mod:`~fednsl.engines.flower_local`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fednsl.config import RunConfig
from fednsl.engines.flower_app import write_app
from fednsl.engines.flower_guard import PIDS_FILE, ProcessLedger
from fednsl.engines.flower_local import LocalFederation
from fednsl.engines.flower_procs import stop_signals_interrupt
from fednsl.engines.flower_submit import FlowerRun, submit_and_wait, write_connection

ENV = "FEDNSL_FLOWER_"


def _env_bool(value: str | None) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass
class DeploymentOptions:
    """How ``--engine flower`` reaches a federation (environment variables ``FEDNSL_FLOWER_<NAME>``)."""

    superlink: str | None = None  # SUPERLINK: host:port of a running SuperLink; unset = start one locally
    root_certificates: Path | None = None  # ROOT_CERTIFICATES: CA bundle for TLS to it; unset = --insecure
    local_tls: bool = False  # LOCAL_TLS=1: the local federation uses self-signed TLS + node auth
    node_wait_s: float = 120.0  # NODE_WAIT_S: wait this long for every client's SuperNode
    run_timeout_s: float = 86400.0  # RUN_TIMEOUT_S: stop the run (flwr stop) after this long
    start_timeout_s: float = 120.0  # START_TIMEOUT_S: local SuperLink/SuperNodes must be up by then
    poll_s: float = 0.1  # POLL_S: interval between the ServerApp's pulls of replies

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DeploymentOptions:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            return env.get(ENV + name) or None

        opts = cls()
        opts.superlink = get("SUPERLINK")
        if (ca := get("ROOT_CERTIFICATES")) is not None:
            opts.root_certificates = Path(ca)
        opts.local_tls = _env_bool(get("LOCAL_TLS"))
        for name in ("node_wait_s", "run_timeout_s", "start_timeout_s", "poll_s"):
            if (raw := get(name.upper())) is not None:
                try:
                    setattr(opts, name, float(raw))
                except ValueError as exc:
                    raise ValueError(f"{ENV}{name.upper()}={raw!r} is not a number") from exc
        return opts

    def to_env(self) -> dict[str, str]:
        out = {
            ENV + "NODE_WAIT_S": str(self.node_wait_s),
            ENV + "RUN_TIMEOUT_S": str(self.run_timeout_s),
            ENV + "START_TIMEOUT_S": str(self.start_timeout_s),
            ENV + "POLL_S": str(self.poll_s),
            ENV + "LOCAL_TLS": "1" if self.local_tls else "0",
        }
        if self.superlink:
            out[ENV + "SUPERLINK"] = self.superlink
        if self.root_certificates:
            out[ENV + "ROOT_CERTIFICATES"] = str(self.root_certificates)
        return out


# ==== one deployment run =====================================================================================
def run_deployment(
    config: RunConfig,
    run_dir: Path,
    *,
    num_clients: int,
    resume: bool = False,
    options: DeploymentOptions | None = None,
    progress: bool = True,
) -> FlowerRun:
    """Run ``config`` on a SuperLink (a running one, or a local federation with ``num_clients`` SuperNodes).

    Writes the app directory to ``run_dir/flower/app``; the ServerApp writes ``run_dir``. Raises with the
    run's log when the run does not complete.
    """
    with stop_signals_interrupt():  # SIGTERM/SIGHUP stop SuperLink, SuperNodes and `flwr run` as Ctrl-C does
        return _run_deployment(
            config, run_dir, num_clients=num_clients, resume=resume, options=options, progress=progress
        )


def _run_deployment(
    config: RunConfig,
    run_dir: Path,
    *,
    num_clients: int,
    resume: bool,
    options: DeploymentOptions | None,
    progress: bool,
) -> FlowerRun:
    opts = options or DeploymentOptions()
    run_dir = Path(run_dir).resolve()
    work = run_dir / "flower"
    # every process started below dies with this one, kill -9 included (flower_guard); what a killed earlier run
    # in this folder left running is stopped first
    with ProcessLedger(work / PIDS_FILE) as ledger:
        app = write_app(work / "app", config, run_dir, resume=resume, node_wait_s=opts.node_wait_s, poll_s=opts.poll_s)
        if opts.superlink:
            home = work / "cli-home"
            write_connection(home, opts.superlink, root_certificates=opts.root_certificates)
            result = submit_and_wait(
                app, home, timeout_s=opts.run_timeout_s, log_path=work / "flwr-run.log", ledger=ledger
            )
            logs = ""
        else:
            with LocalFederation(
                num_clients,
                work / "local",
                tls=opts.local_tls,
                node_auth=opts.local_tls,
                start_timeout_s=opts.start_timeout_s,
                ledger=ledger,
            ) as fed:
                if progress:
                    print(
                        f"local Flower federation: SuperLink {fed.address}, {num_clients} SuperNodes "
                        f"(logs: {fed.workdir / 'logs'})",
                        file=sys.stderr,
                    )
                result = submit_and_wait(
                    app, fed.flwr_home, timeout_s=opts.run_timeout_s, log_path=work / "flwr-run.log", ledger=ledger
                )
                logs = "" if result.ok else fed.logs()
    if not result.ok:
        raise RuntimeError(
            f"Flower run {result.run_id} ended with status {result.status}:\n{result.log[-4000:]}\n{logs}"
        )
    if not (run_dir / "metrics.jsonl").exists() and opts.superlink:
        raise FileNotFoundError(
            f"Flower run {result.run_id} completed, but {run_dir}/metrics.jsonl is not on this "
            "machine: the ServerApp writes the run directory on the SuperLink's host"
        )
    return result
