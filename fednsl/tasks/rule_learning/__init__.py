"""The rule-learning server shared by FedNSL's rule learners (documents and knowledge graphs): one proposal type,
one strategy base (statistics → pool → generator pre-training, proposals, the update after the clients' replies,
the rule store), one generator-options type and the rule-recall measures. The E-step lives in
:mod:`rules.posterior`; what differs between the learners is a named hook of
:class:`~fednsl.tasks.rule_learning.server.RuleLearningStrategy`."""

from fednsl.tasks.rule_learning.options import GeneratorOptions, ServerOptions
from fednsl.tasks.rule_learning.proposal import PROPOSAL_SCHEMA, Proposal, pad_bodies, strip
from fednsl.tasks.rule_learning.recall import rule_ranks, rule_recall
from fednsl.tasks.rule_learning.server import GLOBAL, Learner, RuleLearningStrategy, Stats, Update

__all__ = [
    "GLOBAL",
    "PROPOSAL_SCHEMA",
    "GeneratorOptions",
    "Learner",
    "Proposal",
    "RuleLearningStrategy",
    "ServerOptions",
    "Stats",
    "Update",
    "pad_bodies",
    "rule_ranks",
    "rule_recall",
    "strip",
]
