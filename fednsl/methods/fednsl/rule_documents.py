"""Each client's training documents, for the rule confidence counts of a FedNSL run (``fednsl rules counts``).

Declared as this method's ``rule_documents`` hook (its ``@register_method``); the shared pipeline
(:mod:`fednsl.rule_counts`) calls it at the end of a run (with the federation still in memory) or for an old run
(rebuilding only the corpus and the client split from its config — no backbone).
"""

from __future__ import annotations

from typing import Any

from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.fednsl.client import FedNSLClient
from fednsl.methods.fednsl.config import FedNSLDataConfig
from fednsl.methods.fednsl.data import _subset, client_id, load_fednsl_corpus
from fednsl.registry import build_kwargs
from kg.documents import Document
from kg.split import NerGroupSplit, split_clients


def rule_documents(config: RunConfig, federation: Federation | None = None) -> dict[str, list[Document]]:
    """Client id → its training documents (train + hold-out; the documents its rules were fitted on).

    With ``federation`` (the run's, before fault injection) the clients' own partitions are read; without, the
    split is rebuilt from ``config`` exactly as the method builder does (same corpus, seeds and client ids).
    """
    if federation is not None:
        out = {
            cid: list(c.partition.seen_train) for cid, c in federation.clients.items() if isinstance(c, FedNSLClient)
        }
        if len(out) == len(federation.clients):
            return out
    data = build_kwargs(FedNSLDataConfig, config.data, "data (fednsl)")
    corpus = _subset(load_fednsl_corpus(data, config.seed), data.max_docs, data.split_seed)
    groups: Any = NerGroupSplit.parse(data.groups) if isinstance(data.groups, str) else data.groups
    parts = split_clients(
        corpus, data.num_clients, groups, seed=data.split_seed, test_ratio=data.test_ratio, holdout=data.holdout
    )
    return {client_id(k, len(parts)): list(p.seen_train) for k, p in enumerate(parts)}
