"""The engine against independent implementations on random, continuous inputs.

Oracles: torchmetrics (equal-width ECE/MCE; it bins [lo, hi), which agrees away
from edges), uncertainty-calibration (Kumar et al.'s equal-mass ECE and marginal
CE), netcal's MMCE, KDEpy through a transcription of Mix-n-Match's KDE-ECE,
scikit-learn's ROC AUC, and the loop transcriptions in ``reference.py``.
"""

import numpy as np
import pytest
import torch

import reference as R
from calibench import metrics as M
from conftest import sample_problem

# (n, k, label_temperature, seed): over- and under-confident, few and many classes
PROBLEMS = [(1000, 10, 1.5, 1), (600, 10, 0.6, 2), (800, 100, 1.2, 3), (257, 3, 2.0, 4)]
BINS = [5, 15, 100, 500]


@pytest.fixture(scope="module", params=PROBLEMS, ids=lambda p: f"n{p[0]}-k{p[1]}-T{p[2]}")
def problem(request):
    n, k, temperature, seed = request.param
    logits, labels = sample_problem(np.random.default_rng(seed), n, k, temperature)
    return logits, labels, R.softmax(logits)


@pytest.mark.parametrize("n_bins", BINS)
def test_equal_width_against_torchmetrics(problem, n_bins):
    from torchmetrics.functional.classification import multiclass_calibration_error

    _, labels, probs = problem
    p, y = torch.from_numpy(probs), torch.from_numpy(labels)
    k = probs.shape[1]
    tm_ece = multiclass_calibration_error(p, y, num_classes=k, n_bins=n_bins, norm="l1").item()
    tm_mce = multiclass_calibration_error(p, y, num_classes=k, n_bins=n_bins, norm="max").item()
    assert M.ece(probs, labels, n_bins) == pytest.approx(tm_ece, abs=1e-6)  # torchmetrics sums in float32
    assert M.mce(probs, labels, n_bins) == pytest.approx(tm_mce, abs=1e-6)


@pytest.mark.parametrize("n_bins", BINS)
def test_equal_mass_against_uncertainty_calibration(problem, n_bins):
    import calibration as uc

    _, labels, probs = problem
    expected_top = uc.get_ece_em(probs, labels, num_bins=n_bins)
    expected_marginal = uc.lower_bound_scaling_ce(
        probs, labels, p=1, debias=False, num_bins=n_bins, binning_scheme=uc.get_equal_bins, mode="marginal"
    )
    assert M.ece_em(probs, labels, n_bins) == pytest.approx(expected_top, abs=1e-12)
    assert M.cwce_em(probs, labels, n_bins) == pytest.approx(expected_marginal, abs=1e-12)


@pytest.mark.parametrize("n_bins", BINS)
def test_binned_against_loop_transcriptions(problem, n_bins):
    _, labels, probs = problem
    assert M.ece(probs, labels, n_bins) == pytest.approx(R.ece(probs, labels, n_bins), abs=1e-12)
    assert M.mce(probs, labels, n_bins) == pytest.approx(R.mce(probs, labels, n_bins), abs=1e-12)
    assert M.cwce(probs, labels, n_bins) == pytest.approx(R.cwce(probs, labels, n_bins), abs=1e-12)
    assert M.ece_em(probs, labels, n_bins) == pytest.approx(R.ece_em(probs, labels, n_bins), abs=1e-12)
    assert M.cwce_em(probs, labels, n_bins) == pytest.approx(R.cwce_em(probs, labels, n_bins), abs=1e-12)
    assert M.ace(probs, labels, n_bins) == pytest.approx(R.adaptive(probs, labels, n_bins, 0.0), abs=1e-12)
    for threshold in (1e-3, 0.05):
        expected = R.adaptive(probs, labels, n_bins, threshold)
        assert M.tace(probs, labels, n_bins, threshold=threshold) == pytest.approx(expected, abs=1e-12)


def test_ks_against_loop_transcription(problem):
    _, labels, probs = problem
    c1, c2, h1, h2 = R.top2(probs, labels)
    assert M.ksce(probs, labels) == pytest.approx(R.ks(c1, h1), abs=1e-12)
    assert M.ks_top2(probs, labels) == pytest.approx(R.ks(c2, h2), abs=1e-12)
    assert M.ks_within_top2(probs, labels) == pytest.approx(R.ks(c1 + c2, h1 | h2), abs=1e-12)


def test_mmce_against_netcal_and_quadratic_sum(problem):
    from netcal.metrics import MMCE

    _, labels, probs = problem
    assert M.mmce(probs, labels) == pytest.approx(MMCE().measure(probs, labels), abs=1e-10)
    head = slice(0, 200)
    assert M.mmce(probs[head], labels[head]) == pytest.approx(R.mmce_quadratic(probs[head], labels[head]), abs=1e-12)


def test_kdece_against_mix_n_match_with_kdepy(problem):
    _, labels, probs = problem
    assert M.kdece(probs, labels) == pytest.approx(R.kdece_mix_n_match(probs, labels), abs=1e-9)


def test_scores_against_loops(problem):
    logits, labels, probs = problem
    assert M.nll(logits, labels) == pytest.approx(R.nll(logits, labels), abs=1e-12)
    assert M.brier(probs, labels) == pytest.approx(R.brier(probs, labels), abs=1e-12)
    conf, hit = R.top(probs, labels)
    assert M.accuracy(probs, labels) == pytest.approx(hit.mean(), abs=1e-15)


