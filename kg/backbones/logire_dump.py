"""Backbone values imported from a LogiRE-format dump (ATLOP, GAIN, ... scores; spec §5.1, §8.7 i).

The dump is what LogiRE's ``FeatureReader`` consumes: a ``torch.save``-d dict
``{'train'|'dev'|'test': [{'N': int, 'logits': (N, N, R) tensor, 'labels': ..., 'in_train': ...}, ...]}``.
Items are matched to documents by ``title`` when the items carry one (``'title'`` key), else by position
among the corpus documents of the same split (the docred reader keeps file order). Values are σ(logits); a
dump with R+1 channels has its first channel ("Na") dropped. Nothing is trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kg.backbones.base import Backbone, ClientDocs, check_values, register_backbone
from kg.documents import Document, Vocab

__all__ = ["LogireDumpOptions", "LogireDump", "load_dump"]


@dataclass
class LogireDumpOptions:
    path: str = ""
    splits: tuple[str, ...] = ("train", "dev", "test")


def load_dump(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Read and check a LogiRE dump; raises ValueError naming the file and the bad field."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"logire-dump backbone: no dump file at {path}")
    try:  # weights_only: a dump is tensors, numbers, strings, lists and dicts; nothing is unpickled
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle with code, a torn file, not a torch file at all
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ValueError(
            f"{path}: cannot be read as plain tensors (torch.load weights_only=True: {first}); "
            "expected a dict of lists of {N, logits, ...} tensors"
        ) from None
    if not isinstance(data, dict) or not any(k in data for k in ("train", "dev", "test")):
        raise ValueError(f"{path}: expected a dict with 'train'/'dev'/'test' lists of {{N, logits, ...}}")
    for split, items in data.items():
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"{path}: split {split!r} must be a list of items")
        for i, it in enumerate(items):
            if not isinstance(it, dict) or "logits" not in it:
                raise ValueError(f"{path}: {split}[{i}] lacks 'logits'")
    return data


@register_backbone("logire-dump", LogireDumpOptions, doc="sigmoid of logits from a LogiRE-format dump (ATLOP/GAIN)")
class LogireDump(Backbone):
    name = "logire-dump"

    def __init__(self, options: LogireDumpOptions | None = None):
        self.options = options or LogireDumpOptions()
        self.by_doc: dict[str, np.ndarray] = {}
        self.num_relations = 0

    def prepare(
        self,
        clients: Sequence[ClientDocs],
        relations: Vocab,
        entity_types: Vocab,
        seed: int,
        documents: Sequence[Document] = (),
    ) -> dict[str, Any]:
        """Match dump items to ``documents`` (the whole corpus, in reader order)."""
        num_relations = len(relations)
        if not self.options.path:
            raise ValueError("logire-dump backbone: set backbone.path to the dump file")
        data = load_dump(self.options.path)
        self.num_relations = num_relations
        docs = list(documents) if documents else [d for c in clients for d in c.documents]
        matched = 0
        for split in self.options.splits:
            items = data.get(split, [])
            of_split = [d for d in docs if d.split == split]
            titled = all("title" in it for it in items)
            by_title = {str(it["title"]): it for it in items} if titled else {}
            for pos, doc in enumerate(of_split):
                it = by_title.get(doc.doc_id) if titled else (items[pos] if pos < len(items) else None)
                if it is None:
                    continue
                logits = torch.as_tensor(it["logits"]).float()
                if logits.dim() == 3 and logits.shape[-1] == num_relations + 1:
                    logits = logits[..., 1:]
                self.by_doc[doc.doc_id] = check_values(
                    torch.sigmoid(logits).numpy(), doc, num_relations, f"{self.options.path} [{split}]"
                )
                matched += 1
        return {"backbone": self.name, "path": str(self.options.path), "matched_documents": matched}

    def values(self, client: ClientDocs | None, doc: Document) -> np.ndarray:
        if doc.doc_id not in self.by_doc:
            raise ValueError(
                f"logire-dump backbone: no dump item for document {doc.doc_id} (split {doc.split}) "
                f"in {self.options.path}"
            )
        return self.by_doc[doc.doc_id]
