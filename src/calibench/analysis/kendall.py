"""The Kendall part: tau-b matrices with intervals (Tao et al., ICLR 2024, questions 1, 3, 4).

Outputs (under ``{results}/analysis/``): ``kendall.parquet`` (every matrix, tidy),
``question4.csv`` (question 4 at the bin count nearest 15), and the heatmaps under
``plots/kendall/``: Fig. 2 for four metrics, Fig. 4a before recalibration, Fig. 4b for
temperature scaling and, with more methods than temperature scaling, question 4 for every
method. The report's table of question 4 per method goes to the methods section.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from calibench.analysis import stats
from calibench.analysis.plots import DPI, fit_annotations, heatmap, heatmap_panels, pyplot
from calibench.analysis.tables import (FIGURE_BINNED, FIGURE_UNBINNED, KEYS, STAGE_NAMES, STAGES, binned, demo_suffix,
                                       figure_bins, first_seed, label, load_tables, measured, method_stages,
                                       metric_candidates, metric_columns, nearest_bins, stage_order, table_columns,
                                       table_key, top_populations)
from calibench.analysis.registry import output_path
from calibench.layout import target_name



def _tau(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Kendall tau-b over the rows where neither value is NaN, and their count."""
    keep = ~(np.isnan(x) | np.isnan(y))
    n = int(keep.sum())
    return (float(kendalltau(x[keep], y[keep]).statistic) if n > 1 else np.nan), n


