"""First-order chain rules over a relation vocabulary with inverses (spec §2, §4 Table 2).

Vocabulary (shared with the rule generator and the grounding engine): ``R`` named relations give
``2R+1`` body tokens:

```text
c < R         relation c                      r(X,Y)
R <= c < 2R   inverse of relation c-R, "~r"   r(Y,X)
c == 2R       stay / padding                  X = Y   (identity; pads shorter bodies to length 3)
```

A chain rule ``head(X,Y) <- b1(X,Z1), b2(Z1,Z2), b3(Z2,Y)`` has a head relation id ``< R`` and a body of
1-3 non-stay tokens. "~r" is the INVERSE of r, never negation (spec §8.16).

Text form (that of the DWIE golden rules, ``dwie/golden_rules.txt`` in the shared data folder,
``$FEDNSL_SHARED_DATA``):

```text
# comment
head <- b1, ~b2        # trailing comment
```

Parse errors raise :class:`RuleSyntaxError` naming the source, the 1-based line number and the line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "INVERSE_PREFIX",
    "MAX_BODY_LENGTH",
    "Atom",
    "RelationVocab",
    "Rule",
    "RuleSyntaxError",
    "UnknownRelationError",
    "bodies_array",
    "chain_from_atoms",
    "is_anyburl_variable",
    "format_rule",
    "format_rules",
    "parse_rule",
    "parse_rules",
    "read_rules",
    "write_rules",
]

INVERSE_PREFIX = "~"
MAX_BODY_LENGTH = 3
_FORBIDDEN_IN_NAMES = re.compile(r"[\s,#]")


class RuleSyntaxError(ValueError):
    """A malformed rule; ``str()`` reads ``source:line: message`` followed by the offending text."""

    def __init__(self, message: str, *, line: int | None = None, source: str | None = None, text: str | None = None):
        self.message = message
        self.line = line
        self.source = source
        self.text = text
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.source or "<rule>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        out = f"{where}: {self.message}"
        if self.text is not None:
            out += f"\n    {self.text.rstrip()}"
        return out

    def located(self, *, line: int | None, source: str | None, text: str | None) -> RuleSyntaxError:
        """The same error (same class) with its location filled in."""
        err = type(self).__new__(type(self))
        RuleSyntaxError.__init__(err, self.message, line=line, source=source, text=text)
        for key, value in vars(self).items():
            if key not in ("message", "line", "source", "text"):
                setattr(err, key, value)
        return err


class UnknownRelationError(RuleSyntaxError):
    """A relation name that is not in the vocabulary (the message suggests close names)."""

    def __init__(self, name: str, known: Iterable[str] = (), **where: object):
        self.name = name
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        super().__init__(f"unknown relation {name!r}{hint}", **where)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RelationVocab:
    """``R`` relation names and the ``2R+1`` body tokens built on them (relations, inverses, stay).

    Examples:
        >>> v = RelationVocab(("parent_of", "child_of"))
        >>> v.num_tokens, v.stay, v.token_id("~child_of"), v.token_name(2)
        (5, 4, 3, '~parent_of')
    """

    names: tuple[str, ...]

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.names)
        object.__setattr__(self, "names", names)
        if not names:
            raise ValueError("a relation vocabulary needs at least one relation name")
        seen: set[str] = set()
        for i, name in enumerate(names):
            if not name or _FORBIDDEN_IN_NAMES.search(name) or name.startswith(INVERSE_PREFIX):
                raise ValueError(
                    f"relation {i} has name {name!r}: names must be non-empty, contain no whitespace, ',' or '#', "
                    f"and not start with {INVERSE_PREFIX!r}"
                )
            if name in seen:
                raise ValueError(f"relation name {name!r} occurs twice in the vocabulary")
            seen.add(name)
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})

    # sizes -------------------------------------------------------------------------------------
    @property
    def num_relations(self) -> int:
        """R."""
        return len(self.names)

    @property
    def num_tokens(self) -> int:
        """2R+1."""
        return 2 * len(self.names) + 1

    @property
    def stay(self) -> int:
        """The stay/padding token 2R."""
        return 2 * len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    # names <-> ids -----------------------------------------------------------------------------
    def relation_id(self, name: str) -> int:
        """Id of a plain relation name (no ``~``); :class:`UnknownRelationError` otherwise."""
        idx = self._index.get(name)  # type: ignore[attr-defined]
        if idx is None:
            raise UnknownRelationError(name, self.names)
        return int(idx)

    def token_id(self, name: str) -> int:
        """Token of ``r`` or ``~r``."""
        name = name.strip()
        if name.startswith(INVERSE_PREFIX):
            base = name[len(INVERSE_PREFIX) :].strip()
            if base.startswith(INVERSE_PREFIX):
                raise RuleSyntaxError(f"double inverse {name!r}: write the relation without '~'")
            return self.relation_id(base) + self.num_relations
        return self.relation_id(name)

    def token_name(self, token: int) -> str:
        """``r``, ``~r`` or ``<stay>`` for a token id."""
        token = self.check_token(token)
        R = self.num_relations
        if token < R:
            return self.names[token]
        if token < 2 * R:
            return INVERSE_PREFIX + self.names[token - R]
        return "<stay>"

    def check_token(self, token: int) -> int:
        token = int(token)
        if not 0 <= token < self.num_tokens:
            raise ValueError(f"token {token} outside the vocabulary [0, {self.num_tokens}) of R={self.num_relations}")
        return token

    def inverse(self, token: int) -> int:
        """r <-> ~r; the stay token is its own inverse."""
        token = self.check_token(token)
        R = self.num_relations
        if token < R:
            return token + R
        if token < 2 * R:
            return token - R
        return token

    def base(self, token: int) -> tuple[int, bool]:
        """(relation id, is_inverse) of a non-stay token."""
        token = self.check_token(token)
        if token == self.stay:
            raise ValueError("the stay token has no relation")
        R = self.num_relations
        return (token - R, True) if token >= R else (token, False)

    # bodies ------------------------------------------------------------------------------------
    def strip(self, tokens: Iterable[int]) -> tuple[int, ...]:
        """Drop stay tokens (the identity): ``(b1, 2R, b2) -> (b1, b2)``."""
        return tuple(int(t) for t in tokens if self.check_token(int(t)) != self.stay)

    def pad(self, tokens: Iterable[int], length: int = MAX_BODY_LENGTH) -> tuple[int, ...]:
        """Right-pad a body with the stay token to ``length``."""
        toks = tuple(self.check_token(int(t)) for t in tokens)
        if len(toks) > length:
            raise ValueError(f"body {toks} is longer than {length}")
        return toks + (self.stay,) * (length - len(toks))

    def format_body(self, tokens: Iterable[int]) -> str:
        """``b1, ~b2`` (stay tokens omitted; ``<stay>`` for an all-stay identity body)."""
        toks = self.strip(tokens)
        return ", ".join(self.token_name(t) for t in toks) if toks else "<stay>"

    # constructors ------------------------------------------------------------------------------
    @classmethod
    def from_rel2id(cls, rel2id: Mapping[str, int], drop: Iterable[str] = ("Na",)) -> RelationVocab:
        """From a DocRED-style ``rel2id.json`` mapping; ``drop`` names (``Na`` = no relation) are not relations
        and the remaining ids must be contiguous (DWIE: ``id = rel2id[name] - 1``)."""
        dropped = set(drop)
        items = sorted(((int(i), n) for n, i in rel2id.items() if n not in dropped), key=lambda x: x[0])
        ids = [i for i, _ in items]
        if not ids:
            raise ValueError(f"rel2id holds no relation after dropping {sorted(dropped)}")
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise ValueError(f"relation ids are not contiguous after dropping {sorted(dropped)}: {ids}")
        return cls(tuple(n for _, n in items))


@dataclass(frozen=True)
class Atom:
    """A binary atom ``relation(subject, object)`` over variable names (AnyBURL style: X, A, B, Y)."""

    relation: int
    subject: str
    object: str

    def format(self, vocab: RelationVocab) -> str:
        return f"{vocab.names[self.relation]}({self.subject},{self.object})"


_BODY_VARIABLES = ("A", "B", "C", "D", "E", "F", "G", "H")


@dataclass(frozen=True, order=True)
class Rule:
    """Chain rule ``head(X,Y) <- body[0](X,Z1), ..., body[-1](Z_{l-1},Y)`` with 1-3 non-stay body tokens.

    Token ids follow :class:`RelationVocab` (``R + r`` = inverse of r); the rule does not know R itself, so
    range checks happen in :meth:`check` and in the parsers.
    """

    head: int
    body: tuple[int, ...]

    def __post_init__(self) -> None:
        body = tuple(int(t) for t in self.body)
        object.__setattr__(self, "head", int(self.head))
        object.__setattr__(self, "body", body)
        if self.head < 0:
            raise ValueError(f"head relation id {self.head} is negative")
        if not 1 <= len(body) <= MAX_BODY_LENGTH:
            raise ValueError(f"a chain rule has 1-{MAX_BODY_LENGTH} body atoms, got {len(body)}: {body}")
        if min(body) < 0:
            raise ValueError(f"negative body token in {body}")

    def check(self, vocab: RelationVocab) -> Rule:
        """Raise if the head is not a relation or a body token is stay/out of range; return self."""
        if self.head >= vocab.num_relations:
            raise ValueError(f"head {self.head} is not a relation id (< R={vocab.num_relations})")
        for t in self.body:
            if t >= vocab.stay:
                raise ValueError(f"body token {t} is not a relation or inverse (< 2R={vocab.stay})")
        return self

    @classmethod
    def from_tokens(cls, head: int, tokens: Iterable[int], vocab: RelationVocab) -> Rule:
        """From a padded generator body (stay tokens anywhere are the identity and are dropped)."""
        body = vocab.strip(tokens)
        if not body:
            raise ValueError("the body holds only stay tokens (identity), which is not a chain rule")
        return cls(head, body).check(vocab)

    def tokens(self, vocab: RelationVocab, length: int = MAX_BODY_LENGTH) -> tuple[int, ...]:
        """Body padded with the stay token to ``length`` (the generator's layout)."""
        return vocab.pad(self.body, length)

    def atoms(self, vocab: RelationVocab) -> tuple[Atom, list[Atom]]:
        """Head atom ``h(X,Y)`` and body atoms with variables X, A, B, ..., Y (inverses swap arguments)."""
        self.check(vocab)
        variables = ["X", *_BODY_VARIABLES[: len(self.body) - 1], "Y"]
        body = []
        for i, tok in enumerate(self.body):
            rel, inv = vocab.base(tok)
            a, b = variables[i], variables[i + 1]
            body.append(Atom(rel, b, a) if inv else Atom(rel, a, b))
        return Atom(self.head, "X", "Y"), body

    def inverted(self, vocab: RelationVocab) -> tuple[int, tuple[int, ...]]:
        """The same rule read for the inverse head: ``~h(X,Y) <- ~b_l, ..., ~b_1`` as (head token, body)."""
        return vocab.inverse(self.head), tuple(vocab.inverse(t) for t in reversed(self.body))

    def format(self, vocab: RelationVocab) -> str:
        """``head <- b1, ~b2`` (the golden-rule text form)."""
        self.check(vocab)
        return f"{vocab.names[self.head]} <- {vocab.format_body(self.body)}"

    @classmethod
    def parse(cls, text: str, vocab: RelationVocab) -> Rule:
        return parse_rule(text, vocab)


# --- golden-rule text form ---------------------------------------------------------------------


def _strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def parse_rule(text: str, vocab: RelationVocab) -> Rule:
    """Parse one ``head <- b1, ~b2`` rule (a trailing ``# comment`` is ignored)."""
    line = _strip_comment(text)
    if not line:
        raise RuleSyntaxError("empty rule")
    if line.count("<-") != 1:
        found = "no '<-'" if "<-" not in line else "more than one '<-'"
        raise RuleSyntaxError(f"expected 'head <- body1, body2', found {found}")
    head_text, body_text = (part.strip() for part in line.split("<-"))
    if not head_text:
        raise RuleSyntaxError("missing head relation before '<-'")
    if head_text.startswith(INVERSE_PREFIX):
        raise RuleSyntaxError(
            f"head {head_text!r} is an inverse; write the rule for the relation itself "
            "(h(Y,X) <- b1..bn  is  h(X,Y) <- ~bn..~b1)"
        )
    if any(ch.isspace() for ch in head_text):
        raise RuleSyntaxError(f"head {head_text!r} must be a single relation name")
    head = vocab.relation_id(head_text)
    if not body_text:
        raise RuleSyntaxError("empty body after '<-'")
    parts = [p.strip() for p in body_text.split(",")]
    if any(not p for p in parts):
        raise RuleSyntaxError("empty body atom (stray ',')")
    if len(parts) > MAX_BODY_LENGTH:
        raise RuleSyntaxError(f"body has {len(parts)} atoms; chain rules have at most {MAX_BODY_LENGTH}")
    for p in parts:
        if any(ch.isspace() for ch in p.replace(INVERSE_PREFIX + " ", INVERSE_PREFIX)):
            raise RuleSyntaxError(f"body atom {p!r} must be one relation name (separate atoms with ',')")
    body = tuple(vocab.token_id(p) for p in parts)
    return Rule(head, body)


def format_rule(rule: Rule, vocab: RelationVocab) -> str:
    return rule.format(vocab)


def parse_rules(text: str, vocab: RelationVocab, *, source: str = "<string>") -> list[Rule]:
    """Parse a rule file: one ``head <- body`` per line, ``#`` comments and blank lines skipped."""
    rules: list[Rule] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not _strip_comment(raw):
            continue
        try:
            rules.append(parse_rule(raw, vocab))
        except RuleSyntaxError as err:
            raise err.located(line=lineno, source=source, text=raw) from None
    return rules


def read_rules(path: str | Path, vocab: RelationVocab) -> list[Rule]:
    path = Path(path)
    return parse_rules(path.read_text(encoding="utf-8"), vocab, source=str(path))


def format_rules(rules: Iterable[Rule], vocab: RelationVocab, header: str | None = None) -> str:
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    lines += [r.format(vocab) for r in rules]
    return "\n".join(lines) + "\n"


def write_rules(path: str | Path, rules: Iterable[Rule], vocab: RelationVocab, header: str | None = None) -> None:
    Path(path).write_text(format_rules(rules, vocab, header), encoding="utf-8")


# --- atoms -> chain (shared by the AnyBURL and AMIE readers) ----------------------------------


def is_anyburl_variable(term: str) -> bool:
    """AnyBURL/PyClause variables are single capital letters (X, Y, A, B, ...); longer terms are constants."""
    return len(term) == 1 and term.isupper()


def chain_from_atoms(
    head: tuple[str, str],
    atoms: Sequence[tuple[int, str, str]],
    num_relations: int,
    is_variable: Callable[[str], bool] | None = None,
) -> tuple[int, ...]:
    """Body tokens of a chain rule given as atoms ``(relation, arg1, arg2)`` with head ``h(x, y)``.

    Follows the variables from the head subject to the head object, whatever the order of the atoms
    in the text (AnyBURL may start the body at Y); an atom walked backwards becomes the inverse token.
    Raises :class:`RuleSyntaxError` for constants, branching or disconnected bodies.
    """
    if is_variable is None:
        is_variable = is_anyburl_variable
    x, y = head
    for v in (x, y):
        if not is_variable(v):
            raise RuleSyntaxError(
                f"constant {v!r} in the head: rules with constants (AnyBURL U_c/U_d/zero rules) are not chain rules"
            )
    if x == y:
        raise RuleSyntaxError("head has the same variable twice (h(X,X)); not a chain rule")
    if not atoms:
        raise RuleSyntaxError("empty body: zero-length rules are not chain rules")
    if len(atoms) > MAX_BODY_LENGTH:
        raise RuleSyntaxError(f"body has {len(atoms)} atoms; chain rules have at most {MAX_BODY_LENGTH}")
    for rel, a, b in atoms:
        for v in (a, b):
            if not is_variable(v):
                raise RuleSyntaxError(f"constant {v!r} in a body atom: only variable chains are supported")
        if a == b:
            raise RuleSyntaxError(f"body atom with a repeated variable ({a},{b}) is not a chain step")
    unused = list(range(len(atoms)))
    current, seen, tokens = x, {x}, []
    while unused:
        touching = [i for i in unused if current in atoms[i][1:]]
        if len(touching) != 1:
            what = "no body atom continues" if not touching else "more than one body atom continues"
            raise RuleSyntaxError(f"body is not a chain from {x} to {y}: {what} from variable {current}")
        i = touching[0]
        unused.remove(i)
        rel, a, b = atoms[i]
        forward = a == current
        nxt = b if forward else a
        if nxt in seen:
            raise RuleSyntaxError(f"body revisits variable {nxt}: not a simple chain")
        if nxt == y and unused:
            raise RuleSyntaxError(f"body reaches {y} before its last atom: not a chain")
        tokens.append(rel if forward else rel + num_relations)
        seen.add(nxt)
        current = nxt
    if current != y:
        raise RuleSyntaxError(f"body chain ends at {current}, not at the head object {y}")
    return tuple(tokens)


def bodies_array(rules: Sequence[Rule], vocab: RelationVocab, length: int = MAX_BODY_LENGTH) -> np.ndarray:
    """(J, length) int64 padded body tokens of ``rules``."""
    return np.array([r.tokens(vocab, length) for r in rules], dtype=np.int64).reshape(len(rules), length)