def test_auroc_against_sklearn_and_loop():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(7)
    positive = np.round(rng.random(400), 2)  # rounding makes many ties
    negative = np.round(rng.random(300) * 0.8, 2)
    truth = np.r_[np.ones(400), np.zeros(300)]
    expected = roc_auc_score(truth, np.r_[positive, negative])
    assert M.ood_auroc(positive, negative) == pytest.approx(expected, abs=1e-12)
    assert M.ood_auroc(positive[:50], negative[:40]) == pytest.approx(R.auroc(positive[:50], negative[:40]), abs=1e-12)


def test_measure_matches_the_functional_api(problem):
    logits, labels, probs = problem
    result = M.measure(logits, labels, bins=(5, 15, 100))
    assert list(result) == M.metric_names((5, 15, 100))
    for name in ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace"):
        for b in (5, 15, 100):
            assert result[f"{name}_{b}"] == pytest.approx(getattr(M, name)(probs, labels, b), abs=1e-12), (name, b)
    for name in ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "brier", "accuracy"):
        assert result[name] == pytest.approx(getattr(M, name)(probs, labels), abs=1e-12), name
    assert result["nll"] == pytest.approx(M.nll(logits, labels), abs=1e-12)
    conf, hit = R.top(probs, labels)
    assert result["mean_conf_correct"] == pytest.approx(conf[hit == 1].mean(), abs=1e-12)
    assert result["mean_conf_incorrect"] == pytest.approx(conf[hit == 0].mean(), abs=1e-12)


def test_ties_on_bin_edges_follow_the_spec():
    """Confidences exactly on edges go to the lower bin (right-closed); 1.0 to the last."""
    probs = np.array([[0.2, 0.8], [0.6, 0.4], [0.6, 0.4], [1.0, 0.0], [0.25, 0.75]])
    labels = np.array([1, 1, 0, 0, 0])
    for b in (2, 4, 5, 10):
        assert M.ece(probs, labels, b) == pytest.approx(R.ece(probs, labels, b), abs=1e-15)
        assert M.mce(probs, labels, b) == pytest.approx(R.mce(probs, labels, b), abs=1e-15)
        assert M.cwce(probs, labels, b) == pytest.approx(R.cwce(probs, labels, b), abs=1e-15)
    # 0.6 sits on the 5-bin edge: (0.4, 0.6] holds both 0.6 samples, one right, one wrong.
    # bins: 0.8 -> (0.6, 0.8] hit 1; 0.6, 0.6 -> (0.4, 0.6] hits 1, 0; 1.0 -> last, hit 1; 0.75 -> (0.6, 0.8] hit 0
    expected = (2 * abs(0.5 - 0.775) + 2 * abs(0.5 - 0.6) + abs(1 - 1.0)) / 5
    assert M.ece(probs, labels, 5) == pytest.approx(expected, abs=1e-15)


def test_adaptive_ties_keep_sample_order():
    """Tied values straddling a rank range keep sample order (stable sort), as the spec says."""
    probs = np.array([[0.3, 0.7]] * 4 + [[0.6, 0.4]] * 2)
    labels = np.array([0, 1, 1, 1, 0, 0])
    for b in (2, 3, 4):
        assert M.ace(probs, labels, b) == pytest.approx(R.adaptive(probs, labels, b, 0.0), abs=1e-15)
    # class 0 values sorted stably: 0.3 (s0, y0), 0.3 (s1), 0.3 (s2), 0.3 (s3), 0.6 (s4, y0), 0.6 (s5, y0)
    # 2 ranges of 3: [s0, s1, s2] freq 1/3 vs 0.3; [s3, s4, s5] freq 2/3 vs 0.5
    # class 1 values: 0.4 (s4), 0.4 (s5), 0.7 (s0), 0.7 (s1), 0.7 (s2), 0.7 (s3)
    # ranges [s4, s5, s0] freq 0 vs 0.5; [s1, s2, s3] freq 1 vs 0.7
    expected = ((abs(1 / 3 - 0.3) + abs(2 / 3 - 0.5)) / 2 + (abs(0 - 0.5) + abs(1 - 0.7)) / 2) / 2
    assert M.ace(probs, labels, 2) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("case", ["distinct", "ties_in_unsampled_rows", "step_map", "zeros_and_one", "above_one"])
def test_class_rows_sort_equals_torchs_stable_sort_bit_for_bit(case):
    """The packed-key sort of the class rows (and its fallbacks: rows with repeats, values that
    do not pack) gives torch's stable sort: the same values, indicators and prefix sums."""
    from calibench.metrics import binned

    g = torch.Generator().manual_seed(7)
    rows, n, k = 40, 3001, 10
    values = torch.softmax(torch.randn(rows, n, generator=g, dtype=torch.float64) * 6, -1)
    if case == "ties_in_unsampled_rows":  # the sampled rows (0, 13, 26, 39) stay distinct
        values[5, ::3] = values[5, 1]
        values[30, 100:200] = values[30, 7]
    elif case == "step_map":
        values = torch.randint(0, 9, (rows, n), generator=g).double() / 8
    elif case == "zeros_and_one":
        values[::2, :50] = 0.0
        values[3, 0] = 1.0
    elif case == "above_one":
        values = values * 3
    values = values.contiguous()
    labels = torch.randint(0, k, (n,), generator=g)
    classes = torch.randint(0, k, (rows,), generator=g)
    got = binned.sort_class_rows(values, labels, classes)
    expected_values, order = torch.sort(values, dim=-1, stable=True)
    expected_hits = labels[order] == classes[:, None]
    assert torch.equal(got.values.view(torch.int64), expected_values.view(torch.int64))
    assert torch.equal(got.cum_values.view(torch.int64), torch.cumsum(expected_values, -1).view(torch.int64))
    assert torch.equal(got.cum_targets, torch.cumsum(expected_hits, -1))
