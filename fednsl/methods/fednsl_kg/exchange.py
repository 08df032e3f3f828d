"""What fednsl-kg clients exchange beside FedNSL's rule distributions, kept per learner by the server (docs:
"When does federation pay?"): each body's leave-one-out evidence summed over clients, sent back as pooled
confidences, and optionally the clients' fitted weights averaged by training queries; plus the bound every count a
client sends must respect (its round-1 training facts)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fednsl.federation.records import Message
from fednsl.tasks.rule_learning import Proposal

__all__ = ["Exchange", "refusal"]

Key = tuple[tuple[int, int, int], tuple[int, ...]]  # (head, body)


class Exchange:
    """One learner's pooled evidence per (head, body) (the latest round the body was proposed: (4,) summed
    hits / reached of the forward and inverse head) and averaged weights: per (head, body) (2,) query-weighted mean
    rule weight per direction with (2,) summed queries, per head (2, 2R) mean type-prior weights."""

    def __init__(self) -> None:
        self.evidence: dict[Key, np.ndarray] = {}
        self.weights: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def absorb(self, p: Proposal, replies: Mapping[str, Message], num_relations: int) -> dict[str, int]:
        """Sum the replies' ``evidence`` per (head, body); average their ``rule_weights`` / ``type_weights``."""
        keys = p.keys()
        bodies = [p.bodies_of(t, num_relations) for t in range(len(keys))]
        parts = [np.asarray(m.arrays["evidence"]) for m in replies.values() if "evidence" in m.arrays]
        if parts:
            total = np.sum(parts, axis=0)
            for t, key in enumerate(keys):
                for j, body in enumerate(bodies[t]):
                    self.evidence[(key, body)] = total[t, j]
        fitted = [m.arrays for m in replies.values() if "rule_weights" in m.arrays]
        if fitted:
            n = np.sum([a["weight_queries"] for a in fitted], axis=0).astype(np.float64)  # (T, 2)
            div = np.maximum(n, 1.0)
            rule_w = np.sum([a["rule_weights"] * a["weight_queries"][:, None, :] for a in fitted], axis=0)
            for t, key in enumerate(keys):
                for j, body in enumerate(bodies[t]):
                    self.weights[(key, body)] = (rule_w[t, j] / div[t], n[t])
            typed = [a for a in fitted if "type_weights" in a]
            if typed:
                type_w = np.sum([a["type_weights"] * a["weight_queries"][:, :, None] for a in typed], axis=0)
                for t, key in enumerate(keys):
                    self.weights[key] = (type_w[t] / div[t][:, None], n[t])
        return {"evidence_clients": len(parts), "weight_clients": len(fitted)}

    def confidence(self, p: Proposal, num_relations: int) -> dict[str, np.ndarray]:
        """``confidence`` (T, J, 2): Σ hits / Σ reached of each proposed body, −1 where no client has evidence."""
        if not self.evidence:
            return {}
        T, J = p.mask.shape
        out = np.full((T, J, 2), -1.0)
        for t, key in enumerate(p.keys()):
            for j, body in enumerate(p.bodies_of(t, num_relations)):
                e = self.evidence.get((key, body))
                for k in range(2):
                    if e is not None and e[2 * k + 1] > 0:
                        out[t, j, k] = e[2 * k] / e[2 * k + 1]
        return {"confidence": out}

    def start_weights(self, p: Proposal, num_relations: int) -> dict[str, np.ndarray]:
        """``start_weights`` / ``start_known`` (T, J, 2) and ``start_type_weights`` (T, 2, 2R) /
        ``start_type_known`` (T, 2): the averaged weights of the proposal's bodies and heads."""
        if not self.weights:
            return {}
        T, J = p.mask.shape
        w, known = np.zeros((T, J, 2)), np.zeros((T, J, 2), dtype=bool)
        types, types_known = None, np.zeros((T, 2), dtype=bool)
        for t, key in enumerate(p.keys()):
            for j, body in enumerate(p.bodies_of(t, num_relations)):
                if (key, body) in self.weights:
                    mean, n = self.weights[(key, body)]
                    w[t, j], known[t, j] = mean, n > 0
            if key in self.weights:
                mean, n = self.weights[key]
                types = np.zeros((T, 2, mean.shape[1])) if types is None else types
                types[t], types_known[t] = mean, n > 0
        out: dict[str, np.ndarray] = {"start_weights": w, "start_known": known}
        if types is not None:
            out.update(start_type_weights=types, start_type_known=types_known)
        return out

    def to_json(self) -> str:
        evidence = [[list(key), list(body), [int(x) for x in e]] for (key, body), e in self.evidence.items()]
        weights = [[_listed(k), mean.tolist(), n.tolist()] for k, (mean, n) in self.weights.items()]
        return json.dumps({"evidence": evidence, "weights": weights})

    @classmethod
    def from_json(cls, text: str) -> Exchange:
        data = json.loads(text)
        out = cls()
        out.evidence = {(tuple(k), tuple(b)): np.asarray(e, dtype=np.int64) for k, b, e in data["evidence"]}
        out.weights = {_keyed(k): (np.asarray(mean), np.asarray(n)) for k, mean, n in data["weights"]}
        return out


def refusal(facts: np.ndarray | None, p: Proposal, msg: Message, num_entities: int | None) -> str | None:
    """Why a ``train`` reply's counts cannot be true, given the client's round-1 training facts n_r (R,): instances
    above n_r, evidence hits above n_r or reached pairs above n_r · E, weights fitted on more than n_r queries."""
    if facts is None:
        return "the server has no round-1 statistics of this client, so no bound on its counts"
    n = facts[np.asarray(p.relations, dtype=np.int64)] if p.num_heads else np.zeros(0, np.int64)
    a = msg.arrays
    E = num_entities or np.iinfo(np.int64).max // max(1, int(n.max(initial=1)))
    checks: list[tuple[str, np.ndarray]] = [("instances", np.asarray(a["instances"]) > n)]
    if "evidence" in a:
        ev = np.asarray(a["evidence"])
        checks.append(("evidence hits", np.asarray(ev[..., 0::2] > n[:, None, None])))
        checks.append(("evidence reached pairs", np.asarray(ev[..., 1::2] > n[:, None, None] * E)))
    if "weight_queries" in a:
        checks.append(("weight queries", np.asarray(np.asarray(a["weight_queries"]) > n[:, None])))
    bad = [name for name, rows in checks if rows.any()]
    return f"{', '.join(bad)} exceed its {int(n.sum())} training facts of these relations" if bad else None


def _listed(key: Any) -> list[Any]:
    """A weights key as JSON: a head [r, a, b] or a (head, body) pair [[r, a, b], [body…]]."""
    return [list(k) for k in key] if isinstance(key[0], tuple) else list(key)


def _keyed(item: list[Any]) -> Any:
    """Inverse of :func:`_listed`."""
    return tuple(tuple(k) for k in item) if isinstance(item[0], list) else tuple(item)
