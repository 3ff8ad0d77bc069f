"""calibench.analysis.stats: Kendall tau-b in O(n log n) and its seeded bootstrap intervals, checked
against scipy.stats.kendalltau (one call per resample, on the resampled arrays) and
against analysis.kendall_matrix / kendall_cross."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import kendalltau

from calibench.analysis import kendall as ak
from calibench.analysis import bootstrap as bs
from calibench.analysis import stats as st
from calibench.analysis import tau_b


def scipy_tau(x, y) -> float:
    """analysis' policy: drop the rows with a NaN, NaN below two rows."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.sum() < 2:
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on a constant input
        return float(kendalltau(x[keep], y[keep]).statistic)


def loop_taus(x, y, resamples, seed):
    """The plain bootstrap loop of the issue, one scipy call per resample."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(resamples):
        idx = rng.integers(0, len(x), len(x))
        out.append(scipy_tau(x[idx], y[idx]))
    return np.array(out)


def same(a, b, tol=1e-12):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= tol)))


def tied_data(rng, n, nan=0.1, inf=0.05):
    """x with few distinct values, y rounded (ties in both, joint ties), some NaN and +inf."""
    x = rng.integers(0, max(1, n // 4), n).astype(float)
    y = np.round(x * 0.3 + rng.normal(size=n), 1)
    x[rng.random(n) < nan] = np.nan
    y[rng.random(n) < nan] = np.nan
    y[rng.random(n) < inf] = np.inf
    x[rng.random(n) < inf] = -np.inf
    return x, y


# ---------------------------------------------------------------- tau-b

def test_inversions_brute_force(rng):
    for n in [0, 1, 2, 3, 5, 8, 17, 64, 100]:
        s = rng.permutation(n)
        brute = sum(int(s[i] > s[j]) for i in range(n) for j in range(i + 1, n))
        assert tau_b._inversions(s) == brute


def test_kendall_tau_equals_scipy_with_ties_nan_inf(rng):
    for trial in range(300):
        n = int(rng.integers(0, 120))
        x, y = tied_data(rng, n)
        if trial % 3 == 0:
            y = rng.normal(size=n)  # no ties in y
        if trial % 7 == 0:
            x = y.copy()            # tau = 1 (or NaN)
        got, ref = st.kendall_tau(x, y), scipy_tau(x, y)
        assert same(got, ref), (trial, got, ref)
    x, y = tied_data(rng, 20000)
    assert abs(st.kendall_tau(x, y) - scipy_tau(x, y)) <= 1e-12
    x = rng.normal(size=30000)
    y = x + rng.normal(size=30000)
    assert abs(st.kendall_tau(x, y) - scipy_tau(x, y)) <= 1e-12
    assert st.kendall_tau(x, -x) == -1.0 and st.kendall_tau(x, 2 * x) == 1.0
    assert st.kendall_tau([0.0, -0.0, 1.0], [1.0, 2.0, 3.0]) == scipy_tau([0.0, -0.0, 1.0], [1.0, 2.0, 3.0])


def test_kendall_tau_degenerate_inputs_are_nan():
    nan = np.nan
    assert np.isnan(st.kendall_tau([], []))
    assert np.isnan(st.kendall_tau([1.0], [2.0]))
    assert np.isnan(st.kendall_tau([1.0, nan, 3.0], [nan, 2.0, 3.0]))  # one complete row
    assert np.isnan(st.kendall_tau([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # constant x
    assert np.isnan(st.kendall_tau([1.0, 2.0, 3.0], [np.inf] * 3))     # constant y
    assert st.kendall_tau([1.0, 2.0], [5.0, 3.0]) == -1.0


# ---------------------------------------------------------------- resamples

def test_bootstrap_indices_are_the_plain_loop():
    idx = st.bootstrap_indices(13, 40, seed=7)
    rng = np.random.default_rng(7)
    assert idx.shape == (40, 13)
    for row in idx:
        assert np.array_equal(row, rng.integers(0, 13, 13))


def test_bootstrap_taus_equal_scipy_loop_on_tiny_table(rng):
    for seed in range(6):
        n = [2, 3, 5, 9, 12, 25][seed]
        x, y = tied_data(rng, n, nan=0.15)
        got = st.bootstrap_taus(x, y, resamples=300, seed=seed)
        ref = loop_taus(x, y, 300, seed)
        assert same(got, ref), seed
        assert np.isfinite(ref).any() or n < 4


@pytest.mark.parametrize("n", [700, 3000])
def test_bootstrap_taus_equal_scipy_loop_over_many_blocks(rng, n):
    """Several position and value blocks, ties and NaN: every part of the block split."""
    x, y = tied_data(rng, n)
    assert same(st.bootstrap_taus(x, y, resamples=6, seed=3), loop_taus(x, y, 6, 3))
    x = rng.normal(size=n)
    y = x + rng.normal(size=n)
    assert same(st.bootstrap_taus(x, y, resamples=6, seed=4), loop_taus(x, y, 6, 4))


def test_float64_path_and_wide_counts_give_the_same_taus(rng, monkeypatch):
    x, y = tied_data(rng, 500)
    fast = st.bootstrap_taus(x, y, resamples=20, seed=1)
    monkeypatch.setattr(bs, "_INT32", 1)  # the block histogram's products in float64
    assert np.array_equal(fast, st.bootstrap_taus(x, y, resamples=20, seed=1), equal_nan=True)
    monkeypatch.setattr(bs, "_EXACT_F32", 1)  # nothing is exact in float32: all float64
    assert np.array_equal(fast, st.bootstrap_taus(x, y, resamples=20, seed=1), equal_nan=True)
    monkeypatch.undo()
    # a row drawn 300 times (int32 multiplicities), against scipy on the repeated arrays
    keep = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    plan = bs._BlockPlan(keep, tau_b._dense_ranks(x[keep]), tau_b._dense_ranks(y[keep]), len(x))
    w = np.ones((len(x) + 1, 2), np.int32)
    w[-1] = 0
    w[keep[3], 0] = 300
    w[keep[:50], 1] = 0
    got = plan.taus(bs._Counts(torch.from_numpy(w), 300))
    for b in range(2):
        idx = np.repeat(np.arange(len(x)), w[:-1, b])
        assert abs(got[b] - scipy_tau(x[idx], y[idx])) <= 1e-12


def test_bootstrap_taus_without_resampling_is_tau(rng):
    """All multiplicities 1: the plan gives the sample's own tau."""
    x, y = tied_data(rng, 2000)
    keep = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    plan = bs._BlockPlan(keep, tau_b._dense_ranks(x[keep]), tau_b._dense_ranks(y[keep]), len(x))
    w = np.ones((len(x) + 1, 1), np.uint8)
    w[-1] = 0
    assert abs(plan.taus(bs._Counts(torch.from_numpy(w), 1))[0] - scipy_tau(x, y)) <= 1e-12


