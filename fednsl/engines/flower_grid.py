"""The Flower transport: a stage's fednsl messages as Flower messages through a ``Grid``.

:class:`GridTransport` is all the Flower engines add to the round loop (:mod:`fednsl.federation.loop`):
per exchange it pushes one Flower message per sampled client (:mod:`fednsl.engines.flower_records`) and
yields replies as they are pulled. Sampling, seeds, validation, the protocol, metrics and checkpoints are the
loop's, so a Flower run equals the in-process run. A client whose SuperNode stops answering (Flower replies
"Node Unavailable" once it misses 2 heartbeats, i.e. within about 60 s, and drops it from
``grid.get_node_ids()``) or that overruns ``federation.client_timeout_s`` is a failed client of that exchange.

At start it asks every SuperNode which partition it holds (one ``query.fednsl_hello`` message each) and maps
partitions to client ids (``sorted(client ids)[partition-id]``); nodes that join later are greeted before
each exchange, nodes that left are forgotten.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import DEFAULT_TTL, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.serverapp import Grid

from fednsl.config import RunConfig
from fednsl.engines.flower_client import HELLO
from fednsl.engines.flower_records import (
    RecordTranslationError,
    from_recorddict,
    message_type,
    record_int,
    to_recorddict,
)
from fednsl.federation.loop import Federation, MessageHook, RoundLoop
from fednsl.federation.records import Message
from fednsl.federation.transport import Delivery, Transport

log = logging.getLogger("fednsl.flower")


@dataclass
class GridOptions:
    """How the server talks to the Grid."""

    node_wait_s: float = 120.0  # wait this long at start for every partition's SuperNode to announce itself
    poll_s: float = 0.1  # interval between pulls of replies
    liveness_s: float = 2.0  # how often pending SuperNodes are checked against grid.get_node_ids()


class GridTransport(Transport):
    """Flower messages through ``grid``; the client states live on the nodes, so checkpoints hold none."""

    checkpoint_tag = "flower"

    def __init__(self, grid: Grid, options: GridOptions | None = None):
        self.grid = grid
        self.opts = options or GridOptions()
        self.ids: list[str] = []
        self.node_of: dict[str, int] = {}  # client id -> node id
        self._cid_of: dict[int, str] = {}  # node id -> client id
        self._hello: dict[str, int] = {}  # hello message id -> node id
        self._asked: set[int] = set()  # nodes a hello went to
        self.rejected: dict[int, str] = {}  # node id -> why it serves no client

    # -- discovery -------------------------------------------------------------------------------------------
    def start(self, ids: Sequence[str], min_clients: int) -> None:
        self.ids = list(ids)
        self.discover(self.opts.node_wait_s)
        missing = [c for c in self.ids if c not in self.node_of]
        if missing:
            log.warning(
                "no SuperNode for clients %s after %.0fs; they count as unavailable", missing, self.opts.node_wait_s
            )
        if len(self.node_of) < min_clients:
            raise RuntimeError(
                f"only {len(self.node_of)} of {len(self.ids)} clients have a SuperNode after "
                f"{self.opts.node_wait_s:.0f}s, quorum is {min_clients}; "
                f"rejected nodes: {self.rejected or 'none'}"
            )

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
                    mid = reply.metadata.reply_to_message_id
                    if mid in self._hello:
                        self._register(self._hello.pop(mid), reply, live)
            if len(self.node_of) == len(self.ids) or time.monotonic() >= deadline:
                return
            time.sleep(self.opts.poll_s)

    def _register(self, node: int, reply: FlowerMessage, live: set[int]) -> None:
        if reply.has_error():
            self.rejected[node] = f"hello failed: {reply.error.reason}"
        else:
            rec = reply.content.config_records["node"]
            pid, num = record_int(rec, "partition-id"), record_int(rec, "num-partitions")
            if num != len(self.ids) or not 0 <= pid < num:
                self.rejected[node] = (
                    f"partition-id={pid} num-partitions={num}, but the method has {len(self.ids)} clients"
                )
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

    def available(self, ids: Sequence[str]) -> list[str]:
        self.discover(0.0)  # forget nodes that left, greet nodes that (re)joined
        return [c for c in ids if c in self.node_of]

    # -- one exchange ----------------------------------------------------------------------------------------
    def dispatch(
        self, rnd: int, stage: str, outgoing: Mapping[str, Message], timeout_s: float | None
    ) -> Iterator[Delivery]:
        """Push one Flower message per client; yield deliveries as replies arrive, fail or time out."""
        ttl = None if timeout_s is None else min(float(DEFAULT_TTL), float(timeout_s) + 60.0)  # the link expires it
        mtype = message_type(stage)
        pending: dict[str, str] = {}
        batch: list[tuple[str, FlowerMessage]] = []
        for cid, msg in outgoing.items():
            node = self.node_of.get(cid)
            if node is None:
                yield Delivery(cid, error="no SuperNode serves this client")
                continue
            batch.append(
                (
                    cid,
                    FlowerMessage(
                        to_recorddict(msg), dst_node_id=node, message_type=mtype, ttl=ttl, group_id=f"{rnd}/{stage}"
                    ),
                )
            )
        mids = list(self.grid.push_messages([m for _, m in batch])) if batch else []
        for i, (cid, _) in enumerate(batch):
            mid = mids[i] if i < len(mids) else None
            if mid:
                pending[mid] = cid
            else:
                yield Delivery(cid, error="the SuperLink did not accept the message")
        deadline = time.monotonic() + timeout_s if timeout_s else math.inf
        next_check = time.monotonic() + self.opts.liveness_s
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                mid = reply.metadata.reply_to_message_id
                if mid not in pending:
                    continue
                cid = pending.pop(mid)
                if reply.has_error():
                    err = reply.error
                    yield Delivery(cid, error=f"Flower error {err.code}: {err.reason}")
                    continue
                try:
                    yield Delivery(cid, reply=from_recorddict(reply.content))
                except RecordTranslationError as exc:
                    yield Delivery(cid, error=str(exc))
            if not pending:
                break
            now = time.monotonic()
            if now >= deadline:
                for cid in list(pending.values()):
                    yield Delivery(cid, error=f"timed out after {timeout_s}s")
                break
            if now >= next_check:
                live = set(self.grid.get_node_ids())
                for mid, cid in list(pending.items()):
                    if self.node_of.get(cid) not in live:
                        del pending[mid]
                        yield Delivery(cid, error="its SuperNode left the federation")
                next_check = now + self.opts.liveness_s
            time.sleep(max(0.0, min(self.opts.poll_s, deadline - now)))

    def load_client_states(self, states: Mapping[str, Any]) -> None:
        if states:
            log.warning(
                "checkpoint holds client states %s; on Flower they live on the nodes and are not restored",
                sorted(states),
            )


class GridRunner(RoundLoop):
    """The round loop over a Flower ``Grid`` (the ServerApp side of the ``flower`` and ``flower-sim`` engines)."""

    def __init__(
        self,
        federation: Federation,
        config: RunConfig,
        run_dir: Path,
        *,
        grid: Grid,
        resume: bool = False,
        progress: bool = True,
        message_hook: MessageHook | None = None,
        options: GridOptions | None = None,
    ):
        self.grid_transport = GridTransport(grid, options)
        super().__init__(
            federation,
            config,
            run_dir,
            self.grid_transport,
            resume=resume,
            progress=progress,
            message_hook=message_hook,
        )

    @property
    def node_of(self) -> dict[str, int]:
        return self.grid_transport.node_of

    @property
    def rejected(self) -> dict[int, str]:
        return self.grid_transport.rejected
