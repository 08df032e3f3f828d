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
import math
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from fednsl.registry import build_kwargs
from kg.yaml_io import YamlAliasError, load_yaml, yaml_error_line

REPO_ROOT = Path(__file__).resolve().parents[1]
# The shipped configs: package data of fednsl (fednsl/configs links to the checkout's top-level configs/ folder,
# and a built wheel carries the files), so they are found the same way from a checkout and from an install.
CONFIG_DIR = Path(str(importlib.resources.files("fednsl") / "configs"))

SEED_MAX = 2**32 - 1  # seeds reach numpy, torch and scikit-learn, whose common range is [0, 2**32)
NAME_MAX = 200  # characters of ``name`` (a folder name under runs/, with "-seed<k>-<time>" added)


@dataclass
class FederationConfig:
    """How the round protocol runs (all engines).

    ``client_timeout_s`` (default 3600 s): a client that has not replied this long after its message left is
    dropped from that exchange (a hanging client never blocks a run); ``null`` waits for ever.

    ``aggregation`` (``mean``, ``median``, ``trimmed_mean``), ``trim_fraction`` and ``clip_norm``: how FedAvg-style
    servers combine the clients' weights (:class:`fednsl.federation.aggregate.AggregationRule`); the default is
    FedAvg's weighted mean, which one client sending absurd (finite) weights poisons.
    """

    fraction: float = 1.0  # share of clients sampled per round
    min_clients: int = 1  # quorum: fewest replies a stage may aggregate
    client_timeout_s: float | None = 3600.0  # a client slower than this is dropped from the exchange
    parallelism: int = 1  # clients run at once (threads) in the in-process engine
    evaluate_every: int = 1  # run the evaluate stage every k rounds (and at the last)
    keep_checkpoints: int = 2  # newest checkpoints kept in RUN_DIR/checkpoints
    on_quorum_loss: str = "skip"  # "skip" the stage (logged) or "abort" the run
    faults: dict[str, Any] = field(default_factory=dict)  # injected client faults (fednsl.federation.faults)
    aggregation: str = "mean"  # how FedAvg-style servers combine weights: mean, median or trimmed_mean
    trim_fraction: float = 0.2  # trimmed_mean: share of the clients' values cut at each end, per coordinate
    clip_norm: float | None = None  # clip each client's update (w_i - w) to this L2 norm; null: no clipping

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
                "aggregation": "str",
                "trim_fraction": "number",
                "clip_norm": "number|None",
            },
        )
        for name in ("parallelism", "evaluate_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"federation.{name} must be >= 1, got {getattr(self, name)}")
        from fednsl.federation.faults import parse_faults

        parse_faults(self.faults)  # a bad faults section is rejected when the config is read
        from fednsl.federation.aggregate import check_rule

        check_rule(self.aggregation, self.trim_fraction, self.clip_norm)
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
    # seconds the rounds may take: the rounds end early where, by the longest round so far, another would not end
    # within it (RoundLoop._budget_cut); None: every round of ``rounds``
    time_budget_s: float | None = None

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
                "time_budget_s": "number|None",
            },
        )
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.time_budget_s is not None and not (math.isfinite(self.time_budget_s) and self.time_budget_s > 0):
            raise ValueError(
                f"time_budget_s must be a number of seconds > 0 (or null: no budget), got {self.time_budget_s}"
            )
        check_seed(self.seed)
        if self.name is not None:
            check_name(self.name)
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
        if "seed" in raw:  # before the type check, so that a seed of the wrong type is told the range too
            check_seed(raw["seed"])
        return build_kwargs(cls, raw, where)


def check_seed(seed: Any) -> None:
    """ValueError naming ``seed`` and its range unless ``seed`` is an integer in [0, :data:`SEED_MAX`]."""
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= SEED_MAX):
        shown = f"{seed!r} ({type(seed).__name__})" if not isinstance(seed, int) else str(seed)
        raise ValueError(f"seed must be an integer from 0 to {SEED_MAX}, got {shown}")


