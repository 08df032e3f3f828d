"""Data sets of the KIFL experiments (Fan et al. 2022, §7.1) and their non-iid client split.

Loaders (all return raw features; the server model sees them min-max scaled by the data set's feature ranges,
the knowledge models see the raw values, so rule thresholds read in the data's own units):

============== ======================================================================== ===================
name           source                                                                   shape / classes
============== ======================================================================== ===================
fashion_mnist  idx files (train/t10k-{images-idx3,labels-idx1}-ubyte[.gz]) in ``path``,  28×28, k = 10
               default ``$FEDNSL_FASHION_MNIST`` or /usr/share/datasets/fashion-mnist
               (Debian package ``dataset-fashion-mnist``)
covtype        ``path`` = UCI ``covtype.data[.gz]`` (CSV, labels 1-7) or the LIBSVM        54 features, k = 7
               ``covtype`` / ``covtype.scale[.bz2]`` file (the paper's source); default
               ``$FEDNSL_COVTYPE``. No package ships it: bring the file.
digits         scikit-learn's bundled 8×8 digits (1,797 rows), as 64 tabular features:    64 features, k = 10
               the offline stand-in for Covtype
wine,          scikit-learn's bundled tabular sets (178 / 569 rows)                       13 / 30 features
breast_cancer                                                                             k = 3 / 2
============== ======================================================================== ===================

Split (§7.1, as FedMech.jl ``splitDataByClass``): each client draws ``classes_per_client`` classes (redrawn until
every class has a holder), every sample goes to a uniformly random holder of its class (unequal client sizes),
test points come from the official test set when there is one (FashionMNIST) and otherwise from a
``test_ratio`` share of each client's pool. Each client's training pool is cut into a **knowledge slice**
(``km_fraction``; only the client's fitted KMs see it) and the model's training set (``train_fraction`` of the
pool, the paper's "1 % / 5 % / 10 % / 30 % of data", disjoint from the slice and from the test points).
"""

from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kg.seeding import derive_rng

__all__ = [
    "COVTYPE_CLASSES",
    "COVTYPE_FEATURES",
    "FASHION_CLASSES",
    "ClientSplit",
    "Dataset",
    "DATASETS",
    "load_covtype",
    "load_dataset",
    "load_fashion_mnist",
    "partition",
    "read_idx",
]

FASHION_CLASSES = (
    "tshirt_top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle_boot",
)
COVTYPE_FEATURES = (
    "elevation",
    "aspect",
    "slope",
    "h_dist_hydrology",
    "v_dist_hydrology",
    "h_dist_roadways",
    "hillshade_9am",
    "hillshade_noon",
    "hillshade_3pm",
    "h_dist_fire_points",
    *(f"wilderness_area{i}" for i in range(1, 5)),
    *(f"soil_type{i}" for i in range(1, 41)),
)
COVTYPE_CLASSES = (
    "spruce_fir",
    "lodgepole_pine",
    "ponderosa_pine",
    "cottonwood_willow",
    "aspen",
    "douglas_fir",
    "krummholz",
)
FASHION_MNIST_DIRS = ("/usr/share/datasets/fashion-mnist",)


@dataclass
class Dataset:
    """Raw features (n, d) float32, labels (n,) int64 in [0, k), optional official test set, and metadata."""

    name: str
    x: np.ndarray
    y: np.ndarray
    num_classes: int
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    feature_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None
    image_shape: tuple[int, ...] | None = None  # (H, W) for flattened images
    source: str = ""

    def __post_init__(self) -> None:
        both = self.x if self.x_test is None else np.concatenate([self.x, self.x_test])
        self.lo = both.min(axis=0).astype(np.float32)
        self.hi = both.max(axis=0).astype(np.float32)

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def scale(self, x: np.ndarray) -> np.ndarray:
        """Min-max scaling to [0, 1] by the data set's feature ranges (constant columns map to 0)."""
        span = np.where(self.hi > self.lo, self.hi - self.lo, 1.0).astype(np.float32)
        return ((x - self.lo) / span).astype(np.float32)


# --- loaders ---------------------------------------------------------------------------------------


