"""Examples that cannot go stale: find every command shown in README.md and docs/**/*.md and check it.

Conventions (documented for writers in docs/contributing.md):

* Every line of a fenced code block (except ``python``, ``yaml``, ``text``, ``json``, ``toml``, ``mermaid``
  blocks) that starts, after an optional ``$ ``, with ``fednsl``, ``.venv/bin/fednsl``, ``python -m bench.X``
  (or ``.venv/bin/python -m bench.X``), ``make`` or ``pytest`` is a *command*. Every command is
  **parse-checked** with the real parser: the ``fednsl`` click tree (subcommand and options exist, values have
  the declared types, a config name or file exists, ``--set`` overrides are accepted by
  :func:`fednsl.config.load_config`, ``--engine`` names a registered engine), a bench module's own parser
  (argparse or click), a Makefile target, or the test paths given to pytest. Nothing expensive runs.
* In a ``console`` block, a ``$ fednsl ...`` line followed by output lines is **run** (in process, in a fresh
  working directory per page where ``configs`` and ``../shared`` point to the repository's) and its output
  compared line by line. In an expected line ``…`` matches any text (numbers, paths, times that may change); a
  line that is only ``…`` matches any number of lines. Only ``| head -N`` and ``| sed -n A,Bp`` may follow a
  run command. Output shown after a command that is not ``fednsl`` is an error: it would not be checked.
* A run command that reads ``../shared/data`` is skipped when that folder is absent (its parse check still runs).
* Lines with a synopsis (``[--option]``, ``...``, ``<placeholder>``) are not commands. ALL-CAPS words
  (``RUN_DIR``, ``CONFIG``) stand for any argument. ``<!-- examples: skip -->`` on the line before a fence skips
  that block (for shell snippets such as ``flwr run`` meant for other machines).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SKIP_MARK = "<!-- examples: skip -->"
NO_COMMAND_LANGS = {"python", "py", "yaml", "yml", "text", "json", "toml", "mermaid", "pycon"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z]+)?$")
ELLIPSIS = "…"


@dataclass
class Command:
    """One command shown in a page: ``argv`` after the program, the expected output if it is to be run."""

    page: Path
    line: int  # 1-based line of the command in the page
    kind: str  # fednsl | bench | make | pytest
    argv: list[str]
    text: str
    filters: list[list[str]] = field(default_factory=list)
    expected: list[str] | None = None  # output lines (run and compare) or None (parse only)
    module: str = ""  # bench module
    inline: bool = False  # a `code span` in prose: only the subcommand path and option names are checked

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _blocks(text: str) -> Iterator[tuple[str, int, list[str], bool]]:
    """(language, first line number, lines, skipped) of every fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        skipped = i > 0 and lines[i - 1].strip() == SKIP_MARK
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        yield lang, i + 2, body, skipped
        i = j + 1


