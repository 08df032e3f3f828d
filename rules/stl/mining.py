"""Template parameter inference (FedSTL Def. 2–3, Eq. 1 = Eq. 5), vectorised over clients.

Input: ``signals`` shaped ``(clients, samples, T)`` (a mapping for multi-signal templates);
output: ``{parameter: tensor (clients,)}`` such that every sample of client ``i`` satisfies
``φ(params_i)`` at start time 0 and no single parameter can be tightened without a violation
(Eq. 1: ``min |ε|`` between a satisfying ``p`` and a violating ``p' = p + ε``).  The tight
point has robustness 0 for the client's worst sample (Def. 3 with ε → 0); ``margin`` moves every
parameter that far in its loose direction (robustness ≥ margin).

*Satisfaction* during mining is the Boolean semantics with comparisons read non-strictly as
written (``holds(closed=True)``), so tight bounds are attained data values (``x < a`` gets
``a = max x``) and boundary cases are resolved like the worked example of FedSTL Ex. 1 (α = 12).

Two methods:

* **closed form** (rows 1, 2, 4, 7 of Table 1): window max/min of the data; for row 2 the
  narrowest interval met by every sample (see :func:`~rules.stl.templates.shortest_hitting_interval`).
* **search** (any template; the only one for rows 3, 5, 6): TeLEx-style (Jha et al. 2017).  Per
  conjunct, a grid over each parameter's data range (``grid`` points per parameter, each on its
  own broadcast axis) is scored by the summed tightness metric (smart score, α = 50, β = 4, on
  margins divided by the client's signal range) among satisfying grid points; then, as TeLEx's
  post-processing, each parameter in turn is tightened as far as satisfaction allows.  Because
  satisfaction is monotone in each parameter (:meth:`Formula.polarity`) and only changes where
  the parameter crosses a data value, this is an exact binary search over the sorted data values
  (no tolerance).  The grid only chooses the starting point, i.e. where on the trade-off
  frontier of several interacting parameters the result lies.  A parameter that can be
  tightened beyond the data range (e.g. the antecedent threshold when the consequent always
  holds) stops at the range end (data min/max ∓ 1 % of the range).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from .robustness import holds, tightness
from .syntax import Formula, Predicate
from .templates import Template, TemplateSignals, drop_leading_offset, template_signals

METHODS = ("auto", "closed", "search")


def mine(
    template: Template,
    signals: TemplateSignals,
    *,
    method: str = "auto",
    margin: float = 0.0,
    grid: int = 16,
    alpha: float = 50.0,
    beta: float = 4.0,
    max_elements: int = 1 << 24,
) -> dict[str, torch.Tensor]:
    """Tight per-client parameters of ``template``: ``{name: (clients,)}``.

    ``method``: ``"auto"`` (closed form when the template has one, else search), ``"closed"``
    or ``"search"``.  ``grid``, ``alpha``, ``beta``: search settings (grid points per
    parameter, TeLEx smart-score constants).  ``max_elements`` caps the size of
    intermediate tensors (memory).  Results have the signals' float dtype; values are computed
    in float64 and rounded in the loose direction, so they stay satisfied after the cast."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "closed" or (method == "auto" and template.closed_form is not None):
        return mine_closed_form(template, signals, margin=margin)
    return mine_search(template, signals, margin=margin, grid=grid, alpha=alpha, beta=beta, max_elements=max_elements)


def _out_dtype(template: Template, signals: TemplateSignals) -> torch.dtype:
    first = signals if not isinstance(signals, Mapping) else signals[template.signals[0]]
    t = torch.as_tensor(first)
    return t.dtype if t.is_floating_point() else torch.get_default_dtype()


