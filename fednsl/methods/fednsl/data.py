"""Build a FedNSL federation's data from config: corpus, client split, backbone values, golden rules.

Used by the method builder and by ``fednsl rules explain --doc`` (which rebuilds a run's data from
RUN_DIR/config.yaml to get a document's backbone values).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fednsl.common.torch_utils import torch_threads
from fednsl.methods.fednsl import backbone as _backbone  # noqa: F401  (registers 'federated-features')
from fednsl.methods.fednsl.config import FedNSLConfig, FedNSLDataConfig, resolve_data_path
from kg.backbones import ClientDocs, build_backbone
from kg.documents import Corpus, DataError
from kg.seeding import derive_rng
from kg.split import ClientPartition, NerGroupSplit, eligible_documents, split_clients
from rules.fol import RelationVocab, read_rules

__all__ = ["FedNSLData", "DocumentValues", "load_fednsl_corpus", "build_data", "client_id", "document_values"]

log = logging.getLogger("fednsl.methods.fednsl")


def client_id(k: int, n: int) -> str:
    return f"c{k:0{len(str(max(n - 1, 0)))}d}"


@dataclass
class FedNSLData:
    corpus: Corpus
    partitions: list[ClientPartition]
    client_docs: list[ClientDocs]
    values: dict[str, np.ndarray]
    golden: list[tuple[int, tuple[int, ...]]]
    golden_kind: str
    backbone_summary: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def client_ids(self) -> list[str]:
        return [c.cid for c in self.client_docs]


def load_fednsl_corpus(data: FedNSLDataConfig, seed: int) -> Corpus:
    """The corpus of ``data`` (synthetic from ``data.synthetic`` options, or any supported dataset path).

    A corpus with nothing to train on (no documents, none with entities, no relation facts) is refused with a
    :class:`~kg.documents.DataError` naming its file (:func:`kg.io.missing_training_data`)."""
    from kg.io import load_corpus, missing_training_data

    if data.path == "synthetic":
        from kg.synthetic import PlantedRuleConfig, generate

        corpus, _ = generate(PlantedRuleConfig.from_dict(dict(data.synthetic)), data.synthetic_seed)
        return corpus
    if data.synthetic:
        raise ValueError("data.synthetic options apply only with data.path: synthetic")
    path = resolve_data_path(data.path)
    if not isinstance(path, str) and not path.exists():
        where = f"data.path {data.path!r}" + ("" if str(path) == data.path else f" resolves to {path}, which")
        raise FileNotFoundError(
            f"{where} does not exist (data paths are relative to the repository root; set FEDNSL_SHARED_DATA to "
            "relocate ../shared/data)"
        )
    corpus = load_corpus(path, data.format, skip_bad=data.skip_bad)
    missing = missing_training_data(corpus, path)
    if missing is not None:  # refused here, before the split, the backbone and the run folder
        raise DataError(
            f"{missing.reason}; fednsl trains on documents with entities and relation facts", file=missing.file
        )
    return corpus


def _subset(corpus: Corpus, max_docs: int | None, seed: int) -> Corpus:
    if max_docs is None:
        return corpus
    docs, _ = eligible_documents(corpus)
    docs = sorted(docs, key=lambda d: d.doc_id)
    if max_docs >= len(docs):
        return corpus
    pick = np.sort(derive_rng(seed, 7).choice(len(docs), size=max_docs, replace=False))
    keep = [docs[int(i)] for i in pick]
    return Corpus(
        keep, corpus.relations, corpus.entity_types, corpus.name, corpus.report, {**corpus.meta, "max_docs": max_docs}
    )


def golden_rules(corpus: Corpus, data: FedNSLDataConfig) -> tuple[list[tuple[int, tuple[int, ...]]], str]:
    """(rules as (head id, body tokens), kind): the planted rules of a synthetic corpus, else golden_rules.txt
    beside the data (``auto``), else the file ``data.golden_rules``; empty when none is found."""
    vocab = RelationVocab(tuple(corpus.relations.names))
    spec = data.golden_rules
    if spec in (None, "", "none"):
        return [], "golden"
    if spec == "auto":
        planted = corpus.meta.get("planted_rules")
        if planted:
            from rules.fol import parse_rule

            return [(r.head, tuple(r.body)) for r in (parse_rule(t, vocab) for t in planted)], "planted"
        if data.path == "synthetic" or data.path.startswith("synthetic:"):
            return [], "golden"
        base = Path(resolve_data_path(data.path))
        for cand in (base / "golden_rules.txt", base.parent / "golden_rules.txt"):
            if cand.is_file():
                return [(r.head, tuple(r.body)) for r in read_rules(cand, vocab)], "golden"
        return [], "golden"
    path = Path(resolve_data_path(spec))
    if not path.is_file():
        raise FileNotFoundError(f"data.golden_rules: no rule file at {path}")
    return [(r.head, tuple(r.body)) for r in read_rules(path, vocab)], "golden"


def build_data(data: FedNSLDataConfig, method: FedNSLConfig, seed: int) -> FedNSLData:
    """Corpus → client split → backbone (prepared, e.g. its FedAvg phase) → per-document values."""
    t0 = time.perf_counter()
    corpus = _subset(load_fednsl_corpus(data, seed), data.max_docs, data.split_seed)
    groups: Any = data.groups
    if isinstance(groups, str):
        groups = NerGroupSplit.parse(groups)
    parts = split_clients(
        corpus,
        data.num_clients,
        groups,
        seed=data.split_seed,
        test_ratio=data.test_ratio,
        holdout=data.holdout,
        scheme=data.split,
        poor_share=data.poor_share,
    )
    ids = [client_id(k, len(parts)) for k in range(len(parts))]
    cdocs = [ClientDocs(cid, p.seen, list(p.train), list(p.holdout), list(p.test)) for cid, p in zip(ids, parts)]
    for cid, p in zip(ids, parts):
        if not p.train:
            raise DataError(
                f"client {cid} has no training documents ({len(p.documents)} documents in all); "
                "use fewer clients or more data"
            )
    t1 = time.perf_counter()
    name, opts = method.backbone_spec()
    backbone = build_backbone(name, opts, "method_kwargs.backbone")
    if name == "logire-dump" and "path" in opts:
        backbone.options.path = str(resolve_data_path(str(opts["path"])))  # type: ignore[attr-defined]
    with torch_threads(method.num_threads):
        summary = backbone.prepare(cdocs, corpus.relations, corpus.entity_types, seed, corpus.documents)
        t2 = time.perf_counter()
        values: dict[str, np.ndarray] = {}
        for c in cdocs:
            for d in c.documents:
                values[d.doc_id] = backbone.values(c, d)
    t3 = time.perf_counter()
    gold, kind = golden_rules(corpus, data)
    return FedNSLData(
        corpus,
        parts,
        cdocs,
        values,
        gold,
        kind,
        summary,
        {"data_s": t1 - t0, "backbone_prepare_s": t2 - t1, "backbone_values_s": t3 - t2},
    )


@dataclass
class DocumentValues:
    """One document of a finished run, as its client sees it: backbone values and entity names/types."""

    doc_id: str
    client: str
    values: np.ndarray  # (N, N, R)
    entity_names: list[str]
    entity_types: np.ndarray


def document_values(run_dir: str | Path, doc_id: str) -> DocumentValues:
    """Rebuild a FedNSL run's data from RUN_DIR/config.yaml and return one document's backbone values
    (``fednsl rules explain RUN_DIR --doc DOC``). A trained backbone is read from its cache when present."""
    from fednsl.config import RunConfig
    from fednsl.registry import build_kwargs
    from kg.yaml_io import load_yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --doc needs the run's config.yaml")
    config = RunConfig.from_dict(load_yaml(path.read_text()), where=str(path))
    if config.method != "fednsl":
        raise ValueError(f"{path}: method {config.method!r} is not fednsl")
    cfg = build_kwargs(FedNSLConfig, config.method_kwargs, "method_kwargs (fednsl)")
    data_cfg = build_kwargs(FedNSLDataConfig, config.data, "data (fednsl)")
    data = build_data(data_cfg, cfg, config.seed)
    for c in data.client_docs:
        for d in c.documents:
            if d.doc_id == doc_id:
                return DocumentValues(
                    doc_id, c.cid, data.values[doc_id], list(d.entity_names), np.asarray(d.entity_types)
                )
    known = [d.doc_id for c in data.client_docs for d in c.documents]
    raise KeyError(
        f"document {doc_id!r} is not among the run's {len(known)} client documents (e.g. {', '.join(known[:5])})"
    )
