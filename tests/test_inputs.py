"""Bad input raises ValueError naming the problem (the brief: clear errors)."""

import numpy as np
import pytest
import torch

from calibench.measure import stages as C
from calibench import metrics as M

GOOD_P = np.array([[0.7, 0.3], [0.4, 0.6], [0.5, 0.5]])
GOOD_Y = np.array([0, 1, 1])


@pytest.mark.parametrize("bad,where", [(np.nan, "sample 1, class 0"), (np.inf, "sample 1, class 0"), (-np.inf, "sample 1, class 0")])
def test_non_finite_logits(bad, where):
    logits = np.zeros((3, 2))
    logits[1, 0] = bad
    with pytest.raises(ValueError, match=f"logits: non-finite value .* at {where}"):
        M.measure(logits, GOOD_Y)
    with pytest.raises(ValueError, match="logits: non-finite"):
        M.nll(logits, GOOD_Y)
    with pytest.raises(ValueError, match="logits: non-finite"):
        C.fit_temperature(logits, GOOD_Y)


def test_non_finite_logits_in_a_batch_names_the_network():
    logits = torch.zeros((4, 3, 2))
    logits[2, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="network 2, sample 1, class 1"):
        M.measure_batch(logits, GOOD_Y)


@pytest.mark.parametrize("labels,msg", [([0, 2, 1], r"labels\[1\] = 2 is outside \[0, 2\)"), ([0, -1, 1], r"labels\[1\] = -1")])
def test_labels_outside_range(labels, msg):
    with pytest.raises(ValueError, match=msg):
        M.ece(GOOD_P, labels)
    with pytest.raises(ValueError, match=msg):
        M.measure(np.log(GOOD_P), labels)


def test_float_labels_rejected():
    with pytest.raises(ValueError, match="labels: expected integer"):
        M.ece(GOOD_P, [0.0, 1.0, 1.0])


def test_shape_mismatch():
    with pytest.raises(ValueError, match="labels: has 2 entries but the scores have N = 3 rows"):
        M.ece(GOOD_P, [0, 1])
    with pytest.raises(ValueError, match=r"expected a 2-D array of shape \(N, K\)"):
        M.ece(GOOD_P[0], GOOD_Y)
    with pytest.raises(ValueError, match=r"labels: expected a 1-D array"):
        M.ece(GOOD_P, GOOD_Y[:, None])
    with pytest.raises(ValueError, match=r"\(M, N, K\)"):
        M.measure_batch(GOOD_P, GOOD_Y)


def test_empty_and_single_class():
    with pytest.raises(ValueError, match=r"no samples \(N = 0\)"):
        M.measure(np.zeros((0, 3)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="at least 2 classes, got K = 1"):
        M.ece(np.ones((3, 1)), [0, 0, 0])
    with pytest.raises(ValueError, match="empty"):
        M.ood_auroc([], [0.5])


def test_probabilities_that_are_not_a_distribution():
    with pytest.raises(ValueError, match="row at sample 1 sums to 1.2, not 1"):
        M.ece([[0.5, 0.5], [0.6, 0.6]], [0, 1])
    with pytest.raises(ValueError, match=r"value -0.1 at sample 1, class 0 is outside \[0, 1\]"):
        M.cwce([[0.5, 0.5], [-0.1, 1.1]], [0, 1])
    with pytest.raises(ValueError, match="probabilities: non-finite"):
        M.mmce([[np.nan, 0.5], [0.5, 0.5]], [0, 1])


def test_bad_bins():
    with pytest.raises(ValueError, match="bins"):
        M.measure(np.zeros((3, 2)), GOOD_Y, bins=(0, 15))
    with pytest.raises(ValueError, match="duplicate"):
        M.measure(np.zeros((3, 2)), GOOD_Y, bins=(15, 15))
    with pytest.raises(ValueError, match="n_bins"):
        M.ece(GOOD_P, GOOD_Y, n_bins=(5, 10))


def test_undefined_kde_bandwidth_is_nan_not_an_error():
    """Fewer than two distinct correct confidences: KDE-ECE has no bandwidth (NaN, documented)."""
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    labels = np.array([0, 0, 1])  # one correct sample
    r = M.measure(logits, labels)
    assert np.isnan(r["kdece"])
    assert np.isfinite(r["ece_15"])
