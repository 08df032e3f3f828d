"""Path grounding: fuzzy path scores of rule bodies over document graphs (FedNSL Eq. 8, LogiRE PathScorer).

Public API:
    path_scores(values, bodies, semiring="max-product") -> (B, J, N, N)
    best_paths(values, bodies, doc_index, head, tail) -> BestPaths (argmax entity paths, per-edge values)
    path_values(values, bodies, doc_index, entities) -> (scores, edge_values) along cached paths
    build_plan(bodies, stay_id) -> BodyPlan (prefix trie, reusable across document batches)
    with_inverse_and_stay(rel_values, n_entities) -> (B, N, N, 2R+1) channel tensor
    logire_path_scores / to_log_transitions: LogiRE's max-plus reference
"""

from kg.grounding.checks import SEMIRINGS, GroundingInputError
from kg.grounding.engine import path_scores, stay_acts_as_identity
from kg.grounding.explain import BestPaths, best_paths, path_values
from kg.grounding.kernels import BACKENDS, HAVE_NUMBA
from kg.grounding.plan import BodyPlan, build_plan
from kg.grounding.reference import logire_path_scores, to_log_transitions
from kg.grounding.values import with_inverse_and_stay

__all__ = [
    "BACKENDS",
    "HAVE_NUMBA",
    "SEMIRINGS",
    "BestPaths",
    "BodyPlan",
    "GroundingInputError",
    "best_paths",
    "build_plan",
    "logire_path_scores",
    "path_scores",
    "path_values",
    "stay_acts_as_identity",
    "to_log_transitions",
    "with_inverse_and_stay",
]
