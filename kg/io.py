"""One entry point for every data source: ``load_corpus(path, format="auto")``.

Formats:

- ``dwie``: official DWIE annotations (``dwie_annos.tar.gz``, a folder of ``DW_*.json``, a checkout);
- ``docred``: LogiRE/DocRED docred-style folder or file (``train_annotated.json``, ``dev.json``, ...);
- ``synthetic``: a folder written by :func:`kg.synthetic.write` (docred + ``synthetic.json``), a JSON/YAML
  generator config, or the string ``"synthetic"`` / ``"synthetic:seed=3,num_documents=100"`` (in memory).

Detection (``format="auto"``): the ``synthetic`` strings; a folder with ``synthetic.json`` → synthetic;
DWIE sources (checked first, so a folder holding both ``dwie_annos.tar.gz`` and ``docred_style/``, like
the shared data, reads the complete 802 documents) → dwie; docred files → docred.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kg.documents import Corpus, DataError

__all__ = ["FORMATS", "detect_format", "load_corpus", "missing_training_data"]

FORMATS = ("auto", "dwie", "docred", "synthetic")


def _is_synthetic_spec(path: str | Path) -> bool:
    text = str(path)
    return text == "synthetic" or text.startswith("synthetic:")


def detect_format(path: str | Path) -> str:
    """``"dwie"``, ``"docred"`` or ``"synthetic"`` for ``path``; :class:`DataError` when none fits."""
    from kg.docred import is_docred_source
    from kg.dwie import is_dwie_source
    from kg.synthetic import MANIFEST

    if _is_synthetic_spec(path) and not Path(path).exists():
        return "synthetic"
    p = Path(path)
    if not p.exists():
        raise DataError(f"no such file or folder: {p}")
    if p.is_dir() and (p / MANIFEST).is_file():
        return "synthetic"
    if p.is_file() and p.suffix in (".yaml", ".yml"):
        return "synthetic"
    if is_dwie_source(p):
        return "dwie"
    if is_docred_source(p):
        return "docred"
    if p.is_file() and p.suffix == ".json":
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            obj = None
        if isinstance(obj, dict) and set(obj) <= {f.name for f in _config_fields()} | {"seed"}:
            return "synthetic"
    raise DataError(
        f"cannot tell the format of {p}: expected DWIE annotations (dwie_annos.tar.gz, DW_*.json), a "
        "docred-style folder/file (train_annotated.json, dev.json, test.json) or a synthetic folder"
    )


def _config_fields() -> tuple[dataclasses.Field, ...]:
    from kg.synthetic import PlantedRuleConfig

    return dataclasses.fields(PlantedRuleConfig)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _load_synthetic(path: str | Path) -> Corpus:
    from kg.docred import read_docred
    from kg.synthetic import MANIFEST, PlantedRuleConfig, generate, rules_from_manifest

    if _is_synthetic_spec(path) and not Path(path).exists():
        options: dict[str, Any] = {}
        spec = str(path).partition(":")[2]
        for item in filter(None, (s.strip() for s in spec.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise DataError(f"synthetic option {item!r} must read key=value (e.g. synthetic:seed=3)")
            options[key.strip()] = _parse_value(value.strip())
        seed = int(options.pop("seed", 0))
        corpus, _ = generate(PlantedRuleConfig.from_dict(options), seed)
        return corpus
    p = Path(path)
    if p.is_dir():
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
        corpus = read_docred(p)
        rules = rules_from_manifest(p)
        corpus.name = "synthetic"
        corpus.meta.update(
            {
                "format": "synthetic",
                "seed": manifest.get("seed"),
                "ner_groups": manifest.get("ner_groups"),
                "planted_rules": [r.text for r in rules],
                "config": manifest.get("config"),
            }
        )
        return corpus
    if p.suffix in (".yaml", ".yml"):
        from kg.yaml_io import load_yaml

        data = load_yaml(p.read_text(encoding="utf-8")) or {}
    else:
        data = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise DataError("a synthetic config must be a mapping of PlantedRuleConfig fields", file=str(p))
    data = dict(data)
    seed = int(data.pop("seed", 0))
    try:
        corpus, _ = generate(PlantedRuleConfig.from_dict(data), seed)
    except DataError as exc:
        raise DataError(exc.reason, file=str(p)) from None
    return corpus


def load_corpus(path: str | Path, format: str = "auto", skip_bad: bool = False) -> Corpus:
    """Read any supported source into a :class:`~kg.documents.Corpus` (see the module docstring).

    ``skip_bad``: skip and count (``corpus.report.skipped``) documents with bad input instead of raising
    :class:`~kg.documents.DataError` (which names the file and document id).
    """
    if format not in FORMATS:
        raise DataError(f"unknown format {format!r} (choose from {', '.join(FORMATS)})")
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "synthetic":
        return _load_synthetic(path)
    if fmt == "dwie":
        from kg.dwie import read_dwie

        return read_dwie(path, skip_bad=skip_bad)
    from kg.docred import read_docred

    return read_docred(path, skip_bad=skip_bad)


def missing_training_data(corpus: Corpus, path: str | Path) -> DataError | None:
    """What ``corpus`` (read from ``path``) lacks to be trained on, naming its file(s): no documents, no document
    with an entity, or no relation fact; None when it has documents with entities and facts.

    The error's :attr:`~kg.documents.DataError.file` is the one split file of a docred-style folder (or
    ``folder (a.json, b.json)`` when several), else ``path``; callers add what their method does with the data."""
    from kg.docred import docred_files

    p = Path(path)
    files = docred_files(p) if p.is_dir() and corpus.report.format in ("docred", "synthetic", "") else []
    where = str(files[0]) if len(files) == 1 else f"{p} ({', '.join(f.name for f in files)})" if files else str(p)
    docs = corpus.documents
    if not docs:
        skipped = corpus.report.skipped
        if skipped:
            why = f"no documents: all {len(skipped)} were skipped as bad input (data.skip_bad)"
        elif files:
            why = "no documents (an empty list)" if len(files) == 1 else "no documents (each file holds an empty list)"
        else:
            why = "no documents"
        return DataError(why, file=where)
    with_entities = [d for d in docs if d.num_entities > 0]
    if not with_entities:
        return DataError(f"none of the {len(docs)} documents has an entity (a concept with a mention)", file=where)
    if not any(len(d.facts) for d in with_entities):
        return DataError(
            f"the {len(with_entities)} documents with entities hold no relation facts (labels between entities)",
            file=where,
        )
    return None
