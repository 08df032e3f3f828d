"""Fault injection: wrap clients so that chosen clients misbehave in chosen rounds and stages.

Configured under ``federation.faults`` (YAML or ``--set``), one fault::

    federation:
      faults: {kind: nan, clients: [c1], rounds: [2], stages: [train]}

or several, each under a name of your choice (``--set federation.faults.a.kind=raise``)::

      faults:
        slow: {kind: hang, clients: [c0], seconds: 120}
        bad: {kind: wrong_shape, clients: [c2]}

``clients`` is a list of client ids or ``"all"``; ``rounds`` and ``stages`` default to every round and stage.
Kinds the round protocol drops or survives (:data:`KINDS`, the fault matrix):

- ``raise``: the client raises :class:`InjectedFault` instead of replying.
- ``hang``: the client sleeps ``seconds`` (default 3600) before replying; ``federation.client_timeout_s``
  should drop it.
- ``crash``: the client's process dies (``os._exit(70)``) where the engine runs clients in other processes;
  in the engine's own process this is simulated by raising :class:`InjectedCrash`.
- ``nan``: the first float array of the reply (by name) is all NaN.
- ``wrong_shape``: the first array of the reply gets one extra row (a 0-d array becomes 1-d).
- ``stale_round``: the reply is tagged with the previous round.
- ``drop``: the client does its work but the reply is lost (``handle`` returns None).
- ``huge_ids``: every integer array is filled with 10^9.
- ``negative_counts``: every integer array is filled with -1, and a ``num_examples`` metric becomes -1.

A reply that is finite and of the declared shapes but absurd cannot be told from an honest one by any schema
(:data:`POISON_KINDS`; defended by ``federation.aggregation`` / ``federation.clip_norm``,
:mod:`fednsl.federation.aggregate`):

- ``huge_weights``: every floating-point array is scaled by 10^30 (kept finite: clipped to the dtype's range).

:func:`inject_faults` wraps the clients of a federation when faults are configured (``fednsl.pipeline.train``
calls it); without faults it returns the federation unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fednsl.federation.records import Message
from fednsl.federation.roles import Client

log = logging.getLogger("fednsl.faults")

KINDS = ("raise", "hang", "crash", "nan", "wrong_shape", "stale_round", "drop", "huge_ids", "negative_counts")
POISON_KINDS = ("huge_weights",)
ALL_KINDS = KINDS + POISON_KINDS
HUGE_ID = 10**9
HUGE_WEIGHT = 1e30


class InjectedFault(RuntimeError):
    """Raised by a client told to fail (kind ``raise``)."""


class InjectedCrash(RuntimeError):
    """Stands for a crashed client process when the client runs in the engine's own process (every engine
    treats a client that raises as failed; this class tells a crash apart from an injected ``raise``)."""


@dataclass(frozen=True)
class FaultSpec:
    """One fault: ``kind`` for ``clients`` (None = all) in ``rounds`` and ``stages`` (None = all)."""

    kind: str
    clients: tuple[str, ...] | None = None
    rounds: tuple[int, ...] | None = None
    stages: tuple[str, ...] | None = None
    seconds: float = 3600.0

    def applies(self, cid: str, rnd: int, stage: str) -> bool:
        return (
            (self.clients is None or cid in self.clients)
            and (self.rounds is None or rnd in self.rounds)
            and (self.stages is None or stage in self.stages)
        )


def _ints(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None or value == "all":
        return None
    vals = [value] if isinstance(value, int) else value
    if (
        not isinstance(vals, Sequence)
        or isinstance(vals, str)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in vals)
    ):
        raise ValueError(f"{where} must be a list of round numbers >= 1 or 'all', got {value!r}")
    return tuple(vals)


def _strs(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None or value == "all":
        return None
    vals = [value] if isinstance(value, str) else value
    if not isinstance(vals, Sequence) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in vals):
        raise ValueError(f"{where} must be a list of names or 'all', got {value!r}")
    return tuple(str(v) for v in vals)


def _spec(raw: Any, where: str) -> FaultSpec:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping {{kind: ..., clients: [...]}}, got {raw!r}")  # noqa: TRY004
    unknown = sorted(set(raw) - {"kind", "clients", "rounds", "stages", "seconds"})
    if unknown:
        raise ValueError(
            f"{where}: unknown option(s) {unknown}; valid: ['clients', 'kind', 'rounds', 'seconds', 'stages']"
        )
    kind = raw.get("kind")
    if kind not in ALL_KINDS:
        raise ValueError(f"{where}.kind must be one of {list(ALL_KINDS)}, got {kind!r}")
    if "clients" not in raw:
        raise ValueError(f"{where}.clients is required (a list of client ids, or 'all')")
    seconds = raw.get("seconds", 3600.0)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        raise ValueError(f"{where}.seconds must be a number >= 0, got {seconds!r}")
    return FaultSpec(
        kind,
        _strs(raw["clients"], f"{where}.clients"),
        _ints(raw.get("rounds"), f"{where}.rounds"),
        _strs(raw.get("stages"), f"{where}.stages"),
        float(seconds),
    )


def parse_faults(raw: Mapping[str, Any] | None, where: str = "federation.faults") -> tuple[FaultSpec, ...]:
    """The faults of a ``federation.faults`` section (one spec, or named specs); ValueError naming the key."""
    if not raw:
        return ()
    if "kind" in raw:
        return (_spec(raw, where),)
    return tuple(_spec(v, f"{where}.{k}") for k, v in raw.items())


def corrupt(reply: Message, kind: str) -> Message:
    """``reply`` damaged as ``kind`` says (nan, wrong_shape, stale_round, huge_ids, negative_counts,
    huge_weights)."""
    arrays = {k: np.array(v, copy=True) for k, v in reply.arrays.items()}
    metrics = dict(reply.metrics)
    if kind == "stale_round":
        return replace(reply, round=reply.round - 1)
    if kind == "nan":
        floats = [k for k in arrays if np.issubdtype(arrays[k].dtype, np.floating) and arrays[k].size]
        if floats:
            arrays[min(floats)] = np.full_like(arrays[min(floats)], np.nan)
        elif metrics:
            metrics[min(metrics)] = float("nan")
    elif kind == "wrong_shape" and arrays:
        name = min(arrays)
        a = arrays[name]
        if a.ndim == 0:
            arrays[name] = a.reshape(1)
        else:
            arrays[name] = np.concatenate([a, a[:1] if len(a) else np.zeros((1, *a.shape[1:]), a.dtype)])
    elif kind == "huge_weights":
        for k, a in arrays.items():
            if np.issubdtype(a.dtype, np.floating):
                top = np.finfo(a.dtype).max
                arrays[k] = np.clip(a.astype(np.float64) * HUGE_WEIGHT, -top, top).astype(a.dtype)
    elif kind in ("huge_ids", "negative_counts"):
        value = HUGE_ID if kind == "huge_ids" else -1
        for k, a in arrays.items():
            if np.issubdtype(a.dtype, np.integer):
                arrays[k] = np.full(a.shape, value, dtype=np.int64)
        if kind == "negative_counts" and "num_examples" in metrics:
            metrics["num_examples"] = -1
    return replace(reply, arrays=arrays, metrics=metrics)


class FaultyClient(Client):
    """A client that behaves like ``inner`` except where one of ``faults`` applies (see the module doc)."""

    def __init__(self, inner: Client, faults: Sequence[FaultSpec]):
        self.inner = inner
        self.cid = inner.cid
        self.faults = tuple(faults)
        self._pid = os.getpid()  # a different pid at handle() time: we run in a client process

    def handle(self, message: Message) -> Message | None:  # type: ignore[override]
        spec = next((f for f in self.faults if f.applies(self.cid, message.round, message.kind)), None)
        if spec is None:
            return self.inner.handle(message)
        log.info("injecting %s into client %s, round %d %s", spec.kind, self.cid, message.round, message.kind)
        if spec.kind == "raise":
            raise InjectedFault(f"injected fault: client {self.cid} raises in round {message.round} {message.kind}")
        if spec.kind == "crash":
            if os.getpid() != self._pid:
                os._exit(70)
            raise InjectedCrash(f"injected crash of client {self.cid} in round {message.round} {message.kind}")
        if spec.kind == "hang":
            time.sleep(spec.seconds)
            return self.inner.handle(message)
        reply = self.inner.handle(message)
        if spec.kind == "drop":
            return None
        return corrupt(reply, spec.kind)

    def handled_stages(self) -> tuple[str, ...]:
        """The wrapped client's stages: the wrapper intercepts :meth:`handle`, not the registration."""
        return self.inner.handled_stages()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped client's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def inject_faults(federation: Any, faults: Mapping[str, Any] | None) -> Any:
    """Wrap every client of ``federation`` (a :class:`~fednsl.federation.runner.Federation`) named by a fault."""
    specs = parse_faults(faults)
    if not specs:
        return federation
    known = set(federation.clients)
    for spec in specs:
        unknown = sorted(set(spec.clients or ()) - known)
        if unknown:
            raise ValueError(f"federation.faults: unknown client(s) {unknown}; clients: {sorted(known)}")
    federation.clients = {
        cid: FaultyClient(c, specs) if any(s.clients is None or cid in s.clients for s in specs) else c
        for cid, c in federation.clients.items()
    }
    return federation
