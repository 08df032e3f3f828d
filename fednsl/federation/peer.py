"""The decentralised (peer-to-peer) generic algorithm as pure step functions (PTB-FLA style).

Every node is alternately server and client. In step ``s`` (a round-stage pair) node i sends a
request ``Req(s, i)`` to each peer; a peer answers with ``Rep(s, peer)`` computed by its client
callback; node i aggregates once it has served every peer's request of step ``s`` and holds every
peer's reply of step ``s`` (Prokić et al., §2.3). Unlike PTB-FLA's 2023 code, every message carries
its step tag: a request of a later step that arrives early is buffered (served when the node gets
there) and a reply is only counted in its own step, so steps cannot mix (property P10).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union


@dataclass(frozen=True)
class Req:
    step: int
    src: str


@dataclass(frozen=True)
class Rep:
    step: int
    src: str


PeerMsg = Union[Req, Rep]


@dataclass(frozen=True)
class Send:
    dst: str
    msg: PeerMsg


@dataclass(frozen=True)
class Serve:
    """Run the client callback for ``requester``'s request of ``step`` and send the reply."""

    step: int
    requester: str


@dataclass(frozen=True)
class PeerAggregate:
    step: int
    peers: tuple[str, ...]  # sorted


@dataclass(frozen=True)
class PeerDiscard:
    msg: PeerMsg
    reason: str


PeerAction = Union[Send, Serve, PeerAggregate, PeerDiscard]


@dataclass(frozen=True)
class PeerState:
    node: str
    peers: tuple[str, ...]  # every other node
    steps: int  # total steps of the run
    step: int = 0  # 0 = not started; steps + 1 = done
    served: frozenset[str] = frozenset()  # peers whose request of `step` was served
    replied: frozenset[str] = frozenset()  # peers whose reply of `step` arrived
    deferred: tuple[Req, ...] = ()  # requests of later steps, buffered

    @property
    def done(self) -> bool:
        return self.step > self.steps


def peer_start(state: PeerState) -> tuple[PeerState, tuple[PeerAction, ...]]:
    return _enter(replace(state, step=1), ())


def _enter(state: PeerState, actions: tuple[PeerAction, ...]) -> tuple[PeerState, tuple[PeerAction, ...]]:
    """Enter ``state.step``: broadcast requests and serve buffered requests of this step."""
    if state.done:
        return state, actions
    out = actions + tuple(Send(p, Req(state.step, state.node)) for p in state.peers)
    now = tuple(r for r in state.deferred if r.step == state.step)
    state = replace(
        state,
        served=frozenset(),
        replied=frozenset(),
        deferred=tuple(r for r in state.deferred if r.step != state.step),
    )
    for req in now:
        state = replace(state, served=state.served | {req.src})
        out += (Serve(req.step, req.src),)
    return _maybe_finish(state, out)


def _maybe_finish(state: PeerState, out: tuple[PeerAction, ...]) -> tuple[PeerState, tuple[PeerAction, ...]]:
    everyone = frozenset(state.peers)
    if state.served == everyone and state.replied == everyone:
        out += (PeerAggregate(state.step, tuple(sorted(state.peers))),)
        return _enter(replace(state, step=state.step + 1), out)
    return state, out


def peer_step(state: PeerState, msg: PeerMsg) -> tuple[PeerState, tuple[PeerAction, ...]]:
    """Handle one delivered message. Pure."""
    if msg.src not in state.peers:
        return state, (PeerDiscard(msg, "not a peer"),)
    if isinstance(msg, Req):
        if msg.step == state.step and msg.src not in state.served:
            state = replace(state, served=state.served | {msg.src})
            return _maybe_finish(state, (Serve(msg.step, msg.src),))
        if msg.step > state.step and msg.step <= state.steps and msg not in state.deferred:
            return replace(state, deferred=state.deferred + (msg,)), ()
        return state, (PeerDiscard(msg, f"request of step {msg.step} at step {state.step}"),)
    if msg.step == state.step and msg.src not in state.replied:
        state = replace(state, replied=state.replied | {msg.src})
        return _maybe_finish(state, ())
    return state, (PeerDiscard(msg, f"reply of step {msg.step} at step {state.step}"),)
