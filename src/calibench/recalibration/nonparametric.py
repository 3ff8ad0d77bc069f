"""One-vs-rest isotonic regression (stage ``iso``) and histogram binning (stage ``hist``)
(docs/recalibration.md, "Isotonic regression, one-vs-rest" and "Histogram binning,
one-vs-rest"; bins as docs/metrics.md, "Equal-width bins").

Both fit, per network m and class k, a map of ``p_k = softmax(z)_k`` to ``1[y = k]``,
apply it to every column, then renormalise each row; a row that maps to all zeros becomes
uniform (docs/recalibration.md, "Common rules": rows sum to 1). The fitted maps return
recalibrated logits ``log q`` (``-inf`` where ``q = 0``), as :class:`~.base.Fitted` asks.

Isotonic regression reproduces scikit-learn's ``IsotonicRegression(y_min=0, y_max=1,
out_of_bounds="clip")`` per class: scores sorted, scores closer than
``np.finfo(float64).resolution`` (1e-15) to the first score of their group pooled into it
(scikit-learn's ``_make_unique``; exact ties are the common case), targets averaged with
the group sizes as weights, pool-adjacent-violators by ``scipy.optimize.isotonic_regression``
(the call scikit-learn makes), values clipped to [0, 1], interior knots whose value equals
both neighbours dropped, prediction by ``np.interp`` semantics (a score equal to a knot
gets that knot's value; between knots ``slope * (x - x_j) + y_j``) after clipping the score
to the fitted range. PAVA is sequential: it runs per (network, class) on the CPU; the
prediction is batched torch on the logits' device.

Histogram binning is torch throughout (bucketize + scatter_add), on any device.
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.metrics._arrays import check_logits
from calibench.recalibration.base import Fitted, as_info, non_finite_failures

HIST_BINS = 15
# scikit-learn's _make_unique pools sorted scores whose distance to the first score of
# the current group is below this (np.finfo(np.float64).resolution).
TIE_RESOLUTION = float(np.finfo(np.float64).resolution)


# ---------------------------------------------------------------------------------------
# Shared: padded piecewise-linear tables, renormalisation


def segment_slopes(xk: torch.Tensor, yk: torch.Tensor) -> torch.Tensor:
    """Slopes ``(y[j+1] - y[j]) / (x[j+1] - x[j])`` of padded knot rows (R, P); 0 on padding
    segments (the repeated last knot) and in the last column."""
    slope = torch.zeros_like(yk)
    dx = xk[:, 1:] - xk[:, :-1]
    dy = yk[:, 1:] - yk[:, :-1]
    slope[:, :-1] = torch.where(dx > 0, dy / torch.where(dx > 0, dx, torch.ones_like(dx)), torch.zeros_like(dx))
    return slope


def interp_rows(xk: torch.Tensor, yk: torch.Tensor, slope: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Row-wise ``np.interp(np.clip(q, x_0, x_last), x, y)``, batched.

    ``xk``, ``yk``, ``slope`` (:func:`segment_slopes`): (R, P) knots strictly increasing in
    x, each row padded to P by repeating its last knot; ``q``: (R, Q) queries. With j the
    last knot ``x_j <= q`` (or 0): ``slope_j * max(q - x_j, 0) + y_j``, which is numpy's
    formula between knots, exactly ``y_j`` on a knot or below the first, and the last value
    above the last knot (slope 0 there).
    """
    q = q.contiguous()
    j = torch.searchsorted(xk.contiguous(), q, right=True).sub_(1).clamp_(min=0)
    buffer = xk.gather(1, j)
    torch.sub(q, buffer, out=buffer).clamp_(min=0.0)
    out = slope.gather(1, j).mul_(buffer)
    return out.add_(torch.gather(yk, 1, j, out=buffer))


def _log_nonnegative_(values: torch.Tensor) -> torch.Tensor:
    """In place: ``log`` with ``-inf`` at 0 (the vectorised log is slow on zeros: take it
    at the smallest normal number there, then fill)."""
    zero = values == 0
    return values.clamp_(min=np.finfo(np.float64).tiny).log_().masked_fill_(zero, -np.inf)


