"""Robustness, violation degree and Boolean semantics of rules.stl against rtamt and brute force."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from rules import stl
from rules.stl.generate import ALL_OPS, random_formula
from rules.stl.syntax import (
    Always,
    And,
    Eventually,
    Formula,
    Implies,
    Not,
    Or,
    Predicate,
    Release,
    Until,
)

rtamt = pytest.importorskip("rtamt")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def rtamt_eval(formula: Formula, trace: dict[str, np.ndarray]) -> np.ndarray:
    """rtamt's offline discrete-time robustness at every sample (dict input form)."""
    spec = rtamt.StlDiscreteTimeSpecification()
    for name in formula.signals():
        spec.declare_var(name, "float")
    spec.spec = str(formula)
    spec.parse()
    n = len(next(iter(trace.values())))
    data = {"time": list(range(n))}
    data.update({k: [float(v) for v in trace[k]] for k in formula.signals()})
    return np.array([v for _, v in spec.evaluate(data)], dtype=np.float64)


# --- brute force: literal per-time-point definitions (Def. 5, Eq. 9, Def. 4) ---------------------
def brute(f: Formula, x: dict[str, np.ndarray], t: int, mode: str, strict: bool = True) -> float:
    """mode 'rho' (Donzé–Maler), 'g' (LogiCP Eq. 9 on an NNF formula) or 'bool' (1.0/0.0);
    until's left operand ranges over [t, t') (strict) or [t, t'] (inclusive)."""
    if mode == "g":  # (disjunctive reducer, its identity), (conjunctive reducer, its identity)
        (dis, dis_id), (con, con_id) = (min, math.inf), (max, 0.0)
    else:
        (dis, dis_id), (con, con_id) = (max, -math.inf), (min, math.inf)

    def rec(g: Formula, u: int) -> float:
        return brute(g, x, u, mode, strict)

    if isinstance(f, Predicate):
        v = x[f.signal][t] - (x[f.minus][t] if f.minus else 0.0)
        c = f.threshold
        if mode == "rho":
            return v - c if f.op in (">", ">=") else c - v
        if mode == "g":
            return max(0.0, c - v) if f.op in (">", ">=") else max(0.0, v - c)
        return float({"<": v < c, "<=": v <= c, ">": v > c, ">=": v >= c}[f.op])
    if isinstance(f, Not):
        assert mode != "g"
        r = rec(f.child, t)
        return -r if mode == "rho" else 1.0 - r
    if isinstance(f, Implies):
        return rec(Or((Not(f.left), f.right)), t)
    if isinstance(f, And):
        return con(rec(c, t) for c in f.operands)
    if isinstance(f, Or):
        return dis(rec(c, t) for c in f.operands)
    if isinstance(f, Always):
        return con(rec(f.child, t + k) for k in range(f.lo, f.hi + 1))
    if isinstance(f, Eventually):
        return dis(rec(f.child, t + k) for k in range(f.lo, f.hi + 1))
    last = (lambda k: k) if strict else (lambda k: k + 1)
    if isinstance(f, Until):  # sup_t' min(φ2(t'), inf_{t''} φ1(t''))  (g: inf / max / sup)
        return dis(con(rec(f.right, t + k), con((rec(f.left, t + j) for j in range(last(k))),
                                                default=con_id))
                   for k in range(f.lo, f.hi + 1))
    if isinstance(f, Release):
        return con(dis(rec(f.right, t + k), dis((rec(f.left, t + j) for j in range(last(k))),
                                                default=dis_id))
                   for k in range(f.lo, f.hi + 1))
    raise TypeError(f)


def _random_traces(rng: np.random.Generator, names: tuple[str, ...], batch: int, length: int
                   ) -> dict[str, np.ndarray]:
    return {n: rng.normal(size=(batch, length)).round(3) for n in names}


# --- rtamt equality -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_robustness_equals_rtamt_on_random_formulas(seed: int) -> None:
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(60):
        f = random_formula(rng, signals=("x", "y"), depth=4, max_window=3)
        length = f.horizon + int(rng.integers(2, 6))  # rtamt fails on one-sample traces
        traces = _random_traces(rng, ("x", "y"), 2, length)
        sig = {k: torch.from_numpy(v) for k, v in traces.items()}
        valid = stl.robustness(f, sig).numpy()
        trunc = stl.robustness(f, sig, boundary="truncate").numpy()
        assert valid.shape == (2, length - f.horizon) and trunc.shape == (2, length)
        for b in range(2):
            ref = rtamt_eval(f, {k: v[b] for k, v in traces.items()})
            np.testing.assert_allclose(valid[b], ref[: length - f.horizon], rtol=0, atol=1e-12,
                                       err_msg=str(f))
            np.testing.assert_allclose(trunc[b], ref, rtol=0, atol=1e-12, err_msg=str(f))
            checked += 1
    assert checked == 120


