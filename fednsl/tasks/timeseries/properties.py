"""A client's mined STL property over the forecast horizon, its loss L_p and the teacher projection.

Built on :mod:`rules.stl`.  Default template (FedSTL FHWA experiments, spec §2.1 row 1):
operational range ``⋀_k □[2k, 2k+1](x ≤ a_k ∧ x ≥ b_k)``, ``k = 0 … H/2 − 1`` (12 two-hour windows over
24 h), mined in closed form on the client's training *targets* (one trace per training window,
hour-of-day aligned; spec §6.2), tight (``margin`` 0) or loosened by ``margin``.

* **ρ** (FedSTL Def. 5): :meth:`ClientProperty.robustness` — STL robustness of each forecast at start 0;
  the satisfaction rate ρ% is the share of forecasts with ρ ≥ 0 (FedSTL §Evaluation Metrics).
* **L_p** (FedSTL Eq. 2 / 4): :func:`property_loss` — distance of ŷ to the closest satisfying trace
  φ* (Ma et al. 2020).  For band templates (row 1) φ* is the projection ``clamp(ŷ, lower, upper)``
  (:meth:`ClientProperty.project`, the FedSTL teacher "-T"), and

  - ``"l1"`` (paper, default): ``mean_{b,t} |ŷ − clamp(ŷ)|`` = the per-step violation
    ``max(0, −ρ(x_t ≤ a_t ∧ x_t ≥ b_t))`` averaged (tested against rules.stl robustness);
  - ``"squared"`` (FedSTL code): ``mean (ŷ − clamp(ŷ))²``;
  - ``"violation"`` (any template): LogiCP's violation degree g (Eq. 9) of the whole trace,
    = ``max(0, −ρ)``, averaged over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from rules import stl

LP_KINDS = ("l1", "squared", "violation")


@dataclass
class PropertyConfig:
    """``method_kwargs.property``: which Table-1 template to mine per client."""

    template: str = "operational_range"  # a one-signal template of rules.stl.TEMPLATES
    width: int = 2  # window width in steps (2: FedSTL's two-hour windows)
    count: int | None = None  # conjuncts (None: horizon // width)
    margin: float = 0.0  # loosen every mined bound by this much (normalised units)

    def __post_init__(self) -> None:
        if self.template not in stl.TEMPLATES:
            raise ValueError(f"property.template must be one of {list(stl.TEMPLATES)}, got {self.template!r}")
        if self.width < 1:
            raise ValueError(f"property.width must be >= 1, got {self.width}")


def make_template(cfg: PropertyConfig, horizon: int) -> stl.Template:
    """The template laid over a horizon of ``horizon`` steps (windows of ``cfg.width``)."""
    count = cfg.count if cfg.count is not None else horizon // cfg.width
    if count < 1 or count * cfg.width > horizon:
        raise ValueError(f"property: {count} windows of {cfg.width} steps do not fit a horizon of {horizon}")
    kwargs: dict[str, Any] = {"count": count}
    if cfg.template in ("operational_range", "existence", "multiple_eventualities"):
        kwargs["width"] = cfg.width
    tpl = stl.get_template(cfg.template, **kwargs)
    if len(tpl.signals) != 1:
        raise ValueError(f"property.template {cfg.template!r} uses {len(tpl.signals)} signals; forecasts have one")
    if tpl.length > horizon:
        raise ValueError(f"property.template {cfg.template!r} needs {tpl.length} steps, horizon is {horizon}")
    return tpl


def has_band(template: stl.Template) -> bool:
    """Whether the template is a conjunction of ``□[lo,hi]`` bounds (projection = clamp)."""
    try:
        stl.range_band(template, {p: torch.zeros(1) for p in template.params})
        return True
    except ValueError:
        return False


@dataclass
class ClientProperty:
    """One client's property φ_i: template, parameters ``{name: (1,)}`` and (for band templates)
    the per-step bounds ``lower, upper (H,)`` (±inf outside every window)."""

    template: stl.Template
    params: dict[str, torch.Tensor]
    lower: torch.Tensor | None
    upper: torch.Tensor | None

    @classmethod
    def from_params(cls, template: stl.Template, params: Mapping[str, Any], horizon: int) -> "ClientProperty":
        par = {p: torch.as_tensor(params[p], dtype=torch.float32).reshape(1) for p in template.params}
        lower = upper = None
        if has_band(template):
            lo, up = stl.range_band(template, par, length=horizon)
            lower, upper = lo[0].float(), up[0].float()
        return cls(template, par, lower, upper)

    @classmethod
    def from_vector(cls, template: stl.Template, vector: np.ndarray, horizon: int) -> "ClientProperty":
        """Inverse of :meth:`vector` (what a client sends to the server)."""
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if len(v) != len(template.params):
            raise ValueError(
                f"property vector has {len(v)} entries, template {template.name!r} has "
                f"{len(template.params)} parameters"
            )
        return cls.from_params(template, dict(zip(template.params, v)), horizon)

    def vector(self) -> np.ndarray:
        """Parameters in ``template.params`` order, float32 ``(P,)``."""
        return np.array([float(self.params[p][0]) for p in self.template.params], dtype=np.float32)

    def robustness(self, pred: torch.Tensor) -> torch.Tensor:
        """ρ(φ_i, ŷ) at start 0 for forecasts ``(B, H)`` → ``(B,)`` (differentiable)."""
        return self.template.robustness(pred[None], self.params)[0]

    def satisfied(self, pred: torch.Tensor) -> torch.Tensor:
        """``ρ ≥ 0`` per forecast, bool ``(B,)``."""
        return self.robustness(pred) >= 0

    def step_satisfied(self, pred: torch.Tensor) -> torch.Tensor:
        """Per-step ``lower_t ≤ ŷ_t ≤ upper_t`` (band templates), bool ``(B, H)`` — the FedSTL code's ρ%."""
        lower, upper = self.need_band("step satisfaction")
        return (pred >= lower) & (pred <= upper)

    def project(self, pred: torch.Tensor) -> torch.Tensor:
        """Closest satisfying trace: ``clamp(ŷ, lower, upper)`` — FedSTL's teacher ("-T")."""
        lower, upper = self.need_band("the teacher projection")
        return torch.maximum(torch.minimum(pred, upper), lower)

    def need_band(self, what: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lower, upper)`` of a band template; any other template is a ``ValueError`` naming ``what``."""
        if self.lower is None or self.upper is None:
            raise ValueError(f"{what} needs a band template (operational_range), not {self.template.name!r}")
        return self.lower, self.upper


def mine_property(template: stl.Template, y: np.ndarray | torch.Tensor, margin: float = 0.0) -> ClientProperty:
    """Mine φ_i on one client's traces ``y (n, H)`` (FedSTL Def. 3; closed form when available)."""
    t = torch.as_tensor(np.asarray(y), dtype=torch.float32)
    if t.dim() != 2 or len(t) == 0:
        raise ValueError(f"mine_property expects traces (n >= 1, H), got {tuple(t.shape)}")
    params = stl.mine(template, t[None], margin=margin)
    return ClientProperty.from_params(template, {k: v[0] for k, v in params.items()}, t.shape[1])


