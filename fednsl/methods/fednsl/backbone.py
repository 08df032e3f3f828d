"""Federated feature backbone: a relation classifier over annotation features, trained with FedAvg (spec §8.7 ii).

Model (per document, all entity pairs at once):

    e_i   = ReLU(W_e f_i + c_e)                               f_i: entity features (text vector, type, stats)
    s(h,t) = W_2 ReLU(W_1 [e_h, e_t, e_h ⊙ e_t, g(h,t)] + c_1) + c_2 ∈ R^R,   x_r(h,t) = σ(s_r(h,t))

with g(h, t) the pair features of :mod:`kg.backbones.text_features`. Each client trains on the seen-combo
entity pairs of its *training* documents (multi-label BCE over the R relations; hold-out and test documents
are never used), and the server averages the weights (FedAvg, McMahan et al. 2017) — a separate federated
run on the project's federation core (:class:`fednsl.federation.runner.InProcessRunner`) before the FedNSL
rounds: ``rounds`` communication rounds of ``local_epochs`` Adam epochs each. Only weights and example counts
leave a client.

Probabilities (docs/methods/fednsl_calibration.md): the loss weights each relation's positives by
``pos_weight`` — ``sqrt`` (default): w_r = min(pos_weight_max, neg_r / pos_r)^½ from the client's own training
labels, ``balanced``: without the root, ``none``: plain BCE — and after training each client fits a per-relation
map logit → probability on the seen-combo cells of its *hold-out* documents (``calibration``: ``sigmoid``
(Platt, default) | ``isotonic`` | ``none`` = σ; :mod:`kg.backbones.calibration`; relations with fewer than
``calibration_min_positives`` hold-out positives use the client's pooled map). With ``calibration_sharing:
federated`` (default) the clients then exchange their Platt maps in one ``calibrate`` round on the federation core
— two floats and a positive count per relation (``CALIBRATION_SCHEMA``) — and each adopts the positives-weighted
mean map for the relations it has none for, so the relations of combos it never sees are scored on the scale
their owners calibrated (``local``: the pooled map, as before). ``values`` returns the calibrated probabilities,
``logits`` the raw scores.

The trained weights are cached under ``$FEDNSL_CACHE/backbones/<key>`` (key = hash of the clients' training
document ids, combos, options — loss and calibration options included —, seed and vocabulary sizes); the
calibration maps are refitted (deterministically) at every ``prepare``, so runs that share data split and seed (a λ sweep,
a resumed run) reuse the same backbone; the sub-run's metrics.jsonl is kept beside them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from fednsl.common.fedavg import FedAvgConfig, FedAvgStrategy
from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.config import FederationConfig, RunConfig
from fednsl.federation.records import ArraySpec, Message, Schema
from fednsl.federation.roles import Client, Metrics, Stage, Strategy, handles
from fednsl.federation.runner import Federation, InProcessRunner
from kg.backbones.base import Backbone, ClientDocs, cache_dir, register_backbone
from kg.backbones.calibration import (
    CALIBRATIONS,
    RelationCalibrator,
    fit_relation_calibrator,
    shared_platt,
    sigmoid,
)
from kg.backbones.memory import DEFAULT_LIMIT_GB, FLOAT_BYTES, check_documents, rows_per_chunk
from kg.backbones.text_features import PAIR_FEATURES, DocFeatures, doc_features, embed_strings, resolve_text
from kg.documents import Document, Vocab
from kg.seeding import seeded_global_rng
from kg.split import Combo, query_mask

__all__ = [
    "FederatedFeaturesOptions",
    "PairScorer",
    "FederatedFeatures",
    "TrainPairs",
    "POS_WEIGHTS",
    "CALIBRATION_SHARING",
    "CALIBRATION_SCHEMA",
    "positive_weights",
]

log = logging.getLogger("fednsl.backbones")

POS_WEIGHTS = ("none", "sqrt", "balanced")
CALIBRATION_SHARING = ("federated", "local")
# options that leave the trained weights unchanged, so not part of the cache key
NOT_IN_KEY = ("cache", "memory_limit_gb", "calibration_sharing", "parallelism")

#: A client's ``calibrate`` reply: its own Platt maps (a_r, b_r) and their positive counts, nothing else.
CALIBRATION_SCHEMA = Schema(
    arrays=(
        ArraySpec("platt", "weights", shape=("R", 2)),
        ArraySpec("positives", "counts", dtype="int", shape=("R",)),
    ),
    metrics=("num_examples",),
    required_metrics=("num_examples",),
)


def positive_weights(y: torch.Tensor, mode: str, cap: float) -> torch.Tensor | None:
    """(R,) BCE positive weights from a client's own labels ``y`` (P, R): w_r = min(cap, neg_r / pos_r)
    (``balanced``) or its square root (``sqrt``), 1 for relations without a positive; None for ``none``."""
    if mode == "none":
        return None
    pos = y.sum(0)
    neg = y.shape[0] - pos
    ratio = torch.where(pos > 0, neg / pos.clamp_min(1.0), torch.ones_like(pos)).clamp(1.0, float(cap))
    return ratio.sqrt() if mode == "sqrt" else ratio


@dataclass
class FederatedFeaturesOptions:
    text: str = "auto"  # minilm | hash | none | auto
    hash_dim: int = 256
    ent_hidden: int = 128
    hidden: int = 256
    rounds: int = 15  # FedAvg communication rounds
    local_epochs: int = 2
    batch_size: int = 512
    lr: float = 2e-3
    weight_decay: float = 1e-5
    cache: bool = True
    seed: int | None = None  # fixed backbone seed (None: the run seed), e.g. to share one backbone across seeds
    memory_limit_gb: float = DEFAULT_LIMIT_GB  # refuse documents whose scores would need more (kg.backbones.memory)
    pos_weight: str = "sqrt"  # BCE positive weight per relation: none | sqrt | balanced (module docstring)
    pos_weight_max: float = 100.0  # cap on the positive weight
    calibration: str = "sigmoid"  # per-relation map on the client's hold-out: isotonic | sigmoid | none
    calibration_min_positives: int = 3  # fewer positive hold-out cells → the relation uses the pooled map
    calibration_sharing: str = "federated"  # federated: clients exchange Platt maps (2 floats a relation) | local
    parallelism: int = 1  # clients trained at once (threads) in the FedAvg phase; the weights do not depend on it

    def __post_init__(self) -> None:
        if self.pos_weight not in POS_WEIGHTS:
            raise ValueError(
                f"federated-features backbone: pos_weight must be one of {POS_WEIGHTS}, got {self.pos_weight!r}"
            )
        if self.calibration not in CALIBRATIONS:
            raise ValueError(
                f"federated-features backbone: calibration must be one of {CALIBRATIONS}, got {self.calibration!r}"
            )
        if self.calibration_sharing not in CALIBRATION_SHARING:
            raise ValueError(
                "federated-features backbone: calibration_sharing must be one of "
                f"{CALIBRATION_SHARING}, got {self.calibration_sharing!r}"
            )
        if float(self.pos_weight_max) < 1:
            raise ValueError(f"federated-features backbone: pos_weight_max must be >= 1, got {self.pos_weight_max}")
        if int(self.calibration_min_positives) < 1:
            raise ValueError(
                "federated-features backbone: calibration_min_positives must be >= 1, "
                f"got {self.calibration_min_positives}"
            )
        for name in ("hash_dim", "ent_hidden", "hidden", "rounds", "local_epochs", "batch_size", "parallelism"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"federated-features backbone: {name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"federated-features backbone: lr must be > 0, got {self.lr}")


class PairScorer(nn.Module):
    """Entity encoder + pair MLP → R relation logits (module docstring)."""

    def __init__(
        self, ent_dim: int, pair_dim: int, num_relations: int, ent_hidden: int = 128, hidden: int = 256, seed: int = 0
    ):
        super().__init__()
        self.num_relations = num_relations
        with seeded_global_rng(seed):
            self.ent = nn.Sequential(nn.Linear(ent_dim, ent_hidden), nn.ReLU())
            self.pair = nn.Sequential(
                nn.Linear(3 * ent_hidden + pair_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_relations)
            )

    def forward(self, ent_h: torch.Tensor, ent_t: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        a, b = self.ent(ent_h), self.ent(ent_t)
        return self.pair(torch.cat([a, b, a * b, pair], dim=-1))

    def document_logits(self, feats: DocFeatures) -> torch.Tensor:
        """(N, N, R) logits of every ordered pair of one document, computed in row blocks of bounded memory."""
        ent = torch.from_numpy(feats.ent)
        n = ent.shape[0]
        e = self.ent(ent)
        pair = torch.from_numpy(feats.pair)
        width = 3 * e.shape[1] + pair.shape[-1] + self.pair[0].out_features + self.pair[-1].out_features
        step = rows_per_chunk(n, FLOAT_BYTES * width)
        blocks = []
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            a = e[lo:hi, None, :].expand(hi - lo, n, -1)
            b = e[None, :, :].expand(hi - lo, n, -1)
            blocks.append(self.pair(torch.cat([a, b, a * b, pair[lo:hi]], dim=-1)))
        return torch.cat(blocks) if blocks else self.pair(torch.zeros(0, 0, 3 * e.shape[1] + pair.shape[-1]))


@dataclass
class TrainPairs:
    """A client's training pairs: entity feature matrix (E, D), pair index rows (P, 2) into it, pair features
    (P, F), labels (P, R)."""

    ent: torch.Tensor
    index: torch.Tensor
    pair: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.index.shape[0])


def _train_pairs(docs: Sequence[Document], client: ClientDocs, feats: dict[str, DocFeatures], R: int) -> TrainPairs:
    ents, idx, pairs, ys = [], [], [], []
    offset = 0
    for doc in docs:
        if doc.num_entities == 0:
            continue
        f = feats[doc.doc_id]
        h, t = np.nonzero(query_mask(doc, client.combo))
        y = np.zeros((len(h), R), dtype=np.float32)  # labels of the queried pairs only (no (N, N, R) array)
        if doc.num_facts:
            row = {(a, b): i for i, (a, b) in enumerate(zip(h.tolist(), t.tolist()))}
            for a, r, b in doc.facts.tolist():
                if (a, b) in row:
                    y[row[(a, b)], r] = 1.0
        ents.append(f.ent)
        idx.append(np.stack([h + offset, t + offset], 1))
        pairs.append(f.pair[h, t])
        ys.append(y)
        offset += doc.num_entities
    if not idx:
        d = next(iter(feats.values())) if feats else None
        ed = d.ent.shape[1] if d is not None else 0
        pd = d.pair.shape[2] if d is not None else 0
        return TrainPairs(
            torch.zeros(0, ed), torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, pd), torch.zeros(0, R)
        )
    return TrainPairs(
        torch.from_numpy(np.concatenate(ents)),
        torch.from_numpy(np.concatenate(idx)).long(),
        torch.from_numpy(np.concatenate(pairs)),
        torch.from_numpy(np.concatenate(ys)),
    )


def _make_phase(model_factory: Callable[[], PairScorer], data: dict[str, TrainPairs], opts: FederatedFeaturesOptions):
    """Strategy and clients of the FedAvg phase."""

    class BackboneStrategy(FedAvgStrategy):
        """FedAvg with a train stage only (no evaluation stage: the backbone is evaluated inside FedNSL)."""

        def declare_stages(self) -> tuple[Stage, ...]:
            return tuple(st for st in super().declare_stages() if st.name == "train")

    class BackboneClient(Client):
        """Local Adam epochs on the client's training pairs; replies weights + example count only."""

        def __init__(self, cid: str, pairs: TrainPairs):
            self.cid, self.data = cid, pairs
            self.model = model_factory()

        @handles("train")
        def train(self, msg: Message) -> Message:
            set_weights(self.model, msg.arrays)
            gen = torch.Generator().manual_seed(msg.config_int("seed"))
            opt = torch.optim.Adam(self.model.parameters(), lr=msg.config_float("lr"), weight_decay=opts.weight_decay)
            d = self.data
            pw = positive_weights(d.y, opts.pos_weight, opts.pos_weight_max)
            bs = msg.config_int("batch_size")
            total, seen = 0.0, 0
            self.model.train()
            for _ in range(msg.config_int("local_epochs")):
                order = torch.randperm(len(d), generator=gen)
                for s in range(0, len(d), bs):
                    b = order[s : s + bs]
                    rows = d.index[b]
                    logits = self.model(d.ent[rows[:, 0]], d.ent[rows[:, 1]], d.pair[b])
                    loss = nn.functional.binary_cross_entropy_with_logits(logits, d.y[b], pos_weight=pw)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(b)
                    seen += len(b)
            return msg.reply(
                self.cid,
                arrays=get_weights(self.model),
                metrics={"num_examples": len(d), "train_loss": total / max(seen, 1)},
            )

    init = get_weights(model_factory())
    cfg = FedAvgConfig(lr=opts.lr, local_epochs=opts.local_epochs, batch_size=opts.batch_size)
    strategy = BackboneStrategy(init, cfg)
    clients = {cid: BackboneClient(cid, pairs) for cid, pairs in data.items() if len(pairs)}
    return strategy, clients


