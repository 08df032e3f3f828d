"""Flower deployment helpers: SuperLink/SuperNode processes on loopback, the Flower app directory, ``flwr run``.

A local federation (:class:`LocalFederation`) starts ``flower-superlink`` and one ``flower-supernode`` per
client as separate process groups (``setsid``) on 127.0.0.1 with free ports, and stops them by process group
(a SuperNode's ``flower-superexec`` child is in its group). Runs are submitted with the documented
``flwr run APP CONNECTION --stream`` against a private ``FLWR_HOME``; the app directory written by
:func:`write_app` holds only a ``pyproject.toml`` naming ``fednsl.engines.flower:server_app`` /
``:client_app`` and carrying the resolved fednsl config, so SuperLink and SuperNodes must run in a Python
environment with ``fednsl[flower]`` installed, and runtime dependency installation stays off
(``flower-superlink --disable-runtime-dependency-installation``; SuperNodes do not install by default).

TLS and SuperNode authentication are Flower's own: :func:`make_tls` writes a self-signed CA and a server
certificate for the SuperLink (``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile``; SuperNodes and the CLI
trust ``--root-certificates`` / ``root-certificates``), :func:`make_node_keys` writes ECDSA (NIST P-384) key
pairs in OpenSSH format; with ``flower-superlink --enable-supernode-auth`` each public key is registered with
``flwr supernode register`` and the SuperNode signs its requests with ``--auth-supernode-private-key``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Mapping, Sequence

import tomli_w

from fednsl.config import RunConfig

ENV = "FEDNSL_FLOWER_"
CONNECTION = "fednsl"
QUIET_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
# SuperExec (which starts a ClientApp/ServerApp process per task) polls for tasks every 1 s by default
LOCAL_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}


# ==== options ================================================================================================
def _env_bool(value: str | None) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass
class DeploymentOptions:
    """How ``--engine flower`` reaches a federation (environment variables ``FEDNSL_FLOWER_<NAME>``)."""

    superlink: str | None = None            # SUPERLINK: host:port of a running SuperLink; unset = start one locally
    root_certificates: Path | None = None   # ROOT_CERTIFICATES: CA bundle for TLS to it; unset = --insecure
    local_tls: bool = False                 # LOCAL_TLS=1: the local federation uses self-signed TLS + node auth
    node_wait_s: float = 120.0              # NODE_WAIT_S: wait this long for every client's SuperNode
    run_timeout_s: float = 86400.0          # RUN_TIMEOUT_S: stop the run (flwr stop) after this long
    start_timeout_s: float = 120.0          # START_TIMEOUT_S: local SuperLink/SuperNodes must be up by then
    poll_s: float = 0.1                     # POLL_S: interval between the ServerApp's pulls of replies

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "DeploymentOptions":
        env = os.environ if env is None else env
        get = lambda name: env.get(ENV + name) or None  # noqa: E731
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
        out = {ENV + "NODE_WAIT_S": str(self.node_wait_s), ENV + "RUN_TIMEOUT_S": str(self.run_timeout_s),
               ENV + "START_TIMEOUT_S": str(self.start_timeout_s), ENV + "POLL_S": str(self.poll_s),
               ENV + "LOCAL_TLS": "1" if self.local_tls else "0"}
        if self.superlink:
            out[ENV + "SUPERLINK"] = self.superlink
        if self.root_certificates:
            out[ENV + "ROOT_CERTIFICATES"] = str(self.root_certificates)
        return out


# ==== processes ==============================================================================================
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
    """A child in its own session/process group (``setsid``), logging to a file, stopped by process group."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str]):
        self.name, self.argv, self.log_path = name, list(argv), Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=dict(env), start_new_session=True)
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


# ==== TLS and node keys ======================================================================================
@dataclass
class TLSFiles:
    """A self-signed CA and a SuperLink server certificate signed by it (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls(directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost"), days: int = 30) -> TLSFiles:
    """Write ``ca.crt``, ``server.pem``, ``server.key`` (SANs = ``hosts``) with ``cryptography``, else openssl."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(directory / "ca.crt", directory / "server.pem", directory / "server.key")
    try:
        _make_tls_cryptography(files, hosts, days)
    except ImportError:
        _make_tls_openssl(files, hosts, days)
    return files


def _make_tls_cryptography(files: TLSFiles, hosts: Sequence[str], days: int) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fednsl test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    files.ca_cert.write_bytes(ca.public_bytes(pem))
    files.server_cert.write_bytes(cert.public_bytes(pem))
    files.server_key.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))


