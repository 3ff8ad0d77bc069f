"""The report's findings: one sentence with a number per result, computed from the tables and
the analysis parts' outputs (``analysis/findings.csv``).

A finding is e.g. "pre ECE (15 bins) across datasets, tss hp 200, cifar10 vs cifar100: tau
0.62 [0.58, 0.66] (bootstrap)". Intervals come from the Kendall table
(:func:`calibench.analysis.kendall.kendall_all`) or, for taus computed here (questions 5 and
6), from :func:`calibench.analysis.stats.kendall_jackknife`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.analysis.findings import FINDING_COLUMNS, finding_row
from calibench.analysis.tables import nearest_bins

__all__ = ["FINDING_COLUMNS", "MIN_NETWORKS", "finding_row", "findings"]

MIN_NETWORKS = 10  # question 5's networks above 90 % accuracy: fewer give no tau


def _name(space, hp) -> str:
    """``tss hp 200``; a population beyond NATS-Bench by its name alone."""
    return f"{space} hp {hp}" if hp else str(space)


def _interval_text(lo: float, hi: float, interval) -> str:
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi):
        return ""
    return f" [{lo:.2f}, {hi:.2f}]" + (f" ({interval})" if isinstance(interval, str) and interval else "")




def _tau_text(what: str, tau: float, lo: float, hi: float, interval, n: int | None = None) -> str:
    nets = f", {n} networks" if n is not None else ""
    return f"{what}: tau {tau:.2f}{_interval_text(lo, hi, interval)}{nets}"


def _q1(kendall: pd.DataFrame, b: int) -> list[dict]:
    out = []
    k = kendall[(kendall["figure"] == "datasets") & (kendall["population"] == "all")
                & kendall["metric"].isin([f"pre_ece_{b}", f"post_ece_{b}"]) & (kendall["row"] < kendall["col"])]
    for r in k.itertuples():
        stage = r.metric.split("_", 1)[0]
        out.append(finding_row("q1", r.space, r.hp, "*", _tau_text(
            f"{stage} ECE ({b} bins) across datasets, {_name(r.space, r.hp)}, {r.row} vs {r.col}",
            r.tau, r.lo, r.hi, r.interval, r.n), r.tau, r.lo, r.hi, r.interval))
    return out


def _q2(robustness: pd.DataFrame | None) -> list[dict]:
    if robustness is None or robustness.empty:
        return []
    out = []
    k = robustness[(robustness["kind"] == "robustness") & (robustness["population"] == "all")
                   & (robustness["metric"] == robustness["metric"].iloc[0])].dropna(subset=["tau"])
    for (space, hp, dataset), part in k.groupby(["space", "hp", "dataset"]):
        strongest = part.loc[part["tau"].abs().idxmax()]
        out.append(finding_row("q2", space, hp, dataset, _tau_text(
            f"{strongest['metric']} against robustness, {_name(space, hp)}, {dataset}: strongest column "
            f"{strongest['robustness']} (median tau over {len(part)} columns {part['tau'].median():.2f})",
            strongest["tau"], strongest["lo"], strongest["hi"], None, int(strongest["n"])),
            strongest["tau"], strongest["lo"], strongest["hi"]))
    return out


def _q3(kendall: pd.DataFrame, b: int) -> list[dict]:
    out = []
    ref = f"pre_ece_{b}"
    k = kendall[(kendall["figure"] == "metrics") & (kendall["population"] == "all") & kendall["stage"].isna()
                & (kendall["row"] == ref) & (kendall["col"] != ref)].dropna(subset=["tau"])
    for (space, hp, dataset), part in k.groupby(["space", "hp", "dataset"]):
        for label, r in (("most", part.loc[part["tau"].idxmax()]), ("least", part.loc[part["tau"].idxmin()])):
            out.append(finding_row("q3", space, hp, dataset, _tau_text(
                f"ECE ({b} bins) agrees {label} with {r['col']} ({_name(space, hp)}, {dataset})",
                r["tau"], r["lo"], r["hi"], r["interval"], int(r["n"])), r["tau"], r["lo"], r["hi"], r["interval"]))
    return out


def _q4(q4: pd.DataFrame, b: int) -> list[dict]:
    out = []
    for r in q4.itertuples():
        verdict = "" if np.isnan(r.lo) else (" (differs from 0 at this level)" if r.lo > 0 or r.hi < 0
                                             else " (0 inside the interval)")
        out.append(finding_row("q4", r.space, r.hp, r.dataset, _tau_text(
            f"pre/{r.stage} ECE at {b} bins ({_name(r.space, r.hp)}, {r.dataset})",
            r.tau, r.lo, r.hi, r.interval, int(r.n)) + verdict, r.tau, r.lo, r.hi, r.interval))
    return out


def _jackknife_row(question, space, hp, dataset, what, x, y, level) -> dict:
    tau, lo, hi = stats.kendall_jackknife(x, y, level)
    n = int(np.count_nonzero(~(np.isnan(np.asarray(x, float)) | np.isnan(np.asarray(y, float)))))
    return finding_row(question, space, hp, dataset, _tau_text(what, tau, lo, hi, "jackknife", n), tau, lo, hi,
                "jackknife")


def _q5(nets: pd.DataFrame, b: int, level: float) -> list[dict]:
    out = []
    col = f"pre_ece_{b}"
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        if col not in part:
            continue
        out.append(_jackknife_row("q5", space, hp, dataset, f"accuracy against ECE ({b} bins), {_name(space, hp)}, "
                                  f"{dataset}, all networks", part["accuracy"], part[col], level))
        high = part[part["accuracy"] > 0.9]
        if len(high) >= MIN_NETWORKS:
            out.append(_jackknife_row("q5", space, hp, dataset, f"accuracy against ECE ({b} bins), {_name(space, hp)}, "
                                      f"{dataset}, accuracy > 90 %", high["accuracy"], high[col], level))
        else:
            out.append(finding_row("q5", space, hp, dataset, f"{_name(space, hp)}, {dataset}: {len(high)} networks above "
                                                      f"90 % accuracy (fewer than {MIN_NETWORKS}: no tau)"))
    return out


def _q6(nets: pd.DataFrame, bins: Sequence[int], level: float) -> list[dict]:
    out = []
    lo_b, hi_b = min(bins), max(bins)
    if lo_b == hi_b:
        return out
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        for stage in ("pre", "post"):
            a, z = f"{stage}_ece_{lo_b}", f"{stage}_ece_{hi_b}"
            if a not in part or z not in part:
                continue
            ma, mz = part[a].median(), part[z].median()
            row = _jackknife_row("q6", space, hp, dataset, f"{stage} ECE at {lo_b} against {hi_b} bins, "
                                 f"{_name(space, hp)}, {dataset} (median {ma:.3f} → {mz:.3f})", part[a], part[z], level)
            out.append(row)
    return out


def _q7(brackets: pd.DataFrame, edges: pd.DataFrame, extra: Sequence[dict]) -> list[dict]:
    out = []
    if not brackets.empty:
        for (hp, dataset), part in brackets.groupby(["hp", "dataset"]):
            part = part.sort_values("bracket", key=lambda s: s.str.extract(r"\[(\d+)", expand=False).astype(float))
            first, last = part.iloc[0], part.iloc[-1]
            out.append(finding_row("q7", "sss", hp, dataset,
                            f"SSS hp {hp}, {dataset}: mean pre ECE {first['pre_ece_15']:.3f} in the smallest size "
                            f"bracket {first['bracket']} ({int(first['networks'])} networks) against "
                            f"{last['pre_ece_15']:.3f} in the largest {last['bracket']} "
                            f"({int(last['networks'])}); accuracy {first['accuracy']:.3f} against "
                            f"{last['accuracy']:.3f}", last["pre_ece_15"] - first["pre_ece_15"]))
    if not edges.empty:
        for (hp, dataset), part in edges.groupby(["hp", "dataset"]):
            top = part.sort_values("count", ascending=False).groupby("edge").head(1).sort_values("edge")
            total = part.groupby("edge")["count"].sum()
            text = "; ".join(f"{r.edge}: {r.op} ({int(r.count)}/{int(total[r.edge])})" for r in top.itertuples())
            out.append(finding_row("q7", "tss", hp, dataset, f"TSS hp {hp}, {dataset}, top networks by HCS, "
                                                             f"most frequent operation per edge: {text}"))
    out.extend(extra)
    return out


def _nas(nas: pd.DataFrame | None) -> list[dict]:
    if nas is None or nas.empty:
        return []
    out = []
    evo = nas[nas["algorithm"] == "evolution"] if "evolution" in set(nas["algorithm"]) else nas
    for (space, hp, dataset), part in evo.groupby(["space", "hp", "dataset"]):
        by = part.set_index("objective")
        if "accuracy" not in by.index:
            continue
        acc = by.loc["accuracy"]
        for objective in [o for o in by.index if o.startswith("hcs_")][:1]:
            h = by.loc[objective]
            ece = next((c[:-5] for c in by.columns if c.startswith("pre_ece") and c.endswith("_mean")), None)
            ece_text = "" if ece is None else (f", ECE {100 * h[f'{ece}_mean']:.2f} % against "
                                               f"{100 * acc[f'{ece}_mean']:.2f} %")
            out.append(finding_row("nas", space, hp, dataset,
                            f"{h['algorithm']} by {objective} ({_name(space, hp)}, {dataset}): accuracy "
                            f"{100 * h['accuracy_mean']:.2f} % against {100 * acc['accuracy_mean']:.2f} % by "
                            f"accuracy{ece_text}", h["accuracy_mean"] - acc["accuracy_mean"]))
    return out


def findings(nets: pd.DataFrame, kendall: pd.DataFrame, q4: pd.DataFrame, brackets: pd.DataFrame,
             edges: pd.DataFrame, bins: Sequence[int], level: float = 0.95, *,
             robustness: pd.DataFrame | None = None, nas: pd.DataFrame | None = None,
             architecture: Sequence[dict] = ()) -> pd.DataFrame:
    """Every finding of the report, tidy (``FINDING_COLUMNS``): question, space, hp, dataset,
    the sentence, and its number with interval where it is a tau. ``nets``: measured
    networks (one row per network and seed); ``q4``: :func:`calibench.analysis.kendall.question4_findings`;
    ``architecture``: further question-7 rows (dicts with the same keys)."""
    b = nearest_bins(bins)
    rows = []
    if not kendall.empty:
        rows += _q1(kendall, b)
    rows += _q2(robustness)
    if not kendall.empty:
        rows += _q3(kendall, b)
    if not q4.empty:
        rows += _q4(q4, b)
    rows += _q5(nets, b, level)
    rows += _q6(nets, bins, level)
    rows += _q7(brackets, edges, architecture)
    rows += _nas(nas)
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)

