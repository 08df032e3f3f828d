"""The in-process engine: drives the round protocol over strategy and client objects.

Per round and stage: sample clients (seeded by (seed, round), so a resumed run samples the same
ones), ``configure`` messages, run each client in a thread with a time budget, validate replies,
feed the sans-IO :mod:`~fednsl.federation.protocol`, ``aggregate`` once the exchange completes.
A client that raises, sends an invalid message or overruns its budget is dropped from that
round (logged); the stage completes if the quorum replied. After every round the strategy and
client states are checkpointed; ``resume`` continues bit-exactly from the newest checkpoint.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm

from kg.seeding import derive_rng, derive_seed
from fednsl.config import RunConfig
from fednsl.federation import protocol
from fednsl.federation.records import InvalidMessageError, Message, validate
from fednsl.federation.roles import Client, Metrics, Strategy
from fednsl.federation.tracking import Checkpoints, MetricsLog

log = logging.getLogger("fednsl.runner")

MessageHook = Callable[[str, str, Message], None]  # (direction "down"|"up", client id, message)


class QuorumLostError(RuntimeError):
    pass


@dataclass
class Federation:
    """What a method builder returns: one strategy, its clients, and a data summary."""

    strategy: Strategy
    clients: dict[str, Client]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    run_dir: Path
    rounds_done: int
    rows: list[dict[str, Any]]
    federation: Federation

    def last(self, metric: str, scope: str = "server") -> float | None:
        vals = [r[metric] for r in self.rows if r["scope"] == scope and metric in r]
        return vals[-1] if vals else None


def client_seed(seed: int, rnd: int, stage: str, index: int) -> int:
    """Seed a client's work in (round, stage) deterministically, independent of arrival order."""
    return derive_seed(seed, rnd, stage, index)


def sample_clients(ids: Sequence[str], fraction: float, min_clients: int, seed: int, rnd: int,
                   stage: str) -> tuple[str, ...]:
    """Seeded partial participation: ``max(min_clients, ceil(fraction·K))`` clients, sorted."""
    k = min(len(ids), max(min_clients, math.ceil(fraction * len(ids))))
    if k == len(ids):
        return tuple(ids)
    rng = derive_rng(seed, rnd, stage)
    pick = rng.choice(len(ids), size=k, replace=False)
    return tuple(ids[i] for i in sorted(pick))


