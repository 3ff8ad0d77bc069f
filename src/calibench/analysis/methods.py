"""The methods part: the post-hoc methods compared (docs/recalibration.md, "What the
analysis asks of these stages").

* ``analysis/methods_summary.parquet``/``.csv``: the distribution of each metric per
  (space, hp, dataset, stage) (Nixon et al. 2019 Tables 1/2, Gupta et al. 2021 Table 1 at
  population scale);
* ``analysis/method_wins.parquet``: how often each stage is the best for a network, and by
  how much;
* ``plots/methods/``: ECE per method (box plots) and the method-by-metric win rates;
* the report's methods section (the summary and the win shares; question 4 per method
  comes from the Kendall part).

Fits on too little data (docs/recalibration.md, "Common rules": ``{stage}_fit_underdetermined``
= 1) are counted per table and stage (``n_underdetermined``) and, by default, left out of
the rankings: the bold best medians and the win shares. Their numbers describe a fit on too
little data, not the method. ``n_worse_than_pre`` counts the networks on which a stage is
worse than ``pre`` (for NLL: the test part's NLL above the network's own).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis.plots import DPI, fit_annotations, pyplot, save, stage_color
from calibench.analysis.tables import (KEYS, STAGE_NAMES, STAGES, demo_suffix, first_seed, group_stages, label,
                                       listed_stages, load_tables, measured, nearest_bins, stage_order,
                                       stages_present, summary_metrics, table_stages)
from calibench.metrics import registry
from calibench.analysis.registry import output_path
from calibench.analysis.stats import too_few
from calibench.layout import target_name

SUMMARY_COLUMNS = ["space", "hp", "dataset", "stage", "metric", "n", "n_nan", "n_inf", "mean", "median", "q25", "q75",
                   "iqr", "n_underdetermined", "n_worse_than_pre", "best", "next_stage", "p_vs_next", "n_vs_next",
                   "networks_vs_next"]
WINS_COLUMNS = ["space", "hp", "dataset", "metric", "stage", "n_networks", "outright", "tied", "share",
                "margin_median", "margin_mean", "n_margin", "n_underdetermined"]
FLAG = "fit_underdetermined"  # {stage}_fit_underdetermined: 1 where the fit had too little data
TOO_LITTLE = ("their numbers describe a fit on too little data, not the method")


def underdetermined(part: pd.DataFrame, stage: str) -> np.ndarray:
    """Per row of ``part``, whether ``stage``'s fit was flagged as having too little data
    (docs/recalibration.md, "Common rules"); False where the tables carry no flag."""
    col = f"{stage}_{FLAG}"
    if col not in part.columns:
        return np.zeros(len(part), dtype=bool)
    return part[col].to_numpy(dtype=float) == 1


def worse_than_pre(part: pd.DataFrame, stage: str, metric: str) -> int:
    """Networks of ``part`` on which ``stage`` is worse than ``pre`` on ``metric`` (higher; for
    accuracy lower); NaN on either side is not counted, +inf NLL is worse than a finite one."""
    mine, pre = f"{stage}_{metric}", f"pre_{metric}"
    if stage == "pre" or mine not in part.columns or pre not in part.columns:
        return 0
    a, b = part[mine].to_numpy(dtype=float), part[pre].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        worse = a < b if registry.higher_is_better(metric) else a > b
    return int(worse.sum())


def _quantile(sorted_values: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of NaN-free sorted values that may hold
    +-inf: interpolating towards an infinite neighbour gives it; two equal infinite
    neighbours give that infinity (numpy gives NaN there)."""
    n = len(sorted_values)
    if n == 0:
        return np.nan
    h = (n - 1) * q
    lo, hi = int(np.floor(h)), int(np.ceil(h))
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    if lo == hi or a == b:
        return a
    return a + (b - a) * (h - lo)


