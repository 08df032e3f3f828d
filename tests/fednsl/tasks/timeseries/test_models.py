import numpy as np
import pytest
import torch

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.tasks.timeseries.models import MODEL_NAMES, ModelConfig, RecurrentForecaster, build_forecaster

SMALL = {"hidden": 4, "d_model": 8, "ff": 8, "enc_layers": 1, "dec_layers": 1}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shapes_split_and_seeding(name):
    before = torch.get_rng_state()
    m = build_forecaster({"name": name, **SMALL}, input_len=48, horizon=24, seed=3)
    assert torch.equal(torch.get_rng_state(), before), "building a model must not touch the global RNG"
    out = m(torch.rand(5, 48))
    assert out.shape == (5, 24)
    shared, head = m.shared_keys(), m.head_keys()
    assert shared and head and set(shared).isdisjoint(head) and set(shared) | set(head) == set(m.state_dict())
    same = build_forecaster({"name": name, **SMALL}, 48, 24, seed=3)
    other = build_forecaster({"name": name, **SMALL}, 48, 24, seed=4)
    w, w2, w3 = get_weights(m), get_weights(same), get_weights(other)
    assert all(np.array_equal(w[k], w2[k]) for k in w)
    assert any(not np.array_equal(w[k], w3[k]) for k in w)


def test_paper_splits():
    rnn = build_forecaster({"name": "lstm"}, 120, 24, 0)
    assert all(k.startswith("rnn.") for k in rnn.shared_keys()) and rnn.head_keys() == ["head.weight", "head.bias"]
    tf = build_forecaster({"name": "transformer"}, 120, 24, 0)
    assert {k.split(".")[0] for k in tf.shared_keys()} == {"encoder_input_layer", "decoder_input_layer", "linear_mapping"}
    assert {k.split(".")[0] for k in tf.head_keys()} == {"encoder", "decoder"}
    custom = build_forecaster({"name": "transformer", "shared": ["encoder", "linear_mapping"]}, 120, 24, 0)
    assert {k.split(".")[0] for k in custom.shared_keys()} == {"encoder", "linear_mapping"}
    with pytest.raises(ValueError, match="matches no parameter"):
        build_forecaster({"name": "gru", "shared": ["body"]}, 120, 24, 0)
    with pytest.raises(ValueError, match="model.name"):
        ModelConfig(name="mlp")


def test_recurrent_step_inputs_end_one_day_before_target():
    m = RecurrentForecaster("rnn", input_len=10, horizon=3, hidden=2)
    x = torch.arange(20.0).reshape(2, 10)
    u = m.step_inputs(x)  # W = 7
    assert u.shape == (2, 3, 7)
    for t in range(3):
        torch.testing.assert_close(u[:, t], x[:, t + 1:t + 8])
        assert int(u[0, t, -1]) == 10 + t - 3  # last seen hour = target hour - H


def test_weights_roundtrip_and_errors():
    a = build_forecaster({"name": "gru", "hidden": 3}, 30, 6, 0)
    b = build_forecaster({"name": "gru", "hidden": 3}, 30, 6, 1)
    set_weights(b, get_weights(a, a.shared_keys()))
    x = torch.rand(2, 30)
    assert not torch.allclose(a(x), b(x))  # heads still differ
    set_weights(b, get_weights(a))
    torch.testing.assert_close(a(x), b(x))
    with pytest.raises(KeyError):
        set_weights(b, {"nope": np.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        set_weights(b, {"head.bias": np.zeros(3, np.float32)})


def test_default_init_ranges():
    m = build_forecaster({"name": "rnn", "hidden": 16}, 120, 24, 0)
    assert float(m.rnn.weight_ih_l0.detach().abs().max()) <= 1 / 4 + 1e-6  # U(±1/√hidden)
    assert float(m.head.weight.detach().abs().max()) <= 1 / 4 + 1e-6       # U(±1/√fan_in)
    tf = build_forecaster({"name": "transformer"}, 120, 24, 0)
    attn = tf.encoder.layers[0].self_attn
    assert float(attn.in_proj_bias.detach().abs().max()) == 0.0
    assert float(tf.encoder.layers[0].norm1.weight.detach().min()) == 1.0


@pytest.mark.parametrize("d_model", [16, 64])
def test_transformer_trains_under_the_configs_sgd(d_model):
    """The configs' SGD (lr 0.1, momentum 0.9, tuned on the RNN) used to overshoot the transformer's readout (its
    curvature grew with d_model) and diverge to NaN in a few epochs; with the 1/√d_model readout it descends."""
    import math

    from fednsl.tasks.timeseries.training import sgd_epochs

    day = 0.5 + 0.4 * torch.sin(2 * math.pi * torch.arange(100) / 24)
    noise = 0.02 * torch.randn(40, 48, generator=torch.Generator().manual_seed(0))
    x = torch.stack([day[i : i + 48] for i in range(40)]) + noise
    y = torch.stack([day[i + 48 : i + 60] for i in range(40)])
    m = build_forecaster({"name": "transformer", "d_model": d_model, "ff": 32, "enc_layers": 1, "dec_layers": 1},
                         48, 12, 0)
    losses = [sgd_epochs(m, x, y, epochs=1, batch_size=64, lr=0.1, momentum=0.9, weight_decay=1e-4,
                         gen=torch.Generator().manual_seed(1)) for _ in range(10)]
    assert all(math.isfinite(v) for v in losses)
    assert max(losses[1:]) < losses[0] and losses[-1] < 0.15
