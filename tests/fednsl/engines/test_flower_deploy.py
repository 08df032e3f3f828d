"""``--engine flower`` on a real SuperLink with 3 SuperNodes (separate processes on 127.0.0.1, free ports).

- FedAvg and FedNSL (configs/fednsl_synthetic.yaml with 3 clients), 2 rounds each, equal the in-process runner
  for the same seed, bit for bit (the metrics rows without timings, the final model, rules.tsv);
- over TLS (a self-signed CA made here) with SuperNode authentication: a SuperNode killed after round 1 does not
  stop the run; the run equals the in-process run in which that client fails from round 2 on; a SuperNode whose
  key was not registered is refused.

Every process runs in its own process group and is stopped in ``finally``; every wait is bounded. The in-process
reference runs overlap the Flower runs (which mostly wait on Flower's polling), in a worker thread.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.flower

from fednsl.config import RunConfig, load_config  # noqa: E402
from fednsl.engines.flower_local import LocalFederation  # noqa: E402
from fednsl.engines.flower_procs import ManagedProcess, flower_bin, free_port  # noqa: E402
from fednsl.engines.flower_tls import make_node_keys, make_tls  # noqa: E402
from fednsl.pipeline import build_federation, train  # noqa: E402
from tests.fednsl.engines.flower_helpers import strip_times  # noqa: E402
from tests.fednsl.engines.test_flower import FailsFromRound, model_rows  # noqa: E402


def fedavg_config(**fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=2, seed=7, name="t",
                     data={"num_clients": 3, "samples_per_client": 60, "features": 4}, method_kwargs={"hidden": 8},
                     federation={"min_clients": 2, **fed})


def use_superlink(monkeypatch, fed: LocalFederation) -> None:
    """Point ``--engine flower`` at ``fed`` (what ``fednsl flower run --superlink`` does)."""
    monkeypatch.setenv("FEDNSL_FLOWER_SUPERLINK", fed.address)
    if fed.tls_files is not None:
        monkeypatch.setenv("FEDNSL_FLOWER_ROOT_CERTIFICATES", str(fed.tls_files.ca_cert))
    monkeypatch.setenv("FEDNSL_FLOWER_NODE_WAIT_S", "90")
    monkeypatch.setenv("FEDNSL_FLOWER_RUN_TIMEOUT_S", "400")


def all_stopped(fed: LocalFederation) -> bool:
    return not any(p.group_alive() for p in [fed.superlink, *fed.supernodes] if p is not None)


@pytest.mark.slow
def test_fedavg_and_fednsl_on_a_superlink_with_3_supernodes(tmp_path, monkeypatch):
    """Both runs go to the SuperLink at once (Flower keeps runs apart; their polling waits overlap).

    The in-process reference runs while the SuperLink and SuperNodes start (separate processes) and is finished
    before the deployed runs begin: torch's intra-op thread count is process state that a fresh client thread
    inherits from whatever another thread of this process set last, so overlapping the reference with the
    deployed runs' server side (in this process) could change float reduction order."""
    fedavg = fedavg_config(client_timeout_s=120.0, evaluate_every=2)
    fednsl = load_config("fednsl_synthetic", ["rounds=2", "data.num_clients=3", "federation.evaluate_every=2"])
    fed = LocalFederation(3, tmp_path / "federation", start_timeout_s=90)
    with ThreadPoolExecutor(max_workers=3) as pool:
        refs = pool.submit(lambda: (train(fedavg, tmp_path / "fedavg-ref", progress=False),
                                    train(fednsl, tmp_path / "fednsl-ref", progress=False)))
        try:
            fed.start()
            use_superlink(monkeypatch, fed)
            ref_avg, ref_nsl = refs.result(timeout=600)
            jobs = [pool.submit(train, replace(cfg, engine="flower"), tmp_path / f"{name}-flower", progress=False)
                    for name, cfg in (("fednsl", fednsl), ("fedavg", fedavg))]
            dep_nsl, dep_avg = (job.result(timeout=600) for job in jobs)
        finally:
            fed.stop()
    assert all_stopped(fed)
    assert strip_times(dep_avg.rows) == strip_times(ref_avg.rows)
    for k, v in ref_avg.federation.strategy.weights.items():  # the final model came back from the ServerApp
        assert (dep_avg.federation.strategy.weights[k] == v).all()
    assert strip_times(dep_nsl.rows) == strip_times(ref_nsl.rows)
    assert {"train.stats", "train", "evaluate"} <= {r["stage"] for r in dep_nsl.rows}
    assert (tmp_path / "fednsl-flower" / "rules.tsv").read_text() == (tmp_path / "fednsl-ref" / "rules.tsv").read_text()


