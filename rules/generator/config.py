"""Generator hyper-parameters (:class:`GeneratorConfig`) and the token conventions they fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GeneratorConfig:
    """All sizes of the rule generator. Defaults = LogiRE on DWIE (R=65, 10 NER types, ≈5.9M parameters)."""

    num_relations: int = 65
    num_types: int = 10
    max_body_len: int = 3
    d_model: int = 256
    nhead: int = 8
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dim_feedforward: int = 2048
    dropout: float = 0.1
    positional: bool = True

    def __post_init__(self) -> None:
        for name in ("num_relations", "num_types", "max_body_len", "d_model", "nhead", "dim_feedforward"):
            if getattr(self, name) < 1:
                raise ValueError(f"GeneratorConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.nhead:
            raise ValueError(f"GeneratorConfig.d_model={self.d_model} is not divisible by nhead={self.nhead}")

    @property
    def vocab_size(self) -> int:
        """V = 2R + 1 tokens (relations, inverses, stay/pad)."""
        return 2 * self.num_relations + 1

    @property
    def pad(self) -> int:
        """The stay/padding token id 2R."""
        return 2 * self.num_relations
