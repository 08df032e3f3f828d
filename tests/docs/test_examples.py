"""Every command shown in README.md and docs/**/*.md parses with the real CLI; shown output is reproduced.

The conventions (``…`` wildcards, what runs and what is only parsed) are in tests/docs/doc_examples.py and
docs/contributing.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import doc_examples as ex

COMMANDS = ex.all_commands()
RUN_PAGES = sorted({c.page for c in COMMANDS if c.expected is not None})


def test_pages_show_commands() -> None:
    # the extractor finds the README's quick start and commands of every kind
    kinds = {c.kind for c in COMMANDS}
    assert {"fednsl", "bench", "make", "pytest"} <= kinds
    readme = [c.text for c in COMMANDS if c.page.name == "README.md"]
    assert "make demo" in readme and "make test" in readme


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.where for c in COMMANDS])
def test_command_parses(cmd: ex.Command) -> None:
    if cmd.expected is not None and (cmd.kind != "fednsl" or cmd.argv[:1] in (["train"], ["bench"], ["flower"])):
        pytest.fail(f"{cmd.where}: output is shown for `{cmd.text}`, which the checker does not run (too slow)")
    try:
        ex.parse_check(cmd)
    except Exception as exc:  # any parser error: report the page and line
        pytest.fail(f"{cmd.where}: `{cmd.text}` does not parse: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(ex.REPO)) for p in RUN_PAGES])
def test_shown_output_is_reproduced(page: Path, tmp_path: Path) -> None:
    work = ex.workdir(tmp_path)
    failures = []
    for cmd in (c for c in COMMANDS if c.page == page and c.kind == "fednsl"):
        if ex.needs_shared_data(cmd) and not (ex.REPO.parent / "shared" / "data").exists():
            continue
        if cmd.expected is None:
            continue
        msg = ex.compare(cmd, ex.run(cmd, work))
        if msg:
            failures.append(msg)
    assert not failures, "\n\n".join(failures)
