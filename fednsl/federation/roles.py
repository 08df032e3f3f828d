"""Server strategy and client roles (template methods, Flower style).

A round is a sequence of *stages* (default ``("train", "evaluate")``). For each stage the
runner asks the strategy to ``configure_<stage>`` one message per sampled client, sends them,
validates replies against ``reply_schema(stage)`` and hands the accepted ones to
``aggregate_<stage>``. A method that needs more exchanges per round (e.g. FedNSL's round-0
rule statistics, LogiCP's calibration) adds stages such as ``"train.stats"``; the method names
``configure_train_stats`` / ``aggregate_train_stats`` on the strategy and ``train_stats`` on the
client implement them.
"""

from __future__ import annotations

from abc import ABC
from pathlib import Path
from typing import Any, Mapping, Sequence

from fednsl.federation.records import Message, MetricValue, Schema

Metrics = dict[str, MetricValue]


def _method_name(prefix: str, stage: str) -> str:
    return f"{prefix}{stage.replace('.', '_').replace('-', '_')}"


class Strategy(ABC):
    """Server side of a method. Subclasses implement ``configure_*``/``aggregate_*`` per stage."""

    def stages(self, rnd: int) -> Sequence[str]:
        """Stages of round ``rnd`` (1-based)."""
        return ("train", "evaluate")

    def configure(self, stage: str, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        """One message per sampled client (the template method dispatches to ``configure_<stage>``)."""
        fn = getattr(self, _method_name("configure_", stage), None)
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} has no configure_{stage}")
        out = fn(rnd, clients)
        if isinstance(out, Message):  # a broadcast: the same message to everyone
            return {c: out for c in clients}
        return dict(out)

    def aggregate(self, stage: str, rnd: int, replies: Mapping[str, Message],
                  failures: Mapping[str, str]) -> Metrics:
        """Aggregate accepted replies (sorted by client id); returns metrics to log."""
        fn = getattr(self, _method_name("aggregate_", stage), None)
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} has no aggregate_{stage}")
        return dict(fn(rnd, replies, failures) or {})

    def reply_schema(self, stage: str) -> Schema:
        """The schema a client's reply to ``stage`` must satisfy."""
        raise NotImplementedError(f"{type(self).__name__} declares no reply schema for {stage!r}")

    def sample_clients(self, stage: str, rnd: int, clients: Sequence[str]) -> Sequence[str] | None:
        """Override to pick the clients of a stage yourself; None = the runner's sample."""
        return None

    def evaluate(self, rnd: int) -> Metrics:
        """Server-side evaluation after round ``rnd`` (optional)."""
        return {}

    def on_abort(self, stage: str, rnd: int, reason: str) -> None:
        """Called when a stage lost its quorum; the strategy keeps its previous state."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume bit-exactly (weights, generators, pools)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def finalize(self, run_dir: Path) -> None:
        """Write method outputs (e.g. ``rules.tsv``) after the last round."""


class Client(ABC):
    """Client side of a method: private data stays here; only declared fields leave."""

    cid: str = "client"

    def handle(self, message: Message) -> Message:
        fn = getattr(self, _method_name("", message.kind), None)
        if fn is None:
            raise NotImplementedError(f"{type(self).__name__} cannot handle stage {message.kind!r}")
        return fn(message)

    def state_dict(self) -> dict[str, Any]:
        """Client state that survives rounds (e.g. personalised layers), for checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass
