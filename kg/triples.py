"""Knowledge graphs as triples: the reader for ``head<TAB>relation<TAB>tail`` files (``kg.kg_sources.load_kg`` picks the source).

Sources :func:`load_kg` accepts:

- a folder with ``train``, ``valid`` and ``test`` files, each ``.txt`` or ``.tsv``, plain or ``.gz``
  (``dev`` is read when ``valid`` is absent);
- ``"pykeen:nations"``, ``"pykeen:kinships"``, ``"pykeen:umls"``: the files shipped inside the installed
  ``pykeen`` wheel (``pykeen/datasets/<name>/{train,valid,test}.txt``), located without importing pykeen
  and never downloaded (install with ``pip install fednsl[kg]``);
- ``"synthetic"`` / ``"synthetic:<seed>"``: the embedded planted-rule KG of :mod:`kg.kg_synthetic`;
- a federated folder ``clientK/{train,valid,test}...`` (FedLU's layout): the union of the clients' splits
  (the centralised KG; :func:`kg.kg_partition.read_federated_kg` gives the clients).

Entity types (optional). A triples folder may hold ``entity_types`` (``.txt``/``.tsv``, plain or ``.gz``): one
``entity<TAB>type`` a line, one type per entity. Type ids follow first appearance in that file; entities of the
KG the file does not list get the type ``untyped`` (added last, only when some entity lacks a line); lines naming
an entity the triples never mention are skipped (their count is :attr:`KnowledgeGraph.types_skipped`). A wrong
column count, an empty name or a second, different type for one entity raises :class:`TriplesError` naming the
file and the line. fednsl-kg then keys its rule heads by (relation, domain type, range type).

Ids. Entities and relations get ids in the order of their first appearance when reading train, then
valid, then test, each file top to bottom, a triple's head before its tail. The same files therefore
always give the same ids, and the entity count is taken over all three splits. Relation ids are
``0..R-1``; the inverse of ``r`` is ``r + R`` (:meth:`KnowledgeGraph.with_inverses`).

Lines. One triple a line, exactly three tab-separated fields; spaces around a field are stripped
(names may contain inner spaces); blank lines are skipped. Anything else — a wrong column count, an
empty name, bytes that are not UTF-8, a corrupt gzip stream — raises :class:`TriplesError` naming the
file and the line.
"""

from __future__ import annotations

import gzip
import importlib.util
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kg.documents import DataError

__all__ = [
    "PYKEEN_DATASETS",
    "SPLITS",
    "UNTYPED",
    "KnowledgeGraph",
    "TriplesError",
    "describe_folder",
    "find_split_files",
    "find_types_file",
    "is_kg_source",
    "pykeen_dataset_dir",
    "read_entity_types",
    "read_folder_types",
    "read_splits",
    "read_triples_folder",
    "top_relations",
    "write_triples",
]

SPLITS = ("train", "valid", "test")
PYKEEN_DATASETS = ("nations", "kinships", "umls")
_SUFFIXES = (".txt", ".tsv", ".txt.gz", ".tsv.gz")
TYPES_FILE = "entity_types"
UNTYPED = "untyped"
INVERSE_PREFIX = "~"  # the inverse of relation r reads ~r, as in rules.fol
#: what a triples folder must hold, for error messages
EXPECTED_FILES = "<split>.txt, .tsv, .txt.gz or .tsv.gz for each of train, valid (or dev), test"


