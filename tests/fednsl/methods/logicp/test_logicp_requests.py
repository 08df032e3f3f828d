"""Server → client requests of LogiCP, CP-IFCA and IFCA are validated against declared schemas: a real
request passes, a malformed one is refused before it is sent, naming the field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fednsl.federation.records import InvalidMessageError, Message
from fednsl.federation.runner import Federation, InProcessRunner
from fednsl.methods.logicp.federated_cp import TRIVIAL_REGION, received_region
from fednsl.pipeline import build_federation
from tests.fednsl.federation.tiny_configs import tiny

STAGES = {
    "logicp": ("train", "cluster.train", "cluster", "calibrate.scale", "calibrate", "evaluate"),
    "cp-ifca": ("train", "calibrate.scale", "calibrate", "evaluate"),
    "ts-ifca": ("train", "evaluate"),
}


_TRAINED: dict[str, Federation] = {}


def trained(method: str, tmp_path: Path) -> Federation:
    """A federation after a two-round tiny run (clusters formed, regions calibrated); one per method and
    module (tests patch it only through ``monkeypatch``)."""
    if method not in _TRAINED:
        cfg = tiny(method)
        fed = build_federation(cfg)
        out = tmp_path / method
        out.mkdir(parents=True)
        InProcessRunner(fed, cfg, out, progress=False).run()
        _TRAINED[method] = fed
    return _TRAINED[method]


def _bad_shape(name: str) -> Callable[[Message], Message]:
    def corrupt(msg: Message) -> Message:
        arrays = dict(msg.arrays)
        arrays[name] = np.zeros(np.shape(arrays[name])[:-1] + (np.shape(arrays[name])[-1] + 1,), dtype=np.float64)
        return dataclasses.replace(msg, arrays=arrays)

    return corrupt


def _extra_config(msg: Message) -> Message:
    return dataclasses.replace(msg, config={**msg.config, "surprise": 1})


def _first_array(msg: Message, prefix: str = "") -> str:
    names = sorted(k for k in msg.arrays if k.startswith(prefix))
    assert names, f"the {msg.kind} request carries no array starting with {prefix!r}"
    return names[0]


@pytest.mark.parametrize("method", sorted(STAGES))
def test_every_stage_declares_a_request_schema(method: str, tmp_path: Path):
    fed = trained(method, tmp_path)
    for stage in STAGES[method]:
        assert fed.strategy.request_schema(stage) is not None, f"{method}: stage {stage!r} has no request schema"


@pytest.mark.parametrize(
    ("method", "stage", "field"),
    [
        ("logicp", "train", "qhat"),
        ("logicp", "cluster.train", "cluster."),
        ("logicp", "cluster", "c0."),
        ("logicp", "calibrate", "sigma"),
        ("logicp", "calibrate.scale", None),
        ("logicp", "evaluate", "qhat"),
        ("cp-ifca", "train", "c0."),
        ("cp-ifca", "calibrate", "sigma"),
        ("cp-ifca", "evaluate", "qhat"),
        ("ts-ifca", "train", "c0."),
        ("ts-ifca", "evaluate", None),
    ],
)
def test_malformed_request_is_refused_naming_the_field(
    method: str, stage: str, field: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fed = trained(method, tmp_path)
    strat, clients = fed.strategy, sorted(fed.clients)
    rnd = 3
    if field == "qhat":  # the tiny runs are too small for finite ranks: send a finite region
        monkeypatch.setattr(strat, "qhat", np.full_like(strat.qhat, 0.25))
    good = strat.configure(stage, rnd, clients)  # the real request passes its schema
    msg = good[clients[0]]
    if field is None:  # an undeclared config entry
        corrupt, name = _extra_config, "surprise"
    else:
        name = field if field in msg.arrays else _first_array(msg, field)
        corrupt = _bad_shape(name)
    original = strat.stage_table()[stage].configure

    def corrupted(r: int, cs: list[str]) -> dict[str, Message]:
        out = original(r, cs)
        return {c: corrupt(out if isinstance(out, Message) else out[c]) for c in cs}

    monkeypatch.setattr(strat, original.__name__, corrupted)
    with pytest.raises(InvalidMessageError) as err:
        strat.configure(stage, rnd, clients)
    assert err.value.field == name
    assert repr(name) in str(err.value)


def test_undeclared_array_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fed = trained("logicp", tmp_path)
    strat, clients = fed.strategy, sorted(fed.clients)
    original = strat.configure_train
    monkeypatch.setattr(
        strat,
        "configure_train",
        lambda r, cs: {
            c: dataclasses.replace(m, arrays={**m.arrays, "residuals": np.zeros((5, 6))})
            for c, m in original(r, cs).items()
        },
    )
    with pytest.raises(InvalidMessageError, match="'residuals': undeclared array"):
        strat.configure("train", 3, clients)


def test_infeasible_region_travels_as_a_flag_and_decodes_to_infinity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fed = trained("logicp", tmp_path)
    strat, clients = fed.strategy, sorted(fed.clients)
    monkeypatch.setattr(strat, "qhat", np.full_like(strat.qhat, np.inf))  # as after infeasible ranks
    msgs = strat.configure("train", 3, clients)  # validated: no non-finite array on the wire
    msg = msgs[clients[0]]
    assert "qhat" not in msg.arrays and msg.arrays[TRIVIAL_REGION].tolist() == [True]
    q = received_region(msg, strat.horizon)
    assert q.shape == (strat.horizon,) and np.isposinf(q).all()
    monkeypatch.setattr(strat, "qhat", np.full_like(strat.qhat, 0.25))
    q = received_region(strat.configure("train", 3, clients)[clients[0]], strat.horizon)
    np.testing.assert_array_equal(q, np.full(strat.horizon, 0.25))
