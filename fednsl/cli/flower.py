"""``fednsl flower``: run fednsl methods on a Flower deployment (SuperLink + SuperNodes).

``fednsl train CONFIG --engine flower-sim`` (simulation) and ``--engine flower`` (a local SuperLink with one
SuperNode per client on 127.0.0.1) need no extra command; these subcommands are for a real deployment:
``superlink`` / ``supernode`` start Flower's components with fednsl's defaults, ``run`` trains through a running
SuperLink, ``app`` writes the Flower app directory for a plain ``flwr run``, ``certs`` makes test TLS material.
Flower itself is imported only when a subcommand runs (``pip install 'fednsl[flower]'``).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

import click

_TELEMETRY = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def _exec(argv: list[str]) -> None:
    """Replace this process by a Flower command (its signals and exit status are the command's own)."""
    env = {**os.environ, **{k: v for k, v in _TELEMETRY.items() if k not in os.environ}}
    click.echo("$ " + " ".join(argv), err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)


@click.group(name="flower")
def command() -> None:
    """Flower deployment: start a SuperLink / SuperNodes, train through a SuperLink, write the Flower app.

    Quick start on one machine: `fednsl train CONFIG --engine flower` (local SuperLink + one SuperNode per client)
    or `--engine flower-sim` (Flower's simulation runtime).
    """


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP, without port) only reaches this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(address: str) -> str:
    """``host:port`` / ``[v6]:port`` → host."""
    return address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address


def _insecure(where: str, host: str) -> None:
    """Allow ``--insecure`` only on loopback, and say what it means."""
    if not _is_loopback(host):
        raise click.UsageError(
            f"--insecure is refused for the non-loopback address {host!r}: anyone on the "
            f"network could read the models and impersonate {where}; use TLS "
            "(`fednsl flower certs DIR` makes test certificates)"
        )
    click.echo(
        f"warning: {where} runs with --insecure (no TLS, no SuperNode authentication); only for trials on this machine",
        err=True,
    )


def superlink_argv(
    host: str,
    port: int | None,
    ssl_ca_certfile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    supernode_auth: bool,
    insecure: bool,
    database: str | None,
) -> list[str]:
    """The ``flower-superlink`` command line: TLS and SuperNode authentication unless ``insecure`` (loopback only)."""
    from fednsl.engines.flower_procs import flower_bin

    tls = [ssl_ca_certfile, ssl_certfile, ssl_keyfile]
    if any(tls) and not all(tls):
        raise click.UsageError("TLS needs all of --ssl-ca-certfile, --ssl-certfile and --ssl-keyfile")
    if insecure and any(tls):
        raise click.UsageError("--insecure contradicts the --ssl-* options")
    if not insecure and not all(tls):
        raise click.UsageError(
            "the SuperLink needs TLS: give --ssl-ca-certfile, --ssl-certfile and --ssl-keyfile "
            "(`fednsl flower certs DIR` makes test ones), or --insecure on a loopback address"
        )
    argv = [flower_bin("flower-superlink"), "--host", host, "--disable-runtime-dependency-installation"]
    if port is not None:
        argv += ["--port", str(port)]
    if insecure:
        _insecure("the SuperLink", host)
        argv.append("--insecure")
        return argv + (["--database", database] if database else [])
    argv += [
        "--ssl-ca-certfile",
        str(ssl_ca_certfile),
        "--ssl-certfile",
        str(ssl_certfile),
        "--ssl-keyfile",
        str(ssl_keyfile),
    ]
    if supernode_auth:
        argv.append("--enable-supernode-auth")
    else:
        click.echo(
            "warning: SuperNode authentication is off: any SuperNode that reaches the SuperLink may join", err=True
        )
    return argv + (["--database", database] if database else [])


@command.command("superlink")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address the SuperLink's HTTP API (Fleet, Control and Runtime) listens on; 0.0.0.0 for all.",
)
@click.option("--port", type=int, default=None, help="Port of that API (Flower's default: 8000).")
@click.option(
    "--ssl-ca-certfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CA certificate (PEM) for TLS (required unless --insecure).",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Server certificate (PEM) whose SANs name the address SuperNodes use.",
)
@click.option(
    "--ssl-keyfile", type=click.Path(exists=True, dir_okay=False), default=None, help="Server private key (PEM)."
)
@click.option(
    "--supernode-auth/--no-supernode-auth",
    default=True,
    show_default=True,
    help="Accept only SuperNodes whose public keys were registered with `flwr supernode register`.",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="No TLS and no SuperNode authentication: only on a loopback --host, with a warning.",
)
@click.option("--database", default=None, help="SQLite file for the SuperLink's state (default: in memory).")
def superlink(
    host: str,
    port: int | None,
    ssl_ca_certfile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    supernode_auth: bool,
    insecure: bool,
    database: str | None,
) -> None:
    """Start `flower-superlink`: TLS and SuperNode authentication by default, runtime dependency installation off."""
    _exec(superlink_argv(host, port, ssl_ca_certfile, ssl_certfile, ssl_keyfile, supernode_auth, insecure, database))


