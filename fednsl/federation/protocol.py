"""The round protocol as pure step functions ("sans-IO").

One *exchange* of a round: the server broadcasts a stage message (e.g. "train") to the sampled
clients and collects their replies until every sampled client has replied or failed, or a timer
fires. ``step(state, event) -> (state, actions)`` does no I/O: the in-process runner, the
decentralised runner and the Flower engine drive it, and the model checker explores it.

Guarantees encoded here (checked exhaustively by :mod:`fednsl.verify`):

- a reply is accepted only if it carries this exchange's round and stage tag, comes from a
  sampled client, and is that client's first reply (no mixing of rounds, no double counting);
- aggregation happens once, only with at least ``min_replies`` accepted replies (quorum);
- a crashed or slow client cannot block the exchange: a timeout completes it with the replies
  in hand, or aborts it when the quorum is not met.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Union

Status = Literal["waiting", "complete", "aborted"]


@dataclass(frozen=True)
class Exchange:
    """Server-side state of one stage of one round."""

    round: int
    stage: str
    sampled: tuple[str, ...]
    min_replies: int
    accepted: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    status: Status = "waiting"

    @property
    def pending(self) -> tuple[str, ...]:
        done = set(self.accepted) | set(self.failed)
        return tuple(c for c in self.sampled if c not in done)


# -- events -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    client: str
    round: int
    stage: str


@dataclass(frozen=True)
class Failure:
    client: str
    round: int
    stage: str
    reason: str = ""


@dataclass(frozen=True)
class Timeout:
    round: int
    stage: str


Event = Union[Reply, Failure, Timeout]


# -- actions ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Broadcast:
    round: int
    stage: str
    clients: tuple[str, ...]


@dataclass(frozen=True)
class Accept:
    client: str


@dataclass(frozen=True)
class Discard:
    client: str
    reason: str


@dataclass(frozen=True)
class Drop:
    """A sampled client is out of this exchange (failed, invalid reply, or timed out)."""

    client: str
    reason: str


@dataclass(frozen=True)
class Aggregate:
    round: int
    stage: str
    clients: tuple[str, ...]  # sorted, so aggregation order never depends on arrival order


@dataclass(frozen=True)
class Abort:
    round: int
    stage: str
    reason: str


Action = Union[Broadcast, Accept, Discard, Drop, Aggregate, Abort]


def start(rnd: int, stage: str, sampled: tuple[str, ...], min_replies: int) -> tuple[Exchange, tuple[Action, ...]]:
    """Open an exchange: broadcast to the sampled clients."""
    if min_replies < 1:
        raise ValueError(f"min_replies must be >= 1, got {min_replies}")
    state = Exchange(round=rnd, stage=stage, sampled=tuple(sampled), min_replies=min_replies)
    if len(sampled) < min_replies:
        return replace(state, status="aborted"), (
            Abort(rnd, stage, f"only {len(sampled)} clients sampled, quorum is {min_replies}"),
        )
    return state, (Broadcast(rnd, stage, tuple(sampled)),)


def step(state: Exchange, event: Event) -> tuple[Exchange, tuple[Action, ...]]:
    """Advance the exchange by one event. Pure: returns the new state and the actions to take."""
    if state.status != "waiting":
        if isinstance(event, (Reply, Failure)):
            return state, (Discard(event.client, f"exchange already {state.status}"),)
        return state, ()
    if isinstance(event, Timeout):
        if (event.round, event.stage) != (state.round, state.stage):
            return state, ()  # a stale timer of an earlier exchange
        drops = tuple(Drop(c, "timed out") for c in state.pending)
        state = replace(state, failed=state.failed + state.pending)
        return _close(state, drops)
    tag_ok = (event.round, event.stage) == (state.round, state.stage)
    if not tag_ok:
        return state, (
            Discard(event.client, f"tagged round {event.round}/{event.stage}, expected {state.round}/{state.stage}"),
        )
    if event.client not in state.sampled:
        return state, (Discard(event.client, "not sampled in this round"),)
    if event.client not in state.pending:
        return state, (Discard(event.client, "already replied or dropped"),)
    if isinstance(event, Reply):
        state = replace(state, accepted=state.accepted + (event.client,))
        first: tuple[Action, ...] = (Accept(event.client),)
    else:
        state = replace(state, failed=state.failed + (event.client,))
        first = (Drop(event.client, event.reason or "failed"),)
    if state.pending:
        return state, first
    state, rest = _close(state, ())
    return state, first + rest


def _close(state: Exchange, actions: tuple[Action, ...]) -> tuple[Exchange, tuple[Action, ...]]:
    if len(state.accepted) >= state.min_replies:
        return replace(state, status="complete"), actions + (
            Aggregate(state.round, state.stage, tuple(sorted(state.accepted))),
        )
    return replace(state, status="aborted"), actions + (
        Abort(
            state.round,
            state.stage,
            f"{len(state.accepted)} of {len(state.sampled)} clients replied, quorum is {state.min_replies}",
        ),
    )


@dataclass
class ExchangeLog:
    """What happened in one exchange, for logs and metrics."""

    round: int
    stage: str
    sampled: tuple[str, ...]
    accepted: tuple[str, ...] = ()
    dropped: dict[str, str] = field(default_factory=dict)
    discarded: dict[str, str] = field(default_factory=dict)
    aborted: str | None = None
