"""The App. A.5 data generator: stated moments, client composition, heterogeneity shift, seeding."""

import numpy as np
import pytest

from fednsl.tasks.numeric.data import (
    PAPER_COVARIANCES,
    PAPER_MEANS,
    NumericDataConfig,
    make_numeric_federation,
    sample_class,
)
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_sample_moments_match_the_stated_gaussians(k):
    cfg = NumericDataConfig()
    x = sample_class(np.random.default_rng(k), cfg, k, 40_000)
    # standard errors: mean ≈ sqrt(0.5/40000) = 0.0035, covariance entries ≈ 0.0035–0.005
    np.testing.assert_allclose(x.mean(0), PAPER_MEANS[k], atol=0.02)
    np.testing.assert_allclose(np.cov(x.T), PAPER_COVARIANCES[k], atol=0.02)


def test_dataset_moments_in_data_units():
    cfg = NumericDataConfig()
    parts = make_numeric_federation(cfg, seed=3)
    c1 = parts["c1"]
    raw = c1.x_train.astype(np.float64) * cfg.input_scale + np.asarray(cfg.input_center)
    for k in (0, 1):   # client 1 holds all 200 points of classes 0 and 1
        pts = raw[c1.y_true == k]
        assert len(pts) == 200
        # 200 points: mean s.e. 0.05, covariance s.e. ≈ 0.05
        np.testing.assert_allclose(pts.mean(0), PAPER_MEANS[k], atol=0.2)
        np.testing.assert_allclose(np.cov(pts.T), PAPER_COVARIANCES[k], atol=0.2)


def test_client_composition_follows_appendix_a5():
    cfg = NumericDataConfig()
    parts = make_numeric_federation(cfg, seed=0)
    assert list(parts) == ["c1", "c2"]
    for cid, unseen in (("c1", 2), ("c2", 0)):
        d = parts[cid]
        assert d.unseen_class == unseen
        assert len(d.y_train) == 550
        assert np.bincount(d.y_true, minlength=3).tolist() == [200 if k != unseen else 150 for k in range(3)]
        noisy = d.y_true == unseen
        assert np.array_equal(d.y_train[~noisy], d.y_true[~noisy])       # seen classes keep their labels
        assert set(np.unique(d.y_train[noisy])) <= {0, 1, 2}               # relabelled uniformly in {0,1,2}
        assert 25 < (d.y_train[noisy] == unseen).sum() < 75                # ≈ 1/3 keep the true label
        for _, y in d.unseen.values():
            assert len(y) == 50 and np.all(y == unseen)
    # the shared class-1 points are the same points on both clients
    c1_pts = parts["c1"].x_train[parts["c1"].y_true == 1]
    c2_pts = parts["c2"].x_train[parts["c2"].y_true == 1]
    np.testing.assert_array_equal(c1_pts, c2_pts)


def test_heterogeneity_levels_replace_a_share_with_shifted_points():
    cfg = NumericDataConfig()
    d = make_numeric_federation(cfg, seed=1)["c1"]
    base = d.unseen["h0"][0]
    for name, share in (("h33", 0.33), ("h50", 0.5)):
        x = d.unseen[name][0]
        n_shift = round(share * 50)
        np.testing.assert_array_equal(x[n_shift:], base[n_shift:])        # the rest is the homogeneous test set
        raw = x[:n_shift] * cfg.input_scale + np.asarray(cfg.input_center)
        np.testing.assert_allclose(raw.mean(0), np.add(PAPER_MEANS[2], cfg.shifts[0]), atol=0.6)


def test_seeded_and_seed_dependent():
    cfg = NumericDataConfig()
    a, b = make_numeric_federation(cfg, 5), make_numeric_federation(cfg, 5)
    c = make_numeric_federation(cfg, 6)
    np.testing.assert_array_equal(a["c2"].x_train, b["c2"].x_train)
    np.testing.assert_array_equal(a["c2"].y_train, b["c2"].y_train)
    assert not np.array_equal(a["c2"].x_train, c["c2"].x_train)


@pytest.mark.parametrize("bad, match", [
    ({"name": "blobs"}, "unknown data.name"),
    ({"covariances": [[[1, 2], [2, 1]]] * 3}, "positive definite"),
    ({"unseen_classes": [3, 0]}, "unseen_classes"),
    ({"shifts": [[1.0, 1.0]]}, "shifts"),
    ({"relabelled": 200}, "relabelled"),
    ({"heterogeneity": [0.0, 1.5]}, "heterogeneity"),
])
def test_config_errors_name_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        NumericDataConfig(**bad)
