"""The shared rule-learning server (:class:`fednsl.tasks.rule_learning.RuleLearningStrategy`) under a toy rule
learner: the round-1 pool, the instance-weighted posterior mean (against a hand computation), the pool update,
owners and stray entries, one learner per client, checkpoints."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Metrics, Stage
from fednsl.tasks.rule_learning import GLOBAL, GeneratorOptions, Learner, Proposal, RuleLearningStrategy, Stats

R = 2
SMALL = {"d_model": 16, "nhead": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "dim_feedforward": 16,
         "pretrain_epochs": 1, "epochs": 1, "samples_per_epoch": 64, "batch_size": 16, "type_constraints": False}


@dataclass
class Options:
    max_body_len: int = 2
    num_samples: int = 8
    pool_mode: str = "momentum"
    pool_ratio: float = 0.5
    top_k: int = 1
    num_threads: int = 1
    generator: dict[str, Any] = field(default_factory=lambda: dict(SMALL))

    @property
    def gen(self) -> GeneratorOptions:
        return GeneratorOptions.build(self.generator, "generator")

    @property
    def pool_samples(self) -> int:
        return self.num_samples


class Toy(RuleLearningStrategy):
    """Statistics: {relation: body} one-hot rows; proposal: the pool's bodies of each head, sorted."""

    method_name = "toy"

    def stats_schema(self) -> Schema:
        return Schema(arrays=(ArraySpec("heads", "ids", "int", ("K",)), ArraySpec("bodies", "ids", "int", ("K", 2))))

    def read_stats(self, learner: Learner, rnd: int, replies: Mapping[str, Message], metrics: Metrics) -> list[Stats]:
        out: list[Stats] = []
        for msg in replies.values():
            d: dict[tuple[int, int, int], dict[tuple[int, ...], float]] = {}
            for r, body in zip(msg.arrays["heads"].tolist(), msg.arrays["bodies"].tolist()):
                d.setdefault((r, 0, 0), {})[tuple(b for b in body if b != 2 * R)] = 1.0
            out.append((d, {k: 1.0 for k in d}))
        return out

    def propose(self, learner: Learner, rnd: int) -> Proposal:
        keys = learner.pool.triples
        bodies = [sorted(learner.pool.distribution(k)) for k in keys]
        return Proposal.from_bodies(keys, bodies, [[1] * len(b) for b in bodies], R, 2)

    def train_config(self, rnd: int) -> dict[str, Any]:
        return {}

    def train_schema(self) -> Schema:
        return Schema(arrays=(ArraySpec("posterior", "distribution", "float", ("T", "J"), mask="mask"),
                              ArraySpec("mask", "mask", "bool", ("T", "J")),
                              ArraySpec("instances", "counts", "int", ("T",))))

    def evaluate_stage(self) -> Stage:
        return Stage("evaluate", lambda rnd, c: Message("evaluate", rnd), lambda rnd, r, f: {}, reply=Schema())


def stats(*rows: tuple[int, tuple[int, ...]]) -> Message:
    heads = np.array([r for r, _ in rows], dtype=np.int64)
    bodies = np.full((len(rows), 2), 2 * R, dtype=np.int64)
    for k, (_, b) in enumerate(rows):
        bodies[k, : len(b)] = b
    return Message("train.stats", 1, arrays={"heads": heads, "bodies": bodies})


def reply(post: list[list[float]], mask: list[list[bool]], n: list[int]) -> Message:
    return Message("train", 1, arrays={"posterior": np.array(post), "mask": np.array(mask),
                                       "instances": np.array(n, dtype=np.int64)})


def started(local_only: bool = False) -> Toy:
    s = Toy(Options(), ["r0", "r1"], (), ["a", "b"], seed=3, local_only=local_only)
    s.aggregate_train_stats(1, {"a": stats((0, (1,)), (0, (2,)), (1, (0,))), "b": stats((0, (1,)), (1, (3, 0)))}, {})
    return s


def test_round_one_pools_every_clients_bodies_instance_weighted() -> None:
    s = started()
    pool = s.learners[GLOBAL].pool.distributions()
    assert pool[(0, 0, 0)] == pytest.approx({(1,): 0.75, (2,): 0.25})  # a: ½ ½, b: 1 → mean over 2 clients
    assert pool[(1, 0, 0)] == pytest.approx({(0,): 0.5, (3, 0): 0.5})


