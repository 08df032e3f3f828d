"""bench.fednsl_calibration: the sigmoid-federated setting is the backbone's federated calibration round."""

from __future__ import annotations

import numpy as np

from bench.fednsl_calibration import METHODS, federate
from kg.backbones.calibration import fit_relation_calibrator, shared_platt


def _cells(rng: np.random.Generator, slope: float, pos_of: tuple[bool, bool]) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(size=(400, 2))
    y = (rng.random((400, 2)) < 1 / (1 + np.exp(-slope * z - 2))).astype(np.float64)
    for r, keep in enumerate(pos_of):
        if not keep:
            y[:, r] = 0.0
    return z, y


def test_federate_adopts_the_positive_weighted_shared_map_only_where_a_client_has_none() -> None:
    rng = np.random.default_rng(0)
    a = fit_relation_calibrator(*_cells(rng, 2.0, (True, True)), "sigmoid", 3)  # own maps for both relations
    b = fit_relation_calibrator(*_cells(rng, 4.0, (True, False)), "sigmoid", 3)  # none for relation 1
    fa, fb = federate([a, b])
    assert a.shared == [] and b.shared == [] and b.fallback == [1]  # the inputs are left as they were
    assert fa.summary()["shared_maps"] == 0 and fb.summary()["shared_maps"] == 1 and fb.fallback == []
    arrays = [c.platt_arrays() for c in (a, b)]
    platt, _ = shared_platt([x["platt"] for x in arrays], [x["positives"] for x in arrays])
    z = np.linspace(-3, 3, 7)[:, None].repeat(2, 1)
    expect = 1 / (1 + np.exp(-(platt[1, 0] * z[:, 1] + platt[1, 1])))  # relation 1: a's map alone (b had none)
    assert np.allclose(fb.predict(z)[:, 1], expect, atol=1e-6)
    assert np.allclose(fb.predict(z)[:, 0], b.predict(z)[:, 0])  # b's own map for relation 0 is kept
    assert np.allclose(fa.predict(z), a.predict(z))
    assert METHODS[-1] == "sigmoid-federated"
