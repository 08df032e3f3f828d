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
from typing import Any, Callable

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


# -- 9: data with nothing to train on: one line naming the file and what it lacks, exit 2, no run folder -----------
def _kg_folder(folder: Path, **files: str) -> Path:
    """A small triples folder (the planted-rule KG), with the text of the splits named in ``files`` replaced."""
    from kg.kg_synthetic import planted_kg
    from kg.triples import write_triples

    write_triples(planted_kg(seed=0, num_families=4)[0], folder)
    for split, text in files.items():
        (folder / f"{split}.txt").write_text(text)
    return folder


def _kg_args(source: object, key: str = "data.source") -> list[str]:
    """`fednsl train` of the tiny fednsl-kg config on ``source``."""
    from tests.fednsl.federation.tiny_configs import TINY

    sets = [s for s in TINY["fednsl-kg"]["set"] if not s.startswith("data.")]
    return [
        "fednsl_kg_synthetic",
        "--set",
        f"{key}={source}",
        "--set",
        "rounds=1",
        *(a for s in sets for a in ("--set", s)),
    ]


def _docred(folder: Path, docs: list[dict], relations: bool = False) -> Path:
    folder.mkdir()
    (folder / "train.json").write_text(json.dumps(docs))
    if relations:
        (folder / "meta").mkdir()
        (folder / "meta" / "rel2id.json").write_text('{"Na": 0, "P1": 1}')
    return folder


def _doc(i: int) -> dict:
    """A docred document with two entities and no relation label."""
    ent = [
        [{"name": n, "sent_id": 0, "pos": [k, k + 1], "type": t}]
        for k, (n, t) in enumerate([("A", "PER"), ("B", "LOC")])
    ]
    return {"title": f"d{i}", "sents": [["A", "B"]], "vertexSet": ent, "labels": []}


def _fhwa(path: Path, clients: int, train_windows: int) -> Path:
    import numpy as np

    arrays: dict[str, Any] = {}
    for s in ("train", "val", "test"):
        w = train_windows if s == "train" else 3
        arrays[f"{s}_x"], arrays[f"{s}_y"] = np.zeros((clients, w, 24)), np.zeros((clients, w, 6))
    np.savez(path, **arrays)
    return path


def _empty_file(path: Path) -> Path:
    path.write_text("")
    return path