class TriplesError(DataError):
    """A bad triples source; the message names the file and, when known, the line (a ``ValueError``)."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.line = line
        super().__init__(message, file=file)


@dataclass(frozen=True, eq=False)
class KnowledgeGraph:
    """A KG with its three splits as id arrays; vocabularies map ids to names.

    ``train``/``valid``/``test``: int64 arrays of shape (n, 3), columns (head, relation, tail), relation ids
    in ``0..R-1``. ``entity_types``: (E,) int64 ids into ``type_names``, or None (then every entity has type 0).
    ``types_skipped``: lines of the types file that named an entity absent from the triples.
    """

    name: str
    entities: tuple[str, ...]
    relations: tuple[str, ...]
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    entity_types: np.ndarray | None = None
    type_names: tuple[str, ...] = ()
    types_skipped: int = 0

    def __post_init__(self) -> None:
        for split in SPLITS:
            arr = np.asarray(getattr(self, split), dtype=np.int64).reshape(-1, 3)
            if len(arr) and (
                arr[:, [0, 2]].min() < 0
                or arr[:, [0, 2]].max() >= len(self.entities)
                or arr[:, 1].min() < 0
                or arr[:, 1].max() >= len(self.relations)
            ):
                raise ValueError(
                    f"{self.name}: {split} holds ids outside the vocabularies "
                    f"({len(self.entities)} entities, {len(self.relations)} relations)"
                )
            object.__setattr__(self, split, arr)
        if self.entity_types is not None:
            types = np.asarray(self.entity_types, dtype=np.int64)
            if types.shape != (len(self.entities),):
                raise ValueError(f"{self.name}: entity_types has shape {types.shape}, expected ({len(self.entities)},)")
            if len(types) and (types.min() < 0 or types.max() >= len(self.type_names)):
                raise ValueError(f"{self.name}: entity_types holds ids outside 0..{len(self.type_names) - 1}")
            object.__setattr__(self, "entity_types", types)
            object.__setattr__(self, "type_names", tuple(self.type_names))

    @property
    def num_types(self) -> int:
        """T: the number of entity types (1 for an untyped KG)."""
        return len(self.type_names) if self.entity_types is not None else 1

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        """R, without the inverse relations."""
        return len(self.relations)

    def split(self, name: str) -> np.ndarray:
        """The (n, 3) triples of ``train``, ``valid`` or ``test``."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {', '.join(SPLITS)}")
        return getattr(self, name)

    def all_triples(self, splits: Sequence[str] = SPLITS) -> np.ndarray:
        """Concatenation of the named splits, (n, 3) int64."""
        return np.concatenate([self.split(s) for s in splits], axis=0) if splits else np.zeros((0, 3), np.int64)

    def with_inverses(self, triples: np.ndarray) -> np.ndarray:
        """(n, 3) -> (2n, 3): the triples followed by their inverses (t, r + R, h)."""
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        inverse = np.stack([triples[:, 2], triples[:, 1] + self.num_relations, triples[:, 0]], axis=1)
        return np.concatenate([triples, inverse], axis=0)

    def relation_name(self, rel: int) -> str:
        """Name of relation id ``rel`` in ``0..2R-1``; inverses read ``~<name>`` (as rules and exports write them)."""
        if 0 <= rel < self.num_relations:
            return self.relations[rel]
        if self.num_relations <= rel < 2 * self.num_relations:
            return INVERSE_PREFIX + self.relations[rel - self.num_relations]
        raise ValueError(f"relation id {rel} outside 0..{2 * self.num_relations - 1}")

    def relation_counts(self, splits: Sequence[str] = SPLITS) -> np.ndarray:
        """(R,) number of triples per relation over the named splits."""
        return np.bincount(self.all_triples(splits)[:, 1], minlength=self.num_relations)

    def replace(self, **changes: object) -> KnowledgeGraph:
        """A copy with some fields changed (vocabularies kept unless given)."""
        fields = {
            k: getattr(self, k)
            for k in (
                "name",
                "entities",
                "relations",
                "train",
                "valid",
                "test",
                "entity_types",
                "type_names",
                "types_skipped",
            )
        }
        fields.update(changes)
        return KnowledgeGraph(**fields)

    def __repr__(self) -> str:
        return (
            f"KnowledgeGraph({self.name!r}, {self.num_entities} entities, {self.num_relations} relations, "
            f"train {len(self.train)}, valid {len(self.valid)}, test {len(self.test)})"
        )


