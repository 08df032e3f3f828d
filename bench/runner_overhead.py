"""Per-round overhead of the in-process engine for clients doing no work.

Reference, run side by side: a naive loop that calls each client's ``handle`` and the
strategy's aggregate directly (no threads, validation, protocol, metrics log or checkpoints).
Reported: ms per round for both and the ratio, for 10 and 100 clients.

    python -m bench.runner_overhead [--rounds 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from bench._common import write_result
from fednsl.config import RunConfig
from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Client, Stage, Strategy, handles
from fednsl.federation.runner import Federation, InProcessRunner

PAYLOAD = 1024  # floats per reply: a small weight vector


class NoOpStrategy(Strategy):
    def __init__(self) -> None:
        self.w = np.zeros(PAYLOAD, np.float32)

    def declare_stages(self) -> tuple[Stage, ...]:
        return (Stage("train", self.configure_train, self.aggregate_train, reply=self.train_reply_schema),)

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train", rnd, arrays={"w": self.w})

    def aggregate_train(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]):
        self.w = np.mean([r.arrays["w"] for r in replies.values()], axis=0)
        return {}

    def train_reply_schema(self) -> Schema:
        return Schema(arrays=(ArraySpec("w", "weights", shape=(PAYLOAD,)),), metrics=("num_examples",))

    def state_dict(self):
        return {"w": self.w}


class NoOpClient(Client):
    def __init__(self, cid: str):
        self.cid = cid

    @handles("train")
    def train(self, msg: Message) -> Message:
        return msg.reply(self.cid, arrays={"w": msg.arrays["w"]}, metrics={"num_examples": 1})


def federation(k: int) -> Federation:
    return Federation(NoOpStrategy(), {f"c{i:03d}": NoOpClient(f"c{i:03d}") for i in range(k)})


def naive(k: int, rounds: int) -> float:
    fed = federation(k)
    ids = sorted(fed.clients)
    t0 = time.perf_counter()
    for rnd in range(1, rounds + 1):
        msg = fed.strategy.configure_train(rnd, ids)
        replies = {c: fed.clients[c].handle(msg) for c in ids}
        fed.strategy.aggregate_train(rnd, replies, {})
    return (time.perf_counter() - t0) / rounds


def engine(k: int, rounds: int) -> float:
    cfg = RunConfig(method="noop", rounds=rounds, seed=0, federation={"min_clients": 1})
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        InProcessRunner(federation(k), cfg, Path(tmp), progress=False).run()
        return (time.perf_counter() - t0) / rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="rounds per measurement")
    args = ap.parse_args()
    rows = []
    for k in (10, 100):
        naive(k, 2), engine(k, 2)  # warm-up
        n = min(naive(k, args.rounds) for _ in range(3))
        e = min(engine(k, args.rounds) for _ in range(3))
        rows.append({"clients": k, "naive_ms_per_round": n * 1e3, "engine_ms_per_round": e * 1e3,
                     "ratio": e / n, "engine_ms_per_client": e * 1e3 / k})
        print(f"{k:4d} clients: engine {e*1e3:8.2f} ms/round, naive loop {n*1e3:7.3f} ms/round, "
              f"ratio {e/n:6.1f}x, {e*1e3/k:.3f} ms per client")
    print("results:", write_result("runner_overhead", {"rounds": args.rounds, "payload_floats": PAYLOAD, "rows": rows}))


if __name__ == "__main__":
    main()