def check_name(name: str) -> None:
    """ValueError unless ``name`` is a plain folder name: the run goes to ``runs/<name>-seed<k>-<time>/`` and
    must not land outside ``runs/`` (no path separators, no ``..``, not absolute)."""
    plain = (
        name.strip() != ""
        and name not in (".", "..")
        and not any(c in name for c in "/\\")
        and name.isprintable()
        and not Path(name).is_absolute()
        and len(name) <= NAME_MAX
    )
    if not plain:
        raise ValueError(
            f"name must be a plain folder name (no '/', '\\' or '..', at most {NAME_MAX} characters; "
            f"the run goes to runs/<name>-seed<k>-<time>/), got {name!r}"
        )


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


def override_label(text: str) -> str:
    """How a message names an override: ``--set rounds=abc`` (quoted as a shell would need it)."""
    return f"--set {shlex.quote(text)}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=1e-3"`` → (["a", "b"], 0.001). Values are parsed as YAML scalars/lists.

    A value that is not YAML, or uses an anchor or alias, raises ValueError naming the ``--set``."""
    if "=" not in text:
        raise ValueError(f"{override_label(text)}: not of the form key.path=value")
    key, value = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ValueError(f"{override_label(text)}: empty key (expected key.path=value)")
    if value.strip() == "":
        return path, ""
    try:
        return path, load_yaml(value)
    except YamlAliasError as exc:
        problem = exc.problem
    except yaml.YAMLError as exc:
        problem = f"the value is not valid YAML ({yaml_error_line(exc)})"
    raise ValueError(f"{override_label(text)}: {problem}; to pass it as text, quote it: --set '{key}=\"{value}\"'")


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    top = {f.name for f in fields(RunConfig)}
    for text in overrides:
        path, value = parse_override(text)
        if path[0] not in top:
            raise ValueError(f"{override_label(text)}: unknown top-level key {path[0]!r}; valid: {sorted(top)}")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{override_label(text)}: {part!r} is not a mapping")
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


def read_config_file(path: Path) -> dict[str, Any]:
    """The mapping of a config file; ValueError naming the file (and line) when it is not one."""
    try:
        raw = load_yaml(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {yaml_error_line(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: top level must be a mapping")
    return raw


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """The config file ``path`` (or shipped config name) with ``overrides`` applied, validated.

    A value that is wrong because of a ``--set`` is reported naming that ``--set``; one wrong in the file, naming
    the file."""
    path = resolve_config_path(path)
    raw = read_config_file(path)
    raw.setdefault("name", path.stem)
    merged = apply_overrides(raw, overrides)
    try:
        return RunConfig.from_dict(merged, where=str(path))
    except ValueError as exc:
        if not overrides:
            raise _named(exc, str(path)) from exc
        culprits = _culprits(raw, list(overrides))
        if not culprits:  # the file alone is already wrong
            raise _named(exc, str(path)) from exc
        where = ", ".join(override_label(t) for t in culprits)
        try:
            RunConfig.from_dict(merged, where=where)
        except ValueError as named:
            raise _named(named, where) from exc
        raise  # pragma: no cover - the same input fails the same way


def _error(raw: Mapping[str, Any]) -> str | None:
    """Why ``raw`` is not a valid config (None: it is)."""
    try:
        RunConfig.from_dict(raw)
    except ValueError as exc:
        return str(exc)
    return None


def _culprits(raw: dict[str, Any], overrides: list[str]) -> list[str]:
    """The overrides to blame for an invalid config: none when the file alone fails the same way; else those
    without which the config is valid, or else those without which it fails differently, or else all."""
    error = _error(apply_overrides(raw, overrides))
    if _error(raw) == error:
        return []
    without = [_error(apply_overrides(raw, overrides[:i] + overrides[i + 1 :])) for i in range(len(overrides))]
    valid = [t for t, e in zip(overrides, without) if e is None]
    changed = [t for t, e in zip(overrides, without) if e != error]
    return valid or changed or overrides


def _named(exc: ValueError, where: str) -> ValueError:
    """A ValueError with the message of ``exc``, starting with ``where``."""
    text = str(exc)
    return ValueError(text if text.startswith(f"{where}:") else f"{where}: {text}")


def shipped_configs() -> list[tuple[str, str]]:
    """(name, first comment line) of every YAML in configs/."""
    out = []
    for p in sorted(CONFIG_DIR.glob("*.yaml")):
        first = next((ln.lstrip("# ").strip() for ln in p.read_text().splitlines() if ln.startswith("#")), "")
        out.append((p.stem, first))
    return out


def dump_config(config: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
