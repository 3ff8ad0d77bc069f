"""Isotonic regression, histogram binning and spline recalibration (docs/recalibration.md,
"Isotonic regression, one-vs-rest", "Histogram binning, one-vs-rest", "Spline
recalibration"), against scikit-learn, netcal 1.4.0 and a plain transcription of Gupta et
al.'s algorithm."""

import warnings

import numpy as np
import pytest
import torch

from calibench.metrics import ksce
from calibench.recalibration.nonparametric import (
    _group_starts,
    fit_histogram_binning,
    fit_isotonic,
    isotonic_knots,
    isotonic_values,
)
from calibench.recalibration.spline import fit_spline
from conftest import sample_problem

FITS = {"iso": fit_isotonic, "hist": fit_histogram_binning, "spline": fit_spline}


def _t(a):
    return torch.as_tensor(np.asarray(a))


def _softmax(z):
    return torch.softmax(_t(z).to(torch.float64), dim=-1).numpy()


def _split(logits, labels, n_val):
    return logits[:n_val], labels[:n_val], logits[n_val:], labels[n_val:]


# ---------------------------------------------------------------------------------------
# Isotonic regression against scikit-learn


def _sklearn_iso(p_val, y_val, p_test):
    """Per class scikit-learn's isotonic fit, then rows renormalised (zeros -> uniform)."""
    from sklearn.isotonic import IsotonicRegression

    k = p_val.shape[1]
    out = np.empty_like(p_test)
    for c in range(k):
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")
        iso.fit(p_val[:, c], (y_val == c).astype(np.float64))
        out[:, c] = iso.predict(p_test[:, c])
    total = out.sum(axis=1, keepdims=True)
    return np.where(total > 0, out / np.where(total > 0, total, 1), 1.0 / k), out


