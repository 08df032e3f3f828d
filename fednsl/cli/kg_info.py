"""``fednsl data info`` for knowledge graphs: triples folders, FedLU client folders, pykeen's sets, synthetic.

Kept free of torch so that the command starts fast, and numpy/kg load only when it runs (not for ``--help``);
:func:`show_kg_info` is called from ``fednsl.cli.data``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from kg.triples import KnowledgeGraph


class KGInputError(click.ClickException):
    """Bad KG input: one line on stderr, exit status 2."""

    exit_code = 2


def wants_kg(path: str, fmt: str) -> bool:
    """Whether ``fednsl data info PATH --format FMT`` is about a KG (``synthetic`` alone stays the document set)."""
    from kg.triples import is_kg_source

    if fmt == "kg":
        return True
    return fmt == "auto" and path != "synthetic" and not path.startswith("synthetic:") and is_kg_source(path)


def detect_folder_format(path: str) -> str:
    """The document format of a folder that is not a KG (:func:`kg.io.detect_format`); when it is no known format,
    :class:`KGInputError` lists the document layouts, the triples files looked for and what the folder holds."""
    from kg.documents import DataError
    from kg.io import detect_format
    from kg.triples import EXPECTED_FILES, describe_folder

    try:
        return detect_format(path)
    except DataError as exc:
        raise KGInputError(
            f"{exc}, or knowledge-graph triples ({EXPECTED_FILES}, or client<K>/ folders of them); "
            f"{describe_folder(path)}"
        ) from exc


def _federated_clients(path: str) -> list[KnowledgeGraph] | None:
    p = Path(path)
    if p.is_dir() and any(p.glob("client*/train*")) and not any(p.glob("train*")):
        from kg.kg_partition import read_federated_kg

        return read_federated_kg(p)
    return None


def _source_folder(source: str) -> Path | None:
    """The folder a KG source reads its files from (``pykeen:NAME``: inside the wheel); None for generated ones."""
    from kg.triples import pykeen_dataset_dir

    if source.startswith("pykeen:"):
        return pykeen_dataset_dir(source.split(":", 1)[1])
    return Path(source).resolve() if Path(source).is_dir() else None


def _files_read(folder: Path, kg: KnowledgeGraph, clients: list[KnowledgeGraph] | None) -> list[dict[str, Any]]:
    """The files a triples or federated ``folder`` was read from: path (relative to the folder), split and
    triples; the entity-types file with the split ``entity_types`` (and no count)."""
    from kg.triples import find_split_files, find_types_file

    parts = [(folder, kg)] if clients is None else [(folder / f"client{k}", c) for k, c in enumerate(clients)]
    out: list[dict[str, Any]] = []
    for sub, part in parts:
        for split, path in find_split_files(sub).items():
            out.append({"path": path.relative_to(folder).as_posix(), "split": split, "triples": len(part.split(split))})
    types = find_types_file(folder)
    if types is not None:
        out.append({"path": types.name, "split": "entity_types"})
    return out


def kg_info_dict(source: str, top: int = 15) -> dict[str, Any]:
    """Counts of a KG source: entities, relations, triples per split, files read, top relations, clients, planted
    rules."""
    import numpy as np

    from kg.kg_sources import load_kg
    from kg.triples import SPLITS

    start = time.perf_counter()
    clients = _federated_clients(source)
    if clients is not None:
        from kg.kg_partition import union_kg

        kg = union_kg(clients, name=Path(source).name)
    else:
        kg = load_kg(source)
    seconds = time.perf_counter() - start
    folder = _source_folder(source)
    counts = kg.relation_counts()
    order = np.argsort(-counts, kind="stable")
    shown = order if top <= 0 else order[:top]
    train_ents = np.zeros(kg.num_entities, dtype=bool)
    train_ents[kg.train[:, [0, 2]].ravel()] = True
    train_rels = np.zeros(kg.num_relations, dtype=bool)
    train_rels[kg.train[:, 1]] = True
    out: dict[str, Any] = {
        "name": kg.name,
        "source": source,
        "folder": str(folder) if folder is not None else None,
        "files": _files_read(folder, kg, clients) if folder is not None else [],
        "load_seconds": round(seconds, 3),
        "entities": kg.num_entities,
        "relations": kg.num_relations,
        "triples": {s: len(kg.split(s)) for s in SPLITS},
        "entities_in_train": int(train_ents.sum()),
        "eval_triples_with_entity_unseen_in_train": {
            s: int((~train_ents[kg.split(s)[:, 0]] | ~train_ents[kg.split(s)[:, 2]]).sum()) for s in ("valid", "test")
        },
        "relations_unseen_in_train": int((~train_rels).sum()),
        "top_relations": [{"relation": kg.relations[i], "triples": int(counts[i])} for i in shown],
    }
    if kg.entity_types is not None:
        per_type = np.bincount(kg.entity_types, minlength=kg.num_types)
        out["entity_types"] = {name: int(n) for name, n in zip(kg.type_names, per_type)}
        out["type_lines_skipped"] = kg.types_skipped
    if clients is not None:
        out["clients"] = [
            {
                "client": k,
                "relations": len(np.unique(c.all_triples()[:, 1])),
                "entities": len(np.unique(c.all_triples()[:, [0, 2]])),
                **{s: len(c.split(s)) for s in SPLITS},
            }
            for k, c in enumerate(clients)
        ]
    if kg.name.startswith("synthetic:"):
        from kg.kg_synthetic import planted_kg

        seed = int(kg.name.split(":", 1)[1])
        out["planted_rules"] = [str(r) for r in planted_kg(seed=seed)[1]]
    return out


def _echo(info: dict[str, Any], top: int) -> None:
    e = click.echo
    t = info["triples"]
    e(
        f"knowledge graph {info['name']}: {info['entities']} entities, {info['relations']} relations "
        f"(loaded in {info['load_seconds']:.2f} s)"
    )
    e(f"triples: train {t['train']}, valid {t['valid']}, test {t['test']} (total {sum(t.values())})")
    if info["files"]:
        e(_files_line(info))
    unseen = info["eval_triples_with_entity_unseen_in_train"]
    e(
        f"entities in train {info['entities_in_train']}; relations missing from train {info['relations_unseen_in_train']}; "
        f"eval triples with an entity unseen in train: valid {unseen['valid']}, test {unseen['test']}"
    )
    if "entity_types" in info:
        types = info["entity_types"]
        e(
            f"entity types ({len(types)}): "
            + ", ".join(f"{k} {v}" for k, v in types.items())
            + (
                f"; {info['type_lines_skipped']} lines of the types file name no entity of the triples"
                if info["type_lines_skipped"]
                else ""
            )
        )
    rels = info["top_relations"]
    e(f"relations by triples{'' if len(rels) == info['relations'] else f' (top {top})'}:")
    for r in rels:
        e(f"  {r['relation']:48s} {r['triples']:8d}")
    if "clients" in info:
        e(f"{'client':>6s} {'relations':>9s} {'entities':>8s} {'train':>8s} {'valid':>7s} {'test':>7s}")
        for c in info["clients"]:
            e(
                f"{c['client']:>6d} {c['relations']:>9d} {c['entities']:>8d} {c['train']:>8d} {c['valid']:>7d} "
                f"{c['test']:>7d}"
            )
    if info.get("planted_rules"):
        e(f"planted rules ({len(info['planted_rules'])}):")
        for r in info["planted_rules"]:
            e(f"  {r}")


def _files_line(info: dict[str, Any]) -> str:
    """``read FOLDER: train.txt 3206, valid.txt 2137, test.txt 5343 triples`` (a federated folder: the file names
    once per naming pattern, the counts are in the client table)."""
    files = info["files"]
    where = info["folder"] or info["source"]
    types = [f["path"] for f in files if f["split"] == "entity_types"]
    triples = [f for f in files if f["split"] != "entity_types"]
    suffix = f"; entity types from {types[0]}" if types else ""
    if "clients" not in info:
        named = [
            f"{f['path']}{' (as valid)' if f['split'] == 'valid' and not f['path'].startswith('valid') else ''} "
            f"{f['triples']}"
            for f in triples
        ]
        return f"read {where}: {', '.join(named)} triples{suffix}"
    by_client: dict[str, list[str]] = {}
    for f in triples:
        client, _, name = f["path"].partition("/")
        by_client.setdefault(client, []).append(name)
    groups: dict[tuple[str, ...], list[str]] = {}
    for client, names in by_client.items():
        groups.setdefault(tuple(names), []).append(client)
    text = "; ".join(f"{_client_span(clients)}/ {', '.join(names)}" for names, clients in groups.items())
    return f"read {where}: {text} (triples per client below){suffix}"


def _client_span(clients: list[str]) -> str:
    """``client0..client9`` for a run of consecutive client folders, else their names joined by ``/, ``."""
    ks = [int(c.removeprefix("client")) for c in clients]
    if len(ks) > 1 and ks == list(range(ks[0], ks[0] + len(ks))):
        return f"{clients[0]}..{clients[-1]}"
    return "/, ".join(clients)


def show_kg_info(source: str, top: int, as_json: bool) -> None:
    """Print :func:`kg_info_dict` as text or JSON; bad input -> one line, exit status 2."""
    from fednsl.cli.errors import one_line
    from kg.triples import TriplesError

    try:
        info = kg_info_dict(source, top)
    except (TriplesError, ValueError, OSError) as exc:  # the message names the file once (one_line)
        raise KGInputError(one_line(exc)) from exc
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _echo(info, top)
