"""Run any registered fednsl method on Flower 1.41: the ServerApp side and the ``flower-sim`` / ``flower`` engines.

Server side — :class:`~fednsl.engines.flower_grid.GridRunner` is the one round loop
(:mod:`fednsl.federation.loop`) over :class:`~fednsl.engines.flower_grid.GridTransport`: the same sampling,
seeds, sans-IO protocol, validation, metrics and checkpoints as the in-process engine; only the way messages
travel differs.

Client side — :mod:`fednsl.engines.flower_client` (:class:`FednslClientApp`).

Engines (added to :data:`fednsl.pipeline.ENGINES` by :func:`register`, which the pipeline calls lazily):

- ``flower-sim``: :func:`flwr.simulation.run_simulation` (Ray). The ServerApp runs in this process on the
  caller's strategy; the caller's client objects are shipped once to the Ray actors (object store);
  ``federation.parallelism`` = number of Ray actors.
- ``flower``: a real SuperLink + SuperNodes (:mod:`fednsl.engines.flower_deploy`): the ServerApp and
  ClientApps load from :data:`server_app` / :data:`client_app` and rebuild the method from the config carried
  in the Flower run config.

Importing this module sets ``FLWR_TELEMETRY_ENABLED=0`` and ``FLWR_DISABLE_UPDATE_CHECK=1`` unless they are set.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fednsl.config import RunConfig
from fednsl.engines.flower_client import (
    ClientSource,
    ConfigSource,
    FednslClientApp,
    ShippedSource,
    build_method,
    client_app,
    config_from_text,
    config_text,
)
from fednsl.engines.flower_deploy import DeploymentOptions, run_deployment
from fednsl.engines.flower_grid import GridOptions, GridRunner, GridTransport
from fednsl.federation.aggregate import use_aggregation
from fednsl.federation.loop import Federation, MessageHook, RunResult
from fednsl.federation.tracking import Checkpoints, MetricsLog

log = logging.getLogger("fednsl.flower")

RUN_CONFIG_KEYS = ("fednsl-config", "run-dir", "resume", "node-wait-s", "poll-s")  # the Flower app's run config


# ==== server side ============================================================================================
def _server_main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    missing = [k for k in ("fednsl-config", "run-dir") if k not in rc]
    if missing:
        raise ValueError(f"the Flower run config lacks {missing} (run the app written by `fednsl flower app`)")
    config = config_from_text(str(rc["fednsl-config"]))
    run_dir = Path(str(rc["run-dir"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [serverapp]: %(message)s"))
    root = logging.getLogger("fednsl")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        fed = build_method(config)  # the strategy and the client ids; client objects stay unused here
        use_aggregation(fed.strategy, config.federation)  # federation.aggregation / clip_norm
        opts = GridOptions(node_wait_s=float(rc.get("node-wait-s", 120.0)), poll_s=float(rc.get("poll-s", 0.1)))
        GridRunner(
            fed, config, run_dir, grid=grid, resume=bool(rc.get("resume", False)), progress=False, options=opts
        ).run()
    finally:
        root.removeHandler(handler)
        handler.close()


#: The ServerApp that ``flower-superlink`` runs (``fednsl.engines.flower:server_app``).
server_app = ServerApp()
server_app.main()(_server_main)


# ==== engines ================================================================================================
class FlowerSimulationEngine:
    """``--engine flower-sim``: Flower's simulation runtime (Ray), one virtual SuperNode per client."""

    def __init__(
        self,
        federation: Federation,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: bool = True,
        message_hook: MessageHook | None = None,
        options: GridOptions | None = None,
    ):
        self.fed, self.cfg, self.run_dir = federation, config, Path(run_dir)
        self.resume, self.progress, self.hook = resume, progress, message_hook
        self.opts = options or GridOptions(node_wait_s=60.0, poll_s=0.02)

    def run(self) -> RunResult:
        from flwr.simulation import run_simulation

        holder: dict[str, RunResult] = {}
        with ray_runtime(max(1, int(self.cfg.federation.parallelism))) as ray:
            try:
                blobs = {cid: pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL) for cid, c in self.fed.clients.items()}
                source: ClientSource = ShippedSource(ray.put(blobs))
            except Exception as exc:  # noqa: BLE001 - unpicklable clients: every actor rebuilds the method
                log.warning("clients cannot be pickled (%s); Ray actors rebuild them from the config", exc)
                source = ConfigSource(config_text(self.cfg))
            app = ServerApp()

            @app.main()
            def _main(grid: Grid, context: Context) -> None:
                holder["result"] = GridRunner(
                    self.fed,
                    self.cfg,
                    self.run_dir,
                    grid=grid,
                    resume=self.resume,
                    progress=self.progress,
                    message_hook=self.hook,
                    options=self.opts,
                ).run()

            backend: dict[str, Any] = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
            run_simulation(app, FednslClientApp(source), num_supernodes=len(self.fed.clients), backend_config=backend)
        if "result" not in holder:
            raise RuntimeError("the Flower simulation ended without a result (see the log above)")
        return holder["result"]


