"""Filtered ranking: ties by expectation against brute force, filters, merging, batched evaluation."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.kg_sources import load_kg
from kg.linkpred import (
    RankingMetrics,
    _filtered_ranks_sparse,
    evaluate_link_prediction,
    filtered_ranks,
    known_answers,
)
from kg.triples import KnowledgeGraph


def _metrics(scores: torch.Tensor, answers: torch.Tensor, mask: torch.Tensor | None) -> dict[str, float]:
    m = RankingMetrics()
    m.update(*filtered_ranks(scores, answers, mask))
    return m.compute()


def _brute_force(scores: list[list[int]], answers: list[int], masks: list[list[bool]]) -> dict[str, float]:
    """Average over every order of the remaining candidates that respects the scores (all tie permutations)."""
    totals = dict.fromkeys(["mrr", "mr", "hits@1", "hits@3", "hits@10", "mrr_pessimistic", "mr_pessimistic",
                            "hits@1_pessimistic", "hits@3_pessimistic", "hits@10_pessimistic"], 0.0)
    for row, ans, mask in zip(scores, answers, masks):
        cands = [e for e in range(len(row)) if e == ans or not mask[e]]
        ranks = []
        for perm in itertools.permutations(cands):
            order = sorted(perm, key=lambda e: -row[e])  # stable: ties keep the permutation's order
            ranks.append(order.index(ans) + 1)
        worst = max(ranks)
        totals["mrr"] += float(np.mean([1 / r for r in ranks]))
        totals["mr"] += float(np.mean(ranks))
        totals["mrr_pessimistic"] += 1 / worst
        totals["mr_pessimistic"] += worst
        for k in (1, 3, 10):
            totals[f"hits@{k}"] += float(np.mean([r <= k for r in ranks]))
            totals[f"hits@{k}_pessimistic"] += float(worst <= k)
    return {k: v / len(scores) for k, v in totals.items()}


def _rnnlogic_style(scores: list[list[int]], answers: list[int], masks: list[list[bool]]) -> dict[str, float]:
    """RNNLogic's evaluate(expectation=True) arithmetic: L = #higher + 1, H = #(>=) + 2 over unfiltered others."""
    mrr = mr = h1 = 0.0
    for row, ans, mask in zip(scores, answers, masks):
        others = [row[e] for e in range(len(row)) if e != ans and not mask[e]]
        low = sum(v > row[ans] for v in others) + 1
        high = sum(v >= row[ans] for v in others) + 2
        for rank in range(low, high):
            mrr += 1.0 / rank / (high - low)
            mr += rank / (high - low)
            h1 += (rank <= 1) / (high - low)
    return {"mrr": mrr / len(scores), "mr": mr / len(scores), "hits@1": h1 / len(scores)}


@st.composite
def ranking_cases(draw: st.DrawFn) -> tuple[list[list[int]], list[int], list[list[bool]]]:
    num_e = draw(st.integers(1, 6))
    batch = draw(st.integers(1, 4))
    scores = [draw(st.lists(st.integers(0, 2), min_size=num_e, max_size=num_e)) for _ in range(batch)]
    answers = [draw(st.integers(0, num_e - 1)) for _ in range(batch)]
    masks = [draw(st.lists(st.booleans(), min_size=num_e, max_size=num_e)) for _ in range(batch)]
    return scores, answers, masks


@settings(max_examples=150, deadline=None)
@given(ranking_cases())
def test_expectation_over_ties_equals_brute_force_over_permutations(case) -> None:
    scores, answers, masks = case
    got = _metrics(torch.tensor(scores, dtype=torch.float32), torch.tensor(answers), torch.tensor(masks))
    want = _brute_force(scores, answers, masks)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    for key, value in _rnnlogic_style(scores, answers, masks).items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    # the sparse-filter path used by evaluate_link_prediction gives the same ranks
    rows, cols = torch.tensor(masks).nonzero(as_tuple=True)
    dense = filtered_ranks(torch.tensor(scores, dtype=torch.float32), torch.tensor(answers), torch.tensor(masks))
    sparse = _filtered_ranks_sparse(torch.tensor(scores, dtype=torch.float32), torch.tensor(answers), rows, cols)
    assert torch.equal(dense[0], sparse[0]) and torch.equal(dense[1], sparse[1])


