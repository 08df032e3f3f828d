"""Vectorised, differentiable STL semantics in torch.

Four interpretations share one evaluator (:func:`evaluate`):

* ``robustness`` — Donzé–Maler quantitative semantics (FedSTL Def. 5): ρ(x ≥ c) = x − c,
  ρ(x ≤ c) = c − x, ρ(¬φ) = −ρ(φ), ∧ → min, ∨ → max, φ → ψ = max(−ρ_φ, ρ_ψ),
  □[a,b] → min over [t+a, t+b], ◇[a,b] → max, and until by its discrete-time definition
  ρ(φ U[a,b] ψ, t) = max_{t'∈[t+a,t+b]} min(ρ_ψ(t'), min_{t''∈J} ρ_φ(t'')) with
  ``until="strict"`` (default): J = [t, t') — φ must hold *before* ψ, the LTL convention and
  rtamt's discrete-time semantics; ``until="inclusive"``: J = [t, t'] as printed in FedSTL
  Def. 4–5 / LogiCP Eq. 9 (both agree in dense time; in discrete time they differ).
* ``violation`` — LogiCP's violation degree g (Eq. 9), evaluated on the negation normal form
  (the paper's rule g(¬φ) = g(φ) is wrong, spec §6.4): g(x ≥ c) = max(0, c − x),
  g(x ≤ c) = max(0, x − c), ∧ → max, ∨ → min, □ → max, ◇ → min,
  g(φ U ψ) = min_{t'} max(g_ψ(t'), max_{t''∈[t,t']} g_φ(t'')) and the dual rule for release.
  Since every rule is a min/max composition, g = max(0, −ρ) exactly (tested).
* ``holds`` — Boolean semantics (FedSTL Def. 4); ``closed=True`` reads every comparison as
  written but non-strict (``x < c`` as ``x ≤ c``), which mining uses so that tight bounds are the
  attained extremes (spec §2, Def. 3).
* ``tightness`` — TeLEx's smooth tightness score (Jha et al. 2017), used by the search miner.

Shapes and start times
----------------------
``signals`` maps each signal name to a tensor ``(*batch, T)`` (all with the same ``T``; batch
shapes broadcast); a single tensor is accepted when the formula has one signal.  Parameters map
names to floats or tensors broadcastable to the batch shape (a trailing time axis is added), so
``params={"a": a_per_client[:, None]}`` with signals ``(clients, samples, T)`` evaluates one
bound per client.  The result has shape ``(*batch, T')``, where entry ``t`` is the value at
start time ``t``:

* ``boundary="valid"`` (default): ``T' = T − formula.horizon``; only the start times whose whole
  window lies inside the trace (rtamt's discrete-time bounded semantics agree exactly there).
* ``boundary="truncate"``: ``T' = T``; windows are cut at the end of the trace, an empty window
  gives the operator's identity (□ → +∞, ◇/U → −∞; for g: □ → 0, ◇/U → +∞).  This is what
  rtamt's offline discrete-time monitor returns at every sample.

Sliding minima/maxima use ``max_pool1d``/``unfold`` so gradients flow (to one arg-extremum per
window, the usual sub-gradient of max/min).  Float dtypes are kept; ints are cast to the default
float dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Union

import numpy as np
import torch
import torch.nn.functional as F

from .syntax import (
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

Signals = Union[torch.Tensor, np.ndarray, Mapping[str, Union[torch.Tensor, np.ndarray]]]
ParamValue = Union[float, int, torch.Tensor, np.ndarray]

BOUNDARIES = ("valid", "truncate")
UNTIL_SEMANTICS = ("strict", "inclusive")
_INF = math.inf


# --- sliding window reductions -----------------------------------------------------------------
def sliding_max(x: torch.Tensor, width: int) -> torch.Tensor:
    """``out[..., t] = max(x[..., t : t + width])``; shape ``(*, L - width + 1)``."""
    if width == 1:
        return x
    lead, length = x.shape[:-1], x.shape[-1]
    if x.dtype in (torch.float32, torch.float64) and width > 4:
        y = F.max_pool1d(x.reshape(-1, 1, length), kernel_size=width, stride=1)
        return y.reshape(*lead, length - width + 1)
    return x.unfold(-1, width, 1).amax(-1)


def sliding_min(x: torch.Tensor, width: int) -> torch.Tensor:
    """``out[..., t] = min(x[..., t : t + width])``; shape ``(*, L - width + 1)``."""
    if width == 1:
        return x
    return -sliding_max(-x, width)


# --- evaluation modes ---------------------------------------------------------------------------
class _Mode:
    """How each connective is interpreted. ``conj``/``disj`` are elementwise reductions,
    ``always``/``eventually`` sliding reductions, ``ident_*`` the identity for padding."""

    name: str = ""
    dual: bool = False  # True for violation degree: the lattice is flipped (∧ → max ...)

    def pred(self, lhs: torch.Tensor, op: str, c: Any, env: _Env) -> torch.Tensor:
        raise NotImplementedError

    def neg(self, v: torch.Tensor) -> torch.Tensor:
        return -v

    def max_ident(self) -> float:
        return -_INF

    def min_ident(self) -> float:
        return _INF

    def scale_always(self, width: int) -> float:
        return 1.0

    def scale_eventually(self, width: int) -> float:
        return 1.0


class _Rho(_Mode):
    name = "robustness"

    def pred(self, lhs, op, c, env):
        return lhs - c if op in (">", ">=") else c - lhs


class _Bool(_Mode):
    name = "holds"

    def __init__(self, closed: bool) -> None:
        self.closed = closed

    def pred(self, lhs, op, c, env):
        if self.closed:
            op = {"<": "<=", ">": ">="}.get(op, op)
        out = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge}[op](lhs, c)
        return out.to(lhs.dtype)

    def neg(self, v):
        return 1.0 - v


class _Viol(_Mode):
    name = "violation"
    dual = True

    def pred(self, lhs, op, c, env):
        return torch.relu(c - lhs) if op in (">", ">=") else torch.relu(lhs - c)

    def neg(self, v):  # pragma: no cover - NNF has no negation
        raise AssertionError("violation degree is evaluated on the NNF, which has no negation")

    def max_ident(self) -> float:
        return 0.0  # g >= 0, so 0 is the identity of max


class _Tight(_Mode):
    """TeLEx smart score: predicate r ↦ 1/(αr' + e^{−βαr'}) − e^{−αr'} with r' = r / scale;
    □ scaled by 2/(1+e^{−0.01w}), ◇ by 2/(1+e^{0.01w}) (w = window width)."""

    name = "tightness"

    def __init__(self, alpha: float, beta: float) -> None:
        self.alpha, self.beta = alpha, beta

    def pred(self, lhs, op, c, env):
        r = (lhs - c if op in (">", ">=") else c - lhs) / env.scale
        u = (self.alpha * r).clamp(min=-100.0)
        return 1.0 / (u + torch.exp(-self.beta * u)) - torch.exp(-u)

    def scale_always(self, width):
        return 2.0 / (1.0 + math.exp(-0.01 * width))

    def scale_eventually(self, width):
        return 2.0 / (1.0 + math.exp(0.01 * width))


class _Env:
    def __init__(
        self,
        signals: dict[str, torch.Tensor],
        params: dict[str, torch.Tensor | float],
        mode: _Mode,
        boundary: str,
        until: str,
        scale: torch.Tensor | float = 1.0,
    ) -> None:
        self.signals, self.params, self.mode, self.boundary, self.until, self.scale = (
            signals,
            params,
            mode,
            boundary,
            until,
            scale,
        )


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Broadcast shape (numpy's rule; ``torch.broadcast_shapes`` is much slower per call)."""
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))


