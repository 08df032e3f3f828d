import pytest
import torch

from fednsl.tasks.timeseries.properties import (
    ClientProperty,
    PropertyConfig,
    band_loss,
    make_template,
    mine_property,
    property_loss,
)
from rules import stl


def _prop(seed=0, n=30):
    y = torch.rand(n, 24, generator=torch.Generator().manual_seed(seed))
    return y, mine_property(make_template(PropertyConfig(), 24), y.numpy())


def test_operational_range_band_is_window_extremes():
    y, prop = _prop()
    for k in range(12):
        w = y[:, 2 * k:2 * k + 2]
        assert float(prop.upper[2 * k]) == pytest.approx(float(w.max()))
        assert float(prop.lower[2 * k + 1]) == pytest.approx(float(w.min()))
    assert bool(prop.satisfied(y).all())  # tight bounds hold on the mining data
    assert prop.template.name == "operational_range" and len(prop.vector()) == 24


def test_satisfaction_is_band_membership_and_robustness_sign():
    _, prop = _prop()
    pred = torch.rand(200, 24, generator=torch.Generator().manual_seed(1)) * 1.2 - 0.1
    pred[:50] = prop.project(pred[:50])  # some forecasts inside, most outside
    inside = prop.step_satisfied(pred).all(dim=1)
    assert torch.equal(prop.satisfied(pred), inside)
    assert 50 <= int(inside.sum()) < 200
    rho = prop.robustness(pred)
    ref = torch.minimum(prop.upper - pred, pred - prop.lower).min(dim=1).values  # Def. 5 for □(x≤a ∧ x≥b)
    torch.testing.assert_close(rho, ref)


def test_lp_l1_is_per_step_violation_from_stl_robustness():
    _, prop = _prop()
    pred = torch.rand(7, 24, generator=torch.Generator().manual_seed(2)) * 1.4 - 0.2
    f = stl.parse("x <= a and x >= b")
    per_step = torch.stack([
        torch.relu(-stl.robustness(f, pred[:, t:t + 1], {"a": float(prop.upper[t]), "b": float(prop.lower[t])})[:, 0])
        for t in range(24)], dim=1)
    assert float(property_loss(pred, prop, "l1")) == pytest.approx(float(per_step.mean()), rel=1e-5)
    assert float(property_loss(pred, prop, "squared")) == pytest.approx(float(per_step.pow(2).mean()), rel=1e-5)
    g = prop.template.violation(pred[None], prop.params)[0]
    assert float(property_loss(pred, prop, "violation")) == pytest.approx(float(g.mean()))
    torch.testing.assert_close(g, per_step.max(dim=1).values)  # g = L∞ violation for □-bands
    lo, up = prop.lower.expand(7, 24), prop.upper.expand(7, 24)
    assert float(band_loss(pred, lo, up, "l1")) == pytest.approx(float(property_loss(pred, prop, "l1")))
    with pytest.raises(ValueError, match="lp must be"):
        property_loss(pred, prop, "l2")


def test_teacher_projection_is_closest_satisfying_trace():
    _, prop = _prop()
    pred = torch.rand(50, 24, generator=torch.Generator().manual_seed(3)) * 2 - 0.5
    proj = prop.project(pred)
    assert bool(prop.satisfied(proj).all())
    torch.testing.assert_close(prop.project(proj), proj)
    # no point of the band is closer (per step, the band is an interval): random band points
    g = torch.Generator().manual_seed(4)
    for _ in range(20):
        z = prop.lower + torch.rand(24, generator=g) * (prop.upper - prop.lower)
        assert bool(((pred - z).abs() >= (pred - proj).abs() - 1e-7).all())


def test_vector_roundtrip_and_gradients():
    _, prop = _prop()
    back = ClientProperty.from_vector(prop.template, prop.vector(), 24)
    torch.testing.assert_close(back.lower, prop.lower)
    torch.testing.assert_close(back.upper, prop.upper)
    pred = (torch.rand(3, 24) * 2).requires_grad_(True)
    property_loss(pred, prop, "l1").backward()
    assert pred.grad is not None and float(pred.grad.abs().sum()) > 0


def test_other_templates_and_errors():
    tpl = make_template(PropertyConfig(template="multiple_eventualities", width=8), 24)
    assert tpl.length == 24
    y = torch.rand(10, 24)
    prop = mine_property(tpl, y.numpy())
    assert prop.lower is None and bool(prop.satisfied(y).all())
    with pytest.raises(ValueError, match="band template"):
        prop.project(y)
    with pytest.raises(ValueError, match="do not fit"):
        make_template(PropertyConfig(width=5, count=6), 24)
    with pytest.raises(ValueError, match="signals"):
        make_template(PropertyConfig(template="intra_task"), 24)
    margin = mine_property(make_template(PropertyConfig(), 24), y.numpy(), margin=0.1)
    tight = mine_property(make_template(PropertyConfig(), 24), y.numpy())
    torch.testing.assert_close(margin.upper, tight.upper + 0.1)
