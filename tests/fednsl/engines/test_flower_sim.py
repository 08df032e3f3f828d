"""``--engine flower-sim``: Flower's simulation runtime (Ray) gives the in-process runner's results, bit for bit.

One Ray start is shared by the runs of this module (the engine leaves a running Ray alone).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from fednsl.config import RunConfig, load_config  # noqa: E402
from fednsl.engines.flower import ray_runtime  # noqa: E402
from fednsl.pipeline import train  # noqa: E402
from tests.fednsl.engines.flower_helpers import strip_times  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.flower]


@pytest.fixture(scope="module")
def ray_up():
    with ray_runtime(1) as ray:
        yield ray


def test_fedavg_simulation_equals_inprocess(tmp_path, ray_up):
    cfg = RunConfig(method="fedavg", rounds=2, seed=7, name="t",
                    data={"num_clients": 3, "samples_per_client": 60, "features": 4}, method_kwargs={"hidden": 8},
                    federation={"min_clients": 2, "client_timeout_s": 60.0})
    seen = []
    ref = train(cfg, tmp_path / "ref", progress=False)
    sim = train(replace(cfg, engine="flower-sim"), tmp_path / "sim", progress=False,
                message_hook=lambda d, cid, m: seen.append((d, cid, m.kind, m.round)))
    assert strip_times(sim.rows) == strip_times(ref.rows)
    assert ("up", "c2", "evaluate", 2) in seen and ("down", "c0", "train", 1) in seen
    assert (tmp_path / "sim" / "summary.json").exists() and (tmp_path / "sim" / "checkpoints").is_dir()


def test_fednsl_simulation_equals_inprocess(tmp_path, ray_up):
    """FedNSL's extra 'train.stats' exchange travels as Flower message type 'train.stats'."""
    cfg = load_config("fednsl_synthetic", ["rounds=2", "data.num_clients=3"])
    ref = train(cfg, tmp_path / "ref", progress=False)
    sim = train(replace(cfg, engine="flower-sim"), tmp_path / "sim", progress=False)
    assert strip_times(sim.rows) == strip_times(ref.rows)
    stages = {r["stage"] for r in sim.rows if r["scope"] == "server"}
    assert {"train.stats", "train", "evaluate"} <= stages
    assert (tmp_path / "sim" / "rules.tsv").exists()
