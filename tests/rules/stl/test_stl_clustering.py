"""Clustering by property alignment (FedSTL Alg. 1) on hand-built cases and against references."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from rules import stl


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def reference_balanced(loss: np.ndarray, capacity: int) -> np.ndarray:
    """FedSTL code's loop: take the global argmin, assign, mask the client (and a full cluster)."""
    work = loss.astype(float).copy()
    n_k, n = work.shape
    out = np.full(n, -1)
    fill = np.zeros(n_k, dtype=int)
    for _ in range(n):
        k, i = np.unravel_index(np.argmin(work), work.shape)
        out[i] = k
        fill[k] += 1
        work[:, i] = np.inf
        if fill[k] >= capacity:
            work[k, :] = np.inf
    return out


def test_assign_argmin_hand_built() -> None:
    loss = np.array([[0.1, 0.9, 0.5, 0.2],
                     [0.3, 0.1, 0.5, 0.2]])
    assert stl.assign_argmin(loss).tolist() == [0, 1, 0, 0]  # ties -> lowest cluster
    out = stl.assign_argmin(torch.from_numpy(loss))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64
    members = stl.cluster_members(out, 3)
    assert [m.tolist() for m in members] == [[0, 2, 3], [1], []]  # empty cluster allowed


def test_assign_balanced_hand_built() -> None:
    # everyone prefers cluster 0; capacity 2 forces the two worst-fitting clients out
    loss = np.array([[0.0, 0.1, 0.2, 0.3],
                     [0.5, 0.5, 0.3, 0.35]])
    assert stl.assign_balanced(loss).tolist() == [0, 0, 1, 1]
    assert stl.assign_balanced(loss, capacity=3).tolist() == [0, 0, 0, 1]
    assert stl.assign_balanced(loss, capacity=4).tolist() == stl.assign_argmin(loss).tolist()
    with pytest.raises(ValueError, match="cannot hold"):
        stl.assign_balanced(loss, capacity=1)
    with pytest.raises(ValueError, match="NaN"):
        stl.assign_argmin(np.array([[np.nan]]))


@pytest.mark.parametrize("seed", range(5))
def test_assign_balanced_equals_repeated_global_argmin(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 6)), int(rng.integers(5, 40))
    loss = rng.integers(0, 6, size=(k, n)).astype(float)  # many ties on purpose
    cap = int(np.ceil(n / k)) + int(rng.integers(0, 3))
    out = stl.assign_balanced(loss, capacity=cap)
    np.testing.assert_array_equal(out, reference_balanced(loss, cap))
    assert np.bincount(out, minlength=k).max() <= cap


def _two_groups(n_per: int = 4, samples: int = 5, seed: int = 0) -> torch.Tensor:
    """Clients 0..n_per-1 live around 0, the rest around 5 (hourly-like noisy profiles)."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(24, dtype=torch.float64)
    base = torch.sin(t / 4)
    level = torch.cat([torch.zeros(n_per), 5 * torch.ones(n_per)]).to(torch.float64)
    return level[:, None, None] + base + 0.1 * torch.randn(2 * n_per, samples, 24, generator=gen,
                                                           dtype=torch.float64)


def test_alignment_matrix_matches_per_client_formulas() -> None:
    tpl = stl.operational_range()
    data = _two_groups()
    params = stl.mine(tpl, data)
    gen = torch.Generator().manual_seed(1)
    preds = data[None] + torch.tensor([0.0, 0.5, 3.0], dtype=torch.float64)[:, None, None, None] \
        + 0.05 * torch.randn(3, *data.shape, generator=gen, dtype=torch.float64)
    formulas = stl.instantiate_clients(tpl, params)
    for measure in ("violation", "robustness", "unsatisfied"):
        fast = stl.alignment_matrix(tpl, params, preds, measure=measure)
        slow = stl.alignment_matrix_from_formulas(formulas, preds, measure=measure)
        assert fast.shape == (3, 8)
        torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    # violation = mean over samples of relu(-ρ), computed by hand for one entry
    rho = stl.robustness(formulas[2], preds[1, 2])[:, 0]
    assert float(stl.alignment_matrix(tpl, params, preds)[1, 2]) == pytest.approx(
        float(torch.relu(-rho).mean()), abs=1e-12)


def test_cluster_id_recovers_property_groups() -> None:
    tpl = stl.operational_range()
    data = _two_groups(n_per=5)
    # two cluster models: one predicts the low-level profile, the other the high-level profile
    gen = torch.Generator().manual_seed(2)
    low, high = data[:5].mean(0, keepdim=True), data[5:].mean(0, keepdim=True)
    preds = torch.stack([low.expand(10, -1, -1), high.expand(10, -1, -1)])
    preds = preds + 0.02 * torch.randn(preds.shape, generator=gen, dtype=torch.float64)
    for rule in ("argmin", "balanced"):
        res = stl.cluster_id(tpl, data, preds, rule=rule)
        assert res.assignment.tolist() == [0] * 5 + [1] * 5
        assert res.loss.shape == (2, 10) and set(res.params) == set(tpl.params)
    # a third, useless cluster stays empty under argmin but is filled under the balanced rule
    far = preds[:1] + 100.0
    res = stl.cluster_id(tpl, data, torch.cat([preds, far]), params=res.params)
    assert np.bincount(res.assignment.numpy(), minlength=3).tolist() == [5, 5, 0]
    res = stl.cluster_id(tpl, data, torch.cat([preds, far]), rule="balanced", params=res.params)
    assert np.bincount(res.assignment.numpy(), minlength=3).tolist() == [4, 4, 2]


def test_multi_signal_alignment_and_errors() -> None:
    tpl = stl.intra_task(count=3)
    gen = torch.Generator().manual_seed(3)
    sig = {"x1": torch.randn(4, 6, 6, generator=gen) + 3, "x2": torch.randn(4, 6, 6, generator=gen)}
    params = stl.mine(tpl, sig)
    preds = {k: v[None].expand(2, -1, -1, -1).clone() for k, v in sig.items()}
    preds["x1"][1] -= 10.0
    loss = stl.alignment_matrix(tpl, params, preds)
    assert torch.all(loss[0] == 0) and torch.all(loss[1] > 9)
    with pytest.raises(ValueError, match="pass a mapping"):
        stl.alignment_matrix(tpl, params, preds["x1"])
    with pytest.raises(ValueError, match=r"\(K, N, S, T\)"):
        stl.alignment_matrix(tpl, params, {k: v[0] for k, v in preds.items()})
    with pytest.raises(ValueError, match="rule"):
        stl.cluster_id(tpl, sig, preds, rule="kmeans")
