"""Kendall tau-b and its bootstrap confidence intervals, fast enough for whole populations.

* :func:`kendall_tau`: tau-b with ties in O(n log n), after Knight (1966): sort by x then
  y and count the discordant pairs as inversions (here a bit-by-bit stable partition,
  the radix form of merge-sort inversion counting). Equal to
  ``scipy.stats.kendalltau(x, y).statistic`` on the pairwise-complete rows.
* :func:`kendall_bootstrap`, :func:`kendall_matrix_ci`, :func:`kendall_cross_ci`:
  percentile bootstrap intervals (Efron 1979; Efron & Tibshirani 1993, ch. 13) from
  resampled networks (rows), seeded, with the same resamples for every pair of columns.

* :func:`kendall_jackknife`: tau-b's jackknife normal interval, about 20x cheaper.

What a finding may conclude from them (issue 25: decide only with enough data):
:func:`interval_side` (an interval on one side of a bound; one with NaN decides nothing, a
zero-width one, a perfect ranking, is decided by its exact permutation test) and
:func:`wilcoxon_paired` (paired Wilcoxon signed-rank test,
``scipy.stats.wilcoxon``), each used only from a minimum number of networks (the config's
``analysis.min_networks``).

NaN policy (that of ``analysis.kendall_matrix``): a pair of columns uses the rows where
neither value is NaN; with fewer than two such rows, or a constant column among them,
tau is NaN. Infinite values are ordinary values (ranked, tied with each other).

The counting lives in :mod:`calibench.analysis.tau_b` (tau-b, jackknife) and
:mod:`calibench.analysis.bootstrap` (how resamples are drawn, the same for every pair of a
table's columns, and how each one's tau-b is counted without re-sorting).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

# calibench.analysis.bootstrap computes in torch: imported where a resample is drawn, so the
# report and the parts that only read intervals do not pay torch's import.
from calibench.analysis.tau_b import (_count, _dense_ranks, _jackknife_interval, _level, _pair,
                                      _tau_and_leave_one_out, jackknife_taus, kendall_jackknife, kendall_tau)

__all__ = ["too_few", "welch_interval", "interval_side", "perfect_ranking_p", "wilcoxon_paired", "paired_lower",
           "kendall_tau", "bootstrap_indices",
           "bootstrap_taus", "kendall_bootstrap", "jackknife_taus",
           "kendall_jackknife", "kendall_matrix_ci", "kendall_cross_ci"]


def too_few(n: int) -> str:
    """The words of a finding, claim or test on fewer networks than ``analysis.min_networks``."""
    return f"too few networks to decide (n = {int(n)})"


# ---------------------------------------------------------------- intervals

def welch_interval(mean_a: float, sd_a: float, mean_b: float, sd_b: float, n: int,
                   level: float) -> tuple[float, float]:
    """Welch's t interval at ``level`` of ``mean_a - mean_b``, two means of ``n`` independent
    runs each with sample standard deviations ``sd_a``, ``sd_b`` (ddof 1); (NaN, NaN) where
    it cannot be formed (fewer than 2 runs, an sd missing); zero width where both sds are 0."""
    from scipy.stats import t

    n = int(n)
    va, vb = sd_a ** 2 / max(n, 1), sd_b ** 2 / max(n, 1)
    if n < 2 or not np.isfinite(va + vb):
        return float("nan"), float("nan")
    d = float(mean_a - mean_b)
    if va + vb == 0:
        return d, d
    df = (va + vb) ** 2 / ((va ** 2 + vb ** 2) / (n - 1))
    half = float(t.ppf((1 + level) / 2, df)) * math.sqrt(va + vb)
    return d - half, d + half


def _interval(taus: np.ndarray, level: float) -> tuple[float, float]:
    ok = taus[~np.isnan(taus)]
    if not len(ok):
        return float("nan"), float("nan")
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


ZERO_WIDTH = 1e-9  # taus lie in [-1, 1]: an interval narrower than this is degenerate


def perfect_ranking_p(n: int) -> float:
    """The exact two-sided permutation p-value of a perfect ranking (tau = 1 or -1) of ``n``
    untied networks: 2 / n! (1 for n below 2); below 0.05 from n = 5 on."""
    n = int(n)
    return 1.0 if n < 2 else min(1.0, math.exp(math.log(2.0) - math.lgamma(n + 1)))


def interval_side(lo: float, hi: float, bound: float, n: int = 0, level: float = 0.95) -> bool | None:
    """True if the interval [lo, hi] lies strictly below ``bound``, False if strictly above,
    None if it contains it or is NaN. A zero-width interval (width below :data:`ZERO_WIDTH`,
    the quantiles' rounding, e.g. [0.9999999999999999, 1]) is the bootstrap or jackknife of a
    perfect ranking: there the percentile interval says nothing of the sampling error, so it
    is decided by the exact permutation test of that ranking instead. At tau = 1 or -1 it
    decides by position when :func:`perfect_ranking_p` of the ``n`` networks is below
    ``1 - level`` (e.g. [1, 1] of 30 networks lies above 0), and is None with fewer networks
    (3 networks in agreement: p = 1/3) or at any other value."""
    lo, hi = float(lo), float(hi)
    if np.isnan(lo) or np.isnan(hi):
        return None
    if not hi - lo > ZERO_WIDTH:
        if abs(lo) < 1 - ZERO_WIDTH or perfect_ranking_p(n) >= 1 - level:
            return None
        lo = hi = float(np.sign(lo))
    return True if hi < bound else False if lo > bound else None


def wilcoxon_paired(x, y) -> tuple[float, float, int, float, int]:
    """(statistic, p-value, n, median difference, direction) of the two-sided Wilcoxon
    signed-rank test of the paired differences ``y - x`` (``scipy.stats.wilcoxon``) over the
    pairs where both are finite, zero differences dropped (its default ``zero_method="wilcox"``):
    n counts the non-zero differences the test ranks, the median is theirs, and direction is
    the sign of W+ - W- (the sums of the ranks of |d| of the positive and the negative
    differences: the side the test's evidence lies on). Statistic and p are NaN, direction 0,
    when no difference is non-zero."""
    from scipy.stats import rankdata, wilcoxon

    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-d arrays of one length, got shapes {x.shape} and {y.shape}")
    d = (y - x)[np.isfinite(x) & np.isfinite(y)]
    d = d[d != 0]
    if not len(d):
        return float("nan"), float("nan"), 0, float("nan"), 0
    res = wilcoxon(d)
    direction = int(np.sign(np.sum(np.sign(d) * rankdata(np.abs(d)))))
    return float(res.statistic), float(res.pvalue), len(d), float(np.median(d)), direction


def paired_lower(first, second) -> tuple[float, int]:
    """(p, n) of :func:`wilcoxon_paired` ``(first, second)`` as a test that ``first`` is lower:
    its two-sided p where the signed ranks put ``first`` below ``second``, NaN where they lean
    the other way or no difference is non-zero; n the non-zero differences it ranks."""
    _, p, n, _, direction = wilcoxon_paired(first, second)
    return (p if direction > 0 else float("nan")), n


def bootstrap_taus(x, y, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """tau-b of each of ``resamples`` bootstrap resamples of the rows of (x, y), drawn as
    :func:`bootstrap_indices` ``(len(x), resamples, seed)`` (rows with a NaN are drawn
    like any other and then left out, as in :func:`kendall_tau`); NaN where undefined."""
    x, y = _pair(x, y)
    resamples, seed = _count(resamples, "resamples", 1), _count(seed, "seed", 0)
    keep = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    if len(keep) < 2:
        return np.full(resamples, np.nan)
    from calibench.analysis.bootstrap import _BlockPlan, _chunk, _multiplicities

    plan = _BlockPlan(keep, _dense_ranks(x[keep]), _dense_ranks(y[keep]), len(x))
    return np.concatenate([plan.taus(c) for c in _multiplicities(len(x), resamples, seed, _chunk(len(x), resamples))])


def kendall_bootstrap(x, y, resamples: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(tau, lo, hi): :func:`kendall_tau` and its percentile bootstrap interval (Efron
    1979) at ``level``: the (1 - level)/2 and (1 + level)/2 quantiles of the resample taus
    of :func:`bootstrap_taus` that are defined. All three are NaN when tau is (fewer than
    two complete rows, a constant column); lo and hi are NaN if no resample defines tau."""
    x, y = _pair(x, y)
    resamples, seed, level = _count(resamples, "resamples", 1), _count(seed, "seed", 0), _level(level)
    tau = kendall_tau(x, y)
    if np.isnan(tau):
        return tau, float("nan"), float("nan")
    return (tau, *_interval(bootstrap_taus(x, y, resamples, seed), level))


def _columns(df, names, what: str) -> dict[str, np.ndarray]:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise ValueError(f"{what} must be a sequence of column names, got {names!r}")
    names = list(names)
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: no such column(s) in df: {missing}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: repeated column names: {names}")
    out = {}
    for c in names:
        try:
            out[c] = df[c].to_numpy(dtype=float)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: column {c!r} is not numeric: {e}") from None
        if out[c].ndim != 1:
            raise ValueError(f"{what}: column name {c!r} is not unique in df")
    return out


class _Table:
    """The shared part of a table's intervals: one ranking per column, one set of
    resamples (as multiplicities, drawn on first use) for every pair."""

    def __init__(self, values: dict[str, np.ndarray], resamples: int, seed: int, level: float):
        self.values, self.level, self.resamples, self.seed = values, level, resamples, seed
        self.n = len(next(iter(values.values()))) if values else 0
        self.nan = {c: np.isnan(v) for c, v in values.items()}
        self.ranks = {}
        for c, v in values.items():
            r = np.full(len(v), -1, np.int64)
            r[~self.nan[c]] = _dense_ranks(v[~self.nan[c]])
            self.ranks[c] = r
        self._counts = None

    @property
    def counts(self) -> list:
        if self._counts is None:  # held for every pair: 4 x rows x resamples bytes
            from calibench.analysis.bootstrap import _chunk, _multiplicities

            self._counts = list(_multiplicities(self.n, self.resamples, self.seed, _chunk(self.n, self.resamples)))
        return self._counts

    def pair(self, a: str, b: str, diagonal: bool = True, interval: str = "bootstrap") -> dict:
        keep = np.flatnonzero(~(self.nan[a] | self.nan[b]))
        n = len(keep)
        if a == b and diagonal:  # analysis.kendall_matrix's diagonal: 1 with two or more values
            t = 1.0 if n > 1 else float("nan")
            return {"row": a, "col": b, "tau": t, "lo": t, "hi": t, "n": n, "interval": None}
        if interval == "jackknife" and n >= 3:
            tau, loo = _tau_and_leave_one_out(_redensify(self.ranks[a][keep]), _redensify(self.ranks[b][keep]))
            if np.isnan(tau):
                return {"row": a, "col": b, "tau": tau, "lo": np.nan, "hi": np.nan, "n": n, "interval": None}
            lo, hi = _jackknife_interval(tau, loo, self.level)
            return {"row": a, "col": b, "tau": tau, "lo": lo, "hi": hi, "n": n, "interval": interval}
        tau = kendall_tau(self.values[a][keep], self.values[b][keep])
        if np.isnan(tau):
            return {"row": a, "col": b, "tau": tau, "lo": np.nan, "hi": np.nan, "n": n, "interval": None}
        if interval == "jackknife":  # fewer than 3 rows: no spread
            lo, hi = float("nan"), float("nan")
        else:
            from calibench.analysis.bootstrap import _BlockPlan

            plan = _BlockPlan(keep, self.ranks[a][keep], self.ranks[b][keep], self.n)
            lo, hi = _interval(np.concatenate([plan.taus(c) for c in self.counts]), self.level)
        return {"row": a, "col": b, "tau": tau, "lo": lo, "hi": hi, "n": n, "interval": interval}


def _redensify(ranks: np.ndarray) -> np.ndarray:
    """Dense ranks of a subset of rows from the dense ranks of all (values a subset lacks
    leave gaps; closing them keeps the order and the ties)."""
    present = np.zeros(int(ranks.max()) + 1 if len(ranks) else 0, np.int64)
    present[ranks] = 1
    return (np.cumsum(present) - 1)[ranks]


def _interval_rule(interval) -> Callable[[str, str], str]:
    """``interval``: "bootstrap", "jackknife", or a function (row, col) -> one of them."""
    if callable(interval):
        return interval
    if interval not in ("bootstrap", "jackknife"):
        raise ValueError(f"interval must be 'bootstrap', 'jackknife' or a function of (row, col), got {interval!r}")
    return lambda a, b: interval


_CI_COLUMNS = ["row", "col", "tau", "lo", "hi", "n", "interval"]


def kendall_matrix_ci(df: pd.DataFrame, columns: Sequence[str], resamples: int = 1000, seed: int = 0,
                      level: float = 0.95, interval="bootstrap") -> pd.DataFrame:
    """Tidy tau-b matrix with intervals: row, col, tau, lo, hi, n, interval.

    ``interval`` (a name, or a function of (row, col) giving one per pair): "bootstrap",
    the percentile bootstrap, or "jackknife", :func:`kendall_jackknife`'s normal interval
    (about 20x cheaper); the column ``interval`` says which each pair got (null where
    there is no interval to compute: the diagonal, an undefined tau).

    ``tau`` and ``n`` are those of ``analysis.kendall_matrix`` (pairwise-complete rows;
    the diagonal is 1, with lo = hi = 1, where a column has two or more values, else
    NaN). Every pair uses the same resamples of the table's rows (:func:`bootstrap_indices`
    with ``len(df)``), so intervals are comparable across pairs and reproducible from
    ``seed``; each unordered pair is computed once. lo and hi are NaN where tau is."""
    resamples, seed, level = _count(resamples, "resamples", 1), _count(seed, "seed", 0), _level(level)
    rule = _interval_rule(interval)
    values = _columns(df, columns, "columns")
    table = _Table(values, resamples, seed, level)
    names, rows, done = list(values), [], {}
    for a in names:
        for b in names:
            if (b, a) in done:
                r = dict(done[(b, a)], row=a, col=b)
            else:
                r = table.pair(a, b, interval=rule(a, b))
            done[(a, b)] = r
            rows.append(r)
    return pd.DataFrame(rows, columns=_CI_COLUMNS)


def kendall_cross_ci(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str], resamples: int = 1000,
                     seed: int = 0, level: float = 0.95, interval="bootstrap") -> pd.DataFrame:
    """The block ``rows`` x ``cols`` of :func:`kendall_matrix_ci` (as ``analysis.kendall_cross``
    is of ``kendall_matrix``), with the same resamples: row, col, tau, lo, hi, n, interval."""
    resamples, seed, level = _count(resamples, "resamples", 1), _count(seed, "seed", 0), _level(level)
    rule = _interval_rule(interval)
    rv, cv = _columns(df, rows, "rows"), _columns(df, cols, "cols")
    table = _Table({**rv, **cv}, resamples, seed, level)
    out = [table.pair(a, b, diagonal=False, interval=rule(a, b)) for a in rv for b in cv]  # as kendall_cross: scipy's tau
    return pd.DataFrame(out, columns=_CI_COLUMNS)


def bootstrap_indices(n: int, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """:func:`calibench.analysis.bootstrap.bootstrap_indices` (the resamples every interval here uses)."""
    from calibench.analysis import bootstrap

    return bootstrap.bootstrap_indices(n, resamples, seed)
