"""One metric, one network: the functional API (docs/metrics.md).

Each function takes probabilities (N, K), numpy or torch, rows summing to 1, and
integer labels (N,), and returns a float. They share their cores with the batched
suite (:func:`calibench.metrics.measure_batch`), so both always agree.
"""

from __future__ import annotations

import torch

from calibench.metrics import binned
from calibench.metrics._arrays import check_bins, check_logits, check_probabilities, check_scores_1d
from calibench.metrics.kde import kde_ece_from_top_label
from calibench.metrics.ks import ks_from_sorted
from calibench.metrics.mmce_kernel import mmce_from_sorted
from calibench.metrics.scores import auroc, brier_from_probabilities, nll_from_logits
from calibench.metrics.suite import DEFAULT_TACE_THRESHOLD, classwise_rows, top_label


def _single_bin_count(n_bins) -> tuple[int, ...]:
    bins = check_bins(n_bins)
    if len(bins) != 1:
        raise ValueError(f"n_bins: expected one bin count, got {n_bins!r}")
    return bins


def _top(probs, labels):
    p, y = check_probabilities(probs, labels)
    return p, y, top_label(p[None], y)


def _top_rows(probs, labels) -> binned.SortedRows:
    _, _, top = _top(probs, labels)
    return binned.sort_rows(top.conf, top.hit)


def _classwise(probs, labels) -> tuple[binned.SortedRows, int, int]:
    p, y = check_probabilities(probs, labels)
    return classwise_rows(p[None], y), p.shape[0], p.shape[1]


@torch.inference_mode()
def ece(probs, labels, n_bins: int = 15) -> float:
    """Top-label ECE with equal-width right-closed bins (spec: "Equal-width bins")."""
    bins = _single_bin_count(n_bins)
    rows = _top_rows(probs, labels)
    sums = binned.segment_sums(rows, binned.equal_width_segments(rows, bins))
    return float(binned.total_gap(sums)[0, 0] / rows.n)


@torch.inference_mode()
def mce(probs, labels, n_bins: int = 15, signed: bool = False) -> float:
    """Maximum absolute bin gap over non-empty equal-width bins (spec: "Equal-width bins");
    ``signed``: the largest overconfidence, 0 for a network underconfident in every bin (Tao
    et al.'s, config ``mce: signed``)."""
    bins = _single_bin_count(n_bins)
    rows = _top_rows(probs, labels)
    sums = binned.segment_sums(rows, binned.equal_width_segments(rows, bins), signed)
    return float(binned.max_gap(sums, signed)[0, 0])


@torch.inference_mode()
def ece_em(probs, labels, n_bins: int = 15) -> float:
    """Top-label ECE with Kumar et al. equal-mass bins (spec: "Equal-mass bins")."""
    bins = _single_bin_count(n_bins)
    rows = _top_rows(probs, labels)
    sums = binned.segment_sums(rows, binned.equal_mass_segments(rows, bins))
    return float(binned.total_gap(sums)[0, 0] / rows.n)


def _classwise_total(probs, labels, n_bins, segments_for) -> float:
    bins = _single_bin_count(n_bins)
    rows, n, k = _classwise(probs, labels)
    sums = binned.segment_sums(rows, segments_for(rows, bins))
    return float(binned.total_gap(sums)[:, 0].sum() / (n * k))


@torch.inference_mode()
def cwce(probs, labels, n_bins: int = 15) -> float:
    """Classwise ECE (Nixon's SCE), equal-width bins, averaged over all K columns."""
    return _classwise_total(probs, labels, n_bins, binned.equal_width_segments)


@torch.inference_mode()
def cwce_em(probs, labels, n_bins: int = 15) -> float:
    """Classwise ECE with equal-mass bins per class (marginal, p = 1, no debiasing)."""
    return _classwise_total(probs, labels, n_bins, binned.equal_mass_segments)


def _adaptive(probs, labels, n_bins, threshold: float) -> float:
    bins = _single_bin_count(n_bins)
    rows, _, k = _classwise(probs, labels)
    segments, kept = binned.adaptive_segments(rows, bins, threshold)
    gaps = binned.total_gap(binned.segment_sums(rows, segments))[:, 0]
    per_class = torch.where(kept > 0, gaps / kept.clamp(min=1), torch.zeros_like(gaps))
    return float(per_class.sum() / k)


@torch.inference_mode()
def ace(probs, labels, n_bins: int = 15) -> float:
    """Adaptive calibration error: classwise rank ranges over all p > 0 (Nixon et al. 2019)."""
    return _adaptive(probs, labels, n_bins, 0.0)


@torch.inference_mode()
def tace(probs, labels, n_bins: int = 15, threshold: float = DEFAULT_TACE_THRESHOLD) -> float:
    """Thresholded ACE: as :func:`ace` over the probabilities above ``threshold``."""
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold: must lie in [0, 1), got {threshold}")
    return _adaptive(probs, labels, n_bins, threshold)


@torch.inference_mode()
def ksce(probs, labels) -> float:
    """Top-1 KS calibration error (Gupta et al. 2021)."""
    return float(ks_from_sorted(_top_rows(probs, labels))[0])


@torch.inference_mode()
def ks_top2(probs, labels) -> float:
    """KS error of the 2nd-highest score against ``1[y = 2nd class]``."""
    _, _, top = _top(probs, labels)
    return float(ks_from_sorted(binned.sort_rows(top.second_conf, top.second_hit))[0])


@torch.inference_mode()
def ks_within_top2(probs, labels) -> float:
    """KS error of the top-2 score sum against ``1[y in top-2]``."""
    _, _, top = _top(probs, labels)
    return float(ks_from_sorted(binned.sort_rows(top.conf + top.second_conf, top.hit + top.second_hit))[0])


@torch.inference_mode()
def kdece(probs, labels) -> float:
    """KDE-ECE of Mix-n-Match (order 1, top label); NaN if the bandwidth is undefined."""
    _, _, top = _top(probs, labels)
    return float(kde_ece_from_top_label(top.conf, top.hit)[0])


@torch.inference_mode()
def mmce(probs, labels) -> float:
    """MMCE with the Laplacian kernel of width 0.4, exact in O(N log N)."""
    return float(mmce_from_sorted(_top_rows(probs, labels))[0])


@torch.inference_mode()
def brier(probs, labels) -> float:
    """Multiclass Brier score in [0, 2] (not divided by K, unlike the reference benchmark)."""
    p, y = check_probabilities(probs, labels)
    return float(brier_from_probabilities(p, y))


@torch.inference_mode()
def accuracy(probs, labels) -> float:
    """Top-1 accuracy as a fraction."""
    _, _, top = _top(probs, labels)
    return float(top.hit.mean())


@torch.inference_mode()
def nll(logits, labels) -> float:
    """Mean negative log-likelihood, from logits (probabilities can underflow to 0)."""
    z, y = check_logits(logits, labels)
    return float(nll_from_logits(z, y))


@torch.inference_mode()
def ood_auroc(id_scores, ood_scores) -> float:
    """AUROC of in-distribution (positive) against OoD scores, ties counting 1/2."""
    positive = check_scores_1d(id_scores, "id_scores")
    negative = check_scores_1d(ood_scores, "ood_scores").to(positive.device)
    return float(auroc(positive, negative))
