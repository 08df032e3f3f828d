"""The rule layer's progress hook: silent by default; an installed bar sees every generator batch and its loss."""

from __future__ import annotations

import torch

from rules import progress
from rules.generator import GeneratorConfig, RuleGenerator, train_generator
from rules.pool import RulePool
from tests.rules.test_generator import PLANTED, R


class Recorder:
    def __init__(self, total: int, desc: str, unit: str) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n, self.postfix, self.closed = 0, "", False

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        self.closed = True


def _train(epochs: int = 2, samples: int = 100, batch: int = 32) -> tuple[list[float], list[torch.Tensor]]:
    cfg = GeneratorConfig(num_relations=R, num_types=2, d_model=16, nhead=2, dim_feedforward=32, dropout=0.1)
    m = RuleGenerator(cfg, torch.Generator().manual_seed(0))
    losses = train_generator(m, RulePool.from_distributions(PLANTED, R), epochs, batch, 1e-3, samples,
                             torch.Generator().manual_seed(3))
    return losses, [p.detach().clone() for p in m.parameters()]


def test_bar_is_silent_without_a_factory() -> None:
    with progress.bar(5, "x") as pb:
        pb.update(1)
        pb.set_postfix_str("y")
    assert isinstance(pb, progress.SilentBar)


def test_generator_training_reports_every_batch_and_is_unchanged_by_it() -> None:
    bars: list[Recorder] = []

    def factory(**kw: object) -> Recorder:
        bars.append(Recorder(**kw))  # type: ignore[arg-type]
        return bars[-1]

    silent = _train()
    with progress.installed(factory):
        reported = _train()
        with progress.installed(None):  # nests, and restores the outer factory
            _train()
        assert len(bars) == 1
    (bar,) = bars
    assert (bar.total, bar.n, bar.desc, bar.unit, bar.closed) == (2 * 4, 2 * 4, "rule generator", "batch", True)
    assert bar.postfix == f"epoch 2/2 loss {reported[0][-1]:.3f}"
    assert reported[0] == silent[0] and all(torch.equal(a, b) for a, b in zip(reported[1], silent[1]))
    assert progress._FACTORY.get() is None


def test_a_factory_installed_in_another_thread_stays_there() -> None:
    """Two runs in concurrent threads (as the Flower and fault tests start them) cannot leak a factory to the next."""
    import threading

    inside, release = threading.Event(), threading.Event()

    def run() -> None:
        with progress.installed(lambda **kw: progress.SilentBar()):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=run)
    t.start()
    inside.wait(10)
    with progress.installed(None):  # this thread's run starts while the other is inside, and ends after it
        release.set()
        t.join()
    assert progress._FACTORY.get() is None
    with progress.bar(1, "x") as pb:
        assert isinstance(pb, progress.SilentBar)
