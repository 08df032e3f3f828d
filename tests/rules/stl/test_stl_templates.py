"""Table 1 templates, parameter inference (tightness) and FedSTL's worked example."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from rules import stl
from rules.stl.templates import shortest_hitting_interval


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def client_traces(template: stl.Template, clients: int = 6, samples: int = 9, extra: int = 3,
                  seed: int = 0, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Heterogeneous clients: a daily-like sine with client-specific offset and amplitude."""
    gen = torch.Generator().manual_seed(seed)
    length = template.length + extra
    t = torch.arange(length, dtype=torch.float64)
    out = {}
    for j, name in enumerate(template.signals):
        off = torch.randn(clients, 1, 1, generator=gen, dtype=torch.float64) + 2.0 * j
        amp = 1 + torch.rand(clients, 1, 1, generator=gen, dtype=torch.float64)
        noise = 0.3 * torch.randn(clients, samples, length, generator=gen, dtype=torch.float64)
        out[name] = (off + amp * torch.sin(t / 3 + j) + noise).to(dtype)
    return out


def assert_tight(template: stl.Template, sig: dict[str, torch.Tensor], params: dict[str, torch.Tensor],
                 allow_range_end: bool = False) -> None:
    """All training traces satisfy φ(params) with worst-case robustness 0, and moving any single
    parameter by δ in its tight direction violates some trace (Eq. 1)."""
    rho = template.robustness(sig, params)
    assert bool(template.holds(sig, params, closed=True).all())
    assert rho.amin(1).abs().max() < 1e-12 and rho.amin(1).min() >= 0
    scale = max(float(v.max() - v.min()) for v in sig.values())
    for p in template.params:
        s = template.formula.polarity(p)
        moved = dict(params)
        moved[p] = params[p] - s * 1e-6 * scale
        viol = ~template.holds(sig, moved, closed=True).all(1)
        if allow_range_end:  # a parameter stopped at the end of its data range cannot be tightened
            pred = next(n for n in template.formula.walk()
                        if isinstance(n, stl.Predicate) and n.threshold == p)
            lhs = sig[pred.signal] - (sig[pred.minus] if pred.minus else 0.0)
            lhs = lhs[..., : template.length]
            lo, hi = lhs.amin(dim=(1, 2)), lhs.amax(dim=(1, 2))
            at_end = (params[p] < lo - 0.005 * (hi - lo)) | (params[p] > hi + 0.005 * (hi - lo))
            viol = viol | at_end
        assert bool(viol.all()), (template.name, p)


@pytest.mark.parametrize("name", list(stl.TEMPLATES))
def test_mined_parameters_are_tight(name: str) -> None:
    tpl = stl.get_template(name)
    sig = client_traces(tpl)
    params = stl.mine(tpl, sig)
    assert set(params) == set(tpl.params)
    assert all(v.shape == (6,) for v in params.values())
    assert_tight(tpl, sig, params, allow_range_end=tpl.closed_form is None)


@pytest.mark.parametrize("name", ["operational_range", "intra_task", "multiple_eventualities"])
def test_search_agrees_with_closed_form(name: str) -> None:
    tpl = stl.get_template(name, count=3)
    sig = client_traces(tpl, seed=1)
    closed = stl.mine(tpl, sig, method="closed")
    search = stl.mine(tpl, sig, method="search", grid=6)
    for p in tpl.params:
        torch.testing.assert_close(search[p], closed[p], rtol=0, atol=1e-12)


def test_closed_forms_against_brute_force() -> None:
    tpl = stl.operational_range(count=4, width=3)
    x = client_traces(tpl, seed=2)["x"]
    p = stl.mine(tpl, x)
    for c, k in itertools.product(range(x.shape[0]), range(4)):
        w = x[c, :, 3 * k : 3 * k + 3]
        assert float(p[f"a{k}"][c]) == float(w.max()) and float(p[f"b{k}"][c]) == float(w.min())
    tpl = stl.multiple_eventualities(count=2, width=5)
    x = client_traces(tpl, seed=3)["x"]
    p = stl.mine(tpl, x)
    for c, k in itertools.product(range(x.shape[0]), range(2)):
        assert float(p[f"a{k}"][c]) == min(float(s.max()) for s in x[c, :, 5 * k : 5 * k + 5])


