"""STL abstract syntax tree, printer and structural transformations.

Grammar (FedSTL Def. 1, LogiCP Eq. 8), discrete time, closed integer windows ``[lo, hi]``:

```text
φ ::= μ | ¬φ | φ ∧ φ | φ ∨ φ | φ → φ | □[lo,hi] φ | ◇[lo,hi] φ | φ U[lo,hi] φ | φ R[lo,hi] φ
μ ::= x ~ c | x1 - x2 ~ c          with ~ ∈ {<, <=, >, >=}
```

``c`` is a numeric constant or a *parameter name* bound at evaluation time.  ``R`` (release) is
the dual of until; it only exists so that every formula has a negation normal form (NNF), which
LogiCP's violation degree (Eq. 9) is computed on (spec §6.4).

Nodes are frozen dataclasses (hashable, compared structurally).  ``str(f)`` prints the canonical
text syntax, which :func:`rules.stl.parse` reads back to an equal AST, and which rtamt also reads
(except ``release``, which rtamt lacks).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

REL_OPS: tuple[str, ...] = ("<", "<=", ">", ">=")
#: ``¬(lhs op c)`` ⇔ ``lhs NEGATED_OP[op] c``.
NEGATED_OP: dict[str, str] = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
#: The same predicate written with its sides swapped (``c op lhs`` ⇔ ``lhs FLIPPED_OP[op] c``).
FLIPPED_OP: dict[str, str] = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
#: Words the parser reserves; they cannot name signals or parameters.
KEYWORDS: frozenset[str] = frozenset({"always", "eventually", "until", "release", "not", "and", "or", "true", "false"})


def _check_window(lo: Any, hi: Any, node: str) -> None:
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{node}: window bounds must be int, got {v!r}")
    if lo < 0 or hi < lo:
        raise ValueError(f"{node}: window [{lo}, {hi}] must satisfy 0 <= lo <= hi")


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name.isidentifier() or name in KEYWORDS:
        raise ValueError(f"invalid {what} name {name!r} (an identifier that is not a keyword)")


class Formula:
    """Base class of STL formula nodes: structure only.

    The semantics are functions of :mod:`rules.stl.robustness` (``stl.robustness(f, signals, params)``,
    ``stl.violation``, ``stl.holds``, ...), which dispatch on these classes; this module imports nothing
    from there, so the syntax sits below its semantics.
    """

    __slots__ = ()

    # --- structure ------------------------------------------------------------------------
    def children(self) -> tuple[Formula, ...]:
        """Direct sub-formulas."""
        return ()

    def walk(self) -> Iterator[Formula]:
        """All nodes, pre-order."""
        yield self
        for c in self.children():
            yield from c.walk()

    @property
    def horizon(self) -> int:
        """Steps of future needed to evaluate at one start time (``hrz``): 0 for predicates,
        max over Boolean children, ``hi + hrz(child)`` for temporal operators."""
        raise NotImplementedError(type(self).__name__)

    def signals(self) -> tuple[str, ...]:
        """Signal names in order of first appearance."""
        seen: dict[str, None] = {}
        for n in self.walk():
            if isinstance(n, Predicate):
                seen[n.signal] = None
                if n.minus is not None:
                    seen[n.minus] = None
        return tuple(seen)

    def parameters(self) -> tuple[str, ...]:
        """Free parameter names in order of first appearance."""
        seen: dict[str, None] = {}
        for n in self.walk():
            if isinstance(n, Predicate) and isinstance(n.threshold, str):
                seen[n.threshold] = None
        return tuple(seen)

    def bind(self, params: Mapping[str, Any]) -> Formula:
        """Substitute numeric values for (some of) the parameters; other names stay free."""
        return _map_predicates(self, lambda p: p.bind(params))

    def nnf(self) -> Formula:
        """Negation normal form: negations pushed onto predicates (and absorbed by flipping the
        comparison), ``→`` rewritten as ``¬φ ∨ ψ``, ``¬□ = ◇¬``, ``¬◇ = □¬``,
        ``¬(φ U ψ) = ¬φ R ¬ψ``.  Robustness is unchanged: ``ρ(f.nnf()) == ρ(f)``."""
        return _nnf(self, negate=False)

    def polarity(self, name: str) -> int:
        """Monotonicity of ρ (and of satisfaction) in parameter ``name``: +1 if increasing,
        -1 if decreasing, 0 if absent.  Raises ``ValueError`` if the parameter occurs with both
        polarities (the formula is then not monotone in it)."""
        return _polarity(self, name)

    # --- operators for building formulas in code ---------------------------------------------
    def __and__(self, other: Formula) -> And:
        return And((self, other))

    def __or__(self, other: Formula) -> Or:
        return Or((self, other))

    def __invert__(self) -> Not:
        return Not(self)

    def __rshift__(self, other: Formula) -> Implies:
        return Implies(self, other)

    def __str__(self) -> str:
        return to_text(self)


@dataclass(frozen=True, slots=True)
class Predicate(Formula):
    """``signal [- minus] op threshold``; ``threshold`` is a float or a parameter name.

    Robustness: ``lhs - c`` for ``>``/``>=`` and ``c - lhs`` for ``<``/``<=`` (strictness only
    matters for the Boolean semantics)."""

    signal: str
    op: str
    threshold: float | str
    minus: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.signal, "signal")
        if self.minus is not None:
            _check_name(self.minus, "signal")
        if self.op not in REL_OPS:
            raise ValueError(f"predicate operator must be one of {REL_OPS}, got {self.op!r}")
        thr = self.threshold
        if isinstance(thr, str):
            _check_name(thr, "parameter")
        elif isinstance(thr, bool) or not isinstance(thr, Real):
            raise TypeError(f"threshold must be a number or a parameter name, got {thr!r}")
        else:
            thr = float(thr)
            if not math.isfinite(thr):
                raise ValueError(f"threshold must be finite, got {thr!r}")
            object.__setattr__(self, "threshold", thr)

    @property
    def horizon(self) -> int:
        return 0

    @property
    def is_upper(self) -> bool:
        """True for ``<``/``<=`` (an upper bound on the signal term)."""
        return self.op in ("<", "<=")

    def bind(self, params: Mapping[str, Any]) -> Predicate:
        if isinstance(self.threshold, str) and self.threshold in params:
            return Predicate(self.signal, self.op, _as_float(params[self.threshold], self.threshold), self.minus)
        return self

    def negated(self) -> Predicate:
        """The predicate ``¬self`` (comparison flipped)."""
        return Predicate(self.signal, NEGATED_OP[self.op], self.threshold, self.minus)


@dataclass(frozen=True, slots=True)
class Not(Formula):
    child: Formula

    def children(self) -> tuple[Formula, ...]:
        return (self.child,)

    @property
    def horizon(self) -> int:
        return self.child.horizon


@dataclass(frozen=True, slots=True)
class And(Formula):
    """n-ary conjunction (≥ 2 operands); ρ = min."""

    operands: tuple[Formula, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", tuple(self.operands))
        if len(self.operands) < 2:
            raise ValueError("And needs at least two operands (use conj() for any number)")

    def children(self) -> tuple[Formula, ...]:
        return self.operands

    @property
    def horizon(self) -> int:
        return max(c.horizon for c in self.operands)


@dataclass(frozen=True, slots=True)
class Or(Formula):
    """n-ary disjunction (≥ 2 operands); ρ = max."""

    operands: tuple[Formula, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", tuple(self.operands))
        if len(self.operands) < 2:
            raise ValueError("Or needs at least two operands (use disj() for any number)")

    def children(self) -> tuple[Formula, ...]:
        return self.operands

    @property
    def horizon(self) -> int:
        return max(c.horizon for c in self.operands)


@dataclass(frozen=True, slots=True)
class Implies(Formula):
    """``left → right`` ≡ ``¬left ∨ right``; ρ = max(-ρ_left, ρ_right)."""

    left: Formula
    right: Formula

    def children(self) -> tuple[Formula, ...]:
        return (self.left, self.right)

    @property
    def horizon(self) -> int:
        return max(self.left.horizon, self.right.horizon)


@dataclass(frozen=True, slots=True)
class Always(Formula):
    """``□[lo,hi] child``; ρ(t) = min_{t' ∈ [t+lo, t+hi]} ρ_child(t')."""

    lo: int
    hi: int
    child: Formula

    def __post_init__(self) -> None:
        _check_window(self.lo, self.hi, "always")

    def children(self) -> tuple[Formula, ...]:
        return (self.child,)

    @property
    def horizon(self) -> int:
        return self.hi + self.child.horizon


@dataclass(frozen=True, slots=True)
class Eventually(Formula):
    """``◇[lo,hi] child``; ρ(t) = max_{t' ∈ [t+lo, t+hi]} ρ_child(t')."""

    lo: int
    hi: int
    child: Formula

    def __post_init__(self) -> None:
        _check_window(self.lo, self.hi, "eventually")

    def children(self) -> tuple[Formula, ...]:
        return (self.child,)

    @property
    def horizon(self) -> int:
        return self.hi + self.child.horizon


@dataclass(frozen=True, slots=True)
class Until(Formula):
    """``left U[lo,hi] right``;
    ρ(t) = max_{t' ∈ [t+lo, t+hi]} min(ρ_right(t'), min_{t'' ∈ J} ρ_left(t'')), J = [t, t')
    (default, rtamt/LTL) or [t, t'] (``until="inclusive"``, FedSTL Def. 5 as printed)."""

    lo: int
    hi: int
    left: Formula
    right: Formula

    def __post_init__(self) -> None:
        _check_window(self.lo, self.hi, "until")

    def children(self) -> tuple[Formula, ...]:
        return (self.left, self.right)

    @property
    def horizon(self) -> int:
        return self.hi + max(self.left.horizon, self.right.horizon)


@dataclass(frozen=True, slots=True)
class Release(Formula):
    """``left R[lo,hi] right`` ≡ ``¬(¬left U[lo,hi] ¬right)``;
    ρ(t) = min_{t' ∈ [t+lo, t+hi]} max(ρ_right(t'), max_{t'' ∈ J} ρ_left(t'')), J as for until."""

    lo: int
    hi: int
    left: Formula
    right: Formula

    def __post_init__(self) -> None:
        _check_window(self.lo, self.hi, "release")

    def children(self) -> tuple[Formula, ...]:
        return (self.left, self.right)

    @property
    def horizon(self) -> int:
        return self.hi + max(self.left.horizon, self.right.horizon)


# --- small constructors ------------------------------------------------------------------------
def conj(*formulas: Formula) -> Formula:
    """Conjunction of one or more formulas (the formula itself when there is one)."""
    if not formulas:
        raise ValueError("conj() needs at least one formula")
    return formulas[0] if len(formulas) == 1 else And(tuple(formulas))


def disj(*formulas: Formula) -> Formula:
    """Disjunction of one or more formulas (the formula itself when there is one)."""
    if not formulas:
        raise ValueError("disj() needs at least one formula")
    return formulas[0] if len(formulas) == 1 else Or(tuple(formulas))


def _as_float(value: Any, name: str) -> float:
    """One finite number from a float / int / 0-d or 1-element tensor or array."""
    size = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", 1)
    if isinstance(value, bool) or size != 1:
        raise ValueError(f"parameter {name!r}: expected one number, got {value!r}")
    try:
        out = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {name!r}: expected one number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"parameter {name!r}: value must be finite, got {out!r}")
    return out


# --- transformations ---------------------------------------------------------------------------
def _map_predicates(f: Formula, fn: Any) -> Formula:
    if isinstance(f, Predicate):
        return fn(f)
    if isinstance(f, Not):
        return Not(_map_predicates(f.child, fn))
    if isinstance(f, And):
        return And(tuple(_map_predicates(c, fn) for c in f.operands))
    if isinstance(f, Or):
        return Or(tuple(_map_predicates(c, fn) for c in f.operands))
    if isinstance(f, Implies):
        return Implies(_map_predicates(f.left, fn), _map_predicates(f.right, fn))
    if isinstance(f, (Always, Eventually)):
        return type(f)(f.lo, f.hi, _map_predicates(f.child, fn))
    if isinstance(f, (Until, Release)):
        return type(f)(f.lo, f.hi, _map_predicates(f.left, fn), _map_predicates(f.right, fn))
    raise TypeError(f"not an STL formula node: {f!r}")


def _nnf(f: Formula, negate: bool) -> Formula:
    if isinstance(f, Predicate):
        return f.negated() if negate else f
    if isinstance(f, Not):
        return _nnf(f.child, not negate)
    if isinstance(f, (And, Or)):
        ops = tuple(_nnf(c, negate) for c in f.operands)
        flip = isinstance(f, And) == negate  # ¬∧ → ∨, ¬∨ → ∧
        return Or(ops) if flip else And(ops)
    if isinstance(f, Implies):
        left, right = _nnf(f.left, not negate), _nnf(f.right, negate)
        return And((left, right)) if negate else Or((left, right))
    if isinstance(f, Always):
        return (Eventually if negate else Always)(f.lo, f.hi, _nnf(f.child, negate))
    if isinstance(f, Eventually):
        return (Always if negate else Eventually)(f.lo, f.hi, _nnf(f.child, negate))
    if isinstance(f, Until):
        return (Release if negate else Until)(f.lo, f.hi, _nnf(f.left, negate), _nnf(f.right, negate))
    if isinstance(f, Release):
        return (Until if negate else Release)(f.lo, f.hi, _nnf(f.left, negate), _nnf(f.right, negate))
    raise TypeError(f"not an STL formula node: {f!r}")


def _polarity(f: Formula, name: str, sign: int = 1) -> int:
    found: set[int] = set()

    def rec(g: Formula, s: int) -> None:
        if isinstance(g, Predicate):
            if g.threshold == name:
                found.add(s if g.is_upper else -s)
        elif isinstance(g, Not):
            rec(g.child, -s)
        elif isinstance(g, Implies):
            rec(g.left, -s)
            rec(g.right, s)
        else:
            for c in g.children():
                rec(c, s)

    rec(f, sign)
    if len(found) > 1:
        raise ValueError(f"parameter {name!r} occurs with both polarities: ρ is not monotone in it")
    return found.pop() if found else 0


# --- printer -----------------------------------------------------------------------------------
def format_number(v: float) -> str:
    """Shortest text that reads back to the same float (integers without ``.0``)."""
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _operand(f: Formula) -> str:
    """Operand of a binary connective: self-delimiting unary forms stay bare, the rest get
    parentheses (so precedence never matters when reading the text back, in ours or rtamt)."""
    text = to_text(f)
    return text if isinstance(f, (Not, Always, Eventually)) else f"({text})"


def to_text(f: Formula) -> str:
    """Canonical text syntax (see :func:`rules.stl.parse`)."""
    if isinstance(f, Predicate):
        lhs = f.signal if f.minus is None else f"{f.signal} - {f.minus}"
        thr = f.threshold if isinstance(f.threshold, str) else format_number(f.threshold)
        return f"{lhs} {f.op} {thr}"
    if isinstance(f, Not):
        return f"not({to_text(f.child)})"
    if isinstance(f, And):
        return " and ".join(_operand(c) for c in f.operands)
    if isinstance(f, Or):
        return " or ".join(_operand(c) for c in f.operands)
    if isinstance(f, Implies):
        return f"{_operand(f.left)} -> {_operand(f.right)}"
    if isinstance(f, Always):
        return f"always[{f.lo}:{f.hi}]({to_text(f.child)})"
    if isinstance(f, Eventually):
        return f"eventually[{f.lo}:{f.hi}]({to_text(f.child)})"
    if isinstance(f, Until):
        return f"{_operand(f.left)} until[{f.lo}:{f.hi}] {_operand(f.right)}"
    if isinstance(f, Release):
        return f"{_operand(f.left)} release[{f.lo}:{f.hi}] {_operand(f.right)}"
    raise TypeError(f"not an STL formula node: {f!r}")
