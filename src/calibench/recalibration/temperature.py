"""Temperature scaling, stage ``post`` (docs/metrics.md, "Temperature scaling";
docs/recalibration.md, "Temperature scaling").

``nll``: the NLL-optimal T in [0.05, 20], solved in beta = 1/T by safeguarded Newton,
vectorised over networks. ``grid_ece``: the reference benchmark's grid search.
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.metrics import binned
from calibench.metrics._arrays import check_logits
from calibench.metrics.suite import default_chunk_elements
from calibench.recalibration.base import Fitted, as_info

T_MIN, T_MAX = 0.05, 20.0
BETA_TOLERANCE = 1e-8
MAX_NEWTON_STEPS = 100
GRID_TEMPERATURES = np.arange(1, 101) / 10.0  # 0.1, 0.2, ..., 10.0 (reference benchmark)
GRID_ECE_BINS = 15
METHODS = ("nll", "grid_ece")


def _nll_slope_curvature(z: torch.Tensor, z_true: torch.Tensor, beta: torch.Tensor):
    """First and second derivative in beta of ``mean NLL(beta * z)``; z (M, N, K)."""
    p = torch.softmax(beta[:, None, None] * z, dim=-1)
    expected = (p * z).sum(-1)
    second_moment = (p * z * z).sum(-1)
    slope = (expected - z_true).mean(-1)
    curvature = (second_moment - expected * expected).clamp(min=0).mean(-1)
    return slope, curvature


def _fit_nll(z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Safeguarded Newton on beta = 1/T in [1/T_MAX, 1/T_MIN], vectorised over networks.

    NLL is convex in beta, so its slope is increasing: the root is kept bracketed
    and a Newton step that leaves the bracket is replaced by bisection. Returns T,
    the Newton steps each network took and whether it met the tolerance.
    """
    m = z.shape[0]
    z_true = torch.gather(z, -1, y.expand(m, -1).unsqueeze(-1)).squeeze(-1)
    lo = torch.full((m,), 1.0 / T_MAX, dtype=z.dtype, device=z.device)
    hi = torch.full((m,), 1.0 / T_MIN, dtype=z.dtype, device=z.device)
    slope_lo, _ = _nll_slope_curvature(z, z_true, lo)
    slope_hi, _ = _nll_slope_curvature(z, z_true, hi)
    at_lo = slope_lo >= 0  # NLL increasing over the whole range: T = T_MAX
    at_hi = slope_hi <= 0  # decreasing (e.g. all correct with margin): T = T_MIN
    beta = torch.ones_like(lo).clamp(lo, hi)
    active = ~(at_lo | at_hi)
    steps = torch.zeros(m, dtype=torch.long, device=z.device)
    for _ in range(MAX_NEWTON_STEPS):
        if not bool(active.any()):
            break
        idx = torch.nonzero(active).squeeze(-1)
        b = beta[idx]
        slope, curvature = _nll_slope_curvature(z[idx], z_true[idx], b)
        new_lo = torch.where(slope < 0, b, lo[idx])
        new_hi = torch.where(slope > 0, b, hi[idx])
        newton = b - slope / curvature
        ok = (curvature > 0) & (newton > new_lo) & (newton < new_hi)
        step = torch.where(ok, newton, (new_lo + new_hi) / 2)
        step = torch.where(slope == 0, b, step)
        lo[idx], hi[idx], beta[idx] = new_lo, new_hi, step
        steps[idx] += 1
        converged = (step - b).abs() < BETA_TOLERANCE
        active[idx[converged]] = False
    beta = torch.where(at_lo, lo, torch.where(at_hi, hi, beta))
    return 1.0 / beta, steps, ~active


def _ece_rows(conf: torch.Tensor, hit: torch.Tensor, n_bins: int) -> torch.Tensor:
    rows = binned.sort_rows(conf, hit)
    sums = binned.segment_sums(rows, binned.equal_width_segments(rows, (n_bins,)))
    return binned.total_gap(sums)[:, 0] / rows.n