def describe_values(values) -> dict:
    """n, n_nan, n_inf, mean, median, q25, q75, iqr of one metric over networks.

    NaN values (a failed fit, docs/recalibration.md "Common rules") are counted in
    ``n_nan`` and left out of every statistic. Infinite values (an NLL of +inf where a
    method gave the true class probability 0) are counted in ``n_inf`` and kept: the
    mean is then inf, and the quartiles are rank statistics (linear interpolation
    between neighbours, an infinite neighbour giving inf), so the median stays finite
    while fewer than half the networks are infinite. ``iqr = q75 - q25``, NaN where
    both quartiles are the same infinity.
    """
    v = np.asarray(values, dtype=float)
    nan = np.isnan(v)
    kept = np.sort(v[~nan])
    q25, median, q75 = (_quantile(kept, q) for q in (0.25, 0.5, 0.75))
    with np.errstate(invalid="ignore"):
        iqr = q75 - q25
        mean = float(np.mean(kept)) if len(kept) else np.nan
    return {"n": int(len(v)), "n_nan": int(nan.sum()), "n_inf": int(np.isinf(kept).sum()), "mean": mean,
            "median": median, "q25": q25, "q75": q75, "iqr": float(iqr)}


def best_against_next(part: pd.DataFrame, rows: Sequence[dict], metric: str,
                      include_underdetermined: bool = False) -> dict[str, object]:
    """Of one table's summary ``rows`` of ``metric`` (one per stage): the stage with the best
    median (lowest; highest for accuracy) among those with a finite median and, unless
    ``include_underdetermined``, no fit on too little data; the next best; and the paired
    Wilcoxon signed-rank test of their values over the table's networks
    (:func:`calibench.analysis.stats.paired_lower`, best first): ``{"best", "next_stage",
    "p_vs_next", "n_vs_next", "networks_vs_next"}`` (p NaN where there is no next stage, or
    where the signed ranks lean the other way than the medians; ``n_vs_next`` the non-zero
    differences the test ranks, ``networks_vs_next`` the networks with both values finite)."""
    from calibench.analysis.stats import paired_lower

    sign = -1.0 if registry.higher_is_better(metric) else 1.0
    eligible = [r for r in rows if np.isfinite(r["median"]) and (include_underdetermined or not r["n_underdetermined"])]
    if not eligible:
        return {"best": None, "next_stage": None, "p_vs_next": np.nan, "n_vs_next": 0, "networks_vs_next": 0}
    ranked = sorted(eligible, key=lambda r: sign * r["median"])
    best = ranked[0]["stage"]
    if len(ranked) < 2:
        return {"best": best, "next_stage": None, "p_vs_next": np.nan, "n_vs_next": 0, "networks_vs_next": 0}
    nxt = ranked[1]["stage"]
    x, y = (part[f"{s}_{metric}"].to_numpy(dtype=float) for s in (best, nxt))
    p, n = paired_lower(sign * x, sign * y)
    return {"best": best, "next_stage": nxt, "p_vs_next": p, "n_vs_next": n,
            "networks_vs_next": int(np.sum(np.isfinite(x) & np.isfinite(y)))}


