"""KIFL end to end: runs through fednsl.pipeline.train, the R-KM guarantee, KM errors, privacy, Alg. 1, resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fednsl.config import RunConfig, load_config
from fednsl.federation.records import Message
from fednsl.methods.kifl.knowledge import KnowledgeModelError
from fednsl.pipeline import build_federation, train

KM_MODULE = "tests.fednsl.methods.kifl.test_kifl"


# KMs referenced by import path from the configs below ------------------------------------------------------
def wrong_shape_pkm(x: np.ndarray) -> np.ndarray:
    return np.zeros((len(x), 4))              # wine has k = 3 classes


def empty_range_km(x: np.ndarray) -> np.ndarray:
    out = np.ones((len(x), 3), dtype=bool)
    out[x[:, 12] > 700] = False                # proline > 700: no class admissible
    return out


def random_range_km(x: np.ndarray, seed: int) -> np.ndarray:
    """Pseudo-random admissible sets that depend only on the row (a fixed function of x, Def. 4.1)."""
    keys = (np.abs(x[:, 0] * 1000 + x[:, 12]) * 7919).astype(np.int64) + seed
    bits = (keys[:, None] >> np.arange(3)[None, :]) & 1
    out = bits.astype(bool)
    out[np.arange(len(x)), keys % 3] = True
    return out


def wine(rounds: int = 2, **kwargs) -> RunConfig:
    cfg = load_config("kifl_wine_rules", [f"rounds={rounds}"])
    cfg.method_kwargs.update(kwargs)
    return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real 3-client run (rule file, callables and fitted KMs) with every message recorded."""
    seen: list[tuple[str, str, Message]] = []
    cfg = wine(rounds=2)
    cfg.method_kwargs["knowledge"] = dict(cfg.method_kwargs["knowledge"])
    cfg.method_kwargs["knowledge"]["c2"] = {
        "prediction": {"fit": "logreg"},
        "range": {"callable": f"{KM_MODULE}:random_range_km", "kwargs": {"seed": 3}}}
    res = train(cfg, tmp_path_factory.mktemp("kifl") / "run", progress=False,
                message_hook=lambda d, cid, m: seen.append((d, cid, m)))
    return res, seen


def test_run_writes_metrics_and_never_violates(trained):
    res, _ = trained
    ev = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"]
    assert [r["round"] for r in ev] == [1, 2]
    assert all(r["pov"] == 0.0 for r in ev) and 0.0 <= ev[-1]["accuracy"] <= 1.0
    assert (res.run_dir / "summary.json").exists()
    tsv = (res.run_dir / "clients.tsv").read_text().splitlines()
    assert tsv[0] == "client\tnum_examples\tTA\tPOV" and [r.split("\t")[0] for r in tsv[1:]] == ["c0", "c1", "c2"]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40))
def test_combined_model_never_predicts_outside_the_range(trained, seed: int, n: int):
    res, _ = trained
    rng = np.random.default_rng(seed)
    for cid, client in res.federation.clients.items():
        lo, hi = client.data.x_test.min(0), client.data.x_test.max(0)
        x = rng.uniform(lo - 0.5 * (hi - lo), hi + 0.5 * (hi - lo), size=(n, len(lo))).astype(np.float32)
        probs = client.predict_proba(x, res.federation.strategy.weights)
        allowed = client.knowledge.rkm.allowed(x).astype(bool)
        assert np.all(probs[~allowed] == 0.0), cid
        assert np.all(allowed[np.arange(n), probs.argmax(1)]), cid
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)


def test_messages_leaving_clients_hold_only_weights_and_counts(trained):
    res, seen = trained
    fed = res.federation
    shapes = {k: v.shape for k, v in fed.strategy.weights.items()}
    ups = [(cid, m) for d, cid, m in seen if d == "up"]
    assert {m.kind for _, m in ups} == {"train", "evaluate"}
    for cid, msg in ups:
        assert not msg.config
        assert all(isinstance(v, int) and v >= 0 for v in msg.metrics.values()), msg.metrics   # counts
        if msg.kind == "train":
            assert set(msg.metrics) == {"num_examples"}
            assert {k: a.shape for k, a in msg.arrays.items()} == shapes                      # θ^m only
            assert all(np.issubdtype(a.dtype, np.floating) for a in msg.arrays.values())
        else:
            assert not msg.arrays and set(msg.metrics) == {"num_examples", "correct", "violations"}
        client = fed.clients[cid]
        for arr in msg.arrays.values():          # no KM output, label or raw row rides along
            for secret in (client.km_train.allowed, client.km_train.pkm, client.data.y_train, client.data.x_train):
                assert arr.shape != secret.shape


def test_local_mode_sends_no_weights(tmp_path):
    seen: list[Message] = []
    cfg = wine(rounds=2, federated=False)
    res = train(cfg, tmp_path / "r", progress=False, message_hook=lambda d, c, m: seen.append(m) if d == "up" else None)
    assert seen and all(not m.arrays for m in seen)
    init = res.federation.strategy.initial_weights
    assert all(np.array_equal(init[k], res.federation.strategy.weights[k]) for k in init)   # nothing averaged
    assert all(c.local_weights is not None for c in res.federation.clients.values())


def test_wrong_shaped_km_output_names_the_client():
    cfg = wine()
    cfg.method_kwargs["knowledge"] = {"c1": {"prediction": {"callable": f"{KM_MODULE}:wrong_shape_pkm"}}}
    with pytest.raises(KnowledgeModelError, match=r"client 'c1'.*wrong_shape_pkm: output has shape \(\d+, 4\)"):
        build_federation(cfg)


def test_range_excluding_every_class_names_the_client():
    cfg = wine()
    cfg.method_kwargs["knowledge"] = {"all": {"range": {"callable": f"{KM_MODULE}:empty_range_km"}}}
    with pytest.raises(KnowledgeModelError, match=r"client 'c0'.*range excludes every class on \d+ of \d+ rows"):
        build_federation(cfg)


@pytest.mark.parametrize("knowledge, message", [
    ({"c9": {"prediction": {"fit": "logreg"}}}, r"unknown client id\(s\) \['c9'\]"),
    ({"all": {"prediction": {"fit": "magic"}}}, "unknown fitted prediction KM 'magic'"),
    ({"all": {"range": {"callable": "no_such_module:f"}}}, "cannot import module 'no_such_module'"),
    ({"all": {"range": {"rules": "configs/kifl/wine_expert.rules", "kwargs": {}}}}, r"unknown key\(s\) \['kwargs'\]"),
    ({"all": {"prediction": {"fit": "logreg", "callable": "x:y"}}}, "exactly one of"),
    ({"all": {"weight": 1}}, r"unknown key\(s\) \['weight'\]"),
])
def test_config_errors_are_clear(knowledge, message):
    cfg = wine()
    cfg.method_kwargs["knowledge"] = knowledge
    with pytest.raises(ValueError, match=message):
        build_federation(cfg)


def test_resume_is_bit_exact_in_local_mode(tmp_path):
    full = train(wine(rounds=3, federated=False), tmp_path / "full", progress=False)
    train(wine(rounds=2, federated=False), tmp_path / "part", progress=False)
    resumed = train(wine(rounds=3, federated=False), tmp_path / "part", resume=True, progress=False)
    for cid, c in full.federation.clients.items():
        other = resumed.federation.clients[cid].local_weights
        assert all(np.array_equal(c.local_weights[k], other[k]) for k in c.local_weights)
