"""FedNSL scorer/posterior math against hand-computed values (paper Eq. 8–11, spec §8.1–8.4)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.evaluation import (
    PRF,
    best_threshold,
    document_logic_counts,
    logic_counts,
    logic_from_counts,
    prf_counts,
)
from fednsl.methods.fednsl.messages import ScorerOptions
from fednsl.methods.fednsl.scorer import (
    FittedScorer,
    Instances,
    TransferScorer,
    fit_scorer,
    fit_transfer,
    posterior_of,
    predict_logits,
    transfer_features,
)
from fednsl.tasks.rule_learning import Proposal
from rules.measures import logic_accuracy
from rules.posterior import (
    instance_log_posterior,
    kl_divergence,
    prior_distribution,
    score_h,
    triple_posterior,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


PRIOR = [0.5, 0.3, 0.2]
COUNTS = [25, 15, 10]
W = [2.0, -1.0, 4.0]
B = 0.6


def one_triple(pad_to: int = 4) -> dict[str, torch.Tensor]:
    """One triple with 3 real bodies padded to ``pad_to`` (the padded slot must never matter)."""
    J = pad_to
    mask = torch.zeros(1, J, dtype=torch.bool)
    mask[0, :3] = True
    lp = torch.zeros(1, J, dtype=torch.float64)
    lp[0, :3] = torch.log(torch.tensor(PRIOR, dtype=torch.float64))
    counts = torch.zeros(1, J, dtype=torch.long)
    counts[0, :3] = torch.tensor(COUNTS)
    w = torch.zeros(1, J, dtype=torch.float64)
    w[0, :3] = torch.tensor(W, dtype=torch.float64)
    w[0, 3:] = 99.0  # garbage in the padded slot
    return {"mask": mask, "log_prior": lp, "counts": counts, "w": w, "b": torch.tensor([B], dtype=torch.float64)}


def hand_posterior(phi: list[float], y: int, correction: bool) -> list[float]:
    """Eq. 9–10 written out with plain floats."""
    hs = []
    for j in range(3):
        c = COUNTS[j] if correction else 1.0
        h = 0.5 * y * (W[j] * phi[j] / c + B / 3) + math.log(PRIOR[j])
        hs.append(h + (math.log(COUNTS[j]) if correction else 0.0))
    z = sum(math.exp(h) for h in hs)
    return [math.exp(h) / z for h in hs]


@pytest.mark.parametrize("correction", [False, True])
@pytest.mark.parametrize("y", [1, -1])
def test_instance_posterior_matches_hand_computation(correction: bool, y: int) -> None:
    d = one_triple()
    phi = torch.tensor([[1.0, 0.5, 0.0, 0.7]], dtype=torch.float64)
    tri = torch.tensor([0])
    h = score_h(phi, tri, torch.tensor([float(y)]), d["w"], d["b"], d["log_prior"], d["counts"], d["mask"], correction)
    log_q = instance_log_posterior(h, tri, d["counts"], d["mask"], correction)
    q = log_q.exp()[0]
    np.testing.assert_allclose(q[:3].numpy(), hand_posterior([1.0, 0.5, 0.0], y, correction), rtol=1e-12)
    assert q[3] == 0.0  # padded body


def test_bias_cancels_and_zero_evidence_gives_prior() -> None:
    d = one_triple()
    phi = torch.zeros(1, 4, dtype=torch.float64)
    tri = torch.tensor([0])
    for b in (0.0, 5.0):
        h = score_h(
            phi,
            tri,
            torch.tensor([1.0]),
            d["w"],
            torch.tensor([b], dtype=torch.float64),
            d["log_prior"],
            d["counts"],
            d["mask"],
            False,
        )
        q = instance_log_posterior(h, tri, d["counts"], d["mask"], False).exp()[0, :3]
        np.testing.assert_allclose(q.numpy(), PRIOR, rtol=1e-12)


def test_triple_posterior_is_weighted_mean_of_instances() -> None:
    d = one_triple()
    phi = torch.tensor([[1.0, 0.5, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    tri = torch.tensor([0, 0])
    y = torch.tensor([1.0, -1.0])
    h = score_h(phi, tri, y, d["w"], d["b"], d["log_prior"], d["counts"], d["mask"], False)
    log_q = instance_log_posterior(h, tri, d["counts"], d["mask"], False)
    q, n = triple_posterior(log_q, tri, 2, torch.tensor([1.0, 3.0], dtype=torch.float64))
    q1 = np.array(hand_posterior([1.0, 0.5, 0.0], 1, False))
    q2 = np.array(hand_posterior([0.0, 1.0, 1.0], -1, False))
    np.testing.assert_allclose(q[0, :3].numpy(), (q1 + 3 * q2) / 4, rtol=1e-12)
    assert n.tolist() == [4.0, 0.0]
    assert q[1].abs().sum() == 0  # triple without instances


def test_prior_sources() -> None:
    d = one_triple()
    p = prior_distribution(d["log_prior"], d["counts"], d["mask"], "counts")
    np.testing.assert_allclose(p[0].numpy(), [0.5, 0.3, 0.2, 0.0])
    lp = d["log_prior"].clone()
    lp[0, :3] = torch.log(torch.tensor([0.2, 0.1, 0.1], dtype=torch.float64))  # T_θ mass outside the J bodies
    p = prior_distribution(lp, d["counts"], d["mask"], "renormalised")
    np.testing.assert_allclose(p[0].numpy(), [0.5, 0.25, 0.25, 0.0])


def test_kl_both_directions_by_hand() -> None:
    mask = torch.tensor([[True, True, True, False]])
    q = torch.tensor([[0.6, 0.4, 0.0, 0.0]], dtype=torch.float64)
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=torch.float64)
    rev = 0.6 * math.log(0.6 / 0.5) + 0.4 * math.log(0.4 / 0.3)  # 0·log 0 = 0
    assert kl_divergence(q, p, mask, "reverse").item() == pytest.approx(rev, rel=1e-12)
    fwd = kl_divergence(q, p, mask, "forward").item()
    # forward KL(p‖q) with q(j)=0 where p(j)>0 is +inf; eps-guarded, it is large and finite
    assert fwd > 5.0 and math.isfinite(fwd)
    q2 = torch.tensor([[0.6, 0.3, 0.1, 0.0]], dtype=torch.float64)
    fwd2 = 0.5 * math.log(0.5 / 0.6) + 0.3 * math.log(0.3 / 0.3) + 0.2 * math.log(0.2 / 0.1)
    assert kl_divergence(q2, p, mask, "forward").item() == pytest.approx(fwd2, rel=1e-12)
    assert kl_divergence(p, p, mask, "reverse").item() == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("direction", ["reverse", "forward"])
@pytest.mark.parametrize("correction", [False, True])
def test_kl_gradient_autograd_matches_finite_differences(direction: str, correction: bool) -> None:
    d = one_triple()
    gen = torch.Generator().manual_seed(0)
    M = 7
    phi = torch.rand(M, 4, generator=gen, dtype=torch.float64)
    phi[:, 3] = 0.0
    tri = torch.zeros(M, dtype=torch.long)
    y = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0])
    p = prior_distribution(d["log_prior"], d["counts"], d["mask"], "counts")

    def kl_of(w: torch.Tensor) -> torch.Tensor:
        h = score_h(phi, tri, y, w, d["b"], d["log_prior"], d["counts"], d["mask"], correction)
        q, _ = triple_posterior(instance_log_posterior(h, tri, d["counts"], d["mask"], correction), tri, 1)
        return kl_divergence(q, p, d["mask"], direction).sum()

    w = d["w"].clone()
    w[0, 3] = 0.0
    w.requires_grad_(True)
    kl_of(w).backward()
    grad = w.grad.clone()
    eps = 1e-6
    num = torch.zeros_like(grad)
    for j in range(4):
        e = torch.zeros_like(grad)
        e[0, j] = eps
        num[0, j] = (kl_of(w.detach() + e) - kl_of(w.detach() - e)) / (2 * eps)
    np.testing.assert_allclose(grad.numpy(), num.numpy(), atol=1e-8, rtol=1e-6)
    assert grad[0, 3] == 0.0


def rule_set(T: int = 2, J: int = 3) -> Proposal:
    mask = torch.ones(T, J, dtype=torch.bool)
    mask[1, 2] = False
    counts = torch.tensor([[30, 15, 5], [40, 10, 0]])
    lp = torch.log(counts.double().clamp_min(1) / 50) * mask
    bodies = torch.zeros(T, J, 3, dtype=torch.long)
    return Proposal(torch.tensor([[0, 0, 1], [1, 1, 0]]), bodies, lp, counts, mask)


def synthetic_instances(seed: int = 0, M: int = 400) -> Instances:
    g = torch.Generator().manual_seed(seed)
    tri = torch.randint(0, 2, (M,), generator=g)
    phi = torch.rand(M, 3, generator=g)
    phi[tri == 1, 2] = 0.0
    y = ((phi[:, 0] > 0.6) | (torch.rand(M, generator=g) < 0.05)).float()  # body 0 is the true rule
    return Instances(phi, torch.rand(M, generator=g) * 0.2, tri, y)


def test_fit_reduces_loss_and_kl_weight_pulls_posterior_to_prior() -> None:
    rules = rule_set()
    inst = synthetic_instances()
    kls = []
    for lam in (0.0, 1.0, 100.0):
        opts = ScorerOptions(kl_weight=lam, steps=120, lr=0.05)
        fit = fit_scorer(inst, rules, opts, torch.Generator().manual_seed(1))
        if lam == 0.0:
            assert fit.history["bce"][-1] < fit.history["bce"][0]
        q, n = posterior_of(inst, rules, fit.weights.double(), fit.bias.double(), opts)
        prior = rules.prior(opts.prior_source)  # the KL target is the posterior's own prior (issue 17)
        kls.append(float(kl_divergence(q, prior, rules.mask).sum()))
        assert fit.weights[1, 2] == 0.0  # masked body weight stays 0
    assert kls[0] > kls[1] > kls[2]
    # without KL the posterior favours the true rule (body 0 of triple 0) over its prior
    fit = fit_scorer(inst, rules, ScorerOptions(kl_weight=0.0, steps=120), torch.Generator().manual_seed(1))
    q, _ = posterior_of(inst, rules, fit.weights.double(), fit.bias.double(), ScorerOptions())
    assert q[0, 0] > rules.prior("renormalised")[0, 0]


def test_fit_is_seeded_and_transfer_predicts() -> None:
    rules = rule_set()
    inst = synthetic_instances()
    a = fit_scorer(inst, rules, ScorerOptions(steps=20), torch.Generator().manual_seed(5))
    b = fit_scorer(inst, rules, ScorerOptions(steps=20), torch.Generator().manual_seed(5))
    assert torch.equal(a.weights, b.weights) and torch.equal(a.bias, b.bias)
    opts = ScorerOptions(transfer_top=2, prior_source="counts", pass_through=True)  # the old switches still work
    tr = fit_transfer(inst, rules, opts)
    assert tr.kappa + tr.kappa_top > 0  # rule evidence is positively related to the label
    a.fitted = torch.tensor([True, False])
    logits = predict_logits(inst, rules, a, tr, opts)
    prior = rules.prior("counts")
    f = (inst.phi.double() * prior[inst.tri]).sum(-1)
    top = torch.tensor([[0, 1], [0, 1]])  # the two most probable bodies of each triple (k = 2 below is > J_1)
    best = torch.stack([inst.phi.double()[i, top[int(t)]].max() for i, t in enumerate(inst.tri)])
    expect_transfer = tr.kappa * f + tr.kappa_top * best + tr.kappa_pass * inst.passthrough.double() + tr.beta
    sel = inst.tri == 1
    np.testing.assert_allclose(logits[sel].numpy(), expect_transfer[sel].numpy(), rtol=1e-10)
    s0 = (
        (inst.phi.double() * a.weights.double()[inst.tri]).sum(-1)
        + a.bias.double()[inst.tri]
        + a.passthrough.double()[inst.tri] * inst.passthrough.double()
    )
    np.testing.assert_allclose(logits[~sel].numpy(), s0[~sel].numpy(), rtol=1e-10)


def test_transfer_keeps_the_backbone_value_without_pass_through() -> None:
    """With ``pass_through: false`` the transfer scorer still fits κ_u·x_r: labels that follow x_r alone, bodies
    that are noise, give κ_u > 0 and transfer logits that rank the cells as x_r does (issue 33)."""
    rules = rule_set()
    g = torch.Generator().manual_seed(0)
    M = 400
    x = torch.rand(M, generator=g, dtype=torch.float64)
    y = (torch.rand(M, generator=g, dtype=torch.float64) < torch.sigmoid(8 * x - 4)).double()
    phi = torch.rand(M, rules.num_bodies, generator=g, dtype=torch.float64) * rules.mask[0]
    inst = Instances(phi, x, torch.zeros(M, dtype=torch.long), y)
    opts = ScorerOptions(pass_through=False)
    tr = fit_transfer(inst, rules, opts)
    assert tr.kappa_pass > 2.0
    logits = predict_logits(inst, rules, None, tr, opts)
    f = transfer_features(inst, rules.prior("renormalised"), opts.transfer_top)
    expect = tr.kappa * f[:, 0] + tr.kappa_top * f[:, 1] + tr.kappa_pass * x + tr.beta
    np.testing.assert_allclose(logits.numpy(), expect.numpy(), rtol=1e-10)


def test_empty_instances_fit_without_error() -> None:
    rules = rule_set()
    empty = Instances(torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0))
    fit = fit_scorer(empty, rules, ScorerOptions(), torch.Generator().manual_seed(0))
    assert not fit.fitted.any()
    assert fit_transfer(empty, rules, ScorerOptions()) == TransferScorer()
    assert isinstance(fit, FittedScorer)


# -- evaluation ------------------------------------------------------------------------------------------


def test_best_threshold_maximises_f1_by_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = rng.random(30).round(2)
        y = rng.random(30) < 0.3
        total = int(y.sum()) + int(rng.integers(0, 3))
        th = best_threshold(s, y, total)
        if not y.any():
            assert th == math.inf
            continue
        best = max(prf_counts(s >= c, y, np.zeros(30, bool), total).f1 for c in np.unique(s))
        assert prf_counts(s >= th, y, np.zeros(30, bool), total).f1 == pytest.approx(best)


def test_prf_and_ign_f1_by_hand() -> None:
    pred = np.array([1, 1, 1, 0, 1], bool)
    gold = np.array([1, 1, 0, 1, 0], bool)
    in_train = np.array([1, 0, 0, 0, 0], bool)
    c = prf_counts(pred, gold, in_train, total_gold=4)  # one gold fact outside the candidate cells
    assert (c.tp, c.n_pred, c.n_gold, c.tp_in_train) == (2, 4, 4, 1)
    assert c.f1 == pytest.approx(2 * 0.5 * 0.5 / 1.0)
    p_ign, r = (2 - 1) / (4 - 1), 2 / 4
    assert c.ign_f1 == pytest.approx(2 * p_ign * r / (p_ign + r))
    assert (c + PRF(1, 1, 1, 0)).tp == 3


def test_logic_counts_match_rules_measures_and_masking() -> None:
    rng = np.random.default_rng(3)
    R = 3
    preds = [rng.random((n, n, R)) < 0.3 for n in (4, 6, 5)]
    rules = [(0, (1,)), (1, (0, 2 + R)), (2, (R + 1, 0, 2))]
    ref = logic_accuracy(preds, rules)
    body, correct = logic_counts(preds, rules, [np.ones(p.shape[:2], bool) for p in preds])
    np.testing.assert_array_equal(body, ref.body_counts)
    np.testing.assert_array_equal(correct, ref.correct_counts)
    # masking: only the pair (0, 1) of a 2-entity document counts
    p = np.zeros((2, 2, R), bool)
    p[0, 1, 1] = True  # body of rule 0 holds at (0, 1)
    p[1, 0, 1] = True  # ... and at (1, 0), outside the mask
    p[0, 1, 0] = True  # head holds at (0, 1)
    mask = np.array([[False, True], [False, False]])
    body, correct = logic_counts([p], [(0, (1,))], [mask])
    assert body.tolist() == [1] and correct.tolist() == [1]
    assert logic_from_counts(np.array([0, 2, 4]), np.array([0, 1, 4])) == pytest.approx(0.75)
    assert math.isnan(logic_from_counts(np.zeros(2), np.zeros(2)))


def _brute_logic(
    pred: np.ndarray, rules: Sequence[tuple[int, Sequence[int]]], mask: np.ndarray
) -> tuple[list[int], list[int]]:
    """Body / body∧head counts by enumerating every path x → z_1 → … → y over the predicted relations."""
    n, _, R = pred.shape

    def holds(tok: int, a: int, b: int) -> bool:
        return bool(pred[a, b, tok]) if tok < R else bool(pred[b, a, tok - R])

    body, corr = [], []
    for head, toks in rules:
        nb = nc = 0
        for x in range(n):
            for y in range(n):
                if not mask[x, y]:
                    continue
                found = False
                stack = [(x, 0)]
                while stack and not found:
                    node, i = stack.pop()
                    for z in range(n):
                        if holds(toks[i], node, z):
                            if i == len(toks) - 1:
                                found = found or z == y
                            else:
                                stack.append((z, i + 1))
                nb += found
                nc += found and bool(pred[x, y, head])
        body.append(nb)
        corr.append(nc)
    return body, corr


def test_document_logic_composes_over_the_full_predictions_like_a_brute_force_count() -> None:
    """A hand-made 4-entity document, R = 2: the seen part predicts r0(0,1), the unseen part r0(1,2) and r1(0,2).
    The rule r1 ← r0 ∘ r0 has its body at (0, 2) only through both parts; counted at the unseen pairs it fires once
    and is correct; the per-part composition (the old count) never sees it."""
    R = 2
    seen = np.zeros((4, 4, R), bool)
    unseen = np.zeros((4, 4, R), bool)
    seen[0, 1, 0] = True
    unseen[1, 2, 0] = True
    unseen[0, 2, 1] = True
    unseen[3, 2, 1] = True
    m_seen = np.zeros((4, 4), bool)
    m_seen[0, 1] = m_seen[1, 0] = m_seen[0, 3] = True
    m_unseen = np.zeros((4, 4), bool)
    m_unseen[0, 2] = m_unseen[1, 2] = m_unseen[3, 2] = m_unseen[2, 0] = True
    rules = [(1, (0, 0)), (0, (1, 3)), (1, (2, 1))]  # r1 ← r0∘r0, r0 ← r1∘r1⁻¹, r1 ← r0⁻¹∘r1
    body, corr = document_logic_counts([seen, unseen], m_unseen, rules)
    ref = _brute_logic(seen | unseen, rules, m_unseen)
    assert body.tolist() == ref[0] and corr.tolist() == ref[1]
    assert body[0] == 1 and corr[0] == 1
    old_body, _ = logic_counts([unseen], rules, [m_unseen])
    assert old_body[0] == 0
    for mask in (m_seen, np.ones((4, 4), bool) & ~np.eye(4, dtype=bool)):
        body, corr = document_logic_counts([seen, unseen], mask, rules)
        ref = _brute_logic(seen | unseen, rules, mask)
        assert body.tolist() == ref[0] and corr.tolist() == ref[1]
    # random documents: the union equals the brute force count over every pair
    g = np.random.default_rng(0)
    for _ in range(5):
        a, b = g.random((5, 5, 3)) < 0.2, g.random((5, 5, 3)) < 0.2
        mask = g.random((5, 5)) < 0.6
        rs = [
            (int(g.integers(3)), tuple(int(t) for t in g.integers(0, 6, size=int(g.integers(1, 4))))) for _ in range(4)
        ]
        body, corr = document_logic_counts([a, b], mask, rs)
        ref = _brute_logic(a | b, rs, mask)
        assert body.tolist() == ref[0] and corr.tolist() == ref[1]
