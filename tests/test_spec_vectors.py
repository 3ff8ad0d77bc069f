"""Every public test vector of docs/metrics.md, to 1e-6."""

import numpy as np
import pytest

from calibench import metrics as M

TOL = 1e-6

V1 = ([[0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.625, 0.25, 0.125], [0.625, 0.25, 0.125]], [0, 0, 1, 2])
V2 = ([[1, 0, 0], [0.9375, 0.0625, 0], [0, 0.0625, 0.9375]], [1, 0, 2])
V3 = ([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]], [0, 1, 2])
V4 = ([[0.4, 0.3, 0.3], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.9, 0.05, 0.05]], [0, 1, 0, 2, 0])
V5 = ([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]], [0, 0])
V6 = (2 * [[0.5, 0.25, 0.25]] + 4 * [[0.75, 0.125, 0.125]], [0, 1, 0, 0, 0, 2])

CASES = [
    (V1, "ece", 4, 0.5625),
    (V1, "mce", 4, 0.625),
    (V1, "cwce", 4, 0.208333),
    (V1, "ksce", None, 0.25),
    (V1, "ece_em", 4, 0.5625),
    (V2, "ece", 4, 0.291667),
    (V3, "ece", 4, 0.5),
    (V3, "mce", 4, 0.5),
    (V3, "cwce", 4, 0.333333),
    (V3, "ksce", None, 0.5),
    (V4, "ece_em", 2, 0.04),
    (V4, "ece", 2, 0.04),
    (V4, "mce", 2, 0.1),
    (V5, "ece", 4, 0.0),
    (V5, "cwce", 4, 0.416667),
    (V5, "ksce", None, 0.0),
    (V6, "ece", 2, 0.0),
    (V6, "ece_em", 2, 0.0),
    (V6, "ksce", None, 0.0),
]


@pytest.mark.parametrize("vector,metric,bins,expected", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_binned_and_ks_vectors(vector, metric, bins, expected):
    probs, labels = vector
    fn = getattr(M, metric)
    value = fn(probs, labels) if bins is None else fn(probs, labels, n_bins=bins)
    assert value == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize("vector,metric,bins,expected", [c for c in CASES if c[2] is not None])
def test_vectors_through_the_suite(vector, metric, bins, expected):
    """measure() on log-probabilities gives the same values as the functional API."""
    probs, labels = vector
    logits = np.log(np.clip(np.asarray(probs, dtype=float), 1e-300, None))
    # Exact zeros become ~1e-300, which changes nothing at these bin counts.
    assert M.measure(logits, labels, bins=(bins,))[f"{metric}_{bins}"] == pytest.approx(expected, abs=TOL)


def test_nll_and_brier_vector():
    probs = [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]]
    labels = [0, 2]
    assert M.nll(np.log(probs), labels) == pytest.approx(1.039721, abs=TOL)
    assert M.brier(probs, labels) == pytest.approx(0.625, abs=TOL)


def test_mmce_vector():
    value = M.mmce([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]], [0, 1])
    assert value == pytest.approx(0.426881, abs=TOL)
    assert value**2 == pytest.approx(0.182227, abs=TOL)


def test_auroc_vector():
    assert M.ood_auroc([0.9, 0.8, 0.6], [0.7, 0.5, 0.6]) == pytest.approx(0.833333, abs=TOL)
