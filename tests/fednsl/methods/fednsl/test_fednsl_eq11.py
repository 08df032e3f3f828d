"""The fixed Eq. 9–11 of issue 17 against independent numpy references: the posterior by enumeration over the
bodies, the KL with the same prior as the posterior, the per-cell scale, the L-BFGS fit, recalibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.messages import ScorerOptions
from fednsl.methods.fednsl.scorer import (
    Instances,
    fit_recalibration,
    fit_scorer,
    kl_prior,
    posterior_of,
    published_logits,
    recalibration_logits,
    reference_objective,
    scorer_objective,
)
from fednsl.tasks.rule_learning import Proposal

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_problem(seed: int = 0, M: int = 40):
    """Two triples (3 and 2 real bodies, padded to 4), M cells, random everything."""
    g = np.random.default_rng(seed)
    mask = np.zeros((2, 4), bool)
    mask[0, :3] = True
    mask[1, :2] = True
    log_t = np.where(mask, np.log(g.dirichlet(np.ones(4), size=2)), 0.0)
    counts = np.where(mask, g.integers(1, 20, size=(2, 4)), 0)
    tri = np.r_[np.zeros(M - M // 4, int), np.ones(M // 4, int)]
    phi = g.random((M, 4)) * mask[tri]
    y = (g.random(M) < 0.4).astype(float)
    w = g.normal(size=(2, 4)) * mask
    b = g.normal(size=2)
    rules = Proposal(
        torch.tensor([[0, 0, 1], [1, 1, 0]]),
        torch.zeros(2, 4, 3, dtype=torch.long),
        torch.tensor(log_t),
        torch.tensor(counts),
        torch.tensor(mask),
    )
    inst = Instances(torch.tensor(phi), torch.tensor(g.random(M)), torch.tensor(tri), torch.tensor(y))
    return rules, inst, w, b


def numpy_prior(rules: Proposal, source: str) -> np.ndarray:
    mask = rules.mask.numpy()
    if source == "renormalised":
        e = np.where(mask, np.exp(rules.log_prior.numpy()), 0.0)
    else:
        e = np.where(mask, rules.counts.numpy().astype(float), 0.0)
    return e / e.sum(1, keepdims=True)


def numpy_posterior(rules, inst, w, b, source: str, instances: str) -> tuple[np.ndarray, np.ndarray]:
    """q_t by enumeration: for each cell and each real body j, exp(½ y (w φ + b/J) + log p_j), normalised."""
    mask = rules.mask.numpy()
    p_post = numpy_prior(rules, "counts") if source == "counts" else np.where(mask, np.exp(rules.log_prior.numpy()), 0)
    T, J = mask.shape
    q = np.zeros((T, J))
    n = np.zeros(T)
    for i in range(len(inst)):
        yi = float(inst.y[i])
        if instances == "positive" and yi < 0.5:
            continue
        t = int(inst.tri[i])
        ys = 2 * yi - 1
        jt = mask[t].sum()
        scores = {
            j: math.exp(0.5 * ys * (w[t, j] * float(inst.phi[i, j]) + b[t] / jt)) * p_post[t, j]
            for j in range(J)
            if mask[t, j]
        }
        z = sum(scores.values())
        for j, v in scores.items():
            q[t, j] += v / z
        n[t] += 1
    return q / np.maximum(n, 1)[:, None], n


@pytest.mark.parametrize("source", ["renormalised", "counts"])
@pytest.mark.parametrize("instances", ["all", "positive"])
def test_posterior_by_enumeration(source: str, instances: str) -> None:
    rules, inst, w, b = random_problem(1)
    opts = ScorerOptions(prior_source=source, posterior_instances=instances)
    q, n = posterior_of(inst, rules, torch.tensor(w), torch.tensor(b), opts)
    q_ref, n_ref = numpy_posterior(rules, inst, w, b, source, instances)
    np.testing.assert_allclose(q.numpy(), q_ref, atol=1e-12)
    np.testing.assert_allclose(n.numpy(), n_ref)


@pytest.mark.parametrize("scale", ["per_cell", "per_triple"])
@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_objective_matches_numpy_bce_kl_and_l2(scale: str, direction: str) -> None:
    rules, inst, w, b = random_problem(2)
    lam, delta = 0.7, 0.01
    opts = ScorerOptions(kl_weight=lam, kl_scale=scale, kl_direction=direction, weight_decay=delta)
    u = torch.zeros(2, dtype=torch.float64)
    loss, bce, kl = scorer_objective(inst, rules, torch.tensor(w), u, torch.tensor(b), opts)
    phi, tri, y = inst.phi.numpy(), inst.tri.numpy(), inst.y.numpy()
    s = (phi * w[tri]).sum(1) + b[tri]
    bce_ref = np.mean(np.logaddexp(0, s) - y * s)
    q, n = numpy_posterior(rules, inst, w, b, "renormalised", "all")
    p = numpy_prior(rules, "renormalised")  # the same prior as the posterior's
    a, c = (q, p) if direction == "reverse" else (p, q)
    kl_t = np.array(
        [sum(a[t, j] * math.log(a[t, j] / c[t, j]) for j in range(4) if rules.mask[t, j]) for t in range(2)]
    )
    kl_ref = (kl_t * n).sum() / n.sum() if scale == "per_cell" else kl_t.mean()
    assert float(bce) == pytest.approx(bce_ref, rel=1e-10)
    assert float(kl) == pytest.approx(kl_ref, rel=1e-9)
    assert float(loss) == pytest.approx(bce_ref + lam * kl_ref + 0.5 * delta * (w**2).sum(), rel=1e-10)


def test_same_prior_in_posterior_and_kl_unless_mixed() -> None:
    """With zero evidence (w = 0) the posterior is the prior: KL 0 for renormalised and counts; the old mixed
    reading (log T_θ in Eq. 9, n_j/N in the KL) leaves a KL that no weight can remove."""
    rules, inst, _, b = random_problem(3)
    w0 = torch.zeros(2, 4, dtype=torch.float64)
    u = torch.zeros(2, dtype=torch.float64)
    for source in ("renormalised", "counts", "mixed"):
        opts = ScorerOptions(kl_weight=1.0, prior_source=source, weight_decay=0.0)
        _, _, kl = scorer_objective(inst, rules, w0, u, torch.tensor(b), opts)
        if source == "mixed":
            assert float(kl) > 1e-3
        else:
            assert float(kl) == pytest.approx(0.0, abs=1e-12)
            q, _ = posterior_of(inst, rules, w0, torch.tensor(b), opts)
            np.testing.assert_allclose(q.numpy(), kl_prior(rules, opts).numpy(), atol=1e-12)


def test_per_cell_kl_weights_triples_by_their_cells() -> None:
    """Duplicating every cell of triple 1 doubles its share in the per-cell KL, not in the per-triple one."""
    rules, inst, w, b = random_problem(4)
    sel = inst.tri == 1
    dup = Instances(
        torch.cat([inst.phi, inst.phi[sel]]),
        torch.cat([inst.passthrough, inst.passthrough[sel]]),
        torch.cat([inst.tri, inst.tri[sel]]),
        torch.cat([inst.y, inst.y[sel]]),
    )
    u = torch.zeros(2, dtype=torch.float64)
    args = (torch.tensor(w), u, torch.tensor(b))
    kl = {}
    for scale in ("per_cell", "per_triple"):
        opts = ScorerOptions(kl_weight=1.0, kl_scale=scale)
        kl[scale] = (
            float(scorer_objective(inst, rules, *args, opts)[2]),
            float(scorer_objective(dup, rules, *args, opts)[2]),
        )
    assert kl["per_triple"][0] == pytest.approx(kl["per_triple"][1], rel=1e-12)
    assert kl["per_cell"][0] != pytest.approx(kl["per_cell"][1], rel=1e-6)


def test_lbfgs_converges_and_beats_adam_on_the_same_objective() -> None:
    rules, inst, _, _ = random_problem(5, M=200)
    lb = ScorerOptions(kl_weight=0.5, steps=200, tol=1e-7)
    fit = fit_scorer(inst, rules, lb, torch.Generator().manual_seed(0))
    assert fit.converged and 0 < fit.iterations < 200
    w = fit.weights.double().requires_grad_(True)
    b = fit.bias.double().requires_grad_(True)
    loss, _, _ = scorer_objective(inst, rules, w, torch.zeros(2, dtype=torch.float64), b, lb)
    loss.backward()
    assert float(w.grad[rules.mask].abs().max()) < 1e-5 and float(b.grad.abs().max()) < 1e-5
    adam = ScorerOptions(kl_weight=0.5, steps=50, optimizer="adam", lr=0.05, weight_decay=0.0)
    fa = fit_scorer(inst, rules, adam, torch.Generator().manual_seed(0))
    la = scorer_objective(inst, rules, fa.weights.double(), fa.passthrough.double(), fa.bias.double(), lb)[0]
    assert float(loss.detach()) <= float(la) + 1e-9
    assert fa.iterations == 50 and not fa.converged


def test_pass_through_off_ignores_x_and_on_uses_it() -> None:
    rules, inst, _, _ = random_problem(6)
    shifted = Instances(inst.phi, inst.passthrough + 5.0, inst.tri, inst.y)
    for on, same in ((False, True), (True, False)):
        opts = ScorerOptions(pass_through=on, steps=30)
        a = fit_scorer(inst, rules, opts, torch.Generator().manual_seed(0))
        b = fit_scorer(shifted, rules, opts, torch.Generator().manual_seed(0))
        assert torch.allclose(a.weights, b.weights) == same


def _recal_problem(M: int = 600) -> tuple[Instances, np.ndarray, np.ndarray, np.ndarray]:
    g = np.random.default_rng(0)
    tri = np.r_[np.zeros(M // 2, int), np.ones(M - M // 2, int)]
    x = g.random(M)
    slope = np.where(tri == 0, 6.0, -4.0)
    y = (g.random(M) < 1 / (1 + np.exp(-(slope * x - 2)))).astype(float)
    phi = g.random((M, 4))  # ignored: the baseline zeroes φ
    inst = Instances(torch.tensor(phi), torch.tensor(x), torch.tensor(tri), torch.tensor(y))
    return inst, x, y, tri


@pytest.mark.parametrize("decay", [1e-5, 1e-2])
def test_recalibration_matches_sklearn_logistic_regression_with_the_scorers_weight_decay(decay: float) -> None:
    """Per triple: min mean-BCE + ½δu_t² is sklearn's Σ BCE + ½/C u² with C = 1/(δ·M) (M = all the client's
    cells, the intercept unpenalised); the pooled fit is one such regression over every cell."""
    sk = pytest.importorskip("sklearn.linear_model")
    inst, x, y, tri = _recal_problem()
    rules, _, _, _ = random_problem(0)
    rules3 = Proposal(
        torch.cat([rules.heads, rules.heads[:1]]),
        torch.cat([rules.bodies, rules.bodies[:1]]),
        torch.cat([rules.log_prior, rules.log_prior[:1]]),
        torch.cat([rules.counts, rules.counts[:1]]),
        torch.cat([rules.mask, rules.mask[:1]]),
    )
    opts = ScorerOptions(weight_decay=decay, steps=500, tol=1e-9, kl_weight=0.5)
    rec = fit_recalibration(inst, rules3, opts)
    assert rec.fitted.tolist() == [True, True, False]
    M = len(inst)
    for t in (0, 1):
        ref = sk.LogisticRegression(C=1.0 / (decay * M), tol=1e-12, max_iter=10_000)
        ref.fit(x[tri == t, None], y[tri == t])
        assert rec.slope[t].item() == pytest.approx(float(ref.coef_[0, 0]), rel=1e-4, abs=1e-4)
        assert rec.intercept[t].item() == pytest.approx(float(ref.intercept_[0]), rel=1e-4, abs=1e-4)
    ref = sk.LogisticRegression(C=1.0 / (decay * M), tol=1e-12, max_iter=10_000).fit(x[:, None], y)
    assert rec.pooled[0] == pytest.approx(float(ref.coef_[0, 0]), rel=1e-4, abs=1e-4)
    assert rec.pooled[1] == pytest.approx(float(ref.intercept_[0]), rel=1e-4, abs=1e-4)
    # the unfitted triple falls back to the pooled fit; published (u, b) are used as given
    probe = Instances(
        torch.zeros(2, 1), torch.tensor([0.2, 0.9], dtype=torch.float64), torch.tensor([2, 2]), torch.zeros(2)
    )
    np.testing.assert_allclose(rec.logits(probe).numpy(), rec.pooled[0] * np.array([0.2, 0.9]) + rec.pooled[1])
    got = recalibration_logits(probe, torch.tensor([0.0, 0.0, 3.0]), torch.tensor([0.0, 0.0, -1.0])).numpy()
    np.testing.assert_allclose(got, [3.0 * 0.2 - 1.0, 3.0 * 0.9 - 1.0])


def test_recalibration_is_the_scorer_fit_without_rules() -> None:
    """The baseline equals fit_scorer's own (u, b) when the rule set has no body at all (φ contributes nothing)."""
    inst, _, _, _ = _recal_problem(200)
    rules, _, _, _ = random_problem(0)
    empty = Proposal(rules.heads, rules.bodies, rules.log_prior, rules.counts, torch.zeros_like(rules.mask))
    opts = ScorerOptions(weight_decay=1e-3, steps=300, tol=1e-9, pass_through=True, kl_weight=0.0)
    ref = fit_scorer(inst, empty, opts, torch.Generator().manual_seed(3))
    rec = fit_recalibration(inst, rules, ScorerOptions(weight_decay=1e-3, steps=300, tol=1e-9))
    np.testing.assert_allclose(rec.slope.numpy(), ref.passthrough.numpy(), atol=1e-5)
    np.testing.assert_allclose(rec.intercept.numpy(), ref.bias.numpy(), atol=1e-5)


