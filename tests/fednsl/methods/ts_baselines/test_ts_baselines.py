import numpy as np
import pytest
import torch

from fednsl.common.torch_utils import get_weights
from fednsl.federation.records import Message, validate
from fednsl.federation.runner import InProcessRunner
from fednsl.methods.ts_baselines import TSAverageStrategy, TSDittoClient, TSFedAvgClient, TSIFCAClient, TSIFCAStrategy
from fednsl.pipeline import build_federation
from fednsl.tasks.timeseries.clients import TSFedRepClient, pack_models
from fednsl.tasks.timeseries.configs import TSFedRepConfig, TSIFCAConfig, TSTrainConfig
from fednsl.tasks.timeseries.properties import PropertyConfig, make_template
from fednsl.tasks.timeseries.training import sgd_epochs
from fednsl.tasks.timeseries.updates import fedrep_update, ifca_select, proximal_term
from tests.fednsl.tasks.timeseries.helpers import LinearForecaster, linear_grads, series, tiny_config

LR = 0.1
TPL = make_template(PropertyConfig(width=1), 3)


def _np(m):
    return (m.body.weight.detach().double().numpy(), m.head.weight.detach().double().numpy(),
            m.head.bias.detach().double().numpy())


def _xy(seed=0):
    d = series(seed=seed)
    return torch.from_numpy(d.x_train), torch.from_numpy(d.y_train), d.x_train.astype(np.float64), d.y_train.astype(np.float64)


def _cfg(**kw):
    return {"lr": LR, "momentum": 0.0, "weight_decay": 0.0, "batch_size": 64, "local_epochs": 2,
            "max_batches": None, "grad_clip": None, "seed": 1, **kw}


def test_fedprox_proximal_gradient_by_hand():
    """Two full-batch steps from w0 = w_g: the 2nd step carries μ(w1 − w_g)."""
    x, y, X, Y = _xy()
    m = LinearForecaster(5, 3)
    B0, A0, c0 = _np(m)
    client = TSFedAvgClient("c", series(), m, TPL)
    msg = Message("train", 1, arrays=get_weights(m), config=_cfg(mu=0.5))
    out = client.train(msg).arrays
    mu = 0.5
    B, A, c = B0, A0, c0
    for step in range(2):
        gB, gA, gc = linear_grads(B, A, c, X, Y)
        B, A, c = (B - LR * (gB + mu * (B - B0)), A - LR * (gA + mu * (A - A0)), c - LR * (gc + mu * (c - c0)))
    np.testing.assert_allclose(out["body.weight"], B, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["head.weight"], A, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["head.bias"], c, rtol=1e-4, atol=1e-6)
    # μ = 0 (FedAvg) differs after two steps
    plain = TSFedAvgClient("c", series(), LinearForecaster(5, 3), TPL).train(
        Message("train", 1, arrays=get_weights(LinearForecaster(5, 3)), config=_cfg())).arrays
    assert not np.allclose(plain["head.weight"], out["head.weight"])