def _split(cmd: str) -> tuple[list[str], list[list[str]]] | None:
    """Words of a shell line up to a pipe/redirect, and the commands piped after it; None if not parseable."""
    lex = shlex.shlex(cmd, posix=True, punctuation_chars="|;&<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        toks = list(lex)
    except ValueError:
        return None
    words: list[str] = []
    filters: list[list[str]] = []
    cur = words
    for t in toks:
        if t == "|":
            cur = []
            filters.append(cur)
        elif set(t) <= set(";&<>"):
            break
        else:
            cur.append(t)
    return words, filters


def _is_synopsis(words: list[str]) -> bool:
    return any(
        w.lstrip("[").startswith("-") and w.startswith("[") or w in ("...", ELLIPSIS) or re.fullmatch(r"<[\w.-]+>", w)
        for w in words
    )


def _classify(words: list[str]) -> tuple[str, list[str], str] | None:
    if not words:
        return None
    prog = words[0]
    if prog in ("fednsl", ".venv/bin/fednsl", "$(BIN)/fednsl"):
        return "fednsl", words[1:], ""
    if prog in ("python", "python3", ".venv/bin/python") and len(words) >= 3 and words[1] == "-m":
        if words[2].startswith("bench"):
            return "bench", words[3:], words[2]
        if words[2] == "pytest":
            return "pytest", words[3:], ""
        return None
    if prog in ("pytest", ".venv/bin/pytest"):
        return "pytest", words[1:], ""
    if prog == "make":
        return "make", words[1:], ""
    return None


INLINE = re.compile(r"`((?:\.venv/bin/)?fednsl [^`]+|(?:\.venv/bin/)?python -m bench\.[^`]+)`")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced blocks."""
    fence = ""
    for no, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m and not fence:
            fence = m.group(1)
        elif fence and line.strip().startswith(fence):
            fence = ""
        elif not fence:
            yield no, line


def extract_inline(page: Path) -> list[Command]:
    """Commands written as code spans in prose and tables (``fednsl rules diff RUN_DIR --client A``)."""
    out = []
    for no, line in _prose_lines(page.read_text(encoding="utf-8")):
        for m in INLINE.finditer(line):
            split = _split(m.group(1).replace("[", " ").replace("]", " "))
            if split is None:
                continue
            kind = _classify(split[0])
            if kind is not None:
                out.append(Command(page, no, kind[0], kind[1], m.group(1), [], None, kind[2], inline=True))
    return out


def extract(page: Path) -> list[Command]:
    """Every command of one page, with its expected output where it is to be run."""
    out: list[Command] = extract_inline(page)
    for lang, first, body, skipped in _blocks(page.read_text(encoding="utf-8")):
        if skipped or lang in NO_COMMAND_LANGS:
            continue
        console = lang == "console"
        k = 0
        while k < len(body):
            raw = body[k]
            line_no = first + k
            prompt = raw.startswith("$ ")
            if console and not prompt:
                k += 1
                continue
            text = raw[2:] if prompt else raw.strip()
            while text.endswith("\\") and k + 1 < len(body):  # continued lines
                k += 1
                text = text[:-1] + " " + body[k].strip()
            k += 1
            expected: list[str] = []
            if console:
                while k < len(body) and not body[k].startswith("$ "):
                    expected.append(body[k].rstrip())
                    k += 1
                while expected and not expected[-1]:
                    expected.pop()
            split = _split(text)
            if split is None:
                continue
            words, filters = split
            kind = _classify(words)
            if kind is None or _is_synopsis(words):
                if expected and kind is not None:
                    raise ValueError(f"{page}:{line_no}: output shown for a synopsis")
                continue
            cmd = Command(page, line_no, kind[0], kind[1], text, filters, expected or None, kind[2])
            out.append(cmd)
    return out


def all_commands() -> list[Command]:
    return [c for p in pages() for c in extract(p)]


# ---------------------------------------------------------------- parse checks


def _relax_paths(command: Any, undo: list[tuple[Any, str, Any]]) -> None:
    """Let ``command`` parse files that do not exist here (documented paths); ``undo`` restores it."""
    import click

    for p in getattr(command, "params", []):
        if isinstance(p.type, click.Path) and p.type.exists:
            undo.append((p.type, "exists", True))
            p.type.exists = False
        elif isinstance(p.type, click.File):
            undo.append((p, "type", p.type))
            p.type = click.Path()


def _substitute_placeholders(argv: list[str]) -> list[str]:
    return ["placeholder" if PLACEHOLDER.fullmatch(a) and not a.startswith("-") else a for a in argv]


def parse_click(root: Any, prog: str, argv: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Resolve ``argv`` through a click command tree as click would; returns (command path, params) per level.

    Subcommands are resolved with ``resolve_command``, so groups that load their subcommands lazily work too.
    """
    import click

    levels: list[tuple[str, dict[str, Any]]] = []
    undo: list[tuple[Any, str, Any]] = []
    try:
        _relax_paths(root, undo)
        ctx = root.make_context(prog, list(argv), resilient_parsing=False)
        levels.append((prog, dict(ctx.params)))
        cmd = root
        path = prog
        while isinstance(cmd, click.Group):
            protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
            rest = [*protected, *ctx.args]
            if not rest:
                break
            name, sub, rest = cmd.resolve_command(ctx, rest)
            if sub is None:
                raise click.UsageError(f"no such command {name!r}", ctx)
            _relax_paths(sub, undo)
            path = f"{path} {name}"
            ctx = sub.make_context(name, list(rest), parent=ctx, resilient_parsing=False)
            levels.append((path, dict(ctx.params)))
            cmd = sub
    finally:
        for obj, attr, value in reversed(undo):
            setattr(obj, attr, value)
    return levels


def _check_train_like(params: dict[str, Any]) -> None:
    """A config name or file exists and its --set overrides (and --engine) are accepted."""
    from fednsl.config import load_config, resolve_config_path

    config = params.get("config")
    if config is None or config == "placeholder":
        return
    old = Path.cwd()
    os.chdir(REPO)
    try:
        resolve_config_path(config)
        overrides = list(params.get("overrides") or ())
        if params.get("engine"):
            overrides.append(f"engine={params['engine']}")
        overrides = [o for o in overrides if "placeholder" not in o]
        cfg = load_config(config, overrides)
    finally:
        os.chdir(old)
    engine = getattr(cfg, "engine", None)
    if engine:
        import importlib.util

        from fednsl.pipeline import ENGINES

        names = list(ENGINES.names())
        if importlib.util.find_spec("fednsl.engines.flower") is not None:
            names += ["flower", "flower-sim"]  # registered when first used (importing flwr is slow)
        if engine not in names:
            raise ValueError(f"unknown engine {engine!r} (known: {', '.join(names)})")


def check_fednsl(cmd: Command) -> None:
    import click

    from fednsl.cli.main import cli

    argv = _substitute_placeholders(cmd.argv)
    try:
        levels = parse_click(cli, "fednsl", argv)
    except click.exceptions.Exit as done:  # --help / --version: valid when they exit with status 0
        if done.exit_code != 0:
            raise
        return
    for path, params in levels:
        if path in ("fednsl train", "fednsl flower run", "fednsl flower app"):
            _check_train_like(params)


class _Parsed(Exception):
    pass


def check_bench(cmd: Command) -> None:
    import click

    mod = importlib.import_module(cmd.module)
    argv = _substitute_placeholders(cmd.argv)
    command = getattr(mod, "command", None)
    if isinstance(command, click.Command):
        parse_click(command, cmd.module, argv)
        return
    main = getattr(mod, "main", None)
    if main is None:
        raise ValueError(f"{cmd.module} has no command-line entry point")

    def parse_known(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        result = original(self, args, namespace)
        raise _Parsed(result)

    original = argparse.ArgumentParser.parse_known_args
    saved_argv = sys.argv
    argparse.ArgumentParser.parse_known_args = parse_known  # type: ignore[method-assign]
    sys.argv = [cmd.module, *argv]
    try:
        takes_argv = bool(inspect.signature(main).parameters)
        main(argv) if takes_argv else main()
    except _Parsed as done:
        _ns, extra = done.args[0]
        if extra:
            raise ValueError(f"{cmd.module}: unrecognised arguments: {' '.join(extra)}") from None
        return
    except SystemExit as exc:
        raise ValueError(f"{cmd.module}: its parser rejected {' '.join(argv)!r} (exit {exc.code})") from None
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
        sys.argv = saved_argv
    raise AssertionError(f"{cmd.module}.main() returned without parsing arguments")


def check_make(cmd: Command) -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", makefile, flags=re.M))
    for t in cmd.argv:
        if t.startswith("-") or "=" in t:
            continue
        if t not in targets:
            raise ValueError(f"make: no target {t!r} in Makefile (targets: {', '.join(sorted(targets))})")


def check_pytest(cmd: Command) -> None:
    skip_next = False
    for a in cmd.argv:
        if skip_next:
            skip_next = False
            continue
        if a in ("-k", "-m", "-n", "-p", "--timeout"):
            skip_next = True
            continue
        if a.startswith("-"):
            continue
        path = REPO / a.split("::")[0]
        if not path.exists():
            raise ValueError(f"pytest: no test path {a!r}")


def _option_names(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--") and len(a) > 2]


def check_inline(cmd: Command) -> None:
    """A command mentioned in prose: its subcommands exist and every ``--option`` it names exists."""
    import click

    if cmd.kind == "fednsl":
        from fednsl.cli.main import cli

        command: Any = cli
        ctx = click.Context(cli, info_name="fednsl")
        words = [a for a in cmd.argv if not a.startswith("-")]
        for w in words:
            if not isinstance(command, click.Group):
                break
            sub = command.get_command(ctx, w)
            if sub is None:
                if w in command.list_commands(ctx) or not re.fullmatch(r"[a-z][a-z0-9-]*", w):
                    break
                raise ValueError(f"no such command {w!r} under {ctx.command_path!r}")
            command = sub
            ctx = click.Context(sub, info_name=w, parent=ctx)
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    elif cmd.kind == "bench":
        if PLACEHOLDER.fullmatch(cmd.module.rsplit(".", 1)[-1]):
            return  # `python -m bench.NAME`: a pattern, not a module
        known = _bench_options(cmd.module)
    else:
        return
    for opt in _option_names(cmd.argv):
        if opt not in known:
            raise ValueError(f"option {opt!r} does not exist (known: {', '.join(sorted(known))})")


def _bench_options(module: str) -> set[str]:
    """Option names a bench module's parser accepts (click or argparse)."""
    import click

    mod = importlib.import_module(module)
    command = getattr(mod, "command", None)
    if isinstance(command, click.Command):
        return {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    seen: list[argparse.ArgumentParser] = []

    def grab(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        seen.append(self)
        raise _Parsed()

    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = grab  # type: ignore[method-assign]
    try:
        main = mod.main
        main([]) if inspect.signature(main).parameters else main()
    except _Parsed:
        pass
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    if not seen:
        raise ValueError(f"{module}: no argument parser found")
    return set(seen[0]._option_string_actions)


def parse_check(cmd: Command) -> None:
    """Raise when the documented command would not parse."""
    if cmd.inline:
        check_inline(cmd)
        return
    {"fednsl": check_fednsl, "bench": check_bench, "make": check_make, "pytest": check_pytest}[cmd.kind](cmd)


# ---------------------------------------------------------------- run and compare


def needs_shared_data(cmd: Command) -> bool:
    return any("shared/data" in a for a in cmd.argv)


def expected_pattern(expected: list[str]) -> re.Pattern[str]:
    """One regex for the expected lines: ``…`` = any text within a line, a lone ``…`` = any lines."""
    parts = []
    for line in expected:
        if line.strip() == ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split(ELLIPSIS)) + r"[ \t]*\n")
    return re.compile("".join(parts))


def apply_filters(output: str, filters: list[list[str]]) -> str:
    lines = output.splitlines()
    for f in filters:
        if len(f) == 2 and f[0] == "head" and re.fullmatch(r"-\d+", f[1]):
            lines = lines[: int(f[1][1:])]
        elif len(f) == 3 and f[:2] == ["sed", "-n"] and re.fullmatch(r"\d+,\d+p", f[2]):
            a, b = (int(x) for x in f[2][:-1].split(","))
            lines = lines[a - 1 : b]
        else:
            raise ValueError(f"unsupported filter after a run command: {' '.join(f)}")
    return "".join(ln.rstrip() + "\n" for ln in lines)


def workdir(base: Path) -> Path:
    """A fresh working directory where ``configs``, ``datasets`` and ``../shared`` are the repository's."""
    work = base / "work"
    work.mkdir(parents=True, exist_ok=True)
    for name in ("configs", "datasets"):
        if not (work / name).exists():
            (work / name).symlink_to(REPO / name)
    shared = REPO.parent / "shared"
    if shared.exists() and not (base / "shared").exists():
        (base / "shared").symlink_to(shared)
    return work


def run(cmd: Command, cwd: Path) -> str:
    """Run a ``fednsl`` command in process from ``cwd``; its output after the documented filters."""
    from click.testing import CliRunner

    from fednsl.cli.main import cli

    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, cmd.argv, prog_name="fednsl", catch_exceptions=True)
    finally:
        os.chdir(old)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{cmd.where}: `{cmd.text}` raised {result.exception!r}\n{result.output}")
    return apply_filters(result.output, cmd.filters)


def compare(cmd: Command, output: str) -> str | None:
    """None when the output matches the page, else a message with both."""
    assert cmd.expected is not None
    if expected_pattern(cmd.expected).fullmatch(output):
        return None
    shown = "\n".join(cmd.expected)
    return f"{cmd.where}: output of `{cmd.text}` differs from the page.\n--- page\n{shown}\n--- actual\n{output}"


if __name__ == "__main__":  # list what would be checked
    for c in all_commands():
        print(f"{c.where:40s} {'run  ' if c.expected else 'parse'} {c.text}")