class InProcessRunner:
    def __init__(self, federation: Federation, config: RunConfig, run_dir: Path, *,
                 resume: bool = False, progress: bool = True, message_hook: MessageHook | None = None):
        self.fed = federation
        self.cfg = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.progress = progress
        self.hook = message_hook
        self.metrics = MetricsLog(self.run_dir)
        self.ckpts = Checkpoints(self.run_dir, config.federation.keep_checkpoints)
        self.ids = sorted(federation.clients)
        self._busy: dict[str, threading.Thread] = {}  # clients still running an abandoned call

    # -- public --------------------------------------------------------------------------------
    def run(self) -> RunResult:
        start = 1
        if self.resume:
            found = self.ckpts.latest()
            if found is not None:
                rnd, state = found
                self._restore(state)
                self.metrics.truncate_after(rnd)
                start = rnd + 1
                log.info("resumed from round %d", rnd)
        rounds = self.cfg.rounds
        bar = tqdm(range(start, rounds + 1), desc=f"{self.cfg.method} rounds", disable=not self.progress,
                   initial=start - 1, total=rounds, unit="round")
        for rnd in bar:
            t0 = time.perf_counter()
            for stage in self.fed.strategy.stages(rnd):
                if stage == "evaluate" and not (rnd % self.cfg.federation.evaluate_every == 0 or rnd == rounds):
                    continue
                self._exchange(rnd, stage)
            server = self.fed.strategy.evaluate(rnd)
            server = {**server, "round_time_s": time.perf_counter() - t0}
            self.metrics.log(rnd, "server", "round", server)
            self.ckpts.save(rnd, self._snapshot(rnd))
            bar.set_postfix({k: f"{v:.4g}" for k, v in list(server.items())[:3]})
        self.fed.strategy.finalize(self.run_dir)
        return RunResult(self.run_dir, rounds, self.metrics.rows(), self.fed)

    # -- one exchange --------------------------------------------------------------------------
    def _exchange(self, rnd: int, stage: str) -> protocol.ExchangeLog:
        fcfg, strat = self.cfg.federation, self.fed.strategy
        available = [c for c in self.ids if not self._still_busy(c)]
        chosen = strat.sample_clients(stage, rnd, available)
        sampled = tuple(sorted(chosen)) if chosen is not None else sample_clients(
            available, fcfg.fraction, fcfg.min_clients, self.cfg.seed, rnd, stage)
        min_replies = min(fcfg.min_clients, max(1, len(sampled))) if chosen is not None else fcfg.min_clients
        state, actions = protocol.start(rnd, stage, sampled, min_replies)
        xlog = protocol.ExchangeLog(rnd, stage, sampled)
        replies: dict[str, Message] = {}
        t0 = time.perf_counter()
        bytes_down = bytes_up = 0
        if state.status == "waiting":
            outgoing = strat.configure(stage, rnd, sampled)
            schema = strat.reply_schema(stage)
            missing = [c for c in sampled if c not in outgoing]
            if missing:
                raise RuntimeError(f"{type(strat).__name__}.configure_{stage} gave no message for {missing}")
            for cid, event, reply in self._run_clients(rnd, stage, sampled, outgoing):
                if reply is not None:
                    bytes_up += reply.nbytes()
                    if self.hook:
                        self.hook("up", cid, reply)
                    try:
                        if reply.sender != cid:
                            raise InvalidMessageError(cid, "sender", f"reply claims to be from {reply.sender!r}")
                        validate(reply, schema, expected_kind=stage, expected_round=rnd)
                        replies[cid] = reply
                    except InvalidMessageError as exc:
                        event = protocol.Failure(cid, rnd, stage, str(exc))
                state, acts = protocol.step(state, event)
                actions += acts
            bytes_down = sum(outgoing[c].nbytes() for c in sampled)
        for act in actions:
            if isinstance(act, protocol.Drop):
                xlog.dropped[act.client] = act.reason
                log.warning("round %d %s: dropped %s: %s", rnd, stage, act.client, act.reason)
            elif isinstance(act, protocol.Discard):
                xlog.discarded[act.client] = act.reason
            elif isinstance(act, protocol.Abort):
                xlog.aborted = act.reason
        metrics: Metrics = {}
        if state.status == "complete":
            xlog.accepted = tuple(sorted(state.accepted))
            ordered = {c: replies[c] for c in xlog.accepted}
            for cid, msg in ordered.items():
                self.metrics.log(rnd, f"client:{cid}", stage, msg.metrics)
            metrics = strat.aggregate(stage, rnd, ordered, dict(xlog.dropped))
        else:
            log.warning("round %d %s: quorum lost: %s", rnd, stage, xlog.aborted)
            strat.on_abort(stage, rnd, xlog.aborted or "")
            if fcfg.on_quorum_loss == "abort":
                raise QuorumLostError(f"round {rnd} {stage}: {xlog.aborted}")
        metrics.update({
            f"{stage}.replies": len(xlog.accepted), f"{stage}.dropped": len(xlog.dropped),
            f"{stage}.aborted": int(xlog.aborted is not None), f"{stage}.time_s": time.perf_counter() - t0,
            f"{stage}.bytes_down": bytes_down, f"{stage}.bytes_up": bytes_up,
        })
        self.metrics.log(rnd, "server", stage, metrics)
        return xlog

    def _run_clients(self, rnd: int, stage: str, sampled: Sequence[str], outgoing: Mapping[str, Message]):
        """Yield (client, protocol event, reply or None) as clients finish, fail or time out."""
        budget = self.cfg.federation.client_timeout_s
        par = max(1, self.cfg.federation.parallelism)
        done: queue.Queue = queue.Queue()
        todo = list(sampled)
        active: dict[str, float] = {}  # client -> deadline

        def work(cid: str, msg: Message) -> None:
            try:
                done.put((cid, self.fed.clients[cid].handle(msg), None))
            except BaseException as exc:  # noqa: BLE001 - any client failure drops the client
                done.put((cid, None, exc))

        while todo or active:
            while todo and len(active) < par:
                cid = todo.pop(0)
                index = self.ids.index(cid)
                msg = outgoing[cid]
                msg = replace(msg, config={**msg.config, "seed": client_seed(self.cfg.seed, rnd, stage, index)})
                if self.hook:
                    self.hook("down", cid, msg)
                th = threading.Thread(target=work, args=(cid, msg), daemon=True, name=f"client-{cid}")
                self._busy[cid] = th
                th.start()
                active[cid] = time.monotonic() + budget if budget else math.inf
            wait = min(active.values()) - time.monotonic()
            try:
                cid, reply, exc = done.get(timeout=None if math.isinf(wait) else max(0.0, wait))
            except queue.Empty:
                now = time.monotonic()
                for late in [c for c, d in active.items() if d <= now]:
                    del active[late]
                    yield late, protocol.Failure(late, rnd, stage, f"timed out after {budget}s"), None
                continue
            if cid not in active:
                continue
            del active[cid]
            self._busy.pop(cid, None)
            if exc is not None:
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("round %d %s: client %s raised %s", rnd, stage, cid, reason)
                yield cid, protocol.Failure(cid, rnd, stage, reason), None
            else:
                yield cid, protocol.Reply(cid, rnd, stage), reply

    def _still_busy(self, cid: str) -> bool:
        th = self._busy.get(cid)
        if th is not None and not th.is_alive():
            del self._busy[cid]
            return False
        return th is not None

    # -- checkpoints ---------------------------------------------------------------------------
    def _snapshot(self, rnd: int) -> dict[str, Any]:
        return {"round": rnd, "strategy": self.fed.strategy.state_dict(),
                "clients": {c: self.fed.clients[c].state_dict() for c in self.ids},
                "config": self.cfg.to_dict()}

    def _restore(self, state: Mapping[str, Any]) -> None:
        self.fed.strategy.load_state_dict(state["strategy"])
        for cid, cstate in state["clients"].items():
            if cid not in self.fed.clients:
                raise ValueError(f"checkpoint has client {cid!r} that this run does not")
            self.fed.clients[cid].load_state_dict(cstate)
