"""Kendall tau-b and its bootstrap confidence intervals, fast enough for whole populations.

* :func:`kendall_tau`: tau-b with ties in O(n log n), after Knight (1966): sort by x then
  y and count the discordant pairs as inversions (here a bit-by-bit stable partition,
  the radix form of merge-sort inversion counting). Equal to
  ``scipy.stats.kendalltau(x, y).statistic`` on the pairwise-complete rows.
* :func:`kendall_bootstrap`, :func:`kendall_matrix_ci`, :func:`kendall_cross_ci`:
  percentile bootstrap intervals (Efron 1979; Efron & Tibshirani 1993, ch. 13) from
  resampled networks (rows), seeded, with the same resamples for every pair of columns.

NaN policy (that of ``analysis.kendall_matrix``): a pair of columns uses the rows where
neither value is NaN; with fewer than two such rows, or a constant column among them,
tau is NaN. Infinite values are ordinary values (ranked, tied with each other).

Resamples. Resample ``b`` draws row indices exactly as ::

    rng = np.random.default_rng(seed)
    for b in range(resamples):
        idx = rng.integers(0, n, n)      # n = number of rows of the table

(:func:`bootstrap_indices`), so one seed gives the same resamples to every pair of a
table. Resample ``b``'s tau is ``scipy.stats.kendalltau`` of ``(x[idx], y[idx])`` over its
pairwise-complete rows: repeated rows are pairs tied in x and in y. A resample where
that tau is undefined (fewer than two complete rows, or constant) is NaN and left out of
the interval; the interval is the (1 - level)/2 and (1 + level)/2 quantiles (numpy's
linear interpolation) of the defined resample taus, NaN when none is defined.

How a resample is computed without re-sorting (``_BlockPlan``). A resample is a vector of
multiplicities w over the original rows, and every count in tau-b is a polynomial in w:
with n_w = sum(w), the tied pairs in x are sum over x-tie groups g of W_g (W_g - 1) / 2
(W_g = the group's total multiplicity), and con - dis = sum over pairs i < j of original
rows of w_i w_j sign(x_i - x_j) sign(y_i - y_j) (pairs of copies of one row are ties in
both and count 0, as in scipy). With strict orders (x, then y, then row; and y, then x,
then row) the discordant part is a weighted inversion count of one fixed permutation s,
the same for every resample, and ties are corrected for by group sums of w. The inversion
count is split over blocks of m ~ sqrt(n) positions and m values: pairs within a position
block and pairs within a value block are one batched product of fixed 0/1 matrices
(m x m per block) with the multiplicity matrix, which BLAS does for a chunk of resamples
at once; pairs across both blocks come from the (n/m) x (n/m) block histogram and its
2-D prefix sums. Every quantity is an integer, kept exact: float32 where its bound is
below 2**24 (checked per chunk; float64 otherwise), int32 for the histogram products,
float64 for the final counts, so each resample's tau is scipy's to the last bit in the
tests (same counts, same final division). Cost per resample: O(n m) multiply-adds in
BLAS plus O(n) elementwise work, after one O(n log n) plan per pair of columns; about
0.7 s of two cores per 1,000 resamples of 32,768 rows, and 0.4 s to draw them
(bench/bench_stats.py). Memory: a table keeps its resamples as 4 x rows x resamples bytes
(131 MB for 1,000 of 32,768 rows); a pair's plan and work arrays add about 0.5 GB at
32,768 rows (chunks of about 2**23 / rows resamples).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch

__all__ = ["kendall_tau", "bootstrap_indices", "bootstrap_taus", "kendall_bootstrap", "jackknife_taus",
           "kendall_jackknife", "kendall_matrix_ci", "kendall_cross_ci"]

_EXACT_F32 = 2 ** 24  # integers below this are exact in float32
_INT32 = 2 ** 31      # products below this fit int32
_CELLS = 1 << 23      # rows x resamples per chunk (32 MB once gathered as float32)


# ---------------------------------------------------------------- validation

def _vector(v, name: str) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be numeric: {e}") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    return a


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = _vector(x, "x"), _vector(y, "y")
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
    return x, y


def _count(v, name: str, minimum: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _level(level) -> float:
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, float, np.floating, np.integer)) \
            or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a number strictly between 0 and 1, got {level!r}")
    return float(level)


# ---------------------------------------------------------------- tau-b, O(n log n)

def _dense_ranks(v: np.ndarray) -> np.ndarray:
    """0-based dense ranks of NaN-free values (equal values, -0.0 and 0.0, inf and inf tie)."""
    if len(v) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(v, kind="stable")
    sv = v[order]
    r = np.empty(len(v), np.int64)
    r[order] = np.concatenate(([0], np.cumsum(sv[1:] != sv[:-1])))
    return r


def _strict_orders(rx: np.ndarray, ry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions sorted by (x, y, row) and by (y, x, row), from dense ranks."""
    nx, ny = (int(rx.max()) + 1, int(ry.max()) + 1) if len(rx) else (1, 1)
    xorder = np.argsort(rx * ny + ry, kind="stable")
    yorder = np.argsort(ry * nx + rx, kind="stable")
    return xorder, yorder


