"""The one round loop: rounds, resume, checkpoints, sampling, seeding and validation over a transport.

Every engine is a :class:`~fednsl.federation.transport.Transport` under this loop: the in-process engine
(threads), the decentralised engine (threads, peer topology) and the Flower engines (a ``Grid``). Per round the
loop asks the strategy for the round's stages and runs each through a *topology*:

- :class:`Central` (default): one server. Per stage: sample clients (seeded by (seed, round, stage), so a
  resumed run samples the same ones), ``configure`` one message each, add the client's seed, dispatch them
  through the transport, validate the replies against the stage's reply schema bound to the request that was
  sent, feed the sans-IO :mod:`~fednsl.federation.protocol` and ``aggregate`` once the exchange completes.
  A client that raises, times out, or sends an invalid reply is dropped from that exchange (logged); the
  stage completes if the quorum replied.
- ``fednsl.federation.decentralised.Peer``: every client is also a server (PTB-FLA's generic algorithm).

After every round the server state and the transport's client states are checkpointed; ``resume`` continues
bit-exactly from the newest readable checkpoint.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fednsl.config import RunConfig
from fednsl.federation import protocol
from fednsl.federation.records import InvalidMessageError, Message
from fednsl.federation.roles import Client, Metrics, Strategy
from fednsl.federation.tracking import (
    BAR_DELAY_S,
    Checkpoints,
    MetricsLog,
    progress_bar,
    progress_lines,
    progress_note,
    round_postfix,
)
from fednsl.federation.transport import Delivery, Transport
from kg.seeding import derive_rng, derive_seed

log = logging.getLogger("fednsl.runner")

MessageHook = Callable[[str, str, Message], None]  # (direction "down"|"up", client id, message)


class QuorumLostError(RuntimeError):
    pass


@dataclass
class Federation:
    """What a method builder returns: one strategy, its clients, and a data summary."""

    strategy: Strategy
    clients: Mapping[str, Client]  # Mapping (covariant): a builder's dict of its own client class fits
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


def sample_clients(
    ids: Sequence[str], fraction: float, min_clients: int, seed: int, rnd: int, stage: str
) -> tuple[str, ...]:
    """Seeded partial participation: ``max(min_clients, ceil(fraction·K))`` clients, sorted."""
    k = min(len(ids), max(min_clients, math.ceil(fraction * len(ids))))
    if k == len(ids):
        return tuple(ids)
    rng = derive_rng(seed, rnd, stage)
    pick = rng.choice(len(ids), size=k, replace=False)
    return tuple(ids[i] for i in sorted(pick))


class Topology(ABC):
    """Who configures and aggregates: one server (:class:`Central`) or every node (``Peer``)."""

    loop: RoundLoop

    def bind(self, loop: RoundLoop) -> None:
        self.loop = loop

    @abstractmethod
    def run_round(self, rnd: int, stages: Sequence[str]) -> None:
        """Run the stages of round ``rnd``, logging their metrics."""

    @abstractmethod
    def server(self) -> Strategy:
        """The strategy whose ``evaluate``/``finalize`` speak for the run."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Server-side state for a checkpoint (merged into the checkpoint's top level)."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def end_at(self, rnd: int) -> None:
        """Make round ``rnd`` the last for every strategy of this topology (:meth:`Strategy.end_at`)."""
        self.server().end_at(rnd)


def budget_clock() -> float:
    """Seconds on the clock that ``time_budget_s`` is measured on (monotonic)."""
    return time.perf_counter()


def round_line(name: str, rnd: int, rounds: int, elapsed_s: float, postfix: str = "") -> str:
    """The line a round prints where no bar can show: ``NAME round 3/10 · 12.3 s · <headline metric>``
    (``elapsed_s``: since the loop started)."""
    return f"{name} round {rnd}/{rounds} · {elapsed_s:.1f} s" + (f" · {postfix}" if postfix else "")


def _closing_work(method: str) -> str:
    """What runs after the last round: the method's outputs, a rule learner's confidence counts, the plots."""
    from fednsl.registry import rule_documents_hook

    return "writing rule counts and plots" if rule_documents_hook(method) is not None else "writing plots"


