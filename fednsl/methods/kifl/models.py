"""Server models f(θ; ·) of §7.2 (flat input rows (n, d), logits (n, k)), initialised from an explicit seed.

* ``mlp``: two hidden ReLU layers (128-128 in FedMech.jl) for tabular data (Covtype and its stand-ins).
* ``lenet5``: LeNet-5 (LeCun et al.) for 28×28 images, logits out (FedMech.jl's ``LeNet5``, no final softmax).
* :func:`lowres_cnn`: FedMech.jl's ``LeNet5small`` used as the image P-KM on a max-pooled view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from kg.seeding import isolated_global_rng

__all__ = ["build_model", "lenet5", "lowres_cnn", "mlp", "seeded_init"]


def seeded_init(model: nn.Module, seed: int) -> nn.Module:
    """PyTorch's default Linear/Conv init (U(±1/√fan_in) for weights and biases) drawn from ``seed``."""
    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                fan_in = math.prod(module.weight.shape[1:])
                bound = 1.0 / math.sqrt(fan_in)
                module.weight.copy_(torch.empty_like(module.weight).uniform_(-bound, bound, generator=gen))
                if module.bias is not None:
                    module.bias.copy_(torch.empty_like(module.bias).uniform_(-bound, bound, generator=gen))
    return model


@isolated_global_rng
def mlp(features: int, hidden: Sequence[int], classes: int, seed: int) -> nn.Module:
    layers: list[nn.Module] = []
    width = features
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, classes))
    return seeded_init(nn.Sequential(*layers), seed)


@isolated_global_rng
def lenet5(image_shape: Sequence[int], classes: int, seed: int) -> nn.Module:
    """conv5(6) → pool2 → conv5(16) → pool2 → 120 → 84 → k on a (C,)H×W image given as a flat row."""
    c, h, w = (1, *image_shape) if len(image_shape) == 2 else tuple(image_shape)
    oh, ow = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    if oh < 1 or ow < 1:
        raise ValueError(f"LeNet-5 needs images of at least 12×12, got {h}×{w}")
    model = nn.Sequential(
        nn.Unflatten(1, (c, h, w)),
        nn.Conv2d(c, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * oh * ow, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, classes),
    )
    return seeded_init(model, seed)


@isolated_global_rng
def lowres_cnn(image_shape: Sequence[int], classes: int, seed: int) -> nn.Module:
    """conv5(6) → 120 → 84 → k on an already pooled (low-resolution) image row (FedMech.jl ``LeNet5small``)."""
    c, h, w = (1, *image_shape) if len(image_shape) == 2 else tuple(image_shape)
    if h < 5 or w < 5:
        raise ValueError(f"the low-resolution CNN needs at least 5×5 images, got {h}×{w}")
    model = nn.Sequential(
        nn.Unflatten(1, (c, h, w)),
        nn.Conv2d(c, 6, 5),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * (h - 4) * (w - 4), 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, classes),
    )
    return seeded_init(model, seed)


def build_model(
    name: str, features: int, classes: int, hidden: Sequence[int], image_shape: Sequence[int] | None, seed: int
) -> nn.Module:
    if name == "mlp":
        return mlp(features, hidden, classes, seed)
    if name == "lenet5":
        if image_shape is None:
            raise ValueError("model 'lenet5' needs image data (data.name=fashion_mnist)")
        return lenet5(image_shape, classes, seed)
    raise ValueError(f"unknown model {name!r}; available: mlp, lenet5")
