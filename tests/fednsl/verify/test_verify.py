"""The model checker finds the broken variants' counterexamples and passes the real protocol."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fednsl.cli.verify import command as verify_cli
from fednsl.config import RunConfig
from fednsl.federation.roles import Client, handles
from fednsl.pipeline import build_federation, train
from fednsl.verify import Centralised, Decentralised, explore, replay
from fednsl.verify.promela import run_spin, spin_available

needs_spin = pytest.mark.skipif(not spin_available(), reason="spin/gcc not installed (`apt-get install -y spin`)")


@pytest.mark.parametrize("model", [
    Centralised(3, 2), Centralised(3, 3, crashes=1), Centralised(4, 2, crashes=2, quorum=2),
    Centralised(5, 2, crashes=1), Decentralised(3, 2), Decentralised(3, 3)])
def test_protocol_satisfies_all_properties(model):
    rep = explore(model)
    assert rep.complete and rep.ok, rep.violations[:1]


@pytest.mark.parametrize("model", [Centralised(3, 2, crashes=1), Centralised(4, 2, crashes=1, tags=False),
                                   Centralised(3, 2, crashes=1, timeouts=False)])
def test_partial_order_reduction_keeps_verdicts(model):
    full, reduced = explore(model.__class__(**{**model.__dict__, "por": False})), explore(model)
    assert full.ok == reduced.ok
    assert {v.prop for v in full.violations} == {v.prop for v in reduced.violations}
    assert reduced.states <= full.states


def test_crash_without_timeout_deadlocks_and_trace_replays():
    model = Centralised(3, 2, crashes=1, timeouts=False)
    rep = explore(model)
    (v,) = rep.violations
    assert v.prop == "P1 deadlock" and "crashes" in " ".join(v.trace)
    end = replay(model, v.trace)
    assert model.successors(end) == [] and model.terminal_ok(end) is not None
    # the same trace under the real protocol (with a timer) is not a dead end
    fixed = Centralised(3, 2, crashes=1, timeouts=True)
    assert fixed.successors(replay(fixed, v.trace))


def test_untagged_rounds_aggregate_stale_update_and_tags_fix_it():
    model = Centralised(3, 2, tags=False)
    rep = explore(model)
    (v,) = rep.violations
    assert v.prop == "P3 round integrity"
    bad = replay(model, v.trace)
    assert bad.bad
    # the same interleaving under the real (tagged) protocol: the stale reply is discarded
    state = replay(Centralised(3, 2, tags=True), v.trace)
    assert not state.bad


def test_untagged_peer_protocol_mixes_rounds():
    rep = explore(Decentralised(3, 2, tags=False))
    assert not rep.ok and rep.violations[0].prop in ("P10 rounds mix", "P1 deadlock")


@needs_spin
@pytest.mark.slow
@pytest.mark.parametrize("model, ok", [(Centralised(3, 2, crashes=1), True),
                                       (Centralised(3, 2, crashes=1, timeouts=False), False),
                                       (Centralised(3, 2, tags=False), False)])
def test_spin_agrees_with_explorer(model, ok, tmp_path: Path):
    res = run_spin(model, tmp_path)
    assert res.ok == ok == explore(model).ok, res.output[-800:]


def test_cli_prints_counterexample_and_fails():
    r = CliRunner().invoke(verify_cli, ["--crashes", "1", "--no-timeouts", "--no-spin"])
    assert r.exit_code == 1 and "VIOLATED P1 deadlock" in r.output and "counterexample" in r.output
    r = CliRunner().invoke(verify_cli, ["--mode", "decentralised", "--rounds", "2", "--format", "json"])
    assert r.exit_code == 0 and '"ok": true' in r.output


# -- the counterexamples replayed on the real in-process engine (regression tests) -----------------
def _cfg(**fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=2, seed=1, name="v",
                     data={"num_clients": 3, "samples_per_client": 40, "features": 4},
                     method_kwargs={"hidden": 4}, federation={"min_clients": 1, **fed})


class Crashed(Client):
    """Crash-stop: never answers."""

    def __init__(self, cid: str):
        self.cid = cid

    @handles("train", "evaluate")
    def train(self, msg):
        time.sleep(3600)


class Stale(Client):
    """Answers round 2 with its round-1 update (the P3 counterexample's late reply)."""

    def __init__(self, inner: Client):
        self.cid, self.inner, self.first = inner.cid, inner, None

    @handles("train")
    def train(self, msg):
        reply = self.inner.train(msg)
        if self.first is None:
            self.first = reply
            return reply
        return self.first

    @handles("evaluate")
    def evaluate(self, msg):
        return self.inner.evaluate(msg)


def test_engine_survives_crash_with_timeout(tmp_path: Path):
    cfg = _cfg(client_timeout_s=1.0)
    fed = build_federation(cfg)
    cid = sorted(fed.clients)[0]
    fed.clients[cid] = Crashed(cid)
    res = train(cfg, tmp_path / "r", progress=False, federation=fed)
    assert res.rounds_done == 2


def test_engine_drops_stale_round_tag(tmp_path: Path):
    cfg = _cfg()
    fed = build_federation(cfg)
    cid = sorted(fed.clients)[0]
    fed.clients[cid] = Stale(fed.clients[cid])
    res = train(cfg, tmp_path / "r", progress=False, federation=fed)
    r2 = next(r for r in res.rows if r["scope"] == "server" and r["stage"] == "train" and r["round"] == 2)
    assert r2["train.dropped"] == 1 and r2["train.replies"] == 2
    assert "tagged round 1, expected 2" in (tmp_path / "r" / "run.log").read_text()


def test_decentralised_fedavg_equals_centralised(tmp_path: Path):
    a = train(_cfg(), tmp_path / "a", progress=False)
    cfg = _cfg()
    cfg.engine = "decentralised"
    b = train(cfg, tmp_path / "b", progress=False)
    wa, wb = a.federation.strategy.weights, b.federation.strategy.weights
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
