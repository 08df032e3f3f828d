"""The example checker itself: it finds commands, rejects what would not run, and compares output strictly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import doc_examples as ex


def _page(tmp_path: Path, text: str) -> list[ex.Command]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return ex.extract(page)


def _cmd(text: str) -> ex.Command:
    split = ex._split(text)
    assert split is not None
    kind = ex._classify(split[0])
    assert kind is not None
    return ex.Command(Path("x.md"), 1, kind[0], kind[1], text, split[1], None, kind[2])


def test_extract_console_output_and_parse_only(tmp_path: Path) -> None:
    cmds = _page(
        tmp_path,
        "```console\n$ fednsl configs\nfedavg_blobs …\n…\n$ fednsl methods\n```\n\n"
        "```bash\nfednsl train fedavg_blobs \\\n    --set rounds=2   # comment\nmake test\n"
        "fednsl train CONFIG [--set key=value ...]\n```\n\n"
        "```python\nfednsl = 1\n```\n\n<!-- examples: skip -->\n```\nfednsl nonsense\n```\n",
    )
    assert [(c.kind, c.argv, c.expected) for c in cmds] == [
        ("fednsl", ["configs"], ["fedavg_blobs …", "…"]),
        ("fednsl", ["methods"], None),
        ("fednsl", ["train", "fedavg_blobs", "--set", "rounds=2"], None),
        ("make", ["test"], None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "fednsl train fedavg_blobs --no-such-option",  # renamed option
        "fednsl trian fedavg_blobs",  # renamed subcommand
        "fednsl train no_such_config",  # config name
        "fednsl train fedavg_blobs --set rounds=abc",  # override the config rejects
        "fednsl train fedavg_blobs --engine warp",  # engine
        "fednsl rules list runs/demo --top zero",  # option type
        "python -m bench.stl --no-such-flag",  # a bench module's argparse parser
        "python -m bench.kifl --no-such-flag",  # a bench module's click parser
        "make no-such-target",
        "pytest tests/no/such/test_file.py",
    ],
)
def test_parse_check_rejects(text: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - click, argparse and config errors differ in type
        ex.parse_check(_cmd(text))


@pytest.mark.parametrize(
    "text",
    [
        "fednsl train fedavg_blobs --set rounds=2 --engine decentralised",
        "fednsl train configs/fedavg_blobs.yaml --engine flower-sim",
        "fednsl rules list RUN_DIR --head works_in --top 5",
        "fednsl --help",
        "python -m bench.stl --quick",
        "python -m bench.kifl --datasets digits --seeds 1 --quick",
        "make test",
        "pytest tests/docs/test_checker.py -k parse",
    ],
)
def test_parse_check_accepts(text: str) -> None:
    ex.parse_check(_cmd(text))


def test_expected_pattern_marks() -> None:
    pat = ex.expected_pattern(["loaded in … s", "…", "end"])
    assert pat.fullmatch("loaded in 0.01 s\na\nb\nend\n")
    assert pat.fullmatch("loaded in 3 s\nend\n")
    assert not pat.fullmatch("loaded in 3 s\nend\nmore\n")  # an unmarked extra line
    assert not ex.expected_pattern(["count 31"]).fullmatch("count 41\n")  # unmarked numbers must match


def test_filters_and_unsupported() -> None:
    out = "1\n2\n3\n4\n"
    assert ex.apply_filters(out, [["head", "-2"]]) == "1\n2\n"
    assert ex.apply_filters(out, [["sed", "-n", "2,3p"]]) == "2\n3\n"
    with pytest.raises(ValueError, match="unsupported filter"):
        ex.apply_filters(out, [["grep", "x"]])


def test_run_and_compare(tmp_path: Path) -> None:
    (cmd,) = _page(tmp_path, "```console\n$ fednsl configs\nfedavg_blobs …\n…\n```\n")
    work = ex.workdir(tmp_path / "w")
    assert ex.compare(cmd, ex.run(cmd, work)) is None
    cmd.expected = ["no_such_config …", "…"]
    assert "differs from the page" in (ex.compare(cmd, ex.run(cmd, work)) or "")


def test_inline_commands_checked(tmp_path: Path) -> None:
    cmds = _page(tmp_path, "Use `fednsl rules diff RUN_DIR --client A --by head` or `python -m bench.stl --quick`.\n")
    assert [c.inline for c in cmds] == [True, True]
    for c in cmds:
        ex.parse_check(c)
    for bad in (
        "`fednsl rules diff RUN_DIR --clients A`",
        "`fednsl rules dif RUN_DIR`",
        "`python -m bench.stl --quik`",
    ):
        (cmd,) = _page(tmp_path, f"Prose {bad}.\n")
        with pytest.raises(ValueError):
            ex.parse_check(cmd)
