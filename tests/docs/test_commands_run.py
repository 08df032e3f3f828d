"""Every ``fednsl train`` command shown in README.md and docs/**/*.md runs and exits 0, on small data.

tests/docs/test_examples.py only parses these commands (a full run takes minutes to hours). Here each one runs in
process, as a reader would type it, with :data:`SMALL` overrides appended: ``--set rounds=1`` (2 where a method
needs a second round) and the smallest data and model sizes its config takes, so that a run that would crash at
full size crashes here too (an unknown option, a missing engine, a bad default, NaN losses) in seconds.

* Each page runs in its own working directory (``configs``, ``datasets`` and ``../shared`` point to the
  repository's, as in test_examples.py); a command keeps its ``--out`` (``runs/demo``), so a later
  ``--resume`` on the page continues it. Commands without ``--out`` write under ``runs/`` there.
* The page's ``fednsl data ...`` commands that make a folder a later command reads (``fednsl data split ...
  --out my_federated_kg``) run first, in page order.
* A command whose data is absent skips with a message naming the missing file: ``../shared/data`` (not on every
  machine), a Debian data package, or the reader's own data (``my_kg``, ``my_series.npz``).
* WN18RR and FedLU's FB15k-237-R10 have no size option: their commands read a copy of the dense core of the
  folder (:data:`SMALL_KG`, :func:`_small_kg`). ``--engine flower`` / ``flower-sim`` runs get two clients and the
  ``flower`` mark (they start Ray, or a SuperLink and a SuperNode process per client: 15-45 s each).
* Commands shown on several pages run once (the id names the first place; the skip or failure names all).
* Lines with placeholders (``NAME``, ``DIR``, ``seed=S``) and prose mentions are only parsed (test_examples.py).

A new config in the docs needs an entry in :data:`SMALL`: the test fails and names it. The whole file takes about
3 min on 2 shared cores with ../shared/data present, half of it the three Flower-engine runs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.docs import doc_examples as ex

pytestmark = pytest.mark.slow

_TS_MODEL = [
    "method_kwargs.model.hidden=4", "method_kwargs.model.layers=1", "method_kwargs.model.d_model=8",
    "method_kwargs.model.ff=8", "method_kwargs.model.enc_layers=1", "method_kwargs.model.dec_layers=1",
    "method_kwargs.local_epochs=1",
]
_TS_SYNTHETIC = ["data.num_clients=3", "data.days=12", "data.input_len=24", "data.horizon=6"]
_TS_REAL = ["data.num_clients=3", "data.max_train=8", "data.max_val=4", "data.max_test=4"]
_LOGICP = ["rounds=2", "method_kwargs.pretrain_rounds=1", "method_kwargs.num_clusters=1", "method_kwargs.cluster_epochs=1"]
_FEDNSL = [
    "method_kwargs.num_samples=10", "method_kwargs.scorer_steps=5", "method_kwargs.generator.d_model=16",
    "method_kwargs.generator.nhead=2", "method_kwargs.generator.dim_feedforward=32",
    "method_kwargs.generator.pretrain_epochs=1", "method_kwargs.generator.epochs=1",
    "method_kwargs.generator.samples_per_epoch=200", "method_kwargs.generator.batch_size=100",
]
_FEDNSL_DWIE = [*_FEDNSL, "data.max_docs=40", "method_kwargs.backbone.rounds=1", "method_kwargs.backbone.local_epochs=1",
                "method_kwargs.backbone.text=hash"]
_KG = [
    "method_kwargs.max_bodies=8", "method_kwargs.pool_top=6", "method_kwargs.num_samples=20",
    "method_kwargs.predictor.epochs=3", "method_kwargs.predictor.eval_every=3", "method_kwargs.predictor.patience=1",
    "method_kwargs.predictor.max_train_queries=50", "method_kwargs.mining.samples_per_relation=40",
    "method_kwargs.mining.max_rules_per_head=10", "method_kwargs.mining.pool_per_head=20",
    "method_kwargs.mining.confidence_starts=200", "method_kwargs.report_valid=false",
    "method_kwargs.generator.d_model=16", "method_kwargs.generator.nhead=2", "method_kwargs.generator.dim_feedforward=32",
    "method_kwargs.generator.pretrain_epochs=1", "method_kwargs.generator.epochs=1",
    "method_kwargs.generator.samples_per_epoch=200",
]
_NUMERIC = ["data.points_per_class=20", "data.relabelled=10"]

#: config name -> overrides appended to each documented command of it (after ``rounds=1``)
SMALL: dict[str, list[str]] = {
    "fedavg_blobs": ["data.num_clients=4", "data.samples_per_client=30", "data.features=4", "method_kwargs.hidden=4"],
    "fednsl_synthetic": _FEDNSL,
    "fednsl_dwie": _FEDNSL_DWIE,
    "fednsl_dwie_shared": _FEDNSL_DWIE,
    "fednsl_kg_synthetic": _KG,
    "fednsl_kg_own": _KG,
    "fednsl_kg_kinship": _KG,
    "fednsl_kg_umls": _KG,
    "fednsl_kg_wn18rr": _KG,
    "fednsl_kg_fb15k237_r10": _KG,
    "fedstl_synthetic": [*_TS_MODEL, *_TS_SYNTHETIC, "method_kwargs.num_clusters=2"],
    "fedstl_fhwa": [*_TS_MODEL, *_TS_REAL, "method_kwargs.num_clusters=2"],
    "fedstl_flights": [*_TS_MODEL, *_TS_REAL, "method_kwargs.num_clusters=2"],
    "ts_ifca": [*_TS_MODEL, *_TS_SYNTHETIC, "method_kwargs.num_clusters=2"],
    "logicp_synthetic": [*_TS_MODEL, *_TS_SYNTHETIC, *_LOGICP],
    "logicp_fhwa": [*_TS_MODEL, *_TS_REAL, *_LOGICP],
    "logicp_flights": [*_TS_MODEL, *_TS_REAL, *_LOGICP],
    "logicp_cp_ifca": [*_TS_MODEL, *_TS_SYNTHETIC, "method_kwargs.num_clusters=1"],
    "logicp_fedbayes": [*_TS_MODEL, *_TS_SYNTHETIC, "method_kwargs.personal_steps=1"],
    "kifl_wine_rules": ["method_kwargs.local_epochs=1", "method_kwargs.hidden=[4]"],
    "kifl_fashion_mnist": ["method_kwargs.local_epochs=1", "data.num_clients=2"],
    "kifl_covtype": ["method_kwargs.local_epochs=1"],
    "numeric_fednsl": _NUMERIC,
}
#: overrides of the generated data, appended only while the command keeps it (``data.source=my_kg`` replaces it)
SYNTHETIC: dict[str, tuple[str, str]] = {  # config -> (data key that says "synthetic", override)
    "fednsl_synthetic": ("path", 'data.synthetic={"num_documents": 18, "entities_per_doc": [4, 6]}'),
    "fednsl_kg_synthetic": ("source", 'data.synthetic={"num_families": 4}'),
    "fednsl_kg_own": ("source", 'data.synthetic={"num_families": 4}'),
}
#: KG folders without a size option: the run reads a copy with the first clients and triples (:func:`_small_kg`)
SMALL_KG: dict[str, str] = {"fednsl_kg_wn18rr": "source", "fednsl_kg_fb15k237_r10": "federated_folder"}
#: the other engines start Ray or a SuperLink and one SuperNode process per client: two clients
FLOWER_CLIENTS = "data.num_clients=2"

#: ``data`` keys that name a file or folder the run reads
_DATA_PATH_KEYS = ("path", "source", "federated_folder")
_NOT_PATHS = re.compile(r"^(synthetic(:\d+)?|pykeen:.*|null|None)$")


def _config_name(config: str) -> str:
    return Path(config).stem if config.endswith((".yaml", ".yml")) else config


def _normalised(argv: list[str]) -> tuple[str, ...]:
    """What a command runs: ``configs/X.yaml`` and ``X`` are the same config, and ``--out`` changes nothing."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(_config_name(a) if i == 1 else a)
    return tuple(out)


