"""load_corpus: format detection and dispatch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg.documents import DataError
from kg.io import detect_format, load_corpus
from kg.synthetic import PlantedRuleConfig, generate, write


@pytest.mark.data
def test_detect_real(dwie_dir: Path) -> None:
    assert detect_format(dwie_dir) == "dwie"  # the tar.gz wins over the docred_style/ subfolder
    assert detect_format(dwie_dir / "dwie_annos.tar.gz") == "dwie"
    assert detect_format(dwie_dir / "docred_style") == "docred"
    assert detect_format(dwie_dir / "docred_style" / "dev.json.gz") == "docred"
    assert len(load_corpus(dwie_dir / "docred_style" / "test.json.gz")) == 99


def test_synthetic_sources(tmp_path: Path) -> None:
    mem = load_corpus("synthetic:seed=3,num_documents=12")
    ref, _ = generate(PlantedRuleConfig(num_documents=12), seed=3)
    assert mem.documents == ref.documents
    write(tmp_path / "syn", PlantedRuleConfig(num_documents=12), seed=3)
    assert detect_format(tmp_path / "syn") == "synthetic"
    assert {d.doc_id for d in load_corpus(tmp_path / "syn")} == {d.doc_id for d in ref}
    (tmp_path / "cfg.json").write_text(json.dumps({"num_documents": 12, "seed": 3}))
    assert load_corpus(tmp_path / "cfg.json").documents == ref.documents
    (tmp_path / "cfg.yaml").write_text("num_documents: 12\nseed: 3\n")
    assert load_corpus(tmp_path / "cfg.yaml").documents == ref.documents
    assert len(load_corpus(tmp_path / "syn", format="docred")) == 12


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_corpus(tmp_path / "missing")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(DataError, match="cannot tell the format"):
        load_corpus(tmp_path / "x.txt")
    with pytest.raises(DataError, match="unknown format 'csv'"):
        load_corpus(tmp_path, format="csv")
    with pytest.raises(DataError, match="must read key=value"):
        load_corpus("synthetic:seed")
