"""``fednsl data``: inspect corpora, import raw text, prepare DWIE or the synthetic set, turn a corpus into a KG
and split a KG over clients (no network access)."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # numpy and kg load when a subcommand runs, not for --help
    from kg.documents import Corpus, Vocab
    from kg.triples import KnowledgeGraph

FORMAT_CHOICE = click.Choice(["auto", "dwie", "docred", "synthetic", "kg"])


def _fail(exc: Exception) -> click.ClickException:
    from fednsl.cli.errors import as_bad_input

    return as_bad_input(exc)


def _bad(option: str, message: str) -> click.ClickException:
    """A bad option value: one line naming the option, exit status 2."""
    from fednsl.cli.errors import BadInput

    return BadInput(f"{option}: {message}")


def _refuse_nonempty(out_dir: Path, force: bool) -> None:
    """Refuse to write into an existing, non-empty ``--out`` unless ``--force`` (one line, exit status 2)."""
    if not force and out_dir.is_dir() and any(out_dir.iterdir()):
        raise _bad(
            "--out", f"{out_dir} exists and is not empty; pass --force to replace its KG files or choose another"
        )


def _clear_kg_files(out_dir: Path) -> None:
    """With ``--force``: remove what the KG readers would read in ``out_dir`` besides the new files (top-level
    train/valid/dev/test and entity_types files in any suffix, ``client<K>/`` folders, split.json), so that
    nothing stale is read with them. Other files stay."""
    if not out_dir.is_dir():
        return
    for child in out_dir.iterdir():
        if child.is_dir() and re.fullmatch(r"client\d+", child.name):
            shutil.rmtree(child)
        elif child.is_file() and (
            re.fullmatch(r"(train|valid|dev|test|entity_types)\.(txt|tsv)(\.gz)?", child.name)
            or child.name == "split.json"
        ):
            child.unlink()


def _load(path: str, fmt: str, skip_bad: bool) -> Corpus:
    from kg.documents import DataError
    from kg.io import load_corpus

    try:
        return load_corpus(path, format=fmt, skip_bad=skip_bad)
    except (DataError, OSError) as exc:
        raise _fail(exc) from exc


@click.group("data")
def command() -> None:
    """Inspect corpora, import your own text, and prepare DWIE or the synthetic planted-rule set.

    PATH arguments accept DWIE annotations (dwie_annos.tar.gz, a folder of DW_*.json, a DWIE checkout), a
    docred-style folder or file (LogiRE/ATLOP), a folder written by `fednsl data prepare synthetic`, or the
    string `synthetic` (the embedded demo set; `synthetic:seed=3,num_documents=100` for variants).
    `info` also reads knowledge graphs: a folder of train/valid/test triples (head<TAB>relation<TAB>tail,
    .txt/.tsv, optionally .gz), FedLU's client<K>/ folders, pykeen:nations|kinships|umls, or the planted-rule
    KG with `--format kg synthetic[:SEED]`.
    """


def _info_dict(
    corpus: Corpus, clients: int, seed: int, groups: str | None, test_ratio: float, holdout: float
) -> dict[str, Any]:
    import numpy as np

    from kg.split import NerGroupSplit, eligible_documents, partition_stats, split_clients

    ents = np.asarray([d.num_entities for d in corpus.documents])
    facts = np.asarray([d.num_facts for d in corpus.documents])
    tp = corpus.type_pair_counts()
    pairs = sorted(
        (
            (int(tp[i, j]), corpus.entity_types[i], corpus.entity_types[j])
            for i in range(tp.shape[0])
            for j in range(tp.shape[1])
            if tp[i, j]
        ),
        reverse=True,
    )
    out: dict[str, Any] = {
        "name": corpus.name,
        "format": corpus.meta.get("format", corpus.report.format),
        "documents": len(corpus),
        "splits": corpus.splits,
        "entities": int(ents.sum()),
        "entities_per_doc": float(ents.mean()) if len(ents) else 0.0,
        "max_entities": int(ents.max()) if len(ents) else 0,
        "mentions": sum(len(d.mentions) for d in corpus.documents),
        "facts": int(facts.sum()),
        "facts_per_doc": float(facts.mean()) if len(facts) else 0.0,
        "relations": len(corpus.relations),
        "entity_types": len(corpus.entity_types),
        "entities_per_type": dict(zip(corpus.entity_types.names, map(int, corpus.type_counts()))),
        "facts_per_relation": dict(
            sorted(zip(corpus.relations.names, map(int, corpus.relation_counts())), key=lambda kv: -kv[1])
        ),
        "type_pairs": [{"head": h, "tail": t, "facts": n} for n, h, t in pairs],
        "report": {
            "dropped": dict(corpus.report.dropped),
            "resolved": dict(corpus.report.resolved),
            "skipped": [vars(s) for s in corpus.report.skipped],
        },
    }
    if corpus.meta.get("planted_rules"):
        out["planted_rules"] = list(corpus.meta["planted_rules"])
    _, excluded = eligible_documents(corpus)
    out["excluded_from_split"] = [{"doc_id": d, "reason": r} for d, r in excluded]
    if clients > 0 and len(corpus.entity_types) >= 2:
        split = NerGroupSplit.parse(groups) if groups else NerGroupSplit.for_corpus(corpus)
        parts = split_clients(corpus, clients, split, seed=seed, test_ratio=test_ratio, holdout=holdout)
        out["groups"] = {name: list(g) for name, g in zip(split.group_names or (), split.groups)}
        out["clients"] = [
            {"client": p.client, "seen": p.seen.name, "unseen": p.unseen.name, **partition_stats(p)} for p in parts
        ]
    return out


def _echo_info(info: dict[str, Any], top: int) -> None:
    e = click.echo
    e(
        f"corpus {info['name']} ({info['format']}): {info['documents']} documents "
        f"({', '.join(f'{k} {v}' for k, v in info['splits'].items())})"
    )
    e(
        f"entities {info['entities']} ({info['entities_per_doc']:.1f}/doc, max {info['max_entities']}), "
        f"mentions {info['mentions']}, facts {info['facts']} ({info['facts_per_doc']:.1f}/doc)"
    )
    e(f"entity types ({info['entity_types']}): " + ", ".join(f"{k} {v}" for k, v in info["entities_per_type"].items()))
    rels = list(info["facts_per_relation"].items())
    shown = rels if top <= 0 else rels[:top]
    e(
        f"relations ({info['relations']}), facts per relation"
        + ("" if len(shown) == len(rels) else f" (top {top})")
        + ":"
    )
    for name, n in shown:
        e(f"  {name:28s} {n:7d}")
    pairs = info["type_pairs"] if top <= 0 else info["type_pairs"][:top]
    e("type pairs (head -> tail: facts):")
    for p in pairs:
        e(f"  {p['head']:>14s} -> {p['tail']:<14s} {p['facts']:7d}")
    rep = info["report"]
    for kind in ("dropped", "resolved"):
        for reason, n in sorted(rep[kind].items()):
            e(f"{kind} {reason}: {n}")
    if rep["skipped"]:
        e(f"skipped bad documents: {len(rep['skipped'])}")
        for s in rep["skipped"]:
            e(f"  {s['file']} [{s['doc_id']}]: {s['reason']}")
    if info.get("planted_rules"):
        e(f"planted rules ({len(info['planted_rules'])}):")
        for r in info["planted_rules"]:
            e(f"  {r}")
    if info["excluded_from_split"]:
        e(f"excluded from the client split: {len(info['excluded_from_split'])}")
        for x in info["excluded_from_split"]:
            e(f"  {x['doc_id']}: {x['reason']}")
    if "clients" in info:
        e("groups: " + "; ".join(f"{k} = {{{', '.join(v)}}}" for k, v in info["groups"].items()))
        head = (
            f"{'client':>6s} {'seen':>5s} {'unseen':>6s} {'docs':>5s} {'train':>5s} {'hold':>5s} {'test':>5s} "
            f"{'seen-train pairs/facts':>23s} {'seen-test':>14s} {'unseen-test':>14s}"
        )
        e(head)
        for c in info["clients"]:
            e(
                f"{c['client']:>6d} {c['seen']:>5s} {c['unseen']:>6s} {c['documents']:>5d} {c['train']:>5d} "
                f"{c['holdout']:>5d} {c['test']:>5d} {c['seen_train_pairs']:>14d}/{c['seen_train_facts']:<8d} "
                f"{c['seen_test_pairs']:>7d}/{c['seen_test_facts']:<6d} {c['unseen_test_pairs']:>7d}/"
                f"{c['unseen_test_facts']:<6d}"
            )


@command.command("info")
@click.argument("path")
@click.option(
    "--format",
    "fmt",
    type=FORMAT_CHOICE,
    default="auto",
    show_default=True,
    help="Input format (auto-detected by default).",
)
@click.option("--skip-bad", is_flag=True, help="Skip documents with bad input (counted and listed) instead of failing.")
@click.option(
    "--clients", type=int, default=4, show_default=True, help="Number of clients for the split table (0: no split)."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the client split.")
@click.option(
    "--groups",
    default=None,
    metavar="T1,T2|T3,T4",
    help="Entity-type groups, '|' between groups (default: the corpus's own, DWIE's balanced A/B, "
    "or a count-balanced grouping).",
)
@click.option("--test-ratio", type=float, default=0.25, show_default=True, help="Test share within each client.")
@click.option(
    "--holdout",
    type=float,
    default=0.1,
    show_default=True,
    help="Share of each client's train documents held out for threshold selection.",
)
@click.option(
    "--top", type=int, default=15, show_default=True, help="Rows of the relation and type-pair tables (0: all)."
)
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON object.")
def info(
    path: str,
    fmt: str,
    skip_bad: bool,
    clients: int,
    seed: int,
    groups: str | None,
    test_ratio: float,
    holdout: float,
    top: int,
    as_json: bool,
) -> None:
    """Print documents, entities, facts per relation and type pair, what was dropped, and the client split.

    Knowledge graphs (a folder of train/valid/test triples, FedLU's client<K>/ folders, pykeen:NAME, or
    `synthetic[:SEED] --format kg`): entities, relations, triples per split and the files read, top relations,
    clients.
    """
    from fednsl.cli.kg_info import detect_folder_format, show_kg_info, wants_kg
    from kg.documents import DataError

    if wants_kg(path, fmt):
        show_kg_info(path, top, as_json)
        return
    if fmt == "auto" and Path(path).is_dir():
        fmt = detect_folder_format(path)  # a folder that is neither: say what was looked for and what is there
    corpus = _load(path, fmt, skip_bad)
    try:
        data = _info_dict(corpus, clients, seed, groups, test_ratio, holdout)
    except (DataError, ValueError) as exc:
        raise _fail(exc) from exc
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        _echo_info(data, top)


def _parse_type_map(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise click.BadParameter(f"{item!r} must read LABEL=type", param_hint="--type-map")
        out[key] = value
    return out


def _read_names(spec: str | None, kind: str) -> Vocab | None:
    """A vocabulary from a comma list, a rel2id/ner2id JSON file, or a one-name-per-line file."""
    from kg.documents import Vocab

    if spec is None:
        return None
    path = Path(spec)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
            if isinstance(data, dict):
                return Vocab.from_mapping(data, drop=("Na", "BLANK", "blank"), strip_prefix="type::", kind=kind)
            return Vocab(tuple(data), kind=kind)
        return Vocab(tuple(x.strip() for x in text.splitlines() if x.strip() and not x.startswith("#")), kind=kind)
    return Vocab(tuple(x.strip() for x in spec.split(",") if x.strip()), kind=kind)


@command.command("import-text")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (docred format: <split>.json + meta/).",
)
@click.option(
    "--model",
    default=None,
    help="Installed spaCy pipeline with NER (e.g. en_core_web_sm) for tokens, sentences and entities.",
)
@click.option(
    "--entities",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Entity list: 'text<TAB>label' lines, or spaCy patterns in a .jsonl file (optional 'id' joins "
    "aliases); applied by an entity_ruler on spacy.blank('en') unless --model is given.",
)
@click.option("--ignore-case", is_flag=True, help="Match the entity list case-insensitively.")
@click.option(
    "--split",
    default="train",
    show_default=True,
    help="Split name of the imported documents (train -> train_annotated.json).",
)
@click.option(
    "--type-map",
    multiple=True,
    metavar="LABEL=type",
    help="Rename entity labels, e.g. --type-map GPE=location --type-map PERSON=person (repeatable).",
)
@click.option(
    "--types",
    default=None,
    help="Fixed entity-type vocabulary: comma list, ner2id.json or one name per line (default: the labels found).",
)
@click.option(
    "--relations",
    default=None,
    help="Relation vocabulary the labels will use: comma list, rel2id.json or one name per line "
    "(written to meta/rel2id.json; default none).",
)
def import_text(
    files: tuple[Path, ...],
    out_dir: Path,
    model: str | None,
    entities: Path | None,
    ignore_case: bool,
    split: str,
    type_map: tuple[str, ...],
    types: str | None,
    relations: str | None,
) -> None:
    """Turn raw text FILES into documents (tokens, sentences, entity mentions) with empty relation labels.

    Mentions with the same text and label (or the same pattern id) become one entity. Fill the `labels`
    of the written file by hand or with a backbone, then read it with `fednsl data info OUT`.
    """
    from kg.docred import write_docred
    from kg.documents import DataError
    from kg.text import build_pipeline, import_texts, read_entity_list

    try:
        patterns = read_entity_list(entities) if entities else None
        nlp = build_pipeline(model, patterns, ignore_case=ignore_case)
        corpus = import_texts(
            files,
            nlp,
            split=split,
            type_map=_parse_type_map(type_map),
            entity_types=_read_names(types, "entity type"),
            relations=_read_names(relations, "relation"),
        )
        written = write_docred(corpus, out_dir, fact_ref=False)
    except (DataError, OSError) as exc:
        raise _fail(exc) from exc
    n_ent = sum(d.num_entities for d in corpus.documents)
    n_men = sum(len(d.mentions) for d in corpus.documents)
    click.echo(
        f"imported {len(corpus)} documents, {n_ent} entities, {n_men} mentions "
        f"(types: {', '.join(corpus.entity_types.names) or 'none'})"
    )
    for f in written:
        click.echo(f"wrote {f}")
    for line in next_steps(out_dir, written, len(corpus), relations is not None):
        click.echo(line)


def next_steps(out_dir: Path, written: list[Path], n_docs: int, has_relations: bool) -> list[str]:
    """What to do after `data import-text`: label, check, train (with a client count the documents allow)."""
    data_file = next((f for f in written if f.suffix == ".json" and f.parent == out_dir), out_dir)
    clients = max(1, min(4, n_docs // 4))  # about 4 documents per client at least: 3 to train, 1 to test
    steps = [
        "next steps:",
        f'  1. label relation facts: in {data_file} give each document\'s "labels" entries '
        '{"h": ENTITY, "t": ENTITY, "r": RELATION} (entity = index into its "vertexSet")'
        + ("" if has_relations else "; pass --relations to fix the relation names (meta/rel2id.json)"),
        f"  2. check them: fednsl data info {out_dir}",
        f"  3. train FedNSL on them: fednsl train fednsl_dwie --set data.path={out_dir} "
        f"--set data.num_clients={clients} --set data.golden_rules=none",
    ]
    if n_docs < 8:
        steps.append(
            f"  ({n_docs} documents is very few: every client needs training and test documents, so import more "
            "text or use fewer clients)"
        )
    return steps


PREPARE_HELP = """Prepare a dataset in the layout fednsl reads (this command never uses the network).

