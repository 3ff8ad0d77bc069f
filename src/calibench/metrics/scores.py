"""Proper scores, accuracy and OoD AUROC (docs/metrics.md, "NLL, Brier, accuracy", "OoD AUROC")."""

from __future__ import annotations

import torch

from calibench.metrics.hcs import hcs  # noqa: F401  (its home: torch-free)


def nll_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean ``-log_softmax(logits)[i, y_i]`` over samples; logits (..., N, K), labels (N,)."""
    log_p = torch.log_softmax(logits, dim=-1)
    index = labels.expand(*logits.shape[:-1]).unsqueeze(-1)
    return -torch.gather(log_p, -1, index).squeeze(-1).mean(dim=-1)


def brier_from_probabilities(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``mean_i sum_k (p_ik - 1[y_i = k])^2`` in [0, 2] (not divided by K)."""
    index = labels.expand(*probs.shape[:-1]).unsqueeze(-1)
    p_true = torch.gather(probs, -1, index).squeeze(-1)
    return ((probs * probs).sum(dim=-1) - 2.0 * p_true + 1.0).mean(dim=-1)


def auroc(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """Probability that a positive outscores a negative, ties counting 1/2 (Mann-Whitney).

    ``positive`` (..., P) and ``negative`` (..., Q) share leading dimensions.
    """
    neg_sorted = torch.sort(negative, dim=-1).values
    below = torch.searchsorted(neg_sorted, positive.contiguous(), right=False)
    not_above = torch.searchsorted(neg_sorted, positive.contiguous(), right=True)
    wins = below.to(torch.float64) + 0.5 * (not_above - below).to(torch.float64)
    return wins.sum(dim=-1) / (positive.shape[-1] * negative.shape[-1])
