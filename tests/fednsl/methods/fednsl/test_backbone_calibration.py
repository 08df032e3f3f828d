"""The federated-features backbone's probabilities: weighted loss, hold-out calibration, options, cache key."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.backbone import FederatedFeatures, FederatedFeaturesOptions, positive_weights
from kg.backbones import ClientDocs, build_backbone
from kg.backbones.calibration import sigmoid
from kg.split import query_mask, split_clients
from kg.synthetic import PlantedRuleConfig, generate

SMALL = dict(text="hash", hash_dim=32, ent_hidden=16, hidden=32, rounds=2, local_epochs=1, batch_size=64, cache=False)
TRAINED = {**SMALL, "rounds": 6, "local_epochs": 5, "lr": 0.02}  # enough training for informative scores


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus():
    c, _ = generate(PlantedRuleConfig(num_documents=60, entities_per_doc=(6, 9)), seed=2)
    return c


def clients_of(corpus, n: int = 2, holdout: float = 0.3) -> list[ClientDocs]:
    parts = split_clients(corpus, n, seed=0, holdout=holdout)
    return [ClientDocs(f"c{i}", p.seen, list(p.train), list(p.holdout), list(p.test)) for i, p in enumerate(parts)]


def _median_gold_vs_non(bb: FederatedFeatures, clients: list[ClientDocs]) -> tuple[float, float]:
    gold, non = [], []
    for c in clients:
        for d in c.test:
            x = bb.values(c, d)
            y = np.zeros_like(x, dtype=bool)
            if d.num_facts:
                y[d.facts[:, 0], d.facts[:, 2], d.facts[:, 1]] = True
            m = query_mask(d, c.combo)
            gold.append(x[m][y[m]])
            non.append(x[m][~y[m]])
    return float(np.median(np.concatenate(gold))), float(np.median(np.concatenate(non)))


def test_positive_weights_from_the_clients_own_labels() -> None:
    y = torch.zeros(100, 3)
    y[:4, 0] = 1  # 4 pos / 96 neg → 24
    y[:, 1] = 1  # no negative → 1 (clamped)
    w = positive_weights(y, "balanced", 100.0)
    torch.testing.assert_close(w, torch.tensor([24.0, 1.0, 1.0]))  # relation 2: no positive → 1
    torch.testing.assert_close(positive_weights(y, "sqrt", 100.0), torch.tensor([24.0**0.5, 1.0, 1.0]))
    torch.testing.assert_close(positive_weights(y, "balanced", 10.0), torch.tensor([10.0, 1.0, 1.0]))
    assert positive_weights(y, "none", 100.0) is None


def test_calibrated_values_are_probabilities_and_separate_gold_edges(corpus) -> None:
    clients = clients_of(corpus)
    bb = FederatedFeatures(FederatedFeaturesOptions(**TRAINED, calibration="sigmoid", pos_weight="sqrt"))
    info = bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    assert set(info["calibration"]) == {"c0", "c1"} and info["pos_weight"] == "sqrt"
    for c in clients:
        for d in c.documents[:5]:
            x = bb.values(c, d)
            n = d.num_entities
            assert x.dtype == np.float32 and x.shape == (n, n, len(corpus.relations))
            assert x.min() >= 0 and x.max() <= 1 and not x[np.arange(n), np.arange(n)].any()
            np.testing.assert_array_equal(bb.values(None, d), x)  # None: the document owner's calibration
            z = bb.logits(d)
            off = ~np.eye(n, dtype=bool)
            assert not np.allclose(x[off], sigmoid(z[off]), atol=1e-4)  # the map is not the identity
            if n > 1:  # monotone per relation: ordering of logits kept where the map is strictly increasing
                r = 0
                a, b = z[off][:, r], x[off][:, r]
                order = np.argsort(a, kind="stable")
                assert (np.diff(b[order]) >= -1e-6).all()
    g, ne = _median_gold_vs_non(bb, clients)
    assert g > ne


def test_identity_calibration_is_the_sigmoid_and_options_change_values(corpus) -> None:
    clients = clients_of(corpus)
    plain = FederatedFeatures(FederatedFeaturesOptions(**SMALL, calibration="none", pos_weight="none"))
    plain.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    d = clients[0].test[0]
    n = d.num_entities
    want = sigmoid(plain.logits(d)).astype(np.float32)
    want[np.arange(n), np.arange(n)] = 0
    np.testing.assert_allclose(plain.values(clients[0], d), want, atol=1e-7)
    weighted = FederatedFeatures(FederatedFeaturesOptions(**SMALL, calibration="none", pos_weight="balanced"))
    weighted.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    assert not np.allclose(weighted.logits(d), plain.logits(d))  # the weighted loss trains other weights
    # seeded: the same options give bit-identical values
    again = FederatedFeatures(FederatedFeaturesOptions(**SMALL, calibration="none", pos_weight="balanced"))
    again.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    np.testing.assert_array_equal(again.values(clients[0], d), weighted.values(clients[0], d))


def test_client_without_holdout_positives_falls_back_and_the_run_continues(corpus, caplog) -> None:
    clients = clients_of(corpus)
    saved = [(d, d.facts) for d in clients[1].holdout]
    try:
        for d, _ in saved:
            d.facts = np.zeros((0, 3), dtype=np.int64)
        bb = FederatedFeatures(FederatedFeaturesOptions(**SMALL, calibration="isotonic"))
        with caplog.at_level(logging.WARNING, logger="fednsl.backbones"):
            info = bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    finally:
        for d, f in saved:
            d.facts = f
    lines = [r.getMessage() for r in caplog.records if "client c1" in r.getMessage()]
    assert len(lines) == 1 and "(pos 0, neg" in lines[0] and "σ(logit)" in lines[0]
    assert info["calibration"]["c1"]["own_maps"] == 0 and not info["calibration"]["c1"]["pooled"]
    d = clients[1].test[0]
    x = bb.values(clients[1], d)
    assert x.min() >= 0 and x.max() <= 1


def test_federated_calibration_gives_a_client_the_owner_maps_through_declared_fields(corpus) -> None:
    """c1 has no hold-out positive: with calibration_sharing=federated it scores every relation c0 has a Platt
    map for with c0's map (the only owner), learned from a ``calibrate`` reply carrying (a, b) and counts only;
    with ``local`` it keeps σ(logit)."""
    clients = clients_of(corpus)
    saved = [(d, d.facts) for d in clients[1].holdout]
    ups = []
    try:
        for d, _ in saved:
            d.facts = np.zeros((0, 3), dtype=np.int64)
        values = {}
        for sharing in ("federated", "local"):
            bb = FederatedFeatures(FederatedFeaturesOptions(**TRAINED, calibration_sharing=sharing))
            bb.message_hook = lambda direction, cid, msg: ups.append(msg) if direction == "up" else None
            info = bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
            values[sharing] = (bb, info)
    finally:
        for d, f in saved:
            d.facts = f
    bb, info = values["federated"]
    own = [r for r, m in enumerate(bb.calibrators["c0"].maps) if m is not None]
    assert own and info["calibration"]["c1"]["shared_maps"] == len(own)
    assert bb.calibrators["c1"].shared == own
    d = clients[1].test[0]
    for r in own:
        np.testing.assert_allclose(bb.values(clients[1], d)[..., r][~np.eye(d.num_entities, dtype=bool)],
                                   bb.values(clients[0], d)[..., r][~np.eye(d.num_entities, dtype=bool)], atol=1e-6)
    local, info_local = values["local"]
    assert info_local["calibration"]["c1"]["shared_maps"] == 0
    assert not np.allclose(local.values(clients[1], d), bb.values(clients[1], d))
    calibrate = [m for m in ups if m.kind == "calibrate"]
    assert len(calibrate) == 2  # one reply per client, federated run only
    for m in calibrate:
        assert set(m.arrays) == {"platt", "positives"} and set(m.metrics) == {"num_examples"}
        assert m.arrays["platt"].shape == (len(corpus.relations), 2) and m.arrays["positives"].dtype.kind == "i"


def test_parallel_fedavg_phase_trains_the_same_weights_under_the_same_key(corpus) -> None:
    clients = clients_of(corpus)
    bbs = []
    for par in (1, 2):
        bb = FederatedFeatures(FederatedFeaturesOptions(**SMALL, parallelism=par))
        bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
        bbs.append(bb)
    d = clients[0].test[0]
    np.testing.assert_array_equal(bbs[0].logits(d), bbs[1].logits(d))
    R, T = len(corpus.relations), len(corpus.entity_types)
    assert bbs[0]._key(clients, R, T, "hash", 0) == bbs[1]._key(clients, R, T, "hash", 0)


def test_cache_key_changes_with_every_new_option(corpus) -> None:
    clients = clients_of(corpus)
    R, T = len(corpus.relations), len(corpus.entity_types)
    base = FederatedFeaturesOptions(**SMALL)
    keys = {FederatedFeatures(base)._key(clients, R, T, "hash", 0)}
    for change in ({"pos_weight": "none"}, {"pos_weight": "balanced"}, {"pos_weight_max": 10.0},
                   {"calibration": "isotonic"}, {"calibration": "none"}, {"calibration_min_positives": 7}):
        keys.add(FederatedFeatures(dataclasses.replace(base, **change))._key(clients, R, T, "hash", 0))
    assert len(keys) == 7


@pytest.mark.parametrize(
    "bad, match",
    [({"calibration": "platt"}, "calibration must be one of"), ({"pos_weight": "auto"}, "pos_weight must be one of"),
     ({"pos_weight_max": 0.5}, "pos_weight_max"), ({"calibration_min_positives": 0}, "calibration_min_positives"),
     ({"calibration_sharing": "global"}, "calibration_sharing must be one of")],
)
def test_bad_option_values_give_a_clear_error(bad, match) -> None:
    import fednsl.methods.fednsl  # noqa: F401  (registers the backbone)

    with pytest.raises(ValueError, match=match):
        build_backbone("federated-features", bad, "method_kwargs.backbone")


def test_options_reach_the_backbone_from_yaml_and_set(tmp_path: Path) -> None:
    from fednsl.config import load_config
    from fednsl.methods.fednsl.config import FedNSLConfig
    from fednsl.registry import build_kwargs

    cfg = load_config("fednsl_dwie", ["method_kwargs.backbone.calibration=isotonic",
                                      "method_kwargs.backbone.pos_weight=balanced"])
    name, opts = build_kwargs(FedNSLConfig, cfg.method_kwargs, "method_kwargs").backbone_spec()
    bb = build_backbone(name, opts, "method_kwargs.backbone")
    assert bb.options.calibration == "isotonic" and bb.options.pos_weight == "balanced"
    bad = load_config("fednsl_dwie", ["method_kwargs.backbone.calibration=beta"])
    name, opts = build_kwargs(FedNSLConfig, bad.method_kwargs, "method_kwargs").backbone_spec()
    with pytest.raises(ValueError, match="calibration must be one of"):
        build_backbone(name, opts, "method_kwargs.backbone")


@pytest.mark.data
def test_dwie_subset_calibrated_gold_edges_above_non_edges(dwie_dir: Path) -> None:
    """DWIE, 30 documents, 2 clients: calibrated gold-edge median above the non-edge median and the raw one."""
    from tests.kg import _data

    full = _data.dwie(dwie_dir)
    from kg.documents import Corpus

    docs = [d for d in full.documents if d.num_entities > 0][:30]
    corpus = Corpus(docs, full.relations, full.entity_types, "dwie-30")
    clients = clients_of(corpus, 2, holdout=0.3)
    bb = FederatedFeatures(FederatedFeaturesOptions(**TRAINED, calibration="sigmoid"))
    bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    g, ne = _median_gold_vs_non(bb, clients)
    assert g > ne
