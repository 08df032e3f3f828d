"""``fednsl bench``: run the benchmarks of the ``bench`` package (installed with fednsl).

Each benchmark is a module ``bench/<name>.py`` that exports a click command named ``command`` (also runnable as
``python -m bench.<name>``). To add one, add a line to :data:`BENCHES` and :data:`SUMMARIES`; a module is imported
only when its subcommand is used (``fednsl bench --help`` lists them from :data:`SUMMARIES`), so a slow or optional
import in one benchmark costs the others nothing.
"""

from __future__ import annotations

import importlib

import click

#: subcommand name → module exporting ``command`` (a click.Command). Keep it short and sorted.
BENCHES: dict[str, str] = {
    "cli-startup": "bench.cli_startup",
    "kifl": "bench.kifl",
    "fedstl": "bench.fedstl_table",
    "logicp": "bench.logicp_table",
    "numeric": "bench.numeric",
}

#: the line `fednsl bench --help` shows for each (so that listing them imports none of them)
SUMMARIES: dict[str, str] = {
    "cli-startup": "Time every `fednsl ... --help` against an older commit.",
    "kifl": "Knowledge-injected FL §7: five approaches, low-data and λ studies.",
    "fedstl": "FedSTL Table 2: MSE and property satisfaction vs FedAvg/FedProx/FedRep/Ditto/IFCA.",
    "logicp": "LogiCP Tables 1, 4, 7: MSE, γ%, coverage and width vs its baselines.",
    "numeric": "FedNSL §4.1.1 numerical experiment vs pFedMe/Per-FedAvg/pFedBayes/LR-XFL/FedAvg.",
}


def _load(name: str) -> click.Command:
    try:
        module = importlib.import_module(BENCHES[name])
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"benchmark {name!r}: cannot import {BENCHES[name]} ({exc}); the bench package "
            "is installed with fednsl (pip install fednsl[bench] for its extras)"
        ) from exc
    cmd = getattr(module, "command", None)
    if not isinstance(cmd, click.Command):
        raise click.ClickException(f"benchmark module {BENCHES[name]} exports no click command `command`")
    return cmd


class LazyBenchGroup(click.Group):
    """A click group whose subcommands are imported on first use (click's documented lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(BENCHES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in BENCHES:
            return _load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The subcommand list from :data:`SUMMARIES`, without importing the benchmark modules."""
        rows = [(name, SUMMARIES.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group("bench", cls=LazyBenchGroup)
def command() -> None:
    """Run a benchmark (results go to bench/results/ as JSON, Markdown and PNG)."""
