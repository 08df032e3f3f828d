"""The smallest config of every registered method, for the fault matrix and the resume tests.

Each entry is a shipped config (or a direct :class:`RunConfig`) shrunk so that two rounds take about a
second; ``tiny(method)`` builds it. All use ``min_clients: 1`` so one faulty client leaves a quorum.
"""

from __future__ import annotations

import json
from typing import Any

from fednsl.config import RunConfig, load_config

_TS_DATA = {"name": "synthetic", "num_clients": 3, "groups": 1, "days": 12, "input_len": 24, "horizon": 6}
_TS_MODEL = {"name": "rnn", "hidden": 4, "layers": 1}
_TS_KW = {"model": _TS_MODEL, "local_epochs": 1, "batch_size": 64}
_GENERATOR = {"d_model": 16, "nhead": 2, "dim_feedforward": 32, "pretrain_epochs": 1, "epochs": 1,
              "samples_per_epoch": 200, "batch_size": 100}

# method -> (shipped config or None, overrides or a RunConfig dict)
TINY: dict[str, dict[str, Any]] = {
    "fedavg": {"config": "fedavg_blobs", "set": [
        "data.num_clients=3", "data.samples_per_client=30", "data.features=4", "method_kwargs.hidden=4"]},
    "fednsl": {"raw": {
        "method": "fednsl", "data": {"path": "synthetic", "num_clients": 3,
                                     "synthetic": {"num_documents": 18, "entities_per_doc": [4, 6]}},
        "method_kwargs": {"num_samples": 10, "scorer_steps": 5, "generator": _GENERATOR,
                          "backbone": {"name": "oracle", "drop": 0.3}}}},
    "fednsl-gmm": {"config": "numeric_fednsl", "set": ["method_kwargs.em_steps=1", "data.points_per_class=20",
                                                       "data.relabelled=10"]},
    "fedavg-numeric": {"config": "numeric_fedavg", "set": ["data.points_per_class=20", "data.relabelled=10"]},
    "pfedme": {"config": "numeric_pfedme", "set": ["method_kwargs.local_rounds=1", "method_kwargs.K=1",
                                                   "data.points_per_class=20", "data.relabelled=10"]},
    "perfedavg": {"config": "numeric_perfedavg", "set": ["method_kwargs.local_steps=1", "method_kwargs.variant=fo",
                                                         "data.points_per_class=20", "data.relabelled=10"]},
    "pfedbayes": {"config": "numeric_pfedbayes", "set": ["method_kwargs.local_epochs=1",
                                                         "method_kwargs.personal_steps=1",
                                                         "data.points_per_class=20", "data.relabelled=10"]},
    "lrxfl": {"config": "numeric_lrxfl", "set": ["method_kwargs.local_epochs=1", "data.points_per_class=20",
                                                 "data.relabelled=10"]},
    "kifl": {"config": "kifl_wine_rules", "set": ["method_kwargs.local_epochs=1", "method_kwargs.hidden=[4]"]},
    "fedstl": {"config": "fedstl_synthetic", "set": ["method_kwargs.num_clusters=1"]},
    "logicp": {"config": "logicp_synthetic", "set": ["method_kwargs.num_clusters=1",
                                                     "method_kwargs.pretrain_rounds=1"]},
    "cp-ifca": {"config": "logicp_cp_ifca", "set": ["method_kwargs.num_clusters=1"]},
    "ts-fedbayes": {"config": "logicp_fedbayes", "set": ["method_kwargs.personal_steps=1"]},
    "ts-fedavg": {"config": "ts_fedavg", "set": []},
    "ts-fedprox": {"config": "ts_fedprox", "set": []},
    "ts-ditto": {"config": "ts_ditto", "set": []},
    "ts-fedrep": {"config": "ts_fedrep", "set": ["method_kwargs.head_epochs=1"]},
    "ts-ifca": {"config": "ts_ifca", "set": ["method_kwargs.num_clusters=1"]},
    "fednsl-kg": {"config": "fednsl_kg_synthetic", "set": [
        "data.num_clients=3", 'data.synthetic={"num_families": 4}', "method_kwargs.max_bodies=8",
        "method_kwargs.predictor={epochs: 3, eval_every: 3, patience: 1}", "method_kwargs.pool_top=6",
        "method_kwargs.mining={samples_per_relation: 40, max_rules_per_head: 10}", "method_kwargs.num_samples=20",
        "method_kwargs.report_valid=false",
        "method_kwargs.generator={pretrain_epochs: 1, epochs: 1, samples_per_epoch: 200}"]},
}
_TS = {"fedstl", "logicp", "cp-ifca", "ts-fedbayes", "ts-fedavg", "ts-fedprox", "ts-ditto", "ts-fedrep", "ts-ifca"}


def tiny(method: str, rounds: int = 2, extra: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The tiny config of ``method`` with ``rounds`` rounds, all clients sampled, quorum 1."""
    entry = TINY[method]
    common = [f"rounds={rounds}", "federation.fraction=1.0", "federation.min_clients=1",
              "federation.client_timeout_s=30", "federation.keep_checkpoints=3"]
    if method in _TS:
        common += [f"data={json.dumps(_TS_DATA)}", *(f"method_kwargs.{k}={json.dumps(v)}" for k, v in _TS_KW.items())]
    if "raw" in entry:
        raw = {**entry["raw"], "rounds": rounds, "seed": 0, "name": f"tiny-{method}"}
        cfg = RunConfig.from_dict(raw)
        from fednsl.config import apply_overrides
        return RunConfig.from_dict({**apply_overrides(cfg.to_dict(), [*common, *extra])})
    return load_config(entry["config"], [*entry["set"], *common, *extra])
