"""Metrics log (``metrics.jsonl`` wide rows + ``metrics.csv`` long rows), checkpoints, the run lock, progress bars.

Writes into the run directory that fail (a full disk, a file size limit) raise :class:`RunWriteError`, which names
the file; checkpoints are written atomically and the metrics are rewritten atomically on resume, so a run stopped
that way continues with ``--resume`` once there is room. :func:`run_lock` keeps a second run out of a run
directory that a run is using (``fcntl.flock`` on ``RUN_DIR/.lock``, held for the run's life).

Progress bars (:func:`progress_bar`) show on a terminal only: never when stdout or stderr is not a TTY, never
inside :func:`progress_disabled` (``fednsl train -q``), and each appears only once its step has run
:data:`BAR_DELAY_S` seconds, so short steps print nothing. The round bar shows the method's headline metric
(:func:`round_postfix`, declared by ``@register_method(headline=...)``: :func:`fednsl.registry.headline_of`).
Where bars cannot show (piped or redirected output, CI) the round loop prints one plain line per round on stdout
instead (:func:`progress_lines`, :func:`progress_note`), flushed at once; ``-q`` silences those too.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from fednsl.federation.records import MetricValue
from fednsl.federation.safe_state import decode, encode

log = logging.getLogger("fednsl.tracking")


class CheckpointError(ValueError):
    """No checkpoint of a run directory can be read (each file and its reason are in the message)."""


# a write failed for want of room: not a bad input, the run can go on once there is room
NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


class RunWriteError(OSError):
    """A file of a run could not be written (full disk, file size limit, ...); ``str()`` names the file.

    ``run_dir`` is set by :func:`fednsl.pipeline.train` on the way out, for the message that says how to resume.
    """

    def __init__(self, path: Path | str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause) or type(cause).__name__, str(path))
        self.path = Path(path)
        self.run_dir: Path | None = None

    def __str__(self) -> str:
        return f"could not write {self.path} ({self.strerror})"


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an OSError raised inside into a :class:`RunWriteError` naming ``path``."""
    try:
        yield
    except RunWriteError:
        raise
    except OSError as exc:
        raise RunWriteError(path, exc) from exc


class RunDirBusyError(ValueError):
    """Another run holds the run directory (:func:`run_lock`)."""


LOCK_FILE = ".lock"


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[Path]:
    """Hold an exclusive ``fcntl.flock`` on ``run_dir/.lock`` while inside (``run_dir`` must exist).

    A second holder, in this process or another, is refused at once with :class:`RunDirBusyError` (naming the
    folder and the holder's pid). The lock goes with the process (kill -9 included); the file stays behind.
    """
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no lock
        yield run_dir / LOCK_FILE
        return
    path = run_dir / LOCK_FILE
    with writing(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
            raise RunDirBusyError(
                f"{run_dir} is in use by another fednsl run{f' (pid {holder})' if holder.isdigit() else ''}; "
                "wait for it to end or choose another --out"
            ) from None
        with contextlib.suppress(OSError):  # the pid is only for the message above
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


class MetricsLog:
    """Append-only metrics of a run.

    Each JSONL row is ``{"round": k, "scope": "server"|"clients"|"client:<id>", "stage": s,
    <metric>: value, ...}``; the CSV holds the same as long rows (round, scope, stage, metric,
    value) so any metric set fits one table.
    """

    def __init__(self, run_dir: Path):
        self.jsonl = run_dir / "metrics.jsonl"
        self.csv = run_dir / "metrics.csv"
        self.latest: dict[str, dict[str, Any]] = {}  # stage → the newest server-scope metrics logged here

    def log(self, rnd: int, scope: str, stage: str, metrics: Mapping[str, MetricValue]) -> None:
        if not metrics:
            return
        row = {"round": rnd, "scope": scope, "stage": stage, **metrics}
        if scope == "server":
            self.latest[stage] = dict(metrics)
            shown = {k: v for k, v in metrics.items() if not _bookkeeping(k)}
            if shown:  # RUN_DIR/run.log (the pipeline's handler) gets the server's metrics of every stage
                log.info("round %d %s: %s", rnd, stage, " ".join(f"{k}={_short(v)}" for k, v in shown.items()))
        self._append(row)

    def _append(self, row: Mapping[str, Any]) -> None:
        _write_rows([row], self.jsonl, self.csv)

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
        """Drop rows of rounds after ``rnd`` (a crash between logging and checkpointing).

        The files are rewritten beside the old ones and then replace them, so a failed write loses nothing."""
        rows = [r for r in self.rows() if r["round"] <= rnd]
        if not rows:
            for path in (self.jsonl, self.csv):
                path.unlink(missing_ok=True)
            return
        tmp = [path.with_name(path.name + ".tmp") for path in (self.jsonl, self.csv)]
        try:
            for path in tmp:
                path.unlink(missing_ok=True)
            _write_rows(rows, *tmp)
            for path, final in zip(tmp, (self.jsonl, self.csv)):
                with writing(final):
                    os.replace(path, final)
        finally:
            for path in tmp:
                path.unlink(missing_ok=True)


def _write_rows(rows: Iterable[Mapping[str, Any]], jsonl: Path, csv_path: Path) -> None:
    """Append ``rows`` to the JSONL file and, as long rows, to the CSV file (with its header when new)."""
    rows = list(rows)
    with writing(jsonl), jsonl.open("a") as f:
        f.write("".join(json.dumps(row) + "\n" for row in rows))
    new = not csv_path.exists()
    with writing(csv_path), csv_path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["round", "scope", "stage", "metric", "value"])
        for row in rows:
            for k, v in row.items():
                if k not in ("round", "scope", "stage"):
                    w.writerow([row["round"], row["scope"], row["stage"], k, v])


