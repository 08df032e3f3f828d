"""``fednsl rules``: list, export, diff and explain the rules a run saved (RUN_DIR/rules.json), and check or
convert rule files between the golden text form, AnyBURL/PyClause, AMIE, RNNLogic and LogiRE formats."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fednsl.cli.errors import BadInput, one_line

if TYPE_CHECKING:  # the rule layer (numpy, scipy; torch for explain) loads when a subcommand runs, not for --help
    from rules.fol import RelationVocab
    from rules.formats import ScoredRule
    from rules.reading_order import Shown, Training
    from rules.store import RuleRow, RuleStore

RUN_DIR = click.Path(exists=True, file_okay=True, dir_okay=True, path_type=Path)
RULE_FORMATS = ("golden", "anyburl", "amie", "rnnlogic", "logire")
RULE_FORMAT = click.Choice(RULE_FORMATS)
TEXT_OR_JSON = click.Choice(["text", "json"])
IN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
OUT_FILE = click.Path(dir_okay=False, path_type=Path)


def _store_path(run_dir: Path) -> Path:
    return run_dir / "rules.json" if run_dir.is_dir() else run_dir


def _load(run_dir: Path) -> RuleStore:
    """The run's rule store; a missing, torn or inconsistent rules.json is one line naming the file, exit 2."""
    from rules.store import RuleStore

    path = _store_path(run_dir)
    try:
        store = RuleStore.load(run_dir)
        stay = store.vocab.stay
        for t in store.find_triples():
            bodies = store.triples[t].bodies
            bad = bodies[(bodies < 0) | (bodies > stay)]
            if bad.size:
                raise ValueError(
                    f"triple {store.triple_name(t)}: body token {int(bad[0])} outside the vocabulary [0, {stay}] "
                    f"of its {len(store.relations)} relations"
                )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        text = "not a rule store (expected a JSON object)" if isinstance(err, AttributeError) else one_line(err)
        raise BadInput(text if str(path) in text else f"{path}: {text}") from err
    return store


def _option_error(option: str, err: Exception) -> BadInput:
    """``--head: unknown relation 'x' (did you mean 'y'?)``: a bad option value as one line."""
    text = one_line(err)
    if text.startswith("<rule>: "):
        text = text[len("<rule>: ") :]
    return BadInput(f"{option}: {text}")


def _num(x: float | None, width: int = 8) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return f"{'-':>{width}}"
    return f"{x:>{width}.4g}"


