"""Method names: one style (kebab-case) in the registry and in every shipped config; snake_case is an alias."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from fednsl.config import CONFIG_DIR
from fednsl.registry import load_methods

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def test_registered_names_are_kebab_case() -> None:
    names = load_methods().names()
    assert {"ts-fedavg", "cp-ifca", "fednsl-gmm", "fedavg-numeric"} <= set(names)
    assert [n for n in names if not KEBAB.match(n)] == []


def test_shipped_configs_use_the_registered_spelling() -> None:
    names = set(load_methods().names())
    methods = {p.name: yaml.safe_load(p.read_text())["method"] for p in sorted(CONFIG_DIR.glob("*.yaml"))}
    assert methods and {f: m for f, m in methods.items() if m not in names} == {}


@pytest.mark.parametrize(
    "alias, name", [("ts_fedavg", "ts-fedavg"), ("CP_IFCA", "cp-ifca"), ("fednsl_gmm", "fednsl-gmm")]
)
def test_snake_case_is_an_alias(alias: str, name: str) -> None:
    methods = load_methods()
    assert alias in methods and methods.get(alias) is methods.get(name)
    with pytest.raises(KeyError, match="ts-fedavg"):
        methods.get("ts_fedavgg")


# --- the entry points: lazy loading, headlines, engines ---------------------------------------------------------
def test_every_method_is_an_entry_point_naming_its_builder() -> None:
    """Each entry point (pyproject.toml, group fednsl.methods) names the builder its module registers under that
    name, every registered method has one, and each declares a headline."""
    import importlib

    from fednsl.registry import method_entry_points

    targets = method_entry_points()
    methods = load_methods()
    assert set(methods.loaded()) == set(targets) == set(methods.names())
    for name, target in targets.items():
        module, _, attr = target.partition(":")
        spec = methods.get(name)
        assert getattr(importlib.import_module(module), attr) is spec.build, name
        assert methods.module_of(name) == module == spec.build.__module__, name
        assert spec.headline, f"{name} declares no headline metric"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_installed_entry_points_are_those_of_pyproject() -> None:
    """The installed metadata is not stale (reinstall after editing the entry points: `make venv`)."""
    import tomllib

    from fednsl.registry import METHOD_ENTRY_POINTS, method_entry_points

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert method_entry_points() == project["entry-points"][METHOD_ENTRY_POINTS], "reinstall: make venv"


def test_get_imports_only_the_methods_module() -> None:
    """`fednsl train` of one method loads that method's package, not all twelve."""
    import subprocess
    import sys

    code = (
        "import sys; from fednsl.registry import METHODS;"
        "assert 'fedavg' in METHODS and 'fednsl.methods.fedavg' not in sys.modules;"
        "METHODS.get('fedavg');"
        "print(sorted(m for m in sys.modules if m.startswith('fednsl.methods.') and m.count('.') == 2))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['fednsl.methods.fedavg']"


def test_unknown_method_lists_every_name() -> None:
    from fednsl.registry import METHODS

    with pytest.raises(KeyError, match="cp-ifca.*fednsl-kg.*ts-ifca"):
        METHODS.get("fednsl-kgg")


def test_rule_documents_hook_resolves() -> None:
    from fednsl.methods.fednsl.rule_documents import rule_documents
    from fednsl.registry import rule_documents_hook

    assert rule_documents_hook("fednsl") is rule_documents
    assert rule_documents_hook("fedavg") is None and rule_documents_hook("not-a-method") is None


def test_headline_of_an_unknown_method_is_empty() -> None:
    from fednsl.registry import headline_of

    assert headline_of("not-a-method") == ()
    assert [h.label for h in headline_of("fedavg")] == ["accuracy"]


def test_engine_table_is_what_the_pipeline_accepts() -> None:
    """`fednsl methods` and the error for a bad engine list the same engines: the registry's ENGINE_TABLE."""
    pytest.importorskip("flwr")
    from fednsl.pipeline import ENGINES, get_engine
    from fednsl.registry import ENGINE_TABLE

    for name in ENGINE_TABLE:
        get_engine(name)
    assert set(ENGINES.names()) == set(ENGINE_TABLE)
    with pytest.raises(KeyError) as err:
        get_engine("flowr")
    assert str(err.value).strip("'\"").endswith("known: " + ", ".join(ENGINE_TABLE))
