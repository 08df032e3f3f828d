"""Readers' names for what plots show: metric keys as words (:func:`human_label`) and a run's data as a title
(:func:`data_label`, :func:`run_subtitle`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

__all__ = ["CLIENT_KEY", "DATA_KEYS", "data_label", "human_label", "run_subtitle"]

_WORDS = {
    "f1": "F1",
    "mrr": "MRR",
    "mr": "mean rank",
    "mse": "MSE",
    "mae": "MAE",
    "rmse": "RMSE",
    "nll": "NLL",
    "auc": "AUC",
    "kl": "KL",
    "pov": "POV",
    "rho": "ρ",
    "acc": "accuracy",
    "cov": "coverage",
    "ign": "Ign",
    "recal": "recalibration only",
    "logic": "logic accuracy",
    "lr": "learning rate",
    "tv": "total variation",
}
CLIENT_KEY = re.compile(r"^(c\d+)\.(.+)$")  # a per-client copy of a metric: c0.test_mrr


def _word(token: str) -> str:
    if token in _WORDS:
        return _WORDS[token]
    if m := re.fullmatch(r"hits@(\d+)", token):
        return f"Hits@{m.group(1)}"
    if m := re.fullmatch(r"top(\d+)", token):
        return f"top {m.group(1)}"
    return token


def human_label(key: str, stage: bool = False) -> str:
    """A reader's name for a metric key: ``evaluate/recal_seen_f1`` → "recalibration only seen F1",
    ``evaluate/c0.test_mrr`` → "client c0: test MRR", ``evaluate/test_hits@1_pessimistic`` → "test Hits@1
    (pessimistic ties)", ``round/planted_recall_top5`` → "planted rules in the top 5", ``train/time_fit_s`` →
    "time fit (s)".  ``stage``: name the stage in parentheses when it is not ``evaluate`` or ``round``."""
    stage_name, _, name = key.rpartition("/")
    prefix = ""
    if m := CLIENT_KEY.match(name):
        prefix, name = f"client {m.group(1)}: ", m.group(2)
    tokens = [t for t in name.split("_") if t]
    suffix: list[str] = []
    if tokens and tokens[-1] == "pessimistic":
        tokens, suffix = tokens[:-1], ["(pessimistic ties)"]
    if len(tokens) > 1 and tokens[-1] == "s":
        tokens, suffix = tokens[:-1], ["(s)", *suffix]
    if len(tokens) >= 2 and re.fullmatch(r"top\d+", tokens[-1]) and tokens[-2] == "recall":
        words = [*tokens[:-2], "rules in the", _word(tokens[-1])]  # planted_recall_top5
    elif tokens[-2:] == ["in", "pool"]:
        words = [*tokens[:-2], "rules in the pool"]
    else:
        words = [_word(t) for t in tokens]
    text = prefix + " ".join([*words, *suffix]) if words or suffix else key
    if stage and stage_name and stage_name not in ("evaluate", "round"):
        text += f" ({stage_name})"
    return text


#: the keys of ``data`` that name where a run's data came from, first match wins
DATA_KEYS = ("federated_folder", "source", "path", "name", "dataset")


def data_label(config: Mapping[str, Any]) -> str:
    """The data a run used, from its config's ``data`` section: ``synthetic`` / ``synthetic:3`` as written, a
    folder or file by its name (``/home/me/mykg/`` → "mykg"), ``pykeen:Nations`` → "Nations (pykeen)"; "" when the
    config does not say."""
    data = config.get("data")
    if not isinstance(data, Mapping):
        return ""
    value = next((str(data[k]) for k in DATA_KEYS if data.get(k) not in (None, "")), "")
    if not value or value.startswith("synthetic"):
        return value
    scheme = ""
    if (m := re.match(r"^([A-Za-z][\w-]+):(?!//)(.+)$", value)) and len(m.group(1)) > 1:
        scheme, value = m.group(1), m.group(2)
    name = PurePath(value.rstrip("/\\")).name or value
    return f"{name} ({scheme})" if scheme else name


def run_subtitle(config: Mapping[str, Any], fallback: str = "") -> str:
    """The title line "<method> on <data> · <n> clients" of a run's config (the data actually used, not the
    config's name); ``fallback`` when the config names no data."""
    data = data_label(config)
    if not data:
        return fallback
    method = str(config.get("method") or "").strip()
    text = f"{method} on {data}" if method else f"data: {data}"
    section = config.get("data")
    n = section.get("num_clients") if isinstance(section, Mapping) and not section.get("federated_folder") else None
    if isinstance(n, int) and not isinstance(n, bool):
        text += f" · {n} client{'s' if n != 1 else ''}"
    return text