def test_update_is_the_instance_weighted_mean_mixed_into_the_pool() -> None:
    s = started()
    p = s.configure_train(1, ["a", "b"])["a"]
    assert Proposal.from_arrays(p.arrays).keys() == [(0, 0, 0), (1, 0, 0)]
    before = s.learners[GLOBAL].pool.distributions()
    qa = [[0.2, 0.8], [0.0, 0.0]]
    m = s.aggregate_train(1, {"a": reply(qa, [[True, True], [False, False]], [1, 0]),
                              "b": reply([[0.3, 0.3], [0.0, 0.0]], [[True, True], [False, False]], [3, 0])}, {})
    # b's row is renormalised over the bodies sent (0.3, 0.3 → ½, ½); weights 1 and 3
    mean = (1 * np.array(qa[0]) + 3 * np.array([0.5, 0.5])) / 4
    assert m["heads_updated"] == 1 and m["heads_without_owner"] == 1
    assert s.learners[GLOBAL].store.triples[(0, 0, 0)].global_posterior() == pytest.approx(mean)
    after = s.learners[GLOBAL].pool.distributions()
    for j, b in enumerate([(1,), (2,)]):
        assert after[(0, 0, 0)][b] == pytest.approx(0.5 * before[(0, 0, 0)][b] + 0.5 * mean[j])
    assert after[(1, 0, 0)] == pytest.approx(before[(1, 0, 0)])  # no owner: unchanged
    # the distance of the aggregated posterior from the prior sent (softmax of the log prior over the mask),
    # over the heads some client answered for (head 1 has no owner)
    sent = Proposal.from_arrays(p.arrays)
    lp = np.where(sent.mask[0].numpy(), sent.log_prior[0].numpy(), -np.inf)
    prior = np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()
    tv = 0.5 * np.abs(mean - prior).sum()
    assert tv > 0.01
    assert m["posterior_prior_tv"] == pytest.approx(tv) and m["posterior_prior_tv_max"] == pytest.approx(tv)


def test_stray_entries_are_counted_and_ignored_and_a_wrong_shape_names_the_client() -> None:
    s = started()
    s.configure_train(1, ["a", "b"])
    p = s.learners[GLOBAL].proposal
    assert p is not None
    mask = p.mask.clone()
    mask[0, 1] = False  # the server sends head 0 two bodies; pretend it sent one
    s.learners[GLOBAL].proposal = Proposal(p.heads, p.bodies, p.log_prior, p.counts, mask)
    m = s.aggregate_train(1, {"a": reply([[0.5, 0.5], [0.5, 0.5]], [[True, True], [True, True]], [1, 1])}, {})
    assert m["stray_entries"] == 1
    assert s.learners[GLOBAL].store.triples[(0, 0, 0)].global_posterior() == pytest.approx([1.0])
    with pytest.raises(ValueError, match="client a"):
        s.aggregate_train(1, {"a": reply([[1.0]], [[True]], [1])}, {})


def test_local_only_keeps_one_learner_per_client_with_its_own_pool_and_seeds() -> None:
    s = started(local_only=True)
    assert sorted(s.learners) == ["a", "b"] and s.shared is None
    assert s.learners["a"].pool.distributions()[(0, 0, 0)] == pytest.approx({(1,): 0.5, (2,): 0.5})
    assert s.learners["b"].pool.distributions()[(0, 0, 0)] == pytest.approx({(1,): 1.0})
    assert s.learners["a"].purpose("sample") == "sample:a"
    msgs = s.configure_train(1, ["a", "b"])
    assert msgs["a"].arrays["bodies"].shape != msgs["b"].arrays["bodies"].shape or not np.array_equal(
        msgs["a"].arrays["bodies"], msgs["b"].arrays["bodies"])


def test_a_checkpoint_restores_pools_proposals_and_the_generator() -> None:
    s = started()
    s.configure_train(1, ["a", "b"])
    s.aggregate_train(1, {"a": reply([[0.2, 0.8], [0.5, 0.5]], [[True, True], [True, True]], [2, 2])}, {})
    again = Toy(Options(), ["r0", "r1"], (), ["a", "b"], seed=3)
    again.load_state_dict(copy.deepcopy(s.state_dict()))
    assert again.initialised and again.learners[GLOBAL].pool.distributions() == s.learners[GLOBAL].pool.distributions()
    a, b = s.sample(s.learners[GLOBAL], 2), again.sample(again.learners[GLOBAL], 2)
    assert torch.equal(a.bodies, b.bodies) and torch.equal(a.log_prior, b.log_prior)


def test_no_statistics_at_all_is_one_clear_error() -> None:
    s = Toy(Options(), ["r0", "r1"], (), ["a"], seed=0)
    with pytest.raises(RuntimeError, match="no client sent any rule.*toy cannot build its rule pool"):
        s.aggregate_train_stats(1, {"a": stats()}, {})
