"""Knowledge-Injected Federated Learning (Fan et al. 2022): FedAvg through each client's T_{λ,g_p,g_r}.

``method: kifl`` builds M clients, each with private data and private knowledge models (a P-KM and an R-KM:
Python callables, rule files of :mod:`rules.knowledge`, or fitted on a private knowledge slice) and the
server's FedAvg (Alg. 1). ``with_km`` / ``federated`` give the paper's five approaches (§6.1): ML (F/F),
MLwKM (T/F), FL (F/T), FLwKM (T/T); the P-KM alone is :meth:`KIFLClient.pkm_counts`.
"""

from __future__ import annotations

from typing import Any, Mapping

from fednsl.common.torch_utils import get_weights
from fednsl.config import CONFIG_DIR, RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.kifl.client import ClientKnowledge, KIFLClient
from fednsl.methods.kifl.config import KIFLConfig, KIFLDataConfig
from fednsl.methods.kifl.data import ClientSplit, Dataset, load_dataset, partition
from fednsl.methods.kifl.fitted import KnowledgeFitter
from fednsl.methods.kifl.knowledge import PredictionKM, RangeKM, km_from_spec
from fednsl.methods.kifl.models import build_model
from fednsl.methods.kifl.strategy import KIFLStrategy
from fednsl.registry import Headline, build_kwargs, register_method
from kg.seeding import derive_seed

__all__ = [
    "KIFLClient",
    "KIFLConfig",
    "KIFLDataConfig",
    "KIFLStrategy",
    "build_kifl",
    "build_kifl_federation",
    "client_knowledge",
]

_ENTRY_KEYS = {"prediction", "range", "lam"}


def _entry(knowledge: Mapping[str, Any], cid: str, ids: list[str]) -> dict[str, Any]:
    unknown = sorted(set(knowledge) - set(ids) - {"all"})
    if unknown:
        raise ValueError(f"method_kwargs.knowledge: unknown client id(s) {unknown}; clients are {ids} (or 'all')")
    out: dict[str, Any] = {}
    for key in ("all", cid):
        part = knowledge.get(key)
        if part is None:
            continue
        if not isinstance(part, Mapping):
            raise ValueError(f"method_kwargs.knowledge.{key} must be a mapping with prediction/range/lam")
        bad = sorted(set(part) - _ENTRY_KEYS)
        if bad:
            raise ValueError(f"method_kwargs.knowledge.{key}: unknown key(s) {bad}; valid: {sorted(_ENTRY_KEYS)}")
        out.update(part)
    return out


def client_knowledge(
    cid: str, index: int, split: ClientSplit, ds: Dataset, cfg: KIFLConfig, seed: int, ids: list[str]
) -> tuple[ClientKnowledge, float]:
    """Build client ``cid``'s KMs from ``cfg.knowledge`` and its λ^m (the KMs are fitted on its slice only)."""
    entry = _entry(cfg.knowledge, cid, ids)
    fseed = derive_seed(seed, index, 0x4B4D)
    fitter = KnowledgeFitter(cid, split, ds.num_classes, ds.image_shape, float(ds.hi.max()), fseed)
    common: dict[str, Any] = dict(
        image_shape=ds.image_shape,
        feature_names=ds.feature_names,
        class_names=ds.class_names,
        base_dir=CONFIG_DIR.parent,
    )  # 'configs/kifl/…' paths of the shipped configs
    where = f"method_kwargs.knowledge[{cid}]"
    pkm = km_from_spec(
        entry.get("prediction"),
        "prediction",
        ds.num_classes,
        where=f"{where}.prediction",
        fit=lambda n, o, v: fitter(n, o, v, "prediction"),
        **common,
    )
    assert pkm is None or isinstance(pkm, PredictionKM)  # kind "prediction" builds a P-KM
    fitter.pkm = pkm
    rkm = km_from_spec(
        entry.get("range"),
        "range",
        ds.num_classes,
        where=f"{where}.range",
        fit=lambda n, o, v: fitter(n, o, v, "range"),
        **common,
    )
    assert rkm is None or isinstance(rkm, RangeKM)  # kind "range" builds an R-KM
    lam = float(cfg.lam_per_client.get(cid, entry.get("lam", cfg.lam)))
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"{where}: λ must be in [0, 1], got {lam}")
    return ClientKnowledge(cid, ds.num_classes, pkm, rkm, cfg.conflict), lam


