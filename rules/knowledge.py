"""Threshold / linear rules over feature vectors: knowledge models for Knowledge-Injected FL (Fan et al. 2022).

A rule file holds the two kinds of knowledge models (KMs) of the paper's Def. 4.2, written as rules on the
features ``x0 .. x{d-1}`` (0-based columns of the array the KM sees) or on names given by a ``features:`` line:

* **P-KM score rules** (prediction type): ``class 2 <- x3 > 0.5, x7 <= 1.2`` adds weight 1 (``class 2 : 0.7 <- ...``
  adds 0.7) to class 2's score when every condition of the body holds. The P-KM predicts the class of highest
  score (ties: the smaller class id); when no score rule fires it predicts the ``default`` class, or abstains
  (``-1``) when the file declares none.
* **R-KM range rules** (range type): ``range {0, 2, 5} <- x3 > 0.5`` says the label lies in {0, 2, 5} whenever
  the body holds; ``range not {1} <- x3 < 0.2`` excludes classes. The admissible set of a point is the
  intersection of the sets of all firing range rules, and every class when none fires (the paper's
  "if x_j > t then label ∈ S" causal/safety rules).

Conditions are comparisons ``<, <=, >, >=, ==, !=`` between linear expressions (``0.4*x4 + 0.4*x5 - 0.75*x2 <= 3``),
chained comparisons form boxes (``0.2 <= x3 < 0.9``) and ``true`` is a body that always holds. Text form:

```text
# comment
features: elevation, aspect, slope          # optional: names usable in conditions
classes: spruce, lodgepole, ponderosa       # optional: names usable in heads
default 0
class lodgepole <- elevation < 2900, slope <= 12
range {spruce, lodgepole} <- elevation > 3100   # trailing comment
```

Parse errors raise :class:`rules.fol.RuleSyntaxError` (the rule layer's error) naming the source, the 1-based
line number and the line. Evaluation is vectorised: each condition is one matrix-vector product.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rules.fol import RuleSyntaxError

__all__ = [
    "OPERATORS",
    "Condition",
    "KnowledgeRules",
    "LinearExpr",
    "RangeRule",
    "ScoreRule",
    "conditions_from_box",
    "format_knowledge",
    "parse_condition",
    "parse_knowledge",
    "read_knowledge",
]

OPERATORS = ("<=", ">=", "==", "!=", "<", ">")
_OP_SPLIT = re.compile(r"(<=|>=|==|!=|<|>)")
_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<feat>x\[\s*\d+\s*\]|[A-Za-z_][A-Za-z0-9_.]*)"
    r"|(?P<sym>[*+\-]))"
)
_XREF = re.compile(r"^x(?:\[\s*(\d+)\s*\]|(\d+))$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


# --- expressions and conditions --------------------------------------------------------------------


@dataclass(frozen=True)
class LinearExpr:
    """``sum_j coef[j] * x_j + const`` over 0-based feature columns."""

    coef: tuple[tuple[int, float], ...] = ()
    const: float = 0.0

    def features(self) -> set[int]:
        return {j for j, _ in self.coef}

    def minus(self, other: LinearExpr) -> LinearExpr:
        acc: dict[int, float] = {}
        for j, c in self.coef:
            acc[j] = acc.get(j, 0.0) + c
        for j, c in other.coef:
            acc[j] = acc.get(j, 0.0) - c
        return LinearExpr(tuple(sorted((j, c) for j, c in acc.items() if c != 0.0)), self.const - other.const)

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        """(n,) values for ``x`` of shape (n, d)."""
        out = np.full(x.shape[0], self.const, dtype=np.float64)
        for j, c in self.coef:
            out += c * x[:, j]
        return out

    def format(self, names: Sequence[str] | None = None) -> str:
        parts: list[str] = []
        for j, c in self.coef:
            ref = names[j] if names else f"x{j}"
            mag = abs(c)
            term = ref if mag == 1.0 else f"{_num(mag)}*{ref}"
            parts.append(("- " if c < 0 else "+ ") + term)
        if self.const != 0.0 or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + _num(abs(self.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _num(v: float) -> str:
    return repr(float(v)) if float(v) != int(v) or abs(v) >= 1e15 else str(int(v))


_COMPARE = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}


@dataclass(frozen=True)
class Condition:
    """``left OP right``; evaluated as ``(left - right) OP 0``."""

    left: LinearExpr
    op: str
    right: LinearExpr

    def features(self) -> set[int]:
        return self.left.features() | self.right.features()

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        return _COMPARE[self.op](self.left.minus(self.right).evaluate(x), 0.0)

    def format(self, names: Sequence[str] | None = None) -> str:
        return f"{self.left.format(names)} {self.op} {self.right.format(names)}"


def _body_mask(body: Sequence[Condition], x: np.ndarray) -> np.ndarray:
    out = np.ones(x.shape[0], dtype=bool)
    for cond in body:
        out &= cond.evaluate(x)
    return out


def _format_body(body: Sequence[Condition], names: Sequence[str] | None) -> str:
    return ", ".join(c.format(names) for c in body) if body else "true"


@dataclass(frozen=True)
class ScoreRule:
    """P-KM rule: ``class <cls> [: weight] <- body``."""

    cls: int
    body: tuple[Condition, ...]
    weight: float = 1.0
    line: int | None = None


@dataclass(frozen=True)
class RangeRule:
    """R-KM rule: ``range {allowed} <- body`` (``allowed`` already resolved from ``not {...}``)."""

    allowed: frozenset[int]
    body: tuple[Condition, ...]
    line: int | None = None


# --- the rule set ----------------------------------------------------------------------------------


@dataclass
class KnowledgeRules:
    """A parsed knowledge-rule file: P-KM score rules, R-KM range rules and an optional default class."""

    num_classes: int
    score_rules: list[ScoreRule] = field(default_factory=list)
    range_rules: list[RangeRule] = field(default_factory=list)
    default: int | None = None
    feature_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None
    source: str = "<rules>"

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise ValueError(f"{self.source}: num_classes must be >= 1, got {self.num_classes}")
        for r in self.score_rules:
            self._check_class(r.cls, r.line)
        for rr in self.range_rules:
            if not rr.allowed:
                raise RuleSyntaxError("a range rule must allow at least one class", line=rr.line, source=self.source)
            for c in rr.allowed:
                self._check_class(c, rr.line)
        if self.default is not None:
            self._check_class(self.default, None)
        if self.feature_names is not None:
            every: list[ScoreRule | RangeRule] = [*self.score_rules, *self.range_rules]
            for rule in every:
                used = {j for c in rule.body for j in c.features()}
                if used and max(used) >= len(self.feature_names):
                    raise RuleSyntaxError(
                        f"feature x{max(used)} outside the {len(self.feature_names)} declared feature names",
                        line=rule.line,
                        source=self.source,
                    )

    def _check_class(self, c: int, line: int | None) -> None:
        if not 0 <= c < self.num_classes:
            raise RuleSyntaxError(f"class {c} outside [0, {self.num_classes})", line=line, source=self.source)

    # -- sizes ---------------------------------------------------------------------------------------
    def features_used(self) -> set[int]:
        out: set[int] = set()
        every: list[ScoreRule | RangeRule] = [*self.score_rules, *self.range_rules]
        for r in every:
            for c in r.body:
                out |= c.features()
        return out

    def check_input(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"{self.source}: rules are evaluated on a (n, d) feature array, got shape {x.shape}")
        used = self.features_used()
        if used and max(used) >= x.shape[1]:
            raise ValueError(
                f"{self.source}: a rule uses feature x{max(used)} but the input has only "
                f"{x.shape[1]} features (x0..x{x.shape[1] - 1})"
            )
        return x

    # -- P-KM ----------------------------------------------------------------------------------------
    def scores(self, x: np.ndarray) -> np.ndarray:
        """(n, k) summed weights of the firing score rules."""
        x = self.check_input(x)
        out = np.zeros((x.shape[0], self.num_classes))
        for r in self.score_rules:
            out[:, r.cls] += r.weight * _body_mask(r.body, x)
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(n,) int64 P-KM class: argmax of the scores (ties → smaller id); ``default`` or -1 where none fires."""
        if not self.score_rules and self.default is None:
            raise ValueError(
                f"{self.source}: no 'class ... <- ...' score rule and no 'default' line: "
                "this file defines no prediction knowledge model"
            )
        x = self.check_input(x)
        fired = np.zeros(x.shape[0], dtype=bool)
        for r in self.score_rules:
            fired |= _body_mask(r.body, x)
        pred = self.scores(x).argmax(axis=1).astype(np.int64)
        pred[~fired] = -1 if self.default is None else self.default
        return pred

    # -- R-KM ----------------------------------------------------------------------------------------
    def firing(self, x: np.ndarray) -> np.ndarray:
        """(n, R) which range rules fire."""
        x = self.check_input(x)
        if not self.range_rules:
            return np.zeros((x.shape[0], 0), dtype=bool)
        return np.stack([_body_mask(r.body, x) for r in self.range_rules], axis=1)

    def allowed(self, x: np.ndarray) -> np.ndarray:
        """(n, k) bool admissible classes: intersection over the firing range rules (all classes if none fires).

        A row may come out empty when firing rules contradict each other; callers decide what that means
        (the KIFL client raises an error naming itself, the row and the rules' lines).
        """
        fire = self.firing(x)
        out = np.ones((fire.shape[0], self.num_classes), dtype=bool)
        for i, r in enumerate(self.range_rules):
            sets = np.zeros(self.num_classes, dtype=bool)
            sets[list(r.allowed)] = True
            out[fire[:, i]] &= sets
        return out

    def explain_row(self, x_row: np.ndarray) -> str:
        """Lines of the range rules firing on one row (for error messages)."""
        fire = self.firing(np.asarray(x_row, dtype=np.float64).reshape(1, -1))[0]
        lines = [f"line {r.line}" if r.line else f"rule {i}" for i, r in enumerate(self.range_rules) if fire[i]]
        return ", ".join(lines) or "none"

    # -- text ----------------------------------------------------------------------------------------
    def format(self) -> str:
        return format_knowledge(self)


