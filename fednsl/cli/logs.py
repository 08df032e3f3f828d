"""Console logging of the ``fednsl`` command: fednsl's own warnings always, everything else only with ``-v``.

Without ``-v`` the libraries fednsl drives stay quiet: Flower's own log lines (its deprecation notices and DEBUG
lines under ``--engine flower-sim``), Ray, transformers / sentence-transformers / huggingface_hub (and their
download and weight-loading progress bars), numba, DGL, matplotlib. ``-v`` shows INFO and lets them speak;
``-vv`` shows DEBUG. Nothing here imports those libraries: levels are set on their loggers by name and the
environment switches are read by the libraries when they load.
"""

from __future__ import annotations

import logging
import os
import warnings

#: loggers of third-party libraries that are set to ERROR unless ``-v`` is given
THIRD_PARTY = (
    "flwr",
    "ray",
    "transformers",
    "sentence_transformers",
    "huggingface_hub",
    "filelock",
    "urllib3",
    "numba",
    "dgl",
    "matplotlib",
    "PIL",
    "torch",
    "pykeen",
    "spacy",
)

#: environment switches the libraries read at import time (set only when the user has not set them)
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub and transformers progress bars (downloads, weights)
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",  # the tokenizers fork warning
    "FLWR_LOG_LEVEL": "ERROR",  # the level of Flower's own console handler (also in its worker processes)
    "FLWR_TELEMETRY_ENABLED": "0",
    "RAY_DEDUP_LOGS": "1",
}


class QuietThirdParty(logging.Filter):
    """Drops records below ERROR from the :data:`THIRD_PARTY` loggers.

    A filter on the console handler, not a logger level: libraries such as Flower set their own logger's level
    (DEBUG) when they are imported, after the command line was read, and their records reach the root handler.
    """

    def __init__(self, names: tuple[str, ...] = THIRD_PARTY, level: int = logging.ERROR):
        super().__init__()
        self.names = frozenset(names)
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or record.name.partition(".")[0] not in self.names


def configure(verbose: int) -> None:
    """Set up console logging for ``fednsl -v``×``verbose`` (0: warnings of fednsl only).

    The console handler is fednsl's own; when the process already has root handlers (an application or a test
    harness embedding the CLI) they are left as they are, and only the third-party logger levels change.
    """
    level = max(logging.WARNING - 10 * verbose, logging.DEBUG)
    root = logging.getLogger()
    ours: list[logging.Handler] = [h for h in root.handlers if getattr(h, "fednsl_console", False)]
    if not root.handlers:
        console = logging.StreamHandler()
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        console.fednsl_console = True  # type: ignore[attr-defined]
        root.addHandler(console)
        ours = [console]
    for handler in ours:
        # the level sits on the handler: fednsl's INFO records still reach RUN_DIR/run.log without -v
        handler.setLevel(level)
        for old in [f for f in handler.filters if isinstance(f, QuietThirdParty)]:
            handler.removeFilter(old)
        if not verbose:
            handler.addFilter(QuietThirdParty())
    if ours:
        root.setLevel(level)
    if verbose:
        return
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.ERROR)
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    # Flower and its dependencies announce deprecations through `warnings` too; fednsl pins their versions
    for module in ("flwr", "ray", "transformers", "sentence_transformers", "huggingface_hub", "dgl", "torchdata"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=rf"{module}(\.|$)")
        warnings.filterwarnings("ignore", category=FutureWarning, module=rf"{module}(\.|$)")