def _write(text: str, out: Path | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise BadInput(f"--out: cannot write {out}: {err.strerror or one_line(err)}") from err
    click.echo(f"wrote {out}", err=True)


@click.group("rules")
def command() -> None:
    """Inspect, export and compare the rules a FedNSL run learned (RUN_DIR/rules.json)."""


# --- list -------------------------------------------------------------------------------------


def _check_head(store: RuleStore, head: str | None) -> None:
    """``--head`` names a relation of the store (name or id), else one line with the closest names, exit 2."""
    from rules.fol import RuleSyntaxError

    if head is None:
        return
    try:
        store.relation_id(head)
    except (RuleSyntaxError, ValueError) as err:
        raise _option_error("--head", err) from err


def _rows_text(
    store: RuleStore, rows: list[RuleRow], client: str | None, groups: dict[int, Shown] | None = None
) -> str:
    """The rows as text tables per triple; with ``groups`` (row position → its rule group) one line per
    canonical rule with a ``variants`` column and ``[uses head]`` / ``[detour]`` marks."""
    lines: list[str] = []
    current = None
    for pos, r in enumerate(rows):
        if r.triple != current:
            current = r.triple
            rec = store.triples[r.triple]
            if client:
                source = f"client {client} posterior"
            else:
                source = "posterior" if rec.global_posterior() is not None else "prior"
            if groups is None:
                lines.append(f"{r.triple_name}  (round {rec.round}, {rec.num_bodies} bodies, sorted by {source})")
            else:
                order = (
                    f"ranked by what each explains beyond those above, then by {source}"
                    if groups[pos].explains is not None
                    else f"sorted by {source}"
                )
                lines.append(
                    f"{r.triple_name}  (round {rec.round}, {rec.num_bodies} bodies as {groups[pos].of} rules, "
                    f"{order}; head-using rules last)"
                )
            head = f"  {'prob':>8} {'prior':>8}"
            head += f" {'global':>8} {'weight':>8}" if client else ""
            head += f" {'std_conf':>8} {'pca_conf':>8} {'head_cov':>8} {'support':>8}"
            if groups is not None and groups[pos].explains is not None:
                head += f" {'explains':>8} {'loo_conf':>8}"
            head += f" {'variants':>8}  rule" if groups is not None else "  rule"
            lines.append(head)
        m = r.measures or {}
        line = f"  {_num(r.probability)} {_num(r.prior)}"
        if client:
            line += f" {_num(r.posterior)} {_num(r.weight)}"
        line += f" {_num(m.get('std_confidence'))} {_num(m.get('pca_confidence'))} {_num(m.get('head_coverage'))}"
        line += f" {_num(m.get('support'))}"
        if groups is not None:
            g = groups[pos]
            marks = ("  [uses head]" if g.uses_head else "") + ("  [detour]" if g.detour else "")
            if g.explains is not None:
                line += f" {g.explains:>8.1%} {_num(g.loo_conf)}"
            line += f" {g.variants:>8}  {r.rule}{marks}"
        else:
            line += f"  {r.rule}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def _rows_tsv(rows: list[RuleRow], groups: dict[int, Shown] | None = None) -> str:
    cols = ["triple", "rule", "probability", "prior", "posterior", "client", "client_posterior", "weight"]
    mcols = ["support", "body_size", "pca_body_size", "head_size", "std_confidence", "pca_confidence", "head_coverage"]
    gcols = ["variants", "uses_head", "detour", "explains", "loo_conf"] if groups is not None else []
    lines = ["\t".join(cols + mcols + gcols)]
    for pos, r in enumerate(rows):
        vals: list[Any] = [r.triple_name, r.rule, r.probability, r.prior, r.posterior, r.client]
        vals += [r.client_posterior, r.weight]
        vals += [(r.measures or {}).get(k) for k in mcols]
        if groups is not None:
            g = groups[pos]
            vals += [g.variants, int(g.uses_head), int(g.detour), g.explains, g.loo_conf]
        cells = []
        for v in vals:
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append("")
            elif isinstance(v, float):
                cells.append(f"{v:.6g}")
            else:
                cells.append(str(v))
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"


@command.command("list")
@click.argument("run_dir", type=RUN_DIR)
@click.option("--head", "head", default=None, help="Only triples with this head relation (name or id).")
@click.option("--client", default=None, help="Sort and show this client's posterior and weights.")
@click.option("--top", type=click.IntRange(min=1), default=None, help="At most K rules per triple.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "tsv", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every stored rule, one line each, in stored-probability order (on a fednsl-kg run the default lists one "
    "line per canonical rule).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True),
    default=0.6,  # rules.identity.THRESHOLD, written out so that --help imports nothing
    show_default=True,
    help="fednsl-kg runs: a relation counts as symmetric (r = ~r), or two as inverse (r = ~s), when at least this "
    "share of their training facts, above chance, has the reverse fact (a split keeps only part of the reverses).",
)
@click.option(
    "--sort",
    type=click.Choice(["contribution", "posterior"]),
    default="contribution",
    show_default=True,
    help="fednsl-kg runs: contribution = by what a rule explains beyond the rules above it on the training facts "
    "(the 'explains' column); posterior = by probability.",
)
def list_rules(
    run_dir: Path,
    head: str | None,
    client: str | None,
    top: int | None,
    fmt: str,
    show_all: bool,
    threshold: float,
    sort: str,
) -> None:
    """List the stored rules per triple, most probable first.

    On a fednsl-kg run, stored rules that are one rule on the run's training triples (a symmetric relation
    written r or ~r, an inverse pair written r or ~s) are listed once, as their most probable form, with a
    `variants` column counting the stored rules merged into it, and ranked by what each explains beyond the
    rules above it: the `explains` column is the share of the head's training facts it newly explains (leave-one-
    out walks, noisy-OR over the rules above; shorter rules first among equals), `loo_conf` its leave-one-out
    confidence. Rules that explain nothing new follow, by probability; rules that make a step there and back
    (x, ~x) are marked [detour], rules whose body uses the head relation (or an equivalent) are marked
    [uses head] and listed last. --sort posterior keeps the probability order; --all lists every stored rule
    as stored. A fednsl-kg run records this order at its end (rules.json; rules.tsv and `rules export` follow
    it), and the list reads it from there; --client, another --threshold, or a run without it measure it again
    on the training triples rebuilt from RUN_DIR/config.yaml.
    """
    from rules.fol import RuleSyntaxError
    from rules.reading_order import grouped, recorded_equivalences, recorded_groups

    store = _load(run_dir)
    if client is not None and client not in store.clients:
        raise BadInput(f"--client: client {client!r} not in the store; clients: {', '.join(store.clients) or 'none'}")
    _check_head(store, head)
    # the reading order recorded at the end of a fednsl-kg run (rules.tsv's): no need to rebuild the KG
    eq = None if show_all or client is not None else recorded_equivalences(store, threshold)
    data = None if show_all or eq is not None else _kg_training(run_dir, store)
    if eq is None and data is not None:
        eq = _kg_equivalences(store, data, threshold)
    try:
        rows = store.rows(head=head, client=client, top=top if eq is None else None)
    except (RuleSyntaxError, ValueError) as err:
        raise BadInput(f"{_store_path(run_dir)}: {one_line(err)}") from err
    groups = None
    if eq is not None and data is None and sort == "contribution":
        rows, groups = recorded_groups(store, rows, top)
    elif eq is not None:
        training = data if not isinstance(data, bool) and sort == "contribution" else None
        rows, groups = grouped(store, rows, eq, top, training)
    if fmt == "json":
        items = [r.to_json() for r in rows]
        if groups is not None:
            for pos, item in enumerate(items):
                g = groups[pos]
                item["variants"] = g.variants
                item["variant_rules"] = g.variant_rules
                item["uses_head"], item["detour"] = g.uses_head, g.detour
                item["explains"], item["loo_conf"] = g.explains, g.loo_conf
        click.echo(json.dumps(items, indent=1))
    elif not rows and fmt == "text":
        what = f" of head {head}" if head is not None else ""
        click.echo(f"no rules{what}" + (f" with a posterior of client {client}" if client else ""))
    elif fmt == "tsv":
        click.echo(_rows_tsv(rows, groups), nl=False)
    else:
        click.echo(_rows_text(store, rows, client, groups), nl=False)


def _kg_training(run_dir: Path, store: RuleStore) -> Training | bool | None:
    """The training data of a fednsl-kg run (the KG rebuilt from RUN_DIR/config.yaml as ``rules explain`` does,
    :func:`fednsl.rule_counts.kg_training`); None for other runs; False, with a note on stderr, when the KG
    cannot be rebuilt (rules are then still grouped by their exact body, and marked)."""
    from fednsl.rule_counts import KG_METHOD, kg_training

    config = _run_config(run_dir)
    method = getattr(config, "method", None) or store.meta.get("method")
    if method != KG_METHOD:
        return None
    if config is None:
        click.echo(
            "note: no config.yaml beside the rules: relation equivalences and contributions not measured", err=True
        )
        return False
    try:
        return kg_training(config, store, run_dir=run_dir)
    except (OSError, ValueError, KeyError, TypeError) as err:
        click.echo(f"note: relation equivalences and contributions not measured ({one_line(err)})", err=True)
        return False


def _kg_equivalences(store: RuleStore, data: Training | bool, threshold: float) -> dict[int, int]:
    """Token → representative measured on the run's training triples (identity when they are unknown)."""
    from rules.reading_order import store_equivalences

    return store_equivalences(store, None if isinstance(data, bool) else data, threshold)


# --- export -----------------------------------------------------------------------------------


def _export_path(run_dir: Path, out: str | None) -> Path | None:
    """``--out``: None or ``-`` = stdout; a bare file name goes to RUN_DIR/exports/ (created), a path with a folder
    part (``./x``, ``a/x``, ``/a/x``) as given."""
    if out is None or out == "-":
        return None
    if "/" in out or os.sep in out:
        return Path(out)
    base = run_dir if run_dir.is_dir() else run_dir.parent
    folder = base / "exports"
    folder.mkdir(exist_ok=True)
    return folder / out


@command.command("export")
@click.argument("run_dir", type=RUN_DIR)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["anyburl", "amie", "json", "golden", "rnnlogic"]),
    required=True,
    help="anyburl: 'predicted<TAB>correct<TAB>confidence<TAB>h(X,Y) <= ...' (PyClause/SAFRAN); amie: AMIE 3 TSV; "
    "json: every rule with probabilities and measures; golden: 'head <- b1, ~b2'; rnnlogic: integer ids.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write here instead of stdout. A bare file name (--out rules.anyburl) is written to RUN_DIR/exports/; "
    "a path with a folder (./rules.anyburl, out/rules.anyburl) as given.",
)
@click.option("--head", "head", default=None, help="Only rules with this head relation (name or id).")
def export(run_dir: Path, fmt: str, out: str | None, head: str | None) -> None:
    """Export the learned rules for other rule engines (entity types merged: counts summed over triples).

    Rules with support 0 (counts recorded, and no pair of the run's training data satisfies body and head) are
    never exported; stderr says how many were left out. Each head's rules are in the order `rules list` shows
    when the run recorded it (fednsl-kg: what each explains beyond the rules above it; a rule's other stored
    forms right after it), else most probable first.
    """
    from rules.fol import RuleSyntaxError, format_rules
    from rules.formats import format_amie, format_anyburl, format_rnnlogic, without_zero_support

    store = _load(run_dir)
    _check_head(store, head)
    target = _export_path(run_dir, out)
    if target is not None and not target.parent.is_dir():
        raise BadInput(f"--out: cannot write {target}: folder {target.parent} does not exist")
    note = "note: left out {} rules with support 0 (their body and head never hold together in the run's data)"
    if store.meta.get("method") == "fednsl-kg" and not store.ranked:
        click.echo(
            f"note: no reading order recorded in {_store_path(run_dir)}: rules most probable first "
            f"(`fednsl rules counts {run_dir}` records the order of `rules list`)",
            err=True,
        )
    try:
        if fmt == "json":
            rows = store.rows(head=head, ranked=True)
            kept = [r for r in rows if (r.measures or {}).get("support", 1) != 0]
            if len(kept) < len(rows):
                click.echo(note.format(len(rows) - len(kept)), err=True)
            _write(json.dumps([_export_item(store, r) for r in kept], indent=1) + "\n", target)
            return
        scored, _, skipped = store.scored_rules(head)
        scored, zero = without_zero_support(scored)
        rules = [s.rule for s in scored]
        if skipped:
            click.echo(f"note: left out {skipped} identity (all-stay) bodies, which are not chain rules", err=True)
        if zero:
            click.echo(note.format(zero), err=True)
        if fmt in ("anyburl", "amie") and any(s.support is None for s in scored):
            click.echo(
                f"note: some rules have no confidence counts (`fednsl rules counts {run_dir}` adds them); "
                + ("they are written without the count columns" if fmt == "anyburl" else "their measures read nan"),
                err=True,
            )
        if fmt == "anyburl":
            text = format_anyburl(scored, store.vocab)
        elif fmt == "amie":
            text = format_amie(scored, store.vocab)
        elif fmt == "golden":
            text = format_rules(rules, store.vocab, header=f"rules exported from {run_dir}")
        else:
            text = format_rnnlogic(rules, store.vocab)
    except (ValueError, RuleSyntaxError) as err:
        raise BadInput(f"{_store_path(run_dir)}: {one_line(err)}") from err
    _write(text, target)


