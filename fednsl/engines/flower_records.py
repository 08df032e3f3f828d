"""fednsl messages ⇄ Flower ``RecordDict`` (1:1), and stage names ⇄ Flower message types.

A :class:`fednsl.federation.records.Message` travels as one Flower ``RecordDict`` with four records:

============  ==================  ===============================================================
record name   Flower record type  content
============  ==================  ===============================================================
``arrays``    ``ArrayRecord``     ``Message.arrays`` (numpy ``.npy`` bytes: dtype and shape kept)
``config``    ``ConfigRecord``    ``Message.config`` (values Flower cannot hold — ``None``, empty,
                                  nested or mixed lists, dicts, ints beyond 64 bits — as JSON text)
``metrics``   ``MetricRecord``    ``Message.metrics``
``fednsl``    ``ConfigRecord``    the protocol tag: ``kind`` (the stage), ``round``, ``sender``, and
                                  a JSON ``layout`` (field order, which config keys are JSON)
============  ==================  ===============================================================

Flower routes a message by its ``message_type``, which must be ``train``, ``evaluate``, ``query`` or
``<one of these>.<python identifier>`` (``flwr.app.metadata.validate_message_type``). A fednsl stage
that already has this form keeps its name (``"train"``, ``"train.stats"``); any other stage
(``"share"``, ``"em.1"``, ``"calibrate.scale"``) travels as ``"query.<stage with non-identifier
characters replaced by _>"``. The exact stage name is always in the ``fednsl`` record, so the
mapping need not be invertible.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fednsl.federation.records import Message

CATEGORIES = ("train", "evaluate", "query")
ARRAYS, CONFIG, METRICS, META = "arrays", "config", "metrics", "fednsl"
_INT64 = (-(2**63), 2**63 - 1)


class RecordTranslationError(ValueError):
    """A message cannot be translated to or from Flower records; names the field."""


def message_type(stage: str) -> str:
    """The Flower message type that carries fednsl stage ``stage`` (see the module docstring)."""
    if stage in CATEGORIES:
        return stage
    category, dot, action = stage.partition(".")
    if dot and category in CATEGORIES and action.isidentifier():
        return stage
    action = re.sub(r"\W", "_", stage)
    if not action or not action.isidentifier():
        action = f"s_{action}"
    return f"query.{action}"


def _plain(value: Any) -> Any:
    """numpy scalars → Python scalars (Flower's records accept only Python types)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fits_config_record(value: Any) -> bool:
    scalar = (bool, int, float, str, bytes)
    if isinstance(value, scalar):
        return not (isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1])
    if isinstance(value, list) and value:
        kind = type(value[0])
        return kind in scalar and all(type(v) is kind for v in value) and all(_fits_config_record(v) for v in value)
    return False


def record_int(record: ConfigRecord, key: str) -> int:
    """``record[key]`` as an ``int`` (Flower types record values as a wide union); else a translation error."""
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordTranslationError(f"config record entry {key!r} must be an int, got {type(value).__name__}")
    return value


def record_bytes(record: ConfigRecord, key: str) -> bytes:
    """``record[key]`` as ``bytes``; anything else is a :class:`RecordTranslationError`."""
    value = record[key]
    if not isinstance(value, bytes):
        raise RecordTranslationError(f"config record entry {key!r} must be bytes, got {type(value).__name__}")
    return value


def to_recorddict(msg: Message) -> RecordDict:
    """Encode a fednsl message as a Flower ``RecordDict`` (see the module docstring for the layout)."""
    arrays = ArrayRecord()
    for name, value in msg.arrays.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise RecordTranslationError(
                f"{msg.kind} message from {msg.sender}: array {name!r} has dtype object; "
                "only numeric and bool arrays can travel"
            )
        arrays[name] = Array(arr)  # np.save bytes: dtype, shape (0-d included) and values exact
    config, as_json = ConfigRecord(), []
    for key, raw in msg.config.items():
        plain = _plain(raw)
        if _fits_config_record(plain):
            config[key] = plain
            continue
        try:
            config[key] = json.dumps(plain, allow_nan=True)
        except TypeError as exc:
            raise RecordTranslationError(
                f"{msg.kind} message from {msg.sender}: config entry {key!r} "
                f"({type(plain).__name__}) is neither a Flower config value nor JSON"
            ) from exc
        as_json.append(key)
    metrics = MetricRecord({k: _plain(v) for k, v in msg.metrics.items()})
    layout = {"arrays": list(msg.arrays), "config": list(msg.config), "metrics": list(msg.metrics), "json": as_json}
    meta = ConfigRecord({"kind": msg.kind, "round": int(msg.round), "sender": msg.sender, "layout": json.dumps(layout)})
    return RecordDict({ARRAYS: arrays, CONFIG: config, METRICS: metrics, META: meta})


def is_fednsl(content: RecordDict) -> bool:
    """Whether ``content`` carries a fednsl protocol message."""
    return META in content.config_records and "kind" in content.config_records[META]


def from_recorddict(content: RecordDict) -> Message:
    """Decode :func:`to_recorddict`'s output back into the identical fednsl message."""
    if not is_fednsl(content):
        raise RecordTranslationError(
            f"not a fednsl message: no {META!r} config record with a 'kind' (records: {sorted(content.keys())})"
        )
    meta = content.config_records[META]
    try:
        layout = json.loads(str(meta["layout"]))
        kind, rnd, sender = str(meta["kind"]), record_int(meta, "round"), str(meta["sender"])
    except (KeyError, ValueError) as exc:
        raise RecordTranslationError(f"fednsl record is malformed: {exc}") from exc
    where = f"{kind} message (round {rnd}) from {sender}"

    def record(kind_records, name):
        rec = kind_records.get(name)
        if rec is None:
            raise RecordTranslationError(f"{where}: record {name!r} is missing")
        return rec

    arr_rec = record(content.array_records, ARRAYS)
    cfg_rec = record(content.config_records, CONFIG)
    met_rec = record(content.metric_records, METRICS)
    for label, names, rec in (
        ("array", layout["arrays"], arr_rec),
        ("config entry", layout["config"], cfg_rec),
        ("metric", layout["metrics"], met_rec),
    ):
        extra = sorted(set(rec) - set(names))
        missing = [n for n in names if n not in rec]
        if extra or missing:
            raise RecordTranslationError(
                f"{where}: {label}s do not match the layout (missing {missing}, undeclared {extra})"
            )
    as_json = set(layout["json"])
    config = {}
    for key in layout["config"]:
        value = cfg_rec[key]
        config[key] = json.loads(value) if key in as_json else (list(value) if isinstance(value, list) else value)
    return Message(
        kind=kind,
        round=rnd,
        sender=sender,
        arrays={k: arr_rec[k].numpy() for k in layout["arrays"]},
        config=config,
        metrics={k: met_rec[k] for k in layout["metrics"]},
    )
