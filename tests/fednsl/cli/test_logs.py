"""Third-party log lines stay off the console without -v; fednsl's warnings always show."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from fednsl.cli.logs import QuietThirdParty

ROOT = Path(__file__).resolve().parents[3]


def _record(name: str, level: int) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "msg", None, None)


def test_filter_drops_third_party_records_below_error() -> None:
    f = QuietThirdParty()
    assert not f.filter(_record("flwr", logging.DEBUG))
    assert not f.filter(_record("flwr.simulation.ray", logging.WARNING))
    assert not f.filter(_record("sentence_transformers.SentenceTransformer", logging.INFO))
    assert f.filter(_record("flwr", logging.ERROR))
    assert f.filter(_record("fednsl.runner", logging.WARNING))
    assert f.filter(_record("flwrx", logging.DEBUG))  # only whole package names


def _console(verbose: int) -> str:
    """stderr of a fresh process that configures logging like `fednsl [-v]` and logs from several libraries;
    the library sets its own logger to DEBUG after configuration, as Flower does on import."""
    code = f"""
import logging
from fednsl.cli.logs import configure
configure({verbose})
flwr = logging.getLogger("flwr"); flwr.setLevel(logging.DEBUG)
flwr.debug("FLWR-DEBUG"); flwr.warning("FLWR-DEPRECATED")
logging.getLogger("fednsl.tracking").setLevel(logging.INFO)
logging.getLogger("fednsl.tracking").info("FEDNSL-INFO")
logging.getLogger("fednsl.runner").warning("FEDNSL-WARNING")
import os; print(os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"), os.environ.get("FLWR_LOG_LEVEL"))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "FLWR_LOG_LEVEL")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stderr + out.stdout


def test_without_v_only_fednsl_warnings_reach_the_console() -> None:
    text = _console(0)
    assert "FEDNSL-WARNING" in text
    assert "FLWR" not in text and "FEDNSL-INFO" not in text
    assert "1 ERROR" in text  # HF progress bars off, Flower's own console handler at ERROR


def test_with_v_everything_from_info_up_shows() -> None:
    text = _console(1)
    assert "FEDNSL-WARNING" in text and "FLWR-DEPRECATED" in text and "FEDNSL-INFO" in text
    assert "FLWR-DEBUG" not in text and "None None" in text
