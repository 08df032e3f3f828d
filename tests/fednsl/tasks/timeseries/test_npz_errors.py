"""Reliability cases of windowed time-series .npz files (the FHWA layout via data.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.tasks.timeseries.data import TSDataConfig, load_fhwa

SHAPES = {"train_x": (3, 8, 24), "train_y": (3, 8, 6), "val_x": (3, 3, 24), "val_y": (3, 3, 6),
          "test_x": (3, 3, 24), "test_y": (3, 3, 6)}


def arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}


def write(tmp_path: Path, arrs: dict[str, np.ndarray], name: str = "ts.npz") -> Path:
    path = tmp_path / name
    np.savez(path, **arrs)
    return path


def load(path: Path, **kw):
    return load_fhwa(TSDataConfig(name="fhwa", path=str(path), input_len=24, horizon=6, **kw))


def test_clean_file_loads(tmp_path: Path) -> None:
    data = load(write(tmp_path, arrays()))
    assert len(data.clients) == 3 and all(np.isfinite(c.x_train).all() for c in data.clients.values())


@pytest.mark.parametrize("key, value, expected", [
    ("val_x", np.nan, "client 'f1', array 'val_x', window 2, step 5 is nan"),
    ("train_y", np.inf, "client 'f1', array 'train_y', window 2, step 5 is inf"),
    ("test_x", -np.inf, "client 'f1', array 'test_x', window 2, step 5 is -inf"),
])
def test_one_non_finite_value_stops_naming_client_array_window_step(tmp_path, key, value, expected) -> None:
    arrs = arrays()
    arrs[key][1, 2, 5] = value
    path = write(tmp_path, arrs)
    with pytest.raises(ValueError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: {expected}") and "data.impute=interpolate" in str(err.value)


def test_impute_interpolates_only_when_asked(tmp_path: Path) -> None:
    arrs = arrays()
    arrs["train_x"][1, 2, 5] = np.nan
    data = load(write(tmp_path, arrs), impute="interpolate")
    c = data.clients["f1"]
    assert np.isfinite(c.x_train).all()
    want = (arrs["train_x"][1, 2, 4] + arrs["train_x"][1, 2, 6]) / 2
    assert c.to_original(c.x_train[2, 5]) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="data.impute must be one of"):
        TSDataConfig(name="fhwa", impute="zeros")


def test_non_finite_value_beyond_the_used_clients_is_ignored(tmp_path: Path) -> None:
    arrs = arrays()
    arrs["train_x"][2, 0, 0] = np.nan
    assert len(load(write(tmp_path, arrs), num_clients=2).clients) == 2


@pytest.mark.parametrize("change, expected", [
    (lambda a: a.update(train_x=a["train_x"][0]), "array 'train_x' has shape (8, 24); expected 3-D"),
    (lambda a: a.update(val_y=a["val_y"][:2]), "disagree on the number of clients"),
    (lambda a: a.update(test_y=a["test_y"][:, :2]), "test_x has 3 windows but test_y has 2"),
    (lambda a: a.update(val_x=a["val_x"][:, :0], val_y=a["val_y"][:, :0]), "expected at least one window"),
    (lambda a: a.update(val_x=a["val_x"][:, :, :20]), "disagree on the window length"),
    (lambda a: a.update(train_y=np.array([["a"] * 6] * 8 * 3).reshape(3, 8, 6)), "has dtype <U1; expected numbers"),
    (lambda a: a.pop("test_y"), "missing arrays ['test_y']"),
])
def test_malformed_layouts_name_the_file_and_array(tmp_path: Path, change, expected) -> None:
    arrs = arrays()
    change(arrs)
    path = write(tmp_path, arrs)
    with pytest.raises(ValueError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value), str(err.value)


def test_object_array_is_refused_without_unpickling(tmp_path: Path) -> None:
    arrs = arrays()
    arrs["train_x"] = np.array([object()] * 3, dtype=object)
    path = tmp_path / "o.npz"
    np.savez(path, **arrs)  # savez pickles object arrays; loading must refuse them
    with pytest.raises(ValueError, match="cannot be read without unpickling"):
        load(path)


def test_truncated_and_not_a_zip(tmp_path: Path) -> None:
    path = write(tmp_path, arrays())
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(ValueError, match=r"truncated or corrupt \.npz archive|not an \.npz archive"):
        load(path)
    other = tmp_path / "text.npz"
    other.write_text("hello, not a zip")
    with pytest.raises(ValueError) as err:
        load(other)
    assert str(err.value).startswith(f"{other}: not an .npz archive") and "expected a zip of .npy arrays" in str(err.value)


def test_cli_train_on_a_nan_file_exits_2_naming_the_client(tmp_path: Path) -> None:
    arrs = arrays()
    arrs["train_x"][0, 1, 3] = np.nan
    path = write(tmp_path, arrs)
    res = CliRunner().invoke(cli, ["train", "logicp_synthetic", "--set", "data.name=fhwa", "--set", f"data.path={path}",
                                   "--set", "data.input_len=24", "--set", "data.horizon=6", "--set", "rounds=1",
                                   "--out", str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 2, res.output
    assert "client 'f0', array 'train_x', window 1, step 3 is nan" in res.output and "Traceback" not in res.output