def supernode_argv(
    address: str,
    partition_id: int,
    num_partitions: int,
    root_certificates: str | None,
    auth_key: str | None,
    supernode_auth: bool,
    insecure: bool,
    port: int | None,
) -> list[str]:
    """The ``flower-supernode`` command line: TLS and a signing key unless ``insecure`` (loopback only)."""
    from fednsl.engines.flower_procs import flower_bin, free_port

    if not 0 <= partition_id < num_partitions:
        raise click.UsageError(f"--partition-id must be in [0, {num_partitions}), got {partition_id}")
    if insecure and (root_certificates or auth_key):
        raise click.UsageError("--insecure contradicts --root-certificates / --auth-key")
    if not insecure and not root_certificates:
        raise click.UsageError(
            "the SuperNode needs --root-certificates (the CA of the SuperLink's TLS "
            "certificate), or --insecure for a SuperLink on a loopback address"
        )
    if not insecure and supernode_auth and not auth_key:
        raise click.UsageError(
            "the SuperNode needs --auth-key (its private key, registered on the SuperLink with "
            "`flwr supernode register`), or --no-supernode-auth when the SuperLink does not "
            "authenticate SuperNodes"
        )
    argv = [
        flower_bin("flower-supernode"),
        "--superlink",
        address,
        "--port",
        str(port or free_port()),
        "--node-config",
        f"partition-id={partition_id} num-partitions={num_partitions}",
    ]
    if insecure:
        _insecure("the SuperNode", _host_of(address))
        return argv + ["--insecure"]
    argv += ["--root-certificates", str(root_certificates)]
    if auth_key:
        argv += ["--auth-supernode-private-key", str(auth_key)]
    return argv


@command.command("supernode")
@click.option("--superlink", "address", required=True, help="The SuperLink's host:port.")
@click.option(
    "--partition-id",
    type=int,
    required=True,
    help="Which client this node serves: index into the method's sorted client ids.",
)
@click.option("--num-partitions", type=int, required=True, help="The method's number of clients.")
@click.option(
    "--root-certificates",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CA certificate (PEM) to verify the SuperLink's TLS certificate (required unless --insecure).",
)
@click.option(
    "--auth-key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="This node's private key (ECDSA, OpenSSH format), registered on the SuperLink.",
)
@click.option(
    "--supernode-auth/--no-supernode-auth",
    default=True,
    show_default=True,
    help="Whether the SuperLink authenticates SuperNodes (then --auth-key is required).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="No TLS and no authentication: only for a SuperLink on a loopback address, with a warning.",
)
@click.option(
    "--port",
    type=int,
    default=None,
    help="Port of the node's local Runtime API (default: a free port; Flower's own default is 9094).",
)
def supernode(
    address: str,
    partition_id: int,
    num_partitions: int,
    root_certificates: str | None,
    auth_key: str | None,
    supernode_auth: bool,
    insecure: bool,
    port: int | None,
) -> None:
    """Start `flower-supernode` for one client of a fednsl method (node config partition-id / num-partitions)."""
    _exec(
        supernode_argv(
            address, partition_id, num_partitions, root_certificates, auth_key, supernode_auth, insecure, port
        )
    )


def _load(config: str, overrides: tuple[str, ...]):
    """The config, or one line naming the bad file or ``--set`` and exit status 2 (as ``fednsl train``)."""
    from fednsl.cli.errors import as_bad_input
    from fednsl.config import load_config

    try:
        return load_config(config, list(overrides))
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise as_bad_input(exc) from exc


