"""KDE-based top-label ECE (Zhang et al. 2020, Mix-n-Match; docs/metrics.md, "KDE-ECE").

The densities follow the public ``ece_kde_binary`` exactly as it computes them:
KDEpy's ``FFTKDE`` with a triweight kernel whose *standard deviation* is the
bandwidth (support ``3 h``), the data reflected about 0 and 1, linear binning of
the data onto the evaluation grid, the kernel sampled on the grid out to
``floor(3 h / dx)`` steps, and a "same"-mode convolution (here one batched FFT).
The integral loop is vectorised: the "carry the previous integrand forward"
rule becomes a running maximum of the last valid grid index.
"""

from __future__ import annotations

import numpy as np
import torch

GRID_POINTS = 2**14
GRID_LOW, GRID_HIGH = -0.6, 1.6
DENSITY_FLOOR = 1e-6
_EPS = float(np.finfo(float).eps)  # KDEpy adds machine epsilon to every evaluated density


def _grid(device: torch.device) -> tuple[torch.Tensor, float]:
    x = torch.from_numpy(np.linspace(GRID_LOW, GRID_HIGH, GRID_POINTS)).to(device)
    dx = (GRID_HIGH - GRID_LOW) / (GRID_POINTS - 1)
    return x, dx


def _mirror(c: torch.Tensor) -> torch.Tensor:
    """Reflect each value about 0 (below 0.5) or about 1 (0.5 and above)."""
    return torch.where(c < 0.5, -c, 2.0 - c)


def _linear_binning(points: torch.Tensor, weights: torch.Tensor, dx: float) -> torch.Tensor:
    """Spread each point's weight over its two neighbouring grid nodes; (M, P) -> (M, G)."""
    t = (points - GRID_LOW) / dx
    lower = torch.floor(t)
    frac = t - lower
    lower = lower.to(torch.int64)
    m = points.shape[0]
    out = torch.zeros((m, GRID_POINTS + 1), dtype=points.dtype, device=points.device)
    out.scatter_add_(1, lower, weights * (1.0 - frac))
    out.scatter_add_(1, lower + 1, weights * frac)
    return out[:, :GRID_POINTS]


def _triweight_kernels(bandwidth: torch.Tensor, dx: float) -> tuple[torch.Tensor, int]:
    """Kernel samples at ``j * dx`` for |j| <= the widest row's support; (M, 2L + 1)."""
    support = 3.0 * bandwidth  # triweight scaled to standard deviation h
    steps = torch.floor(support / dx).clamp(max=GRID_POINTS)
    half = int(steps.max())
    offsets = torch.arange(-half, half + 1, device=bandwidth.device, dtype=bandwidth.dtype) * dx
    u = offsets / support[:, None]
    inside = (u * u < 1.0) & (offsets.abs()[None, :] <= steps[:, None] * dx)
    values = (35.0 / 32.0) * (1.0 - u * u).clamp(min=0.0) ** 3 / support[:, None]
    return torch.where(inside, values, torch.zeros_like(values)), half


def _densities(binned: torch.Tensor, kernels: torch.Tensor, half: int) -> torch.Tensor:
    """"same"-mode convolution of each row with its kernel, by FFT; (M, G)."""
    length = GRID_POINTS + 2 * half
    n_fft = 1 << (length - 1).bit_length()
    spectrum = torch.fft.rfft(binned, n=n_fft) * torch.fft.rfft(kernels, n=n_fft)
    full = torch.fft.irfft(spectrum, n=n_fft)
    return full[:, half : half + GRID_POINTS] + _EPS


def kde_ece_from_top_label(conf: torch.Tensor, hit: torch.Tensor) -> torch.Tensor:
    """KDE-ECE (order 1) per row of top-label confidences ``conf`` and hits ``hit``, both (M, N).

    NaN where the bandwidth is undefined or zero: fewer than two correct samples,
    or all correct samples at one confidence (the public code raises there).
    """
    m, n = conf.shape
    x, dx = _grid(conf.device)
    n_correct = hit.sum(dim=-1)
    mean_correct = (hit * conf).sum(dim=-1) / n_correct.clamp(min=1)
    var_correct = (hit * (conf - mean_correct[:, None]) ** 2).sum(dim=-1) / n_correct.clamp(min=1)
    bandwidth = torch.sqrt(var_correct) * (2.0 * n) ** -0.2
    usable = (n_correct > 0) & (bandwidth > 0)
    safe_bw = torch.where(usable, bandwidth, torch.ones_like(bandwidth))

    points = torch.cat([conf, _mirror(conf)], dim=-1)  # (M, 2N)
    all_weights = torch.full_like(points, 1.0 / (2 * n))
    hits2 = torch.cat([hit, hit], dim=-1)
    correct_weights = hits2 / (2.0 * n_correct.clamp(min=1))[:, None]

    binned = torch.cat([_linear_binning(points, correct_weights, dx), _linear_binning(points, all_weights, dx)])
    # Each row's kernel (and so its FFT length) from its own bandwidth alone, so that a row's
    # density does not depend on the other rows of the batch (bit-identical batched or alone).
    steps = torch.floor(3.0 * safe_bw / dx).clamp(max=GRID_POINTS)
    dens = torch.empty_like(binned)
    for value in torch.unique(steps):
        rows = torch.nonzero(steps == value).flatten()
        kernels, half = _triweight_kernels(safe_bw[rows], dx)
        both = torch.cat([rows, rows + m])
        dens[both] = _densities(binned[both], torch.cat([kernels, kernels]), half)
    outside = (x <= 0.0) | (x >= 1.0)
    dens = torch.where(outside, torch.zeros_like(dens), 2.0 * dens)
    p_correct, p_all = dens[:m], dens[m:]

    accuracy = hit.mean(dim=-1, keepdim=True)
    valid = torch.maximum(p_correct, p_all) > DENSITY_FLOOR
    reliability = torch.clamp(accuracy * p_correct / p_all, max=1.0)
    integrand = torch.where(torch.isnan(reliability), torch.zeros_like(p_all), (x - reliability).abs() * p_all)
    # Where both densities are negligible, carry the last valid value forward (0 before any).
    index = torch.arange(GRID_POINTS, device=conf.device).expand(m, -1)
    source = torch.cummax(torch.where(valid, index, torch.full_like(index, -1)), dim=-1).values
    carried = torch.gather(integrand, -1, source.clamp(min=0))
    integrand = torch.where(source >= 0, carried, torch.zeros_like(carried))

    inside = (x >= 0.0) & (x <= 1.0)
    xs = x[inside]
    value = torch.trapezoid(integrand[:, inside], xs, dim=-1) / torch.trapezoid(p_all[:, inside], xs, dim=-1)
    return torch.where(usable, value, torch.full_like(value, float("nan")))
