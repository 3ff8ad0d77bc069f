"""A finding: one sentence of the report with its number (``analysis/findings.csv``).

The report (:mod:`calibench.report.findings`) assembles the findings of every question;
the analysis parts that state findings of their own (schedules, architecture) build them
with :func:`finding_row`, so both sides write the same columns.
"""

from __future__ import annotations

import numpy as np

FINDING_COLUMNS = ["question", "space", "hp", "dataset", "text", "value", "lo", "hi", "interval"]


def finding_row(question, space, hp, dataset, text, value=np.nan, lo=np.nan, hi=np.nan, interval=None) -> dict:
    """One finding (:data:`FINDING_COLUMNS`): a sentence and its number, with interval if a tau."""
    return {"question": question, "space": space, "hp": str(hp), "dataset": dataset, "text": text,
            "value": float(value), "lo": float(lo), "hi": float(hi), "interval": interval}
