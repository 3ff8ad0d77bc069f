"""The HCS part: HCS_beta rankings (docs/metrics.md, "Harmonic Calibration Score"; Tao et
al., ICLR 2024, Fig. 8 right) and the top n per table.

Outputs: ``analysis/hcs.parquet`` (every measured network with HCS_beta and its rank per
table for each configured beta), ``analysis/top_hcs.csv`` (the top ``analysis.top_n`` per
table by the first beta), ``plots/hcs/`` (HCS against accuracy) and the report's table of
the top networks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from calibench.analysis.plots import pyplot, save
from calibench.analysis.tables import HCS_ECE, demo_suffix, first_seed, label, load_tables, measured
from calibench.analysis.registry import output_path
from calibench.layout import target_name
from calibench.metrics.hcs import hcs

COLUMNS = ("space", "hp", "dataset", "arch_index", "arch_str", "seed", "params", "flops", "accuracy", HCS_ECE,
           "post_ece_15")


def hcs_table(df: pd.DataFrame, betas: Sequence[float]) -> pd.DataFrame:
    """The measured networks (:data:`COLUMNS`; one row per network, its first seed, as the
    Kendall matrices use) with ``hcs_{beta}`` and ``rank_hcs_{beta}`` (1 = best, ties share the
    lower rank) per (space, hp, dataset) for each beta."""
    nets = first_seed(measured(df)).reindex(columns=list(COLUMNS))  # a column no table has: NaN
    for beta in betas:
        col = f"hcs_{beta:g}"
        nets[col] = hcs(nets["accuracy"], nets[HCS_ECE], beta)
        nets[f"rank_{col}"] = nets.groupby(["space", "hp", "dataset"])[col].rank(ascending=False, method="min")
    return nets


def top_networks(hcs_df: pd.DataFrame, betas: Sequence[float], top_n: int) -> pd.DataFrame:
    """The top ``top_n`` networks of each table by the first beta's HCS."""
    first = f"hcs_{betas[0]:g}"
    return (hcs_df.sort_values(first, ascending=False)
            .groupby(["space", "hp", "dataset"]).head(top_n)
            .sort_values(["space", "dataset", f"rank_{first}"]))


def top_html(tops: pd.DataFrame, betas: Sequence[float]) -> str:
    shown = tops[["space", "dataset", "arch_index", "arch_str", "accuracy", "pre_ece_15"]
                 + [f"hcs_{b:g}" for b in betas]]
    return "<h3>Top networks by HCS</h3>" + shown.to_html(index=False, float_format=lambda x: f"{x:.4f}")


def plot_hcs_vs_accuracy(df: pd.DataFrame, hcs_df: pd.DataFrame, demo: str, plots: Path) -> list[tuple[str, Path]]:
    """HCS_1 against accuracy, one panel per dataset, one figure per (space, hp)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    made = []
    for (space, hp), group in measured(df).groupby(["space", "hp"]):
        datasets = sorted(group["dataset"].unique())
        fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
        source = hcs_df[(hcs_df["space"] == space) & (hcs_df["hp"] == hp)]
        for ax, dataset in zip(axes[0], datasets):
            part = source[source["dataset"] == dataset]
            ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.scatter(part["accuracy"], part["hcs_1"], s=6 if len(part) > 2000 else 10, alpha=0.5,
                       rasterized=True)
            ax.set_xlabel("accuracy")
            ax.set_title(dataset, fontsize=9)
        axes[0][0].set_ylabel("HCS (beta = 1)")
        fig.suptitle(f"HCS against accuracy ({label(space, hp)}){demo}", fontsize=10)
        made.append((f"HCS against accuracy, {space}",
                     save(fig, plots / f"hcs_vs_accuracy_{target_name(space, hp)}.png")))
    return made


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``hcs``."""
    betas = settings["analysis"]["hcs_betas"]
    df = load_tables(tables, {*COLUMNS, "measured_by"})
    hcs_df = hcs_table(df, betas)
    hcs_df.to_parquet(output_path(results, "hcs", "hcs"), index=False)
    tops = top_networks(hcs_df, betas, settings["analysis"]["top_n"])
    tops.to_csv(output_path(results, "hcs", "top"), index=False)
    made = plot_hcs_vs_accuracy(df, hcs_df, demo_suffix(settings), plots)
    return {"plots": made, "blocks": [("nas", 10, top_html(tops, betas))]}
