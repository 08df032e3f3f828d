"""``fednsl flower ...`` and ``fednsl train --engine flower`` (which starts its own local federation)."""

from __future__ import annotations

import pytest
import tomllib
from click.testing import CliRunner

pytest.importorskip("flwr")
pytestmark = pytest.mark.flower

from fednsl.cli.main import cli  # noqa: E402
from fednsl.engines.flower_client import config_from_text  # noqa: E402
from fednsl.engines.flower_deploy import DeploymentOptions  # noqa: E402
from fednsl.federation.tracking import MetricsLog  # noqa: E402
from tests.fednsl.engines.flower_helpers import strip_times  # noqa: E402


def test_app_writes_a_flower_app_with_the_resolved_config(tmp_path):
    res = CliRunner().invoke(cli, ["flower", "app", "fedavg_blobs", str(tmp_path / "app"), "--out",
                                   str(tmp_path / "run"), "--set", "rounds=3"])
    assert res.exit_code == 0, res.output
    doc = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    app = doc["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "fednsl.engines.flower:server_app",
                                 "clientapp": "fednsl.engines.flower_client:client_app"}
    cfg = config_from_text(app["config"]["fednsl-config"])
    assert (cfg.method, cfg.rounds, cfg.engine) == ("fedavg", 3, "flower")
    assert app["config"]["run-dir"] == str((tmp_path / "run").resolve())
    assert doc["project"]["dependencies"] == []  # nothing for `uv sync` to fetch


def test_certs_writes_tls_material_and_node_keys(tmp_path):
    res = CliRunner().invoke(cli, ["flower", "certs", str(tmp_path), "--supernodes", "2"])
    assert res.exit_code == 0, res.output
    for name in ("ca.crt", "server.pem", "server.key", "supernode-0", "supernode-1.pub"):
        assert (tmp_path / name).exists()
    assert (tmp_path / "supernode-0.pub").read_text().startswith("ecdsa-sha2-nistp384 ")


def test_deployment_options_from_environment():
    opts = DeploymentOptions.from_env({"FEDNSL_FLOWER_SUPERLINK": "10.0.0.1:9092", "FEDNSL_FLOWER_LOCAL_TLS": "yes",
                                       "FEDNSL_FLOWER_NODE_WAIT_S": "5"})
    assert (opts.superlink, opts.local_tls, opts.node_wait_s, opts.root_certificates) == ("10.0.0.1:9092", True, 5.0, None)
    assert DeploymentOptions.from_env(opts.to_env()) == opts
    with pytest.raises(ValueError, match="FEDNSL_FLOWER_POLL_S"):
        DeploymentOptions.from_env({"FEDNSL_FLOWER_POLL_S": "fast"})


