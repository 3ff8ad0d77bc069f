"""The paper's question 7 figures that look at one architectural choice at a time
(Tao et al., ICLR 2024, "Which architectural designs are beneficial for calibration?"):

* **Fig. 8 (left), TSS: ECE by cell kernel parameters.** The paper scatters the pre-scaling
  15-bin ECE of every CIFAR-10 TSS network against its "cell kernel parameters" (project
  page caption: "Calibration performance with cell kernel parameters. (Left) ECE
  distribution across different cell kernel parameters"). Here the same quantity is
  summarised per (hp, dataset, kernel-parameter value): median, mean and quartiles of ECE
  for each stage asked for (``pre`` and ``post`` by default), on every dataset
  (:func:`kernel_parameter_table`, :func:`plot_kernel_parameters`).
* **Fig. 9, SSS: the width progression.** The paper takes the eight uniform-width networks
  ``8:8:8:8:8, 16:16:16:16:16, ..., 64:64:64:64:64`` of the size space on CIFAR-10,
  CIFAR-100 and ImageNet16-120 and plots their ECE before and after temperature scaling
  against accuracy, the marker size growing with the width (caption: "Marker size
  represents model size progression from 8:8:8:8:8, 16:16:16:16:16, up to
  64:64:64:64:64"). Here the same eight networks are tabulated per (hp, dataset, width)
  with accuracy and the ECE of every stage in the tables (:func:`width_progression_table`)
  and drawn with the width on the x axis, one line per stage, accuracy in a second row
  (:func:`plot_width_progression`).

Cell kernel parameters (:func:`tss_kernel_parameters`): the number of convolution kernel
weights of one cell per (input channel x output channel) pair, i.e. the sum over the cell's
6 edges of 9 for ``nor_conv_3x3`` (a 3x3 kernel), 1 for ``nor_conv_1x1`` and 0 for
``none``, ``skip_connect`` and ``avg_pool_3x3`` (no weights); values 0..54. This is the
definition of the paper's own plotting code (``plotting/q7.2.py`` and ``q7.2.ipynb`` in
the authors' repository ``Linwei94/ICLR2024-CalibrationBenchmark``: ``+9`` for an edge
whose op starts with ``nor_conv_3x3``, ``+1`` for ``nor_conv_1x1``, axis label "Cell Kernel
Parameters"). Multiplied by C^2 it is the cell's convolution weight count at width C
(BatchNorm parameters left out), so it orders cells as their parameter count does within a
stage. It is counted on the architecture string as written: a convolution on an edge that
cannot reach the cell output (which NATS-Bench's isomorphism, ``to_unique_str(consider_zero
=True)``, treats as absent) still counts, as in the paper.

Populations: one row per measured network and seed (``arch_index == measured_by``; TSS
isomorph copies, which repeat their representative's values under another string, are
dropped as in :func:`calibench.analysis.tables.measured`), unless ``include_copies=True`` asks for
the paper's population (all 15,625 TSS indices, each under its own string). Tables without a
``measured_by`` column are used as they are.

Pure functions over the wide result tables; plots with matplotlib's Agg backend. Every
function copes with a table that has no rows of its space (an empty table, and a plot
function that writes nothing and returns None). The stage order, bin choice and
statistics are the analysis's (:mod:`calibench.analysis.tables`, :mod:`calibench.analysis.methods`);
the architecture part (:mod:`calibench.analysis.nats.architecture`) writes the tables and plots.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis.methods import describe_values
from calibench.results.archstr import SSS_CHANNEL_CHOICES, parse_sss, tss_edge_ops
from calibench.analysis.tables import STAGE_NAMES, STAGES, first_seed, nearest_bins
from calibench.analysis.plots import pyplot, stage_color


def _describe(values) -> dict:
    """:func:`calibench.analysis.methods.describe_values` without its infinity count."""
    d = describe_values(values)
    d.pop("n_inf")
    return d

# Kernel weights per (input, output) channel pair of each TSS operation.
KERNEL_WEIGHTS = {"none": 0, "skip_connect": 0, "nor_conv_1x1": 1, "nor_conv_3x3": 9, "avg_pool_3x3": 0}
DATASET_ORDER = ("cifar10", "cifar100", "ImageNet16-120")
STAGE_ORDER = STAGES
STAGE_LABELS = STAGE_NAMES
KERNEL_COLUMNS = ["hp", "dataset", "kernel_params", "stage", "metric", "n", "n_nan", "mean", "median", "q25", "q75",
                  "iqr", "accuracy_median"]
WIDTH_KEYS = ["hp", "dataset", "width", "arch_index", "arch_str", "n", "accuracy"]


# ---------------------------------------------------------------- kernel parameters (TSS)

def tss_kernel_parameters(arch_str: str) -> int:
    """Cell kernel parameters of a TSS cell string: the sum over its 6 edges of 9 per
    ``nor_conv_3x3``, 1 per ``nor_conv_1x1``, 0 otherwise (0..54; the paper's Fig. 8
    definition, see the module docstring). ``ValueError`` for a malformed string."""
    return sum(KERNEL_WEIGHTS[op] for op in tss_edge_ops(arch_str))


def kernel_parameters(arch_strs: Iterable[str]) -> np.ndarray:
    """:func:`tss_kernel_parameters` of each string (int64 array), computed once per distinct string."""
    values = pd.Series(list(arch_strs), dtype=object)
    if values.empty:
        return np.zeros(0, dtype=np.int64)
    lookup = {a: tss_kernel_parameters(a) for a in values.unique()}
    return values.map(lookup).to_numpy(dtype=np.int64)


def _space_rows(df: pd.DataFrame, space: str, include_copies: bool = False, all_seeds: bool = False
                ) -> pd.DataFrame:
    """The rows of one search space, one per network (its first seed, as the Kendall matrices
    use; every seed where ``all_seeds``); measured networks only (``arch_index == measured_by``)
    unless ``include_copies`` or the table has no ``measured_by``."""
    if df is None or df.empty or "space" not in df.columns:
        return pd.DataFrame()
    part = df[df["space"] == space]
    if not include_copies and {"arch_index", "measured_by"} <= set(part.columns):
        part = part[part["arch_index"] == part["measured_by"]]
    if not all_seeds and {"hp", "dataset", "arch_index", "seed"} <= set(part.columns):
        part = first_seed(part)
    return part


def _dataset_order(datasets: Iterable[str]) -> list[str]:
    """The paper's dataset order (CIFAR-10, CIFAR-100, ImageNet16-120), then any other, sorted."""
    present = set(datasets)
    return [d for d in DATASET_ORDER if d in present] + sorted(present - set(DATASET_ORDER))


