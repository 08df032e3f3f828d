"""The Flower engine's server (GridRunner) and ClientApp over an in-memory Grid: equal to the in-process runner.

No processes here: :class:`LoopbackGrid` hands each pushed Flower message to a :class:`FednslClientApp` with one
Flower ``Context`` per node, emptying the ClientApp's process cache before every message as a SuperNode does.
The slow tests with Ray and real SuperLink/SuperNode processes are in test_flower_sim.py / test_flower_deploy.py.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.flower

from fednsl.config import RunConfig  # noqa: E402
from fednsl.engines.flower import GridOptions, GridRunner  # noqa: E402
from fednsl.engines.flower_client import FednslClientApp, build_method  # noqa: E402
from fednsl.federation.records import ArraySpec, Message, Schema  # noqa: E402
from fednsl.federation.roles import Client, Stage, Strategy  # noqa: E402
from fednsl.federation.runner import Federation, InProcessRunner  # noqa: E402
from tests.fednsl.engines.flower_helpers import LoopbackGrid, ObjectSource, strip  # noqa: E402

FAST = GridOptions(node_wait_s=2.0, poll_s=0.001, liveness_s=0.005)


def mk(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


# -- a stateful toy method whose stages are not Flower categories --------------------------------------------
class CountingClient(Client):
    """Counts the messages it served (state across stages and rounds); replies a seeded draw around w."""

    def __init__(self, cid: str, picklable: bool = True):
        self.cid, self.count = cid, 0
        self.lock = None if picklable else threading.Lock()  # a lock cannot be pickled

    def handled_stages(self) -> tuple[str, ...]:
        return OddStages.NAMES

    def handle(self, msg: Message) -> Message:
        self.count += 1
        rng = np.random.default_rng(int(msg.config["seed"]))
        return msg.reply(self.cid, arrays={"x": msg.arrays["w"] + rng.normal(size=3)},
                         metrics={"count": self.count, "num_examples": 1})

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.count = int(state["count"])

    def __deepcopy__(self, memo):  # ObjectSource deep-copies; keep the lock-holding variant copyable
        out = CountingClient(self.cid, picklable=self.lock is None)
        out.count = self.count
        return out


class OddStages(Strategy):
    SCHEMA = Schema(arrays=(ArraySpec("x", "weights", shape=(3,)),), metrics=("count", "num_examples"))
    NAMES = ("share", "em.1", "train.stats", "evaluate")

    def __init__(self):
        self.w = np.zeros(3)

    def declare_stages(self) -> tuple[Stage, ...]:
        def configure(stage: str):
            return lambda rnd, clients: {c: Message(stage, rnd, arrays={"w": self.w},
                                                    config={"note": None, "k": [1, [2]]}) for c in clients}
        return tuple(Stage(name, configure(name), self._aggregate, reply=self.SCHEMA) for name in self.NAMES)

    def _aggregate(self, rnd, replies, failures):
        self.w = np.mean([r.arrays["x"] for r in replies.values()], axis=0)
        return {"w0": float(self.w[0])}

    def state_dict(self):
        return {"w": self.w.copy()}

    def load_state_dict(self, state):
        self.w = np.asarray(state["w"]).copy()


def toy_federation(n: int = 3, picklable: bool = True) -> Federation:
    return Federation(OddStages(), {f"c{i}": CountingClient(f"c{i}", picklable) for i in range(n)})


def toy_config(**fed) -> RunConfig:
    return RunConfig(method="toy", rounds=2, seed=3, name="toy", federation={"min_clients": 2, **fed})


def fedavg_config(**fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=2, seed=7, name="t",
                     data={"num_clients": 3, "samples_per_client": 60, "features": 4}, method_kwargs={"hidden": 8},
                     federation={"min_clients": 2, **fed})


def run_grid(fed: Federation, cfg: RunConfig, run_dir: Path, **grid_kw) -> tuple[Any, LoopbackGrid]:
    run_dir.mkdir(parents=True)
    grid = LoopbackGrid(FednslClientApp(ObjectSource(copy.deepcopy(fed.clients))), len(fed.clients), **grid_kw)
    res = GridRunner(fed, cfg, run_dir, grid=grid, progress=False, options=FAST).run()
    return res, grid


def run_inprocess(fed: Federation, cfg: RunConfig, run_dir: Path):
    run_dir.mkdir(parents=True)
    return InProcessRunner(fed, cfg, run_dir, progress=False).run()


# -- equality with the in-process runner ---------------------------------------------------------------------
@pytest.mark.parametrize("fresh_process,picklable", [(True, True), (False, True), (True, False)])
def test_stateful_client_and_custom_stages_equal_inprocess(tmp_path, fresh_process, picklable):
    """Client state survives stages and rounds (pickled in Context.state, or its state_dict when unpicklable)."""
    ref = run_inprocess(toy_federation(), toy_config(), tmp_path / "ref")
    res, grid = run_grid(toy_federation(picklable=picklable), toy_config(), tmp_path / "grid",
                         fresh_process=fresh_process)
    assert strip(res.rows) == strip(ref.rows)
    counts = [r["count"] for r in res.rows if r["scope"] == "client:c1"]
    assert counts == list(range(1, 9))  # 2 rounds x 4 stages on the same client object
    assert grid.delivered[:3] == ["query.fednsl_hello"] * 3
    assert set(grid.delivered[3:]) == {"query.share", "query.em_1", "train.stats", "evaluate"}


def test_fedavg_equals_inprocess(tmp_path):
    cfg = fedavg_config(client_timeout_s=30.0)
    ref = run_inprocess(build_method(cfg), cfg, tmp_path / "ref")
    res, _ = run_grid(build_method(cfg), cfg, tmp_path / "grid")
    assert strip(res.rows) == strip(ref.rows)
    assert list(res.federation.strategy.weights) == list(ref.federation.strategy.weights)
    for k, v in ref.federation.strategy.weights.items():
        assert np.array_equal(res.federation.strategy.weights[k], v)


# -- failures ------------------------------------------------------------------------------------------------
class FailsFromRound(Client):
    def __init__(self, inner: Client, rnd: int):
        self.cid, self.inner, self.rnd = inner.cid, inner, rnd

    def handled_stages(self) -> tuple[str, ...]:
        return self.inner.handled_stages()

    def handle(self, msg: Message) -> Message:
        if msg.round >= self.rnd:
            raise RuntimeError("gone")
        return self.inner.handle(msg)


MODEL_KEYS = ("loss", "accuracy", "train_loss", "num_examples")


def model_rows(rows):
    return [{k: v for k, v in r.items() if k in ("round", "scope", "stage", *MODEL_KEYS)} for r in rows]


@pytest.mark.parametrize("error_reply", [False, True])
def test_killed_node_is_dropped_and_the_run_goes_on(tmp_path, error_reply):
    """A SuperNode dies before round 2 reaches it: dropped from round 2 train, unavailable afterwards.

    The aggregate equals the in-process run where that client fails from round 2 on.
    """
    cfg = fedavg_config()
    ref_fed = build_method(cfg)
    ref_fed.clients["c2"] = FailsFromRound(ref_fed.clients["c2"], 2)
    ref = run_inprocess(ref_fed, cfg, tmp_path / "ref")

    def crash(grid: LoopbackGrid, msg) -> None:
        if msg.metadata.group_id == "2/train" and msg.metadata.dst_node_id == grid.node_of_partition(2):
            grid.kill(msg.metadata.dst_node_id, error=error_reply)

    res, grid = run_grid(build_method(cfg), cfg, tmp_path / "grid", before_deliver=crash)
    assert model_rows(res.rows) == model_rows(ref.rows)
    r2 = next(r for r in res.rows if r["scope"] == "server" and r["stage"] == "train" and r["round"] == 2)
    assert r2["train.replies"] == 2 and r2["train.dropped"] == 1
    e2 = next(r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate" and r["round"] == 2)
    assert e2["evaluate.replies"] == 2  # c2 is no longer sampled


def test_drop_reasons(tmp_path, caplog):
    cfg = fedavg_config()

    def crash(grid: LoopbackGrid, msg) -> None:
        if msg.metadata.group_id == "1/train" and msg.metadata.dst_node_id == grid.node_of_partition(1):
            grid.kill(msg.metadata.dst_node_id, error=True)
        if msg.metadata.group_id == "1/train" and msg.metadata.dst_node_id == grid.node_of_partition(2):
            grid.kill(msg.metadata.dst_node_id)

    with caplog.at_level("WARNING", logger="fednsl"):
        run_grid(build_method(cfg), cfg, tmp_path / "grid", before_deliver=crash)
    text = caplog.text
    assert "dropped c1: Flower error 5: Node Unavailable" in text
    assert "dropped c2: its SuperNode left the federation" in text


def test_silent_node_times_out(tmp_path, caplog):
    cfg = fedavg_config(client_timeout_s=0.2)
    fed = build_method(cfg)
    grid = LoopbackGrid(FednslClientApp(ObjectSource(copy.deepcopy(fed.clients))), 3)
    grid.silent.add(grid.node_of_partition(0))
    with caplog.at_level("WARNING", logger="fednsl"):
        res = GridRunner(fed, cfg, mk(tmp_path / "g"), grid=grid, progress=False,
                         options=GridOptions(node_wait_s=0.5, poll_s=0.001, liveness_s=0.005)).run()
    rows = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert [r["train.replies"] for r in rows] == [2, 2]
    assert "no SuperNode for clients ['c0']" in caplog.text  # the silent node never answered the hello


def test_timeout_mid_run(tmp_path, caplog):
    cfg = fedavg_config(client_timeout_s=0.2)

    def hang(grid: LoopbackGrid, msg) -> None:
        if msg.metadata.group_id == "2/train":
            grid.silent.add(grid.node_of_partition(0))

    with caplog.at_level("WARNING", logger="fednsl"):
        res, _ = run_grid(build_method(cfg), cfg, tmp_path / "g", before_deliver=hang)
    assert "dropped c0: timed out after 0.2s" in caplog.text
    r2 = [r for r in res.rows if r["scope"] == "server" and r["round"] == 2 and r["stage"] == "train"][0]
    assert r2["train.replies"] == 2


def test_quorum_loss_skips_the_stage(tmp_path):
    cfg = fedavg_config(client_timeout_s=5.0)
    cfg.federation.min_clients = 3

    def crash(grid: LoopbackGrid, msg) -> None:
        if msg.metadata.group_id == "1/train" and msg.metadata.dst_node_id == grid.node_of_partition(0):
            grid.kill(msg.metadata.dst_node_id, error=True)

    fed = build_method(cfg)
    init = {k: v.copy() for k, v in fed.strategy.weights.items()}
    res, _ = run_grid(fed, cfg, tmp_path / "g", before_deliver=crash)
    r1 = [r for r in res.rows if r["scope"] == "server" and r["round"] == 1 and r["stage"] == "train"][0]
    assert r1["train.aborted"] == 1
    assert all(np.array_equal(fed.strategy.weights[k], v) for k, v in init.items())


def test_client_exception_becomes_a_failed_reply(tmp_path, caplog):
    cfg = fedavg_config()
    fed = build_method(cfg)
    clients = copy.deepcopy(fed.clients)
    clients["c1"] = FailsFromRound(clients["c1"], 1)
    grid = LoopbackGrid(FednslClientApp(ObjectSource(clients)), 3)
    with caplog.at_level("WARNING", logger="fednsl"):
        GridRunner(fed, cfg, mk(tmp_path / "g"), grid=grid, progress=False, options=FAST).run()
    assert "dropped c1: Flower error 2: RuntimeError: gone" in caplog.text


# -- node configs --------------------------------------------------------------------------------------------
def test_bad_node_configs_are_rejected_with_reasons(tmp_path):
    cfg = fedavg_config()
    fed = build_method(cfg)
    node_cfgs = {0: {"partition-id": 0, "num-partitions": 4},        # wrong federation size
                 1: {"num-partitions": 3},                            # no partition-id
                 2: {"partition-id": 2, "num-partitions": 3}}
    grid = LoopbackGrid(FednslClientApp(ObjectSource(copy.deepcopy(fed.clients))), 3, node_configs=node_cfgs)
    runner = GridRunner(fed, cfg, mk(tmp_path / "g"), grid=grid, progress=False,
                        options=GridOptions(node_wait_s=0.2, poll_s=0.001))
    with pytest.raises(RuntimeError, match="only 1 of 3 clients have a SuperNode") as err:
        runner.run()
    assert "num-partitions=4, but the method has 3 clients" in str(err.value)
    assert "lacks 'partition-id'" in str(err.value)


def test_duplicate_partition_is_refused(tmp_path):
    cfg = fedavg_config()
    fed = build_method(cfg)
    node_cfgs = {1: {"partition-id": 0, "num-partitions": 3}}
    grid = LoopbackGrid(FednslClientApp(ObjectSource(copy.deepcopy(fed.clients))), 3, node_configs=node_cfgs)
    runner = GridRunner(fed, cfg, mk(tmp_path / "g"), grid=grid, progress=False,
                        options=GridOptions(node_wait_s=0.2, poll_s=0.001))
    res = runner.run()
    assert sorted(runner.node_of) == ["c0", "c2"]
    assert any("already served" in why for why in runner.rejected.values())
    assert [r["train.replies"] for r in res.rows if r["scope"] == "server" and r["stage"] == "train"] == [2, 2]


# -- packaging -----------------------------------------------------------------------------------------------
def test_core_does_not_import_flower_and_engines_load_lazily():
    code = ("import sys, fednsl.pipeline as p; assert 'flwr' not in sys.modules, 'core imported flwr';"
            "assert 'flower' not in p.ENGINES; p.get_engine('flower-sim'); p.get_engine('flower');"
            "assert 'flwr' in sys.modules; print(p.ENGINES.names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'flower', 'flower-sim'" in out.stdout


def test_resume_equals_an_uninterrupted_run(tmp_path):
    """Server state comes back from the checkpoint; FedAvg clients keep no state across rounds."""
    cfg = fedavg_config()
    full, _ = run_grid(build_method(cfg), cfg, tmp_path / "full")
    run_grid(build_method(cfg), replace(cfg, rounds=1), tmp_path / "part")
    fed = build_method(cfg)
    grid = LoopbackGrid(FednslClientApp(ObjectSource(copy.deepcopy(fed.clients))), 3)
    resumed = GridRunner(fed, cfg, tmp_path / "part", grid=grid, resume=True, progress=False, options=FAST).run()
    assert strip(resumed.rows) == strip(full.rows)
