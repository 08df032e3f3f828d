"""Transition systems of the round protocols, built on the production step functions.

The centralised model drives :func:`fednsl.federation.protocol.step` (the code the in-process
and Flower engines run); the decentralised one drives :func:`fednsl.federation.peer.peer_step`.
Payloads are abstracted to (round/step tag, sender). Channels: server→client FIFO queues,
client→server an unordered bag (any delivery order). Nondeterminism: message interleavings,
up to ``crashes`` crash-stops at any moment, and (with ``timeouts``) a timer that may fire at
any moment. Broken variants (``tags=False``: the server ignores round tags; ``timeouts=False``
with crashes) exist to show that the checker finds their counterexamples.

Properties (spec kifl_csp.md B6): P1 deadlock freedom, P2 termination (no cycles), P3 round
integrity, P4 each update used exactly once without faults / at most once with them, P5 no
message left in a channel at the end (except to crashed nodes), P6 quorum before aggregation,
P8 only sampled clients counted, P9 channel capacity, P10 no mixing of steps (peer mode),
P11 each client callback at most once per (node, round, role).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from fednsl.federation import peer as PP
from fednsl.federation import protocol as P

ALIVE, CRASHED, DONE = 0, 1, 2


class Cli(NamedTuple):
    """Everything about one client; the server's view of it lives here too (for symmetry)."""

    status: int  # ALIVE / CRASHED / DONE
    down: tuple  # FIFO server→client: ("T", round) or ("S",)
    up: tuple  # bag client→server: sorted round tags of replies in flight
    ex: str  # in the current exchange: n(ot sampled) p(ending) a(ccepted) f(ailed)
    acc_tag: int  # tag of the accepted reply (for P3)
    calls: tuple  # callback runs per round (P11)
    used: tuple  # times this client's update was aggregated, per round (P4)


class CState(NamedTuple):
    rnd: int  # current round (1-based)
    phase: str  # idle | wait | done
    crashes_left: int
    timer_fired: bool
    clients: tuple  # of Cli
    bad: tuple = ()  # violations found on the transition into this state


