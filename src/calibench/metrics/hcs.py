"""The Harmonic Calibration Score, numpy only (the analysis and `calibench query` use it
without importing torch)."""

from __future__ import annotations

import numpy as np


def hcs(accuracy, ece, beta: float) -> np.ndarray:
    """Harmonic Calibration Score (docs/metrics.md, "Harmonic Calibration Score"; Tao et al.
    2024): ``(1 + beta) * acc * (1 - ece) / (beta * acc + (1 - ece))`` on float arrays,
    accuracy and ECE as fractions; a larger ``beta`` weighs calibration more.

    Defined for accuracy and ECE in [0, 1] and ``beta > 0``: NaN where an input is NaN or out
    of that range (``hcs(0.5, 2, 1)`` would otherwise read 2.0). At accuracy 0 and ECE 1 the
    formula is 0/0; the score there is 0, its limit from every direction inside the square
    (it is at most ``(1 + beta) * min(acc, (1 - ece) / beta)``). The SQL ``hcs`` of
    ``calibench query`` is NULL wherever this is NaN."""
    acc = np.asarray(accuracy, dtype=float)
    ece = np.asarray(ece, dtype=float)
    beta = np.asarray(beta, dtype=float)
    valid = (acc >= 0) & (acc <= 1) & (ece >= 0) & (ece <= 1) & (beta > 0)  # False where any is NaN
    with np.errstate(divide="ignore", invalid="ignore"):
        score = (1 + beta) * acc * (1 - ece) / (beta * acc + (1 - ece))
    score = np.where(valid, np.where((acc == 0) & (ece == 1), 0.0, score), np.nan)
    return score[()] if score.ndim == 0 else score
