"""Property-based fuzzing of every method's reply schemas: a random reply is accepted or rejected with an
InvalidMessageError (a ValueError) naming a field of the message — never any other exception."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fednsl.federation.records import (
    ArraySpec,
    InvalidMessageError,
    Message,
    Schema,
    validate,
)
from fednsl.pipeline import build_federation
from tests.fednsl.federation.tiny_configs import TINY, tiny


@functools.cache
def schemas_of(method: str) -> dict[str, Schema]:
    """stage → reply schema of ``method``, for every stage of its first rounds and every ``aggregate_*``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, Schema] = {}
    try:
        strat = build_federation(tiny(method)).strategy
        stages = {s for r in range(1, 6) for s in strat.stages(r)}
        for name in dir(strat):
            if name.startswith("aggregate_"):
                stages |= {name[len("aggregate_"):], name[len("aggregate_"):].replace("_", ".")}
        for stage in sorted(stages):
            try:
                out[stage] = strat.reply_schema(stage)
            except (NotImplementedError, KeyError, ValueError):
                continue
    finally:
        torch.set_num_threads(n)
    return out


DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.complex64, np.str_, object]
SPECIAL = [np.nan, np.inf, -np.inf, -1.0, 0.0, 1.0, 1e30, -1e30, 0.5, 1e9]


@st.composite
def arrays(draw) -> object:
    """A random array (any dtype, 0-3 dims, special values), or occasionally not an array at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from([None, [1.0, 2.0], "x", 3, {"a": 1}]))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    size = int(np.prod(shape)) if shape else 1
    vals = draw(st.lists(st.sampled_from(SPECIAL), min_size=size, max_size=size))
    if dtype is object:
        return np.array(vals + [None], dtype=object)[:size].reshape(shape)
    if dtype is np.str_:
        return np.array([str(v) for v in vals]).reshape(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        base = np.array(vals, dtype=np.float64).reshape(shape)
        if np.issubdtype(dtype, np.integer):
            base = np.nan_to_num(base, nan=0, posinf=10**6, neginf=-(10**6)).clip(-(10**6), 10**6)
        return base.astype(dtype)


@st.composite
def replies(draw, schema: Schema) -> Message:
    """A reply built around ``schema``: declared fields (some missing), plus stray arrays/metrics/config."""
    specs: list[ArraySpec] = list(schema.arrays)
    arrs = {s.name: draw(arrays()) for s in specs if draw(st.booleans()) or s.required and draw(st.booleans())}
    if draw(st.integers(0, 4)) == 0:
        arrs[draw(st.sampled_from(["extra", "raw_x", specs[0].name + "_" if specs else "w"]))] = draw(arrays())
    names = list(schema.metrics) or ["num_examples"]
    metric_value = st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=True, allow_infinity=True),
                             st.sampled_from([None, "1", True, [1]]))
    metrics = draw(st.dictionaries(st.sampled_from([*names, "leak"]), metric_value, max_size=3))
    config = draw(st.dictionaries(st.sampled_from([*schema.config, "note"]), st.sampled_from([1, "a", None]),
                                  max_size=2))
    return Message(kind="stage", round=draw(st.integers(0, 3)), sender="c0", arrays=arrs, config=config,
                   metrics=metrics)


def _check(schema: Schema, msg: Message) -> None:
    try:
        validate(msg, schema, expected_kind="stage", expected_round=2)
    except InvalidMessageError as exc:
        fields = {"kind", "round", *msg.arrays, *msg.metrics, *msg.config, *schema.array_names(), *schema.metrics}
        assert exc.field in fields, (exc.field, str(exc))
        assert isinstance(exc, ValueError) and exc.field in str(exc)


@pytest.mark.parametrize("method", sorted(TINY))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_replies_are_accepted_or_rejected_naming_a_field(method: str, data) -> None:
    schemas = schemas_of(method)
    assert schemas and any(s.arrays or s.metrics for s in schemas.values()), method
    stage = data.draw(st.sampled_from(sorted(schemas)))
    _check(schemas[stage], data.draw(replies(schemas[stage])))


@settings(max_examples=200, deadline=None)
@given(arr=arrays(), kind=st.sampled_from(["weights", "distribution", "counts", "ids", "mask"]),
       dtype=st.sampled_from(["float", "int", "bool"]), shaped=st.booleans())
def test_one_field_of_any_kind(arr, kind, dtype, shaped) -> None:
    """Single-field schemas of every kind, with and without a declared shape (incl. 0-d arrays)."""
    spec = ArraySpec("f", kind, dtype=dtype, shape=("N", None) if shaped else None)  # type: ignore[arg-type]
    _check(Schema(arrays=(spec,)), Message(kind="stage", round=2, sender="c0", arrays={"f": arr}))


def test_a_valid_reply_passes() -> None:
    """Guard: the checker does not reject everything (a well-formed weights reply is accepted)."""
    schema = Schema(arrays=(ArraySpec("w", "weights"),), metrics=("num_examples",))
    validate(Message("stage", 2, "c0", {"w": np.ones(3)}, metrics={"num_examples": 3}), schema, "stage", 2)


@pytest.mark.parametrize("value", [0.5, 1.0])
def test_zero_dimensional_distribution_is_rejected_not_crashed(value: float) -> None:
    """Found by the fuzzing above: a 0-d array for a distribution without a declared shape."""
    schema = Schema(arrays=(ArraySpec("p", "distribution"),))
    with pytest.raises(InvalidMessageError, match="'p'"):
        validate(Message("stage", 2, "c0", {"p": np.array(value)}), schema, "stage", 2)
