"""LogiCP runs through the federation core: privacy boundary, wiring of the conformal steps, resume,
partial participation, runtime assignment of a new client, ablations, CP-IFCA, Fed-Bayes, FHWA."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fednsl.config import RunConfig
from fednsl.federation.records import Message
from fednsl.federation.runner import InProcessRunner
from fednsl.methods.logicp import LogiCPClient, LogiCPStrategy, calibrate_batch
from fednsl.methods.logicp.federated_cp import ConformalClient
from fednsl.methods.logicp.losses import stl_loss
from fednsl.pipeline import build_federation
from fednsl.tasks.timeseries.training import predict
from rules.conformal import choose_ranks

H = 24
TIMING = ("time_s", "bytes")


def config(method: str = "logicp", rounds: int = 3, clients: int = 6, seed: int = 3, data: dict | None = None,
           **kw) -> RunConfig:
    mk = {"num_clusters": 2, "pretrain_rounds": 1, "local_epochs": 1, "cluster_epochs": 1, "alpha": 0.2,
          "model": {"name": "gru", "hidden": 8}} if method == "logicp" else {"model": {"name": "gru", "hidden": 8},
                                                                             "local_epochs": 1}
    mk.update(kw)
    d = {"name": "synthetic", "num_clients": clients, "days": 50, "input_len": 48, "horizon": H, "groups": 2}
    d.update(data or {})
    return RunConfig(method=method, rounds=rounds, seed=seed, name="t", data=d, method_kwargs=mk,
                     federation={"min_clients": 1})


def run(cfg: RunConfig, out: Path, hook=None, federation=None, resume: bool = False):
    fed = federation if federation is not None else build_federation(cfg)
    out.mkdir(parents=True, exist_ok=True)
    res = InProcessRunner(fed, cfg, out, progress=False, message_hook=hook, resume=resume).run()
    return res, fed


def strip(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


def test_privacy_boundary_only_weights_quantiles_counts_and_scores_leave(tmp_path: Path, monkeypatch):
    produced: list[np.ndarray] = []
    original = ConformalClient.residuals

    def recording(self, model, part):
        e = original(self, model, part)
        produced.append(e)
        return e

    monkeypatch.setattr(ConformalClient, "residuals", recording)
    seen: list[tuple[str, Message]] = []
    cfg = config(rounds=2)      # round 1: pretrain + first clustering/calibration; round 2: every training stage
    res, fed = run(cfg, tmp_path / "r", hook=lambda d, cid, m: seen.append((cid, m)) if d == "up" else None)
    strategy: LogiCPStrategy = fed.strategy  # type: ignore[assignment]
    shapes = {k: v.shape for k, v in strategy.global_w.items()}
    allowed = {"pretrain": set(shapes), "train": set(shapes), "cluster.train": set(shapes),
               "cluster": {"scores", "n_cal"}, "calibrate.scale": {"sigma"}, "calibrate": {"quantiles"},
               "evaluate": set()}
    assert {m.kind for _, m in seen} == set(allowed) and produced
    residual_rows = np.concatenate([np.abs(e) for e in produced] + [e for e in produced])
    for cid, msg in seen:
        assert set(msg.arrays) <= allowed[msg.kind], (msg.kind, set(msg.arrays))
        assert set(msg.metrics) <= set(strategy.reply_schema(msg.kind).metrics) and not msg.config
        client: LogiCPClient = fed.clients[cid]  # type: ignore[assignment]
        raw = np.concatenate([client.data.y_train, client.data.y_val, client.data.y_test,
                              client.data.x_train[:, -H:]])
        for name, arr in msg.arrays.items():
            if name in shapes:
                assert arr.shape == shapes[name]
            elif name == "scores":      # K cluster models (1 candidate, θ^p, at the first clustering)
                assert arr.shape in {(1,), (2,)}
            else:
                assert arr.shape == {"n_cal": (1,), "sigma": (H,), "quantiles": (H,)}[name]
            if arr.shape == (H,):      # a quantile / σ vector is neither a residual nor a data row
                assert not (residual_rows == arr).all(axis=1).any()
                assert not np.isclose(raw, arr, atol=0, rtol=0).all(axis=1).any()
    # and no reply carries anything the size of a calibration set
    n_cal = {fed.clients[c].sizes()["cal"] for c in fed.clients}
    assert not any(a.ndim == 2 and a.shape[0] in n_cal and a.shape[1] == H for _, m in seen for a in m.arrays.values())


def test_real_run_regions_equal_the_batched_pipeline(tmp_path: Path):
    """Q̂_k kept by the server after a real run = the calibration recomputed from the clients' final models
    (the pipeline of test_logicp_coverage); the ranks are choose_ranks(n_cal, members, α)."""
    res, fed = run(config(rounds=3), tmp_path / "r")
    strategy: LogiCPStrategy = fed.strategy  # type: ignore[assignment]
    checked = 0
    for k in range(2):
        members = strategy.members(k)
        if not members:
            continue
        cal = [fed.clients[c].residuals(fed.clients[c].model, "cal") for c in members]
        nor = [fed.clients[c].residuals(fed.clients[c].model, "nor") for c in members]
        assert len({len(e) for e in cal}) == 1       # equal sizes: no random subsampling
        qhat, choice = calibrate_batch(cal, nor, 0.2, "cluster")
        np.testing.assert_allclose(strategy.qhat[k], qhat, rtol=0, atol=1e-12)
        ref = choose_ranks(len(cal[0]), len(members), 0.2)
        assert (strategy.ranks[k]["ell"], strategy.ranks[k]["kappa"]) == (ref.ell, ref.kappa)
        checked += 1
    assert checked
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    for key in ("mse", "s_mse", "t_mse", "tstl_mse", "cov_joint", "cov_step", "s_cov_joint", "width", "width_orig",
                "naive_mean_mse", "step_rho"):
        assert np.isfinite(last[key]), key
    assert last["cov_step"] >= last["cov_joint"]
    # every client's reported width is 2·mean Q̂ of its cluster
    client_rows = {r["scope"][7:]: r for r in res.rows if r["scope"].startswith("client:") and r["stage"] == "evaluate"
                   and r["round"] == 3}
    for cid, row in client_rows.items():
        assert row["width"] == pytest.approx(2 * strategy.qhat[strategy.assign[cid]].mean())
    assert (res.run_dir / "logicp.json").exists()


def test_resume_is_bit_exact(tmp_path: Path):
    full, _ = run(config(rounds=2), tmp_path / "full")
    run(config(rounds=1), tmp_path / "part")
    resumed, _ = run(config(rounds=2), tmp_path / "part", resume=True)
    assert len(strip(full.rows)) > 20
    assert strip(full.rows) == strip(resumed.rows)


def test_partial_participation_keeps_one_client_set_per_round(tmp_path: Path):
    log: dict[tuple[int, str], set[str]] = {}
    hook = lambda d, cid, m: log.setdefault((m.round, m.kind), set()).add(cid) if d == "down" else None  # noqa: E731
    cfg = config(rounds=3, clients=8, participation=0.5, pretrain_rounds=0)
    run(cfg, tmp_path / "r", hook=hook)
    for rnd in (1, 2, 3):
        stages = {k: v for (r, k), v in log.items() if r == rnd}
        sets = [v for k, v in stages.items() if k != "evaluate"]
        assert len(sets) >= 4 and all(s == sets[0] for s in sets) and len(sets[0]) == 4
        assert len(stages["evaluate"]) == 8


def test_new_client_is_assigned_at_runtime_without_retraining(tmp_path: Path):
    cfg = config(rounds=3, clients=7)
    fed = build_federation(cfg)
    newcomer: LogiCPClient = fed.clients.pop(sorted(fed.clients)[-1])   # never takes part in training
    _, fed = run(cfg, tmp_path / "r", federation=fed)
    strategy: LogiCPStrategy = fed.strategy  # type: ignore[assignment]
    before = strategy.state_dict()
    k, scores = strategy.assign_new_client(newcomer)
    # brute force: R_STL (Eq. 10) of every trained cluster model on the newcomer's data and property
    x, _ = newcomer.part("train")
    ref = []
    for w in strategy.clusters:
        net = newcomer.net(w)
        ref.append(float(stl_loss(predict(net, x), newcomer.prop.lower, newcomer.prop.upper, "l1")))
    np.testing.assert_allclose(scores, ref, rtol=1e-6)
    assert k == int(np.argmin(ref))
    after = strategy.state_dict()
    assert after["assign"] == before["assign"] and np.array_equal(after["qhat"], before["qhat"])
    assert all(np.array_equal(a[n], b[n]) for a, b in zip(after["clusters"], before["clusters"]) for n in a)
    metrics = newcomer.handle(strategy.deploy_message(k)).metrics
    assert np.isfinite(metrics["mse"]) and "cov_joint" in metrics and metrics["width"] > 0
    assert metrics["mse"] == pytest.approx(metrics["s_mse"])      # deployed = the cluster model


@pytest.mark.parametrize("kw", [
    {"clustering": "loss", "assign_rule": "balanced", "scale_mode": "client"},
    {"clustering": "random", "cluster_training": "server", "calibrate_with": "cluster", "scale_mode": "none"},
])
def test_ablations_and_options_run(tmp_path: Path, kw):
    res, fed = run(config(rounds=2, **kw), tmp_path / "r")
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    assert np.isfinite(last["mse"]) and np.isfinite(last["cov_joint"])
    assert sorted(fed.strategy.assign) == sorted(fed.clients)


def test_cp_ifca_regions_and_rows(tmp_path: Path):
    res, fed = run(config("cp-ifca", rounds=2, num_clusters=2, alpha=0.2), tmp_path / "r")
    strategy = fed.strategy
    for k in range(2):
        members = strategy.members(k)
        if members:
            cal = [fed.clients[c].residuals(fed.clients[c].model, "cal") for c in members]
            nor = [fed.clients[c].residuals(fed.clients[c].model, "nor") for c in members]
            np.testing.assert_allclose(strategy.qhat[k], calibrate_batch(cal, nor, 0.2, "cluster")[0], atol=1e-12)
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    for key in ("mse", "s_mse", "cov_joint", "s_cov_joint", "width"):
        assert np.isfinite(last[key]), key
    # clients trained on D^tr only
    c = fed.clients[sorted(fed.clients)[0]]
    assert len(c.y) == len(c.parts["train"]) < len(c.data.y_train)


def test_fedbayes_runs_and_keeps_a_gaussian_output_layer(tmp_path: Path):
    res, fed = run(config("ts-fedbayes", rounds=2, personal_steps=2, personal_lr=0.01), tmp_path / "r")
    weights = fed.strategy.weights
    assert {"bayes.mu.weight", "bayes.rho.bias"} <= set(weights) and "head.weight" not in weights
    c = fed.clients[sorted(fed.clients)[0]]
    assert not torch.equal(c.q["mu.weight"].detach(), torch.from_numpy(weights["bayes.mu.weight"]))
    losses = [r["train_loss"] for r in res.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert all(np.isfinite(losses))
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    assert np.isfinite(last["mse"]) and np.isfinite(last["t_mse"])


@pytest.mark.parametrize("kw,match", [
    ({"omega_mse": 0.8, "omega_stl": 0.5}, "ω1 \\+ ω2"),
    ({"clustering": "kmeans"}, "clustering"),
    ({"split": {"cal": 0.0}}, "split.cal"),
    ({"bogus": 1}, "unknown option"),
])
def test_config_errors_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        build_federation(config(**kw))


@pytest.mark.data
def test_fhwa_run(tmp_path: Path, fhwa_path: Path):
    cfg = config(rounds=2, data={"name": "fhwa", "path": str(fhwa_path), "num_clients": 4, "normalise": "none",
                                 "input_len": 120, "max_train": 80, "max_test": 20})
    res, fed = run(cfg, tmp_path / "r")
    last = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    assert last["naive_mean_mse"] < 0.01            # the shipped set's degenerate seasonality
    assert np.isfinite(last["width"]) and 0 <= last["cov_joint"] <= 100
