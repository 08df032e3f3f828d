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


def _federated_clients(path: str) -> list[KnowledgeGraph] | None:
    p = Path(path)
    if p.is_dir() and any(p.glob("client*/train*")) and not any(p.glob("train*")):
        from kg.kg_partition import read_federated_kg

        return read_federated_kg(p)
    return None


def kg_info_dict(source: str, top: int = 15) -> dict[str, Any]:
    """Counts of a KG source: entities, relations, triples per split, top relations, clients, planted rules."""
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


def show_kg_info(source: str, top: int, as_json: bool) -> None:
    """Print :func:`kg_info_dict` as text or JSON; bad input -> one line, exit status 2."""
    from kg.triples import TriplesError

    try:
        info = kg_info_dict(source, top)
    except (TriplesError, ValueError, OSError) as exc:
        raise KGInputError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _echo(info, top)
