"""A small explicit-state model checker (stdlib only).

A *model* supplies ``initial()``, ``successors(state) -> [(label, state)]``, ``canonical(state)``
(symmetry reduction), ``violations(state) -> [str]`` (invariants, checked on every reached
state; transitions may also return a state whose violation list explains a bad step) and
``terminal_ok(state) -> str | None`` (None when a state without successors is a proper end,
otherwise why it is a deadlock). The search is an iterative DFS so that a back edge to a state
on the stack proves a cycle (non-termination); every violation comes with the trace that reaches it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol


class Model(Protocol):
    def initial(self) -> Hashable: ...
    def successors(self, state: Any) -> list[tuple[str, Any]]: ...
    def canonical(self, state: Any) -> Hashable: ...
    def violations(self, state: Any) -> list[str]: ...
    def terminal_ok(self, state: Any) -> str | None: ...


@dataclass
class Violation:
    prop: str  # e.g. "P1 deadlock"
    detail: str
    trace: list[str]  # transition labels from the initial state


@dataclass
class Report:
    states: int = 0
    transitions: int = 0
    terminal_states: int = 0
    seconds: float = 0.0
    complete: bool = True  # False when the state limit stopped the search
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.complete and not self.violations


def explore(model: Model, max_states: int = 2_000_000, stop_at_first: bool = True) -> Report:
    t0 = time.perf_counter()
    rep = Report()
    init = model.initial()
    key0 = model.canonical(init)
    visited = {key0}
    on_stack = {key0}
    # stack frames: (key, state, label that led here, successor iterator)
    stack: list[tuple[Hashable, Any, str, Any]] = []

    def trace() -> list[str]:
        return [label for _, _, label, _ in stack[1:]]

    def check(state: Any, extra: list[str]) -> bool:
        for v in model.violations(state):
            prop, _, detail = v.partition(": ")
            rep.violations.append(Violation(prop, detail, trace() + extra))
            if stop_at_first:
                return False
        return True

    stack.append((key0, init, "", iter(model.successors(init))))
    rep.states = 1
    if not check(init, []):
        rep.seconds = time.perf_counter() - t0
        return rep
    first_visit_has_succ: dict[Any, str | None] = {key0: None}
    while stack:
        key, state, label, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            if first_visit_has_succ.pop(key, "seen") is None:
                # no successor at all: a terminal state or a deadlock
                rep.terminal_states += 1
                why = model.terminal_ok(state)
                if why is not None:
                    rep.violations.append(Violation("P1 deadlock", why, trace()))
                    if stop_at_first:
                        break
            on_stack.discard(key)
            stack.pop()
            continue
        first_visit_has_succ[key] = "has successors"
        rep.transitions += 1
        nlabel, nstate = nxt
        nkey = model.canonical(nstate)
        if nkey in on_stack:
            rep.violations.append(Violation("P2 termination", "cycle: the run can go on forever", trace() + [nlabel]))
            if stop_at_first:
                break
            continue
        if nkey in visited:
            continue
        visited.add(nkey)
        rep.states += 1
        if rep.states > max_states:
            rep.complete = False
            break
        stack.append((nkey, nstate, nlabel, iter(model.successors(nstate))))
        on_stack.add(nkey)
        first_visit_has_succ[nkey] = None
        if not check(nstate, []):
            break
    rep.seconds = time.perf_counter() - t0
    return rep


def replay(model: Model, trace: list[str]) -> Any:
    """Re-execute a counterexample trace (transition labels) from the initial state.

    Raises ``ValueError`` if a label is not enabled: the trace no longer applies to the model
    (e.g. the protocol was fixed). Returns the state reached.
    """
    state = model.initial()
    for i, label in enumerate(trace):
        nxt = dict(model.successors(state))
        if label not in nxt:
            raise ValueError(f"step {i}: {label!r} is not enabled; enabled: {sorted(nxt)}")
        state = nxt[label]
    return state