class RoundLoop:
    """Runs ``config.rounds`` rounds of a federation over ``transport`` (module docstring)."""

    def __init__(
        self,
        federation: Federation,
        config: RunConfig,
        run_dir: Path,
        transport: Transport,
        *,
        topology: Topology | None = None,
        resume: bool = False,
        progress: bool = True,
        message_hook: MessageHook | None = None,
        label: str = "",
    ):
        self.fed = federation
        self.cfg = config
        self.run_dir = Path(run_dir)
        self.transport = transport
        self.topology = topology if topology is not None else Central()
        self.topology.bind(self)
        self.resume = resume
        self.progress = progress
        self.hook = message_hook
        self.label = label
        self.metrics = MetricsLog(self.run_dir)
        self.ckpts = Checkpoints(self.run_dir, config.federation.keep_checkpoints)
        self.ids = sorted(federation.clients)
        self.last = config.rounds  # the last round: ``time_budget_s`` may make it an earlier one
        self.began: float | None = None  # the budget clock when the rounds began (under ``time_budget_s``)
        self.unbounded: int | None = None  # a round run past the budget as the last one the strategy needs

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        if self.cfg.federation.min_clients > len(self.ids):
            raise ValueError(
                f"federation.min_clients={self.cfg.federation.min_clients} is larger than the "
                f"{len(self.ids)} clients of this federation: no stage could ever aggregate"
            )
        self.fed.strategy.check_clients(self.fed.clients)  # every stage has a handler on every client
        self.transport.start(self.ids, self.cfg.federation.min_clients)
        try:
            start = self._resume() + 1
            name = f"{self.cfg.name or self.cfg.method}{self.label}"
            self._bar = bar = progress_bar(
                range(start, self.last + 1),
                desc=f"{name} rounds",
                enabled=self.progress,
                initial=start - 1,
                total=self.last,
                unit="round",
            )
            lines = self.progress and progress_lines()  # no bar can show: one line per round on stdout
            begun = time.perf_counter()
            self.began = budget_clock()
            took: list[float] = []  # this process's rounds, in seconds
            ran: list[str] = []  # the stages of the round before
            for rnd in bar:
                if self._budget_cut(rnd, took, budget_clock() - self.began):
                    bar.total = self.last
                    bar.refresh()
                    if self.last < rnd:  # the budget ends the run before this round
                        self._close_early(self.last, ran)
                        bar.close()
                        break
                t0, c0 = time.perf_counter(), budget_clock()
                ran = self.stages(rnd)
                self.topology.run_round(rnd, ran)
                took.append(budget_clock() - c0)
                server = {**self.topology.server().evaluate(rnd), "round_time_s": time.perf_counter() - t0}
                self.metrics.log(rnd, "server", "round", server)
                self.ckpts.save(rnd, self._snapshot(rnd))
                self._postfix = round_postfix(self.cfg.method, self.metrics.latest)
                bar.set_postfix_str(self._postfix)
                if lines:
                    progress_note(round_line(name, rnd, self.last, time.perf_counter() - begun, self._postfix))
                if rnd >= self.last:  # a time budget's last round (the range's last closes the bar itself)
                    bar.close()
                    break
        finally:
            self.transport.close()
        if lines or time.perf_counter() - begun >= BAR_DELAY_S:  # the bar showed: say what the pause after it is
            progress_note(f"{name}: rounds done; {_closing_work(self.cfg.method)}…", enabled=self.progress)
        self.fed.strategy = self.topology.server()
        self.fed.strategy.finalize(self.run_dir)
        return RunResult(self.run_dir, self.last, self.metrics.rows(), self.fed)

    def _budget_cut(self, rnd: int, took: Sequence[float], spent: float) -> bool:
        """Whether ``time_budget_s`` moves the last round (:attr:`last`) before round ``rnd`` starts: to ``rnd - 1``
        when ``rnd`` would end past the budget by the longest round so far (spent + longest > budget) and the
        strategy allows it (:meth:`Strategy.may_end_after`), else to ``rnd`` when there would be no time for another
        round after it (spent + 2 × longest > budget). Never before the first round of a process (nothing timed
        yet); a round that started runs whole, so a run passes its budget only by a round that takes longer than
        every round before it, or by the last round a strategy needs. That round (:attr:`unbounded`) runs as
        without a budget: its requests carry no ``time_left_s``."""
        budget = self.cfg.time_budget_s
        if budget is None or not took or rnd > self.last:
            return False
        longest = max(took)
        over = spent + longest > budget
        if over and self.topology.server().may_end_after(rnd - 1):
            last = rnd - 1
        else:
            if over:  # the strategy needs this round as its last although it ends past the budget
                self.unbounded = rnd
                log.info("time budget: round %d runs past the budget, as the last round the method needs", rnd)
            if rnd < self.last and spent + 2 * longest > budget:
                last = rnd
            else:
                return False
        log.info(
            "time budget: round %d is the last of %d planned (%.1f s spent, the longest round %.1f s, budget %.1f s)",
            last,
            self.last,
            spent,
            longest,
            budget,
        )
        self.last = last
        self.topology.end_at(last)
        return True

    def _close_early(self, rnd: int, ran: Sequence[str]) -> None:
        """Round ``rnd``, already run, became the last: it is evaluated if ``evaluate_every`` skipped it, and its
        checkpoint saved again with that evaluation."""
        if "evaluate" in ran or "evaluate" not in self.stages(rnd):
            return
        self.topology.run_round(rnd, ["evaluate"])
        self.ckpts.save(rnd, self._snapshot(rnd))

    def stages(self, rnd: int) -> list[str]:
        """The round's declared stages; ``evaluate`` only every ``evaluate_every`` rounds and at the last."""
        every, last = self.cfg.federation.evaluate_every, self.last
        return [
            s for s in self.topology.server().round_stages(rnd) if s != "evaluate" or rnd % every == 0 or rnd == last
        ]

    # -- what every topology uses ----------------------------------------------------------------------------
    def seeded(self, cid: str, msg: Message, rnd: int, stage: str, sender: str | None = None) -> Message:
        """The message as ``cid`` receives it: with its seed for (round, stage), under ``time_budget_s`` the
        budget's seconds left as it is sent (``time_left_s``: a client may fit its work to them; not in a round
        run past the budget because the strategy needs it) and, optionally, a sender."""
        config = {**msg.config, "seed": client_seed(self.cfg.seed, rnd, stage, self.ids.index(cid))}
        if self.cfg.time_budget_s is not None and self.began is not None and rnd != self.unbounded:
            config["time_left_s"] = self.cfg.time_budget_s - (budget_clock() - self.began)
        return replace(msg, config=config, sender=msg.sender if sender is None else sender)

    def send(self, rnd: int, stage: str, outgoing: Mapping[str, Message]) -> Any:
        """Dispatch ``outgoing`` (already seeded) through the transport; yield deliveries."""
        if self.hook:
            for cid, msg in outgoing.items():
                self.hook("down", cid, msg)
        self._stage_progress(f"{stage} 0/{len(outgoing)} clients")
        for k, delivery in enumerate(
            self.transport.dispatch(rnd, stage, outgoing, self.cfg.federation.client_timeout_s), 1
        ):
            if delivery.reply is not None and self.hook:
                self.hook("up", delivery.client, delivery.reply)
            self._stage_progress(f"{stage} {k}/{len(outgoing)} clients")
            yield delivery
        self._stage_progress(f"{stage}: server aggregating")

    def _stage_progress(self, text: str) -> None:
        """Show the running stage on the round bar (so that a long first round is not silent)."""
        bar = getattr(self, "_bar", None)
        if bar is not None and not bar.disable:
            postfix = getattr(self, "_postfix", "")
            bar.set_postfix_str(text + (f" · {postfix}" if postfix else ""))

    def check(self, strategy: Strategy, stage: str, rnd: int, request: Message, delivery: Delivery) -> str | None:
        """None if the delivery is a valid reply to ``request``, else why it is not (names client and field)."""
        cid, reply = delivery.client, delivery.reply
        if reply is None:
            return delivery.error or "no reply"
        try:
            if reply.sender != cid:
                raise InvalidMessageError(cid, "sender", f"reply claims to be from {reply.sender!r}")
            strategy.check_reply(stage, request, reply, expected_round=rnd)
        except InvalidMessageError as exc:
            return str(exc)
        return None

    # -- checkpoints -----------------------------------------------------------------------------------------
    def _resume(self) -> int:
        if not self.resume:
            return 0
        found = self.ckpts.latest()
        if found is None:
            return 0
        rnd, state = found
        self.topology.load_state_dict(state)
        self.transport.load_client_states(state.get("clients", {}))
        self.metrics.truncate_after(rnd)
        log.info("resumed from round %d", rnd)
        return rnd

    def _snapshot(self, rnd: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "round": rnd,
            **self.topology.state_dict(),
            "clients": self.transport.client_states(),
            "config": self.cfg.to_dict(),
        }
        if self.transport.checkpoint_tag:
            out["engine"] = self.transport.checkpoint_tag
        return out


