"""kg.seeding: seeded global-RNG blocks are reproducible even when threads of one process run them at once."""

from __future__ import annotations

import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from kg.seeding import derive_rng, derive_seed, isolated_global_rng, seed_sequence, seeded_global_rng


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


def test_derive_seed_is_the_first_word_of_the_seed_sequence_with_crc32_strings() -> None:
    """The one formula (written out independently): SeedSequence([seed, ints…, crc32(strings)…]), first uint32."""
    expected = np.random.SeedSequence([7, 3, zlib.crc32(b"train"), 2]).generate_state(1, dtype=np.uint32)[0]
    assert derive_seed(7, 3, "train", 2) == int(expected)
    assert derive_seed(7, 3, 0x4B4D) == int(np.random.SeedSequence([7, 3, 0x4B4D]).generate_state(1)[0])
    a = derive_rng(5, 1, 0x9E37).integers(0, 2**31, size=8)
    b = np.random.default_rng([5, 1, 0x9E37]).integers(0, 2**31, size=8)
    np.testing.assert_array_equal(a, b)
    assert seed_sequence(5, "x").entropy == np.random.SeedSequence([5, zlib.crc32(b"x")]).entropy


def test_derive_seed_separates_purposes_and_rejects_bad_parts() -> None:
    seeds = {derive_seed(0, rnd, purpose) for rnd in range(5) for purpose in ("sample", "pool", "fit")}
    assert len(seeds) == 15 and all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(0, 1, 2) != derive_seed(0, 2, 1)
    with pytest.raises(TypeError, match="int or str"):
        derive_seed(0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        derive_seed(-1, "x")