def methods_summary(df: pd.DataFrame, bins: Sequence[int],
                    stages_by_table: Mapping[tuple[str, str, str], Sequence[str]] | None = None,
                    include_underdetermined: bool = False) -> pd.DataFrame:
    """Population-scale Nixon et al. 2019 Tables 1/2 and Gupta et al. 2021 Table 1.

    One row per (space, hp, dataset, stage, metric) over the measured networks (TSS
    isomorph copies dropped; one row per network, its first seed, as the Kendall matrices
    use) of the stages in the tables, for the metrics of :func:`summary_metrics`; ``metric``
    is the column suffix (``ece_15``, ``ksce``...). Columns: :data:`SUMMARY_COLUMNS` (:func:`describe_values`'s statistics
    after the keys). ``stages_by_table`` (:func:`table_stages`): the stages of each table,
    so that a method that failed on all of a table's networks still has its rows (all NaN).
    The statistics are over every network; ``n_underdetermined`` counts those whose fit of
    the stage had too little data, ``n_worse_than_pre`` those on which the stage is worse
    than ``pre`` (:func:`worse_than_pre`). ``best`` marks the stage with the best median of the
    table and metric, and its row holds ``next_stage`` and the paired test against it
    (``p_vs_next``, ``n_vs_next``, ``networks_vs_next``: :func:`best_against_next`).
    """
    stages = stages_present(df)
    rows = []
    for (space, hp, dataset), part in first_seed(measured(df)).groupby(["space", "hp", "dataset"]):
        listed = listed_stages(stages_by_table, space, hp, dataset)
        for metric in summary_metrics(bins):
            group = [{"space": space, "hp": hp, "dataset": dataset, "stage": stage, "metric": metric,
                      **describe_values(part[f"{stage}_{metric}"]),
                      "n_underdetermined": int(underdetermined(part, stage).sum()),
                      "n_worse_than_pre": worse_than_pre(part, stage, metric)}
                     for stage in group_stages(part, stages, metric, listed)]
            found = best_against_next(part, group, metric, include_underdetermined)
            for row in group:
                is_best = row["stage"] == found["best"]
                rows.append({**row, "best": is_best, "next_stage": found["next_stage"] if is_best else None,
                             "p_vs_next": found["p_vs_next"] if is_best else np.nan,
                             "n_vs_next": found["n_vs_next"] if is_best else 0,
                             "networks_vs_next": found["networks_vs_next"] if is_best else 0})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def method_wins(df: pd.DataFrame, bins: Sequence[int],
                stages_by_table: Mapping[tuple[str, str, str], Sequence[str]] | None = None,
                include_underdetermined: bool = False) -> pd.DataFrame:
    """How often each stage is the best for a network, and by how much.

    Per (space, hp, dataset, metric) over the measured networks (TSS isomorph copies
    dropped; each network's first seed is its one contest), for each metric of :func:`summary_metrics`:

    * The contestants of a network are the stages with a *finite* value (a failed fit,
      NaN, and an infinite NLL take no part) whose fit did not have too little data
      (``{stage}_fit_underdetermined``; unless ``include_underdetermined``): such a
      stage's numbers describe the fit, not the method. ``n_underdetermined`` counts the
      networks a stage was left out of for it; a stage left out of every contest has
      ``share`` NaN. A network with no contestant is left out; ``n_networks`` counts the
      rest. A network with one contestant is won by that stage, with no margin.
    * The best value is the lowest; for accuracy the highest. Values are compared
      exactly: every stage holding the best value is a winner, and the network's win is
      split evenly among them (1/t each of t tied winners).
    * ``share`` = (outright wins + the tied fractions) / n_networks, so the shares of a
      group sum to 1. ``outright``: networks the stage wins alone; ``tied``: networks
      whose best value it shares.
    * The margin of an outright win is the gap between the winner's value and the
      runner-up's (the best value among the other contestants), in the metric's units
      and positive. ``margin_median``, ``margin_mean`` are over the stage's outright
      wins that have a runner-up (``n_margin`` of them; a tie has margin 0 and is not
      counted); NaN when there are none.

    One row per (space, hp, dataset, metric, stage) for the stages of that table (as in
    :func:`methods_summary`); a table with fewer than two stages gives no rows for that
    metric.
    """
    stages = stages_present(df)
    rows = []
    for (space, hp, dataset), part in first_seed(measured(df)).groupby(["space", "hp", "dataset"]):
        listed = listed_stages(stages_by_table, space, hp, dataset)
        for metric in summary_metrics(bins):
            present = group_stages(part, stages, metric, listed)
            if len(present) < 2:
                continue
            values = part[[f"{s}_{metric}" for s in present]].to_numpy(dtype=float)
            flagged = np.stack([underdetermined(part, s) for s in present], axis=1)
            if not include_underdetermined:
                values = np.where(flagged, np.nan, values)
            else:
                flagged = np.zeros_like(flagged)
            score = -values if registry.higher_is_better(metric) else values  # lower is better from here on
            finite = np.isfinite(score)
            score = np.where(finite, score, np.inf)
            contest = finite.any(axis=1)
            left_out = flagged.sum(axis=0)
            took_part = ~flagged[contest].all(axis=0)  # False: left out of every contest
            score, finite = score[contest], finite[contest]
            best = score.min(axis=1, keepdims=True)
            winner = finite & (score == best)
            n_winners = winner.sum(axis=1)
            share = (winner / n_winners[:, None]).sum(axis=0)
            runner_up = np.sort(score, axis=1)[:, 1] if score.shape[1] > 1 else np.full(len(score), np.inf)
            margin = runner_up - best[:, 0]
            alone = n_winners == 1
            with_margin = alone & np.isfinite(runner_up)
            n = int(contest.sum())
            for j, stage in enumerate(present):
                won = winner[:, j] & alone
                m = margin[won & with_margin]
                rows.append({"space": space, "hp": hp, "dataset": dataset, "metric": metric, "stage": stage,
                             "n_networks": n, "outright": int(won.sum()), "tied": int((winner[:, j] & ~alone).sum()),
                             "share": float(share[j] / n) if n and took_part[j] else np.nan,
                             "margin_median": float(np.median(m)) if len(m) else np.nan,
                             "margin_mean": float(np.mean(m)) if len(m) else np.nan, "n_margin": int(len(m)),
                             "n_underdetermined": int(left_out[j])})
    return pd.DataFrame(rows, columns=WINS_COLUMNS)


