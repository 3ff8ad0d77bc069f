"""The paper's qualitative answers (Tao et al., ICLR 2024, project page), each put to a stated
test on these tables (``analysis/claims.csv``) and shown at the head of its question's section."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.analysis.tables import nearest_bins
from calibench.report.findings import MIN_NETWORKS

__all__ = ["CLAIMS", "CLAIM_COLUMNS", "claims", "claims_html"]

# Tao et al.'s answers (project page of the paper), and the test each is put to here.
CLAIMS = {
    "q1": ("The calibration property of a certain architecture can not generalize well to different datasets.",
           "pre ECE across datasets: Kendall tau's interval below 0.5 (at most moderate agreement)"),
    "q3": ("A consistent trend in the ranking of most calibration performance regardless of metric type.",
           "most pairs of calibration-error metrics (before recalibration) have a tau whose interval is above 0"),
    "q3b": ("Equal Mass classwise ECE may not be a reliable metric for calibration measurement.",
            "cwce_em has the lowest median tau against the other calibration-error metrics"),
    "q4": ("Well-calibrated models do not necessarily exhibit better calibration performance after post-hoc "
           "calibration techniques.",
           "pre against post (temperature scaling) ECE: Kendall tau's interval below 0.5"),
    "q5": ("The positive correlation between accuracy and calibration exists only among architectures with good "
           "prediction performance.",
           "accuracy against ECE: tau below 0 at this level above 90 % accuracy, and not below 0 over all networks"),
    "q6": ("The bin size has a more substantial impact on post-ECE.",
           "the median ECE changes more (relatively) from the fewest to the most bins after temperature scaling "
           "than before"),
    "q7": ("Wider model can worsen calibration performance, especially when dealing with complex datasets.",
           "uniform-width SSS networks: ECE of the widest above that of the narrowest, on CIFAR-100 and "
           "ImageNet16-120"),
}
CLAIM_COLUMNS = ["question", "claim", "test", "verdict", "held", "tested", "evidence"]
_ERROR_METRICS = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace", "ksce", "ks_top2", "ks_within_top2",
                  "kdece", "mmce", "nll", "brier")


def _verdict(held: int, tested: int, undecided: int = 0) -> str:
    """``tested`` outcomes that decide (held of them yes), ``undecided`` that do not."""
    if not tested:
        return "undecided at this level" if undecided else "not tested (no data)"
    if held == tested and not undecided:
        return "holds"
    if held == 0 and not undecided:
        return "does not hold"
    return f"holds in {held} of {tested + undecided}" + (f" ({undecided} undecided)" if undecided else "")


def _claim(key: str, outcomes: Sequence[tuple[str, bool | None]]) -> dict:
    """``outcomes``: (what was tested, True/False, or None where the data cannot decide)."""
    decided = [(what, ok) for what, ok in outcomes if ok is not None]
    held = sum(ok for _, ok in decided)
    evidence = "; ".join(f"{what}: {'yes' if ok else 'no' if ok is not None else 'undecided'}"
                         for what, ok in outcomes)
    claim, test = CLAIMS[key]
    return {"question": key[:2], "claim": claim, "test": test,
            "verdict": _verdict(held, len(decided), len(outcomes) - len(decided)),
            "held": held, "tested": len(decided), "evidence": evidence}


def _below(lo: float, hi: float, bound: float) -> bool | None:
    """True if the interval lies below ``bound``, False if above, None if it contains it."""
    if np.isnan(lo) or np.isnan(hi):
        return None
    return True if hi < bound else False if lo > bound else None


def claims(nets: pd.DataFrame, kendall: pd.DataFrame, q4: pd.DataFrame, bins: Sequence[int],
           level: float = 0.95, width: pd.DataFrame | None = None) -> pd.DataFrame:
    """Which of the paper's qualitative claims (:data:`CLAIMS`) hold on these tables, at
    ``level``: each claim's test over every table (or pair of datasets) it applies to, with
    the verdict ("holds", "does not hold", "holds in k of n", undecided where an interval
    contains the bound) and the evidence per table."""
    b = nearest_bins(bins)
    out = []
    if not kendall.empty:
        k = kendall[(kendall["figure"] == "datasets") & (kendall["population"] == "all")
                    & (kendall["metric"] == f"pre_ece_{b}") & (kendall["row"] < kendall["col"])]
        out.append(_claim("q1", [(f"{r.space} {r.row}/{r.col} tau {r.tau:.2f}", _below(r.lo, r.hi, 0.5))
                                 for r in k.itertuples()]))
        m = kendall[(kendall["figure"] == "metrics") & (kendall["population"] == "all") & kendall["stage"].isna()]
        errors = {f"pre_{e}_{b}" for e in _ERROR_METRICS} | {f"pre_{e}" for e in _ERROR_METRICS}
        m = m[m["row"].isin(errors) & m["col"].isin(errors) & (m["row"] != m["col"])]
        outcomes, unreliable = [], []
        for (space, hp, dataset), part in m.groupby(["space", "hp", "dataset"]):
            pairs = part[part["row"] < part["col"]].dropna(subset=["lo"])
            if len(pairs):
                positive = int((pairs["lo"] > 0).sum())
                outcomes.append((f"{space} {dataset}: {positive} of {len(pairs)} pairs above 0",
                                 positive > len(pairs) / 2))
            medians = part.groupby("row")["tau"].median().dropna()
            em = f"pre_cwce_em_{b}"
            if em in medians.index and len(medians) > 1:
                unreliable.append((f"{space} {dataset}: lowest {medians.idxmin()} ({medians.min():.2f})",
                                   medians.idxmin() == em))
        out.append(_claim("q3", outcomes))
        out.append(_claim("q3b", unreliable))
    if not q4.empty:
        post = q4[q4["stage"] == "post"]
        out.append(_claim("q4", [(f"{r.space} {r.dataset} tau {r.tau:.2f}", _below(r.lo, r.hi, 0.5))
                                 for r in post.itertuples()]))
    col = f"pre_ece_{b}"
    outcomes = []
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        high = part[part["accuracy"] > 0.9]
        if col not in part or len(high) < MIN_NETWORKS:
            outcomes.append((f"{space} {dataset}: {len(high)} networks above 90 %", None))
            continue
        _, lo_h, hi_h = stats.kendall_jackknife(high["accuracy"], high[col], level)
        _, lo_a, hi_a = stats.kendall_jackknife(part["accuracy"], part[col], level)
        if np.isnan(hi_h) or np.isnan(hi_a):
            outcomes.append((f"{space} {dataset}", None))
            continue
        outcomes.append((f"{space} {dataset}: above 90 % [{lo_h:.2f}, {hi_h:.2f}], all [{lo_a:.2f}, {hi_a:.2f}]",
                         bool(hi_h < 0 and hi_a >= 0)))
    out.append(_claim("q5", outcomes))
    lo_b, hi_b = min(bins), max(bins)
    outcomes = []
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        cols = [f"{s}_ece_{x}" for s in ("pre", "post") for x in (lo_b, hi_b)]
        if lo_b == hi_b or not all(c in part for c in cols):
            continue
        change = {s: part[f"{s}_ece_{hi_b}"].median() / part[f"{s}_ece_{lo_b}"].median() - 1 for s in ("pre", "post")}
        outcomes.append((f"{space} {dataset}: pre {change['pre']:+.0%}, post {change['post']:+.0%}",
                         bool(change["post"] > change["pre"])))
    out.append(_claim("q6", outcomes))
    outcomes = []
    if width is not None and not width.empty and col in width:
        for (hp, dataset), part in width.dropna(subset=[col]).groupby(["hp", "dataset"]):
            if dataset == "cifar10" or len(part) < 2:
                continue
            first, last = part.iloc[0], part.iloc[-1]
            outcomes.append((f"{dataset}: {first[col]:.3f} at width {int(first['width'])}, {last[col]:.3f} at "
                             f"{int(last['width'])}", bool(last[col] > first[col])))
    out.append(_claim("q7", outcomes))
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def claims_html(table: pd.DataFrame, question: str, level: float) -> str:
    """The claims of one question as a short list: the paper's words, the test, the verdict."""
    if table.empty:
        return ""
    rows = table[table["question"] == question]
    if rows.empty:
        return ""
    items = "".join(f"<li>Tao et al.: “{html.escape(r.claim)}” <b>{html.escape(r.verdict)}</b> at {level:.0%} "
                    f"<small>(test: {html.escape(r.test)}; {html.escape(r.evidence)})</small></li>"
                    for r in rows.itertuples())
    return f"<p>The paper's answer, tested on these tables:</p><ul class='claims'>{items}</ul>"
