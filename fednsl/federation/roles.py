"""Server strategy and client roles, with every stage declared once.

A round is a sequence of *stages* (by default every declared stage, in declaration order). A strategy declares
each stage exactly once with :class:`Stage` — its name, how the server configures the request, how it aggregates
the replies, the reply schema and the request schema::

    class MyStrategy(Strategy):
        def declare_stages(self):
            return (Stage("train", self.configure_train, self.aggregate_train,
                          reply=self.train_reply, request=self.train_request),
                    Stage("evaluate", self.configure_evaluate, self.aggregate_evaluate, reply=EVAL_SCHEMA))

A client registers its handlers explicitly, in the spirit of Flower's ``@app.train()``::

    class MyClient(Client):
        @handles("train")
        def fit(self, msg: Message) -> Message: ...

Typos fail before any message is sent: a stage declared twice, a client without a handler for a declared
stage (``Strategy.check_clients``, when the round loop starts) and a handler registered twice for one stage
(when the class is defined) raise :class:`StageError`; a round whose ``stages(rnd)`` names an undeclared stage
raises it before that round's first exchange.

Replies are validated against the reply schema *bound to the request that was sent*: symbolic sizes of the
reply schema (``"T"``, ``"J"``) take the values the request's arrays gave them under the request schema, and
``ArraySpec.like`` / ``ArraySpec.high`` / ``Schema.limits`` tie shapes, id ranges and counts to the request
(see :mod:`fednsl.federation.records`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar, Union

from fednsl.federation.records import (
    SERVER,
    InvalidMessageError,
    Message,
    MetricValue,
    Schema,
    bind_request,
    validate,
)

Metrics = dict[str, MetricValue]
Configure = Callable[[int, Sequence[str]], Message | Mapping[str, Message]]
Aggregate = Callable[[int, Mapping[str, Message], Mapping[str, str]], Mapping[str, MetricValue] | None]
SchemaSource = Union[Schema, Callable[[], Schema]]
Limits = Callable[[str], Mapping[str, float]]  # client id -> upper bounds of the reply's count metrics


class StageError(ValueError):
    """A stage is declared, named or handled inconsistently (raised before the first round)."""


@dataclass(frozen=True)
class Stage:
    """One stage of a method, declared once.

    ``reply`` / ``request`` are schemas or zero-argument callables returning one (for schemas that depend on
    the server's state, e.g. the names of the model's weights). ``request=None`` leaves the request
    unchecked and binds nothing. ``limits(cid)`` gives upper bounds of the reply's count metrics taken from
    the server's state (e.g. ``{"num_examples": 512}`` when the server knows the client's data size).
    ``essential``: the later stages of the round need this one; when it loses its quorum they are skipped
    (with ``on_quorum_loss: skip``), so a strategy that schedules it until it succeeds retries next round.
    """

    name: str
    configure: Configure
    aggregate: Aggregate
    reply: SchemaSource
    request: SchemaSource | None = None
    limits: Limits | None = None
    essential: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise StageError(f"a stage needs a non-empty name, got {self.name!r}")
        for what in ("configure", "aggregate"):
            if not callable(getattr(self, what)):
                raise StageError(f"stage {self.name!r}: {what} must be callable, got {getattr(self, what)!r}")
        if not (isinstance(self.reply, Schema) or callable(self.reply)):
            raise StageError(f"stage {self.name!r}: reply must be a Schema or a callable returning one")

    def reply_schema(self) -> Schema:
        return _schema(self.reply)

    def request_schema(self) -> Schema | None:
        return None if self.request is None else _schema(self.request)


def _schema(source: SchemaSource) -> Schema:
    out = source if isinstance(source, Schema) else source()
    if not isinstance(out, Schema):
        raise StageError(f"a schema callable returned {type(out).__name__}, not a Schema")
    return out


class Strategy(ABC):
    """Server side of a method: declares its stages (:meth:`declare_stages`); the loop drives them."""

    #: the run's last round, for a strategy whose last round does more (its constructor sets it; 0: no such work)
    rounds: int = 0

    def end_at(self, rnd: int) -> None:
        """Make round ``rnd`` the run's last (the loop's ``time_budget_s`` ends a run early): a strategy that does
        more in its last round (evaluation, counts) does it in round ``rnd``."""
        self.rounds = int(rnd)

    def may_end_after(self, rnd: int) -> bool:
        """Whether round ``rnd``, already run, may become the last after the fact: False when the last round does
        work round ``rnd`` did not (the time budget then runs one more round as the last)."""
        return True

    @abstractmethod
    def declare_stages(self) -> Sequence[Stage]:
        """Every stage this strategy may run, each declared once."""

    def stage_table(self) -> dict[str, Stage]:
        table: dict[str, Stage] = {}
        for st in self.declare_stages():
            if not isinstance(st, Stage):
                raise StageError(f"{type(self).__name__}.declare_stages gave {st!r}, not a Stage")
            if st.name in table:
                raise StageError(f"{type(self).__name__} declares stage {st.name!r} twice")
            table[st.name] = st
        return table

    def stage(self, name: str) -> Stage:
        table = self.stage_table()
        if name not in table:
            raise StageError(f"{type(self).__name__} has no stage {name!r}; declared: {sorted(table)}")
        return table[name]

    def stages(self, rnd: int) -> Sequence[str]:
        """Stages of round ``rnd`` (1-based); by default every declared stage in declaration order."""
        return tuple(self.stage_table())

    def round_stages(self, rnd: int) -> list[str]:
        """:meth:`stages` checked against the declarations."""
        names, table = list(self.stages(rnd)), self.stage_table()
        bad = [n for n in names if n not in table]
        if bad:
            raise StageError(
                f"{type(self).__name__}.stages({rnd}) names undeclared stages {bad}; declared: {sorted(table)}"
            )
        return names

    def check_clients(self, clients: Mapping[str, Client]) -> None:
        """Every client handles every declared stage (the round loop calls this before round 1)."""
        table = self.stage_table()
        for cid, client in sorted(clients.items()):
            missing = sorted(set(table) - set(client.handled_stages()))
            if missing:
                raise StageError(
                    f"client {cid} ({type(client).__name__}) has no handler for stages {missing} "
                    f"declared by {type(self).__name__}; it handles {sorted(client.handled_stages())}"
                )

    def configure(self, stage: str, rnd: int, clients: Sequence[str]) -> dict[str, Message]:
        """One message per sampled client, each checked against the stage's request schema."""
        st = self.stage(stage)
        out = st.configure(rnd, clients)
        msgs = {c: out for c in clients} if isinstance(out, Message) else dict(out)
        missing = [c for c in clients if c not in msgs]
        if missing:
            raise StageError(f"{type(self).__name__}: stage {stage!r} configured no message for {missing}")
        request = st.request_schema()
        checked: set[int] = set()
        for cid in clients:
            msg = msgs[cid]
            if id(msg) in checked:  # a broadcast: one check
                continue
            checked.add(id(msg))
            if msg.kind != stage or msg.round != rnd:
                raise StageError(
                    f"{type(self).__name__}: stage {stage!r} round {rnd} configured a "
                    f"{msg.kind!r} message of round {msg.round} for {cid}"
                )
            if request is not None:
                validate(msg, request)  # a server-side bug: raises
        return msgs

    def aggregate(self, stage: str, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        """Aggregate accepted replies (sorted by client id); returns metrics to log."""
        return dict(self.stage(stage).aggregate(rnd, replies, failures) or {})

    def reply_schema(self, stage: str) -> Schema:
        """The schema a client's reply to ``stage`` must satisfy (unbound)."""
        return self.stage(stage).reply_schema()

    def request_schema(self, stage: str) -> Schema | None:
        return self.stage(stage).request_schema()

    def check_reply(self, stage: str, request: Message, reply: Message, expected_round: int | None = None) -> None:
        """Validate ``reply`` against the stage's reply schema bound to ``request``; raises InvalidMessageError."""
        if not isinstance(reply, Message):
            raise InvalidMessageError("?", "reply", f"expected a Message, got {type(reply).__name__}")
        st = self.stage(stage)
        request_schema = st.request_schema()
        limits = dict(st.limits(reply.sender)) if st.limits is not None else {}
        bound = bind_request(request, request_schema) if request_schema is not None else None
        validate(
            reply,
            st.reply_schema(),
            expected_kind=stage,
            expected_round=request.round if expected_round is None else expected_round,
            request=request,
            bound=bound,
            limits=limits,
        )

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


F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__fednsl_stages__"


def handles(*stages: str) -> Callable[[F], F]:
    """Register the decorated client method as the handler of ``stages`` (Flower's ``@app.train()`` idea)."""
    if not stages or not all(isinstance(s, str) and s for s in stages):
        raise StageError(f"@handles needs stage names, got {stages!r}")

    def mark(fn: F) -> F:
        setattr(fn, _MARK, tuple(getattr(fn, _MARK, ())) + stages)
        return fn

    return mark


class Client(ABC):
    """Client side of a method: private data stays here; only declared fields leave.

    Handlers are registered with :func:`handles`; a subclass that overrides a handler method keeps the
    registration (the table maps stage → attribute name, looked up on the instance).
    """

    cid: str = "client"
    _handlers: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            own: dict[str, str] = {}
            for attr, value in vars(klass).items():
                for stage in getattr(value, _MARK, ()):
                    if stage in own and own[stage] != attr:
                        raise StageError(
                            f"{klass.__name__} registers two handlers for stage {stage!r}: {own[stage]} and {attr}"
                        )
                    own[stage] = attr
            table.update(own)
        cls._handlers = table

    def handled_stages(self) -> tuple[str, ...]:
        """The stages this client has handlers for."""
        return tuple(self._handlers)

    def handle(self, message: Message) -> Message:
        name = self._handlers.get(message.kind)
        if name is None:
            raise StageError(
                f"{type(self).__name__} has no handler for stage {message.kind!r}; it handles {sorted(self._handlers)}"
            )
        return getattr(self, name)(message)

    def state_dict(self) -> dict[str, Any]:
        """Client state that survives rounds (e.g. personalised layers), for checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


__all__ = ["SERVER", "Client", "Metrics", "Stage", "StageError", "Strategy", "handles"]
