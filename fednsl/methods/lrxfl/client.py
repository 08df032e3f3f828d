"""LR-XFL client: train the LEN from the global weights, extract one rule per class, report them.

Reply of the train stage: the LEN weights; per class the rule's truth table ``rule_table`` (bool (K, 2^C)),
whether a rule exists ``rule_valid`` (K,), its local F1 ``rule_acc`` (K,) and connector ``rule_or`` (K,); and
``cell_counts`` (2^C, K), the number of local samples per (concept cell, given label): the pooled counts stand
in for the server-side validation set of the reference code (see strategy). Rules are only extracted when the
LEN's local accuracy exceeds ``logic_generation_threshold`` (as ``local_train``).
"""

from __future__ import annotations

import numpy as np
import torch

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.methods.lrxfl.explain import explain_class
from fednsl.methods.lrxfl.len import len_loss, len_outputs, make_len
from fednsl.methods.lrxfl.logic import ConceptSpace, cell_index
from fednsl.tasks.numeric.client import NumericClient, Predictor
from fednsl.tasks.numeric.data import NumericClientData


class LRXFLClient(NumericClient):
    def __init__(
        self,
        cid: str,
        data: NumericClientData,
        space: ConceptSpace,
        concept_temperature: float,
        n_classes: int,
        hidden: int,
        temperature: float,
    ):
        super().__init__(cid, data)
        self.space, self.k = space, n_classes
        self.concepts = torch.from_numpy(space.fuzzy(data.x_train, concept_temperature))
        self.bool_concepts = space.boolean(data.x_train)
        self.concept_temperature = concept_temperature
        self.model = make_len(space.size, n_classes, hidden, temperature, seed=0)

    @handles("train")
    def train(self, msg: Message) -> Message:
        set_weights(self.model, msg.arrays)
        opt = torch.optim.AdamW(self.model.parameters(), lr=msg.config_float("lr"))
        self.model.train()
        for _ in range(msg.config_int("local_epochs")):  # full-batch epochs
            loss = len_loss(self.model, self.concepts, self.y, msg.config_float("l1"))
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.model.eval()
        with torch.no_grad():
            acc = float((len_outputs(self.model, self.concepts).argmax(1) == self.y).float().mean())
        cells = self.space.cells
        table = np.zeros((self.k, cells), dtype=bool)
        valid = np.zeros(self.k, dtype=bool)
        rule_acc = np.zeros(self.k)
        rule_or = np.zeros(self.k, dtype=bool)
        if acc > msg.config_float("logic_generation_threshold"):
            for t in range(self.k):
                e = explain_class(
                    self.model, self.bool_concepts, self.data.y_train, t, msg.config_int("local_topk_explanations")
                )
                rule_or[t] = e.connector == "OR"
                if e.table is not None:
                    table[t], valid[t], rule_acc[t] = e.table, True, e.accuracy
        counts = np.zeros((cells, self.k))
        np.add.at(counts, (cell_index(self.bool_concepts), self.data.y_train), 1.0)
        return msg.reply(
            self.cid,
            arrays={
                **get_weights(self.model),
                "rule_table": table,
                "rule_valid": valid,
                "rule_acc": rule_acc,
                "rule_or": rule_or,
                "cell_counts": counts,
            },
            metrics={"num_examples": len(self.y), "train_loss": loss.item(), "model_acc": acc},
        )

    def deployed(self, msg: Message) -> Predictor:
        """The global LEN; class probabilities = softmax of its sigmoid outputs (what its CE loss sees)."""
        set_weights(self.model, msg.arrays)
        self.model.eval()
        space, tau = self.space, self.concept_temperature

        def predict(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                conc = torch.from_numpy(space.fuzzy(x.numpy(), tau))
                return torch.softmax(len_outputs(self.model, conc), dim=1)

        return predict
