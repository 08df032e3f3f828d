"""Rule file formats of other rule learners (anchors.md §A): AnyBURL/PyClause, AMIE 3, RNNLogic, LogiRE.

- AnyBURL / PyClause (SAFRAN docs "input format"; PyClause ``docs/data/loading_rules.rst``): one rule per line,
  ``predicted<TAB>correct<TAB>confidence<TAB>h(X,Y) <= b1(X,A), b2(A,Y)``; predicted = #body groundings,
  correct = #body groundings whose head holds (support), confidence = correct / predicted. The rule alone
  (no columns) is read too. Variables are single capitals; an inverse body token swaps the atom's arguments.
- AMIE 3 TSV (``dig-team/amie`` ``OutputColumn.java``/README): header
  ``Rule, Head Coverage, Std Confidence, PCA Confidence, Positive Examples, Body size, PCA Body size,
  Functional variable``; rule text ``?a  b1  ?c  ?c  b2  ?b   => ?a  h  ?b``.
- RNNLogic (``DeepGraphLearning/RNNLogic``, ``RNNLogic+/src/predictors.py: set_rules``): ``head b1 ... bL``
  integer ids per line. Its ``relations.dict`` lists the R relations followed by their R inverses
  (``FB15k-237``: id 237 = ``!/organization/...headquarters...`` = inverse of id 0), i.e. inverse of r is r+R and
  the padding id is 2R -- exactly this project's token layout. Files hold heads in [0, 2R), bodies of length
  0-5 and duplicates; inverse heads are rewritten (``~h <- b1..bn`` = ``h <- ~bn..~b1``).
- LogiRE (``rudongyu/LogiRE`` ``data/dwie.grules.json``): ``[[head, [body ids]], ...]`` with inverse = id+R.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rules.fol import (
    MAX_BODY_LENGTH,
    RelationVocab,
    Rule,
    RuleSyntaxError,
    chain_from_atoms,
    is_anyburl_variable,
)

__all__ = [
    "AMIE_COLUMNS",
    "ScoredRule",
    "format_amie",
    "format_amie_rule",
    "format_anyburl",
    "format_anyburl_rule",
    "format_logire_json",
    "format_rnnlogic",
    "load_relation_names",
    "parse_amie",
    "parse_amie_rule",
    "parse_anyburl",
    "parse_anyburl_rule",
    "parse_logire_json",
    "parse_rnnlogic",
    "read_rnnlogic_relations",
    "unique_rules",
    "without_zero_support",
]

AMIE_COLUMNS = (
    "Rule",
    "Head Coverage",
    "Std Confidence",
    "PCA Confidence",
    "Positive Examples",
    "Body size",
    "PCA Body size",
    "Functional variable",
)


@dataclass(frozen=True)
class ScoredRule:
    """A rule with the counts/measures other systems print beside it (``None`` when absent).

    support = #(x,y) body ∧ head ("correct"/"Positive Examples"); body_size = #(x,y) body ("predicted"/"Body size");
    pca_body_size = #(x,y) body ∧ ∃y' head(x,y'); head_size = #head facts.
    """

    rule: Rule
    support: int | None = None
    body_size: int | None = None
    pca_body_size: int | None = None
    head_size: int | None = None
    confidence: float | None = None
    pca_confidence: float | None = None
    head_coverage: float | None = None


def without_zero_support(rules: Iterable[ScoredRule]) -> tuple[list[ScoredRule], int]:
    """The rules whose recorded support is not 0, and how many were dropped (rules without counts are kept).

    A zero-support rule never predicts a known fact of the data it was counted on (AMIE would not output it; its
    confidence is 0, or 0/0 when its body never holds), so exports leave it out.
    """
    items = list(rules)
    kept = [r for r in items if r.support is None or r.support != 0]
    return kept, len(items) - len(kept)


def _ratio(num: int | None, den: int | None) -> float | None:
    if num is None or den is None:
        return None
    return num / den if den else math.nan


def _fmt_float(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.6g}"


def _check_names(vocab: RelationVocab, forbidden: str, fmt: str) -> None:
    for name in vocab.names:
        bad = [c for c in forbidden if c in name]
        if bad:
            raise ValueError(f"relation name {name!r} contains {bad[0]!r} and cannot be written in {fmt} syntax")


# --- AnyBURL / PyClause -----------------------------------------------------------------------

_ATOM = re.compile(r"\s*([^\s(),][^()]*?)\(\s*([^(),\s]+)\s*,\s*([^(),\s]+)\s*\)\s*")


def _split_atoms(text: str) -> list[tuple[str, str, str]]:
    text = text.strip()
    atoms: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        m = _ATOM.match(text, pos)
        if not m:
            raise RuleSyntaxError(f"cannot read an atom 'rel(A,B)' at {text[pos : pos + 30]!r}")
        atoms.append((m.group(1).strip(), m.group(2), m.group(3)))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise RuleSyntaxError(f"expected ',' between atoms at {text[pos : pos + 30]!r}")
            pos += 1
    return atoms


def parse_anyburl_rule(text: str, vocab: RelationVocab) -> Rule:
    """``h(X,Y) <= b1(X,A), b2(A,Y)`` -> :class:`Rule` (body atoms in any order; constants rejected)."""
    if text.count("<=") != 1:
        raise RuleSyntaxError("expected one '<=' between head and body (AnyBURL syntax 'h(X,Y) <= b(X,Y)')")
    head_text, body_text = text.split("<=")
    head_atoms = _split_atoms(head_text)
    if len(head_atoms) != 1:
        raise RuleSyntaxError(f"the head must be one atom, found {len(head_atoms)}")
    hname, hx, hy = head_atoms[0]
    head = vocab.relation_id(hname)
    atoms = [(vocab.relation_id(n), a, b) for n, a, b in _split_atoms(body_text)] if body_text.strip() else []
    body = chain_from_atoms((hx, hy), atoms, vocab.num_relations, is_anyburl_variable)
    return Rule(head, body)


def format_anyburl_rule(rule: Rule, vocab: RelationVocab) -> str:
    head, body = rule.atoms(vocab)
    return f"{head.format(vocab)} <= {', '.join(a.format(vocab) for a in body)}"


def parse_anyburl(text: str, vocab: RelationVocab, *, source: str = "<string>") -> list[ScoredRule]:
    """AnyBURL rule file (``predicted\\tcorrect\\tconfidence\\trule`` or bare rules); ``#`` lines skipped."""
    out: list[ScoredRule] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            fields = line.split("\t")
            if len(fields) == 1:
                # tolerate space-separated columns: three leading numbers then the rule
                m = re.match(r"^(\d+)\s+(\d+)\s+([0-9.eE+-]+|nan)\s+(.*)$", line)
                fields = list(m.groups()) if m else fields
            if len(fields) == 1:
                out.append(ScoredRule(parse_anyburl_rule(fields[0], vocab)))
                continue
            if len(fields) != 4:
                raise RuleSyntaxError(
                    f"expected 4 tab-separated fields (predicted, correct, confidence, rule), got {len(fields)}"
                )
            try:
                predicted, correct, conf = int(fields[0]), int(fields[1]), float(fields[2])
            except ValueError:
                raise RuleSyntaxError(
                    f"columns must be predicted (int), correct (int), confidence (float); got {fields[:3]}"
                ) from None
            out.append(
                ScoredRule(parse_anyburl_rule(fields[3], vocab), support=correct, body_size=predicted, confidence=conf)
            )
        except RuleSyntaxError as err:
            raise err.located(line=lineno, source=source, text=raw) from None
    return out


