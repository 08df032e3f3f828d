"""kg.grounding: path scores (FedNSL Eq. 8) against brute-force path enumeration, LogiRE's max-plus reference,
argmax paths, cached-path re-scoring and input validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.grounding import (
    HAVE_NUMBA,
    GroundingInputError,
    best_paths,
    build_plan,
    logire_path_scores,
    path_scores,
    path_values,
    stay_acts_as_identity,
    to_log_transitions,
    with_inverse_and_stay,
)

BACKENDS = ["torch", "numba"] if HAVE_NUMBA else ["torch"]


def brute_force(values: torch.Tensor, bodies: torch.Tensor, semiring: str) -> torch.Tensor:
    """Enumerate every entity path e_0 = h, e_1, ..., e_L = t (revisits allowed) and reduce Π x by max or sum."""
    n_docs, n, _, _ = values.shape
    n_bodies, length = bodies.shape
    x = values.double().numpy()
    out = np.zeros((n_docs, n_bodies, n, n))
    for b, j, h, t in itertools.product(range(n_docs), range(n_bodies), range(n), range(n)):
        acc = 0.0
        for mid in itertools.product(range(n), repeat=length - 1):
            path = (h, *mid, t)
            prod = 1.0
            for k in range(length):
                prod *= x[b, path[k], path[k + 1], int(bodies[j, k])]
            acc = max(acc, prod) if semiring == "max-product" else acc + prod
        out[b, j, h, t] = acc
    return torch.from_numpy(out)


@st.composite
def grounding_case(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Random small graphs: B ≤ 3 docs, N ≤ 5 entities (some padded), R ≤ 3, bodies L ≤ 3 with random stays."""
    n_docs = draw(st.integers(1, 3))
    n = draw(st.integers(1, 5))
    n_rel = draw(st.integers(1, 3))
    length = draw(st.integers(1, 3))
    n_bodies = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    counts = [draw(st.integers(1, n)) for _ in range(n_docs)]
    rel = torch.rand(n_docs, n, n, n_rel, generator=gen, dtype=torch.float64)
    rel = rel * (torch.rand(rel.shape, generator=gen, dtype=torch.float64) < 0.6)  # sparse, with exact zeros
    if draw(st.booleans()):
        rel = (rel * 4).round() / 4  # ties between paths
    values = with_inverse_and_stay(rel, counts)
    stay = 2 * n_rel
    bodies = torch.randint(0, 2 * n_rel + 1, (n_bodies, length), generator=gen)
    stays = torch.rand(n_bodies, length, generator=gen) < 0.3
    bodies[stays] = stay
    return values, bodies, stay


@pytest.mark.parametrize("semiring", ["max-product", "sum-product"])
@given(case=grounding_case())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_path_scores_equal_brute_force(semiring: str, case: tuple[torch.Tensor, torch.Tensor, int]) -> None:
    values, bodies, stay = case
    expected = brute_force(values, bodies, semiring)
    for backend in BACKENDS:
        got = path_scores(values, bodies, semiring, stay_id=stay, backend=backend)
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-12, rtol=1e-12), backend
    got32 = path_scores(values.float(), bodies, semiring)
    assert torch.allclose(got32.double(), expected, atol=1e-5)


@given(case=grounding_case())
@settings(max_examples=25, deadline=None)
def test_non_identity_stay_channel_is_applied_as_diagonal(case: tuple[torch.Tensor, torch.Tensor, int]) -> None:
    """A stay channel that is diagonal but not the identity (e.g. 0.5 on the diagonal) is still exact."""
    values, bodies, stay = case
    values = values.clone()
    values[..., stay] *= 0.5
    assert not stay_acts_as_identity(values, stay)
    for semiring in ("max-product", "sum-product"):
        expected = brute_force(values, bodies, semiring)
        assert torch.allclose(path_scores(values, bodies, semiring, stay_id=stay), expected, atol=1e-12)