# ---------------------------------------------------------------- intervals

def test_interval_contains_tau_and_shrinks_with_n(rng):
    widths = []
    for n in (200, 800, 3200):
        x = rng.normal(size=n)
        y = x + 1.5 * rng.normal(size=n)
        tau, lo, hi = st.kendall_bootstrap(x, y, resamples=400, seed=0)
        assert tau == st.kendall_tau(x, y)
        assert lo < tau < hi
        widths.append(hi - lo)
    assert widths[0] > 1.5 * widths[1] > 2.25 * widths[2]


def test_interval_is_the_percentile_interval(rng):
    x, y = tied_data(rng, 60)
    taus = loop_taus(x, y, 500, 11)
    ok = taus[~np.isnan(taus)]
    for level in (0.95, 0.5):
        tau, lo, hi = st.kendall_bootstrap(x, y, resamples=500, seed=11, level=level)
        assert tau == st.kendall_tau(x, y)
        assert same([lo, hi], np.quantile(ok, [(1 - level) / 2, (1 + level) / 2]))
    _, lo50, hi50 = st.kendall_bootstrap(x, y, resamples=500, seed=11, level=0.5)
    _, lo95, hi95 = st.kendall_bootstrap(x, y, resamples=500, seed=11)
    assert lo95 <= lo50 <= hi50 <= hi95


