"""KIFL data loaders (FashionMNIST idx, Covtype UCI/LIBSVM, bundled sets), the non-iid split and fitted KMs."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fednsl.methods.kifl.data import Dataset, load_covtype, load_dataset, load_fashion_mnist, partition, read_idx
from fednsl.methods.kifl.fitted import KnowledgeFitter
from fednsl.methods.kifl.knowledge import InputView


def write_idx(path: Path, arr: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def test_fashion_mnist_idx_loader(tmp_path: Path):
    rng = np.random.default_rng(0)
    imgs, labels = rng.integers(0, 256, (20, 28, 28)), rng.integers(0, 10, 20)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", imgs)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", imgs[:5])       # uncompressed works too
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", labels[:5])
    ds = load_fashion_mnist(tmp_path)
    assert ds.x.shape == (20, 784) and ds.x_test.shape == (5, 784) and ds.image_shape == (28, 28)
    assert np.array_equal(ds.x[3].reshape(28, 28), imgs[3]) and np.array_equal(ds.y, labels)
    assert read_idx(tmp_path / "train-labels-idx1-ubyte.gz").shape == (20,)
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="not an unsigned-byte idx file"):
        read_idx(tmp_path / "bad")
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        load_fashion_mnist(tmp_path / "nowhere")


def test_covtype_loaders(tmp_path: Path):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3000, (12, 54)).astype(float)
    y = np.arange(12) % 7 + 1
    rows = "\n".join(",".join(str(int(v)) for v in [*r, t]) for r, t in zip(x, y))
    (tmp_path / "covtype.data.gz").write_bytes(gzip.compress(rows.encode()))
    ds = load_covtype(tmp_path / "covtype.data.gz")
    assert ds.x.shape == (12, 54) and ds.y.tolist() == (y - 1).tolist() and ds.num_classes == 7
    assert ds.feature_names[0] == "elevation" and ds.class_names[1] == "lodgepole_pine"
    svm = "\n".join(f"{t} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(r) if v) for r, t in zip(x, y))
    (tmp_path / "covtype").write_text(svm + "\n")
    ds2 = load_covtype(tmp_path / "covtype")
    assert np.array_equal(ds2.x, ds.x) and np.array_equal(ds2.y, ds.y)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_covtype(tmp_path / "missing.data.gz")


def test_partition_is_label_skewed_disjoint_and_seeded():
    ds = load_dataset("digits")
    parts = partition(ds, 5, 5, train_fraction=0.2, km_fraction=0.5, test_ratio=0.1, seed=3)
    again = partition(ds, 5, 5, train_fraction=0.2, km_fraction=0.5, test_ratio=0.1, seed=3)
    assert sorted(parts) == ["c0", "c1", "c2", "c3", "c4"]
    covered = set()
    rows = []
    for cid, s in parts.items():
        assert len(s.classes) == 5 and set(np.unique(np.concatenate([s.y_train, s.y_km, s.y_test]))) <= set(s.classes)
        assert len(s.y_train) == int(np.floor(0.2 * s.pool_size)) and len(s.y_km) == int(np.floor(0.5 * s.pool_size))
        covered |= set(s.classes)
        rows += [r.tobytes() for r in np.concatenate([s.x_train, s.x_km, s.x_test])]
        assert np.array_equal(s.x_train, again[cid].x_train)
    assert covered == set(range(10))
    assert len(rows) <= len(ds.y) and len(set(rows)) >= len(rows) - 60   # digits has a few duplicate rows
    with pytest.raises(ValueError, match="train_fraction \\+ km_fraction <= 1"):
        partition(ds, 5, 5, train_fraction=0.6, km_fraction=0.5, test_ratio=0.1, seed=0)
    with pytest.raises(ValueError, match="cannot cover all 10 classes"):
        partition(ds, 2, 4, train_fraction=0.1, km_fraction=0.5, test_ratio=0.1, seed=0)


def test_fitted_kms_see_only_the_slice_and_rules_are_readable():
    ds = load_dataset("digits")
    split = partition(ds, 5, 5, train_fraction=0.2, km_fraction=0.5, test_ratio=0.2, seed=0)["c0"]
    fit = KnowledgeFitter("c0", split, 10, ds.image_shape, float(ds.hi.max()), seed=7)
    pkm = fit("logreg", {"feature_fraction": 0.3}, InputView(), "prediction")
    assert len(pkm.view.features) == 19                                      # ⌊0.3 · 64⌋ columns (eq. 8)
    assert np.mean(pkm.predict(split.x_test) == split.y_test) > 0.5
    rkm = fit("tree_rules", {"max_depth": 3, "min_samples_leaf": 5, "coverage": 1.0}, InputView(), "range")
    allowed = rkm.allowed(split.x_km)
    assert allowed[np.arange(len(split.y_km)), split.y_km].all()             # coverage 1.0 on the slice
    assert not allowed[:, [c for c in range(10) if c not in split.classes]].any()
    text = rkm.rules.format()
    assert text.count("range {") == len(rkm.rules.range_rules) <= 8 and "<- x" in text
    fit.pkm = pkm
    lookup = fit("paper_lookup", {"extra_classes": 1}, InputView(), "range")
    la = lookup.allowed(split.x_test)
    assert la[np.arange(len(split.y_test)), split.y_test].all()              # the paper's map holds the label
    with pytest.raises(ValueError, match="unknown option"):
        fit("tree_rules", {"depth": 3}, InputView(), "range")


def test_pooled_view_matches_a_brute_force_maxpool():
    rng = np.random.default_rng(0)
    x = rng.random((3, 36))
    v = InputView(features=(0, 4), pool=3, image_shape=(6, 6))
    img = x.reshape(3, 6, 6)
    pooled = np.array([[img[i, 3 * a:3 * a + 3, 3 * b:3 * b + 3].max() for a in range(2) for b in range(2)]
                       for i in range(3)])
    assert np.allclose(InputView(pool=3, image_shape=(6, 6))(x), pooled)
    with pytest.raises(ValueError, match="mask uses column 4 but the view has 4"):
        v(x)


def test_scaling_uses_feature_ranges():
    ds = Dataset("t", np.array([[0.0, 5.0], [10.0, 5.0]], np.float32), np.array([0, 1]), 2)
    assert ds.scale(ds.x).tolist() == [[0.0, 0.0], [1.0, 0.0]]
