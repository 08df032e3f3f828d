"""Wall time of ``fednsl [SUBCOMMAND...] --help``, this tree against an older commit run side by side.

The older tree is exported with ``git archive REF`` into a temporary folder and both are run with the same
Python (``python -m fednsl.cli.main ... --help`` with ``PYTHONPATH`` pointing at each tree), interleaved per
command so that load on a shared machine hits both alike. Reported per command: median seconds of each and the
ratio old / new; plus a bare ``python -c pass`` as the floor. Results: bench/results/cli_startup.{json,md}.

    python -m bench.cli_startup [--baseline d2292a0] [--repeats 3] [--baseline-repeats 1]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BASELINE = "d2292a0"  # the commit before the lazy-import CLI (issue 20)


def command_paths() -> list[tuple[str, ...]]:
    """Every command of this tree's ``fednsl`` group: () for the root, then each (sub)command path."""
    from fednsl.cli.main import cli

    out: list[tuple[str, ...]] = []
    ctx = click.Context(cli)

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        out.append(path)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None:
                    walk(sub, path + (name,))

    walk(cli, ())
    return out


def export_tree(ref: str, dest: Path) -> Path:
    """``git archive REF`` of the fednsl/kg/rules/bench packages into ``dest`` (returns dest)."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "fednsl", "kg", "rules", "bench", "configs"],
        check=True,
        capture_output=True,
    ).stdout
    tar = dest / "tree.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as tf:
        tf.extractall(dest, filter="data")
    tar.unlink()
    # fednsl/configs is a link to ../configs in the repository; git archive keeps it as a link
    return dest


def time_help(tree: Path, path: tuple[str, ...]) -> float:
    """Seconds for one ``python -m fednsl.cli.main PATH --help`` run from ``tree`` (exit status checked)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "fednsl.cli.main", *path, "--help"], env=env, cwd=tree, capture_output=True, text=True
    )
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: fednsl {' '.join(path)} --help failed: {proc.stderr.strip()[-400:]}")
    return dt


def floor_seconds(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(baseline: str, repeats: int, baseline_repeats: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    paths = command_paths()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = export_tree(baseline, Path(tmp))
        for path in paths:
            new_t: list[float] = []
            old_t: list[float] = []
            in_baseline = True
            for i in range(max(repeats, baseline_repeats)):
                if in_baseline and i < baseline_repeats:
                    try:
                        old_t.append(time_help(old_tree, path))
                    except RuntimeError:  # the command did not exist in the baseline
                        in_baseline = False
                if i < repeats:
                    new_t.append(time_help(ROOT, path))
            new = statistics.median(new_t)
            old = statistics.median(old_t) if old_t else None
            rows.append(
                {
                    "command": " ".join(("fednsl", *path, "--help")),
                    "new_s": round(new, 3),
                    "new_max_s": round(max(new_t), 3),
                    "old_s": None if old is None else round(old, 3),
                    "ratio_old_over_new": None if old is None else round(old / new, 1),
                }
            )
            click.echo(f"{rows[-1]['command']:48s} old {rows[-1]['old_s']}  new {new:.3f}", err=True)
    return {
        "baseline": baseline,
        "repeats": repeats,
        "rows": rows,
        "python_floor_s": round(floor_seconds(5), 3),
        "load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def to_markdown(res: dict[str, Any]) -> str:
    rows = res["rows"]
    news = [r["new_s"] for r in rows]
    olds = [r["old_s"] for r in rows if r["old_s"] is not None]
    lines = [
        "# `fednsl ... --help` start-up time",
        "",
        f"Median wall seconds of `python -m fednsl.cli.main ... --help` (this tree: {res['repeats']} runs per "
        f"command; baseline `{res['baseline']}` exported with `git archive` and run side by side with the same "
        f"Python). `python -c pass` alone: {res['python_floor_s']:.3f} s. Machine: {res.get('machine', {})}"
        + (
            f"; 1-minute load average {res['load_average_1min'][0]} at the start, {res['load_average_1min'][1]} "
            "at the end (other jobs share the machine: absolute times include waiting for a core)."
            if "load_average_1min" in res
            else "."
        ),
        "",
        f"Slowest now: {max(news):.2f} s; median now {statistics.median(news):.2f} s"
        + (f" against {statistics.median(olds):.2f} s before." if olds else "."),
        "",
        "| command | before (s) | now (s) | now, slowest run (s) | before / now |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        old = "–" if r["old_s"] is None else f"{r['old_s']:.2f}"
        ratio = "new" if r["ratio_old_over_new"] is None else f"{r['ratio_old_over_new']:.1f}×"
        lines.append(f"| `{r['command']}` | {old} | {r['new_s']:.2f} | {r['new_max_s']:.2f} | {ratio} |")
    lines += ["", "Reproduce: `python -m bench.cli_startup --baseline " + res["baseline"] + "`", ""]
    return "\n".join(lines)


@click.command("cli-startup")
@click.option("--baseline", default=BASELINE, show_default=True, help="Git revision to compare against.")
@click.option(
    "--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per command (this tree)."
)
@click.option(
    "--baseline-repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per command (baseline)."
)
def command(baseline: str, repeats: int, baseline_repeats: int) -> None:
    """Time every `fednsl ... --help` against BASELINE; writes bench/results/cli_startup.{json,md}."""
    import platform

    res = run(baseline, repeats, baseline_repeats)
    res["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cli_startup.json").write_text(json.dumps(res, indent=2) + "\n")
    (RESULTS / "cli_startup.md").write_text(to_markdown(res))
    click.echo(to_markdown(res))


if __name__ == "__main__":
    command()
