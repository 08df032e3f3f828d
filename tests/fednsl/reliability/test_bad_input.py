"""Reliability cases of bad input: each is one line naming the option or file, exit status 2, no traceback."""

from __future__ import annotations

import gzip
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.config import load_config

REPO = Path(__file__).resolve().parents[3]


def invoke(*args: str):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in res.output and not isinstance(res.exception, (TypeError, AttributeError)), res.output
    return res


def _one_error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("override, expected", [
    ("rounds=abc", "rounds must be an integer, got 'abc'"),
    ("rounds=2.5", "rounds must be an integer, got 2.5"),
    ("federation.fraction=abc", "fraction must be a number, got 'abc'"),
    ("method_kwargs=5", "method_kwargs must be a mapping"),
    ("federation.client_timeout_s=-1", "federation.client_timeout_s must be > 0 (or null: no limit), got -1"),
    ("federation.min_clients=11", "federation.min_clients=11 exceeds data.num_clients=10"),
    ("federation.parallelism=0", "federation.parallelism must be >= 1"),
    ("federation=7", "federation must be a mapping"),
    ("federation.faults.kind=boom", "federation.faults.kind must be one of"),
    ("data.num_clients=abc", "data (fedavg): num_clients must be an integer, got 'abc'"),
    ("method_kwargs.lr=fast", "lr must be a number, got 'fast'"),
])
def test_config_type_errors_exit_2(tmp_path: Path, override: str, expected: str) -> None:
    res = invoke("train", "fedavg_blobs", "--set", override, "--out", tmp_path / "r", "--quiet")
    assert res.exit_code == 2 and expected in _one_error_line(res.output), res.output
    assert not (tmp_path / "r" / "metrics.jsonl").exists()  # rejected before any round ran


def test_min_clients_above_the_built_clients_is_rejected(tmp_path: Path) -> None:
    """numeric sets have 2 clients that the config does not state: checked once the data is built."""
    res = invoke("train", "numeric_fedavg", "--set", "federation.min_clients=3", "--set", "rounds=1",
                 "--out", tmp_path / "r", "--quiet")
    assert res.exit_code == 2 and "min_clients=3 exceeds the 2 clients" in _one_error_line(res.output)
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_configs_still_load() -> None:
    assert load_config("fedavg_blobs", ["federation.client_timeout_s=0.5"]).federation.client_timeout_s == 0.5


def _docred_item() -> dict:
    return {"title": "d", "vertexSet": [[{"name": "A", "pos": [0, 1], "sent_id": 0, "type": "PER"}]],
            "sents": [["A", "b"]], "labels": []}


def test_binary_input_names_the_file(tmp_path: Path) -> None:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "train.json").write_bytes(b"\xff\xfe[{\x00\x01 binary")
    for target in (d, d / "train.json"):
        res = invoke("data", "info", target)
        assert res.exit_code == 2
        assert f"{d / 'train.json'}: not UTF-8 text" in _one_error_line(res.output)


def test_binary_input_in_train_names_the_file(tmp_path: Path) -> None:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "train.json").write_bytes(b"[\xff\xfe binary")
    res = invoke("train", "fednsl_synthetic", "--set", f"data.path={d}", "--out", tmp_path / "r", "--quiet")
    assert res.exit_code == 2 and f"{d / 'train.json'}: not UTF-8 text" in _one_error_line(res.output)


