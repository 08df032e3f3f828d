"""A document corpus's facts as one typed KG (kg.documents_kg), through the API, load_kg and `fednsl data to-kg`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fednsl.cli.main import cli
from kg.documents_kg import corpus_to_kg
from kg.io import load_corpus
from kg.kg_sources import load_kg
from kg.triples import SPLITS


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("synthetic")


def _named_facts(kg) -> Counter:
    return Counter((kg.entities[h], kg.relations[r], kg.entities[t]) for h, r, t in kg.all_triples())


def test_every_fact_once_with_its_documents_types(corpus) -> None:
    kg = corpus_to_kg(corpus, seed=3, shares=(0.6, 0.2, 0.2))
    expected: Counter = Counter()
    types: dict[str, str] = {}
    for doc in corpus.documents:
        for h, r, t in doc.facts.tolist():
            names = []
            for e in (h, t):
                name = f"{doc.doc_id}/{e}:{' '.join(doc.entity_names[e].split())}"
                types[name] = corpus.entity_types.names[int(doc.entity_types[e])]
                names.append(name)
            expected[(names[0], corpus.relations.names[r], names[1])] += 1
    assert _named_facts(kg) == expected  # each fact in exactly one split, under document-scoped names
    assert {kg.entities[e]: kg.type_names[t] for e, t in enumerate(kg.entity_types)} == types
    assert set(kg.type_names) == set(types.values())  # types with no entity in a fact are left out
    n = len(kg.all_triples())
    assert [len(kg.split(s)) for s in SPLITS] == pytest.approx([0.6 * n, 0.2 * n, 0.2 * n], abs=1)
    again = corpus_to_kg(corpus, seed=3, shares=(0.6, 0.2, 0.2))
    assert all(np.array_equal(kg.split(s), again.split(s)) for s in SPLITS)
    other = corpus_to_kg(corpus, seed=4, shares=(0.6, 0.2, 0.2))
    assert not np.array_equal(kg.test, other.test)
    with pytest.raises(ValueError, match="shares"):
        corpus_to_kg(corpus, shares=(0.0, 0.5, 0.5))


def test_to_kg_writes_a_typed_folder_that_reads_back(corpus, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["data", "to-kg", "synthetic", "--out", str(tmp_path / "kg"), "--seed", "1"])
    assert res.exit_code == 0, res.output
    assert "as a typed KG" in res.output
    back = load_kg(tmp_path / "kg")
    direct = corpus_to_kg(corpus, seed=1)
    assert _named_facts(back) == _named_facts(direct)
    assert {e: back.type_names[t] for e, t in zip(back.entities, back.entity_types)} == {
        e: direct.type_names[t] for e, t in zip(direct.entities, direct.entity_types)
    }
    assert _named_facts(load_kg("documents:synthetic")) == _named_facts(corpus_to_kg(corpus, seed=0))
    bad = CliRunner().invoke(cli, ["data", "to-kg", "synthetic", "--out", str(tmp_path / "x"), "--shares", "1,a,2"])
    assert bad.exit_code == 2 and "--shares" in bad.output
