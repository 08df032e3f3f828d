"""pFedMe client: R local rounds of (K inner Moreau steps on θ, one step on the local copy w_i).

The personalised model θ_i (the last θ̂ of the round) is what the client deploys; w_i goes to the server.
As in the reference code, θ starts each round from the received global w and carries over across the R local
rounds of that round.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.methods.pfedme.update import moreau_inner_step, moreau_outer_step
from fednsl.tasks.blobs import mlp
from fednsl.tasks.numeric.client import BatchStream, NumericClient, Predictor, softmax_predictor
from fednsl.tasks.numeric.data import NumericClientData


def pfedme_local_update(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    stream: BatchStream,
    *,
    rounds: int,
    K: int,
    lr: float,
    personal_lr: float,
    lamda: float,
    mu: float = 0.0,
    loss_fn=F.cross_entropy,
) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
    """Run Alg. 1 lines 4–7 from ``model``'s current weights (= the global w).

    Returns (w_i after R rounds, θ̂_i of the last round, mean inner loss). ``model`` ends holding θ̂_i.
    """
    params = list(model.parameters())
    w = [p.detach().clone() for p in params]
    total, count = 0.0, 0
    for _ in range(rounds):
        idx = stream.next()
        for _ in range(K):
            loss = loss_fn(model(x[idx]), y[idx])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                new = moreau_inner_step([p.detach() for p in params], grads, w, personal_lr, lamda, mu)
                for p, v in zip(params, new):
                    p.copy_(v)
            total += loss.item()
            count += 1
        with torch.no_grad():
            w = moreau_outer_step(w, [p.detach() for p in params], lr, lamda)
    theta = [p.detach().clone() for p in params]
    return w, theta, total / max(count, 1)


class PFedMeClient(NumericClient):
    def __init__(self, cid: str, data: NumericClientData, hidden: int, classes: int):
        super().__init__(cid, data)
        self.model = mlp(data.x_train.shape[1], hidden, classes, seed=0)
        self.personal: dict | None = None  # θ_i as named numpy arrays

    @handles("train")
    def train(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        stream = BatchStream(
            len(self.y), msg.config_int("batch_size"), torch.Generator().manual_seed(msg.config_int("seed"))
        )
        w, _, loss = pfedme_local_update(
            self.model,
            self.x,
            self.y,
            stream,
            rounds=msg.config_int("local_rounds"),
            K=msg.config_int("K"),
            lr=msg.config_float("lr"),
            personal_lr=msg.config_float("personal_lr"),
            lamda=msg.config_float("lamda"),
            mu=msg.config_float("mu"),
        )
        self.personal = get_weights(self.model)
        names = [n for n, _ in self.model.named_parameters()]
        arrays = {n: t.numpy().copy() for n, t in zip(names, w)}
        return msg.reply(self.cid, arrays=arrays, metrics={"num_examples": len(self.y), "train_loss": loss})

    def deployed(self, msg: Message) -> Predictor:
        set_weights(self.model, self.personal if self.personal is not None else msg.arrays)
        self.model.eval()
        return softmax_predictor(self.model)

    def state_dict(self) -> dict[str, Any]:
        return {"personal": self.personal}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.personal = state.get("personal")
