"""Per-FedAvg client: τ local MAML steps from the global model; deploys the global model after one α-step.

One local step (Fallah et al. 2020, Alg. 1 lines 6–8), batches D, D', D'' drawn independently:

    w̃ = w − α ∇f(w; D)
    FO:  w ← w − β ∇f(w̃; D')
    HF:  w ← w − β (I − α ∇²f(w; D'')) ∇f(w̃; D')

The personalised model used for evaluation is one gradient step of size α on a local batch from the
received global model (the paper's definition of the personalised model).
"""

from __future__ import annotations

from typing import Callable, Sequence, cast

import torch
import torch.nn.functional as F
from torch import nn

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.tasks.blobs import mlp
from fednsl.tasks.numeric.client import BatchStream, NumericClient, Predictor, softmax_predictor
from fednsl.tasks.numeric.data import NumericClientData

Batch = tuple[torch.Tensor, torch.Tensor]


def maml_step(
    model: nn.Module,
    d: Batch,
    d_prime: Batch,
    d_second: Batch | None,
    alpha: float,
    beta: float,
    loss_fn: Callable = F.cross_entropy,
) -> float:
    """One Per-FedAvg local step on ``model`` in place (FO if ``d_second`` is None, HF otherwise)."""
    params = list(model.parameters())
    w = [p.detach().clone() for p in params]
    loss = loss_fn(model(d[0]), d[1])
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub_(alpha * g)  # w̃
    g_tilde = torch.autograd.grad(loss_fn(model(d_prime[0]), d_prime[1]), params)
    with torch.no_grad():
        for p, wi in zip(params, w):
            p.copy_(wi)  # back to w
    if d_second is not None:
        hvp = hessian_vector_product(model, d_second, g_tilde, loss_fn)
        direction: Sequence[torch.Tensor] = [g - alpha * h for g, h in zip(g_tilde, hvp)]
    else:
        direction = g_tilde
    with torch.no_grad():
        for p, g in zip(params, direction):
            p.sub_(beta * g)
    return loss.item()


def hessian_vector_product(
    model: nn.Module, batch: Batch, v: Sequence[torch.Tensor], loss_fn: Callable = F.cross_entropy
) -> list[torch.Tensor]:
    """∇²f(w; batch) · v by double back-propagation."""
    params = list(model.parameters())
    grads = torch.autograd.grad(loss_fn(model(batch[0]), batch[1]), params, create_graph=True)
    # a sum of one or more 0-d tensors is a tensor (``sum`` types its start value 0 in)
    dot = cast(torch.Tensor, sum((g * vi.detach()).sum() for g, vi in zip(grads, v)))
    return [h.detach() for h in torch.autograd.grad(dot, params)]


class PerFedAvgClient(NumericClient):
    def __init__(self, cid: str, data: NumericClientData, hidden: int, classes: int):
        super().__init__(cid, data)
        self.model = mlp(data.x_train.shape[1], hidden, classes, seed=0)

    def _batch(self, stream: BatchStream) -> Batch:
        idx = stream.next()
        return self.x[idx], self.y[idx]

    @handles("train")
    def train(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        stream = BatchStream(
            len(self.y), msg.config_int("batch_size"), torch.Generator().manual_seed(msg.config_int("seed"))
        )
        hf = msg.config["variant"] == "hf"
        losses = []
        for _ in range(msg.config_int("local_steps")):
            d, d1 = self._batch(stream), self._batch(stream)
            d2 = self._batch(stream) if hf else None
            losses.append(maml_step(self.model, d, d1, d2, msg.config_float("alpha"), msg.config_float("beta")))
        return msg.reply(
            self.cid,
            arrays=get_weights(self.model),
            metrics={"num_examples": len(self.y), "train_loss": sum(losses) / len(losses)},
        )

    def deployed(self, msg: Message) -> Predictor:
        """Global weights + one step of size α on a seeded local batch."""
        set_weights(self.model, msg.arrays)
        stream = BatchStream(
            len(self.y), msg.config_int("batch_size"), torch.Generator().manual_seed(msg.config_int("seed"))
        )
        x, y = self._batch(stream)
        params = list(self.model.parameters())
        grads = torch.autograd.grad(F.cross_entropy(self.model(x), y), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(msg.config_float("alpha") * g)
        self.model.eval()
        return softmax_predictor(self.model)
