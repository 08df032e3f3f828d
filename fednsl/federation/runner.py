"""The in-process engine: the round loop over the client objects of this process (threads).

Everything about rounds — sampling, seeding, validation, the sans-IO protocol, metrics, checkpoints and
resume — is :class:`~fednsl.federation.loop.RoundLoop`'s; this engine only picks the transport
(:class:`~fednsl.federation.transport.ThreadTransport`: each client call in a thread with the
``federation.client_timeout_s`` budget, ``federation.parallelism`` at once).
"""

from __future__ import annotations

from pathlib import Path

from fednsl.config import RunConfig
from fednsl.federation.loop import (
    Federation,
    MessageHook,
    QuorumLostError,
    RoundLoop,
    RunResult,
    client_seed,
    sample_clients,
)
from fednsl.federation.transport import ThreadTransport


class InProcessRunner(RoundLoop):
    """``--engine inprocess``: :class:`RoundLoop` with a :class:`ThreadTransport`."""

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
        transport = ThreadTransport(federation.clients, config.federation.parallelism)
        super().__init__(
            federation, config, run_dir, transport, resume=resume, progress=progress, message_hook=message_hook
        )


__all__ = [
    "Federation",
    "InProcessRunner",
    "MessageHook",
    "QuorumLostError",
    "RunResult",
    "client_seed",
    "sample_clients",
]
