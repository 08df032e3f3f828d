"""Shared by the numeric-experiment tests: one torch thread (tiny models; no oversubscription on 2 cores)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
