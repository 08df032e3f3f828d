"""Backbones: noisy oracle, LogiRE-dump import, annotation features and the FedAvg-trained feature backbone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg.backbones import (
    ClientDocs,
    LogireDump,
    LogireDumpOptions,
    NoisyOracle,
    OracleOptions,
    backbone_names,
    build_backbone,
)
from kg.backbones.text_features import PAIR_FEATURES, doc_features, embed_strings, hash_embed
from kg.documents import Document, Mention
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


def test_registry_and_option_errors() -> None:
    assert {"logire-dump", "oracle"} <= set(backbone_names())
    with pytest.raises(ValueError, match="unknown backbone"):
        build_backbone("atlop")
    with pytest.raises(ValueError, match="unknown option"):
        build_backbone("oracle", {"dropp": 0.1})
    with pytest.raises(ValueError, match="probability"):
        build_backbone("oracle", {"drop": 1.5})


def test_oracle_drop_rates_range_and_determinism(corpus) -> None:
    bb = NoisyOracle(OracleOptions(drop=0.3, sigma=0.05, drop_by_relation={corpus.relations[0]: 1.0}))
    bb.prepare(clients_of(corpus), corpus.relations, corpus.entity_types, seed=3)
    kept, total, r0 = 0, 0, 0
    for doc in corpus.documents:
        x = bb.values(None, doc)
        assert x.shape == (doc.num_entities, doc.num_entities, len(corpus.relations)) and x.dtype == np.float32
        assert x.min() >= 0 and x.max() <= 1
        np.testing.assert_array_equal(x, bb.values(None, doc))  # depends on (seed, doc id) only
        f = doc.facts
        v = x[f[:, 0], f[:, 2], f[:, 1]]
        other = f[:, 1] != 0
        kept += int((v[other] > 0.5).sum())
        total += int(other.sum())
        r0 += int((v[~other] > 0.5).sum())
    assert r0 == 0  # relation 0 dropped with probability 1
    assert abs(kept / total - 0.7) < 0.05
    bb2 = NoisyOracle(OracleOptions(drop=0.3, sigma=0.05))
    bb2.prepare([], corpus.relations, corpus.entity_types, seed=4)
    assert not np.array_equal(bb2.values(None, corpus.documents[0]), bb.values(None, corpus.documents[0]))


def test_logire_dump_by_order_title_and_na_channel(tmp_path, corpus) -> None:
    R = len(corpus.relations)
    docs = corpus.documents[:3]
    for d in docs:
        d.split = "dev"
    rng = np.random.default_rng(0)
    items = [{"N": d.num_entities, "logits": torch.tensor(rng.normal(size=(d.num_entities, d.num_entities, R + 1))),
              "labels": None, "in_train": None} for d in docs]
    path = tmp_path / "dump.pt"
    torch.save({"dev": items}, path)
    bb = LogireDump(LogireDumpOptions(path=str(path)))
    info = bb.prepare([], corpus.relations, corpus.entity_types, 0, docs)
    assert info["matched_documents"] == 3
    got = bb.values(None, docs[1])
    np.testing.assert_allclose(got, torch.sigmoid(items[1]["logits"][..., 1:]).numpy(), rtol=1e-6)
    # titled items are matched by title, whatever their order
    titled = [dict(it, title=d.doc_id, logits=it["logits"][..., 1:]) for it, d in zip(items, docs)][::-1]
    torch.save({"dev": titled}, path)
    bb = LogireDump(LogireDumpOptions(path=str(path)))
    bb.prepare([], corpus.relations, corpus.entity_types, 0, docs)
    np.testing.assert_allclose(bb.values(None, docs[1]), got, rtol=1e-6)
    with pytest.raises(ValueError, match="no dump item"):
        bb.values(None, corpus.documents[5])
    torch.save({"dev": [dict(items[0], logits=torch.zeros(2, 2, R))]}, path)
    with pytest.raises(ValueError, match="shape"):
        LogireDump(LogireDumpOptions(path=str(path))).prepare([], corpus.relations, corpus.entity_types, 0, docs)


def test_text_features() -> None:
    v = hash_embed(["Germany", "germany", "France", ""], 64)
    np.testing.assert_allclose(v[0], v[1])
    assert abs(np.linalg.norm(v[0]) - 1) < 1e-6 and np.all(v[3] == 0)
    np.testing.assert_array_equal(embed_strings(["a b"], "hash", 32), hash_embed(["a b"], 32))
    doc = Document("d", ["Germany", "German", "Paris"], np.array([0, 1, 0]), np.zeros((0, 3)),
                   mentions=[Mention(0, 0, 7, "Germany", unit="char"), Mention(1, 20, 26, "German", unit="char"),
                             Mention(2, 400, 405, "Paris", unit="char"), Mention(0, 410, 417, "Germany", unit="char")])
    table = {s: hash_embed([s], 16)[0] for s in ("Germany", "German", "Paris")}
    f = doc_features(doc, 2, table, 16)
    assert f.ent.shape == (3, 16 + 2 + 3) and f.pair.shape == (3, 3, PAIR_FEATURES)
    assert f.pair[0, 1, 6] == 1.0 and f.pair[0, 2, 6] == 0.0  # shared 4-char prefix
    assert f.pair[0, 2, 1] == pytest.approx(np.log1p(10) / 8)  # min start distance |410 - 400|
    assert f.pair[0, 0].sum() == 0  # no self pairs