def test_unknown_flower_engine_name_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(cli, ["train", "fedavg_blobs", "--engine", "flower-cloud", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "unknown engine 'flower-cloud'" in res.output


@pytest.mark.slow
def test_train_engine_flower_starts_and_stops_a_local_federation(tmp_path, monkeypatch):
    for key in ("FEDNSL_FLOWER_SUPERLINK", "FEDNSL_FLOWER_ROOT_CERTIFICATES", "FEDNSL_FLOWER_LOCAL_TLS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FEDNSL_FLOWER_RUN_TIMEOUT_S", "300")
    common = ["--set", "rounds=1", "--set", "data.num_clients=2", "--set", "data.samples_per_client=40", "--quiet"]
    ref = CliRunner().invoke(cli, ["train", "fedavg_blobs", "--out", str(tmp_path / "ref"), *common])
    assert ref.exit_code == 0, ref.output
    res = CliRunner().invoke(cli, ["train", "fedavg_blobs", "--engine", "flower", "--out", str(tmp_path / "fl"),
                                   *common])
    assert res.exit_code == 0, res.output
    assert strip_times(MetricsLog(tmp_path / "fl").rows()) == strip_times(MetricsLog(tmp_path / "ref").rows())
    logs = tmp_path / "fl" / "flower" / "local" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["superlink.log", "supernode-0.log", "supernode-1.log"]
    assert (tmp_path / "fl" / "plots").is_dir()


# -- secure by default: superlink / supernode wrappers ------------------------------------------------------
@pytest.fixture
def launched(monkeypatch):
    """The argv `fednsl flower superlink/supernode` would exec (the exec itself is replaced)."""
    import fednsl.cli.flower as flower_cli

    got: list[list[str]] = []
    monkeypatch.setattr(flower_cli, "_exec", lambda argv: got.append(argv))
    return got


@pytest.fixture
def certs(tmp_path):
    res = CliRunner().invoke(cli, ["flower", "certs", str(tmp_path / "c"), "--supernodes", "1"])
    assert res.exit_code == 0, res.output
    return tmp_path / "c"


def test_superlink_is_tls_with_node_auth_by_default(launched, certs):
    tls = ["--ssl-ca-certfile", str(certs / "ca.crt"), "--ssl-certfile", str(certs / "server.pem"),
           "--ssl-keyfile", str(certs / "server.key")]
    res = CliRunner().invoke(cli, ["flower", "superlink", "--host", "0.0.0.0", *tls])
    assert res.exit_code == 0, res.output
    argv = launched[-1]
    assert "--enable-supernode-auth" in argv and "--insecure" not in argv and "--ssl-certfile" in argv
    res = CliRunner().invoke(cli, ["flower", "superlink", "--host", "0.0.0.0"])  # no certificates: refused
    assert res.exit_code == 2 and "needs TLS" in res.output and len(launched) == 1
    res = CliRunner().invoke(cli, ["flower", "superlink", *tls, "--no-supernode-auth"])
    assert res.exit_code == 0 and "--enable-supernode-auth" not in launched[-1]
    assert "SuperNode authentication is off" in res.output


def test_superlink_insecure_only_on_loopback_with_a_warning(launched):
    res = CliRunner().invoke(cli, ["flower", "superlink", "--host", "0.0.0.0", "--insecure"])
    assert res.exit_code == 2 and "refused for the non-loopback address '0.0.0.0'" in res.output
    res = CliRunner().invoke(cli, ["flower", "superlink", "--host", "10.1.2.3", "--insecure"])
    assert res.exit_code == 2 and not launched
    res = CliRunner().invoke(cli, ["flower", "superlink", "--insecure"])  # 127.0.0.1 by default
    assert res.exit_code == 0 and "--insecure" in launched[-1]
    assert "warning: the SuperLink runs with --insecure" in res.output


def test_supernode_needs_certificates_and_a_key_unless_insecure_on_loopback(launched, certs):
    base = ["flower", "supernode", "--partition-id", "0", "--num-partitions", "2"]
    res = CliRunner().invoke(cli, [*base, "--superlink", "10.0.0.5:9092"])
    assert res.exit_code == 2 and "--root-certificates" in res.output
    res = CliRunner().invoke(cli, [*base, "--superlink", "10.0.0.5:9092", "--root-certificates", str(certs / "ca.crt")])
    assert res.exit_code == 2 and "--auth-key" in res.output
    res = CliRunner().invoke(cli, [*base, "--superlink", "10.0.0.5:9092", "--root-certificates", str(certs / "ca.crt"),
                                   "--auth-key", str(certs / "supernode-0")])
    assert res.exit_code == 0, res.output
    assert "--auth-supernode-private-key" in launched[-1] and "--insecure" not in launched[-1]
    res = CliRunner().invoke(cli, [*base, "--superlink", "10.0.0.5:9092", "--insecure"])
    assert res.exit_code == 2 and "non-loopback address '10.0.0.5'" in res.output
    res = CliRunner().invoke(cli, [*base, "--superlink", "127.0.0.1:9092", "--insecure"])
    assert res.exit_code == 0 and "--insecure" in launched[-1] and "warning" in res.output
    assert len(launched) == 2