def _finish(
    template: Template, params: dict[str, torch.Tensor], margin: float, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Apply the margin (loose direction) and cast, rounding towards the loose side."""
    out = {}
    for p in template.params:
        s = template.formula.polarity(p)
        v = params[p].to(torch.float64) + s * margin
        c = v.to(dtype)
        if dtype != torch.float64 and s != 0:
            tighter = (c.to(torch.float64) - v) * s < 0
            c = torch.where(tighter, torch.nextafter(c, torch.full_like(c, s * float("inf"))), c)
        out[p] = c
    return out


def mine_closed_form(template: Template, signals: TemplateSignals, *, margin: float = 0.0) -> dict[str, torch.Tensor]:
    """Closed-form tight parameters (templates built by the row 1, 2, 4, 7 factories)."""
    if template.closed_form is None:
        raise ValueError(f"template {template.name!r} has no closed form; use method='search'")
    sig = template_signals(template, signals)
    return _finish(template, template.closed_form(sig), margin, _out_dtype(template, signals))


# --- search --------------------------------------------------------------------------------------
def _param_range(conjunct: Formula, name: str, sig: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client range of the signal terms compared with ``name``, padded by 1 % (+1e-9)."""
    lo = hi = None
    for node in conjunct.walk():
        if isinstance(node, Predicate) and node.threshold == name:
            v = sig[node.signal] if node.minus is None else sig[node.signal] - sig[node.minus]
            vlo, vhi = v.amin(dim=(1, 2)), v.amax(dim=(1, 2))
            lo = vlo if lo is None else torch.minimum(lo, vlo)
            hi = vhi if hi is None else torch.maximum(hi, vhi)
    assert lo is not None and hi is not None
    pad = 0.01 * (hi - lo) + 1e-9
    return lo - pad, hi + pad


def _signal_scale(sig: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-client signal range (the smart score's unit); 1 where the range is 0."""
    spans = torch.stack([t.amax(dim=(1, 2)) - t.amin(dim=(1, 2)) for t in sig.values()]).amax(0)
    return torch.where(spans > 0, spans, torch.ones_like(spans))


def _search_conjunct(
    conjunct: Formula, sig: dict[str, torch.Tensor], grid: int, alpha: float, beta: float, max_elements: int
) -> dict[str, torch.Tensor]:
    names = conjunct.parameters()
    offset, conjunct = drop_leading_offset(conjunct)
    length = conjunct.horizon + 1
    sig = {n: t[..., offset : offset + length] for n, t in sig.items() if n in conjunct.signals()}
    n_c, n_s = next(iter(sig.values())).shape[:2]
    pol = {p: conjunct.polarity(p) for p in names}
    rng = {p: _param_range(conjunct, p, sig) for p in names}

    def feasible(par: dict[str, torch.Tensor]) -> torch.Tensor:
        """(C,): every sample satisfies the conjunct (closed reading), params shaped (C, 1)."""
        return holds(conjunct, sig, {p: v[:, None] for p, v in par.items()}, closed=True)[..., 0].all(-1)

    # 1) grid scored by the TeLEx tightness metric, among satisfying points.  Each parameter
    #    gets its own broadcast axis, so predicates are evaluated on g values, not g^k combos.
    k = len(names)
    scale = _signal_scale(sig).reshape(n_c, *([1] * (k + 1)))
    g = max(2, min(grid, int(round(4096 ** (1.0 / k)))))
    unit = torch.linspace(0.0, 1.0, g, dtype=torch.float64)
    axes = {p: rng[p][0][:, None] + unit * (rng[p][1] - rng[p][0])[:, None] for p in names}  # (C, g)
    sig_x = {n: t.reshape(n_c, *([1] * k), n_s, length) for n, t in sig.items()}
    per_row = n_c * g ** (k - 1) * n_s * length  # elements of the largest intermediate per row
    chunk = max(1, max_elements // max(1, per_row))
    best_score = torch.full((n_c,), float("-inf"), dtype=torch.float64)
    best = {p: torch.where(torch.tensor(pol[p] > 0), rng[p][1], rng[p][0]) for p in names}  # loosest
    for start in range(0, g, chunk):
        par = {}
        for j, p in enumerate(names):
            vals = axes[p][:, start : start + chunk] if j == 0 else axes[p]
            shape = [n_c] + [1] * k + [1]  # (C, axis_0, ..., axis_{k-1}, sample)
            shape[1 + j] = vals.shape[1]
            par[p] = vals.reshape(shape)
        per_sample = tightness(conjunct, sig_x, par, alpha=alpha, beta=beta, scale=scale)[..., 0]
        # sign(tightness) = sign(ρ): satisfied (up to ties, re-checked below) iff all samples ≥ 0
        ok = (per_sample >= 0).all(-1).reshape(n_c, -1)
        score = per_sample.sum(-1).reshape(n_c, -1)
        score = torch.where(ok, score, torch.full_like(score, float("-inf")))
        s_best, i_best = score.max(dim=1)
        better = s_best > best_score
        best_score = torch.where(better, s_best, best_score)
        dims = [par[p].shape[1 + j] for j, p in enumerate(names)]
        for j, p in enumerate(reversed(names)):
            jj = k - 1 - j
            idx = i_best % dims[jj]
            i_best = i_best // dims[jj]
            cand = (axes[p][:, start : start + chunk] if jj == 0 else axes[p]).gather(1, idx[:, None])[:, 0]
            best[p] = torch.where(better, cand, best[p])
    start_ok = feasible(best)
    if not bool(start_ok.all()):  # a tie made a grid point look satisfied: use the loosest corner
        for p in names:
            best[p] = torch.where(start_ok, best[p], rng[p][1] if pol[p] > 0 else rng[p][0])
        start_ok = feasible(best)
    if not bool(start_ok.all()):
        bad = torch.nonzero(~start_ok).flatten().tolist()
        raise ValueError(
            f"no parameter value satisfies {conjunct} for client(s) {bad[:10]} "
            "even at the loosest end of the data range"
        )
    # 2) TeLEx post-processing: tighten each parameter in turn (exact search, see _tighten)
    cur = dict(best)
    for p in names:
        cur[p] = _tighten(conjunct, p, pol[p], cur, sig, rng[p], feasible)
    return cur


def _tighten(
    conjunct: Formula,
    name: str,
    sign: int,
    cur: dict[str, torch.Tensor],
    sig: dict[str, torch.Tensor],
    rng: tuple[torch.Tensor, torch.Tensor],
    feasible: Callable[[dict[str, torch.Tensor]], torch.Tensor],
) -> torch.Tensor:
    """Tightest value of ``name`` (others fixed at ``cur``, which satisfies) keeping every sample
    satisfied — exactly, without a tolerance.

    Satisfaction is monotone in the parameter and, with predicates read as written, changes only
    where the parameter crosses a data value of a signal term compared with it.  So the boundary
    is such a value (closed side) or the float just before it (open side, e.g. a negated
    antecedent ``¬(x ≥ a)``).  A binary search over the sorted data values (per client,
    vectorised) finds it in ~log2(samples·T) + 1 satisfaction checks.  When even the end of the
    search range satisfies, the range end is returned."""
    vals = []
    for node in conjunct.walk():
        if isinstance(node, Predicate) and node.threshold == name:
            v = sig[node.signal] if node.minus is None else sig[node.signal] - sig[node.minus]
            vals.append(v.reshape(v.shape[0], -1))
    # q = -sign·p: satisfied ⇔ q ≤ q* (or q < q*); tightening = increasing q
    q_cur = -sign * cur[name]
    q_end = -sign * (rng[0] if sign > 0 else rng[1])
    q_data = (-sign * torch.cat(vals, dim=1)).sort(dim=1).values
    cands = torch.cat([q_cur[:, None], torch.maximum(q_data, q_cur[:, None])], dim=1)  # ascending
    n_c, n = cands.shape  # satisfied entries form a prefix; entry 0 is known to satisfy
    trial = dict(cur)

    def ok_at(q: torch.Tensor) -> torch.Tensor:
        trial[name] = -sign * q
        return feasible(trial)

    good = torch.zeros(n_c, dtype=torch.long)  # largest index known to satisfy
    bad = torch.full((n_c,), n, dtype=torch.long)  # smallest index known not to (n: virtual)
    while bool((bad - good > 1).any()):
        mid = (good + bad) // 2
        active = bad - good > 1
        ok = ok_at(cands.gather(1, mid.clamp(max=n - 1)[:, None])[:, 0])
        good = torch.where(active & ok, mid, good)
        bad = torch.where(active & ~ok, mid, bad)
    q_best = cands.gather(1, good[:, None])[:, 0]
    # between two data values satisfaction is constant: try the float just below the first
    # unsatisfied value (open boundary), or the range end when every data value satisfies
    q_next = cands.gather(1, bad.clamp(max=n - 1)[:, None])[:, 0]
    q_try = torch.where(bad >= n, q_end, torch.nextafter(q_next, torch.full_like(q_next, -float("inf"))))
    room = q_try > q_best
    if bool(room.any()):
        q_best = torch.where(room & ok_at(torch.where(room, q_try, q_best)), q_try, q_best)
    return -sign * q_best


def mine_search(
    template: Template,
    signals: TemplateSignals,
    *,
    margin: float = 0.0,
    grid: int = 16,
    alpha: float = 50.0,
    beta: float = 4.0,
    max_elements: int = 1 << 24,
) -> dict[str, torch.Tensor]:
    """Tightness-metric grid search + exact tightening (module docstring), conjunct by conjunct."""
    sig = template_signals(template, signals)
    out: dict[str, torch.Tensor] = {}
    for c in template.conjuncts:
        out.update(_search_conjunct(c, sig, grid, alpha, beta, max_elements))
    return _finish(template, out, margin, _out_dtype(template, signals))


__all__ = ["METHODS", "mine", "mine_closed_form", "mine_search"]
