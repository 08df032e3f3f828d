"""Text syntax of STL formulas: tokenizer and recursive-descent parser.

Syntax (the printer in :mod:`rules.stl.syntax` writes the canonical form, which rtamt reads too):

```text
formula  := disj ['->' disj]                      # chained '->' must be parenthesized
disj     := conj {('or' | '|' | '||' | '∨') conj}
conj     := binary {('and' | '&' | '&&' | '∧') binary}
binary   := unary [('until' | 'U' | 'release' | 'R') window unary]
unary    := ('not' | '!' | '~' | '¬') unary
          | ('always' | 'G' | '□') window unary
          | ('eventually' | 'F' | '◇') window unary
          | '(' formula ')' | predicate
window   := '[' INT (':' | ',') INT ']'             # closed integer window, lo <= hi
predicate:= term REL threshold | NUMBER REL term    # REL ∈ < <= > >= ≤ ≥
term     := NAME ['-' NAME] | '(' term ')'
threshold:= ['-'] NUMBER | NAME                     # a NAME here is a parameter
```

Examples: ``always[0:5](x >= 3)``, ``eventually[2:4](x1 - x2 > 0.5)``,
``(x < a) until[1:2] (x < b)`` (``a``, ``b`` are parameters), ``G[0,3](x <= 2)``.
Single letters G/F/U/R are operators only when a window follows; otherwise they are names.
Precedence, tightest first: unary operators, until/release, and, or, implication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .syntax import (
    FLIPPED_OP,
    KEYWORDS,
    Always,
    And,
    Eventually,
    Formula,
    Implies,
    Not,
    Or,
    Predicate,
    Release,
    Until,
)


class STLSyntaxError(ValueError):
    """Bad STL text; ``pos`` is the 0-based character offset, ``line``/``column`` are 1-based."""

    def __init__(self, message: str, text: str, pos: int) -> None:
        self.message = message
        self.text = text
        self.pos = pos
        self.line = text.count("\n", 0, pos) + 1
        start = text.rfind("\n", 0, pos) + 1
        self.column = pos - start + 1
        end = text.find("\n", pos)
        src = text[start : end if end >= 0 else len(text)]
        super().__init__(f"{message} at line {self.line}, column {self.column}:\n  {src}\n  {' ' * (self.column - 1)}^")


@dataclass(frozen=True)
class _Tok:
    kind: str  # NUM NAME REL LP RP LB RB SEP MINUS ARROW AND OR NOT ALW EVT UNT REL_ EOF
    text: str
    pos: int


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<NUM>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<NAME>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<REL><=|>=|<|>|≤|≥)
  | (?P<ARROW>->|=>|→)
  | (?P<AND>&&|&|∧|/\\)
  | (?P<OR>\|\||\||∨|\\/)
  | (?P<NOT>!|~|¬)
  | (?P<ALW>□|◻)
  | (?P<EVT>◇|♢|◊)
  | (?P<MINUS>-)
  | (?P<LP>\()
  | (?P<RP>\))
  | (?P<LB>\[)
  | (?P<RB>\])
  | (?P<SEP>[:,])
    """,
    re.VERBOSE,
)
_WORDS = {
    "and": "AND",
    "or": "OR",
    "not": "NOT",
    "always": "ALW",
    "eventually": "EVT",
    "until": "UNT",
    "release": "REL_",
}
_LETTERS = {"G": "ALW", "F": "EVT", "U": "UNT", "R": "REL_"}
_UNICODE_REL = {"≤": "<=", "≥": ">="}
_DESCR = {
    "NUM": "a number",
    "NAME": "a name",
    "REL": "a comparison (<, <=, >, >=)",
    "LP": "'('",
    "RP": "')'",
    "LB": "'['",
    "RB": "']'",
    "SEP": "':'",
    "EOF": "end of input",
}


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise STLSyntaxError(f"unexpected character {text[pos]!r}", text, pos)
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            word = m.group()
            if kind == "NAME" and word in _WORDS:
                kind = _WORDS[word]
            elif kind == "REL":
                word = _UNICODE_REL.get(word, word)
            toks.append(_Tok(kind, word, pos))
        pos = m.end()
    toks.append(_Tok("EOF", "", len(text)))
    # G/F/U/R are operators only when a window follows
    for i, t in enumerate(toks[:-1]):
        if t.kind == "NAME" and t.text in _LETTERS and toks[i + 1].kind == "LB":
            toks[i] = _Tok(_LETTERS[t.text], t.text, t.pos)
    return toks