\b
DWIE (GPL-3.0, klimzaporojets/DWIE) — with internet access, on your machine:
  git clone https://github.com/klimzaporojets/DWIE
  cd DWIE && pip install requests && python src/dwie_download.py
  # (fetches the article text from the Deutsche Welle API into data/annos_with_content;
  #  without it, data/annos has the annotations only, which is enough for rule learning)
  fednsl data prepare dwie --from DWIE --out data/dwie

It validates every document (use --skip-bad to skip and count bad ones), writes OUT/dwie_annos.tar.gz
(the annotation files), OUT/docred_style/meta/{rel2id,ner2id}.json (LogiRE's ids) and, when the article
text is present, OUT/docred_style/{train_annotated,test}.json (tokenised, docred/LogiRE format).

\b
Synthetic planted-rule set:
  fednsl data prepare synthetic --out data/synthetic [--seed 0] [--config cfg.yaml]
"""


@command.command("to-kg")
@click.argument("path")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "dwie", "docred", "synthetic"]),
    default="auto",
    show_default=True,
    help="Input format.",
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the split of the facts.")
@click.option(
    "--shares",
    default="0.8,0.1,0.1",
    show_default=True,
    help="Train, valid and test shares of the facts (comma-separated).",
)
@click.option("--skip-bad", is_flag=True, help="Skip documents with bad input (counted) instead of failing.")
@click.option("--force", is_flag=True, help="Replace the KG files of an existing, non-empty --out.")
def to_kg(path: str, fmt: str, out_dir: Path, seed: int, shares: str, skip_bad: bool, force: bool) -> None:
    """Write a document corpus's facts as a typed knowledge graph for `method: fednsl-kg`.

    OUT gets train/valid/test.txt (head<TAB>relation<TAB>tail) and entity_types.txt (entity<TAB>type); a
    non-empty OUT is refused unless --force. Entities stay document-scoped (DOC/INDEX:NAME); the facts, not the documents, are split by one seeded
    permutation (configs/fednsl_kg_dwie.yaml reads the same KG directly, as documents:PATH). Example:

      fednsl data to-kg ../shared/data/dwie --out data/dwie_kg
      fednsl train fednsl_kg_dwie --set data.source=data/dwie_kg
    """
    from fednsl.cli.errors import BadInput
    from kg.documents_kg import corpus_to_kg
    from kg.io import missing_training_data
    from kg.triples import write_triples

    try:
        weights = [float(x) for x in shares.split(",")]
    except ValueError:
        raise click.BadParameter(f"{shares!r} must be three comma-separated numbers", param_hint="--shares") from None
    _refuse_nonempty(out_dir, force)
    corpus = _load(path, fmt, skip_bad)
    missing = missing_training_data(corpus, path)
    if missing is not None:  # an empty KG would only fail later, at training
        raise BadInput(f"{missing}; a KG needs relation facts between entities")
    try:
        kg = corpus_to_kg(corpus, seed=seed, shares=weights)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shares") from None
    if force:
        _clear_kg_files(out_dir)
    write_triples(kg, out_dir)
    click.echo(
        f"wrote {kg.name} as a typed KG to {out_dir}: {kg.num_entities} entities of {kg.num_types} types, "
        f"{kg.num_relations} relations, train {len(kg.train)} / valid {len(kg.valid)} / test {len(kg.test)}"
    )


def _parse_shares(text: str | None, num_clients: int, partition: str) -> list[float] | None:
    if text is None:
        return None
    if partition == "relation":
        raise _bad("--shares", "applies to --partition entity or triple only")
    try:
        weights = [float(x) for x in text.split(",")]
    except ValueError:
        weights = []
    if len(weights) != num_clients or not all(0 < w < float("inf") for w in weights):
        raise _bad("--shares", f"{text!r} must be {num_clients} positive numbers, one per client (e.g. 0.7,0.15,0.15)")
    return weights


def _load_kg_source(source: str) -> KnowledgeGraph:
    """A KG source as `method: fednsl-kg` reads it: as given, else resolved as ``data.source`` is."""
    from kg.documents import DataError
    from kg.kg_sources import load_kg

    spec = source == "synthetic" or source.startswith(("synthetic:", "pykeen:"))
    path = source.removeprefix("documents:")
    try:
        if not spec and not Path(path).expanduser().exists():
            from fednsl.methods.fednsl_kg.config import resolve_source

            source = resolve_source(source)
        return load_kg(source)
    except (DataError, OSError, ValueError) as exc:
        raise _fail(exc) from exc


@command.command("split")
@click.argument("source")
@click.option(
    "--partition",
    required=True,
    metavar="entity|triple|relation",
    help="entity: each client owns a share of the entities and keeps the triples between them (the others are "
    "dropped); triple: the triples dealt out; relation: disjoint relation sets.",
)
@click.option("--num-clients", type=int, required=True, help="Number of clients.")
@click.option(
    "--shares",
    default=None,
    metavar="W1,W2,...",
    help="entity/triple: one positive weight per client, sizes proportional to them (default: equal).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the partition.")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder."
)
@click.option("--force", is_flag=True, help="Replace the KG files of an existing, non-empty --out.")
def split(
    source: str, partition: str, num_clients: int, shares: str | None, seed: int, out_dir: Path, force: bool
) -> None:
    """Split the KG SOURCE over clients and write FedLU's federated folder for `data.federated_folder`.

    SOURCE: a triples folder, pykeen:NAME, synthetic[:SEED] or documents:PATH. OUT gets
    client<K>/{train,valid,test}.txt, entity_types.txt (typed KGs) and split.json (the counts). Example:

    \b
      fednsl data split synthetic --partition entity --num-clients 3 --out my_fed_kg
      fednsl train fednsl_kg_synthetic --set data.federated_folder=my_fed_kg
    """
    from kg.kg_partition import PARTITIONS, entity_owners, partition_kg, partition_report, write_federated_kg

    if partition not in PARTITIONS:
        raise _bad("--partition", f"{partition!r} is not one of entity, triple, relation")
    if num_clients < 1:
        raise _bad("--num-clients", f"must be at least 1, got {num_clients}")
    weights = _parse_shares(shares, num_clients, partition)
    if Path(source.removeprefix("documents:")).expanduser().resolve() == out_dir.resolve():
        raise _bad("--out", f"{out_dir} is the source KG's folder; choose another")
    _refuse_nonempty(out_dir, force)
    kg = _load_kg_source(source)
    try:
        parts = partition_kg(kg, num_clients, by=partition, seed=seed, shares=weights)  # type: ignore[arg-type]
    except ValueError as exc:  # too many clients for the KG, or shares that leave a client nothing
        raise _bad("--shares" if "shares" in str(exc) else "--num-clients", str(exc)) from None
    owned = entity_owners(kg.num_entities, num_clients, seed, weights) if partition == "entity" else None
    report = partition_report(kg, parts)
    clients = []
    for k, part in enumerate(parts):
        row: dict[str, Any] = {"client": k}
        if owned is not None:
            row["entities_owned"] = int((owned == k).sum())
        row["entities"] = len(set(part.all_triples()[:, [0, 2]].ravel().tolist()))
        row.update({s: len(part.split(s)) for s in ("train", "valid", "test")})
        clients.append(row)
    if force:
        _clear_kg_files(out_dir)
    write_federated_kg(parts, out_dir)
    kept = {s: r["kept"] for s, r in report.items()}
    dropped = {s: r["dropped"] for s, r in report.items()}
    info: dict[str, Any] = {
        "source": source,
        "kg": kg.name,
        "partition": partition,
        "num_clients": num_clients,
        "shares": weights,
        "seed": seed,
        "entities": kg.num_entities,
        "relations": kg.num_relations,
        "clients": clients,
        "kept": kept,
        "dropped": dropped,
    }
    (out_dir / "split.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")

    def splits(counts: dict[str, int]) -> str:
        return f"train {counts['train']} / valid {counts['valid']} / test {counts['test']}"

    click.echo(
        f"split {kg.name} ({kg.num_entities} entities, {kg.num_relations} relations, "
        f"{splits({s: len(kg.split(s)) for s in report})}) by {partition} over {num_clients} clients (seed {seed})"
    )
    for row in clients:
        ents = f"{row['entities']} entities in its triples"
        if owned is not None:
            ents = f"{row['entities_owned']} entities owned, {row['entities']} in its triples"
        click.echo(f"  client{row['client']}: {ents}; {splits(row)}")
    if any(dropped.values()):
        click.echo(f"dropped (triples between two clients' entities): {splits(dropped)}")
    else:
        click.echo("dropped: none")
    for row in clients:
        empty = [s for s in ("train", "test") if not row[s]]
        if empty:
            click.echo(
                f"warning: client{row['client']} has no {' and no '.join(empty)} triples "
                "(use fewer clients or larger shares)"
            )
    files = "{train,valid,test}.txt" + (", entity_types.txt" if kg.entity_types is not None else "")
    click.echo(f"wrote {out_dir}: client0..client{num_clients - 1}/{files}, split.json")
    click.echo(f"train on it: fednsl train fednsl_kg_synthetic --set data.federated_folder={shlex.quote(str(out_dir))}")


@command.command("prepare", help=PREPARE_HELP)
@click.argument("dataset", type=click.Choice(["dwie", "synthetic"]))
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="DWIE: a local checkout, its data/annos(_with_content) folder, or dwie_annos.tar.gz.",
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder."
)
@click.option("--skip-bad", is_flag=True, help="Skip documents with bad input (counted) instead of failing.")
@click.option(
    "--docred/--no-docred",
    default=True,
    show_default=True,
    help="DWIE: also write tokenised docred-style files when the article text is present.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Synthetic: generator seed.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Synthetic: YAML/JSON file of PlantedRuleConfig fields.",
)
def prepare(
    dataset: str, source: Path | None, out_dir: Path, skip_bad: bool, docred: bool, seed: int, config_path: Path | None
) -> None:
    from kg.documents import DataError

    try:
        if dataset == "synthetic":
            _prepare_synthetic(out_dir, seed, config_path)
        else:
            if source is None:
                raise click.UsageError("prepare dwie needs --from (a local DWIE checkout or its annotations)")
            _prepare_dwie(source, out_dir, skip_bad, docred)
    except (DataError, OSError) as exc:
        raise _fail(exc) from exc


def _prepare_synthetic(out_dir: Path, seed: int, config_path: Path | None) -> None:
    from kg.synthetic import PlantedRuleConfig, write

    config = PlantedRuleConfig()
    if config_path is not None:
        if config_path.suffix in (".yaml", ".yml"):
            from kg.yaml_io import load_yaml

            data = load_yaml(config_path.read_text(encoding="utf-8")) or {}
        else:
            data = json.loads(config_path.read_text(encoding="utf-8"))
        seed = int(data.pop("seed", seed))
        config = PlantedRuleConfig.from_dict(data)
    write(out_dir, config, seed)
    click.echo(f"wrote the synthetic corpus (seed {seed}) to {out_dir}")


def _prepare_dwie(source: Path, out_dir: Path, skip_bad: bool, docred: bool) -> None:
    from kg.docred import write_docred
    from kg.documents import Corpus
    from kg.dwie import DWIE_COARSE_TYPES, DWIE_RELATIONS, iter_dwie_json, read_dwie, tokenize_documents
    from kg.split import eligible_documents

    corpus = read_dwie(source, skip_bad=skip_bad)
    for line in corpus.report.lines()[1:]:
        click.echo(line)
    bad = {s.doc_id for s in corpus.report.skipped}
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "dwie_annos.tar.gz"
    tmp = target.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for _file, obj in iter_dwie_json(source):
            if isinstance(obj, Exception) or not isinstance(obj, dict) or str(obj.get("id")) in bad:
                continue
            folder = "data/annos_with_content" if "content" in obj else "data/annos"
            data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
            info = tarfile.TarInfo(f"{folder}/{obj['id']}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shutil.move(tmp, target)
    meta = out_dir / "docred_style" / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    rel_names = corpus.relations.names
    if set(rel_names) <= set(DWIE_RELATIONS):
        rel_names = DWIE_RELATIONS
    (meta / "rel2id.json").write_text(json.dumps({"Na": 0, **{n: i + 1 for i, n in enumerate(rel_names)}}))
    (meta / "ner2id.json").write_text(json.dumps({f"type::{t}": i for i, t in enumerate(DWIE_COARSE_TYPES)}))
    n_text = sum(d.text is not None for d in corpus.documents)
    kept, excluded = eligible_documents(corpus)
    click.echo(
        f"{len(corpus)} documents ({', '.join(f'{k} {v}' for k, v in corpus.splits.items())}), "
        f"{sum(d.num_entities for d in corpus.documents)} entities, "
        f"{sum(d.num_facts for d in corpus.documents)} facts, {len(corpus.relations)} relations; "
        f"{len(kept)} with entities (excluded: {', '.join(d for d, _ in excluded) or 'none'})"
    )
    click.echo(f"wrote {target} and {meta}")
    if docred and n_text == len(corpus) and len(corpus):
        kept_corpus = Corpus(
            documents=kept,
            relations=corpus.relations,
            entity_types=corpus.entity_types,
            name=corpus.name,
            report=corpus.report,
            meta=dict(corpus.meta),
        )
        written = write_docred(tokenize_documents(kept_corpus), out_dir / "docred_style")
        click.echo("wrote " + ", ".join(str(w) for w in written))
    elif docred:
        click.echo(
            f"no docred-style files: {len(corpus) - n_text} documents have no article text "
            "(run DWIE's src/dwie_download.py to fetch it)"
        )
