"""``fednsl --help`` and every subcommand's ``--help`` load no heavy library (so they answer at once).

Checked on what a fresh interpreter imports (``-X importtime`` / ``sys.modules``), not on a timing: the time is
measured in bench/cli_startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "scipy", "sklearn", "numba", "transformers", "flwr", "dgl", "pandas", "matplotlib", "spacy")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names listed by ``python -X importtime`` (``import time: self | cumulative | name``)."""
    out = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                out.add(name)
    return out


def test_imported_modules_parses_importtime_lines() -> None:
    text = "import time: self [us] | cumulative | imported package\nimport time:  12 |  30 |   torch._C\n"
    assert imported_modules(text) == {"torch._C"}


def test_root_help_imports_no_heavy_library_and_not_numpy() -> None:
    proc = _run(["-X", "importtime", "-m", "fednsl.cli.main", "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Commands:" in proc.stdout and "train" in proc.stdout
    mods = imported_modules(proc.stderr)
    assert {"click", "fednsl.cli.errors"} <= mods  # the parser saw the imports at all
    tops = {m.split(".")[0] for m in mods}
    assert tops & {*HEAVY, "numpy"} == set(), sorted(m for m in mods if m.split(".")[0] in {*HEAVY, "numpy"})


def test_every_subcommand_help_imports_no_heavy_library() -> None:
    """Renders the help of every command of the tree (the root included) in one fresh interpreter, then lists
    ``sys.modules`` (also what ``importlib.import_module`` loaded, which ``-X importtime`` does not list)."""
    code = f"""
import json, sys
import click
from fednsl.cli.main import cli

paths = []
def walk(cmd, path):
    paths.append(path)
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            walk(cmd.get_command(ctx, name), path + [name])
walk(cli, [])
for path in paths:
    try:
        cli.main(path + ["--help"], prog_name="fednsl", standalone_mode=False)
    except SystemExit:
        pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {(*HEAVY, "numpy")!r})
print(json.dumps({{"paths": [" ".join(p) for p in paths], "heavy": heavy}}))
"""
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"train", "rules list", "rules counts", "rules score", "data import-text", "flower run", "bench numeric"} <= set(
        res["paths"]
    )
    assert res["heavy"] == []


def test_bench_help_lists_every_benchmark_without_importing_them() -> None:
    from fednsl.cli.bench import BENCHES, SUMMARIES

    assert set(SUMMARIES) == set(BENCHES)
    code = (
        "import sys; from fednsl.cli.main import cli\n"
        "try:\n    cli.main(['bench', '--help'], prog_name='fednsl', standalone_mode=False)\n"
        "except SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith('bench.')])"
    )
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip().splitlines()
    assert out[-1] == "[]" and all(any(ln.strip().startswith(n) for ln in out) for n in BENCHES)