def test_published_logits_by_hand() -> None:
    rules, inst, w, b = random_problem(7)
    got = published_logits(inst, torch.tensor(w), torch.tensor(b)).numpy()
    ref = np.array(
        [sum(w[t, j] * float(inst.phi[i, j]) for j in range(4)) + b[t] for i, t in enumerate(inst.tri.tolist())]
    )
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_lbfgs_does_not_stop_early_on_a_small_triple() -> None:
    """A triple with 30 of 3000 cells: on the mean loss its gradients are ~1 % of the others' and a fixed
    tolerance used to stop the fit after a few iterations; the tolerance now applies to the summed loss."""
    g = np.random.default_rng(0)
    rules, _, _, _ = random_problem(8)
    M_big, M_small = 2970, 30
    tri = np.r_[np.zeros(M_big, int), np.ones(M_small, int)]
    phi = g.random((M_big + M_small, 4)) * rules.mask.numpy()[tri]
    y = (phi[:, 0] + 0.3 * g.random(len(tri)) > 0.7).astype(float)
    inst = Instances(torch.tensor(phi), torch.zeros(len(tri), dtype=torch.float64), torch.tensor(tri), torch.tensor(y))
    opts = ScorerOptions(kl_weight=0.1, steps=300, tol=1e-5)
    fit = fit_scorer(inst, rules, opts, torch.Generator().manual_seed(0))
    w = fit.weights.double().requires_grad_(True)
    b = fit.bias.double().requires_grad_(True)
    loss = scorer_objective(inst, rules, w, torch.zeros(2, dtype=torch.float64), b, opts)[0] * len(tri)
    loss.backward()
    assert fit.converged
    assert float(w.grad[1][rules.mask[1]].abs().max()) < 1e-3 and abs(float(b.grad[1])) < 1e-3