def _pad(v: torch.Tensor, n: int, value: float) -> torch.Tensor:
    if n == 0:
        return v
    return torch.cat([v, v.new_full((*v.shape[:-1], n), value)], dim=-1)


def _common(vs: list[torch.Tensor]) -> list[torch.Tensor]:
    length = min(v.shape[-1] for v in vs)
    return [v[..., :length] for v in vs]


def _window(v: torch.Tensor, lo: int, hi: int, use_max: bool, env: _Env) -> torch.Tensor:
    mode = env.mode
    if env.boundary == "truncate":
        v = _pad(v, hi, mode.max_ident() if use_max else mode.min_ident())
    if v.shape[-1] - hi <= 0:
        raise ValueError(f"trace too short for window [{lo}, {hi}]")
    u = v[..., lo:]
    return sliding_max(u, hi - lo + 1) if use_max else sliding_min(u, hi - lo + 1)


def _until(v1: torch.Tensor, v2: torch.Tensor, lo: int, hi: int, outer_max: bool, env: _Env) -> torch.Tensor:
    """out(t) = OUTER_{k∈[lo,hi]} INNER(v2(t+k), INNER_{j∈J_k} v1(t+j)), INNER the other one of
    min/max; J_k = [0, k) (strict, rtamt/LTL) or [0, k] (inclusive, FedSTL Def. 5 as printed)."""
    mode = env.mode
    v1, v2 = _common([v1, v2])
    outer_id = mode.max_ident() if outer_max else mode.min_ident()
    inner_id = mode.min_ident() if outer_max else mode.max_ident()
    if env.boundary == "truncate":
        v1, v2 = _pad(v1, hi, inner_id), _pad(v2, hi, outer_id)
    if v1.shape[-1] - hi <= 0:
        raise ValueError(f"trace too short for window [{lo}, {hi}]")
    n_out = v1.shape[-1] - hi
    inner = torch.minimum if outer_max else torch.maximum
    outer = torch.maximum if outer_max else torch.minimum
    running: torch.Tensor | None = None  # INNER of v1(t + j) over the j seen so far (None: empty)
    out: torch.Tensor | None = None
    for k in range(hi + 1):  # O(hi) vectorised steps; each is elementwise over (..., n_out)
        v1k = v1[..., k : k + n_out]
        if env.until == "inclusive":
            running = v1k if running is None else inner(running, v1k)
        if k >= lo:
            v2k = v2[..., k : k + n_out]
            term = v2k if running is None else inner(v2k, running)
            out = term if out is None else outer(out, term)
        if env.until == "strict":
            running = v1k if running is None else inner(running, v1k)
    assert out is not None
    return out