# ---------------------------------------------------------------- plots

def _facets(df: pd.DataFrame):
    """(space, hp) rows and dataset columns of a facet grid over the measured networks."""
    nets = measured(df)
    groups = sorted(nets.groupby(["space", "hp"]).groups)
    datasets = sorted(nets["dataset"].unique())
    return nets, groups, datasets


def _box_plots(nets, groups, datasets, stages, b: int, demo: str, plots: Path) -> list[tuple[str, Path]]:
    """ECE per method: boxes without fliers (tens of thousands of networks would be a smear)."""
    plt = pyplot()
    metric = f"ece_{b}"
    fig, axes = plt.subplots(len(groups), len(datasets), squeeze=False,
                             figsize=((1.2 + 0.5 * len(stages)) * len(datasets), 3.6 * len(groups)))
    drawn = False
    for r, (space, hp) in enumerate(groups):
        for c, dataset in enumerate(datasets):
            ax = axes[r][c]
            part = nets[(nets["space"] == space) & (nets["hp"] == hp) & (nets["dataset"] == dataset)]
            present = group_stages(part, stages, metric)
            data = [part[f"{s}_{metric}"].to_numpy(dtype=float) for s in present]
            data = [v[np.isfinite(v)] for v in data]
            keep = [(s, v) for s, v in zip(present, data) if len(v)]
            if not keep:
                ax.axis("off")
                continue
            labels = []
            for s, v in keep:
                failed = int(part[f"{s}_{metric}"].isna().sum())
                little = int(underdetermined(part, s).sum())
                labels.append(s + (f"\n{failed} NaN" if failed else "") + (f"\n{little} too\nlittle data" if little else ""))
            box = ax.boxplot([v for _, v in keep], patch_artist=True, showfliers=False, widths=0.6,
                             medianprops={"color": "black"})
            ax.set_xticks(range(1, len(keep) + 1), labels, fontsize=6.5)
            for patch, (s, _) in zip(box["boxes"], keep):
                patch.set_facecolor(stage_color(s))
                patch.set_alpha(0.75)
            if all(v.min() > 0 for _, v in keep):
                ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3, which="both")
            ax.set_title(f"{label(space, hp)}, {dataset}: {len(part)} networks", fontsize=9)
            ax.set_ylabel(f"ECE ({b} bins)", fontsize=8)
            drawn = True
    fig.suptitle(f"ECE ({b} bins) per method: boxes quartiles, whiskers 1.5 IQR, outliers not drawn; "
                 f"NaN: failed fits; too little data: fits on too few validation samples{demo}", fontsize=10)
    if drawn:
        return [(f"ECE ({b} bins) per method", save(fig, plots / "ece_by_method.png"))]
    plt.close(fig)
    return []