def _export_item(store: RuleStore, row: RuleRow) -> dict[str, Any]:
    """A row of the json export; with a recorded reading order also its ``rank`` (1, 2, ... per triple, shared
    by the stored forms of one rule) and, on the shown form, ``explains`` and ``loo_conf``."""
    item = row.to_json()
    for j, k, rule in store.triples[row.triple].reading_order() or []:
        if j == row.index:
            shown = rule.bodies[0] == j
            item["rank"] = k + 1
            item["explains"] = rule.explains if shown else None
            item["loo_conf"] = rule.loo_conf if shown else None
    return item


# --- counts -----------------------------------------------------------------------------------


@command.command("counts")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--recount", is_flag=True, help="Recount every triple (default: only the triples that have no counts yet)."
)
def counts(run_dir: Path, recount: bool) -> None:
    """Add AMIE confidence counts (support, body size, PCA body size, head size) to RUN_DIR/rules.json.

    Each client's training documents are rebuilt from RUN_DIR/config.yaml (corpus and client split only, no
    backbone) and counted locally; the counts are summed. `fednsl train` does this at the end of a run; use this
    for runs made before it did. Afterwards `rules list` shows confidences and `rules export --format
    anyburl|amie` writes the count columns. On a fednsl-kg run (whose clients record counts while training) it
    records the rules' reading order instead when rules.json has none (`fednsl train` does this too), so that
    rules.tsv and `rules export` follow the order of `rules list`.
    """
    from fednsl.config import load_config
    from fednsl.rule_counts import KG_METHOD, count_rules, order_rules

    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise BadInput(f"{config_path} not found: counting needs the run's config (written by `fednsl train`)")
    if not (run_dir / "rules.json").is_file():
        raise BadInput(f"{run_dir / 'rules.json'} not found: not the run of a rule-learning method")
    try:
        config = load_config(str(config_path))
        try:
            report = count_rules(run_dir, config, recount=recount)
        except ValueError:
            if config.method != KG_METHOD:
                raise
            # fednsl-kg's clients count while training (method_kwargs.counts); its order is still recorded
            report = None
        order = order_rules(run_dir, config, again=recount)
    except (ValueError, KeyError, FileNotFoundError) as err:
        raise BadInput(str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)) from err
    no_counts = "confidence counts not added: this run's clients did not count them (method_kwargs.counts)"
    click.echo(report.line() if report is not None else no_counts)
    if order is not None:
        click.echo(order.line())
    if (report is not None and report.source == "computed") or (order is not None and order.source == "computed"):
        click.echo(f"wrote {run_dir / 'rules.json'} and {run_dir / 'rules.tsv'}")