def read_idx(path: str | Path) -> np.ndarray:
    """An idx1/idx3 file (MNIST format, optionally gzip-compressed) as a uint8 array."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for an idx file")
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte idx file (magic {raw[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} but holds {data.size} bytes")
    return data.reshape(dims)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory}: no {stem}[.gz] (FashionMNIST idx files)")


def load_fashion_mnist(path: str | Path | None = None) -> Dataset:
    """FashionMNIST from its four idx files (the official 60k/10k split)."""
    cands = (
        [Path(path)]
        if path
        else (
            [Path(os.environ["FEDNSL_FASHION_MNIST"])]
            if "FEDNSL_FASHION_MNIST" in os.environ
            else [Path(p) for p in FASHION_MNIST_DIRS]
        )
    )
    directory = next((c for c in cands if c.is_dir()), None)
    if directory is None:
        raise FileNotFoundError(
            f"FashionMNIST not found in {[str(c) for c in cands]}: pass data.path=DIR holding "
            "train-images-idx3-ubyte.gz & co, set FEDNSL_FASHION_MNIST, or `apt-get install dataset-fashion-mnist`"
        )
    arrays = []
    for stem, role in (
        ("train-images-idx3-ubyte", "the training images"),
        ("train-labels-idx1-ubyte", "the training labels"),
        ("t10k-images-idx3-ubyte", "the test images"),
        ("t10k-labels-idx1-ubyte", "the test labels"),
    ):
        file = _find(directory, stem)
        arr = read_idx(file)
        if not len(arr):
            raise ValueError(f"{file}: no items (its idx header counts 0); kifl needs {role}")
        arrays.append(arr)
    xs, ys, xt, yt = arrays
    if len(xs) != len(ys) or len(xt) != len(yt):
        raise ValueError(f"{directory}: image and label counts differ")
    return Dataset(
        "fashion_mnist",
        xs.reshape(len(xs), -1).astype(np.float32),
        ys.astype(np.int64),
        10,
        xt.reshape(len(xt), -1).astype(np.float32),
        yt.astype(np.int64),
        None,
        FASHION_CLASSES,
        (28, 28),
        source=str(directory),
    )


def load_covtype(path: str | Path | None = None) -> Dataset:
    """Forest CoverType: UCI ``covtype.data[.gz]`` (55 comma-separated columns) or a LIBSVM file."""
    if path is None:
        path = os.environ.get("FEDNSL_COVTYPE")
    if path is None or not Path(path).is_file():
        raise FileNotFoundError(
            f"Covtype file {path!r} not found: no package ships it and this loader never downloads; pass "
            "data.path=covtype.data.gz (UCI) or the LIBSVM 'covtype'/'covtype.scale.bz2' file, or set FEDNSL_COVTYPE"
        )
    path = Path(path)
    name = path.name.lower()
    if ".data" in name or name.endswith(".csv") or name.endswith(".csv.gz"):
        import pandas as pd

        try:
            table = pd.read_csv(path, header=None).to_numpy()
        except pd.errors.EmptyDataError:
            table = np.zeros((0, 55))
        if table.shape[1] != 55:
            raise ValueError(f"{path}: expected 55 columns (54 features + cover type), got {table.shape[1]}")
        x, y = table[:, :54].astype(np.float32), table[:, 54].astype(np.int64)
    else:
        from sklearn.datasets import load_svmlight_file

        xs, yv = load_svmlight_file(str(path), n_features=54)
        x, y = np.asarray(xs.todense(), dtype=np.float32), yv.astype(np.int64)
    if not len(y):
        raise ValueError(f"{path}: no samples (not one data line); kifl trains on its samples, one a line")
    if y.min() < 1 or y.max() > 7:
        raise ValueError(f"{path}: cover types must be 1..7, got {y.min()}..{y.max()}")
    return Dataset(
        "covtype", x, y - 1, 7, feature_names=COVTYPE_FEATURES, class_names=COVTYPE_CLASSES, source=str(path)
    )


def _sklearn(name: str) -> Dataset:
    from sklearn import datasets as skd

    loader = {"digits": skd.load_digits, "wine": skd.load_wine, "breast_cancer": skd.load_breast_cancer}[name]
    bunch = loader()
    x, y = bunch.data.astype(np.float32), bunch.target.astype(np.int64)
    feats = None if name == "digits" else tuple(str(f).replace(" ", "_").replace("/", "_") for f in bunch.feature_names)
    classes = tuple(str(c) for c in bunch.target_names)
    return Dataset(
        name,
        x,
        y,
        int(y.max()) + 1,
        feature_names=feats,
        class_names=classes,
        image_shape=(8, 8) if name == "digits" else None,
        source=f"sklearn.datasets.load_{name}",
    )


DATASETS = ("fashion_mnist", "covtype", "digits", "wine", "breast_cancer")


def load_dataset(name: str, path: str | None = None) -> Dataset:
    if name == "fashion_mnist":
        return load_fashion_mnist(path)
    if name == "covtype":
        return load_covtype(path)
    if name in ("digits", "wine", "breast_cancer"):
        return _sklearn(name)
    raise ValueError(f"unknown data.name {name!r}; available: {', '.join(DATASETS)}")


# --- split -----------------------------------------------------------------------------------------


@dataclass
class ClientSplit:
    """One client's data: model training set, knowledge slice (for fitted KMs only), test set, its classes."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_km: np.ndarray
    y_km: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[int, ...]
    pool_size: int