def test_all_zero_scores_give_the_mean_over_positions() -> None:
    for num_e in (1, 4, 37, 14541):
        got = _metrics(torch.zeros(3, num_e), torch.tensor([0, num_e // 2, num_e - 1]), None)
        assert got["mrr"] == pytest.approx(sum(1 / k for k in range(1, num_e + 1)) / num_e, rel=1e-12)
        assert got["mr"] == (num_e + 1) / 2
        assert got["hits@1"] == pytest.approx(1 / num_e) and got["hits@10"] == pytest.approx(min(10, num_e) / num_e)
        assert got["mr_pessimistic"] == num_e and got["mrr_pessimistic"] == pytest.approx(1 / num_e)


def test_hand_cases() -> None:
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.1], [0.2, 0.2, 0.2, 0.8], [0.3, 0.3, 0.3, 0.3]])
    answers = torch.tensor([1, 0, 2])
    mask = torch.tensor([[False, False, True, False], [False, False, False, True], [True, True, True, True]])
    expected, pessimistic = filtered_ranks(scores, answers, mask)
    # row 0: one higher, the tie (index 2) is filtered -> rank 2; row 1: the 0.8 is filtered, three-way tie;
    # row 2: every other candidate is filtered -> rank 1 although the answer is itself a known answer
    assert expected.tolist() == [2.0, 2.0, 1.0] and pessimistic.tolist() == [2, 3, 1]
    got = _metrics(scores, answers, mask)
    assert got["mrr"] == pytest.approx((1 / 2 + (1 + 1 / 2 + 1 / 3) / 3 + 1) / 3)
    assert got["hits@1"] == pytest.approx((0 + 1 / 3 + 1) / 3) and got["hits@3"] == 1.0
    assert got["mrr_pessimistic"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3) and got["count"] == 3


def test_nan_scores_rank_last() -> None:
    # NaN counts as -inf: below the answer's 0.0, so only the 1.0 is higher
    expected, pessimistic = filtered_ranks(torch.tensor([[float("nan"), 1.0, 0.0]]), torch.tensor([2]), None)
    assert expected.tolist() == [2.0] and pessimistic.tolist() == [2]
    # a NaN answer ties with the other NaN candidates at the bottom
    expected, pessimistic = filtered_ranks(torch.tensor([[float("nan"), 1.0, float("nan")]]), torch.tensor([2]), None)
    assert expected.tolist() == [2.5] and pessimistic.tolist() == [3]
    rows, cols = torch.tensor([0]), torch.tensor([1])
    assert _filtered_ranks_sparse(torch.tensor([[float("nan"), 1.0, float("nan")]]), torch.tensor([2]), rows,
                                  cols)[0].tolist() == [1.5]


def test_merge_equals_one_state_over_the_union_exactly() -> None:
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (200, 50), generator=gen).float()
    answers = torch.randint(0, 50, (200,), generator=gen)
    mask = torch.rand(200, 50, generator=gen) < 0.2
    exp, pes = filtered_ranks(scores, answers, mask)
    whole = RankingMetrics()
    whole.update(exp, pes)
    parts = [RankingMetrics() for _ in range(3)]
    for i, idx in enumerate(np.array_split(np.random.default_rng(1).permutation(200), 3)):
        parts[i].update(exp[idx], pes[idx])
    merged = parts[2].copy().merge(parts[0]).merge(parts[1])
    assert merged.compute() == whole.compute()  # bit-for-bit, not approximately
    assert (parts[0] + parts[1] + parts[2]).compute() == whole.compute()
    assert RankingMetrics.from_state_dict(merged.state_dict()).compute() == whole.compute()
    with pytest.raises(ValueError, match="cannot merge"):
        whole.merge(RankingMetrics(hits_at=(1,)))
    assert np.isnan(RankingMetrics().compute()["mrr"])


def test_update_rejects_inconsistent_ranks() -> None:
    with pytest.raises(ValueError, match="not"):
        RankingMetrics().update(torch.tensor([2.0]), torch.tensor([1]))


# ------------------------------------------------------------------------------------ batched evaluation
def _random_kg(seed: int, num_e: int = 12, num_r: int = 3, n: int = 60) -> KnowledgeGraph:
    rng = np.random.default_rng(seed)
    trip = np.unique(np.stack([rng.integers(0, num_e, n), rng.integers(0, num_r, n), rng.integers(0, num_e, n)], 1),
                     axis=0)
    rng.shuffle(trip)
    a, b = len(trip) // 2, 3 * len(trip) // 4
    return KnowledgeGraph("rand", tuple(f"e{i}" for i in range(num_e)), tuple(f"r{i}" for i in range(num_r)),
                          trip[:a], trip[a:b], trip[b:])


def _table_score(num_e: int, num_rel2: int, seed: int):
    table = torch.randint(0, 3, (num_e, num_rel2, num_e), generator=torch.Generator().manual_seed(seed)).float()
    return lambda q: table[q[:, 0], q[:, 1]]