@dataclass(frozen=True)
class Centralised:
    """Star topology: one server, ``nodes - 1`` clients, ``rounds`` rounds, quorum ``quorum``."""

    nodes: int = 3
    rounds: int = 2
    crashes: int = 0
    timeouts: bool = True
    tags: bool = True
    quorum: int = 1
    por: bool = True  # partial-order reduction (ample sets), see successors()

    @property
    def n_clients(self) -> int:
        return self.nodes - 1

    @property
    def capacity(self) -> int:
        return self.rounds + 1  # a slow client may hold every round's request plus STOP

    def initial(self) -> CState:
        c = Cli(ALIVE, (), (), "n", -1, (0,) * self.rounds, (0,) * self.rounds)
        return CState(1, "idle", self.crashes, False, (c,) * self.n_clients)

    def canonical(self, s: CState):
        return s._replace(clients=tuple(sorted(s.clients)))

    # -- the server's protocol state, rebuilt from the per-client view -----------------------
    @staticmethod
    def _name(i: int) -> str:
        return f"c{i}"

    def _exchange(self, s: CState) -> P.Exchange:
        sampled = tuple(self._name(i) for i, c in enumerate(s.clients) if c.ex != "n")
        acc = tuple(self._name(i) for i, c in enumerate(s.clients) if c.ex == "a")
        fail = tuple(self._name(i) for i, c in enumerate(s.clients) if c.ex == "f")
        return P.Exchange(s.rnd, "train", sampled, min(self.quorum, len(sampled)) or 1, acc, fail, "waiting")

    def _apply(self, s: CState, actions, tag_of: dict[str, int]) -> CState:
        clients = list(s.clients)
        bad = list(s.bad)
        phase, rnd = s.phase, s.rnd
        for act in actions:
            if isinstance(act, P.Accept):
                i = int(act.client[1:])
                clients[i] = clients[i]._replace(ex="a", acc_tag=tag_of.get(act.client, rnd))
            elif isinstance(act, P.Drop):
                i = int(act.client[1:])
                clients[i] = clients[i]._replace(ex="f")
            elif isinstance(act, (P.Aggregate, P.Abort)):
                if isinstance(act, P.Aggregate):
                    if len(act.clients) < min(self.quorum, self.n_clients):
                        bad.append(f"P6 quorum: round {rnd} aggregated {len(act.clients)} < {self.quorum} updates")
                    for name in act.clients:
                        i = int(name[1:])
                        c = clients[i]
                        if c.ex != "a":
                            bad.append(f"P8 sampled only: round {rnd} aggregated {name} which it did not accept")
                        if c.acc_tag != rnd:
                            bad.append(
                                f"P3 round integrity: round {rnd} aggregated an update of {name} "
                                f"tagged round {c.acc_tag}"
                            )
                        tag = c.acc_tag - 1
                        if 0 <= tag < self.rounds:
                            used = list(c.used)
                            used[tag] += 1
                            if used[tag] > 1:
                                bad.append(f"P4 used once: {name}'s round-{c.acc_tag} update aggregated twice")
                            clients[i] = c._replace(used=tuple(used))
                clients = [c._replace(ex="n", acc_tag=-1) for c in clients]
                if rnd == self.rounds:
                    phase = "done"
                    clients = [c._replace(down=c.down + (("S",),)) for c in clients]
                else:
                    phase, rnd = "idle", rnd + 1
        for i, c in enumerate(clients):
            if len(c.down) > self.capacity:
                bad.append(f"P9 capacity: channel to {self._name(i)} holds {len(c.down)} > {self.capacity}")
        return s._replace(rnd=rnd, phase=phase, clients=tuple(clients), bad=tuple(bad))

    # -- transitions --------------------------------------------------------------------------
    def successors(self, s: CState) -> list[tuple[str, CState]]:
        """All transitions, or with ``por`` an ample set: a client's local step (train or stop)
        touches only its own channels and commutes with every transition except its own crash,
        so when one is enabled it is explored alone, together with that client's crash.
        ``tests/fednsl/verify`` checks the reduced search gives the full search's verdicts."""
        if s.bad:
            return []
        if self.por:
            for i, c in enumerate(s.clients):
                if c.status == ALIVE and c.down:
                    return [t for t in self._all(s) if t[0].startswith(f"{self._name(i)} ")]
        return self._all(s)

    def _all(self, s: CState) -> list[tuple[str, CState]]:
        out: list[tuple[str, CState]] = []
        names = [self._name(i) for i in range(self.n_clients)]
        if s.phase == "idle":
            ex, actions = P.start(s.rnd, "train", tuple(names), min(self.quorum, self.n_clients))
            clients = tuple(c._replace(ex="p", down=c.down + (("T", s.rnd),)) for c in s.clients)
            ns = s._replace(phase="wait", clients=clients)
            out.append(
                (
                    f"server broadcasts round {s.rnd}",
                    self._apply(ns, [a for a in actions if not isinstance(a, P.Broadcast)], {}),
                )
            )
        for i, c in enumerate(s.clients):
            name = names[i]
            for tag in sorted(set(c.up)):  # the server takes any reply in flight (bag)
                up = list(c.up)
                up.remove(tag)
                ns = s._replace(clients=_set(s.clients, i, c._replace(up=tuple(up))))
                if s.phase != "wait":
                    out.append((f"server discards late reply of {name} (round {tag})", ns))
                    continue
                seen = tag if self.tags else s.rnd
                _, actions = P.step(self._exchange(ns), P.Reply(name, seen, "train"))
                out.append((f"server receives {name}'s reply tagged {tag}", self._apply(ns, actions, {name: tag})))
            if c.status == ALIVE and c.down:
                head, rest = c.down[0], c.down[1:]
                if head[0] == "T":
                    r = head[1]
                    calls = list(c.calls)
                    calls[r - 1] += 1
                    nc = c._replace(down=rest, up=tuple(sorted(c.up + (r,))), calls=tuple(calls))
                    ns = s._replace(clients=_set(s.clients, i, nc))
                    if calls[r - 1] > 1:
                        ns = ns._replace(bad=(f"P11 callback once: {name} trained round {r} twice",))
                    out.append((f"{name} trains round {r} and replies", ns))
                else:
                    out.append(
                        (f"{name} stops", s._replace(clients=_set(s.clients, i, c._replace(down=rest, status=DONE))))
                    )
            if c.status == ALIVE and s.crashes_left > 0:
                out.append(
                    (
                        f"{name} crashes",
                        s._replace(
                            crashes_left=s.crashes_left - 1, clients=_set(s.clients, i, c._replace(status=CRASHED))
                        ),
                    )
                )
        if s.phase == "wait" and self.timeouts:
            _, actions = P.step(self._exchange(s), P.Timeout(s.rnd, "train"))
            out.append((f"timer of round {s.rnd} fires", self._apply(s._replace(timer_fired=True), actions, {})))
        return out

    def violations(self, s: CState) -> list[str]:
        return list(s.bad)

    def terminal_ok(self, s: CState) -> str | None:
        if s.bad:
            return None
        if s.phase != "done":
            waiting = [self._name(i) for i, c in enumerate(s.clients) if c.ex == "p"]
            return (
                f"server blocked in round {s.rnd} waiting for {waiting} (crashed: "
                f"{[self._name(i) for i, c in enumerate(s.clients) if c.status == CRASHED]})"
            )
        for i, c in enumerate(s.clients):
            if c.status != CRASHED and (c.down or c.up):
                return f"P5 no lost messages: {self._name(i)} has messages left in a channel"
            if c.status == ALIVE:
                return f"{self._name(i)} never terminated"
        faultless = self.crashes == 0 and not s.timer_fired
        for i, c in enumerate(s.clients):
            if faultless and any(u != 1 for u in c.used):
                return f"P4 used once: without faults {self._name(i)}'s updates were used {c.used} times"
        return None