class Central(Topology):
    """One server strategy; each stage is one exchange of the sans-IO protocol."""

    def server(self) -> Strategy:
        return self.loop.fed.strategy

    def state_dict(self) -> dict[str, Any]:
        return {"strategy": self.loop.fed.strategy.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loop.fed.strategy.load_state_dict(state["strategy"])

    def run_round(self, rnd: int, stages: Sequence[str]) -> None:
        strat = self.loop.fed.strategy
        for i, stage in enumerate(stages):
            xlog = self.exchange(rnd, stage)
            if xlog.aborted is not None and strat.stage(stage).essential and i + 1 < len(stages):
                log.warning("round %d: %s lost its quorum; skipping %s this round", rnd, stage, list(stages[i + 1 :]))
                return

    def exchange(self, rnd: int, stage: str) -> protocol.ExchangeLog:
        loop = self.loop
        fcfg, strat = loop.cfg.federation, loop.fed.strategy
        available = loop.transport.available(loop.ids)
        chosen = strat.sample_clients(stage, rnd, available)
        sampled = (
            tuple(sorted(chosen))
            if chosen is not None
            else sample_clients(available, fcfg.fraction, fcfg.min_clients, loop.cfg.seed, rnd, stage)
        )
        min_replies = min(fcfg.min_clients, max(1, len(sampled))) if chosen is not None else fcfg.min_clients
        state, actions = protocol.start(rnd, stage, sampled, min_replies)
        xlog = protocol.ExchangeLog(rnd, stage, sampled)
        replies: dict[str, Message] = {}
        t0 = time.perf_counter()
        bytes_down = bytes_up = 0
        if state.status == "waiting":
            outgoing = strat.configure(stage, rnd, sampled)
            bytes_down = sum(outgoing[c].nbytes() for c in sampled)
            seeded = {c: loop.seeded(c, outgoing[c], rnd, stage) for c in sampled}
            for delivery in loop.send(rnd, stage, seeded):
                cid = delivery.client
                if delivery.reply is not None:
                    bytes_up += delivery.reply.nbytes()
                why = loop.check(strat, stage, rnd, outgoing[cid], delivery)
                if why is None:
                    replies[cid] = delivery.reply
                    event: protocol.Event = protocol.Reply(cid, rnd, stage)
                else:
                    event = protocol.Failure(cid, rnd, stage, why)
                state, acts = protocol.step(state, event)
                actions += acts
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
                loop.metrics.log(rnd, f"client:{cid}", stage, msg.metrics)
            metrics = strat.aggregate(stage, rnd, ordered, dict(xlog.dropped))
        else:
            log.warning("round %d %s: quorum lost: %s", rnd, stage, xlog.aborted)
            strat.on_abort(stage, rnd, xlog.aborted or "")
            if fcfg.on_quorum_loss == "abort":
                raise QuorumLostError(f"round {rnd} {stage}: {xlog.aborted}")
        metrics.update(
            {
                f"{stage}.replies": len(xlog.accepted),
                f"{stage}.dropped": len(xlog.dropped),
                f"{stage}.aborted": int(xlog.aborted is not None),
                f"{stage}.time_s": time.perf_counter() - t0,
                f"{stage}.bytes_down": bytes_down,
                f"{stage}.bytes_up": bytes_up,
            }
        )
        loop.metrics.log(rnd, "server", stage, metrics)
        return xlog
