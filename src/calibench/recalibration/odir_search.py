"""Choosing lambda and mu of ``ms`` and ``dir`` (docs/recalibration.md, "Choosing lambda and
mu", under "Dirichlet calibration with ODIR").

Once per population: 5-fold cross-validated NLL on the validation parts of a sample of M
networks, over the grid lambda, mu in {1e-7, 1e-5, 1e-3, 1e-1, 1e1, 1e3}; the pair with the
lowest mean held-out NLL (over folds and networks) wins; ties go to the first pair in grid
order (lambda outer, mu inner).

The winner is always the grid's best pair by cross-validated NLL, as in Kull et al. 2019.
Where even it is worse than no recalibration (W = I, b = 0: the network's own softmax) on
the same held-out folds, it is still the winner, flagged ``worse_than_identity`` with the
reason (typically too few validation samples for K^2 parameters); the search never
switches to a pair whose CV NLL is worse than the best's (the spec withdrew issue 25's
"strongest pair" fallback).

One seeded fold assignment of the N_val validation samples is shared by all networks. All
networks x folds are fitted together, one batched fit per (lambda, mu), each started from
its solution at the previous grid point (a warm start: the objective is convex, so only
the iteration count depends on the start).
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.vocabulary import ODIR_STAGES
from calibench.recalibration.batched import _label_rows
from calibench.recalibration.lbfgs import _fit_odir
from calibench.recalibration.scaling import DEFAULT_TOLERANCE, _check_batch

DEFAULT_GRID = (1e-7, 1e-5, 1e-3, 1e-1, 1e1, 1e3)
DEFAULT_FOLDS = 5
METHODS = ODIR_STAGES
CPU_CHUNK = 10


def fold_assignment(n: int, folds: int, seed: int) -> np.ndarray:
    """Fold index (0..folds-1) of each of n samples: a seeded permutation dealt round-robin,
    so fold sizes differ by at most one."""
    if folds < 2 or folds > n:
        raise ValueError(f"folds: expected 2 <= folds <= N_val = {n}, got {folds}")
    perm = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=np.int64)
    out[perm] = np.arange(n) % folds
    return out


def best_pair(mean_nll: np.ndarray) -> tuple[int, int]:
    """(row, column) of the lowest mean NLL; ties go to the first in grid order (lambda
    outer, mu inner); NaN never wins."""
    values = np.where(np.isnan(mean_nll), np.inf, mean_nll)
    return divmod(int(np.argmin(values)), values.shape[1])  # argmin: first minimum, row-major


def _gather_rows(x: torch.Tensor, y: torch.Tensor, index_sets: list[np.ndarray]):
    """Stack rows of x (M, N, K) for each index set into (M * F, n_max, K), padded with
    zero-weight rows; per-problem labels (M * F, n_max) and weights summing to 1."""
    m, _, k = x.shape
    n_max = max(len(ix) for ix in index_sets)
    f = len(index_sets)
    xs = x.new_zeros((m, f, n_max, k))
    ys = torch.zeros((f, n_max), dtype=torch.int64, device=x.device)
    ws = x.new_zeros((f, n_max))
    for j, ix in enumerate(index_sets):
        t = torch.from_numpy(ix).to(x.device)
        xs[:, j, : len(ix)] = x[:, t]
        ys[j, : len(ix)] = y[t]
        ws[j, : len(ix)] = 1.0 / len(ix)
    return (xs.reshape(m * f, n_max, k), ys.repeat(m, 1), ws.repeat(m, 1))


def _identity(bsz: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """theta of W = I, b = 0 for bsz problems."""
    eye = torch.eye(k, dtype=like.dtype, device=like.device).flatten()
    return torch.cat([eye.expand(bsz, -1), like.new_zeros((bsz, k))], dim=-1)


def _held_out_nll(x, y, w, theta):
    bsz, _, k = x.shape
    W = theta[:, : k * k].view(bsz, k, k)
    b = theta[:, k * k :]
    u = torch.baddbmm(b[:, None, :], x, W.transpose(1, 2))
    lse = torch.logsumexp(u, dim=-1, keepdim=True)
    return ((lse - torch.gather(u, -1, _label_rows(y, bsz))).squeeze(-1) * w).sum(-1)


def search_odir(logits_val, labels_val, method: str, grid=DEFAULT_GRID, folds: int = DEFAULT_FOLDS,
                seed: int = 0, max_iterations: int = 1000, tolerance: float = DEFAULT_TOLERANCE,
                chunk: int | None = None) -> dict:
    """Cross-validated choice of (lambda, mu) for ``method`` ("ms" or "dir").

    ``logits_val`` (M, N_val, K): the validation parts of the sampled networks; shared
    ``labels_val`` (N_val,). ``chunk``: about this many (network, fold) problems are fitted
    at once (whole networks; at least one); default ``CPU_CHUNK`` on CPU (larger batches
    run slower per problem there: the L-BFGS histories leave the cache) and all on other
    devices. Networks whose logits are not finite are left out
    (listed in ``excluded``); a fit whose objective becomes non-finite counts as an
    infinite held-out NLL, so its grid point cannot win.

    Returns a dict: ``lambda``, ``mu`` (the winners), ``nll`` (the winners' mean held-out
    NLL), ``identity_nll`` (the same for W = I, b = 0), ``worse_than_identity`` (bool: the
    winners' CV NLL is above identity's), ``reason`` (None, or that comparison in words),
    ``best_index`` (their (row, column) in the grid), ``grid`` (the list of values),
    ``mean_nll`` (len(grid) x len(grid) array, rows lambda, columns mu; an infinite entry:
    some fit failed), ``not_converged`` (same shape: count of (network, fold) fits not
    converged; their last iterates are still scored), ``iterations`` (same shape: total
    L-BFGS iterations), ``folds``, ``seed``, ``networks`` (indices used), ``excluded``.

    Cost: (number of grid pairs) x (M x folds) fits of N_val (folds - 1)/folds samples; at
    K = 100 mostly the two N x K x K products per L-BFGS iteration, and the weakly
    regularised pairs take the most iterations (up to ``max_iterations``).
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    grid = tuple(float(v) for v in grid)
    if not grid or any(not np.isfinite(v) or v < 0 for v in grid):
        raise ValueError(f"grid: expected non-negative finite values, got {grid}")
    z, y, failures = _check_batch(logits_val, labels_val)
    used = [i for i, r in enumerate(failures) if r is None]
    excluded = [i for i, r in enumerate(failures) if r is not None]
    if not used:
        raise ValueError("search_odir: no network with finite validation logits")
    z = z[used]
    m, n, k = z.shape
    x = torch.log_softmax(z, dim=-1) if method == "dir" else z
    assign = fold_assignment(n, folds, seed)
    train_sets = [np.nonzero(assign != j)[0] for j in range(folds)]
    test_sets = [np.nonzero(assign == j)[0] for j in range(folds)]
    nl = len(grid)
    mean_nll = np.full((nl, nl), np.nan)
    not_converged = np.zeros((nl, nl), dtype=np.int64)
    iterations = np.zeros((nl, nl), dtype=np.int64)
    if chunk is None:
        chunk = CPU_CHUNK if x.device.type == "cpu" else m * folds
    per_chunk = max(1, chunk // folds)  # whole networks per chunk
    sums = np.zeros((nl, nl))
    identity_sum = 0.0
    with torch.no_grad():
        for start in range(0, m, per_chunk):
            xc = x[start : start + per_chunk]
            xtr, ytr, wtr = _gather_rows(xc, y, train_sets)
            xte, yte, wte = _gather_rows(xc, y, test_sets)
            bsz = xtr.shape[0]
            identity_sum += float(_held_out_nll(xte, yte, wte, _identity(bsz, k, xte)).sum())
            theta_row = None  # warm start for the next lambda: its solution at the first mu
            for i, lam in enumerate(grid):
                theta = theta_row
                for j, mu in enumerate(grid):
                    lam_t = torch.full((bsz,), lam / (k * (k - 1)), dtype=x.dtype, device=x.device)
                    mu_t = torch.full((bsz,), mu / k, dtype=x.dtype, device=x.device)
                    theta, _, _, its, conv, _, reasons = _fit_odir(
                        xtr, ytr, wtr, lam_t, mu_t, max_iterations, tolerance, theta0=theta)
                    usable = torch.tensor([r is None or "not finite" not in r for r in reasons], device=x.device)
                    usable &= torch.isfinite(theta).all(-1)
                    held = _held_out_nll(xte, yte, wte, theta)
                    held = torch.where(usable & torch.isfinite(held), held, torch.full_like(held, float("inf")))
                    theta = torch.where(usable[:, None], theta, _identity(bsz, k, theta))  # next start
                    sums[i, j] += float(held.sum())
                    not_converged[i, j] += int((~conv).sum())
                    iterations[i, j] += int(its.sum())
                    if j == 0:
                        theta_row = theta.clone()
    mean_nll = sums / (m * folds)
    identity_nll = identity_sum / (m * folds)
    bi, bj = best_pair(mean_nll)
    worse = not mean_nll[bi, bj] <= identity_nll
    reason = (f"the grid's best pair (lambda={grid[bi]:g}, mu={grid[bj]:g}; CV NLL {mean_nll[bi, bj]:.6g}) is "
              f"worse than no recalibration (CV NLL {identity_nll:.6g}) on the same folds: fitted with it "
              "and flagged" if worse else None)
    return {
        "lambda": grid[bi],
        "mu": grid[bj],
        "nll": float(mean_nll[bi, bj]),
        "identity_nll": float(identity_nll),
        "worse_than_identity": worse,
        "reason": reason,
        "best_index": (bi, bj),
        "grid": list(grid),
        "mean_nll": mean_nll,
        "not_converged": not_converged,
        "iterations": iterations,
        "folds": folds,
        "seed": seed,
        "networks": used,
        "excluded": excluded,
    }
