"""Rule generator (Eq. 5–6): probabilities, masking, batched sampling vs a naive loop, training on a planted prior."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from rules.generator import (
    GeneratorConfig,
    RuleGenerator,
    SampledRules,
    TypeConstraints,
    chain_sampling_probs,
    check_bodies,
    sample_rules,
    sample_rules_reference,
    train_generator,
)
from rules.generator.reference import _py_allowed
from rules.pool import RulePool

R, E, L = 3, 3, 3
PAD = 2 * R
SMALL = GeneratorConfig(num_relations=R, num_types=E, d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
# relation 0: type 0 → 1, relation 1: 1 → 2, relation 2: 2 → 0 and 0 → 0; relation 1 also 1 → 1
PAIRS = [(0, 0, 1), (1, 1, 2), (1, 1, 1), (2, 2, 0), (2, 0, 0)]
TRIPLES = torch.tensor([[0, 0, 1], [1, 1, 2], [2, 2, 0], [0, 0, 0], [1, 2, 2], [2, 1, 0]])


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest (and far more steadily on a shared 2-core machine) on one intra-op thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def model(seed: int = 0, config: GeneratorConfig = SMALL) -> RuleGenerator:
    return RuleGenerator(config, torch.Generator().manual_seed(seed)).eval()


def constraints() -> TypeConstraints:
    return TypeConstraints.from_pairs(PAIRS, R, E, unobserved="forbid")


def all_bodies(r: int = R, length: int = L) -> torch.Tensor:
    """Every well-formed padded body (Σ_k (2R)^k rows)."""
    rows = [b + (2 * r,) * (length - len(b)) for k in range(1, length + 1) for b in itertools.product(range(2 * r), repeat=k)]
    return torch.tensor(rows)


def strip(body: list[int]) -> tuple[int, ...]:
    return tuple(x for x in body if x != PAD)


# ---- configuration / constraints ---------------------------------------------------------------------------------
def test_default_config_is_logire_sized() -> None:
    c = GeneratorConfig()
    assert (c.vocab_size, c.pad, c.d_model, c.nhead, c.dim_feedforward) == (131, 130, 256, 8, 2048)
    m = RuleGenerator(GeneratorConfig(positional=False))
    n = sum(p.numel() for p in m.parameters())
    assert 5.8e6 < n < 6.0e6  # spec §9: ≈5.9M (nn.Transformer defaults)
    with pytest.raises(ValueError, match="divisible"):
        GeneratorConfig(d_model=30, nhead=4)


def test_type_constraints_invariants() -> None:
    tc = constraints()
    assert tc.allowed.shape == (2 * R + 1, E, E)
    assert torch.equal(tc.allowed[R + 1], tc.allowed[1].T)
    bad = tc.allowed.clone()
    bad[R, 0, 0] = ~bad[R, 0, 0]
    with pytest.raises(ValueError, match="transposes"):
        TypeConstraints(bad)
    assert tc.body_is_consistent(0, 2, [0, 1, PAD]) and not tc.body_is_consistent(0, 2, [0, PAD, PAD])
    # C table: with only 0 →r0→ 1 →r1→ 2, tail 2 is reachable from type 0 in 2 real steps, not in 1
    chain = TypeConstraints.from_pairs([(0, 0, 1), (1, 1, 2)], R, E, unobserved="forbid")
    c = chain.completion_table(torch.tensor([2]), 3)[0]
    assert c[:, 0].tolist() == [False, False, True, True]


def test_check_bodies() -> None:
    b = torch.tensor([[0, PAD, PAD], [PAD, PAD, PAD], [0, PAD, 1], [5, 4, 3], [7, PAD, PAD], [-1, PAD, PAD]])
    assert check_bodies(b, R).tolist() == [True, False, False, True, False, False]


# ---- probabilities ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_constraints", [False, True])
def test_log_prob_equals_sum_of_step_log_softmax(use_constraints: bool) -> None:
    m = model(1)
    tc = constraints() if use_constraints else None
    table = tc.allowed.tolist() if tc is not None else None
    bodies = all_bodies()[torch.randperm(len(all_bodies()), generator=torch.Generator().manual_seed(0))[:40]]
    bodies = torch.cat([bodies, torch.tensor([[0, 1, PAD], [0, PAD, PAD], [2, 2, 2]])])
    for triple in TRIPLES[:3]:
        r, h, t = triple.tolist()
        lp = m.log_prob(triple.expand(len(bodies), 3), bodies, tc)
        with torch.no_grad():
            memory = m.encode(triple[None])
            for body, got in zip(bodies.tolist(), lp.tolist()):
                ref = 0.0
                for k in range(L):
                    logits = m.decode(memory, torch.tensor([body[:k]], dtype=torch.long))[0, -1]
                    allow = torch.tensor(_py_allowed(h, t, tuple(body[:k]), L, R, table))
                    if not allow.any():
                        ref = -math.inf
                        break
                    ref += torch.log_softmax(logits.masked_fill(~allow, float("-inf")), -1)[body[k]].item()
                if math.isinf(ref):
                    assert math.isinf(got) and got < 0
                else:
                    assert got == pytest.approx(ref, abs=1e-5)


def test_masked_distribution_sums_to_one_over_valid_bodies() -> None:
    m = model(2)
    tc = constraints()
    bodies = all_bodies()
    for triple in TRIPLES:
        r, h, t = triple.tolist()
        with torch.no_grad():
            free = m.log_prob(triple.expand(len(bodies), 3), bodies)
            typed = m.log_prob(triple.expand(len(bodies), 3), bodies, tc)
        assert free.exp().sum().item() == pytest.approx(1.0, abs=1e-5)
        consistent = torch.tensor([tc.body_is_consistent(h, t, b) for b in bodies.tolist()])
        assert torch.equal(torch.isfinite(typed), consistent)
        assert typed.exp().sum().item() == pytest.approx(1.0, abs=1e-5)


# ---- sampling -----------------------------------------------------------------------------------------------------
def assert_well_formed(s: SampledRules, triples: torch.Tensor, n: int, tc: TypeConstraints | None) -> None:
    t_count, jmax, length = s.bodies.shape
    assert s.log_prior.shape == s.counts.shape == s.mask.shape == (t_count, jmax)
    assert (s.bodies[~s.mask] == PAD).all() and (s.counts[~s.mask] == 0).all()
    assert torch.isneginf(s.log_prior[~s.mask]).all() and torch.isfinite(s.log_prior[s.mask]).all()
    for ti, (bodies, lp, counts) in enumerate(s.per_triple()):
        if ti in s.uncompletable.tolist():
            assert len(bodies) == 0
            continue
        assert counts.sum().item() == n and (counts > 0).all()
        assert check_bodies(bodies, R).all()
        assert len({tuple(b) for b in bodies.tolist()}) == len(bodies)
        if tc is not None:
            r, h, t = triples[ti].tolist()
            assert all(tc.body_is_consistent(h, t, b) for b in bodies.tolist())


@pytest.mark.parametrize("use_constraints", [False, True])
def test_sampling_never_returns_malformed_or_inconsistent_bodies(use_constraints: bool) -> None:
    tc = constraints() if use_constraints else None
    for seed in range(3):
        m = model(10 + seed)
        with torch.no_grad():  # sharpen the output layer towards the pad token to stress "pad then relation"
            m.proj.bias[PAD] += 2.0 * seed
        s = sample_rules(m, TRIPLES, 200, torch.Generator().manual_seed(seed), tc)
        assert_well_formed(s, TRIPLES, 200, tc)


def test_sampled_log_prior_equals_log_prob() -> None:
    m = model(3)
    tc = constraints()
    s = sample_rules(m, TRIPLES, 100, torch.Generator().manual_seed(4), tc)
    for ti, (bodies, lp, _) in enumerate(s.per_triple()):
        ref = m.log_prob(TRIPLES[ti].expand(len(bodies), 3), bodies, tc)
        assert torch.allclose(lp, ref, atol=1e-5)


def test_batched_sampling_equals_naive_loop() -> None:
    m = model(5)
    tc = constraints()
    for cons in (None, tc):
        fast = sample_rules(m, TRIPLES[:4], 12, torch.Generator().manual_seed(7), cons)
        slow = sample_rules_reference(m, TRIPLES[:4], 12, torch.Generator().manual_seed(7), cons)
        assert torch.equal(fast.bodies, slow.bodies) and torch.equal(fast.counts, slow.counts)
        assert torch.equal(fast.mask, slow.mask)
        assert torch.allclose(fast.log_prior[fast.mask], slow.log_prior[slow.mask], atol=1e-5)


def test_sampling_is_deterministic_and_keeps_model_mode() -> None:
    m = model(6).train()
    a = sample_rules(m, TRIPLES, 50, torch.Generator().manual_seed(11))
    b = sample_rules(m, TRIPLES, 50, torch.Generator().manual_seed(11))
    c = sample_rules(m, TRIPLES, 50, torch.Generator().manual_seed(12))
    assert m.training
    assert torch.equal(a.bodies, b.bodies) and torch.equal(a.counts, b.counts) and torch.equal(a.log_prior, b.log_prior)
    assert not (a.bodies.shape == c.bodies.shape and torch.equal(a.bodies, c.bodies) and torch.equal(a.counts, c.counts))
    # order within a triple: count descending
    assert (a.counts[:, :-1] >= a.counts[:, 1:]).all()


def test_uncompletable_triple_gets_no_bodies_and_is_reported() -> None:
    m = model(7)
    # only relation 0 (0 → 1) exists: tail type 2 is unreachable from head 0; tail 1 needs exactly [0]
    tc = TypeConstraints.from_pairs([(0, 0, 1)], R, E, unobserved="forbid")
    triples = torch.tensor([[0, 0, 2], [0, 0, 1], [1, 1, 0]])
    with pytest.warns(UserWarning, match="no type-consistent body"):
        s = sample_rules(m, triples, 30, torch.Generator().manual_seed(0), tc)
    assert s.uncompletable.tolist() == [0]
    per = s.per_triple()
    assert len(per[0][0]) == 0
    # (0,0,1): valid bodies are [0] and [0, 3, 0] ("0→1, back, 0→1"); (1,1,0): [3] and [3, 0, 3]
    assert {strip(b) for b in per[1][0].tolist()} <= {(0,), (0, 3, 0)}
    assert {strip(b) for b in per[2][0].tolist()} <= {(3,), (3, 0, 3)}
    assert_well_formed(s, triples, 30, tc)
    empty = sample_rules(m, torch.zeros(0, 3, dtype=torch.long), 5, torch.Generator())
    assert empty.bodies.shape == (0, 0, L)


# ---- training -----------------------------------------------------------------------------------------------------
def test_chain_sampling_probs_mixrule() -> None:
    triples = torch.tensor([[0, 0, 1], [0, 0, 1], [1, 1, 0]])
    p = chain_sampling_probs(triples, torch.tensor([3.0, 1.0, 5.0]), uniform_mix=0.1)
    assert p.tolist() == pytest.approx([0.5 * (0.9 * 0.75 + 0.05), 0.5 * (0.9 * 0.25 + 0.05), 0.5])


PLANTED = {
    (0, 0, 1): {(0,): 0.5, (1, 2): 0.3, (3, 4, 0): 0.2},
    (1, 1, 0): {(3,): 0.6, (2, 2): 0.4},
    (2, 0, 0): {(5, 1): 0.25, (0, 1, 2): 0.75},
    (2, 1, 1): {(1,): 0.1, (2,): 0.2, (4,): 0.7},
}


def test_training_lowers_loss_and_sampling_reproduces_planted_distribution() -> None:
    """20 epochs × 2,000 chains (d_model 32) → KL(planted ‖ model) < 0.05 nats per triple, exact and from samples."""
    cfg = GeneratorConfig(num_relations=R, num_types=2, d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    m = RuleGenerator(cfg, torch.Generator().manual_seed(0))
    pool = RulePool.from_distributions(PLANTED, R)
    losses = train_generator(m, pool, 20, 64, 1e-2, 2000, torch.Generator().manual_seed(1), uniform_mix=0.0)
    assert len(losses) == 20 and losses[-1] < 0.5 * losses[0]
    m.eval()
    n = 20_000
    s = sample_rules(m, list(PLANTED), n, torch.Generator().manual_seed(2))
    bodies = all_bodies()
    for ti, (triple, planted) in enumerate(PLANTED.items()):
        with torch.no_grad():
            lp = m.log_prob(torch.tensor(triple).expand(len(bodies), 3), bodies)
        model_lp = {strip(b): v for b, v in zip(bodies.tolist(), lp.tolist())}
        kl_exact = sum(p * (math.log(p) - model_lp[b]) for b, p in planted.items())
        got, _, counts = s.per_triple()[ti]
        emp = {strip(b): c / n for b, c in zip(got.tolist(), counts.tolist())}
        kl_emp = sum(p * (math.log(p) - math.log(emp.get(b, 1e-12))) for b, p in planted.items())
        assert kl_exact < 0.05 and kl_emp < 0.05, (triple, kl_exact, kl_emp)


def test_train_generator_deterministic_leaves_global_rng_and_checks_chains() -> None:
    pool = RulePool.from_distributions(PLANTED, R)
    state = torch.random.get_rng_state()
    cfg = GeneratorConfig(num_relations=R, num_types=2, d_model=16, nhead=2, dim_feedforward=32, dropout=0.1)
    runs = []
    for _ in range(2):
        m = RuleGenerator(cfg, torch.Generator().manual_seed(0))
        losses = train_generator(m, pool, 2, 32, 1e-3, 128, torch.Generator().manual_seed(3))
        runs.append((losses, [p.detach().clone() for p in m.parameters()]))
    assert torch.equal(state, torch.random.get_rng_state())
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    # chains given as tensors; with type constraints the masked loss is used and violations are rejected
    tc = TypeConstraints.from_pairs([(0, 0, 1), (1, 1, 1)], R, 2, unobserved="forbid")
    good = (torch.tensor([[0, 0, 1]]), torch.tensor([[0, 1, PAD]]), torch.tensor([1.0]))
    train_generator(m, good, 1, 4, 1e-3, 8, torch.Generator(), constraints=tc)
    bad = (torch.tensor([[0, 0, 1]]), torch.tensor([[1, PAD, PAD]]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="violate the type constraints"):
        train_generator(m, bad, 1, 4, 1e-3, 8, torch.Generator(), constraints=tc)
    malformed = (torch.tensor([[0, 0, 1]]), torch.tensor([[PAD, 1, PAD]]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="malformed"):
        train_generator(m, malformed, 1, 4, 1e-3, 8, torch.Generator())


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decode_step_equals_full_decoder(norm_first: bool) -> None:
    m = model(8)
    if norm_first:
        for layer in m.transformer.decoder.layers:
            layer.norm_first = True
    bodies = all_bodies()[::7]
    rows = torch.arange(len(bodies)) % len(TRIPLES)
    with torch.no_grad():
        memory = m.encode(TRIPLES)
        cache = m.init_cache(memory)
        parent = None
        for k in range(L):
            logits, cache = m.decode_step(cache, parent, rows, bodies[:, k - 1] if k else None)
            ref = m.decode(memory[rows], bodies[:, :k])[:, -1]
            assert torch.allclose(logits, ref, atol=1e-5)
            parent = torch.arange(len(bodies))
    with pytest.raises(RuntimeError, match="eval"):
        m.train().decode_step(m.init_cache(memory), None, rows, None)