# --- diff -------------------------------------------------------------------------------------


@command.command("diff")
@click.argument("run_dir", type=RUN_DIR)
@click.option("--client", "clients", multiple=True, required=True, help="Client id; give exactly two (A then B).")
@click.option(
    "--by",
    type=click.Choice(["head", "triple"]),
    default="head",
    show_default=True,
    help="Compare per head relation (each client's triples merged, weighted by #instances) or per triple both "
    "clients hold (clients owning different entity-type combinations share no triple).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Bodies with the largest |p_A - p_B| per row.",
)
@click.option("--head", "head", default=None, help="Only this head relation.")
@click.option("--format", "fmt", type=TEXT_OR_JSON, default="text", show_default=True, help="Output format.")
def diff(run_dir: Path, clients: tuple[str, ...], by: str, top: int, head: str | None, fmt: str) -> None:
    """How two clients' rule posteriors differ: total variation, KL both ways, largest gaps."""
    if len(clients) != 2:
        raise click.UsageError("give --client exactly twice: --client A --client B")
    store = _load(run_dir)
    a, b = clients
    try:
        diffs = store.diff(a, b, by=by, top=top, head=head)
    except (KeyError, ValueError) as err:
        raise click.ClickException(str(err).strip('"')) from err
    if fmt == "json":
        click.echo(json.dumps({"a": a, "b": b, "by": by, "rows": [d.to_json() for d in diffs]}, indent=1))
        return
    if not diffs:
        hint = " (try --by head)" if by == "triple" else ""
        click.echo(f"clients {a} and {b} share no {'triple' if by == 'triple' else 'head relation'}{hint}")
        return
    click.echo(f"{'TV':>7} {'KL(A|B)':>8} {'KL(B|A)':>8}  {by:<12}(A = client {a}, B = client {b})")
    for d in diffs:
        click.echo(f"{d.total_variation:7.4f} {d.kl_ab:8.4f} {d.kl_ba:8.4f}  {d.name}")
        for rule, pa, pb in d.top:
            click.echo(f"{'':26}p_A {pa:.4f}  p_B {pb:.4f}  {rule}")


