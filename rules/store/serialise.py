"""The store on disk: ``rules.json`` (self-describing, versioned) and ``rules.tsv`` (one rule per line)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rules.fol import MAX_BODY_LENGTH
from rules.measures import RuleCounts
from rules.store.base import StoreBase
from rules.store.records import (
    FORMAT,
    VERSION,
    ClientRecord,
    RankedRule,
    TripleRecord,
    _from_json_floats,
    _json_floats,
)

S = TypeVar("S", bound="SerialiseMixin")


class SerialiseMixin(StoreBase):
    """JSON and TSV forms; :meth:`save` / :meth:`load` of ``RUN_DIR/rules.json``."""

    def to_json(self) -> dict[str, Any]:
        triples = []
        for t in sorted(self.triples):
            rec = self.triples[t]
            item: dict[str, Any] = {
                "triple": list(t),
                "name": self.triple_name(t),
                "round": rec.round,
                "bodies": rec.bodies.tolist(),
                "rules": [self.rule_text(t, b) for b in rec.bodies],
                "prior": _json_floats(rec.prior),
                "log_prior": _json_floats(rec.log_prior),
                "sample_counts": None if rec.sample_counts is None else rec.sample_counts.tolist(),
                "posterior": _json_floats(rec.posterior),
                "counts": None if rec.counts is None else rec.counts.to_dict(),
                "clients": {c: cr.to_json() for c, cr in sorted(rec.clients.items())},
            }
            if rec.ranked is not None:
                item["ranked"] = [r.to_json() for r in rec.ranked]
            triples.append(item)
        ordered = self.reading_order is not None or any(rec.ranked is not None for rec in self.triples.values())
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION if ordered else 1,  # a store without a reading order stays readable by version 1
            "relations": list(self.relations),
            "types": None if self.types is None else list(self.types),
            "body_length": self.body_length,
            "token_layout": "c<R: relation c; R<=c<2R: inverse of c-R ('~name'); c=2R: stay/padding (identity)",
            "rounds": list(self.rounds),
            "clients": self.clients,
            "meta": self.meta,
        }
        if self.reading_order is not None:
            out["reading_order"] = self.reading_order
        out["triples"] = triples
        return out

    def to_json_text(self) -> str:
        """Strict JSON (no NaN/Infinity literals): header fields indented, one line per triple."""
        data = self.to_json()
        triples = data.pop("triples")
        head = json.dumps(data, indent=1, allow_nan=False)
        body = ",\n".join("  " + json.dumps(t, allow_nan=False) for t in triples)
        return head[:-2] + ',\n "triples": [\n' + body + ("\n" if body else "") + " ]\n}\n"

    @classmethod
    def from_json(cls: type[S], data: Mapping[str, Any], source: str = "<json>") -> S:
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{source}: not a rule store (field 'format' is {data.get('format')!r}, expected {FORMAT!r})"
            )
        if int(data.get("version", 0)) > VERSION:
            raise ValueError(f"{source}: rule store version {data['version']} is newer than this reader ({VERSION})")
        store = cls(
            relations=tuple(data["relations"]),
            types=None if data.get("types") is None else tuple(data["types"]),
            body_length=int(data.get("body_length", MAX_BODY_LENGTH)),
            rounds=[int(r) for r in data.get("rounds", [])],
            meta=dict(data.get("meta", {})),
            reading_order=None if data.get("reading_order") is None else dict(data["reading_order"]),
        )
        for i, item in enumerate(data.get("triples", [])):
            where = f"{source}: triples[{i}]"
            try:
                t = store._check_triple(item["triple"])
                bodies = np.asarray(item["bodies"], dtype=np.int64).reshape(-1, store.body_length)
                rec = TripleRecord(
                    triple=t,
                    bodies=bodies,
                    prior=_from_json_floats(item["prior"]),  # type: ignore[arg-type]
                    log_prior=_from_json_floats(item.get("log_prior")),
                    sample_counts=None
                    if item.get("sample_counts") is None
                    else np.asarray(item["sample_counts"], dtype=np.int64),
                    posterior=_from_json_floats(item.get("posterior")),
                    counts=RuleCounts.from_dict(item["counts"]) if item.get("counts") is not None else None,
                    clients={str(c): ClientRecord.from_json(v) for c, v in item.get("clients", {}).items()},
                    round=int(item.get("round", 0)),
                    ranked=None if item.get("ranked") is None else [RankedRule.from_json(r) for r in item["ranked"]],
                )
                rec.check_ranked()
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{where}: {err}") from err
            texts = item.get("rules")
            if texts is not None:
                mine = [store.rule_text(t, b) for b in rec.bodies]
                if list(texts) != mine:
                    if len(texts) != len(mine):
                        raise ValueError(f"{where}: {len(texts)} rule texts for {len(mine)} bodies")
                    bad = next(j for j, (x, y) in enumerate(zip(texts, mine)) if x != y)
                    raise ValueError(
                        f"{where}: rule text {texts[bad]!r} does not match its tokens ({mine[bad]!r}); "
                        "the relation names do not fit the body ids"
                    )
            J = rec.num_bodies
            for what, arr in (("prior", rec.prior), ("posterior", rec.posterior), ("log_prior", rec.log_prior)):
                if arr is not None and arr.shape != (J,):
                    raise ValueError(f"{where}: field {what!r} has {arr.shape[0]} values for {J} bodies")
            store.triples[t] = rec
        return store

    def to_tsv(self) -> str:
        """One rule per line: triple, rule text, tokens, prior, global posterior, per client posterior and
        weight, confidence counts and measures (empty cells where unknown; a column that is empty on every
        line, e.g. weights that never left their clients, is left out).

        Each triple's rules follow the recorded reading order when there is one (:mod:`rules.reading_order`:
        ``rank`` 1, 2, ... per rule, its other stored forms right after it with the same rank; ``explains``,
        ``loo_conf``, ``uses_head`` and ``detour`` on the shown form), else the posterior (prior) order."""
        clients = self.clients
        header = ["triple", "rule", "tokens", "prior", "posterior"]
        for c in clients:
            header += [f"posterior[{c}]", f"weight[{c}]"]
        header += [*RuleCounts.FIELDS, *RuleCounts.MEASURES]
        header += ["rank", "explains", "loo_conf", "uses_head", "detour"]

        def f(x: float | None) -> str:
            return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"

        table: list[list[str]] = []
        for t in self.find_triples():
            rec = self.triples[t]
            post = rec.global_posterior()
            counts = rec.global_counts()
            read: list[tuple[int, int | None, RankedRule | None]] = list(rec.reading_order() or [])
            if not read:
                order = np.argsort(-(post if post is not None else rec.prior), kind="stable")
                read = [(j, None, None) for j in order.tolist()]
            for j, rank, ranked in read:
                row = [
                    self.triple_name(t),
                    self.rule_text(t, rec.bodies[j]),
                    " ".join(str(int(v)) for v in rec.bodies[j]),
                    f(float(rec.prior[j])),
                    f(None if post is None else float(post[j])),
                ]
                for c in clients:
                    cr = rec.clients.get(c)
                    row.append(f(None if cr is None else float(cr.posterior[j])))
                    row.append(f(None if cr is None or cr.weights is None else float(cr.weights[j])))
                if counts is None:
                    row += [""] * (len(RuleCounts.FIELDS) + len(RuleCounts.MEASURES))
                else:
                    m = counts.measures(j)
                    row += [str(int(m[k])) for k in RuleCounts.FIELDS] + [f(m[k]) for k in RuleCounts.MEASURES]
                if ranked is None or rank is None:
                    row += [""] * 5
                elif ranked.bodies[0] == j:
                    marks = [str(int(ranked.uses_head)), str(int(ranked.detour))]
                    row += [str(rank + 1), f(ranked.explains), f(ranked.loo_conf), *marks]
                else:  # another stored form of the rule above: same rank, nothing of its own
                    row += [str(rank + 1), "", "", "", ""]
                table.append(row)
        keep = [i for i in range(len(header)) if i < 5 or any(row[i] for row in table)]
        return "".join("\t".join(line[i] for i in keep) + "\n" for line in [header, *table])

    def save(self, run_dir: str | Path) -> tuple[Path, Path]:
        """Write ``run_dir/rules.json`` and ``run_dir/rules.tsv``; returns both paths.

        Each file is written to a temporary name first and renamed, so an interrupted save (or one that fails
        while formatting) leaves the previous files whole.
        """
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        jpath, tpath = run_dir / "rules.json", run_dir / "rules.tsv"
        texts = {jpath: self.to_json_text(), tpath: self.to_tsv()}
        for path, text in texts.items():
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        return jpath, tpath

    @classmethod
    def load(cls: type[S], run_dir: str | Path) -> S:
        """Read ``run_dir/rules.json`` (``run_dir`` may also be the JSON file itself)."""
        path = Path(run_dir)
        if path.is_dir():
            path = path / "rules.json"
        if not path.exists():
            raise FileNotFoundError(f"no rule store at {path} (a FedNSL run writes RUN_DIR/rules.json)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from err
        return cls.from_json(data, source=str(path))
