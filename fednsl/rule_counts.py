"""Rule confidence counts for a run's rules.json, at the end of a run and for old runs (``fednsl rules counts``).

AMIE counts (support, body size, PCA body size, head size; :mod:`rules.measures`) make ``fednsl rules list``
show confidences and ``fednsl rules export --format anyburl|amie`` write usable lines. Each client counts on its
own training documents and the counts are summed (they are additive), as a federation would compute them
(:meth:`rules.store.RuleStore.count_clients`). The documents come from the method's declared
``rule_documents`` hook (``@register_method(rule_documents=...)``, :func:`fednsl.registry.rule_documents_hook`);
methods that record counts while training (fednsl-kg) need none, and their counts are left as they are.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fednsl.config import RunConfig
from fednsl.registry import rule_documents_hook

log = logging.getLogger("fednsl.rule_counts")


@dataclass
class CountReport:
    """What :func:`count_rules` did: ``source`` is "computed", "recorded" (counts were already complete) or
    "unavailable" (counts missing and the method declares no documents)."""

    source: str
    triples: int
    missing_before: int
    computed_triples: int = 0
    rules: int = 0
    clients: int = 0
    documents: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))

    def line(self) -> str:
        if self.source == "computed":
            return (
                f"counted {self.rules} rules of {self.computed_triples} triples on {self.documents} training "
                f"documents of {self.clients} clients ({self.seconds:.1f} s)"
            )
        if self.source == "recorded":
            return f"all {self.triples} triples already have confidence counts (--recount counts them again)"
        return f"{self.missing_before} of {self.triples} triples have no confidence counts"


def count_rules(
    run_dir: Path | str, config: RunConfig, federation: Any = None, *, recount: bool = False
) -> CountReport | None:
    """Add confidence counts to ``RUN_DIR/rules.json`` (and rules.tsv); None when the run wrote no rules.

    Counts only the triples that lack them, all of them with ``recount``. ``federation``: the run's federation
    (its clients' data in memory); without it the method's hook rebuilds the client documents from ``config``.
    Raises ValueError when counts are missing and the method declares no way to get its documents.
    """
    from rules.store import RuleStore

    run_dir = Path(run_dir)
    if not (run_dir / "rules.json").is_file():
        return None
    t0 = time.perf_counter()
    store = RuleStore.load(run_dir)
    missing = store.missing_counts()
    report = CountReport("recorded", len(store.triples), len(missing))
    todo = list(store.triples) if recount else missing
    if not todo:
        return report
    hook = rule_documents_hook(config.method)
    if hook is None:
        report.source = "unavailable"
        raise ValueError(
            f"{run_dir}: {report.line()}, and method {config.method!r} declares no client documents to count "
            "them on (@register_method(rule_documents=...))"
        )
    docs = hook(config, federation)
    done = store.count_clients(docs, triples=todo)
    store.save(run_dir)
    report.source = "computed"
    report.computed_triples = done["triples"]
    report.rules = done["rules"]
    report.clients = done["clients"]
    report.documents = done["documents"]
    report.seconds = time.perf_counter() - t0
    log.info("%s", report.line())
    return report