class _CalibrationStrategy(Strategy):
    """One ``calibrate`` stage: every client replies its own Platt maps; the server keeps their
    positives-weighted mean (:func:`kg.backbones.calibration.shared_platt`)."""

    def __init__(self) -> None:
        self.shared: tuple[np.ndarray, np.ndarray] | None = None

    def declare_stages(self) -> tuple[Stage, ...]:
        return (Stage("calibrate", self.configure_calibrate, self.aggregate_calibrate, reply=CALIBRATION_SCHEMA),)

    def configure_calibrate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("calibrate", rnd)

    def aggregate_calibrate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        if not replies:
            return {}
        platt, has = shared_platt(
            [r.arrays["platt"] for r in replies.values()], [r.arrays["positives"] for r in replies.values()]
        )
        self.shared = (platt, has)
        return {"shared_relations": int(has.sum())}


class _CalibrationClient(Client):
    """Replies its calibrator's own Platt maps and positive counts (``CALIBRATION_SCHEMA``)."""

    def __init__(self, cid: str, calibrator: RelationCalibrator):
        self.cid, self.calibrator = cid, calibrator

    @handles("calibrate")
    def calibrate(self, msg: Message) -> Message:
        counts = self.calibrator.counts  # (positives, negatives) per relation, over the same calibration cells
        cells = int(sum(counts[0])) if counts else 0
        return msg.reply(self.cid, arrays=self.calibrator.platt_arrays(), metrics={"num_examples": cells})


