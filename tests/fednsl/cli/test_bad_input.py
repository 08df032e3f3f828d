"""`fednsl train` on bad input and in bad conditions (issue 35): one `Error:` line naming the `--set`, the file or
the option, the right exit status, no traceback, no run folder left by a refused config, and nothing lost or
written twice (a second run into a busy folder, a full disk)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fednsl.cli.main import cli
from fednsl.config import SEED_MAX, load_config
from fednsl.federation.tracking import LOCK_FILE, MetricsLog, run_lock

REPO = Path(__file__).resolve().parents[3]
TINY = [
    "--set",
    "data.num_clients=3",
    "--set",
    "data.samples_per_client=30",
    "--set",
    "data.features=4",
    "--set",
    "method_kwargs.hidden=4",
]


def invoke(*args: object) -> Result:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res


def error_line(res: Result) -> str:
    """The one `Error:` line of a refused command (and nothing else on its output)."""
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    return lines[0]


def refused(*args: object, code: int = 2) -> str:
    res = invoke(*args)
    assert res.exit_code == code, res.output
    return error_line(res)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder, so that the default RUN_DIR (runs/...) lands there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- 6: --set values that are not YAML, anchors and aliases ----------------------------------------------------
@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("rounds=[1", "--set 'rounds=[1': the value is not valid YAML (line 1, column 3: expected ',' or ']'"),
        ("name=*", "--set 'name=*': the value is not valid YAML"),
        (
            "method_kwargs.hidden=&x [*x]",
            "--set 'method_kwargs.hidden=&x [*x]': YAML anchors and aliases are not allowed (found &x)",
        ),
        ("paper.x=[*a]", "YAML anchors and aliases are not allowed (found *a)"),
    ],
)
def test_set_values_that_are_not_plain_yaml(in_tmp: Path, override: str, words: str) -> None:
    line = refused("train", "fedavg_blobs", "--set", override, "-q")
    assert words in line and "quote it" in line
    assert not (in_tmp / "runs").exists()


def test_quoted_values_pass() -> None:
    assert load_config("fedavg_blobs", ['name="x*"']).name == "x*"
    assert load_config("fedavg_blobs", ["paper.note='&x [*x]'"]).paper["note"] == "&x [*x]"


def test_alias_bomb_in_a_config_file_is_refused_at_once(in_tmp: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"{c}: &{c} [{', '.join(['*' + p] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    cfg = in_tmp / "bomb.yaml"
    cfg.write_text("method: fedavg\nrounds: 1\npaper:\n" + "".join(f"  {ln}\n" for ln in levels))
    t0 = time.perf_counter()
    line = refused("train", cfg, "-q")
    assert time.perf_counter() - t0 < 10
    assert line == f"Error: {cfg}: invalid YAML: line 4, column 6: YAML anchors and aliases are not allowed (found &a)"
    assert not (in_tmp / "runs").exists()


def test_recursive_alias_in_a_config_file(in_tmp: Path) -> None:
    cfg = in_tmp / "loop.yaml"
    cfg.write_text("method: fedavg\nmethod_kwargs:\n  hidden: &x [*x]\n")
    assert "YAML anchors and aliases are not allowed (found &x)" in refused("train", cfg, "-q")


# -- 7: sizes are bounded when the options are read ------------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "words"),
    [
        (
            "data.samples_per_client=1000000000000",
            "data.samples_per_client must be from 1 to 1,000,000, got 1,000,000,000,000",
        ),
        ("data.num_clients=0", "data.num_clients must be from 1 to 10,000, got 0"),
        ("data.features=100000000", "data.features must be from 1 to 100,000"),
        (
            "data.samples_per_client=1000000 data.features=100",
            "data.num_clients × data.samples_per_client × data.features = 1,000,000,000 values is too large",
        ),
        ("data.num_clients=10000 data.samples_per_client=2000", "= 200,000,000 values is too large"),
    ],
)
def test_sizes_are_bounded(in_tmp: Path, override: str, words: str) -> None:
    sets = [a for o in override.split() for a in ("--set", o)]
    assert words in refused("train", "fedavg_blobs", *sets, "-q")
    assert not (in_tmp / "runs").exists()


# -- 10: the seed's range --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "shown"), [("-1", "-1"), ("2**70", "'2**70' (str)"), (str(2**70), str(2**70)), ("1.5", "1.5 (float)")]
)
def test_seed_out_of_range_names_seed_and_range(in_tmp: Path, value: str, shown: str) -> None:
    line = refused("train", "fedavg_blobs", "--set", f"seed={value}", "-q")
    assert f"seed must be an integer from 0 to {SEED_MAX}, got {shown}" in line and "--set" in line


def test_largest_seed_is_accepted() -> None:
    assert load_config("fedavg_blobs", [f"seed={SEED_MAX}"]).seed == SEED_MAX


# -- 12: the run stays under runs/ -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../X", "a/b", "/tmp/abs", "..", "a\\b", ""])
def test_name_must_be_a_plain_folder_name(in_tmp: Path, name: str) -> None:
    line = refused("train", "fedavg_blobs", "--set", f"name={name}", "-q")
    assert "name must be a plain folder name" in line
    assert not [p for p in in_tmp.parent.iterdir() if p.name.startswith("X-seed")]
    assert not (in_tmp / "runs").exists()


# -- first hour: who is blamed, and no folder left behind ------------------------------------------------------
def test_a_bad_set_names_the_set_and_a_bad_file_names_the_file(in_tmp: Path) -> None:
    line = refused("train", "fedavg_blobs", "--set", "rounds=3", "--set", "rounds=abc", "-q")
    assert line == "Error: --set rounds=abc: rounds must be an integer, got 'abc' (str)"
    cfg = in_tmp / "bad.yaml"
    cfg.write_text("method: fedavg\nrounds: abc\n")
    line = refused("train", cfg, "--set", "seed=1", "-q")
    assert line == f"Error: {cfg}: rounds must be an integer, got 'abc' (str)"
    assert refused("train", cfg, "--set", "rounds=2", "--set", "seed=-3", "-q").startswith("Error: --set seed=-3: ")


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("method_kwargs.bogus=1", "method_kwargs (fedavg): unknown option(s) ['bogus']"),
        ("engine=nope", "unknown engine 'nope'"),
        ("data.name=other", "fedavg: unknown data.name 'other'"),
    ],
)
def test_a_refused_config_leaves_no_run_folder(in_tmp: Path, override: str, words: str) -> None:
    assert words in refused("train", "fedavg_blobs", "--set", override, "-q")
    assert not (in_tmp / "runs").exists()


def test_a_missing_data_path_is_named_once_and_leaves_no_folder(in_tmp: Path) -> None:
    missing = in_tmp / "no-such-kg"
    line = refused("train", "fednsl_kg_synthetic", "--set", f"data.source={missing}", "-q")
    assert line.count(str(missing)) == 1 and "no such file or folder" in line
    assert not (in_tmp / "runs").exists()


def test_resume_never_picks_a_folder_without_a_checkpoint(in_tmp: Path) -> None:
    res = invoke("train", "fedavg_blobs", *TINY, "--set", "rounds=1", "-q")
    assert res.exit_code == 0, res.output
    (done,) = (in_tmp / "runs").iterdir()
    later = in_tmp / "runs" / f"{done.name[:-6]}999999"  # newer, with only what a refused run used to leave
    later.mkdir()
    (later / "config.yaml").write_text((done / "config.yaml").read_text())
    (later / "run.log").write_text("")
    res = invoke("train", "fedavg_blobs", *TINY, "--set", "rounds=2", "--resume", "-q")
    assert res.exit_code == 0, res.output
    assert f"wrote runs/{done.name}/" in res.output
    assert [r["round"] for r in MetricsLog(done).rows() if r["stage"] == "round"] == [1, 2]
    assert sorted(p.name for p in later.iterdir()) == ["config.yaml", "run.log"]


def test_resume_without_any_checkpointed_run_says_so(in_tmp: Path) -> None:
    (in_tmp / "runs" / "fedavg_blobs-seed0-20200101-000000").mkdir(parents=True)
    line = refused("train", "fedavg_blobs", "--resume", "-q")
    assert "--resume: no earlier run of fedavg_blobs (seed 0) with a checkpoint under runs/" in line


# -- 2: one run per folder -------------------------------------------------------------------------------------
def test_a_busy_run_folder_is_refused_and_left_alone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run):
        line = refused("train", "fedavg_blobs", *TINY, "--set", "rounds=1", "--out", run, "-q")
    assert (
        line == f"Error: {run} is in use by another fednsl run (pid {os.getpid()}); wait for it to end or "
        "choose another --out"
    )
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]
    res = invoke("train", "fedavg_blobs", *TINY, "--set", "rounds=1", "--out", run, "-q")  # free again
    assert res.exit_code == 0, res.output


def _fednsl(*args: object, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fednsl.cli.main", *map(str, args)],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


@pytest.mark.slow
def test_two_runs_started_together_into_one_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = [_fednsl("train", "fedavg_blobs", *TINY, "--set", "rounds=3", "--out", run, "-q") for _ in range(2)]
    outs = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert sorted(rc for rc, _, _ in outs) == [0, 2], outs
    _, _, err = next(o for o in outs if o[0] == 2)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"Error: {run} ")
    rows = [(r["round"], r["scope"], r["stage"]) for r in MetricsLog(run).rows()]
    assert len(rows) == len(set(rows)) and max(r for r, _, _ in rows) == 3


# -- 8: a full disk --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_it_resumes(tmp_path: Path) -> None:
    run, full = tmp_path / "run", tmp_path / "full"
    args = ["train", "fedavg_blobs", *TINY, "--set", "rounds=6", "-q"]

    def small_files() -> None:  # like `ulimit -f 4`: the metrics outgrow it in round 4 (a checkpoint is 3 KiB)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 1024, 4 * 1024))

    proc = _fednsl(*args, "--out", run, preexec_fn=small_files)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"Error: run stopped: could not write {run}/metrics.")
    assert "(File too large); make room, then continue it: the same command with --resume --out" in lines[0]
    assert not list((run / "checkpoints").glob("*.tmp"))

    proc = _fednsl(*args, "--out", run, "--resume")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    proc = _fednsl(*args, "--out", full)
    assert proc.wait(timeout=300) == 0

    def plain(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if "time_s" not in k and "bytes" not in k} for r in rows]

    assert plain(MetricsLog(run).rows()) == plain(MetricsLog(full).rows())
    assert json.loads((run / "summary.json").read_text())["final"]["evaluate"]["accuracy"] == pytest.approx(
        json.loads((full / "summary.json").read_text())["final"]["evaluate"]["accuracy"]
    )
