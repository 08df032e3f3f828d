"""Progress bars (terminal only, -q, headline on the round bar) and the metrics log's run.log lines."""

from __future__ import annotations

import logging

from fednsl.federation import tracking
from fednsl.federation.tracking import MetricsLog, progress_bar, progress_disabled, progress_enabled, round_postfix


class _Tty:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass


def test_bars_only_on_a_terminal_and_never_with_quiet(monkeypatch) -> None:
    monkeypatch.setattr(tracking.sys, "stdout", _Tty(True))
    monkeypatch.setattr(tracking.sys, "stderr", _Tty(True))
    assert progress_enabled()
    assert not progress_bar(range(3), file=_Tty(True)).disable
    assert progress_bar(range(3), enabled=False, file=_Tty(True)).disable
    with progress_disabled():
        with progress_disabled(False):
            assert not progress_enabled()
        assert progress_bar(range(3), file=_Tty(True)).disable
    assert progress_enabled()
    monkeypatch.setattr(tracking.sys, "stdout", _Tty(False))  # `fednsl train ... > log`
    assert not progress_enabled()
    assert progress_bar(range(3), file=_Tty(True)).disable


def test_round_postfix_shows_the_headline_with_its_reference() -> None:
    latest = {"evaluate": {"seen_f1": 0.8661, "backbone_seen_f1": 0.7369, "unseen_f1": 0.81}, "round": {"x": 1.0}}
    assert round_postfix("fednsl", latest) == "seen F1 0.866 (backbone 0.737) · unseen F1 0.81"
    # a method without a declared headline (the backbone's FedAvg phase) shows its losses
    assert round_postfix("not-declared", {"train": {"train_loss": 0.51234, "n": 3}}) == "train_loss 0.512"
    assert round_postfix("fednsl", {}) == ""


def test_metrics_log_keeps_latest_server_metrics_and_logs_them(tmp_path, caplog) -> None:
    m = MetricsLog(tmp_path)
    with caplog.at_level(logging.INFO, logger="fednsl.tracking"):
        m.log(1, "server", "evaluate", {"seen_f1": 0.5, "evaluate.time_s": 1.0})
        m.log(1, "client:c0", "evaluate", {"seen_f1": 0.25})
        m.log(2, "server", "evaluate", {"seen_f1": 0.75})
    assert m.latest == {"evaluate": {"seen_f1": 0.75}}
    assert [r.getMessage() for r in caplog.records] == ["round 1 evaluate: seen_f1=0.5", "round 2 evaluate: seen_f1=0.75"]
    m.truncate_after(1)  # rewriting the files on resume logs nothing again
    assert [r["round"] for r in m.rows()] == [1, 1] and len(caplog.records) == 2
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1:] == [
        "1,server,evaluate,seen_f1,0.5", "1,server,evaluate,evaluate.time_s,1.0", "1,client:c0,evaluate,seen_f1,0.25"]
