"""The client side of the Flower engines: a ``ClientApp`` serving any fednsl method's client.

:class:`FednslClientApp` routes every Flower message type to the node's fednsl
:class:`~fednsl.federation.roles.Client` (``Client.handle`` dispatches on the stage carried in the message).
The node's client is ``sorted(client ids)[partition-id]``, from its node config ``partition-id`` /
``num-partitions`` (``flower-supernode --node-config``; the simulation runtime sets both). The server learns
which node serves which client with one ``query.fednsl_hello`` exchange, answered from the node config alone.

The client object survives between messages: in the process (simulation actors are long-lived); in deployment,
where a SuperNode starts one ClientApp process per message, in a node-local worker process
(:mod:`fednsl.engines.flower_worker`) that this ClientApp relays each message to, and after every message pickled
in the node's Flower ``Context.state`` (which stays on the node; the ClientApp serves from it itself when the
worker is gone). A method whose client keeps state across stages or rounds therefore behaves exactly as
in-process. Clients that cannot be pickled keep their documented ``state_dict()`` instead.
``FEDNSL_FLOWER_WORKER=0`` on a SuperNode serves every message in the ClientApp process.

Deployment builds the method from the config on a node's first message (``build(config)`` makes every client;
the node keeps the one of its partition), so the data the config names must be readable on each node.

This module imports neither torch nor the server-side runner (the Flower app loads ``client_app`` from here), so
a message relayed to the worker costs only Flower's own process start.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

from flwr.app import ConfigRecord, Context, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.app.metadata import validate_message_type  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fednsl.engines.flower_records import from_recorddict, record_bytes, record_int, to_recorddict  # noqa: E402
from fednsl.engines.flower_source import (  # noqa: E402
    ClientSource,
    ConfigSource,
    ShippedSource,
    build_method,
    config_from_text,
    config_text,
    dump_state,
    load_state,
)
from fednsl.federation.records import Message  # noqa: E402
from fednsl.federation.roles import Client  # noqa: E402

__all__ = [
    "HELLO",
    "NODE_RECORD",
    "ClientSource",
    "ConfigSource",
    "FednslClientApp",
    "ShippedSource",
    "build_method",
    "client_app",
    "config_from_text",
    "config_text",
]

HELLO = "query.fednsl_hello"  # engine handshake: which partition does a SuperNode hold?
NODE_RECORD = "fednsl.node"  # Context.state record holding the node's client between messages


_SOURCES: dict[str, ClientSource] = {}  # per process: source key -> source (with its cache)
_LIVE: dict[tuple[int, int], tuple[int, Client]] = {}  # per process: (run, node) -> (version, client)


def _partition(context: Context) -> tuple[int, int]:
    nc = context.node_config
    try:
        return int(nc["partition-id"]), int(nc["num-partitions"])
    except KeyError as exc:
        raise ValueError(
            f"SuperNode {context.node_id}: node config {dict(nc)} lacks {exc.args[0]!r}; start it "
            "with --node-config 'partition-id=I num-partitions=N' (N = the method's clients)"
        ) from exc


class FednslClientApp(ClientApp):
    """A Flower ClientApp serving the fednsl client of its SuperNode's partition (any stage, any method).

    ``source`` fixes where clients come from (the simulation engine ships them); without it the method is
    built from ``context.run_config["fednsl-config"]`` (deployment).
    """

    def __init__(self, source: ClientSource | None = None):
        super().__init__()
        self.source = source

    def __call__(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        with self._lifespan(context):
            mtype = message.metadata.message_type
            if not validate_message_type(mtype):
                raise ValueError(f"invalid Flower message type {mtype!r}")
            if mtype == HELLO:
                pid, num = _partition(context)
                return FlowerMessage(
                    RecordDict({"node": ConfigRecord({"partition-id": pid, "num-partitions": num})}), reply_to=message
                )
            return self._serve(message, context)

    def _source(self, context: Context) -> ClientSource:
        src = self.source
        if src is None:
            text = context.run_config.get("fednsl-config")
            if not text:
                raise ValueError(
                    "the Flower run config has no 'fednsl-config' (run the app written by "
                    "`fednsl flower app` or use `fednsl train --engine flower`)"
                )
            src = ConfigSource(str(text))
        return _SOURCES.setdefault(src.key, src)

    def _serve(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        request = from_recorddict(message.content)
        if self.source is None and os.environ.get("FEDNSL_FLOWER_WORKER", "1") != "0":
            reply = self._serve_by_worker(request, context)
            if reply is not None:
                return FlowerMessage(to_recorddict(reply), reply_to=message)
        source = self._source(context)
        client, version, cid = self._client(source, context)
        reply = client.handle(request)
        self._store(context, client, version + 1, cid)
        return FlowerMessage(to_recorddict(reply), reply_to=message)

    @staticmethod
    def _serve_by_worker(request: Message, context: Context) -> Message | None:
        """Serve through the node's long-lived worker (:mod:`fednsl.engines.flower_worker`); None if unreachable."""
        from fednsl.engines import flower_worker as fw

        text = context.run_config.get("fednsl-config")
        if not text:
            return None
        pid, num = _partition(context)
        rec = context.state.config_records.get(NODE_RECORD)
        version, state = 0, None
        if rec is not None and (
            str(rec["run-id"]),
            record_int(rec, "partition-id"),
            record_int(rec, "num-partitions"),
        ) == (
            str(context.run_id),
            pid,
            num,
        ):
            version = record_int(rec, "version")
            state = (
                ("client", record_bytes(rec, "client")) if "client" in rec else ("state", record_bytes(rec, "state"))
            )
        header = {
            "run": str(context.run_id),
            "pid": pid,
            "num": num,
            "version": version,
            "config": str(text),
            "config_key": hashlib.sha256(str(text).encode()).hexdigest(),
        }
        try:
            sock = fw.connect(fw.socket_path(context.run_id, context.node_id), launcher_pid=os.getppid())
            reply, answer, blob = fw.serve_via_worker(sock, header, request, state)
        except (fw.WorkerError, OSError, ValueError) as exc:  # not the client's fault: serve it here instead
            print(f"fednsl worker unavailable ({exc}); serving in the ClientApp process", file=sys.stderr)
            return None
        context.state.config_records[NODE_RECORD] = ConfigRecord(
            {
                "version": int(answer["version"]),
                "cid": str(answer["cid"]),
                "run-id": str(context.run_id),
                "partition-id": pid,
                "num-partitions": num,
                str(answer["kind"]): blob,
            }
        )
        return reply

    @staticmethod
    def _client(source: ClientSource, context: Context) -> tuple[Client, int, str]:
        """The node's client as the previous message left it (process cache, else Context.state, else fresh).

        Only a node's first message builds (or fetches) the method's clients; later ones unpickle the node's own.
        """
        pid, num = _partition(context)
        rec = context.state.config_records.get(NODE_RECORD)
        if rec is not None and (
            str(rec["run-id"]),
            record_int(rec, "partition-id"),
            record_int(rec, "num-partitions"),
        ) == (
            str(context.run_id),
            pid,
            num,
        ):  # (Flower may carry Context.state over to a later run of a series)
            cid, version = str(rec["cid"]), record_int(rec, "version")
            cached = _LIVE.get((context.run_id, context.node_id))
            if cached is not None and cached[0] == version:
                return cached[1], version, cid
            if "client" in rec:
                return pickle.loads(record_bytes(rec, "client")), version, cid
            client = source.fresh_client(cid)
            load_state(client, record_bytes(rec, "state"))
            return client, version, cid
        ids = source.client_ids()
        if num != len(ids) or not 0 <= pid < num:
            raise ValueError(
                f"SuperNode {context.node_id}: partition-id={pid} num-partitions={num}, but the method "
                f"has {len(ids)} clients {ids}"
            )
        return source.fresh_client(ids[pid]), 0, ids[pid]

    @staticmethod
    def _store(context: Context, client: Client, version: int, cid: str) -> None:
        try:
            payload: dict[str, Any] = {"client": pickle.dumps(client, protocol=pickle.HIGHEST_PROTOCOL)}
        except Exception:  # noqa: BLE001 - unpicklable client: keep its documented state_dict instead
            payload = {"state": dump_state(client)}
        pid, num = _partition(context)
        context.state.config_records[NODE_RECORD] = ConfigRecord(
            {
                "version": version,
                "cid": cid,
                "run-id": str(context.run_id),  # a uint64: too big for a config int
                "partition-id": pid,
                "num-partitions": num,
                **payload,
            }
        )
        _LIVE[(context.run_id, context.node_id)] = (version, client)


#: The ClientApp that ``flower-supernode`` loads (``fednsl.engines.flower_client:client_app``; it imports neither torch nor the server side).
client_app = FednslClientApp()
