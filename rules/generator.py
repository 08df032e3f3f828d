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

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import nn

from kg.seeding import seeded_global_rng

if TYPE_CHECKING:  # pragma: no cover
    from rules.pool import RulePool

__all__ = [
    "GeneratorConfig",
    "TypeConstraints",
    "RuleGenerator",
    "SampledRules",
    "check_bodies",
    "sample_rules",
    "sample_rules_reference",
    "train_generator",
    "chain_sampling_probs",
]


# --------------------------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------------------
# type constraints
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TypeConstraints:
    """Which entity-type transitions each token may make.

    ``allowed[c, s, d]`` (V, E, E) bool: token c may lead from an entity of type s to one of type d.
    Invariants (checked): inverse tokens are the transposes of their relations, stay is the identity.
    A body b_1..b_l is type-consistent for triple (r, h, t) iff there are types h = τ_0, τ_1, …, τ_l = t with
    ``allowed[b_k, τ_{k-1}, τ_k]`` for every k.
    """

    allowed: torch.Tensor

    def __post_init__(self) -> None:
        a = self.allowed
        if a.dtype != torch.bool or a.dim() != 3 or a.shape[0] % 2 != 1 or a.shape[1] != a.shape[2]:
            raise ValueError(f"TypeConstraints.allowed must be a bool tensor (2R+1, E, E), got {a.dtype} {tuple(a.shape)}")
        r = (a.shape[0] - 1) // 2
        if not torch.equal(a[r : 2 * r], a[:r].transpose(1, 2)):
            raise ValueError("TypeConstraints.allowed: inverse tokens (R..2R-1) must be the transposes of relations 0..R-1")
        if not torch.equal(a[2 * r], torch.eye(a.shape[1], dtype=torch.bool, device=a.device)):
            raise ValueError("TypeConstraints.allowed: the stay token 2R must keep the type (identity)")

    @property
    def num_relations(self) -> int:
        return (self.allowed.shape[0] - 1) // 2

    @property
    def num_types(self) -> int:
        return self.allowed.shape[1]

    @classmethod
    def from_pairs(
        cls,
        pairs: Iterable[tuple[int, int, int]],
        num_relations: int,
        num_types: int,
        unobserved: Literal["any", "forbid"] = "any",
    ) -> TypeConstraints:
        """Build from observed (relation, source type, target type) triples.

        Inverse tokens get the swapped pairs, stay keeps the type. ``unobserved`` decides relations never seen in
        ``pairs``: "any" (types unknown → unconstrained, the default: "consistent where types are known") or
        "forbid" (the token can never be used).
        """
        rel = torch.zeros(num_relations, num_types, num_types, dtype=torch.bool)
        for r, s, d in pairs:
            if not (0 <= r < num_relations and 0 <= s < num_types and 0 <= d < num_types):
                raise ValueError(f"type pair ({r}, {s}, {d}) out of range for R={num_relations}, E={num_types}")
            rel[r, s, d] = True
        if unobserved == "any":
            unseen = ~rel.flatten(1).any(1)
            rel[unseen] = True
        elif unobserved != "forbid":
            raise ValueError(f"unobserved must be 'any' or 'forbid', got {unobserved!r}")
        allowed = torch.cat([rel, rel.transpose(1, 2), torch.eye(num_types, dtype=torch.bool)[None]], 0)
        return cls(allowed)

    def to(self, device: torch.device | str) -> TypeConstraints:
        return TypeConstraints(self.allowed.to(device))

    def completion_table(self, tail_types: torch.Tensor, max_steps: int) -> torch.Tensor:
        """C (B, max_steps+1, E) bool: C[b, k, s] = type s reaches tail_types[b] with at most k real tokens."""
        e = self.num_types
        real = self.allowed[: 2 * self.num_relations].to(tail_types.device).any(0).float()  # (E, E) one-step moves
        cur = F.one_hot(tail_types, e).bool()
        out = [cur]
        for _ in range(max_steps):
            cur = cur | ((cur.float() @ real.T) > 0)
            out.append(cur)
        return torch.stack(out, 1)

    def body_is_consistent(self, head_type: int, tail_type: int, body: Sequence[int]) -> bool:
        """Pure-Python reference: does some type chain h=τ_0..τ_l=t fit the real tokens of ``body``?"""
        pad = 2 * self.num_relations
        allowed = self.allowed.cpu().tolist()
        types = {head_type}
        for tok in body:
            if tok == pad:
                break
            types = {d for s in types for d in range(self.num_types) if allowed[tok][s][d]}
        return tail_type in types


