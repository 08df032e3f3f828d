"""Writing into the store: candidate bodies, client and global posteriors, AMIE counts, whole rounds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rules.measures import RuleCounts, count_bodies
from rules.store.base import StoreBase
from rules.store.records import ClientId, ClientRecord, Triple, TripleRecord, _row_of, _vec


class RecordingMixin(StoreBase):
    """What a strategy calls while a run goes on."""

    def add_triple(
        self,
        triple: Sequence[int],
        bodies: Sequence[Sequence[int]] | np.ndarray,
        prior: Sequence[float] | np.ndarray,
        *,
        log_prior: Sequence[float] | np.ndarray | None = None,
        sample_counts: Sequence[int] | np.ndarray | None = None,
        round: int | None = None,
    ) -> TripleRecord:
        """Start a triple's round: its J candidate bodies (J, ≤L) tokens and the server prior (J,).

        Replaces any earlier state of the triple (earlier posteriors refer to earlier bodies).
        """
        t = self._check_triple(triple)
        b = np.asarray(bodies.detach().cpu().numpy() if hasattr(bodies, "detach") else bodies, dtype=np.int64)
        if b.ndim != 2 or b.shape[1] > self.body_length or b.shape[1] < 1:
            raise ValueError(f"triple {self.triple_name(t)}: bodies must be (J, 1..{self.body_length}), got {b.shape}")
        stay = self.vocab.stay
        if b.size and (b.min() < 0 or b.max() > stay):
            raise ValueError(f"triple {self.triple_name(t)}: body tokens outside [0, 2R+1={stay + 1})")
        if b.shape[1] < self.body_length:
            b = np.concatenate([b, np.full((b.shape[0], self.body_length - b.shape[1]), stay)], axis=1)
        J = b.shape[0]
        r = self.rounds[-1] if round is None and self.rounds else (round or 0)
        rec = TripleRecord(
            triple=t,
            bodies=b,
            prior=_vec(prior, J, f"{self.triple_name(t)} prior"),
            log_prior=None if log_prior is None else _vec(log_prior, J, f"{self.triple_name(t)} log_prior"),
            sample_counts=None
            if sample_counts is None
            else _vec(sample_counts, J, f"{self.triple_name(t)} sample_counts", np.int64),
            round=int(r),
        )
        self.triples[t] = rec
        if int(r) not in self.rounds:
            self.rounds.append(int(r))
            self.rounds.sort()
        return rec

    def record_client(
        self,
        triple: Sequence[int],
        client: ClientId | int,
        posterior: Sequence[float] | np.ndarray,
        *,
        weights: Sequence[float] | np.ndarray | None = None,
        bias: float | None = None,
        n_instances: int = 0,
        counts: RuleCounts | None = None,
    ) -> None:
        """A client's posterior (J,) (Eq. 9/10), optional scorer weights (J,) + bias and local counts."""
        rec = self._record(triple)
        name = self.triple_name(rec.triple)
        J = rec.num_bodies
        if counts is not None and len(counts) != J:
            raise ValueError(f"{name}: client {client} counts cover {len(counts)} rules, triple has {J}")
        rec.clients[str(client)] = ClientRecord(
            posterior=_vec(posterior, J, f"{name} posterior of client {client}"),
            weights=None if weights is None else _vec(weights, J, f"{name} weights of client {client}"),
            bias=None if bias is None else float(bias),
            n_instances=int(n_instances),
            counts=counts,
        )

    def record_global(self, triple: Sequence[int], posterior: Sequence[float] | np.ndarray) -> None:
        """The aggregated posterior (J,) of a triple."""
        rec = self._record(triple)
        rec.posterior = _vec(posterior, rec.num_bodies, f"{self.triple_name(rec.triple)} global posterior")

    def set_counts(self, triple: Sequence[int], counts: RuleCounts, client: ClientId | int | None = None) -> None:
        """Confidence counts of a triple's J bodies, globally or for one client."""
        rec = self._record(triple)
        if len(counts) != rec.num_bodies:
            raise ValueError(
                f"{self.triple_name(rec.triple)}: counts cover {len(counts)} rules, triple has {rec.num_bodies}"
            )
        if client is None:
            rec.counts = counts
        else:
            if str(client) not in rec.clients:
                raise KeyError(f"client {client!r} has no record for {self.triple_name(rec.triple)}")
            rec.clients[str(client)].counts = counts

    def compute_counts(
        self,
        docs: Sequence[Any],
        *,
        client: ClientId | int | None = None,
        by_type: bool = True,
        triples: Iterable[Sequence[int]] | None = None,
    ) -> None:
        """Count every triple's bodies on ``docs`` (see :func:`rules.measures.count_bodies`) and store the counts
        (globally, or for ``client``). ``by_type``: restrict pairs to the triple's entity types (the documents
        then need ``entity_types``)."""
        docs = list(docs)
        keys = [self._check_triple(t) for t in triples] if triples is not None else list(self.triples)
        for t in keys:
            rec = self._record(t)
            counts = count_bodies(
                t[0], rec.bodies, docs, len(self.relations), pair_types=(t[1], t[2]) if by_type else None
            )
            self.set_counts(t, counts, client)

    def count_clients(
        self,
        docs_by_client: Mapping[ClientId | int, Iterable[Any]],
        *,
        by_type: bool = True,
        triples: Iterable[Sequence[int]] | None = None,
    ) -> dict[str, int]:
        """AMIE counts of every triple's bodies on each client's own documents (a federated count: each client
        counts locally, counts are additive). A client's counts are stored in its record where it has one for the
        triple; the triple's global counts are set to the sum over *all* clients (also those without a record),
        so they equal :meth:`compute_counts` on the union of the documents.

        Returns ``{"triples", "clients", "documents", "rules"}`` counted. ``by_type``: see :meth:`compute_counts`.
        """
        docs = {str(c): list(d) for c, d in docs_by_client.items()}
        keys = [self._check_triple(t) for t in triples] if triples is not None else list(self.triples)
        rules = 0
        for t in keys:
            rec = self._record(t)
            total: RuleCounts | None = None
            for cid, cdocs in docs.items():
                counts = count_bodies(
                    t[0], rec.bodies, cdocs, len(self.relations), pair_types=(t[1], t[2]) if by_type else None
                )
                if cid in rec.clients:
                    rec.clients[cid].counts = counts
                total = counts if total is None else total + counts
            rec.counts = total if total is not None else RuleCounts.zeros(rec.num_bodies)
            rules += rec.num_bodies
        return {
            "triples": len(keys),
            "clients": len(docs),
            "documents": sum(len(d) for d in docs.values()),
            "rules": rules,
        }

    def record_round(
        self,
        round: int,
        triples: Sequence[Sequence[int]],
        bodies: Any,
        prior: Any,
        *,
        mask: Any = None,
        log_prior: Any = None,
        sample_counts: Any = None,
        posterior: Any = None,
        client_posteriors: Mapping[Any, Any] | None = None,
        client_weights: Mapping[Any, Any] | None = None,
        client_bias: Mapping[Any, Any] | None = None,
        client_instances: Mapping[Any, Any] | None = None,
    ) -> None:
        """Record a whole round at once.

        Every array argument is either a mapping ``{triple: array}``, a list aligned with ``triples`` (ragged J_t),
        or a padded array (T, J_max, ...) with ``mask`` (T, J_max) marking real bodies. Client arguments map a
        client id to such a container; a client lacking a triple (``None`` or missing key) is skipped.
        ``client_bias``/``client_instances`` hold one number per triple.
        """
        m = None if mask is None else np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask, bool)
        if int(round) not in self.rounds:
            self.rounds.append(int(round))
            self.rounds.sort()

        def get(container: Any, t: int, key: Triple, masked: bool = True) -> Any:
            if container is None:
                return None
            if isinstance(container, Mapping) and key not in container:
                return None
            return _row_of(container, t, key, m if masked else None)

        for t, raw in enumerate(triples):
            key = self._check_triple(raw)
            self.add_triple(
                key,
                get(bodies, t, key),
                get(prior, t, key),
                log_prior=get(log_prior, t, key),
                sample_counts=get(sample_counts, t, key),
                round=round,
            )
            if posterior is not None and (g := get(posterior, t, key)) is not None:
                self.record_global(key, g)
            for client, posts in (client_posteriors or {}).items():
                p = get(posts, t, key)
                if p is None:
                    continue
                w = get((client_weights or {}).get(client), t, key)
                b = get((client_bias or {}).get(client), t, key, masked=False)
                n = get((client_instances or {}).get(client), t, key, masked=False)
                self.record_client(
                    key,
                    client,
                    p,
                    weights=w,
                    bias=None if b is None else float(np.asarray(b)),
                    n_instances=0 if n is None else int(np.asarray(n)),
                )
