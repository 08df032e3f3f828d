"""pFedBayes client (Zhang et al. 2022, Alg. 1; reference code ``userpFedbayes.py``).

State: the personal posterior q_i = N(μ_i, σ_i²) (kept across rounds) and a local copy v = N(μ_v, σ_v²) of
the global distribution (overwritten by the server's each round). Per minibatch B (``local_epochs`` of them):

* ``personal_steps`` Adam steps on q_i for
  L_i(q_i) = −Σ_{(x,y)∈B} log p(y | x, w),  w = μ_i + σ_i ⊙ ε   +   (ζ / local_epochs) · KL(q_i ‖ v)   (v fixed)
* one Adam step on v for (ζ / local_epochs) · KL(q_i ‖ v)   (q_i fixed): v moves towards q_i.

v is sent back; the server averages (μ_v, ρ_v) over clients. The client deploys q_i (Monte-Carlo predictive).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from fednsl.common import bnn
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.tasks.numeric.client import BatchStream, NumericClient, Predictor
from fednsl.tasks.numeric.data import NumericClientData


def personal_loss(
    logits: torch.Tensor, y: torch.Tensor, mus, rhos, mus_v, rhos_v, zeta: float, n_batches: int
) -> torch.Tensor:
    """−Σ log softmax(logits)[y] + ζ/n_batches · KL(q_i ‖ v) with v detached (``combined_loss_personal``)."""
    nll = -F.log_softmax(logits, dim=1).gather(1, y[:, None]).sum()
    kl = bnn.gaussian_kl(
        mus, [bnn.sigma(r) for r in rhos], [m.detach() for m in mus_v], [bnn.sigma(r).detach() for r in rhos_v]
    )
    return nll + zeta / n_batches * kl


def global_copy_loss(mus, rhos, mus_v, rhos_v, zeta: float, n_batches: int) -> torch.Tensor:
    """ζ/n_batches · KL(q_i ‖ v) with q_i detached (``combined_loss_local``)."""
    return (
        zeta
        / n_batches
        * bnn.gaussian_kl(
            [m.detach() for m in mus], [bnn.sigma(r).detach() for r in rhos], mus_v, [bnn.sigma(r) for r in rhos_v]
        )
    )


class PFedBayesClient(NumericClient):
    def __init__(
        self, cid: str, data: NumericClientData, initial: Mapping[str, np.ndarray], personal_lr: float, lr: float
    ):
        super().__init__(cid, data)
        self.names = list(initial)

        def mk(prefix: str) -> list[torch.nn.Parameter]:
            return [torch.nn.Parameter(torch.from_numpy(np.array(initial[f"{prefix}.{n}"]))) for n in bnn.LAYERS]

        self.mus, self.rhos = mk("mu"), mk("rho")  # personal q_i
        self.mus_v, self.rhos_v = mk("mu"), mk("rho")  # local copy of the global distribution
        self.opt_personal = torch.optim.Adam(self.mus + self.rhos, lr=personal_lr)
        self.opt_global = torch.optim.Adam(self.mus_v + self.rhos_v, lr=lr)

    def _load_global(self, arrays: Mapping[str, np.ndarray]) -> None:
        with torch.no_grad():
            for i, n in enumerate(bnn.LAYERS):
                self.mus_v[i].copy_(torch.from_numpy(np.asarray(arrays[f"mu.{n}"])))
                self.rhos_v[i].copy_(torch.from_numpy(np.asarray(arrays[f"rho.{n}"])))

    @handles("train")
    def train(self, msg: Message) -> Message:
        self._load_global(msg.arrays)
        gen = torch.Generator().manual_seed(msg.config_int("seed"))
        stream = BatchStream(len(self.y), msg.config_int("batch_size"), gen)
        zeta, n_batches, eps = msg.config_float("zeta"), msg.config_int("local_epochs"), msg.config_float("eps_std")
        total = 0.0
        for _ in range(n_batches):
            idx = stream.next()
            x, y = self.x[idx], self.y[idx]
            for _ in range(msg.config_int("personal_steps")):
                w = bnn.sample(self.mus, self.rhos, eps, gen)
                loss = personal_loss(
                    bnn.forward(x, w), y, self.mus, self.rhos, self.mus_v, self.rhos_v, zeta, n_batches
                )
                self.opt_personal.zero_grad()
                loss.backward()
                self.opt_personal.step()
            total += loss.item() / len(idx)
            loss_v = global_copy_loss(self.mus, self.rhos, self.mus_v, self.rhos_v, zeta, n_batches)
            self.opt_global.zero_grad()
            loss_v.backward()
            self.opt_global.step()
        arrays = {f"mu.{n}": m.detach().numpy().copy() for n, m in zip(bnn.LAYERS, self.mus_v)}
        arrays.update({f"rho.{n}": r.detach().numpy().copy() for n, r in zip(bnn.LAYERS, self.rhos_v)})
        return msg.reply(
            self.cid, arrays=arrays, metrics={"num_examples": len(self.y), "train_loss": total / n_batches}
        )

    def deployed(self, msg: Message) -> Predictor:
        """Predictive mean of the personal posterior over ``eval_samples`` seeded weight samples."""
        samples, eps = msg.config_int("eval_samples"), msg.config_float("eps_std")
        seed = msg.config_int("seed")

        def predict(x: torch.Tensor) -> torch.Tensor:
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                return torch.stack(
                    [
                        torch.softmax(bnn.forward(x, bnn.sample(self.mus, self.rhos, eps, gen)), 1)
                        for _ in range(samples)
                    ]
                ).mean(0)

        return predict

    def state_dict(self) -> dict[str, Any]:
        return {
            "mus": [m.detach().clone() for m in self.mus],
            "rhos": [r.detach().clone() for r in self.rhos],
            "mus_v": [m.detach().clone() for m in self.mus_v],
            "rhos_v": [r.detach().clone() for r in self.rhos_v],
            "opt_personal": self.opt_personal.state_dict(),
            "opt_global": self.opt_global.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with torch.no_grad():
            for key in ("mus", "rhos", "mus_v", "rhos_v"):
                for p, v in zip(getattr(self, key), state[key]):
                    p.copy_(torch.as_tensor(v))
        self.opt_personal.load_state_dict(state["opt_personal"])
        self.opt_global.load_state_dict(state["opt_global"])
