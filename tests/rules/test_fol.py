"""Relations with inverses, chain rules, the golden-rule text form: round trips and errors with line numbers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.fol import (
    RelationVocab,
    Rule,
    RuleSyntaxError,
    UnknownRelationError,
    bodies_array,
    chain_from_atoms,
    format_rules,
    parse_rule,
    parse_rules,
    read_rules,
    write_rules,
)

# The index form of the 39 DWIE golden rules (LogiRE data/dwie.grules.json, spec §4; inverse = id + 65).
LOGIRE_GRULES = [[30, [95]], [33, [98]], [33, [34]], [33, [99]], [29, [96]], [31, [94]], [21, [23]], [21, [22, 3]],
                 [22, [21, 68]], [5, [18, 3]], [18, [5, 68]], [5, [13]], [5, [7]], [5, [19]], [0, [6, 3]],
                 [6, [0, 68]], [13, [14, 3]], [14, [13, 68]], [19, [20, 3]], [20, [19, 68]], [7, [17, 3]],
                 [17, [7, 68]], [1, [2, 3]], [2, [1, 68]], [1, [24, 1]], [1, [36, 1]], [10, [15, 1]], [10, [37, 1]],
                 [26, [43, 1]], [26, [63, 1]], [4, [12]], [4, [42]], [4, [35]], [7, [27]], [40, [48]],
                 [50, [124, 49]], [9, [8]], [10, [11, 3]], [11, [10, 68]]]  # fmt: skip


def test_vocab_layout(vocab: RelationVocab) -> None:
    R = vocab.num_relations
    assert (R, vocab.num_tokens, vocab.stay) == (4, 9, 8)
    assert vocab.token_id("child_of") == 1
    assert vocab.token_id("~child_of") == R + 1
    assert vocab.token_name(R + 2) == "~spouse_of"
    assert vocab.token_name(vocab.stay) == "<stay>"
    assert [vocab.inverse(t) for t in (0, R, vocab.stay)] == [R, 0, vocab.stay]
    assert vocab.base(R + 3) == (3, True)
    assert vocab.pad((1, R)) == (1, R, vocab.stay)
    assert vocab.strip((1, vocab.stay, R)) == (1, R)
    assert vocab.format_body((vocab.stay,) * 3) == "<stay>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.token_name(9)


@pytest.mark.parametrize("names", [(), ("a", "a"), ("a b",), ("~a",), ("a,b",), ("",)])
def test_vocab_rejects_bad_names(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        RelationVocab(names)


def test_from_rel2id_drops_na() -> None:
    v = RelationVocab.from_rel2id({"Na": 0, "b": 2, "a": 1})
    assert v.names == ("a", "b")
    with pytest.raises(ValueError, match="contiguous"):
        RelationVocab.from_rel2id({"Na": 0, "a": 1, "b": 3})


def test_rule_validation(vocab: RelationVocab) -> None:
    with pytest.raises(ValueError, match="1-3 body atoms"):
        Rule(0, ())
    with pytest.raises(ValueError, match="1-3 body atoms"):
        Rule(0, (1, 2, 3, 1))
    with pytest.raises(ValueError, match="not a relation or inverse"):
        Rule(0, (vocab.stay,)).check(vocab)
    with pytest.raises(ValueError, match="not a relation id"):
        Rule(4, (1,)).check(vocab)
    assert Rule.from_tokens(0, (5, 8, 2), vocab) == Rule(0, (5, 2))
    with pytest.raises(ValueError, match="only stay"):
        Rule.from_tokens(0, (8, 8, 8), vocab)


def test_atoms_and_inverted(vocab: RelationVocab) -> None:
    rule = parse_rule("parent_of <- ~child_of, spouse_of", vocab)
    head, body = rule.atoms(vocab)
    assert head.format(vocab) == "parent_of(X,Y)"
    assert [a.format(vocab) for a in body] == ["child_of(A,X)", "spouse_of(A,Y)"]
    # ~parent_of(X,Y) <- ~spouse_of(X,A), child_of(A,Y)
    assert rule.inverted(vocab) == (4, (6, 1))
    assert rule.tokens(vocab) == (5, 2, 8)
    assert bodies_array([rule], vocab).tolist() == [[5, 2, 8]]


def test_parse_file_comments_and_blank_lines(vocab: RelationVocab) -> None:
    text = "# header\n\nparent_of <- ~child_of   # trailing\n  child_of<-~parent_of\nspouse_of <- ~spouse_of\n"
    rules = parse_rules(text, vocab)
    assert [r.format(vocab) for r in rules] == [
        "parent_of <- ~child_of",
        "child_of <- ~parent_of",
        "spouse_of <- ~spouse_of",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("parent_of ~child_of", "no '<-'"),
        ("parent_of <- child_of <- x", "more than one"),
        (" <- child_of", "missing head"),
        ("parent_of <- ", "empty body"),
        ("parent_of <- child_of,, spouse_of", "empty body atom"),
        ("parent_of <- a, b, c, d", "at most 3"),
        ("~parent_of <- child_of", "inverse"),
        ("parent_of <- ~~child_of", "double inverse"),
        ("parent_of <- child_of spouse_of", "one relation name"),
        ("parent_of <- chlid_of", "did you mean 'child_of'"),
        ("parnt_of <- child_of", "unknown relation 'parnt_of'"),
    ],
)
def test_errors_name_the_line(vocab: RelationVocab, line: str, message: str) -> None:
    text = f"# ok\nparent_of <- ~child_of\n{line}\n"
    with pytest.raises(RuleSyntaxError) as info:
        parse_rules(text, vocab, source="rules.txt")
    err = info.value
    assert err.line == 3 and err.source == "rules.txt"
    assert message in str(err)
    assert str(err).startswith("rules.txt:3: ")
    assert line.strip() in str(err)


def test_unknown_relation_error_type(vocab: RelationVocab) -> None:
    with pytest.raises(UnknownRelationError) as info:
        parse_rules("parent_of <- foo\n", vocab)
    assert info.value.name == "foo" and info.value.line == 1


@st.composite
def vocab_and_rules(draw: st.DrawFn) -> tuple[RelationVocab, list[Rule]]:
    R = draw(st.integers(1, 6))
    names = draw(
        st.lists(st.from_regex(r"[a-z][a-z0-9_\-]{0,8}", fullmatch=True), min_size=R, max_size=R, unique=True)
    )
    vocab = RelationVocab(tuple(names))
    rule = st.builds(
        Rule, st.integers(0, R - 1), st.lists(st.integers(0, 2 * R - 1), min_size=1, max_size=3).map(tuple)
    )
    return vocab, draw(st.lists(rule, min_size=0, max_size=8))


@settings(max_examples=80, deadline=None)
@given(vocab_and_rules())
def test_text_round_trip(data: tuple[RelationVocab, list[Rule]]) -> None:
    vocab, rules = data
    text = format_rules(rules, vocab, header="generated\nrules")
    assert parse_rules(text, vocab) == rules
    for r in rules:
        assert parse_rule(r.format(vocab), vocab) == r
        assert Rule.from_tokens(r.head, r.tokens(vocab), vocab) == r


def test_read_write_file(tmp_path, vocab: RelationVocab) -> None:
    rules = [Rule(0, (5,)), Rule(3, (0, 3))]
    write_rules(tmp_path / "r.txt", rules, vocab, header="two rules")
    assert read_rules(tmp_path / "r.txt", vocab) == rules
    assert (tmp_path / "r.txt").read_text().startswith("# two rules\n")


def test_chain_from_atoms_any_order() -> None:
    R = 4
    # h(X,Y) <= b2(Y,A), b1(A,X): X -~b1-> A -~b2-> Y
    assert chain_from_atoms(("X", "Y"), [(2, "Y", "A"), (1, "A", "X")], R) == (1 + R, 2 + R)
    assert chain_from_atoms(("X", "Y"), [(0, "B", "Y"), (1, "X", "A"), (2, "A", "B")], R) == (1, 2, 0)


@pytest.mark.parametrize(
    ("head", "atoms", "message"),
    [
        (("X", "paris"), [(0, "X", "A")], "constant 'paris' in the head"),
        (("X", "X"), [(0, "X", "A")], "same variable"),
        (("X", "Y"), [], "empty body"),
        (("X", "Y"), [(0, "X", "paris")], "constant"),
        (("X", "Y"), [(0, "X", "A"), (1, "X", "B"), (2, "B", "Y")], "more than one"),
        (("X", "Y"), [(0, "X", "A"), (1, "B", "Y")], "no body atom continues"),
        (("X", "Y"), [(0, "X", "Y"), (1, "Y", "A")], "before its last atom"),
        (("X", "Y"), [(0, "X", "A"), (1, "A", "B")], "ends at B"),
        (("X", "Y"), [(0, "A", "A")], "repeated variable"),
    ],
)
def test_chain_from_atoms_errors(head, atoms, message) -> None:
    with pytest.raises(RuleSyntaxError, match=message):
        chain_from_atoms(head, atoms, 4)


@pytest.mark.data
def test_real_golden_rules_parse(dwie_dir) -> None:
    """All 39 DWIE golden rules parse against rel2id.json and equal LogiRE's index form."""
    rel2id = json.loads((dwie_dir / "docred_style" / "meta" / "rel2id.json").read_text())
    vocab = RelationVocab.from_rel2id(rel2id)
    assert vocab.num_relations == 65 and vocab.names[0] == "citizen_of" and vocab.names[64] == "publisher"
    rules = read_rules(dwie_dir / "golden_rules.txt", vocab)
    assert len(rules) == 39
    assert [[r.head, list(r.body)] for r in rules] == LOGIRE_GRULES
    assert parse_rules(format_rules(rules, vocab), vocab) == rules
