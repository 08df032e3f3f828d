"""FedNSL end to end on the federation core: privacy boundary, resume equality, bad input, planted-rule recall,
and a DWIE smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fednsl.config import RunConfig, load_config
from fednsl.federation.records import Message
from fednsl.federation.roles import Client, handles
from fednsl.methods.fednsl.client import FedNSLClient
from fednsl.methods.fednsl.messages import (
    EVAL_SCHEMA,
    PUBLISHED_FIELDS,
    STATS_SCHEMA,
    train_schema,
)
from fednsl.pipeline import build_federation, train
from fednsl.tasks.rule_learning import Proposal
from kg.documents import Document

TINY_GENERATOR = {"d_model": 32, "nhead": 2, "dim_feedforward": 64, "pretrain_epochs": 1, "epochs": 1,
                  "samples_per_epoch": 800, "batch_size": 128}


pytestmark = pytest.mark.usefixtures("isolated_cache", "one_torch_thread")


def small_config(rounds: int = 2, **kwargs) -> RunConfig:
    mk = {"num_samples": 30, "scorer_steps": 40, "generator": TINY_GENERATOR,
          "backbone": {"name": "oracle", "drop": 0.3}, **kwargs}
    return RunConfig(method="fednsl", rounds=rounds, seed=0, name="tiny",
                     data={"path": "synthetic", "synthetic": {"num_documents": 48, "entities_per_doc": [6, 9]}},
                     method_kwargs=mk, federation={"min_clients": 1})


def server_rows(rows, stage):
    return [r for r in rows if r["scope"] == "server" and r["stage"] == stage]


SCHEMAS = {"train.stats": STATS_SCHEMA, "train": train_schema("published"), "evaluate": EVAL_SCHEMA}


def test_privacy_only_declared_probabilities_ids_and_counts_leave_clients(tmp_path: Path) -> None:
    """Only distributions, ids, counts and masks leave a client — plus, under the default ``transfer:
    published``, exactly the declared per-triple scorer parameters (messages.PUBLISHED_FIELDS)."""
    ups: list[tuple[str, Message]] = []
    cfg = small_config()
    train(cfg, tmp_path / "run", progress=False, message_hook=lambda d, c, m: ups.append((c, m)) if d == "up" else None)
    assert {m.kind for _, m in ups} == {"train.stats", "train", "evaluate"}
    published_seen = False
    for cid, msg in ups:
        schema = SCHEMAS[msg.kind]
        specs = {s.name: s for s in schema.arrays}
        assert set(msg.arrays) <= set(specs), (cid, msg.kind, set(msg.arrays) - set(specs))
        for name, arr in msg.arrays.items():
            kind = specs[name].kind
            if name in PUBLISHED_FIELDS and msg.kind == "train":
                assert kind == "weights" and arr.dtype.kind == "f"
                published_seen = True
                continue
            assert kind in ("distribution", "ids", "counts", "mask"), (name, kind)
            if kind != "distribution":  # only distributions (and the published fields) may carry floats
                assert arr.dtype.kind in "iub", (name, arr.dtype)
        assert set(msg.metrics) <= set(schema.metrics)
        assert msg.config == {}
        if msg.kind == "train":
            post, mask = msg.arrays["posterior"], msg.arrays["mask"]
            rows = mask.any(-1)
            np.testing.assert_allclose(post[rows].sum(-1), 1.0, atol=1e-9)
            assert np.all(post[~mask] == 0)
            assert set(PUBLISHED_FIELDS) <= set(msg.arrays)
            own = msg.arrays["instances"] > 0
            assert np.all(msg.arrays["scorer_weights"][~own] == 0) and np.all(msg.arrays["scorer_bias"][~own] == 0)
    assert published_seen
    # under transfer: prior no scorer parameter leaves a client
    assert not set(PUBLISHED_FIELDS) & {s.name for s in train_schema("prior").arrays}


def test_resume_after_round_one_gives_identical_rules(tmp_path: Path) -> None:
    cfg = small_config(rounds=2)
    full = train(cfg, tmp_path / "full", progress=False)
    part_cfg = small_config(rounds=1)
    train(part_cfg, tmp_path / "resumed", progress=False)
    resumed = train(cfg, tmp_path / "resumed", resume=True, progress=False)
    a = json.loads((tmp_path / "full" / "rules.json").read_text())
    b = json.loads((tmp_path / "resumed" / "rules.json").read_text())
    assert a == b
    ev_a = server_rows(full.rows, "evaluate")[-1]
    ev_b = server_rows(resumed.rows, "evaluate")[-1]
    assert {k: v for k, v in ev_a.items() if "time" not in k} == {k: v for k, v in ev_b.items() if "time" not in k}
    assert (tmp_path / "full" / "rules.tsv").exists() and (tmp_path / "full" / "plots" / "fednsl_f1_logic.png").exists()
    # `fednsl rules explain RUN_DIR --doc DOC` rebuilds the document's values from RUN_DIR/config.yaml
    from click.testing import CliRunner

    from fednsl.cli.rules import command as rules_cli

    fed = full.federation
    client = fed.clients[sorted(fed.clients)[0]]
    doc = next(d for d in client.partition.train if d.num_facts)
    h, r, t = (int(v) for v in doc.facts[0])
    rel = a["relations"][r]
    out = CliRunner().invoke(rules_cli, ["explain", str(tmp_path / "full"), "--doc", doc.doc_id, "--head", rel,
                                         "--pair", str(h), str(t), "--format", "json"])
    if out.exit_code == 0:
        assert json.loads(out.output[out.output.index("{"):])["pair"] == [h, t]
    else:  # a head without a learned triple of these types is reported, not a crash
        assert "no stored triple" in out.output


def test_clients_in_parallel_give_the_same_run(tmp_path: Path) -> None:
    """``federation.parallelism: 2`` (the DWIE configs) runs two clients at once in threads: same rules, same
    evaluation as one at a time."""
    runs = {}
    for par in (1, 2):
        cfg = small_config(rounds=1)
        cfg.federation.parallelism = par
        runs[par] = train(cfg, tmp_path / f"p{par}", progress=False)
    a, b = (json.loads((tmp_path / f"p{p}" / "rules.json").read_text()) for p in (1, 2))
    assert a == b
    one, two = ({k: v for k, v in server_rows(runs[p].rows, "evaluate")[-1].items() if "time" not in k} for p in (1, 2))
    assert one == two


class Wrapping(Client):
    """Wraps a FedNSL client and passes ``train.stats`` and ``evaluate`` through; subclasses spoil ``train``."""

    def __init__(self, inner: FedNSLClient):
        self.inner, self.cid = inner, inner.cid

    @handles("train.stats")
    def train_stats(self, msg):
        return self.inner.handle(msg)

    @handles("evaluate")
    def evaluate(self, msg):
        return self.inner.handle(msg)


class Corrupting(Wrapping):
    """Wraps a FedNSL client and spoils its posterior: NaN, or rows that do not sum to 1."""

    def __init__(self, inner: FedNSLClient, how: str):
        super().__init__(inner)
        self.how = how

    @handles("train")
    def train(self, msg):
        reply = self.inner.handle(msg)
        post = reply.arrays["posterior"].copy()
        row = int(np.flatnonzero(reply.arrays["mask"].any(-1))[0])
        if self.how == "nan":
            post[row, 0] = np.nan
        else:
            post[row] *= 0.5
        reply.arrays["posterior"] = post
        return reply


def test_bad_posteriors_are_dropped_with_a_message_and_the_round_completes(tmp_path: Path, caplog) -> None:
    cfg = small_config(rounds=1)
    fed = build_federation(cfg)
    ids = sorted(fed.clients)
    fed.clients[ids[0]] = Corrupting(fed.clients[ids[0]], "nan")
    fed.clients[ids[1]] = Corrupting(fed.clients[ids[1]], "sum")
    with caplog.at_level("WARNING", logger="fednsl"):
        result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    row = server_rows(result.rows, "train")[0]
    assert row["train.dropped"] == 2 and row["train.replies"] == len(ids) - 2
    assert row["triples_updated"] > 0
    text = caplog.text
    assert "non-finite" in text and "do not sum to 1" in text
    assert server_rows(result.rows, "evaluate")  # the round went on to evaluation


def test_missing_queries_unknown_triples_and_empty_documents() -> None:
    cfg = small_config(rounds=1)
    fed = build_federation(cfg)
    s = fed.strategy
    cids = sorted(fed.clients)
    stats = {c: fed.clients[c].handle(Message("train.stats", 1, config={"seed": 1, "max_body_len": 3}))
             for c in cids}
    bogus = Message("train.stats", 1, "bogus", arrays={
        "triples": np.array([[999, 0, 0]]), "bodies": np.zeros((1, 1, 3), np.int64), "probs": np.ones((1, 1)),
        "mask": np.ones((1, 1), bool), "instances": np.array([5])})
    metrics = s.aggregate_train_stats(1, {**stats, "bogus": bogus}, {})
    assert metrics["invalid_triples"] == 1 and metrics["triples"] > 0  # a relation id the server does not know
    msg = s.configure_train(1, cids)[cids[0]]
    client: FedNSLClient = fed.clients[cids[0]]
    # a triple never seen by the server: drop one of the client's triples from the rule set
    rules = Proposal.from_arrays(msg.arrays)
    mine = [t for t in range(rules.num_heads) if rules.mask[t].any()
            and tuple(rules.heads[t, 1:].tolist()) in client.tables["train"].groups]
    gone = mine[0]
    keep = torch.tensor([t for t in range(rules.num_heads) if t != gone])
    arrays = {k: v[keep.numpy()] for k, v in msg.arrays.items()}
    r, a, b = rules.heads[gone].tolist()
    g = client.tables["train"].groups[(a, b)]
    reply = client.handle(Message("train", 1, arrays=arrays, config={**msg.config, "seed": 3}))
    assert reply.metrics["facts_unknown_triple"] >= int(g.gold[:, r].sum()) > 0
    # triples without local queries: all-zero, masked rows and zero instances
    reply = client.handle(Message("train", 1, arrays=msg.arrays, config={**msg.config, "seed": 3}))
    local = reply.arrays["instances"] > 0
    assert (~local).any() and np.all(reply.arrays["posterior"][~local] == 0) and not reply.arrays["mask"][~local].any()
    # an empty document inside a client's data is counted, not fatal
    part = client.partition
    empty = Document("EMPTY", [], np.zeros(0, np.int64), np.zeros((0, 3), np.int64))
    part.test.append(empty)
    values = {**client.values, "EMPTY": np.zeros((0, 0, client.R), np.float32)}
    c2 = FedNSLClient("x", part, values, client.R, client.options, golden_rules=client.golden)
    assert c2.tables["seen_test"].empty_docs == 1
    ev = c2.handle(Message("evaluate", 1, arrays=msg.arrays, config={**msg.config, "seed": 4}))
    assert 0.0 <= ev.metrics["seen_f1"] <= 1.0


def test_unknown_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown option"):
        build_federation(small_config(kl_wieght=1.0))
    with pytest.raises(ValueError, match="kl_direction"):
        build_federation(small_config(kl_direction="sideways"))


@pytest.mark.slow
def test_planted_rules_on_top_on_the_synthetic_default(tmp_path: Path) -> None:
    cfg = load_config("fednsl_synthetic")
    result = train(cfg, tmp_path / "run", progress=False)
    recall = server_rows(result.rows, "round")[-1]["planted_recall_top5"]
    assert recall >= 0.8
    store = json.loads((tmp_path / "run" / "rules.json").read_text())
    assert store["meta"]["planted_recall_top5"] == recall
    assert server_rows(result.rows, "round")[-1]["planted_in_pool"] >= recall
    for rule in store["meta"]["planted_rules"]:
        assert rule["in_top_k"] == (rule["best_rank"] is not None and rule["best_rank"] <= 5)
    ev = server_rows(result.rows, "evaluate")[-1]
    assert ev["seen_f1"] > ev["backbone_seen_f1"]


@pytest.mark.slow
@pytest.mark.data
def test_dwie_two_round_smoke(tmp_path: Path, dwie_dir: Path) -> None:
    cfg = load_config("fednsl_dwie", [
        "rounds=2", f"data.path={dwie_dir}", "data.max_docs=60", "method_kwargs.num_samples=20",
        "method_kwargs.scorer_steps=30", "method_kwargs.backbone.text=hash", "method_kwargs.backbone.rounds=2",
        "method_kwargs.backbone.hash_dim=64",
        f"method_kwargs.generator={json.dumps(TINY_GENERATOR)}",
    ])
    result = train(cfg, tmp_path / "run", progress=False)
    ev = server_rows(result.rows, "evaluate")
    assert [r["round"] for r in ev] == [1, 2]
    assert 0.0 <= ev[-1]["seen_f1"] <= 1.0 and "backbone_unseen_f1" in ev[-1]
    store = json.loads((tmp_path / "run" / "rules.json").read_text())
    assert store["relations"][0] == "citizen_of" and store["triples"]
    assert "golden_rules" in store["meta"] and len(store["meta"]["golden_rules"]) == 39


def _one_round_to_evaluation(cfg: RunConfig):
    """A federation driven by hand through train.stats and train of round 1; returns (fed, evaluate message)."""
    fed = build_federation(cfg)
    s = fed.strategy
    cids = sorted(fed.clients)
    stats = {c: fed.clients[c].handle(Message("train.stats", 1, config={"seed": 1, "max_body_len": 3}))
             for c in cids}
    s.aggregate_train_stats(1, stats, {})
    msg = s.configure_train(1, cids)[cids[0]]
    replies = {c: fed.clients[c].handle(Message("train", 1, arrays=msg.arrays, config={**msg.config, "seed": 3}))
               for c in cids}
    s.aggregate_train(1, replies, {})
    ev = s.configure_evaluate(1, cids)
    return fed, Message("evaluate", 1, arrays=ev.arrays, config={**ev.config, "seed": 3})


def test_unseen_predictions_depend_on_what_the_server_sent() -> None:
    fed, ev = _one_round_to_evaluation(small_config(rounds=1))
    client: FedNSLClient = fed.clients[sorted(fed.clients)[0]]
    base = client.score_unseen(ev)
    # the published route scores the unseen triples with the owners' scorer the server sent
    unseen = client._build("unseen_test", Proposal.from_arrays(ev.arrays), 1).inst
    assert ev.arrays["published_mask"][unseen.tri.numpy()].any()
    scaled = {**ev.arrays, "published_weights": ev.arrays["published_weights"] * 3.0,
              "published_bias": ev.arrays["published_bias"] - 1.0}
    moved = client.score_unseen(Message("evaluate", 1, arrays=scaled, config=ev.config))
    assert not np.allclose(moved["published"], base["published"])
    np.testing.assert_allclose(moved["prior"], base["prior"])  # the prior route does not read them
    np.testing.assert_allclose(moved["recal"], base["recal"])  # nor does the recalibration baseline
    # the recalibration-only baseline takes the same route with the owners' mean (u_t, b_t)
    use = ev.arrays["published_mask"][unseen.tri.numpy()]
    u, b = ev.arrays["published_recal_slope"], ev.arrays["published_recal_bias"]
    expect = u[unseen.tri.numpy()] * unseen.passthrough.double().numpy() + b[unseen.tri.numpy()]
    np.testing.assert_allclose(base["recal"][use], expect[use], rtol=1e-10)
    assert (ev.arrays["published_recal_slope"][ev.arrays["published_mask"]] != 0).any()
    rescaled = {**ev.arrays, "published_recal_slope": u * 2.0}
    recal_moved = client.score_unseen(Message("evaluate", 1, arrays=rescaled, config=ev.config))
    assert not np.allclose(recal_moved["recal"][use], base["recal"][use])
    np.testing.assert_allclose(recal_moved["published"], base["published"])
    # the prior route scores them with the aggregated posterior the server sent
    gp = ev.arrays["global_posterior"].copy()
    mask = ev.arrays["mask"]
    for t in range(gp.shape[0]):
        real = np.flatnonzero(mask[t])
        gp[t, real] = gp[t, real[::-1]]  # the same numbers on other bodies: still a distribution
    flipped = client.score_unseen(Message("evaluate", 1, arrays={**ev.arrays, "global_posterior": gp},
                                          config=ev.config))
    assert not np.allclose(flipped["prior"], base["prior"])
    # without the server's aggregate, both routes fall back to the round's T_θ (and change again)
    bare = {k: v for k, v in ev.arrays.items() if not k.startswith(("global_", "published_"))}
    alone = client.score_unseen(Message("evaluate", 1, arrays=bare, config=ev.config))
    np.testing.assert_allclose(alone["published"], alone["prior"])
    assert client._fit is not None
    np.testing.assert_allclose(alone["recal"], client._fit.recal.logits(unseen, False).numpy())  # pooled (u, b)
    assert not np.allclose(alone["published"], base["published"])


def test_kl_weight_changes_unseen_f1(tmp_path: Path) -> None:
    """Issue 17: unseen F1 was bit-identical for every λ; now λ reaches the unseen cells (both routes)."""
    rows = {}
    for lam in (0.0, 10.0):
        result = train(small_config(rounds=1, kl_weight=lam), tmp_path / f"lam{lam:g}", progress=False)
        rows[lam] = server_rows(result.rows, "evaluate")[-1]
    assert rows[0.0]["unseen_f1"] != rows[10.0]["unseen_f1"] or \
        rows[0.0]["prior_unseen_f1"] != rows[10.0]["prior_unseen_f1"]
    assert (tmp_path / "lam0" / "eval_documents.npz").exists()


class Orphaning(Wrapping):
    """Wraps a FedNSL client and answers ``train`` for none of its triples (they get no owner this round)."""

    @handles("train")
    def train(self, msg):
        reply = self.inner.handle(msg)
        arrays = {k: np.zeros_like(v) for k, v in reply.arrays.items()}
        return msg.reply(self.cid, arrays=arrays, metrics=reply.metrics)


def test_orphan_triples_and_a_one_body_prior_are_logged_counted_and_the_round_completes(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    import fednsl.tasks.rule_learning.server as strategy_module  # the shared server draws the samples

    real = strategy_module.sample_rules

    def peaked(*args, **kwargs):
        s = real(*args, **kwargs)
        t = int(np.flatnonzero((s.mask.sum(-1) >= 2).numpy())[0])
        lp = s.log_prior.clone()
        lp[t] = torch.where(s.mask[t], torch.full_like(lp[t], -60.0), lp[t])
        lp[t, int(np.flatnonzero(s.mask[t].numpy())[0])] = 0.0  # all mass on the first body
        s.log_prior = lp
        return s

    monkeypatch.setattr(strategy_module, "sample_rules", peaked)
    cfg = small_config(rounds=1)
    fed = build_federation(cfg)
    ids = sorted(fed.clients)
    fed.clients[ids[0]] = Orphaning(fed.clients[ids[0]])
    with caplog.at_level("WARNING", logger="fednsl"):
        result = train(cfg, tmp_path / "run", progress=False, federation=fed)
    row = server_rows(result.rows, "train")[0]
    assert row["triples_without_owner"] > 0 and row["degenerate_priors"] == 1
    assert row["triples_updated"] > 0
    assert "have no owner this round" in caplog.text and "of its mass on one body" in caplog.text
    ev = server_rows(result.rows, "evaluate")
    assert ev and 0.0 <= ev[-1]["unseen_f1"] <= 1.0


def test_shared_split_reports_the_data_poor_clients_and_the_fit_iterations(tmp_path: Path) -> None:
    """Issue 17: the data-poor clients' metrics are their own aggregate (not the all-client one), and each client's
    scorer fit logs its L-BFGS iteration count, which the server summarises."""
    cfg = small_config(rounds=1)
    cfg.data["synthetic"]["num_documents"] = 160  # a data-poor client holds 20 % of its combo's documents
    cfg.data.update(split="shared", num_clients=8)
    result = train(cfg, tmp_path / "run", progress=False)
    ev = server_rows(result.rows, "evaluate")[-1]
    assert 0.0 < ev["poor_unseen_f1"] <= 1.0 and 0.0 < ev["poor_backbone_unseen_f1"] <= 1.0
    assert (ev["poor_seen_f1"], ev["poor_unseen_f1"]) != (ev["seen_f1"], ev["unseen_f1"])
    tr = server_rows(result.rows, "train")[-1]
    assert 1 <= tr["scorer_iterations_mean"] <= tr["scorer_iterations_max"] <= 40  # scorer_steps
    fits = [r["scorer_iterations"] for r in result.rows if r["scope"] != "server" and r["stage"] == "train"]
    assert len(fits) == 8 and max(fits) == tr["scorer_iterations_max"]


def test_round0_mining_adds_the_backbone_edges_outside_the_clients_combo() -> None:
    """Issue 17 item 5: round-0 mining uses the (calibrated) backbone values of cells outside the client's own
    combo at ``mining_threshold``, beside its gold facts inside the combo; backbone values inside the combo and
    on the diagonal add nothing."""
    from kg.split import query_mask

    client = build_federation(small_config()).clients["c0"]
    doc = next(d for d in client.partition.train if d.num_entities >= 4)
    qm = query_mask(doc, client.partition.seen)
    values = np.zeros_like(client.values[doc.doc_id])
    outside = np.argwhere(~qm & ~np.eye(len(qm), dtype=bool))
    inside = np.argwhere(qm & ~np.eye(len(qm), dtype=bool))
    assert len(outside) >= 2 and len(inside) >= 1
    (h1, t1), (h2, t2), (h3, t3) = outside[0], outside[1], inside[0]
    values[h1, t1, 2] = 0.5  # at the threshold: mined
    values[h2, t2, 3] = 0.49  # under it: not mined
    values[h3, t3, 4] = 0.9  # inside the combo: only gold facts count there
    values[0, 0, 5] = 0.9  # a self-loop: never
    client.values = {**client.values, doc.doc_id: values}
    mined, extra = client._mining_docs()
    facts = {tuple(f) for f in next(m for m in mined if m.doc_id == doc.doc_id).facts.tolist()}
    gold_inside = {tuple(f) for f in doc.facts.tolist() if qm[f[0], f[2]]}
    assert (h1, 2, t1) in facts and (h2, 3, t2) not in facts and (0, 5, 0) not in facts
    assert facts - {(h1, 2, t1)} == gold_inside and (h3, 4, t3) not in gold_inside
    client.mining_edges = "combo"
    mined, extra = client._mining_docs()
    assert extra == 0 and {tuple(f) for f in next(m for m in mined if m.doc_id == doc.doc_id).facts.tolist()} == gold_inside
