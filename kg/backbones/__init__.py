"""Pluggable fuzzy-value backbones x_r(h, t) ∈ [0, 1] for FedNSL (spec §8.7), resolved by name from config.

- ``federated-features``: relation classifier over annotation features (types, mention strings and positions,
  co-occurrence, distances; optional MiniLM text vectors), trained with FedAvg on the clients' training
  documents — the default for real data. It runs a federation, so it lives in (and is registered by) the
  FedNSL method package (:mod:`fednsl.methods.fednsl.backbone`); the features it reads are
  :mod:`kg.backbones.text_features`;
- ``logire-dump``: σ(logits) from a LogiRE-format dump of ATLOP/GAIN/... scores (:mod:`kg.backbones.logire_dump`);
- ``oracle``: gold edges with drops and noise, for controlled experiments (:mod:`kg.backbones.oracle`).

``build_backbone(name, options)`` → :class:`Backbone`; ``backbone.prepare(clients, relations, types, seed,
documents)``; ``backbone.values(client, doc)`` → (N, N, R) float32.
"""

from kg.backbones.base import (
    BACKBONES,
    Backbone,
    ClientDocs,
    backbone_names,
    build_backbone,
    cache_dir,
    check_values,
    register_backbone,
)
from kg.backbones.logire_dump import LogireDump, LogireDumpOptions, load_dump
from kg.backbones.oracle import NoisyOracle, OracleOptions

__all__ = [
    "BACKBONES",
    "Backbone",
    "ClientDocs",
    "LogireDump",
    "LogireDumpOptions",
    "NoisyOracle",
    "OracleOptions",
    "backbone_names",
    "build_backbone",
    "cache_dir",
    "check_values",
    "load_dump",
    "register_backbone",
]
