"""The report's findings: one sentence with a number per result, computed from the tables and
the analysis parts' outputs (``analysis/findings.csv``).

A finding is e.g. "pre ECE (15 bins) across datasets, tss hp 200, cifar10 vs cifar100: tau
0.62 [0.58, 0.66] (bootstrap), 200 networks". Intervals come from the Kendall table
(:func:`calibench.analysis.kendall.kendall_all`) or, for taus computed here (questions 5 and
6), from :func:`calibench.analysis.stats.kendall_jackknife`.

Decide only with enough data (issue 25): a tau on fewer than ``min_networks`` networks (the
config's ``analysis.min_networks``) is stated without interval and reads "too few networks
to decide (n = 5)" (``lo``, ``hi`` and ``interval`` empty); question 4's "differs from 0"
needs an interval that excludes 0 (:func:`calibench.analysis.stats.interval_side`; a zero-width
interval, a perfect ranking, by its exact permutation p).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.analysis.stats import too_few
from calibench.analysis.findings import FINDING_COLUMNS, finding_row
from calibench.analysis.tables import nearest_bins

__all__ = ["FINDING_COLUMNS", "finding_row", "findings", "too_few"]


def _name(space, hp) -> str:
    """``tss hp 200``; a population beyond NATS-Bench by its name alone."""
    return f"{space} hp {hp}" if hp else str(space)


def _interval_text(lo: float, hi: float, interval) -> str:
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi):
        return ""
    return f" [{lo:.2f}, {hi:.2f}]" + (f" ({interval})" if isinstance(interval, str) and interval else "")


def _zero_text(lo: float, hi: float, level: float, n: int) -> str:
    """What the interval says of tau = 0 (question 4); a zero-width interval is a perfect
    ranking, decided by its exact permutation p (:func:`calibench.analysis.stats.interval_side`)."""
    if np.isnan(lo) or np.isnan(hi):
        return ""
    side = stats.interval_side(lo, hi, 0.0, n, level)
    if hi - lo > stats.ZERO_WIDTH:
        return (f" (interval excludes 0: differs from 0 at {level:.0%})" if side is not None
                else f" (0 inside the interval: no difference from 0 at {level:.0%})")
    p = f"perfect ranking, exact permutation p = {stats.perfect_ranking_p(n):.2g}"
    if side is not None:
        return f" (zero-width interval: {p}, differs from 0 at {level:.0%})"
    return f" (zero-width interval: {p}, not significant at {level:.0%})" if abs(lo) >= 1 - stats.ZERO_WIDTH \
        else " (zero-width interval: not significant)"


def _tau_row(question, space, hp, dataset, what: str, tau, lo, hi, interval, n: int, min_networks: int,
             zero_level: float | None = None) -> dict:
    """A tau finding: with its interval (and, given ``zero_level``, whether it excludes 0)
    from ``min_networks`` networks on, else tau alone and "too few networks to decide"."""
    n = int(n)
    if n < min_networks:
        return finding_row(question, space, hp, dataset, f"{what}: tau {tau:.2f}, {too_few(n)}", tau)
    verdict = "" if zero_level is None else _zero_text(lo, hi, zero_level, n)
    return finding_row(question, space, hp, dataset,
                       f"{what}: tau {tau:.2f}{_interval_text(lo, hi, interval)}, {n} networks{verdict}",
                       tau, lo, hi, interval)


def _q1(kendall: pd.DataFrame, b: int, m: int) -> list[dict]:
    out = []
    k = kendall[(kendall["figure"] == "datasets") & (kendall["population"] == "all")
                & kendall["metric"].isin([f"pre_ece_{b}", f"post_ece_{b}"]) & (kendall["row"] < kendall["col"])]
    for r in k.itertuples():
        stage = r.metric.split("_", 1)[0]
        out.append(_tau_row("q1", r.space, r.hp, "*",
                            f"{stage} ECE ({b} bins) across datasets, {_name(r.space, r.hp)}, {r.row} vs {r.col}",
                            r.tau, r.lo, r.hi, r.interval, r.n, m))
    return out


def _q2(robustness: pd.DataFrame | None, m: int) -> list[dict]:
    if robustness is None or robustness.empty:
        return []
    out = []
    k = robustness[(robustness["kind"] == "robustness") & (robustness["population"] == "all")
                   & (robustness["metric"] == robustness["metric"].iloc[0])].dropna(subset=["tau"])
    for (space, hp, dataset), part in k.groupby(["space", "hp", "dataset"]):
        tied = _at_extreme(part, part["tau"].abs(), max).sort_values("robustness")
        strongest = tied.iloc[0]
        out.append(_tau_row("q2", space, hp, dataset,
                            f"{strongest['metric']} against robustness, {_name(space, hp)}, {dataset}: strongest "
                            f"column {_names(tied['robustness'])} (median tau over {len(part)} columns "
                            f"{part['tau'].median():.2f}; the strongest of {len(part)}, "
                            f"{_whose_interval(tied['robustness'])} not widened for that choice)",
                            strongest["tau"], strongest["lo"], strongest["hi"], None, int(strongest["n"]), m))
    return out


def _q3(kendall: pd.DataFrame, b: int, m: int) -> list[dict]:
    out = []
    ref = f"pre_ece_{b}"
    k = kendall[(kendall["figure"] == "metrics") & (kendall["population"] == "all") & kendall["stage"].isna()
                & (kendall["row"] == ref) & (kendall["col"] != ref)].dropna(subset=["tau"])
    for (space, hp, dataset), part in k.groupby(["space", "hp", "dataset"]):
        for label, extreme in (("most", max), ("least", min)):
            tied = _at_extreme(part, part["tau"], extreme).sort_values("col")
            r = tied.iloc[0]
            out.append(_tau_row("q3", space, hp, dataset,
                                f"ECE ({b} bins) agrees {label} with {_names(tied['col'])} ({_name(space, hp)}, "
                                f"{dataset}; the {label} of {len(part)} metrics, {_whose_interval(tied['col'])} not "
                                f"widened for that choice)",
                                r["tau"], r["lo"], r["hi"], r["interval"], int(r["n"]), m))
    return out


def _at_extreme(part: pd.DataFrame, values: pd.Series, extreme) -> pd.DataFrame:
    """The rows of ``part`` whose ``values`` equal their max (or min): every one of a tie."""
    return part[values == extreme(values)]


def _names(names: pd.Series) -> str:
    """One name, or every name of a tie and "tied"."""
    return names.iloc[0] if len(names) == 1 else f"{', '.join(names)} (tied)"


def _whose_interval(names: pd.Series) -> str:
    return "its interval" if len(names) == 1 else f"the interval of {names.iloc[0]}"


def _q4(q4: pd.DataFrame, b: int, level: float, m: int) -> list[dict]:
    return [_tau_row("q4", r.space, r.hp, r.dataset, f"pre/{r.stage} ECE at {b} bins ({_name(r.space, r.hp)}, "
                     f"{r.dataset})", r.tau, r.lo, r.hi, r.interval, int(r.n), m, zero_level=level)
            for r in q4.itertuples()]


def _jackknife_row(question, space, hp, dataset, what, x, y, level, m: int) -> dict:
    tau, lo, hi = stats.kendall_jackknife(x, y, level)
    n = int(np.count_nonzero(~(np.isnan(np.asarray(x, float)) | np.isnan(np.asarray(y, float)))))
    return _tau_row(question, space, hp, dataset, what, tau, lo, hi, "jackknife", n, m)


def _q5(nets: pd.DataFrame, b: int, level: float, m: int) -> list[dict]:
    out = []
    col = f"pre_ece_{b}"
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        if col not in part:
            continue
        what = f"accuracy against ECE ({b} bins), {_name(space, hp)}, {dataset}"
        out.append(_jackknife_row("q5", space, hp, dataset, f"{what}, all networks", part["accuracy"], part[col],
                                  level, m))
        high = part[part["accuracy"] > 0.9]
        if len(high) >= 2:
            out.append(_jackknife_row("q5", space, hp, dataset, f"{what}, accuracy > 90 %", high["accuracy"],
                                      high[col], level, m))
        else:
            out.append(finding_row("q5", space, hp, dataset, f"{what}, accuracy > 90 %: {too_few(len(high))}"))
    return out


def _q6(nets: pd.DataFrame, bins: Sequence[int], level: float, m: int) -> list[dict]:
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
            out.append(_jackknife_row("q6", space, hp, dataset, f"{stage} ECE at {lo_b} against {hi_b} bins, "
                                      f"{_name(space, hp)}, {dataset} (median {ma:.3f} → {mz:.3f})", part[a],
                                      part[z], level, m))
    return out


def _q7(brackets: pd.DataFrame, edges: pd.DataFrame, extra: Sequence[dict], min_networks: int = 0) -> list[dict]:
    """Question 7: size brackets (SSS) and the operations of the top networks (TSS), each
    naming its networks; "too few networks" below ``min_networks``; a tie for the most frequent
    operation names every tied operation; top networks that are the whole table say so."""
    out = []
    if not brackets.empty:
        for (hp, dataset), part in brackets.groupby(["hp", "dataset"]):
            part = part.sort_values("bracket", key=lambda s: s.str.extract(r"\[(\d+)", expand=False).astype(float))
            first, last = part.iloc[0], part.iloc[-1]
            n = min(int(first["networks"]), int(last["networks"]))
            out.append(finding_row("q7", "sss", hp, dataset,
                            f"SSS hp {hp}, {dataset}: mean pre ECE {first['pre_ece_15']:.3f} in the smallest size "
                            f"bracket {first['bracket']} ({int(first['networks'])} networks) against "
                            f"{last['pre_ece_15']:.3f} in the largest {last['bracket']} "
                            f"({int(last['networks'])}); accuracy {first['accuracy']:.3f} against "
                            f"{last['accuracy']:.3f}" + (f" — {too_few(n)}" if n < min_networks else ""),
                            last["pre_ece_15"] - first["pre_ece_15"]))
    if not edges.empty:
        for (hp, dataset), part in edges.groupby(["hp", "dataset"]):
            total = part.groupby("edge")["count"].sum()
            n = int(total.max())
            said = []
            for edge, ops in part.groupby("edge", sort=True):
                best = ops[ops["count"] == ops["count"].max()].sort_values("op")
                names = ", ".join(best["op"])
                said.append(f"{edge}: {names} ({int(best['count'].iloc[0])}/{int(total[edge])}"
                            + (", tied" if len(best) > 1 else "") + ")")
            table = int(part["networks"].iloc[0]) if "networks" in part else None
            whom = (f"all {n} networks of the table (it holds no more than the top {n})" if table is not None and n >= table
                    else f"the top {n} networks by HCS")
            out.append(finding_row("q7", "tss", hp, dataset, f"TSS hp {hp}, {dataset}, {whom}, most frequent operation "
                                   f"per edge: {'; '.join(said)}" + (f" — {too_few(n)}" if n < min_networks else "")))
    out.extend(extra)
    return out


def _nas(nas: pd.DataFrame | None, level: float) -> list[dict]:
    """Per table: evolution by the first HCS objective against evolution by accuracy, the
    difference of their mean accuracies with its Welch interval at ``level`` over the repeats;
    where the search was exhaustive (``exhaustive`` rows of nas.csv), the optimum by each, said once."""
    if nas is None or nas.empty:
        return []
    out = []
    for (space, hp, dataset), table in nas.groupby(["space", "hp", "dataset"]):
        exhaustive = table["exhaustive"].astype(bool) if "exhaustive" in table else pd.Series(False, table.index)
        part = table[table["algorithm"] == "evolution"] if "evolution" in set(table["algorithm"]) else table
        by = part.set_index("objective")
        if "accuracy" not in by.index:
            continue
        acc = by.loc["accuracy"]
        for objective in [o for o in by.index if o.startswith("hcs_")][:1]:
            h = by.loc[objective]
            diff = h["accuracy_mean"] - acc["accuracy_mean"]
            ece = next((c[:-5] for c in by.columns if c.startswith("pre_ece") and c.endswith("_mean")), None)
            ece_text = "" if ece is None else (f", ECE {100 * h[f'{ece}_mean']:.2f} % against "
                                               f"{100 * acc[f'{ece}_mean']:.2f} %")
            if exhaustive.loc[part.index].all():
                head = (f"exhaustive search (the budget {int(h['budget'])} reaches all {int(h['architectures'])} "
                        f"architectures): the optimum by {objective} ({_name(space, hp)}, {dataset}) has accuracy")
                out.append(finding_row("nas", space, hp, dataset,
                                       f"{head} {100 * h['accuracy_mean']:.2f} % against "
                                       f"{100 * acc['accuracy_mean']:.2f} % by accuracy{ece_text}", diff))
                continue
            runs = int(h["repeats"])
            lo, hi = stats.welch_interval(h["accuracy_mean"], h["accuracy_sd"], acc["accuracy_mean"],
                                          acc["accuracy_sd"], runs, level)
            spread = ("" if np.isnan(lo) else f", [{100 * lo:+.2f}, {100 * hi:+.2f}] points at {level:.0%} (Welch t)")
            out.append(finding_row("nas", space, hp, dataset,
                                   f"{h['algorithm']} by {objective} ({_name(space, hp)}, {dataset}; the mean of "
                                   f"{runs} searches each, over {int(h['architectures'])} architectures): accuracy "
                                   f"{100 * h['accuracy_mean']:.2f} % against {100 * acc['accuracy_mean']:.2f} % by "
                                   f"accuracy, difference {100 * diff:+.2f} points{spread}{ece_text}",
                                   diff, lo, hi, None if np.isnan(lo) else "welch"))
    return out


def findings(nets: pd.DataFrame, kendall: pd.DataFrame, q4: pd.DataFrame, brackets: pd.DataFrame,
             edges: pd.DataFrame, bins: Sequence[int], level: float = 0.95, *, min_networks: int,
             robustness: pd.DataFrame | None = None, nas: pd.DataFrame | None = None,
             architecture: Sequence[dict] = ()) -> pd.DataFrame:
    """Every finding of the report, tidy (``FINDING_COLUMNS``): question, space, hp, dataset,
    the sentence, and its number with interval where it is a tau. ``nets``: measured
    networks (one row per network and seed); ``q4``: :func:`calibench.analysis.kendall.question4_findings`;
    ``architecture``: further question-7 rows (dicts with the same keys); ``min_networks``:
    the fewest networks a tau's interval is stated on (``analysis.min_networks``)."""
    b = nearest_bins(bins)
    rows = []
    m = int(min_networks)
    if not kendall.empty:
        rows += _q1(kendall, b, m)
    rows += _q2(robustness, m)
    if not kendall.empty:
        rows += _q3(kendall, b, m)
    if not q4.empty:
        rows += _q4(q4, b, level, m)
    rows += _q5(nets, b, level, m)
    rows += _q6(nets, bins, level, m)
    rows += _q7(brackets, edges, architecture, m)
    rows += _nas(nas, level)
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)

