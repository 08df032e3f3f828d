"""FedNSL numeric client: a local MLP whose loss is Eq. (2) with the server's GMM as the prior.

Local objective (spec §8.15), on the client's own points with given labels y_n:

    L(w) = mean_n [ CE(p_w(·|x_n), y_n) + λ · KL(p_w(·|x_n) ‖ r(·|x_n)) ]

with r(k|x) the responsibilities of the server's 3-GMM (component k ↔ class k), floored at ``resp_floor`` and
renormalised. ``kl_direction="forward"`` uses KL(r ‖ p_w) instead. The MLP is never sent anywhere.

E-step (stage ``em``): the client sends soft sufficient statistics of its points under a posterior q:

* ``init`` (first EM stage, no GMM yet): q = p_w(k|x), the classifier outputs (App. A.6 "means initialised
  from classifier outputs");
* ``product`` (default): q ∝ r(k|x) · p_w(k|x), prior × local evidence, the numeric reading of Eq. (9)–(10);
* ``gmm``: q = r(k|x), plain federated EM (one round = one scikit-learn EM iteration on the pooled points);
* ``classifier``: q = p_w(k|x) in every round (spec §8.15 literally).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.methods.fednsl_gmm.config import em_stage_names
from fednsl.methods.fednsl_gmm.gmm import GMM, log_responsibilities, sufficient_stats
from fednsl.tasks.blobs import mlp
from fednsl.tasks.numeric.client import BatchStream, NumericClient, Predictor, softmax_predictor
from fednsl.tasks.numeric.data import NumericClientData


def prior_log_probs(x: np.ndarray, gmm: GMM, floor: float) -> torch.Tensor:
    """log r(k|x) (n, K) after flooring r at ``floor`` and renormalising (float32)."""
    log_r, _ = log_responsibilities(x, gmm)
    r = np.maximum(np.exp(log_r), floor)
    return torch.from_numpy(np.log(r / r.sum(1, keepdims=True)).astype(np.float32))


def kl_to_prior(logits: torch.Tensor, log_prior: torch.Tensor, direction: str = "reverse") -> torch.Tensor:
    """Per-point KL between the classifier p_w = softmax(logits) and the prior r (both (n, K)) → (n,)."""
    log_p = F.log_softmax(logits, dim=1)
    if direction == "reverse":
        return (log_p.exp() * (log_p - log_prior)).sum(1)
    return (log_prior.exp() * (log_prior - log_p)).sum(1)


class FedNSLGMMClient(NumericClient):
    def __init__(self, cid: str, data: NumericClientData, hidden: int, classes: int, seed: int, em_steps: int = 1):
        super().__init__(cid, data)
        self.model = mlp(data.x_train.shape[1], hidden, classes, seed=seed)
        self.em_stages = em_stage_names(em_steps)

    def handled_stages(self) -> tuple[str, ...]:
        return (*super().handled_stages(), *self.em_stages)

    def handle(self, message: Message) -> Message:
        if message.kind in self.em_stages:  # the round's EM steps, all served by em()
            return self.em(message)
        return super().handle(message)

    @handles("train")
    def train(self, msg: Message) -> Message:
        c = msg.config
        gmm = GMM.from_arrays(msg.arrays)
        lam = msg.config_float("kl_weight") if gmm is not None else 0.0
        log_prior = prior_log_probs(self.data.x_train, gmm, msg.config_float("resp_floor")) if gmm is not None else None
        kl_prior = log_prior if lam > 0 else None  # lam > 0 only with a GMM, hence a prior
        gen = torch.Generator().manual_seed(msg.config_int("seed"))
        opt = torch.optim.SGD(self.model.parameters(), lr=msg.config_float("lr"))
        stream = BatchStream(len(self.y), msg.config_int("batch_size"), gen)
        steps = msg.config_int("local_epochs") * -(-len(self.y) // stream.bs)
        tot_ce = tot_kl = 0.0
        self.model.train()
        for _ in range(steps):
            idx = stream.next()
            logits = self.model(self.x[idx])
            ce = F.cross_entropy(logits, self.y[idx])
            kl = (
                kl_to_prior(logits, kl_prior[idx], str(c["kl_direction"])).mean()
                if kl_prior is not None
                else torch.zeros(())
            )
            loss = ce + lam * kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot_ce += ce.item()
            tot_kl += kl.item()
        return msg.reply(
            self.cid, metrics={"num_examples": len(self.y), "train_loss": tot_ce / steps, "train_kl": tot_kl / steps}
        )

    def posterior(self, mode: str, gmm: GMM | None) -> tuple[np.ndarray, float | None]:
        """q (n, K) for the E-step, and the local log-likelihood Σ_n log p(x_n) under the GMM (if any)."""
        with torch.no_grad():
            p = torch.softmax(self.model(self.x), dim=1).double().numpy()
        if gmm is None or mode in ("init", "classifier"):
            ll = None if gmm is None else float(log_responsibilities(self.data.x_train, gmm)[1].sum())
            return p, ll
        log_r, ll_n = log_responsibilities(self.data.x_train, gmm)
        if mode == "gmm":
            return np.exp(log_r), float(ll_n.sum())
        log_q = log_r + np.log(np.maximum(p, 1e-300))
        log_q -= log_q.max(1, keepdims=True)
        q = np.exp(log_q)
        return q / q.sum(1, keepdims=True), float(ll_n.sum())

    def em(self, msg: Message) -> Message:
        q, ll = self.posterior(str(msg.config["estep"]), GMM.from_arrays(msg.arrays))
        n, s, ss = sufficient_stats(self.data.x_train, q)
        metrics: dict[str, float] = {"num_examples": len(self.y)}
        if ll is not None:
            metrics["loglik"] = ll
        return msg.reply(self.cid, arrays={"resp_sum": n, "resp_x": s, "resp_xx": ss}, metrics=metrics)

    def deployed(self, msg: Message) -> Predictor:
        self.model.eval()
        return softmax_predictor(self.model)

    def state_dict(self) -> dict[str, Any]:
        return {"model": get_weights(self.model)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        set_weights(self.model, state["model"])