def _win_rates(wins, groups, datasets, stages, bins, demo: str, plots: Path,
               include_underdetermined: bool = False) -> list[tuple[str, Path]]:
    """Win rates: stages x metrics, one panel per table."""
    plt = pyplot()
    from matplotlib.ticker import PercentFormatter

    metrics = [m for m in summary_metrics(bins) if m in set(wins["metric"])]
    rows = [s for s in stages if s in set(wins["stage"])]
    fig, axes = plt.subplots(len(groups), len(datasets), squeeze=False, layout="constrained",
                             figsize=((1.0 + 0.5 * len(metrics)) * len(datasets) + 1,
                                      (1.2 + 0.3 * len(rows)) * len(groups) + 0.4))
    images = []
    vmax = max(float(wins["share"].max()), 0.05)  # the figure's own scale: shares of 8 methods are small
    im = None
    for r, (space, hp) in enumerate(groups):
        for c, dataset in enumerate(datasets):
            ax = axes[r][c]
            part = wins[(wins["space"] == space) & (wins["hp"] == hp) & (wins["dataset"] == dataset)]
            if part.empty:
                ax.axis("off")
                continue
            grid = part.pivot(index="stage", columns="metric", values="share").reindex(index=rows, columns=metrics)
            values = grid.to_numpy(dtype=float)
            im = ax.imshow(values, vmin=0, vmax=vmax, cmap="Blues", aspect="auto")
            images.append(im)
            ax.set_xticks(range(len(metrics)), metrics, rotation=45, ha="right", fontsize=7)
            ax.set_yticks(range(len(rows)), rows, fontsize=7)
            n = int(part["n_networks"].max())
            ax.set_title(f"{label(space, hp)}, {dataset}: {n} networks", fontsize=9)
    left = "" if include_underdetermined else "; fits on too little data take no part (blank: left out everywhere)"
    fig.suptitle(f"Share of networks for which each method is the best (ties split{left}){demo}", fontsize=10)
    made = []
    if im is not None:
        fig.colorbar(im, ax=axes, fraction=0.02, shrink=0.8, label="share of networks won",
                     format=PercentFormatter(1.0))
        fit_annotations(fig, images, "{:.0f}%", dark=60 * vmax, scale=100.0, chars=4, min_pt=7.0)  # "100%"
        path = plots / "method_win_rates.png"
        fig.savefig(path, dpi=DPI, bbox_inches="tight")  # nothing clipped: long titles, legends below
        made.append(("Win rate of each method per metric", path))
    plt.close(fig)
    return made


def make_plots(df: pd.DataFrame, wins: pd.DataFrame, settings: Mapping, plots: Path) -> list[tuple[str, Path]]:
    """Box plots of ECE per stage and the stage-by-metric win-rate heatmap, only for the
    stages in the tables (when there are two stages or more)."""
    stages = stages_present(df)
    if len(stages) < 2:
        return []
    nets, groups, datasets = _facets(df)
    demo = demo_suffix(settings)
    made = _box_plots(nets, groups, datasets, stages, nearest_bins(settings["bins"]), demo, plots)
    if not wins.empty:
        made += _win_rates(wins, groups, datasets, stages, settings["bins"], demo, plots,
                           bool(settings["include_underdetermined"]))
    return made


# ---------------------------------------------------------------- the report's section

def _fmt(x: float) -> str:
    if not np.isfinite(x):
        return "–" if np.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{x:.3g}"


def summary_grid(summary: pd.DataFrame, level: float = 0.95, min_networks: int = 0) -> pd.DataFrame:
    """The method summary for the report: one row per (space, hp, dataset, stage) with the
    networks, the failed fits (NaN accuracy), the fits on too little data and the networks
    whose NLL is worse than ``pre``'s, one HTML cell per metric, ``median [q25–q75]``; the best
    median of each table and metric (``best``, :func:`best_against_next`) in bold where the
    paired test, on at least ``min_networks`` networks (``analysis.min_networks``), puts it
    ahead of the next stage at ``level``, else marked "best median, not ahead of <next> (p = …)"
    or "too few networks to decide (n = …)"; infinite values and NaNs beyond the row's failed
    fits noted."""
    s = summary.copy()
    for name in ("n_underdetermined", "n_worse_than_pre"):
        if name not in s.columns:
            s[name] = 0
    keys = ["space", "hp", "dataset", "stage"]
    # A failed fit makes every metric NaN, accuracy included: its NaN count is the row's failures.
    acc_nan = s["n_nan"].where(s["metric"] == "accuracy")
    failed = acc_nan.groupby([s[k] for k in keys]).transform("max").fillna(
        s.groupby(keys)["n_nan"].transform("min")).astype(int)
    cells = []
    for row, fail in zip(s.itertuples(), failed):
        text = f"{_fmt(row.median)} [{_fmt(row.q25)}–{_fmt(row.q75)}]"
        networks = row.networks_vs_next
        few = bool(row.best) and isinstance(row.next_stage, str) and networks < min_networks
        ahead = bool(row.best) and not few and row.p_vs_next < 1 - level
        if ahead:
            text = f"<b>{text}</b>"
        extra = row.n_nan - fail
        notes = [f"{extra} NaN"] * (extra > 0) + [f"{row.n_inf} inf"] * (row.n_inf > 0)
        if few:
            notes.append(f"best median; against {html.escape(row.next_stage)}: {too_few(networks)}")
        elif row.best and not ahead and isinstance(row.next_stage, str):
            p = "signed ranks lean the other way" if row.p_vs_next != row.p_vs_next else f"p = {row.p_vs_next:.2g}"
            notes.append(f"best median, not ahead of {html.escape(row.next_stage)}: {p}")
        if notes:
            text += f" <small>({', '.join(notes)})</small>"
        cells.append(text)
    s["cell"] = cells
    s["failed"] = failed
    metrics = list(dict.fromkeys(s["metric"]))
    s["stage"] = pd.Categorical(s["stage"], stage_order(s["stage"]), ordered=True)
    grid = s.pivot(index=keys, columns="metric", values="cell")[metrics].fillna("")
    s["worse_nll"] = s["n_worse_than_pre"].where(s["metric"] == "nll")
    counts = s.groupby(keys, observed=True).agg(networks=("n", "max"), failed=("failed", "max"),
                                                little=("n_underdetermined", "max"), worse=("worse_nll", "max"))
    counts["worse"] = [("–" if str(stage) == "pre" or w != w else str(int(w)))
                       for stage, w in zip(counts.index.get_level_values("stage"), counts["worse"])]
    counts = counts.rename(columns={"little": "too little data", "worse": "NLL worse than pre"})
    grid = counts.join(grid)
    grid.columns.name = None
    return grid


