"""The Harmonic Calibration Score, numpy only (the analysis and `calibench query` use it
without importing torch)."""

from __future__ import annotations

import numpy as np


def hcs(accuracy, ece, beta: float) -> np.ndarray:
    """Harmonic Calibration Score (docs/metrics.md, "Harmonic Calibration Score"; Tao et al.
    2024): ``(1 + beta) * acc * (1 - ece) / (beta * acc + (1 - ece))`` on float arrays,
    accuracy and ECE as fractions; a larger ``beta`` weighs calibration more."""
    acc = np.asarray(accuracy, dtype=float)
    ece = np.asarray(ece, dtype=float)
    return (1 + beta) * acc * (1 - ece) / (beta * acc + (1 - ece))
