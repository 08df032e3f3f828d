"""Reliability case "one document with 2000 entities": the backbone estimates its memory first and refuses
with the estimate and the option, and computes pair scores in bounded row blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.backbone import (
    FederatedFeatures,
    FederatedFeaturesOptions,
    PairScorer,
    _train_pairs,
)
from kg.backbones.memory import check_documents, document_bytes, rows_per_chunk
from kg.backbones.text_features import DocFeatures
from kg.documents import Document


def doc(n: int, facts=()) -> Document:
    return Document(doc_id=f"d{n}", entity_names=[f"e{i}" for i in range(n)],
                    entity_types=np.zeros(n, dtype=np.int64),
                    facts=np.asarray(list(facts), dtype=np.int64).reshape(-1, 3), split="train")


def test_estimate_grows_as_n_squared_and_names_the_option() -> None:
    assert document_bytes(0, 10, 9) == 0
    a, b = document_bytes(1000, 10, 9), document_bytes(2000, 10, 9)
    assert b - a == 4 * (2000**2 - 1000**2) * (4 * 10 + 2 * 9)
    with pytest.raises(ValueError) as err:
        check_documents([doc(3), doc(2000)], 65, 9, 4.0, "backbone.memory_limit_gb")
    msg = str(err.value)
    assert "document d2000 has 2000 entities" in msg and "about 4.4 GB" in msg
    assert "GB" in msg and "raise backbone.memory_limit_gb" in msg and "\n" not in msg
    check_documents([doc(3), doc(2000)], 65, 9, 8.0, "x")  # under a higher limit it passes


def test_prepare_refuses_before_allocating(monkeypatch) -> None:
    """The check runs before features or pre-training: a huge document fails at once."""
    import fednsl.methods.fednsl.backbone as fed
    from kg.backbones.base import ClientDocs

    def boom(*a, **k):
        raise AssertionError("features were computed before the memory check")

    monkeypatch.setattr(fed, "doc_features", boom)
    bb = FederatedFeatures(FederatedFeaturesOptions(text="hash", memory_limit_gb=0.5))
    client = ClientDocs(cid="c0", combo=None, train=[doc(3000)], holdout=[], test=[])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="document d3000 has 3000 entities.*raise backbone.memory_limit_gb"):
        bb.prepare([client], _vocab(["r0", "r1"]), _vocab(["t"]), seed=0)


def _vocab(names):
    from kg.documents import Vocab

    return Vocab(tuple(names))


def test_row_blocks_equal_the_whole_grid() -> None:
    torch.manual_seed(0)
    model = PairScorer(5, 9, 3, ent_hidden=4, hidden=6, seed=1)
    n = 7
    feats = DocFeatures(np.random.default_rng(0).normal(size=(n, 5)).astype(np.float32),
                        np.random.default_rng(1).normal(size=(n, n, 9)).astype(np.float32))
    with torch.no_grad():
        whole = model.pair(torch.cat([model.ent(torch.from_numpy(feats.ent))[:, None].expand(n, n, -1),
                                      model.ent(torch.from_numpy(feats.ent))[None].expand(n, n, -1),
                                      model.ent(torch.from_numpy(feats.ent))[:, None] *
                                      model.ent(torch.from_numpy(feats.ent))[None],
                                      torch.from_numpy(feats.pair)], -1))
        import fednsl.methods.fednsl.backbone as fed
        orig = fed.rows_per_chunk
        try:
            fed.rows_per_chunk = lambda n, b: 2  # force 4 blocks
            blocks = model.document_logits(feats)
        finally:
            fed.rows_per_chunk = orig
    assert blocks.shape == (n, n, 3) and torch.allclose(blocks, whole, atol=1e-6)
    assert rows_per_chunk(2000, 4 * 500) == 67 and rows_per_chunk(10, 1) == 10 and rows_per_chunk(10**6, 10**6) == 1


def test_train_labels_without_the_dense_cube() -> None:
    d = doc(4, facts=[(0, 1, 2), (3, 0, 1), (2, 1, 2)])  # (h, r, t); the last is a self pair, never queried
    feats = {d.doc_id: DocFeatures(np.zeros((4, 2), np.float32), np.zeros((4, 4, 9), np.float32))}

    class AllPairs:
        combo = None

    import fednsl.methods.fednsl.backbone as fed
    mask = ~np.eye(4, dtype=bool)
    orig = fed.query_mask
    fed.query_mask = lambda _d, _c: mask
    try:
        tp = _train_pairs([d], AllPairs(), feats, 2)  # type: ignore[arg-type]
    finally:
        fed.query_mask = orig
    h, t = np.nonzero(mask)
    want = np.zeros((len(h), 2), np.float32)
    for k, (a, b) in enumerate(zip(h, t)):
        for fh, fr, ft in [(0, 1, 2), (3, 0, 1)]:
            if (a, b) == (fh, ft):
                want[k, fr] = 1
    assert np.array_equal(tp.y.numpy(), want) and tp.y.sum() == 2


def test_grounding_table_is_estimated_before_allocation(monkeypatch) -> None:
    from kg.grounding import path_scores
    from kg.grounding.checks import GroundingInputError
    from kg.grounding.memory import ENV, table_bytes

    n, C = 40, 5
    values = torch.rand(1, n, n, C)
    values[..., C - 1] = torch.eye(n)
    bodies = torch.tensor([[0, 1, 2], [1, 0, 4]])
    ok = path_scores(values, bodies)  # fits under the default limit
    assert ok.shape == (1, 2, n, n)
    monkeypatch.setenv(ENV, str(table_bytes(1, n, C + 2, 4) / 2**30))  # less than channels + nodes + outputs
    with pytest.raises(GroundingInputError) as err:
        path_scores(values, bodies)
    assert "1 document(s) of 40 entities" in str(err.value) and ENV in str(err.value)
    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(GroundingInputError, match="must be a number of gigabytes"):
        path_scores(values, bodies)
