"""The one proposal type (:class:`fednsl.tasks.rule_learning.Proposal`): codec, schema, padding, prior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fednsl.federation.records import InvalidMessageError, Message, validate
from fednsl.tasks.rule_learning import PROPOSAL_SCHEMA, Proposal, pad_bodies, strip

R = 3  # pad token 6


def example() -> Proposal:
    mask = torch.tensor([[True, False], [True, True]])
    return Proposal(
        torch.tensor([[0, 1, 2], [1, 0, 0]]),
        torch.tensor([[[3, 4], [6, 6]], [[1, 6], [2, 0]]]),
        torch.tensor([[-0.5, -3.0], [-1.0, -0.2]], dtype=torch.float64),
        torch.tensor([[4, 0], [2, 3]]),
        mask,
    )


def test_arrays_round_trip_and_zero_the_masked_prior() -> None:
    p = example()
    arrays = p.to_arrays()
    assert arrays["log_prior"].dtype == np.float64 and arrays["log_prior"][0, 1] == 0.0
    back = Proposal.from_arrays(arrays)
    assert back.same_as(p) and torch.equal(back.log_prior, torch.where(p.mask, p.log_prior, 0.0))
    with pytest.raises(ValueError, match="counts"):
        Proposal.from_arrays({k: v for k, v in arrays.items() if k != "counts"})


def test_the_schema_accepts_the_codec_and_rejects_a_wrong_shape() -> None:
    arrays = example().to_arrays()
    validate(Message("train", 1, arrays=arrays, config={"anything": 1}), PROPOSAL_SCHEMA)
    bad = {**arrays, "log_prior": arrays["log_prior"][:, :1]}
    with pytest.raises(InvalidMessageError):
        validate(Message("train", 1, arrays=bad), PROPOSAL_SCHEMA)


def test_bodies_heads_and_the_renormalised_prior() -> None:
    p = example()
    assert p.num_heads == 2 and p.num_bodies == 2 and p.relations == [0, 1]
    assert p.keys() == [(0, 1, 2), (1, 0, 0)]
    assert p.bodies_of(0, R) == [(3, 4)] and p.bodies_of(1, R) == [(1,), (2, 0)]
    prior = p.prior("renormalised")
    assert prior[0].tolist() == [1.0, 0.0]
    e = np.exp([-1.0, -0.2])
    assert prior[1].numpy() == pytest.approx(e / e.sum())
    assert p.prior("counts")[1].tolist() == pytest.approx([0.4, 0.6])


def test_from_bodies_pads_rows_and_counts() -> None:
    p = Proposal.from_bodies([(0, 0, 0), (2, 0, 0)], [[(1, 2)], [(3,), (4, 5, 0)]], [[7], [1, 2]], R, 3)
    assert p.bodies.shape == (2, 2, 3) and p.mask.tolist() == [[True, False], [True, True]]
    assert p.bodies_of(1, R) == [(3,), (4, 5, 0)] and p.counts.tolist() == [[7, 0], [1, 2]]
    assert torch.equal(p.log_prior, torch.zeros(2, 2, dtype=torch.float64))
    assert strip(pad_bodies([(1,)], R, 3)[0], R) == (1,)