def _eval(f: Formula, env: _Env) -> torch.Tensor:
    mode = env.mode
    dual = mode.dual
    if isinstance(f, Predicate):
        lhs = env.signals[f.signal]
        if f.minus is not None:
            lhs = lhs - env.signals[f.minus]
        c = env.params[f.threshold] if isinstance(f.threshold, str) else f.threshold
        return mode.pred(lhs, f.op, c, env)
    if isinstance(f, Not):
        return mode.neg(_eval(f.child, env))
    if isinstance(f, (And, Or)):
        vs = _common([_eval(c, env) for c in f.operands])
        use_max = isinstance(f, Or) != dual
        out = vs[0]
        for v in vs[1:]:
            out = torch.maximum(out, v) if use_max else torch.minimum(out, v)
        return out
    if isinstance(f, Implies):
        left, right = _common([mode.neg(_eval(f.left, env)), _eval(f.right, env)])
        return torch.maximum(left, right)
    if isinstance(f, Always):
        out = _window(_eval(f.child, env), f.lo, f.hi, use_max=dual, env=env)
        return out * mode.scale_always(f.hi - f.lo + 1) if isinstance(mode, _Tight) else out
    if isinstance(f, Eventually):
        out = _window(_eval(f.child, env), f.lo, f.hi, use_max=not dual, env=env)
        return out * mode.scale_eventually(f.hi - f.lo + 1) if isinstance(mode, _Tight) else out
    if isinstance(f, (Until, Release)):
        outer_max = isinstance(f, Until) != dual
        return _until(_eval(f.left, env), _eval(f.right, env), f.lo, f.hi, outer_max, env)
    raise TypeError(f"not an STL formula node: {f!r}")


