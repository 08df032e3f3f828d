"""The one line ``fednsl train`` ends with: the method's headline metric(s) and their references.

E.g. ``fednsl: seen F1 0.866 (backbone 0.737) · unseen F1 0.811 (backbone 0.707) → runs/x/summary.json``.
What a method reports is declared by its ``@register_method(headline=...)`` (:class:`fednsl.registry.Headline`);
this module only reads the values from summary.json (and the run's config) and formats them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fednsl.registry import Headline, headline_of


def lookup(key: str, summary: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> float | None:
    """The number under ``key`` (``stage/name``, a top-level summary key, or ``config:dotted.key``); None if absent.

    Raises nothing: a missing or non-numeric entry is None.
    """
    value: Any
    if key.startswith("config:"):
        value = config or {}
        for part in key[len("config:") :].split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    elif key in summary:
        value = summary[key]
    elif "/" in key:
        stage, _, name = key.partition("/")
        value = (summary.get("final") or {}).get(stage, {}).get(name)
    else:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def fmt(x: float | None) -> str:
    """Three significant digits (0.866, 0.0123, 87.5); "n/a" for a missing or NaN value."""
    if x is None or math.isnan(x):
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.3g}"


def headline_parts(
    heads: tuple[Headline, ...], summary: Mapping[str, Any], config: Mapping[str, Any] | None = None
) -> list[str]:
    """``label value (reference_label reference)`` per headline entry."""
    parts = []
    for h in heads:
        text = f"{h.label} {fmt(lookup(h.metric, summary, config))}"
        if h.reference is not None:
            ref = lookup(h.reference, summary, config)
            if ref is None:
                ref = h.reference_default
            if ref is not None and h.complement:
                ref = 1.0 - ref
            if ref is not None:
                text += f" ({h.reference_label + ' ' if h.reference_label else ''}{fmt(ref)})"
        parts.append(text)
    return parts


def result_line(run_dir: Path, summary: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    """The closing line of ``fednsl train`` for a run whose summary.json is ``summary``."""
    method = str(summary.get("method", "?"))
    parts = headline_parts(headline_of(method), summary, config)
    body = " · ".join(parts) if parts else "done"
    return f"{method}: {body} → {run_dir / 'summary.json'}"
