"""Metrics log (``metrics.jsonl`` wide rows + ``metrics.csv`` long rows) and checkpoints."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from fednsl.federation.records import MetricValue
from fednsl.federation.safe_state import decode, encode

log = logging.getLogger("fednsl.tracking")


class CheckpointError(ValueError):
    """No checkpoint of a run directory can be read (each file and its reason are in the message)."""


class MetricsLog:
    """Append-only metrics of a run.

    Each JSONL row is ``{"round": k, "scope": "server"|"clients"|"client:<id>", "stage": s,
    <metric>: value, ...}``; the CSV holds the same as long rows (round, scope, stage, metric,
    value) so any metric set fits one table.
    """

    def __init__(self, run_dir: Path):
        self.jsonl = run_dir / "metrics.jsonl"
        self.csv = run_dir / "metrics.csv"

    def log(self, rnd: int, scope: str, stage: str, metrics: Mapping[str, MetricValue]) -> None:
        if not metrics:
            return
        row = {"round": rnd, "scope": scope, "stage": stage, **metrics}
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row) + "\n")
        new = not self.csv.exists()
        with self.csv.open("a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["round", "scope", "stage", "metric", "value"])
            for k, v in metrics.items():
                w.writerow([rnd, scope, stage, k, v])

    def rows(self) -> list[dict[str, Any]]:
        """The logged rows; a torn last line (a crash mid-write) is left out with a warning.

        A bad line anywhere else raises ValueError naming the file and line.
        """
        if not self.jsonl.exists():
            return []
        lines = self.jsonl.read_text(errors="replace").splitlines()
        out: list[dict[str, Any]] = []
        for i, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            try:
                row = json.loads(ln)
                if not isinstance(row, dict) or not {"round", "scope", "stage"} <= set(row):
                    raise ValueError("not a metrics row")
            except ValueError as exc:
                if i == len(lines):
                    log.warning(
                        "%s: the last line (%d) is incomplete (%s); recovered the %d complete rows before it",
                        self.jsonl,
                        i,
                        exc,
                        len(out),
                    )
                    break
                raise ValueError(f"{self.jsonl}:{i}: not a metrics row ({exc})") from exc
            out.append(row)
        return out

    def truncate_after(self, rnd: int) -> None:
        """Drop rows of rounds after ``rnd`` (a crash between logging and checkpointing)."""
        rows = [r for r in self.rows() if r["round"] <= rnd]
        for path in (self.jsonl, self.csv):
            if path.exists():
                path.unlink()
        for r in rows:
            meta = {k: r[k] for k in ("round", "scope", "stage")}
            self.log(meta["round"], meta["scope"], meta["stage"], {k: v for k, v in r.items() if k not in meta})


def select(
    rows: Iterable[Mapping[str, Any]], metric: str, scope: str | None = None, stage: str | None = None
) -> list[tuple[int, float]]:
    """(round, value) pairs of one metric, for plots and tests."""
    return [
        (r["round"], r[metric])
        for r in rows
        if metric in r and (scope is None or r["scope"] == scope) and (stage is None or r["stage"] == stage)
    ]


_CKPT = re.compile(r"round_(\d+)\.pt$")


class Checkpoints:
    """``RUN_DIR/checkpoints/round_XXXX.pt``, written atomically; the newest ``keep`` are kept."""

    def __init__(self, run_dir: Path, keep: int = 2):
        self.dir = run_dir / "checkpoints"
        self.keep = max(1, keep)

    def save(self, rnd: int, state: Mapping[str, Any]) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"round_{rnd:04d}.pt"
        buf = io.BytesIO()
        torch.save(encode(dict(state)), buf)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        for old in self.list()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def list(self) -> list[Path]:
        if not self.dir.exists():
            return []
        return sorted(
            (p for p in self.dir.iterdir() if _CKPT.search(p.name)), key=lambda p: int(_CKPT.search(p.name).group(1))
        )

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """(round, state) of the newest readable checkpoint; None when there is none at all.

        A torn or foreign newest file is skipped with a warning (falling back to the previous one);
        when checkpoints exist but none can be read, raises :class:`CheckpointError`.
        """
        paths = self.list()
        problems: list[str] = []
        for path in reversed(paths):
            try:
                state = read_checkpoint(path)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            if problems:
                log.warning("skipped unreadable checkpoint(s): %s; resuming from %s", "; ".join(problems), path.name)
            return int(_CKPT.search(path.name).group(1)), state
        if problems:
            raise CheckpointError(
                f"{self.dir}: none of the {len(paths)} checkpoints can be read ({'; '.join(problems)})"
            )
        return None


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint without unpickling code (``weights_only=True``); CheckpointError if unusable."""
    try:
        state = decode(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as exc:  # torn file, foreign pickle, not a zip: all mean "unreadable"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"{path.name}: unreadable ({type(exc).__name__}: {first[:160]})") from exc
    m = _CKPT.search(path.name)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path.name}: not a checkpoint (a {type(state).__name__}, expected a dict)")
    missing = [k for k in ("round", "clients") if k not in state]
    if "strategy" not in state and "nodes" not in state:
        missing.append("strategy")
    if missing:
        raise CheckpointError(f"{path.name}: not a fednsl checkpoint (lacks {missing})")
    if m is not None and state["round"] != int(m.group(1)):
        raise CheckpointError(f"{path.name}: holds round {state['round']}, not the round in its name")
    return state
