"""Where a knowledge graph comes from: a triples folder, a federated ``clientK/`` folder (read as its union),
``pykeen:<name>`` (the files shipped in the pykeen wheel), ``synthetic[:<seed>]`` (the planted-rule KG) or
``documents:<corpus>`` (a document corpus's facts as one typed KG, :mod:`kg.documents_kg`, split with seed 0).

Kept apart from :mod:`kg.triples` (the reader) so that the reader, the partitions and the planted-rule generator
do not import each other.
"""

from __future__ import annotations

from pathlib import Path

from kg.kg_partition import read_federated_kg, union_kg
from kg.kg_synthetic import planted_kg
from kg.triples import (
    _SUFFIXES,
    KnowledgeGraph,
    TriplesError,
    _read_text,
    find_split_files,
    pykeen_dataset_dir,
    read_triples_folder,
)

__all__ = ["empty_split", "load_kg", "split_file"]


def load_kg(source: str | Path) -> KnowledgeGraph:
    """Load a KG from a triples folder, ``pykeen:<name>``, ``synthetic[:<seed>]`` or ``documents:<corpus>``
    (see the module doc)."""
    text = str(source)
    if text.startswith("documents:"):
        from kg.documents_kg import corpus_to_kg
        from kg.io import load_corpus

        where = text.removeprefix("documents:")
        corpus = load_corpus(where)
        if not corpus.documents:  # the KG of no documents has no triples: name the corpus's file, not the KG
            from kg.io import missing_training_data

            missing = missing_training_data(corpus, where)
            assert missing is not None
            raise TriplesError(f"{missing.reason}, so documents:{where} gives no triples", file=missing.file)
        return corpus_to_kg(corpus, seed=0).replace(name=f"{corpus.name or 'documents'}-kg")
    if text.startswith("pykeen:"):
        name = text.split(":", 1)[1]
        return read_triples_folder(pykeen_dataset_dir(name), name=f"pykeen:{name.lower()}")
    if (text == "synthetic" or text.startswith("synthetic:")) and not Path(text).exists():
        seed_text = text.partition(":")[2] or "0"
        try:
            seed = int(seed_text)
        except ValueError:
            raise TriplesError(f"{text}: the seed must be an integer (synthetic:<seed>)") from None
        return planted_kg(seed=seed)[0]
    path = Path(source)
    if not path.exists():
        raise TriplesError(
            f"{path}: no such file or folder (expected a folder with train/valid/test triples, "
            "pykeen:<name> or synthetic[:<seed>])",
            file=str(path),
        )
    if (
        path.is_dir()
        and not any((path / f"train{suf}").is_file() for suf in _SUFFIXES)
        and any(path.glob("client*/train*"))
    ):
        return union_kg(read_federated_kg(path), name=path.name)
    return read_triples_folder(path)


def split_file(source: str | Path, split: str) -> str:
    """The file ``split`` of ``source`` is read from, for messages: ``<folder>/<split>.txt`` (the suffix found) for
    a triples folder, else ``<source> (<split> split)``."""
    path = Path(str(source))
    if path.is_dir() and str(source).partition(":")[0] not in _SCHEMES:
        try:
            return str(find_split_files(path)[split])
        except TriplesError:  # a federated folder read as the union of its clients
            pass
    return f"{source} ({split} split)"


def empty_split(kg: KnowledgeGraph, source: str | Path, split: str) -> TriplesError | None:
    """None when ``split`` of ``kg`` (loaded from ``source``) holds triples; else the error that names the file
    it came from (:func:`split_file`) and says why it holds none: the file is empty, or holds only blank lines.
    Callers add what the split is needed for."""
    if len(kg.split(split)):
        return None
    file = split_file(source, split)
    what = f"no {_WORDS.get(split, split)} triples"
    if not Path(file).is_file():
        return TriplesError(what, file=file)
    # readable (the KG was read from it), and without a triple: any text it has is blank lines
    why = "the file holds only blank lines" if _read_text(Path(file)) else "the file is empty"
    return TriplesError(f"{what} ({why})", file=file)


_SCHEMES = ("pykeen", "synthetic", "documents")
_WORDS = {"train": "training"}
