"""The Flower app directory that runs a fednsl config (``flwr run APP_DIR CONNECTION``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tomli_w

from fednsl.config import RunConfig
from fednsl.engines.flower_client import config_text


def write_app(
    app_dir: Path,
    config: RunConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    node_wait_s: float = 120.0,
    poll_s: float = 0.1,
) -> Path:
    """A Flower app directory (just ``pyproject.toml``) that runs ``config`` and writes ``run_dir``.

    ``flwr run APP_DIR CONNECTION`` submits it; the ServerApp (on the SuperLink's host) writes the run
    directory at the absolute path ``run_dir``.
    """
    from fednsl import __version__

    app_dir = Path(app_dir)
    app_dir.mkdir(parents=True, exist_ok=True)
    config = replace(config, engine="flower")
    doc = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {
            "name": "fednsl-flower-app",
            "version": __version__,
            "description": f"fednsl {config.method} ({config.name}) on Flower",
            "license": "MIT",
            "dependencies": [],
        },
        "tool": {
            "hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
            "flwr": {
                "app": {
                    "publisher": "fednsl",
                    "components": {
                        "serverapp": "fednsl.engines.flower:server_app",
                        "clientapp": "fednsl.engines.flower_client:client_app",
                    },
                    "config": {
                        "fednsl-config": config_text(config),
                        "run-dir": str(Path(run_dir).resolve()),
                        "resume": bool(resume),
                        "node-wait-s": float(node_wait_s),
                        "poll-s": float(poll_s),
                    },
                }
            },
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return app_dir
