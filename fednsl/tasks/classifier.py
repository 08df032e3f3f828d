"""FedAvg client: E local epochs of minibatch SGD from the global weights."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.tasks.blobs import ClientData


class TorchClassifierClient(Client):
    """Holds a model and private data; returns weights + example count only."""

    def __init__(self, cid: str, data: ClientData, model: nn.Module):
        self.cid, self.data, self.model = cid, data, model
        self.loss_fn = nn.CrossEntropyLoss()

    @handles("train")
    def train(self, msg: Message) -> Message:
        return local_sgd(self.cid, self.model, self.loss_fn, self.data.x_train, self.data.y_train, msg)

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        self.model.eval()
        with torch.no_grad():
            x, y = torch.from_numpy(self.data.x_test), torch.from_numpy(self.data.y_test)
            logits = self.model(x)
            loss = float(self.loss_fn(logits, y))
            acc = float((logits.argmax(1) == y).float().mean())
        return msg.reply(self.cid, metrics={"num_examples": len(y), "loss": loss, "accuracy": acc})


def local_sgd(
    cid: str, model: nn.Module, loss_fn: nn.Module, x_train: np.ndarray, y_train: np.ndarray, msg: Message
) -> Message:
    """FedAvg's local update: from the sent weights, ``local_epochs`` epochs of minibatch SGD; the reply."""
    set_weights(model, msg.arrays)
    gen = torch.Generator().manual_seed(msg.config_int("seed"))
    opt = torch.optim.SGD(model.parameters(), lr=msg.config_float("lr"))
    x, y = torch.from_numpy(x_train), torch.from_numpy(y_train)
    bs = msg.config_int("batch_size")
    total, seen = 0.0, 0
    model.train()
    for _ in range(msg.config_int("local_epochs")):
        order = torch.randperm(len(y), generator=gen)
        for start in range(0, len(y), bs):
            idx = order[start : start + bs]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            seen += len(idx)
    return msg.reply(
        cid,
        arrays=get_weights(model),
        metrics={"num_examples": len(y), "train_loss": total / max(seen, 1)},
    )
