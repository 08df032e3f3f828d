"""LR-XFL (Zhang et al., AAAI 2024): rule-alignment FL with entropy-based LENs, on the numerical experiment."""

from __future__ import annotations

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.lrxfl.client import LRXFLClient
from fednsl.methods.lrxfl.config import LRXFLConfig
from fednsl.methods.lrxfl.explain import LocalExplanation, explain_class
from fednsl.methods.lrxfl.len import EntropyLinear, entropy_logic_loss, len_outputs, make_len
from fednsl.methods.lrxfl.logic import ConceptSpace, f1_macro, f1_macro_from_counts, join, term_table
from fednsl.methods.lrxfl.strategy import LRXFLStrategy, beam_search, select_clients
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.numeric.client import NUMERIC_HEADLINE, client_data_summary
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation

__all__ = [
    "ConceptSpace",
    "EntropyLinear",
    "LRXFLClient",
    "LRXFLConfig",
    "LRXFLStrategy",
    "LocalExplanation",
    "beam_search",
    "build_lrxfl",
    "entropy_logic_loss",
    "explain_class",
    "f1_macro",
    "f1_macro_from_counts",
    "join",
    "len_outputs",
    "make_len",
    "select_clients",
    "term_table",
]


@register_method(
    "lrxfl",
    doc="LR-XFL: logic-rule-weighted aggregation of entropy LENs (Zhang et al. 2024), numeric",
    headline=NUMERIC_HEADLINE,
)
def build_lrxfl(config: RunConfig) -> Federation:
    cfg = build_kwargs(LRXFLConfig, config.method_kwargs, "method_kwargs (lrxfl)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (lrxfl)")
    parts = make_numeric_federation(data_cfg, config.seed)
    space = ConceptSpace.from_raw(cfg.concept_thresholds, data_cfg.input_center, data_cfg.input_scale)
    tau = cfg.concept_temperature / data_cfg.input_scale
    init = get_weights(make_len(space.size, data_cfg.classes, cfg.hidden, cfg.temperature, seed=config.seed))
    clients = {
        cid: LRXFLClient(cid, d, space, tau, data_cfg.classes, cfg.hidden, cfg.temperature) for cid, d in parts.items()
    }
    return Federation(LRXFLStrategy(init, cfg, data_cfg, space), clients, client_data_summary(parts))


from fednsl.methods.lrxfl import plots as _plots  # noqa: E402,F401  (registers the curated figure)
