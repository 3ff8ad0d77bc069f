"""Calibration metrics, exact to ``metrics-spec.md``.

Single-network functions on probabilities (``ece``, ``cwce``, ``kdece``, ...), the
whole suite in one pass (:func:`measure`) and its batched form over many networks
on CPU or CUDA (:func:`measure_batch`).
"""

from calibench.metrics.functional import (
    accuracy,
    ace,
    brier,
    cwce,
    cwce_em,
    ece,
    ece_em,
    kdece,
    ks_top2,
    ks_within_top2,
    ksce,
    mce,
    mmce,
    nll,
    ood_auroc,
    tace,
)
from calibench.metrics.suite import (
    BINNED_METRICS,
    DEFAULT_BINS,
    DEFAULT_TACE_THRESHOLD,
    UNBINNED_METRICS,
    measure,
    measure_batch,
    metric_names,
)

__all__ = [
    "BINNED_METRICS",
    "DEFAULT_BINS",
    "DEFAULT_TACE_THRESHOLD",
    "UNBINNED_METRICS",
    "accuracy",
    "ace",
    "brier",
    "cwce",
    "cwce_em",
    "ece",
    "ece_em",
    "kdece",
    "ks_top2",
    "ks_within_top2",
    "ksce",
    "mce",
    "measure",
    "measure_batch",
    "metric_names",
    "mmce",
    "nll",
    "ood_auroc",
    "tace",
]
