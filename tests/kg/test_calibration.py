"""Per-relation calibration (kg.backbones.calibration) against scikit-learn and a known logistic model; ECE."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from kg.backbones.calibration import (
    PlattMap,
    RelationCalibrator,
    expected_calibration_error,
    fit_relation_calibrator,
    shared_platt,
    sigmoid,
)


def _cells(seed: int = 0, m: int = 4000, R: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits z (M, R), labels y ~ Bernoulli(σ(a_r z + b_r)), and the true probabilities."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, size=(m, R))
    a = np.array([1.5, 0.5, 2.0])[:R]
    b = np.array([-3.0, -1.0, 0.5])[:R]
    p = sigmoid(a * z + b)
    y = (rng.random((m, R)) < p).astype(np.float32)
    return z, y, p


def test_isotonic_and_sigmoid_equal_sklearn_fits() -> None:
    z, y, _ = _cells()
    new = np.random.default_rng(1).normal(0, 3, size=(500, 3))
    iso = fit_relation_calibrator(z, y, "isotonic")
    sig = fit_relation_calibrator(z, y, "sigmoid")
    got_iso, got_sig = iso.predict(new), sig.predict(new)
    for r in range(3):
        ref = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(z[:, r], y[:, r]).predict(new[:, r])
        np.testing.assert_allclose(got_iso[:, r], ref, atol=1e-6)
        lr = LogisticRegression(C=1e4, max_iter=1000).fit(z[:, r : r + 1], y[:, r].astype(int))
        np.testing.assert_allclose(got_sig[:, r], lr.predict_proba(new[:, r : r + 1])[:, 1], atol=1e-6)
    assert not iso.fallback and not sig.fallback


def test_platt_recovers_a_known_logistic_model_and_none_is_sigmoid() -> None:
    z, y, _ = _cells(m=40000)
    grid = np.linspace(-4, 4, 41)[:, None].repeat(3, 1)
    truth = sigmoid(np.array([1.5, 0.5, 2.0]) * grid + np.array([-3.0, -1.0, 0.5]))
    got = fit_relation_calibrator(z, y, "sigmoid").predict(grid)
    assert np.abs(got - truth).max() < 0.03
    np.testing.assert_allclose(fit_relation_calibrator(z, y, "none").predict(grid), sigmoid(grid), atol=1e-6)


def test_outputs_are_probabilities_and_monotone_in_the_logit() -> None:
    z, y, _ = _cells()
    grid = np.linspace(-50, 50, 201)[:, None].repeat(3, 1)
    for method in ("isotonic", "sigmoid", "none"):
        p = fit_relation_calibrator(z, y, method).predict(grid)
        assert p.dtype == np.float32 and p.min() >= 0 and p.max() <= 1
        assert (np.diff(p, axis=0) >= -1e-7).all(), method
        x = fit_relation_calibrator(z, y, method).predict(z.reshape(40, 100, 3))
        assert x.shape == (40, 100, 3)
        assert fit_relation_calibrator(z, y, method).predict(np.zeros((0, 0, 3))).shape == (0, 0, 3)


def test_relation_without_positive_falls_back_to_pooled_map_with_one_log_line(caplog) -> None:
    z, y, _ = _cells()
    y[:, 1] = 0.0  # relation 1 has no positive calibration cell
    y[:2, 2] = 1.0
    y[2:, 2] = 0.0  # relation 2 has 2 positives < min_positives 3
    with caplog.at_level(logging.WARNING, logger="fednsl.backbones"):
        cal = fit_relation_calibrator(z, y, "sigmoid", 3, "client c7", ["r_a", "r_b", "r_c"])
    assert cal.fallback == [1, 2] and cal.maps[0] is not None and cal.pooled is not None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "client c7" in lines[0] and "r_b (pos 0, neg 4000)" in lines[0] and "r_c (pos 2, neg 3998)" in lines[0]
    pooled = LogisticRegression(C=1e4, max_iter=1000).fit(z.reshape(-1, 1), y.ravel().astype(int))
    grid = np.linspace(-5, 5, 11)[:, None].repeat(3, 1)
    np.testing.assert_allclose(cal.predict(grid)[:, 1], pooled.predict_proba(grid[:, 1:2])[:, 1], atol=1e-6)


def test_no_positive_at_all_falls_back_to_sigmoid(caplog) -> None:
    z = np.random.default_rng(0).normal(size=(50, 2))
    with caplog.at_level(logging.WARNING, logger="fednsl.backbones"):
        cal = fit_relation_calibrator(z, np.zeros((50, 2)), "isotonic", where="client c0")
    assert cal.pooled is None and cal.fallback == [0, 1]
    np.testing.assert_allclose(cal.predict(z), sigmoid(z), atol=1e-6)
    assert "σ(logit)" in caplog.text and "client c0" in caplog.text
    empty = fit_relation_calibrator(np.zeros((0, 2)), np.zeros((0, 2)), "sigmoid")  # empty hold-out
    np.testing.assert_allclose(empty.predict(z), sigmoid(z), atol=1e-6)


def test_bad_input_is_refused_with_a_clear_message() -> None:
    z, y, _ = _cells(m=20)
    with pytest.raises(ValueError, match="calibration must be one of"):
        fit_relation_calibrator(z, y, "platt")
    with pytest.raises(ValueError, match=r"\(M, R\)"):
        fit_relation_calibrator(z, y[:, :2])
    with pytest.raises(ValueError, match="finite"):
        fit_relation_calibrator(np.full_like(z, np.nan), y)
    with pytest.raises(ValueError, match="relations"):
        fit_relation_calibrator(z, y).predict(np.zeros((4, 2)))


def test_ece_matches_sklearn_calibration_curve() -> None:
    rng = np.random.default_rng(3)
    for n_bins in (5, 10, 15):
        p = rng.random(3000) ** 2
        y = (rng.random(3000) < np.clip(p * 1.3, 0, 1)).astype(float)
        prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
        counts, _ = np.histogram(p, bins=np.linspace(0, 1, n_bins + 1))
        counts = counts[counts > 0]
        want = float(np.sum(counts * np.abs(prob_true - prob_pred)) / len(p))
        assert expected_calibration_error(y, p, n_bins) == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert expected_calibration_error(np.zeros(10), np.full(10, 0.9)) == pytest.approx(0.9)
    assert expected_calibration_error(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == 0.0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error(np.zeros(2), np.array([0.5, 1.5]))


def test_calibration_lowers_ece_of_a_miscalibrated_score() -> None:
    z, y, p_true = _cells(m=20000)
    raw = sigmoid(z)  # wrong slope/offset for every relation
    cal = fit_relation_calibrator(z[:10000], y[:10000], "isotonic")
    after = cal.predict(z[10000:])
    for r in range(3):
        before_ece = expected_calibration_error(y[10000:, r], raw[10000:, r])
        after_ece = expected_calibration_error(y[10000:, r], after[:, r])
        assert after_ece < before_ece / 2, r
    assert isinstance(cal, RelationCalibrator) and cal.summary()["own_maps"] == 3


def test_decreasing_platt_fit_falls_back_instead_of_reversing_the_ranking() -> None:
    z, y, _ = _cells()
    y[:, 1] = (z[:, 1] < -2).astype(np.float32)  # relation 1: positives at the *lowest* logits
    cal = fit_relation_calibrator(z, y, "sigmoid", where="client c3")
    assert cal.fallback == [1] and cal.maps[0] is not None and cal.maps[1] is None
    grid = np.linspace(-5, 5, 21)[:, None].repeat(3, 1)
    assert (np.diff(cal.predict(grid)[:, 1]) >= 0).all()


@pytest.mark.parametrize("method", ["isotonic", "sigmoid"])
def test_predict_equals_each_relation_mapped_alone(method: str) -> None:
    """predict() maps the columns that share a map (here the pooled one) in one call: the values are exactly those
    of applying each relation's map to its column alone."""
    from kg.backbones.calibration import _apply_map

    z, y, _ = _cells(R=3)
    z = np.concatenate([z, z[:, :2] * 0.5], axis=1)  # relations 3 and 4 have no positive: pooled map
    y = np.concatenate([y, np.zeros_like(y[:, :2])], axis=1)
    cal = fit_relation_calibrator(z, y, method)
    assert cal.fallback == [3, 4]
    new = np.random.default_rng(2).normal(0, 3, size=(7, 50, 5))
    flat = new.reshape(-1, 5)
    ref = np.stack([_apply_map(m if m is not None else cal.pooled, flat[:, r]) for r, m in enumerate(cal.maps)], 1)
    np.testing.assert_array_equal(cal.predict(new), np.clip(ref, 0, 1).astype(np.float32).reshape(new.shape))


