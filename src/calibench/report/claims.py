"""The paper's qualitative answers (Tao et al., ICLR 2024, project page), each put to a stated
test on these tables (``analysis/claims.csv``) and shown at the head of its question's section.

Decide only with enough data (issue 25): a table (or pair of datasets) with fewer than
``min_networks`` networks (``analysis.min_networks``) decides nothing ("too few networks to
decide (n = 5)"); an interval decides only where it lies on one side of the bound
(:func:`calibench.analysis.stats.interval_side`; a zero-width interval, a perfect ranking, by
its exact permutation p); question 6 is a paired
Wilcoxon signed-rank test (:func:`calibench.analysis.stats.wilcoxon_paired`), not a
comparison of medians. A claim no table can decide reads "undecided (too few networks)"."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.analysis.tables import nearest_bins
from calibench.report.findings import too_few

__all__ = ["CLAIMS", "CLAIM_COLUMNS", "claims", "claims_html", "bins_outcome"]

# Tao et al.'s answers (project page of the paper), and the test each is put to here.
CLAIMS = {
    "q1": ("The calibration property of a certain architecture can not generalize well to different datasets.",
           "pre ECE across datasets: Kendall tau's interval below 0.5 (at most moderate agreement)"),
    "q3": ("A consistent trend in the ranking of most calibration performance regardless of metric type.",
           "most pairs of calibration-error metrics (before recalibration) have a tau whose interval is above 0"),
    "q3b": ("Equal Mass classwise ECE may not be a reliable metric for calibration measurement.",
            "cwce_em has the lowest median tau against the other calibration-error metrics, its taus below those "
            "of the next lowest (paired Wilcoxon signed-rank test over the third metrics, p below 1 - level)"),
    "q4": ("Well-calibrated models do not necessarily exhibit better calibration performance after post-hoc "
           "calibration techniques.",
           "pre against post (temperature scaling) ECE: Kendall tau's interval below 0.5"),
    "q5": ("The positive correlation between accuracy and calibration exists only among architectures with good "
           "prediction performance.",
           "accuracy against ECE: tau's jackknife interval below 0 among the networks above 90 % accuracy, and not "
           "below 0 among those at or below 90 %"),
    "q6": ("The bin size has a more substantial impact on post-ECE.",
           "per network, the relative change of ECE from the fewest to the most bins after temperature scaling "
           "against before: paired Wilcoxon signed-rank test (two-sided), p below 1 - level, the signed ranks "
           "leaning positive (post changes more)"),
    "q7": ("Wider model can worsen calibration performance, especially when dealing with complex datasets.",
           "SSS networks on CIFAR-100 and ImageNet16-120: Kendall tau of total channels (width) against ECE "
           "before recalibration, its jackknife interval above 0"),
}
CLAIM_COLUMNS = ["question", "claim", "test", "verdict", "held", "tested", "evidence"]
_ERROR_METRICS = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace", "ksce", "ks_top2", "ks_within_top2",
                  "kdece", "mmce", "nll", "brier")


FEW = "few"  # an outcome on too few networks to decide


def _verdict(held: int, tested: int, undecided: int = 0, few: int = 0) -> str:
    """``tested`` outcomes that decide (held of them yes), ``undecided`` that do not at this
    level, ``few`` on too few networks."""
    if not tested:
        if undecided:
            return "undecided at this level" + (f" ({few} with too few networks)" if few else "")
        return "undecided (too few networks)" if few else "not tested (no data)"
    if not undecided and not few:
        if held == tested:
            return "holds"
        if held == 0:
            return "does not hold"
    rest = [f"{undecided} undecided"] * bool(undecided) + [f"{few} with too few networks"] * bool(few)
    return f"holds in {held} of {tested + undecided + few}" + (f" ({', '.join(rest)})" if rest else "")


def _few(what: str, n: int) -> tuple[str, str]:
    return f"{what}: {too_few(n)}", FEW


def _claim(key: str, outcomes: Sequence[tuple[str, bool | None | str]]) -> dict:
    """``outcomes``: (what was tested, True/False, None where the test cannot decide, or
    :data:`FEW` where there are too few networks)."""
    decided = [(what, ok) for what, ok in outcomes if ok is not None and ok is not FEW]
    few = sum(ok is FEW for _, ok in outcomes)
    held = sum(ok for _, ok in decided)
    evidence = "; ".join(what if ok is FEW else f"{what}: {'yes' if ok else 'no' if ok is not None else 'undecided'}"
                         for what, ok in outcomes)
    claim, test = CLAIMS[key]
    return {"question": key[:2], "claim": claim, "test": test,
            "verdict": _verdict(held, len(decided), len(outcomes) - len(decided) - few, few),
            "held": held, "tested": len(decided), "evidence": evidence}


def bins_outcome(what: str, pre_lo, pre_hi, post_lo, post_hi, level: float, min_networks: int) -> tuple[str, object]:
    """Question 6 on one table (arrays per network: ECE before and after temperature scaling
    at the fewest and the most bins): the relative change ``hi / lo - 1`` per network, post
    against pre, by :func:`calibench.analysis.stats.wilcoxon_paired`. True where p < 1 - level
    and the signed ranks lean positive (post changes more), False where p < 1 - level and they
    lean negative, None otherwise; :data:`FEW` below ``min_networks`` networks with both changes
    finite. The evidence names the test's n (the non-zero differences) and, where some were
    zero, the networks."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = np.asarray(pre_hi, float) / np.asarray(pre_lo, float) - 1
        post = np.asarray(post_hi, float) / np.asarray(post_lo, float) - 1
    ok = np.isfinite(pre) & np.isfinite(post)
    networks = int(ok.sum())
    if networks < min_networks:
        return _few(what, networks)
    w, p, n, _, direction = stats.wilcoxon_paired(pre, post)
    text = (f"{what}: median change pre {np.median(pre[ok]):+.0%}, post {np.median(post[ok]):+.0%}; Wilcoxon "
            f"signed-rank W = {w:.1f}, p = {p:.3g}, n = {n}"
            + (f" ({networks - n} of {networks} networks with no difference)" if n < networks else ""))
    if np.isnan(p) or p >= 1 - level or direction == 0:
        return text, None
    return text, direction > 0


