"""LR-XFL: rule scoring (= scikit-learn's macro F1), truth-table rules, rule-based client selection, beam search,
rule-weighted aggregation, local rule extraction."""

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from fednsl.federation.records import Message
from fednsl.methods.lrxfl import (
    ConceptSpace,
    LRXFLConfig,
    LRXFLStrategy,
    beam_search,
    explain_class,
    f1_macro_from_counts,
    join,
    make_len,
    select_clients,
    term_table,
)
from fednsl.methods.lrxfl.len import len_loss
from fednsl.methods.lrxfl.logic import cell_bits, cell_index, to_dnf
from fednsl.tasks.numeric.data import NumericDataConfig
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


@pytest.mark.parametrize("seed", range(6))
def test_f1_from_counts_is_sklearn_macro_f1(seed):
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 8, 60)
    target = rng.random(60) < [0.0, 0.3, 0.5, 1.0, 0.5, 0.2][seed]       # includes all-negative / all-positive y
    table = rng.random(8) < [0.5, 0.0, 1.0, 0.5, 0.3, 0.7][seed]         # includes all-False / all-True rules
    pos, neg = np.bincount(cells[target], minlength=8), np.bincount(cells[~target], minlength=8)
    ours = f1_macro_from_counts(table, pos, neg)
    ref = f1_score(target, table[cells], average="macro", zero_division=0)
    assert ours == pytest.approx(ref, abs=1e-12)


def test_terms_and_joins_as_truth_tables():
    bits = cell_bits(3)
    t = term_table([0], [2], 3)                                           # c0 ∧ ¬c2
    np.testing.assert_array_equal(t, bits[:, 0] & ~bits[:, 2])
    u = term_table([1], [], 3)
    np.testing.assert_array_equal(join([t, u], "OR"), t | u)
    np.testing.assert_array_equal(join([t, u], "AND"), t & u)
    assert cell_index(np.array([[True, False, True]])).tolist() == [5]


def test_concept_space_and_readable_rules():
    space = ConceptSpace.from_raw([4.0, 8.0], center=[0.0, 0.0], scale=1.0)
    x = np.array([[5.0, 1.0], [9.0, 9.0]])
    np.testing.assert_array_equal(space.boolean(x), space.fuzzy(x, 0.1) > 0.5)
    assert space.realizable().sum() == 9                                   # 3 intervals per feature
    rule = term_table([0], [1], space.size)                                # x1 > 4 ∧ ¬(x1 > 8)
    assert to_dnf(rule, space, [4.0, 8.0]) == "(x1>4 & x1<=8)"
    assert to_dnf(join([rule, term_table([1], [], 4)], "OR"), space, [4.0, 8.0]) == "(x1>4)"


def test_select_clients_keeps_best_holder_and_all_supporters():
    a, b = np.array([True, False]), np.array([False, True])
    groups = select_clients({"c1": (a, 0.6), "c2": (a, 0.9), "c3": (b, 0.5), "c4": (a, 0.9)})
    ga = groups[np.packbits(a).tobytes()]
    assert ga["acc"] == 0.9 and ga["best"] == ["c2", "c4"] and ga["support"] == ["c1", "c2", "c4"]


def test_beam_search_keeps_the_best_prefix_not_the_full_sequence():
    # 4 cells; target in cells 0 and 1. Rule A = {0}, B = {1}, C = {2, 3} (wrong).
    pos, neg = np.array([10, 10, 0, 0]), np.array([0, 0, 10, 10])
    A, B, C = (np.array(v, bool) for v in ([1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]))
    keys, f1, table = beam_search([(b"A", A, 0.8), (b"B", B, 0.8), (b"C", C, 0.1)], "OR", pos, neg, beam_width=4)
    assert sorted(keys) == [b"A", b"B"] and f1 == pytest.approx(1.0)
    np.testing.assert_array_equal(table, A | B)
    # the released code's final beam would hold A ∨ B ∨ C: everything True, a worse rule
    assert f1_macro_from_counts(A | B | C, pos, neg) < f1


def _reply(cid, w, tables, valid, acc, counts):
    k, cells = tables.shape
    return Message("train", 1, cid, arrays={"w": np.asarray(w, np.float32), "rule_table": tables,
                                            "rule_valid": np.asarray(valid), "rule_acc": np.asarray(acc, float),
                                            "rule_or": np.zeros(k, bool), "cell_counts": counts},
                   metrics={"num_examples": 10, "train_loss": 0.0, "model_acc": 0.9})


def test_rule_weighted_aggregation_by_hand():
    data = NumericDataConfig()
    cfg = LRXFLConfig(concept_thresholds=[10.0])        # 2 concepts → 4 cells
    space = ConceptSpace.from_raw(cfg.concept_thresholds, data.input_center, data.input_scale)
    strat = LRXFLStrategy({"w": np.zeros(2, np.float32)}, cfg, data, space)
    counts = np.zeros((4, 3))
    counts[0, 2], counts[1, 1], counts[3, 0] = 5, 5, 5                   # class k lives in one cell each
    t = np.zeros((3, 4), bool)
    t[0, 3], t[1, 1] = True, True
    # class 0: both clients hold the same correct rule → both engaged; class 1: only c1 has a rule;
    # class 2: nobody → everyone engaged. Engagement counts: c1 = 3, c2 = 2.
    r1 = _reply("c1", [1.0, 0.0], t, [True, True, False], [0.9, 0.8, 0.0], counts)
    r2 = _reply("c2", [0.0, 1.0], t, [True, False, False], [0.7, 0.0, 0.0], counts)
    out = strat.aggregate_train(1, {"c1": r1, "c2": r2}, {})
    np.testing.assert_allclose(strat.weights["w"], [3 / 5, 2 / 5], rtol=1e-6)
    assert out["agg_weight_c1"] == pytest.approx(0.6)
    assert strat.global_rules[0]["f1"] == pytest.approx(1.0) and strat.global_rules[2]["table"] is None
    # "small" engagement: only the best holder of the class-0 rule (c1, 0.9) → c1 = 3, c2 = 1
    strat = LRXFLStrategy({"w": np.zeros(2, np.float32)}, LRXFLConfig(concept_thresholds=[10.0],
                                                                      user_engagement_scale="small"), data, space)
    strat.aggregate_train(1, {"c1": r1, "c2": r2}, {})
    np.testing.assert_allclose(strat.weights["w"], [3 / 4, 1 / 4], rtol=1e-6)


def test_local_explanation_recovers_a_clean_rule():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    bools = rng.random((300, 3)) < 0.5
    y = np.where(bools[:, 0] & ~bools[:, 1], 1, 0)                      # class 1 ⇔ c0 ∧ ¬c1
    model = make_len(3, 2, hidden=10, temperature=0.7, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    x, yt = torch.from_numpy(bools.astype(np.float32)), torch.from_numpy(y)
    for _ in range(150):
        loss = len_loss(model, x, yt, 1e-4)
        opt.zero_grad()
        loss.backward()
        opt.step()
    e = explain_class(model, bools, y, target=1, topk=50)
    np.testing.assert_array_equal(e.table, term_table([0], [1], 3))
    assert e.accuracy == pytest.approx(1.0)