def test_ditto_personal_step_by_hand():
    """v' = v − η(∇f(v) + λ(v − w^t)), the personal model starting away from the global one."""
    x, y, X, Y = _xy()
    glob = LinearForecaster(5, 3, seed=1)
    client = TSDittoClient("c", series(), LinearForecaster(5, 3, seed=9), TPL)
    personal0 = LinearForecaster(5, 3, seed=2)
    client.personal = get_weights(personal0)
    lam = 2.0
    reply = client.train(Message("train", 1, arrays=get_weights(glob), config=_cfg(lam=lam, personal_epochs=1,
                                                                                   local_epochs=1)))
    Bw, Aw, cw = _np(glob)
    B, A, c = _np(personal0)
    gB, gA, gc = linear_grads(B, A, c, X, Y)
    exp = (B - LR * (gB + lam * (B - Bw)), A - LR * (gA + lam * (A - Aw)), c - LR * (gc + lam * (c - cw)))
    for k, e in zip(("body.weight", "head.weight", "head.bias"), exp):
        np.testing.assert_allclose(client.personal[k], e, rtol=1e-4, atol=1e-6)
    # the returned global copy is one plain step from w^t
    gB, gA, gc = linear_grads(Bw, Aw, cw, X, Y)
    np.testing.assert_allclose(reply.arrays["head.weight"], Aw - LR * gA, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(reply.arrays["body.weight"], Bw - LR * gB, rtol=1e-4, atol=1e-6)


def test_proximal_term_value_and_gradient():
    p = torch.nn.Parameter(torch.tensor([1.0, 3.0]))
    reg = proximal_term([p], [torch.tensor([0.0, 1.0])], mu=0.4)
    val = reg()
    assert float(val.detach()) == pytest.approx(0.2 * (1 + 4))
    val.backward()
    torch.testing.assert_close(p.grad, torch.tensor([0.4, 0.8]))


def test_fedrep_head_then_body_by_hand():
    x, y, X, Y = _xy()
    m = LinearForecaster(5, 3)
    B0, A0, c0 = _np(m)
    fedrep_update(m, x, y, head_epochs=1, body_epochs=1, gen=torch.Generator().manual_seed(0), batch_size=64, lr=LR)
    _, gA, gc = linear_grads(B0, A0, c0, X, Y)
    A1, c1 = A0 - LR * gA, c0 - LR * gc          # head step, body frozen
    gB, _, _ = linear_grads(B0, A1, c1, X, Y)    # body step with the *new* head, head frozen
    B1 = B0 - LR * gB
    B, A, c = _np(m)
    np.testing.assert_allclose(A, A1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(c, c1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(B, B1, rtol=1e-4, atol=1e-6)


def test_fedrep_client_keeps_head_private():
    m = LinearForecaster(5, 3)
    client = TSFedRepClient("c", series(), m, TPL)
    head0 = {k: v.copy() for k, v in client.head.items()}
    body = get_weights(LinearForecaster(5, 3, seed=4), ["body.weight"])
    reply = client.train(Message("train", 1, arrays=body, config=_cfg(head_epochs=1)))
    assert set(reply.arrays) == {"body.weight"}
    assert not np.allclose(client.head["head.weight"], head0["head.weight"])
    ev = client.evaluate(Message("evaluate", 1, arrays=reply.arrays, config={"split": "test", "seed": 0}))
    assert {"mse", "t_mse", "rho", "truth_rho"} <= set(ev.metrics) and "naive_mean_mse" not in ev.metrics  # L < 24
    with pytest.raises(ValueError, match="head_epochs"):
        TSFedRepConfig(local_epochs=2, head_epochs=3)
    assert TSFedRepConfig().head_epochs == 8


class _Const(torch.nn.Module):
    def __init__(self, v):
        super().__init__()
        self.v = v

    def forward(self, x):
        return torch.full((len(x), 3), float(self.v))


def test_ifca_selects_lowest_loss_cluster():
    x = torch.zeros(4, 5)
    y = torch.full((4, 3), 0.7)
    models = [_Const(0.0), _Const(1.0), _Const(0.65), _Const(0.8)]
    assert ifca_select(models, x, y) == 2           # losses 0.49, 0.09, 0.0025, 0.01
    assert ifca_select([_Const(0.5), _Const(0.9)], x, y) == 0  # tie (both 0.2 away) → lowest index
    assert ifca_select([_Const(2.0), _Const(0.1), _Const(0.65)], x, y) == 2


def test_ifca_client_and_server_round_by_hand():
    data = series()
    m = LinearForecaster(5, 3)
    good = LinearForecaster(5, 3, seed=11)
    with torch.no_grad():  # model 1 predicts the client's mean target: lowest loss
        good.body.weight.zero_()
        good.head.weight.zero_()
        good.head.bias.copy_(torch.from_numpy(data.y_train.mean(0)))
    far = LinearForecaster(5, 3, seed=12)
    with torch.no_grad():
        far.head.bias.add_(10.0)
    models = [get_weights(far), get_weights(good)]
    client = TSIFCAClient("c", data, m, TPL)
    reply = client.train(Message("train", 1, arrays=pack_models(models),
                                 config=_cfg(num_clusters=2, selection_split="train", local_epochs=1)))
    assert int(reply.arrays["cluster"][0]) == 1
    cfg = TSIFCAConfig(num_clusters=2, local_epochs=1)
    server = TSIFCAStrategy(models, cfg, rounds=3)
    validate(reply, server.reply_schema("train"))
    other = Message("train", 1, "d", arrays={**{k: v + 1 for k, v in reply.arrays.items() if k != "cluster"},
                                            "cluster": np.array([1])}, metrics={"num_examples": 18, "train_loss": 0.0})
    server.aggregate_train(1, {"c": reply, "d": other}, {})
    n_c = reply.metrics["num_examples"]
    for k in models[0]:
        exp = (n_c * reply.arrays[k] + 18 * (reply.arrays[k] + 1)) / (n_c + 18)
        np.testing.assert_allclose(server.models[1][k], exp, rtol=1e-6)
        np.testing.assert_array_equal(server.models[0][k], models[0][k])  # nobody chose cluster 0
    ev = client.evaluate(Message("evaluate", 2, arrays=pack_models(server.models),
                                 config={"num_clusters": 2, "split": "test", "seed": 0}))
    assert ev.metrics["cluster"] == 1 and "s_mse" in ev.metrics


def test_average_strategy_weighted_mean_and_final_round():
    cfg = TSTrainConfig()
    s = TSAverageStrategy({"w": np.zeros(2, np.float32)}, cfg, rounds=4, extra_config={"mu": 0.1})
    msg = s.configure_train(1, ["a", "b"])
    assert msg.config["mu"] == 0.1 and msg.config["lr"] == cfg.lr
    r = {"a": Message("train", 1, "a", arrays={"w": np.array([1, 2], np.float32)}, metrics={"num_examples": 1, "train_loss": 1.0}),
         "b": Message("train", 1, "b", arrays={"w": np.array([5, 6], np.float32)}, metrics={"num_examples": 3, "train_loss": 3.0})}
    m = s.aggregate_train(1, r, {})
    np.testing.assert_allclose(s.weights["w"], [4.0, 5.0])
    assert m["train_loss"] == pytest.approx(2.5)
    assert s.sample_clients("train", 3, ["a", "b", "c"]) is None
    assert list(s.sample_clients("train", 4, ["a", "b", "c"])) == ["a", "b", "c"]
    assert list(s.sample_clients("evaluate", 1, ["a", "b"])) == ["a", "b"]


def test_lp_term_pulls_forecasts_into_the_band():
    """Eq. 2: with λ > 0 the trained forecasts violate φ_i less than with λ = 0 (same seeds)."""
    from fednsl.tasks.timeseries.federated import ForecastClient
    from fednsl.tasks.timeseries.properties import property_loss
    d = series(n=12)
    x, y = torch.from_numpy(d.x_train), torch.from_numpy(d.y_train)
    out = {}
    for lam in (0.0, 5.0):
        m = LinearForecaster(5, 3)
        c = ForecastClient("c", d, m, TPL)
        sgd_epochs(m, x, y, epochs=30, batch_size=4, lr=0.05, gen=torch.Generator().manual_seed(0),
                   objective=c.objective(lam=lam, lp="l1"))
        out[lam] = float(property_loss(m(x).detach(), c.prop, "l1"))
    assert out[5.0] < out[0.0]


@pytest.mark.parametrize("method", ["ts-fedavg", "ts-fedprox", "ts-fedrep", "ts-ditto", "ts-ifca"])
def test_baselines_run_end_to_end(method, tmp_path):
    kw = {"num_clusters": 2} if method == "ts-ifca" else {}
    cfg = tiny_config(method, rounds=2, **kw)
    (tmp_path / method).mkdir()
    res = InProcessRunner(build_federation(cfg), cfg, tmp_path / method, progress=False).run()  # no plots: fast
    ev = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "evaluate"]
    assert len(ev) == 2 and ev[-1]["evaluate.replies"] == 4
    last = ev[-1]
    assert np.isfinite(last["mse"]) and last["t_rho"] == 100.0 and "naive_mean_mse" in last
    assert ("s_mse" in last) == (method == "ts-ifca")
    trained = [r for r in res.rows if r["scope"] == "server" and r["stage"] == "train"]
    assert [r["train.replies"] for r in trained] == [2, 4]  # fraction 0.5, then every client in the last round


@pytest.mark.parametrize("final_round_all", [True, False])
def test_a_time_budget_may_end_a_run_early_only_without_a_final_round_of_all_clients(final_round_all: bool) -> None:
    """``final_round_all`` trains every client in the last round: a round that sampled half of them cannot become
    the last after the fact (the loop's time budget then runs one more round as the last)."""
    strategy = build_federation(tiny_config("ts_fedavg", rounds=4, final_round_all=final_round_all)).strategy
    assert strategy.may_end_after(2) is (not final_round_all)
    assert strategy.may_end_after(4)
    strategy.end_at(3)
    assert strategy.may_end_after(3)
