"""Kolmogorov-Smirnov calibration error (Gupta et al. 2021; docs/metrics.md, "KS calibration error")."""

from __future__ import annotations

import torch

from calibench.metrics.binned import SortedRows


def ks_from_sorted(rows: SortedRows) -> torch.Tensor:
    """``max_i |h_i - h~_i|`` per row, read only at the last index of each group of tied scores.

    ``h`` and ``h~`` are the cumulative sums of targets and scores over the rows
    sorted by score, divided by N; reading at ends of ties makes the result
    independent of the order inside a tie.
    """
    n = rows.n
    diff = (rows.cum_targets - rows.cum_values).abs() / n
    end_of_tie = torch.ones_like(rows.values, dtype=torch.bool)
    end_of_tie[..., :-1] = rows.values[..., 1:] != rows.values[..., :-1]
    return torch.where(end_of_tie, diff, torch.zeros_like(diff)).amax(dim=-1)