@pytest.mark.parametrize("damage", ["bad-block", "truncated"])
def test_corrupt_gzip_names_the_file(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "gz"
    d.mkdir()
    raw = gzip.compress(json.dumps([_docred_item()] * 40).encode())
    raw = raw[:10] + b"\xff" * 8 + raw[18:] if damage == "bad-block" else raw[: len(raw) // 2]
    (d / "train.json.gz").write_bytes(raw)
    res = invoke("data", "info", d)
    assert res.exit_code == 2
    assert f"{d / 'train.json.gz'}: corrupt or truncated gzip data" in _one_error_line(res.output)


def test_truncated_dwie_archive_is_not_just_aborted(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    docs = []
    for i in range(30):
        p = src / f"DW_{i}.json"
        p.write_text(json.dumps({"id": f"DW_{i}", "content": "x " * 2000, "concepts": [], "mentions": []}))
        docs.append(p)
    tar = tmp_path / "dwie_annos.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for p in docs:
            t.add(p, arcname=f"annos_with_content/{p.name}")
    tar.write_bytes(tar.read_bytes()[: tar.stat().st_size // 2])
    res = invoke("data", "info", tar)
    assert res.exit_code == 2 and "Aborted" not in res.output
    assert f"{tar}: truncated or corrupt archive" in _one_error_line(res.output)


def test_logire_overflow_is_a_rule_error(tmp_path: Path) -> None:
    rel = tmp_path / "rel.json"
    rel.write_text(json.dumps(["a", "b", "c"]))
    rules = tmp_path / "r.json"
    rules.write_text("[[1e400,[95]]]")
    res = invoke("rules", "check", rules, "--relations", rel, "--from", "logire")
    assert res.exit_code == 2 and f"{rules}: rule #0" in _one_error_line(res.output)
    rules.write_text("[[0.7,[1]]]")  # a float id is not silently truncated to 0
    res = invoke("rules", "check", rules, "--relations", rel, "--from", "logire")
    assert res.exit_code == 2 and "must be integers" in res.output


def test_verify_spin_without_spin(monkeypatch) -> None:
    from fednsl.verify import promela

    monkeypatch.setattr(promela, "spin_available", lambda: False)
    res = invoke("verify", "--spin", "--rounds", "1", "--nodes", "2")
    assert res.exit_code == 2 and "--spin: the spin and gcc programs" in _one_error_line(res.output)


@dataclass
class Inner:
    k: int = 1


@dataclass
class Opts:
    n: int = 1
    lr: float = 0.1
    name: str | None = None
    sizes: tuple[int, ...] = (1,)
    extra: dict[str, int] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    flag: bool = False
    anything: object = None


def test_option_dataclasses_are_type_checked() -> None:
    from fednsl.registry import build_kwargs

    ok = build_kwargs(Opts, {"n": 3, "lr": 1, "name": None, "sizes": [2, 3], "extra": {}, "inner": {"k": 2},
                             "flag": True, "anything": "x"}, "opts")
    assert ok.n == 3 and ok.lr == 1
    for key, value, words in [("n", 2.5, "n must be an integer"), ("n", True, "n must be an integer"),
                              ("lr", "x", "lr must be a number"), ("name", 3, "name must be a string or null"),
                              ("sizes", 4, "sizes must be a list"), ("extra", [1], "extra must be a mapping"),
                              ("inner", 5, "inner must be a mapping"), ("flag", "yes", "flag must be true or false")]:
        with pytest.raises(ValueError, match=f"opts: {words}"):
            build_kwargs(Opts, {key: value}, "opts")


def test_binary_rule_and_relation_files_are_named(tmp_path: Path) -> None:
    rel = tmp_path / "rel.json"
    rel.write_text(json.dumps(["a", "b"]))
    binary = tmp_path / "bin.rules"
    binary.write_bytes(b"\xff\xfe\x00binary")
    res = invoke("rules", "check", binary, "--relations", rel)
    assert res.exit_code == 2 and f"{binary}: not UTF-8 text" in _one_error_line(res.output)
    res = invoke("rules", "check", rel, "--relations", binary)
    assert res.exit_code == 2 and f"{binary}: not UTF-8 text" in _one_error_line(res.output)
    torn = tmp_path / "torn.json"
    torn.write_text("[[0,")
    res = invoke("rules", "check", torn, "--relations", rel, "--from", "logire")
    assert res.exit_code == 2 and f"{torn}" in _one_error_line(res.output) and "invalid JSON" in res.output