def kernel_parameter_table(df: pd.DataFrame, bins: Sequence[int], stages: Sequence[str] = ("pre", "post"),
                           include_copies: bool = False) -> pd.DataFrame:
    """Fig. 8 (left) as a table: ECE by cell kernel parameters over the TSS networks.

    One row per (hp, dataset, kernel_params, stage) for each stage of ``stages`` whose
    ``{stage}_ece_{b}`` column is in ``df`` (``b``: the configured bin count nearest 15,
    :func:`nearest_bins`) and holds at least one value for that (hp, dataset); ``metric``
    is ``ece_{b}``. Statistics over the networks (each by its first seed) with that
    kernel-parameter value (:func:`describe`): ``n``, ``n_nan`` (a failed fit; left out of every
    statistic), ``mean``, ``median``, ``q25``, ``q75`` (linear interpolation), ``iqr``; and
    ``accuracy_median``, the median network accuracy of the same networks. Sorted by hp,
    dataset (paper order), kernel_params, stage (in ``stages`` order). Empty (with these
    columns) when there is no TSS row or no stage column.
    """
    nets = _space_rows(df, "tss", include_copies)
    metric = f"ece_{nearest_bins(bins)}"
    stages = [s for s in dict.fromkeys(stages) if f"{s}_{metric}" in nets.columns]
    if nets.empty or not stages:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    nets = nets.assign(kernel_params=kernel_parameters(nets["arch_str"]))
    rows = []
    for (hp, dataset), group in nets.groupby(["hp", "dataset"], sort=False):
        present = [s for s in stages if group[f"{s}_{metric}"].notna().any()]
        for k, part in group.groupby("kernel_params"):
            accuracy = part["accuracy"].median() if "accuracy" in part.columns else np.nan
            for stage in present:
                rows.append({"hp": hp, "dataset": dataset, "kernel_params": int(k), "stage": stage,
                             "metric": metric, **_describe(part[f"{stage}_{metric}"]),
                             "accuracy_median": float(accuracy)})
    if not rows:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    out = pd.DataFrame(rows, columns=KERNEL_COLUMNS)
    order = {d: i for i, d in enumerate(_dataset_order(out["dataset"]))}
    out = out.assign(_d=out["dataset"].map(order), _s=out["stage"].map({s: i for i, s in enumerate(stages)}))
    out = out.sort_values(["hp", "_d", "kernel_params", "_s"], kind="stable").drop(columns=["_d", "_s"])
    return out.reset_index(drop=True)


# ---------------------------------------------------------------- width progression (SSS)