def test_stay_semantics_and_padding() -> None:
    """[r, STAY, STAY] = x_r, an all-stay body is the identity on real entities, padded entities score 0."""
    gen = torch.Generator().manual_seed(1)
    rel = torch.rand(2, 4, 4, 2, generator=gen)
    values = with_inverse_and_stay(rel, [4, 2])
    bodies = torch.tensor([[0, 4, 4], [4, 4, 4], [4, 2, 4], [1, 3, 4], [4, 4, 1]])
    out = path_scores(values, bodies)
    assert torch.equal(out[:, 0], values[..., 0])
    assert torch.equal(out[:, 1], values[..., 4])
    assert torch.equal(out[0, 1], torch.eye(4))
    assert torch.equal(out[1, 1], torch.diag(torch.tensor([1.0, 1, 0, 0])))
    assert torch.equal(out[:, 2], values[..., 2])
    assert torch.equal(out[:, 2], values[..., 0].transpose(1, 2))
    assert torch.equal(out[:, 4], values[..., 1])
    assert bool((out[1, :, 2:, :] == 0).all()) and bool((out[1, :, :, 2:] == 0).all())
    # r1∘~r1 in max-product: φ(h, t) = max_e x(h, e)·x(t, e)
    x1 = values[..., 1]
    expected = (x1[:, :, None, :] * x1[:, None, :, :]).amax(-1)
    assert torch.allclose(out[:, 3], expected)


def test_padded_batch_equals_unpadded_documents() -> None:
    gen = torch.Generator().manual_seed(2)
    docs = [torch.rand(n, n, 3, generator=gen) for n in (5, 3, 4)]
    rel = torch.zeros(3, 5, 5, 3)
    for b, d in enumerate(docs):
        rel[b, : d.shape[0], : d.shape[0]] = d
    batch = with_inverse_and_stay(rel, [5, 3, 4])
    bodies = torch.randint(0, 7, (20, 3), generator=gen)
    for semiring in ("max-product", "sum-product"):
        out = path_scores(batch, bodies, semiring)
        for b, d in enumerate(docs):
            n = d.shape[0]
            single = path_scores(with_inverse_and_stay(d[None]), bodies, semiring)[0]
            assert torch.allclose(out[b, :, :n, :n], single, atol=1e-6)
            assert bool((out[b, :, n:] == 0).all()) and bool((out[b, :, :, n:] == 0).all())


def test_matches_logire_max_plus_reference() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 9, 9, 5, generator=gen) * 2 - 4
    values = with_inverse_and_stay(torch.sigmoid(logits), [9, 6])
    bodies = torch.randint(0, 11, (40, 3), generator=gen)
    bodies[:5, 1:] = 10
    ref = logire_path_scores(to_log_transitions(values), bodies, chunk_size=7).exp().permute(0, 3, 1, 2)
    assert torch.allclose(path_scores(values, bodies), ref, atol=1e-6)
    log_values = to_log_transitions(values)
    assert torch.allclose(logire_path_scores(log_values, bodies), logire_path_scores(log_values, bodies, 3))


def test_sum_product_is_a_chain_of_matmuls() -> None:
    gen = torch.Generator().manual_seed(4)
    values = with_inverse_and_stay(torch.rand(2, 6, 6, 4, generator=gen), [6, 5])
    bodies = torch.tensor([[0, 5, 2], [3, 8, 8], [1, 1, 1]])
    out = path_scores(values, bodies, "sum-product")
    m = values.permute(0, 3, 1, 2)
    assert torch.allclose(out[:, 0], m[:, 0] @ m[:, 5] @ m[:, 2], atol=1e-5)
    assert torch.allclose(out[:, 1], m[:, 3], atol=1e-6)
    assert torch.allclose(out[:, 2], m[:, 1] @ m[:, 1] @ m[:, 1], atol=1e-5)


def test_general_length_and_plan_reuse() -> None:
    """L = 5 bodies; a prebuilt plan gives the same result; shared prefixes are computed once."""
    gen = torch.Generator().manual_seed(5)
    values = with_inverse_and_stay(torch.rand(1, 3, 3, 2, generator=gen, dtype=torch.float64))
    bodies = torch.randint(0, 5, (4, 5), generator=gen)
    assert torch.allclose(path_scores(values, bodies), brute_force(values, bodies, "max-product"), atol=1e-12)
    shared = torch.tensor([[0, 1, 2], [0, 1, 3], [0, 1, 4], [0, 1, 1], [0, 2, 4], [0, 4, 4]])
    plan = build_plan(shared, stay_id=4)
    # canonical prefixes: level 2 {(0,1), (0,2)}, level 3 {(0,1,2), (0,1,3), (0,1,1)}; (0) is a channel
    assert plan.n_products == 2 + 3
    assert plan.body_level.tolist() == [3, 3, 2, 3, 2, 1]
    assert torch.equal(path_scores(values, plan), path_scores(values, shared))


