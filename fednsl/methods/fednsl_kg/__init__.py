"""fednsl-kg: FedNSL's V-EM rule learning (Xing, Lu, Yu, ICML 2024) on knowledge graphs, centralised (one client)
or federated (clients hold disjoint parts), evaluated by filtered link prediction (issue 18).

Server (:mod:`.strategy`): transformer rule generator T_θ + rule pool per relation; proposes bodies (Eq. 5),
aggregates posteriors, retrains T_θ (Eq. 6). Clients (:mod:`.client`): mine bodies, fit the RNNLogic-style
:class:`rules.kg_predictor.RulePredictor` on their part, send posteriors (Eq. 9–11), evaluate their test part.

Evaluation filter (``method_kwargs.eval_filter``): ``local`` (default) — a client filters with everything it may
know, its own train ∪ valid ∪ test; with a relation partition that is the full filter of its queries (all triples
of a relation live on one client), with a triple partition the other clients' facts of the same relation are not
filtered (a harder setting). ``global`` filters with the union of all parts (the standard protocol, for
benchmarks; evaluation only, nothing crosses at training time). One client = the standard protocol either way.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fednsl.config import RunConfig
from fednsl.federation.roles import Client
from fednsl.federation.runner import Federation
from fednsl.methods.fednsl_kg.client import FedNSLKGClient
from fednsl.methods.fednsl_kg.config import FedNSLKGConfig, KGDataConfig, resolve_source
from fednsl.methods.fednsl_kg.strategy import FedNSLKGStrategy
from fednsl.registry import Headline, build_kwargs, register_method
from kg.kg_sources import empty_split, load_kg, split_file
from kg.linkpred import known_answers
from kg.triples import KnowledgeGraph, TriplesError

__all__ = ["FedNSLKGClient", "FedNSLKGConfig", "FedNSLKGStrategy", "KGDataConfig", "build_fednsl_kg", "load_parts"]

log = logging.getLogger("fednsl.methods.fednsl_kg")

# what a split is for, said when no client has one (then the run is refused) ...
_NEEDED = {
    "train": "fednsl-kg mines and fits its rules on the training triples",
    "test": "fednsl-kg evaluates its rules on the test triples (filtered link prediction)",
}
# ... and what a client without it does (logged as a warning; valid triples are optional)
_WITHOUT = {
    "train": "{who} has nothing to mine rules from or fit them on",
    "test": "{who} is not evaluated (the test metrics are over the other clients' test triples)",
    "valid": "{who} trains its full predictor epochs without early stopping on valid MRR, and reports no valid MRR",
}


def _check_splits(sources: list[tuple[str | Path, KnowledgeGraph]]) -> None:
    """Refuse with a :class:`TriplesError` naming the file when no client has train triples, or none has test
    triples; log a warning naming the file for each client without train, test or valid triples (``sources``: where
    each client's KG was read from, and the KG)."""
    width = len(str(len(sources) - 1))
    for split in ("train", "test", "valid"):
        missing = [(k, e) for k, (src, kg) in enumerate(sources) if (e := empty_split(kg, src, split)) is not None]
        if not missing:
            continue
        if split in _NEEDED and len(missing) == len(sources):
            first = missing[0][1]
            if len(sources) == 1:
                raise TriplesError(f"{first.reason}; {_NEEDED[split]}", file=first.file)
            files = [str(e.file) for _, e in missing]
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            word = "training" if split == "train" else split
            raise TriplesError(f"no client has {word} triples ({shown}: empty or blank); {_NEEDED[split]}")
        for k, err in missing:
            who = "the client" if len(sources) == 1 else f"client c{k:0{width}d}"
            log.warning("%s: %s", err, _WITHOUT[split].format(who=who))


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _clients(ids: list[str]) -> str:
    return f"client {ids[0]} gets" if len(ids) == 1 else f"clients {', '.join(ids)} get"


def load_parts(
    data: KGDataConfig, seed: int, *, check: bool = False
) -> tuple[list[KnowledgeGraph], list[tuple[int, tuple[int, ...]]], str]:
    """The clients' KG parts (same vocabularies), the planted rules (synthetic KG only) and the KG's name.

    ``check`` (training, before any round and before the run folder exists): refuse, naming the file, a KG without
    train or test triples (a federated folder: when no client has any); warn, naming the file, of a client without
    them or without valid triples, and of a partition that leaves a client without training triples."""
    from kg.kg_partition import partition_kg, read_federated_kg
    from kg.kg_synthetic import planted_kg

    planted: list[tuple[int, tuple[int, ...]]] = []
    if data.federated_folder:
        folder = resolve_source(data.federated_folder)
        parts = read_federated_kg(folder)
        if check:
            _check_splits([(Path(folder) / f"client{k}", part) for k, part in enumerate(parts)])
        name = parts[0].name if parts else "federated"
    else:
        source = resolve_source(data.source)
        if source == "synthetic" or source.startswith("synthetic:"):
            kg_seed = int(source.split(":", 1)[1]) if ":" in source else 0
            kg, rules = planted_kg(seed=kg_seed, **data.synthetic)
            planted = [(int(r.head), tuple(int(b) for b in r.body)) for r in rules]
        else:
            if data.synthetic:
                raise ValueError("data (fednsl-kg): 'synthetic' options given but data.source is not synthetic")
            kg = load_kg(source)
            if check:
                _check_splits([(source, kg)])
        parts = (
            [kg]
            if data.num_clients == 1
            else partition_kg(kg, data.num_clients, by=data.partition, seed=seed, shares=data.shares)  # type: ignore[arg-type]
        )
        width = len(str(len(parts) - 1))
        empty = [f"c{i:0{width}d}" for i, p in enumerate(parts) if not len(p.train)] if check else []
        if empty:  # the run goes on (the other clients train), but this is seldom what was meant
            log.warning(
                "data.num_clients=%d: %s no training triples of %s (%s of %s, partition %s); use fewer clients "
                "or more data",
                len(parts),
                _clients(empty),
                split_file(source, "train"),
                _count(len(kg.train), "triple"),
                _count(kg.num_relations, "relation"),
                data.partition,
            )
        name = kg.name
    if not data.entity_types:
        parts = [p.replace(entity_types=None, type_names=()) for p in parts]
    return parts, planted, name


@register_method(
    "fednsl-kg",
    doc="FedNSL on knowledge graphs: rule generator + RNNLogic-style predictor, V-EM, "
    "filtered link prediction (centralised or federated)",
    headline=(Headline("test MRR", "test_mrr"), Headline("Hits@10", "test_hits@10")),
)
def build_fednsl_kg(config: RunConfig) -> Federation:
    cfg = build_kwargs(FedNSLKGConfig, config.method_kwargs, "method_kwargs (fednsl-kg)")
    data = build_kwargs(KGDataConfig, config.data, "data (fednsl-kg)")
    parts, planted, name = load_parts(data, config.seed, check=True)
    width = len(str(len(parts) - 1))
    ids = [f"c{i:0{width}d}" for i in range(len(parts))]
    shared = known_answers(parts) if cfg.eval_filter == "global" else None
    clients: dict[str, Client] = {
        cid: FedNSLKGClient(cid, part, cfg, shared if shared is not None else known_answers(part))
        for cid, part in zip(ids, parts)
    }
    meta: dict[str, Any] = {
        "kg": name,
        "clients": len(parts),
        "local_only": cfg.local_only,
        "partition": "federated_folder" if data.federated_folder else data.partition,
    }
    typed = parts[0].entity_types is not None
    strategy = FedNSLKGStrategy(
        cfg,
        parts[0].relations,
        ids,
        config.seed,
        types=parts[0].type_names if typed else (),
        num_entities=parts[0].num_entities,
        rounds=config.rounds,
        planted=planted,
        meta=meta,
    )
    summary = {
        "kg": name,
        "entities": parts[0].num_entities,
        "relations": parts[0].num_relations,
        "entity_types": parts[0].num_types if typed else 0,
        "planted_rules": len(planted),
        "eval_filter": cfg.eval_filter,
        "local_only": cfg.local_only,
        "clients": {
            cid: {
                "train": len(p.train),
                "valid": len(p.valid),
                "test": len(p.test),
                "relations": len(set(p.train[:, 1].tolist())),
            }
            for cid, p in zip(ids, parts)
        },
    }
    return Federation(strategy, clients, summary)
