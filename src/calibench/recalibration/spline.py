"""Spline recalibration of the top score, stage ``spline`` (Gupta et al., ICLR 2021;
docs/recalibration.md, "Spline recalibration").

The five steps of the spec, vectorised over M networks:

1. Validation part: top score ``s_i = max_k p_ik``, hit ``a_i = 1[argmax = y]``; stable
   sort by s; ``h~_i = sum_{j<=i} a_j / N``, ``h_i = sum_{j<=i} s_j / N``,
   ``t_i = (i - 1) / (N - 1)``.
2. Least-squares fit of ``D(t) = h~ - h`` by a natural cubic spline (second derivative 0
   at both ends) with ``n_knots`` knots equally spaced in t. The spline is linear in its
   knot values, and its basis depends only on N, so one pseudo-inverse (cached per N)
   solves all networks at once.
3. ``gamma_i = s_i + D'(t_i) * N / (N - 1)``: per sample dD/dt = (a - s) (N - 1) / N,
   so a - s = D' N / (N - 1) (the spec's factor since its 2026-11-25 correction).
4. New scores: linear interpolation of the pairs ``(s_i, gamma_i)`` (tied s averaged;
   outside the range the end values; a score equal to a knot gets that knot's value,
   not the authors' swapped weights), clipped to [0, 1].
5. Full vector: ``p'_top = gamma``; the other classes share ``1 - gamma`` in proportion
   to their probabilities, ``p_j (1 - gamma) / (1 - p_top)``. It is computed from the
   logits as ``(1 - gamma) * softmax(z without the top class)``: equal in exact
   arithmetic, free of the cancellation in ``1 - p_top``, and defined even where
   ``p_top`` rounds to 1 in float64 (the spec's "spread evenly" case, which finite logits
   never reach exactly: the others keep their proportions). The arg-max is whatever the
   new vector says (ties: lowest index, by the consumer's ``argmax``); it changes where
   gamma falls below the largest rescaled other class, which happens often for strongly
   overconfident networks (gamma < 1/2 with a close second).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from calibench.metrics._arrays import check_logits
from calibench.recalibration.base import Fitted, as_info, non_finite_failures
from calibench.recalibration.nonparametric import interp_rows, segment_slopes

SPLINE_KNOTS = 6


def _natural_second_derivatives(n_knots: int, h: float) -> np.ndarray:
    """(n_knots, n_knots) matrix mapping knot values to the second derivatives of the
    natural cubic spline through them (zero at both ends)."""
    second = np.zeros((n_knots, n_knots))
    if n_knots < 3:
        return second
    inner = n_knots - 2
    a = 4.0 * np.eye(inner) + np.eye(inner, k=1) + np.eye(inner, k=-1)
    b = np.zeros((inner, n_knots))
    for i in range(inner):
        b[i, i : i + 3] = (1.0, -2.0, 1.0)
    second[1:-1] = np.linalg.solve(a, b * (6.0 / h**2))
    return second


def spline_bases(t: np.ndarray, n_knots: int) -> tuple[np.ndarray, np.ndarray]:
    """Value and first-derivative bases (len(t), n_knots) of the natural cubic spline with
    knots ``linspace(0, 1, n_knots)``, as functions of its knot values."""
    if n_knots < 2:
        raise ValueError(f"n_knots: need at least 2 knots, got {n_knots}")
    h = 1.0 / (n_knots - 1)
    j = np.clip(np.floor(t / h).astype(np.int64), 0, n_knots - 2)
    x = t - j * h  # position inside segment [j h, (j + 1) h]
    rows = np.arange(t.shape[0])
    # Cubic on a segment: coefficients of M_j, M_{j+1} (second derivatives) and y_j, y_{j+1}.
    value_m = np.zeros((t.shape[0], n_knots))
    value_y = np.zeros((t.shape[0], n_knots))
    deriv_m = np.zeros((t.shape[0], n_knots))
    deriv_y = np.zeros((t.shape[0], n_knots))
    value_m[rows, j] = -(x**3) / (6.0 * h) + x**2 / 2.0 - h * x / 3.0
    value_m[rows, j + 1] = x**3 / (6.0 * h) - h * x / 6.0
    value_y[rows, j] = 1.0 - x / h
    value_y[rows, j + 1] = x / h
    deriv_m[rows, j] = -(x**2) / (2.0 * h) + x - h / 3.0
    deriv_m[rows, j + 1] = x**2 / (2.0 * h) - h / 6.0
    deriv_y[rows, j] = -1.0 / h
    deriv_y[rows, j + 1] = 1.0 / h
    second = _natural_second_derivatives(n_knots, h)
    return value_m @ second + value_y, deriv_m @ second + deriv_y


@lru_cache(maxsize=16)
def _operators(n: int, n_knots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For N validation samples: the least-squares solve (n_knots, N) giving knot values
    from D at ``t = linspace(0, 1, N)``, and the derivative basis (N, n_knots) at t."""
    t = np.linspace(0.0, 1.0, n)
    value, deriv = spline_bases(t, n_knots)
    return torch.from_numpy(np.linalg.pinv(value)), torch.from_numpy(deriv)