@register_backbone(
    "federated-features",
    FederatedFeaturesOptions,
    doc="pair classifier over mention/type/position features, trained with FedAvg on the clients",
)
class FederatedFeatures(Backbone):
    name = "federated-features"

    def __init__(self, options: FederatedFeaturesOptions | None = None):
        self.options = options or FederatedFeaturesOptions()
        self.model: PairScorer | None = None
        self.features: dict[str, DocFeatures] = {}
        self.message_hook: Callable[[str, str, Any], None] | None = None
        self.summary: dict[str, Any] = {}
        self.calibrators: dict[str, RelationCalibrator] = {}
        self._owner: dict[str, str] = {}  # doc id → client id (values(None, doc) uses the owner's calibration)

    # -- features (client-local) -------------------------------------------------------------------------
    def _client_features(self, client: ClientDocs, num_types: int, text: str) -> None:
        docs = [d for d in client.documents if d.doc_id not in self.features]
        strings = sorted({m.text for d in docs for m in d.mentions} | {n for d in docs for n in d.entity_names})
        vecs = embed_strings(strings, text, self.options.hash_dim, use_cache=self.options.cache)
        table = dict(zip(strings, vecs))
        dim = (
            vecs.shape[1]
            if len(strings)
            else (0 if text == "none" else (384 if text == "minilm" else self.options.hash_dim))
        )
        for d in docs:
            self.features[d.doc_id] = doc_features(d, num_types, table, dim)

    def _key(self, clients: Sequence[ClientDocs], R: int, T: int, text: str, seed: int) -> str:
        opts = {k: v for k, v in asdict(self.options).items() if k not in NOT_IN_KEY}
        blob = json.dumps(
            {
                "clients": [
                    [
                        c.cid,
                        c.combo.name,
                        sorted(c.combo.head_types),
                        sorted(c.combo.tail_types),
                        [d.doc_id for d in c.train],
                    ]
                    for c in clients
                ],
                "opts": opts,
                "text": text,
                "R": R,
                "T": T,
                "seed": seed,
                "v": 1,
            },
            sort_keys=True,
        )
        return hashlib.sha1(blob.encode()).hexdigest()[:20]

    def prepare(
        self,
        clients: Sequence[ClientDocs],
        relations: Vocab,
        entity_types: Vocab,
        seed: int,
        documents: Sequence[Document] = (),
    ) -> dict[str, Any]:
        opts = self.options
        if opts.seed is not None:
            seed = int(opts.seed)
        R, T = len(relations), len(entity_types)
        check_documents(
            [d for c in clients for d in c.documents],
            R,
            PAIR_FEATURES,
            opts.memory_limit_gb,
            "backbone.memory_limit_gb",
        )
        text = resolve_text(opts.text)
        t0 = time.perf_counter()
        for c in clients:
            self._client_features(c, T, text)
        t_feat = time.perf_counter() - t0
        any_feat = next(iter(self.features.values()))
        ent_dim, pair_dim = any_feat.ent.shape[1], any_feat.pair.shape[2]

        def factory() -> PairScorer:
            return PairScorer(ent_dim, pair_dim, R, opts.ent_hidden, opts.hidden, seed=seed)

        key = self._key(clients, R, T, text, seed)
        where = cache_dir("backbones", key) if opts.cache else None
        weights_file = where / "weights.npz" if where is not None else None
        model = factory()
        t1 = time.perf_counter()
        cached = where is not None and weights_file is not None and weights_file.exists()
        if where is not None and weights_file is not None and cached:
            with np.load(weights_file) as z:
                set_weights(model, {k: z[k] for k in z.files})
            info = json.loads((where / "summary.json").read_text()) if (where / "summary.json").exists() else {}
        else:
            data = {c.cid: _train_pairs(c.train, c, self.features, R) for c in clients}
            info = self._federate(factory, data, where, seed)
            set_weights(model, info.pop("weights"))
            if where is not None and weights_file is not None:
                np.savez(weights_file, **get_weights(model))  # type: ignore[arg-type]  # numpy's stub: allow_pickle
                (where / "summary.json").write_text(json.dumps(info, indent=1))
        model.eval()
        self.model = model
        t2 = time.perf_counter()
        self._owner = {d.doc_id: c.cid for c in clients for d in c.documents}
        self.calibrators = {
            c.cid: self.fit_calibration(c, opts.calibration, relations.names, opts.calibration_min_positives)
            for c in clients
        }
        if opts.calibration_sharing == "federated" and opts.calibration == "sigmoid":
            self._share_calibration(seed)
        self.summary = {
            "backbone": self.name,
            "text": text,
            "cache_key": key,
            "cached": bool(cached),
            "feature_time_s": t_feat,
            "train_time_s": t2 - t1,
            "cache_dir": None if where is None else str(where),
            "pos_weight": opts.pos_weight,
            "calibration": {cid: cal.summary() for cid, cal in self.calibrators.items()},
            "calibration_time_s": time.perf_counter() - t2,
            **info,
        }
        return self.summary

    def _federate(
        self, factory: Callable[[], PairScorer], data: dict[str, TrainPairs], where: Path | None, seed: int
    ) -> dict[str, Any]:
        opts = self.options
        strategy, clients = _make_phase(factory, data, opts)
        if not clients:
            raise ValueError("federated-features backbone: no client has training pairs (empty training documents?)")
        cfg = RunConfig(
            method="fedavg",
            rounds=opts.rounds,
            seed=seed,
            name="backbone",
            federation=FederationConfig(min_clients=1, parallelism=int(opts.parallelism)),
        )
        tmp = None
        run_dir = where / "run" if where is not None else Path(tmp := tempfile.mkdtemp(prefix="fednsl-backbone-"))
        if run_dir.exists():
            for p in sorted(run_dir.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
        run_dir.mkdir(parents=True, exist_ok=True)
        log.info("backbone: FedAvg pre-training, %d rounds over %d clients", opts.rounds, len(clients))
        result = InProcessRunner(
            Federation(strategy, dict(clients)), cfg, run_dir, progress=True, message_hook=self.message_hook
        ).run()
        losses = [
            r["train_loss"]
            for r in result.rows
            if r["scope"] == "server" and r["stage"] == "train" and "train_loss" in r
        ]
        info = {
            "rounds": opts.rounds,
            "train_loss": losses,
            "train_pairs": {c: len(p) for c, p in data.items()},
            "weights": strategy.weights,
        }
        if tmp is not None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        return info

    def _share_calibration(self, seed: int) -> None:
        """Federated calibration (module docstring): one ``calibrate`` round on the federation core, in which each
        client sends its own Platt maps; every client then adopts the aggregate for the relations it has no map
        for (the server's broadcast, applied here as the FedAvg phase's final weights are)."""
        strategy = _CalibrationStrategy()
        clients = {cid: _CalibrationClient(cid, cal) for cid, cal in self.calibrators.items()}
        cfg = RunConfig(
            method="calibration", rounds=1, seed=seed, name="calibration", federation=FederationConfig(min_clients=1)
        )
        with tempfile.TemporaryDirectory(prefix="fednsl-calibration-") as tmp:
            InProcessRunner(
                Federation(strategy, dict(clients)), cfg, Path(tmp), progress=False, message_hook=self.message_hook
            ).run()
        if strategy.shared is None:
            log.warning("backbone calibration: no client replied to the calibration round; maps stay local")
            return
        platt, has = strategy.shared
        adopted = {cid: cal.adopt_shared(platt, has) for cid, cal in self.calibrators.items()}
        log.info(
            "backbone calibration: %d relation(s) have a shared Platt map; adopted per client: %s",
            int(has.sum()),
            ", ".join(f"{cid} {n}" for cid, n in adopted.items()),
        )

    # -- inference (client-local) ----------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, doc: Document) -> np.ndarray:
        """(N, N, R) float32 raw relation logits s_r(h, t) of ``doc`` (before σ and calibration)."""
        if self.model is None:
            raise RuntimeError("federated-features backbone: call prepare() first")
        R = self.model.num_relations
        if doc.num_entities == 0:
            return np.zeros((0, 0, R), dtype=np.float32)
        if doc.doc_id not in self.features:
            raise ValueError(
                f"federated-features backbone: document {doc.doc_id} is not among the prepared clients' documents"
            )
        return self.model.document_logits(self.features[doc.doc_id]).numpy().astype(np.float32)

    def cells(self, docs: Sequence[Document], combo: Combo) -> tuple[np.ndarray, np.ndarray]:
        """Logits (M, R) and gold labels (M, R) of the ``combo`` pairs (``kg.split.query_mask``) of ``docs``."""
        R = self.model.num_relations if self.model is not None else 0
        zs, ys = [np.zeros((0, R), np.float32)], [np.zeros((0, R), np.float32)]
        for doc in docs:
            if doc.num_entities == 0:
                continue
            mask = query_mask(doc, combo)
            z = self.logits(doc)
            y = np.zeros(z.shape, dtype=np.float32)
            if doc.num_facts:
                f = doc.facts
                y[f[:, 0], f[:, 2], f[:, 1]] = 1.0
            zs.append(z[mask])
            ys.append(y[mask])
        return np.concatenate(zs), np.concatenate(ys)

    def calibration_cells(self, client: ClientDocs) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`cells` of the seen-combo pairs of ``client``'s hold-out documents (held-out *training*
        documents; test documents are never used)."""
        return self.cells(client.holdout, client.combo)

    def fit_calibration(
        self, client: ClientDocs, method: str, relation_names: Sequence[str] | None = None, min_positives: int = 3
    ) -> RelationCalibrator:
        """The client's per-relation calibration (:mod:`kg.backbones.calibration`) fitted on its hold-out cells."""
        z, y = self.calibration_cells(client)
        return fit_relation_calibrator(
            z, y, method, min_positives, f"backbone calibration, client {client.cid}", relation_names
        )

    def values(self, client: ClientDocs | None, doc: Document) -> np.ndarray:
        """(N, N, R) calibrated values of ``doc`` with ``client``'s calibration (``None``: the owner client's)."""
        z = self.logits(doc)
        n = doc.num_entities
        if n == 0:
            return z
        cid = client.cid if client is not None else self._owner.get(doc.doc_id)
        cal = self.calibrators.get(cid) if cid is not None else None
        if cal is None:
            if self.options.calibration != "none":
                raise ValueError(
                    f"federated-features backbone: no calibration for client {cid!r} (document {doc.doc_id})"
                )
            x = sigmoid(z).astype(np.float32)
        else:
            x = cal.predict(z)
        x[np.arange(n), np.arange(n)] = 0.0
        return x