def uniform_width(arch_str: str) -> int | None:
    """The channel count of an SSS string whose five counts are all equal, else None."""
    channels = parse_sss(arch_str)
    return channels[0] if len(set(channels)) == 1 else None


def width_progression_table(df: pd.DataFrame, stages: Sequence[str] | None = None,
                            bins: Sequence[int] = (15,)) -> pd.DataFrame:
    """Fig. 9 as a table: the uniform-width SSS networks ``w:w:w:w:w`` (w = 8, 16, ..., 64).

    One row per (hp, dataset, width) present in ``df`` (a mini benchmark holds a sample of
    architectures: a width it lacks is simply absent). Columns: hp, dataset, width,
    arch_index, arch_str, ``n`` (rows averaged: one per seed), ``accuracy`` (mean over the
    seeds), then ``{stage}_ece_{b}`` (mean over the seeds with a value; NaN if none) for
    each stage of ``stages`` (default: every stage of :data:`STAGE_ORDER`) whose column
    is in ``df``, ``b`` being the configured bin count nearest 15 (:func:`nearest_bins`). Sorted by
    hp, dataset (paper order), width. Empty when there is no SSS row or no uniform-width one.
    """
    b = nearest_bins(bins)
    nets = _space_rows(df, "sss", all_seeds=True)
    stages = list(STAGE_ORDER) if stages is None else list(dict.fromkeys(stages))
    ece_cols = [f"{s}_ece_{b}" for s in stages if f"{s}_ece_{b}" in nets.columns]
    columns = WIDTH_KEYS + ece_cols
    if nets.empty:
        return pd.DataFrame(columns=columns)
    widths = {a: uniform_width(a) for a in nets["arch_str"].unique()}
    nets = nets.assign(width=nets["arch_str"].map(widths))
    nets = nets[nets["width"].notna()]
    if nets.empty:
        return pd.DataFrame(columns=columns)
    nets = nets.assign(width=nets["width"].astype(int))
    agg = {"arch_index": ("arch_index", "first"), "arch_str": ("arch_str", "first"), "n": ("arch_str", "size"),
           "accuracy": ("accuracy", "mean")}
    agg.update({c: (c, "mean") for c in ece_cols})
    out = nets.groupby(["hp", "dataset", "width"], sort=False).agg(**agg).reset_index()
    order = {d: i for i, d in enumerate(_dataset_order(out["dataset"]))}
    out = out.assign(_d=out["dataset"].map(order)).sort_values(["hp", "_d", "width"], kind="stable")
    return out.drop(columns="_d")[columns].reset_index(drop=True)


# ---------------------------------------------------------------- plots

def _finish(fig, path: str | Path) -> Path:
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return path


def plot_kernel_parameters(table: pd.DataFrame, path: str | Path, title: str | None = None,
                           suffix: str = "") -> Path | None:
    """Fig. 8 (left) from :func:`kernel_parameter_table`: one panel per (hp row, dataset
    column); per stage the median ECE against the cell kernel parameters (line, markers
    sized by the number of networks) and the interquartile range (shaded band). Writes
    ``path`` (PNG) and returns it; None (nothing written) if the table has no finite median.
    ``title`` replaces the figure title; ``suffix`` is appended to it (e.g. to mark a mini
    benchmark, as every analysis part does)."""
    if table is None or table.empty:
        return None
    counts = table.drop_duplicates(["hp", "dataset", "kernel_params"]).groupby(["hp", "dataset"])["n"].sum()
    table = table[np.isfinite(table["median"].to_numpy(dtype=float))]
    if table.empty:
        return None
    plt = pyplot()
    hps = sorted(table["hp"].unique(), key=str)
    datasets = _dataset_order(table["dataset"].unique())
    stages = list(dict.fromkeys(table["stage"]))
    metric = str(table["metric"].iloc[0])
    bins = metric.rpartition("_")[2]
    n_max = float(table["n"].max())
    fig, axes = plt.subplots(len(hps), len(datasets), squeeze=False, sharex=True,
                             figsize=(4.6 * len(datasets), 3.4 * len(hps) + 0.9), layout="constrained")
    handles = {}
    for r, hp in enumerate(hps):
        for c, dataset in enumerate(datasets):
            ax = axes[r][c]
            block = table[(table["hp"] == hp) & (table["dataset"] == dataset)]
            if block.empty:
                ax.axis("off")
                continue
            for stage in stages:
                part = block[block["stage"] == stage].sort_values("kernel_params")
                if part.empty:
                    continue
                x = part["kernel_params"].to_numpy(dtype=float)
                color = stage_color(stage)
                ax.fill_between(x, part["q25"].to_numpy(dtype=float), part["q75"].to_numpy(dtype=float),
                                color=color, alpha=0.2, linewidth=0)
                (line,) = ax.plot(x, part["median"].to_numpy(dtype=float), color=color, linewidth=1.2)
                sizes = 6 + 40 * np.sqrt(part["n"].to_numpy(dtype=float) / n_max)
                ax.scatter(x, part["median"], s=sizes, color=color, edgecolors="white", linewidths=0.4, zorder=3)
                handles.setdefault(stage, line)
            ax.set_title(f"{dataset} (TSS, hp {hp}): {int(counts[(hp, dataset)])} networks", fontsize=9)
            ax.set_xticks([0, 9, 18, 27, 36, 45, 54])
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=8)
            if c == 0:
                ax.set_ylabel(f"ECE ({bins} bins)", fontsize=8)
            if r == len(hps) - 1:
                ax.set_xlabel("cell kernel parameters (9 x #conv3x3 + #conv1x1)", fontsize=8)
    fig.legend(list(handles.values()), [f"{s}: {STAGE_LABELS.get(s, s)}" for s in handles],
               loc="outside lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    fig.suptitle((title or "ECE by cell kernel parameters (TSS): median (line; marker area ~ networks) "
                           "and interquartile range (band)") + suffix, fontsize=10)
    return _finish(fig, path)