@pytest.mark.parametrize("source", ["renormalised", "counts", "mixed"])
@pytest.mark.parametrize("correction", [False, True])
@pytest.mark.parametrize("instances", ["all", "positive"])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_objective_equals_the_per_equation_one(
    source: str, correction: bool, instances: str, weighted: bool
) -> None:
    """The fit's objective (one φ·w product for the logits and Eq. 9, bias dropped from Eq. 9) against the loss
    built from posterior.py's functions: values and gradients in (w, u, b), with a third triple that has no body."""
    rules, inst, w, b = random_problem(9, M=60)
    pad = lambda x, v: torch.cat([x, torch.full((1, *x.shape[1:]), v, dtype=x.dtype)])  # noqa: E731
    rules = Proposal(
        pad(rules.heads, 2),
        pad(rules.bodies, 0),
        pad(rules.log_prior, 0.0),
        pad(rules.counts, 0),
        pad(rules.mask, False),
    )
    tri = inst.tri.clone()
    tri[::7] = 2  # every 7th cell belongs to the body-less triple
    g = np.random.default_rng(1)
    weight = torch.tensor(g.integers(1, 4, len(tri)), dtype=torch.float64) if weighted else None
    inst = Instances(inst.phi * rules.mask[tri], inst.passthrough, tri, inst.y, weight)
    for scale, direction, through in (("per_cell", "reverse", False), ("per_triple", "forward", True)):
        opts = ScorerOptions(
            kl_weight=0.7,
            prior_source=source,
            count_correction=correction,  # type: ignore[arg-type]
            posterior_instances=instances,
            kl_scale=scale,
            kl_direction=direction,  # type: ignore[arg-type]
            pass_through=through,
            weight_decay=0.01,
        )
        grads = []
        for objective in (
            lambda *a: scorer_objective(inst, rules, *a, opts)[0],
            lambda *a: reference_objective(inst, rules, *a, opts),
        ):
            params = [
                torch.tensor(np.r_[w, np.zeros((1, 4))]).requires_grad_(True),
                torch.full((3,), 0.3, dtype=torch.float64, requires_grad=True),
                torch.tensor(np.r_[b, 0.5]).requires_grad_(True),
            ]
            loss = objective(*params)
            got = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
            grads.append((float(loss.detach()), *got))
        (fused, *gf), (ref, *gr) = grads
        assert fused == pytest.approx(ref, rel=1e-12)
        for a, r in zip(gf, gr):
            np.testing.assert_allclose(a.numpy(), r.numpy(), atol=1e-12)
