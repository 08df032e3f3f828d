"""One entry point: config → data → strategy + clients → engine → outputs.

``train(config)`` is what ``fednsl train`` calls; it is also the Python API::

    from fednsl.pipeline import train
    from fednsl.config import load_config
    result = train(load_config("fednsl_synthetic", ["rounds=3"]))
    print(result.run_dir)
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from fednsl.config import RunConfig, dump_config
from fednsl.federation.decentralised import DecentralisedRunner
from fednsl.federation.faults import inject_faults
from fednsl.federation.resume import prepare_resume
from fednsl.federation.runner import Federation, InProcessRunner, MessageHook, RunResult
from fednsl.federation.tracking import progress_bar, progress_disabled
from fednsl.plots import plot_run
from fednsl.registry import ENGINE_TABLE, METHODS, Registry, load_methods, normalize
from fednsl.rule_counts import count_rules
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
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{config.name or config.method}-seed{config.seed}-{stamp}"


def latest_run_dir(config: RunConfig, root: Path = Path("runs")) -> Path | None:
    cands = sorted(root.glob(f"{config.name or config.method}-seed{config.seed}-*"))
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

    RUN_DIR holds config.yaml, metrics.jsonl/.csv, checkpoints/, plots/, summary.json, run.log
    and method outputs (e.g. rules.json/rules.tsv for rule-learning methods, with confidence counts added at the
    end by :func:`fednsl.rule_counts.count_rules`). With ``resume``, ``start_over`` sets unreadable checkpoints
    and their metrics aside instead of refusing (:mod:`fednsl.federation.resume`). ``progress``: progress bars
    (shown only on a terminal, :func:`fednsl.federation.tracking.progress_bar`).
    """
    if out is None and resume:
        out = latest_run_dir(config)
        if out is None:
            raise FileNotFoundError(f"--resume: no earlier run of {config.name} (seed {config.seed}) under runs/")
    run_dir = Path(out) if out is not None else default_run_dir(config)
    if resume:
        prepare_resume(run_dir, config, start_over=start_over)
    elif (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
        raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("fednsl").addHandler(handler)
    logging.getLogger("fednsl").setLevel(logging.INFO)
    try:
        # bars of long inner loops of the rule layer (generator training) too, nested under the round bar
        with progress_disabled(not progress), rule_progress.installed(partial(progress_bar, leave=False)):
            return _train(config, run_dir, resume, progress, message_hook, federation)
    except Exception as exc:  # into run.log only (INFO stays off the console); the caller reports the error
        log.info("run stopped by %s: %s", type(exc).__name__, exc)
        raise
    finally:
        logging.getLogger("fednsl").removeHandler(handler)
        handler.close()


def _train(
    config: RunConfig,
    run_dir: Path,
    resume: bool,
    progress: bool,
    message_hook: MessageHook | None,
    federation: Federation | None,
) -> RunResult:
    t0 = time.perf_counter()
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
    engine = get_engine(config.engine)  # an unknown engine is refused before the data is built
    built = federation if federation is not None else build_federation(config)
    log.info("data: %s", json.dumps(_short_summary(built.summary), default=str))
    fed = inject_faults(built, config.federation.faults)  # no-op unless federation.faults is set
    if config.federation.min_clients > len(fed.clients):
        raise ValueError(
            f"federation.min_clients={config.federation.min_clients} exceeds the "
            f"{len(fed.clients)} clients of this data: no stage could reach its quorum"
        )
    runner = engine(fed, config, run_dir, resume=resume, progress=progress, message_hook=message_hook)
    result = runner.run()
    try:  # rules.json of a rule learner gets its confidence counts
        counts = count_rules(run_dir, config, built)
    except ValueError as exc:  # the run itself is complete and kept: say so and go on
        log.warning("confidence counts not added: %s", exc)
        counts = None
    plot_run(run_dir, result.rows, title=f"{config.name} ({config.method})")
    summary = {
        "method": config.method,
        "config": config.name,
        "seed": config.seed,
        "rounds": config.rounds,
        "wall_time_s": time.perf_counter() - t0,
        "peak_rss_mb": peak_rss_mb(),
        "data": fed.summary,
        # every plot of the run: the generic metrics.png and the method's own (written when it finalised)
        "plots": sorted(str(p.relative_to(run_dir)) for p in (run_dir / "plots").glob("*.png")),
        "final": {
            r["stage"]: {k: v for k, v in r.items() if k not in ("round", "scope", "stage")}
            for r in result.rows
            if r["scope"] == "server" and r["round"] == config.rounds
        },
    }
    if counts is not None:
        summary["rule_counts"] = counts.to_json()
    extra = getattr(fed.strategy, "summary_metrics", None)
    if callable(extra):  # method-defined top-level entries (e.g. fednsl-kg's test_mrr)
        summary.update(extra())
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    log.info(
        "done in %.1f s, peak memory %.0f MB; wrote %s",
        summary["wall_time_s"],
        summary["peak_rss_mb"],
        ", ".join(["summary.json", *summary["plots"]]),
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
