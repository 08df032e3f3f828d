"""Metrics log (``metrics.jsonl`` wide rows + ``metrics.csv`` long rows) and checkpoints."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from fednsl.federation.records import MetricValue


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
        if not self.jsonl.exists():
            return []
        return [json.loads(ln) for ln in self.jsonl.read_text().splitlines() if ln.strip()]

    def truncate_after(self, rnd: int) -> None:
        """Drop rows of rounds after ``rnd`` (a crash between logging and checkpointing)."""
        rows = [r for r in self.rows() if r["round"] <= rnd]
        for path in (self.jsonl, self.csv):
            if path.exists():
                path.unlink()
        for r in rows:
            meta = {k: r[k] for k in ("round", "scope", "stage")}
            self.log(meta["round"], meta["scope"], meta["stage"],
                     {k: v for k, v in r.items() if k not in meta})


def select(rows: Iterable[Mapping[str, Any]], metric: str, scope: str | None = None,
           stage: str | None = None) -> list[tuple[int, float]]:
    """(round, value) pairs of one metric, for plots and tests."""
    return [(r["round"], r[metric]) for r in rows if metric in r
            and (scope is None or r["scope"] == scope) and (stage is None or r["stage"] == stage)]


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
        torch.save(dict(state), buf)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        for old in self.list()[:-self.keep]:
            old.unlink(missing_ok=True)
        return path

    def list(self) -> list[Path]:
        if not self.dir.exists():
            return []
        return sorted((p for p in self.dir.iterdir() if _CKPT.search(p.name)),
                      key=lambda p: int(_CKPT.search(p.name).group(1)))

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        for path in reversed(self.list()):
            try:
                state = torch.load(path, weights_only=False)
            except Exception:  # a torn file from a crash: fall back to the previous one
                continue
            return int(_CKPT.search(path.name).group(1)), state
        return None
