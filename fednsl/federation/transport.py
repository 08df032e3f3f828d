"""How a stage's messages reach the clients: the one interface every engine implements.

The round loop (:mod:`fednsl.federation.loop`) owns the protocol, sampling, seeding, validation, metrics,
checkpoints and resume. An engine only says how messages travel: :class:`Transport`. Two live here:

- :class:`ThreadTransport` — the client objects of this process, each call in a thread with a time budget
  (the ``inprocess`` and ``decentralised`` engines);
- ``fednsl.engines.flower_grid.GridTransport`` — Flower messages through a ``Grid`` (SuperLink/SuperNodes or
  Flower's simulation runtime).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fednsl.federation.records import Message
from fednsl.federation.roles import Client


@dataclass(frozen=True)
class Delivery:
    """What came back from one client for one dispatched message: a reply, or why there is none."""

    client: str
    reply: Message | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.reply is None) == (self.error is None):
            raise ValueError("a delivery carries exactly one of a reply and an error")


class Transport(ABC):
    """Moves one stage's messages to clients and their replies back."""

    #: what the loop writes as ``engine`` in checkpoints (None: nothing)
    checkpoint_tag: str | None = None

    def start(self, ids: Sequence[str], min_clients: int) -> None:
        """Called once before the first round (e.g. to discover remote nodes); may raise."""

    def available(self, ids: Sequence[str]) -> list[str]:
        """The clients that can be sampled for the next exchange (in ``ids`` order)."""
        return list(ids)

    @abstractmethod
    def dispatch(
        self, rnd: int, stage: str, outgoing: Mapping[str, Message], timeout_s: float | None
    ) -> Iterator[Delivery]:
        """Send ``outgoing[c]`` to every client ``c``; yield one :class:`Delivery` per client as it finishes.

        A client that is not done ``timeout_s`` seconds after its message left yields an error delivery.
        Every client of ``outgoing`` is yielded exactly once.
        """

    def client_states(self) -> dict[str, Any]:
        """Client states for checkpoints (empty when they live elsewhere, e.g. on Flower nodes)."""
        return {}

    def load_client_states(self, states: Mapping[str, Any]) -> None:
        if states:
            raise ValueError(f"{type(self).__name__} cannot restore client states {sorted(states)}")

    def close(self) -> None:
        """Release what :meth:`start` took."""


class ThreadTransport(Transport):
    """The client objects of this process; each message runs in a daemon thread with a time budget.

    ``parallelism`` clients run at once. A client that overruns its budget is reported as timed out; its
    thread is abandoned and the client is not available again until the thread ends.
    """

    def __init__(self, clients: Mapping[str, Client], parallelism: int = 1):
        self.clients = clients
        self.parallelism = max(1, int(parallelism))
        self._busy: dict[str, threading.Thread] = {}  # clients still running an abandoned call

    def available(self, ids: Sequence[str]) -> list[str]:
        return [c for c in ids if not self._still_busy(c)]

    def _still_busy(self, cid: str) -> bool:
        th = self._busy.get(cid)
        if th is not None and not th.is_alive():
            del self._busy[cid]
            return False
        return th is not None

    def dispatch(
        self, rnd: int, stage: str, outgoing: Mapping[str, Message], timeout_s: float | None
    ) -> Iterator[Delivery]:
        done: queue.Queue = queue.Queue()
        todo = list(outgoing)
        active: dict[str, float] = {}  # client -> deadline

        def work(cid: str, msg: Message) -> None:
            try:
                done.put((cid, self.clients[cid].handle(msg), None))
            except BaseException as exc:  # noqa: BLE001 - any client failure drops the client
                done.put((cid, None, exc))

        while todo or active:
            while todo and len(active) < self.parallelism:
                cid = todo.pop(0)
                th = threading.Thread(target=work, args=(cid, outgoing[cid]), daemon=True, name=f"client-{cid}")
                self._busy[cid] = th
                th.start()
                active[cid] = time.monotonic() + timeout_s if timeout_s else math.inf
            wait = min(active.values()) - time.monotonic()
            try:
                cid, reply, exc = done.get(timeout=None if math.isinf(wait) else max(0.0, wait))
            except queue.Empty:
                now = time.monotonic()
                for late in [c for c, d in active.items() if d <= now]:
                    del active[late]
                    yield Delivery(late, error=f"timed out after {timeout_s}s")
                continue
            if cid not in active:
                continue
            del active[cid]
            self._busy.pop(cid, None)
            if exc is not None:
                yield Delivery(cid, error=f"{type(exc).__name__}: {exc}")
            elif not isinstance(reply, Message):
                yield Delivery(cid, error=f"reply is {type(reply).__name__}, not a Message")
            else:
                yield Delivery(cid, reply=reply)

    def client_states(self) -> dict[str, Any]:
        return {c: self.clients[c].state_dict() for c in sorted(self.clients)}

    def load_client_states(self, states: Mapping[str, Any]) -> None:
        for cid, cstate in states.items():
            if cid not in self.clients:
                raise ValueError(f"checkpoint has client {cid!r} that this run does not")
            self.clients[cid].load_state_dict(cstate)
