"""Planted-rule synthetic documents: the small, fast, embedded default dataset of the README demo.

Generative story (seeded, ``numpy.random.Generator`` only):

1. each document gets ``N ~ U{entities_per_doc}`` entities with types drawn from ``entity_types``;
2. base facts: for every base relation ``r: A -> B`` and every entity ``x`` of type ``A``, with probability
   ``base_fact_prob`` one fact ``r(x, y)`` with ``y`` drawn uniformly from the other type-``B`` entities;
3. derived facts, one head relation at a time (in dependency order): for every pair ``x != y`` where the
   body of a planted rule ``head <- b1, ..., bl`` holds (chain ``b1(x, z1) ^ ... ^ bl(z_{l-1}, y)``,
   ``~b`` = inverse ``b(z, x)``), ``head(x, y)`` is added with probability ``rule_confidence`` (one uniform
   draw per pair, compared with the largest confidence of the rules whose body holds, so every rule's
   confidence #(body ^ head) / #body equals its stated value in expectation); at type-consistent pairs
   where no body holds, ``head(x, y)`` is added with probability ``noise`` (facts no rule explains);
4. text: one sentence ``"<Name> is a(n) <type> ."`` per entity and one ``"<H> <relation words> <T> ."`` per base
   fact (derived facts are never stated: they must be inferred), shuffled; ``test_ratio`` of the documents
   are tagged ``test``.

Every planted rule is type-consistent (its body chains relation signatures from the head's head type to its
tail type) and its head is a derived relation, so the entity-type groups of :mod:`kg.split` give each
client its own head–tail combos. :func:`write` stores the corpus in docred format plus
``planted_rules.txt`` (``head <- b1, ~b2``, as ``golden_rules.txt``) and ``synthetic.json`` (config, seed,
rules with confidences); :func:`generate` is the in-memory path.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg.documents import Corpus, DataError, Document, LoadReport, Mention, Vocab

__all__ = [
    "DEFAULT_BASE_RELATIONS",
    "DEFAULT_RULES",
    "PlantedRule",
    "PlantedRuleConfig",
    "parse_rule",
    "format_rule",
    "read_rules",
    "write_rules",
    "generate",
    "write",
    "MANIFEST",
    "RULES_FILE",
    "rules_from_manifest",
]

MANIFEST = "synthetic.json"
RULES_FILE = "planted_rules.txt"

#: (name, head type, tail type) of the observed ("base") relations.
DEFAULT_BASE_RELATIONS: tuple[tuple[str, str, str], ...] = (
    ("in0", "location", "location"),
    ("based_in", "organization", "location"),
    ("member_of", "person", "organization"),
    ("citizen_of", "person", "location"),
    ("event_in", "event", "location"),
    ("participant_in", "person", "event"),
    ("spouse_of", "person", "person"),
)

#: Planted rules of the default set: every head–tail group combo of the default groups
#: A = {location, organization}, B = {person, event} has rules; lengths 1–3, with inverses.
DEFAULT_RULES: tuple[str, ...] = (
    "based_in_region <- based_in, in0",  # A->A, length 2
    "hosts <- ~based_in",  # A->A, length 1, inverse
    "venue_of <- ~event_in",  # A->B, length 1, inverse
    "sponsor_of <- ~member_of, participant_in",  # A->B, length 2
    "works_in <- member_of, based_in",  # B->A, length 2
    "works_in_region <- member_of, based_in, in0",  # B->A, length 3
    "travelled_to <- participant_in, event_in",  # B->A, length 2
    "colleague_of <- member_of, ~member_of",  # B->B, length 2
    "co_participant_of <- participant_in, ~participant_in",  # B->B, length 2
    "family_member_of <- spouse_of, member_of",  # B->A, length 2
)

_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ra",
    "ven",
    "dor",
    "ta",
    "sel",
    "ri",
    "an",
    "bo",
    "ul",
    "zen",
    "mar",
    "qui",
    "fe",
    "ho",
    "lin",
    "gar",
    "tes",
    "vo",
    "ny",
    "pra",
    "mo",
)


@dataclass(frozen=True)
class PlantedRule:
    """``head(X, Y) <- body[0](X, Z1) ^ ... ^ body[-1](Z, Y)``; ``"~r"`` in ``body`` is the inverse of ``r``."""

    head: str
    body: tuple[str, ...]
    confidence: float
    head_type: str = ""
    tail_type: str = ""

    @property
    def text(self) -> str:
        return format_rule(self.head, self.body)

    def channels(self, relations: Vocab) -> tuple[int, ...]:
        """Body as tensor channels: ``r`` for relation ``r``, ``R + r`` for ``~r`` (``kg.graph`` convention)."""
        r_ = len(relations)
        return tuple(r_ + relations.index(b[1:]) if b.startswith("~") else relations.index(b) for b in self.body)

    def head_id(self, relations: Vocab) -> int:
        return relations.index(self.head)


def parse_rule(text: str) -> tuple[str, tuple[str, ...]]:
    """``"head <- b1, ~b2"`` → ``("head", ("b1", "~b2"))``; raises :class:`DataError` on bad syntax."""
    if "<-" not in text:
        raise DataError(f"rule {text!r} must read 'head <- b1, b2, ...'")
    head, body = (part.strip() for part in text.split("<-", 1))
    atoms = tuple(a.strip() for a in body.split(",") if a.strip())
    if not head or not atoms or head.startswith("~") or any(a in ("~", "") for a in atoms):
        raise DataError(f"rule {text!r} must read 'head <- b1, b2, ...' with a non-inverse head")
    return head, atoms


def format_rule(head: str, body: Sequence[str]) -> str:
    return f"{head} <- {', '.join(body)}"


def read_rules(path: str | Path) -> list[tuple[str, tuple[str, ...]]]:
    """Rules from a ``golden_rules.txt``-style file (``#`` comments, one ``head <- body`` per line)."""
    out = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                out.append(parse_rule(line))
            except DataError as exc:
                raise DataError(f"line {lineno}: {exc.reason}", file=str(path)) from None
    return out


def write_rules(path: str | Path, rules: Sequence[PlantedRule], header: str = "") -> None:
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    lines += ["# One rule per line: head <- body1, body2 ('~r' = inverse of r; a body chains r1(X,Z) ^ r2(Z,Y))."]
    lines += [r.text for r in rules]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class PlantedRuleConfig:
    """Configuration of the planted-rule generator (defaults: the README demo set, ~0.1 s to generate)."""

    entity_types: tuple[str, ...] = ("location", "organization", "person", "event")
    type_weights: tuple[float, ...] | None = None
    ner_groups: tuple[tuple[str, ...], ...] = (("location", "organization"), ("person", "event"))
    base_relations: tuple[tuple[str, str, str], ...] = DEFAULT_BASE_RELATIONS
    rules: tuple[str, ...] = DEFAULT_RULES
    num_random_rules: int = 0
    random_rule_lengths: tuple[int, ...] = (1, 2, 3)
    num_documents: int = 200
    entities_per_doc: tuple[int, int] = (10, 16)
    base_fact_prob: float = 0.7
    rule_confidence: float = 0.9
    noise: float = 0.01
    test_ratio: float = 0.25
    rule_confidences: tuple[tuple[str, float], ...] = ()  # (rule text, confidence) overrides

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlantedRuleConfig:
        """Config from plain data (JSON/YAML); lists become tuples; unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise DataError(f"unknown synthetic config keys {sorted(unknown)} (known: {sorted(names)})")

        def tup(x: Any) -> Any:
            return tuple(tup(v) for v in x) if isinstance(x, list | tuple) else x

        data = dict(data)
        if isinstance(data.get("rule_confidences"), dict):
            data["rule_confidences"] = list(data["rule_confidences"].items())
        return cls(**{k: tup(v) for k, v in data.items()})

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))


def _signatures(config: PlantedRuleConfig) -> dict[str, tuple[str, str]]:
    types = set(config.entity_types)
    sig: dict[str, tuple[str, str]] = {}
    for name, ht, tt in config.base_relations:
        if ht not in types or tt not in types:
            raise DataError(f"base relation {name!r}: types {ht!r}/{tt!r} must be among {config.entity_types}")
        if name in sig:
            raise DataError(f"base relation {name!r} declared twice")
        sig[name] = (ht, tt)
    return sig


def _step(sig: dict[str, tuple[str, str]], atom: str) -> tuple[str, str]:
    inv = atom.startswith("~")
    name = atom[1:] if inv else atom
    if name not in sig:
        raise DataError(f"rule body uses relation {name!r}, which is neither a base relation nor a planted head")
    a, b = sig[name]
    return (b, a) if inv else (a, b)


def _random_rules(config: PlantedRuleConfig, sig: dict[str, tuple[str, str]], rng: np.random.Generator) -> list[str]:
    base = [name for name, _, _ in config.base_relations]
    atoms = base + ["~" + b for b in base]
    out: list[str] = []
    for k in range(config.num_random_rules):
        for _ in range(1000):
            length = int(rng.choice(config.random_rule_lengths))
            start = config.entity_types[int(rng.integers(len(config.entity_types)))]
            cur = start
            body: list[str] = []
            for _ in range(length):
                choices = [
                    a
                    for a in atoms
                    if _step(sig, a)[0] == cur and not (body and (a == "~" + body[-1] or "~" + a == body[-1]))
                ]
                if not choices:
                    break
                atom = choices[int(rng.integers(len(choices)))]
                body.append(atom)
                cur = _step(sig, atom)[1]
            if len(body) == length:
                out.append(format_rule(f"derived_{k}", body))
                break
        else:
            raise DataError("could not build a random type-consistent rule; add base relations")
    return out


def _resolve_rules(
    config: PlantedRuleConfig, rng: np.random.Generator
) -> tuple[list[PlantedRule], dict[str, tuple[str, str]], list[str]]:
    """Parse + type-check the planted rules; returns rules, all signatures, head order (dependencies first)."""
    sig = _signatures(config)
    base = set(sig)
    texts = list(config.rules) + _random_rules(config, sig, rng)
    parsed = [parse_rule(t) for t in texts]
    heads = list(dict.fromkeys(h for h, _ in parsed))
    for h in heads:
        if h in base:
            raise DataError(
                f"planted rule head {h!r} is a base relation; heads must be derived relations so that "
                "their confidence is controlled"
            )
    # head signatures from bodies, resolving heads used in other bodies (dependency order, cycles rejected)
    order: list[str] = []
    pending = dict.fromkeys(heads)
    while pending:
        progressed = False
        for h in list(pending):
            bodies = [b for hh, b in parsed if hh == h]
            if any(a.lstrip("~") in pending for body in bodies for a in body):
                continue
            ends: set[tuple[str, str]] = set()
            for body in bodies:
                start: str | None = None
                cur: str | None = None
                for atom in body:
                    a, b = _step(sig, atom)
                    if cur is not None and a != cur:
                        raise DataError(
                            f"rule {format_rule(h, body)!r} is not type-consistent: {atom!r} starts at "
                            f"{a!r} but the chain is at {cur!r}"
                        )
                    start = a if start is None else start
                    cur = b
                assert start is not None and cur is not None  # parse_rule: a body has at least one atom
                ends.add((start, cur))
            if len(ends) != 1:
                raise DataError(f"rules for head {h!r} disagree on its types: {sorted(ends)}")
            sig[h] = ends.pop()
            order.append(h)
            del pending[h]
            progressed = True
        if not progressed:
            raise DataError(f"planted rules are cyclic among heads {sorted(pending)}")
    rules = []
    for h, body in parsed:
        text = format_rule(h, body)
        conf = float(dict(config.rule_confidences).get(text, config.rule_confidence))
        if not 0.0 <= conf <= 1.0:
            raise DataError(f"confidence {conf} of rule {text!r} must be in [0, 1]")
        rules.append(PlantedRule(h, tuple(body), conf, sig[h][0], sig[h][1]))
    return rules, sig, order


def _body_matrix(body: Sequence[str], mats: dict[str, np.ndarray]) -> np.ndarray:
    """(N, N) bool: the chain ``body`` holds from x to y (boolean matrix product; ``~r`` = transpose)."""
    out = None
    for atom in body:
        m = mats[atom[1:]].T if atom.startswith("~") else mats[atom]
        out = m.copy() if out is None else (out.astype(np.int64) @ m.astype(np.int64)) > 0
    assert out is not None
    return out


def _name(rng: np.random.Generator, used: set[str]) -> str:
    while True:
        k = int(rng.integers(2, 4))
        name = "".join(_SYLLABLES[int(i)] for i in rng.integers(len(_SYLLABLES), size=k)).capitalize()
        if name not in used:
            used.add(name)
            return name


def generate(config: PlantedRuleConfig | None = None, seed: int = 0) -> tuple[Corpus, list[PlantedRule]]:
    """Generate the corpus and return it with its planted rules (in-memory path; deterministic in ``seed``)."""
    config = config or PlantedRuleConfig()
    rng = np.random.default_rng(seed)
    rules, sig, order = _resolve_rules(config, rng)
    types = config.entity_types
    base_names = [name for name, _, _ in config.base_relations]
    relations = Vocab(tuple(base_names + order), kind="relation")
    type_vocab = Vocab(types, kind="entity type")
    for group in config.ner_groups:
        for t in group:
            type_vocab.index(t)
    lo, hi = config.entities_per_doc
    if not 1 <= lo <= hi:
        raise DataError(f"entities_per_doc {config.entities_per_doc} must satisfy 1 <= low <= high")
    weights = np.asarray(config.type_weights or [1.0] * len(types), dtype=np.float64)
    if weights.shape != (len(types),) or (weights < 0).any() or weights.sum() <= 0:
        raise DataError(f"type_weights {config.type_weights} must be {len(types)} non-negative numbers")
    weights = weights / weights.sum()
    n_test = int(round(config.num_documents * config.test_ratio))
    test_ids = set(rng.permutation(config.num_documents)[:n_test].tolist())
    rules_by_head = {h: [r for r in rules if r.head == h] for h in order}

    docs = []
    for i in range(config.num_documents):
        n = int(rng.integers(lo, hi + 1))
        etypes = rng.choice(len(types), size=n, p=weights)
        of_type = {t: np.flatnonzero(etypes == k) for k, t in enumerate(types)}
        mats = {r: np.zeros((n, n), dtype=bool) for r in relations.names}
        base_facts: list[tuple[int, str, int]] = []
        for name, ht, tt in config.base_relations:
            for src in of_type[ht]:
                if rng.random() >= config.base_fact_prob:
                    continue
                cands = of_type[tt][of_type[tt] != src]
                if len(cands):
                    y = int(cands[int(rng.integers(len(cands)))])
                    mats[name][src, y] = True
                    base_facts.append((int(src), name, y))
        off_diag = ~np.eye(n, dtype=bool)
        for h in order:
            conf = np.zeros((n, n))
            for rule in rules_by_head[h]:
                holds = _body_matrix(rule.body, mats) & off_diag
                conf = np.maximum(conf, holds * rule.confidence)
            supported = conf > 0
            typed = np.outer(etypes == types.index(sig[h][0]), etypes == types.index(sig[h][1])) & off_diag
            u = rng.random((n, n))
            mats[h] = (u < conf) | (typed & ~supported & (rng.random((n, n)) < config.noise))
        facts = np.asarray(
            [(x, relations.index(r), y) for r in relations.names for x, y in zip(*np.nonzero(mats[r]))], dtype=np.int64
        ).reshape(-1, 3)

        used: set[str] = set()
        names = [_name(rng, used) for _ in range(n)]
        sentences: list[tuple[list[str], list[tuple[int, int]]]] = []  # tokens, (entity, token index)
        for e in range(n):
            tname = types[etypes[e]]
            article = "an" if tname[:1].lower() in "aeiou" else "a"
            sentences.append(([names[e], "is", article, tname, "."], [(e, 0)]))
        fact_sents: list[tuple[list[str], list[tuple[int, int]]]] = []
        for x, r, y in base_facts:
            words = r.replace("_", " ").split()
            fact_sents.append(([names[x], *words, names[y], "."], [(x, 0), (y, 1 + len(words))]))
        for k in rng.permutation(len(fact_sents)):
            sentences.append(fact_sents[int(k)])
        tokens: list[str] = []
        starts: list[int] = []
        mentions: list[Mention] = []
        for s, (toks, ments) in enumerate(sentences):
            starts.append(len(tokens))
            for e, pos in ments:
                mentions.append(
                    Mention(
                        entity=e,
                        start=len(tokens) + pos,
                        end=len(tokens) + pos + 1,
                        text=names[e],
                        sent=s,
                        unit="token",
                    )
                )
            tokens.extend(toks)
        # order mentions entity-major (the docred layout), so written and re-read documents compare equal
        mentions.sort(key=lambda m: (m.entity, m.start))
        docs.append(
            Document(
                doc_id=f"SYN_{i:05d}",
                entity_names=names,
                entity_types=etypes.astype(np.int64),
                facts=facts,
                split="test" if i in test_ids else "train",
                mentions=mentions,
                tokens=tokens,
                sentence_starts=starts,
            )
        )
    report = LoadReport(source=f"synthetic(seed={seed})", format="synthetic")
    corpus = Corpus(
        documents=docs,
        relations=relations,
        entity_types=type_vocab,
        name="synthetic",
        report=report,
        meta={
            "type_prefix": "type::",
            "format": "synthetic",
            "seed": seed,
            "ner_groups": [list(g) for g in config.ner_groups],
            "planted_rules": [r.text for r in rules],
            "config": config.to_dict(),
        },
    )
    return corpus, rules


def write(
    directory: str | Path, config: PlantedRuleConfig | None = None, seed: int = 0, *, compress: bool = False
) -> Path:
    """Generate and write the corpus in docred format + ``planted_rules.txt`` + ``synthetic.json``."""
    from kg.docred import write_docred

    config = config or PlantedRuleConfig()
    corpus, rules = generate(config, seed)
    directory = Path(directory)
    write_docred(corpus, directory, compress=compress)
    write_rules(
        directory / RULES_FILE,
        rules,
        header=f"Planted rules of the fednsl synthetic corpus (seed {seed}); confidences in {MANIFEST}.",
    )
    manifest = {
        "generator": "kg.synthetic",
        "seed": seed,
        "config": config.to_dict(),
        "ner_groups": [list(g) for g in config.ner_groups],
        "rules": [
            {
                "text": r.text,
                "head": r.head,
                "body": list(r.body),
                "confidence": r.confidence,
                "head_type": r.head_type,
                "tail_type": r.tail_type,
            }
            for r in rules
        ],
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return directory


def rules_from_manifest(directory: str | Path) -> list[PlantedRule]:
    """The planted rules stored by :func:`write`."""
    data = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
    return [
        PlantedRule(r["head"], tuple(r["body"]), float(r["confidence"]), r.get("head_type", ""), r.get("tail_type", ""))
        for r in data["rules"]
    ]
