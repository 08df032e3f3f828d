"""One bad client must not end a run: replies bound to the request, counts bounded, typos caught before round 1.

The "Faults" rows of the reliability cases: FedAvg with a weight of the wrong shape, ``num_examples < 0``, a
``None`` reply; FedNSL with a posterior of the wrong shape, a body id of 10^9, negative triple ids, and a
first-round ``train.stats`` that loses its quorum. Each crashed the run before; now the reply is dropped with
an error naming the client and the field, and the round goes on with its quorum.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fednsl.common.fedavg import FedAvgConfig, FedAvgStrategy
from fednsl.config import FederationConfig, RunConfig
from fednsl.federation.records import InvalidMessageError, Message
from fednsl.federation.roles import Client, Stage, StageError, handles
from fednsl.federation.runner import Federation, InProcessRunner
from fednsl.pipeline import build_federation, train


def fedavg_config(rounds: int = 2, **fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=rounds, seed=3, name="faults",
                     data={"num_clients": 4, "samples_per_client": 40, "features": 4},
                     method_kwargs={"hidden": 4}, federation={"min_clients": 2, "client_timeout_s": 30.0, **fed})


class Spoiling(Client):
    """Wraps a client; ``spoil(reply)`` returns what is sent instead of its train reply."""

    def __init__(self, inner: Client, spoil):
        self.cid, self.inner, self.spoil = inner.cid, inner, spoil

    @handles("train")
    def train(self, msg: Message) -> Message:
        return self.spoil(self.inner.handle(msg))

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        return self.inner.handle(msg)


def wrong_shape(reply: Message) -> Message:
    name = next(iter(reply.arrays))
    reply.arrays[name] = np.zeros(reply.arrays[name].shape + (2,), reply.arrays[name].dtype)
    return reply


def negative_count(reply: Message) -> Message:
    reply.metrics["num_examples"] = -5
    return reply


def too_many(reply: Message) -> Message:  # a covert channel through a count: far above the client's data
    reply.metrics["num_examples"] = 10 ** 6
    return reply


def no_count(reply: Message) -> Message:
    del reply.metrics["num_examples"]
    return reply


@pytest.mark.parametrize("spoil,field,why", [
    (wrong_shape, None, "differs from the request's"),
    (negative_count, "num_examples", "integer >= 0"),
    (too_many, "num_examples", "exceeds the server's bound"),
    (no_count, "num_examples", "missing required metric"),
    (lambda reply: None, None, "reply is NoneType, not a Message"),
])
def test_fedavg_bad_reply_is_dropped_and_the_run_goes_on(tmp_path: Path, caplog, spoil, field, why) -> None:
    cfg = fedavg_config()
    fed = build_federation(cfg)
    bad = sorted(fed.clients)[1]
    fed.clients[bad] = Spoiling(fed.clients[bad], spoil)
    with caplog.at_level("WARNING", logger="fednsl"):
        result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    rows = [r for r in result.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert [(r["train.replies"], r["train.dropped"], r["train.aborted"]) for r in rows] == [(3, 1, 0), (3, 1, 0)]
    line = next(ln for ln in caplog.text.splitlines() if f"dropped {bad}" in ln)
    assert why in line and (field is None or repr(field) in line)
    assert all(np.isfinite(v).all() for v in fed.strategy.weights.values())


def test_fedavg_result_equals_a_run_without_the_bad_client(tmp_path: Path) -> None:
    """Dropping the client is exactly a run in which it failed: same weights as with a raising client."""
    cfg = fedavg_config()

    class Raising(Client):
        def __init__(self, cid: str):
            self.cid = cid

        @handles("train")
        def train(self, msg: Message) -> Message:
            raise RuntimeError("gone")

        @handles("evaluate")
        def evaluate(self, msg: Message) -> Message:
            raise RuntimeError("gone")

    a, b = build_federation(cfg), build_federation(cfg)
    bad = sorted(a.clients)[0]
    a.clients[bad] = Spoiling(a.clients[bad], wrong_shape)
    b.clients[bad] = Raising(bad)
    train(cfg, tmp_path / "a", progress=False, federation=a)
    train(cfg, tmp_path / "b", progress=False, federation=b)
    for k, v in a.strategy.weights.items():
        assert np.array_equal(v, b.strategy.weights[k])


def test_reply_shapes_are_bound_to_the_request() -> None:
    strat = FedAvgStrategy({"w": np.zeros((3, 2), np.float32)}, FedAvgConfig())
    request = strat.configure("train", 1, ["c0"])["c0"]
    ok = request.reply("c0", arrays={"w": np.ones((3, 2), np.float32)}, metrics={"num_examples": 4, "train_loss": 0.5})
    strat.check_reply("train", request, ok)
    bad = request.reply("c0", arrays={"w": np.ones((2, 3), np.float32)}, metrics={"num_examples": 4, "train_loss": 0.5})
    with pytest.raises(InvalidMessageError, match=r"from c0 .*field 'w'.*differs from the request's 'w' \(3, 2\)"):
        strat.check_reply("train", request, bad)
    strat.example_limits = {"c0": 10}
    with pytest.raises(InvalidMessageError, match="exceeds the server's bound 10"):
        strat.check_reply("train", request, request.reply("c0", arrays={"w": np.ones((3, 2), np.float32)},
                                                          metrics={"num_examples": 11, "train_loss": 0.5}))


# -- typos fail before round 1 ------------------------------------------------------------------------------
class Misspelt(FedAvgStrategy):
    def __init__(self, base: FedAvgStrategy, typo: str):
        super().__init__(base.weights, base.cfg)
        self.typo = typo

    def stages(self, rnd: int):
        return (self.typo, "evaluate")


def test_undeclared_stage_name_fails_before_any_round(tmp_path: Path) -> None:
    cfg = fedavg_config()
    fed = build_federation(cfg)
    fed = Federation(Misspelt(fed.strategy, "trian"), fed.clients)
    with pytest.raises(StageError, match=r"undeclared stages \['trian'\]; declared: \['evaluate', 'train'\]"):
        InProcessRunner(fed, cfg, tmp_path, progress=False).run()
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing ran


def test_client_without_a_handler_fails_at_registration(tmp_path: Path) -> None:
    class OnlyTrain(Client):
        cid = "c0"

        @handles("train")
        def fit(self, msg: Message) -> Message:
            return msg.reply(self.cid)

    cfg = fedavg_config()
    fed = build_federation(cfg)
    fed.clients[sorted(fed.clients)[0]] = OnlyTrain()
    with pytest.raises(StageError, match=r"has no handler for stages \['evaluate'\]"):
        InProcessRunner(fed, cfg, tmp_path, progress=False).run()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_stage_declared_twice_and_two_handlers_for_one_stage_are_refused() -> None:
    base = build_federation(fedavg_config()).strategy

    class Twice(FedAvgStrategy):
        def declare_stages(self):
            st = Stage("train", self.configure_train, self.aggregate_train, reply=self.train_reply_schema)
            return (st, st)

    with pytest.raises(StageError, match="declares stage 'train' twice"):
        Twice(base.weights, base.cfg).stage_table()
    with pytest.raises(StageError, match="two handlers for stage 'train'"):
        class Ambiguous(Client):  # noqa: F841 - defining the class is the test
            @handles("train")
            def a(self, msg):
                return msg

            @handles("train")
            def b(self, msg):
                return msg
    with pytest.raises(StageError, match="must be callable"):
        Stage("train", "configure_train", base.aggregate_train, reply=base.train_reply_schema())


# -- configuration ------------------------------------------------------------------------------------------
def test_client_timeout_has_a_finite_default_and_bad_values_are_refused(tmp_path: Path) -> None:
    assert FederationConfig().client_timeout_s == 3600.0
    with pytest.raises(ValueError, match="client_timeout_s must be > 0"):
        FederationConfig(client_timeout_s=-1)
    with pytest.raises(ValueError, match="min_clients=5 exceeds data.num_clients=4"):  # refused when read
        fedavg_config(min_clients=5)


# -- FedNSL ----------------------------------------------------------------------------------------------
TINY = {"num_samples": 30, "scorer_steps": 20, "backbone": {"name": "oracle", "drop": 0.3},
        "generator": {"d_model": 32, "nhead": 2, "dim_feedforward": 64, "pretrain_epochs": 1, "epochs": 1,
                      "samples_per_epoch": 400, "batch_size": 128}}


def fednsl_config(rounds: int = 1, **fed) -> RunConfig:
    return RunConfig(method="fednsl", rounds=rounds, seed=0, name="tiny",
                     data={"path": "synthetic", "synthetic": {"num_documents": 40, "entities_per_doc": [6, 8]}},
                     method_kwargs=dict(TINY), federation={"min_clients": 1, **fed})


@pytest.fixture
def _one_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDNSL_CACHE", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class FedNSLSpoiler(Client):
    """A FedNSL client whose replies to ``stage`` are changed by ``spoil``."""

    def __init__(self, inner: Client, stage: str, spoil):
        self.cid, self.inner, self.stage, self.spoil = inner.cid, inner, stage, spoil

    def handled_stages(self) -> tuple[str, ...]:
        return self.inner.handled_stages()

    def handle(self, msg: Message) -> Message:
        reply = self.inner.handle(msg)
        return self.spoil(reply, msg) if msg.kind == self.stage else reply


def posterior_too_wide(reply: Message, msg: Message) -> Message:
    T, J = reply.arrays["posterior"].shape  # the client keeps the rows valid, only J disagrees with the request
    post, mask = np.zeros((T, J + 1)), np.zeros((T, J + 1), bool)
    post[:, :J], mask[:, :J] = reply.arrays["posterior"], reply.arrays["mask"]
    reply.arrays["posterior"], reply.arrays["mask"] = post, mask
    return reply


def huge_body_id(reply: Message, msg: Message) -> Message:
    reply.arrays["bodies"] = reply.arrays["bodies"].copy()
    reply.arrays["bodies"][0, 0, 0] = 10 ** 9
    return reply


def negative_triple(reply: Message, msg: Message) -> Message:
    reply.arrays["triples"] = reply.arrays["triples"].copy()
    reply.arrays["triples"][0, 1] = -1
    return reply


@pytest.mark.usefixtures("_one_thread")
def test_fednsl_bad_shapes_and_ids_are_dropped_and_the_round_completes(tmp_path: Path, caplog) -> None:
    cfg = fednsl_config()
    fed = build_federation(cfg)
    ids = sorted(fed.clients)
    assert len(ids) >= 4
    fed.clients[ids[0]] = FedNSLSpoiler(fed.clients[ids[0]], "train", posterior_too_wide)
    fed.clients[ids[1]] = FedNSLSpoiler(fed.clients[ids[1]], "train.stats", huge_body_id)
    fed.clients[ids[2]] = FedNSLSpoiler(fed.clients[ids[2]], "train.stats", negative_triple)
    with caplog.at_level("WARNING", logger="fednsl"):
        result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    server = {r["stage"]: r for r in result.rows if r["scope"] == "server"}
    assert server["train.stats"]["train.stats.dropped"] == 2
    assert server["train"]["train.dropped"] == 1 and server["train"]["train.replies"] == len(ids) - 1
    assert "evaluate" in server
    text = caplog.text
    assert f"dropped {ids[0]}" in text and "field 'posterior'" in text and "but the request has J=" in text
    assert f"dropped {ids[1]}" in text and "field 'bodies'" in text and "1000000000 out of range" in text
    assert f"dropped {ids[2]}" in text and "field 'triples'" in text and "negative entries" in text


class FailsStatsOnce(Client):
    """Raises in round 1's train.stats, works afterwards."""

    def __init__(self, inner: Client):
        self.cid, self.inner = inner.cid, inner

    def handled_stages(self) -> tuple[str, ...]:
        return self.inner.handled_stages()

    def handle(self, msg: Message) -> Message:
        if msg.kind == "train.stats" and msg.round == 1:
            raise RuntimeError("disk full")
        return self.inner.handle(msg)


@pytest.mark.usefixtures("_one_thread")
def test_fednsl_stats_quorum_loss_skips_the_round_and_retries(tmp_path: Path) -> None:
    cfg = fednsl_config(rounds=2)
    fed = build_federation(cfg)
    ids = sorted(fed.clients)
    cfg.federation.min_clients = len(ids)
    fed.clients[ids[0]] = FailsStatsOnce(fed.clients[ids[0]])
    result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    by_round = {(r["round"], r["stage"]): r for r in result.rows if r["scope"] == "server"}
    assert by_round[(1, "train.stats")]["train.stats.aborted"] == 1
    assert (1, "train") not in by_round and (1, "evaluate") not in by_round  # skipped, not crashed
    assert by_round[(2, "train.stats")]["train.stats.aborted"] == 0  # retried next round
    assert by_round[(2, "train")]["train.replies"] == len(ids)
    assert (2, "evaluate") in by_round
