"""Parametric property templates of FedSTL Table 1 (rows 1–7) and their instantiation.

A template is a formula with free parameters, evaluated at start time 0 of each trace (a trace
must have at least ``template.length = horizon + 1`` steps; later steps are ignored).  Windows
are closed integer windows laid out consecutively: conjunct ``k`` (``k = 0 .. count-1``) covers
``[start + k·width, start + k·width + width - 1]``.  Parameter names are ``a{k}`` / ``b{k}``.

| row | factory | conjunct k | mining |
|---|---|---|---|
| 1 | ``operational_range`` | ``□[W_k](x ≤ a_k ∧ x ≥ b_k)`` | closed form |
| 2 | ``existence`` | ``◇[W_k](x ≤ a_k ∧ x ≥ b_k)`` | closed form |
| 3 | ``until_template`` | ``(x < a_k) U[i_k, i_k+1] (x < b_k)``, ``i_k = first+k`` | search |
| 4 | ``intra_task`` | ``□[W_k](x1 − x2 > a_k)`` | closed form |
| 5 | ``temporal_implication`` | ``□[W_k]((x ≥ a_k) → ◇[t3,t4](x ≥ b_k))`` | search |
| 6 | ``nested_intra_task`` | ``□[W_k]((x1 ≥ a_k) → ◇[t3,t4](x2 ≥ b_k))`` | search |
| 7 | ``multiple_eventualities`` | ``◇[W_k](x ≥ a_k)`` | closed form |

Row 8 of Table 1 ("template-free mining") has no template and is not provided.  FedSTL's code
uses row 1 with 12 two-hour windows over a 24-h horizon (``operational_range(12, 2)``, the
default) and row 4 with 20 windows of 2 steps (``intra_task()``, the default).  Any formula can
be made a template with :meth:`Template.from_formula` (mined by the search).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .parser import parse
from .robustness import ParamValue, holds, robustness, violation
from .syntax import (
    Always,
    And,
    Eventually,
    Formula,
    Implies,
    Predicate,
    Until,
    conj,
)

TemplateSignals = torch.Tensor | Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Template:
    """A parametric STL property.

    ``conjuncts`` are the top-level pieces with pairwise disjoint parameters (mined one at a
    time); ``closed_form`` (if any) maps signals ``{name: (clients, samples, length)}`` (float64)
    to tight parameters ``{name: (clients,)}``."""

    name: str
    formula: Formula
    conjuncts: tuple[Formula, ...]
    description: str = ""
    number: int | None = None
    closed_form: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def params(self) -> tuple[str, ...]:
        """Parameter names, in order of appearance."""
        return self.formula.parameters()

    @property
    def signals(self) -> tuple[str, ...]:
        """Signal names used by the template."""
        return self.formula.signals()

    @property
    def length(self) -> int:
        """Trace steps a sample needs: ``horizon + 1``."""
        return self.formula.horizon + 1

    def __str__(self) -> str:
        return f"{self.name}: {self.formula}"

    @classmethod
    def from_formula(cls, formula: Formula | str, name: str = "custom", description: str = "") -> Template:
        """Any parametric formula as a template; top-level conjuncts that share no parameter
        are mined separately; conjuncts without parameters are ignored by the miner."""
        f = parse(formula) if isinstance(formula, str) else formula
        if not f.parameters():
            raise ValueError(f"formula has no parameters to mine: {f}")
        ops = f.operands if isinstance(f, And) else (f,)
        groups: list[tuple[set[str], list[Formula]]] = []
        for op in ops:
            ps = set(op.parameters())
            if not ps:
                continue
            merged = [g for g in groups if g[0] & ps]
            for g in merged:
                groups.remove(g)
                ps |= g[0]
            members = [m for g in merged for m in g[1]] + [op]
            groups.append((ps, members))
        conjuncts = tuple(conj(*members) for _, members in groups)
        return cls(name, f, conjuncts, description)

    # --- evaluation at start time 0, one parameter set per client ----------------------------
    def _inputs(
        self, signals: TemplateSignals, params: Mapping[str, ParamValue]
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        sig = template_signals(self, signals, dtype=None)
        n_clients = next(iter(sig.values())).shape[0]
        par: dict[str, Any] = {}
        for p in self.params:
            if p not in params:
                raise KeyError(f"template {self.name!r}: missing parameter {p!r}")
            v = params[p]
            if isinstance(v, (int, float)):
                par[p] = float(v)
                continue
            t = torch.as_tensor(v)
            if t.dim() == 0:
                par[p] = float(t)
            elif t.shape != (n_clients,):
                raise ValueError(
                    f"template {self.name!r}: parameter {p!r} must be a float or "
                    f"shaped (clients,) = ({n_clients},), got {tuple(t.shape)}"
                )
            else:
                par[p] = t[:, None]
        return sig, par

    def at_start(self, kind: str, signals: Mapping[str, torch.Tensor], params: Mapping[str, Any]) -> torch.Tensor:
        """``kind`` ∈ {"robustness", "violation", "holds"} at start time 0, for signals
        ``{name: (*batch, T ≥ length)}`` and params broadcastable to the batch → ``(*batch)``.

        Conjuncts are evaluated one by one on the part of the trace they look at (a leading
        ``□[lo,hi]``/``◇[lo,hi]`` is shifted to start at ``lo``) and combined (min / max / all),
        which equals evaluating the whole formula and avoids computing every predicate on every
        step."""
        fns = {
            "robustness": (robustness, torch.minimum),
            "violation": (violation, torch.maximum),
            "holds": (lambda f, s, p: holds(f, s, p, closed=False), torch.logical_and),
        }
        if kind not in fns:
            raise ValueError(f"kind must be one of {list(fns)}, got {kind!r}")
        fn, combine = fns[kind]
        parts = self.conjuncts if conj(*self.conjuncts) == self.formula else (self.formula,)
        out = None
        for part in parts:
            offset, shifted = drop_leading_offset(part)
            sig = {n: signals[n][..., offset : offset + shifted.horizon + 1] for n in shifted.signals()}
            par = {p: params[p] for p in shifted.parameters()}
            val = fn(shifted, sig, par)[..., 0]
            out = val if out is None else combine(out, val)
        assert out is not None
        return out

    def robustness(self, signals: TemplateSignals, params: Mapping[str, ParamValue]) -> torch.Tensor:
        """ρ(φ(params_i), x_is, 0) for signals ``(clients, samples, T)`` → ``(clients, samples)``."""
        return self.at_start("robustness", *self._inputs(signals, params))

    def violation(self, signals: TemplateSignals, params: Mapping[str, ParamValue]) -> torch.Tensor:
        """LogiCP g (Eq. 9) at start time 0 → ``(clients, samples)``."""
        return self.at_start("violation", *self._inputs(signals, params))

    def holds(self, signals: TemplateSignals, params: Mapping[str, ParamValue], closed: bool = False) -> torch.Tensor:
        """Boolean satisfaction at start time 0 → bool ``(clients, samples)``; ``closed`` reads
        strict comparisons as non-strict (the mining convention)."""
        sig, par = self._inputs(signals, params)
        if not closed:
            return self.at_start("holds", sig, par)
        return holds(self.formula, sig, par, closed=True)[..., 0]


def drop_leading_offset(f: Formula) -> tuple[int, Formula]:
    """``□[lo,hi]φ`` / ``◇[lo,hi]φ`` at start 0 equals ``□[0,hi-lo]φ`` at start 0 of the trace
    from step ``lo`` on (time invariance): returns ``(lo, shifted formula)``; ``(0, f)`` else."""
    if isinstance(f, (Always, Eventually)) and f.lo > 0:
        return f.lo, type(f)(0, f.hi - f.lo, f.child)
    return 0, f


def template_signals(
    template: Template, signals: TemplateSignals, dtype: torch.dtype | None = torch.float64
) -> dict[str, torch.Tensor]:
    """Validate ``(clients, samples, T)`` inputs (one tensor for a one-signal template, else a
    mapping), cut them to ``template.length`` steps and cast to ``dtype`` (None keeps it)."""
    names = template.signals
    if not isinstance(signals, Mapping):
        if len(names) != 1:
            raise ValueError(
                f"template {template.name!r} uses signals {list(names)}: "
                "pass a dict name -> (clients, samples, T) tensor"
            )
        signals = {names[0]: signals}
    out: dict[str, torch.Tensor] = {}
    shape = None
    for n in names:
        if n not in signals:
            raise KeyError(f"template {template.name!r}: missing signal {n!r}; given {sorted(signals)}")
        t = torch.as_tensor(signals[n])
        if t.dim() != 3:
            raise ValueError(
                f"template {template.name!r}: signal {n!r} must be shaped (clients, samples, T), got {tuple(t.shape)}"
            )
        if t.shape[-1] < template.length:
            raise ValueError(
                f"template {template.name!r}: traces have {t.shape[-1]} steps, the template needs {template.length}"
            )
        if shape is not None and t.shape[:2] != shape:
            raise ValueError(f"template {template.name!r}: signals disagree on (clients, samples)")
        shape = t.shape[:2]
        t = t[..., : template.length]
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype())
        out[n] = t.to(dtype) if dtype is not None else t
    return out


# --- closed forms --------------------------------------------------------------------------------
def _windows(count: int, width: int, start: int) -> list[tuple[int, int]]:
    if count < 1 or width < 1 or start < 0:
        raise ValueError(f"need count >= 1, width >= 1, start >= 0 (got {count}, {width}, {start})")
    return [(start + k * width, start + k * width + width - 1) for k in range(count)]


def _range_closed(windows: list[tuple[int, int]], signal: str) -> Callable:
    def fit(sig: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = sig[signal]
        out = {}
        for k, (lo, hi) in enumerate(windows):
            w = x[..., lo : hi + 1]
            out[f"a{k}"] = w.amax(dim=(1, 2))
            out[f"b{k}"] = w.amin(dim=(1, 2))
        return out

    return fit


def shortest_hitting_interval(values: torch.Tensor, max_elements: int = 1 << 24) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``values`` ``(clients, samples, w)``: the narrowest ``[lo, hi]`` containing at least one
    value of every sample, per client (ties → smallest ``lo``).  Returns ``(lo, hi)``, each
    ``(clients,)``.  Candidates for ``lo`` are the values themselves; for each candidate,
    ``hi = max_s min{v_sj : v_sj ≥ lo}``; O(samples² · w²) per client, chunked."""
    n_c, n_s, w = values.shape
    cands = values.reshape(n_c, n_s * w).sort(dim=1).values  # (C, K)
    k_total = cands.shape[1]
    per_cand = n_c * n_s * w
    chunk = max(1, max_elements // max(per_cand, 1))
    inf = torch.tensor(float("inf"), dtype=values.dtype, device=values.device)
    best_w = torch.full((n_c,), float("inf"), dtype=values.dtype, device=values.device)
    best_lo = cands[:, 0].clone()
    best_hi = cands[:, 0].clone()
    for s in range(0, k_total, chunk):
        lo = cands[:, s : s + chunk]  # (C, k)
        v = values[:, None, :, :]  # (C, 1, S, w)
        nxt = torch.where(v >= lo[:, :, None, None], v, inf).amin(-1)  # (C, k, S)
        hi = nxt.amax(-1)  # (C, k)
        width = hi - lo
        wmin, idx = width.min(dim=1)
        better = wmin < best_w
        best_w = torch.where(better, wmin, best_w)
        best_lo = torch.where(better, lo.gather(1, idx[:, None])[:, 0], best_lo)
        best_hi = torch.where(better, hi.gather(1, idx[:, None])[:, 0], best_hi)
    return best_lo, best_hi


def _existence_closed(windows: list[tuple[int, int]], signal: str) -> Callable:
    def fit(sig: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = sig[signal]
        out = {}
        for k, (lo, hi) in enumerate(windows):
            b, a = shortest_hitting_interval(x[..., lo : hi + 1])
            out[f"a{k}"], out[f"b{k}"] = a, b
        return out

    return fit


def _intra_closed(windows: list[tuple[int, int]], s1: str, s2: str) -> Callable:
    def fit(sig: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        d = sig[s1] - sig[s2]
        return {f"a{k}": d[..., lo : hi + 1].amin(dim=(1, 2)) for k, (lo, hi) in enumerate(windows)}

    return fit


def _eventualities_closed(windows: list[tuple[int, int]], signal: str) -> Callable:
    def fit(sig: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = sig[signal]
        return {f"a{k}": x[..., lo : hi + 1].amax(-1).amin(-1) for k, (lo, hi) in enumerate(windows)}

    return fit


# --- factories (Table 1) -------------------------------------------------------------------------
def operational_range(count: int = 12, width: int = 2, start: int = 0, signal: str = "x") -> Template:
    """Row 1: ``⋀_k □[W_k](x ≤ a_k ∧ x ≥ b_k)``. Tight: a_k = max, b_k = min over samples and W_k."""
    ws = _windows(count, width, start)
    cs = tuple(
        Always(lo, hi, And((Predicate(signal, "<=", f"a{k}"), Predicate(signal, ">=", f"b{k}"))))
        for k, (lo, hi) in enumerate(ws)
    )
    return Template(
        "operational_range",
        conj(*cs),
        cs,
        "signal is upper-bounded by a_k and lower-bounded by b_k in window k",
        1,
        _range_closed(ws, signal),
    )


def existence(count: int = 12, width: int = 2, start: int = 0, signal: str = "x") -> Template:
    """Row 2: ``⋀_k ◇[W_k](x ≤ a_k ∧ x ≥ b_k)``, the formula of Table 1 as written.  The pair is
    not unique; the closed form returns the narrowest [b_k, a_k] met by every sample inside W_k
    (then neither bound can be tightened)."""
    ws = _windows(count, width, start)
    cs = tuple(
        Eventually(lo, hi, And((Predicate(signal, "<=", f"a{k}"), Predicate(signal, ">=", f"b{k}"))))
        for k, (lo, hi) in enumerate(ws)
    )
    return Template(
        "existence",
        conj(*cs),
        cs,
        "signal eventually lies in [b_k, a_k] within window k",
        2,
        _existence_closed(ws, signal),
    )


def until_template(count: int = 6, first: int = 1, signal: str = "x") -> Template:
    """Row 3: ``⋀_k (x < a_k) U[i_k, i_k+1] (x < b_k)``, ``i_k = first + k`` (paper: i = 1..t)."""
    if count < 1 or first < 0:
        raise ValueError("need count >= 1 and first >= 0")
    cs = tuple(
        Until(first + k, first + k + 1, Predicate(signal, "<", f"a{k}"), Predicate(signal, "<", f"b{k}"))
        for k in range(count)
    )
    return Template("until", conj(*cs), cs, "x < a_k holds until x < b_k becomes true within [i_k, i_k+1]", 3)


def intra_task(count: int = 20, width: int = 2, start: int = 0, signals: tuple[str, str] = ("x1", "x2")) -> Template:
    """Row 4: ``⋀_k □[W_k](x1 − x2 > a_k)``. Tight: a_k = min of x1 − x2 over samples and W_k."""
    ws = _windows(count, width, start)
    s1, s2 = signals
    cs = tuple(Always(lo, hi, Predicate(s1, ">", f"a{k}", minus=s2)) for k, (lo, hi) in enumerate(ws))
    return Template(
        "intra_task", conj(*cs), cs, "the difference x1 - x2 stays above a_k in window k", 4, _intra_closed(ws, s1, s2)
    )


def temporal_implication(
    count: int = 1, width: int = 10, start: int = 0, reaction: tuple[int, int] = (1, 3), signal: str = "x"
) -> Template:
    """Row 5: ``⋀_k □[W_k]((x ≥ a_k) → ◇[t3,t4](x ≥ b_k))``, (t3, t4) = ``reaction``
    (paper's a1, a2 = a_k, b_k)."""
    ws = _windows(count, width, start)
    t3, t4 = reaction
    cs = tuple(
        Always(lo, hi, Implies(Predicate(signal, ">=", f"a{k}"), Eventually(t3, t4, Predicate(signal, ">=", f"b{k}"))))
        for k, (lo, hi) in enumerate(ws)
    )
    return Template("temporal_implication", conj(*cs), cs, "x >= a_k implies x >= b_k within the reaction window", 5)


def nested_intra_task(
    count: int = 1,
    width: int = 10,
    start: int = 0,
    reaction: tuple[int, int] = (1, 3),
    signals: tuple[str, str] = ("x1", "x2"),
) -> Template:
    """Row 6: ``⋀_k □[W_k]((x1 ≥ a_k) → ◇[t3,t4](x2 ≥ b_k))``."""
    ws = _windows(count, width, start)
    t3, t4 = reaction
    s1, s2 = signals
    cs = tuple(
        Always(lo, hi, Implies(Predicate(s1, ">=", f"a{k}"), Eventually(t3, t4, Predicate(s2, ">=", f"b{k}"))))
        for k, (lo, hi) in enumerate(ws)
    )
    return Template("nested_intra_task", conj(*cs), cs, "x1 >= a_k implies x2 >= b_k within the reaction window", 6)


def multiple_eventualities(count: int = 3, width: int = 8, start: int = 0, signal: str = "x") -> Template:
    """Row 7: ``⋀_k ◇[W_k](x ≥ a_k)``. Tight: a_k = min over samples of the max over W_k."""
    ws = _windows(count, width, start)
    cs = tuple(Eventually(lo, hi, Predicate(signal, ">=", f"a{k}")) for k, (lo, hi) in enumerate(ws))
    return Template(
        "multiple_eventualities",
        conj(*cs),
        cs,
        "x reaches a_k at some point of every window k",
        7,
        _eventualities_closed(ws, signal),
    )


#: Table 1 rows by name (row 8, template-free mining, has no template).
TEMPLATES: dict[str, Callable[..., Template]] = {
    "operational_range": operational_range,
    "existence": existence,
    "until": until_template,
    "intra_task": intra_task,
    "temporal_implication": temporal_implication,
    "nested_intra_task": nested_intra_task,
    "multiple_eventualities": multiple_eventualities,
}
_BY_NUMBER = dict(enumerate(TEMPLATES, start=1))


def get_template(key: str | int, **kwargs: Any) -> Template:
    """A Table 1 template by name or row number (1–7) with factory keyword arguments."""
    name = _BY_NUMBER.get(key) if isinstance(key, int) else key
    if name not in TEMPLATES:
        raise KeyError(f"unknown template {key!r}; known: {list(TEMPLATES)} (rows 1-7)")
    return TEMPLATES[name](**kwargs)


# --- instantiation -------------------------------------------------------------------------------
def instantiate(template: Template, params: Mapping[str, Any]) -> Formula:
    """The formula with every parameter replaced by its (scalar) value."""
    missing = [p for p in template.params if p not in params]
    if missing:
        raise KeyError(f"template {template.name!r}: missing parameter(s) {missing}")
    return template.formula.bind({p: params[p] for p in template.params})


def instantiate_clients(template: Template, params: Mapping[str, Any]) -> list[Formula]:
    """One formula per client from per-client parameters ``{name: (clients,)}``."""
    cols = {p: torch.as_tensor(params[p]).reshape(-1) for p in template.params if p in params}
    n = {v.numel() for v in cols.values()}
    if len(n) != 1:
        raise ValueError(f"parameters disagree on the number of clients: { {p: v.numel() for p, v in cols.items()} }")
    (count,) = n
    return [instantiate(template, {p: v[i] for p, v in cols.items()}) for i in range(count)]


def range_band(
    template: Template, params: Mapping[str, ParamValue], length: int | None = None, signal: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step bounds implied by a conjunction of ``□[lo,hi](bounds on one signal)``
    (row 1): returns ``(lower, upper)``, each ``(clients, length)``; steps outside every window
    are ±inf.  ``clamp(y, lower, upper)`` is then the closest satisfying trace (FedSTL's
    teacher / L_p projection for template 1).  ``length`` defaults to ``template.length``."""
    length = template.length if length is None else length
    sig_names = {s for s in template.signals} if signal is None else {signal}
    if len(sig_names) != 1:
        raise ValueError(f"range_band needs a one-signal template, {template.name!r} uses {sorted(sig_names)}")
    vals = {p: torch.as_tensor(params[p]).reshape(-1) for p in template.params}
    n_clients = max(v.numel() for v in vals.values())
    ref = next(iter(vals.values()))
    dtype = ref.dtype if ref.is_floating_point() else torch.get_default_dtype()
    lower = torch.full((n_clients, length), float("-inf"), dtype=dtype)
    upper = torch.full((n_clients, length), float("inf"), dtype=dtype)
    for c in template.conjuncts:
        if not isinstance(c, Always):
            raise ValueError(f"range_band: conjunct {c} is not an always-window of bounds")
        preds = c.child.operands if isinstance(c.child, And) else (c.child,)
        for p in preds:
            if not isinstance(p, Predicate) or p.minus is not None:
                raise ValueError(f"range_band: {p} is not a bound on one signal")
            v = (
                vals[p.threshold].to(dtype).expand(n_clients)[:, None]
                if isinstance(p.threshold, str)
                else torch.full((n_clients, 1), p.threshold, dtype=dtype)
            )
            sl = slice(c.lo, min(c.hi + 1, length))
            if p.is_upper:
                upper[:, sl] = torch.minimum(upper[:, sl], v)
            else:
                lower[:, sl] = torch.maximum(lower[:, sl], v)
    return lower, upper


__all__ = [
    "TEMPLATES",
    "Template",
    "drop_leading_offset",
    "existence",
    "get_template",
    "instantiate",
    "instantiate_clients",
    "intra_task",
    "multiple_eventualities",
    "nested_intra_task",
    "operational_range",
    "range_band",
    "shortest_hitting_interval",
    "temporal_implication",
    "template_signals",
    "until_template",
]
