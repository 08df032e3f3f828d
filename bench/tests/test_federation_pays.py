"""bench.federation_pays: the per-client summary and the paired differences to local-only (no runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.federation_pays import SETTINGS, SPLITS, markdown, overrides, paired, summarise
from fednsl.config import load_config


def _run(mrr: float, clients: dict[str, float]) -> dict:
    return {"test_mrr": mrr, "clients": {c: {"test_mrr": v} for c, v in clients.items()}, "bytes_per_round": []}


def test_paired_differences_are_per_seed_and_the_data_poor_mean_averages_the_poor_clients() -> None:
    runs = {
        "federated": [_run(0.6, {"c0": 0.7, "c1": 0.6, "c2": 0.5}), _run(0.6, {"c0": 0.7, "c1": 0.7, "c2": 0.5})],
        "local-only": [_run(0.5, {"c0": 0.7, "c1": 0.4, "c2": 0.4}), _run(0.5, {"c0": 0.6, "c1": 0.5, "c2": 0.3})],
        "centralised": [_run(0.65, {"c0": 0.65}), _run(0.66, {"c0": 0.66})],
    }
    s = summarise("kinship_entity_skew", runs)
    assert s["paired"]["federated"]["c1"]["mean"] == pytest.approx(0.2)  # (0.2 + 0.2) / 2
    assert s["paired"]["federated"]["c0"]["mean"] == pytest.approx(0.05)
    assert s["paired"]["federated"]["data-poor"]["mean"] == pytest.approx(0.175)  # mean of c1, c2 per seed
    assert "centralised" not in s["paired"] and s["settings"]["centralised"]["clients"] == {}
    assert paired([1.0], [0.5]) == {"mean": 0.5, "ci95": 0.0, "low": 0.5, "high": 0.5, "n": 1}
    text = markdown(
        "kinship_entity_skew", [0, 1], s, ["cmd"], [{"train": [1, 2, 3], "report": {"train": {"dropped": 4}}}] * 2, runs
    )
    assert "| federated |" in text and "data-poor mean" in text


def test_every_setting_runs_on_the_written_folder_or_its_union() -> None:
    from pathlib import Path

    assert "data.federated_folder=/f" in overrides("federated", Path("/f"), 0, [], "configs/fednsl_kg_kinship.yaml")
    assert overrides("centralised", Path("/f"), 1, [], "configs/fednsl_kg_kinship.yaml")[:3] == [
        "seed=1",
        "data.source=/f",
        "data.num_clients=1",
    ]
    assert set(SETTINGS) >= {"federated", "local-only", "centralised", "federated-paper"}
    assert all(len(v) == 5 for v in SPLITS.values())


def test_pool_only_proposes_no_generator_sample() -> None:
    sets = overrides("pool-only", Path("/f"), 0, [], "configs/fednsl_kg_kinship.yaml")
    pool_top = load_config("configs/fednsl_kg_kinship.yaml").method_kwargs["pool_top"]
    assert f"method_kwargs.max_bodies={pool_top}" in sets


def test_an_ablation_is_reported_as_the_paired_gain_of_the_setting_it_removes_a_mechanism_from() -> None:
    runs = {
        "federated": [_run(0.6, {"c0": 0.7, "c1": 0.6, "c2": 0.5}), _run(0.62, {"c0": 0.7, "c1": 0.7, "c2": 0.5})],
        "pool-only": [_run(0.58, {"c0": 0.7, "c1": 0.5, "c2": 0.5}), _run(0.6, {"c0": 0.6, "c1": 0.7, "c2": 0.5})],
        "centralised": [_run(0.65, {}), _run(0.66, {})],
        "centralised-pool-only": [_run(0.64, {}), _run(0.60, {})],
        "local-only": [_run(0.5, {"c0": 0.7, "c1": 0.4, "c2": 0.5}), _run(0.5, {"c0": 0.6, "c1": 0.5, "c2": 0.5})],
    }
    s = summarise("kinship_entity_skew", runs)  # no client of the union is paired with local-only
    assert "centralised-pool-only" not in s["paired"] and "pool-only" in s["paired"]
    assert s["ablations"]["pool-only"]["against"] == "federated"
    assert s["ablations"]["pool-only"]["clients"]["c1"]["mean"] == pytest.approx(0.05)  # (0.1 + 0) / 2
    assert s["ablations"]["pool-only"]["aggregate"]["mean"] == pytest.approx(0.02)
    assert s["ablations"]["centralised-pool-only"]["aggregate"]["mean"] == pytest.approx(0.035)
    assert s["ablations"]["centralised-pool-only"]["clients"] == {}
    sets = overrides("centralised-pool-only", Path("/f"), 0, [], "configs/fednsl_kg_kinship.yaml")
    assert "data.source=/f" in sets and any(o.startswith("method_kwargs.max_bodies=") for o in sets)
    text = markdown(
        "kinship_entity_skew", [0, 1], s, [], [{"train": [1], "report": {"train": {"dropped": 0}}}] * 2, runs
    )
    assert "| pool-only | federated | +0.020" in text


def test_merge_adds_only_the_stored_settings_not_run_now_and_refuses_other_seeds(tmp_path, monkeypatch) -> None:
    import json

    import bench.federation_pays as fp

    stored = {"federated": [_run(0.6, {"c0": 0.6})], "pool-only": [_run(0.1, {"c0": 0.1})]}
    data = {"split": "kinship_entity", "seeds": [0], "runs": stored, "commands": ["federated: a", "pool-only: b"]}
    (tmp_path / "old.json").write_text(json.dumps(data))
    monkeypatch.setattr(fp, "RESULTS", tmp_path)
    runs, commands = fp.merged("old", "kinship_entity", [0], {"pool-only": [_run(0.5, {"c0": 0.5})]}, ["pool-only: c"])
    assert runs["pool-only"][0]["test_mrr"] == 0.5 and runs["federated"][0]["test_mrr"] == 0.6
    assert commands == ["federated: a", "pool-only: c"]
    with pytest.raises(SystemExit, match="seeds"):
        fp.merged("old", "kinship_entity", [0, 1], {}, [])


def test_a_published_folder_is_used_as_it_is(tmp_path, monkeypatch) -> None:
    import bench.federation_pays as fp
    from kg.kg_partition import partition_kg, write_federated_kg
    from kg.kg_synthetic import planted_kg

    kg, _ = planted_kg(seed=0)
    write_federated_kg(partition_kg(kg, 2, by="relation", seed=0), tmp_path / "pub")
    monkeypatch.setitem(fp.SPLITS, "pub", (fp.KINSHIP, str(tmp_path / "pub"), "folder", None, ()))
    folder, counts = fp.write_split("pub", 5, tmp_path / "unused")
    assert folder == tmp_path / "pub" and not (tmp_path / "unused").exists()
    assert len(counts["train"]) == 2 and sum(counts["train"]) > 0 and counts["report"]["train"]["dropped"] == 0
