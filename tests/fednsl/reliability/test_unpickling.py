"""Reliability cases "torch.load(weights_only=False) on user paths": a crafted .pt must not run code."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fednsl.federation.safe_state import decode, encode
from fednsl.federation.tracking import CheckpointError, Checkpoints, read_checkpoint
from kg.backbones.logire_dump import load_dump


class _Payload:
    """Unpickling this calls ``os.system`` — what an attacker's file would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _craft(path: Path, marker: Path, wrap=lambda p: p) -> None:
    torch.save(wrap(_Payload(marker)), path, pickle_protocol=pickle.DEFAULT_PROTOCOL)


def test_the_payload_is_live_when_unpickled(tmp_path: Path) -> None:
    """Guard for the tests below: with weights_only=False the crafted file does run its command."""
    marker = tmp_path / "pwned"
    _craft(tmp_path / "x.pt", marker)
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert marker.exists()


def test_crafted_checkpoint_does_not_execute_and_resume_refuses(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ckdir = tmp_path / "run" / "checkpoints"
    ckdir.mkdir(parents=True)
    _craft(ckdir / "round_0001.pt", marker,
           wrap=lambda p: {"round": 1, "strategy": p, "clients": {}})
    with pytest.raises(CheckpointError) as err:
        Checkpoints(tmp_path / "run").latest()
    assert not marker.exists()
    msg = str(err.value)
    assert "\n" not in msg and "round_0001.pt: unreadable" in msg and "none of the 1 checkpoints" in msg


def test_crafted_logire_dump_does_not_execute(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _craft(tmp_path / "dump.pt", marker, wrap=lambda p: {"train": [{"N": 2, "logits": p}]})
    with pytest.raises(ValueError) as err:
        load_dump(tmp_path / "dump.pt")
    assert not marker.exists()
    assert "\n" not in str(err.value) and str(tmp_path / "dump.pt") in str(err.value)
    assert "weights_only" in str(err.value) or "tensors" in str(err.value)


def test_a_plain_logire_dump_still_loads(tmp_path: Path) -> None:
    data = {"train": [{"N": 2, "logits": torch.zeros(2, 2, 3), "title": "d0", "in_train": torch.zeros(2, 2, 3).bool()}]}
    torch.save(data, tmp_path / "ok.pt")
    got = load_dump(tmp_path / "ok.pt")
    assert torch.equal(got["train"][0]["logits"], data["train"][0]["logits"]) and got["train"][0]["title"] == "d0"


def test_checkpoint_state_round_trips_bit_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    state = {"round": 3, "clients": {"c0": {"w": rng.normal(size=(3, 2)).astype(np.float32)}},
             "strategy": {"ids": np.arange(5, dtype=np.uint32), "names": np.array(["a", "bc"]),
                          "scalar": np.float64(0.1), "rng": np.random.default_rng(1).bit_generator.state,
                          "t": torch.arange(4.0), "pair": (np.int64(7), [np.zeros((0, 2))])}}
    path = Checkpoints(tmp_path).save(3, state)
    back = read_checkpoint(path)
    assert back["strategy"]["ids"].dtype == np.uint32 and np.array_equal(back["strategy"]["ids"], np.arange(5))
    assert back["clients"]["c0"]["w"].tobytes() == state["clients"]["c0"]["w"].tobytes()
    assert list(back["strategy"]["names"]) == ["a", "bc"] and back["strategy"]["scalar"] == np.float64(0.1)
    assert isinstance(back["strategy"]["scalar"], np.float64)
    assert back["strategy"]["rng"] == state["strategy"]["rng"] and torch.equal(back["strategy"]["t"], torch.arange(4.0))
    assert back["strategy"]["pair"][0] == 7 and back["strategy"]["pair"][1][0].shape == (0, 2)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
    assert decode(encode({"x": [1, "a", None]})) == {"x": [1, "a", None]}


def test_object_arrays_are_refused_when_saving(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="object"):
        Checkpoints(tmp_path).save(1, {"round": 1, "strategy": {"o": np.array([object()])}, "clients": {}})
