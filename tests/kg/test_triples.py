"""The triples reader: formats, id order, bad input, the shared sets and pykeen's shipped files."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from kg import triples as triples_mod
from kg.kg_sources import load_kg
from kg.triples import (
    KnowledgeGraph,
    TriplesError,
    describe_folder,
    find_split_files,
    is_kg_source,
    top_relations,
    write_triples,
)


def _write(folder: Path, files: dict[str, str | bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        data = text.encode("utf-8") if isinstance(text, str) else text
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return folder


TRAIN = "a\tlikes\tb\nb\tknows\tc\n\nc\tlikes\ta\n"
VALID = "d\tknows\ta\n"
TEST = "a\thates\te\n"


def test_ids_follow_first_appearance_over_train_valid_test(tmp_path: Path) -> None:
    kg = load_kg(_write(tmp_path / "toy", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST}))
    assert kg.entities == ("a", "b", "c", "d", "e")
    assert kg.relations == ("likes", "knows", "hates")
    np.testing.assert_array_equal(kg.train, [[0, 0, 1], [1, 1, 2], [2, 0, 0]])
    np.testing.assert_array_equal(kg.valid, [[3, 1, 0]])
    np.testing.assert_array_equal(kg.test, [[0, 2, 4]])
    assert kg.train.dtype == np.int64 and (kg.num_entities, kg.num_relations) == (5, 3)
    assert kg.name == "toy"


def test_gz_tsv_dev_and_crlf_read_the_same(tmp_path: Path) -> None:
    plain = load_kg(_write(tmp_path / "p", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST}))
    other = load_kg(_write(tmp_path / "g", {"train.tsv.gz": TRAIN.replace("\n", "\r\n"), "dev.tsv": VALID,
                                            "test.txt.gz": " " + TEST}))
    assert other.entities == plain.entities and other.relations == plain.relations
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(other.split(split), plain.split(split))


def test_names_keep_inner_spaces_and_unicode(tmp_path: Path) -> None:
    kg = load_kg(_write(tmp_path / "u", {"train.txt": "São Paulo\tin\tBrasil\n", "valid.txt": "", "test.txt": ""}))
    assert kg.entities == ("São Paulo", "Brasil") and len(kg.valid) == 0 and kg.valid.shape == (0, 3)


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    kg = load_kg(_write(tmp_path / "toy", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST}))
    for gz in (False, True):
        write_triples(kg, tmp_path / f"out{gz}", gz=gz)
        back = load_kg(tmp_path / f"out{gz}")
        assert back.entities == kg.entities and back.relations == kg.relations
        np.testing.assert_array_equal(back.all_triples(), kg.all_triples())


@pytest.mark.parametrize(("name", "text", "line", "what"), [
    ("test.txt", "a\tr\tb\na\tr\n", 2, "expected 3 tab-separated fields"),
    ("test.txt", "a\tr\tb\nx r y\n", 2, "found 1"),
    ("test.txt", "a\tr\tb\ta\n", 1, "found 4"),
    ("test.txt", "a\tr\tb\n\n \tr\tb\n", 3, "empty head"),
    ("test.txt", "a\t\tb\n", 1, "empty relation"),
    ("test.txt", "a\tr\t  \n", 1, "empty tail"),
    ("entity_types.txt", "a\tperson\nb\n", 2, "expected 2 tab-separated fields"),
    ("entity_types.txt", "a\tperson\tx\n", 1, "found 3"),
    ("entity_types.txt", "a\t \n", 1, "empty type"),
    ("entity_types.txt", "\tperson\n", 1, "empty entity"),
    ("entity_types.txt", "a\tperson\nb\tplace\na\tplace\n", 3, "already has type 'person' (line 1)"),
])
def test_bad_lines_name_file_and_line(tmp_path: Path, name: str, text: str, line: int, what: str) -> None:
    folder = _write(tmp_path / "bad", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST, name: text})
    with pytest.raises(TriplesError) as info:
        load_kg(folder)
    msg = str(info.value)
    assert str(folder / name) in msg and f"line {line}:" in msg and what in msg
    assert isinstance(info.value, ValueError) and info.value.line == line


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    folder = _write(tmp_path / "enc", {"train.txt": b"a\tr\tb\nc\tr\t\xff\xfe\n", "valid.txt": "", "test.txt": ""})
    with pytest.raises(TriplesError, match=r"train\.txt: line 2: not UTF-8"):
        load_kg(folder)


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path: Path) -> None:
    bom = "\ufeff"
    plain = load_kg(_write(tmp_path / "plain", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST,
                                                 "entity_types.tsv": TYPES}))
    files = {"train.txt": bom + TRAIN, "valid.txt": bom + VALID, "test.txt.gz": bom + TEST,
             "entity_types.tsv": bom + TYPES}
    kg = load_kg(_write(tmp_path / "bom", files))
    assert kg.entities == plain.entities == ("a", "b", "c", "d", "e") and kg.relations == plain.relations
    np.testing.assert_array_equal(kg.all_triples(), plain.all_triples())
    np.testing.assert_array_equal(kg.entity_types, plain.entity_types)
    assert kg.types_skipped == plain.types_skipped
    bad = _write(tmp_path / "bad", {"train.txt": (bom + "a\tr\tb\n").encode() + b"c\tr\t\xff\n", "valid.txt": "",
                                    "test.txt": ""})
    with pytest.raises(TriplesError, match=r"train\.txt: line 2: not UTF-8 text \(byte 0xff\)"):
        load_kg(bad)


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    folder = _write(tmp_path / "gz", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST})
    (folder / "test.txt").unlink()
    good = gzip.compress(TEST.encode() * 50)
    (folder / "test.txt.gz").write_bytes(good[: len(good) // 2])  # truncated stream
    with pytest.raises(TriplesError, match=r"test\.txt\.gz: not a valid gzip file"):
        load_kg(folder)
    (folder / "test.txt.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TriplesError, match=r"test\.txt\.gz: not a valid gzip file"):
        load_kg(folder)


def test_missing_or_ambiguous_split_files(tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", {"train.txt": TRAIN, "test.txt": TEST})
    with pytest.raises(TriplesError, match="no valid file"):
        load_kg(folder)
    _write(folder, {"valid.txt": VALID, "test.tsv": TEST})
    with pytest.raises(TriplesError, match="more than one test file"):
        load_kg(folder)
    with pytest.raises(TriplesError, match="no such file or folder"):
        load_kg(tmp_path / "absent")
    with pytest.raises(TriplesError, match="seed must be an integer"):
        load_kg("synthetic:x")


def test_a_folder_without_triples_files_says_what_it_looked_for_and_found(tmp_path: Path) -> None:
    folder = _write(tmp_path / "csv", {"train.csv": "a,r,b\n", "valid.csv": "a,r,b\n", "test.csv": "a,r,b\n"})
    with pytest.raises(TriplesError) as err:
        find_split_files(folder)
    text = str(err.value)
    assert "expected <split>.txt, .tsv, .txt.gz or .tsv.gz for each of train, valid (or dev), test" in text
    assert "found test.csv, train.csv, valid.csv (triples files are read only as tab-separated" in text
    assert describe_folder(_write(tmp_path / "empty", {})) == "the folder is empty"
    notes: dict[str, str | bytes] = {f"f{i}.md": "" for i in range(10)}
    many = describe_folder(_write(tmp_path / "many", notes), limit=3)
    assert many == "found f0.md, f1.md, f2.md and 7 more"


def test_with_inverses_and_relation_names() -> None:
    kg = KnowledgeGraph("t", ("a", "b", "c"), ("r", "s"), np.array([[0, 1, 2]]), np.zeros((0, 3)), np.zeros((0, 3)))
    np.testing.assert_array_equal(kg.with_inverses(kg.train), [[0, 1, 2], [2, 3, 0]])
    assert [kg.relation_name(i) for i in range(4)] == ["r", "s", "~r", "~s"]
    with pytest.raises(ValueError, match="outside"):
        KnowledgeGraph("t", ("a",), ("r",), np.array([[0, 0, 1]]), np.zeros((0, 3)), np.zeros((0, 3)))


def test_is_kg_source(tmp_path: Path) -> None:
    folder = _write(tmp_path / "toy", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST})
    assert is_kg_source(folder) and is_kg_source("pykeen:nations") and is_kg_source("synthetic:3")
    _write(tmp_path / "fed" / "client0", {"train.txt.gz": TRAIN})
    assert is_kg_source(tmp_path / "fed")
    assert not is_kg_source(tmp_path / "fed" / "nothing") and not is_kg_source(tmp_path / "toy" / "train.txt")


# --------------------------------------------------------------------------------- real and pykeen sets
SHARED = {  # README counts: entities, relations, train, valid, test
    "kinship_rnnlogic": (104, 25, 3206, 2137, 5343),
    "umls_rnnlogic": (135, 46, 1959, 1306, 3264),
    "fb15k237": (14541, 237, 272115, 17535, 20466),
    "wn18rr": (40943, 11, 86835, 3034, 3134),
}


@pytest.mark.parametrize("name", list(SHARED))
def test_shared_sets_match_the_readme_counts(shared_data: Path, name: str) -> None:
    folder = shared_data / "kg" / name
    if not folder.is_dir():
        pytest.skip(f"KG set not found at {folder}")
    kg = load_kg(folder)
    assert (kg.num_entities, kg.num_relations, len(kg.train), len(kg.valid), len(kg.test)) == SHARED[name]
    assert top_relations(kg, 1)[0][1] == int(kg.relation_counts().max())


PYKEEN = {"nations": (14, 55, 1592, 199, 201), "kinships": (104, 25, 8544, 1068, 1074),
          "umls": (135, 46, 5216, 652, 661)}


@pytest.mark.parametrize("name", list(PYKEEN))
def test_pykeen_shipped_sets(name: str) -> None:
    if importlib.util.find_spec("pykeen") is None:
        pytest.skip("pykeen not installed (pip install 'fednsl[kg]')")
    imported_before = "pykeen" in sys.modules
    kg = load_kg(f"pykeen:{name}")
    # read from the wheel's files without importing pykeen (slow)
    assert imported_before or "pykeen" not in sys.modules
    assert (kg.num_entities, kg.num_relations, len(kg.train), len(kg.valid), len(kg.test)) == PYKEEN[name]
    assert kg.name == f"pykeen:{name}"


def test_pykeen_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triples_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TriplesError, match=r"pykeen is not installed.*fednsl\[kg\]"):
        load_kg("pykeen:nations")
    with pytest.raises(TriplesError, match="unknown dataset"):
        load_kg("pykeen:fb15k")


# ------------------------------------------------------------------------------------------------ entity types
TYPES = "a\tperson\nzz\tperson\nb\tplace\nc\tperson\na\tperson\n"  # zz is in no triple; a twice, same type


def test_entity_types_file_gives_types_untyped_and_skipped_lines(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "typed", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST, "entity_types.tsv": TYPES}
    )
    kg = load_kg(folder)
    assert kg.entities == ("a", "b", "c", "d", "e")
    assert kg.type_names == ("person", "place", "untyped") and kg.num_types == 3
    np.testing.assert_array_equal(kg.entity_types, [0, 1, 0, 2, 2])  # d and e have no line
    assert kg.types_skipped == 1
    # partitions keep the types; an untyped KG reports one type
    assert kg.replace(name="x").type_names == kg.type_names
    plain = load_kg(_write(tmp_path / "plain", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST}))
    assert plain.entity_types is None and plain.num_types == 1


def test_entity_types_round_trip_keeps_type_ids(tmp_path: Path) -> None:
    kg = load_kg(_write(tmp_path / "t", {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST}))
    kg = kg.replace(entity_types=np.array([1, 0, 1, 2, 0]), type_names=("x", "y", "z"))
    for gz in (False, True):
        write_triples(kg, tmp_path / f"out{gz}", gz=gz)
        back = load_kg(tmp_path / f"out{gz}")
        assert back.type_names == kg.type_names and back.types_skipped == 0
        np.testing.assert_array_equal(back.entity_types, kg.entity_types)


def test_two_type_files_are_an_error(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "two",
        {"train.txt": TRAIN, "valid.txt": VALID, "test.txt": TEST, "entity_types.txt": TYPES, "entity_types.tsv": TYPES},
    )
    with pytest.raises(TriplesError, match="more than one entity_types file"):
        load_kg(folder)