def lowest_outcome(what: str, pairs: pd.DataFrame, metric: str, level: float) -> list[tuple[str, object]]:
    """Question 3b on one table (``pairs``: its Kendall rows of the ``metrics`` figure, both
    orders): is ``metric``'s median tau against the other metrics the lowest? Its taus are put
    against those of the runner-up (``metric`` the lowest) or of the lowest metric (otherwise),
    paired by the third metric, with :func:`calibench.analysis.stats.paired_lower`: True where
    ``metric`` is lowest and its taus are significantly lower at ``level``, False where another
    is lowest and ``metric``'s taus are significantly higher, None where the test cannot tell."""
    taus = pairs.pivot_table(index="row", columns="col", values="tau")
    medians = pairs.groupby("row")["tau"].median().dropna()
    if metric not in medians.index or len(medians) < 2:
        return []
    order = medians.sort_values(kind="stable").index
    other = order[1] if order[0] == metric else order[0]
    third = [c for c in taus.columns if c not in (metric, other)]
    low, high = (metric, other) if order[0] == metric else (other, metric)
    p, n = stats.paired_lower(taus.loc[low, third].to_numpy(float), taus.loc[high, third].to_numpy(float))
    text = (f"{what}: lowest {order[0]} ({medians[order[0]]:.2f}), {metric} against {other} over {n} third metrics: "
            + (f"Wilcoxon p = {p:.3g}" if np.isfinite(p) else f"the Wilcoxon signed ranks do not put {low} lower"))
    if np.isnan(p) or p >= 1 - level:
        return [(text, None)]
    return [(text, order[0] == metric)]


def width_outcomes(nets: pd.DataFrame, col: str, level: float, min_networks: int) -> list[tuple[str, object]]:
    """Question 7 per SSS table of a complex dataset (not CIFAR-10): Kendall tau-b of each
    network's total channels against ``col`` with its jackknife interval
    (:func:`calibench.analysis.stats.kendall_jackknife`); True where the interval lies above 0
    (wider, worse calibrated), False below, None where it holds 0; :data:`FEW` below
    ``min_networks`` networks. Every SSS network counts, not only the 8 of uniform width."""
    from calibench.results.archstr import parse_sss

    outcomes = []
    if nets.empty or col not in nets or "arch_str" not in nets:
        return outcomes
    sss = nets[(nets["space"] == "sss") & (nets["dataset"] != "cifar10")]
    for (hp, dataset), part in sss.groupby(["hp", "dataset"]):
        ece = part[col].to_numpy(dtype=float)
        ok = np.isfinite(ece)
        channels = np.array([sum(parse_sss(a)) for a in part["arch_str"]], dtype=float)
        what = f"sss {dataset}: channels against {col}"
        n = int(ok.sum())
        if n < min_networks:
            outcomes.append(_few(what, n))
            continue
        tau, lo, hi = stats.kendall_jackknife(channels[ok], ece[ok], level)
        below = stats.interval_side(lo, hi, 0.0, n, level)
        outcomes.append((f"{what}: tau {tau:.2f} [{lo:.2f}, {hi:.2f}] (jackknife), {n} networks",
                         None if below is None else not below))
    return outcomes


