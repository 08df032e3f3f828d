"""The rule store: what a FedNSL run learned, per rule-head category ("triple", spec §2).

Per triple t = (head relation, head entity type, tail entity type) the store keeps the candidate bodies of
the latest round (J_t padded token tuples, spec §2 step 1) with

- the server's prior over them (T_θ renormalised over the J bodies; optional log-probs and sample counts n_j),
- the global (aggregated) posterior (spec §2 step 5),
- each client's posterior (Eq. 9/10), scorer weights w_i (Eq. 8) and bias, number of local instances,
- AMIE confidence counts (:class:`rules.measures.RuleCounts`), either set globally or per client -- counts are
  additive, so the global counts default to the sum over the clients that reported them;
- optionally a reading order (:class:`RankedRule` per rule, measured by :mod:`rules.reading_order`), which
  ``rules.tsv`` and the exports then follow instead of the posterior.

A strategy calls :meth:`RuleStore.add_triple` when it broadcasts bodies and :meth:`RuleStore.record_client` /
:meth:`RuleStore.record_global` when posteriors come back (or :meth:`RuleStore.record_round` once per round),
then :meth:`RuleStore.save` writes ``RUN_DIR/rules.json`` (machine-readable, self-describing: relation and type
names included) and ``RUN_DIR/rules.tsv`` (one rule per line). :meth:`RuleStore.load` reads ``rules.json``.
"""

from __future__ import annotations

from rules.store.queries import QueryMixin
from rules.store.recording import RecordingMixin
from rules.store.records import (
    FORMAT,
    VERSION,
    ClientId,
    ClientRecord,
    RankedRule,
    RuleDiff,
    RuleRow,
    Triple,
    TripleRecord,
    kl_divergence,
    total_variation,
)
from rules.store.serialise import SerialiseMixin

__all__ = [
    "FORMAT",
    "VERSION",
    "ClientId",
    "ClientRecord",
    "RankedRule",
    "RuleDiff",
    "RuleRow",
    "RuleStore",
    "Triple",
    "TripleRecord",
    "kl_divergence",
    "total_variation",
]


class RuleStore(RecordingMixin, QueryMixin, SerialiseMixin):
    """Learned rules of a run: relation/type names plus one :class:`TripleRecord` per triple.

    relations: R relation names (token layout of :class:`rules.fol.RelationVocab`); types: entity type names
    (None: shown as ids); body_length: L of the padded bodies (3); meta: free-form run information.
    Recording (:mod:`.recording`), queries (:mod:`.queries`) and serialisation (:mod:`.serialise`) are its parts.
    """