def _inversions(s: np.ndarray) -> int:
    """Pairs i < j with s[i] > s[j] of a permutation s of 0..n-1, in O(n log n).

    From the top bit down, each group of values sharing the higher bits is stably
    partitioned by the current bit; a pair first split at this bit is an inversion when
    its 1 comes before its 0, i.e. one per (1 before 0) in the group."""
    n = len(s)
    if n < 2:
        return 0
    bits = int(n - 1).bit_length()
    size = 1 << bits
    cur = np.concatenate((s.astype(np.int64), np.arange(n, size, dtype=np.int64)))  # padding: no inversions
    pos = np.arange(size, dtype=np.int64)
    total = 0
    for level in range(bits - 1, -1, -1):
        half = 1 << level
        bit = (cur >> level) & 1
        group_start = (cur >> (level + 1)) << (level + 1)        # every group holds 2 * half values
        ones_before = np.cumsum(bit) - bit - (group_start >> 1)  # ones earlier in the same group
        total += int(ones_before[bit == 0].sum())
        zeros_before = pos - group_start - ones_before
        nxt = np.empty_like(cur)
        nxt[np.where(bit == 1, group_start + half + ones_before, group_start + zeros_before)] = cur
        cur = nxt
    return total


def _pairs_tied(groups_sorted: np.ndarray) -> int:
    """sum t (t - 1) / 2 over runs of equal values in a sorted integer array (each entry of a
    run of t has t - 1 partners)."""
    if len(groups_sorted) < 2:
        return 0
    return int((_run_sizes(groups_sorted) - 1).sum()) // 2