# --------------------------------------------------------------------------------------------------------------
# validity of bodies (well-formedness + optional type chain), batched
# --------------------------------------------------------------------------------------------------------------
class _Validity:
    """Per-row decoding state giving the allowed next tokens (B, V) at each step.

    Rows are (triple, prefix) pairs. Without constraints: step 0 → any real token; later → any token until a
    pad was emitted, then only pad. With constraints it additionally tracks the set S of types the prefix can
    end at and allows a real token c only if some type in its image reaches the tail type within the remaining
    steps (C table), and pad only if the tail type is in S (the chain is complete). This look-ahead means a
    row never gets stuck; rows with no allowed first token are "uncompletable" (reported, given pad to keep
    the softmax finite, and dropped by the caller).
    """

    def __init__(self, triples: torch.Tensor, max_len: int, num_relations: int, constraints: TypeConstraints | None):
        self.b = triples.shape[0]
        self.v = 2 * num_relations + 1
        self.pad = 2 * num_relations
        self.max_len = max_len
        self.step = 0
        self.device = triples.device
        self.ended = torch.zeros(self.b, dtype=torch.bool, device=self.device)
        self.constraints = constraints
        if constraints is not None:
            if constraints.num_relations != num_relations:
                raise ValueError(
                    f"TypeConstraints has R={constraints.num_relations} relations, the generator R={num_relations}"
                )
            e = constraints.num_types
            if triples.numel() and int(triples[:, 1:].max()) >= e:
                raise ValueError(f"triple entity type >= TypeConstraints.num_types={e}")
            self.allowed = constraints.allowed.to(self.device)
            # (E, V*E): move[s, c*E + d] = allowed[c, s, d]
            self.move = self.allowed.permute(1, 0, 2).reshape(e, -1).float()
            self.tail = triples[:, 2]
            self.types = F.one_hot(triples[:, 1], e).bool()  # S: (B, E)
            self.reach = constraints.completion_table(self.tail, max_len)  # (B, L+1, E)
            self._next: torch.Tensor | None = None

    def mask(self) -> torch.Tensor:
        """Allowed next tokens (B, V) bool at the current step."""
        allow = torch.zeros(self.b, self.v, dtype=torch.bool, device=self.device)
        if self.constraints is None:
            allow[:, : self.pad] = True
        else:
            remaining = self.max_len - 1 - self.step
            nxt = (self.types.float() @ self.move > 0).view(self.b, self.v, -1)  # (B, V, E) image of S per token
            self._next = nxt
            ok = (nxt & self.reach[:, remaining, None, :]).any(-1)
            allow[:, : self.pad] = ok[:, : self.pad]
        if self.step > 0:
            if self.constraints is None:
                allow[:, self.pad] = True
            else:
                allow[:, self.pad] = self.types.gather(1, self.tail[:, None]).squeeze(1)
        allow[self.ended] = False
        allow[self.ended, self.pad] = True
        return allow

    def advance(self, tokens: torch.Tensor) -> None:
        """Consume the chosen tokens (B,) of the current step (call after ``mask``)."""
        if self.constraints is not None:
            assert self._next is not None
            real = tokens != self.pad
            new = self._next[torch.arange(self.b, device=self.device), tokens]
            self.types = torch.where(real[:, None], new, self.types)
        self.ended = self.ended | (tokens == self.pad)
        self.step += 1


def check_bodies(bodies: torch.Tensor, num_relations: int) -> torch.Tensor:
    """Well-formedness (B,) bool of padded bodies (B, L): tokens in [0, 2R], first token real, no real after pad."""
    pad = 2 * num_relations
    in_range = ((bodies >= 0) & (bodies <= pad)).all(-1)
    is_pad = bodies == pad
    first_real = ~is_pad[:, 0] if bodies.shape[1] else torch.zeros_like(in_range)
    after_pad = torch.cummax(is_pad.long(), dim=1).values.bool()
    return in_range & first_real & ~(after_pad & ~is_pad).any(-1)