def _option(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


@dataclass
class Run:
    """One ``fednsl train`` command to run (``cmd``), and every place it is shown."""

    cmd: ex.Command
    places: list[str] = field(default_factory=list)

    @property
    def config(self) -> str:
        return _config_name(self.cmd.argv[1])

    @property
    def engine(self) -> str:
        return _option(self.cmd.argv, "--engine") or ""

    def argv(self, work: Path) -> list[str]:
        """The documented command with the small overrides after its own (``--out`` stays); ``work``: the page's
        working directory (where a small copy of a large KG goes)."""
        small = ["rounds=1", *SMALL.get(self.config, [])]
        data = _load(self.cmd.argv, work).data or {}
        if self.config in SYNTHETIC and data.get(SYNTHETIC[self.config][0]) == "synthetic":
            small.append(SYNTHETIC[self.config][1])
        if self.config in SMALL_KG:
            key = SMALL_KG[self.config]
            folder = data.get(key)
            if isinstance(folder, str) and _resolves(folder, work):
                copy = _small_kg(_resolved(folder, work), work / "small_kg" / Path(folder).name)
                small.append(f"data.{key}={copy}")
        if self.engine.startswith("flower"):
            small.append(FLOWER_CLIENTS)
        return [*self.cmd.argv, *(w for o in small for w in ("--set", o))]


def _has_placeholder(cmd: ex.Command) -> bool:
    return any(
        ex.PLACEHOLDER.fullmatch(w) or re.search(r"<[\w.-]+>|=[A-Z][A-Z0-9_]*$", w) for w in cmd.argv
    )


def _runs() -> list[Run]:
    runs: dict[Any, Run] = {}
    for cmd in ex.all_commands():
        if cmd.kind != "fednsl" or cmd.inline or cmd.argv[:1] != ["train"] or len(cmd.argv) < 2:
            continue
        if cmd.argv[1].startswith("-") or _has_placeholder(cmd):
            continue
        key: Any = _normalised(cmd.argv)
        if "--resume" in cmd.argv:  # continues a run made earlier on its own page
            key = (cmd.page, key)
        runs.setdefault(key, Run(cmd)).places.append(cmd.where)
    return list(runs.values())


RUNS = _runs()
_WORKDIRS: dict[Path, Path] = {}
_PREPARED: set[Path] = set()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doc-commands")


def _workdir(base: Path, page: Path) -> Path:
    """The page's working directory; on first use its ``fednsl data`` commands that write a folder run in it."""
    if page not in _WORKDIRS:
        _WORKDIRS[page] = ex.workdir(base / re.sub(r"\W", "_", str(page.relative_to(ex.REPO))))
    work = _WORKDIRS[page]
    if page not in _PREPARED:
        _PREPARED.add(page)
        for cmd in ex.extract(page):
            if cmd.kind == "fednsl" and not cmd.inline and cmd.argv[:1] == ["data"] and "--out" in cmd.argv:
                if not _has_placeholder(cmd):
                    _invoke(cmd.argv, work)  # checked by test_examples.py where its output is shown
    return work


def _invoke(argv: list[str], cwd: Path) -> Any:
    from click.testing import CliRunner

    from fednsl.cli.main import cli

    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, argv, prog_name="fednsl", catch_exceptions=True)
    finally:
        os.chdir(old)


