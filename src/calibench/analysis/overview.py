"""The overview part: the distributions of every table family before and after temperature
scaling (Tao et al., ICLR 2024): ECE by bin count (Fig. 6, question 6) and ECE against
accuracy (Fig. 5, question 5), under ``plots/overview/``. Figures only; the findings of
questions 5 and 6 are computed by the report from the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis.plots import pyplot, save
from calibench.analysis.tables import KEYS, binned, demo_suffix, label, load_tables, measured
from calibench.layout import target_name



def ood_colour_column(columns) -> str | None:
    """The CIFAR-10-C AUROC column of a table (the first ``pre_ood_auroc_*`` that is not SVHN),
    Fig. 5's colour; None if the tables have none."""
    return next((c for c in columns if c.startswith("pre_ood_auroc_") and not c.endswith("_svhn")), None)


def ece_by_bins(group: pd.DataFrame, space: str, hp: str, bins: Sequence[int], demo: str,
                plots: Path) -> tuple[str, Path]:
    """Fig. 6: pre (orange) and post (blue) ECE at every bin count, one panel per dataset."""
    plt = pyplot()
    datasets = sorted(group["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.5 * len(datasets), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        part = group[group["dataset"] == dataset]
        data = [part[f"{stage}_ece_{b}"].dropna() for b in bins for stage in ("pre", "post")]
        positions = [i + (0.2 if k % 2 else -0.2) for i in range(len(bins)) for k in range(2)]
        box = ax.boxplot(data, positions=positions, widths=0.35, patch_artist=True, showfliers=False)
        for k, patch in enumerate(box["boxes"]):
            patch.set_facecolor("#f4a582" if k % 2 == 0 else "#92c5de")
        ax.set_xticks(range(len(bins)), [str(b) for b in bins], fontsize=7)
        ax.set_xlabel("bins")
        ax.set_title(dataset, fontsize=9)
    axes[0][0].set_ylabel("ECE (orange: pre, blue: post)")
    fig.suptitle(f"ECE by bin count ({label(space, hp)}){demo}", fontsize=10)
    return f"ECE by bin count, {space}", save(fig, plots / f"ece_by_bins_{target_name(space, hp)}.png")


def ece_vs_accuracy(group: pd.DataFrame, space: str, hp: str, datasets: Sequence[str], demo: str,
                    plots: Path) -> tuple[str, Path]:
    """Fig. 5 (question 5): pre (o) and post (x) ECE against accuracy per dataset, all
    networks (top row) and those above 90 % accuracy (bottom row), coloured by the
    architecture's CIFAR-10-C AUROC (measured on its CIFAR-10 network) where the tables
    have one."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    colour = ood_colour_column(group.columns)
    auroc = None
    if colour is not None:
        c10 = group[group["dataset"] == "cifar10"].groupby("arch_index")[colour].mean()
        auroc = c10 if c10.notna().any() else None
    fig, axes = plt.subplots(2, len(datasets), figsize=(4.4 * len(datasets), 6.6), squeeze=False)
    mappable = None
    for j, dataset in enumerate(datasets):
        part = group[group["dataset"] == dataset]
        for i, sub in enumerate((part, part[part["accuracy"] > 0.9])):
            ax = axes[i][j]
            size = 5 if len(sub) > 2000 else 12
            c = None if auroc is None else sub["arch_index"].map(auroc).to_numpy(float)
            for col, marker in (("pre_ece_15", "o"), ("post_ece_15", "x")):
                if col not in sub:
                    continue
                kw = {"c": c, "cmap": "viridis", "vmin": np.nanmin(auroc), "vmax": np.nanmax(auroc)} \
                    if c is not None else {"color": "#d6604d" if marker == "o" else "#4393c3"}
                m = ax.scatter(sub["accuracy"], sub[col], s=size, alpha=0.6, marker=marker, rasterized=True,
                               linewidths=0.6 if marker == "x" else 0, **kw)
                mappable = m if c is not None else mappable
            ax.set_title(f"{dataset}, {'all' if i == 0 else 'accuracy > 90 %'} ({len(sub)})", fontsize=9)
            ax.set_xlabel("accuracy")
            ax.xaxis.set_major_locator(MaxNLocator(5))  # narrow accuracy ranges: ticks must not run together
            if not len(sub):
                ax.set_xticks([])
                ax.set_yticks([])
                ax.text(0.5, 0.5, "no network", ha="center", va="center", transform=ax.transAxes)
        axes[0][0].set_ylabel("ECE (15 bins; o pre, x post)")
        axes[1][0].set_ylabel("ECE (15 bins; o pre, x post)")
    fig.suptitle(f"ECE against accuracy ({label(space, hp)}){demo}", fontsize=10)
    fig.tight_layout()
    if mappable is not None:
        fig.colorbar(mappable, ax=axes, fraction=0.02, shrink=0.8, label=f"CIFAR-10-C AUROC ({colour})")
    path = plots / f"ece_vs_accuracy_{target_name(space, hp)}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the colour bar's label outside the axes grid
    plt.close(fig)
    return f"ECE against accuracy, {space}", path


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``overview``."""
    bins = settings["bins"]
    wanted = {*KEYS, "accuracy", "pre_ece_15", "post_ece_15", *binned(bins, "ece", "pre"), *binned(bins, "ece", "post")}
    df = load_tables(tables, lambda c: c in wanted or c.startswith("pre_ood_auroc_"))
    demo = demo_suffix(settings)
    made = []
    for (space, hp), group in measured(df).groupby(["space", "hp"]):
        datasets = sorted(group["dataset"].unique())
        made.append(ece_by_bins(group, space, hp, bins, demo, plots))
        made.append(ece_vs_accuracy(group, space, hp, datasets, demo, plots))
    return {"plots": made, "blocks": []}
