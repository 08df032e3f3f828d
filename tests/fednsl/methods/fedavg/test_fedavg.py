import numpy as np
import pytest

from fednsl.federation.aggregate import weighted_average
from fednsl.federation.records import Message
from fednsl.methods.fedavg import FedAvgConfig, FedAvgStrategy


def test_aggregate_is_hand_computed_weighted_mean():
    init = {"w": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.float32)}
    s = FedAvgStrategy(init, FedAvgConfig())
    r1 = Message("train", 1, "a", arrays={"w": np.ones((2, 2), np.float32), "b": np.array([1, 2], np.float32)},
                 metrics={"num_examples": 1, "train_loss": 1.0})
    r2 = Message("train", 1, "b", arrays={"w": np.full((2, 2), 5, np.float32), "b": np.array([3, 6], np.float32)},
                 metrics={"num_examples": 3, "train_loss": 3.0})
    m = s.aggregate_train(1, {"a": r1, "b": r2}, {})
    np.testing.assert_array_equal(s.weights["w"], np.full((2, 2), (1 * 1 + 3 * 5) / 4, np.float32))
    np.testing.assert_array_equal(s.weights["b"], np.array([(1 + 9) / 4, (2 + 18) / 4], np.float32))
    assert m["train_loss"] == pytest.approx((1 + 9) / 4)


def test_server_lr_interpolates():
    s = FedAvgStrategy({"w": np.zeros(1)}, FedAvgConfig(server_lr=0.5))
    s.aggregate_train(1, {"a": Message("train", 1, "a", arrays={"w": np.ones(1)},
                                       metrics={"num_examples": 1, "train_loss": 0.0})}, {})
    assert s.weights["w"][0] == 0.5


def test_weighted_average_rejects_mismatched_fields():
    with pytest.raises(ValueError, match="fields"):
        weighted_average([{"a": np.ones(1)}, {"b": np.ones(1)}], [1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        weighted_average([{"a": np.ones(1)}], [0])
