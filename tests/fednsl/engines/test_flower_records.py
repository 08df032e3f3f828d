"""fednsl Message ⇄ Flower RecordDict: an exact round trip, also through Flower's own wire serialisation."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.flower

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402
from flwr.app.metadata import validate_message_type  # noqa: E402

from fednsl.engines.flower_records import (  # noqa: E402
    RecordTranslationError,
    from_recorddict,
    is_fednsl,
    message_type,
    to_recorddict,
)
from fednsl.federation.records import Message  # noqa: E402


def rich_message() -> Message:
    rng = np.random.default_rng(0)
    return Message(
        kind="train.stats", round=3, sender="c07",
        arrays={"z_last": rng.normal(size=(150, 50)).astype(np.float32),   # declared first, kept first
                "a_first": np.arange(6, dtype=np.int64).reshape(2, 3),
                "mask": rng.random((4, 5)) > 0.5,
                "scalar": np.array(2.5),
                "empty": np.zeros((0, 7), dtype=np.float64),
                "strided": np.arange(20.0)[::3]},
        config={"lr": 0.1, "seed": 123456789, "name": "x", "flag": True, "blob": b"\x00\x01", "ints": [1, 2, 3],
                "none": None, "empty": [], "nested": [[1, 2], [3]], "mixed": [1, "a"], "map": {"a": 1},
                "np_int": np.int64(7), "np_float": np.float32(0.5), "huge": 2 ** 70, "bools": [True, False]},
        metrics={"num_examples": 12, "loss": 0.25})


def assert_same(a: Message, b: Message) -> None:
    assert (a.kind, a.round, a.sender) == (b.kind, b.round, b.sender)
    assert list(a.arrays) == list(b.arrays)
    for k in a.arrays:
        x, y = np.asarray(a.arrays[k]), b.arrays[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert np.array_equal(x, y), k
    assert list(a.metrics) == list(b.metrics) and a.metrics == b.metrics


def expected_config(msg: Message) -> dict:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in msg.config.items()}


def test_round_trip_is_exact():
    msg = rich_message()
    back = from_recorddict(to_recorddict(msg))
    assert_same(msg, back)
    assert list(back.config) == list(msg.config)
    assert back.config == expected_config(msg)
    assert type(back.config["flag"]) is bool and type(back.config["np_int"]) is int


def test_round_trip_through_flower_serialisation():
    """Deflate/inflate the RecordDict the way Flower puts it on the wire (protobuf objects)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

    msg = rich_message()
    content = to_recorddict(msg)
    objects = {oid: obj.deflate() for oid, obj in get_all_nested_objects(content).items()}
    rebuilt = inflate_object_from_contents(content.object_id, objects, keep_object_contents=False)
    back = from_recorddict(rebuilt)
    assert_same(msg, back)
    assert back.config == expected_config(msg)


def test_records_are_the_flower_kinds():
    content = to_recorddict(rich_message())
    assert isinstance(content["arrays"], ArrayRecord) and isinstance(content["metrics"], MetricRecord)
    assert isinstance(content["config"], ConfigRecord) and isinstance(content["fednsl"], ConfigRecord)
    assert content["config"]["lr"] == 0.1 and content["config"]["ints"] == [1, 2, 3]  # plain where Flower can
    assert is_fednsl(content) and not is_fednsl(RecordDict())


@pytest.mark.parametrize("stage,expected", [
    ("train", "train"), ("evaluate", "evaluate"), ("query", "query"), ("train.stats", "train.stats"),
    ("evaluate.seen", "evaluate.seen"), ("share", "query.share"), ("em.1", "query.em_1"),
    ("calibrate.scale", "query.calibrate_scale"), ("cluster.train", "query.cluster_train"),
    ("train.1", "query.train_1"), ("1st", "query.s_1st"), ("pre-train", "query.pre_train"),
])
def test_message_types_are_valid_flower_types(stage, expected):
    assert message_type(stage) == expected
    assert validate_message_type(message_type(stage))


def test_object_arrays_and_bad_records_are_rejected_with_names():
    with pytest.raises(RecordTranslationError, match="'bad'"):
        to_recorddict(Message("train", 1, arrays={"bad": np.array([{"a": 1}], dtype=object)}))
    with pytest.raises(RecordTranslationError, match="'cfg'"):
        to_recorddict(Message("train", 1, config={"cfg": object()}))
    with pytest.raises(RecordTranslationError, match="not a fednsl message"):
        from_recorddict(RecordDict({"x": ConfigRecord({"a": 1})}))
    content = to_recorddict(Message("train", 1, arrays={"w": np.ones(2)}))
    content["arrays"]["extra"] = content["arrays"]["w"]
    with pytest.raises(RecordTranslationError, match="undeclared \\['extra'\\]"):
        from_recorddict(content)