def summary_html(summary: pd.DataFrame, level: float = 0.95, min_networks: int = 0) -> str:
    """:func:`summary_grid` as an HTML table ('' if there is nothing to show)."""
    return summary_grid(summary, level, min_networks).to_html(escape=False) if not summary.empty else ""


def wins_html(wins: pd.DataFrame, metric: str) -> str:
    """One metric's win shares and median margins: one row per table with its contests
    (``networks``), one column per stage, cells ``share (median margin)``."""
    part = wins[wins["metric"] == metric]
    if part.empty:
        return ""
    part = part.assign(cell=[("too little data" if u else "–") if sh != sh else f"{100 * sh:.0f}%"
                             + (f" ({_fmt(m)})" if np.isfinite(m) else "")
                             for sh, m, u in zip(part["share"], part["margin_median"], part["n_underdetermined"])])
    grid = part.pivot(index=["space", "hp", "dataset"], columns="stage", values="cell")
    grid = grid[stage_order(grid.columns)].fillna("–")
    grid.columns.name = None
    grid.insert(0, "networks", part.groupby(["space", "hp", "dataset"])["n_networks"].max().astype(int))
    return grid.to_html()


def flagged_text(summary: pd.DataFrame) -> str:
    """Per table, the stages with fits on too little data and how many networks:
    ``tss_200_cifar100: vs 6, dir 6 of 6 networks; ...`` ('' if none)."""
    if summary.empty or "n_underdetermined" not in summary.columns:
        return ""
    rows = summary.drop_duplicates(["space", "hp", "dataset", "stage"])
    parts = []
    for (space, hp, dataset), table in rows.groupby(["space", "hp", "dataset"], sort=True):
        flagged = table[table["n_underdetermined"] > 0]
        if len(flagged):
            stages = ", ".join(f"{st} {int(u)}" for st, u in zip(flagged["stage"], flagged["n_underdetermined"]))
            parts.append(f"{target_name(space, hp)}_{dataset}: {stages} of {int(table['n'].max())} networks")
    return "; ".join(parts)


