"""A population's models compared by a metadata column (Tao et al., ICLR 2024, App. A-C: vision
transformers; ResNets, WRN and DenseNet trained with cross-entropy, focal and MMCE losses;
CLIP models): per group, ECE before and after each post-hoc method, a test of whether the
groups differ, and each group's Kendall matrices (Figs. 11-19).

Pure functions over the wide result tables (:func:`calibench.analysis.tables.load_tables`) with
the population's ``models.csv`` columns in them; :func:`run` is the groups part
(``analysis/groups.csv``, ``analysis/kendall_groups.parquet``, ``plots/groups/``), which
always runs and writes empty outputs when no population is grouped.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis.plots import heatmap_panels, pyplot, save
from calibench.analysis.tables import (first_seed, load_tables, measured, metric_candidates, nearest_bins,
                                       stages_present)
from calibench.analysis.registry import output_path

log = logging.getLogger(__name__)

MIN_GROUP = 3  # networks a group needs for its own Kendall matrices
MIN_KRUSKAL = 5  # networks a group needs to enter the Kruskal-Wallis test (its chi-square approximation)
SUMMARY_COLUMNS = ["space", "hp", "dataset", "group_by", "group", "stage", "n", "accuracy_median", "ece_bins",
                   "ece_median", "ece_q25", "ece_q75", "p_groups"]


def _check_column(df: pd.DataFrame, group_by: str) -> None:
    if group_by not in df.columns:
        from calibench.results.tables import FIRST, PROVENANCE

        known = set(FIRST) | set(PROVENANCE) | {"measured_by"}
        meta = [c for c in df.columns if c not in known and "_" not in c] or ["none"]
        raise ValueError(f"group_by {group_by!r}: no such column in the tables (metadata columns: {', '.join(meta)})")


def _first_seed_measured(df: pd.DataFrame) -> pd.DataFrame:
    return first_seed(measured(df))


def group_kendall(df: pd.DataFrame, group_by: str, settings: Mapping) -> pd.DataFrame:
    """:func:`calibench.analysis.kendall.kendall_all` on each group's networks, with columns ``group_by``
    and ``group``; groups of fewer than :data:`MIN_GROUP` measured networks in a table (isomorph
    copies and further seeds not counted) are skipped (logged)."""
    from calibench.analysis.kendall import kendall_all  # here: a run without groups needs no Kendall machinery

    _check_column(df, group_by)
    out = []
    for group, part in df.dropna(subset=[group_by]).groupby(group_by, sort=True):
        nets = _first_seed_measured(part) if {"measured_by", "seed"} <= set(part.columns) else part
        n = int(nets.groupby(["space", "hp", "dataset"])["arch_index"].nunique().min()) if len(nets) else 0
        if n < MIN_GROUP:  # measured networks (no isomorph copies) of its smallest table
            log.info("group_by %s = %s: %d networks, fewer than %d; no Kendall matrices", group_by, group, n, MIN_GROUP)
            continue
        m = kendall_all(part, settings)
        if not m.empty:
            out.append(m.assign(group_by=group_by, group=str(group)))
    if not out:
        return pd.DataFrame(columns=["row", "col", "tau", "lo", "hi", "n", "figure", "metric", "space", "hp",
                                     "dataset", "population", "stage", "group_by", "group"])
    return pd.concat(out, ignore_index=True)


def group_summary(df: pd.DataFrame, group_by: str, bins: Sequence[int]) -> pd.DataFrame:
    """One row per (space, hp, dataset, group, stage): networks, median accuracy, ECE at the bin
    count nearest 15 (median, quartiles), and ``p_groups``, the Kruskal-Wallis p-value of that
    ECE across the groups of the (space, hp, dataset, stage) that have at least
    :data:`MIN_KRUSKAL` networks (its chi-square approximation; NaN with fewer than two such
    groups)."""
    from scipy.stats import kruskal

    _check_column(df, group_by)
    b = nearest_bins(bins)
    nets = _first_seed_measured(df).dropna(subset=[group_by])
    rows = []
    for stage in stages_present(nets):
        col = f"{stage}_ece_{b}"
        if col not in nets.columns:
            continue
        keys = ["space", "hp", "dataset", group_by]
        stats = nets.groupby(keys, sort=True).agg(
            n=(col, "count"), accuracy_median=("accuracy", "median"), ece_median=(col, "median"),
            ece_q25=(col, lambda s: s.quantile(0.25)), ece_q75=(col, lambda s: s.quantile(0.75))).reset_index()
        tests = {}
        for key, part in nets.groupby(["space", "hp", "dataset"], sort=False):
            samples = [s.dropna().to_numpy() for _, s in part.groupby(group_by)[col]]
            samples = [s for s in samples if len(s) >= MIN_KRUSKAL]
            p = np.nan
            if len(samples) >= 2 and np.ptp(np.concatenate(samples)) > 1e-12:  # all equal (to rounding): no test
                p = float(kruskal(*samples).pvalue)
            tests[key] = p
        stats["p_groups"] = [tests[k] for k in zip(stats["space"], stats["hp"], stats["dataset"])]
        rows.append(stats.rename(columns={group_by: "group"}).assign(group_by=group_by, stage=stage, ece_bins=b))
    if not rows:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    out = pd.concat(rows, ignore_index=True)
    out["group"] = out["group"].astype(str)
    return out[SUMMARY_COLUMNS]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", str(text))


def plot_groups(df: pd.DataFrame, group_by: str, bins: Sequence[int], plots: Path, demo: str = ""
                ) -> list[tuple[str, Path]]:
    """Per (space, hp): pre and post ECE (nearest 15 bins) by group, a panel per dataset (boxes,
    with the networks as points where a group has at most 200); and the groups' Kendall tau
    across datasets of pre ECE side by side."""
    from calibench.analysis.stats import kendall_tau

    plt = pyplot()
    _check_column(df, group_by)
    b = nearest_bins(bins)
    nets = _first_seed_measured(df).dropna(subset=[group_by])
    plots.mkdir(parents=True, exist_ok=True)
    made = []
    rng = np.random.default_rng(0)
    for (space, hp), part in nets.groupby(["space", "hp"], sort=True):
        name = _slug(f"{space}_{hp}" if hp else space)
        label = f"{space}, hp {hp}" if hp else str(space)
        datasets = sorted(part["dataset"].unique())
        groups = sorted(part[group_by].astype(str).unique())
        fig, axes = plt.subplots(1, len(datasets), figsize=(max(4.0, 0.9 * len(groups) + 2) * len(datasets), 3.6),
                                 squeeze=False)
        for ax, dataset in zip(axes[0], datasets):
            rows = part[part["dataset"] == dataset]
            for k, (stage, colour) in enumerate((("pre", "#f4a582"), ("post", "#92c5de"))):
                col = f"{stage}_ece_{b}"
                if col not in rows.columns:
                    continue
                data = [rows.loc[rows[group_by].astype(str) == g, col].dropna().to_numpy() for g in groups]
                pos = np.arange(len(groups)) + (k - 0.5) * 0.4
                box = ax.boxplot(data, positions=pos, widths=0.35, patch_artist=True, showfliers=False)
                for patch in box["boxes"]:
                    patch.set_facecolor(colour)
                for x, values in zip(pos, data):
                    if 0 < len(values) <= 200:
                        ax.scatter(x + rng.uniform(-0.1, 0.1, len(values)), values, s=6, color="k", alpha=0.5, zorder=3)
            ax.set_xticks(range(len(groups)), groups, fontsize=7, rotation=30 if len(groups) > 6 else 0)
            ax.set_xlabel(group_by)
            ax.set_title(f"{dataset}: {rows['arch_index'].nunique()} networks", fontsize=9)
        axes[0][0].set_ylabel(f"ECE ({b} bins; orange: pre, blue: post)")
        fig.suptitle(f"ECE by {group_by} ({label}){demo}", fontsize=10)
        made.append((f"ECE by {group_by}, {label}", save(fig, plots / f"groups_{_slug(group_by)}_{name}.png")))
        if len(datasets) < 2:
            continue
        blocks = []
        col = f"pre_ece_{b}"
        for g in groups:
            wide = part[part[group_by].astype(str) == g].pivot_table(index="arch_index", columns="dataset", values=col)
            if len(wide) < MIN_GROUP or wide.shape[1] < 2:
                continue
            cols = list(wide.columns)
            tidy = pd.DataFrame([{"row": a, "col": c, "tau": 1.0 if a == c else
                                  kendall_tau(wide[a].to_numpy(), wide[c].to_numpy())} for a in cols for c in cols])
            blocks.append((f"{group_by} = {g}", tidy))
        if blocks:
            path = plots / f"groups_kendall_{_slug(group_by)}_{name}.png"
            heatmap_panels(blocks, f"Kendall tau of pre ECE ({b} bins) across datasets by {group_by} ({label}){demo}",
                            path)
            made.append((f"Kendall tau across datasets by {group_by}, {label}", path))
    return made


def groups_html(summary: pd.DataFrame) -> str:
    """:func:`group_summary` as a compact table: median ECE [quartiles] per group and stage."""
    if summary.empty:
        return "<p>No groups to compare.</p>"
    s = summary.copy()
    s["ECE median [q25, q75]"] = [f"{m:.4f} [{a:.4f}, {z:.4f}]" for m, a, z in
                                  zip(s["ece_median"], s["ece_q25"], s["ece_q75"])]
    s["accuracy (median)"] = s["accuracy_median"].map(lambda v: f"{v:.4f}")
    s["p (Kruskal-Wallis across groups)"] = s["p_groups"].map(lambda v: "" if np.isnan(v) else f"{v:.2g}")
    shown = s[["dataset", "stage", "group", "n", "accuracy (median)", "ECE median [q25, q75]",
               "p (Kruskal-Wallis across groups)"]]
    return shown.to_html(index=False, escape=True)


# ---------------------------------------------------------------- the groups part

KENDALL_GROUP_COLUMNS = ["row", "col", "tau", "lo", "hi", "n", "figure", "metric", "space", "hp", "dataset",
                         "population", "stage", "group_by", "group"]


def population_groups(df: pd.DataFrame, settings: Mapping, plots: Path
                      ) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, Path]], str]:
    """Populations beyond NATS-Bench compared by their metadata (``populations.<name>.group_by``;
    Tao et al. App. A-C): per group, ECE before and after temperature scaling and a test
    across groups, the Kendall matrices of each group, plots and the report's HTML."""
    wanted = settings.get("groups") or {}
    made, parts, summaries, matrices = [], [], [], []
    for space, columns in wanted.items():
        part = df[df["space"] == space] if not df.empty else df
        if part.empty:
            continue
        for column in columns:
            if column not in part.columns:
                log.warning("populations.%s.group_by: no column %r in its tables; skipped", space, column)
                parts.append(f"<p>{html.escape(space)}: no metadata column {html.escape(column)!r} to group by.</p>")
                continue
            summary = group_summary(part, column, settings["bins"])
            summaries.append(summary)
            matrices.append(group_kendall(part, column, settings))
            made += plot_groups(part, column, settings["bins"], plots)
            parts.append(f"<h3>{html.escape(space)}, by {html.escape(column)}</h3>" + groups_html(summary))
    summary = pd.concat(summaries, ignore_index=True) if summaries else pd.DataFrame(columns=SUMMARY_COLUMNS)
    kendall = (pd.concat(matrices, ignore_index=True) if matrices
               else pd.DataFrame(columns=KENDALL_GROUP_COLUMNS))
    return summary, kendall, made, "".join(parts)


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``groups``."""
    wanted = settings.get("groups") or {}
    df = pd.DataFrame()
    if wanted:  # the Kendall columns, the grouping columns and every metadata column (no "_" in its name)
        columns = {c for cs in wanted.values() for c in cs}
        candidate = metric_candidates(settings["bins"])
        df = load_tables(tables, lambda c: candidate(c) or c in columns or "_" not in c)
    summary, kendall, made, block = population_groups(df, settings, plots)
    summary.to_csv(output_path(results, "groups", "groups"), index=False)
    kendall.to_parquet(output_path(results, "groups", "kendall"), index=False)
    return {"plots": made, "blocks": [("populations", 10, block)]}
