"""Bootstrap resamples of a table's rows and the tau-b of each, without re-sorting: the
machinery behind the percentile intervals of :mod:`calibench.analysis.stats`.

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
from collections.abc import Iterator

import numpy as np
import torch

from calibench.analysis.tau_b import _count, _finish, _strict_orders

_EXACT_F32 = 2 ** 24  # integers below this are exact in float32
_INT32 = 2 ** 31      # products below this fit int32
_CELLS = 1 << 23      # rows x resamples per chunk (32 MB once gathered as float32)


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


def _chunk(n: int, resamples: int) -> int:
    """Resamples per chunk: about _CELLS multiplicities, the chunks of (nearly) equal size."""
    chunks = -(-resamples // max(1, _CELLS // max(n, 1)))
    return -(-resamples // chunks)