def test_eps_skipping_stays_within_bound() -> None:
    gen = torch.Generator().manual_seed(6)
    values = with_inverse_and_stay(torch.sigmoid(torch.randn(2, 12, 12, 4, generator=gen) * 2 - 4))
    bodies = torch.randint(0, 9, (30, 3), generator=gen)
    exact = path_scores(values, bodies)
    for backend in BACKENDS:
        approx = path_scores(values, bodies, eps=5e-3, backend=backend)
        diff = exact - approx
        assert float(diff.min()) >= 0 and float(diff.max()) <= 2 * 5e-3
    with pytest.raises(GroundingInputError, match="eps"):
        path_scores(values, bodies, "sum-product", eps=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_best_paths_consistent_with_scores(backend: str) -> None:
    gen = torch.Generator().manual_seed(7)
    rel = torch.rand(3, 6, 6, 3, generator=gen) * (torch.rand(3, 6, 6, 3, generator=gen) < 0.5)
    values = with_inverse_and_stay(rel, [6, 4, 5])
    bodies = torch.randint(0, 7, (25, 3), generator=gen)
    bodies[0] = torch.tensor([6, 6, 6])
    bodies[1] = torch.tensor([6, 2, 6])
    doc = torch.tensor([0, 1, 2, 2, 0, 1])
    head = torch.tensor([0, 3, 4, 1, 5, 1])
    tail = torch.tensor([5, 0, 4, 2, 5, 1])
    res = best_paths(values, bodies, doc, head, tail, backend=backend)
    scores = path_scores(values, bodies)[doc, :, head, tail]  # (Q, J)
    assert res.entities.shape == (6, 25, 4) and res.edge_values.shape == (6, 25, 3)
    assert torch.equal(res.scores, scores)
    assert torch.equal(res.entities[:, :, 0], head[:, None].expand(6, 25))
    assert torch.equal(res.entities[:, :, -1], tail[:, None].expand(6, 25))
    # edge values are what the path reads, and a stay step stays on its entity
    e = res.entities
    for q, j, k in itertools.product(range(6), range(25), range(3)):
        tok = int(bodies[j, k])
        assert res.edge_values[q, j, k] == values[doc[q], e[q, j, k], e[q, j, k + 1], tok]
        if tok == 6 and res.scores[q, j] > 0:
            assert e[q, j, k] == e[q, j, k + 1]
    # re-scoring the cached paths on the same values gives the same scores; on new values, Π x along them
    s2, edge2 = path_values(values, bodies, doc, res.entities)
    assert torch.equal(s2, res.scores) and torch.equal(edge2, res.edge_values)
    new = with_inverse_and_stay(torch.rand(3, 6, 6, 3, generator=gen), [6, 4, 5])
    s3, _ = path_values(new, bodies, doc, res.entities)
    assert bool((s3 <= path_scores(new, bodies)[doc, :, head, tail] + 1e-7).all())


@given(case=grounding_case(), scale_stay=st.booleans())
@settings(max_examples=25, deadline=None)
def test_best_paths_product_equals_score(case: tuple[torch.Tensor, torch.Tensor, int], scale_stay: bool) -> None:
    values, bodies, stay = case
    if scale_stay:
        values = values.clone()
        values[..., stay] *= 0.5
    n_docs, n = values.shape[:2]
    doc, head, tail = torch.meshgrid(torch.arange(n_docs), torch.arange(n), torch.arange(n), indexing="ij")
    doc, head, tail = doc.flatten(), head.flatten(), tail.flatten()
    res = best_paths(values, bodies, doc, head, tail, stay_id=stay)
    expected = path_scores(values, bodies, stay_id=stay)[doc, :, head, tail]
    assert torch.equal(res.scores, expected)
    assert torch.allclose(res.scores, res.edge_values.prod(dim=-1), atol=1e-12)
    assert torch.equal(res.entities[..., 0], head[:, None].expand_as(res.entities[..., 0]))
    assert torch.equal(res.entities[..., -1], tail[:, None].expand_as(res.entities[..., 0]))
    stays = (bodies == stay)[None].expand(len(doc), *bodies.shape) & (res.scores > 0)[..., None]
    assert torch.equal(res.entities[..., :-1][stays], res.entities[..., 1:][stays])


def test_best_paths_non_identity_stay_and_broadcast_queries() -> None:
    gen = torch.Generator().manual_seed(8)
    values = with_inverse_and_stay(torch.rand(1, 5, 5, 2, generator=gen))
    values[..., 4] *= 0.5
    bodies = torch.tensor([[0, 4, 1], [4, 4, 4], [2, 3, 4]])
    res = best_paths(values, bodies, 0, torch.arange(5), 3)
    assert torch.allclose(res.scores, path_scores(values, bodies)[0, :, :, 3].T)


def test_validation_errors() -> None:
    values = with_inverse_and_stay(torch.rand(2, 4, 4, 2))
    bodies = torch.tensor([[0, 1, 4]])
    with pytest.raises(GroundingInputError, match=r"shape \(B, N, N, C\)"):
        path_scores(values[0], bodies)
    with pytest.raises(GroundingInputError, match="entity axes"):
        path_scores(values[:, :3], bodies)
    with pytest.raises(GroundingInputError, match="floating"):
        path_scores((values > 0.5).long(), bodies)
    bad = values.clone()
    bad[1, 2, 3, 0] = float("nan")
    with pytest.raises(GroundingInputError, match=r"NaN.*\(1, 2, 3, 0\)"):
        path_scores(bad, bodies)
    bad = values.clone()
    bad[0, 1, 1, 2] = 1.5
    with pytest.raises(GroundingInputError, match=r"\[0, 1\]"):
        path_scores(bad, bodies)
    bad = values.clone()
    bad[0, 1, 2, 4] = 0.3
    with pytest.raises(GroundingInputError, match="stay channel"):
        path_scores(bad, bodies)
    with pytest.raises(GroundingInputError, match="stay channel"):
        path_scores(values, bodies, stay_id=0)
    with pytest.raises(GroundingInputError, match="stay_id=7"):
        path_scores(values, bodies, stay_id=7)
    with pytest.raises(GroundingInputError, match="int64"):
        path_scores(values, bodies.int())
    with pytest.raises(GroundingInputError, match=r"bodies\[0, 2\] = 5"):
        path_scores(values, torch.tensor([[0, 1, 5]]))
    with pytest.raises(GroundingInputError, match=r"bodies\[0, 0\] = -1"):
        path_scores(values, torch.tensor([[-1, 1, 4]]))
    with pytest.raises(GroundingInputError, match=r"shape \(J, L\)"):
        path_scores(values, torch.tensor([0, 1, 4]))
    with pytest.raises(GroundingInputError, match="semiring"):
        path_scores(values, bodies, "min-sum")
    with pytest.raises(GroundingInputError, match="head"):
        best_paths(values, bodies, 0, 4, 0)
    with pytest.raises(GroundingInputError, match="doc_index"):
        best_paths(values, bodies, 2, 0, 0)
    with pytest.raises(GroundingInputError, match=r"\(Q, J, L\+1\)"):
        path_values(values, bodies, 0, torch.zeros(1, 1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="backend"):
        path_scores(values, bodies, backend="cuda-magic")


def test_empty_inputs_and_dtypes() -> None:
    values = with_inverse_and_stay(torch.rand(2, 3, 3, 1))
    assert path_scores(values, torch.zeros(0, 3, dtype=torch.long)).shape == (2, 0, 3, 3)
    half = path_scores(values.to(torch.bfloat16), torch.tensor([[0, 1, 2]]))
    assert half.dtype == torch.bfloat16
    assert torch.allclose(half.float(), path_scores(values, torch.tensor([[0, 1, 2]])), atol=2e-2)


def test_autograd_through_torch_backend() -> None:
    gen = torch.Generator().manual_seed(9)
    values = with_inverse_and_stay(torch.rand(1, 4, 4, 2, generator=gen, dtype=torch.float64)).requires_grad_()
    bodies = torch.tensor([[0, 1, 4], [2, 3, 1]])
    out = path_scores(values, bodies)
    out.sum().backward()
    assert values.grad is not None and bool(values.grad.abs().sum() > 0)