def format_anyburl(rules: Iterable[Rule | ScoredRule], vocab: RelationVocab) -> str:
    """AnyBURL/PyClause rule file; rules without counts are written bare (PyClause then needs ``stats``)."""
    _check_names(vocab, "(), \t", "AnyBURL")
    lines = []
    for item in rules:
        sr = item if isinstance(item, ScoredRule) else ScoredRule(item)
        text = format_anyburl_rule(sr.rule, vocab)
        if sr.body_size is None or sr.support is None:
            lines.append(text)
        else:
            conf = sr.confidence if sr.confidence is not None else _ratio(sr.support, sr.body_size)
            lines.append(f"{sr.body_size}\t{sr.support}\t{_fmt_float(conf)}\t{text}")
    return "\n".join(lines) + ("\n" if lines else "")


# --- AMIE 3 -----------------------------------------------------------------------------------


def _amie_variables(n_body: int) -> list[str]:
    return ["?a", *[f"?{chr(ord('c') + i)}" for i in range(n_body - 1)], "?b"]


def format_amie_rule(rule: Rule, vocab: RelationVocab) -> str:
    """``?a  b1  ?c  ?c  b2  ?b   => ?a  h  ?b`` (AMIE's double-space layout)."""
    head, body = rule.atoms(vocab)
    names = dict(zip(["X", "A", "B", "C", "Y"], ["?a", "?c", "?d", "?e", "?b"]))
    atoms = "  ".join(f"{names[a.subject]}  {vocab.names[a.relation]}  {names[a.object]}" for a in body)
    return f"{atoms}   => {names[head.subject]}  {vocab.names[head.relation]}  {names[head.object]}"


