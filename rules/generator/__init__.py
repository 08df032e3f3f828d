"""Transformer rule generator T_θ — the FedNSL server model (paper Eq. 5–6, App. A.6; LogiRE RuleGenerator).

Token conventions (shared across the project): with R relations there are V = 2R+1 tokens; token c < R is
relation c, R <= c < 2R is the inverse of relation c-R, and 2R is "stay"/padding. A rule head category
("triple") is the LongTensor row (head relation r, head entity type, tail entity type). A body is a length-L
LongTensor (L = max body length, default 3) padded with 2R; it is never all padding and never has a real token
after a pad ("well formed").

Model (spec §2): encoder tokens [type_emb(type_h), rel_emb(r), type_emb(type_t)], decoder input
[0-vector, rel_emb(b1), …, rel_emb(b_{L-1})] under a causal mask, output Linear d_model → V; built on
``torch.nn.Transformer(batch_first=True)``.

- Eq. (6): ``train_generator`` minimises the teacher-forced cross-entropy on weighted (triple, body) chains from
  the server's rule pool, sampled as LogiRE's MixRuleDataset (0.9 pool-weighted + 0.1 uniform over the
  triple's observed bodies, triple drawn uniformly), Adam + StepLR(1, γ=0.9) per epoch.
- Eq. (5): ``sample_rules`` draws N ancestral samples per triple for all triples at once and reduces them to
  J unique bodies with log T_θ(body | triple) and multiplicities n_j (the multinomial Mu_θ sent to clients).

Deviations from LogiRE (documented, both switchable):
- ``GeneratorConfig.positional=True`` adds learned position embeddings to encoder and decoder inputs. LogiRE
  has none, so its decoder (cross-attention over an unordered 3-token memory that shares one type table for
  head and tail) cannot tell (r, A, B) from (r, B, A). ``positional=False`` reproduces LogiRE exactly.
- Sampling and ``log_prob`` always enforce well-formed bodies (first token real, only pads after a pad) by
  masking the logits and renormalising; with ``TypeConstraints`` also the entity-type chain (spec issue:
  "valid bodies only"). LogiRE samples unmasked and can emit malformed bodies.
- Training uses the unmasked LogiRE loss by default; pass ``constraints`` to train on the masked
  (renormalised) distribution that sampling uses.
"""

from __future__ import annotations

from rules.generator.config import GeneratorConfig
from rules.generator.constraints import TypeConstraints
from rules.generator.masks import check_bodies
from rules.generator.model import RuleGenerator
from rules.generator.reference import sample_rules_reference
from rules.generator.sampling import SampledRules, sample_rules
from rules.generator.training import chain_sampling_probs, num_parameters, train_generator

__all__ = [
    "GeneratorConfig",
    "TypeConstraints",
    "RuleGenerator",
    "SampledRules",
    "check_bodies",
    "num_parameters",
    "sample_rules",
    "sample_rules_reference",
    "train_generator",
    "chain_sampling_probs",
]