def build_kifl_federation(
    ds: Dataset,
    cfg: KIFLConfig,
    dcfg: KIFLDataConfig,
    seed: int,
    knowledge_cache: dict[Any, tuple[ClientKnowledge, float]] | None = None,
) -> Federation:
    """The federation for a loaded data set; ``knowledge_cache`` reuses fitted KMs across runs of one seed."""
    bad = sorted(
        set(cfg.lam_per_client) - {f"c{i:0{len(str(dcfg.num_clients - 1))}d}" for i in range(dcfg.num_clients)}
    )
    splits = partition(
        ds,
        dcfg.num_clients,
        dcfg.classes_per_client,
        dcfg.train_fraction,
        dcfg.km_fraction,
        dcfg.test_ratio,
        seed,
        dcfg.max_samples,
    )
    ids = sorted(splits)
    if bad:
        raise ValueError(f"method_kwargs.lam_per_client: unknown client id(s) {bad}; clients are {ids}")

    def make_model() -> Any:
        return build_model(cfg.model, ds.num_features, ds.num_classes, cfg.hidden, ds.image_shape, seed)

    clients: dict[str, KIFLClient] = {}
    for i, cid in enumerate(ids):
        entry = _entry(cfg.knowledge, cid, ids)
        # the knowledge slice and test rows do not depend on train_fraction; the paper's lookup R-KM does
        data_key = {k: v for k, v in vars(dcfg).items() if k != "train_fraction" or "paper_lookup" in repr(entry)}
        key = (seed, repr(sorted(data_key.items())), repr(entry), cfg.conflict, cid)
        if knowledge_cache is not None and key in knowledge_cache:
            know, lam = knowledge_cache[key]
            lam = float(cfg.lam_per_client.get(cid, entry.get("lam", cfg.lam)))
        else:
            know, lam = client_knowledge(cid, i, splits[cid], ds, cfg, seed, ids)
            if knowledge_cache is not None:
                knowledge_cache[key] = (know, lam)
        clients[cid] = KIFLClient(cid, splits[cid], make_model(), know, lam, cfg, ds.scale)
    init = get_weights(make_model())
    summary = {
        "dataset": ds.name,
        "source": ds.source,
        "clients": len(clients),
        "train_examples": int(sum(len(s.y_train) for s in splits.values())),
        "test_examples": int(sum(len(s.y_test) for s in splits.values())),
        "knowledge_slice": int(sum(len(s.y_km) for s in splits.values())),
        "classes": {cid: list(s.classes) for cid, s in splits.items()},
    }
    return Federation(KIFLStrategy(init, cfg), clients, summary)


@register_method(
    "kifl",
    doc="Knowledge-injected FL: FedAvg through T_{λ,g_p,g_r} per client (Fan et al. 2022)",
    headline=(Headline("accuracy", "evaluate/accuracy"), Headline("rule violations (POV)", "evaluate/pov")),
)
def build_kifl(config: RunConfig) -> Federation:
    cfg = build_kwargs(KIFLConfig, config.method_kwargs, "method_kwargs (kifl)")
    dcfg = build_kwargs(KIFLDataConfig, config.data, "data (kifl)")
    return build_kifl_federation(load_dataset(dcfg.name, dcfg.path), cfg, dcfg, config.seed)


from fednsl.methods.kifl import plots as _plots  # noqa: E402,F401  (registers the curated figure)
