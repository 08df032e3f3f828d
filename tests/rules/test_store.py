"""RuleStore: recording a run, save/load round trip, queries (rows, diff, export merge)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rules.fol import Rule
from rules.measures import RuleCounts, count_bodies
from rules.store import RuleStore, kl_divergence, total_variation
from tests.rules.conftest import RELATIONS, TYPES, build_store, random_docs


def _assert_same(a: RuleStore, b: RuleStore) -> None:
    for f in ("relations", "types", "body_length", "rounds", "meta"):
        assert getattr(a, f) == getattr(b, f), f
    assert a.triples.keys() == b.triples.keys()
    for t, ra in a.triples.items():
        rb = b.triples[t]
        assert ra.round == rb.round
        for f in ("bodies", "prior", "log_prior", "sample_counts", "posterior"):
            x, y = getattr(ra, f), getattr(rb, f)
            assert (x is None) == (y is None), f
            if x is not None:
                np.testing.assert_array_equal(x, y)
        assert (ra.counts is None) == (rb.counts is None)
        if ra.counts is not None:
            assert ra.counts.to_dict() == rb.counts.to_dict()
        assert ra.clients.keys() == rb.clients.keys()
        for c, ca in ra.clients.items():
            cb = rb.clients[c]
            np.testing.assert_array_equal(ca.posterior, cb.posterior)
            assert (ca.weights is None) == (cb.weights is None)
            if ca.weights is not None:
                np.testing.assert_array_equal(ca.weights, cb.weights)
            assert (ca.bias, ca.n_instances) == (cb.bias, cb.n_instances)
            assert (ca.counts is None) == (cb.counts is None)


def test_save_load_round_trip(tmp_path, small_store: RuleStore) -> None:
    jpath, tpath = small_store.save(tmp_path / "run")
    assert jpath.name == "rules.json" and tpath.name == "rules.tsv"
    loaded = RuleStore.load(tmp_path / "run")
    _assert_same(small_store, loaded)
    assert RuleStore.load(jpath).to_json() == small_store.to_json()
    data = json.loads(jpath.read_text())  # strict JSON: -inf is written as a string
    assert data["relations"] == list(RELATIONS) and data["types"] == list(TYPES)
    assert data["triples"][-1]["log_prior"][-1] == "-inf"
    assert math.isinf(loaded.triples[(3, 0, 1)].log_prior[-1])
    assert data["clients"] == ["0", "1"]


def test_tsv_one_rule_per_line(tmp_path, small_store: RuleStore) -> None:
    _, tpath = small_store.save(tmp_path)
    lines = tpath.read_text().splitlines()
    header = lines[0].split("\t")
    assert header[:5] == ["triple", "rule", "tokens", "prior", "posterior"]
    assert header[5:8] == ["posterior[0]", "weight[0]", "posterior[1]"]  # client 1 kept its weights: no column
    assert header[-3:] == ["std_confidence", "pca_confidence", "head_coverage"]
    assert len(lines) - 1 == sum(r.num_bodies for r in small_store.triples.values())
    rows = [dict(zip(header, ln.split("\t"))) for ln in lines[1:]]
    assert all(len(ln.split("\t")) == len(header) for ln in lines)
    first = [r for r in rows if r["triple"] == "parent_of[person->person]"]
    assert first[0]["rule"] == "parent_of <- ~child_of"  # highest global posterior first
    assert first[0]["weight[0]"] == "2" and "weight[1]" not in first[0]
    assert any(r["rule"] == "parent_of <- <stay>" for r in first)


def test_global_posterior_fallback(small_store: RuleStore) -> None:
    rec = small_store.triples[(0, 0, 0)]
    expected = (30 * np.array([0.8, 0.15, 0.05]) + 10 * np.array([0.1, 0.6, 0.3])) / 40
    np.testing.assert_allclose(rec.global_posterior(), expected)
    np.testing.assert_allclose(small_store.triples[(3, 0, 1)].global_posterior(), [0.25, 0.45, 0.3])
    # counts: client 0 reported them, so they are the global counts of (0,0,0)
    assert rec.global_counts().to_dict() == rec.clients["0"].counts.to_dict()
    assert rec.probabilities("1").tolist() == [0.1, 0.6, 0.3]
    with pytest.raises(KeyError):
        rec.probabilities("7")


def test_counts_sum_over_clients() -> None:
    store = RuleStore(RELATIONS, TYPES)
    R, S = 4, 8
    store.add_triple((0, 0, 0), [[R + 1, S, S], [2, 0, S]], [0.5, 0.5])
    docs = random_docs(1, n_docs=6)
    for c, part in enumerate((docs[:2], docs[2:])):
        store.record_client((0, 0, 0), c, [0.5, 0.5])
        store.compute_counts(part, client=c)
    whole = count_bodies(0, store.triples[(0, 0, 0)].bodies, docs, R, pair_types=(0, 0))
    assert store.triples[(0, 0, 0)].global_counts().to_dict() == whole.to_dict()


def test_record_round_padded_equals_ragged() -> None:
    S = 8
    triples = [(0, 0, 0), (3, 0, 1)]
    ragged_bodies = [np.array([[5, S, S], [2, 0, S]]), np.array([[0, 3, S]])]
    ragged_prior = [np.array([0.6, 0.4]), np.array([1.0])]
    padded_bodies = np.full((2, 2, 3), S)
    padded_bodies[0] = ragged_bodies[0]
    padded_bodies[1, 0] = ragged_bodies[1][0]
    mask = np.array([[True, True], [True, False]])
    padded_prior = np.array([[0.6, 0.4], [1.0, 0.0]])
    post = {"a": np.array([[0.7, 0.3], [1.0, 0.0]]), "b": {(0, 0, 0): [0.2, 0.8]}}
    weights = {"a": np.array([[1.0, -1.0], [0.5, 0.0]])}
    bias = {"a": np.array([0.1, 0.2])}
    n = {"a": np.array([4, 2]), "b": {(0, 0, 0): 3}}

    s1 = RuleStore(RELATIONS, TYPES)
    s1.record_round(
        1, triples, padded_bodies, padded_prior, mask=mask, client_posteriors=post, client_weights=weights,
        client_bias=bias, client_instances=n, posterior=np.array([[0.5, 0.5], [1.0, 0.0]]),
    )
    s2 = RuleStore(RELATIONS, TYPES)
    s2.record_round(
        1, triples, ragged_bodies, ragged_prior,
        client_posteriors={"a": [np.array([0.7, 0.3]), np.array([1.0])], "b": {(0, 0, 0): [0.2, 0.8]}},
        client_weights={"a": [[1.0, -1.0], [0.5]]}, client_bias={"a": [0.1, 0.2]},
        client_instances={"a": [4, 2], "b": {(0, 0, 0): 3}}, posterior=[[0.5, 0.5], [1.0]],
    )
    _assert_same(s1, s2)
    assert s1.rounds == [1]
    assert set(s1.triples[(3, 0, 1)].clients) == {"a"}
    assert s1.triples[(0, 0, 0)].clients["b"].n_instances == 3
    assert s1.triples[(3, 0, 1)].clients["a"].bias == pytest.approx(0.2)


def test_add_triple_replaces_round_state(small_store: RuleStore) -> None:
    small_store.add_triple((0, 0, 0), [[0], [1]], [0.5, 0.5], round=3)
    rec = small_store.triples[(0, 0, 0)]
    assert rec.clients == {} and rec.posterior is None and rec.round == 3
    assert rec.bodies.tolist() == [[0, 8, 8], [1, 8, 8]]  # padded to length 3
    assert small_store.rounds == [2, 3]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.add_triple((0, 0, 0), [[0]], [0.5, 0.5]), "expected 1 values"),
        (lambda s: s.add_triple((0, 0, 0), [[0, 1, 2, 3]], [1.0]), r"bodies must be \(J, 1..3\)"),
        (lambda s: s.add_triple((0, 0, 0), [[9]], [1.0]), "body tokens outside"),
        (lambda s: s.add_triple((4, 0, 0), [[0]], [1.0]), "head relation outside"),
        (lambda s: s.add_triple((0, 2, 0), [[0]], [1.0]), "entity type outside"),
        (lambda s: s.record_client((2, 0, 0), 0, [1.0]), "call add_triple first"),
        (lambda s: s.record_client((0, 0, 0), 0, [1.0]), "posterior of client 0"),
        (lambda s: s.record_global((0, 0, 0), [1.0, 0.0]), "global posterior"),
        (lambda s: s.set_counts((0, 0, 0), RuleCounts.zeros(2)), "counts cover 2 rules"),
        (lambda s: s.set_counts((0, 0, 0), RuleCounts.zeros(3), client=9), "client 9"),
    ],
)
def test_recording_errors(small_store: RuleStore, call, message: str) -> None:
    with pytest.raises((ValueError, KeyError), match=message):
        call(small_store)


def test_rows_queries(small_store: RuleStore) -> None:
    rows = small_store.rows()
    assert len(rows) == 8
    assert [r.triple_name for r in rows][:3] == ["child_of[person->person]"] * 2 + ["lives_in[person->location]"]
    top = small_store.rows(head="parent_of", top=1)
    assert len(top) == 1 and top[0].rule == "parent_of <- ~child_of"
    assert top[0].measures is not None and top[0].measures["support"] >= 0
    c1 = small_store.rows(client="1")
    assert {r.triple for r in c1} == {(0, 0, 0), (3, 0, 1)}
    assert c1[0].probability == c1[0].client_posterior and c1[0].weight is None
    by_id = small_store.rows(head=0)
    assert [r.rule for r in by_id] == [r.rule for r in small_store.rows(head="parent_of")]
    assert json.dumps([r.to_json() for r in rows])


def test_diff_by_triple(small_store: RuleStore) -> None:
    (d,) = small_store.diff("0", 1, by="triple")
    p, q = np.array([0.8, 0.15, 0.05]), np.array([0.1, 0.6, 0.3])
    assert d.triple == (0, 0, 0) and d.name == "parent_of[person->person]"
    assert d.total_variation == pytest.approx(0.5 * np.abs(p - q).sum())
    assert d.kl_ab == pytest.approx(float(np.sum(p * np.log(p / q))), rel=1e-6)
    assert d.kl_ba == pytest.approx(float(np.sum(q * np.log(q / p))), rel=1e-6)
    assert d.top[0] == ("parent_of <- ~child_of", 0.8, 0.1)
    (h,) = small_store.diff("0", 1)  # by head: each client has one parent_of triple, so the same numbers
    assert h.triple is None and h.name == "parent_of" and h.total_variation == pytest.approx(d.total_variation)
    with pytest.raises(KeyError, match="client '5' not in the store"):
        small_store.diff(0, 5)
    with pytest.raises(ValueError, match="by must be"):
        small_store.diff(0, 1, by="pair")


def test_diff_by_head_merges_type_combinations() -> None:
    """Clients owning different type combinations share no triple but are compared per head relation."""
    S = 8
    store = RuleStore(RELATIONS, TYPES)
    store.add_triple((3, 0, 0), [[0, S, S], [1, S, S]], [0.5, 0.5])
    store.add_triple((3, 1, 1), [[S, 1, S], [2, S, S]], [0.5, 0.5])  # (stay, child_of) is child_of
    store.add_triple((3, 0, 1), [[1, S, S], [2, S, S]], [0.5, 0.5])
    store.record_client((3, 0, 0), "a", [0.7, 0.3], n_instances=3)
    store.record_client((3, 1, 1), "a", [0.5, 0.5], n_instances=1)
    store.record_client((3, 0, 1), "b", [0.4, 0.6], n_instances=5)
    assert store.diff("a", "b", by="triple") == []
    da = store.head_distribution("a", 3)
    assert da == pytest.approx({(0,): 0.525, (1,): 0.35, (2,): 0.125})
    (d,) = store.diff("a", "b", top=2)
    p, q = np.array([0.525, 0.35, 0.125]), np.array([0.0, 0.4, 0.6])
    assert d.total_variation == pytest.approx(0.5 * np.abs(p - q).sum())
    assert d.kl_ab == pytest.approx(kl_divergence(p, q))
    assert [r for r, _, _ in d.top] == ["lives_in <- parent_of", "lives_in <- spouse_of"]
    assert store.head_distribution("b", 0) is None


def test_divergences() -> None:
    assert total_variation([1, 0], [0, 1]) == 1.0
    assert kl_divergence([0.5, 0.5], [0.5, 0.5]) == pytest.approx(0.0)
    assert math.isfinite(kl_divergence([1.0, 0.0], [0.0, 1.0]))


def test_scored_rules_merge_types() -> None:
    store = RuleStore(RELATIONS, TYPES)
    S = 8
    docs = random_docs(2, n_docs=5)
    for th, tt in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        store.add_triple((3, th, tt), [[0, 3, S], [S, S, S]], [0.9, 0.1])
        store.compute_counts(docs, triples=[(3, th, tt)])
    scored, probs, skipped = store.scored_rules()
    assert skipped == 4 and probs == [0.9]
    (s,) = scored
    untyped = count_bodies(3, [[0, 3, S]], docs, 4)
    assert s.rule == Rule(3, (0, 3))
    assert (s.support, s.body_size, s.head_size) == (untyped.support[0], untyped.body_size[0], untyped.head_size[0])


def test_load_errors(tmp_path, small_store: RuleStore) -> None:
    with pytest.raises(FileNotFoundError, match="no rule store"):
        RuleStore.load(tmp_path)
    (tmp_path / "rules.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        RuleStore.load(tmp_path)
    data = small_store.to_json()
    data["format"] = "other"
    (tmp_path / "rules.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a rule store"):
        RuleStore.load(tmp_path)
    data = small_store.to_json()
    data["relations"][1], data["relations"][2] = data["relations"][2], data["relations"][1]
    (tmp_path / "rules.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="does not match its tokens"):
        RuleStore.load(tmp_path)
    data = small_store.to_json()
    data["triples"][0]["prior"] = [1.0]
    (tmp_path / "rules.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="triples\\[0\\]: field 'prior'"):
        RuleStore.load(tmp_path)


def test_store_without_types() -> None:
    store = RuleStore(RELATIONS)
    store.add_triple((1, 3, 4), [[4]], [1.0])
    assert store.triple_name((1, 3, 4)) == "child_of[3->4]"
    assert store.find_triples("child_of", (3, 4)) == [(1, 3, 4)]
    assert RuleStore.from_json(store.to_json()).types is None


def test_fixture_is_deterministic() -> None:
    assert build_store().to_json() == build_store().to_json()


# --- counts per client, missing counts, atomic save (fednsl rules counts) ----------------------------


def test_count_clients_sums_local_counts_to_the_union() -> None:
    """Each client counts its own documents; the global counts equal one count on the union of all documents
    (also documents of a client without a record of the triple), and each recorded client keeps its own."""
    store = build_store()
    docs = random_docs(3, n_docs=6)
    parts = {"0": docs[:2], "1": docs[2:4], "9": docs[4:]}  # client "9" holds no posterior of any triple
    R = store.vocab.num_relations
    report = store.count_clients(parts)
    assert report == {"triples": 3, "clients": 3, "documents": 6, "rules": sum(r.num_bodies for r in store.triples.values())}
    for t, rec in store.triples.items():
        union = count_bodies(t[0], rec.bodies, docs, R, pair_types=(t[1], t[2]))
        assert rec.counts is not None and rec.counts.to_dict() == union.to_dict()
        for cid, crec in rec.clients.items():
            own = count_bodies(t[0], rec.bodies, parts[cid], R, pair_types=(t[1], t[2]))
            assert crec.counts is not None and crec.counts.to_dict() == own.to_dict()
    assert store.missing_counts() == []


def test_missing_counts_and_counting_only_those() -> None:
    store = RuleStore(RELATIONS, TYPES)
    S = store.vocab.stay
    store.add_triple((0, 0, 0), [[1, S, S]], [1.0])
    store.add_triple((1, 0, 0), [[0, S, S]], [1.0])
    assert set(store.missing_counts()) == {(0, 0, 0), (1, 0, 0)}
    store.count_clients({"a": random_docs(0, n_docs=2)}, triples=[(1, 0, 0)])
    assert store.missing_counts() == [(0, 0, 0)]


def test_save_is_atomic(tmp_path, small_store: RuleStore, monkeypatch) -> None:
    """A save that fails while formatting leaves the earlier files whole (no torn rules.json)."""
    small_store.save(tmp_path)
    before = (tmp_path / "rules.json").read_text(), (tmp_path / "rules.tsv").read_text()

    def broken(self: RuleStore) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(RuleStore, "to_tsv", broken)
    small_store.meta["changed"] = True
    with pytest.raises(RuntimeError):
        small_store.save(tmp_path)
    assert ((tmp_path / "rules.json").read_text(), (tmp_path / "rules.tsv").read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules.json", "rules.tsv"]


def test_recorded_reading_order_round_trip_tsv_and_exports(tmp_path, small_store: RuleStore) -> None:
    from rules.store import RankedRule

    assert small_store.to_json()["version"] == 1 and "reading_order" not in small_store.to_json()  # none recorded
    rec = small_store.triples[(0, 0, 0)]  # bodies ~child_of, spouse_of.parent_of, identity
    rec.ranked = [RankedRule((1,), 0.6, 0.9), RankedRule((0, 2), 0.2, 0.5, uses_head=True)]
    assert not small_store.ranked  # not every triple holds one yet, nor the store its header
    other = [RankedRule((1,), 0.5, 1.0), RankedRule((0,), 0.0, 0.0, detour=True)]
    small_store.triples[(1, 0, 0)].ranked = other
    small_store.triples[(3, 0, 1)].ranked = [RankedRule((0, 1, 2), 0.3, 0.4)]
    small_store.reading_order = {"by": "contribution", "threshold": 0.95}
    assert small_store.ranked
    _, tpath = small_store.save(tmp_path)
    data = json.loads((tmp_path / "rules.json").read_text())
    assert data["version"] == 2 and data["reading_order"] == {"by": "contribution", "threshold": 0.95}
    assert data["triples"][0]["ranked"][1] == {
        "bodies": [0, 2], "explains": 0.2, "loo_conf": 0.5, "uses_head": True, "detour": False
    }
    loaded = RuleStore.load(tmp_path)
    assert loaded.ranked and loaded.triples[(0, 0, 0)].ranked == rec.ranked and loaded.to_json() == data
    # rules.tsv follows the recorded order (not the posterior's), the other forms of a rule after it
    lines = tpath.read_text().splitlines()
    header = lines[0].split("\t")
    assert header[-5:] == ["rank", "explains", "loo_conf", "uses_head", "detour"]
    rows = [dict(zip(header, ln.split("\t"))) for ln in lines[1:] if ln.startswith("parent_of[")]
    assert [(r["rule"], r["rank"], r["explains"], r["uses_head"]) for r in rows] == [
        ("parent_of <- spouse_of, parent_of", "1", "0.6", "0"),
        ("parent_of <- ~child_of", "2", "0.2", "1"),
        ("parent_of <- <stay>", "2", "", ""),
    ]
    assert [r.index for r in loaded.rows(head="parent_of", ranked=True)] == [1, 0, 2]
    assert [r.index for r in loaded.rows(head="parent_of")] == [0, 1, 2]  # probability order
    scored, _, _ = loaded.scored_rules("parent_of")
    assert [s.rule.body for s in scored] == [(2, 0), (5,)]
    # an order that does not list every body once is refused, naming the triple
    data["triples"][0]["ranked"][1]["bodies"] = [0]
    (tmp_path / "rules.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="triples\\[0\\]: the recorded reading order does not list each of the 3"):
        RuleStore.load(tmp_path)