def test_seeded_and_deterministic(rng):
    x, y = tied_data(rng, 400)
    a = st.kendall_bootstrap(x, y, resamples=100, seed=5)
    assert a == st.kendall_bootstrap(x, y, resamples=100, seed=5)
    assert a != st.kendall_bootstrap(x, y, resamples=100, seed=6)
    # the first resamples do not depend on how many are drawn after them
    assert np.array_equal(st.bootstrap_taus(x, y, 100, 5)[:30], st.bootstrap_taus(x, y, 30, 5), equal_nan=True)


def test_degenerate_bootstrap_results():
    nan = np.nan
    assert all(np.isnan(st.kendall_bootstrap([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])))   # constant column
    assert all(np.isnan(st.kendall_bootstrap([1.0], [2.0])))                       # n < 2
    assert all(np.isnan(st.kendall_bootstrap([], [])))
    assert all(np.isnan(st.kendall_bootstrap([1.0, nan], [nan, 2.0])))
    assert np.isnan(st.bootstrap_taus([1.0, 1.0], [1.0, 2.0], 10)).all()
    # two rows: a resample drawing one row twice is undefined and left out
    taus = st.bootstrap_taus([1.0, 2.0], [1.0, 2.0], resamples=50, seed=0)
    assert set(taus[~np.isnan(taus)]) == {1.0} and np.isnan(taus).any()
    assert st.kendall_bootstrap([1.0, 2.0], [1.0, 2.0], resamples=50) == (1.0, 1.0, 1.0)


# ---------------------------------------------------------------- tables

def table(rng, n=150):
    x, y = tied_data(rng, n)
    return pd.DataFrame({"a": x, "b": y, "c": rng.normal(size=n) + np.nan_to_num(y, posinf=3.0),
                         "const": np.ones(n), "few": np.where(np.arange(n) < 1, 1.0, np.nan)})


def test_matrix_ci_matches_kendall_matrix_and_pairwise_bootstrap(rng):
    df = table(rng)
    cols = list(df.columns)
    out = st.kendall_matrix_ci(df, cols, resamples=200, seed=3)
    ref = ak.kendall_matrix(df, cols)
    assert list(out.columns) == ["row", "col", "tau", "lo", "hi", "n", "interval"]
    assert set(out.interval[out.tau.notna() & (out.row != out.col)]) == {"bootstrap"}
    assert out.interval[(out.row == out.col) | out.tau.isna()].isna().all()
    assert list(zip(out.row, out.col)) == list(zip(ref.row, ref.col))
    assert same(out.tau, ref.tau) and list(out.n) == list(ref.n)
    for r in out.itertuples():
        flipped = out[(out.row == r.col) & (out.col == r.row)].iloc[0]
        assert same([r.tau, r.lo, r.hi], [flipped.tau, flipped.lo, flipped.hi])
        if r.row == r.col:
            assert same([r.lo, r.hi], [r.tau, r.tau])
        else:  # the same resamples of all len(df) rows as kendall_bootstrap on the two columns
            assert same([r.tau, r.lo, r.hi], st.kendall_bootstrap(df[r.row], df[r.col], 200, 3))
        if np.isnan(r.tau):
            assert np.isnan(r.lo) and np.isnan(r.hi)
        else:
            assert r.lo <= r.tau <= r.hi or r.row == r.col
    by = out.set_index(["row", "col"])
    assert by.loc[("const", "const"), "tau"] == 1.0 and np.isnan(by.loc[("a", "const"), "tau"])
    assert np.isnan(by.loc[("few", "few"), "tau"]) and by.loc[("few", "few"), "n"] == 1