def _bookkeeping(name: str) -> bool:
    return name.endswith(("time_s", "bytes_down", "bytes_up", "replies", "dropped", "aborted"))


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# -- progress bars ---------------------------------------------------------------------------------------------
BAR_DELAY_S = 2.0  # a bar appears only once its step has run this long
_DISABLED = [0]  # > 0 inside progress_disabled()


@contextlib.contextmanager
def progress_disabled(disabled: bool = True) -> Iterator[None]:
    """No progress bars inside (``fednsl train -q``); nests."""
    _DISABLED[0] += int(disabled)
    try:
        yield
    finally:
        _DISABLED[0] -= int(disabled)


def progress_enabled() -> bool:
    """Whether bars may show now: not disabled, and both stdout and stderr are terminals."""
    if _DISABLED[0]:
        return False
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def progress_lines() -> bool:
    """Whether progress shows as plain lines on stdout instead of bars: not disabled (``-q``), and stdout or
    stderr is not a terminal (``fednsl train ... | cat``, a CI log)."""
    return not _DISABLED[0] and not progress_enabled()


def progress_note(text: str, *, enabled: bool = True) -> None:
    """One line of progress: on stdout, flushed, where bars cannot show (:func:`progress_lines`); above the bars on
    stderr on a terminal; nowhere unless ``enabled`` or inside :func:`progress_disabled`."""
    if not enabled or _DISABLED[0]:
        return
    try:
        if progress_enabled():
            from tqdm.auto import tqdm

            tqdm.write(text, file=sys.stderr)
        else:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
    except (AttributeError, ValueError, OSError):  # a closed or replaced stream, a reader that went away
        pass


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool = True, **kwargs: Any) -> Any:
    """A tqdm bar on stderr (a silent one unless ``enabled`` and :func:`progress_enabled`); ``kwargs`` go to tqdm."""
    from tqdm.auto import tqdm

    kwargs.setdefault("delay", BAR_DELAY_S)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, disable=not (enabled and progress_enabled()), **kwargs)


def round_postfix(method: str, latest: Mapping[str, Mapping[str, Any]]) -> str:
    """The round bar's text: the method's headline metric(s) from the newest server metrics (``stage/name``
    keys of :func:`fednsl.registry.headline_of`), else the newest losses; "" before any is known."""
    from fednsl.registry import headline_of

    parts = []
    for h in headline_of(method):
        stage, _, name = h.metric.rpartition("/")
        value = latest.get(stage, {}).get(name) if stage else None
        if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            ref = ""
            if h.reference and "/" in h.reference and not h.reference.startswith("config:"):
                rstage, _, rname = h.reference.rpartition("/")
                rv = latest.get(rstage, {}).get(rname)
                if isinstance(rv, (int, float)):
                    ref = f" ({h.reference_label + ' ' if h.reference_label else ''}{rv:.3g})"
            parts.append(f"{h.label} {value:.3g}{ref}")
    if not parts:
        for metrics in latest.values():
            parts += [f"{k} {v:.3g}" for k, v in metrics.items() if k.endswith("loss") and isinstance(v, float)]
    return " · ".join(parts[:3])


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


def _round_of(path: Path) -> int:
    """The round of a checkpoint file (a name :data:`_CKPT` matches)."""
    match = _CKPT.search(path.name)
    assert match is not None, path
    return int(match.group(1))


class Checkpoints:
    """``RUN_DIR/checkpoints/round_XXXX.pt``, written atomically; the newest ``keep`` are kept."""

    def __init__(self, run_dir: Path, keep: int = 2):
        self.dir = run_dir / "checkpoints"
        self.keep = max(1, keep)

    def save(self, rnd: int, state: Mapping[str, Any]) -> Path:
        path = self.dir / f"round_{rnd:04d}.pt"
        buf = io.BytesIO()
        torch.save(encode(dict(state)), buf)
        tmp = path.with_suffix(".tmp")
        try:  # a torn write leaves only the .tmp file, which is removed; the older checkpoints stay
            with writing(path):
                self.dir.mkdir(parents=True, exist_ok=True)
                tmp.write_bytes(buf.getvalue())
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        for old in self.list()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def list(self) -> list[Path]:
        if not self.dir.exists():
            return []
        return sorted((p for p in self.dir.iterdir() if _CKPT.search(p.name)), key=_round_of)

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
            return _round_of(path), state
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
