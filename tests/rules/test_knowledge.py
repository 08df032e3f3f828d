"""Knowledge-rule files (rules/knowledge.py): parsing, line-numbered errors, semantics against brute force."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rules.fol import RuleSyntaxError
from rules.knowledge import (
    KnowledgeRules,
    LinearExpr,
    RangeRule,
    conditions_from_box,
    parse_condition,
    parse_knowledge,
    read_knowledge,
)

TEXT = """\
# a P-KM and an R-KM over 4 named features
features: a, b, c, d
classes: u, v, w
default u
class v <- a > 0.5, 0.1 <= b < 0.9       # a box
class w : 2.5 <- 0.4*a - c + 1 >= d
range {u, v} <- a > 0.5
range not {u} <- c <= 0.3
"""


def brute(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same rules written out by hand."""
    a, b, c, d = x.T
    score = np.zeros((len(x), 3))
    f1 = (a > 0.5) & (b >= 0.1) & (b < 0.9)
    f2 = 0.4 * a - c + 1 >= d
    score[:, 1] += f1
    score[:, 2] += 2.5 * f2
    pred = np.where(f1 | f2, score.argmax(1), 0)
    allowed = np.ones((len(x), 3), dtype=bool)
    allowed[a > 0.5] &= np.array([True, True, False])
    allowed[c <= 0.3] &= np.array([False, True, True])
    return pred, allowed


def test_semantics_match_brute_force_and_round_trip():
    rules = parse_knowledge(TEXT, source="t.rules")
    x = np.random.default_rng(0).uniform(-0.5, 1.5, size=(500, 4))
    pred, allowed = brute(x)
    assert np.array_equal(rules.predict(x), pred)
    assert np.array_equal(rules.allowed(x), allowed)
    again = parse_knowledge(rules.format())
    assert np.array_equal(again.predict(x), pred) and np.array_equal(again.allowed(x), allowed)
    assert rules.feature_names == ("a", "b", "c", "d") and rules.class_names == ("u", "v", "w")
    assert [r.line for r in rules.score_rules] == [5, 6] and [r.line for r in rules.range_rules] == [7, 8]


def test_no_firing_range_rule_admits_all_and_abstain_without_default():
    rules = parse_knowledge("class 1 <- x0 > 0\nrange {2} <- x1 > 0", 3)
    x = np.array([[-1.0, -1.0], [1.0, 1.0]])
    assert rules.allowed(x).tolist() == [[True, True, True], [False, False, True]]
    assert rules.predict(x).tolist() == [-1, 1]


def test_ties_go_to_the_smaller_class_and_true_body():
    rules = parse_knowledge("class 2 <- true\nclass 1 <- x0 > 0", 3)
    assert rules.predict(np.array([[1.0], [-1.0]])).tolist() == [1, 2]


def test_linear_expression_matches_numpy():
    (cond,) = parse_condition("2*x0 - 0.5 * x2 + 3 - x1 < x2 * 4 + 1e-1")
    x = np.random.default_rng(1).normal(size=(200, 3))
    want = 2 * x[:, 0] - 0.5 * x[:, 2] + 3 - x[:, 1] < 4 * x[:, 2] + 0.1
    assert np.array_equal(cond.evaluate(x), want)
    assert parse_condition("x[2] >= -1.5")[0].left == LinearExpr(((2, 1.0),), 0.0)


@pytest.mark.parametrize("line, message", [
    ("class 7 <- x0 > 1", "outside [0, 3)"),
    ("range {} <- x0 > 1", "at least one class"),
    ("range not {0, 1, 2} <- x0 > 1", "excludes every class"),
    ("range 0, 1 <- x0 > 1", "braces"),
    ("class 1 <- x0 * x1 > 1", "linear"),
    ("class 1 <- x0 >", "empty side"),
    ("class 1 <- x0", "no comparison"),
    ("class 1 <- ", "empty body"),
    ("class 1 <- x0 > 1,", "stray ','"),
    ("class 1 <- 0 < x0 > 1", "one way"),
    ("class 1 <- speed > 1", "unknown feature 'speed'"),
    ("class 1 : heavy <- x0 > 1", "not a number"),
    ("klass 1 <- x0 > 1", "unknown rule head"),
    ("just words", "expected 'class C <- body'"),
    ("class cat <- x0 > 1", "unknown class 'cat'"),
])
def test_errors_name_source_and_line(line: str, message: str):
    with pytest.raises(RuleSyntaxError) as info:
        parse_knowledge(f"# header\n\n{line}\n", 3, source="kms.rules")
    assert info.value.line == 3 and info.value.source == "kms.rules"
    assert str(info.value).startswith("kms.rules:3: ") and message in str(info.value)


def test_names_are_checked_with_hints():
    with pytest.raises(RuleSyntaxError, match="did you mean 'elevation'"):
        parse_knowledge("features: elevation, slope\nclass 0 <- elevaton > 3", 2)
    with pytest.raises(RuleSyntaxError, match="number of classes is unknown"):
        parse_knowledge("class 0 <- x0 > 3")
    with pytest.raises(RuleSyntaxError, match="differs"):
        parse_knowledge("features: a, b\nclass 0 <- a > 0", 2, feature_names=("p", "q"))


def test_evaluation_checks_the_number_of_features():
    rules = parse_knowledge("range {0} <- x5 > 0", 2, source="r.rules")
    with pytest.raises(ValueError, match="r.rules: a rule uses feature x5 but the input has only 3"):
        rules.allowed(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="no prediction knowledge model"):
        rules.predict(np.zeros((2, 6)))


def test_read_file_and_box_helper(tmp_path: Path):
    path = tmp_path / "k.rules"
    path.write_text("classes: lo, hi\nrange {hi} <- x0 > 2\n")
    rules = read_knowledge(path)
    assert rules.source == str(path) and rules.num_classes == 2
    with pytest.raises(FileNotFoundError, match="not found"):
        read_knowledge(tmp_path / "missing.rules", 2)
    body = conditions_from_box([0, 3], [0.5, None], [1.5, 2.0])
    built = KnowledgeRules(2, range_rules=[RangeRule(frozenset({1}), body)])
    x = np.array([[1.0, 0, 0, 1.0], [0.2, 0, 0, 1.0], [1.0, 0, 0, 3.0]])
    assert built.allowed(x)[:, 0].tolist() == [False, True, True]
    assert "x0 > 0.5, x0 <= 1.5, x3 <= 2" in built.format()