class _Backtrack(Exception):
    pass


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.kinds: dict[str, tuple[str, int]] = {}  # name -> ("signal" | "parameter", pos)

    # helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def error(self, msg: str, tok: _Tok | None = None) -> STLSyntaxError:
        return STLSyntaxError(msg, self.text, (tok or self.tok).pos)

    def found(self, tok: _Tok | None = None) -> str:
        t = tok or self.tok
        return "end of input" if t.kind == "EOF" else repr(t.text)

    def expect(self, kind: str, what: str | None = None) -> _Tok:
        if self.tok.kind != kind:
            raise self.error(f"expected {what or _DESCR.get(kind, kind)}, found {self.found()}")
        t = self.tok
        self.i += 1
        return t

    def accept(self, kind: str) -> _Tok | None:
        if self.tok.kind == kind:
            t = self.tok
            self.i += 1
            return t
        return None

    def declare(self, name: str, kind: str, tok: _Tok) -> None:
        if name in KEYWORDS:
            raise self.error(f"{name!r} is a keyword and cannot be used as a {kind} name", tok)
        prev = self.kinds.get(name)
        if prev is not None and prev[0] != kind:
            raise self.error(f"name {name!r} is used both as a {prev[0]} and as a {kind}", tok)
        self.kinds.setdefault(name, (kind, tok.pos))

    # grammar
    def parse(self) -> Formula:
        if self.tok.kind == "EOF":
            raise self.error("empty formula")
        f = self.formula()
        if self.tok.kind != "EOF":
            raise self.error(f"unexpected {self.found()} after a complete formula")
        return f

    def formula(self) -> Formula:
        left = self.disj()
        if self.accept("ARROW"):
            right = self.disj()
            if self.tok.kind == "ARROW":
                raise self.error("chained '->' is ambiguous: add parentheses")
            return Implies(left, right)
        return left

    def disj(self) -> Formula:
        items = [self.conj()]
        while self.accept("OR"):
            items.append(self.conj())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def conj(self) -> Formula:
        items = [self.binary()]
        while self.accept("AND"):
            items.append(self.binary())
        return items[0] if len(items) == 1 else And(tuple(items))

    def binary(self) -> Formula:
        left = self.unary()
        if self.tok.kind in ("UNT", "REL_"):
            cls = Until if self.tok.kind == "UNT" else Release
            self.i += 1
            lo, hi = self.window()
            right = self.unary()
            if self.tok.kind in ("UNT", "REL_"):
                raise self.error(f"chained {self.found()} is ambiguous: add parentheses")
            return cls(lo, hi, left, right)
        return left

    def unary(self) -> Formula:
        t = self.tok
        if t.kind == "NOT":
            self.i += 1
            return Not(self.unary())
        if t.kind in ("ALW", "EVT"):
            self.i += 1
            lo, hi = self.window()
            child = self.unary()
            return (Always if t.kind == "ALW" else Eventually)(lo, hi, child)
        if t.kind in ("UNT", "REL_", "AND", "OR", "ARROW"):
            raise self.error(f"{self.found()} needs a left operand")
        return self.atom()

    def window(self) -> tuple[int, int]:
        self.expect("LB", "'[' opening a time window")
        lo_t = self.expect("NUM", "a non-negative integer window bound")
        self.expect("SEP", "':' or ',' between window bounds")
        hi_t = self.expect("NUM", "a non-negative integer window bound")
        self.expect("RB", "']' closing the time window")
        for b in (lo_t, hi_t):
            if not b.text.isdigit():
                raise self.error(f"window bound {b.text!r} must be a non-negative integer", b)
        lo, hi = int(lo_t.text), int(hi_t.text)
        if lo > hi:
            raise self.error(f"empty window [{lo}:{hi}]: lower bound exceeds upper bound", lo_t)
        return lo, hi

    def atom(self) -> Formula:
        if self.tok.kind == "LP":
            start, kinds = self.i, dict(self.kinds)
            try:  # '(' term ')' REL threshold, e.g. (x1 - x2) > 0.5
                signal, minus = self.term(strict=True)
            except (_Backtrack, STLSyntaxError):
                pass
            else:
                if self.tok.kind == "REL":
                    return self.rest_of_predicate(signal, minus)
            self.i, self.kinds = start + 1, kinds
            f = self.formula()
            self.expect("RP", "')' closing '('")
            return f
        return self.predicate()

    def term(self, strict: bool = False) -> tuple[str, str | None]:
        if self.tok.kind == "LP":
            self.i += 1
            out = self.term(strict)
            if self.tok.kind != "RP":
                if strict:
                    raise _Backtrack
                raise self.error(f"expected ')', found {self.found()}")
            self.i += 1
            return out
        if self.tok.kind != "NAME":
            if strict:
                raise _Backtrack
            raise self.error(f"expected a signal name, a number or '(', found {self.found()}")
        name_t = self.tok
        self.i += 1
        self.declare(name_t.text, "signal", name_t)
        minus = None
        if self.accept("MINUS"):
            m = self.expect("NAME", "a signal name after '-'")
            self.declare(m.text, "signal", m)
            minus = m.text
        return name_t.text, minus

    def predicate(self) -> Formula:
        t = self.tok
        if t.kind == "NUM" or (t.kind == "MINUS" and self.toks[self.i + 1].kind == "NUM"):
            value = self.number()
            op_t = self.expect("REL")
            signal, minus = self.term()
            return Predicate(signal, FLIPPED_OP[op_t.text], value, minus)
        signal, minus = self.term()
        if self.tok.kind != "REL":
            raise self.error(f"expected a comparison (<, <=, >, >=) after the signal term, found {self.found()}")
        return self.rest_of_predicate(signal, minus)

    def rest_of_predicate(self, signal: str, minus: str | None) -> Formula:
        op = self.expect("REL").text
        t = self.tok
        if t.kind == "NAME":
            self.i += 1
            self.declare(t.text, "parameter", t)
            return Predicate(signal, op, t.text, minus)
        if t.kind in ("NUM", "MINUS"):
            if t.kind == "MINUS" and self.toks[self.i + 1].kind == "NAME":
                raise self.error("a parameter cannot be negated; write the bound with its own sign")
            return Predicate(signal, op, self.number(), minus)
        raise self.error(f"expected a number or a parameter name after {op!r}, found {self.found()}")

    def number(self) -> float:
        sign = -1.0 if self.accept("MINUS") else 1.0
        return sign * float(self.expect("NUM").text)


def parse(text: str) -> Formula:
    """Parse STL text into a :class:`~rules.stl.syntax.Formula`; raises :class:`STLSyntaxError`
    (a ``ValueError``) with the position of the first problem."""
    if not isinstance(text, str):
        raise TypeError(f"parse() expects a string, got {type(text).__name__}")
    return _Parser(text).parse()
