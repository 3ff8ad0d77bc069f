"""The whole metric suite for many networks in one pass (docs/metrics.md).

``measure_batch`` takes logits of M networks on one shared evaluation set and
returns every metric for each network. Each network's top-label row is sorted
once (ECE, ECE_em, MCE, KS, MMCE), its K class rows once with a stable sort
(cwCE, cwCE_em, ACE, TACE), and the top-2 rows once (the two top-2 KS variants);
all bin counts reuse those sorts through prefix sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from calibench.metrics import binned
from calibench.metrics._arrays import check_bins, check_logits
from calibench.metrics.kde import kde_ece_from_top_label
from calibench.metrics.ks import ks_from_sorted
from calibench.metrics.mmce_kernel import mmce_from_sorted
from calibench.metrics.scores import brier_from_probabilities, nll_from_logits
from calibench.vocabulary import MCE_GAPS

DEFAULT_BINS = (5, 10, 15, 20, 25, 50, 100, 200, 500)
DEFAULT_TACE_THRESHOLD = 1e-3

BINNED_METRICS = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
UNBINNED_METRICS = (
    "ksce",
    "ks_top2",
    "ks_within_top2",
    "kdece",
    "mmce",
    "nll",
    "brier",
    "accuracy",
    "mean_conf_correct",
    "mean_conf_incorrect",
)

# Logits (M x N x K elements) measured at once, about 40 bytes of working memory
# each. On CPU, batches beyond about one CIFAR-100 network only add cache misses
# (bench/bench_metrics.py); a GPU wants large batches.
CPU_CHUNK_ELEMENTS = 2_000_000
CUDA_CHUNK_ELEMENTS = 50_000_000


def default_chunk_elements(device: torch.device) -> int:
    return CUDA_CHUNK_ELEMENTS if device.type == "cuda" else CPU_CHUNK_ELEMENTS


def metric_names(bins=DEFAULT_BINS) -> list[str]:
    """The keys ``measure`` returns, in a stable order: ``{metric}_{bins}`` then unbinned."""
    bins = check_bins(bins)
    return binned_metric_names(bins) + list(UNBINNED_METRICS)


def binned_metric_names(bins=DEFAULT_BINS) -> list[str]:
    """The binned keys ``{metric}_{bins}`` of :func:`metric_names`, in its order."""
    return [f"{m}_{b}" for m in BINNED_METRICS for b in check_bins(bins)]


@dataclass(frozen=True)
class TopLabel:
    """Top-1 and top-2 predictions of M networks: all (M, N)."""

    conf: torch.Tensor
    hit: torch.Tensor
    second_conf: torch.Tensor | None
    second_hit: torch.Tensor | None


def top_label(probs: torch.Tensor, labels: torch.Tensor, second: bool = True) -> TopLabel:
    """Top-1 by ``argmax`` (ties: lowest index); the 2nd class is the argmax with the 1st masked
    (``second=False``: not computed, its fields None)."""
    pred = torch.argmax(probs, dim=-1, keepdim=True)
    conf = torch.gather(probs, -1, pred).squeeze(-1)
    if not second:
        return TopLabel(conf, (pred.squeeze(-1) == labels).to(probs.dtype), None, None)
    masked = probs.scatter(-1, pred, float("-inf"))
    second = torch.argmax(masked, dim=-1, keepdim=True)
    second_conf = torch.gather(probs, -1, second).squeeze(-1)
    hit = (pred.squeeze(-1) == labels).to(probs.dtype)
    second_hit = (second.squeeze(-1) == labels).to(probs.dtype)
    return TopLabel(conf, hit, second_conf, second_hit)


def classwise_rows(probs: torch.Tensor, labels: torch.Tensor) -> binned.SortedRows:
    """One stably sorted row per (network, class): p_k against 1[y = k]; M*K rows."""
    m, n, k = probs.shape
    values = probs.transpose(1, 2).reshape(m * k, n).contiguous()  # rows must be contiguous to sort fast
    classes = torch.arange(k, device=probs.device).repeat(m)
    return binned.sort_class_rows(values, labels, classes)


def _class_mean(per_class: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """(M*K, G) per-class values -> (M, G) means over the K classes. Each mean is reduced over
    a contiguous row of K, so its bits do not depend on which other bin counts are measured
    with it (a re-measurement of new bin counts only equals a measurement of all of them)."""
    return per_class.reshape(m, k, -1).transpose(1, 2).contiguous().mean(dim=-1)


def _measure_chunk(logits: torch.Tensor, labels: torch.Tensor, bins: tuple[int, ...], tace_threshold: float,
                   unbinned: bool = True, mce: str = MCE_GAPS[0]):
    m, n, k = logits.shape
    probs = torch.softmax(logits, dim=-1)
    top = top_label(probs, labels, second=unbinned)
    out: dict[str, torch.Tensor] = {}

    top_rows = binned.sort_rows(top.conf, top.hit)
    signed = mce == "signed"
    width, mass = binned.segment_sums_many(
        top_rows, [binned.equal_width_segments(top_rows, bins), binned.equal_mass_segments(top_rows, bins)], signed)
    per_bins = {
        "ece": binned.total_gap(width) / n,
        "ece_em": binned.total_gap(mass) / n,
        "mce": binned.max_gap(width, signed),
    }

    class_rows = classwise_rows(probs, labels)
    adaptive = [binned.adaptive_segments(class_rows, bins, threshold) for threshold in (0.0, tace_threshold)]
    cw, cw_em, *adaptive_sums = binned.segment_sums_many(
        class_rows, [binned.equal_width_segments(class_rows, bins), binned.equal_mass_segments(class_rows, bins)]
        + [segments for segments, _ in adaptive])
    per_bins["cwce"] = _class_mean(binned.total_gap(cw) / n, m, k)
    per_bins["cwce_em"] = _class_mean(binned.total_gap(cw_em) / n, m, k)
    for name, (_, kept), sums in zip(("ace", "tace"), adaptive, adaptive_sums):
        gaps = binned.total_gap(sums)
        per_class = torch.where(kept[:, None] > 0, gaps / kept.clamp(min=1)[:, None], torch.zeros_like(gaps))
        per_bins[name] = _class_mean(per_class, m, k)
    for name, values in per_bins.items():
        for j, b in enumerate(bins):
            out[f"{name}_{b}"] = values[:, j]
    if not unbinned:
        return out

    out["ksce"] = ks_from_sorted(top_rows)
    top2_rows = binned.sort_rows(
        torch.cat([top.second_conf, top.conf + top.second_conf]),
        torch.cat([top.second_hit, top.hit + top.second_hit]),
    )
    top2 = ks_from_sorted(top2_rows)
    out["ks_top2"], out["ks_within_top2"] = top2[:m], top2[m:]
    out["kdece"] = kde_ece_from_top_label(top.conf, top.hit)
    out["mmce"] = mmce_from_sorted(top_rows)
    out["nll"] = nll_from_logits(logits, labels)
    out["brier"] = brier_from_probabilities(probs, labels)
    n_correct = top.hit.sum(dim=-1)
    out["accuracy"] = n_correct / n
    nan = torch.full_like(n_correct, float("nan"))
    out["mean_conf_correct"] = torch.where(n_correct > 0, (top.conf * top.hit).sum(-1) / n_correct.clamp(min=1), nan)
    n_wrong = n - n_correct
    out["mean_conf_incorrect"] = torch.where(
        n_wrong > 0, (top.conf * (1 - top.hit)).sum(-1) / n_wrong.clamp(min=1), nan
    )
    return out


def measure_batch(
    logits,
    labels,
    bins=DEFAULT_BINS,
    tace_threshold: float = DEFAULT_TACE_THRESHOLD,
    chunk_elements: int | None = None,
    mce: str = MCE_GAPS[0],
) -> dict[str, np.ndarray]:
    """Every metric for M networks: logits (M, N, K) on CPU or CUDA, shared labels (N,).

    Returns ``{name: float64 array of shape (M,)}`` with the keys of
    :func:`metric_names`. Networks are processed in chunks of at most
    ``chunk_elements`` logits (default: by device) to bound memory; results equal :func:`measure` per network.
    ``mce``: ``unsigned`` (the spec's), or ``signed``, Tao et al.'s (:func:`calibench.metrics.binned.max_gap`).
    """
    z, y = check_logits(logits, labels, batched=True)
    return measure_validated(z, y, check_bins(bins), tace_threshold, chunk_elements, mce=mce)


def measure_validated(
    z: torch.Tensor,
    y: torch.Tensor,
    bins: tuple[int, ...],
    tace_threshold: float = DEFAULT_TACE_THRESHOLD,
    chunk_elements: int | None = None,
    unbinned: bool = True,
    mce: str = MCE_GAPS[0],
) -> dict[str, np.ndarray]:
    """:func:`measure_batch` on already checked float64 logits (M, N, K) and int64 labels;
    ``unbinned=False``: the binned metrics only (a re-measurement of new bin counts; each bin
    count's values do not depend on the others measured with it)."""
    if mce not in MCE_GAPS:
        raise ValueError(f"mce: {mce!r}; expected one of {', '.join(MCE_GAPS)}")
    m, n, k = z.shape
    if chunk_elements is None:
        chunk_elements = default_chunk_elements(z.device)
    per_chunk = max(1, chunk_elements // (n * k))
    parts: list[dict[str, torch.Tensor]] = []
    with torch.inference_mode():
        for start in range(0, m, per_chunk):
            parts.append(_measure_chunk(z[start : start + per_chunk], y, bins, tace_threshold, unbinned, mce))
    names = metric_names(bins) if unbinned else binned_metric_names(bins)
    return {name: torch.cat([p[name] for p in parts]).cpu().numpy() for name in names}


def measure(
    logits, labels, bins=DEFAULT_BINS, tace_threshold: float = DEFAULT_TACE_THRESHOLD
) -> dict[str, float]:
    """Every metric for one network: logits (N, K), labels (N,). Keys as :func:`metric_names`."""
    z, y = check_logits(logits, labels)
    batch = measure_validated(z[None], y, check_bins(bins), tace_threshold)
    return {name: float(values[0]) for name, values in batch.items()}
