"""Maximum mean calibration error (Kumar et al. 2018; docs/metrics.md, "MMCE")."""

from __future__ import annotations

import torch

from calibench.metrics.binned import SortedRows

KERNEL_WIDTH = 0.4  # Laplacian kernel exp(-|x - y| / 0.4), the value netcal reports


def mmce_from_sorted(rows: SortedRows, width: float = KERNEL_WIDTH) -> torch.Tensor:
    """Exact MMCE in O(N log N) per row, for rows sorted by confidence with hits as targets.

    For sorted confidences the Laplacian kernel factorises,
    ``exp(-(c_j - c_i)/w) = exp((1 - c_j)/w) * exp((c_i - 1)/w)`` for ``i <= j``, so
    ``sum_{i<j} d_i d_j k_ij`` is one exclusive prefix sum (the closed form of the
    spec's recurrence for ``S_j``). Both factors stay within [exp(-1/w), exp(1/w)].
    """
    c = rows.values
    d = rows.targets - c
    weighted = d * torch.exp((c - 1.0) / width)
    before = torch.cumsum(weighted, dim=-1) - weighted  # sum over i < j
    cross = (d * torch.exp((1.0 - c) / width) * before).sum(dim=-1)
    total = (d * d).sum(dim=-1) + 2.0 * cross
    return torch.sqrt(total.clamp(min=0.0)) / rows.n
