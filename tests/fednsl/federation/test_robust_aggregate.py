"""Robust aggregation (``federation.aggregation`` / ``trim_fraction`` / ``clip_norm``) against finite poisoned
weights (fault kind ``huge_weights``, 10^30 × the honest weights).

The median and the trimmed mean are checked against independent references (``numpy.median``,
``scipy.stats.trim_mean``); norm clipping against its definition; and whole FedAvg runs with one client sending
huge weights against a run without that client: the plain mean is poisoned (the documented limit), each option
keeps the model finite and near the run without the poisoner.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fednsl.common.fedavg import FedAvgConfig, FedAvgStrategy
from fednsl.config import FederationConfig, RunConfig, load_config
from fednsl.federation.aggregate import (
    AggregationRule,
    aggregate,
    clip_updates,
    coordinate_median,
    trimmed_mean,
    use_aggregation,
    weighted_average,
)
from fednsl.federation.faults import HUGE_WEIGHT, corrupt, parse_faults
from fednsl.federation.records import Message
from fednsl.federation.resume import _config_diff
from fednsl.methods.fedavg import NumericFedAvgConfig
from fednsl.pipeline import build_federation, train
from fednsl.registry import build_kwargs
from tests.fednsl.federation.tiny_configs import tiny

SHAPES = {"w": (3, 4), "b": (4,), "s": ()}


pytestmark = pytest.mark.usefixtures("one_torch_thread", "isolated_cache")


def clients(n: int, seed: int, dtype=np.float32) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()} for _ in range(n)]


def stacked(arrays, name):
    return np.stack([np.asarray(a[name], dtype=np.float64) for a in arrays])


# -- the rules against independent references ----------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("seed", [0, 1])
def test_median_is_numpys(n: int, seed: int) -> None:
    arrays = clients(n, seed)
    got = coordinate_median(arrays)
    for k in SHAPES:
        assert got[k].dtype == np.float32 and got[k].shape == SHAPES[k]
        np.testing.assert_allclose(got[k], np.median(stacked(arrays, k), axis=0).astype(np.float32), rtol=0)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 10])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.2, 0.25, 0.34, 0.49])
def test_trimmed_mean_is_scipys(n: int, fraction: float) -> None:
    arrays = clients(n, seed=n, dtype=np.float64)
    got = trimmed_mean(arrays, fraction)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], stats.trim_mean(stacked(arrays, k), fraction, axis=0), rtol=1e-12)


def test_clipping_bounds_each_update_and_keeps_its_direction() -> None:
    ref = clients(1, seed=5, dtype=np.float64)[0]
    short, long = clients(2, seed=6, dtype=np.float64)
    long = {k: ref[k] + 1e30 * v for k, v in long.items()}
    got = clip_updates([short, long, {**long, "ids": np.arange(3)}], ref, clip_norm=2.0)

    def update(a):
        return np.concatenate([np.ravel(a[k] - ref[k]) for k in SHAPES])

    norm_short = np.linalg.norm(update(short))
    if norm_short <= 2.0:  # an update within the bound is left as sent
        assert all(np.array_equal(got[0][k], short[k]) for k in SHAPES)
    else:
        assert np.linalg.norm(update(got[0])) == pytest.approx(2.0)
    assert np.linalg.norm(update(got[1])) == pytest.approx(2.0)
    cos = update(got[1]) @ update(long) / (np.linalg.norm(update(got[1])) * np.linalg.norm(update(long)))
    assert cos == pytest.approx(1.0)
    assert np.array_equal(got[2]["ids"], np.arange(3))  # only floating-point arrays are clipped


# -- one poisoned client among honest ones -------------------------------------------------------------------
def poisoned(n_honest: int, seed: int) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    honest = clients(n_honest, seed)
    bad = corrupt(Message("train", 1, "bad", arrays=clients(1, seed + 100)[0]), "huge_weights").arrays
    assert all(np.isfinite(v).all() for v in bad.values()) and max(np.abs(v).max() for v in bad.values()) > 1e29
    return honest, [*honest, bad]


def test_the_plain_mean_is_poisoned() -> None:
    """The documented limit: with the default rule one client moves the model by ~10^30 / n."""
    _, everyone = poisoned(4, seed=0)
    assert max(np.abs(v).max() for v in weighted_average(everyone, [1] * 5).values()) > 1e28


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_median_and_trimmed_mean_stay_among_the_honest(seed: int) -> None:
    honest, everyone = poisoned(4, seed)
    n = [10, 20, 30, 40, 10**6]  # a claimed example count does not weigh either
    for rule in (AggregationRule("median"), AggregationRule("trimmed_mean", trim_fraction=0.2)):
        got = aggregate(everyone, n, rule)
        for k in SHAPES:
            lo, hi = stacked(honest, k).min(axis=0), stacked(honest, k).max(axis=0)
            assert np.all(got[k] >= lo.astype(np.float32)) and np.all(got[k] <= hi.astype(np.float32))


@pytest.mark.parametrize("kind", ["mean", "median", "trimmed_mean"])
def test_clip_norm_bounds_the_poisoners_pull(kind: str) -> None:
    honest, everyone = poisoned(4, seed=3)
    ref = {k: np.zeros(s, np.float32) for k, s in SHAPES.items()}
    clip = 1.0
    rule = AggregationRule(kind, trim_fraction=0.2, clip_norm=clip)
    got = aggregate(everyone, [1] * 5, rule, reference=ref)
    clean = aggregate(honest, [1] * 4, rule, reference=ref)

    def dist(a, b, order):
        return np.linalg.norm(np.concatenate([np.ravel(a[k].astype(np.float64) - b[k]) for k in SHAPES]), order)

    # every clipped update is at most `clip` long, so each of its coordinates is at most `clip` too, and so is
    # every coordinate of their median / trimmed mean / mean; the mean's L2 norm is at most `clip` as well
    assert dist(got, ref, np.inf) <= clip + 1e-5 and dist(clean, ref, np.inf) <= clip + 1e-5
    assert dist(got, clean, np.inf) <= 2 * clip + 1e-5
    if kind == "mean":
        assert dist(got, ref, 2) <= clip + 1e-5
    with pytest.raises(ValueError, match="global model"):
        aggregate(everyone, [1] * 5, rule)


def test_fedavg_strategy_uses_its_rule() -> None:
    honest, everyone = poisoned(2, seed=4)
    init = {k: np.zeros(s, np.float32) for k, s in SHAPES.items()}
    s = FedAvgStrategy(init, FedAvgConfig())
    s.aggregation = AggregationRule("median")
    replies = {
        f"c{i}": Message("train", 1, f"c{i}", arrays=a, metrics={"num_examples": 5, "train_loss": 0.0})
        for i, a in enumerate(everyone)
    }
    s.aggregate_train(1, replies, {})
    want = coordinate_median(everyone)
    assert all(np.array_equal(s.weights[k], want[k]) for k in SHAPES)


# -- whole runs: one client sends 10^30 × its weights every round ---------------------------------------------
POISONER = ["federation.faults.kind=huge_weights", "federation.faults.clients=[c2]"]


def final_weights(res) -> dict[str, np.ndarray]:
    return res.federation.strategy.state_dict()["weights"]


def without_poisoner(extra: list[str], out: Path) -> dict[str, np.ndarray]:
    fed = build_federation(tiny("fedavg", 2, extra))
    fed.clients = {cid: c for cid, c in fed.clients.items() if cid != "c2"}
    return final_weights(train(tiny("fedavg", 2, extra), out, progress=False, federation=fed))


def distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return float(max(np.max(np.abs(a[k].astype(np.float64) - b[k])) for k in a))


def test_fedavg_run_is_poisoned_by_default(tmp_path: Path) -> None:
    res = train(tiny("fedavg", 2, POISONER), tmp_path / "run", progress=False)
    assert distance(final_weights(res), without_poisoner([], tmp_path / "ref")) > 1e28


@pytest.mark.parametrize(
    "extra",
    [
        ["federation.aggregation=median"],
        ["federation.aggregation=trimmed_mean", "federation.trim_fraction=0.34"],
        ["federation.clip_norm=1.0"],
        ["federation.aggregation=median", "federation.clip_norm=1.0"],
    ],
    ids=["median", "trimmed_mean", "clip_norm", "median+clip_norm"],
)
def test_fedavg_run_with_a_robust_rule_is_not_poisoned(extra: list[str], tmp_path: Path) -> None:
    res = train(tiny("fedavg", 2, [*POISONER, *extra]), tmp_path / "run", progress=False)
    got = final_weights(res)
    assert all(np.isfinite(v).all() for v in got.values())
    # near the same rule's run without the poisoner (weights of this MLP are O(1); poisoned: O(10^29))
    assert distance(got, without_poisoner(extra, tmp_path / "ref")) < 0.5
    server = [r for r in res.rows if r["scope"] == "server" and r["stage"] != "round"]
    assert not [r for r in server if r.get(f"{r['stage']}.aborted")]  # every stage kept its quorum
    assert (tmp_path / "run" / "config.yaml").read_text().count("aggregation") == 1


def test_a_rule_is_refused_for_a_server_that_cannot_take_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not combine weights with FedAvg's shared aggregation"):
        train(tiny("ts-ifca", 1, ["federation.aggregation=median"]), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()

    class Other:
        pass

    use_aggregation(Other(), FederationConfig())  # the default is fine for any server


# -- options ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, message",
    [
        ("federation.aggregation=krum", r"federation.aggregation must be one of \['mean', 'median', 'trimmed_mean'\]"),
        ("federation.trim_fraction=0.5", r"federation.trim_fraction must be a number in \[0, 0.5\)"),
        ("federation.trim_fraction=-0.1", r"federation.trim_fraction must be a number in \[0, 0.5\)"),
        ("federation.trim_fraction=abc", "federation: trim_fraction must be a number"),
        ("federation.clip_norm=0", "federation.clip_norm must be a finite number > 0"),
        ("federation.clip_norm=.inf", "federation.clip_norm must be a finite number > 0"),
        ("federation.clip_norm=abc", "federation: clip_norm must be a number or null"),
    ],
)
def test_bad_options_are_refused_naming_them(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config("fedavg_blobs", [override])


def test_options_load_and_default() -> None:
    cfg = load_config(
        "fedavg_blobs",
        ["federation.aggregation=trimmed_mean", "federation.trim_fraction=0.3", "federation.clip_norm=5"],
    )
    assert (cfg.federation.aggregation, cfg.federation.trim_fraction, cfg.federation.clip_norm) == (
        "trimmed_mean",
        0.3,
        5,
    )
    default = load_config("fedavg_blobs").federation
    assert AggregationRule(default.aggregation, default.trim_fraction, default.clip_norm).plain
    assert parse_faults({"kind": "huge_weights", "clients": ["c0"]})[0].kind == "huge_weights"
    assert HUGE_WEIGHT == 1e30


def test_a_config_saved_before_the_options_existed_still_resumes() -> None:
    now = RunConfig.from_dict({"method": "fedavg"}).to_dict()
    saved = {
        **now,
        "federation": {
            k: v for k, v in now["federation"].items() if k not in ("aggregation", "trim_fraction", "clip_norm")
        },
    }
    assert _config_diff(saved, now) == []
    changed = {**now, "federation": {**now["federation"], "aggregation": "median"}}
    assert _config_diff(saved, changed) == ["federation"]


# -- method_kwargs.hidden is bounded --------------------------------------------------------------------------
@pytest.mark.parametrize("hidden", [0, 65_537, 10**9])
def test_fedavg_hidden_is_bounded(hidden: int) -> None:
    with pytest.raises(ValueError, match="method_kwargs.hidden must be from 1 to 65,536"):
        build_kwargs(FedAvgConfig, {"hidden": hidden}, "method_kwargs (fedavg)")
    with pytest.raises(ValueError, match="method_kwargs.hidden must be from 1 to 65,536"):
        build_kwargs(NumericFedAvgConfig, {"hidden": hidden}, "method_kwargs (fedavg-numeric)")
    with pytest.raises(ValueError, match="method_kwargs.hidden must be from 1 to 65,536"):
        build_federation(load_config("fedavg_blobs", [f"method_kwargs.hidden={hidden}"]))


def test_fedavg_model_size_is_bounded_before_anything_is_built() -> None:
    cfg = load_config(
        "fedavg_blobs", ["method_kwargs.hidden=65536", "data.features=100000", "data.samples_per_client=1"]
    )
    with pytest.raises(ValueError, match=r"models \(the server's and every client's\) .* too large"):
        build_federation(cfg)
