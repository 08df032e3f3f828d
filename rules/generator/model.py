"""The transformer T_θ (:class:`RuleGenerator`): encoder over the head triple, causal decoder over the body,
with an incremental key/value cache for sampling (paper App. A.6; LogiRE RuleGenerator)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kg.seeding import seeded_global_rng
from rules.generator.config import GeneratorConfig
from rules.generator.constraints import TypeConstraints
from rules.generator.masks import _Validity, check_bodies


class RuleGenerator(nn.Module):
    """T_θ(body | triple): encoder over (type_h, r, type_t), autoregressive decoder over ≤ L body tokens.

    ``generator`` seeds the parameter initialisation (default: seed 0; the global RNG is left untouched).
    """

    causal_mask: torch.Tensor  # registered buffer (L, L), True above the diagonal

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