def _make_tls_openssl(files: TLSFiles, hosts: Sequence[str], days: int) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("making TLS certificates needs the 'cryptography' package or the openssl command")
    d = files.ca_cert.parent
    san = ",".join(("IP:" if re.fullmatch(r"[\d.:]+", h) else "DNS:") + h for h in hosts)
    ca_key, csr, ext = d / "ca.key", d / "server.csr", d / "server.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    steps = [
        [openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key)],
        [openssl, "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", str(days),
         "-subj", "/CN=fednsl test CA", "-out", str(files.ca_cert)],
        [openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(files.server_key)],
        [openssl, "req", "-new", "-key", str(files.server_key), "-subj", f"/CN={hosts[0]}", "-out", str(csr)],
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(files.ca_cert), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", str(days), "-sha256", "-extfile", str(ext), "-out", str(files.server_cert)],
    ]
    for argv in steps:
        subprocess.run(argv, check=True, capture_output=True, timeout=60)


def make_node_keys(directory: Path, count: int) -> list[tuple[Path, Path]]:
    """``count`` SuperNode key pairs (ECDSA P-384, OpenSSH format): [(private key, public key)]."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        key = ec.generate_private_key(ec.SECP384R1())
        priv, pub = directory / f"supernode-{i}", directory / f"supernode-{i}.pub"
        priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
        priv.chmod(0o600)
        pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                      serialization.PublicFormat.OpenSSH))
        out.append((priv, pub))
    return out


# ==== the flwr CLI ===========================================================================================
def write_connection(flwr_home: Path, address: str, *, root_certificates: Path | None = None,
                     name: str = CONNECTION) -> Path:
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
        res = subprocess.run(argv, env=flower_env(flwr_home), capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"`flwr {' '.join(args)}` did not finish in {timeout_s:.0f}s") from exc
    if res.returncode != 0:
        raise RuntimeError(f"`flwr {' '.join(args)}` failed ({res.returncode}):\n{res.stdout[-2000:]}\n"
                           f"{res.stderr[-2000:]}")
    return res.stdout


def write_app(app_dir: Path, config: RunConfig, run_dir: Path, *, resume: bool = False,
              node_wait_s: float = 120.0, poll_s: float = 0.1) -> Path:
    """A Flower app directory (just ``pyproject.toml``) that runs ``config`` and writes ``run_dir``.

    ``flwr run APP_DIR CONNECTION`` submits it; the ServerApp (on the SuperLink's host) writes the run
    directory at the absolute path ``run_dir``.
    """
    from fednsl import __version__
    from fednsl.engines.flower import config_text

    app_dir = Path(app_dir)
    app_dir.mkdir(parents=True, exist_ok=True)
    config = replace(config, engine="flower")
    doc = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": "fednsl-flower-app", "version": __version__,
                    "description": f"fednsl {config.method} ({config.name}) on Flower",
                    "license": "MIT", "dependencies": []},
        "tool": {
            "hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
            "flwr": {"app": {
                "publisher": "fednsl",
                "components": {"serverapp": "fednsl.engines.flower:server_app",
                               "clientapp": "fednsl.engines.flower:client_app"},
                "config": {"fednsl-config": config_text(config), "run-dir": str(Path(run_dir).resolve()),
                           "resume": bool(resume), "node-wait-s": float(node_wait_s), "poll-s": float(poll_s)},
            }},
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return app_dir


@dataclass
class FlowerRun:
    """Outcome of one ``flwr run``: its id, final status and (streamed) log."""

    run_id: int
    status: str
    log: str

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed"


def submit_and_wait(app_dir: Path, flwr_home: Path, *, timeout_s: float = 86400.0,
                    connection: str = CONNECTION, log_path: Path | None = None) -> FlowerRun:
    """``flwr run APP CONNECTION --stream`` (returns when the run ends), then its status from ``flwr ls``."""
    argv = [flower_bin("flwr"), "run", str(Path(app_dir).resolve()), connection, "--stream"]
    log_path = Path(log_path or Path(app_dir) / "flwr-run.log")
    with log_path.open("w") as out:
        proc = subprocess.Popen(argv, env=flower_env(flwr_home), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
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


def run_status(run_id: int, flwr_home: Path, *, connection: str = CONNECTION) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``finished:completed``, ``finished:failed``)."""
    out = flwr_cli(["ls", connection, "--run-id", str(run_id), "--format", "json"], flwr_home, timeout_s=60)
    runs = json.loads(out[out.index("{"):]).get("runs", [])
    return str(runs[0]["status"]) if runs else "unknown"


# ==== a federation on this machine ===========================================================================
@dataclass
class LocalFederation:
    """One SuperLink and ``num_supernodes`` SuperNodes on 127.0.0.1 (free ports), stopped by process group.

    SuperNode ``i`` gets ``--node-config "partition-id=i num-partitions=N"``. With ``tls`` the SuperLink
    serves HTTPS with a self-signed certificate; with ``node_auth`` (needs ``tls``) it accepts only the
    SuperNodes whose public keys were registered with ``flwr supernode register``.
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
        return flower_env(self.workdir / f"{who}-home", {**LOCAL_ENV, **{k: v for k, v in os.environ.items()
                                                                        if k in LOCAL_ENV}})

    def start(self) -> "LocalFederation":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        argv = [flower_bin("flower-superlink"), "--host", self.host, "--port", str(self.port),
                "--disable-runtime-dependency-installation"]
        if self.tls:
            self.tls_files = make_tls(self.workdir / "certs", hosts=(self.host, "localhost"))
            argv += ["--ssl-ca-certfile", str(self.tls_files.ca_cert), "--ssl-certfile",
                     str(self.tls_files.server_cert), "--ssl-keyfile", str(self.tls_files.server_key)]
        else:
            argv.append("--insecure")
        if self.node_auth:
            argv.append("--enable-supernode-auth")
        self.superlink = ManagedProcess("flower-superlink", argv, self.workdir / "logs" / "superlink.log",
                                        self._env("superlink"))
        wait_for_port(self.host, self.port, self.start_timeout_s, self.superlink)
        write_connection(self.flwr_home, self.address,
                         root_certificates=self.tls_files.ca_cert if self.tls_files else None)
        if self.node_auth:
            self.node_keys = make_node_keys(self.workdir / "node-keys", self.num_supernodes)
            for _, pub in self.node_keys:
                flwr_cli(["supernode", "register", str(pub), CONNECTION], self.flwr_home, timeout_s=60)
        for i in range(self.num_supernodes):
            self.start_supernode(i)

    def start_supernode(self, i: int) -> ManagedProcess:
        """Start SuperNode ``i`` (partition ``i``); also used to restart one."""
        argv = [flower_bin("flower-supernode"), "--superlink", self.address, "--host", self.host,
                "--port", str(free_port(self.host)),
                "--node-config", f"partition-id={i} num-partitions={self.num_supernodes}"]
        if self.tls_files is not None:
            argv += ["--root-certificates", str(self.tls_files.ca_cert)]
        else:
            argv.append("--insecure")
        if self.node_auth:
            argv += ["--auth-supernode-private-key", str(self.node_keys[i][0])]
        proc = ManagedProcess(f"flower-supernode-{i}", argv, self.workdir / "logs" / f"supernode-{i}.log",
                              self._env(f"supernode-{i}"))
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

    def __enter__(self) -> "LocalFederation":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, chars: int = 2000) -> str:
        procs = ([self.superlink] if self.superlink else []) + self.supernodes
        return "\n".join(f"--- {p.name} ({p.log_path}) ---\n{p.log_tail(chars)}" for p in procs)


# ==== one deployment run =====================================================================================
def run_deployment(config: RunConfig, run_dir: Path, *, num_clients: int, resume: bool = False,
                   options: DeploymentOptions | None = None, progress: bool = True) -> FlowerRun:
    """Run ``config`` on a SuperLink (a running one, or a local federation with ``num_clients`` SuperNodes).

    Writes the app directory to ``run_dir/flower/app``; the ServerApp writes ``run_dir``. Raises with the
    run's log when the run does not complete.
    """
    opts = options or DeploymentOptions()
    run_dir = Path(run_dir).resolve()
    work = run_dir / "flower"
    app = write_app(work / "app", config, run_dir, resume=resume, node_wait_s=opts.node_wait_s, poll_s=opts.poll_s)
    if opts.superlink:
        home = work / "cli-home"
        write_connection(home, opts.superlink, root_certificates=opts.root_certificates)
        result = submit_and_wait(app, home, timeout_s=opts.run_timeout_s, log_path=work / "flwr-run.log")
        logs = ""
    else:
        with LocalFederation(num_clients, work / "local", tls=opts.local_tls, node_auth=opts.local_tls,
                             start_timeout_s=opts.start_timeout_s) as fed:
            if progress:
                print(f"local Flower federation: SuperLink {fed.address}, {num_clients} SuperNodes "
                      f"(logs: {fed.workdir / 'logs'})", file=sys.stderr)
            result = submit_and_wait(app, fed.flwr_home, timeout_s=opts.run_timeout_s,
                                     log_path=work / "flwr-run.log")
            logs = "" if result.ok else fed.logs()
    if not result.ok:
        raise RuntimeError(f"Flower run {result.run_id} ended with status {result.status}:\n"
                           f"{result.log[-4000:]}\n{logs}")
    if not (run_dir / "metrics.jsonl").exists() and opts.superlink:
        raise FileNotFoundError(f"Flower run {result.run_id} completed, but {run_dir}/metrics.jsonl is not on this "
                                "machine: the ServerApp writes the run directory on the SuperLink's host")
    return result
