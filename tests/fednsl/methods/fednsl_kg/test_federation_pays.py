"""fednsl-kg's exchange for data-poor clients: leave-one-out evidence pooled by the server into the next round's
confidences, clients keeping their own mined bodies, and the averaged weights (issue 33)."""

from __future__ import annotations

import numpy as np

from fednsl.config import load_config
from fednsl.federation.records import Message, validate
from fednsl.pipeline import build_federation
from fednsl.tasks.rule_learning import Proposal
from tests.fednsl.methods.fednsl_kg.test_fednsl_kg import CONFIG, FAST

ENTITY3 = [*FAST, "data.num_clients=3", "data.partition=entity", "data.shares=[0.6, 0.2, 0.2]"]


def _round_one(overrides: list[str]):
    fed = build_federation(load_config(CONFIG, overrides))
    s, ids = fed.strategy, sorted(fed.clients)
    stats = {c: fed.clients[c].handle(Message("train.stats", 1, config={"max_body_len": 3, "seed": 1})) for c in ids}
    s.aggregate_train_stats(1, stats, {})
    requests = s.configure_train(1, ids)
    replies = {c: fed.clients[c].handle(Message("train", 1, arrays=requests[c].arrays,
                                                config={**requests[c].config, "seed": 2})) for c in ids}
    for c in ids:
        validate(replies[c], s.reply_schema("train"))
    s.aggregate_train(1, replies, {})
    return fed, requests, replies


def test_the_next_proposal_carries_the_evidence_pooled_over_clients() -> None:
    fed, requests, replies = _round_one(ENTITY3)
    s, ids = fed.strategy, sorted(fed.clients)
    assert "confidence" not in requests[ids[0]].arrays  # round 1: nothing pooled yet
    first = Proposal.from_arrays(requests[ids[0]].arrays)
    pooled = {}
    for t, key in enumerate(first.keys()):
        for j, body in enumerate(first.bodies_of(t, s.R)):
            pooled[(key, body)] = sum(np.asarray(replies[c].arrays["evidence"])[t, j] for c in ids)
    nxt = s.configure_train(2, ids)[ids[0]]
    validate(nxt, s.request_schema("train"))
    p, conf = Proposal.from_arrays(nxt.arrays), nxt.arrays["confidence"]
    checked = 0
    for t, key in enumerate(p.keys()):
        for j, body in enumerate(p.bodies_of(t, s.R)):
            e = pooled.get((key, body))
            for k in range(2):
                if e is None or e[2 * k + 1] == 0:
                    assert conf[t, j, k] == -1.0
                else:
                    assert conf[t, j, k] == e[2 * k] / e[2 * k + 1]
                    checked += 1
    assert checked > 0
    again = type(s)(s.cfg, s.relations, ids, s.seed, types=s.types, rounds=s.rounds)
    again.load_state_dict(s.state_dict())  # a resumed server sends the same confidences
    np.testing.assert_array_equal(again.configure_train(2, ids)[ids[0]].arrays["confidence"], conf)


def test_a_client_keeps_its_own_mined_bodies_beside_the_proposal_and_answers_for_the_proposal_only() -> None:
    fed, requests, replies = _round_one(ENTITY3)
    ids = sorted(fed.clients)
    client = fed.clients[ids[-1]]
    p = Proposal.from_arrays(requests[ids[-1]].arrays)
    assert client.mined and client.predictor is not None
    R = fed.strategy.R
    for t, r in enumerate(p.relations):
        if r not in client.predictor.bodies:
            continue
        sent = p.bodies_of(t, R)
        used = client.predictor.bodies[r]
        assert used[: len(sent)] == sent
        assert set(used[len(sent):]) == set(client.mined.get(r, [])) - set(sent)
    post, mask = replies[ids[-1]].arrays["posterior"], replies[ids[-1]].arrays["mask"]
    assert post.shape == p.mask.shape and not (mask & ~p.mask.numpy()).any()
    off = build_federation(load_config(CONFIG, [*ENTITY3, "method_kwargs.keep_own_rules=false"]))
    assert off.clients[ids[-1]].cfg.keep_own_rules is False


def test_averaged_weights_are_sent_as_every_clients_start() -> None:
    fed, requests, replies = _round_one([*ENTITY3, "method_kwargs.federated_weights=true"])
    s, ids = fed.strategy, sorted(fed.clients)
    first = Proposal.from_arrays(requests[ids[0]].arrays)
    nxt = s.configure_train(2, ids)[ids[0]]
    validate(nxt, s.request_schema("train"))
    p = Proposal.from_arrays(nxt.arrays)
    where = {(key, body): (t, j) for t, key in enumerate(first.keys()) for j, body in enumerate(first.bodies_of(t, s.R))}
    for t, key in enumerate(p.keys()):
        for j, body in enumerate(p.bodies_of(t, s.R)):
            if (key, body) not in where:
                continue
            t0, j0 = where[(key, body)]
            n = np.array([replies[c].arrays["weight_queries"][t0] for c in ids], dtype=float)  # (clients, 2)
            w = np.array([replies[c].arrays["rule_weights"][t0, j0] for c in ids])
            for k in range(2):
                assert nxt.arrays["start_known"][t, j, k] == (n[:, k].sum() > 0)
                if n[:, k].sum() > 0:
                    assert np.isclose(nxt.arrays["start_weights"][t, j, k], (w[:, k] * n[:, k]).sum() / n[:, k].sum())


def test_select_on_valid_scores_with_whichever_predictor_ranks_valid_better() -> None:
    import torch

    from kg.linkpred import evaluate_link_prediction

    for mode in ("client", "head"):
        fed, _, replies = _round_one([*ENTITY3, f"method_kwargs.select_on_valid={mode}"])
        for cid, client in fed.clients.items():
            assert client.local is not None and client.predictor is not None
            assert replies[cid].metrics["heads_local"] == len(client.use_local)
            valid = {
                name: float(evaluate_link_prediction(f.score, client.part, "valid", None, client.filter_index)
                            .compute()["mrr"])
                for name, f in (("federated", client.predictor), ("local", client.local), ("chosen", client))
            }
            if mode == "client":  # the chosen scorer is the better of the two on valid (ties: federated)
                assert valid["chosen"] == max(valid["federated"], valid["local"])
                assert (valid["local"] > valid["federated"]) == bool(client.use_local)
            queries = torch.tensor([[e, q] for q in range(2 * client.R) for e in range(3)])
            chosen = client.score(queries)
            for i, (_, q) in enumerate(queries.tolist()):
                source = client.local if q in client.use_local else client.predictor
                torch.testing.assert_close(chosen[i], source.score(queries[i : i + 1])[0])
            # the local predictor is fitted on the client's own mined bodies only, once, with a seed kept in state
            for r, bodies in client.mined.items():
                assert client.local.bodies[r] == bodies
            state = client.state_dict()
            again = type(client)(cid, client.part, client.cfg, client.filter_index)
            again.load_state_dict(state)
            assert again.local_seed == client.local_seed is not None
