"""The decentralised engine: every client is also a server (PTB-FLA's generic peer algorithm).

A :class:`Peer` topology under the one round loop (:mod:`fednsl.federation.loop`), over the same thread
transport as the in-process engine. Each node holds a copy of the method's strategy and its own client. In
every stage of a round, node i sends its configured message to each peer; a peer answers with its client's
reply; node i aggregates its own client's reply and all peers' replies with its strategy copy. Messages are
delivered in a seeded random order (asynchrony) and driven through the pure step functions of
:mod:`fednsl.federation.peer`, the same ones ``fednsl verify --mode decentralised`` explores. Rounds are
barriers for checkpoints, so ``--resume`` works as in the centralised engine. A node whose aggregation of an
``essential`` stage loses its quorum skips its own later stages of that round (as the central topology does);
it still answers its peers' requests, so the barrier protocol completes.

With clients whose reply depends only on the message and their data (FedAvg and the weight-sharing
baselines), every node ends each round with the centralised engine's result: replies are seeded per
(round, stage, client) by the loop, and every node aggregates the same sorted set. A client that raises,
times out or sends an invalid reply counts as a failed reply; crashed *nodes* are out of scope (as in the
paper).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fednsl.config import RunConfig
from fednsl.federation import peer as PP
from fednsl.federation.loop import Federation, MessageHook, RoundLoop, Topology
from fednsl.federation.records import Message
from fednsl.federation.roles import Strategy
from fednsl.federation.transport import ThreadTransport
from kg.seeding import derive_rng

log = logging.getLogger("fednsl.decentralised")


class Peer(Topology):
    """Every client is a node with its own copy of the strategy (module docstring)."""

    def __init__(self, strategy: Strategy, ids: Sequence[str]):
        self.ids = sorted(ids)
        self.nodes: dict[str, Strategy] = {n: copy.deepcopy(strategy) for n in self.ids}
        self.stages: list[str] = []  # this round's stages
        self.skipping: set[str] = set()  # nodes that lost an essential stage this round

    def server(self) -> Strategy:
        return self.nodes[self.ids[0]]  # node 0 speaks for the run (evaluate, finalize, outputs)

    def end_at(self, rnd: int) -> None:
        for node in self.nodes.values():
            node.end_at(rnd)

    def state_dict(self) -> dict[str, Any]:
        return {"nodes": {n: s.state_dict() for n, s in self.nodes.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for n, s in state["nodes"].items():
            self.nodes[n].load_state_dict(s)

    # -- one round: the peer protocol over len(stages) steps --------------------------------------------------
    def run_round(self, rnd: int, stages: Sequence[str]) -> None:
        stages = list(stages)
        self.stages = stages
        rng = derive_rng(self.loop.cfg.seed, rnd, 0x9E37)
        states: dict[str, PP.PeerState] = {}
        bag: list[tuple[str, PP.PeerMsg]] = []
        payload: dict[tuple[int, str, str], Message] = {}  # (step, requester, dst) -> request
        replies: dict[tuple[str, int], dict[str, Message]] = {}  # (node, step) -> {client: reply}
        failures: dict[tuple[str, int], dict[str, str]] = {}
        self.skipping = set()

        def run_actions(node: str, actions) -> None:
            for act in actions:
                if isinstance(act, PP.Send):
                    bag.append((act.dst, act.msg))
                elif isinstance(act, PP.Serve):
                    request = payload.get((act.step, act.requester, node))
                    reply = None
                    if request is not None:  # None: the requester skips this stage
                        reply = self._serve(request, node, act.requester, act.step, stages, failures)
                    if reply is not None:
                        replies.setdefault((act.requester, act.step), {})[node] = reply
                    bag.append((act.requester, PP.Rep(act.step, node)))
                elif isinstance(act, PP.PeerAggregate):
                    self._aggregate(
                        node,
                        rnd,
                        stages[act.step - 1],
                        replies.pop((node, act.step), {}),
                        failures.pop((node, act.step), {}),
                    )
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
        if node in self.skipping:
            return
        msgs = self.nodes[node].configure(stages[step - 1], rnd, self.ids)
        for dst in self.ids:
            payload[(step, node, dst)] = msgs[dst]
        own = self._serve(msgs[node], node, node, step, stages, failures)
        if own is not None:
            replies.setdefault((node, step), {})[node] = own

    def _serve(
        self, request: Message, client: str, requester: str, step: int, stages: list[str], failures
    ) -> Message | None:
        """``client`` answers ``requester``'s request through the transport; None (recorded) if it failed."""
        stage, rnd = stages[step - 1], request.round
        sent = self.loop.seeded(client, request, rnd, stage, sender=requester)
        for delivery in self.loop.send(rnd, stage, {client: sent}):
            why = self.loop.check(self.nodes[requester], stage, rnd, request, delivery)
            if why is None:
                return delivery.reply
            failures.setdefault((requester, step), {})[client] = why
            log.warning("round %d %s: %s's reply to %s failed: %s", rnd, stage, client, requester, why)
        return None

    def _aggregate(
        self, node: str, rnd: int, stage: str, got: Mapping[str, Message], failed: Mapping[str, str]
    ) -> None:
        if node in self.skipping:
            return
        ordered = {c: got[c] for c in sorted(got)}
        if len(ordered) < self.loop.cfg.federation.min_clients:
            self.nodes[node].on_abort(stage, rnd, f"{len(ordered)} replies < quorum")
            metrics: dict[str, Any] = {f"{stage}.aborted": 1}
            if self.nodes[node].stage(stage).essential and stage != self.stages[-1]:
                self.skipping.add(node)
                log.warning(
                    "round %d: node %s: %s lost its quorum; skipping its later stages this round", rnd, node, stage
                )
        else:
            metrics = self.nodes[node].aggregate(stage, rnd, ordered, dict(failed))
            metrics.update({f"{stage}.replies": len(ordered), f"{stage}.dropped": len(failed)})
        if node == self.ids[0]:
            for cid, msg in ordered.items():
                self.loop.metrics.log(rnd, f"client:{cid}", stage, msg.metrics)
            self.loop.metrics.log(rnd, "server", stage, metrics)


class DecentralisedRunner(RoundLoop):
    """``--engine decentralised``: :class:`RoundLoop` with the :class:`Peer` topology and a thread transport."""

    def __init__(
        self,
        federation: Federation,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: bool = True,
        message_hook: MessageHook | None = None,
    ):
        super().__init__(
            federation,
            config,
            run_dir,
            ThreadTransport(federation.clients),
            topology=Peer(federation.strategy, sorted(federation.clients)),
            resume=resume,
            progress=progress,
            message_hook=message_hook,
            label=" (p2p)",
        )