def _resolved(path: str, cwd: Path) -> Path:
    """A data path of a config as fednsl reads it: absolute as is; ``../shared/data/...`` under
    ``$FEDNSL_SHARED_DATA`` when set; else against the repository root when there, else from ``cwd``."""
    path = path.removeprefix("documents:")
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    shared = os.environ.get("FEDNSL_SHARED_DATA")
    if shared and path.startswith("../shared/data/"):
        return Path(shared) / path.removeprefix("../shared/data/")
    return ex.REPO / p if (ex.REPO / p).exists() else cwd / p


def _resolves(path: str, cwd: Path) -> bool:
    return _resolved(path, cwd).exists()


def _small_kg(src: Path, dst: Path, clients: int = 2, entities: int = 400, held_out: int = 100) -> Path:
    """A copy of a triples folder (or of a FedLU folder's first ``clients`` clients) restricted to the ``entities``
    entities with most training facts of each part: a dense core, in which rules still have groundings, and at most
    ``held_out`` valid and test triples a part."""
    import gzip
    from collections import Counter

    if dst.exists():
        return dst
    parts = sorted(src.glob("client*"), key=lambda q: int(q.name[6:]))[:clients] or [src]
    for part in parts:
        out = dst / part.name if part != src else dst
        out.mkdir(parents=True)
        splits = {}
        for split in ("train", "valid", "test"):
            f = next(part.glob(f"{split}.txt*"))
            with gzip.open(f, "rt", encoding="utf-8") if f.suffix == ".gz" else f.open(encoding="utf-8") as fh:
                splits[split] = [ln.rstrip("\n").split("\t") for ln in fh if ln.strip()]
        degree = Counter(e for h, _, t in splits["train"] for e in (h, t))
        core = {e for e, _ in degree.most_common(entities)}
        for split, rows in splits.items():
            kept = [r for r in rows if r[0] in core and r[2] in core]
            if split != "train":
                kept = kept[:held_out]
            (out / f"{split}.txt").write_text("".join("\t".join(r) + "\n" for r in kept), encoding="utf-8")
    return dst