# --- explain ----------------------------------------------------------------------------------


def _npz(path: Path) -> dict[str, Any]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise click.ClickException(f"{path}: cannot read an .npz file ({err})") from err


def _run_config(run_dir: Path) -> Any:
    """RUN_DIR/config.yaml as a RunConfig, or None when the run has none."""
    from fednsl.config import load_config

    path = (run_dir if run_dir.is_dir() else run_dir.parent) / "config.yaml"
    if not path.is_file():
        return None
    try:
        return load_config(str(path))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BadInput(f"{path}: {one_line(err)}" if str(path) not in one_line(err) else one_line(err)) from err


@command.command("explain")
@click.argument("run_dir", type=RUN_DIR)
@click.option(
    "--values",
    "values_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A document's value tensor as .npz: key 'values' (N,N,2R+1) or (N,N,R) in [0,1]; optional "
    "'entity_names' (N,) and 'entity_types' (N,).",
)
@click.option(
    "--doc",
    "doc_id",
    default=None,
    help="Instead of --values: a document id of the run; its data and backbone values are rebuilt from "
    "RUN_DIR/config.yaml (a trained backbone is read from its cache). A fednsl-kg run needs neither: its "
    "knowledge graph is rebuilt from the config.",
)
@click.option(
    "--head", "head", required=True, help="Head relation (name or id); on a fednsl-kg run ~REL or inv_REL: its inverse."
)
@click.option(
    "--pair",
    nargs=2,
    required=True,
    help="Head and tail entity (index, or name when the file has entity_names; on a fednsl-kg run an entity name "
    "or id).",
)
@click.option(
    "--client",
    default=None,
    help="Use this client's posterior, weights and bias (fednsl-kg: and only its training triples as evidence).",
)
@click.option("--types", nargs=2, default=None, help="Head and tail entity type (name or id) selecting the triple.")
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Show the K strongest bodies (fednsl-kg: every rule that fires, with up to K groundings each).",
)
@click.option("--format", "fmt", type=TEXT_OR_JSON, default="text", show_default=True, help="Output format.")
def explain(
    run_dir: Path,
    values_path: Path | None,
    doc_id: str | None,
    head: str,
    pair: tuple[str, str],
    client: str | None,
    types: tuple[str, str] | None,
    top: int,
    fmt: str,
) -> None:
    """Which rule bodies and entity paths support HEAD(H, T): in one document (--values FILE or --doc DOC) or, on
    a fednsl-kg run, in the run's knowledge graph (the clients' training triples)."""
    from rules.explain import explain as explain_pair
    from rules.fol import RuleSyntaxError

    store = _load(run_dir)
    if values_path is None:
        config = _run_config(run_dir)
        method = getattr(config, "method", None) or store.meta.get("method")
        if method == "fednsl-kg":
            if doc_id is not None:
                raise BadInput("--doc: a fednsl-kg run has no documents; leave out --doc to explain a pair of its KG")
            if types is not None:
                raise BadInput("--types: a fednsl-kg rule head has one type signature; leave out --types")
            if config is None:
                raise BadInput(
                    f"{run_dir / 'config.yaml'} not found: explaining a KG pair rebuilds the run's KG from it"
                )
            _explain_kg(store, config, run_dir, head, pair, client, top, fmt)
            return
    if (values_path is None) == (doc_id is None):
        raise click.ClickException("give exactly one of --values FILE.npz or --doc DOC")
    if values_path is not None:
        data = _npz(values_path)
        if "values" in data:
            values = data["values"]
        else:
            arrays = [k for k, v in data.items() if v.ndim == 3]
            if len(arrays) != 1:
                raise click.ClickException(f"{values_path}: expected a 'values' array (N,N,C); keys: {sorted(data)}")
            values = data[arrays[0]]
        names = [str(n) for n in data["entity_names"]] if "entity_names" in data else None
        entity_types = data.get("entity_types")
    else:
        from fednsl.methods.fednsl.data import document_values

        try:
            dv = document_values(run_dir if run_dir.is_dir() else run_dir.parent, doc_id)  # type: ignore[arg-type]
        except (FileNotFoundError, KeyError, ValueError) as err:
            raise click.ClickException(str(err.args[0]) if isinstance(err, KeyError) else str(err)) from err
        values, names, entity_types = dv.values, dv.entity_names, dv.entity_types
        click.echo(f"document {dv.doc_id} (client {dv.client}, {len(names)} entities)", err=True)

    def entity(x: str) -> int:
        if x.lstrip("-").isdigit():
            return int(x)
        if names is None or x not in names:
            raise click.ClickException(
                f"entity {x!r} is not an index{'' if names is None else ' or a name in the document'}"
            )
        return names.index(x)

    try:
        result = explain_pair(
            values,
            store,
            head,
            (entity(pair[0]), entity(pair[1])),
            client=client,
            types=tuple(types) if types else None,  # type: ignore[arg-type]
            entity_types=entity_types,
            top=top,
        )
    except (ValueError, KeyError, RuleSyntaxError) as err:
        raise click.ClickException(str(err)) from err
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=1))
    else:
        click.echo(result.format(store, names), nl=False)