def property_loss(pred: torch.Tensor, prop: ClientProperty, kind: str = "l1") -> torch.Tensor:
    """L_p(φ, ŷ) for a batch ``(B, H)`` → scalar (module docstring)."""
    if kind == "l1":
        return (pred - prop.project(pred)).abs().mean()
    if kind == "squared":
        return (pred - prop.project(pred)).pow(2).mean()
    if kind == "violation":
        return prop.template.violation(pred[None], prop.params)[0].mean()
    raise ValueError(f"lp must be one of {LP_KINDS}, got {kind!r}")


def band_loss(pred: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, kind: str = "l1") -> torch.Tensor:
    """L_p with per-sample bands ``(B, H)`` (several clients' samples in one batch, e.g. a cluster's
    data under each owner's property): ``kind`` ``"l1"`` or ``"squared"``."""
    gap = pred - torch.maximum(torch.minimum(pred, upper), lower)
    if kind == "l1":
        return gap.abs().mean()
    if kind == "squared":
        return gap.pow(2).mean()
    raise ValueError(f"band_loss kind must be 'l1' or 'squared', got {kind!r}")


def stack_bands(props: Sequence[ClientProperty]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lower, upper)``, each ``(N, H)``, of band properties."""
    for p in props:
        p.need_band("stack_bands")
    return torch.stack([p.lower for p in props]), torch.stack([p.upper for p in props])  # type: ignore[misc]


__all__ = [
    "LP_KINDS",
    "ClientProperty",
    "PropertyConfig",
    "band_loss",
    "has_band",
    "make_template",
    "mine_property",
    "property_loss",
    "stack_bands",
]