def _set(t: tuple, i: int, v) -> tuple:
    return t[:i] + (v,) + t[i + 1 :]


# -- decentralised ----------------------------------------------------------------------------
class DState(NamedTuple):
    nodes: tuple  # of (PeerState-as-tuple, calls per step)
    bag: tuple  # sorted (dst, kind, step, src) messages in flight
    aggregated: tuple  # per node: tuple of steps aggregated, in order
    bad: tuple = ()


@dataclass(frozen=True)
class Decentralised:
    """Clique of ``nodes`` peers running ``rounds`` steps; ``tags=False`` is PTB-FLA's 2023 code
    (messages carry no step: a request of the next step is taken as a reply of this one)."""

    nodes: int = 3
    rounds: int = 2
    tags: bool = True

    def _names(self) -> list[str]:
        return [f"n{i}" for i in range(self.nodes)]

    def initial(self) -> DState:
        names = self._names()
        states, bag = [], []
        for i, me in enumerate(names):
            st, acts = PP.peer_start(PP.PeerState(me, tuple(n for n in names if n != me), self.rounds))
            states.append((st, (0,) * self.rounds))
            bag += [(a.dst, type(a.msg).__name__, a.msg.step, me) for a in acts if isinstance(a, PP.Send)]
        return DState(tuple(states), tuple(sorted(bag)), ((),) * self.nodes)

    def canonical(self, s: DState):
        return s  # peers are not interchangeable once messages name them; the model stays small

    def successors(self, s: DState) -> list[tuple[str, DState]]:
        if s.bad:
            return []
        out = []
        names = self._names()
        for k, m in enumerate(s.bag):
            if k > 0 and s.bag[k - 1] == m:
                continue
            dst, kind, step, src = m
            i = names.index(dst)
            st, calls = s.nodes[i]
            bag = list(s.bag)
            del bag[k]
            msg = PP.Req(step, src) if kind == "Req" else PP.Rep(step, src)
            if not self.tags and 0 < st.step <= self.rounds:
                # PTB-FLA 2023: messages carry no step, so whatever arrives counts for the current one
                msg = type(msg)(st.step, src)
            nst, acts = PP.peer_step(st, msg)
            calls = list(calls)
            aggregated = list(s.aggregated)
            bad = []
            for a in acts:
                if isinstance(a, PP.Serve):
                    if kind == "Req" and a.requester == src and step != a.step:
                        bad.append(f"P10 rounds mix: {dst} served {src}'s step-{step} request as step {a.step}")
                    calls[a.step - 1] += 1
                    if calls[a.step - 1] > self.nodes - 1:
                        bad.append(f"P11 callback once: {dst} served step {a.step} more than once per peer")
                    bag.append((a.requester, "Rep", a.step, dst))
                elif isinstance(a, PP.Send):
                    bag.append((a.dst, type(a.msg).__name__, a.msg.step, dst))
                elif isinstance(a, PP.PeerAggregate):
                    aggregated[i] = aggregated[i] + (a.step,)
                    if kind == "Rep" and step != a.step:
                        bad.append(f"P10 rounds mix: {dst} aggregated step {a.step} with {src}'s step-{step} reply")
                elif isinstance(a, PP.PeerDiscard) and self.tags:
                    bad.append(f"P5 no lost messages: {dst} discarded {a.msg} ({a.reason})")
            ns = DState(_set(s.nodes, i, (nst, tuple(calls))), tuple(sorted(bag)), tuple(aggregated), tuple(bad))
            out.append((f"{dst} receives {kind}({step}) from {src}", ns))
        return out

    def violations(self, s: DState) -> list[str]:
        return list(s.bad)

    def terminal_ok(self, s: DState) -> str | None:
        if s.bad:
            return None
        for (st, _), agg in zip(s.nodes, s.aggregated):
            if not st.done:
                return f"{st.node} blocked at step {st.step} (served {sorted(st.served)}, replies {sorted(st.replied)})"
            if agg != tuple(range(1, self.rounds + 1)):
                return f"P10 rounds mix: {st.node} aggregated steps {agg}"
        if s.bag:
            return f"P5 no lost messages: {len(s.bag)} messages left in channels: {s.bag[:3]}"
        return None
