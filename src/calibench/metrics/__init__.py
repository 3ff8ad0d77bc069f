"""Calibration metrics, exact to ``docs/metrics.md``.

Single-network functions on probabilities (``ece``, ``cwce``, ``kdece``, ...), the
whole suite in one pass (:func:`measure`) and its batched form over many networks
on CPU or CUDA (:func:`measure_batch`).
"""

# The names below load on first use (PEP 562), so a torch-free part of the package (the HCS
# formula, calibench.metrics.hcs, that the analysis and `calibench query` use) does not
# import torch with the package.
_FROM = {
    "calibench.metrics.functional": ("accuracy", "ace", "brier", "cwce", "cwce_em", "ece", "ece_em", "kdece",
                                     "ks_top2", "ks_within_top2", "ksce", "mce", "mmce", "nll", "ood_auroc", "tace"),
    "calibench.metrics.suite": ("BINNED_METRICS", "DEFAULT_BINS", "DEFAULT_TACE_THRESHOLD", "UNBINNED_METRICS",
                                "measure", "measure_batch", "metric_names"),
}
_MODULE_OF = {name: module for module, names in _FROM.items() for name in names}


def __getattr__(name: str):
    if name in _MODULE_OF:
        import importlib

        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'calibench.metrics' has no attribute {name!r}")


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
