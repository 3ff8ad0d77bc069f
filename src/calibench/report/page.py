"""The report: one section per question of Tao et al. (ICLR 2024), each with findings
computed from the data (:func:`findings`, also written to ``analysis/findings.csv``) and
its figures, then NAS, the post-hoc methods and reliability diagrams.

A finding is one sentence with a number, e.g. "pre ECE (15 bins) across datasets, tss
hp 200, cifar10 vs cifar100: tau 0.62 [0.58, 0.66] (bootstrap)". Intervals come from the
Kendall table (:func:`calibench.analysis.core.kendall_all`) or, for taus computed here
(question 5 and 6), from :func:`calibench.analysis.stats.kendall_jackknife`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis import stats

__all__ = ["SECTIONS", "FINDING_COLUMNS", "CLAIMS", "CLAIM_COLUMNS", "findings", "finding_row", "claims",
           "claims_html", "plot_section", "write_report"]

# (id, heading, what the section asks; paper figures)
SECTIONS = [
    ("failures", "What failed", None),
    ("q1", "Question 1: is calibration consistent across datasets?",
     "Kendall tau of each metric over the same architectures trained on two datasets (Fig. 2, App. K/L)."),
    ("q2", "Question 2: does calibration go with robustness?",
     "Kendall tau of each calibration metric and robustness column against ECE, by population size "
     "(Fig. 3, App. N)."),
    ("q3", "Question 3: do the calibration metrics agree?",
     "Kendall tau of every metric against every other over networks, before and after each method "
     "(Fig. 4a, App. K)."),
    ("q4", "Question 4: is calibration before recalibration a guide to calibration after?",
     "Kendall tau of the networks' ECE before against after each post-hoc method, across bin counts "
     "(Fig. 4b, App. M)."),
    ("q5", "Question 5: are more accurate networks better calibrated?",
     "ECE against accuracy, for all networks and those above 90 % accuracy, coloured by CIFAR-10-C AUROC "
     "(Fig. 5, App. D)."),
    ("q6", "Question 6: how much do the bin count and the training schedule matter?",
     "ECE by bin count before and after temperature scaling, and across training schedules "
     "(Fig. 6, App. G/H)."),
    ("q7", "Question 7: which architectures are well calibrated?",
     "SSS size and width, TSS cell kernels and the edge operations of the best networks by HCS "
     "(Figs. 7-10, App. I)."),
    ("nas", "HCS rankings and architecture search by HCS",
     "The best networks by HCS; regularised evolution, local and random search over each result table, by accuracy and by HCS "
     "(App. F, Table 1); mean ± sd over seeded repeats of the architecture found."),
    ("populations", "Populations beyond NATS-Bench, by group",
     "Models grouped by a column of their metadata (e.g. family, training loss): ECE before and after "
     "temperature scaling per group, a Kruskal-Wallis test across groups, and each group's Kendall matrices "
     "(Tao et al. App. A-C, Figs. 11-19)."),
    ("methods", "Post-hoc recalibration methods", ""),
    ("reliability", "Reliability diagrams",
     "Per-bin accuracy against confidence (15 equal-width bins, top label) of the best and worst network by "
     "HCS, before and after temperature scaling; the shaded gap is the miscalibration."),
]

# plot file name prefix -> section (the first match wins)
_PLOT_SECTIONS = [
    ("kendall_datasets_", "q1"), ("robustness", "q2"), ("kendall_metrics_", "q3"),
    ("kendall_pre_post_", "q4"), ("kendall_pre_methods_", "q4"), ("ece_vs_accuracy", "q5"),
    ("ece_by_bins", "q6"), ("hp_", "q6"), ("kernel", "q7"), ("width", "q7"), ("size", "q7"),
    ("hcs_vs_accuracy", "nas"), ("reliability_", "reliability"), ("ece_by_method", "methods"),
    ("method_win_rates", "methods"), ("groups_", "populations"),
]

MIN_NETWORKS = 10  # question 5's networks above 90 % accuracy: fewer give no tau

FINDING_COLUMNS = ["question", "space", "hp", "dataset", "text", "value", "lo", "hi", "interval"]


def plot_section(path: Path) -> str:
    """The section a plot belongs to, from its file name; ``other`` if none."""
    name = Path(path).name
    return next((section for prefix, section in _PLOT_SECTIONS if name.startswith(prefix)), "other")


def _name(space, hp) -> str:
    """``tss hp 200``; a population beyond NATS-Bench by its name alone."""
    return f"{space} hp {hp}" if hp else str(space)


def _interval_text(lo: float, hi: float, interval) -> str:
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi):
        return ""
    return f" [{lo:.2f}, {hi:.2f}]" + (f" ({interval})" if isinstance(interval, str) and interval else "")


def finding_row(question, space, hp, dataset, text, value=np.nan, lo=np.nan, hi=np.nan, interval=None) -> dict:
    """One finding (:data:`FINDING_COLUMNS`): a sentence and its number, with interval if a tau."""
    return {"question": question, "space": space, "hp": str(hp), "dataset": dataset, "text": text,
            "value": float(value), "lo": float(lo), "hi": float(hi), "interval": interval}


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
    networks (one row per network and seed); ``q4``: ``analysis.question4_findings``;
    ``architecture``: further question-7 rows (dicts with the same keys)."""
    from calibench.analysis.core import nearest_bins

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