def log_renormalised_(values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """In place: ``log`` of non-negative values renormalised along ``dim``; a row of zeros
    becomes uniform (docs/recalibration.md, "Isotonic regression ..." and "Histogram
    binning ...")."""
    total = values.sum(dim=dim, keepdim=True)
    zero_rows = total == 0
    out = _log_nonnegative_(values.mul_(total.reciprocal_()))
    if bool(zero_rows.any()):
        out = out.masked_fill_(zero_rows, -float(np.log(values.shape[dim])))
    return out


def _probs(z: torch.Tensor) -> torch.Tensor:
    return torch.softmax(z.to(torch.float64), dim=-1)


def _columns(p: torch.Tensor) -> torch.Tensor:
    """(M, N, K) -> (M * K, N): one row per (network, class)."""
    m, n, k = p.shape
    return p.transpose(1, 2).contiguous().view(m * k, n)


# ---------------------------------------------------------------------------------------
# Isotonic regression


def _group_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Start flags (R, N) of scikit-learn's groups in sorted rows: a score starts a new group
    when ``score - (first score of the current group) >= TIE_RESOLUTION``.

    A gap of at least the resolution to the previous score always starts a group and a
    zero gap never does (floating subtraction is monotone), so only runs linked by gaps in
    (0, resolution) that span the resolution need the sequential rule. There, all such
    runs at once follow ``next(i) = first j > i with v_j - v_i >= resolution`` from their
    first score (as many steps as the longest run has groups).
    """
    r, n = sorted_values.shape
    gaps = np.diff(sorted_values, axis=1)
    starts = np.ones((r, n), dtype=bool)
    starts[:, 1:] = gaps >= TIE_RESOLUTION
    ambiguous = (gaps > 0) & (gaps < TIE_RESOLUTION)
    if not ambiguous.any():
        return starts
    flat_values = sorted_values.ravel()
    flat_starts = starts.ravel()  # a view: writes go to ``starts``
    first = np.flatnonzero(flat_starts)  # run g is [first[g], first[g + 1]); every row opens one
    run_of = np.cumsum(flat_starts) - 1
    amb_rows, amb_cols = np.nonzero(ambiguous)
    runs = np.unique(run_of[amb_rows * n + amb_cols])
    begins = first[runs]
    ends = np.append(first[1:], r * n)[runs]
    wide = flat_values[ends - 1] - flat_values[begins] >= TIE_RESOLUTION
    begins, ends = begins[wide], ends[wide]
    if not len(begins):
        return starts
    # next(i) on the rows holding wide runs: a guess by searchsorted (it rounds
    # v_i + resolution), settled on the first j meeting scikit-learn's subtraction.
    rows = np.unique(begins // n)
    v = sorted_values[rows]
    padded = torch.from_numpy(np.concatenate([v, np.full((len(rows), 1), np.inf)], axis=1))
    vt = torch.from_numpy(v)
    i = torch.arange(n)[None, :]
    j = torch.maximum(torch.searchsorted(vt, vt + TIE_RESOLUTION), i + 1)

    def reaches(jj):
        return padded.gather(1, jj) - vt >= TIE_RESOLUTION

    while True:
        back = (j - 1 > i) & reaches((j - 1).clamp(min=0))
        ahead = (j < n) & ~reaches(j)
        if not bool(back.any() or ahead.any()):
            break
        j = j - back.long() + ahead.long()
    next_flat = np.zeros(r * n, dtype=np.int64)
    next_flat.reshape(r, n)[rows] = (j + torch.from_numpy(rows)[:, None] * n).numpy()
    current = begins
    while len(current):  # every wide run at once, one group per step
        following = next_flat[current]
        inside = following < ends
        flat_starts[following[inside]] = True
        current, ends = following[inside], ends[inside]
    return starts


def _sorted_rows(rows: torch.Tensor) -> np.ndarray:
    if rows.device.type == "cpu":
        return np.sort(rows.numpy(), axis=1)
    return torch.sort(rows, dim=1).values.cpu().numpy()


def isotonic_knots(probs_val: torch.Tensor, labels_val: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per (network, class) isotonic maps of ``p_k`` to ``1[y = k]`` as padded knot tables.

    ``probs_val`` (M, N, K) float64, ``labels_val`` (N,) int64. Returns ``x``, ``y``,
    ``slope`` (M, K, P) on the input's device (rows padded by repeating the last knot) and
    ``n_knots`` (M, K). See the module docstring for the scikit-learn conventions.
    """
    m, n, k = probs_val.shape
    r = m * k
    device = probs_val.device
    sv = _sorted_rows(_columns(probs_val))  # (R, N), numpy
    starts = _group_starts(sv)
    group = np.cumsum(starts, axis=1) - 1
    n_groups = group[:, -1] + 1
    row_offset = np.arange(r)[:, None] * n
    # each group's first score and size, left-aligned per row; every row opens a group at column
    # 0, so the flat start positions delimit the groups, the last of a row ending where the next row starts
    group_first = np.flatnonzero(starts)
    group_slot = (group_first // n) * n + group.ravel()[group_first]
    counts = np.zeros(r * n)
    counts[group_slot] = np.diff(group_first, append=r * n)
    counts = counts.reshape(r, n)

    # Positives: sample i of network m is a positive of row (m, y_i); find its group by
    # locating p[m, i, y_i] in that sorted row (labels grouped into a padded (K, Q) table).
    y = labels_val.cpu().numpy()
    by_class = np.argsort(y, kind="stable")
    per_class = np.bincount(y, minlength=k)
    q = max(int(per_class.max()), 1)
    slot = np.arange(n) - np.repeat(np.cumsum(per_class) - per_class, per_class)
    table = np.zeros((k, q), dtype=np.int64)
    table[y[by_class], slot] = by_class
    used = np.arange(q)[None, :] < per_class[:, None]  # (K, Q)
    p_cpu = probs_val.cpu()
    queries = p_cpu[:, torch.from_numpy(table), torch.arange(k)[:, None]]  # (M, K, Q)
    position = torch.searchsorted(torch.from_numpy(sv), queries.reshape(r, q).contiguous()).numpy()
    pos_group = np.take_along_axis(group, np.minimum(position, n - 1), axis=1)
    mask = np.broadcast_to(used[None], (m, k, q)).reshape(r, q)
    ones = np.bincount((pos_group + row_offset)[mask], minlength=r * n).reshape(r, n).astype(np.float64)

    gx = np.zeros(r * n)
    gx[group_slot] = sv.ravel()[group_first]
    gx = gx.reshape(r, n)
    from scipy.optimize import isotonic_regression  # here: a job without iso never pays scipy's import

    fitted = np.zeros((r, n))
    for i in range(r):
        g = n_groups[i]
        w = counts[i, :g]
        fitted[i, :g] = isotonic_regression(ones[i, :g] / w, weights=w, increasing=True).x
    np.clip(fitted, 0.0, 1.0, out=fitted)

    # scikit-learn's trim_duplicates: drop interior knots equal to both neighbours.
    col = np.arange(n)[None, :]
    keep = col < n_groups[:, None]
    inner = (col >= 1) & (col <= n_groups[:, None] - 2)
    same = np.zeros((r, n), dtype=bool)
    same[:, 1:-1] = (fitted[:, 1:-1] == fitted[:, :-2]) & (fitted[:, 1:-1] == fitted[:, 2:])
    keep &= ~(inner & same)
    n_knots = keep.sum(axis=1)
    p = int(n_knots.max())
    rows_kept = np.nonzero(keep)[0]
    position = (np.cumsum(keep, axis=1) - 1)[keep]
    xk = np.zeros((r, p))
    yk = np.zeros((r, p))
    xk[rows_kept, position] = gx[keep]
    yk[rows_kept, position] = fitted[keep]
    pad = np.minimum(np.arange(p)[None, :], n_knots[:, None] - 1)
    xt = torch.from_numpy(np.take_along_axis(xk, pad, axis=1)).to(device)
    yt = torch.from_numpy(np.take_along_axis(yk, pad, axis=1)).to(device)
    return {
        "x": xt.reshape(m, k, p),
        "y": yt.reshape(m, k, p),
        "slope": segment_slopes(xt, yt).reshape(m, k, p),
        "n_knots": torch.from_numpy(n_knots.astype(np.int64)).to(device).reshape(m, k),
    }


def isotonic_columns(knots: dict[str, torch.Tensor], probs: torch.Tensor) -> torch.Tensor:
    """The unnormalised one-vs-rest isotonic values of probabilities (M, N, K), as (M, K, N):
    column k of network m through that network's map for class k."""
    m, _, k = probs.shape
    device = probs.device
    x, y, slope = (knots[name].to(device).reshape(m * k, -1) for name in ("x", "y", "slope"))
    return interp_rows(x, y, slope, _columns(probs)).reshape(m, k, -1)


def isotonic_values(knots: dict[str, torch.Tensor], probs: torch.Tensor) -> torch.Tensor:
    """The unnormalised one-vs-rest isotonic values (M, N, K) of probabilities (M, N, K)."""
    return isotonic_columns(knots, probs).transpose(1, 2)


def isotonic_transform(x: torch.Tensor, y: torch.Tensor):
    """The map of stage ``iso`` from its padded knot tables ``x``, ``y`` (M, K, P): each
    class's value, rows renormalised (all-zero rows uniform), as log-probabilities. The
    segment slopes are recomputed from the knots, as the fit computes them."""
    m, k, p = x.shape
    knots = {"x": x, "y": y, "slope": segment_slopes(x.reshape(m * k, p), y.reshape(m * k, p)).reshape(m, k, p)}

    def transform(logits: torch.Tensor) -> torch.Tensor:
        return log_renormalised_(isotonic_columns(knots, _probs(logits)), dim=1).transpose(1, 2).contiguous()

    return transform


def fit_isotonic(logits_val: torch.Tensor, labels_val: torch.Tensor) -> Fitted:
    """One-vs-rest isotonic regression of M networks (stage ``iso``; docs/recalibration.md,
    "Isotonic regression, one-vs-rest").

    ``logits_val`` (M, N_val, K), shared ``labels_val`` (N_val,). The map: per class k the
    scikit-learn isotonic fit of ``p_k`` to ``1[y = k]``, then rows renormalised (all-zero
    rows uniform); a class absent from validation maps to 0. ``info``: ``knots`` (mean
    knots per class after trimming), ``absent_classes`` (classes with no validation sample),
    ``converged`` (1), ``iterations`` (0). ``params``: the padded knot tables ``x``, ``y``
    (M, K, P) and ``n_knots`` (M, K).
    """
    z, y = check_logits(logits_val, labels_val, batched=True)
    m, _, k = z.shape
    with torch.inference_mode():
        knots = isotonic_knots(_probs(z), y)
    absent = float((torch.bincount(y, minlength=k) == 0).sum())
    info = as_info({
        "knots": knots["n_knots"].to(torch.float64).mean(dim=1),
        "absent_classes": np.full(m, absent),
        "converged": np.ones(m),
        "iterations": np.zeros(m),
    })

    params = {"x": knots["x"], "y": knots["y"]}
    return Fitted(method="iso", transform=isotonic_transform(knots["x"], knots["y"]), info=info,
                  failures=non_finite_failures(params, [None] * m), params={**params, "n_knots": knots["n_knots"]})


# ---------------------------------------------------------------------------------------
# Histogram binning


def _bin_index(p: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Equal-width bins ``linspace(0, 1, B + 1)``, right-closed ``(lo, hi]``, first bin
    ``[0, hi]`` (docs/metrics.md, "Equal-width bins"): the number of interior edges < p."""
    interior = torch.from_numpy(np.linspace(0.0, 1.0, n_bins + 1)[1:-1].copy()).to(p.device)
    return torch.bucketize(p, interior, right=False)


def histogram_bin_values(probs_val: torch.Tensor, labels_val: torch.Tensor, n_bins: int = HIST_BINS):
    """Per (network, class, bin) the frequency of ``y = k`` among the validation samples whose
    ``p_k`` falls in the bin; an empty bin takes its midpoint. Returns ``values`` (M, K, B)
    and ``counts`` (M, K, B)."""
    m, n, k = probs_val.shape
    device = probs_val.device
    b = _bin_index(probs_val, n_bins)  # (M, N, K)
    cell = (torch.arange(m, device=device)[:, None, None] * k + torch.arange(k, device=device)) * n_bins + b
    hits = (labels_val[:, None] == torch.arange(k, device=device)).to(torch.float64)  # (N, K)
    counts = torch.zeros(m * k * n_bins, dtype=torch.float64, device=device)
    counts.scatter_add_(0, cell.reshape(-1), torch.ones(cell.numel(), dtype=torch.float64, device=device))
    ones = torch.zeros_like(counts)
    ones.scatter_add_(0, cell.reshape(-1), hits.expand(m, n, k).reshape(-1))
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    mid = torch.from_numpy((0.5 * (edges[:-1] + edges[1:])).copy()).to(device).repeat(m * k)
    values = torch.where(counts > 0, ones / counts.clamp(min=1.0), mid)
    return values.reshape(m, k, n_bins), counts.reshape(m, k, n_bins)


def _cells(probs: torch.Tensor, n_bins: int) -> torch.Tensor:
    """(M, N, K) -> per network, the index ``k * B + bin(p_k)`` into its (K * B) table."""
    k = probs.shape[-1]
    return _bin_index(probs, n_bins).add_(torch.arange(k, device=probs.device) * n_bins)


def _lookup(table: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    m, n, k = cell.shape
    return table.to(cell.device).reshape(m, -1).gather(1, cell.view(m, n * k)).view(m, n, k)


def histogram_values(bin_values: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """The unnormalised one-vs-rest histogram values (M, N, K) of probabilities (M, N, K)."""
    return _lookup(bin_values, _cells(probs, bin_values.shape[-1]))


def histogram_transform(values: torch.Tensor):
    """The map of stage ``hist`` from its bin values (M, K, B): each class's bin value, rows
    renormalised (all-zero rows uniform), as log-probabilities."""
    log_values = _log_nonnegative_(values.clone())

    def transform(logits: torch.Tensor) -> torch.Tensor:
        # log(v / sum v) = log v - log sum v, with log v looked up from the bins' table.
        p = _probs(logits)
        cell = _cells(p, values.shape[-1])
        total = _lookup(values, cell).sum(dim=-1, keepdim=True)
        out = _lookup(log_values, cell).sub_(torch.log(total))
        zero_rows = total == 0
        if bool(zero_rows.any()):
            out = out.masked_fill_(zero_rows, -float(np.log(p.shape[-1])))
        return out

    return transform


def fit_histogram_binning(logits_val: torch.Tensor, labels_val: torch.Tensor, n_bins: int = HIST_BINS) -> Fitted:
    """One-vs-rest histogram binning of M networks (stage ``hist``; docs/recalibration.md,
    "Histogram binning, one-vs-rest").

    Per class k, ``n_bins`` equal-width right-closed bins of ``p_k`` (one rule for fitting
    and predicting); a bin's value is the frequency of ``y = k`` among its validation
    samples, an empty bin its midpoint; rows renormalised, all-zero rows uniform. ``info``:
    ``empty_bins`` (share of the K x B bins without a validation sample), ``converged``,
    ``iterations``. ``params``: ``bin_values`` (M, K, B).
    """
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins: expected a positive integer, got {n_bins!r}")
    n_bins = int(n_bins)
    z, y = check_logits(logits_val, labels_val, batched=True)
    m = z.shape[0]
    with torch.inference_mode():
        values, counts = histogram_bin_values(_probs(z), y, n_bins)
    info = as_info({
        "empty_bins": (counts == 0).to(torch.float64).mean(dim=(1, 2)),
        "converged": np.ones(m),
        "iterations": np.zeros(m),
    })

    params = {"bin_values": values}
    return Fitted(method="hist", transform=histogram_transform(values), info=info,
                  failures=non_finite_failures(params, [None] * m), params=params)
