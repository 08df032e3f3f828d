"""LogiCP options (``method_kwargs``); see the README section "LogiCP".

Paper (He, An, Ma, JAIR 2026, §5.2) / reference code (``AICPS-Lab/LogiCP``) / our default:

* clusters K: not reported / 10 / 10;  α = 0.1;  ω1, ω2 (Eq. 19): not reported / equal-weight sum /
  1/3 each (spec §6.1);
* rounds: n_pre = 10 pretraining rounds (``pretrain_rounds``), n_tr = ``rounds − pretrain_rounds``
  (code 30); local epochs n_local (code 10), cluster epochs n_cluster (code 5);
* clustering: clients join the cluster whose model violates their mined property least (R_STL, Eq. 10,
  ``assign_rule="argmin"``); the code's first clustering sorts clients by the global model's R_STL and
  cuts K equal groups (``initial_clustering="sorted"``);
* ``clustering="loss"`` / ``"random"`` are Table 8's ablations (IFCA-style loss / random clusters);
* ``cluster_training="federated"`` (default): members train the cluster model on their own D^pub and
  send weights back (nothing but weights leaves a client); ``"server"``: D^pub is published to the
  server once, which trains on P_k = ∪ D^pub as in Alg. 1 lines 25–30.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fednsl.methods.logicp.calibration import SCALE_MODES
from fednsl.methods.logicp.correction import PRIORITIES
from fednsl.methods.logicp.losses import CP_KINDS, STL_KINDS, LossWeights
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.registry import build_kwargs
from fednsl.tasks.timeseries.federated import TSTrainConfig

CLUSTERINGS = ("stl", "loss", "random")
ASSIGN_RULES = ("argmin", "balanced")
INITIAL_CLUSTERINGS = ("sorted", "random")
CLUSTER_TRAINING = ("federated", "server")
CALIBRATE_WITH = ("client", "cluster")
CLUSTER_SPLITS = ("train", "private")
LOCAL_DATA = ("pretrain+train", "train")


@dataclass
class LogiCPConfig(TSTrainConfig):
    """``method_kwargs`` of ``logicp`` (on top of the shared forecasting options: model, property, SGD)."""

    num_clusters: int = 10  # K
    alpha: float = 0.1  # miscoverage: target coverage 1 − α
    pretrain_rounds: int = 10  # n_pre FedAvg rounds on D^pre (Alg. 1 lines 4–16; 0 = none)
    pretrain_epochs: int | None = None  # local epochs per pretraining round (None: local_epochs)
    cluster_epochs: int = 5  # n_cluster epochs on P_k per round
    omega_mse: float = 1.0 / 3.0  # ω1 (Eq. 19)
    omega_stl: float = 1.0 / 3.0  # ω2; the CP term gets 1 − ω1 − ω2
    stl_loss: str = "l1"  # Eq. 21: "l1" (paper) | "squared" (code) | "violation"
    cp_loss: str = "hinge"  # Eq. 22: "hinge" (paper) | "squared" (code)
    clustering: str = "stl"  # "stl" (R_STL, Eq. 10) | "loss" (MSE) | "random"
    assign_rule: str = "argmin"  # "argmin" (paper) | "balanced" (FedSTL code, capacity ⌈N/K⌉)
    initial_clustering: str = "sorted"  # first clustering: "sorted" (code) | "random"
    cluster_training: str = "federated"  # "federated" | "server" (module docstring)
    scale_mode: str = "cluster"  # σ of Eq. 15–17: "cluster" (exact) | "client" (Eq. 17 literal) | "none"
    calibrate_with: str = "client"  # model whose residuals calibrate: the client's or its cluster's
    local_data: str = "pretrain+train"  # windows of the local stage (Eq. 19): D^pri minus D^cal, D^nor | D^tr
    cluster_split: str = "train"  # windows a client scores cluster models on: D^tr | all of D^pri
    max_cluster_samples: int | None = None  # at most this many windows for that score (None: all)
    correction: str = "cp"  # priority of the "-T" row (Eq. 23–25): "cp" (paper) | "stl"
    participation: float = 1.0  # share of clients per round (§6.2); all are evaluated
    split: dict[str, Any] = field(default_factory=dict)  # SplitConfig shares

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "stl_loss": (self.stl_loss, STL_KINDS),
            "cp_loss": (self.cp_loss, CP_KINDS),
            "clustering": (self.clustering, CLUSTERINGS),
            "assign_rule": (self.assign_rule, ASSIGN_RULES),
            "initial_clustering": (self.initial_clustering, INITIAL_CLUSTERINGS),
            "cluster_training": (self.cluster_training, CLUSTER_TRAINING),
            "scale_mode": (self.scale_mode, SCALE_MODES),
            "calibrate_with": (self.calibrate_with, CALIBRATE_WITH),
            "cluster_split": (self.cluster_split, CLUSTER_SPLITS),
            "local_data": (self.local_data, LOCAL_DATA),
            "correction": (self.correction, PRIORITIES),
        }
        for name, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(f"method_kwargs (logicp).{name} must be one of {list(allowed)}, got {value!r}")
        if self.num_clusters < 1:
            raise ValueError(f"method_kwargs (logicp).num_clusters must be >= 1, got {self.num_clusters}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"method_kwargs (logicp).alpha must lie in (0, 1), got {self.alpha}")
        if self.pretrain_rounds < 0 or self.cluster_epochs < 0:
            raise ValueError("method_kwargs (logicp): pretrain_rounds and cluster_epochs must be >= 0")
        if not 0 < self.participation <= 1:
            raise ValueError(f"method_kwargs (logicp).participation must lie in (0, 1], got {self.participation}")
        self.loss_weights()
        self.split_config()

    def loss_weights(self) -> LossWeights:
        return LossWeights(self.omega_mse, self.omega_stl)

    def split_config(self) -> SplitConfig:
        return build_kwargs(SplitConfig, self.split, "method_kwargs (logicp).split")

    def loss_config(self) -> dict[str, Any]:
        """What clients need to build the Eq. 19 objective (sent in ``msg.config``)."""
        return {
            "omega_mse": self.omega_mse,
            "omega_stl": self.omega_stl,
            "stl_loss": self.stl_loss,
            "cp_loss": self.cp_loss,
            "local_data": self.local_data,
        }


__all__ = [
    "ASSIGN_RULES",
    "CALIBRATE_WITH",
    "CLUSTERINGS",
    "CLUSTER_SPLITS",
    "CLUSTER_TRAINING",
    "INITIAL_CLUSTERINGS",
    "LogiCPConfig",
]