def _finish(cmd, tot, xtie, ytie):
    """scipy's last step: ``cmd / sqrt(tot - xtie) / sqrt(tot - ytie)``, clipped to [-1, 1]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.asarray(cmd, float) / np.sqrt(np.asarray(tot - xtie, float)) / np.sqrt(np.asarray(tot - ytie, float))
    tau = np.clip(tau, -1.0, 1.0)
    return np.where((xtie == tot) | (ytie == tot), np.nan, tau)


def kendall_tau(x, y) -> float:
    """Kendall's tau-b of x and y over the rows where neither is NaN (Knight 1966).

    Equals ``scipy.stats.kendalltau(x[keep], y[keep]).statistic`` (variant 'b', so ties
    in either variable are allowed); NaN when fewer than two complete rows remain or one
    variable is constant on them. O(n log n): a sort by (x, y) and an inversion count.
    """
    x, y = _pair(x, y)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = len(x)
    if n < 2:
        return float("nan")
    rx, ry = _dense_ranks(x), _dense_ranks(y)
    xorder, yorder = _strict_orders(rx, ry)
    value = np.empty(n, np.int64)
    value[yorder] = np.arange(n)
    dis = _inversions(value[xorder])                       # the strict orders agree on every tie
    tot = n * (n - 1) // 2
    xtie, ytie = _pairs_tied(np.sort(rx)), _pairs_tied(np.sort(ry))
    joint = _pairs_tied((rx * (int(ry.max()) + 1) + ry)[xorder])
    cmd = tot - xtie - ytie + joint - 2 * dis
    return float(_finish(cmd, tot, xtie, ytie))


def _discordant_per_position(s: np.ndarray) -> np.ndarray:
    """For a permutation s of 0..n-1: at each position p, the pairs (p, q) with q < p and
    s_q > s_p or q > p and s_q < s_p (the inversions p takes part in); they sum to twice
    :func:`_inversions`. The same bit-by-bit stable partition: at each bit, a 0 counts the
    1s before it in its group, a 1 the 0s after it (each group holds ``half`` of each)."""
    n = len(s)
    if n < 2:
        return np.zeros(n, np.int64)
    bits = int(n - 1).bit_length()
    size = 1 << bits
    cur = np.concatenate((s.astype(np.int64), np.arange(n, size, dtype=np.int64)))
    ident = np.arange(size, dtype=np.int64)       # the original position of each entry
    pos = np.arange(size, dtype=np.int64)
    counts = np.zeros(size, np.int64)
    for level in range(bits - 1, -1, -1):
        half = 1 << level
        bit = (cur >> level) & 1
        group_start = (cur >> (level + 1)) << (level + 1)
        ones_before = np.cumsum(bit) - bit - (group_start >> 1)
        zeros_before = pos - group_start - ones_before
        counts[ident] += np.where(bit == 0, ones_before, half - zeros_before)
        to = np.where(bit == 1, group_start + half + ones_before, group_start + zeros_before)
        nxt, nid = np.empty_like(cur), np.empty_like(ident)
        nxt[to], nid[to] = cur, ident
        cur, ident = nxt, nid
    return counts[:n]


def _run_sizes(sorted_keys: np.ndarray) -> np.ndarray:
    """For each entry of a sorted array, the length of its run of equal values."""
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1], [True])))
    return np.repeat(np.diff(starts), np.diff(starts))


def _tau_and_leave_one_out(rx: np.ndarray, ry: np.ndarray) -> tuple[float, np.ndarray]:
    """tau-b and the leave-one-out taus (row order) from the dense ranks of n >= 3 complete
    rows: row i's net concordance C_i = sum_j sign(x_i - x_j) sign(y_i - y_j) comes from its
    inversions in the strict (x, y) order and its tie groups; leaving it out takes C_i from
    con - dis, n - 1 pairs from the total and its tie partners from the tied pairs."""
    n = len(rx)
    xorder, yorder = _strict_orders(rx, ry)
    value = np.empty(n, np.int64)
    value[yorder] = np.arange(n)
    dis = np.empty(n, np.int64)
    dis[xorder] = _discordant_per_position(value[xorder])
    tx, ty = np.bincount(rx)[rx], np.bincount(ry)[ry]
    txy = np.empty(n, np.int64)
    txy[xorder] = _run_sizes((rx * (int(ry.max()) + 1) + ry)[xorder])   # sorted in the (x, y) order
    net = (n - 1) - 2 * dis - (tx - 1) - (ty - 1) + (txy - 1)    # C_i
    tot = n * (n - 1) // 2
    cmd = int(net.sum()) // 2
    xtie, ytie = int((tx - 1).sum()) // 2, int((ty - 1).sum()) // 2
    tau = float(_finish(cmd, tot, xtie, ytie))
    return tau, _finish(cmd - net, tot - (n - 1), xtie - (tx - 1), ytie - (ty - 1))


def jackknife_taus(x, y) -> np.ndarray:
    """tau-b with each pairwise-complete row left out in turn (one value per such row, in
    row order), in O(n log n) (:func:`_tau_and_leave_one_out`). Each value equals
    ``scipy.stats.kendalltau`` of the rows without row i (NaN where that is undefined)."""
    x, y = _pair(x, y)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(x) < 3:
        return np.full(len(x), np.nan)
    return _tau_and_leave_one_out(_dense_ranks(x), _dense_ranks(y))[1]


def _normal_quantile(p: float) -> float:
    return float(torch.special.ndtri(torch.tensor(p, dtype=torch.float64)))


def kendall_jackknife(x, y, level: float = 0.95) -> tuple[float, float, float]:
    """(tau, lo, hi): :func:`kendall_tau` and its jackknife normal interval (Quenouille
    1956, Tukey 1958; for tau, Long & Cliff 1997): tau +- z se, clipped to [-1, 1], with
    se**2 = (n - 1) / n * sum_i (tau_(i) - mean)**2 over the leave-one-out taus of
    :func:`jackknife_taus` that are defined (n of them; NaN interval with fewer than two).
    O(n log n) per pair, no resamples: the cheap interval for large matrices of taus, where
    the percentile bootstrap (:func:`kendall_bootstrap`) costs about 1 s per pair at 32,768
    rows."""
    x, y = _pair(x, y)
    level = _level(level)
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.sum() < 3:
        return kendall_tau(x, y), float("nan"), float("nan")
    tau, loo = _tau_and_leave_one_out(_dense_ranks(x[keep]), _dense_ranks(y[keep]))
    if np.isnan(tau):
        return tau, float("nan"), float("nan")
    return (tau, *_jackknife_interval(tau, loo, level))


def _jackknife_interval(tau: float, loo: np.ndarray, level: float) -> tuple[float, float]:
    ok = loo[~np.isnan(loo)]
    n = len(ok)
    if n < 2:
        return float("nan"), float("nan")
    se = math.sqrt((n - 1) / n * float(np.sum((ok - ok.mean()) ** 2)))
    z = _normal_quantile((1 + level) / 2)
    return max(-1.0, tau - z * se), min(1.0, tau + z * se)


# ---------------------------------------------------------------- resamples

def _index_rows(n: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    for _ in range(resamples):
        yield rng.integers(0, n, n) if n else np.zeros(0, np.int64)


def bootstrap_indices(n: int, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """The row indices of every resample, shape (resamples, n): row b is the b-th
    ``rng.integers(0, n, n)`` of ``rng = np.random.default_rng(seed)``. The functions of
    this module use exactly these resamples (as multiplicities, never this array)."""
    n, resamples, seed = _count(n, "n", 0), _count(resamples, "resamples", 1), _count(seed, "seed", 0)
    return np.stack(list(_index_rows(n, resamples, seed)))


class _Counts:
    """How often each row is drawn in one chunk of resamples: ``w`` is (rows + 1, chunk),
    float32 (float64 from 2**24 rows: exact integers either way); the last row is zero
    (the plans' padding). ``wmax`` is the largest multiplicity."""

    def __init__(self, w: torch.Tensor, wmax: int):
        self.w, self.wmax = w, wmax


def _multiplicities(n: int, resamples: int, seed: int, chunk: int) -> Iterator[_Counts]:
    draws = _index_rows(n, resamples, seed)
    dtype = np.float32 if n + 1 < _EXACT_F32 else np.float64
    for start in range(0, resamples, chunk):
        rows = np.zeros((min(chunk, resamples - start), n + 1), dtype)  # resample start + b in row b
        for b in range(len(rows)):
            rows[b, :n] = np.bincount(next(draws), minlength=n)
        yield _Counts(torch.from_numpy(rows).t().contiguous(), int(rows.max()) if rows.size else 0)


def _grouped_sum(p: torch.Tensor, group: int) -> torch.Tensor:
    """Column sums (over every axis but the last) in float64; float32 entries are summed
    ``group`` at a time first, the caller having checked those partial sums stay exact."""
    c = p.shape[-1]
    p = p.reshape(-1, c)
    if p.dtype == torch.float32 and group > 1:
        p = p.view(-1, group, c).sum(1)
    return p.sum(0, dtype=torch.float64)


class _BlockPlan:
    """What one pair of columns needs for every resample: the row of each position in the
    (x, y, row) and (y, x, row) orders and the 0/1 block matrices (see the module notes)."""

    def __init__(self, rows: np.ndarray, rx: np.ndarray, ry: np.ndarray, pad_row: int, block: int | None = None):
        n = len(rows)
        self.n = n
        if n < 2:
            return
        m = block or max(4, 1 << math.ceil(math.log2(math.sqrt(n))))
        m = min(m, 1 << math.ceil(math.log2(n)))
        k = -(-n // m)
        size = k * m
        self.m, self.k = m, k
        xorder, yorder = _strict_orders(rx, ry)
        value = np.empty(n, np.int64)
        value[yorder] = np.arange(n)
        s = np.concatenate((value[xorder], np.arange(n, size)))        # value at each position
        at = np.argsort(s)                                               # position of each value
        pad = np.full(size - n, pad_row, np.int64)
        self.rows = torch.from_numpy(np.concatenate((rows[xorder], pad, rows[yorder], pad)))
        below = np.tril(np.ones((m, m), bool), -1)                       # [b, a]: a < b
        sb = s.reshape(k, m)
        pb = (at // m).reshape(k, m)
        # inversions inside a position block: uv[p, b, a] = a < b and s_a > s_b; inside a value
        # block, across position blocks: uv[k + q, j, i] = i < j and block(i) > block(j)
        self.uv = torch.from_numpy(np.concatenate(((sb[:, None, :] > sb[:, :, None]) & below,
                                                   (pb[:, None, :] > pb[:, :, None]) & below)))
        # the block histogram: e[p, q, a] = position p*m + a holds a value of block q
        self.e = torch.from_numpy((sb // m)[:, None, :] == np.arange(k)[None, :, None])
        self.ties = [self._groups(rx[xorder]), self._groups(ry[yorder], True),
                     self._groups((rx * (int(ry.max()) + 1) + ry)[xorder])]
        self.dtype = torch.bool

    @staticmethod
    def _groups(sorted_keys: np.ndarray, by_value: bool = False):
        """The tie groups of at least two rows: whether they index the y order (else the x
        order), their positions there (group after group) and their sizes."""
        starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1], [True])))
        size = np.diff(starts)
        tied = np.repeat(size > 1, size)
        return by_value, torch.from_numpy(np.flatnonzero(tied)), torch.from_numpy(size[size > 1])

    def _kernels(self, dtype: torch.dtype) -> None:
        if self.dtype != dtype:
            self.uv, self.e = self.uv.to(dtype), self.e.to(dtype)
            self.dtype = dtype

    def _buffers(self, c: int, dtype: torch.dtype, source: torch.dtype) -> dict[str, torch.Tensor]:
        """Work arrays reused from chunk to chunk (no page faults for fresh large arrays)."""
        key = (c, dtype, source)
        if getattr(self, "_key", None) != key:
            k, m = self.k, self.m
            self._ws = {"w": torch.empty(2 * k, m, c, dtype=dtype), "r": torch.empty(2 * k, m, c, dtype=dtype),
                        "h": torch.empty(k, k, c, dtype=dtype)}
            if source != dtype:
                self._ws["g"] = torch.empty(2 * k * m, c, dtype=source)
            self._key = key
        return self._ws

    def taus(self, counts: _Counts) -> np.ndarray:
        """tau-b of every resample (column) of one chunk of multiplicities."""
        c = counts.w.shape[1]
        if self.n < 2:
            return np.full(c, np.nan)
        k, m, wmax, rows = self.k, self.m, counts.wmax, counts.w.shape[0]
        f64 = torch.float64
        # float32 while every product and partial sum below is an integer < 2**24: block sums
        # <= m * wmax, products <= m * wmax**2, summed `group` at a time, column sums <= rows;
        # float64 otherwise.
        group = math.gcd(m, 64)
        while group > 1 and group * m * wmax ** 2 >= _EXACT_F32:
            group //= 2
        dtype = torch.float32 if m * wmax ** 2 < _EXACT_F32 and rows < _EXACT_F32 else f64
        self._kernels(dtype)
        ws = self._buffers(c, dtype, counts.w.dtype)
        w, r, h = ws["w"], ws["r"], ws["h"]
        if "g" in ws:
            w.view(2 * k * m, c).copy_(torch.index_select(counts.w, 0, self.rows, out=ws["g"]))
        else:
            torch.index_select(counts.w, 0, self.rows, out=w.view(2 * k * m, c))
        wx = w[:k]                                             # x order; w[k:] is the y order
        # pairs inside a position block (uv[:k]) and inside a value block across positions (uv[k:])
        torch.bmm(self.uv, w, out=r).mul_(w)
        dis = _grouped_sum(r, group)
        # pairs across position blocks and value blocks: cell[p, q] (the weight of positions
        # in block p with values in block q, <= rows) times above[p, q] (the weight in
        # position blocks < p and value blocks > q), exact in int32 while the products fit.
        # The prefix sums are loops of slab additions: several times faster than
        # torch.cumsum along these axes.
        torch.bmm(self.e, wx, out=h)
        cell = h.to(torch.int32) if dtype == torch.float32 and m * wmax * rows < _INT32 else h.to(f64)
        before, above = torch.empty_like(cell), torch.empty_like(cell)
        before[0].zero_()
        for p in range(1, k):
            torch.add(before[p - 1], cell[p - 1], out=before[p])
        above[:, k - 1].zero_()
        for q in range(k - 2, -1, -1):
            torch.add(above[:, q + 1], before[:, q + 1], out=above[:, q])
        dis += cell.mul_(above).view(-1, c).sum(0).to(f64)
        s1 = wx.reshape(-1, c).sum(0).to(f64)
        s2 = _grouped_sum(torch.mul(wx, wx, out=r[:k]), group)
        flat_x, flat_y = wx.reshape(k * m, c), w[k:].reshape(k * m, c)
        tied = []
        for by_value, positions, lengths in self.ties:  # pairs of distinct rows in a tie group
            if not len(lengths):
                tied.append(torch.zeros(c, dtype=f64))
                continue
            t = (flat_y if by_value else flat_x).index_select(0, positions)
            sums = torch.segment_reduce(t, "sum", lengths=lengths, axis=0).to(f64)  # <= rows: exact
            exact = dtype == f64 or len(positions) * wmax ** 2 < _EXACT_F32
            squares = t.square_().sum(0).to(f64) if exact else t.to(f64).square().sum(0)
            tied.append(((sums * sums).sum(0) - squares) / 2)
        tx, ty, txy = (t.numpy() for t in tied)
        s1, s2, dis = s1.numpy(), s2.numpy(), dis.numpy()
        # every term below is an integer below 2**53: exact in float64
        cmd = (s1 * s1 - s2) / 2 - 2 * dis - tx - ty + txy
        tot = s1 * (s1 - 1) / 2
        copies = (s2 - s1) / 2                                 # pairs of copies of one row
        return _finish(cmd, tot, tx + copies, ty + copies)


# ---------------------------------------------------------------- intervals

def _chunk(n: int, resamples: int) -> int:
    """Resamples per chunk: about _CELLS multiplicities, the chunks of (nearly) equal size."""
    chunks = -(-resamples // max(1, _CELLS // max(n, 1)))
    return -(-resamples // chunks)


def _interval(taus: np.ndarray, level: float) -> tuple[float, float]:
    ok = taus[~np.isnan(taus)]
    if not len(ok):
        return float("nan"), float("nan")
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_taus(x, y, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """tau-b of each of ``resamples`` bootstrap resamples of the rows of (x, y), drawn as
    :func:`bootstrap_indices` ``(len(x), resamples, seed)`` (rows with a NaN are drawn
    like any other and then left out, as in :func:`kendall_tau`); NaN where undefined."""
    x, y = _pair(x, y)
    resamples, seed = _count(resamples, "resamples", 1), _count(seed, "seed", 0)
    keep = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    if len(keep) < 2:
        return np.full(resamples, np.nan)
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
    def counts(self) -> list[_Counts]:
        if self._counts is None:  # held for every pair: 4 x rows x resamples bytes
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
