"""The options of the rule-learning server: the generator T_θ's size and training budget (``method_kwargs.generator``)
and the server settings a strategy reads from its method's config.

One :class:`GeneratorOptions` type serves every rule learner; a method passes its own defaults (sized for its
data) to :meth:`GeneratorOptions.build`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from fednsl.registry import build_kwargs
from rules.generator import GeneratorConfig

__all__ = ["GeneratorOptions", "ServerOptions"]


@dataclass
class GeneratorOptions:
    """Server rule generator T_θ (:mod:`rules.generator`; App. A.6) and its training budget (Eq. 6)."""

    d_model: int = 256
    nhead: int = 8
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dim_feedforward: int = 2048
    dropout: float = 0.1
    positional: bool = True
    pretrain_epochs: int = 5  # on the round-1 pool
    epochs: int = 2  # per round, after the pool update
    samples_per_epoch: int = 20_000  # chains drawn per epoch (LogiRE: 100k)
    batch_size: int = 128
    lr: float = 1e-3
    lr_gamma: float = 0.9
    uniform_mix: float = 0.1
    type_constraints: bool = True  # sample only type-consistent bodies (constraints from the pool's heads)

    @classmethod
    def build(
        cls, given: Mapping[str, Any], section: str, defaults: Mapping[str, Any] | None = None
    ) -> GeneratorOptions:
        """Options from a config section (``given`` over the method's ``defaults``); unknown keys raise, naming
        ``section`` and the valid keys."""
        return build_kwargs(cls, {**dict(defaults or {}), **dict(given)}, section)

    def model_config(self, num_relations: int, num_types: int, max_body_len: int) -> GeneratorConfig:
        """The generator's :class:`~rules.generator.GeneratorConfig` for a vocabulary (sizes from these options)."""
        sizes = {f.name: getattr(self, f.name) for f in fields(GeneratorConfig) if hasattr(self, f.name)}
        return GeneratorConfig(
            **{**sizes, "num_relations": num_relations, "num_types": max(1, num_types), "max_body_len": max_body_len}
        )


class ServerOptions(Protocol):
    """What :class:`~fednsl.tasks.rule_learning.server.RuleLearningStrategy` reads from a method's config."""

    max_body_len: int
    num_samples: int  # N ancestral samples per head (Eq. 5)
    pool_mode: str  # "momentum" | "mixture" (rules.pool)
    pool_ratio: float
    top_k: int  # reference-rule recall among the top-k bodies of a head
    num_threads: int

    @property
    def gen(self) -> GeneratorOptions: ...

    @property
    def pool_samples(self) -> int: ...  # posterior samples per head in mixture mode
