"""A long-lived process per SuperNode that keeps its fednsl client loaded between Flower messages.

Flower 1.41 starts a fresh ClientApp process for every message (``--isolation process`` only moves the launcher
out of the SuperNode; each task is still a new ``flwr-clientapp`` process). Building or unpickling a fednsl client
in that process means importing torch and the method every time, which costs more than Flower itself. So the
deployment ClientApp (:class:`~fednsl.engines.flower_client.FednslClientApp` without a fixed source) relays each
message to this worker over a Unix socket in a private directory (mode 0700, so only the same user can connect),
and the worker serves it with the client it keeps in memory — the same object across stages and rounds, as in the
in-process engine.

The node's ``Context.state`` still receives the client after every message (the worker sends it back pickled, as
bytes the ClientApp stores without unpickling), so if the worker is gone the ClientApp serves the next message
itself from ``Context.state`` exactly as before, and a new worker starts from that state.

The worker is started by the first ClientApp process that needs it, in that process's group (the SuperNode's),
so stopping the SuperNode's process group stops it. It also exits when the SuperNode's task launcher
(``flower-superexec``) is gone, or after ``idle_s`` without a message.

Wire format (between two fednsl processes of one user): length-prefixed frames; a JSON header, then the fednsl
message as a JSON header plus ``.npz`` arrays (loaded with ``allow_pickle=False``), then the client blob.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fednsl.federation.records import Message

IDLE_S = 900.0
_LEN = struct.Struct("!Q")


class WorkerError(RuntimeError):
    """The worker could not be reached or did not answer (the ClientApp then serves the message itself)."""


class ClientRaised(RuntimeError):
    """The client raised in the worker: the message fails, as it would in the ClientApp process."""


# -- frames and messages ------------------------------------------------------------------------------------
def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


def recv_frame(sock: socket.socket) -> bytes:
    head = _recv_exact(sock, _LEN.size)
    return _recv_exact(sock, _LEN.unpack(head)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("worker connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def message_to_bytes(msg: Message) -> bytes:
    """A fednsl message as a JSON header and an ``.npz`` of its arrays (no pickle)."""
    head = json.dumps(
        {"kind": msg.kind, "round": msg.round, "sender": msg.sender, "config": msg.config, "metrics": msg.metrics}
    ).encode()
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.asarray(v) for k, v in msg.arrays.items()}
    np.savez(buf, **arrays)
    return _LEN.pack(len(head)) + head + buf.getvalue()


def message_from_bytes(data: bytes) -> Message:
    n = _LEN.unpack(data[: _LEN.size])[0]
    head = json.loads(data[_LEN.size : _LEN.size + n])
    with np.load(io.BytesIO(data[_LEN.size + n :]), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return Message(
        head["kind"], int(head["round"]), head["sender"], arrays, dict(head["config"]), dict(head["metrics"])
    )


# -- where a node's worker listens --------------------------------------------------------------------------
def socket_path(run_id: int | str, node_id: int | str) -> Path:
    """``$TMPDIR/fednsl-<uid>/<hash>.sock``: short (Unix socket paths are limited), private to this user."""
    root = Path(tempfile.gettempdir()) / f"fednsl-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    st = root.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{root} must belong to this user with mode 0700 (it holds worker sockets)")
    key = f"{run_id}:{node_id}:{os.environ.get('FLWR_HOME', '')}"
    return root / (hashlib.sha256(key.encode()).hexdigest()[:20] + ".sock")


def connect(path: Path, *, launcher_pid: int, start_timeout_s: float = 60.0) -> socket.socket:
    """A connection to the worker at ``path``; starts it (once, under a file lock) when nobody listens."""
    sock = _try_connect(path)
    if sock is not None:
        return sock
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _try_connect(path)
        if sock is not None:
            return sock
        path.unlink(missing_ok=True)
        log = open(str(path) + ".log", "ab")
        subprocess.Popen(
            [sys.executable, "-m", "fednsl.engines.flower_worker", str(path), str(launcher_pid), str(IDLE_S)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            close_fds=True,
        )
        log.close()
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            sock = _try_connect(path)
            if sock is not None:
                return sock
            time.sleep(0.02)
    raise WorkerError(f"the fednsl worker did not start within {start_timeout_s:.0f}s (log: {path}.log)")


def _try_connect(path: Path) -> socket.socket | None:
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def serve_via_worker(
    sock: socket.socket, header: dict[str, Any], request: Message, state: tuple[str, bytes] | None
) -> tuple[Message, dict[str, Any], bytes]:
    """One message through the worker: (reply, reply header with ``version``/``cid``/``kind``, client blob).

    ``state`` is the node's stored client (``("client", pickle)`` or ``("state", torch state_dict)``), sent only
    when the worker does not hold the version ``header["version"]``.
    """
    with sock:
        send_frame(sock, json.dumps(header).encode())
        send_frame(sock, message_to_bytes(request))
        answer = json.loads(recv_frame(sock))
        if answer.get("need") == "state":
            send_frame(sock, json.dumps({"kind": state[0] if state else "none"}).encode())
            send_frame(sock, state[1] if state else b"")
            answer = json.loads(recv_frame(sock))
        if "error" in answer:
            raise ClientRaised(answer["error"])
        reply = message_from_bytes(recv_frame(sock))
        blob = recv_frame(sock)
    return reply, answer, blob


# -- the worker process -------------------------------------------------------------------------------------
class Worker:
    """Holds clients by (run, partition) with the version of the node state they correspond to."""

    def __init__(self) -> None:
        self.clients: dict[tuple[str, int, int], tuple[int, str, Any]] = {}
        self.sources: dict[str, Any] = {}

    def handle(self, conn: socket.socket) -> None:
        from fednsl.engines.flower_source import ConfigSource, load_state

        header = json.loads(recv_frame(conn))
        request = message_from_bytes(recv_frame(conn))
        key = (str(header["run"]), int(header["pid"]), int(header["num"]))
        version = int(header["version"])
        held = self.clients.get(key)
        if held is None or held[0] != version:
            source = self.sources.setdefault(header["config_key"], ConfigSource(header["config"]))
            ids = source.client_ids()
            pid, num = key[1], key[2]
            if num != len(ids) or not 0 <= pid < num:
                raise ValueError(
                    f"partition-id={pid} num-partitions={num}, but the method has {len(ids)} clients {ids}"
                )
            cid = ids[pid]
            if version == 0:
                client = source.fresh_client(cid)
            else:
                send_frame(conn, json.dumps({"need": "state"}).encode())
                kind = json.loads(recv_frame(conn))["kind"]
                blob = recv_frame(conn)
                if kind == "client":
                    client = pickle.loads(blob)  # the node's own client, pickled by this worker or a ClientApp
                elif kind == "state":
                    client = source.fresh_client(cid)
                    load_state(client, blob)
                else:
                    raise ValueError(f"node state of version {version} is missing")
            held = (version, cid, client)
        _, cid, client = held
        reply = client.handle(request)
        try:
            kind, blob = "client", pickle.dumps(client, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - unpicklable client: its documented state_dict
            from fednsl.engines.flower_source import dump_state

            kind, blob = "state", dump_state(client)
        self.clients[key] = (version + 1, cid, client)
        send_frame(conn, json.dumps({"version": version + 1, "cid": cid, "kind": kind}).encode())
        send_frame(conn, message_to_bytes(reply))
        send_frame(conn, blob)


def run_worker(path: Path, launcher_pid: int, idle_s: float) -> None:
    """Serve connections on ``path`` one at a time until the launcher is gone or ``idle_s`` pass idle."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    server.bind(str(path))
    os.chmod(path, 0o600)
    server.listen(8)
    server.settimeout(2.0)
    worker = Worker()
    last = time.monotonic()

    def exit_cleanly(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, exit_cleanly)  # the SuperNode's group is stopped: remove the socket on the way
    signal.signal(signal.SIGHUP, exit_cleanly)
    try:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                if not _alive(launcher_pid) or time.monotonic() - last > idle_s:
                    return
                continue
            last = time.monotonic()
            with conn:
                try:
                    worker.handle(conn)
                except Exception as exc:  # noqa: BLE001 - reported to the ClientApp, which fails the message
                    try:
                        send_frame(conn, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
                    except OSError:
                        pass
    finally:
        server.close()
        path.unlink(missing_ok=True)
        Path(str(path) + ".lock").unlink(missing_ok=True)
        log = Path(str(path) + ".log")
        if log.exists() and log.stat().st_size == 0:
            log.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    run_worker(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
