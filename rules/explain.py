"""Why a relation is predicted for an entity pair: rule bodies, their best entity paths, values and weights.

For a document's fuzzy value tensor ``x`` (N, N, 2R+1) -- channel r = x(r)(e1, e2) in [0, 1], channel R+r the
transpose (inverse), channel 2R the identity (stay) -- a body b_1..b_L scores a pair (h, t) by the max-product
path value of Eq. (8):

    φ_j(h, t) = max_{z_1..z_{L-1}} Π_k x(b_k)(z_{k-1}, z_k),   z_0 = h, z_L = t

The argmax entity paths come from the grounding engine's exact search (:func:`kg.grounding.best_paths`, the same
max-product DP the clients score with). With a client's scorer weights the LogiRE logit is s = Σ_j w_j φ_j + b.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kg.grounding import best_paths, with_inverse_and_stay

if TYPE_CHECKING:
    from rules.store import RuleStore

__all__ = ["Explanation", "PathEvidence", "expand_values", "explain"]


def expand_values(values: Any, num_relations: int) -> torch.Tensor:
    """(N,N,2R+1) float64 value tensor from an (N,N,2R+1) one or an (N,N,R) one (inverse = transpose,
    stay = identity added)."""
    v = torch.as_tensor(values.detach().cpu() if hasattr(values, "detach") else np.asarray(values), dtype=torch.float64)
    R = int(num_relations)
    if v.dim() != 3 or v.shape[0] != v.shape[1]:
        raise ValueError(f"values must be an (N, N, C) tensor, got shape {tuple(v.shape)}")
    if v.shape[2] == R:
        return with_inverse_and_stay(v[None])[0]
    if v.shape[2] != 2 * R + 1:
        raise ValueError(f"values have {v.shape[2]} channels; expected R={R} or 2R+1={2 * R + 1}")
    return v


@dataclass(frozen=True)
class PathEvidence:
    """One body of one triple for the explained pair."""

    triple: tuple[int, int, int]
    index: int
    tokens: tuple[int, ...]
    rule: str
    value: float  # φ_j: best path value
    path: tuple[int, ...]  # entities z_0 = head .. z_L = tail (stay steps repeat an entity)
    edge_values: tuple[float, ...]
    prior: float
    posterior: float | None  # the client's posterior with a client, else the global one
    weight: float | None  # the client's scorer weight w_j
    contribution: float  # w_j φ_j with weights, else posterior (or prior) · φ_j

    def hops(self, relation_name: Any, entity_name: Any = str) -> str:
        """``e0 -r-> e1 -~s-> e2`` with stay steps left out."""
        out = entity_name(self.path[0])
        for k, tok in enumerate(self.tokens):
            name = relation_name(tok)
            if name == "<stay>":
                continue
            out += f" -{name}({self.edge_values[k]:.3g})-> {entity_name(self.path[k + 1])}"
        return out

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("triple", "tokens", "path", "edge_values"):
            out[k] = list(out[k])
        return out


@dataclass(frozen=True)
class Explanation:
    """Evidence for head(h, t): bodies sorted by contribution, and per-triple logit/probability when the
    client's weights are known (LogiRE scorer: s = Σ_j w_j φ_j + b, p = σ(s))."""

    head: int
    pair: tuple[int, int]
    client: str | None
    items: list[PathEvidence]
    logits: dict[tuple[int, int, int], float]

    @property
    def probabilities(self) -> dict[tuple[int, int, int], float]:
        return {t: float(1.0 / (1.0 + np.exp(-s))) for t, s in self.logits.items()}

    def format(self, store: RuleStore, entity_names: Sequence[str] | None = None) -> str:
        vocab = store.vocab

        def ent(i: int) -> str:
            return f"{entity_names[i]}#{i}" if entity_names is not None else f"e{i}"

        h, t = self.pair
        title = f"{store.relations[self.head]}({ent(h)}, {ent(t)})"
        lines = [title + (f"  [client {self.client}]" if self.client else "")]
        for triple, s in self.logits.items():
            lines.append(f"  {store.triple_name(triple)}: logit {s:.4g}, probability {self.probabilities[triple]:.4g}")
        lines.append("  contrib   value   weight  posterior  prior   rule / best path")
        for it in self.items:
            w = "-" if it.weight is None else f"{it.weight:.4g}"
            p = "-" if it.posterior is None else f"{it.posterior:.4g}"
            lines.append(f"  {it.contribution:7.4g}  {it.value:6.4g}  {w:>7}  {p:>9}  {it.prior:6.4g}  {it.rule}")
            lines.append(f"  {'':51}{it.hops(vocab.token_name, ent)}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "pair": list(self.pair),
            "client": self.client,
            "logits": [
                {"triple": list(t), "logit": s, "probability": self.probabilities[t]} for t, s in self.logits.items()
            ],
            "items": [it.to_json() for it in self.items],
        }


