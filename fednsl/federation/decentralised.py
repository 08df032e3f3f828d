"""The decentralised engine: every client is also a server (PTB-FLA's generic peer algorithm).

Each node holds a copy of the method's strategy and its own client. In every stage of a round,
node i sends its configured message to each peer; a peer answers with its client's reply; node i
aggregates its own client's reply and all peers' replies with its strategy copy. Messages are
delivered in a seeded random order (asynchrony) and driven through the pure step functions of
:mod:`fednsl.federation.peer`, the same ones ``fednsl verify --mode decentralised`` explores.
Rounds are barriers for checkpoints, so ``--resume`` works as in the centralised engine.

With clients whose reply depends only on the message and their data (FedAvg and the weight-
sharing baselines), every node ends each round with the centralised engine's result: replies are
seeded per (round, stage, client), and every node aggregates the same sorted set.
A client that raises counts as a failed reply; crashed *nodes* are out of scope (as in the paper).
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import Any, Mapping

from tqdm.auto import tqdm

from kg.seeding import derive_rng
from fednsl.config import RunConfig
from fednsl.federation import peer as PP
from fednsl.federation.records import InvalidMessageError, Message, validate
from fednsl.federation.roles import Strategy
from fednsl.federation.runner import Federation, MessageHook, RunResult, client_seed
from fednsl.federation.tracking import Checkpoints, MetricsLog

log = logging.getLogger("fednsl.decentralised")


class DecentralisedRunner:
    def __init__(self, federation: Federation, config: RunConfig, run_dir: Path, *, resume: bool = False,
                 progress: bool = True, message_hook: MessageHook | None = None):
        self.fed, self.cfg, self.run_dir = federation, config, Path(run_dir)
        self.resume, self.progress, self.hook = resume, progress, message_hook
        self.ids = sorted(federation.clients)
        self.nodes: dict[str, Strategy] = {n: copy.deepcopy(federation.strategy) for n in self.ids}
        self.metrics = MetricsLog(self.run_dir)
        self.ckpts = Checkpoints(self.run_dir, config.federation.keep_checkpoints)

    def run(self) -> RunResult:
        start = 1
        if self.resume and (found := self.ckpts.latest()) is not None:
            rnd, state = found
            for n, s in state["nodes"].items():
                self.nodes[n].load_state_dict(s)
            for c, s in state["clients"].items():
                self.fed.clients[c].load_state_dict(s)
            self.metrics.truncate_after(rnd)
            start = rnd + 1
        R = self.cfg.rounds
        for rnd in tqdm(range(start, R + 1), desc=f"{self.cfg.method} rounds (p2p)", disable=not self.progress,
                        initial=start - 1, total=R, unit="round"):
            t0 = time.perf_counter()
            stages = [s for s in self.fed.strategy.stages(rnd)
                      if s != "evaluate" or rnd % self.cfg.federation.evaluate_every == 0 or rnd == R]
            self._round(rnd, stages)
            self.metrics.log(rnd, "server", "round", {**self.nodes[self.ids[0]].evaluate(rnd),
                                                      "round_time_s": time.perf_counter() - t0})
            self.ckpts.save(rnd, {"round": rnd, "nodes": {n: s.state_dict() for n, s in self.nodes.items()},
                                  "clients": {c: self.fed.clients[c].state_dict() for c in self.ids},
                                  "config": self.cfg.to_dict()})
        # the federation's strategy becomes node 0's, so finalize/outputs work as in the centralised engine
        self.fed.strategy = self.nodes[self.ids[0]]
        self.fed.strategy.finalize(self.run_dir)
        return RunResult(self.run_dir, R, self.metrics.rows(), self.fed)

    # -- one round: the peer protocol over len(stages) steps --------------------------------------
    def _round(self, rnd: int, stages: list[str]) -> None:
        rng = derive_rng(self.cfg.seed, rnd, 0x9E37)
        states: dict[str, PP.PeerState] = {}
        bag: list[tuple[str, PP.PeerMsg]] = []
        payload: dict[tuple[int, str, str], Message] = {}        # (step, requester, dst) -> request
        replies: dict[tuple[str, int], dict[str, Message]] = {}  # (node, step) -> {client: reply}
        failures: dict[tuple[str, int], dict[str, str]] = {}

        def run_actions(node: str, actions) -> None:
            for act in actions:
                if isinstance(act, PP.Send):
                    bag.append((act.dst, act.msg))
                elif isinstance(act, PP.Serve):
                    reply = self._serve(payload[(act.step, act.requester, node)], node, act.requester, act.step,
                                        stages, failures)
                    if reply is not None:
                        replies.setdefault((act.requester, act.step), {})[node] = reply
                    bag.append((act.requester, PP.Rep(act.step, node)))
                elif isinstance(act, PP.PeerAggregate):
                    self._aggregate(node, rnd, stages[act.step - 1], replies.pop((node, act.step), {}),
                                    failures.pop((node, act.step), {}))
                    if act.step < len(stages):
                        self._configure(node, rnd, act.step + 1, stages, payload, replies, failures)
                elif isinstance(act, PP.PeerDiscard):
                    raise RuntimeError(f"peer protocol discarded {act.msg} at {node}: {act.reason}")

        for node in self.ids:
            states[node] = PP.PeerState(node, tuple(n for n in self.ids if n != node), len(stages))
            self._configure(node, rnd, 1, stages, payload, replies, failures)
        for node in self.ids:
            states[node], acts = PP.peer_start(states[node])
            run_actions(node, acts)
        while bag:
            dst, msg = bag.pop(int(rng.integers(len(bag))))
            states[dst], acts = PP.peer_step(states[dst], msg)
            run_actions(dst, acts)
        stuck = [n for n, s in states.items() if not s.done]
        if stuck:
            raise RuntimeError(f"round {rnd}: peers {stuck} did not finish (protocol bug)")

    def _configure(self, node: str, rnd: int, step: int, stages: list[str], payload, replies, failures) -> None:
        """Node enters ``step``: configure one request per client (itself included) and serve itself."""
        stage = stages[step - 1]
        msgs = self.nodes[node].configure(stage, rnd, self.ids)
        for dst in self.ids:
            payload[(step, node, dst)] = msgs[dst]
        own = self._serve(msgs[node], node, node, step, stages, failures)
        if own is not None:
            replies.setdefault((node, step), {})[node] = own

    def _serve(self, request: Message, client: str, requester: str, step: int, stages: list[str],
               failures) -> Message | None:
        stage = stages[step - 1]
        msg = Message(request.kind, request.round, requester, request.arrays,
                      {**request.config, "seed": client_seed(self.cfg.seed, request.round, stage,
                                                             self.ids.index(client))}, request.metrics)
        try:
            reply = self.fed.clients[client].handle(msg)
            if self.hook:
                self.hook("up", client, reply)
            validate(reply, self.nodes[requester].reply_schema(stage), expected_kind=stage,
                     expected_round=request.round)
            return reply
        except (Exception, InvalidMessageError) as exc:  # noqa: BLE001 - a failed client is dropped
            failures.setdefault((requester, step), {})[client] = f"{type(exc).__name__}: {exc}"
            log.warning("round %d %s: %s's reply to %s failed: %s", request.round, stage, client, requester, exc)
            return None

    def _aggregate(self, node: str, rnd: int, stage: str, got: Mapping[str, Message],
                   failed: Mapping[str, str]) -> None:
        ordered = {c: got[c] for c in sorted(got)}
        if len(ordered) < self.cfg.federation.min_clients:
            self.nodes[node].on_abort(stage, rnd, f"{len(ordered)} replies < quorum")
            metrics: dict[str, Any] = {f"{stage}.aborted": 1}
        else:
            metrics = self.nodes[node].aggregate(stage, rnd, ordered, dict(failed))
            metrics.update({f"{stage}.replies": len(ordered), f"{stage}.dropped": len(failed)})
        if node == self.ids[0]:
            for cid, msg in ordered.items():
                self.metrics.log(rnd, f"client:{cid}", stage, msg.metrics)
            self.metrics.log(rnd, "server", stage, metrics)