def _fit_grid_ece(z: torch.Tensor, y: torch.Tensor, chunk_elements: int | None) -> torch.Tensor:
    """The reference benchmark's fit: T on 0.1..10.0 minimising 15-bin ECE (first minimum)."""
    m, n, k = z.shape
    if chunk_elements is None:
        chunk_elements = default_chunk_elements(z.device)
    temperatures = torch.from_numpy(GRID_TEMPERATURES).to(z.device)
    pred = torch.argmax(z, dim=-1)  # unchanged by any T > 0
    hit = (pred == y).to(z.dtype)
    best = torch.empty(m, dtype=z.dtype, device=z.device)
    per_chunk = max(1, chunk_elements // (len(temperatures) * n * k))
    for start in range(0, m, per_chunk):
        zc = z[start : start + per_chunk]
        scaled = zc[:, None] / temperatures[None, :, None, None]  # (m, T, N, K)
        conf = torch.softmax(scaled, dim=-1).amax(dim=-1)
        rows_hit = hit[start : start + per_chunk, None, :].expand_as(conf)
        ece = _ece_rows(conf.reshape(-1, n), rows_hit.reshape(-1, n), GRID_ECE_BINS).reshape(-1, len(temperatures))
        best[start : start + per_chunk] = temperatures[torch.argmin(ece, dim=-1)]
    return best


def fit_temperature_batch(logits_val, labels_val, method: str = "nll", chunk_elements: int | None = None):
    """One temperature per network: logits (M, N, K), shared labels (N,) -> float64 array (M,).

    ``nll``: argmin of the validation NLL over T in [0.05, 20], solved in beta = 1/T
    to |d beta| < 1e-8. ``grid_ece``: the reference benchmark's grid search.
    """
    z, y = check_logits(logits_val, labels_val, batched=True)
    return _fit(z, y, method, chunk_elements)[0].cpu().numpy()


def _fit(z: torch.Tensor, y: torch.Tensor, method: str, chunk_elements: int | None = None):
    """(T, iterations, converged) per network; the grid search counts its grid points."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    with torch.inference_mode():
        if method == "nll":
            return _fit_nll(z, y)
        temperature = _fit_grid_ece(z, y, chunk_elements)
        m = temperature.shape[0]
        return (temperature, torch.full((m,), len(GRID_TEMPERATURES), device=z.device),
                torch.ones(m, dtype=torch.bool, device=z.device))


def fit_temperature(logits_val, labels_val, method: str = "nll") -> float:
    """The fitted temperature of one network: logits (N, K), labels (N,)."""
    z, y = check_logits(logits_val, labels_val)
    return float(_fit(z[None], y, method)[0][0])


def temperature_transform(temperature: torch.Tensor):
    """The map ``z / T`` of temperatures (M,): the fitted map of stage ``post``, also rebuilt
    from stored parameters (:func:`calibench.recalibration.stage_transform`)."""
    scale = temperature[:, None, None]
    return lambda z: z / scale.to(z.device)


def fit_temperature_scaling(logits_val: torch.Tensor, labels_val: torch.Tensor, method: str = "nll",
                            chunk_elements: int | None = None) -> Fitted:
    """Temperature scaling of M networks: ``softmax(z / T)``; ``info``: temperature,
    iterations (Newton steps; grid points for ``grid_ece``), converged. Logits and labels
    may be arrays or tensors (validated and converted, as every other stage)."""
    z, y = check_logits(logits_val, labels_val, batched=True)
    temperature, iterations, converged = _fit(z, y, method, chunk_elements)
    return Fitted(
        method="post",
        transform=temperature_transform(temperature),
        info=as_info({"temperature": temperature, "converged": converged, "iterations": iterations}),
        failures=[None if ok else f"temperature: Newton did not reach |d beta| < {BETA_TOLERANCE:g} "
                  f"in {MAX_NEWTON_STEPS} steps" for ok in converged.tolist()],
        params={"temperature": temperature},
    )
