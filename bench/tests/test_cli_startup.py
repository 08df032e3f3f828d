"""bench/cli_startup.py: its command list, the exported baseline tree, and the Markdown table."""

from __future__ import annotations

import subprocess

from bench.cli_startup import ROOT, command_paths, export_tree, to_markdown


def test_command_paths_cover_the_tree() -> None:
    paths = command_paths()
    assert paths[0] == () and ("rules", "counts") in paths and ("train",) in paths
    assert len(paths) == len(set(paths)) >= 28


def test_export_tree_extracts_an_older_commit(tmp_path) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:  # an installed copy without git history
        return
    export_tree(head.stdout.strip(), tmp_path)
    assert (tmp_path / "fednsl" / "cli" / "main.py").is_file() and (tmp_path / "rules" / "store").is_dir()


def test_markdown_table() -> None:
    res = {"baseline": "abc", "repeats": 3, "python_floor_s": 0.05, "load_average_1min": [1.0, 2.0],
           "rows": [{"command": "fednsl --help", "new_s": 0.2, "new_max_s": 0.3, "old_s": 4.0,
                     "ratio_old_over_new": 20.0},
                    {"command": "fednsl rules counts --help", "new_s": 0.25, "new_max_s": 0.25, "old_s": None,
                     "ratio_old_over_new": None}]}
    md = to_markdown(res)
    assert "| `fednsl --help` | 4.00 | 0.20 | 0.30 | 20.0× |" in md
    assert "| `fednsl rules counts --help` | – | 0.25 | 0.25 | new |" in md
    assert "Slowest now: 0.25 s" in md and "load average 1.0" in md