@command.command("run")
@click.argument("config")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config entry (repeatable).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Run directory (default: runs/<config>-seed<seed>-<timestamp>); the ServerApp writes it on the "
    "SuperLink's host.",
)
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint (server state).")
@click.option(
    "--superlink",
    "address",
    default=None,
    envvar="FEDNSL_FLOWER_SUPERLINK",
    help="host:port of a running SuperLink [env FEDNSL_FLOWER_SUPERLINK]. Without it a local SuperLink "
    "and one SuperNode per client start on 127.0.0.1 and stop afterwards.",
)
@click.option(
    "--root-certificates",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    envvar="FEDNSL_FLOWER_ROOT_CERTIFICATES",
    help="CA certificate (PEM) of that SuperLink's TLS certificate [env FEDNSL_FLOWER_ROOT_CERTIFICATES]. "
    "Without: insecure connection.",
)
@click.option(
    "--local-tls",
    is_flag=True,
    help="The local federation uses a self-signed TLS certificate and SuperNode authentication.",
)
@click.option(
    "--node-wait-s",
    type=float,
    default=120.0,
    show_default=True,
    help="How long the ServerApp waits for every client's SuperNode before starting.",
)
@click.option(
    "--run-timeout-s",
    type=float,
    default=86400.0,
    show_default=True,
    help="Stop the Flower run (flwr stop) after this long.",
)
@click.option("--quiet", is_flag=True, help="No progress output.")
def run(
    config: str,
    overrides: tuple[str, ...],
    out: Path | None,
    resume: bool,
    address: str | None,
    root_certificates: Path | None,
    local_tls: bool,
    node_wait_s: float,
    run_timeout_s: float,
    quiet: bool,
) -> None:
    """Train CONFIG with `--engine flower`: submitted with `flwr run` to a SuperLink (or a local federation)."""
    from fednsl.engines.flower_deploy import DeploymentOptions
    from fednsl.pipeline import train

    cfg = _load(config, overrides + ("engine=flower",))
    opts = DeploymentOptions(
        superlink=address,
        root_certificates=root_certificates,
        local_tls=local_tls,
        node_wait_s=node_wait_s,
        run_timeout_s=run_timeout_s,
    )
    os.environ.update(opts.to_env())  # what the engine reads (DeploymentOptions.from_env)
    try:
        result = train(cfg, out, resume=resume, progress=not quiet)
    except (ValueError, KeyError, FileNotFoundError, FileExistsError, RuntimeError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"results: {result.run_dir}")


@command.command("app")
@click.argument("config")
@click.argument("app_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config entry (repeatable).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Run directory the ServerApp writes (absolute path on the SuperLink's host).",
)
@click.option("--resume", is_flag=True, help="The ServerApp resumes from the newest checkpoint in --out.")
@click.option(
    "--node-wait-s",
    type=float,
    default=120.0,
    show_default=True,
    help="How long the ServerApp waits for every client's SuperNode before starting.",
)
def app(config: str, app_dir: Path, overrides: tuple[str, ...], out: Path, resume: bool, node_wait_s: float) -> None:
    """Write APP_DIR/pyproject.toml: a Flower app running CONFIG, for `flwr run APP_DIR CONNECTION`."""
    from fednsl.engines.flower_app import write_app

    cfg = _load(config, overrides)
    path = write_app(app_dir, cfg, out, resume=resume, node_wait_s=node_wait_s)
    click.echo(f"wrote {path / 'pyproject.toml'}")
    click.echo(
        f"run it:  flwr run {path} <connection>   (SuperNodes: --node-config 'partition-id=I "
        f"num-partitions=N', N = the method's clients)"
    )


@command.command("certs")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--host",
    "hosts",
    multiple=True,
    default=("127.0.0.1", "localhost"),
    show_default=True,
    help="Names/IPs the SuperLink certificate is valid for (repeatable).",
)
@click.option(
    "--supernodes",
    type=int,
    default=0,
    show_default=True,
    help="Also write this many SuperNode key pairs (for --enable-supernode-auth).",
)
def certs(directory: Path, hosts: tuple[str, ...], supernodes: int) -> None:
    """Write a self-signed CA, a SuperLink certificate and SuperNode keys into DIRECTORY (for tests and trials)."""
    from fednsl.engines.flower_tls import make_node_keys, make_tls

    files = make_tls(directory, hosts=hosts)
    click.echo(
        f"superlink: --ssl-ca-certfile {files.ca_cert} --ssl-certfile {files.server_cert} "
        f"--ssl-keyfile {files.server_key}"
    )
    click.echo(f"supernodes / flwr: --root-certificates {files.ca_cert}")
    for i, (priv, pub) in enumerate(make_node_keys(directory, supernodes)):
        click.echo(
            f"supernode {i}: register with `flwr supernode register {pub} <connection>`, start with --auth-key {priv}"
        )
