"""Real FedAvg runs through the in-process engine: dropout, quorum, resume, determinism, privacy."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from fednsl.config import RunConfig
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.federation.tracking import Checkpoints
from fednsl.pipeline import build_federation, train

TIMING = ("time_s", "bytes")


def config(rounds: int = 3, **fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=rounds, seed=7, name="t",
                     data={"num_clients": 5, "samples_per_client": 60, "features": 4},
                     method_kwargs={"hidden": 8},
                     federation={"min_clients": 2, "client_timeout_s": 5.0, **fed})


def strip(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


class Raising(Client):
    def __init__(self, cid):
        self.cid = cid

    @handles("train", "evaluate")
    def train(self, msg):
        raise RuntimeError("disk full")


class Hanging(Client):
    def __init__(self, inner: Client, seconds: float):
        self.cid, self.inner, self.seconds = inner.cid, inner, seconds

    @handles("train")
    def train(self, msg):
        time.sleep(self.seconds)
        return self.inner.train(msg)

    @handles("evaluate")
    def evaluate(self, msg):
        return self.inner.evaluate(msg)


class NaNSender(Client):
    def __init__(self, inner: Client):
        self.cid, self.inner = inner.cid, inner

    @handles("train")
    def train(self, msg):
        reply = self.inner.train(msg)
        first = next(iter(reply.arrays))
        reply.arrays[first] = np.full_like(reply.arrays[first], np.nan)
        return reply

    @handles("evaluate")
    def evaluate(self, msg):
        return self.inner.evaluate(msg)


def test_failed_clients_dropped_round_completes(tmp_path: Path):
    cfg = config(rounds=2, client_timeout_s=3.0)
    fed = build_federation(cfg)
    ids = sorted(fed.clients)
    fed.clients[ids[0]] = Raising(ids[0])
    fed.clients[ids[1]] = Hanging(fed.clients[ids[1]], seconds=10.0)
    fed.clients[ids[2]] = NaNSender(fed.clients[ids[2]])
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    rows = [r for r in result.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert [r["round"] for r in rows] == [1, 2]
    r1 = rows[0]
    assert r1["train.replies"] == 2 and r1["train.dropped"] == 3 and r1["train.aborted"] == 0
    # the hanging client is still busy in round 2, so it is not sampled then
    assert rows[1]["train.replies"] == 2 and rows[1]["train.dropped"] == 2
    assert all(np.isfinite(v).all() for v in fed.strategy.weights.values())
    log = (tmp_path / "run" / "run.log").read_text()
    assert "disk full" in log and "timed out" in log and "non-finite" in log and ids[2] in log


def test_quorum_loss_skips_stage_and_keeps_weights(tmp_path: Path):
    cfg = config(rounds=1, min_clients=5)
    fed = build_federation(cfg)
    before = {k: v.copy() for k, v in fed.strategy.weights.items()}
    cid = sorted(fed.clients)[0]
    fed.clients[cid] = Raising(cid)
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    row = next(r for r in result.rows if r["scope"] == "server" and r["stage"] == "train")
    assert row["train.aborted"] == 1
    assert all(np.array_equal(before[k], fed.strategy.weights[k]) for k in before)


def test_quorum_loss_abort_mode_raises(tmp_path: Path):
    from fednsl.federation.runner import QuorumLostError
    cfg = config(rounds=1, min_clients=5, on_quorum_loss="abort")
    fed = build_federation(cfg)
    cid = sorted(fed.clients)[0]
    fed.clients[cid] = Raising(cid)
    with pytest.raises(QuorumLostError, match="quorum is 5"):
        train(cfg, tmp_path / "run", progress=False, federation=fed)


def test_seeded_runs_are_bit_identical(tmp_path: Path):
    a = train(config(fraction=0.6), tmp_path / "a", progress=False)
    b = train(config(fraction=0.6), tmp_path / "b", progress=False)
    assert strip(a.rows) == strip(b.rows)
    wa, wb = a.federation.strategy.weights, b.federation.strategy.weights
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_resume_equals_uninterrupted_run(tmp_path: Path):
    full = train(config(rounds=4, fraction=0.6), tmp_path / "full", progress=False)
    train(config(rounds=2, fraction=0.6), tmp_path / "part", progress=False)
    # a crash leaves a torn newest checkpoint: resume must fall back to the previous one
    ck = Checkpoints(tmp_path / "part")
    (ck.dir / "round_0003.pt").write_bytes(b"torn")
    resumed = train(config(rounds=4, fraction=0.6), tmp_path / "part", resume=True, progress=False)
    assert strip(full.rows) == strip(resumed.rows)
    wf, wr = full.federation.strategy.weights, resumed.federation.strategy.weights
    assert all(np.array_equal(wf[k], wr[k]) for k in wf)


def test_partial_participation_samples_fraction(tmp_path: Path):
    res = train(config(rounds=3, fraction=0.4), tmp_path / "r", progress=False)
    reps = [r["train.replies"] for r in res.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert reps == [2, 2, 2]
    per_round = {}
    for r in res.rows:
        if r["scope"].startswith("client:") and r["stage"] == "train":
            per_round.setdefault(r["round"], set()).add(r["scope"])
    assert len(set(map(frozenset, per_round.values()))) > 1  # different clients across rounds


def test_refuses_to_overwrite_a_run(tmp_path: Path):
    train(config(rounds=1), tmp_path / "r", progress=False)
    with pytest.raises(FileExistsError, match="--resume"):
        train(config(rounds=1), tmp_path / "r", progress=False)


def test_resume_rejects_changed_config(tmp_path: Path):
    train(config(rounds=1), tmp_path / "r", progress=False)
    changed = config(rounds=2)
    changed.method_kwargs["lr"] = 0.5
    with pytest.raises(ValueError, match="method_kwargs"):
        train(changed, tmp_path / "r", resume=True, progress=False)


def test_privacy_boundary_only_declared_fields_leave_clients(tmp_path: Path):
    seen: list[tuple[str, Message]] = []
    cfg = config(rounds=2)
    fed = build_federation(cfg)
    train(cfg, tmp_path / "r", progress=False, federation=fed,
          message_hook=lambda d, cid, m: seen.append((cid, m)) if d == "up" else None)
    assert seen
    raw = {cid: c.data for cid, c in fed.clients.items()}
    for cid, msg in seen:
        schema = fed.strategy.reply_schema(msg.kind)
        assert set(msg.arrays) <= schema.array_names()
        assert set(msg.metrics) <= set(schema.metrics) and not msg.config
        for arr in msg.arrays.values():  # no raw sample or label travels
            assert arr.shape[-1:] != raw[cid].x_train.shape[-1:] or arr.ndim != 2 or arr.shape[0] != len(raw[cid].x_train)
            assert not np.array_equal(arr.ravel()[: raw[cid].y_train.size], raw[cid].y_train)


def test_run_dir_outputs(tmp_path: Path):
    res = train(config(rounds=2), tmp_path / "r", progress=False)
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "summary.json", "plots/metrics.png", "run.log"):
        assert (res.run_dir / name).exists(), name
    assert len(Checkpoints(res.run_dir).list()) == 2


class Ticking(Client):
    """Advances a fake budget clock by ``seconds`` at every train call (no real waiting)."""

    def __init__(self, inner: Client, clock: list[float], seconds: float):
        self.cid, self.inner, self.clock, self.seconds = inner.cid, inner, clock, seconds
        self.left: list[float | None] = []  # the time_left_s each train request carried

    @handles("train")
    def train(self, msg):
        self.left.append(msg.config.get("time_left_s"))
        self.clock[0] += self.seconds
        return self.inner.train(msg)

    @handles("evaluate")
    def evaluate(self, msg):
        return self.inner.evaluate(msg)


@pytest.mark.parametrize("engine", ["inprocess", "decentralised"])
def test_time_budget_makes_the_round_before_the_overrun_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
):
    """Rounds of 3 s against a budget of 10 s: before round 3, 6 s spent + 2 × 3 s > 10 s, so round 3 is the last
    (ending at 9 s), evaluated although evaluate_every skips it, and every strategy is told (Strategy.end_at).
    Each request carries the seconds left as it is sent."""
    clock = [0.0]
    monkeypatch.setattr("fednsl.federation.loop.budget_clock", lambda: clock[0])
    cfg = config(rounds=5, evaluate_every=2)
    cfg.engine, cfg.time_budget_s = engine, 10.0
    fed = build_federation(cfg)
    first = sorted(fed.clients)[0]
    ticking = fed.clients[first] = Ticking(fed.clients[first], clock, 3.0 if engine == "inprocess" else 0.6)
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)  # (peers call it 5 times a round)
    assert result.rounds_done == 3 and clock[0] <= 10.0
    if engine == "inprocess":
        assert ticking.left == pytest.approx([10.0, 7.0, 4.0])
    rows = [r for r in result.rows if r["scope"] == "server"]
    assert sorted({r["round"] for r in rows}) == [1, 2, 3]
    assert sorted(r["round"] for r in rows if r["stage"] == "evaluate") == [2, 3]
    assert result.federation.strategy.rounds == 3
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["rounds"], summary["rounds_planned"], summary["time_budget_s"]) == (3, 5, 10.0)
    assert summary["final"]  # the last round's metrics
    assert "time budget: round 3 is the last of 5 planned" in (tmp_path / "run" / "run.log").read_text()


def test_time_budget_stops_before_a_round_that_would_end_past_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A first round of 6 s against a budget of 10 s: a second would end at 12 s, so the run stops after round 1,
    which becomes the last: evaluated (evaluate_every skipped it), its strategy told, its checkpoint saved again."""
    clock = [0.0]
    monkeypatch.setattr("fednsl.federation.loop.budget_clock", lambda: clock[0])
    cfg = config(rounds=4, evaluate_every=2)
    cfg.time_budget_s = 10.0
    fed = build_federation(cfg)
    first = sorted(fed.clients)[0]
    fed.clients[first] = Ticking(fed.clients[first], clock, 6.0)
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    assert result.rounds_done == 1 and clock[0] == 6.0 and result.federation.strategy.rounds == 1
    rows = [r for r in result.rows if r["scope"] == "server"]
    assert {r["round"] for r in rows} == {1} and [r["round"] for r in rows if r["stage"] == "evaluate"] == [1]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final"]["evaluate"]
    assert [r for r, _ in [Checkpoints(tmp_path / "run").latest()]] == [1]
    assert "time budget: round 1 is the last of 4 planned" in (tmp_path / "run" / "run.log").read_text()


