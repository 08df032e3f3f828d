"""Shipped files reach an installed package: configs are package data of fednsl, every shipped package is typed,
and the test suite does not lean on the checkout's bench/ folder."""

from __future__ import annotations

import ast
import fnmatch
import importlib.resources
from pathlib import Path

import tomllib

from fednsl.config import CONFIG_DIR, resolve_config_path, shipped_configs

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_configs_are_found_through_the_package() -> None:
    assert CONFIG_DIR == Path(str(importlib.resources.files("fednsl") / "configs"))
    assert sorted(name for name, _ in shipped_configs()) == sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
    assert resolve_config_path("fedavg_blobs").resolve() == (ROOT / "configs" / "fedavg_blobs.yaml").resolve()


def test_every_config_file_is_declared_package_data() -> None:
    """A file under configs/ that no package-data pattern matches would be missing from a wheel."""
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    missing = []
    for path in sorted(p for p in (ROOT / "configs").rglob("*") if p.is_file()):
        rel = path.relative_to(ROOT / "configs")
        package = ".".join(("fednsl", "configs", *rel.parts[:-1]))
        if not any(fnmatch.fnmatch(rel.name, pat) for pat in data.get(package, [])):
            missing.append(str(rel))
    assert missing == []


def test_every_shipped_package_is_typed() -> None:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = [pattern.rstrip("*") for pattern in include]
    assert tops and all((ROOT / top / "py.typed").is_file() for top in tops)
    assert all("py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"][top] for top in tops)


def test_tests_do_not_import_bench() -> None:
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "bench" or n.startswith("bench.")]
    assert offenders == []
