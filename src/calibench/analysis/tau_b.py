"""Kendall's tau-b from exact pair counts, in O(n log n), and its jackknife interval: the
counting core of :mod:`calibench.analysis.stats` (which states the API) and of
:mod:`calibench.analysis.bootstrap` (which counts the same pairs in resamples).

:func:`kendall_tau` follows Knight (1966): sort by x then y and count the discordant pairs
as inversions (here a bit-by-bit stable partition, the radix form of merge-sort inversion
counting). Equal to ``scipy.stats.kendalltau(x, y).statistic`` on the pairwise-complete rows.

NaN policy (that of ``analysis.kendall_matrix``): a pair of columns uses the rows where
neither value is NaN; with fewer than two such rows, or a constant column among them,
tau is NaN. Infinite values are ordinary values (ranked, tied with each other).
"""

from __future__ import annotations

import math

import numpy as np


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
    from scipy.special import ndtri  # Cephes' ndtri, as torch.special's: 1.959963984540054 at 0.975

    return float(ndtri(p))


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
