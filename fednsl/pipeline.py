"""One entry point: config → data → strategy + clients → engine → outputs.

``train(config)`` is what ``fednsl train`` calls; it is also the Python API::

    from fednsl.pipeline import train
    from fednsl.config import load_config
    result = train(load_config("fednsl_synthetic", ["rounds=3"]))
    print(result.run_dir)
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import resource
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from fednsl.config import RunConfig, dump_config
from fednsl.federation.aggregate import use_aggregation
from fednsl.federation.decentralised import DecentralisedRunner
from fednsl.federation.faults import inject_faults
from fednsl.federation.resume import prepare_resume
from fednsl.federation.runner import Federation, InProcessRunner, MessageHook, RunResult
from fednsl.federation.tracking import (
    NO_ROOM,
    Checkpoints,
    RunWriteError,
    progress_bar,
    progress_disabled,
    run_lock,
    writing,
)
from fednsl.plots import plot_run
from fednsl.registry import ENGINE_TABLE, METHODS, Registry, load_methods, normalize
from fednsl.rule_counts import count_rules, order_rules
from rules import progress as rule_progress

log = logging.getLogger("fednsl")

EngineFactory = Callable[..., Any]  # (federation, config, run_dir, resume=, progress=, message_hook=) -> runner
ENGINES: Registry[EngineFactory] = Registry("engine")
ENGINES.register("inprocess")(InProcessRunner)
ENGINES.register("decentralised")(DecentralisedRunner)


def get_engine(name: str) -> EngineFactory:
    """The engine factory registered as ``name``; Flower engines ("flower", "flower-sim") load on first use.

    Flower is an optional extra, so ``fednsl.engines.flower`` is imported only for those names. An unknown name
    is refused with the list of :data:`fednsl.registry.ENGINE_TABLE` (the engines ``fednsl methods`` lists).
    """
    key = normalize(name)
    if key not in ENGINES and key not in ENGINE_TABLE:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(ENGINE_TABLE)}")
    if key.startswith("flower") and key not in ENGINES:
        try:
            from fednsl.engines import flower
        except ImportError as exc:
            raise ValueError(f"engine {name!r} needs Flower: pip install 'fednsl[flower]' ({exc})") from exc
        flower.register(ENGINES)
    return ENGINES.get(name)


def default_run_dir(config: RunConfig, root: Path = Path("runs")) -> Path:
    """``runs/<name>-seed<seed>-<time>``; ``-2``, ``-3``, ... appended when a run of the same second holds it."""
    base = root / f"{config.name or config.method}-seed{config.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def latest_run_dir(config: RunConfig, root: Path = Path("runs")) -> Path | None:
    """The newest run of ``config`` (name and seed) under ``root`` that holds a checkpoint; None if there is none.

    A folder without a checkpoint (a run refused or stopped before its first round ended) is never picked."""
    pattern = f"{glob.escape(config.name or config.method)}-seed{config.seed}-*"
    cands = sorted(p for p in root.glob(pattern) if p.is_dir() and Checkpoints(p).list())
    return cands[-1] if cands else None


def build_federation(config: RunConfig) -> Federation:
    """The federation of ``config.method`` (only that method's module is imported; see :data:`METHODS`)."""
    if config.method not in METHODS:
        load_methods()  # a method package without an entry point still registers on import
    return METHODS.get(config.method).build(config)


def train(
    config: RunConfig,
    out: Path | str | None = None,
    *,
    resume: bool = False,
    progress: bool = True,
    message_hook: MessageHook | None = None,
    federation: Federation | None = None,
    start_over: bool = False,
) -> RunResult:
    """Run a config to the end (or resume it) and write the run directory.

    Everything that can refuse the config (engine, method options, data) runs before a new RUN_DIR is created, so a
    refused config leaves no folder behind. The run holds RUN_DIR's lock (:func:`fednsl.federation.tracking.run_lock`)
    for its life: a second run into the same folder is refused (:class:`~fednsl.federation.tracking.RunDirBusyError`).
    A write that fails for want of room raises :class:`~fednsl.federation.tracking.RunWriteError` naming the file
    (its ``run_dir`` set); the run continues with ``resume`` once there is room.

    RUN_DIR holds config.yaml, metrics.jsonl/.csv, checkpoints/, plots/, summary.json, run.log
    and method outputs (e.g. rules.json/rules.tsv for rule-learning methods, with confidence counts added at the
    end by :func:`fednsl.rule_counts.count_rules`, and on fednsl-kg runs the rules' reading order by
    :func:`fednsl.rule_counts.order_rules`). With ``resume``, ``start_over`` sets unreadable checkpoints
    and their metrics aside instead of refusing (:mod:`fednsl.federation.resume`). ``progress``: progress bars
    (shown only on a terminal, :func:`fednsl.federation.tracking.progress_bar`).
    """
    if out is None and resume:
        out = latest_run_dir(config)
        if out is None:
            raise FileNotFoundError(
                f"--resume: no earlier run of {config.name} (seed {config.seed}) with a checkpoint under runs/"
            )
    run_dir = Path(out) if out is not None else default_run_dir(config)
    fednsl_log = logging.getLogger("fednsl")
    fednsl_log.setLevel(logging.INFO)
    early = _Buffer()  # what is logged before run.log exists goes into it afterwards
    fednsl_log.addHandler(early)
    handler: logging.Handler | None = None
    t0 = time.perf_counter()
    try:
        with contextlib.ExitStack() as lock:
            claimed = run_dir.is_dir()
            if claimed:  # an existing folder is claimed (and checked) before the data is built
                lock.enter_context(run_lock(run_dir))
                _claim(run_dir, config, resume, start_over)
            log.info(
                "%s %s: method %s, %d rounds, seed %d, engine %s → %s",
                "resuming" if resume else "training",
                config.name or config.method,
                config.method,
                config.rounds,
                config.seed,
                config.engine,
                run_dir,
            )
            # everything that can refuse the config runs before a new run folder exists
            engine = get_engine(config.engine)
            built = federation if federation is not None else build_federation(config)
            fed = inject_faults(built, config.federation.faults)  # no-op unless federation.faults is set
            use_aggregation(fed.strategy, config.federation)  # federation.aggregation / clip_norm
            if config.federation.min_clients > len(fed.clients):
                raise ValueError(
                    f"federation.min_clients={config.federation.min_clients} exceeds the "
                    f"{len(fed.clients)} clients of this data: no stage could reach its quorum"
                )
            if not claimed:
                with writing(run_dir):
                    run_dir.mkdir(parents=True, exist_ok=True)
                lock.enter_context(run_lock(run_dir))
                _claim(run_dir, config, resume, start_over)  # a run that started meanwhile
            with writing(run_dir / "config.yaml"):
                dump_config(config, run_dir / "config.yaml")
            handler = _RunLog(run_dir / "run.log")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            fednsl_log.addHandler(handler)
            early.replay(handler)
            fednsl_log.removeHandler(early)
            # bars of long inner loops of the rule layer (generator training) too, nested under the round bar
            with progress_disabled(not progress), rule_progress.installed(partial(progress_bar, leave=False)):
                return _train(config, run_dir, resume, progress, message_hook, engine, built, fed, t0)
    except Exception as exc:  # into run.log only (INFO stays off the console); the caller reports the error
        if handler is not None:
            log.info("run stopped by %s: %s", type(exc).__name__, exc)
        if isinstance(exc, RunWriteError):
            exc.run_dir = run_dir
        elif isinstance(exc, OSError) and exc.errno in NO_ROOM:  # a write of the method's own or of a plot
            err = RunWriteError(exc.filename or run_dir, exc)
            err.run_dir = run_dir
            raise err from exc
        raise
    finally:
        fednsl_log.removeHandler(early)
        if handler is not None:
            fednsl_log.removeHandler(handler)
            handler.close()


def _claim(run_dir: Path, config: RunConfig, resume: bool, start_over: bool) -> None:
    """Check (under the run lock) that ``run_dir`` may take this run: resumable, or holding no run yet."""
    if resume:
        prepare_resume(run_dir, config, start_over=start_over)
    elif Checkpoints(run_dir).list() or (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")


class _Buffer(logging.Handler):
    """Keeps the records logged before run.log is opened, to write them there once it is."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def replay(self, target: logging.Handler) -> None:
        for record in self.records:
            if record.levelno >= target.level:
                target.handle(record)
        self.records.clear()


class _RunLog(logging.FileHandler):
    """RUN_DIR/run.log; a write that fails (a full disk) is not reported on the console: the run's own error is."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


def _train(
    config: RunConfig,
    run_dir: Path,
    resume: bool,
    progress: bool,
    message_hook: MessageHook | None,
    engine: EngineFactory,
    built: Federation,
    fed: Federation,
    t0: float,
) -> RunResult:
    log.info("data: %s", json.dumps(_short_summary(built.summary), default=str))
    runner = engine(fed, config, run_dir, resume=resume, progress=progress, message_hook=message_hook)
    result = runner.run()
    try:  # rules.json of a rule learner gets its confidence counts
        counts = count_rules(run_dir, config, built)
    except ValueError as exc:  # the run itself is complete and kept: say so and go on
        if config.method_kwargs.get("counts") == "never":  # turned off in the config: nothing to warn of
            log.info("confidence counts not added (method_kwargs.counts: never)")
        else:
            log.warning("confidence counts not added: %s", exc)
        counts = None
    # a fednsl-kg run's rules.json gets its reading order, and rules.tsv is written in it (rules list's order),
    # unless the run's time budget is spent: `fednsl rules counts RUN_DIR` records it later
    spent, budget = time.perf_counter() - t0, config.time_budget_s
    skip = ""
    if budget is not None and spent >= budget:
        skip = f"time budget spent ({spent:.0f} s of {budget:g} s); `fednsl rules counts RUN_DIR` measures them"
    order = order_rules(run_dir, config, built, skip=skip)
    with writing(run_dir / "plots"):
        plot_run(run_dir, result.rows, title=f"{config.name} ({config.method})")
    # every plot of the run: the generic metrics.png and the method's own (written when it finalised)
    plots = sorted(str(p.relative_to(run_dir)) for p in (run_dir / "plots").glob("*.png"))
    summary = {
        "method": config.method,
        "config": config.name,
        "seed": config.seed,
        "rounds": result.rounds_done,
        "wall_time_s": time.perf_counter() - t0,
        "peak_rss_mb": peak_rss_mb(),
        "data": fed.summary,
        "plots": plots,
        "final": {
            r["stage"]: {k: v for k, v in r.items() if k not in ("round", "scope", "stage")}
            for r in result.rows
            if r["scope"] == "server" and r["round"] == result.rounds_done
        },
    }
    if config.time_budget_s is not None:  # the rounds it planned and the budget that cut them
        summary.update(rounds_planned=config.rounds, time_budget_s=config.time_budget_s)
    if counts is not None:
        summary["rule_counts"] = counts.to_json()
    if order is not None:
        summary["rule_order"] = order.to_json()
    extra = getattr(fed.strategy, "summary_metrics", None)
    if callable(extra):  # method-defined top-level entries (e.g. fednsl-kg's test_mrr)
        summary.update(extra())
    with writing(run_dir / "summary.json"):
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    log.info(
        "done in %.1f s, peak memory %.0f MB; wrote %s",
        summary["wall_time_s"],
        summary["peak_rss_mb"],
        ", ".join(["summary.json", *plots]),
    )
    return result


def peak_rss_mb() -> float:
    """Peak resident memory of this process and of its finished children (worker processes), in MiB.

    The larger of the two ``getrusage`` maxima, not their sum: children run beside the parent only in the
    multi-process engines, and their peaks need not coincide. ``ru_maxrss`` is KiB on Linux, bytes on macOS.
    """
    unit = 1 if sys.platform == "darwin" else 1024
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return peak * unit / 2**20


def _short_summary(data: Any, depth: int = 0) -> Any:
    """The data summary for run.log, nested mappings cut at two levels."""
    if isinstance(data, dict):
        if depth >= 2:
            return f"{{{len(data)} entries}}"
        return {k: _short_summary(v, depth + 1) for k, v in data.items()}
    return data