def test_shortest_hitting_interval_brute_force() -> None:
    rng = np.random.default_rng(4)
    vals = torch.from_numpy(rng.normal(size=(20, 5, 3)).round(2))
    lo, hi = shortest_hitting_interval(vals, max_elements=64)  # forces chunking
    for c in range(20):
        v = vals[c].numpy()
        cands = sorted(set(v.ravel().tolist()))
        best = min(hi_ - lo_ for lo_, hi_ in itertools.product(cands, cands) if hi_ >= lo_ and all(
            ((row >= lo_) & (row <= hi_)).any() for row in v))
        assert float(hi[c] - lo[c]) == pytest.approx(best, abs=1e-12)
        assert all(((row >= float(lo[c])) & (row <= float(hi[c]))).any() for row in v)


def test_existence_search_lies_on_the_frontier_but_is_wider() -> None:
    tpl = stl.existence(count=3, width=3)
    sig = client_traces(tpl, seed=5)
    closed = stl.mine(tpl, sig)
    search = stl.mine(tpl, sig, method="search", grid=8)
    assert_tight(tpl, sig, search, allow_range_end=True)
    for k in range(3):
        assert bool((search[f"a{k}"] - search[f"b{k}"] >= closed[f"a{k}"] - closed[f"b{k}"] - 1e-12).all())


def test_vectorised_search_equals_per_client_loop() -> None:
    tpl = stl.temporal_implication(count=2, width=4, reaction=(1, 2))
    sig = client_traces(tpl, clients=4, seed=6)
    batch = stl.mine(tpl, sig, grid=8)
    for c in range(4):
        one = stl.mine(tpl, {k: v[c : c + 1] for k, v in sig.items()}, grid=8)
        for p in tpl.params:
            assert float(one[p][0]) == float(batch[p][c])


def test_margin_and_float32_rounding_keep_satisfaction() -> None:
    tpl = stl.until_template(count=3)
    sig = client_traces(tpl, seed=7, dtype=torch.float32)
    p = stl.mine(tpl, sig, grid=8)
    assert all(v.dtype == torch.float32 for v in p.values())
    assert bool(tpl.holds(sig, p, closed=True).all())
    tpl = stl.operational_range(count=2)
    sig = client_traces(tpl, seed=8)
    p0, p1 = stl.mine(tpl, sig), stl.mine(tpl, sig, margin=0.1)
    torch.testing.assert_close(p1["a0"], p0["a0"] + 0.1)
    torch.testing.assert_close(p1["b0"], p0["b0"] - 0.1)
    torch.testing.assert_close(tpl.robustness(sig, p1).amin(1), torch.full((6,), 0.1, dtype=torch.float64))


# --- FedSTL Example 1 (worked example; spec §2: the paper's sign is wrong) ------------------------
X1 = torch.tensor([0.25, 0.25, 0.5, 0.6, 0.75], dtype=torch.float64)
X2 = torch.tensor([20.0, 18, 16, 14, 12], dtype=torch.float64)
EXAMPLE = "always[0:4]((x1 >= 0.75) -> (x2 >= alpha))"  # □_[0,5) with a closed integer window


@pytest.mark.parametrize(("alpha", "rho"), [(10.0, 2.0), (12.0, 0.0), (13.0, 0.0), (11.5, 0.5)])
def test_worked_example_robustness(alpha: float, rho: float) -> None:
    f = stl.parse(EXAMPLE)
    out = stl.robustness(f, {"x1": X1[None], "x2": X2[None]}, {"alpha": alpha})
    assert out.shape == (1, 1) and float(out) == rho