def _img(results: Path, title: str, path: Path) -> str:
    rel = Path(path).relative_to(results)
    return f"<h4>{html.escape(title)}</h4><img src='{html.escape(str(rel))}' alt='{html.escape(title)}'>"


def write_report(results: Path, plots: Sequence[tuple[str, Path]], found: pd.DataFrame,
                 n_rows: Mapping[str, int], minibench: bool, *, blocks: Mapping[str, str] | None = None) -> Path:
    """``results/report.html``: a contents list, then one section per entry of
    :data:`SECTIONS` that has findings, figures or an HTML block (``blocks``: section id ->
    HTML, e.g. tables), each with its computed findings first; figures placed by
    :func:`plot_section`; figures no section claims at the end."""
    blocks = dict(blocks or {})
    by_section: dict[str, list[tuple[str, Path]]] = {}
    for title, path in plots:
        by_section.setdefault(plot_section(path), []).append((title, path))
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>calibench report</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 12px}img{max-width:100%}"
             "table{border-collapse:collapse;font-size:12px;max-width:100%}"
             "td,th{border:1px solid #ccc;padding:2px 6px;overflow-wrap:anywhere}"
             ".warn{background:#fff3cd;padding:8px;border:1px solid #e0c070}"
             ".findings li{margin:2px 0}nav li{margin:1px 0}</style></head><body>",
             "<h1>calibench report</h1>"]
    if minibench:
        parts.append("<p class='warn'><b>Mini benchmark:</b> synthetic data and randomly initialised NATS networks "
                     "with fitted heads. These are demo numbers, NOT NATS-Bench results.</p>")
    parts.append("<p>Tables: " + ", ".join(f"{html.escape(k)} ({v} rows)" for k, v in n_rows.items())
                 + ". Every finding below is computed from these tables (<code>analysis/findings.csv</code>).</p>")
    sections = []
    for sid, heading, question in SECTIONS:
        lines = found[found["question"] == sid]["text"].tolist() if not found.empty else []
        figures = by_section.pop(sid, [])
        block = blocks.pop(sid, "")
        if not (lines or figures or block):
            continue
        body = [f"<section id='{sid}'><h2>{html.escape(heading)}</h2>"]
        if question:
            body.append(f"<p><i>{html.escape(question)}</i></p>")
        if lines:
            body.append("<ul class='findings'>" + "".join(f"<li>{html.escape(t)}</li>" for t in lines) + "</ul>")
        if block:
            body.append(block)
        body.extend(_img(results, t, p) for t, p in figures)
        body.append("</section>")
        sections.append((sid, heading, "\n".join(body)))
    rest = [p for ps in by_section.values() for p in ps]
    extra_blocks = [b for b in blocks.values() if b]
    if rest or extra_blocks:
        sections.append(("other", "Other figures", "<section id='other'><h2>Other figures</h2>"
                         + "".join(extra_blocks) + "".join(_img(results, t, p) for t, p in rest) + "</section>"))
    parts.append("<nav><h2>Contents</h2><ol>" + "".join(
        f"<li><a href='#{sid}'>{html.escape(heading)}</a></li>" for sid, heading, _ in sections) + "</ol></nav>")
    parts.extend(body for _, _, body in sections)
    parts.append("</body></html>")
    out = Path(results) / "report.html"
    out.write_text("\n".join(parts))
    return out


# ---------------------------------------------------------------- the paper's claims

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
    from calibench.analysis.core import nearest_bins

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
