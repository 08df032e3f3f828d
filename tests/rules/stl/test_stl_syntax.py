"""Parser, printer and structural transformations of rules.stl."""

from __future__ import annotations

import numpy as np
import pytest

from rules import stl
from rules.stl.generate import ALL_OPS, random_formula
from rules.stl.syntax import (
    Always,
    And,
    Eventually,
    Implies,
    Not,
    Or,
    Predicate,
    Release,
    Until,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always[0:5](x >= 3)", Always(0, 5, Predicate("x", ">=", 3.0))),
        ("eventually[2:4](x1 - x2 > 0.5)", Eventually(2, 4, Predicate("x1", ">", 0.5, minus="x2"))),
        ("(x < a) until[1:2] (x < b)", Until(1, 2, Predicate("x", "<", "a"), Predicate("x", "<", "b"))),
        ("G[0,3] x <= 2", Always(0, 3, Predicate("x", "<=", 2.0))),
        ("F [1, 2] (y > -1.5e-1)", Eventually(1, 2, Predicate("y", ">", -0.15))),
        ("3 <= x", Predicate("x", ">=", 3.0)),
        ("-1 > x - y", Predicate("x", "<", -1.0, minus="y")),
        ("(x1 - x2) > 0.5", Predicate("x1", ">", 0.5, minus="x2")),
        ("((x1 - x2) > 0.5)", Predicate("x1", ">", 0.5, minus="x2")),
        ("not x > 1 and y < 2", And((Not(Predicate("x", ">", 1.0)), Predicate("y", "<", 2.0)))),
        ("x > 1 or y < 2 and x < 0",
         Or((Predicate("x", ">", 1.0), And((Predicate("y", "<", 2.0), Predicate("x", "<", 0.0)))))),
        ("x > 1 -> y < 2 or x < 0",
         Implies(Predicate("x", ">", 1.0), Or((Predicate("y", "<", 2.0), Predicate("x", "<", 0.0))))),
        ("□[0,1] ¬(x ≥ 1) ∧ ◇[0,2](x ≤ c)",
         And((Always(0, 1, Not(Predicate("x", ">=", 1.0))), Eventually(0, 2, Predicate("x", "<=", "c"))))),
        ("x > 0 R[0:2] y > 0", Release(0, 2, Predicate("x", ">", 0.0), Predicate("y", ">", 0.0))),
        ("G > 1", Predicate("G", ">", 1.0)),  # G/F/U/R are names when no window follows
    ],
)
def test_parse_examples(text: str, expected: stl.Formula) -> None:
    assert stl.parse(text) == expected


def test_nary_chain_and_parenthesised_nesting_differ() -> None:
    flat = stl.parse("(x > 1) and (x > 2) and (x > 3)")
    nested = stl.parse("((x > 1) and (x > 2)) and (x > 3)")
    assert isinstance(flat, And) and len(flat.operands) == 3
    assert isinstance(nested, And) and len(nested.operands) == 2
    for f in (flat, nested):
        assert stl.parse(str(f)) == f


def test_printer_canonical_form() -> None:
    f = stl.parse("G[0,5]((x>=3) -> F[1,2](y < a))  &  (x1 - x2 > .5)")
    assert str(f) == "always[0:5]((x >= 3) -> eventually[1:2](y < a)) and (x1 - x2 > 0.5)"


@pytest.mark.parametrize("seed", range(4))
def test_print_parse_round_trip_random(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(150):
        f = random_formula(rng, signals=("x", "y", "z"), depth=4, max_window=5, ops=ALL_OPS,
                           params=("a", "b"))
        text = str(f)
        assert stl.parse(text) == f, text
        assert str(stl.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        ("always[0:5](x >= ", 17, "expected a number or a parameter name"),
        ("always[5:2](x > 1)", 7, "empty window"),
        ("x >= 3 and", 10, "expected a signal name"),
        ("x >== 3", 4, "unexpected character '='"),
        ("always[0:1.5](x > 1)", 9, "must be a non-negative integer"),
        ("always[0 5](x > 1)", 9, "':' or ','"),
        ("x < a and a > 1", 10, "both as a parameter and as a signal"),
        ("(x > 1) -> (x > 2) -> (x > 3)", 19, "chained '->'"),
        ("(x > 1) until[0:1] (x > 2) until[0:1] (x > 3)", 27, "chained"),
        ("x # 3", 2, "unexpected character '#'"),
        ("", 0, "empty formula"),
        ("(x > 1", 6, "')' closing '('"),
        ("x > 1)", 5, "unexpected ')'"),
        ("x", 1, "expected a comparison"),
        ("x > -a", 4, "cannot be negated"),
        ("and > 1", 0, "needs a left operand"),
        ("always > 1", 7, "'[' opening a time window"),
        ("x > 1 until (x > 2)", 12, "'[' opening a time window"),
    ],
)
def test_syntax_errors_report_positions(text: str, pos: int, fragment: str) -> None:
    with pytest.raises(stl.STLSyntaxError) as info:
        stl.parse(text)
    err = info.value
    assert err.pos == pos, (err.pos, str(err))
    assert fragment in str(err)
    assert f"column {pos + 1}" in str(err)
    assert isinstance(err, ValueError)


def test_syntax_error_line_and_column_on_multiline_text() -> None:
    with pytest.raises(stl.STLSyntaxError) as info:
        stl.parse("always[0:2](x > 1)\n and eventually[3:1](x < 0)")
    assert (info.value.line, info.value.column) == (2, 17)


def test_structure_helpers() -> None:
    f = stl.parse("always[1:4]((x < a) until[0:2] eventually[0:3](y - x >= b)) or (z > 1)")
    assert f.horizon == 4 + 2 + 3
    assert f.signals() == ("x", "y", "z")
    assert f.parameters() == ("a", "b")
    assert f.polarity("a") == 1 and f.polarity("b") == -1 and f.polarity("c") == 0
    g = f.bind({"a": 0.5})
    assert g.parameters() == ("b",) and "x < 0.5" in str(g)
    with pytest.raises(ValueError, match="both polarities"):
        stl.parse("(x < a) and (x > a)").polarity("a")
    with pytest.raises(ValueError, match="expected one number"):
        f.bind({"a": np.array([1.0, 2.0])})


def test_nnf_has_no_negation_and_flips_operators() -> None:
    f = stl.parse("not(always[0:2]((x >= 1) -> eventually[1:3](y < 2)) until[0:1] (x > 0))")
    g = f.nnf()
    assert not any(isinstance(n, (Not, Implies)) for n in g.walk())
    assert g == stl.parse(
        "(eventually[0:2]((x >= 1) and always[1:3](y >= 2))) release[0:1] (x <= 0)")


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        Always(3, 1, Predicate("x", ">", 0))
    with pytest.raises(TypeError):
        Always(0, 1.5, Predicate("x", ">", 0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Predicate("x", "==", 0)
    with pytest.raises(ValueError):
        Predicate("always", ">", 0)
    with pytest.raises(ValueError):
        Predicate("x", ">", float("nan"))
    with pytest.raises(ValueError):
        And((Predicate("x", ">", 0),))
    assert stl.conj(Predicate("x", ">", 0)) == Predicate("x", ">", 0)