# --------------------------------------------------------------------------------------------- reading
def _read_text(path: Path) -> str:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        kind = (
            "not a valid gzip file"
            if path.name.endswith(".gz") and not isinstance(exc, FileNotFoundError)
            else "cannot read"
        )
        raise TriplesError(f"{path}: {kind} ({exc})", file=str(path)) from exc
    try:
        # a byte-order mark (written by some Windows editors) is not part of the first name
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TriplesError(
            f"{path}: line {line}: not UTF-8 text (byte {data[exc.start]:#04x})", file=str(path), line=line
        ) from exc


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of each non-blank line of a tab-separated file with the named ``columns``;
    a wrong field count or an empty field raises :class:`TriplesError` naming the file and line."""
    for lineno, line in enumerate(_read_text(path).split("\n"), 1):
        parts = line.split("\t")
        if len(parts) != len(columns):
            if not line.strip():
                continue
            raise TriplesError(
                f"{path}: line {lineno}: expected {len(columns)} tab-separated fields ({', '.join(columns)}), "
                f"found {len(parts)}: {line[:80]!r}",
                file=str(path),
                line=lineno,
            )
        fields = [p.strip() for p in parts]
        if not all(fields):
            empty = columns[fields.index("")]
            raise TriplesError(f"{path}: line {lineno}: empty {empty} name", file=str(path), line=lineno)
        yield lineno, fields


def _parse_into(path: Path, entities: dict[str, int], relations: dict[str, int]) -> np.ndarray:
    """Parse one triples file, extending the two name->id maps; (n, 3) int64."""
    ids: list[int] = []
    append = ids.append
    for _, (h, r, t) in _rows(path, ("head", "relation", "tail")):
        hid = entities.get(h)
        if hid is None:
            hid = entities[h] = len(entities)
        rid = relations.get(r)
        if rid is None:
            rid = relations[r] = len(relations)
        tid = entities.get(t)
        if tid is None:
            tid = entities[t] = len(entities)
        append(hid)
        append(rid)
        append(tid)
    return np.asarray(ids, dtype=np.int64).reshape(-1, 3)


def _find_one(folder: Path, stem: str, what: str) -> Path | None:
    """``folder/<stem><suffix>`` for the one triples suffix present, or None; two of them is an error."""
    hits = [folder / f"{stem}{suf}" for suf in _SUFFIXES if (folder / f"{stem}{suf}").is_file()]
    if len(hits) > 1:
        raise TriplesError(
            f"{folder}: more than one {what} file ({', '.join(h.name for h in hits)}); keep one", file=str(folder)
        )
    return hits[0] if hits else None


def describe_folder(folder: str | Path, limit: int = 8) -> str:
    """What a folder holds, for an error message: ``found a, b, c`` (at most ``limit`` names, sorted) or ``the folder
    is empty``, plus what a triples file must be when split files of another suffix (``train.csv``, ...) are there."""
    folder = Path(folder)
    try:
        names = sorted(c.name + ("/" if c.is_dir() else "") for c in folder.iterdir())
    except OSError:
        return "the folder cannot be listed"
    if not names:
        return "the folder is empty"
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    text = f"found {shown}"
    stems = (*SPLITS, "dev")
    if any(n.split(".", 1)[0] in stems and "." in n and not n.endswith(_SUFFIXES) for n in names):  # train.csv, ...
        text += (
            " (triples files are read only as tab-separated head<TAB>relation<TAB>tail lines in .txt or .tsv, "
            "optionally .gz)"
        )
    return text


def find_types_file(folder: str | Path) -> Path | None:
    """The folder's ``entity_types`` file (any triples suffix), or None."""
    return _find_one(Path(folder), TYPES_FILE, TYPES_FILE)


def find_split_files(folder: str | Path) -> dict[str, Path]:
    """``{"train": path, "valid": path, "test": path}`` for a triples folder; :class:`TriplesError` if not one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TriplesError(f"{folder}: not a folder with train/valid/test triples files", file=str(folder))
    found: dict[str, Path] = {}
    for split in SPLITS:
        names = (split, "dev") if split == "valid" else (split,)
        for name in names:
            hit = _find_one(folder, name, split)
            if hit is not None:
                found[split] = hit
                break
    missing = [s for s in SPLITS if s not in found]
    if missing:
        raise TriplesError(
            f"{folder}: no {', '.join(missing)} file (expected {EXPECTED_FILES}); {describe_folder(folder)}",
            file=str(folder),
        )
    return found


def read_entity_types(path: str | Path, entities: dict[str, int]) -> tuple[np.ndarray, tuple[str, ...], int]:
    """Parse an ``entity<TAB>type`` file against the KG's entity ids: (types (E,), type names, skipped lines).

    Entities without a line get :data:`UNTYPED` (appended to the names when needed)."""
    path = Path(path)
    types = np.full(len(entities), -1, dtype=np.int64)
    names: dict[str, int] = {}
    first_line = np.zeros(len(entities), dtype=np.int64)
    skipped = 0
    for lineno, (ent, typ) in _rows(path, ("entity", "type")):
        eid = entities.get(ent)
        if eid is None:
            skipped += 1
            continue
        tid = names.setdefault(typ, len(names))
        if types[eid] >= 0 and types[eid] != tid:
            raise TriplesError(
                f"{path}: line {lineno}: entity {ent!r} already has type {list(names)[types[eid]]!r} (line "
                f"{first_line[eid]}); one type per entity",
                file=str(path),
                line=lineno,
            )
        types[eid], first_line[eid] = tid, lineno
    missing = types < 0
    if missing.any():
        types[missing] = names.setdefault(UNTYPED, len(names))
    return types, tuple(names), skipped


def read_folder_types(folder: str | Path, entities: dict[str, int]) -> tuple[np.ndarray | None, tuple[str, ...], int]:
    """:func:`read_entity_types` of the folder's ``entity_types`` file; (None, (), 0) when it has none."""
    path = find_types_file(folder)
    return read_entity_types(path, entities) if path is not None else (None, (), 0)