def test_a_last_round_the_strategy_needs_runs_past_the_budget_without_a_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A first round of 6 s against a budget of 10 s, and a strategy that may not end after a round already run
    (``may_end_after`` False, as fednsl-kg with ``counts: last``): round 2 runs as the last although it ends past
    the budget, and its requests carry no ``time_left_s``, so clients fit their work as without a budget."""
    clock = [0.0]
    monkeypatch.setattr("fednsl.federation.loop.budget_clock", lambda: clock[0])
    cfg = config(rounds=4)
    cfg.time_budget_s = 10.0
    fed = build_federation(cfg)
    monkeypatch.setattr(fed.strategy, "may_end_after", lambda rnd: False)
    first = sorted(fed.clients)[0]
    ticking = fed.clients[first] = Ticking(fed.clients[first], clock, 6.0)
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    assert result.rounds_done == 2 and result.federation.strategy.rounds == 2
    assert ticking.left == [10.0, None]
    text = (tmp_path / "run" / "run.log").read_text()
    assert "time budget: round 2 runs past the budget, as the last round the method needs" in text
    assert "time budget: round 2 is the last of 4 planned" in text


def test_no_time_budget_runs_every_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = [0.0]
    monkeypatch.setattr("fednsl.federation.loop.budget_clock", lambda: clock[0])
    cfg = config(rounds=4)
    fed = build_federation(cfg)
    first = sorted(fed.clients)[0]
    ticking = fed.clients[first] = Ticking(fed.clients[first], clock, 100.0)
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    assert result.rounds_done == 4 and ticking.left == [None] * 4
    assert "rounds_planned" not in json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.parametrize("bad", [0, -5, float("nan"), "soon"])
def test_a_bad_time_budget_is_refused(bad):
    with pytest.raises(ValueError, match="time_budget_s"):
        RunConfig(method="fedavg", time_budget_s=bad)


def test_resume_may_change_the_time_budget(tmp_path: Path):
    cfg = config(rounds=2)
    train(cfg, tmp_path / "run", progress=False)
    cfg.rounds, cfg.time_budget_s = 3, 1000.0
    result = train(cfg, tmp_path / "run", progress=False, resume=True)
    assert result.rounds_done == 3
