"""Method names: one style (kebab-case) in the registry and in every shipped config; snake_case is an alias."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("alias, name", [("ts_fedavg", "ts-fedavg"), ("CP_IFCA", "cp-ifca"), ("fednsl_gmm", "fednsl-gmm")])
def test_snake_case_is_an_alias(alias: str, name: str) -> None:
    methods = load_methods()
    assert alias in methods and methods.get(alias) is methods.get(name)
    with pytest.raises(KeyError, match="ts-fedavg"):
        methods.get("ts_fedavgg")


# --- the method table: lazy loading, headlines, engines ---------------------------------------------------------
def test_method_table_lists_every_registered_method_with_its_module() -> None:
    from fednsl.registry import METHOD_TABLE

    methods = load_methods()
    assert set(methods.loaded()) == set(METHOD_TABLE) == set(methods.names())
    for name, entry in METHOD_TABLE.items():
        assert methods.get(name).build.__module__ == entry.module, name
        assert entry.headline, f"{name} declares no headline metric"


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
    from fednsl.registry import rule_documents_hook

    assert callable(rule_documents_hook("fednsl"))
    assert rule_documents_hook("fedavg") is None and rule_documents_hook("not-a-method") is None


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
