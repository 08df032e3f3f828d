"""YAML 1.2 numbers in every user-facing YAML (configs, ``--set`` values, generator configs); no anchors or
aliases; parser errors on one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fednsl.config import load_config, parse_override
from kg.yaml_io import YamlAliasError, load_yaml, yaml_error_line


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-5", 1e-5), ("1.0e-5", 1e-5), ("-2E+3", -2000.0), (".5", 0.5), ("3.", 3.0), ("1_000.5", 1000.5),
     (".inf", math.inf), ("-.Inf", -math.inf)],
)
def test_floats_follow_yaml_1_2(text: str, value: float) -> None:
    got = load_yaml(text)
    assert isinstance(got, float) and got == value
    assert float(text.replace("_", "").replace(".inf", "inf").replace(".Inf", "inf")) == value  # Python agrees


@pytest.mark.parametrize(("text", "value"), [("7", 7), ("0x10", 16), ("true", True), ("1e5x", "1e5x"),
                                             ("v1e5", "v1e5"), ("e5", "e5"), ("null", None), ("'1e-5'", "1e-5")])
def test_other_scalars_unchanged(text: str, value: object) -> None:
    assert load_yaml(text) == value
    assert type(load_yaml(text)) is type(value)


def test_nan_and_nesting() -> None:
    assert math.isnan(load_yaml(".nan"))
    assert load_yaml("a: {b: [1e-3, 2]}") == {"a": {"b": [0.001, 2]}}


def test_still_safe() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']")


def test_override_and_config_file_read_exponents(tmp_path: Path) -> None:
    assert parse_override("method_kwargs.scorer_weight_decay=1e-5") == (["method_kwargs", "scorer_weight_decay"], 1e-5)
    config = load_config("fednsl_synthetic", ["method_kwargs.kl_weight=1e-2"])
    assert config.method_kwargs["kl_weight"] == 0.01
    path = tmp_path / "c.yaml"
    path.write_text("method: fednsl\nrounds: 1\nmethod_kwargs:\n  kl_weight: 5e-2\n")
    assert load_config(path).method_kwargs["kl_weight"] == 0.05


@pytest.mark.parametrize(("text", "found", "line"), [
    ("a: &x 1\nb: *x", "&x", 1),
    ("&x [*x]", "&x", 1),
    ("a: 1\nb: [*x]", "*x", 2),
    ("a:\n  b: &big [1, 2]\n", "&big", 2),
])
def test_anchors_and_aliases_are_refused(text: str, found: str, line: int) -> None:
    with pytest.raises(YamlAliasError) as info:
        load_yaml(text)
    assert isinstance(info.value, yaml.YAMLError)
    msg = yaml_error_line(info.value)
    assert msg.startswith(f"line {line}, column ") and f"anchors and aliases are not allowed (found {found})" in msg


def test_quoted_ampersands_and_stars_are_text() -> None:
    assert load_yaml("a: '&x [*x]'\nb: \"*\"\nc: x*y") == {"a": "&x [*x]", "b": "*", "c": "x*y"}


@pytest.mark.parametrize(("text", "words"), [
    ("[1", "line 1, column 3: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)"),
    ("*", "line 1, column 2: expected alphabetic or numeric character, but found the end of the text"),
    ("a: 1\n b: 2", "line 2, column 3: mapping values are not allowed here"),
])
def test_parser_errors_on_one_line(text: str, words: str) -> None:
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml(text)
    msg = yaml_error_line(info.value)
    assert words in msg and "\n" not in msg