def _assign_classes(k: int, m: int, per: int, rng: np.random.Generator) -> list[np.ndarray]:
    if not 1 <= per <= k:
        raise ValueError(f"classes_per_client must be in [1, {k}], got {per}")
    if per * m < k:
        raise ValueError(f"{m} clients × {per} classes cannot cover all {k} classes")
    for _ in range(10_000):
        picks = [np.sort(rng.choice(k, size=per, replace=False)) for _ in range(m)]
        if len(np.unique(np.concatenate(picks))) == k:
            return picks
    raise RuntimeError("could not draw a class assignment covering every class")


def _deal(y: np.ndarray, holders: list[list[int]], m: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each index goes to a uniformly random holder of its class."""
    who = np.empty(len(y), dtype=np.int64)
    for c, hs in enumerate(holders):
        idx = np.flatnonzero(y == c)
        who[idx] = np.asarray(hs)[rng.integers(0, len(hs), size=len(idx))]
    return [rng.permutation(np.flatnonzero(who == i)) for i in range(m)]


def partition(
    ds: Dataset,
    num_clients: int,
    classes_per_client: int,
    train_fraction: float,
    km_fraction: float,
    test_ratio: float,
    seed: int,
    max_samples: int | None = None,
) -> dict[str, ClientSplit]:
    """Non-iid split (module docstring); client ids ``c0 .. c{M-1}``; deterministic in ``seed``."""
    if not 0 < train_fraction <= 1 or not 0 <= km_fraction < 1 or train_fraction + km_fraction > 1 + 1e-9:
        raise ValueError(
            f"need 0 < train_fraction, 0 <= km_fraction and train_fraction + km_fraction <= 1, got "
            f"{train_fraction} + {km_fraction}"
        )
    if not 0 < test_ratio < 1:
        raise ValueError(f"test_ratio must be in (0, 1), got {test_ratio}")
    rng = derive_rng(seed, 0x4B1F)
    x, y, xt, yt = ds.x, ds.y, ds.x_test, ds.y_test
    if max_samples is not None and len(y) > max_samples:
        keep = np.sort(rng.choice(len(y), size=max_samples, replace=False))
        x, y = x[keep], y[keep]
        if xt is not None and yt is not None:
            nt = max(1, int(round(max_samples * len(yt) / len(ds.y))))
            keep_t = np.sort(rng.choice(len(yt), size=min(nt, len(yt)), replace=False))
            xt, yt = xt[keep_t], yt[keep_t]
    picks = _assign_classes(ds.num_classes, num_clients, classes_per_client, rng)
    holders = [[i for i in range(num_clients) if c in picks[i]] for c in range(ds.num_classes)]
    pools = _deal(y, holders, num_clients, rng)
    tests = _deal(yt, holders, num_clients, rng) if yt is not None else None
    width = len(str(num_clients - 1))
    out: dict[str, ClientSplit] = {}
    for i in range(num_clients):
        pool = pools[i]
        if tests is not None:
            x_test, y_test = xt[tests[i]], yt[tests[i]]  # type: ignore[index]
        else:
            n_test = max(1, int(round(test_ratio * len(pool))))
            x_test, y_test = x[pool[:n_test]], y[pool[:n_test]]
            pool = pool[n_test:]
        n_km = int(np.floor(km_fraction * len(pool)))
        n_tr = max(1, int(np.floor(train_fraction * len(pool))))
        n_tr = min(n_tr, len(pool) - n_km)
        if n_tr < 1:
            raise ValueError(f"client c{i}: no training sample left (pool {len(pool)}, km_fraction {km_fraction})")
        km_idx, tr_idx = pool[:n_km], pool[n_km : n_km + n_tr]
        out[f"c{i:0{width}d}"] = ClientSplit(
            x[tr_idx], y[tr_idx], x[km_idx], y[km_idx], x_test, y_test, tuple(int(c) for c in picks[i]), int(len(pool))
        )
    return out