def is_kg_source(source: str | Path) -> bool:
    """Whether ``source`` names a KG :func:`load_kg` reads (pykeen:/synthetic spec, triples or federated folder)."""
    text = str(source)
    if text.startswith(("pykeen:", "synthetic:", "documents:")) or text == "synthetic":
        return True
    p = Path(source)
    if not p.is_dir():
        return False
    if any((p / f"train{suf}").is_file() for suf in _SUFFIXES):
        return True
    return any(c.is_dir() and any((c / f"train{suf}").is_file() for suf in _SUFFIXES) for c in p.glob("client*"))


def read_splits(folder: str | Path, entities: dict[str, int], relations: dict[str, int]) -> dict[str, np.ndarray]:
    """Parse a folder's train/valid/test files into (n, 3) id arrays, extending the name->id maps in place."""
    files = find_split_files(folder)
    return {split: _parse_into(files[split], entities, relations) for split in SPLITS}


def read_triples_folder(
    folder: str | Path,
    name: str | None = None,
    entities: dict[str, int] | None = None,
    relations: dict[str, int] | None = None,
) -> KnowledgeGraph:
    """Read a train/valid/test triples folder; ids by first appearance (train, valid, test).

    ``entities``/``relations``: name->id maps to extend (for a shared vocabulary across several folders);
    they are updated in place. An ``entity_types`` file in the folder gives the entity types (module doc).
    """
    ents = {} if entities is None else entities
    rels = {} if relations is None else relations
    arrays = read_splits(folder, ents, rels)
    types, type_names, skipped = read_folder_types(folder, ents)
    return KnowledgeGraph(
        name=name or Path(folder).name,
        entities=tuple(ents),
        relations=tuple(rels),
        train=arrays["train"],
        valid=arrays["valid"],
        test=arrays["test"],
        entity_types=types,
        type_names=type_names,
        types_skipped=skipped,
    )


def pykeen_dataset_dir(name: str) -> Path:
    """Folder of pykeen's shipped dataset ``name`` (nations, kinships, umls), found without importing pykeen."""
    key = name.lower()
    if key not in PYKEEN_DATASETS:
        raise TriplesError(
            f"pykeen:{name}: unknown dataset; the pykeen wheel ships "
            f"{', '.join('pykeen:' + n for n in PYKEEN_DATASETS)}"
        )
    spec = importlib.util.find_spec("pykeen")
    if spec is None or not spec.submodule_search_locations:
        raise TriplesError(
            f"pykeen:{name}: pykeen is not installed; install the optional extra "
            "`pip install 'fednsl[kg]'` (or `pip install pykeen`) to read its datasets"
        )
    for base in spec.submodule_search_locations:
        folder = Path(base) / "datasets" / key
        if (folder / "train.txt").is_file():
            return folder
    raise TriplesError(
        f"pykeen:{name}: the installed pykeen has no datasets/{key}/train.txt "
        f"(looked in {', '.join(spec.submodule_search_locations)})"
    )


def write_triples(kg: KnowledgeGraph, folder: str | Path, gz: bool = False) -> list[Path]:
    """Write ``kg`` as ``folder/{train,valid,test}.txt[.gz]`` (names, tab-separated) and, for a typed KG,
    ``entity_types.txt[.gz]``; returns the files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    texts = {
        split: "".join(f"{kg.entities[h]}\t{kg.relations[r]}\t{kg.entities[t]}\n" for h, r, t in kg.split(split))
        for split in SPLITS
    }
    if kg.entity_types is not None:
        types = kg.entity_types
        order = np.argsort(types, kind="stable")  # types first appear in id order: ids survive a re-read
        texts[TYPES_FILE] = "".join(f"{kg.entities[e]}\t{kg.type_names[types[e]]}\n" for e in order.tolist())
    written = []
    for stem, text in texts.items():
        target = folder / f"{stem}.txt{'.gz' if gz else ''}"
        data = text.encode("utf-8")
        target.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        written.append(target)
    return written


def top_relations(kg: KnowledgeGraph, k: int = 10) -> list[tuple[str, int]]:
    """The ``k`` relations with the most triples over all splits, as (name, count)."""
    counts = Counter(dict(zip(kg.relations, map(int, kg.relation_counts()))))
    return counts.most_common(k if k > 0 else None)