def kendall_matrix(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Tidy tau-b matrix over pairwise-complete rows: columns row, col, tau, n."""
    values = {c: df[c].to_numpy(dtype=float) for c in columns}
    rows, done = [], {}
    for a in columns:
        for b in columns:
            if (b, a) in done:  # tau-b is symmetric: each pair is computed once
                tau, n = done[(b, a)]
            else:
                if a == b:
                    n = int((~np.isnan(values[a])).sum())
                    tau = 1.0 if n > 1 else np.nan
                else:
                    tau, n = _tau(values[a], values[b])
                done[(a, b)] = tau, n
            rows.append({"row": a, "col": b, "tau": float(tau), "n": n})
    return pd.DataFrame(rows)


def kendall_cross(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """The rectangular block ``rows`` x ``cols`` of :func:`kendall_matrix` (same columns: row,
    col, tau, n; pairwise-complete rows), without the pairs inside ``rows`` or inside ``cols``."""
    values = {c: df[c].to_numpy(dtype=float) for c in dict.fromkeys([*rows, *cols])}
    out = []
    for a in rows:
        for b in cols:
            tau, n = _tau(values[a], values[b])
            out.append({"row": a, "col": b, "tau": tau, "n": n})
    return pd.DataFrame(out, columns=["row", "col", "tau", "n"])


def kendall_all(df: pd.DataFrame, settings: Mapping, threads: int = 1) -> pd.DataFrame:
    """Every Kendall matrix, tidy: row, col, tau, lo, hi, n, figure, metric, space, hp,
    dataset, population, stage.

    ``lo``, ``hi``, ``interval``: each tau's interval at ``analysis.bootstrap.level`` and how
    it was computed (:mod:`calibench.analysis.stats`): "bootstrap", the percentile bootstrap over
    resampled networks (resamples, seed; every pair of one matrix shares the resamples), or
    "jackknife", the leave-one-network-out normal interval (O(n log n) per pair, about 20x
    cheaper at 32,768 networks, and within a few per cent of the bootstrap's width there:
    BENCHMARKS.md). ``analysis.bootstrap.scope``: ``findings`` (default) bootstraps the taus
    the report states as findings (Fig. 2 of pre and post ECE and question 4, at the bin
    count nearest 15) and gives every other tau its jackknife interval; ``all`` bootstraps every tau
    (about 1 s per pair at 32,768 networks); ``resamples: 0`` jackknifes every tau.

    ``figure``: ``datasets`` (Fig. 2, question 1: every metric of :func:`metric_columns` and
    each method's ECE across datasets), ``metrics`` (Fig. 4a, question 3: every metric
    against every other, before and after each method) or ``pre_post`` (Fig. 4b,
    question 4: rows ``pre_ece_{B}``, columns ``{stage}_ece_{B}`` for every bin count B).
    ``stage`` names the post-hoc method of a ``pre_post`` or ``metrics`` block (``post`` is
    temperature scaling) and is null for the metrics before recalibration and for Fig. 2.

    Each table family (space, hp) is independent of the others (:func:`family_blocks`);
    ``threads``: matrices computed at once (the numbers do not depend on it).
    """
    methods = method_stages(df)
    # Only the columns a tau is taken of: the copies below (per space, dataset, population)
    # would otherwise hold every column of the tables.
    wanted = {"space", "hp", "dataset", "arch_index", "measured_by", "seed", "accuracy"}
    for stage in ("pre", *methods):
        wanted.update(metric_columns(df, settings["bins"], stage), binned(settings["bins"], "ece", stage))
    df = df[[c for c in df.columns if c in wanted]]
    out = []
    for space, hp in sorted(df.groupby(["space", "hp"]).groups):
        nets = first_seed(measured(df[(df["space"] == space) & (df["hp"] == hp)]))
        out += family_blocks(nets, space, hp, methods, settings, threads)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def family_blocks(nets: pd.DataFrame, space: str, hp: str, methods: Sequence[str], settings: Mapping,
                  threads: int = 1) -> list[pd.DataFrame]:
    """:func:`kendall_all`'s matrices of one table family, in its order: ``nets`` its measured
    networks (first seed), ``methods`` the post-hoc stages of the tables."""
    with _Family(space, hp, methods, settings, threads) as family:
        out = family.across_datasets(nets)
        for dataset, part_all in nets.groupby("dataset"):
            out += family.within(dataset, part_all)
    return out


class _Family:
    """The matrices of one table family, step by step: Fig. 2 across its datasets
    (:meth:`across_datasets`), then Figs. 4a and 4b of each dataset (:meth:`within`), each
    given the networks it needs (a part may read them one dataset at a time). With
    ``threads`` > 1 the matrices of one step are computed at once, at most one holding
    bootstrap resamples at a time (they are the memory-hungry ones)."""

    def __init__(self, space: str, hp: str, methods: Sequence[str], settings: Mapping, threads: int = 1):
        self.space, self.hp, self.methods = space, hp, list(methods)
        self.bins = settings["bins"]
        self.top_k = settings["analysis"]["top_k"]
        self.boot = {"resamples": 0, "seed": 0, "level": 0.95, "scope": "findings",
                     **settings["analysis"].get("bootstrap", {})}
        self.stated = f"_ece_{nearest_bins(self.bins)}"
        self.run = _Runner(threads)

    def __enter__(self):
        self.run.__enter__()
        return self

    def __exit__(self, *exc):
        self.run.__exit__(*exc)

    def _rule(self, finding):
        """The interval of a pair: bootstrap where ``finding(row, col)`` or scope is all."""
        if self.boot["resamples"] <= 0:
            return "jackknife"
        if self.boot["scope"] == "all":
            return "bootstrap"
        return lambda a, b: "bootstrap" if finding(a, b) else "jackknife"

    def _resampled(self, finding) -> bool:
        return self.boot["resamples"] > 0 and (self.boot["scope"] == "all" or finding is not None)

    def _matrix(self, part, cols, finding=None):
        boot, rule = self.boot, self._rule(finding or (lambda a, b: False))
        return lambda: stats.kendall_matrix_ci(part, cols, max(1, boot["resamples"]), boot["seed"], boot["level"],
                                               rule)

    def _cross(self, part, rows, cols, finding):
        boot, rule = self.boot, self._rule(finding)
        return lambda: stats.kendall_cross_ci(part, rows, cols, max(1, boot["resamples"]), boot["seed"],
                                              boot["level"], rule)

    def _q4_finding(self, a, b):  # pre_ece_15 against {method}_ece_15: the report's question-4 lines
        return a.endswith(self.stated) and b.endswith(self.stated)

    @staticmethod
    def _usable(part, cols):
        return [c for c in cols if c in part.columns and part[c].notna().sum() > 1]

    def across_columns(self) -> Callable[[str], bool]:
        """A column filter for :meth:`across_datasets`' networks."""
        fig = figure_bins(self.bins)
        names = {*KEYS, "accuracy", *(f"pre_{m}_{fig}" for m in FIGURE_BINNED), *(f"pre_{m}" for m in FIGURE_UNBINNED),
                 *(f"{s}{self.stated}" for s in self.methods)}
        return lambda c: c in names or c.startswith("pre_ood_auroc_")

    def across_datasets(self, nets: pd.DataFrame) -> list[pd.DataFrame]:
        """Fig. 2 (question 1): every metric across datasets, pre and each method's ECE."""
        space, hp, stated = self.space, self.hp, self.stated
        across = [*metric_columns(nets, self.bins), *(f"{s}{stated}" for s in self.methods)]
        acc = nets.pivot_table(index="arch_index", columns="dataset", values="accuracy").mean(axis=1)
        step = []
        for metric in dict.fromkeys(across):
            if metric not in nets.columns:
                continue
            wide = nets.pivot_table(index="arch_index", columns="dataset", values=metric)
            wide = wide.loc[:, wide.notna().sum() > 1]  # a dataset where the metric is (nearly) all NaN
            if wide.shape[1] < 2:  # e.g. the OoD AUROCs, measured on CIFAR-10 only
                continue
            wide = wide.assign(_acc=acc)
            finding = (lambda a, b: True) if metric in (f"pre{stated}", f"post{stated}") else None
            for population, part in top_populations(wide, self.top_k, "_acc"):
                cols = self._usable(part, [c for c in wide.columns if c != "_acc"])
                if len(cols) < 2:
                    continue
                step.append((self._matrix(part, cols, finding), self._resampled(finding),
                             lambda m, metric=metric, population=population: [m.assign(
                                 figure="datasets", metric=metric, space=space, hp=hp, dataset="*",
                                 population=population, stage=None)]))
        return [m for m in self.run(step) if not m.empty]  # e.g. one network: no pair (an empty block is untyped)

    def within(self, dataset: str, part_all: pd.DataFrame) -> list[pd.DataFrame]:
        """Figs. 4a and 4b of one dataset: ``part_all`` its measured networks (first seed)."""
        space, hp, bins, methods = self.space, self.hp, self.bins, self.methods
        step = []
        for population, part in top_populations(part_all, self.top_k):
            # Fig. 4a (question 3): every metric against every other, before (stage null)
            # and after each post-hoc method.
            for stage in ("pre", *methods):
                step.append((self._matrix(part, metric_columns(part, bins, stage)), self._resampled(None),
                             lambda m, population=population, stage=stage: [m.assign(
                                 figure="metrics", metric="*", space=space, hp=hp, dataset=dataset,
                                 population=population, stage=None if stage == "pre" else stage)]))
            # Fig. 4b, the paper's question 4, for every post-hoc method in the tables: one
            # block of pre against every method's columns (one set of resamples), cut per method.
            pre_cols = self._usable(part, binned(bins, "ece", "pre"))
            per_stage = {s: self._usable(part, binned(bins, "ece", s)) for s in methods}
            per_stage = {s: cols for s, cols in per_stage.items() if pre_cols and cols}
            if per_stage:
                every = [c for cols in per_stage.values() for c in cols]
                step.append((self._cross(part, pre_cols, every, self._q4_finding), self._resampled(True),
                             lambda m, population=population, per_stage=per_stage: [
                                 m[m["col"].isin(cols)].reset_index(drop=True).assign(
                                     figure="pre_post", metric="ece", space=space, hp=hp, dataset=dataset,
                                     population=population, stage=stage)
                                 for stage, cols in per_stage.items()]))
        return [m for m in self.run(step) if not m.empty]


class _Runner:
    """Runs one step's matrices (compute, holds resamples, then what to make of the result) and
    returns the blocks in order; with threads, at once, one resampled matrix at a time."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self.pool = None
        self.resampling = threading.Lock()

    def __enter__(self):
        if self.threads > 1:
            self.pool = ThreadPoolExecutor(self.threads)
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown()

    def _one(self, compute, resamples):
        if not resamples:
            return compute()
        with self.resampling:
            return compute()

    def __call__(self, step) -> list[pd.DataFrame]:
        if self.pool is None:
            results = [compute() for compute, _, _ in step]
        else:
            results = list(self.pool.map(lambda task: self._one(task[0], task[1]), step))
        return [block for (_, _, finish), m in zip(step, results) for block in finish(m)]


def question4_findings(kendall: pd.DataFrame, bins: Sequence[int]) -> pd.DataFrame:
    """Question 4 at one bin count (15, or the nearest configured), population ``all``: Kendall
    tau of pre- against post-method ECE per space, dataset and method, with its interval."""
    if kendall.empty or "pre_post" not in set(kendall["figure"]):
        return pd.DataFrame()
    b = nearest_bins(bins)
    q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all")
                 & (kendall["row"] == f"pre_ece_{b}")]
    q4 = q4[q4["col"] == q4["stage"] + f"_ece_{b}"]
    return q4[["space", "hp", "dataset", "stage", "tau", "lo", "hi", "n", "interval"]].reset_index(drop=True)


def q4_html(kendall: pd.DataFrame, bins: Sequence[int], min_networks: int = 0) -> str:
    """Kendall tau of pre- against post-method ECE at the same bin count (nearest 15), all
    networks: one row per table with its networks (``n``), one column per method, each cell
    tau with its interval where the table has one (``0.812 [0.78, 0.84]``); on fewer than
    ``min_networks`` networks tau alone, "too few" (``0.800 (too few)``)."""
    if kendall.empty or "stage" not in kendall.columns:
        return ""
    b = nearest_bins(bins)
    q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all")
                 & (kendall["row"] == f"pre_ece_{b}") & (kendall["col"] == kendall["stage"] + f"_ece_{b}")]
    if q4.empty:
        return ""
    def cell(r) -> str:
        if pd.isna(r.tau):
            return "–"
        if r.n < min_networks:
            return f"{r.tau:.3f} (too few)"
        interval = f" [{r.lo:.2f}, {r.hi:.2f}]" if "lo" in q4 and pd.notna(r.lo) and pd.notna(r.hi) else ""
        return f"{r.tau:.3f}{interval}"

    q4 = q4.assign(cell=[cell(r) for r in q4.itertuples()])
    grid = q4.pivot(index=["space", "hp", "dataset"], columns="stage", values="cell")
    grid = grid[stage_order(grid.columns)]
    grid.columns.name = None
    grid.insert(0, "n", q4.groupby(["space", "hp", "dataset"])["n"].max().astype(int))
    return grid.to_html(na_rep="–")


def q4_block(kendall: pd.DataFrame, bins: Sequence[int], min_networks: int = 0) -> str:
    """Question 4 per method for the report's methods section ('' if there is none): the
    report's, as it depends on ``analysis.min_networks`` (which this part's intervals do not)."""
    table = q4_html(kendall, bins, min_networks)
    if not table:
        return ""
    b = nearest_bins(bins)
    return (f"<h3>Question 4: does a method affect all networks uniformly?</h3><p>Kendall tau-b between "
            f"the networks' ECE before and after each method ({b} bins, all networks; n networks per table, "
            f"the bootstrap interval in brackets where the run computes one; on fewer than {min_networks} "
            f"networks (<code>analysis.min_networks</code>) tau alone, too few networks to decide). Near 1: the method "
            f"keeps the networks' calibration ranking; low: it reorders them. The full matrices across bin "
            f"counts are the heatmaps below (<code>analysis/kendall.parquet</code>, figure "
            f"<code>pre_post</code>, column <code>stage</code>).</p>" + table)


# ---------------------------------------------------------------- plots

def _networks_text(block: pd.DataFrame) -> str:
    """``, n = 6,466 networks`` (``n = 40–42`` where cells differ): a heatmap's title names its n."""
    n = block["n"].dropna().astype(int) if "n" in block else pd.Series(dtype=int)
    if n.empty:
        return ""
    return f", n = {n.min():,} networks" if n.min() == n.max() else f", n = {n.min():,}–{n.max():,} networks"