def test_cross_ci_matches_kendall_cross(rng):
    df = table(rng)
    rows, cols = ["a", "b"], ["b", "c", "const"]
    out = st.kendall_cross_ci(df, rows, cols, resamples=100, seed=2)
    ref = ak.kendall_cross(df, rows, cols)
    assert list(zip(out.row, out.col)) == list(zip(ref.row, ref.col))
    assert same(out.tau, ref.tau) and list(out.n) == list(ref.n)
    full = st.kendall_matrix_ci(df, ["a", "b", "c", "const"], resamples=100, seed=2).set_index(["row", "col"])
    for r in out.itertuples():
        if r.row != r.col:
            assert same([r.tau, r.lo, r.hi], full.loc[(r.row, r.col), ["tau", "lo", "hi"]].to_numpy(float))


def test_bad_input_raises_naming_the_argument(rng):
    x = rng.normal(size=10)
    df = pd.DataFrame({"a": x, "b": x, "s": ["u"] * 10})
    cases = [
        (lambda: st.kendall_tau(np.ones((2, 5)), np.ones(10)), "x"),
        (lambda: st.kendall_tau(x, ["p"] * 10), "y"),
        (lambda: st.kendall_tau(x, x[:5]), "same length"),
        (lambda: st.kendall_bootstrap(x, x, resamples=0), "resamples"),
        (lambda: st.kendall_bootstrap(x, x, resamples=2.5), "resamples"),
        (lambda: st.kendall_bootstrap(x, x, resamples=True), "resamples"),
        (lambda: st.kendall_bootstrap(x, x, seed=-1), "seed"),
        (lambda: st.kendall_bootstrap(x, x, seed="s"), "seed"),
        (lambda: st.kendall_bootstrap(x, x, level=1.0), "level"),
        (lambda: st.kendall_bootstrap(x, x, level=0), "level"),
        (lambda: st.bootstrap_taus(x, x, resamples=-3), "resamples"),
        (lambda: st.bootstrap_indices(-1, 3), "n"),
        (lambda: st.kendall_matrix_ci(df, ["a", "zz"]), "columns"),
        (lambda: st.kendall_matrix_ci(df, "a"), "columns"),
        (lambda: st.kendall_matrix_ci(df, ["a", "a"]), "columns"),
        (lambda: st.kendall_matrix_ci(df, ["a", "s"]), "columns"),
        (lambda: st.kendall_matrix_ci(x, ["a"]), "df"),
        (lambda: st.kendall_matrix_ci(df, ["a", "b"], level=2), "level"),
        (lambda: st.kendall_cross_ci(df, ["a"], ["nope"]), "cols"),
        (lambda: st.kendall_cross_ci(df, ["nope"], ["a"]), "rows"),
    ]
    for call, word in cases:
        with pytest.raises(ValueError, match=word):
            call()


def test_public_names():
    assert set(st.__all__) == {"kendall_tau", "bootstrap_indices", "bootstrap_taus", "kendall_bootstrap",
                               "jackknife_taus", "kendall_jackknife", "kendall_matrix_ci", "kendall_cross_ci",
                               "interval_side", "perfect_ranking_p", "wilcoxon_paired", "paired_lower", "too_few",
                               "welch_interval"}
    assert all(callable(getattr(st, name)) for name in st.__all__)
    assert list(itertools.islice(bs._index_rows(0, 2, 0), 2))[0].shape == (0,)


# ---------------------------------------------------------------- jackknife

