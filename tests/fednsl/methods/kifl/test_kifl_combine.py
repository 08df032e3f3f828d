"""Eq. (2) of Fan et al. (2022) and Proposition 5.1 against hand-computed values and an independent reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fednsl.methods.kifl.combine import (
    knowledge_injected,
    knowledge_injected_numpy,
    masked_softmax,
    nll,
    percentage_of_violations,
    resolve_conflicts,
)
from fednsl.methods.kifl.knowledge import KnowledgeModelError


def test_hand_computed_values():
    # logits (1, 2, 3), class 1 inadmissible, P-KM says 2, λ = 0.3:
    # s = (e^1, 0, e^3) / (e^1 + e^3) = (1/(1+e^2), 0, e^2/(1+e^2)); f = 0.7 s + 0.3 e_2
    f = knowledge_injected(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64),
                           torch.tensor([[True, False, True]]), torch.tensor([2]), 0.3)
    s0 = 1 / (1 + math.e ** 2)
    assert f[0].tolist() == pytest.approx([0.7 * s0, 0.0, 0.7 * (1 - s0) + 0.3], abs=1e-12)
    assert f[0].tolist() == pytest.approx([0.0834420, 0.0, 0.9165580], abs=1e-7)
    # P-KM abstains (-1): λ is 0 on that row, f is the masked softmax
    g = knowledge_injected(torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64), torch.tensor([[True, True]]),
                           torch.tensor([-1]), 0.9)
    assert g[0].tolist() == pytest.approx([0.25, 0.75], abs=1e-12)


def _case(seed: int, n: int, k: int):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=4.0, size=(n, k))
    allowed = rng.random((n, k)) < 0.5
    allowed[np.arange(n), rng.integers(0, k, n)] = True
    pkm = np.array([rng.choice(np.flatnonzero(a)) if rng.random() < 0.8 else -1 for a in allowed])
    return logits, allowed, pkm


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), k=st.integers(2, 9), lam=st.floats(0.0, 1.0))
def test_proposition_5_1_and_reference(seed: int, n: int, k: int, lam: float):
    logits, allowed, pkm = _case(seed, n, k)
    f = knowledge_injected(torch.from_numpy(logits), torch.from_numpy(allowed), torch.from_numpy(pkm), lam).numpy()
    np.testing.assert_allclose(f, knowledge_injected_numpy(logits, allowed, pkm, lam), atol=1e-12)
    np.testing.assert_allclose(f.sum(1), 1.0, atol=1e-12)                        # (a) in the simplex
    assert np.all(f >= 0) and np.all(f[~allowed] == 0.0)                          # (c) exact zeros off g_r
    has = pkm >= 0
    assert np.all(f[has, pkm[has]] >= lam - 1e-12)                                 # (b) ⟨f, g_p⟩ >= λ
    if lam > 0.5:
        assert np.array_equal(f[has].argmax(1), pkm[has])                         # (b) argmax = P-KM


def test_jacobian_proposition_5_1_d():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    x = torch.randn(1, 4, dtype=torch.float64)
    allowed, pkm, lam = torch.tensor([[True, False, True]]), torch.tensor([0]), 0.35
    params = list(net.parameters())

    def flat_jac(fn):
        rows = []
        for i in range(3):
            grads = torch.autograd.grad(fn()[0, i], params, allow_unused=True)
            rows.append(torch.cat([g.reshape(-1) for g in grads]))
        return torch.stack(rows)

    jf = flat_jac(lambda: net(x))
    jfm = flat_jac(lambda: knowledge_injected(net(x), allowed, pkm, lam))
    s = masked_softmax(net(x), allowed)[0].detach()
    want = (1 - lam) * (torch.diag(s) - torch.outer(s, s)) @ jf
    torch.testing.assert_close(jfm, want, atol=1e-12, rtol=1e-10)


def test_nll_is_finite_outside_the_range_and_matches_log():
    probs = torch.tensor([[0.2, 0.0, 0.8], [0.5, 0.5, 0.0]], dtype=torch.float64)
    y = torch.tensor([2, 2])
    assert float(nll(probs, y, eps=1e-12)) == pytest.approx((-math.log(0.8 + 1e-12) - math.log(1e-12)) / 2)


def test_resolve_conflicts_policies():
    allowed = np.array([[True, False], [False, True]])
    pkm = np.array([1, 1])
    a, p, n = resolve_conflicts(allowed, pkm, "drop_pkm")
    assert n == 1 and p.tolist() == [-1, 1] and np.array_equal(a, allowed)
    a, p, n = resolve_conflicts(allowed, pkm, "union")
    assert n == 1 and p.tolist() == [1, 1] and a.tolist() == [[True, True], [False, True]]
    with pytest.raises(KnowledgeModelError, match="client 'c3'.*Assumption 5.1 violated on 1 rows"):
        resolve_conflicts(allowed, pkm, "error", "c3")
    assert allowed.tolist() == [[True, False], [False, True]]   # inputs untouched


def test_percentage_of_violations_eq_7():
    allowed = np.array([[True, False, False], [True, True, False], [False, False, True], [True, True, True]])
    assert percentage_of_violations(np.array([0, 2, 2, 1]), allowed) == 0.25