def test_shared_platt_is_the_positives_weighted_mean_by_hand() -> None:
    a = [np.array([[1.0, -2.0], [0.0, 0.0], [2.0, 1.0]]), np.array([[3.0, -4.0], [0.0, 0.0], [0.0, 0.0]])]
    n = [np.array([1, 0, 5]), np.array([3, 0, 0])]
    platt, has = shared_platt(a, n)
    np.testing.assert_allclose(platt, [[(1 * 1 + 3 * 3) / 4, (1 * -2 + 3 * -4) / 4], [0, 0], [2.0, 1.0]])
    assert has.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="expected"):
        shared_platt([np.zeros((3, 3))], [np.zeros(3)])


def test_shared_maps_travel_as_parameters_and_replace_only_fallbacks() -> None:
    """A client's Platt maps leave as (a, b) and counts; a client without its own map of a relation adopts the
    shared one (σ(a z + b), the same values sklearn's fit gives) and keeps its own maps."""
    z, y, _ = _cells(seed=3)
    owner = fit_relation_calibrator(z, y, "sigmoid")
    sent = owner.platt_arrays()
    assert sent["positives"].tolist() == [int(c) for c in y.sum(0)]
    y_poor = y.copy()
    y_poor[:, 1] = 0  # no positive of relation 1: it falls back to the pooled map
    poor = fit_relation_calibrator(z, y_poor, "sigmoid")
    assert poor.fallback == [1]
    before = poor.predict(z)
    platt, has = shared_platt([sent["platt"], poor.platt_arrays()["platt"]],
                              [sent["positives"], poor.platt_arrays()["positives"]])
    assert poor.adopt_shared(platt, has) == 1 and poor.shared == [1] and poor.fallback == []
    after = poor.predict(z)
    np.testing.assert_allclose(after[:, 1], owner.predict(z)[:, 1], atol=1e-6)  # the owner's map (only owner)
    np.testing.assert_array_equal(after[:, [0, 2]], before[:, [0, 2]])  # own maps untouched
    assert poor.platt_arrays()["positives"][1] == 0  # an adopted map is not sent on as the client's own
    assert poor.summary()["shared_maps"] == 1 and poor.summary()["own_maps"] == 2
    m = PlattMap(1.5, -0.5)
    np.testing.assert_allclose(m.predict_proba(np.array([0.0, 2.0]))[:, 1], sigmoid(np.array([-0.5, 2.5])))
    with pytest.raises(ValueError, match="do not match"):
        poor.adopt_shared(platt[:2], has[:2])
