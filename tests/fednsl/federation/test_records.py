import numpy as np
import pytest

from fednsl.federation.records import ArraySpec, InvalidMessageError, Message, Schema, validate

SCHEMA = Schema(
    arrays=(
        ArraySpec("posterior", "distribution", shape=("T", "J"), mask="mask"),
        ArraySpec("mask", "mask", dtype="bool", shape=("T", "J")),
        ArraySpec("ids", "ids", dtype="int", shape=("T",)),
    ),
    metrics=("num_examples",),
)


def good() -> Message:
    post = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = np.array([[True, True, False], [True, False, False], [False, False, False]])
    return Message("train", 3, sender="c1", arrays={"posterior": post, "mask": mask, "ids": np.arange(3)},
                   metrics={"num_examples": 10})


def test_valid_message_passes():
    validate(good(), SCHEMA, expected_kind="train", expected_round=3)


@pytest.mark.parametrize("mutate, field, reason", [
    (lambda m: m.arrays.__setitem__("posterior", m.arrays["posterior"] * 0.5), "posterior", "sum to 1"),
    (lambda m: m.arrays["posterior"].__setitem__((0, 0), np.nan), "posterior", "non-finite"),
    (lambda m: m.arrays["posterior"].__setitem__((0, 2), 0.1), "posterior", "masked out"),
    (lambda m: m.arrays.__setitem__("ids", np.arange(4)), "ids", "another field has T=3"),
    (lambda m: m.arrays.__setitem__("ids", np.arange(3.0)), "ids", "dtype"),
    (lambda m: m.arrays.__setitem__("raw_x", np.zeros(3)), "raw_x", "undeclared array"),
    (lambda m: m.metrics.__setitem__("secret", 1.0), "secret", "undeclared metric"),
    (lambda m: m.arrays.pop("mask"), "mask", "missing"),
    (lambda m: m.metrics.__setitem__("num_examples", float("inf")), "num_examples", "not finite"),
])
def test_bad_message_names_client_and_field(mutate, field, reason):
    msg = good()
    mutate(msg)
    with pytest.raises(InvalidMessageError) as err:
        validate(msg, SCHEMA)
    assert err.value.sender == "c1" and err.value.field == field
    assert reason in str(err.value) and "c1" in str(err.value)


def test_negative_probabilities_rejected():
    msg = good()
    msg.arrays["posterior"][0] = [1.5, -0.5, 0.0]
    with pytest.raises(InvalidMessageError, match="negative"):
        validate(msg, SCHEMA)


def test_round_and_kind_tags_checked():
    with pytest.raises(InvalidMessageError, match="round"):
        validate(good(), SCHEMA, expected_round=4)
    with pytest.raises(InvalidMessageError, match="kind"):
        validate(good(), SCHEMA, expected_kind="evaluate")


def test_reply_converts_metrics():
    import torch
    m = Message("train", 1).reply("c0", arrays={"w": np.ones(2)}, metrics={"loss": torch.tensor(0.5), "n": np.int64(3)})
    assert m.metrics == {"loss": 0.5, "n": 3} and m.round == 1 and m.sender == "c0"