def _top(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top score ``s = max_k softmax(z)_k`` and its class (lowest index among ties)."""
    return torch.softmax(z, dim=-1).max(dim=-1)


def spline_table(logits_val: torch.Tensor, labels_val: torch.Tensor, n_knots: int = SPLINE_KNOTS):
    """Steps 1-3 and the table of step 4 for M networks: ``x``, ``y``, ``slope`` (M, P) of
    the (tie-averaged) pairs (s_i, gamma_i), padded by repeating the last; ``knot_values``
    (M, n_knots) of D; ``gamma`` (M, N) and sorted ``s`` (M, N) of the validation part."""
    z = logits_val.to(torch.float64)
    m, n, _ = z.shape
    device = z.device
    s, top = _top(z)
    hit = (top == labels_val[None, :]).to(torch.float64)
    s_sorted, order = torch.sort(s, dim=1, stable=True)
    a_sorted = hit.gather(1, order)
    diff = (torch.cumsum(a_sorted, dim=1) - torch.cumsum(s_sorted, dim=1)) / n  # h~ - h, (M, N)
    solve, deriv = _operators(n, n_knots)
    # Products summed per network (not a matrix product over the batch, whose blocking would
    # make a network's knots depend on the other networks in its batch in the last bits).
    knot_values = (solve.to(device)[None] * diff[:, None, :]).sum(-1)  # (M, n_knots)
    slope_d = (deriv.to(device)[None] * knot_values[:, None, :]).sum(-1)  # D'(t_i), (M, N)
    # N = 1: t and the factor are undefined; the score is kept (gamma = s), as before.
    gamma = s_sorted + slope_d * (n / (n - 1) if n > 1 else 0.0)

    # Tied s averaged: group the sorted scores by exact equality.
    starts = torch.ones((m, n), dtype=torch.bool, device=device)
    starts[:, 1:] = s_sorted[:, 1:] != s_sorted[:, :-1]
    group = torch.cumsum(starts.to(torch.int64), dim=1) - 1
    n_groups = group[:, -1] + 1
    sums = torch.zeros_like(gamma).scatter_add_(1, group, gamma)
    counts = torch.zeros_like(gamma).scatter_add_(1, group, torch.ones_like(gamma))
    xg = torch.zeros_like(gamma).scatter_(1, group, s_sorted)  # equal values within a group
    yg = sums / counts.clamp(min=1.0)
    p = int(n_groups.max())
    pad = torch.minimum(torch.arange(p, device=device)[None, :], (n_groups - 1)[:, None])
    xk, yk = xg.gather(1, pad), yg.gather(1, pad)
    return {
        "x": xk,
        "y": yk,
        "slope": segment_slopes(xk, yk),
        "knot_values": knot_values,
        "gamma": gamma,
        "s": s_sorted,
    }


def spline_scores(table: dict[str, torch.Tensor], scores: torch.Tensor) -> torch.Tensor:
    """Step 4: recalibrated top scores (M, N) of top scores (M, N), clipped to [0, 1]."""
    device = scores.device
    x, y, slope = (table[name].to(device) for name in ("x", "y", "slope"))
    return interp_rows(x, y, slope, scores).clamp(0.0, 1.0)


def spline_logits(table: dict[str, torch.Tensor], logits: torch.Tensor) -> torch.Tensor:
    """Step 5: recalibrated logits (log-probabilities) (M, N, K) of logits (M, N, K):
    ``log gamma`` for the top class and ``log(1 - gamma) + log softmax(z without top)_j``
    for the others (= ``log(p_j (1 - gamma) / (1 - p_top))``, without the cancellation in
    ``1 - p_top``; the log-sum-exp over the others is taken about their largest logit, so
    it never underflows)."""
    z = logits.to(torch.float64)
    s, top = _top(z)
    gamma = spline_scores(table, s)
    top_idx = top.unsqueeze(-1)
    others = z.scatter(-1, top_idx, float("-inf"))
    second = others.amax(dim=-1, keepdim=True)
    lse = second + torch.sub(others, second).exp_().sum(dim=-1, keepdim=True).log_()
    out = others.sub_(lse.sub_(torch.log1p(-gamma).unsqueeze(-1)))
    return out.scatter_(-1, top_idx, torch.log(gamma).unsqueeze(-1))


def spline_transform(x: torch.Tensor, y: torch.Tensor):
    """The map of stage ``spline`` from its interpolation table ``x``, ``y`` (M, P) (step 5);
    the segment slopes recomputed from it, as the fit computes them."""
    kept = {"x": x, "y": y, "slope": segment_slopes(x, y)}
    return lambda logits: spline_logits(kept, logits)


def fit_spline(logits_val: torch.Tensor, labels_val: torch.Tensor, n_knots: int = SPLINE_KNOTS) -> Fitted:
    """Spline recalibration of M networks (stage ``spline``; docs/recalibration.md,
    "Spline recalibration"; Gupta et al. 2021).

    ``logits_val`` (M, N_val, K), shared ``labels_val`` (N_val,). ``info``:
    ``max_abs_shift`` and ``mean_shift`` of ``gamma_i - s_i`` on the validation part
    (before clipping), ``converged`` (1), ``iterations`` (0). ``params``: ``knot_values``
    (M, n_knots) of the fitted D and the interpolation table ``x``, ``y`` (M, P).
    """
    if int(n_knots) != n_knots or n_knots < 2:
        raise ValueError(f"n_knots: expected an integer >= 2, got {n_knots!r}")
    z, y = check_logits(logits_val, labels_val, batched=True)
    m = z.shape[0]
    with torch.inference_mode():
        table = spline_table(z, y, int(n_knots))
    shift = table["gamma"] - table["s"]
    info = as_info({
        "max_abs_shift": shift.abs().amax(dim=1),
        "mean_shift": shift.mean(dim=1),
        "converged": np.ones(m),
        "iterations": np.zeros(m),
    })
    params = {"knot_values": table["knot_values"], "x": table["x"], "y": table["y"]}
    return Fitted(method="spline", transform=spline_transform(table["x"], table["y"]), info=info,
                  failures=non_finite_failures(params, [None] * m), params=params)