def _kg_entity(kg_entities: tuple[str, ...], index: dict[str, int], text: str) -> int:
    """An entity of the KG by name, else by id; unknown: one line with the closest names (exit 2)."""
    from rules.kg_explain import close_names

    if text in index:
        return index[text]
    if text.isdigit() and int(text) < len(kg_entities):
        return int(text)
    close = close_names(text, kg_entities)
    hint = f"; closest: {', '.join(repr(c) for c in close)}" if close else ""
    raise BadInput(f"--pair: unknown entity {text!r} (not a name or an id < {len(kg_entities)} of the KG){hint}")


def _explain_kg(
    store: RuleStore,
    config: Any,
    run_dir: Path,
    head: str,
    pair: tuple[str, str],
    client: str | None,
    top: int,
    fmt: str,
) -> None:
    """``rules explain`` on a fednsl-kg run: rebuild the KG parts, ground the head's rules on the pair."""
    from dataclasses import replace

    import numpy as np

    from fednsl.rule_counts import kg_parts, run_paths
    from kg.grounding.sparse import SparseGraph
    from rules.fol import RuleSyntaxError
    from rules.kg_explain import explain_kg, parse_head

    try:
        parse_head(store.vocab, head)
    except (RuleSyntaxError, ValueError) as err:
        hint = "; an inverse head reads ~REL or inv_REL"
        raise BadInput(f"{_option_error('--head', err).message}{hint}") from err
    try:
        parts, kg_name = kg_parts(config, store.relations)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BadInput(f"rebuilding the run's KG from config.yaml: {one_line(err)}") from err
    kg = parts[0]
    width = len(str(len(parts) - 1))
    ids = [f"c{i:0{width}d}" for i in range(len(parts))]  # the client ids fednsl-kg gives its parts
    if client is not None and client not in ids:
        raise BadInput(f"--client: unknown client {client!r}; the run's clients: {', '.join(ids)}")
    chosen = [parts[ids.index(client)]] if client is not None else parts
    triples = np.concatenate([p.train for p in chosen]) if chosen else np.zeros((0, 3), np.int64)
    graph = SparseGraph.from_triples(
        triples, kg.num_entities, kg.num_relations, paths=run_paths(config, run_dir, client)
    )
    index = {name: i for i, name in enumerate(kg.entities)}
    h, t = (_kg_entity(kg.entities, index, x) for x in pair)
    result = explain_kg(store, graph, head, (h, t), client=client, limit=top)
    who = f"client {client}" if client is not None else f"{len(parts)} client{'s' if len(parts) > 1 else ''}"
    result = replace(result, evidence=f"training triples of KG {kg_name} ({who}, {graph.num_edges // 2} facts)")

    def name(e: int) -> str:
        return kg.entities[e]

    if fmt == "json":
        click.echo(json.dumps(result.to_json(store.vocab, name), indent=1))
    else:
        click.echo(result.format(store.vocab, name), nl=False)