def make_plots(kendall: pd.DataFrame, demo: str, plots: Path) -> list[tuple[str, Path]]:
    """One heatmap each: Fig. 2 for four metrics, Fig. 4a before recalibration, Fig. 4b for
    temperature scaling (every other block is in kendall.parquet)."""
    made: list[tuple[str, Path]] = []
    if kendall.empty:
        return made
    figure2 = kendall["metric"].isin(["pre_ece_15", "post_ece_15", "pre_nll", "accuracy"])
    single = (kendall["population"] == "all") & (
        ((kendall["figure"] == "datasets") & figure2) | ((kendall["figure"] == "metrics") & kendall["stage"].isna())
        | ((kendall["figure"] == "pre_post") & (kendall["stage"] == "post")))
    for (space, hp), part in kendall[single & (kendall["figure"] == "datasets")].groupby(["space", "hp"]):
        blocks = [(metric, part[part["metric"] == metric]) for metric in dict.fromkeys(part["metric"])]
        title = f"Kendall tau across datasets ({label(space, hp)}){demo}"
        path = plots / f"kendall_datasets_{target_name(space, hp)}.png"
        heatmap_panels(blocks, title + _networks_text(part), path)
        made.append((f"Metrics across datasets ({label(space, hp)})", path))
    for (figure, metric, space, hp, dataset), m in kendall[single & (kendall["figure"] != "datasets")].groupby(
            ["figure", "metric", "space", "hp", "dataset"]):  # the other methods: method_plots
        name = f"kendall_{figure}_{metric}_{target_name(space, hp)}_{dataset}".replace("*", "all").replace("-", "_")
        title = ({"metrics": f"metrics, {dataset}", "pre_post": f"ECE pre vs post scaling, {dataset}"}[figure]
                 + f" ({label(space, hp)})" + demo)
        path = plots / f"{name}.png"
        heatmap(m, title + _networks_text(m), path)
        made.append((title, path))
    return made


