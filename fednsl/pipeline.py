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
import time
from pathlib import Path
from typing import Any, Callable

from fednsl.config import RunConfig, dump_config
from fednsl.federation.decentralised import DecentralisedRunner
from fednsl.federation.faults import inject_faults
from fednsl.federation.resume import prepare_resume
from fednsl.federation.runner import Federation, InProcessRunner, MessageHook, RunResult
from fednsl.plots import plot_run
from fednsl.registry import Registry, load_methods, normalize

log = logging.getLogger("fednsl")

EngineFactory = Callable[..., Any]  # (federation, config, run_dir, resume=, progress=, message_hook=) -> runner
ENGINES: Registry[EngineFactory] = Registry("engine")
ENGINES.register("inprocess")(InProcessRunner)
ENGINES.register("decentralised")(DecentralisedRunner)


def get_engine(name: str) -> EngineFactory:
    """The engine factory registered as ``name``; Flower engines ("flower", "flower-sim") load on first use.

    Flower is an optional extra, so ``fednsl.engines.flower`` is imported only for names starting with "flower".
    """
    if normalize(name).startswith("flower") and name not in ENGINES:
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
    return load_methods().get(config.method).build(config)


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
    and method outputs (e.g. rules.tsv for rule-learning methods). With ``resume``, ``start_over``
    sets unreadable checkpoints and their metrics aside instead of refusing (:mod:`fednsl.federation.resume`).
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
        t0 = time.perf_counter()
        fed = federation if federation is not None else build_federation(config)
        fed = inject_faults(fed, config.federation.faults)  # no-op unless federation.faults is set
        if config.federation.min_clients > len(fed.clients):
            raise ValueError(
                f"federation.min_clients={config.federation.min_clients} exceeds the "
                f"{len(fed.clients)} clients of this data: no stage could reach its quorum"
            )
        engine = get_engine(config.engine)
        runner = engine(fed, config, run_dir, resume=resume, progress=progress, message_hook=message_hook)
        result = runner.run()
        plots = plot_run(run_dir, result.rows, title=f"{config.name} ({config.method})")
        summary = {
            "method": config.method,
            "config": config.name,
            "seed": config.seed,
            "rounds": config.rounds,
            "wall_time_s": time.perf_counter() - t0,
            "data": fed.summary,
            "plots": [str(p.relative_to(run_dir)) for p in plots],
            "final": {
                r["stage"]: {k: v for k, v in r.items() if k not in ("round", "scope", "stage")}
                for r in result.rows
                if r["scope"] == "server" and r["round"] == config.rounds
            },
        }
        extra = getattr(fed.strategy, "summary_metrics", None)
        if callable(extra):  # method-defined top-level entries (e.g. fednsl-kg's test_mrr)
            summary.update(extra())
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return result
    finally:
        logging.getLogger("fednsl").removeHandler(handler)
        handler.close()