@pytest.mark.parametrize(
    "text",
    [
        "always[0:5](x >= 0.3)",
        "eventually[2:4](x - y > 0.5)",
        "(x < 0.4) until[1:2] (x < -0.1)",
        "(x > -1) until[0:3] (always[1:2](y >= 0) and eventually[0:2](x < 0))",
        "always[0:3](eventually[1:2]((x >= 0) -> ((y < 0.2) until[0:2] (x - y > 0))))",
        "not(always[0:2](x > 0) or eventually[1:3](not(y <= 0.1)))",
    ],
)
def test_robustness_equals_rtamt_on_named_formulas(text: str) -> None:
    f = stl.parse(text)
    rng = np.random.default_rng(7)
    traces = _random_traces(rng, f.signals(), 4, 20)
    out = stl.robustness(f, {k: torch.from_numpy(v) for k, v in traces.items()}).numpy()
    for b in range(4):
        ref = rtamt_eval(f, {k: v[b] for k, v in traces.items()})
        np.testing.assert_allclose(out[b], ref[: 20 - f.horizon], rtol=0, atol=1e-12)


def test_parameters_bound_at_evaluation_match_constants() -> None:
    f = stl.parse("(x < a) until[1:2] (x < b)")
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.normal(size=(3, 5, 12)))
    a = torch.tensor([0.1, 0.5, -0.2], dtype=torch.float64)
    out = stl.robustness(f, {"x": x}, {"a": a[:, None], "b": -0.3})  # one a per row of the batch
    assert out.shape == (3, 5, 10)
    for i in range(3):
        g = f.bind({"a": float(a[i]), "b": -0.3})
        torch.testing.assert_close(out[i], stl.robustness(g, x[i]), rtol=0, atol=0)
        ref = rtamt_eval(g, {"x": x[i, 0].numpy()})
        np.testing.assert_allclose(out[i, 0].numpy(), ref[:10], atol=1e-12)


# --- brute force, release, violation degree, Boolean semantics ----------------------------------
@pytest.mark.parametrize(("seed", "until"), [(0, "strict"), (1, "strict"), (2, "inclusive")])
def test_robustness_violation_holds_match_brute_force(seed: int, until: str) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(40):
        f = random_formula(rng, signals=("x", "y"), depth=3, max_window=3, ops=ALL_OPS)
        length = f.horizon + 3
        traces = _random_traces(rng, ("x", "y"), 1, length)
        x = {k: v[0] for k, v in traces.items()}
        sig = {k: torch.from_numpy(v) for k, v in traces.items()}
        rho = stl.robustness(f, sig, until=until)[0].numpy()
        g = stl.violation(f, sig, until=until)[0].numpy()
        ok = stl.holds(f, sig, until=until)[0].numpy()
        nnf = f.nnf()
        strict = until == "strict"
        for t in range(length - f.horizon):
            assert rho[t] == pytest.approx(brute(f, x, t, "rho", strict), abs=1e-12)
            assert g[t] == pytest.approx(brute(nnf, x, t, "g", strict), abs=1e-12)
            assert ok[t] == bool(brute(f, x, t, "bool", strict))


def test_until_conventions_differ_only_in_the_left_operand_at_t_prime() -> None:
    f = stl.parse("(x > 0.5) until[0:0] (x > -0.3)")
    x = torch.tensor([[0.8, -1.0]], dtype=torch.float64)
    # strict (rtamt): left over an empty range -> ρ = ρ_right(t); inclusive: min with ρ_left(t)
    torch.testing.assert_close(stl.robustness(f, x), torch.tensor([[1.1, -0.7]], dtype=torch.float64))
    torch.testing.assert_close(stl.robustness(f, x, until="inclusive"),
                               torch.tensor([[0.3, -1.5]], dtype=torch.float64))
    np.testing.assert_allclose(rtamt_eval(f, {"x": x[0].numpy()}), [1.1, -0.7], atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_violation_is_relu_of_minus_robustness_and_zero_iff_satisfied(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    for _ in range(50):
        f = random_formula(rng, signals=("x", "y"), depth=4, max_window=4, ops=ALL_OPS)
        traces = _random_traces(rng, ("x", "y"), 8, f.horizon + 6)
        sig = {k: torch.from_numpy(v) for k, v in traces.items()}
        for boundary, until in (("valid", "strict"), ("truncate", "strict"), ("valid", "inclusive")):
            rho = stl.robustness(f, sig, boundary=boundary, until=until)
            g = stl.violation(f, sig, boundary=boundary, until=until)
            torch.testing.assert_close(g, torch.relu(-rho), rtol=0, atol=1e-12)
            torch.testing.assert_close(stl.robustness(f.nnf(), sig, boundary=boundary, until=until), rho,
                                       rtol=0, atol=1e-12)
            sat = stl.holds(f, sig, boundary=boundary, until=until)
            nonzero = rho != 0
            assert torch.equal((g == 0)[nonzero], sat[nonzero])
            assert torch.equal((rho > 0)[nonzero], sat[nonzero])


def test_violation_uses_nnf_not_the_papers_negation_rule() -> None:
    f = stl.parse("not(x >= 1)")
    x = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    # Eq. 9 literally (g(¬φ) = g(φ)) would give [1, 0]; the NNF x < 1 gives [0, 1].
    assert stl.violation(f, {"x": x}).tolist() == [[0.0, 1.0]]
    assert stl.r_stl(f, {"x": x}).tolist() == [0.5]


def test_closed_reading_of_strict_comparisons() -> None:
    f = stl.parse("always[0:1](x < 2) and (y > 0)")
    x = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 5.0]])
    sig = {"x": x[0], "y": x[1]}
    assert not bool(stl.holds(f, sig)[0, 0])
    assert bool(stl.holds(f, sig, closed=True)[0, 0])


