"""`fednsl` itself (fednsl/cli/main.py): `configs` summaries, and a path argument naming nothing (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fednsl.cli.main import cli, config_summary, configs_listing
from fednsl.config import CONFIG_DIR


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _one_error_line(res: Result) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    return lines[0]


def test_config_summary_is_the_first_full_sentence() -> None:
    # a headline line stays whole; a sentence that runs on in lower case ends at its full stop
    assert config_summary(["FedNSL on X, 4 clients", "200 documents. More."]) == "FedNSL on X, 4 clients"
    assert config_summary(["FedNSL on X, every combo held by a data-rich", "client (80%). Otherwise"]) == (
        "FedNSL on X, every combo held by a data-rich client (80%)."
    )
    # abbreviations and full stops inside brackets end no sentence
    assert config_summary(["pFedMe (Dinh et al. 2020) on it (App. A.5 data, 2 clients). Next."]) == (
        "pFedMe (Dinh et al. 2020) on it (App. A.5 data, 2 clients)."
    )
    assert (
        config_summary(["Paper Sec. 4.1.2, e.g. Fig. 2 is it", "and more."])
        == "Paper Sec. 4.1.2, e.g. Fig. 2 is it and more."
    )
    assert config_summary([]) == ""


def test_configs_cuts_no_description_mid_sentence() -> None:
    res = _run("configs")
    assert res.exit_code == 0, res.output
    rows = dict(line.split(None, 1) for line in res.output.splitlines())
    assert sorted(rows) == sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    assert rows["fednsl_dwie_shared"].endswith(
        "so every rule-head triple has two owners and the server's KL can "
        "carry knowledge between them; poor_* metrics report the data-poor clients."
    )
    assert rows["fednsl_kg_dwie"].endswith("with their coarse types, split 80/10/10 by fact (seed 0).")
    assert rows["numeric_fedavg"].endswith("(App. A.5 data, 2 clients).")
    for name, desc in rows.items():  # a full sentence, or the config's whole first comment line (a headline)
        first = (CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
        assert desc.endswith((".", "!", "?")) or desc == first, name


def test_configs_wraps_to_the_width_under_its_column() -> None:
    lines = configs_listing(80)
    assert all(len(line) <= 80 for line in lines)
    assert all(line.startswith((" " * 33, *(p.stem for p in CONFIG_DIR.glob("*.yaml")))) for line in lines)
    shared = lines.index(next(ln for ln in lines if ln.startswith("fednsl_dwie_shared ")))
    assert lines[shared + 1].startswith(" " * 33) and not lines[shared + 1].startswith(" " * 34)
    assert " ".join(" ".join(lines).split()) == " ".join(" ".join(configs_listing()).split())


@pytest.mark.parametrize(
    "argv",
    [
        ["rules", "list", "{missing}"],
        ["rules", "counts", "{missing}"],
        ["rules", "check", "{missing}"],
        ["data", "import-text", "{missing}", "--out", "{tmp}/out"],
        ["data", "info", "{missing}"],
        ["data", "info", "{missing}", "--format", "kg"],
        ["data", "info", "{missing}", "--format", "docred"],
        ["data", "to-kg", "{missing}", "--out", "{tmp}/out"],
        ["train", "fednsl_kg_kinship", "--set", "data.source={missing}", "-q"],
        ["train", "{missing}"],
        ["flower", "run", "{missing}"],
    ],
)
def test_a_missing_path_is_one_line_naming_it_once(tmp_path: Path, argv: list[str]) -> None:
    """Issue 35: every command given a path that is not there prints one line naming it once, exit status 2."""
    missing = tmp_path / "no-such-thing"
    line = _one_error_line(_run(*(a.format(missing=missing, tmp=tmp_path) for a in argv)))
    assert line.count(str(missing)) == 1, line
    assert "no such file or folder" in line or "not found" in line, line


def test_a_missing_path_option_names_the_option(tmp_path: Path) -> None:
    missing = tmp_path / "ca.pem"
    line = _one_error_line(_run("flower", "superlink", "--ssl-certfile", str(missing)))
    assert line == f"Error: {missing}: no such file or folder (--ssl-certfile)"
    line = _one_error_line(_run("rules", "list", str(missing)))
    assert line == f"Error: {missing}: no such file or folder (RUN_DIR)"


def test_other_bad_parameters_keep_click_usage() -> None:
    res = _run("data", "info", "x", "--clients", "many")
    assert res.exit_code == 2 and "Usage:" in res.output and "'many' is not a valid integer" in res.output
