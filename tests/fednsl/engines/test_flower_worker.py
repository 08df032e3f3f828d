"""The node-local worker that keeps a deployment's fednsl client loaded between Flower messages."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.flower

from fednsl.config import RunConfig  # noqa: E402
from fednsl.engines import flower_worker as fw  # noqa: E402
from fednsl.engines.flower_client import build_method, config_text  # noqa: E402
from fednsl.federation.records import Message  # noqa: E402


def fedavg_config() -> RunConfig:
    return RunConfig(method="fedavg", rounds=2, seed=7, name="w",
                     data={"num_clients": 3, "samples_per_client": 30, "features": 4}, method_kwargs={"hidden": 4},
                     federation={"min_clients": 1})


def worker_pids(path) -> list[int]:
    """The worker processes listening on ``path`` (their command line names it)."""
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            if entry.isdigit() and str(path).encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                out.append(int(entry))
        except OSError:
            continue
    return out


def test_message_codec_round_trip_without_pickle() -> None:
    msg = Message("train.stats", 3, "c1", arrays={"a": np.arange(6, dtype=np.int64).reshape(2, 3),
                                                   "m": np.array([True, False]), "z": np.float32(1.5)},
                  config={"lr": 0.1, "k": [1, 2], "note": None, "seed": 9}, metrics={"n": 4, "loss": 0.25})
    back = fw.message_from_bytes(fw.message_to_bytes(msg))
    assert (back.kind, back.round, back.sender, back.config, back.metrics) == (
        msg.kind, msg.round, msg.sender, msg.config, msg.metrics)
    for k, v in msg.arrays.items():
        assert back.arrays[k].dtype == np.asarray(v).dtype and np.array_equal(back.arrays[k], v)


def test_worker_serves_like_the_client_keeps_state_and_restarts_from_node_state(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cfg = fedavg_config()
    ref = build_method(cfg)
    text = config_text(cfg)
    header = {"run": "1", "pid": 1, "num": 3, "version": 0, "config": text, "config_key": "k"}
    request = ref.strategy.configure("train", 1, ["c1"])["c1"]
    request.config["seed"] = 5
    path = fw.socket_path("run1", 7)
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"

    reply, answer, blob = fw.serve_via_worker(fw.connect(path, launcher_pid=os.getpid()), header, request, None)
    expected = ref.clients["c1"].handle(request)
    assert answer["cid"] == "c1" and answer["version"] == 1 and answer["kind"] == "client"
    for k, v in expected.arrays.items():
        assert np.array_equal(reply.arrays[k], v)
    assert reply.metrics == expected.metrics

    # the worker holds version 1: no state is sent; a client exception fails the message, not the worker
    bad = Message("nope", 1, config={"seed": 1})
    with pytest.raises(fw.ClientRaised, match="no handler for stage 'nope'"):
        fw.serve_via_worker(fw.connect(path, launcher_pid=os.getpid()), {**header, "version": 1}, bad, None)

    # a new worker (the old one is gone) starts from the node state it is sent
    for pid in worker_pids(path):  # the worker this test started
        os.kill(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    again, answer2, _ = fw.serve_via_worker(fw.connect(path, launcher_pid=os.getpid()), {**header, "version": 1},
                                            request, ("client", blob))
    assert answer2["version"] == 2
    second = ref.clients["c1"].handle(request)  # the reference client's second call on the same request
    for k, v in second.arrays.items():
        assert np.array_equal(again.arrays[k], v)
    for pid in worker_pids(path):
        os.kill(pid, signal.SIGTERM)