def _check_iso(z_val, y_val, z_test, atol=1e-12):
    fitted = fit_isotonic(_t(z_val)[None], _t(y_val))
    expected, _ = _sklearn_iso(_softmax(z_val), y_val, _softmax(z_test))
    got = fitted.probs(_t(z_test)[None])[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    return fitted, got


def test_iso_matches_sklearn_on_random_logits(rng):
    logits, labels = sample_problem(rng, 900, 6)
    _check_iso(*_split(logits, labels, 400)[:2], logits[400:])


def test_iso_matches_sklearn_with_ties_and_out_of_range_scores(rng):
    logits, labels = sample_problem(rng, 700, 4)
    z_val, y_val = np.round(logits[:300]), labels[:300]  # coarse logits: many tied scores
    z_test = np.concatenate([np.round(logits[300:]), 4.0 * logits[300:]])  # more extreme: outside the range
    fitted, _ = _check_iso(z_val, y_val, z_test)
    assert fitted.info["knots"][0] < 60


def test_iso_matches_sklearn_with_an_absent_class_and_tiny_probabilities(rng):
    logits, labels = sample_problem(rng, 1200, 8, scale=12.0)  # many p below 1e-15
    labels = np.where(labels == 7, 0, labels)  # class 7 never a label
    fitted, got = _check_iso(logits[:600], labels[:600], logits[600:])
    assert fitted.info["absent_classes"][0] == 1
    assert np.all(got[:, 7] == 0)
    assert np.all(np.isneginf(fitted.logits(_t(logits[600:])[None])[0, :, 7].numpy()))


def test_iso_all_zero_rows_become_uniform():
    # Every class has negatives up to p = 0.4 and positives only from 0.55: a row of equal
    # scores (1/3 each) maps to zeros everywhere, so it becomes uniform (netcal: NaN).
    rows, labels = [], []
    for k in range(3):
        high = np.full(3, 0.05)
        high[k] = 0.9
        rows.append(high)
        labels.append(k)
        mixed = np.full(3, 0.05)
        mixed[k], mixed[(k + 1) % 3] = 0.4, 0.55
        rows.append(mixed)
        labels.append((k + 1) % 3)
    z_val = np.log(np.repeat(np.array(rows), 5, axis=0))
    y_val = np.repeat(np.array(labels), 5)
    z_test = np.array([[0.0, 0.0, 0.0], np.log([0.9, 0.05, 0.05]), np.log([0.3, 0.6, 0.1])])
    _, raw = _sklearn_iso(_softmax(z_val), y_val, _softmax(z_test))
    assert np.all(raw[0] == 0)  # the case under test
    _, got = _check_iso(z_val, y_val, z_test)
    np.testing.assert_allclose(got[0], 1 / 3, rtol=0, atol=1e-15)


def test_iso_knots_match_sklearn_including_near_ties():
    # scikit-learn pools scores closer than 1e-15 to the first of their group (_make_unique):
    # chains of sub-resolution gaps that span more than the resolution, near 0 and near 1.
    from sklearn.isotonic import IsotonicRegression

    e = 1e-15
    col0 = np.array([0, 0.3 * e, 0.6 * e, 0.9 * e, 1.2 * e, 1.5 * e, 1.8 * e, 2.1 * e, 0.2, 0.2, 0.2 + 0.5 * e,
                     0.5, 0.7, 1 - 3 * e, 1 - 2.5 * e, 1 - 2 * e, 1 - 1.5 * e, 1 - e, 1 - 0.5 * e, 1.0])
    rng = np.random.default_rng(3)
    col1 = rng.permutation(col0)
    probs = np.stack([col0, col1], axis=1)
    labels = rng.integers(0, 2, size=len(col0))
    knots = isotonic_knots(_t(probs)[None], _t(labels))
    grid = np.concatenate([np.linspace(0, 1, 101), col0, [0.75 * e, 1 - 0.7 * e]])
    values = isotonic_values(knots, _t(np.stack([grid, grid], axis=1))[None])[0].numpy()
    for c in range(2):
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(probs[:, c], labels == c)
        n = int(knots["n_knots"][0, c])
        np.testing.assert_array_equal(knots["x"][0, c, :n].numpy(), iso.X_thresholds_)
        np.testing.assert_array_equal(knots["y"][0, c, :n].numpy(), iso.y_thresholds_)
        np.testing.assert_allclose(values[:, c], iso.predict(grid), rtol=0, atol=1e-12)


def _make_unique_starts(row):
    """scikit-learn's _make_unique grouping rule, transcribed as a loop."""
    starts = np.zeros(len(row), dtype=bool)
    current = row[0]
    starts[0] = True
    for j in range(1, len(row)):
        if row[j] - current >= np.finfo(np.float64).resolution:
            starts[j] = True
            current = row[j]
    return starts


def test_group_starts_follow_sklearns_sequential_rule():
    rng = np.random.default_rng(0)
    e = np.finfo(np.float64).resolution
    rows = []
    for _ in range(50):
        gaps = rng.choice([0.0, 0.2 * e, 0.7 * e, 1.0 * e, 3 * e, 1e-3], size=60, p=[0.2, 0.3, 0.2, 0.1, 0.1, 0.1])
        rows.append(np.sort(rng.uniform(0, 0.5) + np.cumsum(gaps)))
    rows = np.array(rows)
    got = _group_starts(rows)
    for r in range(len(rows)):
        np.testing.assert_array_equal(got[r], _make_unique_starts(rows[r]))


def test_iso_maps_are_non_decreasing(rng):
    logits, labels = sample_problem(rng, 600, 5)
    knots = isotonic_knots(torch.softmax(_t(logits)[None], -1), _t(labels))
    grid = np.linspace(0, 1, 2001)
    values = isotonic_values(knots, _t(np.repeat(grid[:, None], 5, axis=1))[None])[0].numpy()
    assert np.all(np.diff(values, axis=0) >= 0)
    assert values.min() >= 0 and values.max() <= 1


# ---------------------------------------------------------------------------------------
# Histogram binning against netcal 1.4.0


def _netcal_hist(p_val, y_val, p_test, bins=15):
    from netcal.binning import HistogramBinning

    model = HistogramBinning(bins=bins)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(p_val, y_val)
        out = model.transform(p_test)
    return model, out


def _netcal_bin_map(model, k):
    return {label: m for label, m in model._multiclass_instances}[k]._bin_map


def test_hist_matches_netcal_off_the_edges(rng):
    logits, labels = sample_problem(rng, 1500, 5)
    z_val, y_val, z_test, _ = _split(logits, labels, 600)
    p_val, p_test = _softmax(z_val), _softmax(z_test)
    edges = np.linspace(0, 1, 16)
    assert not np.isin(p_val, edges).any() and not np.isin(p_test, edges).any()
    fitted = fit_histogram_binning(_t(z_val)[None], _t(y_val))
    _, expected = _netcal_hist(p_val, y_val, p_test)
    got = fitted.probs(_t(z_test)[None])[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    empty = 0
    for k in range(5):
        in_bin = np.clip(np.ceil(p_val[:, k] * 15).astype(int) - 1, 0, 14)
        for b in range(15):
            sel = in_bin == b
            empty += not sel.any()
            want = (y_val[sel] == k).mean() if sel.any() else (edges[b] + edges[b + 1]) / 2
            assert fitted.params["bin_values"][0, k, b].item() == pytest.approx(want, abs=1e-15)
    assert fitted.info["empty_bins"][0] == empty / 75


def test_hist_edge_value_uses_one_rule_netcal_two(rng):
    # p_k = 0.2 exactly (zero logits, K = 5) lies on the edge between bins 2 = (2/15, 3/15]
    # and 3 = (3/15, 4/15]. The spec puts it in bin 2 when fitting and predicting; netcal
    # fits it into bin 3 ([lo, hi) via binned_statistic_dd) but predicts it from bin 2.
    logits, labels = sample_problem(rng, 400, 5)
    z_val = np.concatenate([logits, np.zeros((10, 5))])
    y_val = np.concatenate([labels, np.zeros(10, dtype=int)])  # the ten edge rows are class 0
    p_val = _softmax(z_val)
    assert np.sum(p_val[:, 0] == 0.2) == 10 and np.linspace(0, 1, 16)[3] == 0.2
    z_test = np.zeros((1, 5))
    fitted = fit_histogram_binning(_t(z_val)[None], _t(y_val))
    model, netcal_out = _netcal_hist(p_val, y_val, _softmax(z_test))

    p0, hit0 = p_val[:, 0], y_val == 0
    lo, mid_edge, hi = 2 / 15, 0.2, 4 / 15
    ours_bin2 = hit0[(p0 > lo) & (p0 <= mid_edge)].mean()  # includes the ten edge rows
    netcal_bin2 = hit0[(p0 >= lo) & (p0 < mid_edge)].mean()  # excludes them
    netcal_bin3 = hit0[(p0 >= mid_edge) & (p0 < hi)].mean()  # includes them
    assert fitted.params["bin_values"][0, 0, 2].item() == pytest.approx(ours_bin2, abs=1e-15)
    assert _netcal_bin_map(model, 0)[2] == pytest.approx(netcal_bin2, abs=1e-15)
    assert _netcal_bin_map(model, 0)[3] == pytest.approx(netcal_bin3, abs=1e-15)
    assert ours_bin2 != pytest.approx(netcal_bin2)

    # Prediction: both read bin 2 for p = 0.2, but bin 2 holds different samples.
    ours_raw = fitted.params["bin_values"][0, :, 2].numpy()
    netcal_raw = np.array([_netcal_bin_map(model, k)[2] for k in range(5)])
    np.testing.assert_allclose(fitted.probs(_t(z_test)[None])[0, 0].numpy(), ours_raw / ours_raw.sum(), atol=1e-15)
    np.testing.assert_allclose(netcal_out[0], netcal_raw / netcal_raw.sum(), atol=1e-15)
    assert not np.allclose(fitted.probs(_t(z_test)[None])[0, 0].numpy(), netcal_out[0])


def test_hist_absent_class_and_zero_rows_differ_from_netcal_on_purpose(rng):
    logits, labels = sample_problem(rng, 800, 4)
    labels = np.where(labels == 3, 0, labels)
    z_val, y_val, z_test, _ = _split(logits, labels, 400)
    fitted = fit_histogram_binning(_t(z_val)[None], _t(y_val))
    values = fitted.params["bin_values"][0, 3].numpy()
    edges = np.linspace(0, 1, 16)
    counts = np.bincount(np.clip(np.ceil(_softmax(z_val)[:, 3] * 15).astype(int) - 1, 0, 14), minlength=15)
    # Spec: 0 where the bin has samples, the midpoint where it is empty; netcal: 0 everywhere.
    np.testing.assert_array_equal(values, np.where(counts > 0, 0.0, (edges[:-1] + edges[1:]) / 2))
    _, netcal_out = _netcal_hist(_softmax(z_val), y_val, _softmax(z_test))
    assert np.all(netcal_out[:, 3] == 0)

    # A test row whose three bins hold validation samples of other labels only maps to
    # zeros -> uniform (netcal: 0 / 0 = NaN). Row (0.4, 0.3, 0.3): class 0 reads bin 5 =
    # (5/15, 6/15], classes 1 and 2 bin 4 = (4/15, 5/15].
    z_val = np.log(np.array([[0.38, 0.6, 0.02], [0.68, 0.3, 0.02], [0.02, 0.68, 0.3]]))
    y_val = np.array([1, 0, 1])
    z_mid = np.log(np.array([[0.4, 0.3, 0.3]]))
    fitted = fit_histogram_binning(_t(z_val)[None], _t(y_val))
    np.testing.assert_array_equal(fitted.params["bin_values"][0, [0, 1, 2], [5, 4, 4]].numpy(), 0.0)
    np.testing.assert_allclose(fitted.probs(_t(z_mid)[None])[0, 0].numpy(), 1 / 3, atol=1e-15)
    _, netcal_out = _netcal_hist(_softmax(z_val), y_val, _softmax(z_mid))
    assert np.isnan(netcal_out).all()


# ---------------------------------------------------------------------------------------
# Spline recalibration against a plain transcription of Gupta et al.'s algorithm


def _natural_spline_rows(t, n_knots):
    """Value and derivative rows of the least-squares natural cubic spline in its knot values."""
    h = 1.0 / (n_knots - 1)
    # Second derivatives from knot values: M_{i-1} + 4 M_i + M_{i+1} = 6/h^2 (y_{i-1} - 2 y_i + y_{i+1}),
    # M_0 = M_{n-1} = 0 (natural).
    a = np.zeros((n_knots - 2, n_knots - 2))
    b = np.zeros((n_knots - 2, n_knots))
    for i in range(n_knots - 2):
        a[i, i] = 4.0
        if i > 0:
            a[i, i - 1] = 1.0
        if i < n_knots - 3:
            a[i, i + 1] = 1.0
        b[i, i], b[i, i + 1], b[i, i + 2] = 1.0, -2.0, 1.0
    second = np.zeros((n_knots, n_knots))
    second[1:-1] = np.linalg.inv(a) @ b * (6.0 / h**2)
    value = np.zeros((len(t), n_knots))
    deriv = np.zeros((len(t), n_knots))
    for i, ti in enumerate(t):
        j = min(max(int(np.floor(ti / h)), 0), n_knots - 2)
        x = ti - j * h
        vm, vy, dm, dy = (np.zeros(n_knots) for _ in range(4))
        vm[j] = -x**3 / (6 * h) + x**2 / 2 - h * x / 3
        vm[j + 1] = x**3 / (6 * h) - h * x / 6
        vy[j], vy[j + 1] = 1 - x / h, x / h
        dm[j] = -x**2 / (2 * h) + x - h / 3
        dm[j + 1] = x**2 / (2 * h) - h / 6
        dy[j], dy[j + 1] = -1 / h, 1 / h
        value[i] = vm @ second + vy
        deriv[i] = dm @ second + dy
    return value, deriv


def _reference_spline(z_val, y_val, z_test, n_knots=6):
    """One network, loops: Gupta et al. 2021's top-1 spline recalibration as the spec
    states it (stable sort, factor N/(N-1), tied scores averaged, correct interpolation
    weights), and the spec's full vector."""
    p = _softmax(z_val)
    s, a = p.max(axis=1), (p.argmax(axis=1) == y_val).astype(float)
    order = np.argsort(s, kind="stable")
    s, a = s[order], a[order]
    n = len(s)
    t = np.linspace(0, 1, n)
    value, deriv = _natural_spline_rows(t, n_knots)
    knot_values = np.linalg.lstsq(value, np.cumsum(a) / n - np.cumsum(s) / n, rcond=None)[0]
    gamma = s + deriv @ knot_values * n / (n - 1)
    xs = np.unique(s)
    gs = np.array([gamma[s == x].mean() for x in xs])

    def recalibrate(score):
        if score <= xs[0]:
            return gs[0]
        if score >= xs[-1]:
            return gs[-1]
        i = int(np.searchsorted(xs, score, side="left"))  # first xs[i] >= score
        if xs[i] == score:
            return gs[i]
        alpha, beta = score - xs[i - 1], xs[i] - score
        return (alpha * gs[i] + beta * gs[i - 1]) / (alpha + beta)

    p_test = _softmax(z_test)
    out = np.empty_like(p_test)
    for i, row in enumerate(p_test):
        top = int(np.argmax(row))
        g = min(max(recalibrate(row[top]), 0.0), 1.0)
        rest = np.delete(row, top).sum()  # = 1 - p_top, without its cancellation
        if rest == 0:
            out[i] = (1 - g) / (len(row) - 1)
        else:
            out[i] = row * (1 - g) / rest
        out[i, top] = g
    return out, knot_values


def test_spline_matches_the_reference_transcription(rng):
    for n_val, k, seed in [(300, 5, 0), (1000, 10, 1), (57, 3, 2)]:
        logits, labels = sample_problem(np.random.default_rng(seed), n_val + 400, k)
        z_val, y_val, z_test, _ = _split(logits, labels, n_val)
        z_test = np.concatenate([z_test, z_val[:50], 3 * z_test[:20], 0.1 * z_test[:20]])  # knots, outside
        fitted = fit_spline(_t(z_val)[None], _t(y_val))
        expected, knot_values = _reference_spline(z_val, y_val, z_test)
        np.testing.assert_allclose(fitted.params["knot_values"][0].numpy(), knot_values, rtol=1e-10, atol=1e-14)
        got = fitted.probs(_t(z_test)[None])[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_spline_gamma_uses_the_specs_factor_n_over_n_minus_one():
    """Step 3 of the spec, ``gamma_i = s_i + D'(t_i) N/(N-1)``, computed independently:
    the natural-spline basis from scipy's CubicSpline (one spline per unit knot vector),
    the knot values by numpy least squares. Hand-picked scores, N = 7, no ties."""
    from scipy.interpolate import CubicSpline

    from calibench.recalibration.spline import spline_table

    s = np.array([0.35, 0.9, 0.5, 0.62, 0.97, 0.41, 0.77])
    a = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    z = np.stack([np.log(s), np.log((1 - s) / 2), np.log((1 - s) / 2)], axis=1)  # p_top = s, class 0
    labels = np.where(a == 1, 0, 1)
    order = np.argsort(s)
    s_sorted, a_sorted = s[order], a[order]
    n = len(s)
    t = np.arange(n) / (n - 1)
    knots = np.linspace(0, 1, 6)
    bases = [CubicSpline(knots, np.eye(6)[j], bc_type="natural") for j in range(6)]
    value = np.stack([b(t) for b in bases], axis=1)
    deriv = np.stack([b(t, 1) for b in bases], axis=1)
    d = (np.cumsum(a_sorted) - np.cumsum(s_sorted)) / n
    knot_values = np.linalg.lstsq(value, d, rcond=None)[0]
    expected = s_sorted + deriv @ knot_values * n / (n - 1)
    table = spline_table(_t(z)[None], _t(labels))
    np.testing.assert_allclose(table["s"][0].numpy(), s_sorted, rtol=0, atol=1e-15)
    np.testing.assert_allclose(table["gamma"][0].numpy(), expected, rtol=0, atol=1e-12)
    wrong = s_sorted + deriv @ knot_values * (n - 1) / n  # the factor the spec had inverted
    assert np.abs(table["gamma"][0].numpy() - wrong).max() > 1e-3


def test_spline_score_on_a_knot_gets_its_own_value(rng):
    # The authors' interpolation swaps its weights, so a score equal to a validation score
    # gets its predecessor's value; ours gets its own (tied scores: their mean).
    logits, labels = sample_problem(rng, 400, 4)
    z_val = np.concatenate([logits, logits[:30]])  # 30 tied pairs
    y_val = np.concatenate([labels, (labels[:30] + 1) % 4])
    fitted = fit_spline(_t(z_val)[None], _t(y_val))
    x, y = fitted.params["x"][0].numpy(), fitted.params["y"][0].numpy()
    got = fitted.probs(_t(z_val)[None])[0].numpy()
    s = _softmax(z_val)
    top = s.argmax(axis=1)
    idx = np.searchsorted(x, s.max(axis=1))
    np.testing.assert_array_equal(x[idx], s.max(axis=1))
    np.testing.assert_allclose(got[np.arange(len(top)), top], np.clip(y[idx], 0, 1), rtol=0, atol=1e-15)


def test_spline_brings_ks_error_near_zero_on_held_out_samples():
    from calibench.metrics import binned
    from calibench.metrics.ks import ks_from_sorted
    from calibench.recalibration.nonparametric import segment_slopes
    from calibench.recalibration.spline import spline_scores

    rng = np.random.default_rng(7)
    n, k = 60_000, 10
    base = rng.normal(size=(n, k)) * 2.0
    labels = (rng.random((n, 1)) > np.cumsum(_softmax(base), axis=1)).sum(axis=1).clip(max=k - 1)
    scales = [2.0, 1.3, 0.8, 0.6]  # over- and underconfident copies of the true logits
    z, y = _t(np.stack([base * c for c in scales])), _t(labels)
    fitted = fit_spline(z[:, :30_000], y[:30_000])
    z_test, y_test = z[:, 30_000:], y[30_000:]
    probs = fitted.probs(z_test)
    s, top = torch.softmax(z_test, -1).max(-1)
    table = {"x": fitted.params["x"], "y": fitted.params["y"]}
    gamma = spline_scores({**table, "slope": segment_slopes(table["x"], table["y"])}, s)
    for m, scale in enumerate(scales):
        before = ksce(torch.softmax(z_test[m], -1), y_test)
        after = ksce(probs[m], y_test)
        # The authors' measure: KS of the recalibrated top score against the original hit.
        top_score = ks_from_sorted(binned.sort_rows(gamma[m : m + 1], (top[m] == y_test).double()[None]))[0]
        flips = (probs[m].argmax(-1) != top[m]).double().mean()
        assert before > 0.05 and top_score < 0.01 and after < before
        if scale < 1:  # gamma > p_top: the arg-max never changes, the full vector is calibrated too
            assert flips == 0 and after < 0.01
        else:  # gamma < 1/2 with a close second: step 5 moves the arg-max (spec), the KS error stays higher
            assert flips > 0.05 and after > top_score


# ---------------------------------------------------------------------------------------
# Properties shared by the three methods


@pytest.mark.parametrize("method", sorted(FITS))
def test_rows_sum_to_one_and_batched_equals_one_at_a_time(method, rng):
    nets = [sample_problem(np.random.default_rng(s), 700, 7, scale=sc) for s, sc in [(1, 3.0), (2, 8.0), (3, 1.0)]]
    labels = nets[0][1]
    z = _t(np.stack([n[0] for n in nets]))
    fitted = FITS[method](z[:, :300], _t(labels[:300]))
    probs = fitted.probs(z[:, 300:])
    assert probs.shape == (3, 400, 7)
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, rtol=0, atol=1e-12)
    assert fitted.failures == [None] * 3
    for key, v in fitted.info.items():
        assert v.shape == (3,) and v.dtype == np.float64, key
    assert np.all(fitted.info["converged"] == 1) and np.all(fitted.info["iterations"] == 0)
    for m in range(3):
        alone = FITS[method](z[m : m + 1, :300], _t(labels[:300]))
        np.testing.assert_allclose(alone.probs(z[m : m + 1, 300:])[0].numpy(), probs[m].numpy(), rtol=0, atol=1e-13)
        for key in fitted.info:
            assert alone.info[key][0] == pytest.approx(fitted.info[key][m], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("method", sorted(FITS))
def test_constant_logits_give_finite_constant_outputs(method, rng):
    row = rng.normal(size=(1, 6))
    z = _t(np.repeat(row, 200, axis=0))[None]
    labels = _t(rng.integers(0, 6, size=200))
    fitted = FITS[method](z[:, :80], labels[:80])
    probs = fitted.probs(z[:, 80:])[0]
    assert torch.isfinite(probs).all()
    assert torch.equal(probs, probs[:1].expand_as(probs))
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, rtol=0, atol=1e-12)
    assert not torch.isnan(fitted.logits(z[:, 80:])).any() and not torch.isposinf(fitted.logits(z[:, 80:])).any()
    assert fitted.failures == [None]


@pytest.mark.parametrize("method", sorted(FITS))
def test_degenerate_validation_sets_do_not_crash(method, rng):
    logits, _ = sample_problem(rng, 300, 4)
    z = _t(logits)[None]
    for labels in (np.zeros(100, dtype=int), np.r_[np.zeros(99, dtype=int), 3], np.arange(100) % 2):
        fitted = FITS[method](z[:, :100], _t(labels))
        probs = fitted.probs(z[:, 100:])
        assert torch.isfinite(probs).all()
        np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, rtol=0, atol=1e-12)
    fitted = FITS[method](z[:, :1], _t([2]))  # a single validation sample
    assert torch.isfinite(fitted.probs(z[:, 1:])).all()


def test_iso_with_one_class_only_is_one_hot(rng):
    logits, _ = sample_problem(rng, 300, 4)
    fitted = fit_isotonic(_t(logits[:100])[None], _t(np.full(100, 2)))
    probs = fitted.probs(_t(logits[100:])[None])[0].numpy()
    np.testing.assert_array_equal(probs, np.tile([0.0, 0.0, 1.0, 0.0], (200, 1)))
    assert fitted.info["absent_classes"][0] == 3


@pytest.mark.parametrize("method", sorted(FITS))
def test_bad_inputs_are_rejected(method):
    z = torch.zeros(1, 10, 3, dtype=torch.float64)
    with pytest.raises(ValueError):
        FITS[method](z, torch.full((10,), 3))
    z[0, 0, 0] = float("nan")
    with pytest.raises(ValueError):
        FITS[method](z, torch.zeros(10, dtype=torch.int64))
