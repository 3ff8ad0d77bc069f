"""What each column of a result table means: one registry that ``top``, ``nas``, HCS, the
analysis, the report, import, export and compare read (docs/metrics.md).

For every metric: whether lower or higher is better (or neither: a property such as a fitted
temperature), its range where one exists, and where an estimator has none. A table column
is ``{stage}_{metric}[_{bins}]`` (``post_ece_15``, ``vs_kdece``, ``pre_ood_auroc_svhn``,
``ms_fit_lambda``), or one without a stage (``accuracy``: the network's own, ``hcs_2``,
``recorded_accuracy``, ``temperature``). Torch-free.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calibench.vocabulary import SEARCH_FLAG, STAGES

__all__ = ["Meaning", "Column", "METRICS", "column", "higher_is_better", "best_first_descending", "direction_words",
           "outside_range", "unstable"]


@dataclass(frozen=True)
class Meaning:
    """``better``: "lower", "higher" or None (not a score). ``low``, ``high``: the range a
    value can take (``high`` None: no upper bound). ``unstable_above``: values above it are
    possible but signal that the estimator is unstable there (flagged, never clipped)."""

    title: str
    better: str | None
    low: float | None
    high: float | None
    unstable_above: float | None = None


_ERROR = dict(better="lower", low=0.0, high=1.0)
METRICS: dict[str, Meaning] = {
    "ece": Meaning("ECE, equal-width bins", **_ERROR),
    "ece_em": Meaning("ECE, equal-mass bins", **_ERROR),
    "mce": Meaning("maximum calibration error", **_ERROR),
    "cwce": Meaning("class-wise ECE, equal-width bins", **_ERROR),
    "cwce_em": Meaning("class-wise ECE, equal-mass bins", **_ERROR),
    "ace": Meaning("adaptive calibration error", **_ERROR),
    "tace": Meaning("thresholded adaptive calibration error", **_ERROR),
    "ksce": Meaning("KS calibration error, top-1", **_ERROR),
    "ks_top2": Meaning("KS calibration error, 2nd class", **_ERROR),
    "ks_within_top2": Meaning("KS calibration error, within the top 2", **_ERROR),
    # Zhang et al. 2020's estimator exceeds 1 where the densities are degenerate (e.g. a
    # handful of correct predictions): faithful to the estimator, but not an error in [0, 1]
    "kdece": Meaning("KDE-ECE", "lower", 0.0, None, unstable_above=1.0),
    "mmce": Meaning("MMCE, Laplacian kernel", "lower", 0.0, 1.0),
    "nll": Meaning("negative log-likelihood", "lower", 0.0, None),
    "brier": Meaning("Brier score (sum over classes)", "lower", 0.0, 2.0),
    "accuracy": Meaning("top-1 accuracy", "higher", 0.0, 1.0),
    "mean_conf_correct": Meaning("mean confidence of correct predictions", None, 0.0, 1.0),
    "mean_conf_incorrect": Meaning("mean confidence of wrong predictions", None, 0.0, 1.0),
    "ood_auroc": Meaning("out-of-distribution AUROC of the max probability", "higher", 0.0, 1.0),
    "hcs": Meaning("Harmonic Calibration Score", "higher", 0.0, 1.0),
    "recorded_accuracy": Meaning("NATS-Bench's recorded test accuracy (percent)", "higher", 0.0, 100.0),
    "fit": Meaning("a fitted parameter or fit record", None, None, None),
    SEARCH_FLAG: Meaning("the lambda, mu search's pair is worse than identity (1) or not (0)", None, 0.0, 1.0),
    "temperature": Meaning("the fitted temperature", None, 0.0, None),
}
# Relative slack on the range checks: values computed in floating point at a bound.
_SLACK = 1e-9


@dataclass(frozen=True)
class Column:
    """A table column read against :data:`METRICS`: its stage (None: the network's own),
    metric family, bin count (binned metrics) and meaning."""

    name: str
    stage: str | None
    metric: str
    bins: int | None
    meaning: Meaning


_BINNED = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
_HCS = re.compile(r"hcs_\d+(?:\.\d*)?|hcs_\.\d+")


def column(name: str) -> Column | None:
    """The meaning of a table column (or a bare metric family such as ``ece``); None for a
    column that is not a metric (keys, strings, counts)."""
    stage, rest = None, name
    head, _, tail = name.partition("_")
    if head in STAGES and tail:
        stage, rest = head, tail
    if stage is None and _HCS.fullmatch(rest):
        return Column(name, None, "hcs", None, METRICS["hcs"])
    if rest.startswith("fit_"):
        return Column(name, stage, "fit", None, METRICS["fit"])
    if rest.startswith("ood_auroc_"):
        return Column(name, stage, "ood_auroc", None, METRICS["ood_auroc"])
    family, _, bins = rest.rpartition("_")
    if family in _BINNED and bins.isdigit():
        return Column(name, stage, family, int(bins), METRICS[family])
    if rest in METRICS and rest not in ("fit", "ood_auroc", "hcs") and (stage is None or rest not in (
            "recorded_accuracy", "temperature")):
        return Column(name, stage, rest, None, METRICS[rest])
    return None


def higher_is_better(name: str) -> bool | None:
    """True or False for a score column; None for a column that is not a score."""
    found = column(name)
    if found is None or found.meaning.better is None:
        return None
    return found.meaning.better == "higher"


def best_first_descending(name: str) -> bool:
    """Sort order that puts the best first: descending for higher-is-better columns and for
    columns that are not scores (largest first), ascending for lower-is-better ones."""
    return higher_is_better(name) is not False


def direction_words(name: str, descending: bool) -> str:
    """How a listing sorted by ``name`` says its order: "lowest first (lower is better)"."""
    order = "highest first" if descending else "lowest first"
    better = higher_is_better(name)
    if better is None:
        return f"{order} ({name} is not a score)"
    return f"{order} ({'higher' if better else 'lower'} is better)"


def outside_range(name: str, values) -> "list[int]":
    """Positions of finite values outside the column's range (NaN is missing, not wrong)."""
    import numpy as np

    found = column(name)
    v = np.asarray(values, dtype=float)
    if found is None:
        return []
    low = -math.inf if found.meaning.low is None else found.meaning.low
    high = math.inf if found.meaning.high is None else found.meaning.high
    slack = _SLACK * max(1.0, high if math.isfinite(high) else 1.0)
    return np.flatnonzero((v < low - slack) | (v > high + slack)).tolist()


def unstable(name: str, values) -> "list[int]":
    """Positions of values that signal an unstable estimator (e.g. KDE-ECE above 1)."""
    import numpy as np

    found = column(name)
    if found is None or found.meaning.unstable_above is None:
        return []
    return np.flatnonzero(np.asarray(values, dtype=float) > found.meaning.unstable_above).tolist()
