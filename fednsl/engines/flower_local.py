"""A Flower federation on this machine: one SuperLink and N SuperNodes on 127.0.0.1, stopped by process group."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from fednsl.engines.flower_guard import PIDS_FILE, ProcessLedger
from fednsl.engines.flower_procs import (
    ManagedProcess,
    flower_bin,
    flower_env,
    free_port,
    wait_for_port,
)
from fednsl.engines.flower_submit import CONNECTION, flwr_cli, write_connection
from fednsl.engines.flower_tls import TLSFiles, make_node_keys, make_tls

# SuperExec (which starts a ClientApp/ServerApp process per task) polls for tasks every 1 s by default
LOCAL_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}


@dataclass
class LocalFederation:
    """One SuperLink and ``num_supernodes`` SuperNodes on 127.0.0.1 (free ports), stopped by process group.

    SuperNode ``i`` gets ``--node-config "partition-id=i num-partitions=N"``. With ``tls`` the SuperLink
    serves HTTPS with a self-signed certificate; with ``node_auth`` (needs ``tls``) it accepts only the
    SuperNodes whose public keys were registered with ``flwr supernode register``.

    Every process dies with this one, even after ``kill -9`` (:mod:`~fednsl.engines.flower_guard`): they are
    recorded in ``ledger`` (default: its own, ``workdir/pids.json``, which also reaps what a killed earlier
    federation in ``workdir`` left running).
    """

    num_supernodes: int
    workdir: Path
    tls: bool = False
    node_auth: bool = False
    start_timeout_s: float = 120.0
    host: str = "127.0.0.1"
    port: int = 0
    superlink: ManagedProcess | None = None
    supernodes: list[ManagedProcess] = field(default_factory=list)
    tls_files: TLSFiles | None = None
    node_keys: list[tuple[Path, Path]] = field(default_factory=list)
    ledger: ProcessLedger | None = None
    _own_ledger: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.node_auth and not self.tls:
            raise ValueError("Flower's SuperNode authentication needs TLS (tls=True)")
        self.workdir = Path(self.workdir).resolve()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def flwr_home(self) -> Path:
        """FLWR_HOME of the ``flwr`` CLI, with the connection named :data:`CONNECTION`."""
        return self.workdir / "cli-home"

    def _env(self, who: str) -> dict[str, str]:
        return flower_env(
            self.workdir / f"{who}-home", {**LOCAL_ENV, **{k: v for k, v in os.environ.items() if k in LOCAL_ENV}}
        )

    def start(self) -> LocalFederation:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.ledger is None:
            self.ledger, self._own_ledger = ProcessLedger(self.workdir / PIDS_FILE), True
        self.ledger.open()
        self.port = free_port(self.host)
        argv = [
            flower_bin("flower-superlink"),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        ]
        if self.tls:
            self.tls_files = make_tls(self.workdir / "certs", hosts=(self.host, "localhost"))
            argv += [
                "--ssl-ca-certfile",
                str(self.tls_files.ca_cert),
                "--ssl-certfile",
                str(self.tls_files.server_cert),
                "--ssl-keyfile",
                str(self.tls_files.server_key),
            ]
        else:
            argv.append("--insecure")
        if self.node_auth:
            argv.append("--enable-supernode-auth")
        self.superlink = ManagedProcess(
            "flower-superlink", argv, self.workdir / "logs" / "superlink.log", self._env("superlink"), self.ledger
        )
        wait_for_port(self.host, self.port, self.start_timeout_s, self.superlink)
        write_connection(
            self.flwr_home, self.address, root_certificates=self.tls_files.ca_cert if self.tls_files else None
        )
        if self.node_auth:
            self.node_keys = make_node_keys(self.workdir / "node-keys", self.num_supernodes)
            for _, pub in self.node_keys:
                flwr_cli(["supernode", "register", str(pub), CONNECTION], self.flwr_home, timeout_s=60)
        for i in range(self.num_supernodes):
            self.start_supernode(i)

    def start_supernode(self, i: int) -> ManagedProcess:
        """Start SuperNode ``i`` (partition ``i``); also used to restart one."""
        argv = [
            flower_bin("flower-supernode"),
            "--superlink",
            self.address,
            "--host",
            self.host,
            "--port",
            str(free_port(self.host)),
            "--node-config",
            f"partition-id={i} num-partitions={self.num_supernodes}",
        ]
        if self.tls_files is not None:
            argv += ["--root-certificates", str(self.tls_files.ca_cert)]
        else:
            argv.append("--insecure")
        if self.node_auth:
            argv += ["--auth-supernode-private-key", str(self.node_keys[i][0])]
        proc = ManagedProcess(
            f"flower-supernode-{i}",
            argv,
            self.workdir / "logs" / f"supernode-{i}.log",
            self._env(f"supernode-{i}"),
            self.ledger,
        )
        if i < len(self.supernodes):
            self.supernodes[i] = proc
        else:
            self.supernodes.append(proc)
        return proc

    def kill_supernode(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and its ClientApp processes (a crash)."""
        self.supernodes[i].kill()

    def stop(self) -> None:
        """Stop the SuperNodes (all at once), then the SuperLink; each by process group, with bounded waits."""
        for proc in self.supernodes:
            proc.signal(signal.SIGTERM)
        for proc in self.supernodes:
            proc.wait_stopped()
        if self.superlink is not None:
            self.superlink.stop()
        if self._own_ledger and self.ledger is not None:
            self.ledger.close()
            self.ledger, self._own_ledger = None, False

    def __enter__(self) -> LocalFederation:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, chars: int = 2000) -> str:
        procs = ([self.superlink] if self.superlink else []) + self.supernodes
        return "\n".join(f"--- {p.name} ({p.log_path}) ---\n{p.log_tail(chars)}" for p in procs)
