"""Forecasters ``x (B, L) → ŷ (B, H)`` split into a shared encoder and a private head.

FedSTL (An et al. 2024, §Logic-Enabled FL; spec §2.4) personalises by sharing part of the network
ϕ_i with the cluster and keeping the rest h_i on the client.  Each model names its shared modules
(``Forecaster.shared``, module-name prefixes; configurable, spec §6.14); everything else is the head.

* :class:`RecurrentForecaster` (``rnn`` / ``gru`` / ``lstm``), after the FedSTL / LogiCP code's FHWA
  variant: ``layers`` stacked cells of ``hidden`` units run over ``H`` steps; the input of step ``t``
  is the ``W = L − H`` hours ``x[t+1 : t+1+W]``, i.e. the ``W`` hours that end exactly one day
  (``H`` hours) before the target hour ``L + t``.  A linear head maps each hidden state to ``ŷ_t``.
  Shared = the recurrent cells (``rnn``), head = ``head`` (paper: "recurrent cells" shared, dense head
  private).
* :class:`TransformerForecaster`: encoder–decoder transformer (code: 2 + 2 layers, 2 heads); the
  encoder reads all ``L`` inputs, the decoder the last ``H`` inputs under a causal mask, and
  ``linear_mapping`` gives one value per decoder step.  Shared (as in both papers' code) =
  ``encoder_input_layer``, ``decoder_input_layer``, ``linear_mapping``; head = the encoder / decoder
  blocks.  Fixed sinusoidal positions (no parameters).  The code used d_model 120, FF 200,
  dropout 0.2; our defaults are smaller (d_model 32, FF 64, dropout 0) to fit 2 CPU cores — set them
  in ``ModelConfig``.  ``linear_mapping`` reads the decoder output divided by √d_model: the last
  (post-)LayerNorm emits features of unit variance, a vector of squared norm d_model at every step, so
  without the factor the MSE's curvature in the ``linear_mapping`` weights is ≈ 2·d_model (64 at the
  default width, against a few units for the recurrent heads' tanh states) and the configs' SGD
  (lr 0.1, momentum 0.9) overshoots from the first step and diverges to NaN within a few epochs.  With
  it that curvature is ≈ 2 whatever the width, and the transformer trains under the same SGD settings
  as the recurrent models.  The factor changes the parameterisation, not the function class.

Initialisation draws from an explicit ``torch.Generator`` (:func:`reset_parameters`, PyTorch's default
distributions); the constructors' own default draws happen inside a forked RNG, so building a model
leaves the global RNG as it was.  Dropout > 0 samples from the
global RNG: :func:`fednsl.tasks.timeseries.training.sgd_epochs` then forks and seeds it per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from kg.seeding import seeded_global_rng

MODEL_NAMES = ("rnn", "gru", "lstm", "transformer")


@dataclass
class ModelConfig:
    """``method_kwargs.model`` of the time-series methods."""

    name: str = "rnn"  # rnn | gru | lstm | transformer
    hidden: int = 16  # recurrent: hidden units per layer (code: 16)
    layers: int = 2  # recurrent: stacked cells (code: 2)
    d_model: int = 32  # transformer width (code: 120)
    nhead: int = 2  # transformer heads (code: 2)
    enc_layers: int = 2
    dec_layers: int = 2
    ff: int = 64  # transformer feed-forward width (code: 200)
    dropout: float = 0.0  # (code: 0.2 transformer)
    shared: list[str] | None = None  # module-name prefixes of the shared part (None: model default)

    def __post_init__(self) -> None:
        if self.name not in MODEL_NAMES:
            raise ValueError(f"model.name must be one of {list(MODEL_NAMES)}, got {self.name!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


class Forecaster(nn.Module):
    """Base: ``forward(x (B, L)) → (B, H)``; ``shared_keys()`` / ``head_keys()`` split the state dict."""

    default_shared: tuple[str, ...] = ()

    def __init__(self, input_len: int, horizon: int) -> None:
        super().__init__()
        self.input_len, self.horizon = int(input_len), int(horizon)
        self.shared: tuple[str, ...] = ()

    def _set_shared(self, shared: Sequence[str] | None) -> None:
        prefixes = tuple(shared) if shared is not None else self.default_shared
        keys = list(self.state_dict())
        for p in prefixes:
            if not any(_matches(k, p) for k in keys):
                raise ValueError(
                    f"{type(self).__name__}: shared prefix {p!r} matches no parameter; "
                    f"modules: {sorted({k.split('.')[0] for k in keys})}"
                )
        self.shared = prefixes

    def shared_keys(self) -> list[str]:
        """State-dict keys of the shared encoder ϕ (in state-dict order)."""
        return [k for k in self.state_dict() if any(_matches(k, p) for p in self.shared)]

    def head_keys(self) -> list[str]:
        """State-dict keys of the private head h."""
        shared = set(self.shared_keys())
        return [k for k in self.state_dict() if k not in shared]

    def shared_parameters(self) -> list[nn.Parameter]:
        names = set(self.shared_keys())
        return [p for n, p in self.named_parameters() if n in names]

    def head_parameters(self) -> list[nn.Parameter]:
        names = set(self.head_keys())
        return [p for n, p in self.named_parameters() if n in names]


def _matches(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


class RecurrentForecaster(Forecaster):
    """RNN / GRU / LSTM with the code's sliding "one day before" inputs (module docstring)."""

    default_shared = ("rnn",)
    CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}

    def __init__(
        self,
        cell: str,
        input_len: int,
        horizon: int,
        hidden: int = 16,
        layers: int = 2,
        dropout: float = 0.0,
        shared: Sequence[str] | None = None,
    ) -> None:
        super().__init__(input_len, horizon)
        if cell not in self.CELLS:
            raise ValueError(f"cell must be one of {list(self.CELLS)}, got {cell!r}")
        self.window = input_len - horizon
        if self.window < 1:
            raise ValueError(f"recurrent forecaster needs input_len > horizon, got {input_len} <= {horizon}")
        self.cell = cell
        self.rnn = self.CELLS[cell](
            self.window, hidden, num_layers=layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.head = nn.Linear(hidden, 1)
        self._set_shared(shared)

    def step_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` → ``(B, H, W)``: step ``t`` sees ``x[t+1 : t+1+W]``."""
        return x.unfold(1, self.window, 1)[:, 1:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.step_inputs(x))
        return self.head(h).squeeze(-1)


def sinusoid_positions(length: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. (2017) positional encoding, ``(length, d_model)``."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return pe


class TransformerForecaster(Forecaster):
    """Encoder–decoder transformer; decoder input = the last ``H`` inputs (causal mask)."""

    positions: torch.Tensor  # registered buffers
    tgt_mask: torch.Tensor

    default_shared = ("encoder_input_layer", "decoder_input_layer", "linear_mapping")

    def __init__(
        self,
        input_len: int,
        horizon: int,
        d_model: int = 32,
        nhead: int = 2,
        enc_layers: int = 2,
        dec_layers: int = 2,
        ff: int = 64,
        dropout: float = 0.0,
        shared: Sequence[str] | None = None,
    ) -> None:
        super().__init__(input_len, horizon)
        if horizon > input_len:
            raise ValueError(f"transformer forecaster needs horizon <= input_len, got {horizon} > {input_len}")
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        self.encoder_input_layer = nn.Linear(1, d_model)
        self.decoder_input_layer = nn.Linear(1, d_model)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d_model, nhead, ff, dropout, batch_first=True),
            enc_layers,
            enable_nested_tensor=False,
        )
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(d_model, nhead, ff, dropout, batch_first=True), dec_layers
        )
        self.linear_mapping = nn.Linear(d_model, 1)
        self.readout_scale = 1.0 / math.sqrt(d_model)  # unit-norm input to linear_mapping (module docstring)
        self.register_buffer("positions", sinusoid_positions(input_len, d_model), persistent=False)
        mask = torch.triu(torch.full((horizon, horizon), float("-inf")), diagonal=1)
        self.register_buffer("tgt_mask", mask, persistent=False)
        self._set_shared(shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L, H = self.input_len, self.horizon
        src = self.encoder_input_layer(x[..., None]) + self.positions
        tgt = self.decoder_input_layer(x[:, L - H :, None]) + self.positions[L - H :]
        memory = self.encoder(src)
        out = self.decoder(tgt, memory, tgt_mask=self.tgt_mask)
        return self.linear_mapping(out * self.readout_scale).squeeze(-1)


# --- construction / initialisation ---------------------------------------------------------------
@torch.no_grad()
def reset_parameters(model: nn.Module, gen: torch.Generator) -> None:
    """Re-draw every parameter from ``gen`` with PyTorch's default distributions: RNN/GRU/LSTM
    ``U(±1/√hidden)``; Linear weight and bias ``U(±1/√fan_in)``; attention in-projection
    Xavier-uniform with zero biases; LayerNorm (1, 0)."""
    done: set[int] = set()

    def uni(p: torch.Tensor, bound: float) -> None:
        p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=gen))
        done.add(id(p))

    for m in model.modules():
        if isinstance(m, nn.RNNBase):
            for p in m.parameters():
                uni(p, 1.0 / math.sqrt(m.hidden_size))
        elif isinstance(m, nn.MultiheadAttention):
            w = m.in_proj_weight
            uni(w, math.sqrt(6.0 / (w.shape[0] // 3 + w.shape[1])))  # xavier on each q/k/v block
            for b in (m.in_proj_bias, m.out_proj.bias):
                if b is not None:
                    b.zero_()
                    done.add(id(b))
        elif isinstance(m, nn.Linear):
            bound = 1.0 / math.sqrt(m.in_features)
            if id(m.weight) not in done:
                uni(m.weight, bound)
            if m.bias is not None and id(m.bias) not in done:
                uni(m.bias, bound)
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.fill_(0.0)
            done.update({id(m.weight), id(m.bias)})
    left = [n for n, p in model.named_parameters() if id(p) not in done]
    if left:
        raise ValueError(f"reset_parameters: no rule for parameters {left}")


def build_forecaster(cfg: ModelConfig | Mapping[str, Any], input_len: int, horizon: int, seed: int) -> Forecaster:
    """A forecaster from ``cfg``, initialised from ``torch.Generator().manual_seed(seed)``."""
    if not isinstance(cfg, ModelConfig):
        from fednsl.registry import build_kwargs

        cfg = build_kwargs(ModelConfig, cfg, "method_kwargs.model")
    with seeded_global_rng(None):  # torch's constructors draw defaults: keep the global RNG as it was
        if cfg.name == "transformer":
            model: Forecaster = TransformerForecaster(
                input_len,
                horizon,
                cfg.d_model,
                cfg.nhead,
                cfg.enc_layers,
                cfg.dec_layers,
                cfg.ff,
                cfg.dropout,
                cfg.shared,
            )
        else:
            model = RecurrentForecaster(cfg.name, input_len, horizon, cfg.hidden, cfg.layers, cfg.dropout, cfg.shared)
    reset_parameters(model, torch.Generator().manual_seed(int(seed)))
    return model


__all__ = [
    "MODEL_NAMES",
    "Forecaster",
    "ModelConfig",
    "RecurrentForecaster",
    "TransformerForecaster",
    "build_forecaster",
    "reset_parameters",
    "sinusoid_positions",
]