def test_jackknife_taus_equal_scipy_without_each_row(rng):
    """Leave-one-out taus against the plain loop (scipy on the rows without row i), with
    ties in x, in y and in both, NaN rows, +inf values and tiny inputs."""
    for trial in range(120):
        n = int(rng.integers(3, 25))
        x = rng.integers(0, int(rng.integers(1, 6)), n).astype(float)
        y = rng.integers(0, int(rng.integers(1, 6)), n) + 0.5 * x
        if trial % 3 == 0:
            x[rng.integers(0, n)] = np.nan
        if trial % 5 == 0:
            y[rng.integers(0, n)] = np.inf
        keep = ~(np.isnan(x) | np.isnan(y))
        xs, ys = x[keep], y[keep]
        want = [scipy_tau(np.delete(xs, i), np.delete(ys, i)) for i in range(len(xs))] if len(xs) >= 3 \
            else [np.nan] * len(xs)
        got = st.jackknife_taus(x, y)
        assert len(got) == keep.sum()
        assert same(got, want), (x, y)


def test_discordances_per_position_against_loop(rng):
    for n in (2, 3, 7, 64, 65, 200):
        s = rng.permutation(n)
        want = [sum(1 for q in range(n) if (q < p and s[q] > s[p]) or (q > p and s[q] < s[p])) for p in range(n)]
        got = tau_b._discordant_per_position(s)
        assert list(got) == want and got.sum() == 2 * tau_b._inversions(s)


def test_kendall_jackknife_interval_formula_and_agreement_with_bootstrap(rng):
    x, y = tied_data(rng, 400)
    tau, lo, hi = st.kendall_jackknife(x, y, 0.9)
    loo = np.array([v for v in st.jackknife_taus(x, y) if not np.isnan(v)])
    se = np.sqrt((len(loo) - 1) / len(loo) * np.sum((loo - loo.mean()) ** 2))
    z = 1.6448536269514722  # the 95 % quantile of the standard normal
    assert tau == st.kendall_tau(x, y)
    assert lo == pytest.approx(max(-1, tau - z * se), abs=1e-15) and hi == pytest.approx(min(1, tau + z * se), abs=1e-15)
    # an independent estimate of the same spread: the bootstrap's interval, at a size where
    # both are close to normal theory
    x = rng.normal(size=4000)
    y = np.round(x + 2 * rng.normal(size=4000), 1)
    _, jlo, jhi = st.kendall_jackknife(x, y)
    _, blo, bhi = st.kendall_bootstrap(x, y, 1000, 0)
    assert abs((jhi - jlo) / (bhi - blo) - 1) < 0.15
    assert abs((jlo + jhi) / 2 - (blo + bhi) / 2) < 0.1 * (bhi - blo)


def test_jackknife_edge_cases():
    assert all(np.isnan(st.kendall_jackknife([1, 2], [1, 2])[1:]))              # two rows: no spread
    assert all(np.isnan(st.kendall_jackknife([1, 1, 1], [1, 2, 3])))            # constant: no tau
    assert st.kendall_jackknife([1, 2, 3, 4], [1, 2, 3, 4]) == (1.0, 1.0, 1.0)  # every leave-one-out is 1
    with pytest.raises(ValueError, match="level"):
        st.kendall_jackknife([1, 2, 3], [1, 2, 3], level=1.0)


def test_interval_choice_per_pair(rng):
    df = table(rng)
    rule = lambda a, b: "bootstrap" if {a, b} == {"a", "b"} else "jackknife"  # noqa: E731
    out = st.kendall_matrix_ci(df, ["a", "b", "c"], resamples=50, seed=1, interval=rule).set_index(["row", "col"])
    assert out.loc[("a", "b"), "interval"] == "bootstrap" == out.loc[("b", "a"), "interval"]
    assert out.loc[("a", "c"), "interval"] == "jackknife"
    assert same(out.loc[("a", "c"), ["tau", "lo", "hi"]], st.kendall_jackknife(df.a, df.c))
    assert same(out.loc[("a", "b"), ["tau", "lo", "hi"]], st.kendall_bootstrap(df.a, df.b, 50, 1))
    cross = st.kendall_cross_ci(df, ["a"], ["b", "c"], 50, 1, interval="jackknife")
    assert list(cross.interval) == ["jackknife", "jackknife"]
    with pytest.raises(ValueError, match="interval"):
        st.kendall_matrix_ci(df, ["a", "b"], interval="normal")
