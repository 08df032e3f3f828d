"""LogiCP loss (Eq. 19–22) and runtime correction (Eq. 23–25) against brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fednsl.methods.logicp.correction import conflicts, correct, validate
from fednsl.methods.logicp.losses import LossWeights, cp_loss, logicp_loss, mse_loss, stl_loss
from fednsl.tasks.timeseries.properties import ClientProperty, PropertyConfig, make_template, mine_property
from rules import stl


def _data(seed: int = 0, b: int = 7, t: int = 8):
    g = torch.Generator().manual_seed(seed)
    pred = torch.rand(b, t, generator=g, dtype=torch.float64) * 2 - 0.5
    y = torch.rand(b, t, generator=g, dtype=torch.float64)
    lower = torch.rand(t, generator=g, dtype=torch.float64) * 0.4
    upper = lower + 0.2 + torch.rand(t, generator=g, dtype=torch.float64) * 0.4
    qhat = torch.rand(t, generator=g, dtype=torch.float64) * 0.5
    return pred, y, lower, upper, qhat


def test_mse_is_eq20():
    pred, y, *_ = _data()
    ref = np.mean([[(float(y[i, j]) - float(pred[i, j])) ** 2 for j in range(y.shape[1])] for i in range(y.shape[0])])
    assert float(mse_loss(pred, y)) == pytest.approx(ref, rel=1e-12)


def test_stl_loss_l1_is_mean_per_step_violation_degree():
    """Eq. 21: (1/T)·Σ_τ g(φ, Ŷ, τ) with g = rules.stl.violation of the step-τ constraint."""
    pred, _, lower, upper, _ = _data(1)
    f = stl.parse("(x <= u) and (x >= l)")
    per_step = torch.stack([stl.violation(f, pred[:, t:t + 1], {"u": float(upper[t]), "l": float(lower[t])})[:, 0]
                            for t in range(pred.shape[1])], dim=1)
    assert float(stl_loss(pred, lower, upper, "l1")) == pytest.approx(float(per_step.mean()), rel=1e-12)
    assert float(stl_loss(pred, lower, upper, "squared")) == pytest.approx(float(per_step.pow(2).mean()), rel=1e-12)
    # satisfied forecasts cost nothing
    inside = torch.maximum(torch.minimum(pred, upper), lower)
    assert float(stl_loss(inside, lower, upper, "l1")) == 0.0


def test_stl_loss_with_a_mined_band_property_and_violation_kind():
    g = torch.Generator().manual_seed(3)
    y = torch.rand(30, 24, generator=g)
    tpl = make_template(PropertyConfig(), 24)
    prop = mine_property(tpl, y)
    pred = torch.rand(5, 24, generator=g) * 1.4 - 0.2
    by_prop = stl_loss(pred, kind="l1", prop=prop)
    assert float(by_prop) == pytest.approx(float(stl_loss(pred, prop.lower, prop.upper, "l1")))
    # "violation": g of the whole mined formula at start 0 = max over steps of the per-step gap (□ ∧ → max)
    viol = stl_loss(pred, kind="violation", prop=prop)
    gap = (pred - torch.maximum(torch.minimum(pred, prop.upper), prop.lower)).abs().amax(1)
    assert float(viol) == pytest.approx(float(gap.mean()), rel=1e-6)
    with pytest.raises(ValueError, match="needs the client's property"):
        stl_loss(pred, kind="violation")


def test_cp_loss_is_eq22_hinge():
    pred, y, _, _, qhat = _data(2)
    ref = np.mean([[max(0.0, abs(float(pred[i, t] - y[i, t])) - float(qhat[t])) for t in range(y.shape[1])]
                   for i in range(y.shape[0])])
    assert float(cp_loss(pred, y, qhat)) == pytest.approx(ref, rel=1e-12)
    sq = np.mean([[max(0.0, abs(float(pred[i, t] - y[i, t])) - float(qhat[t])) ** 2 for t in range(y.shape[1])]
                  for i in range(y.shape[0])])
    assert float(cp_loss(pred, y, qhat, "squared")) == pytest.approx(sq, rel=1e-12)
    inf = torch.full_like(qhat, float("inf"))
    p = pred.clone().requires_grad_(True)
    loss = cp_loss(p, y, inf)
    loss.backward()
    assert float(loss.detach()) == 0.0 and float(p.grad.abs().sum()) == 0.0
    # gradient pushes errors larger than Q̂ back: d/dŷ = sign(ŷ - y)/(B·T) outside, 0 inside
    p = pred.clone().requires_grad_(True)
    cp_loss(p, y, qhat).backward()
    out = (pred - y).abs() > qhat
    expect = torch.where(out, torch.sign(pred - y), torch.zeros_like(pred)) / pred.numel()
    assert torch.allclose(p.grad, expect)


def test_logicp_loss_is_eq19_weighted_sum():
    pred, y, lower, upper, qhat = _data(4)
    w = LossWeights(0.5, 0.2)
    total = logicp_loss(pred, y, lower=lower, upper=upper, qhat=qhat, weights=w)
    ref = 0.5 * mse_loss(pred, y) + 0.2 * stl_loss(pred, lower, upper) + 0.3 * cp_loss(pred, y, qhat)
    assert float(total) == pytest.approx(float(ref), rel=1e-12)
    assert w.cp == pytest.approx(0.3)
    # no region yet: the CP term is dropped
    no_cp = logicp_loss(pred, y, lower=lower, upper=upper, qhat=None, weights=w)
    assert float(no_cp) == pytest.approx(float(0.5 * mse_loss(pred, y) + 0.2 * stl_loss(pred, lower, upper)))
    # ω1 = 1: plain MSE
    assert float(logicp_loss(pred, y, lower=None, upper=None, qhat=qhat, weights=LossWeights(1.0, 0.0))) == \
        pytest.approx(float(mse_loss(pred, y)))


@pytest.mark.parametrize("w1,w2", [(-0.1, 0.2), (0.7, 0.4), (0.5, -1e-3)])
def test_bad_weights_are_rejected(w1, w2):
    with pytest.raises(ValueError, match="omega"):
        LossWeights(w1, w2)


# --- runtime correction -------------------------------------------------------------------------------------
def test_paper_example_cp_priority():
    """§4.6: ŷ = 5, Q̂ = 2 → CP region [3, 7]; band [8, 12] → ȳ = 7 (CP edge); STL priority → 8."""
    pred, q = torch.tensor([[5.0]]), torch.tensor([2.0])
    lo, up = torch.tensor([8.0]), torch.tensor([12.0])
    assert float(correct(pred, q, lo, up, "cp")) == 7.0
    assert float(correct(pred, q, lo, up, "stl")) == 8.0
    assert bool(conflicts(pred, q, lo, up))
    assert not bool(validate(pred, lo, up)) and bool(validate(torch.tensor([[9.0]]), lo, up))
    # overlapping regions: the band bound is reachable → both priorities move to it
    assert float(correct(pred, torch.tensor([4.0]), lo, up, "cp")) == 8.0
    assert float(correct(torch.tensor([[15.0]]), q, lo, up, "cp")) == 13.0     # above: CP edge 15 − 2


def test_correction_against_brute_force_and_reference_code():
    pred, _, lower, upper, qhat = _data(5, b=40, t=6)
    out = correct(pred, qhat, lower, upper, "cp")
    # reference code (utils/update.py cp_teacher): ŷ>up → max(ŷ−Q̂, up); ŷ<lo → min(ŷ+Q̂, lo)
    code = torch.where(pred > upper, torch.maximum(pred - qhat, upper),
                       torch.where(pred < lower, torch.minimum(pred + qhat, lower), pred))
    assert torch.equal(out, code)
    # brute force: among candidates in [ŷ−Q̂, ŷ+Q̂] take the one closest to the band, then closest to ŷ
    for i in range(pred.shape[0]):
        for t in range(pred.shape[1]):
            p, q, lo, up = (float(v) for v in (pred[i, t], qhat[t], lower[t], upper[t]))
            cands = np.concatenate([np.linspace(p - q, p + q, 2001), [lo, up, p]])
            cands = cands[(cands >= p - q - 1e-12) & (cands <= p + q + 1e-12)]
            dist = np.maximum(0, np.maximum(lo - cands, cands - up))
            best = cands[dist == dist.min()]
            ref = best[np.argmin(np.abs(best - p))]
            assert float(out[i, t]) == pytest.approx(ref, abs=1e-9)
    # never leaves the CP interval; satisfies the band whenever the band is reachable
    assert ((out - pred).abs() <= qhat + 1e-12).all()
    reach = ~conflicts(pred, qhat, lower, upper)
    assert validate(out, lower, upper)[reach].all()
    # the two priorities differ exactly on conflicts
    stl_out = correct(pred, qhat, lower, upper, "stl")
    assert torch.equal(stl_out, torch.maximum(torch.minimum(pred, upper), lower))
    assert torch.equal(out != stl_out, conflicts(pred, qhat, lower, upper))


def test_infinite_region_reduces_to_projection_and_errors():
    pred, _, lower, upper, qhat = _data(6)
    inf = torch.full_like(qhat, float("inf"))
    assert torch.equal(correct(pred, inf, lower, upper, "cp"), correct(pred, qhat, lower, upper, "stl"))
    with pytest.raises(ValueError, match="priority"):
        correct(pred, qhat, lower, upper, "both")
    with pytest.raises(ValueError, match="non-negative"):
        correct(pred, -qhat - 1, lower, upper)


def test_client_property_band_feeds_correction():
    y = torch.rand(20, 24, generator=torch.Generator().manual_seed(0))
    prop: ClientProperty = mine_property(make_template(PropertyConfig(), 24), y)
    assert validate(y, prop.lower, prop.upper).all()        # the mined band holds on its own data (tight)