def plot_width_progression(table: pd.DataFrame, path: str | Path, title: str | None = None,
                           suffix: str = "") -> Path | None:
    """Fig. 9 from :func:`width_progression_table`: one column per dataset and, per hp, two
    rows: ECE of each stage against the uniform width 8..64 (one line per stage; ``pre`` and
    ``post`` drawn thicker) and the accuracy below it. Writes ``path`` (PNG) and returns it;
    None (nothing written) if the table is empty. ``title`` replaces the figure title;
    ``suffix`` is appended to it (e.g. " [mini benchmark: not NATS-Bench results]")."""
    if table is None or table.empty:
        return None
    ece_cols = [c for c in table.columns if "_ece_" in c and table[c].notna().any()]
    plt = pyplot()
    hps = sorted(table["hp"].unique(), key=str)
    datasets = _dataset_order(table["dataset"].unique())
    bins = ece_cols[0].rpartition("_")[2] if ece_cols else "15"
    fig, axes = plt.subplots(2 * len(hps), len(datasets), squeeze=False, sharex=True,
                             figsize=(4.4 * len(datasets), 4.8 * len(hps) + 0.9), layout="constrained",
                             gridspec_kw={"height_ratios": [3, 2] * len(hps)})
    handles = {}
    widths = list(SSS_CHANNEL_CHOICES)
    for r, hp in enumerate(hps):
        for c, dataset in enumerate(datasets):
            top, bottom = axes[2 * r][c], axes[2 * r + 1][c]
            part = table[(table["hp"] == hp) & (table["dataset"] == dataset)].sort_values("width")
            if part.empty:
                top.axis("off")
                bottom.axis("off")
                continue
            x = part["width"].to_numpy(dtype=float)
            for col in ece_cols:
                stage = col.split("_ece_")[0]
                y = part[col].to_numpy(dtype=float)
                if not np.isfinite(y).any():
                    continue
                main = stage in ("pre", "post")  # the paper's pair stands out among the other methods
                (line,) = top.plot(x, y, marker="o", markersize=4 if main else 3, linewidth=2.0 if main else 1.0,
                                   alpha=1.0 if main else 0.75, color=stage_color(stage), zorder=3 if main else 2)
                handles.setdefault(stage, line)
            top.set_title(f"{dataset} (SSS, hp {hp}): {len(part)} of 8 widths", fontsize=9)
            top.grid(alpha=0.3)
            top.tick_params(labelsize=8)
            bottom.plot(x, part["accuracy"].to_numpy(dtype=float), marker="s", markersize=4, color="black",
                        linewidth=1.2)
            bottom.grid(alpha=0.3)
            bottom.tick_params(labelsize=8)
            bottom.set_xticks(widths)
            bottom.set_xlim(4, 68)
            if c == 0:
                top.set_ylabel(f"ECE ({bins} bins)", fontsize=8)
                bottom.set_ylabel("accuracy", fontsize=8)
            if r == len(hps) - 1:
                bottom.set_xlabel("uniform width w (architecture w:w:w:w:w)", fontsize=8)
    if handles:
        fig.legend(list(handles.values()), [f"{s}: {STAGE_LABELS.get(s, s)}" for s in handles],
                   loc="outside lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    fig.suptitle((title or "ECE and accuracy of the uniform-width SSS networks 8:8:8:8:8 ... 64:64:64:64:64")
                 + suffix, fontsize=10)
    return _finish(fig, path)