def claims(nets: pd.DataFrame, kendall: pd.DataFrame, q4: pd.DataFrame, bins: Sequence[int],
           level: float = 0.95, *, min_networks: int) -> pd.DataFrame:
    """Which of the paper's qualitative claims (:data:`CLAIMS`) hold on these tables, at
    ``level``: each claim's test over every table (or pair of datasets) it applies to, with
    the verdict ("holds", "does not hold", "holds in k of n", undecided where an interval
    contains the bound, "too few networks" below ``min_networks``) and the
    evidence per table."""
    m = int(min_networks)
    b = nearest_bins(bins)
    out = []
    if not kendall.empty:
        k = kendall[(kendall["figure"] == "datasets") & (kendall["population"] == "all")
                    & (kendall["metric"] == f"pre_ece_{b}") & (kendall["row"] < kendall["col"])]
        out.append(_claim("q1", [_few(f"{r.space} {r.row}/{r.col} tau {r.tau:.2f}", r.n) if r.n < m else
                                 (f"{r.space} {r.row}/{r.col} tau {r.tau:.2f} [{r.lo:.2f}, {r.hi:.2f}], {r.n} "
                                  f"networks", stats.interval_side(r.lo, r.hi, 0.5, r.n, level))
                                 for r in k.itertuples()]))
        mk = kendall[(kendall["figure"] == "metrics") & (kendall["population"] == "all") & kendall["stage"].isna()]
        errors = {f"pre_{e}_{b}" for e in _ERROR_METRICS} | {f"pre_{e}" for e in _ERROR_METRICS}
        mk = mk[mk["row"].isin(errors) & mk["col"].isin(errors) & (mk["row"] != mk["col"])]
        outcomes, unreliable = [], []
        for (space, hp, dataset), part in mk.groupby(["space", "hp", "dataset"]):
            n = int(part["n"].min())
            if n < m:
                outcomes.append(_few(f"{space} {dataset}", n))
                unreliable.append(_few(f"{space} {dataset}", n))
                continue
            pairs = part[part["row"] < part["col"]].dropna(subset=["lo"])
            if len(pairs):  # decided by the pairs whose interval excludes 0; an interval holding it decides nothing
                sides = [stats.interval_side(r.lo, r.hi, 0.0, r.n, level) for r in pairs.itertuples()]
                positive, negative = sum(side is False for side in sides), sum(side is True for side in sides)
                ok = True if positive > len(pairs) / 2 else False if negative >= len(pairs) / 2 else None
                outcomes.append((f"{space} {dataset}: {positive} of {len(pairs)} pairs above 0, {negative} below, "
                                 f"{n} networks", ok))
            unreliable.extend(lowest_outcome(f"{space} {dataset}", part, f"pre_cwce_em_{b}", level))
        out.append(_claim("q3", outcomes))
        out.append(_claim("q3b", unreliable))
    if not q4.empty:
        post = q4[q4["stage"] == "post"]
        out.append(_claim("q4", [_few(f"{r.space} {r.dataset} tau {r.tau:.2f}", r.n) if r.n < m else
                                 (f"{r.space} {r.dataset} tau {r.tau:.2f} [{r.lo:.2f}, {r.hi:.2f}], {r.n} networks",
                                  stats.interval_side(r.lo, r.hi, 0.5, r.n, level))
                                 for r in post.itertuples()]))
    col = f"pre_ece_{b}"
    outcomes = []
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        if col not in part:
            continue
        high, low = part[part["accuracy"] > 0.9], part[part["accuracy"] <= 0.9]
        if len(high) < max(m, 2):
            outcomes.append(_few(f"{space} {dataset}: networks above 90 %", len(high)))
            continue
        _, lo_h, hi_h = stats.kendall_jackknife(high["accuracy"], high[col], level)
        below_h = stats.interval_side(lo_h, hi_h, 0.0, len(high), level)
        text = f"{space} {dataset}: above 90 % [{lo_h:.2f}, {hi_h:.2f}] ({len(high)} networks)"
        if len(low) < max(m, 2):  # "only among good networks" needs the others to decide on
            outcomes.append((f"{text}, at or below 90 % too few networks to decide (n = {len(low)})",
                             False if below_h is False else None))
            continue
        _, lo_l, hi_l = stats.kendall_jackknife(low["accuracy"], low[col], level)
        below_l = stats.interval_side(lo_l, hi_l, 0.0, len(low), level)
        ok = None if below_h is None else bool(below_h and below_l is not True)
        outcomes.append((f"{text}, at or below 90 % [{lo_l:.2f}, {hi_l:.2f}] ({len(low)})", ok))
    out.append(_claim("q5", outcomes))
    lo_b, hi_b = min(bins), max(bins)
    outcomes = []
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        cols = [f"{s}_ece_{x}" for s in ("pre", "post") for x in (lo_b, hi_b)]
        if lo_b == hi_b or not all(c in part for c in cols):
            continue
        outcomes.append(bins_outcome(f"{space} {dataset}", *(part[c] for c in cols), level, m))
    out.append(_claim("q6", outcomes))
    out.append(_claim("q7", width_outcomes(nets, f"pre_ece_{b}", level, m)))
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
    return (f"<p>The paper's answer, tested on these tables:</p><ul class='claims'>{items}</ul>"
            f"<p><small>Each table (or pair) is decided at {level:.0%} on its own, with no correction for how "
            f"many are tested: of m outcomes where the claim's effect is absent, about {1 - level:.0%} of m "
            f"may still read decided.</small></p>")
