"""Checks before ``--resume``: the saved config matches, a checkpoint is readable, nothing is duplicated.

:func:`prepare_resume` runs before any engine touches the run directory. It refuses (ValueError with one
line naming the file and the way out) when the config differs, when the newest readable checkpoint is past
``rounds``, or when checkpoints exist but none can be read — unless ``start_over`` asks to set the old
files aside (into ``RUN_DIR/discarded-<time>/``, never deleted) and begin again at round 1.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from fednsl.config import FederationConfig, RunConfig
from fednsl.federation.tracking import CheckpointError, Checkpoints, MetricsLog
from kg.yaml_io import load_yaml

log = logging.getLogger("fednsl.resume")

_RUN_FILES = ("metrics.jsonl", "metrics.csv", "checkpoints", "summary.json")


def set_aside(run_dir: Path, why: str) -> Path | None:
    """Move the metrics, checkpoints and summary of ``run_dir`` into a fresh ``discarded-<time>/`` folder."""
    present = [run_dir / n for n in _RUN_FILES if (run_dir / n).exists()]
    if not present:
        return None
    dest = run_dir / f"discarded-{time.strftime('%Y%m%d-%H%M%S')}"
    k = 1
    while dest.exists():
        dest = run_dir / f"discarded-{time.strftime('%Y%m%d-%H%M%S')}-{k}"
        k += 1
    dest.mkdir()
    for p in present:
        shutil.move(str(p), str(dest / p.name))
    log.warning("%s: moved %s to %s (%s)", run_dir, [p.name for p in present], dest.name, why)
    return dest


def _config_diff(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Top-level keys that differ, ignoring ``rounds``, ``time_budget_s`` and the injected ``federation.faults`` (a
    test harness).

    A federation option missing from a saved config (saved before the option existed) counts as its default."""
    defaults = asdict(FederationConfig())

    def plain(c: Mapping[str, Any]) -> dict[str, Any]:
        fed = c.get("federation")
        return (
            {**c, "federation": {k: v for k, v in {**defaults, **fed}.items() if k != "faults"}}
            if isinstance(fed, dict)
            else dict(c)
        )

    saved, now = plain(saved), plain(now)
    free = ("rounds", "time_budget_s")  # what a resumed run may change
    return sorted(k for k in set(saved) | set(now) if k not in free and saved.get(k) != now.get(k))


def prepare_resume(run_dir: Path, config: RunConfig, *, start_over: bool = False) -> None:
    """Make ``run_dir`` safe to resume with ``config`` (see the module doc); raises ValueError otherwise."""
    ckpts = Checkpoints(run_dir)
    try:
        found = ckpts.latest()
    except CheckpointError as exc:
        if not start_over:
            raise ValueError(
                f"--resume: {exc}. Nothing was changed; pass --start-over to set the old "
                "metrics and checkpoints aside and train again from round 1"
            ) from exc
        set_aside(run_dir, "no checkpoint could be read; --start-over")
        return
    saved_path = run_dir / "config.yaml"
    if saved_path.exists():
        try:
            saved = load_yaml(saved_path.read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"--resume: {saved_path} is not valid YAML ({str(exc).splitlines()[0]})") from exc
        where = str(saved_path)
    elif found is not None and isinstance(found[1].get("config"), dict):
        saved, where = found[1]["config"], f"{ckpts.list()[-1]} (config.yaml is missing)"
    elif found is not None:
        raise ValueError(
            f"--resume: {run_dir} has checkpoints but neither config.yaml nor a config inside the "
            "checkpoint, so the config cannot be checked; restore config.yaml or choose another --out"
        )
    else:
        saved, where = None, ""
    if isinstance(saved, dict):
        diff = _config_diff(saved, config.to_dict())
        if diff:
            raise ValueError(
                f"--resume: the config differs from the one saved in {where} in {diff} "
                "(only 'rounds' and 'time_budget_s' may change on resume)"
            )
    if found is None:
        if MetricsLog(run_dir).jsonl.exists():  # crashed before the first checkpoint: round 1 starts afresh
            set_aside(run_dir, "no checkpoint yet, so round 1 is run again")
        return
    rnd = found[0]
    if rnd > config.rounds:
        raise ValueError(
            f"--resume: {run_dir} is already at round {rnd} (checkpoint), but rounds={config.rounds}; "
            f"set rounds >= {rnd}"
        )