def _types_text(store: RuleStore, types: tuple[Any, Any] | None) -> str:
    """``person->location`` (type names, as the store names its triples), ``any`` for None."""
    if types is None:
        return "any"
    return "->".join(store.type_name(store.type_id(t)) for t in types)


def explain(
    values: Any,
    store: RuleStore,
    head: str | int,
    pair: tuple[int, int],
    *,
    client: str | int | None = None,
    types: tuple[Any, Any] | None = None,
    entity_types: Sequence[int] | np.ndarray | None = None,
    top: int | None = None,
) -> Explanation:
    """Which stored bodies support ``head(pair)`` in a document, through which entity paths.

    values: the document's (N,N,2R+1) or (N,N,R) fuzzy values; head: relation name or id; pair: (h, t) entity
    ids; client: use that client's posterior, weights and bias; types: (head type, tail type) to pick the
    triple (else taken from ``entity_types[h], entity_types[t]`` when given, else all triples of ``head``).
    """
    R = len(store.relations)
    V = expand_values(values, R)
    N = V.shape[0]
    h_id = store.relation_id(head)
    x, y = (int(pair[0]), int(pair[1]))
    if not (0 <= x < N and 0 <= y < N):
        raise ValueError(f"entity pair {pair} outside the document's {N} entities")
    if types is None and entity_types is not None:
        et = np.asarray(entity_types).reshape(-1)
        types = (int(et[x]), int(et[y]))
    triples = store.find_triples(h_id, types)
    if not triples:
        heads = sorted({store.triple_name(t) for t in store.find_triples(h_id)})
        raise ValueError(
            f"no stored triple for {store.relations[h_id]} with types {_types_text(store, types)}; "
            f"triples of this head: {heads or 'none'}"
        )
    c = None if client is None else str(client)
    items: list[PathEvidence] = []
    logits: dict[tuple[int, int, int], float] = {}
    for t in triples:
        rec = store.triples[t]
        crec = rec.clients.get(c) if c is not None else None
        if c is not None and crec is None:
            continue
        post = crec.posterior if crec is not None else rec.global_posterior()
        weights = crec.weights if crec is not None else None
        found = best_paths(V[None], torch.as_tensor(rec.bodies, dtype=torch.int64), 0, x, y, stay_id=2 * R)
        logit = 0.0
        for j in range(rec.num_bodies):
            value = float(found.scores[0, j])
            w = None if weights is None else float(weights[j])
            p = None if post is None else float(post[j])
            scale = w if w is not None else (p if p is not None else float(rec.prior[j]))
            if w is not None:
                logit += w * value
            items.append(
                PathEvidence(
                    triple=t,
                    index=j,
                    tokens=tuple(int(v) for v in rec.bodies[j]),
                    rule=store.rule_text(t, rec.bodies[j]),
                    value=value,
                    path=tuple(int(e) for e in found.entities[0, j]),
                    edge_values=tuple(float(e) for e in found.edge_values[0, j]),
                    prior=float(rec.prior[j]),
                    posterior=p,
                    weight=w,
                    contribution=scale * value + 0.0,  # no -0.0
                )
            )
        if weights is not None and crec is not None:
            logits[t] = logit + (crec.bias or 0.0)
    if c is not None and not items:
        raise ValueError(
            f"client {c!r} has no posterior for any triple of {store.relations[h_id]} with types "
            f"{_types_text(store, types)}"
        )
    items.sort(key=lambda it: -it.contribution)
    return Explanation(h_id, (x, y), c, items[: top if top is not None else None], logits)