def _load(argv: list[str], cwd: Path) -> Any:
    """The RunConfig a ``train`` argv runs (its ``--set`` overrides and ``--engine`` applied), read from ``cwd``."""
    from fednsl.config import load_config

    overrides = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--set"]
    engine = _option(argv, "--engine")
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return load_config(argv[1], overrides + ([f"engine={engine}"] if engine else []))
    finally:
        os.chdir(old)


def missing_data(argv: list[str], cwd: Path) -> str | None:
    """The file or folder a train command reads that is absent here, or None."""
    cfg = _load(argv, cwd)
    data = dict(cfg.data or {})
    for key in _DATA_PATH_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value and not _NOT_PATHS.match(value) and not _resolves(value, cwd):
            return f"data.{key}={value}"
    if cfg.method in ("fedstl", "logicp", "cp-ifca", "ts-fedbayes") or cfg.method.startswith("ts-"):
        if data.get("name") == "fhwa" and not data.get("path"):
            from fednsl.tasks.timeseries.data import FHWA_RELATIVE

            root = Path(os.environ.get("FEDNSL_SHARED_DATA", ex.REPO.parent / "shared" / "data"))
            if not (root / FHWA_RELATIVE).exists():
                return str(root / FHWA_RELATIVE)
    if cfg.method == "kifl" and data.get("name") == "fashion_mnist" and not data.get("path"):
        from fednsl.methods.kifl.data import FASHION_MNIST_DIRS

        dirs = [os.environ.get("FEDNSL_FASHION_MNIST", ""), *FASHION_MNIST_DIRS]
        if not any(d and Path(d).is_dir() for d in dirs):
            return f"{FASHION_MNIST_DIRS[0]} (Debian package dataset-fashion-mnist) or $FEDNSL_FASHION_MNIST"
    if cfg.method == "kifl" and data.get("name") == "covtype" and not data.get("path"):
        if not os.environ.get("FEDNSL_COVTYPE"):
            return "data.path (the Covtype file) or $FEDNSL_COVTYPE"
    return None


def test_the_docs_show_train_commands_and_each_config_has_small_overrides() -> None:
    assert len(RUNS) >= 20
    readme = [r for r in RUNS if any(p.startswith("README.md:") for p in r.places)]
    assert any(r.config == "fedstl_synthetic" and "method_kwargs.model.name=transformer" in r.cmd.argv for r in readme)
    unknown = sorted({f"{r.config} ({r.places[0]})" for r in RUNS if r.config not in SMALL})
    assert not unknown, f"add small overrides for these configs to SMALL in {Path(__file__).name}: {unknown}"


@pytest.mark.parametrize(
    "run",
    [pytest.param(r, marks=[pytest.mark.flower] if r.engine.startswith("flower") else []) for r in RUNS],
    ids=[r.places[0] for r in RUNS],
)
def test_command_runs_and_exits_0(run: Run, base: Path) -> None:
    if run.config not in SMALL:
        pytest.fail(f"{run.places[0]}: no small overrides for config {run.config!r} in SMALL")
    if run.engine.startswith("flower"):
        pytest.importorskip("flwr")
    work = _workdir(base, run.cmd.page)
    missing = missing_data(run.cmd.argv, work)
    if missing is not None:
        pytest.skip(f"{', '.join(run.places)}: needs {missing}, absent here")
    argv = run.argv(work)
    out = _option(argv, "--out")
    if "--resume" in argv and out is not None and not (work / out).exists():
        for earlier in RUNS:  # the run it continues, when this test runs alone
            if earlier.cmd.page == run.cmd.page and "--resume" not in earlier.cmd.argv:
                if _option(earlier.cmd.argv, "--out") == out:
                    _invoke(earlier.argv(work), work)
    result = _invoke(argv, work)
    assert result.exit_code == 0, (
        f"{', '.join(run.places)}: `fednsl {' '.join(run.cmd.argv)}` (with {' '.join(argv[len(run.cmd.argv):])}) "
        f"exited {result.exit_code}: {result.exception!r}\n{result.output[-3000:]}"
    )
