"""FedNSL's FedAvg-trained feature backbone (``federated-features``): trains, caches, never reads test docs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.backbone import FederatedFeatures, FederatedFeaturesOptions
from kg.backbones import ClientDocs, backbone_names
from kg.split import split_clients
from kg.synthetic import PlantedRuleConfig, generate

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus():
    c, _ = generate(PlantedRuleConfig(num_documents=40, entities_per_doc=(6, 9)), seed=1)
    return c


def clients_of(corpus, n: int = 4) -> list[ClientDocs]:
    parts = split_clients(corpus, n, seed=0)
    return [ClientDocs(f"c{i}", p.seen, list(p.train), list(p.holdout), list(p.test)) for i, p in enumerate(parts)]


def test_registered_by_name_through_the_method_package() -> None:
    import fednsl.methods.fednsl  # noqa: F401

    assert "federated-features" in backbone_names()


def test_federated_backbone_trains_caches_and_ignores_test_docs(tmp_path, monkeypatch, corpus) -> None:
    monkeypatch.setenv("FEDNSL_CACHE", str(tmp_path / "cache"))
    clients = clients_of(corpus)
    opts = FederatedFeaturesOptions(text="hash", hash_dim=32, ent_hidden=16, hidden=32, rounds=3, local_epochs=1,
                                    batch_size=64)
    messages = []
    bb = FederatedFeatures(opts)
    bb.message_hook = lambda direction, cid, msg: messages.append((direction, set(msg.arrays), dict(msg.metrics)))
    info = bb.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    assert not info["cached"] and len(info["train_loss"]) == 3
    assert info["train_pairs"]["c0"] > 0
    ups = [m for m in messages if m[0] == "up"]
    assert ups and all(set(metrics) <= {"num_examples", "train_loss"} for _, _, metrics in ups)
    doc = clients[0].test[0]
    x = bb.values(clients[0], doc)
    assert x.shape == (doc.num_entities, doc.num_entities, len(corpus.relations))
    assert x.min() >= 0 and x.max() <= 1 and np.all(x[np.arange(doc.num_entities), np.arange(doc.num_entities)] == 0)
    # a second backbone with the same data/options/seed loads the cached weights
    bb2 = FederatedFeatures(opts)
    assert bb2.prepare(clients, corpus.relations, corpus.entity_types, seed=0)["cached"]
    np.testing.assert_array_equal(bb2.values(clients[0], doc), x)
    # changing the test documents' facts changes nothing: they are never trained on
    opts_nc = FederatedFeaturesOptions(**{**opts.__dict__, "cache": False})
    w1 = FederatedFeatures(opts_nc)
    w1.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    saved = [(d, d.facts) for c in clients for d in c.test + c.holdout]
    try:
        for d, _ in saved:
            d.facts = np.zeros((0, 3), dtype=np.int64)
        w2 = FederatedFeatures(opts_nc)
        w2.prepare(clients, corpus.relations, corpus.entity_types, seed=0)
    finally:
        for d, f in saved:
            d.facts = f
    for a, b in zip(w1.model.state_dict().values(), w2.model.state_dict().values()):
        assert torch.equal(a, b)
