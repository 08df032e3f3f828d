"""Post-run steps on a run's rules.json: confidence counts (at the end of a run and for old runs, ``fednsl rules
counts``) and, on a fednsl-kg run, the reading order of its rules (:func:`order_rules`).

AMIE counts (support, body size, PCA body size, head size; :mod:`rules.measures`) make ``fednsl rules list``
show confidences and ``fednsl rules export --format anyburl|amie`` write usable lines. Each client counts on its
own training documents and the counts are summed (they are additive), as a federation would compute them
(:meth:`rules.store.RuleStore.count_clients`). The documents come from the method's declared
``rule_documents`` hook (``@register_method(rule_documents=...)``, :func:`fednsl.registry.rule_documents_hook`);
methods that record counts while training (fednsl-kg) need none, and their counts are left as they are.

:func:`order_rules` measures once, on a fednsl-kg run's training triples, the order ``fednsl rules list`` reads the
rules in (:mod:`rules.reading_order`: one line per rule up to symmetric and inverse relations, ranked by what each
explains beyond the rules above it) and records it in rules.json, so that rules.tsv, ``fednsl rules export`` and
``fednsl rules list`` show that order without rebuilding the KG. :func:`kg_training` gives those triples: from the
federation in memory, else rebuilt from the run's config (:func:`kg_parts`, as ``fednsl rules explain`` does).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fednsl.config import RunConfig
from fednsl.registry import rule_documents_hook

if TYPE_CHECKING:
    from kg.grounding.sparse import Paths
    from rules.reading_order import Training
    from rules.store import RuleStore

#: the method whose runs get a recorded reading order
KG_METHOD = "fednsl-kg"

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


@dataclass
class OrderReport:
    """What :func:`order_rules` did: ``source`` is "computed", "recorded" (an order was already recorded) or
    "unavailable" (the training triples could not be had: rules.tsv keeps the posterior order; ``note`` says
    why)."""

    source: str
    triples: int
    rules: int = 0
    training_triples: int = 0
    threshold: float = 0.0
    seconds: float = 0.0
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))

    def line(self) -> str:
        if self.source == "computed":
            return (
                f"ranked {self.rules} rules of {self.triples} triples by what each explains on "
                f"{self.training_triples} training triples ({self.seconds:.1f} s); rules.tsv follows that order"
            )
        if self.source == "recorded":
            return "the rules' reading order is already recorded"
        return f"rules.tsv keeps the posterior order: contributions not measured ({self.note})"


def kg_parts(config: Any, relations: tuple[str, ...] | list[str]) -> tuple[list[Any], str]:
    """The KG parts of a fednsl-kg run rebuilt from its config (and the KG's name); ValueError (or the loader's
    OSError) when they cannot be, or do not match the rule store's ``relations``."""
    from fednsl.methods.fednsl_kg import KGDataConfig, load_parts
    from fednsl.registry import build_kwargs

    parts, _, kg_name = load_parts(build_kwargs(KGDataConfig, config.data, "data (fednsl-kg)"), int(config.seed))
    if not parts:
        raise ValueError("the run's config.yaml gives no KG part")
    _check_relations(parts[0], relations, "the KG rebuilt from config.yaml")
    return parts, kg_name


def _check_relations(part: Any, relations: tuple[str, ...] | list[str], what: str) -> None:
    if tuple(part.relations) != tuple(relations):
        raise ValueError(
            f"{what} ({part.num_relations} relations) does not match the rule store's {len(relations)} "
            "relations: was the data changed after the run?"
        )