def parse_amie_rule(text: str, vocab: RelationVocab) -> Rule:
    if text.count("=>") != 1:
        raise RuleSyntaxError("expected one '=>' (AMIE syntax '?a  body  ?b   => ?a  head  ?b')")
    body_text, head_text = text.split("=>")
    head_tok, body_tok = head_text.split(), body_text.split()
    if len(head_tok) != 3:
        raise RuleSyntaxError(f"the head must be one atom '?x rel ?y', got {head_text.strip()!r}")
    if len(body_tok) % 3:
        raise RuleSyntaxError(f"body atoms come in triples '?x rel ?y'; got {len(body_tok)} tokens")
    hx, hname, hy = head_tok
    head = vocab.relation_id(hname)
    atoms = [(vocab.relation_id(body_tok[i + 1]), body_tok[i], body_tok[i + 2]) for i in range(0, len(body_tok), 3)]
    body = chain_from_atoms((hx, hy), atoms, vocab.num_relations, lambda s: s.startswith("?") and len(s) > 1)
    return Rule(head, body)


def format_amie(rules: Iterable[ScoredRule | Rule], vocab: RelationVocab) -> str:
    """AMIE 3 TSV with its header; missing measures are written as ``nan``."""
    _check_names(vocab, " \t", "AMIE")
    lines = ["\t".join(AMIE_COLUMNS)]
    for item in rules:
        sr = item if isinstance(item, ScoredRule) else ScoredRule(item)
        hc = sr.head_coverage if sr.head_coverage is not None else _ratio(sr.support, sr.head_size)
        std = sr.confidence if sr.confidence is not None else _ratio(sr.support, sr.body_size)
        pca = sr.pca_confidence if sr.pca_confidence is not None else _ratio(sr.support, sr.pca_body_size)
        ints = ["nan" if v is None else str(int(v)) for v in (sr.support, sr.body_size, sr.pca_body_size)]
        row = [format_amie_rule(sr.rule, vocab), _fmt_float(hc), _fmt_float(std), _fmt_float(pca), *ints, "?a"]
        lines.append("\t".join(row))
    return "\n".join(lines) + "\n"


def parse_amie(text: str, vocab: RelationVocab, *, source: str = "<string>") -> list[ScoredRule]:
    """AMIE TSV (header optional; AMIE's log lines before the header are skipped)."""
    out: list[ScoredRule] = []
    seen_header = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        fields = raw.rstrip("\n").split("\t")
        if fields[0] == "Rule":
            seen_header = True
            continue
        if not raw.strip() or "=>" not in fields[0]:
            if seen_header and raw.strip():
                raise RuleSyntaxError("row without an AMIE rule ('=>')", line=lineno, source=source, text=raw)
            continue
        try:
            rule = parse_amie_rule(fields[0], vocab)

            def num(i: int, cast: type) -> float | int | None:
                if i >= len(fields) or fields[i].strip() in ("", "nan", "NaN"):
                    return None
                try:
                    return cast(float(fields[i])) if cast is int else cast(fields[i])
                except ValueError:
                    raise RuleSyntaxError(f"column {AMIE_COLUMNS[i]!r} is not a number: {fields[i]!r}") from None

            hc, std, pca = num(1, float), num(2, float), num(3, float)
            support, body, pca_body = num(4, int), num(5, int), num(6, int)
            head_size = round(support / hc) if support is not None and hc else None
            out.append(
                ScoredRule(rule, support, body, pca_body, head_size, std, pca, hc)  # type: ignore[arg-type]
            )
        except RuleSyntaxError as err:
            raise err.located(line=lineno, source=source, text=raw) from None
    return out


# --- RNNLogic ---------------------------------------------------------------------------------


