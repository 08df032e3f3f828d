"""kg.seeding: seeded global-RNG blocks are reproducible even when threads of one process run them at once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from kg.seeding import isolated_global_rng, seeded_global_rng


def _dropout_draws(seed: int) -> torch.Tensor:
    with seeded_global_rng(seed):
        draws = []
        for _ in range(50):
            draws.append(torch.nn.functional.dropout(torch.ones(64), 0.5))
            time.sleep(0.0005)  # hand the GIL to the other threads between draws
        return torch.stack(draws)


def test_restores_the_global_state_and_reproduces() -> None:
    before = torch.random.get_rng_state()
    a, b = _dropout_draws(3), _dropout_draws(3)
    assert torch.equal(a, b) and not torch.equal(a, _dropout_draws(4))
    assert torch.equal(torch.random.get_rng_state(), before)


def test_concurrent_blocks_do_not_interleave() -> None:
    expected = {s: _dropout_draws(s) for s in range(4)}
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = dict(zip(range(4), pool.map(_dropout_draws, range(4))))
    for s in range(4):
        assert torch.equal(got[s], expected[s]), f"seed {s}: draws of another thread leaked in"


def test_reentrant_in_one_thread() -> None:
    with seeded_global_rng(1):
        outer = torch.rand(3)
        with seeded_global_rng(2):
            inner = torch.rand(3)
        assert not torch.equal(outer, inner)


@isolated_global_rng
def _build() -> torch.nn.Module:
    return torch.nn.Linear(32, 32)  # the constructor draws its default init from the global RNG


def test_builders_leave_the_global_rng_alone_and_stay_out_of_seeded_blocks() -> None:
    before = torch.random.get_rng_state()
    _build()
    assert torch.equal(torch.random.get_rng_state(), before)
    expected = _dropout_draws(7)

    def builder_thread() -> None:
        for _ in range(200):
            _build()
            time.sleep(0.0001)

    with ThreadPoolExecutor(max_workers=2) as pool:
        noise = pool.submit(builder_thread)
        got = pool.submit(_dropout_draws, 7).result()
        noise.result()
    assert torch.equal(got, expected)
