"""Run configuration: YAML files with ``--set a.b=value`` overrides, resolved into dataclasses.

A config names a method and its options PyKEEN-style::

    method: fedavg
    method_kwargs: {lr: 0.1, local_epochs: 1}
    data: {name: blobs, num_clients: 10}
    rounds: 5
    seed: 0
    federation: {fraction: 1.0, min_clients: 2, client_timeout_s: 60}
    paper: {...}        # published numbers kept next to the config (not read by the code)
"""

from __future__ import annotations

import copy
import importlib.resources
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from fednsl.registry import build_kwargs
from kg.yaml_io import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
# The shipped configs: package data of fednsl (fednsl/configs links to the checkout's top-level configs/ folder,
# and a built wheel carries the files), so they are found the same way from a checkout and from an install.
CONFIG_DIR = Path(str(importlib.resources.files("fednsl") / "configs"))


@dataclass
class FederationConfig:
    """How the round protocol runs (all engines).

    ``client_timeout_s`` (default 3600 s): a client that has not replied this long after its message left is
    dropped from that exchange (a hanging client never blocks a run); ``null`` waits for ever.
    """

    fraction: float = 1.0  # share of clients sampled per round
    min_clients: int = 1  # quorum: fewest replies a stage may aggregate
    client_timeout_s: float | None = 3600.0  # a client slower than this is dropped from the exchange
    parallelism: int = 1  # clients run at once (threads) in the in-process engine
    evaluate_every: int = 1  # run the evaluate stage every k rounds (and at the last)
    keep_checkpoints: int = 2  # newest checkpoints kept in RUN_DIR/checkpoints
    on_quorum_loss: str = "skip"  # "skip" the stage (logged) or "abort" the run
    faults: dict[str, Any] = field(default_factory=dict)  # injected client faults (fednsl.federation.faults)

    def __post_init__(self) -> None:
        check_types(
            self,
            "federation",
            {
                "fraction": "number",
                "min_clients": "int",
                "client_timeout_s": "number|None",
                "parallelism": "int",
                "evaluate_every": "int",
                "keep_checkpoints": "int",
                "on_quorum_loss": "str",
                "faults": "mapping",
            },
        )
        for name in ("parallelism", "evaluate_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"federation.{name} must be >= 1, got {getattr(self, name)}")
        from fednsl.federation.faults import parse_faults

        parse_faults(self.faults)  # a bad faults section is rejected when the config is read
        if not 0 < self.fraction <= 1:
            raise ValueError(f"federation.fraction must be in (0, 1], got {self.fraction}")
        if self.min_clients < 1:
            raise ValueError(f"federation.min_clients must be >= 1, got {self.min_clients}")
        if self.client_timeout_s is not None and not self.client_timeout_s > 0:
            raise ValueError(
                f"federation.client_timeout_s must be > 0 (or null: no limit), got {self.client_timeout_s}"
            )
        if self.on_quorum_loss not in ("skip", "abort"):
            raise ValueError(f"federation.on_quorum_loss must be 'skip' or 'abort', got {self.on_quorum_loss!r}")


@dataclass
class RunConfig:
    method: str
    rounds: int = 10
    seed: int = 0
    method_kwargs: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    federation: FederationConfig = field(default_factory=FederationConfig)
    engine: str = "inprocess"
    name: str | None = None
    paper: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_types(
            self,
            "config",
            {
                "method": "str",
                "rounds": "int",
                "seed": "int",
                "method_kwargs": "mapping",
                "data": "mapping",
                "engine": "str",
                "name": "str|None",
                "paper": "mapping",
                "federation": "mapping|federation",
            },
        )
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if isinstance(self.federation, Mapping):
            self.federation = build_kwargs(FederationConfig, self.federation, "federation")
        n = self.data.get("num_clients")
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n < self.federation.min_clients:
            raise ValueError(
                f"federation.min_clients={self.federation.min_clients} exceeds data.num_clients={n}: "
                "no stage could ever reach its quorum"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "config") -> "RunConfig":
        if "method" not in raw:
            raise ValueError(f"{where}: missing required key 'method'")
        return build_kwargs(cls, raw, where)


_TYPE_WORDS = {
    "int": "an integer",
    "number": "a number",
    "str": "a string",
    "mapping": "a mapping {key: value}",
    "None": "null",
    "federation": "a federation section",
}


def _is(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "mapping":
        return isinstance(value, Mapping)
    if kind == "federation":
        return isinstance(value, FederationConfig)
    return value is None


def check_types(obj: Any, where: str, kinds: Mapping[str, str]) -> None:
    """Raise ValueError naming the option and the expected type for the first field of the wrong type.

    ``kinds`` maps a field to "int", "number", "str", "mapping", "None" or alternatives joined by "|".
    """
    for name, kind in kinds.items():
        value = getattr(obj, name)
        if not any(_is(k, value) for k in kind.split("|")):
            expected = " or ".join(_TYPE_WORDS[k] for k in kind.split("|"))
            key = name if where == "config" else f"{where}.{name}"
            raise ValueError(f"{key} must be {expected}, got {value!r} ({type(value).__name__})")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=1e-3"`` → (["a", "b"], 0.001). Values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ValueError(f"override {text!r} is not of the form key.path=value")
    key, value = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ValueError(f"override {text!r} has an empty key")
    return path, load_yaml(value) if value.strip() != "" else ""


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    top = {f.name for f in fields(RunConfig)}
    for text in overrides:
        path, value = parse_override(text)
        if path[0] not in top:
            raise ValueError(f"override {text!r}: unknown top-level key {path[0]!r}; valid: {sorted(top)}")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {text!r}: {part!r} is not a mapping")
        node[path[-1]] = value
    return out


def resolve_config_path(name: str | Path) -> Path:
    """A path, or the name of a shipped config (``fednsl_synthetic`` → configs/fednsl_synthetic.yaml)."""
    p = Path(name)
    if p.exists():
        return p
    for cand in (CONFIG_DIR / f"{name}", CONFIG_DIR / f"{name}.yaml"):
        if cand.exists():
            return cand
    raise FileNotFoundError(
        f"config {str(name)!r} not found (neither a file nor a shipped config; see `fednsl configs`)"
    )


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    path = resolve_config_path(path)
    try:
        raw = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: top level must be a mapping")
    raw = apply_overrides(raw, overrides)
    raw.setdefault("name", path.stem)
    return RunConfig.from_dict(raw, where=str(path))


def shipped_configs() -> list[tuple[str, str]]:
    """(name, first comment line) of every YAML in configs/."""
    out = []
    for p in sorted(CONFIG_DIR.glob("*.yaml")):
        first = next((ln.lstrip("# ").strip() for ln in p.read_text().splitlines() if ln.startswith("#")), "")
        out.append((p.stem, first))
    return out


def dump_config(config: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