# --------------------------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------------------------
class RuleGenerator(nn.Module):
    """T_θ(body | triple): encoder over (type_h, r, type_t), autoregressive decoder over ≤ L body tokens.

    ``generator`` seeds the parameter initialisation (default: seed 0; the global RNG is left untouched).
    """

    def __init__(self, config: GeneratorConfig | None = None, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config or GeneratorConfig()
        c = self.config
        seed = _seed_from(generator)
        with seeded_global_rng(seed):
            self.rel_emb = nn.Embedding(c.vocab_size, c.d_model)
            self.type_emb = nn.Embedding(c.num_types, c.d_model)
            self.transformer = nn.Transformer(
                d_model=c.d_model,
                nhead=c.nhead,
                num_encoder_layers=c.num_encoder_layers,
                num_decoder_layers=c.num_decoder_layers,
                dim_feedforward=c.dim_feedforward,
                dropout=c.dropout,
                batch_first=True,
            )
            self.proj = nn.Linear(c.d_model, c.vocab_size)
            if c.positional:
                self.enc_pos = nn.Parameter(torch.randn(3, c.d_model) * 0.02)
                self.dec_pos = nn.Parameter(torch.randn(c.max_body_len, c.d_model) * 0.02)
        causal = torch.triu(torch.full((c.max_body_len, c.max_body_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", causal, persistent=False)

    # ---- building blocks -------------------------------------------------------------------------------------
    def _check_triples(self, triples: torch.Tensor) -> None:
        c = self.config
        if triples.dim() != 2 or triples.shape[1] != 3:
            raise ValueError(f"triples must be (B, 3) (relation, head type, tail type), got {tuple(triples.shape)}")
        if triples.numel() and (
            int(triples[:, 0].min()) < 0
            or int(triples[:, 0].max()) >= c.num_relations
            or int(triples[:, 1:].min()) < 0
            or int(triples[:, 1:].max()) >= c.num_types
        ):
            raise ValueError(
                f"triple ids out of range: relation must be in [0, {c.num_relations}), types in [0, {c.num_types})"
            )

    def encode(self, triples: torch.Tensor) -> torch.Tensor:
        """Memory (B, 3, d) from triples (B, 3) = (r, type_h, type_t)."""
        self._check_triples(triples)
        src = torch.stack(
            [self.type_emb(triples[:, 1]), self.rel_emb(triples[:, 0]), self.type_emb(triples[:, 2])], dim=1
        )
        if self.config.positional:
            src = src + self.enc_pos
        return self.transformer.encoder(src)

    def decode(self, memory: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        """Logits (B, i+1, V) for the next token after each prefix position; prefix (B, i) with i < L."""
        b, i = prefix.shape
        tgt = torch.cat([memory.new_zeros(b, 1, self.config.d_model), self.rel_emb(prefix)], dim=1)
        if self.config.positional:
            tgt = tgt + self.dec_pos[: i + 1]
        out = self.transformer.decoder(tgt, memory, tgt_mask=self.causal_mask[: i + 1, : i + 1], tgt_is_causal=True)
        return self.proj(out)

    def forward(self, triples: torch.Tensor, bodies: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, L, V): position k scores body token k given triple and bodies[:, :k]."""
        if bodies.shape[1] != self.config.max_body_len:
            raise ValueError(f"bodies must have length L={self.config.max_body_len}, got {bodies.shape[1]}")
        return self.decode(self.encode(triples), bodies[:, :-1])

    # ---- incremental decoding with key/value reuse (sampling) ------------------------------------------------
    def _attn_qkv(self, attn: nn.MultiheadAttention, x: torch.Tensor, part: slice) -> torch.Tensor:
        """Project x (B, S, d) with the q/k/v slice ``part`` of ``attn.in_proj`` → (B, heads, S, d/heads)."""
        d, h = self.config.d_model, self.config.nhead
        w = attn.in_proj_weight[part]
        b = attn.in_proj_bias[part] if attn.in_proj_bias is not None else None
        return F.linear(x, w, b).view(x.shape[0], x.shape[1], h, d // h).transpose(1, 2)

    def _attend(self, attn: nn.MultiheadAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, k, v)  # (B, heads, 1, d/heads), no mask: all keys are visible
        out = out.transpose(1, 2).reshape(q.shape[0], 1, self.config.d_model)
        return attn.out_proj(out)

    def init_cache(self, memory: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Cross-attention keys/values of the memory (T, 3, d), computed once per triple for ``decode_step``."""
        d = self.config.d_model
        cache: dict[str, list[torch.Tensor]] = {"mem_k": [], "mem_v": [], "k": [], "v": []}
        for layer in self.transformer.decoder.layers:
            cache["mem_k"].append(self._attn_qkv(layer.multihead_attn, memory, slice(d, 2 * d)))
            cache["mem_v"].append(self._attn_qkv(layer.multihead_attn, memory, slice(2 * d, 3 * d)))
        return cache

    def decode_step(
        self,
        cache: dict[str, list[torch.Tensor]],
        parent: torch.Tensor | None,
        row_triple: torch.Tensor,
        last_token: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]]]:
        """One decoder position for U rows, reusing self-attention keys/values of earlier positions.

        ``parent`` (U,) indexes the rows of the previous call whose cached keys/values each row extends (None at
        position 0), ``row_triple`` (U,) indexes the memory, ``last_token`` (U,) is the previous body token (None
        at position 0: the zero start vector). Returns next-token logits (U, V) equal to
        ``decode(memory[row_triple], prefix)[:, -1]`` and the extended cache. Eval mode only (no dropout).
        """
        if self.training:
            raise RuntimeError("decode_step is for eval-mode sampling; call model.eval() first")
        d = self.config.d_model
        u = row_triple.shape[0]
        pos = 0 if parent is None else cache["k"][0].shape[2]
        if last_token is None:
            x = cache["mem_k"][0].new_zeros(u, 1, d)
        else:
            x = self.rel_emb(last_token)[:, None]
        if self.config.positional:
            x = x + self.dec_pos[pos]
        new_k, new_v = [], []
        for li, layer in enumerate(self.transformer.decoder.layers):

            def self_attn(y: torch.Tensor) -> torch.Tensor:
                q = self._attn_qkv(layer.self_attn, y, slice(0, d))
                k = self._attn_qkv(layer.self_attn, y, slice(d, 2 * d))
                v = self._attn_qkv(layer.self_attn, y, slice(2 * d, 3 * d))
                if parent is not None:
                    k = torch.cat([cache["k"][li][parent], k], 2)
                    v = torch.cat([cache["v"][li][parent], v], 2)
                new_k.append(k)
                new_v.append(v)
                return self._attend(layer.self_attn, q, k, v)

            def cross_attn(y: torch.Tensor) -> torch.Tensor:
                q = self._attn_qkv(layer.multihead_attn, y, slice(0, d))
                return self._attend(
                    layer.multihead_attn, q, cache["mem_k"][li][row_triple], cache["mem_v"][li][row_triple]
                )

            def ff(y: torch.Tensor) -> torch.Tensor:
                return layer.linear2(layer.activation(layer.linear1(y)))

            if layer.norm_first:
                x = x + self_attn(layer.norm1(x))
                x = x + cross_attn(layer.norm2(x))
                x = x + ff(layer.norm3(x))
            else:
                x = layer.norm1(x + self_attn(x))
                x = layer.norm2(x + cross_attn(x))
                x = layer.norm3(x + ff(x))
        if self.transformer.decoder.norm is not None:
            x = self.transformer.decoder.norm(x)
        return self.proj(x[:, 0]), {"mem_k": cache["mem_k"], "mem_v": cache["mem_v"], "k": new_k, "v": new_v}

    # ---- probabilities ---------------------------------------------------------------------------------------
    def step_log_probs(
        self, triples: torch.Tensor, bodies: torch.Tensor, constraints: TypeConstraints | None = None
    ) -> torch.Tensor:
        """Masked log-softmax (B, L, V) at every step given the body prefix (−inf on disallowed tokens)."""
        logits = self(triples, bodies)
        masks = self._teacher_masks(triples, bodies, constraints)
        dead = ~masks.any(-1, keepdim=True)  # prefix already impossible: every next token has probability 0
        lp = torch.log_softmax(logits.masked_fill(~masks & ~dead, float("-inf")), dim=-1)
        return lp.masked_fill(~masks, float("-inf"))

    def log_prob(
        self, triples: torch.Tensor, bodies: torch.Tensor, constraints: TypeConstraints | None = None
    ) -> torch.Tensor:
        """log T_θ(body | triple) (B,) = Σ_k masked log-softmax at the body's token k (−inf if not valid).

        Uses the current module mode; call ``eval()`` first to match ``sample_rules`` (which samples in eval mode).
        """
        lp = self.step_log_probs(triples, bodies, constraints).gather(-1, bodies.clamp(0, self.config.pad)[..., None])
        out = lp.squeeze(-1).sum(-1)
        return out.masked_fill(~check_bodies(bodies, self.config.num_relations), float("-inf"))

    def loss(
        self, triples: torch.Tensor, bodies: torch.Tensor, constraints: TypeConstraints | None = None
    ) -> torch.Tensor:
        """Eq. (6) L_Tθ: mean teacher-forced cross-entropy over the B×L body tokens (pads included, as LogiRE)."""
        logits = self(triples, bodies)
        if constraints is not None:
            logits = logits.masked_fill(~self._teacher_masks(triples, bodies, constraints), float("-inf"))
        return F.cross_entropy(logits.reshape(-1, self.config.vocab_size), bodies.reshape(-1))

    def _teacher_masks(
        self, triples: torch.Tensor, bodies: torch.Tensor, constraints: TypeConstraints | None
    ) -> torch.Tensor:
        c = self.config
        state = _Validity(triples, c.max_body_len, c.num_relations, constraints)
        masks = []
        for k in range(c.max_body_len):
            masks.append(state.mask())
            state.advance(bodies[:, k].clamp(0, c.pad))
        return torch.stack(masks, 1)


def _seed_from(generator: torch.Generator | None) -> int:
    if generator is None:
        return 0
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())


# --------------------------------------------------------------------------------------------------------------
# sampling (Eq. 5)
# --------------------------------------------------------------------------------------------------------------
@dataclass
class SampledRules:
    """Multinomial rule distribution Mu_θ(N, T_θ(·|t)) per triple (Eq. 5), padded to Jmax bodies.

    bodies (T, Jmax, L) int64 padded with stay; log_prior (T, Jmax) log T_θ(body|t) (−inf where masked);
    counts (T, Jmax) int64 multiplicities n_j (Σ_j n_j = N for every completable triple); mask (T, Jmax) bool.
    Within a triple, bodies are ordered by count (descending), then lexicographically.
    ``uncompletable``: indices of triples for which no type-consistent body exists (they get no bodies).
    """

    bodies: torch.Tensor
    log_prior: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor
    uncompletable: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))

    @property
    def num_triples(self) -> int:
        return self.bodies.shape[0]

    def per_triple(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """[(bodies (J_t, L), log_prior (J_t,), counts (J_t,))] for every triple t (J_t may be 0)."""
        out = []
        for t in range(self.num_triples):
            m = self.mask[t]
            out.append((self.bodies[t][m], self.log_prior[t][m], self.counts[t][m]))
        return out

    def to(self, device: torch.device | str) -> SampledRules:
        return SampledRules(*(getattr(self, f).to(device) for f in ("bodies", "log_prior", "counts", "mask", "uncompletable")))


def _gumbel(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Gumbel(0,1) noise drawn on the generator's device (so results do not depend on the model's device)."""
    u = torch.rand(shape, generator=generator, device=generator.device).clamp_(min=torch.finfo(torch.float32).tiny)
    return (-torch.log(-torch.log(u))).to(device)


def _prepare_triples(model: RuleGenerator, triples: torch.Tensor | Sequence[Sequence[int]]) -> torch.Tensor:
    device = next(model.parameters()).device
    t = torch.as_tensor(triples, dtype=torch.long, device=device)
    if t.numel() == 0:
        t = t.reshape(0, 3)
    model._check_triples(t)
    return t


def _finish(
    row_triple: torch.Tensor,
    bodies: torch.Tensor,
    logp: torch.Tensor,
    num_triples: int,
    num_samples: int,
    pad: int,
    uncompletable: torch.Tensor,
) -> SampledRules:
    """Reduce N samples per triple to unique bodies with counts and log-prior (vectorised)."""
    device = bodies.device
    length = bodies.shape[1]
    keep = ~torch.isin(row_triple, uncompletable)
    row_triple, bodies, logp = row_triple[keep], bodies[keep], logp[keep]
    key = torch.cat([row_triple[:, None], bodies], 1)
    if key.shape[0]:
        uniq, inv, cnt = torch.unique(key, dim=0, return_inverse=True, return_counts=True)  # sorted by (t, body)
    else:
        uniq, inv, cnt = key, torch.zeros(0, dtype=torch.long, device=device), torch.zeros(0, dtype=torch.long, device=device)
    u_logp = torch.zeros(uniq.shape[0], dtype=logp.dtype, device=device).scatter_(0, inv, logp)
    tri = uniq[:, 0]
    order = torch.sort(tri * (num_samples + 1) + (num_samples - cnt), stable=True).indices
    uniq, cnt, u_logp, tri = uniq[order], cnt[order], u_logp[order], tri[order]
    per = torch.bincount(tri, minlength=num_triples)
    jmax = int(per.max()) if per.numel() else 0
    start = torch.cumsum(per, 0) - per
    pos = torch.arange(tri.shape[0], device=device) - start[tri]
    out_b = torch.full((num_triples, jmax, length), pad, dtype=torch.long, device=device)
    out_lp = torch.full((num_triples, jmax), float("-inf"), dtype=logp.dtype, device=device)
    out_c = torch.zeros(num_triples, jmax, dtype=torch.long, device=device)
    out_m = torch.zeros(num_triples, jmax, dtype=torch.bool, device=device)
    out_b[tri, pos] = uniq[:, 1:]
    out_lp[tri, pos] = u_logp
    out_c[tri, pos] = cnt
    out_m[tri, pos] = True
    return SampledRules(out_b, out_lp, out_c, out_m, uncompletable.cpu())


def _report_uncompletable(triples: torch.Tensor, idx: torch.Tensor) -> None:
    if idx.numel():
        rows = triples[idx].tolist()
        warnings.warn(
            f"{len(rows)} triple(s) admit no type-consistent body of length <= L and get no bodies: "
            f"(relation, head type, tail type) = {rows[:10]}{' …' if len(rows) > 10 else ''}",
            stacklevel=3,
        )


@torch.no_grad()
def sample_rules(
    model: RuleGenerator,
    triples: torch.Tensor | Sequence[Sequence[int]],
    num_samples: int = 50,
    generator: torch.Generator | None = None,
    constraints: TypeConstraints | None = None,
) -> SampledRules:
    """Eq. (5): N ancestral samples per triple for ALL triples at once → unique bodies, log-prior, counts.

    One decoder position per step over the *distinct* (triple, prefix) rows only (all N samples of a triple share
    the empty prefix, most share short prefixes), with cross-attention keys/values computed once per triple and
    self-attention keys/values reused from the prefix row (``RuleGenerator.decode_step``).
    Tokens are drawn by Gumbel-max from the masked log-softmax with noise of shape (T, N, V) per step taken from
    ``generator`` (default: seed 0) → deterministic, and identical to ``sample_rules_reference``.
    The model is put in eval mode for sampling and its previous mode restored.
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    tri = _prepare_triples(model, triples)
    t_count, n, length, v = tri.shape[0], num_samples, c.max_body_len, c.vocab_size
    device = tri.device
    if t_count == 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return _finish(empty, empty.reshape(0, length), empty.float(), 0, n, c.pad, empty)
    was_training = model.training
    model.eval()
    try:
        cache = model.init_cache(model.encode(tri))
        row_triple = torch.arange(t_count, device=device).repeat_interleave(n)
        state = _Validity(tri[row_triple], length, c.num_relations, constraints)
        tokens = torch.zeros(t_count * n, 0, dtype=torch.long, device=device)
        logp = torch.zeros(t_count * n, device=device)
        uncompletable = torch.zeros(0, dtype=torch.long, device=device)
        prev_inv: torch.Tensor | None = None
        for step in range(length):
            allow = state.mask()
            if step == 0:
                dead = ~allow.any(1)
                uncompletable = torch.unique(row_triple[dead])
                allow[dead, c.pad] = True
            # distinct (triple, prefix) rows; each extends the cached row of its prefix without the last token
            key = torch.cat([row_triple[:, None], tokens], 1)
            uniq, inv = torch.unique(key, dim=0, return_inverse=True)
            parent = None
            if prev_inv is not None:
                parent = torch.empty(uniq.shape[0], dtype=torch.long, device=device).scatter_(0, inv, prev_inv)
            last = uniq[:, -1] if step > 0 else None
            logits_u, cache = model.decode_step(cache, parent, uniq[:, 0], last)
            logits = logits_u[inv]
            prev_inv = inv
            step_lp = torch.log_softmax(logits.float().masked_fill(~allow, float("-inf")), dim=-1)
            noise = _gumbel((t_count, n, v), generator, device).view(-1, v)
            choice = (step_lp + noise).argmax(-1)
            if not bool(allow.gather(1, choice[:, None]).all()):
                raise RuntimeError("sample_rules drew a masked token; this is a bug")
            logp = logp + step_lp.gather(1, choice[:, None]).squeeze(1)
            tokens = torch.cat([tokens, choice[:, None]], 1)
            state.advance(choice)
    finally:
        model.train(was_training)
    _report_uncompletable(tri, uncompletable)
    return _finish(row_triple, tokens, logp, t_count, n, c.pad, uncompletable)


# --------------------------------------------------------------------------------------------------------------
# slow reference sampler (tests, bench)
# --------------------------------------------------------------------------------------------------------------
def _py_allowed(
    head: int, tail: int, prefix: tuple[int, ...], length: int, r: int, table: list | None
) -> list[bool]:
    """Pure-Python allowed-next-token list for one (triple, prefix): independent of ``_Validity``.

    ``table`` = ``TypeConstraints.allowed.tolist()`` or None (well-formedness only).
    """
    pad, v = 2 * r, 2 * r + 1
    if pad in prefix:
        return [tok == pad for tok in range(v)]
    if table is None:
        return [tok != pad or len(prefix) > 0 for tok in range(v)]
    e = len(table[0])
    memo: dict[tuple[frozenset[int], int], bool] = {}

    def image(types: frozenset[int], tok: int) -> frozenset[int]:
        return frozenset(d for s in types for d in range(e) if table[tok][s][d])

    def completable(types: frozenset[int], steps: int) -> bool:
        """Some type in ``types`` reaches ``tail`` with at most ``steps`` real tokens."""
        key = (types, steps)
        if key not in memo:
            memo[key] = tail in types or (
                steps > 0 and any(completable(image(types, tok), steps - 1) for tok in range(pad) if image(types, tok))
            )
        return memo[key]

    types = frozenset([head])
    for tok in prefix:
        types = image(types, tok)
    remaining = length - 1 - len(prefix)
    out = []
    for tok in range(v):
        if tok == pad:
            out.append(len(prefix) > 0 and tail in types)
        else:
            nxt = image(types, tok)
            out.append(bool(nxt) and completable(nxt, remaining))
    return out


@torch.no_grad()
def sample_rules_reference(
    model: RuleGenerator,
    triples: torch.Tensor | Sequence[Sequence[int]],
    num_samples: int = 50,
    generator: torch.Generator | None = None,
    constraints: TypeConstraints | None = None,
) -> SampledRules:
    """Naive reference for ``sample_rules``: a Python loop per triple, per sample, per step (batch of one).

    Draws the same Gumbel noise tensors (T, N, V) per step from ``generator`` and checks validity with a
    pure-Python type-set search, so its output equals ``sample_rules`` (up to float rounding in near-ties).
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    tri = _prepare_triples(model, triples)
    t_count, n, length, v, device = tri.shape[0], num_samples, c.max_body_len, c.vocab_size, tri.device
    noise = [_gumbel((t_count, n, v), generator, device) for _ in range(length)]
    table = constraints.allowed.cpu().tolist() if constraints is not None else None
    was_training = model.training
    model.eval()
    bodies, logps, rows, dead = [], [], [], []
    allowed_memo: dict[tuple[int, tuple[int, ...]], list[bool]] = {}

    def allowed(ti: int, head: int, tail: int, prefix: tuple[int, ...]) -> list[bool]:
        if (ti, prefix) not in allowed_memo:
            allowed_memo[ti, prefix] = _py_allowed(head, tail, prefix, length, c.num_relations, table)
        return allowed_memo[ti, prefix]

    try:
        for ti in range(t_count):
            r, head, tail = (int(x) for x in tri[ti])
            memory = model.encode(tri[ti : ti + 1])
            if not any(allowed(ti, head, tail, ())):
                dead.append(ti)
            for si in range(n):
                prefix: list[int] = []
                lp = 0.0
                for step in range(length):
                    allow = torch.tensor(allowed(ti, head, tail, tuple(prefix)))
                    if not allow.any():
                        allow[c.pad] = True
                    logits = model.decode(memory, torch.tensor([prefix], dtype=torch.long, device=device))[0, -1]
                    step_lp = torch.log_softmax(logits.float().masked_fill(~allow.to(device), float("-inf")), -1)
                    tok = int((step_lp + noise[step][ti, si]).argmax())
                    lp += float(step_lp[tok])
                    prefix.append(tok)
                bodies.append(prefix)
                logps.append(lp)
                rows.append(ti)
    finally:
        model.train(was_training)
    unc = torch.tensor(dead, dtype=torch.long, device=device)
    _report_uncompletable(tri, unc)
    return _finish(
        torch.tensor(rows, dtype=torch.long, device=device).reshape(-1),
        torch.tensor(bodies, dtype=torch.long, device=device).reshape(-1, length),
        torch.tensor(logps, dtype=torch.float32, device=device),
        t_count,
        n,
        c.pad,
        unc,
    )


# --------------------------------------------------------------------------------------------------------------
# training (Eq. 6)
# --------------------------------------------------------------------------------------------------------------
Chains = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def chain_sampling_probs(triples: torch.Tensor, weights: torch.Tensor, uniform_mix: float = 0.1) -> torch.Tensor:
    """Per-chain sampling probability (M,) of LogiRE's MixRuleDataset.

    P(chain m) = 1/T · [(1−u)·w_m / Σ_{m'∈t} w_{m'} + u / J_t] with t the chain's triple, T the number of
    distinct triples, J_t its number of chains, u = ``uniform_mix`` (LogiRE: 0.1).
    """
    if not 0.0 <= uniform_mix <= 1.0:
        raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")
    w = weights.double()
    if (w < 0).any() or not torch.isfinite(w).all():
        raise ValueError("chain weights must be finite and >= 0")
    _, inv = torch.unique(triples, dim=0, return_inverse=True)
    t_count = int(inv.max()) + 1 if inv.numel() else 0
    total = torch.zeros(t_count, dtype=torch.float64, device=w.device).index_add_(0, inv, w)
    if (total <= 0).any():
        raise ValueError("every triple needs a positive total chain weight")
    j = torch.bincount(inv, minlength=t_count).double()
    return ((1 - uniform_mix) * w / total[inv] + uniform_mix / j[inv]) / t_count


def train_generator(
    model: RuleGenerator,
    pool_or_chains: RulePool | Chains,
    epochs: int = 50,
    batch_size: int = 32,
    lr: float = 1e-3,
    samples_per_epoch: int = 100_000,
    generator: torch.Generator | None = None,
    *,
    uniform_mix: float = 0.1,
    lr_gamma: float = 0.9,
    constraints: TypeConstraints | None = None,
) -> list[float]:
    """Eq. (6): fit T_θ to the rule pool by teacher-forced cross-entropy; returns the mean loss of each epoch.

    ``pool_or_chains``: a ``RulePool`` or (triples (M,3), bodies (M,L), weights (M,)). Each epoch draws
    ``samples_per_epoch`` chains with replacement from ``chain_sampling_probs`` (LogiRE MixRuleDataset) and runs
    Adam(lr) over batches; StepLR(step 1, ``lr_gamma``) per epoch (LogiRE: lr 1e-3, γ 0.9, batch 32, 100k/epoch).
    ``generator`` (default seed 0) drives both the chain sampling and dropout (via a forked, seeded RNG, so the
    global RNG state is unchanged). With ``constraints`` the loss uses the masked distribution; chains that
    violate it raise.
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    device = next(model.parameters()).device
    if hasattr(pool_or_chains, "chains"):
        triples, bodies, weights = pool_or_chains.chains()  # type: ignore[union-attr]
    else:
        triples, bodies, weights = pool_or_chains  # type: ignore[misc]
    triples = torch.as_tensor(triples, dtype=torch.long)
    bodies = torch.as_tensor(bodies, dtype=torch.long)
    weights = torch.as_tensor(weights)
    if triples.shape[0] == 0:
        raise ValueError("train_generator: the rule pool is empty")
    if bodies.shape != (triples.shape[0], c.max_body_len) or weights.shape != (triples.shape[0],):
        raise ValueError(
            f"chains must be triples (M,3), bodies (M,{c.max_body_len}), weights (M,); got "
            f"{tuple(triples.shape)}, {tuple(bodies.shape)}, {tuple(weights.shape)}"
        )
    bad = ~check_bodies(bodies, c.num_relations)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} malformed bodies in the training chains, e.g. {bodies[bad][0].tolist()}")
    model._check_triples(triples)
    if constraints is not None:
        with torch.no_grad():
            ok = _constraint_ok(triples, bodies, c, constraints)
        if not ok.all():
            raise ValueError(
                f"{int((~ok).sum())} training chains violate the type constraints, e.g. "
                f"triple {triples[~ok][0].tolist()} body {bodies[~ok][0].tolist()}"
            )
        constraints = constraints.to(device)
    probs = chain_sampling_probs(triples, weights, uniform_mix)
    triples, bodies = triples.to(device), bodies.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=lr_gamma)
    losses: list[float] = []
    was_training = model.training
    model.train()
    fork_devices = [device] if device.type == "cuda" else []
    try:
        with seeded_global_rng(_seed_from(generator), fork_devices):
            for _ in range(epochs):
                idx = _multinomial(probs, samples_per_epoch, generator).to(device)
                total, batches = 0.0, 0
                for start in range(0, samples_per_epoch, batch_size):
                    b = idx[start : start + batch_size]
                    loss = model.loss(triples[b], bodies[b], constraints)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach())
                    batches += 1
                losses.append(total / max(batches, 1))
                sched.step()
    finally:
        model.train(was_training)
    return losses


def _multinomial(probs: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n indices with replacement ∝ probs (works beyond torch.multinomial's 2^24 category limit)."""
    cdf = torch.cumsum(probs.double().cpu(), 0)
    u = torch.rand(n, generator=generator, device=generator.device, dtype=torch.float64).cpu() * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[0] - 1)


def _constraint_ok(triples: torch.Tensor, bodies: torch.Tensor, c: GeneratorConfig, tc: TypeConstraints) -> torch.Tensor:
    state = _Validity(triples, c.max_body_len, c.num_relations, tc)
    ok = torch.ones(triples.shape[0], dtype=torch.bool)
    for k in range(c.max_body_len):
        allow = state.mask()
        ok &= allow.gather(1, bodies[:, k : k + 1]).squeeze(1)
        state.advance(bodies[:, k])
    return ok


def num_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