def kg_training(config: Any, store: RuleStore, federation: Any = None, run_dir: Path | str | None = None) -> Training:
    """The training triples of all clients of a fednsl-kg run, as a graph counting paths as the run did
    (:func:`run_paths`, read from ``run_dir``): the clients' KG parts of ``federation`` (the run's, in memory) when
    it holds them, else the parts rebuilt from ``config`` (:func:`kg_parts`). ValueError, OSError, KeyError or
    TypeError when they cannot be had."""
    import numpy as np

    from rules.reading_order import Training

    clients = getattr(federation, "clients", None) or {}
    parts: list[Any] = [getattr(c, "part", None) for c in clients.values()]
    if parts and all(p is not None and hasattr(p, "train") for p in parts):
        _check_relations(parts[0], store.relations, "the run's KG")
    else:
        parts, _ = kg_parts(config, store.relations)
    triples = np.concatenate([np.asarray(p.train, dtype=np.int64).reshape(-1, 3) for p in parts])
    return Training.of(triples, parts[0].num_entities, len(store.relations), run_paths(config, run_dir))


def run_paths(config: RunConfig, run_dir: Path | str | None = None, client: str | None = None) -> Paths:
    """How a fednsl-kg run counted its rules: walks or simple paths after its ``method_kwargs.predictor.paths``
    (:func:`rules.kg_predictor.counted_paths`). Under "auto" each client's fit chose one way on valid and reported
    it (the ``simple_paths`` metric, RUN_DIR/metrics.jsonl): ``client``'s choice, else the choice of most clients
    (simple on a tie, as the fit breaks its own ties); simple when the run recorded none."""
    from rules.kg_predictor import PredictorConfig, counted_paths

    paths = (config.method_kwargs.get("predictor") or {}).get("paths", PredictorConfig.paths)
    chosen = auto_choices(Path(run_dir)) if paths == "auto" and run_dir is not None else {}
    if client is not None and client in chosen:
        return "simple" if chosen[client] else "walks"
    if chosen:
        return "simple" if 2 * sum(chosen.values()) >= len(chosen) else "walks"
    return counted_paths(paths)


def auto_choices(run_dir: Path) -> dict[str, bool]:
    """{client id: chose simple paths} from the last ``simple_paths`` each client reported in
    RUN_DIR/metrics.jsonl ({} when there is none, or the file cannot be read)."""
    out: dict[str, bool] = {}
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return out
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        scope = row.get("scope") if isinstance(row, dict) else None
        if isinstance(scope, str) and scope.startswith("client:") and isinstance(row.get("simple_paths"), (int, float)):
            out[scope.removeprefix("client:")] = bool(row["simple_paths"])
    return out


def order_rules(
    run_dir: Path | str, config: RunConfig, federation: Any = None, *, again: bool = True, skip: str = ""
) -> OrderReport | None:
    """Record the reading order of a fednsl-kg run's rules in ``RUN_DIR/rules.json`` and write rules.tsv in it
    (:func:`rules.reading_order.record_order` on the training triples of :func:`kg_training`); None for runs of
    other methods and runs without rules. When the training triples cannot be had, or ``skip`` gives a reason not
    to measure (a spent time budget), the store is left as it is (posterior order) and the report says why
    (``source`` "unavailable"). Without ``again`` a store that already holds an order is left as it is (``source``
    "recorded")."""
    from rules.reading_order import DEFAULT_THRESHOLD, record_order
    from rules.store import RuleStore

    run_dir = Path(run_dir)
    if config.method != KG_METHOD or not (run_dir / "rules.json").is_file():
        return None
    t0 = time.perf_counter()
    store = RuleStore.load(run_dir)
    report = OrderReport("unavailable", len(store.triples), threshold=DEFAULT_THRESHOLD)
    if not again and store.ranked:
        report.source = "recorded"
        return report
    if skip:
        report.note = skip
        log.info("%s", report.line())
        return report
    try:
        data = kg_training(config, store, federation, run_dir)
    except (OSError, ValueError, KeyError, TypeError) as err:
        report.note = " ".join(str(err).split()) or type(err).__name__
        log.warning("%s", report.line())
        return report
    workers = (config.method_kwargs.get("predictor") or {}).get("workers", 1)  # the fit's processes measure it too
    done = record_order(store, data, DEFAULT_THRESHOLD, workers if isinstance(workers, int) else 1)
    store.save(run_dir)
    report.source = "computed"
    report.rules = int(done["rules"])
    report.training_triples = int(done["training_triples"])
    report.seconds = time.perf_counter() - t0
    log.info("%s", report.line())
    return report