def _fashion_mnist(folder: Path) -> Path:
    folder.mkdir()
    for name, dims in [
        ("train-images-idx3-ubyte", (0, 28, 28)),
        ("train-labels-idx1-ubyte", (0,)),
        ("t10k-images-idx3-ubyte", (0, 28, 28)),
        ("t10k-labels-idx1-ubyte", (0,)),
    ]:
        (folder / name).write_bytes(bytes([0, 0, 8, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims))
    return folder


KG_TRAIN = "fednsl-kg mines and fits its rules on the training triples"
KG_TEST = "fednsl-kg evaluates its rules on the test triples (filtered link prediction)"
DOCS = "fednsl trains on documents with entities and relation facts"
FHWA = ["--set", "data.input_len=24", "--set", "data.horizon=6", "--set", "rounds=1"]


def _kg_to_kg_of_no_documents(tmp: Path) -> tuple[list[str], str]:
    corpus = _docred(tmp / "corpus", [])
    res = invoke("data", "to-kg", corpus, "--out", tmp / "kg")  # refused: it would write empty files
    assert res.exit_code == 2 and not (tmp / "kg").exists()
    assert (
        res.output.strip() == f"Error: {corpus}/train.json: no documents (an empty list); a KG needs relation facts "
        "between entities"
    )
    (tmp / "kg").mkdir()
    for split in ("train", "valid", "test"):  # such a KG written by hand is refused by train
        (tmp / "kg" / f"{split}.txt").write_text("")
    return _kg_args(tmp / "kg"), f"{tmp}/kg/train.txt: no training triples (the file is empty); {KG_TRAIN}"


def _kg_federated_without_train(tmp: Path) -> tuple[list[str], str]:
    for k in range(2):
        _kg_folder(tmp / "fed" / f"client{k}", train="")
    files = f"{tmp}/fed/client0/train.txt, {tmp}/fed/client1/train.txt"
    return _kg_args(
        tmp / "fed", "data.federated_folder"
    ), f"no client has training triples ({files}: empty or blank); {KG_TRAIN}"


# case -> (method, what the command is and the one line it must print (without "Error: "))
EMPTY_DATA: dict[str, tuple[str, Callable[[Path], tuple[list[str], str]]]] = {
    "kg-empty-train": (
        "fednsl-kg",
        lambda t: (
            _kg_args(_kg_folder(t / "kg", train="")),
            f"{t}/kg/train.txt: no training triples (the file is empty); {KG_TRAIN}",
        ),
    ),
    "kg-blank-train": (
        "fednsl-kg",
        lambda t: (
            _kg_args(_kg_folder(t / "kg", train="\n   \n\n")),
            f"{t}/kg/train.txt: no training triples (the file holds only blank lines); {KG_TRAIN}",
        ),
    ),
    "kg-comment-train": (
        "fednsl-kg",
        lambda t: (
            _kg_args(_kg_folder(t / "kg", train="# no triples\n\n# here\n")),
            f"{t}/kg/train.txt: line 1: expected 3 tab-separated fields (head, relation, tail), found 1: '# no triples'",
        ),
    ),
    "kg-empty-test": (
        "fednsl-kg",
        lambda t: (
            _kg_args(_kg_folder(t / "kg", test="")),
            f"{t}/kg/test.txt: no test triples (the file is empty); {KG_TEST}",
        ),
    ),
    "kg-to-kg-of-no-documents": ("fednsl-kg", _kg_to_kg_of_no_documents),
    "kg-documents-empty": (
        "fednsl-kg",
        lambda t: (
            _kg_args(f"documents:{_docred(t / 'corpus', [])}"),
            f"{t}/corpus/train.json: no documents (an empty list), so documents:{t}/corpus gives no triples",
        ),
    ),
    "kg-federated-without-train": ("fednsl-kg", _kg_federated_without_train),
    "fednsl-docred-empty": (
        "fednsl",
        lambda t: (
            ["fednsl_synthetic", "--set", f"data.path={_docred(t / 'docred', [])}"],
            f"{t}/docred/train.json: no documents (an empty list); {DOCS}",
        ),
    ),
    "fednsl-docred-without-entities": (
        "fednsl",
        lambda t: (
            [
                "fednsl_synthetic",
                "--set",
                f"data.path={_docred(t / 'docred', [{**_doc(i), 'vertexSet': []} for i in range(3)])}",
            ],
            f"{t}/docred/train.json: none of the 3 documents has an entity (a concept with a mention); {DOCS}",
        ),
    ),
    "fednsl-docred-without-facts": (
        "fednsl",
        lambda t: (
            [
                "fednsl_synthetic",
                "--set",
                f"data.path={_docred(t / 'docred', [_doc(i) for i in range(8)], relations=True)}",
            ],
            f"{t}/docred/train.json: the 8 documents with entities hold no relation facts (labels between entities); "
            f"{DOCS}",
        ),
    ),
    "fedstl-fhwa-no-clients": (
        "fedstl",
        lambda t: (
            ["fedstl_fhwa", "--set", f"data.path={_fhwa(t / 'f.npz', 0, 3)}", *FHWA],
            f"{t}/f.npz: no clients (the arrays have 0 rows)",
        ),
    ),
    "logicp-fhwa-no-training-windows": (
        "logicp",
        lambda t: (
            ["logicp_fhwa", "--set", f"data.path={_fhwa(t / 'f.npz', 2, 0)}", *FHWA],
            f"{t}/f.npz: array 'train_x' has shape (2, 0, 24); expected at least one window and step",
        ),
    ),
    "kifl-covtype-empty": (
        "kifl",
        lambda t: (
            ["kifl_covtype", "--set", f"data.path={_empty_file(t / 'covtype.data')}"],
            f"{t}/covtype.data: no samples (not one data line); kifl trains on its samples, one a line",
        ),
    ),
    "kifl-fashion-mnist-empty": (
        "kifl",
        lambda t: (
            ["kifl_fashion_mnist", "--set", f"data.path={_fashion_mnist(t / 'fm')}"],
            f"{t}/fm/train-images-idx3-ubyte: no items (its idx header counts 0); kifl needs the training images",
        ),
    ),
}


@pytest.mark.parametrize("case", EMPTY_DATA)
def test_data_with_nothing_to_train_on_is_refused_naming_the_file(in_tmp: Path, case: str) -> None:
    args, line = EMPTY_DATA[case][1](in_tmp)
    assert refused("train", *args, "-q") == f"Error: {line}"
    assert not (in_tmp / "runs").exists()  # refused before the run folder, so before any training


def test_every_shipped_config_that_reads_a_data_file_has_an_empty_data_case() -> None:
    """A config whose data comes from a file (data.path, data.source, data.federated_folder, or a set read from a
    file: FHWA, Covtype, FashionMNIST) names a method that the cases above cover."""
    from fednsl.config import CONFIG_DIR, read_config_file

    readers = set()
    for path in CONFIG_DIR.glob("*.yaml"):
        raw = read_config_file(path)
        data = raw.get("data") or {}
        if {"path", "source", "federated_folder"} & set(data) or data.get("name") in (
            "fhwa",
            "covtype",
            "fashion_mnist",
        ):
            readers.add(raw["method"])
    assert readers and readers <= {method for method, _ in EMPTY_DATA.values()}, readers


def test_an_empty_valid_file_is_said_in_the_log_and_the_run_goes_on(in_tmp: Path) -> None:
    kg = _kg_folder(in_tmp / "kg", valid="")
    res = invoke("train", *_kg_args(kg), "--out", in_tmp / "run", "-q")
    assert res.exit_code == 0, res.output
    assert (
        f"WARNING fednsl.methods.fednsl_kg: {kg}/valid.txt: no valid triples (the file is empty): the client trains "
        "its full predictor epochs without early stopping on valid MRR, and reports no valid MRR"
    ) in (in_tmp / "run" / "run.log").read_text()


def test_a_client_without_test_triples_or_training_triples_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fednsl.methods.fednsl_kg import KGDataConfig, load_parts

    _kg_folder(tmp_path / "fed" / "client0")
    _kg_folder(tmp_path / "fed" / "client1", test="")
    with caplog.at_level("WARNING", logger="fednsl.methods.fednsl_kg"):
        parts, _, _ = load_parts(KGDataConfig(federated_folder=str(tmp_path / "fed")), 0, check=True)
    assert len(parts) == 2 and [r.getMessage() for r in caplog.records] == [
        f"{tmp_path}/fed/client1/test.txt: no test triples (the file is empty): client c1 is not evaluated (the test "
        "metrics are over the other clients' test triples)"
    ]
    caplog.clear()
    (tmp_path / "few").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "few" / f"{split}.txt").write_text("a\tr\tb\n")
    with caplog.at_level("WARNING", logger="fednsl.methods.fednsl_kg"):
        load_parts(KGDataConfig(source=str(tmp_path / "few"), num_clients=3, partition="triple"), 0, check=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"data.num_clients=3: clients c1, c2 get no training triples of {tmp_path}/few/train.txt (1 triple of "
        "1 relation, partition triple); use fewer clients or more data"
    ]