@contextmanager
def ray_runtime(actors: int = 1) -> Iterator[Any]:
    """Ray for the simulation runtime: ``actors`` CPUs (one ClientApp actor each), no dashboard.

    Started here → shut down on exit (no Ray processes outlive the run); already running → left alone, so
    several simulations can share one Ray start.
    """
    import ray

    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        path = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
        ray.init(
            num_cpus=actors,
            num_gpus=0,
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def restore_final_state(federation: Federation, run_dir: Path) -> int:
    """Load the newest checkpoint's strategy state into ``federation``; returns its round (0 if none)."""
    found = Checkpoints(Path(run_dir)).latest()
    if found is None:
        return 0
    rnd, state = found
    federation.strategy.load_state_dict(state["strategy"])
    return rnd


class FlowerDeploymentEngine:
    """``--engine flower``: a SuperLink and SuperNodes (local ones on 127.0.0.1, or a running SuperLink).

    Options come from :class:`fednsl.engines.flower_deploy.DeploymentOptions` (environment variables
    ``FEDNSL_FLOWER_*``; ``fednsl flower run`` sets them from its flags).
    """

    def __init__(
        self,
        federation: Federation,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: bool = True,
        message_hook: MessageHook | None = None,
        options: DeploymentOptions | None = None,
    ):
        if message_hook is not None:
            raise ValueError(
                "engine 'flower': a message_hook cannot observe messages in other processes; "
                "use engine 'flower-sim' to inspect messages"
            )
        self.fed, self.cfg, self.run_dir = federation, config, Path(run_dir).resolve()
        self.resume, self.progress = resume, progress
        self.opts = options if options is not None else DeploymentOptions.from_env()

    def run(self) -> RunResult:
        run_deployment(
            self.cfg,
            self.run_dir,
            num_clients=len(self.fed.clients),
            resume=self.resume,
            options=self.opts,
            progress=self.progress,
        )
        rounds = restore_final_state(self.fed, self.run_dir)
        return RunResult(self.run_dir, rounds, MetricsLog(self.run_dir).rows(), self.fed)


ENGINE_NAMES = {"flower-sim": FlowerSimulationEngine, "flower": FlowerDeploymentEngine}


def register(engines: Any) -> None:
    """Add the Flower engines to an engine registry (:data:`fednsl.pipeline.ENGINES` calls this lazily)."""
    for name, factory in ENGINE_NAMES.items():
        if name not in engines:
            engines.register(name)(factory)


__all__ = [
    "ENGINE_NAMES",
    "FednslClientApp",
    "FlowerDeploymentEngine",
    "FlowerSimulationEngine",
    "GridOptions",
    "GridRunner",
    "GridTransport",
    "build_method",
    "client_app",
    "config_from_text",
    "config_text",
    "ray_runtime",
    "register",
    "restore_final_state",
    "server_app",
]
