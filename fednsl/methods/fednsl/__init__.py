"""FedNSL (Xing, Lu, Yu: "Federated Neuro-Symbolic Learning", ICML 2024) on the federation core.

Server (:mod:`.strategy`): Transformer rule generator T_θ + rule pool; samples J candidate bodies per rule-head
triple with prior log-probabilities and counts (Eq. 5), aggregates client posteriors, retrains T_θ (Eq. 6).
Clients (:mod:`.client`): ground the bodies on their documents' fuzzy backbone values (Eq. 8), fit rule weights by
BCE + λ·KL (Eq. 2, 11), send the rule posterior (Eq. 9–10); evaluate personalised relation scores.
Backbones: :mod:`kg.backbones` (logire-dump | oracle) and the FedAvg-trained ``federated-features``
(:mod:`.backbone`, registered here because it runs a federation).
"""

from __future__ import annotations

from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.fednsl.client import FedNSLClient
from fednsl.methods.fednsl.config import FedNSLConfig, FedNSLDataConfig
from fednsl.methods.fednsl.data import FedNSLData, build_data
from fednsl.methods.fednsl.rule_documents import rule_documents
from fednsl.methods.fednsl.strategy import FedNSLStrategy
from fednsl.registry import Headline, build_kwargs, register_method
from kg.split import partition_stats

__all__ = [
    "FedNSLClient",
    "FedNSLData",
    "FedNSLConfig",
    "FedNSLDataConfig",
    "FedNSLStrategy",
    "build_fednsl",
    "build_data",
    "parse_config",
]


def parse_config(config: RunConfig) -> tuple[FedNSLConfig, FedNSLDataConfig]:
    cfg = build_kwargs(FedNSLConfig, config.method_kwargs, "method_kwargs (fednsl)")
    data = build_kwargs(FedNSLDataConfig, config.data, "data (fednsl)")
    return cfg, data


@register_method(
    "fednsl",
    doc="FedNSL: federated rule learning with a global rule prior and local posteriors (Xing et al. 2024)",
    headline=(
        Headline("seen F1", "evaluate/seen_f1", "evaluate/backbone_seen_f1", "backbone"),
        Headline("unseen F1", "evaluate/unseen_f1", "evaluate/backbone_unseen_f1", "backbone"),
    ),
    rule_documents=rule_documents,
)
def build_fednsl(config: RunConfig) -> Federation:
    cfg, data_cfg = parse_config(config)
    data = build_data(data_cfg, cfg, config.seed)
    opts = cfg.scorer_options()
    clients = {}
    for cdocs, part in zip(data.client_docs, data.partitions):
        clients[cdocs.cid] = FedNSLClient(
            cdocs.cid,
            part,
            data.values,
            len(data.corpus.relations),
            opts,
            golden_rules=data.golden,
            path_score=cfg.path_score,
            fast_after=cfg.fast_after,
            max_body_len=cfg.max_body_len,
            mining_edges=cfg.mining_edges,
            mining_threshold=cfg.mining_threshold,
            min_instances=cfg.min_instances,
            num_threads=cfg.num_threads,
        )
    meta = {
        "corpus": data.corpus.name,
        "backbone": cfg.backbone.get("name"),
        "kl_weight": cfg.kl_weight,
        "golden_kind": data.golden_kind,
    }
    strategy = FedNSLStrategy(
        cfg,
        data.corpus.relations.names,
        data.corpus.entity_types.names,
        [c.cid for c in data.client_docs],
        config.seed,
        golden_rules=data.golden,
        golden_kind=data.golden_kind,
        meta=meta,
        client_roles={c.cid: str(p.meta.get("role", "all")) for c, p in zip(data.client_docs, data.partitions)},
    )
    summary = {
        "corpus": data.corpus.name,
        "documents": len(data.corpus),
        "relations": len(data.corpus.relations),
        "entity_types": len(data.corpus.entity_types),
        "clients": {
            c.cid: {
                "seen": p.seen.name,
                "unseen": p.unseen.name,
                "role": p.meta.get("role", "all"),
                **partition_stats(p),
            }
            for c, p in zip(data.client_docs, data.partitions)
        },
        "golden_rules": len(data.golden),
        "golden_kind": data.golden_kind,
        "backbone": {k: v for k, v in data.backbone_summary.items() if k != "train_pairs"},
        "timings": data.timings,
    }
    return Federation(strategy, clients, summary)