# --- rule files -------------------------------------------------------------------------------


def _read_rule_file(path: Path, vocab: RelationVocab, fmt: str, skip: bool) -> list[ScoredRule]:
    from rules.fol import parse_rules
    from rules.formats import ScoredRule, parse_amie, parse_anyburl, parse_logire_json, parse_rnnlogic

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected a {fmt} rule file"
        ) from None
    if fmt == "golden":
        return [ScoredRule(r) for r in parse_rules(text, vocab, source=str(path))]
    if fmt == "anyburl":
        return parse_anyburl(text, vocab, source=str(path))
    if fmt == "amie":
        return parse_amie(text, vocab, source=str(path))
    if fmt == "rnnlogic":
        return [ScoredRule(r) for r in parse_rnnlogic(text, vocab, source=str(path), skip_unsupported=skip)]
    return [ScoredRule(r) for r in parse_logire_json(text, vocab, source=str(path))]


def _render(items: list[ScoredRule], vocab: RelationVocab, fmt: str) -> str:
    from rules.fol import format_rules
    from rules.formats import format_amie, format_anyburl, format_logire_json, format_rnnlogic

    rules = [s.rule for s in items]
    if fmt == "golden":
        return format_rules(rules, vocab)
    if fmt == "anyburl":
        return format_anyburl(items, vocab)
    if fmt == "amie":
        return format_amie(items, vocab)
    if fmt == "rnnlogic":
        return format_rnnlogic(rules, vocab)
    return format_logire_json(rules, vocab) + "\n"