def _methods_figure(block: pd.DataFrame, stages: Sequence[str], title: str, path: Path) -> float | None:
    """Question 4 for every method of one table: one pre-vs-method heatmap per stage; returns
    the font size of the cell values (None: left out, :func:`plots.annotation_fontsize`)."""
    plt = pyplot()
    ncols = min(4, len(stages))
    nrows = -(-len(stages) // ncols)
    size = int(block.groupby("stage")["col"].nunique().max())  # bin counts of a panel
    side = 1.0 + 0.3 * max(size, 3)
    fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols + 0.8, side * nrows + 0.5), squeeze=False,
                             layout="constrained")
    images = []
    im = None
    for ax, stage in zip(axes.flat, stages):
        m = block[block["stage"] == stage]
        rows, cols = list(dict.fromkeys(m["row"])), list(dict.fromkeys(m["col"]))
        grid = m.pivot(index="row", columns="col", values="tau").loc[rows, cols]
        im = ax.imshow(grid.values, vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(cols)), [c.rpartition("_")[2] for c in cols], fontsize=7)
        ax.set_yticks(range(len(rows)), [r.rpartition("_")[2] for r in rows], fontsize=7)
        ax.set_xlabel(f"{stage} ECE, bins", fontsize=8)
        ax.set_ylabel("pre ECE, bins", fontsize=8)
        ax.set_title(f"{stage}: {STAGE_NAMES.get(stage, stage)}", fontsize=8)
        images.append(im)
    for ax in list(axes.flat)[len(stages):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=axes, fraction=0.02, shrink=0.8, label="Kendall tau-b")
    fontsize = fit_annotations(fig, images)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return fontsize


