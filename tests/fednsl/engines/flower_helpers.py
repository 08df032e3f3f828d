"""Test doubles for the Flower engine: a synchronous in-memory Grid and client sources over given objects."""

from __future__ import annotations

import copy
import uuid
from typing import Callable, Iterable, Mapping

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fednsl.engines import flower_client
from fednsl.engines.flower_client import ClientSource, FednslClientApp
from fednsl.federation.roles import Client

TIMING = ("time_s", "bytes")


def strip_times(rows):
    """Metric rows without anything measured in time or bytes (keys containing 'time' or 'bytes')."""
    return [{k: v for k, v in r.items() if "time" not in k and "bytes" not in k} for r in rows]


def strip(rows, drop: Iterable[str] = ()):
    """Metric rows without timings/byte counts (and without keys containing any of ``drop``)."""
    drop = (*TIMING, *drop)
    return [{k: v for k, v in r.items() if not any(t in k for t in drop)} for r in rows]


class ObjectSource(ClientSource):
    """Fresh deep copies of given client objects (what the simulation engine ships through Ray)."""

    def __init__(self, clients: Mapping[str, Client]):
        self.clients = dict(clients)
        self.key = f"objects:{id(self)}"

    def client_ids(self) -> list[str]:
        return sorted(self.clients)

    def fresh_client(self, cid: str) -> Client:
        return copy.deepcopy(self.clients[cid])


class LoopbackGrid(Grid):
    """Delivers each pushed message synchronously to a ClientApp with one Flower Context per node.

    ``fresh_process=True`` clears the ClientApp's per-process cache before every message, as a SuperNode does by
    starting one ClientApp process per message, so the client must come back from ``Context.state``.
    ``kill(node)`` removes a node from ``get_node_ids()``; messages to it then stay unanswered, or with
    ``error=True`` get Flower's NODE_UNAVAILABLE error reply (what a SuperLink sends once a node missed its
    heartbeats). ``silent`` nodes stay listed but never reply.
    """

    def __init__(self, app: FednslClientApp, num_nodes: int, *, fresh_process: bool = True,
                 node_configs: Mapping[int, dict] | None = None,
                 before_deliver: Callable[["LoopbackGrid", Message], None] | None = None):
        self.app, self.fresh_process, self.before_deliver = app, fresh_process, before_deliver
        # who "this process" is: Flower's ServerApp runtime sets it before the ServerApp creates messages
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 42, SUPERLINK_NODE_ID
        self.contexts: dict[int, Context] = {}
        for i in range(num_nodes):
            node = 1000 + 7 * i  # node ids unrelated to partition ids
            cfg = (node_configs or {}).get(i, {"partition-id": i, "num-partitions": num_nodes})
            self.contexts[node] = Context(run_id=2 ** 64 - 5, node_id=node, node_config=cfg, state=RecordDict(),
                                          run_config={})  # Flower run ids are uint64
        self.dead: set[int] = set()
        self.unavailable: set[int] = set()
        self.silent: set[int] = set()
        self.replies: dict[str, Message] = {}
        self.pending: dict[str, int] = {}
        self.delivered: list[str] = []  # message types, in delivery order
        self._run = None

    def node_of_partition(self, pid: int) -> int:
        return next(n for n, c in self.contexts.items() if int(c.node_config["partition-id"]) == pid)

    # -- Grid API ----------------------------------------------------------------------------------------------
    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        return [n for n in self.contexts if n not in self.dead]

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for msg in messages:
            mid = uuid.uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if self.before_deliver is not None:
                self.before_deliver(self, msg)
            if node in self.unavailable:
                self.replies[mid] = _unavailable(mid, node)
                continue
            if node in self.dead or node in self.silent:
                self.pending[mid] = node
                continue
            if self.fresh_process:
                flower_client._LIVE.clear()
            self.delivered.append(msg.metadata.message_type)
            try:
                reply = self.app(msg, self.contexts[node])
            except Exception as exc:  # noqa: BLE001 - what Flower turns into an error reply
                reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(exc).__name__}: {exc}"),
                                reply_to=msg)
            self.replies[mid] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))

    # -- faults ------------------------------------------------------------------------------------------------
    def kill(self, node: int, *, error: bool = False) -> None:
        self.dead.add(node)
        if error:
            self.unavailable.add(node)
            for mid, dst in list(self.pending.items()):
                if dst == node:
                    self.replies[mid] = _unavailable(mid, node)
                    del self.pending[mid]


def _unavailable(mid: str, node: int) -> Message:
    probe = Message(RecordDict(), dst_node_id=node, message_type="train")
    probe.metadata.__dict__["_message_id"] = mid
    return Message(Error(ErrorCode.NODE_UNAVAILABLE, "Node Unavailable (test double)"), reply_to=probe)