# --- parsing ---------------------------------------------------------------------------------------


def _strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _feature_index(name: str, names: Sequence[str] | None) -> int:
    m = _XREF.match(name)
    if names is not None and name in names:
        return list(names).index(name)
    if m:
        return int(m.group(1) if m.group(1) is not None else m.group(2))
    known = list(names) if names else []
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    what = "declared feature names or x<index>" if names else "x<index> (add a 'features:' line to use names)"
    raise RuleSyntaxError(f"unknown feature {name!r}{hint}; use {what}")


def _parse_expr(text: str, names: Sequence[str] | None) -> LinearExpr:
    """``[+-] term ([+-] term)*`` with ``term = factor (* factor)*`` and at most one feature per term."""
    tokens: list[tuple[str, str]] = []
    pos, src = 0, text.strip()
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None or m.end() == pos:
            raise RuleSyntaxError(f"cannot read {src[pos:].strip()!r} in expression {src!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind).strip()))
        pos = m.end()
        while pos < len(src) and src[pos].isspace():
            pos += 1
    if not tokens:
        raise RuleSyntaxError("empty expression in a comparison")
    coef: dict[int, float] = {}
    const = 0.0
    i = 0

    def need(what: str) -> tuple[str, str]:
        if i >= len(tokens):
            raise RuleSyntaxError(f"expression {src!r} ends where {what} was expected")
        return tokens[i]

    first = True
    while i < len(tokens):
        sign = 1.0
        kind, tok = tokens[i]
        if kind == "sym" and tok in "+-":
            sign = -1.0 if tok == "-" else 1.0
            i += 1
        elif not first:
            raise RuleSyntaxError(f"expected '+' or '-' before {tok!r} in {src!r}")
        value, feat = sign, None
        while True:
            kind, tok = need("a number or a feature")
            if kind == "num":
                value *= float(tok)
            elif kind == "feat":
                if feat is not None:
                    raise RuleSyntaxError(f"product of two features in {src!r}: conditions must be linear")
                feat = _feature_index(tok, names)
            else:
                raise RuleSyntaxError(f"unexpected {tok!r} in {src!r}")
            i += 1
            if i < len(tokens) and tokens[i] == ("sym", "*"):
                i += 1
                continue
            break
        if feat is None:
            const += value
        else:
            coef[feat] = coef.get(feat, 0.0) + value
        first = False
    return LinearExpr(tuple(sorted((j, c) for j, c in coef.items() if c != 0.0)), const)


def parse_condition(text: str, feature_names: Sequence[str] | None = None) -> tuple[Condition, ...]:
    """One body item: ``a OP b`` or a chain ``a OP b OP c`` (a box) → one or two :class:`Condition`."""
    parts = _OP_SPLIT.split(text)
    if len(parts) < 3:
        raise RuleSyntaxError(f"condition {text.strip()!r} has no comparison ({', '.join(OPERATORS)})")
    exprs, ops = parts[0::2], parts[1::2]
    if any(not e.strip() for e in exprs):
        raise RuleSyntaxError(f"condition {text.strip()!r} has an empty side")
    if len(ops) > 2:
        raise RuleSyntaxError(f"condition {text.strip()!r} chains more than two comparisons")
    if len(ops) == 2 and not ({ops[0], ops[1]} <= {"<", "<="} or {ops[0], ops[1]} <= {">", ">="}):
        raise RuleSyntaxError(f"chained comparison {text.strip()!r} must go one way (a <= x < b or a > x >= b)")
    parsed = [_parse_expr(e, feature_names) for e in exprs]
    return tuple(Condition(parsed[i], ops[i], parsed[i + 1]) for i in range(len(ops)))


def _parse_body(text: str, names: Sequence[str] | None) -> tuple[Condition, ...]:
    text = text.strip()
    if not text:
        raise RuleSyntaxError("empty body after '<-' (write 'true' for a rule that always fires)")
    if text.lower() == "true":
        return ()
    items = [p.strip() for p in text.split(",")]
    if any(not p for p in items):
        raise RuleSyntaxError("empty condition (stray ',')")
    out: list[Condition] = []
    for item in items:
        out.extend(parse_condition(item, names))
    return tuple(out)


def _class_id(tok: str, num_classes: int, names: Sequence[str] | None) -> int:
    tok = tok.strip()
    if names is not None and tok in names:
        return list(names).index(tok)
    if re.fullmatch(r"\d+", tok):
        c = int(tok)
        if c >= num_classes:
            raise RuleSyntaxError(f"class {c} outside [0, {num_classes})")
        return c
    close = difflib.get_close_matches(tok, list(names or []), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise RuleSyntaxError(f"unknown class {tok!r}{hint}; use a class id in [0, {num_classes}) or a declared name")


def _parse_names(text: str, what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    for n in names:
        if not _NAME.match(n) or _XREF.match(n):
            raise RuleSyntaxError(
                f"{what} name {n!r} must be an identifier (letters, digits, '_', '.') and not of the form x<index>"
            )
    if len(set(names)) != len(names):
        raise RuleSyntaxError(f"a {what} name occurs twice")
    return names


def parse_knowledge(
    text: str,
    num_classes: int | None = None,
    *,
    feature_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    source: str = "<string>",
) -> KnowledgeRules:
    """Parse a knowledge-rule file (module docstring). ``num_classes`` may come from a ``classes:`` line."""
    fnames = tuple(feature_names) if feature_names is not None else None
    cnames = tuple(class_names) if class_names is not None else None
    scored: list[ScoreRule] = []
    ranged: list[RangeRule] = []
    default: int | None = None
    k = num_classes
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line:
            continue
        try:
            head, sep, body = line.partition("<-")
            head = head.strip()
            word = head.split(None, 1)[0].lower().rstrip(":") if head else ""
            if not sep:
                if word in ("features", "classes") and ":" in head:
                    names = _parse_names(head.split(":", 1)[1], word[:-2] if word == "classes" else "feature")
                    if word == "features":
                        if fnames is not None and fnames != names:
                            raise RuleSyntaxError(
                                f"'features:' {list(names)} differs from the names given by the caller {list(fnames)}"
                            )
                        fnames = names
                    else:
                        if cnames is not None and cnames != names:
                            raise RuleSyntaxError(
                                f"'classes:' {list(names)} differs from the names given by the caller {list(cnames)}"
                            )
                        if k is not None and k != len(names):
                            raise RuleSyntaxError(f"'classes:' names {len(names)} classes, expected {k}")
                        cnames, k = names, len(names)
                    continue
                if word == "default":
                    if default is not None:
                        raise RuleSyntaxError("a second 'default' line")
                    if k is None:
                        raise RuleSyntaxError(
                            "the number of classes is unknown: pass num_classes or add a "
                            "'classes:' line before the rules"
                        )
                    default = _class_id(head.split(None, 1)[1] if " " in head else "", k, cnames)
                    continue
                raise RuleSyntaxError(
                    "expected 'class C <- body', 'range {..} <- body', 'default C', 'features: ...' or 'classes: ...'"
                )
            if k is None:
                raise RuleSyntaxError(
                    "the number of classes is unknown: pass num_classes or add a 'classes:' line before the rules"
                )
            conditions = _parse_body(body, fnames)
            if word == "class":
                rest = head.split(None, 1)[1] if " " in head else ""
                cls_txt, colon, weight_txt = rest.partition(":")
                if not cls_txt.strip():
                    raise RuleSyntaxError("'class' needs a class: 'class 2 <- x3 > 0.5'")
                weight = 1.0
                if colon:
                    try:
                        weight = float(weight_txt)
                    except ValueError:
                        raise RuleSyntaxError(f"weight {weight_txt.strip()!r} is not a number") from None
                    if not np.isfinite(weight):
                        raise RuleSyntaxError(f"weight {weight_txt.strip()!r} is not finite")
                scored.append(ScoreRule(_class_id(cls_txt, k, cnames), conditions, weight, lineno))
            elif word == "range":
                rest = head[len("range") :].strip()
                negate = rest.lower().startswith("not")
                if negate:
                    rest = rest[3:].strip()
                if not (rest.startswith("{") and rest.endswith("}")):
                    raise RuleSyntaxError(
                        "a range head lists classes in braces: 'range {0, 2} <- ...' or 'range not {1} <- ...'"
                    )
                inner = rest[1:-1].strip()
                listed = {_class_id(t, k, cnames) for t in inner.split(",")} if inner else set()
                allowed = frozenset(set(range(k)) - listed) if negate else frozenset(listed)
                if not allowed:
                    raise RuleSyntaxError(
                        "a range rule must allow at least one class"
                        + (" ('not' excludes every class)" if negate else "")
                    )
                ranged.append(RangeRule(allowed, conditions, lineno))
            else:
                raise RuleSyntaxError(f"unknown rule head {head!r}: expected 'class C' or 'range {{...}}'")
        except RuleSyntaxError as err:
            raise err.located(line=lineno, source=source, text=raw) from None
    if k is None:
        raise RuleSyntaxError(
            "the number of classes is unknown: pass num_classes or add a 'classes:' line", source=source
        )
    return KnowledgeRules(k, scored, ranged, default, fnames, cnames, source)


def read_knowledge(
    path: str | Path,
    num_classes: int | None = None,
    *,
    feature_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
) -> KnowledgeRules:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"knowledge rule file {str(path)!r} not found")
    return parse_knowledge(
        path.read_text(encoding="utf-8"),
        num_classes,
        feature_names=feature_names,
        class_names=class_names,
        source=str(path),
    )


def format_knowledge(rules: KnowledgeRules, header: str | None = None) -> str:
    """Text that :func:`parse_knowledge` reads back to the same rules."""
    fn, cn = rules.feature_names, rules.class_names
    cls = (lambda c: cn[c]) if cn else str
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    if fn:
        lines.append("features: " + ", ".join(fn))
    if cn:
        lines.append("classes: " + ", ".join(cn))
    if rules.default is not None:
        lines.append(f"default {cls(rules.default)}")
    for r in rules.score_rules:
        w = "" if r.weight == 1.0 else f" : {_num(r.weight)}"
        lines.append(f"class {cls(r.cls)}{w} <- {_format_body(r.body, fn)}")
    for rr in rules.range_rules:
        lines.append(f"range {{{', '.join(cls(c) for c in sorted(rr.allowed))}}} <- {_format_body(rr.body, fn)}")
    return "\n".join(lines) + "\n"


def conditions_from_box(
    features: Iterable[int], lower: Iterable[float | None], upper: Iterable[float | None]
) -> tuple[Condition, ...]:
    """Conditions ``x_j > lower_j`` / ``x_j <= upper_j`` (None = unbounded): a decision-tree path."""
    out: list[Condition] = []
    for j, lo, hi in zip(features, lower, upper):
        feat = LinearExpr(((int(j), 1.0),))
        if lo is not None:
            out.append(Condition(feat, ">", LinearExpr((), float(lo))))
        if hi is not None:
            out.append(Condition(feat, "<=", LinearExpr((), float(hi))))
    return tuple(out)