def _wait_for_round(run_dir: Path, rnd: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    path = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if path.exists():
            rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            if any(r["round"] == rnd and r["stage"] == "round" for r in rows):
                return
        time.sleep(0.2)
    raise TimeoutError(f"round {rnd} did not finish in {timeout_s}s")


@pytest.mark.slow
def test_tls_auth_and_a_killed_supernode(tmp_path, monkeypatch):
    cfg = fedavg_config()  # no client timeout: the dead node is noticed through Flower's heartbeats (≤ 60 s)
    fed = LocalFederation(3, tmp_path / "federation", tls=True, node_auth=True, start_timeout_s=90)
    intruder: ManagedProcess | None = None
    run_dir = tmp_path / "flower"
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            fed.start()
            use_superlink(monkeypatch, fed)
            # a SuperNode whose key was never registered: the SuperLink must refuse it
            (priv, _), = make_node_keys(tmp_path / "intruder", 1)
            intruder = ManagedProcess("intruder", [
                flower_bin("flower-supernode"), "--superlink", fed.address, "--root-certificates",
                str(fed.tls_files.ca_cert), "--auth-supernode-private-key", str(priv), "--max-retries", "0",
                "--port", str(free_port()), "--node-config", "partition-id=0 num-partitions=3"],
                tmp_path / "intruder.log", fed._env("intruder"))
            job = pool.submit(train, replace(cfg, engine="flower"), run_dir, progress=False)
            _wait_for_round(run_dir, 1, 300)
            fed.kill_supernode(2)
            ref_fed = build_federation(cfg)  # meanwhile: the in-process run where c2 fails from round 2 on
            ref_fed.clients["c2"] = FailsFromRound(ref_fed.clients["c2"], 2)
            ref = train(cfg, tmp_path / "ref", federation=ref_fed, progress=False)
            dep = job.result(timeout=400)
            intruder.proc.wait(timeout=60)
        finally:
            if intruder is not None:
                intruder.stop()
            fed.stop()
    assert all_stopped(fed)
    assert model_rows(dep.rows) == model_rows(ref.rows)
    assert strip_times([r for r in dep.rows if r["round"] == 1]) == strip_times([r for r in ref.rows if r["round"] == 1])
    r2 = next(r for r in dep.rows if r["scope"] == "server" and r["round"] == 2 and r["stage"] == "train")
    assert r2["train.replies"] == 2 and r2["train.aborted"] == 0
    if r2["train.dropped"]:  # c2 was still listed when round 2 began: the ServerApp dropped it and said so
        # (the in-process reference run logs its own "dropped c2" into the same file: only [serverapp] lines count;
        # which error reports the dead node, Flower's "Node Unavailable" or a lost reply, depends on timing)
        lines = (run_dir / "run.log").read_text().splitlines()
        assert any("[serverapp]" in line and "dropped c2: " in line for line in lines)
    assert intruder.proc.returncode != 0
    assert "Failed to activate SuperNode" in intruder.log_tail(20000)


def test_make_tls_gives_a_chain_for_loopback(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    files = make_tls(tmp_path, hosts=("127.0.0.1", "localhost"))
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
