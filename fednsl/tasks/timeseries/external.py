"""The LogiCP paper's temperature (CT) and electricity sets, for users who hold the original files.

Neither set ships with fednsl and nothing is downloaded: prepare a compact ``.npz`` once from the files
you have, then point a config at it (``data: {name: ct_temperature, path: ct.npz}``).

CT — University of Dayton daily average temperature archive (LogiCP §5.1: 157 U.S. + 167 international
cities, 1995–2002; the paper uses 100 clients).  Two layouts of the same archive are read:

* a directory of per-city text files (the archive's original ``allsites`` layout, e.g. ``ALALGIER.txt``),
  one line per day: ``month day year temperature`` (whitespace separated, °F, ``-99`` = missing);
  the client name is the file stem;
* the single-CSV redistribution ``city_temperature.csv`` with header
  ``Region,Country,State,City,Month,Day,Year,AvgTemperature`` (°F, ``-99`` = missing); the client name is
  ``Country/State/City`` (``Country/City`` without a state).

Electric — UCI ElectricityLoadDiagrams20112014 (Trindade 2015, DOI 10.24432/C58C86; 370 clients, kW every
15 minutes, 2011–2014; the paper uses 100): the file ``LD2011_2014.txt``, ``;``-separated, decimal comma,
first column the timestamp, header ``"";"MT_001";…;"MT_370"``.  Readings are averaged to ``resample``
minutes (default 60: mean kW per hour, so windows of 120 → 24 steps are 5 days → 1 day like FHWA).

Prepare (prints the clients kept and dropped)::

    python -m fednsl.tasks.timeseries.external ct --src allsites/ --out ct.npz --clients 100 --seed 0
    python -m fednsl.tasks.timeseries.external ct --src city_temperature.csv --out ct.npz --clients 100
    python -m fednsl.tasks.timeseries.external electricity --src LD2011_2014.txt --out electric.npz --clients 100

Clients: series with more than ``max_missing`` missing days (CT) or more than ``max_zero`` zero readings
(electricity: most meters start late and read 0 before) inside the date range are dropped; of the rest,
``clients`` are drawn at random with ``seed`` (all when omitted) and stored sorted by name.  Remaining
gaps are interpolated linearly when loading.

Prepared file (``np.savez_compressed``): ``series`` float64 ``(N, T)`` (NaN = missing), ``names`` ``(N,)``,
``start`` (ISO date/time of step 0), ``step`` (``"1D"`` or e.g. ``"60min"``), ``unit``, ``source``.

Loading (:func:`load_external`) returns a :class:`~fednsl.tasks.timeseries.data.TSData` like every other loader:
each series is one client, windowed ``input_len → horizon`` every ``stride`` steps and split
chronologically into train / val / test, min-max normalised on its training part.  For CT one step is a
day (120 days → the next 24 days, as the paper's 120 → 24 setting).  The naive seasonal baselines of the
evaluation use a period of 24 steps (a day for electricity; not a season for daily temperatures).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from fednsl.tasks.timeseries.data import (
    NORMALISATIONS,
    PERIOD,
    REPO_ROOT,
    TSData,
    chronological_split,
    make_client,
    make_windows,
)

EXTERNAL = ("ct_temperature", "uci_electricity")
DEFAULT_FILES = {
    "ct_temperature": Path("ct_temperature") / "ct.npz",
    "uci_electricity": Path("uci_electricity") / "electric.npz",
}
MISSING = -99.0


@dataclass
class ExternalDataConfig:
    """``data:`` block for a prepared external set (fields as in :class:`~fednsl.tasks.timeseries.data.TSDataConfig`)."""

    name: str = "ct_temperature"  # ct_temperature | uci_electricity
    path: str | None = None  # prepared .npz (default $FEDNSL_SHARED_DATA/<name>/<file>.npz)
    num_clients: int | None = None  # first N clients of the file (None: all)
    input_len: int = 120
    horizon: int = 24
    stride: int = PERIOD  # steps between window starts
    normalise: str = "minmax"
    val_frac: float = 0.15
    test_frac: float = 0.15
    max_train: int | None = None  # keep at most this many windows per client (evenly spaced)
    max_val: int | None = None
    max_test: int | None = None
    last_steps: int | None = None  # use only the last this-many steps of every series (None: all)

    def __post_init__(self) -> None:
        if self.name not in EXTERNAL:
            raise ValueError(f"data.name must be one of {list(EXTERNAL)} for an external set, got {self.name!r}")
        if self.normalise not in NORMALISATIONS:
            raise ValueError(f"data.normalise must be one of {list(NORMALISATIONS)}, got {self.normalise!r}")
        if min(self.input_len, self.horizon, self.stride) < 1:
            raise ValueError("data.input_len, data.horizon and data.stride must be >= 1")
        if not (0 <= self.val_frac < 1 and 0 <= self.test_frac < 1 and self.val_frac + self.test_frac < 1):
            raise ValueError(f"data.val_frac + data.test_frac must be < 1, got {self.val_frac} + {self.test_frac}")


# --- reading the original files -------------------------------------------------------------------------
def _daily_index(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    months = (np.asarray(year, np.int64) - 1970) * 12 + np.asarray(month, np.int64) - 1
    return months.astype("datetime64[M]").astype("datetime64[D]") + (np.asarray(day, np.int64) - 1)


def read_dayton(src: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{city: (dates datetime64[D] (n,), °F (n,) with NaN for -99)}`` from a directory of per-city
    ``.txt`` files or from ``city_temperature.csv`` (module docstring).  Rows with impossible dates
    (day 0, year 200) are dropped."""
    src = Path(src)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if src.is_dir():
        files = sorted(src.glob("*.txt")) + sorted(src.glob("*.TXT"))
        if not files:
            raise FileNotFoundError(f"{src}: no per-city .txt files (month day year temperature)")
        for f in files:
            try:
                arr = np.loadtxt(f, ndmin=2)
            except ValueError as exc:
                raise ValueError(f"{f}: expected lines 'month day year temperature': {exc}") from exc
            if arr.shape[1] != 4:
                raise ValueError(f"{f}: expected 4 columns (month day year temperature), got {arr.shape[1]}")
            out[f.stem] = _dayton_rows(arr[:, 2], arr[:, 0], arr[:, 1], arr[:, 3])
        return out
    if not src.exists():
        raise FileNotFoundError(f"Dayton temperature source not found: {src}")
    import pandas as pd

    df = pd.read_csv(src, low_memory=False)
    need = ["Country", "City", "Month", "Day", "Year", "AvgTemperature"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(
            f"{src}: missing columns {missing} (have {list(df.columns)}); expected the "
            "city_temperature.csv layout Region,Country,State,City,Month,Day,Year,AvgTemperature"
        )
    state = df["State"].fillna("").astype(str) if "State" in df.columns else ""
    key = df["Country"].astype(str) + "/" + np.where(state != "", state + "/", "") + df["City"].astype(str)
    for name, g in df.groupby(key, sort=True):
        out[str(name)] = _dayton_rows(
            g["Year"].to_numpy(),
            g["Month"].to_numpy(),
            g["Day"].to_numpy(),
            g["AvgTemperature"].to_numpy(dtype=np.float64),
        )
    return out


def _dayton_rows(year: Any, month: Any, day: Any, temp: Any) -> tuple[np.ndarray, np.ndarray]:
    year, month, day = (np.asarray(v, dtype=np.int64) for v in (year, month, day))
    ok = (year >= 1900) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    dates = _daily_index(year[ok], month[ok], day[ok])
    valid = dates.astype("datetime64[M]").astype(np.int64) == (year[ok] - 1970) * 12 + month[ok] - 1  # drops Feb 30
    t = np.asarray(temp, dtype=np.float64)[ok]
    t = np.where(t <= MISSING + 1e-9, np.nan, t)
    return dates[valid], t[valid]


def read_uci_electricity(src: str | Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(timestamps datetime64[m] (T,), kW (T, clients), names)`` from ``LD2011_2014.txt``."""
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(f"UCI electricity file not found: {src}")
    import pandas as pd

    df = pd.read_csv(src, sep=";", decimal=",", index_col=0, low_memory=False)
    if df.shape[1] == 0:
        raise ValueError(f"{src}: no client columns; expected the ';'-separated LD2011_2014.txt layout")
    try:
        ts = pd.to_datetime(df.index).to_numpy().astype("datetime64[m]")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{src}: first column must hold timestamps like 2011-01-01 00:15:00: {exc}") from exc
    values = df.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    return ts, values, [str(c) for c in df.columns]


# --- preparing ---------------------------------------------------------------------------------------------
def _choose(names: list[str], clients: int | None, seed: int) -> list[int]:
    if clients is None or clients >= len(names):
        return list(range(len(names)))
    pick = np.random.default_rng(seed).choice(len(names), size=clients, replace=False)
    return sorted(int(i) for i in pick)


def prepare_ct(
    src: str | Path,
    out: str | Path,
    start: str = "1995-01-01",
    end: str = "2002-12-31",
    clients: int | None = None,
    seed: int = 0,
    max_missing: float = 0.05,
) -> dict[str, Any]:
    """Daily series of every city on ``[start, end]`` → ``out`` (.npz); returns a report."""
    days = np.arange(np.datetime64(start, "D"), np.datetime64(end, "D") + 1)
    if len(days) < 2:
        raise ValueError(f"empty date range {start} .. {end}")
    raw = read_dayton(src)
    kept, dropped, rows = [], {}, []
    for name in sorted(raw):
        dates, temp = raw[name]
        v = np.full(len(days), np.nan)
        idx = (dates - days[0]).astype(np.int64)
        ok = (idx >= 0) & (idx < len(days))
        uniq, first = np.unique(idx[ok], return_index=True)
        v[uniq] = temp[ok][first]
        share = float(np.isnan(v).mean())
        if share > max_missing:
            dropped[name] = f"{share:.1%} missing"
            continue
        kept.append(name)
        rows.append(v)
    if not kept:
        raise ValueError(f"no city has at most {max_missing:.0%} missing days in {start} .. {end}")
    sel = _choose(kept, clients, seed)
    names = [kept[i] for i in sel]
    np.savez_compressed(
        out,
        series=np.stack([rows[i] for i in sel]),
        names=np.array(names),
        start=str(days[0]),
        step="1D",
        unit="°F",
        source=f"University of Dayton daily temperature archive ({src})",
    )
    return {"kept": names, "dropped": dropped, "eligible": len(kept), "days": len(days)}


def prepare_electricity(
    src: str | Path,
    out: str | Path,
    resample: int = 60,
    start: str | None = None,
    end: str | None = None,
    clients: int | None = None,
    seed: int = 0,
    max_zero: float = 0.1,
) -> dict[str, Any]:
    """Mean kW per ``resample`` minutes of every meter on ``[start, end)`` → ``out`` (.npz)."""
    ts, values, names = read_uci_electricity(src)
    lo = ts[0] if start is None else np.datetime64(start, "m")
    hi = ts[-1] + 1 if end is None else np.datetime64(end, "m")
    keep = (ts >= lo) & (ts < hi)
    ts, values = ts[keep], values[keep]
    if resample < 1:
        raise ValueError(f"resample must be >= 1 minute, got {resample}")
    # a reading stamped t covers (t - 15 min, t]: bucket by its start so 00:15..01:00 is hour 00
    step = np.diff(ts).min() if len(ts) > 1 else np.timedelta64(15, "m")
    origin = (ts[0] - step).astype("datetime64[D]").astype("datetime64[m]")
    bucket = ((ts - step) - origin).astype(np.int64) // resample
    n_b = int(bucket.max()) + 1
    sums = np.zeros((n_b, values.shape[1]))
    counts = np.zeros((n_b, values.shape[1]))
    ok = np.isfinite(values)
    np.add.at(sums, bucket, np.where(ok, values, 0.0))
    np.add.at(counts, bucket, ok.astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        series = np.where(counts > 0, sums / counts, np.nan).T
    kept, dropped = [], {}
    for i, name in enumerate(names):
        zero = float(np.mean(series[i] == 0))
        if zero > max_zero:
            dropped[name] = f"{zero:.1%} zero"
        else:
            kept.append(i)
    if not kept:
        raise ValueError(f"every meter reads 0 more than {max_zero:.0%} of the time in the chosen range")
    sel = [kept[i] for i in _choose([names[i] for i in kept], clients, seed)]
    np.savez_compressed(
        out,
        series=series[sel],
        names=np.array([names[i] for i in sel]),
        start=str(origin),
        step=f"{resample}min",
        unit="kW",
        source=f"UCI ElectricityLoadDiagrams20112014 ({src})",
    )
    return {"kept": [names[i] for i in sel], "dropped": dropped, "eligible": len(kept), "steps": n_b}


# --- loading -------------------------------------------------------------------------------------------------
def default_external_path(name: str) -> Path:
    root = Path(os.environ.get("FEDNSL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    return root / DEFAULT_FILES[name]


def _interp(v: np.ndarray) -> np.ndarray:
    ok = np.isfinite(v)
    if not ok.any():
        raise ValueError("series has no finite value")
    idx = np.arange(len(v))
    return np.interp(idx, idx[ok], v[ok])


def load_external(cfg: ExternalDataConfig) -> TSData:
    """A prepared CT or electricity file as a federation: one client per series (module docstring)."""
    path = Path(cfg.path) if cfg.path else default_external_path(cfg.name)
    if not path.exists():
        raise FileNotFoundError(
            f"{cfg.name}: prepared file not found at {path}; prepare it with "
            f"'python -m fednsl.tasks.timeseries.external {'ct' if cfg.name == 'ct_temperature' else 'electricity'}"
            " --src ... --out ...' and set data.path (see fednsl/tasks/timeseries/external.py)"
        )
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("series", "names", "step", "unit") if k not in z.files]
        if missing:
            raise ValueError(f"{path}: not a prepared external set (missing {missing}; have {z.files})")
        series, names = z["series"].astype(np.float64), [str(n) for n in z["names"]]
        step, unit = str(z["step"]), str(z["unit"])
    n = len(names) if cfg.num_clients is None else min(cfg.num_clients, len(names))
    clients = {}
    width = len(str(len(names) - 1))
    for i in range(n):
        s = _interp(series[i])
        if cfg.last_steps is not None:
            s = s[-cfg.last_steps :]
        x, y = make_windows(s, cfg.input_len, cfg.horizon, cfg.stride)
        if len(y) < 3:
            raise ValueError(
                f"{path}: client {names[i]!r} has {len(s)} steps, too few for {cfg.input_len} → "
                f"{cfg.horizon} windows every {cfg.stride} steps"
            )
        tr, va, te = chronological_split(len(y), cfg.val_frac, cfg.test_frac)
        clients[f"e{i:0{width}d}"] = make_client(
            x[tr],
            y[tr],
            x[va],
            y[va],
            x[te],
            y[te],
            cfg,  # type: ignore[arg-type]
            {"series": names[i]},
        )
    return TSData(
        cfg.name,
        clients,
        cfg.input_len,
        cfg.horizon,
        f"{unit} per {step}",
        cfg.normalise,
        f"{cfg.name} from {path}: {n} of {len(names)} series",
    )


# --- command line ----------------------------------------------------------------------------------------------
@click.group(help="Prepare the LogiCP temperature / electricity sets from their original files (no download).")
def command() -> None:
    pass


def _report(rep: dict[str, Any], out: str) -> None:
    click.echo(
        f"wrote {out}: {len(rep['kept'])} clients (of {rep['eligible']} eligible; {len(rep['dropped'])} dropped)"
    )
    for name, why in list(rep["dropped"].items())[:20]:
        click.echo(f"  dropped {name}: {why}")


@command.command(
    "ct", help="University of Dayton daily temperatures (directory of city .txt files or city_temperature.csv)."
)
@click.option(
    "--src",
    required=True,
    type=click.Path(exists=True),
    help="Directory of per-city .txt files or city_temperature.csv.",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output .npz.")
@click.option("--start", default="1995-01-01", show_default=True, help="First day (paper: 1995).")
@click.option("--end", default="2002-12-31", show_default=True, help="Last day (paper: 2002).")
@click.option("--clients", type=int, default=None, help="Draw this many cities at random (paper: 100); default all.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random draw of cities.")
@click.option(
    "--max-missing",
    type=float,
    default=0.05,
    show_default=True,
    help="Drop cities with a larger share of missing days.",
)
def ct_command(src: str, out: str, start: str, end: str, clients: int | None, seed: int, max_missing: float) -> None:
    _report(prepare_ct(src, out, start, end, clients, seed, max_missing), out)


@command.command("electricity", help="UCI ElectricityLoadDiagrams20112014 (LD2011_2014.txt).")
@click.option("--src", required=True, type=click.Path(exists=True, dir_okay=False), help="LD2011_2014.txt.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output .npz.")
@click.option("--resample", type=int, default=60, show_default=True, help="Minutes per step (mean kW).")
@click.option("--start", default=None, help="First timestamp kept (e.g. 2012-01-01); default: file start.")
@click.option("--end", default=None, help="Timestamps before this are kept; default: file end.")
@click.option("--clients", type=int, default=None, help="Draw this many meters at random (paper: 100); default all.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random draw of meters.")
@click.option(
    "--max-zero", type=float, default=0.1, show_default=True, help="Drop meters reading 0 more often than this."
)
def electricity_command(
    src: str,
    out: str,
    resample: int,
    start: str | None,
    end: str | None,
    clients: int | None,
    seed: int,
    max_zero: float,
) -> None:
    _report(prepare_electricity(src, out, resample, start, end, clients, seed, max_zero), out)


__all__ = [
    "EXTERNAL",
    "ExternalDataConfig",
    "default_external_path",
    "load_external",
    "prepare_ct",
    "prepare_electricity",
    "read_dayton",
    "read_uci_electricity",
]

if __name__ == "__main__":  # pragma: no cover
    command()