def test_worked_example_mining_gives_alpha_12() -> None:
    tpl = stl.Template.from_formula(EXAMPLE, name="example1")
    sig = {"x1": X1[None, None], "x2": X2[None, None]}
    p = stl.mine(tpl, sig)
    assert float(p["alpha"]) == pytest.approx(12.0, abs=1e-9)
    assert float(tpl.robustness(sig, p)) == pytest.approx(0.0, abs=1e-9)
    assert bool(tpl.holds(sig, p, closed=True).all())
    # α slightly above 12 violates the Boolean semantics (antecedent holds at t = 4) but ρ stays 0
    assert not bool(tpl.holds(sig, {"alpha": 12.001}).any())
    assert float(tpl.robustness(sig, {"alpha": 12.001})) == 0.0


# --- instantiation and bands ------------------------------------------------------------------------
def test_instantiate_round_trips_and_matches_template_robustness() -> None:
    tpl = stl.nested_intra_task(count=2, width=3)
    sig = client_traces(tpl, clients=3, seed=9)
    p = stl.mine(tpl, sig, grid=6)
    formulas = stl.instantiate_clients(tpl, p)
    assert len(formulas) == 3
    rho = tpl.robustness(sig, p)
    for c, f in enumerate(formulas):
        assert not f.parameters() and stl.parse(str(f)) == f
        torch.testing.assert_close(stl.robustness(f, {k: v[c] for k, v in sig.items()})[:, 0], rho[c])
    f0 = stl.instantiate(tpl, {k: float(v[0]) for k, v in p.items()})
    assert f0 == formulas[0]
    with pytest.raises(KeyError, match="missing parameter"):
        stl.instantiate(tpl, {"a0": 1.0})


def test_range_band_projection_satisfies_the_property() -> None:
    tpl = stl.operational_range(count=12, width=2)
    sig = client_traces(tpl, seed=10)
    p = stl.mine(tpl, sig)
    lower, upper = stl.range_band(tpl, p)
    assert lower.shape == upper.shape == (6, 24)
    torch.testing.assert_close(upper[:, 0], p["a0"])
    torch.testing.assert_close(lower[:, 23], p["b11"])
    y = 3 * torch.randn(6, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    projected = torch.clamp(y, lower[:, None], upper[:, None])
    assert bool(tpl.holds(projected, p).all())
    assert not bool(tpl.holds(y, p).all())
    with pytest.raises(ValueError, match="always-window"):
        stl.range_band(stl.existence(count=2), {"a0": 1.0, "b0": 0.0, "a1": 1.0, "b1": 0.0})


def test_template_registry_and_input_errors() -> None:
    assert stl.get_template(1).name == "operational_range"
    assert stl.get_template(7, count=2).params == ("a0", "a1")
    with pytest.raises(KeyError, match="unknown template"):
        stl.get_template(8)
    tpl = stl.intra_task(count=2)
    with pytest.raises(ValueError, match="pass a dict"):
        stl.mine(tpl, torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"\(clients, samples, T\)"):
        stl.mine(stl.operational_range(count=2), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="needs 4"):
        stl.mine(stl.operational_range(count=2), torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="no closed form"):
        stl.mine(stl.until_template(), torch.zeros(2, 3, 10), method="closed")
    custom = stl.Template.from_formula("always[0:2](x <= a) and eventually[0:3](x >= b) and (x > -5)")
    assert len(custom.conjuncts) == 2


@pytest.mark.parametrize("name", list(stl.TEMPLATES))
def test_conjunct_wise_evaluation_equals_whole_formula(name: str) -> None:
    tpl = stl.get_template(name, count=3)
    sig = client_traces(tpl, clients=3, seed=11)
    gen = torch.Generator().manual_seed(0)
    params = {p: torch.randn(3, generator=gen, dtype=torch.float64) for p in tpl.params}
    par = {p: v[:, None] for p, v in params.items()}
    full = {n: v[..., : tpl.length] for n, v in sig.items()}
    torch.testing.assert_close(tpl.robustness(sig, params), stl.robustness(tpl.formula, full, par)[..., 0])
    torch.testing.assert_close(tpl.violation(sig, params), stl.violation(tpl.formula, full, par)[..., 0])
    assert torch.equal(tpl.holds(sig, params), stl.holds(tpl.formula, full, par)[..., 0])
