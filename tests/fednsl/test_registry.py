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