# --- input handling -----------------------------------------------------------------------------
def _to_tensor(x: Any, what: str) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dtype == torch.bool or not (
        t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
    ):
        raise TypeError(f"{what}: expected a real-valued tensor, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def prepare(
    formula: Formula, signals: Signals, params: Mapping[str, ParamValue] | None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor | float], int]:
    """Check and convert inputs: returns (signals, params with a trailing time axis, T)."""
    if not isinstance(formula, Formula):
        raise TypeError(f"expected an STL Formula, got {type(formula).__name__}")
    names = formula.signals()
    if not isinstance(signals, Mapping):
        if len(names) != 1:
            raise ValueError(f"formula uses signals {list(names)}: pass a dict name -> tensor")
        signals = {names[0]: signals}
    missing = [n for n in names if n not in signals]
    if missing:
        raise KeyError(f"missing signal(s) {missing}; given: {sorted(signals)}")
    sig = {n: _to_tensor(signals[n], f"signal {n!r}") for n in names}
    for n, t in sig.items():
        if t.dim() < 1:
            raise ValueError(f"signal {n!r} must have shape (*batch, T), got a scalar")
    lengths = {n: t.shape[-1] for n, t in sig.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"signals have different lengths T: {lengths}")
    dtype = torch.promote_types(*[t.dtype for t in sig.values()]) if len(sig) > 1 else next(iter(sig.values())).dtype
    device = next(iter(sig.values())).device
    sig = {n: t.to(dtype) for n, t in sig.items()}
    batch = _broadcast(*[t.shape[:-1] for t in sig.values()])
    par: dict[str, torch.Tensor | float] = {}
    need = formula.parameters()
    given = params or {}
    missing = [p for p in need if p not in given]
    if missing:
        raise KeyError(f"unbound parameter(s) {missing}: pass params={{name: value}}")
    for p in need:
        v = given[p]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            par[p] = float(v)
            continue
        t = _to_tensor(v, f"parameter {p!r}").to(device=device, dtype=dtype)
        try:
            _broadcast(t.shape, batch)
        except ValueError:
            raise ValueError(
                f"parameter {p!r} of shape {tuple(t.shape)} does not broadcast against the batch shape {tuple(batch)}"
            ) from None
        par[p] = t.unsqueeze(-1)
    return sig, par, next(iter(lengths.values()))


def evaluate(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None,
    mode: _Mode,
    boundary: str = "valid",
    until: str = "strict",
    scale: Any = 1.0,
) -> torch.Tensor:
    """Shared evaluator; see the module docstring for shapes."""
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    if until not in UNTIL_SEMANTICS:
        raise ValueError(f"until must be one of {UNTIL_SEMANTICS}, got {until!r}")
    sig, par, length = prepare(formula, signals, params)
    if boundary == "valid" and length <= formula.horizon:
        raise ValueError(
            f"traces of length {length} are too short for formula horizon "
            f"{formula.horizon} (need T > horizon): {formula}"
        )
    if isinstance(scale, torch.Tensor):
        scale = scale.to(next(iter(sig.values()))).unsqueeze(-1)
    out = _eval(formula, _Env(sig, par, mode, boundary, until, scale))
    batch = _broadcast(
        *[t.shape[:-1] for t in sig.values()], *[p.shape[:-1] for p in par.values() if isinstance(p, torch.Tensor)]
    )
    return out.expand(*batch, out.shape[-1])


# --- public functions ----------------------------------------------------------------------------
def robustness(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None = None,
    *,
    boundary: str = "valid",
    until: str = "strict",
) -> torch.Tensor:
    """Quantitative robustness ρ (FedSTL Def. 5), shape ``(*batch, T')`` (module docstring)."""
    return evaluate(formula, signals, params, _Rho(), boundary, until)


def violation(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None = None,
    *,
    boundary: str = "valid",
    until: str = "strict",
) -> torch.Tensor:
    """LogiCP violation degree g (Eq. 9) computed on ``formula.nnf()``; ≥ 0, 0 iff ρ ≥ 0."""
    return evaluate(formula.nnf(), signals, params, _Viol(), boundary, until)


def holds(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None = None,
    *,
    boundary: str = "valid",
    until: str = "strict",
    closed: bool = False,
) -> torch.Tensor:
    """Boolean satisfaction (FedSTL Def. 4) per batch element and start time (bool tensor)."""
    return evaluate(formula, signals, params, _Bool(closed), boundary, until) > 0.5


def r_stl(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None = None,
    *,
    boundary: str = "valid",
    until: str = "strict",
) -> torch.Tensor:
    """LogiCP R_STL (Eq. 10 = Eq. 21): mean of g over the returned start times, ``(*batch,)``."""
    return violation(formula, signals, params, boundary=boundary, until=until).mean(-1)


def tightness(
    formula: Formula,
    signals: Signals,
    params: Mapping[str, ParamValue] | None = None,
    *,
    alpha: float = 50.0,
    beta: float = 4.0,
    scale: Any = 1.0,
    until: str = "strict",
) -> torch.Tensor:
    """TeLEx tightness score θ (smart score) per batch element and start time (valid windows).

    ``scale`` (float or tensor broadcastable to the batch shape) divides raw predicate margins
    before the smart function, so the score's peak sits at ~0.8 % of ``scale``."""
    return evaluate(formula, signals, params, _Tight(alpha, beta), "valid", until, scale)
