"""``fednsl`` — train federated rule learners, inspect data and rules, verify the protocol.

Subcommands defined in other modules of this package (``fednsl.cli.<name>.command``) are
discovered automatically. Every module of this package imports only click and the standard library at the top
(numpy, torch, scipy, ... load inside the command that needs them), so ``--help`` answers at once;
``tests/fednsl/cli/test_startup.py`` keeps it so.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path
from typing import Any

import click

import fednsl
from fednsl.cli.errors import DATA_ERRORS, as_bad_input, path_problem

BAD_INPUT: tuple[type[BaseException], ...] = (ValueError, KeyError, FileNotFoundError, FileExistsError, *DATA_ERRORS)


class _Group(click.Group):
    """Maps errors of damaged input files raised anywhere below, and a path argument or option naming a missing
    file, to one line and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DATA_ERRORS as exc:
            raise as_bad_input(exc) from exc
        except click.BadParameter as exc:
            problem = path_problem(exc)
            if problem is None:
                raise
            raise problem from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(fednsl.__version__, prog_name="fednsl")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Federated neuro-symbolic rule learning (FedNSL, FedSTL, LogiCP, knowledge-injected FL).

    Start with `fednsl configs` and `fednsl train CONFIG`. Libraries' own log lines and progress bars
    (Flower, transformers, ...) show only with -v.
    """
    from fednsl.cli.logs import configure

    configure(verbose)


@cli.command()
@click.argument("config")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config entry, e.g. --set rounds=3 --set method_kwargs.kl_weight=0.1, or --set "
    "time_budget_s=600 to end the rounds early where another would not end within 600 s (values are parsed as "
    "YAML; repeatable).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Run directory (default: runs/<config>-seed<seed>-<timestamp>).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --out (or the newest run of this config) from its last checkpoint; "
    "the result equals an uninterrupted run.",
)
@click.option(
    "--start-over",
    is_flag=True,
    help="With --resume: when no checkpoint of the run can be read, move its metrics and checkpoints "
    "to RUN_DIR/discarded-<time>/ and train from round 1 (without it, such a resume is refused).",
)
@click.option(
    "--engine",
    default=None,
    help="Where rounds run: inprocess (default), decentralised, flower-sim or flower "
    "(see `fednsl methods`). Same as --set engine=NAME.",
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No progress: no bars on a terminal, no line per round when the output is not a terminal.",
)
def train(
    config: str,
    overrides: tuple[str, ...],
    out: Path | None,
    resume: bool,
    start_over: bool,
    engine: str | None,
    quiet: bool,
) -> None:
    """Train the method of CONFIG (a YAML path or the name of a shipped config).

    Writes RUN_DIR/config.yaml (resolved), metrics.jsonl and metrics.csv, checkpoints/,
    plots/*.png, summary.json, run.log, and rules.tsv/rules.json (with confidence counts) for
    rule-learning methods. Ends with one line: the method's headline metric(s) and their references.
    """
    from fednsl.config import load_config

    if start_over and not resume:
        raise click.UsageError("--start-over only applies with --resume")
    ov = list(overrides) + ([f"engine={engine}"] if engine else [])
    try:  # a bad config is refused before torch and the method load
        cfg = load_config(config, ov)
    except BAD_INPUT as exc:
        raise as_bad_input(exc) from exc
    from fednsl.federation.runner import QuorumLostError
    from fednsl.federation.tracking import NO_ROOM, RunWriteError
    from fednsl.pipeline import train as run_train

    try:
        result = run_train(cfg, out, resume=resume, progress=not quiet, start_over=start_over)
    except QuorumLostError as exc:  # the run stopped as configured (on_quorum_loss: abort); checkpoints are kept
        raise click.ClickException(f"run stopped: {exc}; resume it with --resume") from exc
    except RunWriteError as exc:  # a full disk: not bad input, and the checkpoints written so far are kept
        if exc.errno not in NO_ROOM:  # e.g. --out in a folder without write permission
            raise as_bad_input(exc) from exc
        raise click.ClickException(
            f"run stopped: {exc}; make room, then continue it: the same command with --resume --out {exc.run_dir}"
        ) from exc
    except BAD_INPUT as exc:
        raise as_bad_input(exc) from exc
    from fednsl.cli.result import result_line

    run_dir = result.run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    written = [n for n in ("metrics.jsonl", "rules.json", "rules.tsv", "run.log") if (run_dir / n).exists()]
    written += [str(p) for p in summary.get("plots", [])]
    click.echo(f"wrote {run_dir}/: " + ", ".join(written))
    click.echo(result_line(run_dir, summary, cfg.to_dict()))
    lost, rounds = rounds_without_quorum(run_dir / "metrics.jsonl"), int(summary.get("rounds", cfg.rounds))
    if lost and len(lost) >= rounds:
        raise click.ClickException(
            f"every round lost its quorum ({', '.join(f'round {r}: {s}' for r, s in sorted(lost.items()))}): no "
            f"client's reply was accepted there, so the result above is not a trained one; {run_dir}/run.log "
            "names each client and why its reply was refused"
        )
    if lost:
        click.echo(
            f"note: {len(lost)} of {rounds} rounds lost their quorum and skipped a stage "
            f"({', '.join(f'round {r}: {s}' for r, s in sorted(lost.items()))}); {run_dir}/run.log says why",
            err=True,
        )


def rounds_without_quorum(metrics: Path) -> dict[int, str]:
    """Round → the stages whose exchange lost its quorum (the server's ``<stage>.aborted`` rows)."""
    lost: dict[int, list[str]] = {}
    if not metrics.is_file():
        return {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if row.get("scope") == "server":
            for key, value in row.items():
                if key.endswith(".aborted") and value:
                    lost.setdefault(int(row["round"]), []).append(key.removesuffix(".aborted"))
    return {r: ", ".join(stages) for r, stages in lost.items()}


# a period after these words (and inside brackets) ends no sentence: "et al. 2022", "Sec. 4.1", "(App. A.5 data)"
_ABBREVIATIONS = frozenset({"al", "e.g", "i.e", "cf", "vs", "etc", "sec", "fig", "figs", "app", "eq", "tab", "no"})


def _sentence_end(text: str) -> int | None:
    """Index just past the first sentence of ``text`` (a ``.``, ``!`` or ``?`` outside brackets, followed by the
    end or by a space and a capital), or None when ``text`` holds no full stop."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch in ".!?" and depth == 0:
            rest = text[i + 1 :]
            if rest and not (rest[0] == " " and rest.lstrip()[:1].isupper()):
                continue
            word = text[:i].rsplit(" ", 1)[-1].lstrip("(").lower()
            if ch == "." and word in _ABBREVIATIONS:
                continue
            return i + 1
    return None


def config_summary(comment: list[str]) -> str:
    """The first full sentence of a config's header comment (its lines without ``#``).

    A first line without a full stop is the whole summary (a headline) unless the next line goes on in lower
    case: then the sentence runs over the lines and ends at its full stop."""
    if not comment:
        return ""
    text = comment[0]
    if _sentence_end(text) is None and len(comment) > 1 and comment[1][:1].islower():
        text = " ".join(comment)
    end = _sentence_end(text)
    return text[:end] if end is not None else text


def _header_comment(path: Path) -> list[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text:
            break
        lines.append(text)
    return lines


def configs_listing(width: int | None = None) -> list[str]:
    """``NAME  summary`` per shipped config; with ``width``, each summary wrapped to it under its column."""
    import textwrap

    from fednsl.config import CONFIG_DIR, shipped_configs

    out = []
    for name, _ in shipped_configs():
        head = f"{name:32s} "
        desc = config_summary(_header_comment(CONFIG_DIR / f"{name}.yaml"))
        if width is None:
            out.append(head + desc)
        else:
            out += textwrap.wrap(
                desc,
                width=max(width, len(head) + 30),
                initial_indent=head,
                subsequent_indent=" " * len(head),
                break_on_hyphens=False,
            ) or [head.rstrip()]
    return out


@cli.command()
def configs() -> None:
    """List the shipped experiment configs (run one with `fednsl train NAME`) with the first sentence of each."""
    import shutil

    width = shutil.get_terminal_size().columns - 1 if sys.stdout.isatty() else None
    for line in configs_listing(width):
        click.echo(line)


@cli.command()
def methods() -> None:
    """List the registered methods (strategy + client pairs) with their headline metrics, and the engines."""
    from fednsl.registry import engine_notes, headline_of, load_methods

    reg = load_methods()
    click.echo("methods:")
    for name in reg.names():
        click.echo(f"  {name:24s} {reg.get(name).doc}")
        heads = headline_of(name)
        if heads:
            click.echo(f"  {'':24s} reports: " + ", ".join(h.label for h in heads))
    click.echo("engines (--engine NAME):")
    for name, note in engine_notes().items():
        click.echo(f"  {name:24s} {note}")


def _discover() -> None:
    import fednsl.cli as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name in ("main",):
            continue
        mod = importlib.import_module(f"fednsl.cli.{info.name}")
        command = getattr(mod, "command", None)
        if isinstance(command, click.Command):
            cli.add_command(command)


_discover()


def main() -> None:
    try:
        cli(prog_name="fednsl")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
