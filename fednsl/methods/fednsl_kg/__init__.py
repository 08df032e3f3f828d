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

from typing import Any

from fednsl.config import RunConfig
from fednsl.federation.roles import Client
from fednsl.federation.runner import Federation
from fednsl.methods.fednsl_kg.client import FedNSLKGClient
from fednsl.methods.fednsl_kg.config import FedNSLKGConfig, KGDataConfig, resolve_source
from fednsl.methods.fednsl_kg.strategy import FedNSLKGStrategy
from fednsl.registry import Headline, build_kwargs, register_method
from kg.kg_sources import load_kg
from kg.linkpred import known_answers
from kg.triples import KnowledgeGraph

__all__ = ["FedNSLKGClient", "FedNSLKGConfig", "FedNSLKGStrategy", "KGDataConfig", "build_fednsl_kg", "load_parts"]


def load_parts(data: KGDataConfig, seed: int) -> tuple[list[KnowledgeGraph], list[tuple[int, tuple[int, ...]]], str]:
    """The clients' KG parts (same vocabularies), the planted rules (synthetic KG only) and the KG's name."""
    from kg.kg_partition import partition_kg, read_federated_kg
    from kg.kg_synthetic import planted_kg

    planted: list[tuple[int, tuple[int, ...]]] = []
    if data.federated_folder:
        parts = read_federated_kg(resolve_source(data.federated_folder))
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
        parts = (
            [kg]
            if data.num_clients == 1
            else partition_kg(kg, data.num_clients, by=data.partition, seed=seed, shares=data.shares)  # type: ignore[arg-type]
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
    parts, planted, name = load_parts(data, config.seed)
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