def method_plots(kendall: pd.DataFrame, methods: Sequence[str], demo: str, plots: Path) -> list[tuple[str, Path]]:
    """Question 4 for every method, when there is more than temperature scaling (whose
    heatmap :func:`make_plots` draws)."""
    made: list[tuple[str, Path]] = []
    if len(methods) <= 1 or kendall.empty:
        return made
    q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all")]
    for (space, hp, dataset), block in q4.groupby(["space", "hp", "dataset"]):
        stages = [s for s in methods if s in set(block["stage"])]
        if not stages:
            continue
        title = f"Question 4: ECE pre vs after each method, {dataset} ({label(space, hp)}){demo}"
        path = plots / f"kendall_pre_methods_{target_name(space, hp)}_{dataset}.png".replace("-", "_")
        _methods_figure(block, stages, title + _networks_text(block), path)
        made.append((f"Question 4 for every method: Kendall tau of pre- against post-method ECE across bin "
                     f"counts, {dataset} ({label(space, hp)})", path))
    return made


# ---------------------------------------------------------------- the part

def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path, threads: int = 1) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``kendall``.
    One table family at a time (:class:`_Family`), Fig. 2 from the columns it compares across
    datasets, then one dataset's table at a time, each read with only the columns a tau may
    be taken of: what :func:`kendall_all` gives on all the tables at once, in less memory."""
    bins = settings["bins"]
    names = table_columns(tables)
    methods = [s for s in STAGES if s != "pre" and f"{s}_accuracy" in names]  # method_stages of all the tables
    families: dict[tuple[str, str], list] = {}
    for path in tables:
        key = table_key(path)
        if key is not None:
            families.setdefault(key[:2], []).append(path)
    blocks = []
    for (space, hp), paths in sorted(families.items()):
        with _Family(space, hp, methods, settings, threads) as family:
            nets = first_seed(measured(load_tables(paths, family.across_columns())))
            blocks += family.across_datasets(nets)
            datasets = sorted(nets["dataset"].unique())  # as groupby("dataset") orders them
            del nets
            for dataset in datasets:
                read = [path for path in paths if table_key(path)[2] == dataset]
                part_all = first_seed(measured(load_tables(read, metric_candidates(bins))))
                blocks += family.within(dataset, part_all)
    kendall = pd.concat(blocks, ignore_index=True) if blocks else pd.DataFrame()
    kendall.to_parquet(output_path(results, "kendall", "kendall"), index=False)
    question4_findings(kendall, bins).to_csv(output_path(results, "kendall", "question4"), index=False)
    demo = demo_suffix(settings)
    made = make_plots(kendall, demo, plots) + method_plots(kendall, methods, demo, plots)
    return {"plots": made, "blocks": []}  # question 4's table is the report's (q4_block)