def section_blocks(summary: pd.DataFrame, wins: pd.DataFrame, bins: Sequence[int],
                   include_underdetermined: bool = False, level: float = 0.95,
                   min_networks: int = 0) -> list[tuple[str, int, str]]:
    """The methods section's blocks (section, order, HTML): the stages and the summary (10),
    the win shares (30); question 4 per method (20) is the Kendall part's."""
    if summary.empty:
        return []
    b = nearest_bins(bins)
    stages = stage_order(summary["stage"])
    ranked = ("the rankings below include them, as configured (<code>analysis.include_underdetermined</code>)"
              if include_underdetermined else "the rankings below (bold medians, win shares) leave them out")
    intro = ("<p>Stages in these tables: " + ", ".join(
                 f"<b>{html.escape(s)}</b> ({html.escape(STAGE_NAMES.get(s, s))})" for s in stages)
             + ". Every method is fitted on the validation part of each network's split and measured on the "
               "test part (docs/recalibration.md), so the stages of a network are compared sample for sample. "
               "A failed fit gives NaN for its stage and network: it is counted under <i>failed</i> and left "
               "out of the statistics; an infinite NLL (a probability 0 on the true class) is noted as <i>inf</i> "
               "and kept (the mean is then infinite; the median stays finite while fewer than half the networks "
               "are infinite).</p>"
             "<p><i>too little data</i> counts the networks whose fit of the stage had fewer validation samples "
             "than the method needs (docs/recalibration.md: vs, ms and dir with fewer than 10 per class on "
             "average, iso and hist with fewer than 10 positives in some class): "
             f"{TOO_LITTLE}, so {ranked}. <i>NLL worse than pre</i> counts the networks on which the stage's "
             "NLL on the test part is worse than the network's own softmax (pre).</p>")
    flagged = flagged_text(summary)
    if flagged:
        intro += (f"<p class='warn'><b>Fits on too little data</b> (networks per table and stage): "
                  f"{html.escape(flagged)}. These numbers describe a fit on too little data, not the method.</p>")
    table = (f"<h3>Distribution over networks: median [25th–75th percentile]</h3>"
             f"<p>Binned metrics at {b} bins; cwce is Nixon et al.'s SCE, ksce the top-1 KS error of Gupta et "
             f"al. Bold: the best median of the table and metric (lowest; highest for accuracy)"
             + ("" if include_underdetermined else " among the stages without fits on too little data")
             + f", where a paired Wilcoxon signed-rank test over the networks puts that stage ahead of the "
               f"next best at {level:.0%} (two-sided, no correction for the many tables and metrics) on at "
               f"least {min_networks} networks (<code>analysis.min_networks</code>); a best median the test "
               f"does not separate from the next, or on fewer networks, is marked as such. Full numbers (n, "
               f"mean, IQR, the counts, the test's p and n): <code>analysis/methods_summary.csv</code>.</p>"
             + summary_html(summary, level, min_networks))
    blocks = [("methods", 10, intro + "\n" + table)]
    if not wins.empty:
        left = ("" if include_underdetermined else " A stage whose fit had too little data on a network takes no "
                "part there (<i>too little data</i>: left out on every network).")
        blocks.append(("methods", 30, "<h3>Which method is best for a network, and by how much</h3><p>For each "
                       "network and metric the stages with a finite value compete; the lowest value wins (for "
                       "accuracy the highest), exact ties split the win evenly." + left + " The heatmap gives each "
                       "stage's share of the networks; <code>analysis/method_wins.parquet</code> adds outright "
                       "wins, ties and the median and mean margin over the runner-up of the outright wins.</p>"
                       f"<p>ECE ({b} bins): share of networks won (median margin of the outright wins over the "
                       f"runner-up, in ECE), over the table's networks with a contest; a description of "
                       f"these networks, not a test (the bold medians above are tested)</p>"
                       + wins_html(wins, f"ece_{b}")))
    return blocks


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``methods``
    (``include_underdetermined``: rank fits on too little data too, default False;
    ``min_networks``: the fewest networks a test decides on, default 0)."""
    bins = settings["bins"]
    include = bool(settings["include_underdetermined"])
    wanted = set(KEYS) | {f"{s}_{m}" for s in STAGES for m in summary_metrics(bins)} | {"accuracy"}
    wanted |= {f"{s}_{FLAG}" for s in STAGES}
    df = load_tables(tables, wanted)
    stages_by_table = table_stages(tables)
    level = float(settings.get("level", 0.95))
    summary = methods_summary(df, bins, stages_by_table, include)
    summary.to_parquet(output_path(results, "methods", "summary"), index=False)
    summary.to_csv(output_path(results, "methods", "summary_csv"), index=False)
    wins = method_wins(df, bins, stages_by_table, include)
    wins.to_parquet(output_path(results, "methods", "wins"), index=False)
    return {"plots": make_plots(df, wins, settings, plots),
            "blocks": section_blocks(summary, wins, bins, include, level, int(settings.get("min_networks", 0)))}