def test_a_data_path_that_the_time_series_set_does_not_read_is_refused(tmp_path: Path) -> None:
    # data.name: synthetic reads no file; a data.path beside it used to be ignored without a word
    res = CliRunner().invoke(cli, ["train", "ts_fedavg", "--set", "data.path=/nope", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "data.path applies only with data.name: fhwa" in res.output and not (tmp_path / "r").exists()


def test_a_run_where_every_round_lost_its_quorum_does_not_end_as_a_result(tmp_path: Path) -> None:
    from fednsl.cli.main import rounds_without_quorum

    run = tmp_path / "r"
    res = CliRunner().invoke(
        cli,
        [
            "train",
            "fednsl_kg_synthetic",
            "--set",
            "data.num_clients=2",
            "--set",
            "rounds=2",
            "--set",
            "federation.faults.kind=huge_ids",
            "--set",
            "federation.faults.clients=[c0, c1]",
            "--out",
            str(run),
        ],
    )
    assert res.exit_code == 1, res.output
    assert "every round lost its quorum (round 1: train.stats, round 2: train.stats)" in res.output
    assert rounds_without_quorum(run / "metrics.jsonl") == {1: "train.stats", 2: "train.stats"}
    rows = tmp_path / "m.jsonl"
    rows.write_text(
        '{"round": 1, "scope": "server", "train.aborted": 0}\n{"round": 2, "scope": "server", '
        '"train.aborted": 1, "evaluate.aborted": 1}\n{"round": 2, "scope": "client:c0", "x.aborted": 1}\n'
    )
    assert rounds_without_quorum(rows) == {2: "train, evaluate"}
