"""Where a node's fednsl client comes from: the method built from its config, or clients shipped by the engine.

Shared by the ClientApp (:mod:`fednsl.engines.flower_client`) and the node-local worker
(:mod:`fednsl.engines.flower_worker`). Imports neither Flower nor torch (torch only when a state is dumped or
loaded).
"""

from __future__ import annotations

import hashlib
import importlib
import io
import pickle
from typing import TYPE_CHECKING, Any

import yaml

from fednsl.config import RunConfig
from fednsl.federation.roles import Client
from kg.yaml_io import load_yaml

if TYPE_CHECKING:
    from fednsl.federation.runner import Federation


def build_method(config: RunConfig) -> Federation:
    """``METHODS[config.method].build(config)``, importing only that method's package when it has the same name.

    Flower starts a fresh Python process per ClientApp message in deployment, so importing every method package
    (``load_methods``) each time would be slow; unknown names fall back to importing all of them.
    """
    from fednsl.registry import METHODS, load_methods, normalize

    name = normalize(config.method)
    if name not in METHODS:
        try:
            importlib.import_module(f"fednsl.methods.{name.replace('-', '_')}")
        except ImportError:
            pass
    if name not in METHODS:
        load_methods()
    return METHODS.get(name).build(config)


def config_text(config: RunConfig) -> str:
    """The resolved config as YAML text (what travels in Flower's run config)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def config_from_text(text: str, where: str = "Flower run config 'fednsl-config'") -> RunConfig:
    raw = load_yaml(text)
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a YAML mapping, got {type(raw).__name__}")
    return RunConfig.from_dict(raw, where=where)


class ClientSource:
    """Where a node gets a fresh (never used) copy of its fednsl client."""

    key: str

    def client_ids(self) -> list[str]:
        raise NotImplementedError

    def fresh_client(self, cid: str) -> Client:
        raise NotImplementedError


class ConfigSource(ClientSource):
    """Build the method from its config (once per process); hand out pickled copies of the built clients."""

    def __init__(self, config_yaml: str):
        self.config_yaml = config_yaml
        self.key = "config:" + hashlib.sha256(config_yaml.encode()).hexdigest()[:16]
        self._fed: Federation | None = None
        self._blobs: dict[str, bytes] = {}

    def _federation(self) -> Federation:
        if self._fed is None:
            self._fed = build_method(config_from_text(self.config_yaml))
            for cid, client in self._fed.clients.items():
                try:
                    self._blobs[cid] = pickle.dumps(client, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # noqa: BLE001 - unpicklable clients: rebuild for every further copy
                    pass
        return self._fed

    def client_ids(self) -> list[str]:
        return sorted(self._federation().clients)

    def fresh_client(self, cid: str) -> Client:
        fed = self._federation()
        if cid in self._blobs:
            return pickle.loads(self._blobs[cid])
        self._fed = None  # the built object is handed out; the next request rebuilds
        return fed.clients[cid]


class ShippedSource(ClientSource):
    """Pickled client objects put once into Ray's object store by the simulation engine."""

    def __init__(self, ref: Any):
        self.ref = ref
        self.key = f"ray:{ref.hex()}"
        self._blobs: dict[str, bytes] | None = None

    def _get(self) -> dict[str, bytes]:
        if self._blobs is None:
            import ray

            self._blobs = ray.get(self.ref)
        return self._blobs

    def client_ids(self) -> list[str]:
        return sorted(self._get())

    def fresh_client(self, cid: str) -> Client:
        return pickle.loads(self._get()[cid])

    def __getstate__(self) -> dict[str, Any]:
        return {"ref": self.ref, "key": self.key, "_blobs": None}


def dump_state(client: Client) -> bytes:
    """A client's documented ``state_dict()`` as ``torch.save`` bytes (for clients that cannot be pickled)."""
    import torch

    buf = io.BytesIO()
    torch.save(client.state_dict(), buf)
    return buf.getvalue()


def load_state(client: Client, blob: bytes) -> None:
    """Restore :func:`dump_state`'s bytes (written by this node's own fednsl processes) into ``client``."""
    import torch

    client.load_state_dict(torch.load(io.BytesIO(blob), weights_only=False))


__all__ = [
    "ClientSource",
    "ConfigSource",
    "ShippedSource",
    "build_method",
    "config_from_text",
    "config_text",
    "dump_state",
    "load_state",
]
