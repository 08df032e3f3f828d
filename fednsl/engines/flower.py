"""Run any registered fednsl method on Flower 1.41: the ServerApp side and the ``flower-sim`` / ``flower`` engines.

Server side — :class:`GridRunner` is the in-process runner with Flower's ``Grid`` as transport: per round and
stage it samples clients, ``configure``-s one fednsl message each, pushes them as Flower messages
(:mod:`fednsl.engines.flower_records`), pulls replies as they arrive and feeds the *same* sans-IO
:mod:`fednsl.federation.protocol` step functions (round/stage tags, quorum, timeouts), validation, metrics
and checkpoints as :class:`~fednsl.federation.runner.InProcessRunner`. A client whose SuperNode stops
answering (Flower replies "Node Unavailable" once it misses 2 heartbeats, i.e. within about 60 s, and drops it
from ``grid.get_node_ids()``) or that overruns ``federation.client_timeout_s`` is a failed client of that
exchange; the stage completes when the quorum (``federation.min_clients``) replied.

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
import math
import os
import pickle
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from flwr.app import DEFAULT_TTL, Context, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.serverapp import Grid, ServerApp

from fednsl.config import RunConfig
from fednsl.engines.flower_client import (
    HELLO, ClientSource, ConfigSource, FednslClientApp, ShippedSource, build_method, client_app, config_from_text,
    config_text,
)
from fednsl.engines.flower_records import RecordTranslationError, from_recorddict, message_type, to_recorddict
from fednsl.federation import protocol
from fednsl.federation.records import Message
from fednsl.federation.runner import Federation, InProcessRunner, MessageHook, RunResult, client_seed
from fednsl.federation.tracking import Checkpoints, MetricsLog

log = logging.getLogger("fednsl.flower")

RUN_CONFIG_KEYS = ("fednsl-config", "run-dir", "resume", "node-wait-s", "poll-s")  # the Flower app's run config


# ==== server side ============================================================================================
@dataclass
class GridOptions:
    """How the server talks to the Grid."""

    node_wait_s: float = 120.0   # wait this long at start for every partition's SuperNode to announce itself
    poll_s: float = 0.1          # interval between pulls of replies
    liveness_s: float = 2.0      # how often pending SuperNodes are checked against grid.get_node_ids()


class GridRunner(InProcessRunner):
    """:class:`InProcessRunner` over a Flower ``Grid``: same protocol, sampling, seeds, metrics and checkpoints.

    Overrides only how a stage's messages reach the clients (``_run_clients``) and which clients are available
    (those whose SuperNode is connected). Checkpoints hold the server state; client state lives on the nodes.
    """

    def __init__(self, federation: Federation, config: RunConfig, run_dir: Path, *, grid: Grid,
                 resume: bool = False, progress: bool = True, message_hook: MessageHook | None = None,
                 options: GridOptions | None = None):
        super().__init__(federation, config, run_dir, resume=resume, progress=progress, message_hook=message_hook)
        self.grid = grid
        self.opts = options or GridOptions()
        self.node_of: dict[str, int] = {}          # client id -> node id
        self._cid_of: dict[int, str] = {}          # node id -> client id
        self._hello: dict[str, int] = {}           # hello message id -> node id
        self._asked: set[int] = set()              # nodes a hello went to
        self.rejected: dict[int, str] = {}         # node id -> why it serves no client

    # -- discovery -------------------------------------------------------------------------------------------
    def discover(self, wait_s: float) -> None:
        """Map connected SuperNodes to client ids; wait up to ``wait_s`` for all partitions."""
        deadline = time.monotonic() + wait_s
        while True:
            live = set(self.grid.get_node_ids())
            for node in [n for n in self._cid_of if n not in live]:
                cid = self._cid_of.pop(node)
                if self.node_of.get(cid) == node:
                    del self.node_of[cid]
                log.warning("SuperNode %s (client %s) left the federation", node, cid)
            new = sorted(live - self._asked)
            if new:
                msgs = [FlowerMessage(RecordDict(), dst_node_id=n, message_type=HELLO) for n in new]
                for mid, node in zip(self.grid.push_messages(msgs), new):
                    if mid:
                        self._hello[mid] = node
                self._asked.update(new)
            if self._hello:
                for reply in self.grid.pull_messages(list(self._hello)):
                    node = self._hello.pop(reply.metadata.reply_to_message_id, None)
                    if node is not None:
                        self._register(node, reply, live)
            if len(self.node_of) == len(self.ids) or time.monotonic() >= deadline:
                return
            time.sleep(self.opts.poll_s)

    def _register(self, node: int, reply: FlowerMessage, live: set[int]) -> None:
        if reply.has_error():
            self.rejected[node] = f"hello failed: {reply.error.reason}"
        else:
            rec = reply.content.config_records["node"]
            pid, num = int(rec["partition-id"]), int(rec["num-partitions"])
            if num != len(self.ids) or not 0 <= pid < num:
                self.rejected[node] = (f"partition-id={pid} num-partitions={num}, but the method has "
                                       f"{len(self.ids)} clients")
            else:
                cid = self.ids[pid]
                holder = self.node_of.get(cid)
                if holder is not None and holder in live:
                    self.rejected[node] = f"partition {pid} ({cid}) is already served by SuperNode {holder}"
                else:
                    self.node_of[cid] = node
                    self._cid_of[node] = cid
                    log.info("SuperNode %s serves client %s (partition %d)", node, cid, pid)
                    return
        log.warning("SuperNode %s serves no client: %s", node, self.rejected[node])

    # -- the runner's hooks ----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        self.discover(self.opts.node_wait_s)
        missing = [c for c in self.ids if c not in self.node_of]
        if missing:
            log.warning("no SuperNode for clients %s after %.0fs; they count as unavailable", missing,
                        self.opts.node_wait_s)
        if len(self.node_of) < self.cfg.federation.min_clients:
            raise RuntimeError(f"only {len(self.node_of)} of {len(self.ids)} clients have a SuperNode after "
                               f"{self.opts.node_wait_s:.0f}s, quorum is {self.cfg.federation.min_clients}; "
                               f"rejected nodes: {self.rejected or 'none'}")
        return super().run()

    def _exchange(self, rnd: int, stage: str) -> protocol.ExchangeLog:
        self.discover(0.0)  # forget nodes that left, greet nodes that (re)joined
        return super()._exchange(rnd, stage)

    def _still_busy(self, cid: str) -> bool:
        return cid not in self.node_of  # not available: no connected SuperNode holds this partition

    def _run_clients(self, rnd: int, stage: str, sampled: Sequence[str],
                     outgoing: Mapping[str, Message]) -> Iterator[tuple[str, protocol.Event, Message | None]]:
        """Push one Flower message per sampled client; yield (client, event, reply) as replies arrive."""
        budget = self.cfg.federation.client_timeout_s
        ttl = None if budget is None else min(float(DEFAULT_TTL), float(budget) + 60.0)  # let the link expire it
        mtype = message_type(stage)
        pending: dict[str, str] = {}
        batch: list[tuple[str, FlowerMessage]] = []
        for cid in sampled:
            node = self.node_of.get(cid)
            if node is None:
                yield cid, protocol.Failure(cid, rnd, stage, "no SuperNode serves this client"), None
                continue
            msg = outgoing[cid]
            msg = replace(msg, config={**msg.config, "seed": client_seed(self.cfg.seed, rnd, stage, self.ids.index(cid))})
            if self.hook:
                self.hook("down", cid, msg)
            batch.append((cid, FlowerMessage(to_recorddict(msg), dst_node_id=node, message_type=mtype, ttl=ttl,
                                             group_id=f"{rnd}/{stage}")))
        mids = list(self.grid.push_messages([m for _, m in batch])) if batch else []
        for i, (cid, _) in enumerate(batch):
            mid = mids[i] if i < len(mids) else None
            if mid:
                pending[mid] = cid
            else:
                yield cid, protocol.Failure(cid, rnd, stage, "the SuperLink did not accept the message"), None
        deadline = time.monotonic() + budget if budget else math.inf
        next_check = time.monotonic() + self.opts.liveness_s
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                cid = pending.pop(reply.metadata.reply_to_message_id, None)
                if cid is None:
                    continue
                if reply.has_error():
                    err = reply.error
                    yield cid, protocol.Failure(cid, rnd, stage, f"Flower error {err.code}: {err.reason}"), None
                    continue
                try:
                    got = from_recorddict(reply.content)
                except RecordTranslationError as exc:
                    yield cid, protocol.Failure(cid, rnd, stage, str(exc)), None
                    continue
                yield cid, protocol.Reply(cid, got.round, got.kind), got
            if not pending:
                break
            now = time.monotonic()
            if now >= deadline:
                for cid in list(pending.values()):
                    yield cid, protocol.Failure(cid, rnd, stage, f"timed out after {budget}s"), None
                break
            if now >= next_check:
                live = set(self.grid.get_node_ids())
                for mid, cid in list(pending.items()):
                    if self.node_of.get(cid) not in live:
                        del pending[mid]
                        yield cid, protocol.Failure(cid, rnd, stage, "its SuperNode left the federation"), None
                next_check = now + self.opts.liveness_s
            time.sleep(max(0.0, min(self.opts.poll_s, deadline - now)))

    def _snapshot(self, rnd: int) -> dict[str, Any]:
        return {"round": rnd, "strategy": self.fed.strategy.state_dict(), "clients": {},
                "engine": "flower", "config": self.cfg.to_dict()}


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
        opts = GridOptions(node_wait_s=float(rc.get("node-wait-s", 120.0)), poll_s=float(rc.get("poll-s", 0.1)))
        GridRunner(fed, config, run_dir, grid=grid, resume=bool(rc.get("resume", False)), progress=False,
                   options=opts).run()
    finally:
        root.removeHandler(handler)
        handler.close()


#: The ServerApp that ``flower-superlink`` runs (``fednsl.engines.flower:server_app``).
server_app = ServerApp()
server_app.main()(_server_main)


# ==== engines ================================================================================================
class FlowerSimulationEngine:
    """``--engine flower-sim``: Flower's simulation runtime (Ray), one virtual SuperNode per client."""

    def __init__(self, federation: Federation, config: RunConfig, run_dir: Path, *, resume: bool = False,
                 progress: bool = True, message_hook: MessageHook | None = None,
                 options: GridOptions | None = None):
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
                holder["result"] = GridRunner(self.fed, self.cfg, self.run_dir, grid=grid, resume=self.resume,
                                              progress=self.progress, message_hook=self.hook,
                                              options=self.opts).run()

            backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
            run_simulation(app, FednslClientApp(source), num_supernodes=len(self.fed.clients),
                           backend_config=backend)
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
        ray.init(num_cpus=actors, num_gpus=0, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
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

    def __init__(self, federation: Federation, config: RunConfig, run_dir: Path, *, resume: bool = False,
                 progress: bool = True, message_hook: MessageHook | None = None, options: Any = None):
        if message_hook is not None:
            raise ValueError("engine 'flower': a message_hook cannot observe messages in other processes; "
                             "use engine 'flower-sim' to inspect messages")
        from fednsl.engines.flower_deploy import DeploymentOptions

        self.fed, self.cfg, self.run_dir = federation, config, Path(run_dir).resolve()
        self.resume, self.progress = resume, progress
        self.opts = options if options is not None else DeploymentOptions.from_env()

    def run(self) -> RunResult:
        from fednsl.engines.flower_deploy import run_deployment

        run_deployment(self.cfg, self.run_dir, num_clients=len(self.fed.clients), resume=self.resume,
                       options=self.opts, progress=self.progress)
        rounds = restore_final_state(self.fed, self.run_dir)
        return RunResult(self.run_dir, rounds, MetricsLog(self.run_dir).rows(), self.fed)


ENGINE_NAMES = {"flower-sim": FlowerSimulationEngine, "flower": FlowerDeploymentEngine}


def register(engines: Any) -> None:
    """Add the Flower engines to an engine registry (:data:`fednsl.pipeline.ENGINES` calls this lazily)."""
    for name, factory in ENGINE_NAMES.items():
        if name not in engines:
            engines.register(name)(factory)


__all__ = ["ENGINE_NAMES", "FednslClientApp", "FlowerDeploymentEngine", "FlowerSimulationEngine", "GridOptions",
           "GridRunner", "build_method", "client_app", "config_from_text", "config_text", "ray_runtime", "register",
           "restore_final_state", "server_app"]