def _loop_reference(kg: KnowledgeGraph, table_fn) -> dict[str, float]:
    """Independent per-query loop: filter from Python sets, expectation by enumerating tied positions."""
    R = kg.num_relations
    known = {(int(h), int(r), int(t)) for h, r, t in kg.all_triples()}
    known |= {(t, r + R, h) for h, r, t in known}
    rr, mr, hits1 = [], [], []
    for h, r, t in kg.test.tolist():
        for e, rel, ans in ((h, r, t), (t, r + R, h)):
            s = table_fn(torch.tensor([[e, rel]]))[0].tolist()
            cands = [c for c in range(kg.num_entities) if c == ans or (e, rel, c) not in known]
            higher = sum(s[c] > s[ans] for c in cands)
            positions = range(higher + 1, higher + 1 + sum(s[c] == s[ans] for c in cands))
            rr.append(np.mean([1 / p for p in positions]))
            mr.append(np.mean(list(positions)))
            hits1.append(np.mean([p <= 1 for p in positions]))
    return {"mrr": float(np.mean(rr)), "mr": float(np.mean(mr)), "hits@1": float(np.mean(hits1)), "count": len(rr)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_evaluate_matches_a_loop_reference_for_any_batch_size(seed: int) -> None:
    kg = _random_kg(seed)
    fn = _table_score(kg.num_entities, 2 * kg.num_relations, seed)
    want = _loop_reference(kg, fn)
    results = [evaluate_link_prediction(fn, kg, batch_size=b).compute() for b in (1, 5, None)]
    for got in results:
        assert got["count"] == want["count"] == 2 * len(kg.test)
        for key in ("mrr", "mr", "hits@1"):
            assert got[key] == pytest.approx(want[key], rel=1e-12)
    assert results[0] == results[1] == results[2]


def test_evaluate_directions_add_up_and_filter_defaults_to_all_splits() -> None:
    kg = _random_kg(5)
    fn = _table_score(kg.num_entities, 2 * kg.num_relations, 5)
    tail = evaluate_link_prediction(fn, kg, directions=("tail",))
    head = evaluate_link_prediction(fn, kg, directions=("head",))
    assert (tail + head).compute() == evaluate_link_prediction(fn, kg).compute()
    explicit = evaluate_link_prediction(fn, kg, filter_with=known_answers(kg, ("train", "valid", "test")))
    assert explicit.compute() == evaluate_link_prediction(fn, kg).compute()
    train_only = evaluate_link_prediction(fn, kg, filter_with=known_answers(kg, ("train",))).compute()
    assert train_only["mr"] >= explicit.compute()["mr"]


def test_default_batches_respect_the_memory_bound() -> None:
    kg = _random_kg(0)
    sizes: list[int] = []

    def fn(q: torch.Tensor) -> torch.Tensor:
        sizes.append(len(q))
        return torch.zeros(len(q), kg.num_entities)

    evaluate_link_prediction(fn, kg, max_memory_bytes=16 * kg.num_entities * 3)
    assert max(sizes) == 3 and sum(sizes) == 2 * len(kg.test)


def test_score_fn_shape_is_checked() -> None:
    kg = _random_kg(0)
    with pytest.raises(ValueError, match=r"expected \(\d+, 12\)"):
        evaluate_link_prediction(lambda q: torch.zeros(len(q), 5), kg)


def test_known_answers_include_inverses_and_parts() -> None:
    kg = _random_kg(3)
    index = known_answers(kg)
    h, r, t = (int(x) for x in kg.test[0])
    assert t in index.answers(h, r) and h in index.answers(t, r + kg.num_relations)
    mask = index.mask(np.array([[h, r]]))
    assert mask.shape == (1, kg.num_entities) and bool(mask[0, t])
    halves = [kg.replace(test=kg.test[:3]), kg.replace(test=kg.test[3:])]
    assert len(known_answers(halves)) == len(index)
    # the facts back as forward triples: every split's distinct facts, each once
    want = {tuple(x) for x in np.concatenate([kg.train, kg.valid, kg.test]).tolist()}
    got = index.triples()
    assert got.shape == (len(want), 3) and {tuple(x) for x in got.tolist()} == want


def test_oracle_scores_reach_mrr_one_on_kinship(shared_data: Path) -> None:
    folder = shared_data / "kg" / "kinship_rnnlogic"
    if not folder.is_dir():
        pytest.skip(f"Kinship not found at {folder}")
    kg = load_kg(folder)
    index = known_answers(kg)
    # scoring every known answer 1 leaves the answer alone at the top once the others are filtered
    got = evaluate_link_prediction(lambda q: index.mask(q).float(), kg, filter_with=index).compute()
    assert got["mrr"] == 1.0 and got["mr_pessimistic"] == 1.0 and got["count"] == 2 * 5343
    zero = evaluate_link_prediction(lambda q: torch.zeros(len(q), kg.num_entities), kg).compute()
    assert 0 < zero["mrr"] < 0.2 and zero["mr_pessimistic"] > zero["mr"]
