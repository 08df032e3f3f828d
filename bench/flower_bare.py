"""A bare Flower app (Message API) exchanging the messages of ``bench.flower_overhead``'s FedAvg run.

The reference for the deployment overhead: the ServerApp sends every SuperNode one ``train`` message per round
holding the same arrays as fednsl's FedAvg message (two T×J float32 matrices and biases), the ClientApp
(``@app.train()``) adds a little noise and replies the arrays with a ``num-examples`` metric, the server
averages them. No fednsl code runs in its processes: what is left is Flower's own cost per message (a fresh
ClientApp process per message in Flower 1.41, SuperLink/SuperNode polling), which fednsl's deployment pays too.

Run config keys: ``rounds``, ``num-nodes``, ``T``, ``J``, ``out`` (a JSON file receiving the round times).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

client_app = ClientApp()
server_app = ServerApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One "local step": the received arrays plus seeded noise, and the example count."""
    rng = np.random.default_rng(int(context.node_id) % (2 ** 32))
    arrays = msg.content.array_records["arrays"]
    out = ArrayRecord({k: Array(v.numpy() + rng.normal(0, 1e-3, v.numpy().shape).astype(np.float32))
                       for k, v in arrays.items()})
    return Message(RecordDict({"arrays": out, "metrics": MetricRecord({"num-examples": 8})}), reply_to=msg)


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    rounds, nodes, T, J = int(rc["rounds"]), int(rc["num-nodes"]), int(rc["T"]), int(rc["J"])
    rng = np.random.default_rng(0)
    weights = {"w1": rng.normal(size=(T, J)).astype(np.float32), "b1": np.zeros(T, np.float32),
               "w2": rng.normal(size=(J, T)).astype(np.float32), "b2": np.zeros(J, np.float32)}
    t0 = time.perf_counter()
    while len(list(grid.get_node_ids())) < nodes:
        if time.perf_counter() - t0 > 300:
            raise RuntimeError(f"only {len(list(grid.get_node_ids()))} of {nodes} SuperNodes connected")
        time.sleep(0.1)
    startup = time.perf_counter() - t0
    times = []
    for rnd in range(1, rounds + 1):
        start = time.perf_counter()
        content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in weights.items()})})
        msgs = [Message(content, dst_node_id=n, message_type="train", group_id=str(rnd))
                for n in sorted(grid.get_node_ids())]
        replies = [r for r in grid.send_and_receive(msgs) if not r.has_error()]
        if len(replies) != nodes:
            raise RuntimeError(f"round {rnd}: {len(replies)} of {nodes} replies")
        weights = {k: np.mean([r.content.array_records["arrays"][k].numpy() for r in replies], axis=0)
                   for k in weights}
        times.append(time.perf_counter() - start)
    Path(str(rc["out"])).write_text(json.dumps({"startup_s": startup, "round_times_s": times}))