# --- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "always[0:3](x >= 0.2)",
        "eventually[1:4](x - y > 0)",
        "(x < 0.5) until[1:3] (y > -0.2)",
        "always[0:2](eventually[0:2]((x >= 0) -> (y <= 0.3)))",
        "not((x > 0) release[0:2] (y < 0.1))",
    ],
)
def test_gradcheck(text: str) -> None:
    f = stl.parse(text)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 12, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(3, 12, dtype=torch.float64, generator=gen, requires_grad=True)
    names = f.signals()

    def fn(*tensors: torch.Tensor) -> torch.Tensor:
        return stl.robustness(f, dict(zip(names, tensors)))

    args = tuple({"x": x, "y": y}[n] for n in names)
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-8)
    assert torch.autograd.gradcheck(lambda *a: stl.violation(f, dict(zip(names, a))), args, eps=1e-6, atol=1e-8)


def test_gradient_signs_and_parameter_gradients() -> None:
    x = torch.tensor([[0.5, -0.3, 0.8, 0.1]], dtype=torch.float64, requires_grad=True)
    a = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)
    lower = stl.robustness(stl.parse("always[0:3](x >= a)"), {"x": x}, {"a": a})
    lower.sum().backward()
    # ρ = min_t x_t - a: +1 on the arg-min sample, 0 elsewhere; -1 w.r.t. the bound
    assert x.grad.tolist() == [[0.0, 1.0, 0.0, 0.0]] and float(a.grad) == -1.0
    x.grad = None
    upper = stl.robustness(stl.parse("always[0:3](x <= 1)"), {"x": x})
    upper.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, -1.0, 0.0]]
    # increasing the violating sample reduces the violation degree
    x.grad = None
    stl.violation(stl.parse("always[0:3](x >= 0)"), {"x": x}).sum().backward()
    assert x.grad.tolist() == [[0.0, -1.0, 0.0, 0.0]]


def test_finite_differences_float32_and_large_windows() -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4, 120, generator=gen)
    f = stl.parse("always[0:23](eventually[0:10](x >= 0.5))")  # max_pool1d path
    rho = stl.robustness(f, x)
    brute_vals = torch.stack([torch.stack([x[:, t + j : t + j + 11].amax(-1) for j in range(24)]).amin(0)
                              for t in range(120 - 33)], dim=-1) - 0.5
    torch.testing.assert_close(rho, brute_vals)
    xg = x.clone().requires_grad_(True)
    stl.robustness(f, xg).sum().backward()
    assert torch.isfinite(xg.grad).all() and (xg.grad >= 0).all() and xg.grad.sum() > 0


# --- input handling -------------------------------------------------------------------------------
def test_input_errors_are_clear() -> None:
    f = stl.parse("always[0:5](x - y >= a)")
    x = torch.zeros(2, 10)
    with pytest.raises(KeyError, match="missing signal"):
        stl.robustness(f, {"x": x}, {"a": 0.0})
    with pytest.raises(KeyError, match="unbound parameter"):
        stl.robustness(f, {"x": x, "y": x})
    with pytest.raises(ValueError, match="too short"):
        stl.robustness(f, {"x": x[:, :5], "y": x[:, :5]}, {"a": 0.0})
    with pytest.raises(ValueError, match="different lengths"):
        stl.robustness(f, {"x": x, "y": x[:, :9]}, {"a": 0.0})
    with pytest.raises(ValueError, match="does not broadcast"):
        stl.robustness(f, {"x": x, "y": x}, {"a": torch.zeros(3)})
    with pytest.raises(ValueError, match="pass a dict"):
        stl.robustness(f, x, {"a": 0.0})
    with pytest.raises(ValueError, match="boundary"):
        stl.robustness(f, {"x": x, "y": x}, {"a": 0.0}, boundary="pad")
    assert stl.robustness(stl.parse("x > 0"), np.ones((2, 3))).dtype == torch.float64
    assert stl.robustness(stl.parse("eventually[1:2](x > 0)"), x, boundary="truncate")[0, -1] == -math.inf