def read_rnnlogic_relations(path: str | Path) -> tuple[str, ...]:
    """Base relation names from an RNNLogic ``relations.dict`` (``id<TAB>name``).

    RNNLogic+ dictionaries list 2R entries whose second half is the first half with a common prefix
    (``!`` in FB15k-237); then the first R are returned. Otherwise all entries are relations.
    """
    path = Path(path)
    entries: dict[int, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        parts = raw.split("\t")
        if len(parts) != 2 or not parts[0].strip().isdigit():
            raise RuleSyntaxError("expected 'id<TAB>name'", line=lineno, source=str(path), text=raw)
        entries[int(parts[0])] = parts[1].strip()
    names = [entries[i] for i in sorted(entries)]
    if sorted(entries) != list(range(len(entries))):
        raise ValueError(f"{path}: relation ids are not 0..{len(entries) - 1}")
    half = len(names) // 2
    if len(names) % 2 == 0 and half:
        first, second = names[:half], names[half:]
        prefix_len = len(second[0]) - len(first[0])
        if prefix_len > 0:
            prefix = second[0][:prefix_len]
            if all(s == prefix + f for f, s in zip(first, second)):
                return tuple(first)
    return tuple(names)


def _rnnlogic_rule(ids: list[int], vocab: RelationVocab) -> Rule:
    R = vocab.num_relations
    for t in ids:
        if not 0 <= t < 2 * R:
            raise RuleSyntaxError(f"relation id {t} outside [0, 2R={2 * R}) (RNNLogic ids: r, and r+R for its inverse)")
    head, body = ids[0], tuple(ids[1:])
    if not body:
        raise RuleSyntaxError("rule has no body (RNNLogic zero-length rule)")
    if len(body) > MAX_BODY_LENGTH:
        raise RuleSyntaxError(f"body has {len(body)} atoms; chain rules have at most {MAX_BODY_LENGTH}")
    if head >= R:  # ~h(X,Y) <- b1..bn  ==  h(X,Y) <- ~bn..~b1
        head, body = head - R, tuple(vocab.inverse(t) for t in reversed(body))
    return Rule(head, body)


def parse_rnnlogic(
    text: str, vocab: RelationVocab, *, source: str = "<string>", skip_unsupported: bool = False
) -> list[Rule]:
    """RNNLogic integer rules ``head b1 ... bL`` (an optional trailing float weight is ignored).

    ``skip_unsupported``: drop (with one warning) rules that are not 1-3 atom chains instead of raising.
    """
    rules: list[Rule] = []
    skipped: list[int] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if not parts or parts[0].startswith("#"):
            continue
        try:
            if len(parts) > 1 and not re.fullmatch(r"-?\d+", parts[-1]):
                parts = parts[:-1]  # RuleDataset files end with a float weight
            try:
                ids = [int(p) for p in parts]
            except ValueError:
                raise RuleSyntaxError("expected integer relation ids 'head b1 ... bL'") from None
            try:
                rules.append(_rnnlogic_rule(ids, vocab))
            except RuleSyntaxError:
                if (
                    skip_unsupported
                    and 0 <= ids[0] < 2 * vocab.num_relations
                    and all(0 <= t < 2 * vocab.num_relations for t in ids)
                ):
                    skipped.append(lineno)
                    continue
                raise
        except RuleSyntaxError as err:
            raise err.located(line=lineno, source=source, text=raw) from None
    if skipped:
        warnings.warn(
            f"{source}: skipped {len(skipped)} rules with empty or >{MAX_BODY_LENGTH}-atom bodies "
            f"(lines {skipped[:5]}{'...' if len(skipped) > 5 else ''})",
            stacklevel=2,
        )
    return rules


def format_rnnlogic(rules: Iterable[Rule], vocab: RelationVocab) -> str:
    lines = [" ".join(str(t) for t in (r.check(vocab).head, *r.body)) for r in rules]
    return "\n".join(lines) + ("\n" if lines else "")


# --- LogiRE -----------------------------------------------------------------------------------


def parse_logire_json(data: str | Sequence, vocab: RelationVocab, *, source: str = "<json>") -> list[Rule]:
    """LogiRE ``[[head, [b1, b2]], ...]`` (inverse = id + R)."""
    try:
        items = json.loads(data) if isinstance(data, str) else data
    except json.JSONDecodeError as exc:
        raise RuleSyntaxError(f"invalid JSON ({exc}); expected [[head, [body ids]], ...]", source=source) from None
    rules = []
    for i, item in enumerate(items):
        try:
            head, body = item
            ids = [head, *body]
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise TypeError(f"relation ids must be integers, got {ids!r}")
            rule = Rule(int(head), tuple(int(b) for b in body)).check(vocab)
        except (TypeError, ValueError, OverflowError) as err:
            raise RuleSyntaxError(f"rule #{i}: expected [head, [body ids]] in range: {err}", source=source) from None
        rules.append(rule)
    return rules


def format_logire_json(rules: Iterable[Rule], vocab: RelationVocab) -> str:
    return json.dumps([[r.check(vocab).head, list(r.body)] for r in rules])


# --- relation names ---------------------------------------------------------------------------


def load_relation_names(path: str | Path, drop: Iterable[str] = ("Na",)) -> RelationVocab:
    """A vocabulary from ``rel2id.json`` (DocRED style, ``drop`` removed), a JSON list of names,
    an RNNLogic ``relations.dict`` (``id<TAB>name``) or a text file with one name per line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected relation names") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc}); expected a name->id mapping or a list of names") from None
    if path.suffix == ".json":
        if isinstance(data, Mapping):
            return RelationVocab.from_rel2id(data, drop)
        if isinstance(data, list) and all(isinstance(n, str) for n in data):
            return RelationVocab(tuple(data))
        raise ValueError(f"{path}: expected a name->id mapping or a list of names")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if lines and all("\t" in ln for ln in lines):
        return RelationVocab(read_rnnlogic_relations(path))
    return RelationVocab(tuple(ln.strip() for ln in lines))


def unique_rules(rules: Iterable[Rule]) -> list[Rule]:
    """Rules in first-seen order without duplicates (RNNLogic files repeat rules)."""
    return list(dict.fromkeys(rules))
