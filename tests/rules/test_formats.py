"""AnyBURL/PyClause, AMIE, RNNLogic and LogiRE rule files: round trips, conventions and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.fol import RelationVocab, Rule, RuleSyntaxError
from rules.formats import (
    AMIE_COLUMNS,
    ScoredRule,
    format_amie,
    format_amie_rule,
    format_anyburl,
    format_anyburl_rule,
    format_logire_json,
    format_rnnlogic,
    load_relation_names,
    parse_amie,
    parse_amie_rule,
    parse_anyburl,
    parse_anyburl_rule,
    parse_logire_json,
    parse_rnnlogic,
    read_rnnlogic_relations,
    unique_rules,
    without_zero_support,
)
from rules.measures import body_matrix
from tests.rules.conftest import random_docs


@st.composite
def scored_rules(draw: st.DrawFn) -> tuple[RelationVocab, list[ScoredRule]]:
    R = draw(st.integers(1, 5))
    name = st.from_regex(r"[a-z_][a-z0-9_/.\-]{0,10}", fullmatch=True)
    names = draw(st.lists(name, min_size=R, max_size=R, unique=True))
    vocab = RelationVocab(tuple(names))
    out = []
    for _ in range(draw(st.integers(0, 6))):
        body = tuple(draw(st.lists(st.integers(0, 2 * R - 1), min_size=1, max_size=3)))
        rule = Rule(draw(st.integers(0, R - 1)), body)
        if draw(st.booleans()):
            body = draw(st.integers(1, 500))
            support = draw(st.integers(0, body))
            pca = draw(st.integers(support, body))
            head = draw(st.integers(max(support, 1), 900))
            out.append(ScoredRule(rule, support, body, pca, head))
        else:
            out.append(ScoredRule(rule))
    return vocab, out


@settings(max_examples=60, deadline=None)
@given(scored_rules())
def test_anyburl_round_trip(data: tuple[RelationVocab, list[ScoredRule]]) -> None:
    vocab, items = data
    back = parse_anyburl(format_anyburl(items, vocab), vocab)
    assert [b.rule for b in back] == [s.rule for s in items]
    for s, b in zip(items, back):
        assert (b.support, b.body_size) == (s.support, s.body_size)
        if s.support is not None:
            assert b.confidence == pytest.approx(s.support / s.body_size, rel=1e-5)


@settings(max_examples=60, deadline=None)
@given(scored_rules())
def test_amie_round_trip(data: tuple[RelationVocab, list[ScoredRule]]) -> None:
    vocab, items = data
    text = format_amie(items, vocab)
    assert text.splitlines()[0].split("\t") == list(AMIE_COLUMNS)
    back = parse_amie(text, vocab)
    assert [b.rule for b in back] == [s.rule for s in items]
    for s, b in zip(items, back):
        assert (b.support, b.body_size, b.pca_body_size) == (s.support, s.body_size, s.pca_body_size)
        if s.support is not None:
            if s.support > 0:  # AMIE prints no head size: it is support / head coverage
                assert b.head_size == s.head_size
            assert b.confidence == pytest.approx(s.support / s.body_size, rel=1e-5)
            if s.pca_body_size:
                assert b.pca_confidence == pytest.approx(s.support / s.pca_body_size, rel=1e-5)
            else:  # 0/0 is written as nan and read back as missing
                assert b.pca_confidence is None


def test_anyburl_syntax(vocab: RelationVocab) -> None:
    R = vocab.num_relations
    rule = Rule(0, (R + 1, 2, 3))
    assert format_anyburl_rule(rule, vocab) == "parent_of(X,Y) <= child_of(A,X), spouse_of(A,B), lives_in(B,Y)"
    # AnyBURL may write the body from Y; atom order does not matter
    assert parse_anyburl_rule("parent_of(X,Y) <= lives_in(B,Y), spouse_of(A,B), child_of(A,X)", vocab) == rule
    # SAFRAN / PyClause example layout
    line = "1302\t165\t0.1267\tspouse_of(X,Y) <= spouse_of(Y,X)"
    (item,) = parse_anyburl(line, vocab)
    assert item.rule == Rule(2, (R + 2,)) and (item.body_size, item.support, item.confidence) == (1302, 165, 0.1267)
    # space-separated columns are tolerated
    (item,) = parse_anyburl("20 10 0.5 child_of(X,Y) <= parent_of(Y,X)", vocab)
    assert item.rule == Rule(1, (R,)) and item.support == 10


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1\t2\t0.5\tparent_of(X,paris) <= child_of(X,A)", "constant 'paris'"),
        ("1\t2\t0.5\tparent_of(X,Y) <= child_of(X,paris)", "constant"),
        ("1\t2\tparent_of(X,Y) <= child_of(X,Y)", "4 tab-separated"),
        ("a\tb\tc\tparent_of(X,Y) <= child_of(X,Y)", "columns must be"),
        ("parent_of(X,Y) <- child_of(X,Y)", "'<='"),
        ("parent_of(X,Y) <= child_of(X,Y) spouse_of(X,Y)", "expected ','"),
        ("parent_of(X,Y) <= foo(X,Y)", "unknown relation 'foo'"),
        ("parent_of(X,Y) <= ", "empty body"),
    ],
)
def test_anyburl_errors(vocab: RelationVocab, line: str, message: str) -> None:
    with pytest.raises(RuleSyntaxError, match=message) as info:
        parse_anyburl("1\t1\t1.0\tparent_of(X,Y) <= child_of(Y,X)\n" + line, vocab, source="r.txt")
    assert info.value.line == 2 and "r.txt:2:" in str(info.value)


def test_anyburl_rejects_unwritable_names() -> None:
    vocab = RelationVocab(("has(part)",))
    with pytest.raises(ValueError, match="AnyBURL"):
        format_anyburl([Rule(0, (0,))], vocab)


def test_amie_example_from_readme() -> None:
    vocab = RelationVocab(("_verb_group",))
    assert parse_amie_rule("?b _verb_group ?a => ?a _verb_group ?b", vocab) == Rule(0, (1,))
    text = "Mining started\n" + "\t".join(AMIE_COLUMNS) + "\n"
    text += "?b  _verb_group  ?a   => ?a  _verb_group  ?b\t0.931\t0.931\t0.981\t1060\t1138\t1081\t-2\n"
    (item,) = parse_amie(text, vocab)
    assert (item.support, item.body_size, item.pca_body_size) == (1060, 1138, 1081)
    assert item.head_size == round(1060 / 0.931)
    assert format_amie_rule(Rule(0, (1,)), vocab) == "?b  _verb_group  ?a   => ?a  _verb_group  ?b"


def test_amie_errors(vocab: RelationVocab) -> None:
    with pytest.raises(RuleSyntaxError, match="'=>'"):
        parse_amie_rule("?a parent_of ?b", vocab)
    with pytest.raises(RuleSyntaxError, match="triples") as info:
        parse_amie("Rule\tHead Coverage\n?a parent_of => ?a child_of ?b\t0.1\n", vocab, source="amie.tsv")
    assert info.value.line == 2


def test_rnnlogic_inverse_convention(vocab: RelationVocab) -> None:
    R = vocab.num_relations
    text = f"0 {R + 1}\n1 0 2 3\n{R + 2} 1 {R + 3}\n3 1 2 0.75\n"
    rules = parse_rnnlogic(text, vocab)
    # ~spouse_of <- child_of, ~lives_in  ==  spouse_of <- lives_in, ~child_of
    assert rules == [Rule(0, (R + 1,)), Rule(1, (0, 2, 3)), Rule(2, (3, R + 1)), Rule(3, (1, 2))]
    assert parse_rnnlogic(format_rnnlogic(rules, vocab), vocab) == rules


def test_rnnlogic_inverse_head_is_equivalent(vocab: RelationVocab) -> None:
    """~h(X,Y) <- b1, b2 holds where h(X,Y) <- ~b2, ~b1 holds on the transposed pair (brute-force check)."""
    R = vocab.num_relations
    doc = random_docs(3, n_docs=1, n_facts=14)[0]
    body = (1, R + 2)
    (rule,) = parse_rnnlogic(f"{R + 0} {body[0]} {body[1]}", vocab)
    assert rule.head == 0
    np.testing.assert_array_equal(body_matrix(body, doc, R).T, body_matrix(rule.body, doc, R))


def test_rnnlogic_unsupported(vocab: RelationVocab) -> None:
    text = "0 1\n1\n0 1 2 3 1\n2 3\n"
    with pytest.raises(RuleSyntaxError, match="no body") as info:
        parse_rnnlogic(text, vocab, source="rnn.txt")
    assert info.value.line == 2
    with pytest.warns(UserWarning, match="skipped 2 rules"):
        rules = parse_rnnlogic(text, vocab, skip_unsupported=True)
    assert rules == [Rule(0, (1,)), Rule(2, (3,))]
    with pytest.raises(RuleSyntaxError, match="outside") as info:
        parse_rnnlogic("0 1\n0 8\n", vocab, skip_unsupported=True)
    assert info.value.line == 2
    with pytest.raises(RuleSyntaxError, match="integer"):
        parse_rnnlogic("0 x 1\n", vocab)
    assert unique_rules([Rule(0, (1,)), Rule(0, (1,)), Rule(2, (3,))]) == [Rule(0, (1,)), Rule(2, (3,))]


def test_rnnlogic_relations_dict(tmp_path) -> None:
    names = ["/a/b", "/c/d", "/e"]
    path = tmp_path / "relations.dict"
    path.write_text("".join(f"{i}\t{n}\n" for i, n in enumerate(names + ["!" + n for n in names])))
    assert read_rnnlogic_relations(path) == tuple(names)
    assert load_relation_names(path).names == tuple(names)
    path.write_text("0\tx\n1\ty\n")
    assert read_rnnlogic_relations(path) == ("x", "y")
    path.write_text("0\tx\n2\ty\n")
    with pytest.raises(ValueError, match="not 0..1"):
        read_rnnlogic_relations(path)


def test_load_relation_names(tmp_path) -> None:
    (tmp_path / "rel2id.json").write_text(json.dumps({"Na": 0, "b": 2, "a": 1}))
    assert load_relation_names(tmp_path / "rel2id.json").names == ("a", "b")
    (tmp_path / "names.json").write_text(json.dumps(["x", "y"]))
    assert load_relation_names(tmp_path / "names.json").names == ("x", "y")
    (tmp_path / "names.txt").write_text("# relations\nx\ny\n")
    assert load_relation_names(tmp_path / "names.txt").names == ("x", "y")


def test_logire_json(vocab: RelationVocab) -> None:
    rules = [Rule(0, (5,)), Rule(3, (0, 7))]
    assert format_logire_json(rules, vocab) == "[[0, [5]], [3, [0, 7]]]"
    assert parse_logire_json(format_logire_json(rules, vocab), vocab) == rules
    with pytest.raises(RuleSyntaxError, match="rule #1"):
        parse_logire_json("[[0, [5]], [0, [8]]]", vocab)


def test_without_zero_support_drops_only_recorded_zeros() -> None:
    a, b, c = Rule(0, (1,)), Rule(0, (2, 3)), Rule(1, (0,))
    items = (x for x in [ScoredRule(a, support=0, body_size=0), ScoredRule(b, support=3, body_size=4), ScoredRule(c)])
    kept, dropped = without_zero_support(items)  # any iterable, read once
    assert [k.rule for k in kept] == [b, c] and dropped == 1
    assert without_zero_support([]) == ([], 0)
