"""Reliability diagrams (Guo et al. 2017, Fig. 1): per bin of top-label confidence, the
number of samples, their mean confidence and their accuracy.

Bins as ``ece`` bins them (docs/metrics.md, "Equal-width bins"): equal width, right-closed
``(lo, hi]``, the first bin ``[0, hi]``. An empty bin has count 0 and NaN confidence and
accuracy. ``sum_b count_b |accuracy_b - confidence_b| / N`` is the ECE at that bin count.
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.metrics import binned
from calibench.metrics._arrays import check_logits, check_probabilities
from calibench.metrics.suite import top_label

RELIABILITY_BINS = 15


def reliability_from_logits(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = RELIABILITY_BINS) -> dict:
    """Per-bin count, mean confidence and accuracy of M networks: logits (M, N, K) (entries
    may be ``-inf``, as recalibrated log-probabilities), labels (N,) -> arrays (M, n_bins)."""
    with torch.inference_mode():
        return _from_probs(torch.softmax(logits, dim=-1), labels, n_bins)


def _from_probs(probs: torch.Tensor, labels: torch.Tensor, n_bins: int) -> dict:
    if int(n_bins) < 1:
        raise ValueError(f"n_bins: expected a positive bin count, got {n_bins}")
    top = top_label(probs, labels)
    rows = binned.sort_rows(top.conf, top.hit)
    bounds = binned.equal_width_segments(rows, (int(n_bins),)).boundaries  # (M, B + 1)
    count = torch.diff(bounds, dim=-1)
    sum_conf = torch.diff(binned.prefix_at(rows.cum_values, bounds), dim=-1)
    sum_hit = torch.diff(binned.prefix_at(rows.cum_targets, bounds), dim=-1)
    safe = count.clamp(min=1).to(torch.float64)
    empty = count == 0
    nan = torch.full_like(sum_conf, float("nan"))
    return {"count": count.cpu().numpy().astype(np.float64),
            "confidence": torch.where(empty, nan, sum_conf / safe).cpu().numpy(),
            "accuracy": torch.where(empty, nan, sum_hit / safe).cpu().numpy()}


def reliability(probs, labels, n_bins: int = RELIABILITY_BINS) -> dict:
    """One network: probabilities (N, K), labels (N,) -> count, confidence, accuracy (n_bins,)."""
    p, y = check_probabilities(probs, labels)
    return {k: v[0] for k, v in _from_probs(p[None], y, n_bins).items()}


def reliability_batch(logits, labels, n_bins: int = RELIABILITY_BINS) -> dict:
    """:func:`reliability_from_logits` after the usual input checks (arrays or tensors)."""
    z, y = check_logits(logits, labels, batched=True)
    return reliability_from_logits(z, y, n_bins)
