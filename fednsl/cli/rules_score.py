"""``fednsl rules score RULEFILE --kg SOURCE --format anyburl|amie|rnnlogic``: score another learner's rules with
the fednsl-kg predictor and the filtered-ranking evaluator (adds the ``score`` subcommand to ``fednsl rules``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fednsl.cli.rules import command as rules_group

__all__ = ["score"]


def _bad_input(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@rules_group.command("score")
@click.argument("rule_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--kg", "source", required=True, help="The KG: a folder with train/valid/test, pykeen:NAME, or synthetic[:SEED]."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["anyburl", "amie", "rnnlogic"]),
    required=True,
    help="Rule file format (AnyBURL/PyClause, AMIE 3 TSV, RNNLogic integer rules).",
)
@click.option(
    "--relations",
    "relations_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="rnnlogic only: the relations.dict its ids refer to (default: the KG's own ids).",
)
@click.option("--split", type=click.Choice(["test", "valid"]), default="test", show_default=True, help="Split to rank.")
@click.option(
    "--aggregator",
    type=click.Choice(["sum", "max", "noisy-or"]),
    default="sum",
    show_default=True,
    help="How the predictor combines the rules that reach a candidate.",
)
@click.option(
    "--paths",
    type=click.Choice(["walks", "simple", "auto"]),  # rules.kg_predictor.PathsChoice (not imported: --help stays fast)
    default="walks",
    show_default=True,
    help="Ground bodies as walks (an entity may repeat), simple paths (AnyBURL's and AMIE's object identity), or "
    "auto: every head fitted both ways, the way with the better valid MRR over all heads kept.",
)
@click.option(
    "--constant-rules",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Add K rules with constants a head, mined from the KG's train split (q(X, c) <- b(X, d) and q(X, c) <- "
    "b(X, _)), beside the file's rules.",
)
@click.option(
    "--constants",
    type=click.Choice(["fixed", "auto"]),  # rules.kg_predictor.ConstantsChoice
    default="fixed",
    show_default=True,
    help="fixed: use the --constant-rules as given; auto: fit every head with and without them and keep the way with "
    "the better valid MRR over all heads (needs --constant-rules > 0).",
)
@click.option("--top", type=click.IntRange(min=1), default=None, help="Use each head's first K rules (file order).")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Predictor epochs per head.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the predictor's training.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def score(
    rule_file: Path,
    source: str,
    fmt: str,
    relations_file: Path | None,
    split: str,
    aggregator: str,
    paths: str,
    constant_rules: int,
    constants: str,
    top: int | None,
    epochs: int | None,
    seed: int,
    as_json: bool,
) -> None:
    """Fit rule weights on the KG's train split (early-stopped on valid) and report filtered MRR, MR, Hits@1/3/10
    (ties by expectation; pessimistic beside) on --split, so rule files of different tools meet one protocol."""
    if constants == "auto" and constant_rules == 0:
        raise click.UsageError("--constants auto chooses whether to add rules with constants: give --constant-rules K")
    from fednsl.methods.fednsl_kg.config import resolve_source
    from fednsl.methods.fednsl_kg.scoring import score_rules
    from kg.kg_sources import load_kg
    from rules.fol import RelationVocab, Rule, RuleSyntaxError
    from rules.formats import (
        parse_amie,
        parse_anyburl,
        parse_rnnlogic,
        read_rnnlogic_relations,
    )

    try:
        kg = load_kg(resolve_source(source))
    except (OSError, ValueError) as err:
        _bad_input(f"--kg {source}: {err}")
    try:
        vocab = RelationVocab(kg.relations)
    except ValueError as err:
        _bad_input(f"--kg {source}: its relation names cannot be read by the rule layer ({err})")
    text = rule_file.read_text(encoding="utf-8", errors="replace")
    try:
        if fmt == "anyburl":
            rules = [s.rule for s in parse_anyburl(text, vocab, source=str(rule_file))]
        elif fmt == "amie":
            rules = [s.rule for s in parse_amie(text, vocab, source=str(rule_file))]
        elif relations_file is None:
            rules = parse_rnnlogic(text, vocab, source=str(rule_file), skip_unsupported=True)
        else:
            theirs = RelationVocab(read_rnnlogic_relations(relations_file))
            rules = []
            for r in parse_rnnlogic(text, theirs, source=str(rule_file), skip_unsupported=True):
                rules.append(
                    Rule(
                        vocab.relation_id(theirs.names[r.head]),
                        tuple(vocab.token_id(theirs.token_name(t)) for t in r.body),
                    )
                )
    except (RuleSyntaxError, ValueError) as err:
        _bad_input(str(err))
    if not rules:
        _bad_input(f"{rule_file}: no rules read")
    predictor: dict[str, object] = {
        "paths": paths,
        "constant_rules": constant_rules,
        "constants": constants,
        **({"epochs": epochs} if epochs else {}),
    }
    metrics, log = score_rules(rules, kg, aggregator=aggregator, split=split, predictor=predictor, seed=seed, top=top)
    m = metrics.compute()
    out = {
        "kg": kg.name,
        "split": split,
        "rule_file": str(rule_file),
        "format": fmt,
        "aggregator": aggregator,
        "paths": paths,
        "constants": constants,
        **log,
        **{k: m[k] for k in ("mrr", "mr", "hits@1", "hits@3", "hits@10", "mrr_pessimistic")},
        "queries": int(m["count"]),
    }
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(
        f"{kg.name} {split}: {out['rules']} rules over {out['heads']} head relations, "
        f"{out['queries']} queries (filtered, ties by expectation), bodies grounded as {out['grounded_on']}"
        + (f", {out['constant_rules']} rules with constants" if constant_rules else "")
    )
    if "constants_chosen" in out:
        each = " / ".join(f"{k} {v:.4f}" for k, v in out["constants_valid_mrr"].items())
        click.echo(f"  rules with constants {out['constants_chosen']}, chosen on valid (valid MRR {each})")
    click.echo(
        f"  MRR {m['mrr']:.4f}  MR {m['mr']:.1f}  Hits@1 {m['hits@1']:.4f}  Hits@3 {m['hits@3']:.4f}  "
        f"Hits@10 {m['hits@10']:.4f}  (pessimistic MRR {m['mrr_pessimistic']:.4f})"
    )
    click.echo(f"  fit {out['fit_s']:.1f}s, evaluation {out['eval_s']:.1f}s")
