"""Vocab, Document, validation helpers."""

from __future__ import annotations

import numpy as np
import pytest

from kg.documents import (
    Corpus,
    DataError,
    Document,
    Mention,
    UnknownNameError,
    Vocab,
    canonical_facts,
    validate_corpus,
    validate_document,
)


def _doc(**kw) -> Document:
    base = dict(doc_id="d1", entity_names=["a", "b", "c"], entity_types=[0, 1, 0],
                facts=[[2, 1, 0], [0, 0, 1], [0, 0, 1]], split="train",
                mentions=[Mention(0, 0, 1, "a"), Mention(1, 2, 3, "b"), Mention(2, 4, 5, "c")],
                tokens=["a", "x", "b", "y", "c"], sentence_starts=[0])
    base.update(kw)
    return Document(**base)


def test_vocab_index_and_unknown_name() -> None:
    v = Vocab(("in0", "gpe0", "spouse_of"), kind="relation")
    assert len(v) == 3 and v.index("gpe0") == 1 and v[2] == "spouse_of" and "in0" in v
    with pytest.raises(UnknownNameError, match="unknown relation 'nope'"):
        v.index("nope")
    with pytest.raises(KeyError):  # also a KeyError for dict-like callers
        v.index("nope")
    with pytest.raises(DataError, match="duplicate"):
        Vocab(("a", "a"))


def test_vocab_from_mapping_drops_and_orders_by_id() -> None:
    v = Vocab.from_mapping({"type::b": 1, "BLANK": 0, "type::a": 2}, drop=("BLANK",), strip_prefix="type::")
    assert v.names == ("b", "a")


def test_facts_are_unique_and_sorted() -> None:
    d = _doc()
    assert d.facts.tolist() == [[0, 0, 1], [2, 1, 0]]
    assert canonical_facts([]).shape == (0, 3)
    assert d.num_entities == 3 and d.num_facts == 2


def test_document_equality_ignores_meta_and_fact_order() -> None:
    a = _doc(meta={"file": "x"})
    b = _doc(facts=[[0, 0, 1], [2, 1, 0]])
    assert a == b
    assert a != _doc(entity_types=[0, 0, 0])


@pytest.mark.parametrize("kw, message", [
    (dict(facts=[[0, 0, 7]]), "fact entity id 7 out of range"),
    (dict(facts=[[0, 5, 1]]), "relation id 5 out of range"),
    (dict(entity_types=[0, 9, 0]), "entity type id 9 out of range"),
    (dict(mentions=[Mention(4, 0, 1, "a")]), "refers to entity 4"),
    (dict(mentions=[Mention(0, 3, 9, "a")]), "beyond the 5 tokens"),
    (dict(mentions=[Mention(0, 2, 2, "a")]), "need 0 <= start < end"),
    (dict(mentions=[Mention(0, 0, 1, "a", sent=3)]), "sentence id 3"),
])
def test_validate_document_names_file_and_doc(kw, message) -> None:
    with pytest.raises(DataError, match=message) as err:
        validate_document(_doc(**kw), num_relations=2, num_entity_types=2, file="f.json")
    assert "f.json" in str(err.value) and "document d1" in str(err.value)


def test_validate_corpus_rejects_duplicate_ids() -> None:
    c = Corpus([_doc(), _doc()], Vocab(("r0", "r1")), Vocab(("t0", "t1")))
    with pytest.raises(DataError, match="duplicate document id 'd1'"):
        validate_corpus(c)


def test_char_mentions_checked_against_text() -> None:
    d = _doc(tokens=None, text="abc", mentions=[Mention(0, 1, 5, "bcde", unit="char")])
    with pytest.raises(DataError, match="beyond the text"):
        validate_document(d, 2, 2)


def test_corpus_counts() -> None:
    c = Corpus([_doc()], Vocab(("r0", "r1")), Vocab(("t0", "t1")))
    assert c.relation_counts().tolist() == [1, 1]
    assert c.type_counts().tolist() == [2, 1]
    tp = c.type_pair_counts()
    assert tp[0, 1] == 1 and tp[0, 0] == 1 and tp.sum() == 2
    assert np.array_equal(c.by_id("d1").facts, c.documents[0].facts)