_RELATIONS_HELP = (
    "Relation names: rel2id.json (DocRED style, 'Na' dropped), a JSON list, RNNLogic relations.dict, "
    "or one name per line."
)


@command.command("convert")
@click.argument("rule_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--relations", type=IN_FILE, required=True, help=_RELATIONS_HELP)
@click.option("--from", "src", type=RULE_FORMAT, default="golden", show_default=True, help="Input format.")
@click.option("--to", "dst", type=RULE_FORMAT, default="golden", show_default=True, help="Output format.")
@click.option("--out", type=OUT_FILE, default=None, help="Write here instead of stdout.")
@click.option(
    "--skip-unsupported", is_flag=True, help="RNNLogic input: drop empty or longer-than-3 bodies instead of failing."
)
def convert(rule_file: Path, relations: Path, src: str, dst: str, out: Path | None, skip_unsupported: bool) -> None:
    """Convert a rule file between formats (errors name the line)."""
    from rules.fol import RuleSyntaxError
    from rules.formats import load_relation_names

    try:
        vocab = load_relation_names(relations)
        items = _read_rule_file(rule_file, vocab, src, skip_unsupported)
        text = _render(items, vocab, dst)
    except (RuleSyntaxError, ValueError) as err:
        raise BadInput(str(err)) from err  # a bad rule file: exit status 2
    _write(text, out)


@command.command("check")
@click.argument("rule_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--relations", type=IN_FILE, required=True, help=_RELATIONS_HELP)
@click.option("--from", "src", type=RULE_FORMAT, default="golden", show_default=True, help="Input format.")
def check(rule_file: Path, relations: Path, src: str) -> None:
    """Parse a rule file and report how many rules it holds, or the first error with its line number."""
    from rules.fol import RuleSyntaxError
    from rules.formats import load_relation_names

    try:
        vocab = load_relation_names(relations)
        items = _read_rule_file(rule_file, vocab, src, False)
    except (RuleSyntaxError, ValueError) as err:
        raise BadInput(str(err)) from err  # a bad rule file: exit status 2
    lengths = [sum(len(s.rule.body) == k for s in items) for k in (1, 2, 3)]
    click.echo(
        f"{rule_file}: {len(items)} rules OK ({vocab.num_relations} relations; body lengths 1/2/3: "
        f"{lengths[0]}/{lengths[1]}/{lengths[2]})"
    )


if __name__ == "__main__":  # pragma: no cover
    command(sys.argv[1:])
