"""Reading the store: rule tables, per-client head distributions, diffs between clients and rounds."""

from __future__ import annotations

from typing import Any

import numpy as np

from rules.fol import Rule
from rules.formats import ScoredRule
from rules.measures import RuleCounts
from rules.store.base import StoreBase
from rules.store.records import ClientId, RuleDiff, RuleRow, Triple, kl_divergence, total_variation


class QueryMixin(StoreBase):
    """Rule tables and comparisons (the ``fednsl rules`` commands)."""

    def rows(
        self,
        head: str | int | None = None,
        client: ClientId | int | None = None,
        top: int | None = None,
        *,
        ranked: bool = False,
    ) -> list[RuleRow]:
        """Rules grouped by triple, each group sorted by probability (client posterior with ``client``, else
        global posterior, else prior), at most ``top`` per triple. With ``client``, triples the client has
        no posterior for are left out. ``ranked``: a triple with a recorded reading order
        (:attr:`TripleRecord.ranked`) lists its rules in that order instead (the stored forms of one rule
        together, the shown one first)."""
        c = None if client is None else str(client)
        out: list[RuleRow] = []
        for t in self.find_triples(head):
            rec = self.triples[t]
            if c is not None and c not in rec.clients:
                continue
            prob = rec.probabilities(c)
            post = rec.global_posterior()
            counts = rec.global_counts()
            crec = rec.clients.get(c) if c is not None else None
            read = rec.reading_order() if ranked else None
            order = [j for j, _, _ in read] if read else np.argsort(-prob, kind="stable").tolist()
            for j in order[: top if top is not None else None]:
                out.append(
                    RuleRow(
                        triple=t,
                        triple_name=self.triple_name(t),
                        index=j,
                        tokens=tuple(int(v) for v in rec.bodies[j]),
                        rule=self.rule_text(t, rec.bodies[j]),
                        probability=float(prob[j]),
                        prior=float(rec.prior[j]),
                        posterior=None if post is None else float(post[j]),
                        client=c,
                        client_posterior=None if crec is None else float(crec.posterior[j]),
                        weight=None if crec is None or crec.weights is None else float(crec.weights[j]),
                        measures=None if counts is None else counts.measures(j),
                    )
                )
        return out

    def missing_counts(self) -> list[Triple]:
        """Triples without confidence counts (neither global nor from any client), sorted by name."""
        return [t for t in self.find_triples() if self.triples[t].global_counts() is None]

    def head_distribution(self, client: ClientId | int, head: int) -> dict[tuple[int, ...], float] | None:
        """A client's posterior over stay-free bodies of one head relation, its triples merged with weights
        #instances (equal weights when none reported); None when the client has no triple of ``head``."""
        c = str(client)
        recs = [rec for t, rec in self.triples.items() if t[0] == head and c in rec.clients]
        if not recs:
            return None
        w = np.array([rec.clients[c].n_instances for rec in recs], dtype=np.float64)
        if w.sum() <= 0:
            w = np.ones_like(w)
        dist: dict[tuple[int, ...], float] = {}
        for rec, wt in zip(recs, w / w.sum()):
            for j, p in enumerate(rec.clients[c].posterior.tolist()):
                key = self.vocab.strip(rec.bodies[j])
                dist[key] = dist.get(key, 0.0) + wt * p
        return dist

    def diff(
        self,
        a: ClientId | int,
        b: ClientId | int,
        *,
        by: str = "head",
        top: int = 5,
        head: str | int | None = None,
        eps: float = 1e-9,
    ) -> list[RuleDiff]:
        """TV, KL(a‖b), KL(b‖a) and the ``top`` bodies with the largest |p_a − p_b|, sorted by TV (largest first).

        by="triple": per triple both clients have posteriors for. by="head": per head relation both clients have
        triples of, each client's triples merged (:meth:`head_distribution`; bodies compared after dropping stay
        tokens, a body one client lacks has probability 0 there) -- the comparison that works when clients own
        different entity-type combinations (spec §4), as in the FedNSL DWIE split.
        """
        if by not in ("triple", "head"):
            raise ValueError(f"by must be 'triple' or 'head', got {by!r}")
        ca, cb = str(a), str(b)
        known = set(self.clients)
        for c in (ca, cb):
            if c not in known:
                raise KeyError(f"client {c!r} not in the store; clients: {sorted(known)}")
        out = []
        if by == "triple":
            for t in self.find_triples(head):
                rec = self.triples[t]
                if ca not in rec.clients or cb not in rec.clients:
                    continue
                p, q = rec.clients[ca].posterior, rec.clients[cb].posterior
                texts = [self.rule_text(t, body) for body in rec.bodies]
                out.append(self._diff(self.triple_name(t), t[0], t, texts, p, q, top, eps))
        else:
            heads = sorted({t[0] for t in self.find_triples(head)})
            for h in heads:
                da, db = self.head_distribution(ca, h), self.head_distribution(cb, h)
                if da is None or db is None:
                    continue
                keys = list(dict.fromkeys([*da, *db]))
                p = np.array([da.get(k, 0.0) for k in keys])
                q = np.array([db.get(k, 0.0) for k in keys])
                texts = [f"{self.relations[h]} <- {self.vocab.format_body(k)}" for k in keys]
                out.append(self._diff(self.relations[h], h, None, texts, p, q, top, eps))
        return sorted(out, key=lambda d: -d.total_variation)

    @staticmethod
    def _diff(
        name: str,
        head: int,
        triple: Triple | None,
        texts: list[str],
        p: np.ndarray,
        q: np.ndarray,
        top: int,
        eps: float,
    ) -> RuleDiff:
        order = np.argsort(-np.abs(p - q), kind="stable")[:top]
        return RuleDiff(
            name=name,
            head=head,
            triple=triple,
            total_variation=total_variation(p, q),
            kl_ab=kl_divergence(p, q, eps),
            kl_ba=kl_divergence(q, p, eps),
            top=[(texts[j], float(p[j]), float(q[j])) for j in order.tolist()],
        )

    def scored_rules(self, head: str | int | None = None) -> tuple[list[ScoredRule], list[float], int]:
        """Unique chain rules over all triples for export (AnyBURL/AMIE know no entity types): counts summed over
        the triples sharing a rule (pairs of different type combinations are disjoint, so support and body size
        add up exactly); also each rule's largest probability and the number of identity (all-stay) bodies
        left out. Rules without counts carry ``None`` counts.

        Rules are listed by head relation, then by probability; when every triple has a recorded reading order
        (:attr:`StoreBase.ranked`), by head relation, then in that order (a rule in several triples at its
        best place), then by probability."""
        merged: dict[Rule, dict[str, Any]] = {}
        skipped = 0
        ranked = self.ranked
        last = (float("inf"), 0)
        for t in self.find_triples(head):
            rec = self.triples[t]
            prob = rec.probabilities()
            counts = rec.global_counts()
            place = {j: (k, rule.bodies.index(j)) for j, k, rule in rec.reading_order() or []} if ranked else {}
            for j in range(rec.num_bodies):
                body = self.vocab.strip(rec.bodies[j])
                if not body:
                    skipped += 1
                    continue
                rule = Rule(t[0], body)
                entry = merged.setdefault(rule, {"p": 0.0, "c": None, "all": True, "at": last})
                entry["p"] = max(entry["p"], float(prob[j]))
                entry["at"] = min(entry["at"], place.get(j, last))
                if counts is None:
                    entry["all"] = False
                else:
                    taken = counts.take([j])
                    entry["c"] = taken if entry["c"] is None else entry["c"] + taken
        rules, probs = [], []
        for rule, e in sorted(merged.items(), key=lambda kv: (kv[0].head, kv[1]["at"], -kv[1]["p"])):
            c: RuleCounts | None = e["c"] if e["all"] else None
            if c is None:
                rules.append(ScoredRule(rule))
            else:
                m = c.measures(0)
                rules.append(
                    ScoredRule(
                        rule,
                        support=int(m["support"]),
                        body_size=int(m["body_size"]),
                        pca_body_size=int(m["pca_body_size"]),
                        head_size=int(m["head_size"]),
                    )
                )
            probs.append(e["p"])
        return rules, probs, skipped
