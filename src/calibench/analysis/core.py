"""The paper's questions, answered from the result tables (Tao et al., ICLR 2024).

Reads only the wide tables. Writes tidy parquet files under ``{results}/analysis/``,
PNG plots under ``{results}/plots/`` and one HTML report, ``{results}/report.html``:

* Kendall tau-b matrices: one metric across datasets (Fig. 2), metrics against each
  other within a dataset (Fig. 4a), pre- against post-method ECE across bin counts
  (Fig. 4b; the paper's question 4, for temperature scaling and for every other
  post-hoc method in the tables), for the top-k networks by accuracy and for all of them.
* HCS_beta (metrics-spec.md, "Harmonic Calibration Score") rankings with the top n per
  dataset; for TSS the operation frequency on each edge among the top n (Fig. 10), for
  SSS ECE and accuracy by size bracket (Fig. 7).
* Post-hoc methods (recalibration-spec.md, "What the analysis asks of these stages"):
  the distribution of each metric per (space, hp, dataset, stage)
  (``methods_summary.parquet``/``.csv``: Nixon et al. 2019 Tables 1/2, Gupta et al.
  2021 Table 1 at population scale) and how often each stage is the best for a network,
  and by how much (``method_wins.parquet``).
* Plots: the heatmaps, ECE by bin count before and after scaling (Fig. 6), ECE against
  accuracy (Fig. 5), HCS against accuracy (Fig. 8), ECE per method (box plots), the
  method-by-metric win rates.

Stages are those of recalibration-spec.md ("Common rules"): ``pre`` (the network's own
softmax), ``post`` (temperature scaling) and ``vs, ms, dir, iso, hist, spline``; the
analysis uses the stages whose ``{stage}_accuracy`` column is in the tables, so a run
with ``stages: [pre, post]`` gives exactly the outputs it gave before.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from scipy.stats import kendalltau

from calibench.report import page as report
from calibench.analysis import stats
from calibench.results.failures import html as failures_html
from calibench.config.settings import NATS_SPACES, target_name

from calibench.analysis.nats import schedules as hp_compare
from calibench.sources.nats.archstr import parse_sss, tss_edge_ops

log = logging.getLogger(__name__)

EDGE_NAMES = ("1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2")
HCS_ECE = "pre_ece_15"
# recalibration-spec.md, "Common rules": every stage a table may hold, in report order.
STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
STAGE_NAMES = {"pre": "no recalibration: the network's softmax", "post": "temperature scaling", "vs": "vector scaling",
               "ms": "matrix scaling, ODIR", "dir": "Dirichlet calibration, ODIR",
               "iso": "isotonic regression, one-vs-rest", "hist": "histogram binning, one-vs-rest",
               "spline": "spline recalibration, Gupta et al. 2021"}
# The method-comparison metrics; the binned ones at the bin count nearest 15 (see summary_metrics).
BINNED_SUMMARY = ("ece", "cwce", "ace", "tace")
UNBINNED_SUMMARY = ("ksce", "nll", "brier", "accuracy")
HIGHER_IS_BETTER = frozenset({"accuracy"})


def _label(space: str, hp: str) -> str:
    """How a figure names a table family: ``tss, hp 200``, or a population's name."""
    return f"{space}, hp {hp}" if hp else str(space)


def hcs(accuracy, ece, beta: float):
    """``(1 + b) acc (1 - ece) / (b acc + (1 - ece))``; fractions in, a fraction out."""
    accuracy, ece = np.asarray(accuracy, float), np.asarray(ece, float)
    return (1 + beta) * accuracy * (1 - ece) / (beta * accuracy + (1 - ece))


def load_tables(paths: Sequence[str | Path]) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in paths]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """One row per measured network (drop TSS isomorph copies, which would add ties)."""
    return df[df["arch_index"] == df["measured_by"]]


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


# ---------------------------------------------------------------- stages and methods

def stages_present(df: pd.DataFrame) -> list[str]:
    """The stages of :data:`STAGES` whose ``{stage}_accuracy`` column is in ``df``, in that order."""
    return [s for s in STAGES if f"{s}_accuracy" in df.columns]


def method_stages(df: pd.DataFrame) -> list[str]:
    """The post-hoc method stages in ``df``: every present stage except ``pre``."""
    return [s for s in stages_present(df) if s != "pre"]


def nearest_bins(bins: Sequence[int], target: int = 15) -> int:
    """The configured bin count closest to ``target`` (15: Guo et al.'s and the paper's
    choice); of two equally close, the smaller."""
    if not bins:
        raise ValueError("no bin counts configured")
    return min(bins, key=lambda b: (abs(int(b) - target), int(b)))


def summary_metrics(bins: Sequence[int]) -> list[str]:
    """Column suffixes of the method comparison: ECE, cwCE (= SCE), ACE and TACE at the
    bin count nearest 15, then KS error (top-1), NLL, Brier score and accuracy."""
    b = nearest_bins(bins)
    return [f"{m}_{b}" for m in BINNED_SUMMARY] + list(UNBINNED_SUMMARY)


def table_stages(paths: Sequence[str | Path]) -> dict[tuple[str, str, str], list[str]]:
    """(space, hp, dataset) -> the stages of that result table, from its schema (a table that
    holds a stage whose fit failed on every network still lists it)."""
    out = {}
    for path in paths:
        with pq.ParquetFile(path) as table:
            if table.metadata.num_rows == 0:
                continue
            names = table.schema_arrow.names
            first = table.read_row_group(0, columns=["space", "hp", "dataset"]).slice(0, 1).to_pylist()[0]
        key = (str(first["space"]), str(first["hp"]), str(first["dataset"]))
        out[key] = [s for s in STAGES if f"{s}_accuracy" in names]
    return out


def _listed(stages_by_table, space, hp, dataset) -> list[str] | None:
    """A table's own stages from :func:`table_stages`; None (judge by the values) if unknown."""
    if stages_by_table is None:
        return None
    return stages_by_table.get((str(space), str(hp), str(dataset)))


def _group_stages(part: pd.DataFrame, stages: Sequence[str], metric: str,
                  listed: Sequence[str] | None = None) -> list[str]:
    """The stages of one table with a ``{stage}_{metric}`` column: those of ``listed`` (the
    table's own stages, :func:`table_stages`) if given; otherwise those with at least one
    non-NaN value in ``part``, since a stage missing from one table of a concatenation is
    all NaN there (a stage that failed on every network of the table is then left out too,
    and logged)."""
    out = []
    for s in stages:
        col = f"{s}_{metric}"
        if col not in part.columns:
            continue
        if listed is not None:
            if s in listed:
                out.append(s)
            continue
        if part[col].isna().all():
            if len(part) and metric == "accuracy":
                log.info("%s: no values in this table (%d rows): not run or failed everywhere", col, len(part))
            continue
        out.append(s)
    return out


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

    NaN values (a failed fit, recalibration-spec.md "Common rules") are counted in
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


def methods_summary(df: pd.DataFrame, bins: Sequence[int],
                    stages_by_table: Mapping[tuple[str, str, str], Sequence[str]] | None = None) -> pd.DataFrame:
    """Population-scale Nixon et al. 2019 Tables 1/2 and Gupta et al. 2021 Table 1.

    One row per (space, hp, dataset, stage, metric) over the measured networks (TSS
    isomorph copies dropped; every seed row counts) of the stages in the tables, for the
    metrics of :func:`summary_metrics`; ``metric`` is the column suffix (``ece_15``,
    ``ksce``...). Columns: space, hp, dataset, stage, metric, then
    :func:`describe_values`'s n, n_nan, n_inf, mean, median, q25, q75, iqr.
    ``stages_by_table`` (:func:`table_stages`): the stages of each table, so that a method
    that failed on all of a table's networks still has its rows (all NaN).
    """
    columns = ["space", "hp", "dataset", "stage", "metric", "n", "n_nan", "n_inf", "mean", "median", "q25", "q75",
               "iqr"]
    stages = stages_present(df)
    rows = []
    for (space, hp, dataset), part in measured(df).groupby(["space", "hp", "dataset"]):
        listed = _listed(stages_by_table, space, hp, dataset)
        for metric in summary_metrics(bins):
            for stage in _group_stages(part, stages, metric, listed):
                rows.append({"space": space, "hp": hp, "dataset": dataset, "stage": stage, "metric": metric,
                             **describe_values(part[f"{stage}_{metric}"])})
    return pd.DataFrame(rows, columns=columns)


def method_wins(df: pd.DataFrame, bins: Sequence[int],
                stages_by_table: Mapping[tuple[str, str, str], Sequence[str]] | None = None) -> pd.DataFrame:
    """How often each stage is the best for a network, and by how much.

    Per (space, hp, dataset, metric) over the measured networks (TSS isomorph copies
    dropped; every seed row is one contest), for each metric of :func:`summary_metrics`:

    * The contestants of a network are the stages with a *finite* value (a failed fit,
      NaN, and an infinite NLL take no part). A network with no finite value is left
      out; ``n_networks`` counts the rest. A network with one finite value is won by that
      stage, with no margin.
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
    columns = ["space", "hp", "dataset", "metric", "stage", "n_networks", "outright", "tied", "share",
               "margin_median", "margin_mean", "n_margin"]
    stages = stages_present(df)
    rows = []
    for (space, hp, dataset), part in measured(df).groupby(["space", "hp", "dataset"]):
        listed = _listed(stages_by_table, space, hp, dataset)
        for metric in summary_metrics(bins):
            present = _group_stages(part, stages, metric, listed)
            if len(present) < 2:
                continue
            values = part[[f"{s}_{metric}" for s in present]].to_numpy(dtype=float)
            score = -values if metric in HIGHER_IS_BETTER else values  # lower is better from here on
            finite = np.isfinite(score)
            score = np.where(finite, score, np.inf)
            contest = finite.any(axis=1)
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
                             "share": float(share[j] / n) if n else np.nan,
                             "margin_median": float(np.median(m)) if len(m) else np.nan,
                             "margin_mean": float(np.mean(m)) if len(m) else np.nan, "n_margin": int(len(m))})
    return pd.DataFrame(rows, columns=columns)


def _top_populations(df: pd.DataFrame, top_k: Sequence[int], by: str = "accuracy"):
    yield "all", df
    for k in top_k:
        if len(df) > k:
            yield f"top{k}", df.nlargest(k, by)


def _binned(bins: Sequence[int], metric: str, stage: str = "pre") -> list[str]:
    return [f"{stage}_{metric}_{b}" for b in bins]


def metric_columns(df: pd.DataFrame, bins: Sequence[int], stage: str = "pre") -> list[str]:
    """The Fig. 4a metric set of one stage at 15 bins (or the first configured bin count)
    plus the rest; accuracy is the network's (``pre``) or the stage's own (a method may
    change the arg-max)."""
    b = 15 if 15 in bins else bins[0]
    wanted = [f"{stage}_{m}_{b}" for m in ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")]
    wanted += [f"{stage}_{m}" for m in ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "nll", "brier")]
    wanted += ["accuracy" if stage == "pre" else f"{stage}_accuracy"]
    wanted += [c for c in df.columns if c.startswith(f"{stage}_ood_auroc_")]
    return [c for c in wanted if c in df.columns and df[c].notna().sum() > 1]


def kendall_all(df: pd.DataFrame, settings: Mapping) -> pd.DataFrame:
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
    """
    bins = settings["bins"]
    top_k = settings["analysis"]["top_k"]
    boot = {"resamples": 0, "seed": 0, "level": 0.95, "scope": "findings", **settings["analysis"].get("bootstrap", {})}
    methods = method_stages(df)
    out = []

    def rule(finding):
        """The interval of a pair: bootstrap where ``finding(row, col)`` or scope is all."""
        if boot["resamples"] <= 0:
            return "jackknife"
        if boot["scope"] == "all":
            return "bootstrap"
        return lambda a, b: "bootstrap" if finding(a, b) else "jackknife"

    def matrix(part, cols, finding=lambda a, b: False):
        return stats.kendall_matrix_ci(part, cols, max(1, boot["resamples"]), boot["seed"], boot["level"],
                                       rule(finding))

    def cross(part, rows, cols, finding=lambda a, b: False):
        return stats.kendall_cross_ci(part, rows, cols, max(1, boot["resamples"]), boot["seed"], boot["level"],
                                      rule(finding))

    stated = f"_ece_{nearest_bins(bins)}"

    def q4_finding(a, b):  # pre_ece_15 against {method}_ece_15: the report's question-4 lines
        return a.endswith(stated) and b.endswith(stated)

    def usable(part, cols):
        return [c for c in cols if c in part.columns and part[c].notna().sum() > 1]

    # Only the columns a tau is taken of: the copies below (per space, dataset, population)
    # would otherwise hold every column of the tables (about 2 GB at full size).
    wanted = {"space", "hp", "dataset", "arch_index", "measured_by", "seed", "accuracy"}
    for stage in ("pre", *methods):
        wanted.update(metric_columns(df, bins, stage), _binned(bins, "ece", stage))
    df = df[[c for c in df.columns if c in wanted]]
    for (space, hp), group in df.groupby(["space", "hp"]):
        nets = _first_seed(measured(group))
        # Fig. 2 (question 1): every metric across datasets, pre and each method's ECE.
        b = nearest_bins(bins)
        across = [*metric_columns(nets, bins), *(f"{s}_ece_{b}" for s in methods)]
        acc = nets.pivot_table(index="arch_index", columns="dataset", values="accuracy").mean(axis=1)
        for metric in dict.fromkeys(across):
            if metric not in nets.columns:
                continue
            wide = nets.pivot_table(index="arch_index", columns="dataset", values=metric)
            wide = wide.loc[:, wide.notna().sum() > 1]  # a dataset where the metric is (nearly) all NaN
            if wide.shape[1] < 2:  # e.g. the OoD AUROCs, measured on CIFAR-10 only
                continue
            wide = wide.assign(_acc=acc)
            for population, part in _top_populations(wide, top_k, "_acc"):
                cols = usable(part, [c for c in wide.columns if c != "_acc"])
                if len(cols) < 2:
                    continue
                m = matrix(part, cols, finding=lambda a, b, metric=metric: metric in (f"pre{stated}", f"post{stated}"))
                out.append(m.assign(figure="datasets", metric=metric, space=space, hp=hp, dataset="*",
                                    population=population, stage=None))
        for dataset, part_all in nets.groupby("dataset"):
            for population, part in _top_populations(part_all, top_k):
                # Fig. 4a (question 3): every metric against every other, before (stage null)
                # and after each post-hoc method.
                for stage in ("pre", *methods):
                    m = matrix(part, metric_columns(part, bins, stage))
                    out.append(m.assign(figure="metrics", metric="*", space=space, hp=hp, dataset=dataset,
                                        population=population, stage=None if stage == "pre" else stage))
                # Fig. 4b, the paper's question 4, for every post-hoc method in the tables.
                pre_cols = usable(part, _binned(bins, "ece", "pre"))
                for stage in methods:
                    cols = usable(part, _binned(bins, "ece", stage))
                    if pre_cols and cols:
                        m = cross(part, pre_cols, cols, finding=q4_finding)
                        out.append(m.assign(figure="pre_post", metric="ece", space=space, hp=hp, dataset=dataset,
                                            population=population, stage=stage))
    out = [m for m in out if not m.empty]  # e.g. a population of one network: no pair (an empty block is untyped)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def hcs_table(df: pd.DataFrame, betas: Sequence[float]) -> pd.DataFrame:
    nets = measured(df)[["space", "hp", "dataset", "arch_index", "arch_str", "seed", "params", "flops",
                         "accuracy", HCS_ECE, "post_ece_15"]].copy()
    for beta in betas:
        col = f"hcs_{beta:g}"
        nets[col] = hcs(nets["accuracy"], nets[HCS_ECE], beta)
        nets[f"rank_{col}"] = nets.groupby(["space", "hp", "dataset"])[col].rank(ascending=False, method="min")
    return nets


def edge_op_frequency(hcs_df: pd.DataFrame, top_n: int, beta: float) -> pd.DataFrame:
    """TSS: how often each operation sits on each edge among the top n by HCS (Fig. 10)."""
    rows = []
    col = f"hcs_{beta:g}"
    for (hp, dataset), part in hcs_df[hcs_df["space"] == "tss"].groupby(["hp", "dataset"]):
        top = part.nlargest(top_n, col)
        for arch in top["arch_str"]:
            for edge, op in zip(EDGE_NAMES, tss_edge_ops(arch)):
                rows.append({"hp": hp, "dataset": dataset, "edge": edge, "op": op})
    if not rows:
        return pd.DataFrame(columns=["hp", "dataset", "edge", "op", "count"])
    return pd.DataFrame(rows).value_counts().rename("count").reset_index()


def size_brackets(df: pd.DataFrame) -> pd.DataFrame:
    """SSS: mean ECE (pre, post) and accuracy by total channel count bracket (Fig. 7)."""
    nets = measured(df[df["space"] == "sss"]).copy()
    if nets.empty:
        return pd.DataFrame()
    nets["channels"] = [sum(parse_sss(a)) for a in nets["arch_str"]]
    edges = [0, 80, 120, 160, 200, 240, 280, 321]
    nets["bracket"] = pd.cut(nets["channels"], edges, right=False)  # categorical: numeric order
    return (nets.groupby(["hp", "dataset", "bracket"], observed=True)
            .agg(networks=("arch_index", "size"), accuracy=("accuracy", "mean"),
                 pre_ece_15=("pre_ece_15", "mean"), post_ece_15=("post_ece_15", "mean"))
            .reset_index().astype({"bracket": str}))


# ---------------------------------------------------------------- plots and report

def _save(fig, path: Path, layout: bool = True) -> Path:
    import matplotlib.pyplot as plt

    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return path


def _draw_heatmap(ax, m: pd.DataFrame):
    """One tau matrix on ``ax`` (rows and columns in their order of appearance); the image."""
    grid = m.pivot(index="row", columns="col", values="tau")
    rows = list(dict.fromkeys(m["row"]))
    cols = list(dict.fromkeys(m["col"]))
    grid = grid.loc[rows, cols]
    im = ax.imshow(grid.values, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(cols)), [c.removeprefix("pre_") for c in cols], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [r.removeprefix("pre_") for r in rows], fontsize=7)
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid.values[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if abs(v) > 0.6 else "black")  # legible on the dark ends of RdBu
    return im


def _heatmap(m: pd.DataFrame, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    rows, cols = m["row"].nunique(), m["col"].nunique()
    fig, ax = plt.subplots(figsize=(max(4.2, 1.6 + 0.55 * cols), max(3.2, 1.0 + 0.5 * rows)))
    im = _draw_heatmap(ax, m)
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.03, label="Kendall tau-b")
    ax.set_title(title, fontsize=9)
    _save(fig, path, layout=False)  # one axes: the tight bounding box alone fits it, one drawing fewer


def _heatmap_panels(blocks: Sequence[tuple[str, pd.DataFrame]], title: str, path: Path) -> None:
    """Several small tau matrices side by side (Fig. 2: one per metric), one colour bar."""
    import matplotlib.pyplot as plt

    size = max(max(m["col"].nunique(), m["row"].nunique()) for _, m in blocks)
    side = max(2.6, 1.2 + 0.55 * size)
    fig, axes = plt.subplots(1, len(blocks), figsize=(side * len(blocks) + 1.0, side + 0.6), squeeze=False)
    im = None
    for ax, (name, m) in zip(axes[0], blocks):
        im = _draw_heatmap(ax, m)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.colorbar(im, ax=axes, fraction=0.02, pad=0.02, label="Kendall tau-b")
    _save(fig, path, layout=False)


def make_plots(df: pd.DataFrame, kendall: pd.DataFrame, hcs_df: pd.DataFrame, settings: Mapping, plots: Path) -> list[tuple[str, Path]]:
    """All plots; titles of a mini-benchmark run say so, since its numbers are not NATS-Bench's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    plots.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, Path]] = []
    for old in plots.glob("*.png"):  # plots of an earlier configuration must not outlive it
        old.unlink()
    demo = " [mini benchmark: not NATS-Bench results]" if settings["demo"] else ""
    # One heatmap each: Fig. 2 for four metrics, Fig. 4a before recalibration, Fig. 4b for
    # temperature scaling (every other block is in kendall.parquet; the methods' Fig. 4b:
    # make_method_plots).
    figure2 = kendall["metric"].isin(["pre_ece_15", "post_ece_15", "pre_nll", "accuracy"])
    single = (kendall["population"] == "all") & (
        ((kendall["figure"] == "datasets") & figure2) | ((kendall["figure"] == "metrics") & kendall["stage"].isna())
        | ((kendall["figure"] == "pre_post") & (kendall["stage"] == "post")))
    for (space, hp), part in kendall[single & (kendall["figure"] == "datasets")].groupby(["space", "hp"]):
        blocks = [(metric, part[part["metric"] == metric]) for metric in dict.fromkeys(part["metric"])]
        title = f"Kendall tau across datasets ({_label(space, hp)}){demo}"
        path = plots / f"kendall_datasets_{target_name(space, hp)}.png"
        _heatmap_panels(blocks, title, path)
        made.append((f"Metrics across datasets ({_label(space, hp)})", path))
    for (figure, metric, space, hp, dataset), m in kendall[single & (kendall["figure"] != "datasets")].groupby(
            ["figure", "metric", "space", "hp", "dataset"]):  # the other methods: make_method_plots
        name = f"kendall_{figure}_{metric}_{target_name(space, hp)}_{dataset}".replace("*", "all").replace("-", "_")
        title = {"metrics": f"metrics, {dataset}", "pre_post": f"ECE pre vs post scaling, {dataset}"}[figure] + f" ({_label(space, hp)})" + demo
        path = plots / f"{name}.png"
        _heatmap(m, title, path)
        made.append((title, path))
    bins = settings["bins"]
    for (space, hp), group in measured(df).groupby(["space", "hp"]):
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
        fig.suptitle(f"ECE by bin count ({_label(space, hp)}){demo}", fontsize=10)
        made.append((f"ECE by bin count, {space}", _save(fig, plots / f"ece_by_bins_{target_name(space, hp)}.png")))
        made.append(_ece_vs_accuracy(group, space, hp, datasets, demo, plots))
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
        fig.suptitle(f"HCS against accuracy ({_label(space, hp)}){demo}", fontsize=10)
        made.append((f"HCS against accuracy, {space}", _save(fig, plots / f"hcs_vs_accuracy_{target_name(space, hp)}.png")))
    return made


def ood_colour_column(columns) -> str | None:
    """The CIFAR-10-C AUROC column of a table (the first ``pre_ood_auroc_*`` that is not SVHN),
    Fig. 5's colour; None if the tables have none."""
    return next((c for c in columns if c.startswith("pre_ood_auroc_") and not c.endswith("_svhn")), None)


def _ece_vs_accuracy(group: pd.DataFrame, space: str, hp: str, datasets: Sequence[str], demo: str,
                     plots: Path) -> tuple[str, Path]:
    """Fig. 5 (question 5): pre (o) and post (x) ECE against accuracy per dataset, all
    networks (top row) and those above 90 % accuracy (bottom row), coloured by the
    architecture's CIFAR-10-C AUROC (measured on its CIFAR-10 network) where the tables
    have one."""
    import matplotlib.pyplot as plt
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
    fig.suptitle(f"ECE against accuracy ({_label(space, hp)}){demo}", fontsize=10)
    fig.tight_layout()
    if mappable is not None:
        fig.colorbar(mappable, ax=axes, fraction=0.02, shrink=0.8, label=f"CIFAR-10-C AUROC ({colour})")
    path = plots / f"ece_vs_accuracy_{target_name(space, hp)}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the colour bar's label outside the axes grid
    plt.close(fig)
    return f"ECE against accuracy, {space}", path


def _stage_color(stage: str) -> str:
    import matplotlib

    palette = matplotlib.colormaps["tab10"].colors
    return matplotlib.colors.to_hex(palette[STAGES.index(stage) % 10] if stage in STAGES else palette[-1])


def _facets(df: pd.DataFrame):
    """(space, hp) rows and dataset columns of a facet grid over the measured networks."""
    nets = measured(df)
    groups = sorted(nets.groupby(["space", "hp"]).groups)
    datasets = sorted(nets["dataset"].unique())
    return nets, groups, datasets


def _kendall_methods_figure(block: pd.DataFrame, stages: Sequence[str], title: str, path: Path) -> None:
    """Question 4 for every method of one table: one pre-vs-method heatmap per stage."""
    import matplotlib.pyplot as plt

    ncols = min(4, len(stages))
    nrows = -(-len(stages) // ncols)
    size = int(block.groupby("stage")["col"].nunique().max())  # bin counts of a panel
    side = 1.0 + 0.3 * max(size, 3)
    fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols + 0.8, side * nrows + 0.5), squeeze=False,
                             layout="constrained")
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
        if size <= 12:
            for i in range(len(rows)):
                for j in range(len(cols)):
                    v = grid.values[i, j]
                    if np.isfinite(v):
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if abs(v) > 0.6 else "black")
    for ax in list(axes.flat)[len(stages):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=axes, fraction=0.02, shrink=0.8, label="Kendall tau-b")
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)


def make_method_plots(df: pd.DataFrame, kendall: pd.DataFrame, wins: pd.DataFrame, settings: Mapping,
                      plots: Path) -> list[tuple[str, Path]]:
    """The post-hoc method plots (after :func:`make_plots`, which clears ``plots``), only for
    the stages in the tables: question 4 for every method (when there is more than
    temperature scaling, whose heatmap :func:`make_plots` draws), box plots of ECE per
    stage and the stage-by-metric win-rate heatmap (when there are two stages or more)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    plots.mkdir(parents=True, exist_ok=True)
    demo = " [mini benchmark: not NATS-Bench results]" if settings["demo"] else ""
    made: list[tuple[str, Path]] = []
    methods = method_stages(df)
    if len(methods) > 1 and not kendall.empty:
        q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all")]
        for (space, hp, dataset), block in q4.groupby(["space", "hp", "dataset"]):
            stages = [s for s in methods if s in set(block["stage"])]
            if not stages:
                continue
            title = f"Question 4: ECE pre vs after each method, {dataset} ({_label(space, hp)}){demo}"
            path = plots / f"kendall_pre_methods_{target_name(space, hp)}_{dataset}.png".replace("-", "_")
            _kendall_methods_figure(block, stages, title, path)
            made.append((f"Question 4 for every method: Kendall tau of pre- against post-method ECE across bin "
                         f"counts, {dataset} ({_label(space, hp)})", path))
    stages = stages_present(df)
    if len(stages) < 2:
        return made
    nets, groups, datasets = _facets(df)
    b = nearest_bins(settings["bins"])
    metric = f"ece_{b}"
    # Box plots: no fliers (tens of thousands of networks would be a smear of points).
    fig, axes = plt.subplots(len(groups), len(datasets), squeeze=False,
                             figsize=((1.2 + 0.5 * len(stages)) * len(datasets), 3.6 * len(groups)))
    drawn = False
    for r, (space, hp) in enumerate(groups):
        for c, dataset in enumerate(datasets):
            ax = axes[r][c]
            part = nets[(nets["space"] == space) & (nets["hp"] == hp) & (nets["dataset"] == dataset)]
            present = _group_stages(part, stages, metric)
            data = [part[f"{s}_{metric}"].to_numpy(dtype=float) for s in present]
            data = [v[np.isfinite(v)] for v in data]
            keep = [(s, v) for s, v in zip(present, data) if len(v)]
            if not keep:
                ax.axis("off")
                continue
            labels = []
            for s, v in keep:
                failed = int(part[f"{s}_{metric}"].isna().sum())
                labels.append(s + (f"\n{failed} NaN" if failed else ""))
            box = ax.boxplot([v for _, v in keep], patch_artist=True, showfliers=False, widths=0.6,
                             medianprops={"color": "black"})
            ax.set_xticks(range(1, len(keep) + 1), labels, fontsize=6.5)
            for patch, (s, _) in zip(box["boxes"], keep):
                patch.set_facecolor(_stage_color(s))
                patch.set_alpha(0.75)
            if all(v.min() > 0 for _, v in keep):
                ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3, which="both")
            ax.set_title(f"{_label(space, hp)}, {dataset}: {len(part)} networks", fontsize=9)
            ax.set_ylabel(f"ECE ({b} bins)", fontsize=8)
            drawn = True
    fig.suptitle(f"ECE ({b} bins) per method: boxes quartiles, whiskers 1.5 IQR, outliers not drawn; "
                 f"NaN: failed fits{demo}", fontsize=10)
    if drawn:
        made.append((f"ECE ({b} bins) per method", _save(fig, plots / "ece_by_method.png")))
    else:
        plt.close(fig)
    # Win rates: stages x metrics, one panel per table.
    if not wins.empty:
        metrics = [m for m in summary_metrics(settings["bins"]) if m in set(wins["metric"])]
        rows = [s for s in stages if s in set(wins["stage"])]
        fig, axes = plt.subplots(len(groups), len(datasets), squeeze=False, layout="constrained",
                                 figsize=((1.0 + 0.5 * len(metrics)) * len(datasets) + 1,
                                          (1.2 + 0.3 * len(rows)) * len(groups) + 0.4))
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
                for i in range(len(rows)):
                    for j in range(len(metrics)):
                        v = values[i, j]
                        if np.isfinite(v):
                            ax.text(j, i, f"{100 * v:.0f}%", ha="center", va="center", fontsize=7,
                                    color="white" if v > 0.6 * vmax else "black")
                ax.set_xticks(range(len(metrics)), metrics, rotation=45, ha="right", fontsize=7)
                ax.set_yticks(range(len(rows)), rows, fontsize=7)
                n = int(part["n_networks"].max())
                ax.set_title(f"{_label(space, hp)}, {dataset}: {n} networks", fontsize=9)
        fig.suptitle(f"Share of networks for which each method is the best (ties split){demo}", fontsize=10)
        if im is not None:
            fig.colorbar(im, ax=axes, fraction=0.02, shrink=0.8, label="share of networks won",
                         format=PercentFormatter(1.0))
            path = plots / "method_win_rates.png"
            fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
            made.append(("Win rate of each method per metric", path))
        plt.close(fig)
    return made


def _fmt(x: float) -> str:
    if not np.isfinite(x):
        return "–" if np.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{x:.3g}"


def _stage_order(stages) -> list[str]:
    present = set(stages)
    return [s for s in STAGES if s in present] + sorted(present - set(STAGES))


def summary_grid(summary: pd.DataFrame) -> pd.DataFrame:
    """The method summary for the report: one row per (space, hp, dataset, stage) with the
    networks and the failed fits (NaN accuracy), one HTML cell per metric, ``median
    [q25–q75]``, the best median of each table and metric in bold, infinite values and NaNs
    beyond the row's failed fits noted."""
    s = summary.copy()
    keys = ["space", "hp", "dataset", "stage"]
    # A failed fit makes every metric NaN, accuracy included: its NaN count is the row's failures.
    acc_nan = s["n_nan"].where(s["metric"] == "accuracy")
    failed = acc_nan.groupby([s[k] for k in keys]).transform("max").fillna(
        s.groupby(keys)["n_nan"].transform("min")).astype(int)
    lower = ~s["metric"].isin(HIGHER_IS_BETTER)
    key = s["median"].where(lower, -s["median"])
    best = key.eq(key.groupby([s["space"], s["hp"], s["dataset"], s["metric"]]).transform("min")) & key.notna()
    cells = []
    for row, is_best, fail in zip(s.itertuples(), best, failed):
        text = f"{_fmt(row.median)} [{_fmt(row.q25)}–{_fmt(row.q75)}]"
        if is_best:
            text = f"<b>{text}</b>"
        extra = row.n_nan - fail
        notes = [f"{extra} NaN"] * (extra > 0) + [f"{row.n_inf} inf"] * (row.n_inf > 0)
        if notes:
            text += f" <small>({', '.join(notes)})</small>"
        cells.append(text)
    s["cell"] = cells
    s["failed"] = failed
    metrics = list(dict.fromkeys(s["metric"]))
    s["stage"] = pd.Categorical(s["stage"], _stage_order(s["stage"]), ordered=True)
    grid = s.pivot(index=keys, columns="metric", values="cell")[metrics].fillna("")
    counts = s.groupby(keys, observed=True).agg(networks=("n", "max"), failed=("failed", "max"))
    grid = counts.join(grid)
    grid.columns.name = None
    return grid


def summary_html(summary: pd.DataFrame) -> str:
    """:func:`summary_grid` as an HTML table ('' if there is nothing to show)."""
    return summary_grid(summary).to_html(escape=False) if not summary.empty else ""


def q4_html(kendall: pd.DataFrame, bins: Sequence[int]) -> str:
    """Kendall tau of pre- against post-method ECE at the same bin count (nearest 15), all
    networks: one row per table, one column per method."""
    if kendall.empty or "stage" not in kendall.columns:
        return ""
    b = nearest_bins(bins)
    q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all")
                 & (kendall["row"] == f"pre_ece_{b}") & (kendall["col"] == kendall["stage"] + f"_ece_{b}")]
    if q4.empty:
        return ""
    grid = q4.pivot(index=["space", "hp", "dataset"], columns="stage", values="tau")
    grid = grid[_stage_order(grid.columns)]
    grid.columns.name = None
    return grid.to_html(float_format=lambda x: f"{x:.3f}", na_rep="–")


def wins_html(wins: pd.DataFrame, metric: str) -> str:
    """One metric's win shares and median margins: one row per table, one column per stage,
    cells ``share (median margin)``."""
    part = wins[wins["metric"] == metric]
    if part.empty:
        return ""
    part = part.assign(cell=[f"{100 * sh:.0f}%" + (f" ({_fmt(m)})" if np.isfinite(m) else "")
                             for sh, m in zip(part["share"], part["margin_median"])])
    grid = part.pivot(index=["space", "hp", "dataset"], columns="stage", values="cell")
    grid = grid[_stage_order(grid.columns)].fillna("–")
    grid.columns.name = None
    return grid.to_html()


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


def methods_section(summary: pd.DataFrame, wins: pd.DataFrame, kendall: pd.DataFrame, bins: Sequence[int]) -> str:
    """The body of the report's section on the post-hoc methods (recalibration-spec.md, "What
    the analysis asks of these stages"); its figures are placed by :mod:`calibench.report.page`."""
    if summary.empty:
        return ""
    b = nearest_bins(bins)
    stages = _stage_order(summary["stage"])
    parts = ["<p>Stages in these tables: " + ", ".join(
                 f"<b>{html.escape(s)}</b> ({html.escape(STAGE_NAMES.get(s, s))})" for s in stages)
             + ". Every method is fitted on the validation part of each network's split and measured on the "
               "test part (recalibration-spec.md), so the stages of a network are compared sample for sample. "
               "A failed fit gives NaN for its stage and network: it is counted under <i>failed</i> and left "
               "out of the statistics; an infinite NLL (a probability 0 on the true class) is noted as <i>inf</i> "
               "and kept (the mean is then infinite; the median stays finite while fewer than half the networks "
               "are infinite).</p>"]
    parts.append(f"<h3>Distribution over networks: median [25th–75th percentile]</h3>"
                 f"<p>Binned metrics at {b} bins; cwce is Nixon et al.'s SCE, ksce the top-1 KS error of Gupta et "
                 f"al. Bold: the best median of the table and metric (lowest; highest for accuracy). Full numbers "
                 f"(n, mean, IQR): <code>analysis/methods_summary.csv</code>.</p>" + summary_html(summary))
    q4 = q4_html(kendall, bins)
    if q4:
        parts.append(f"<h3>Question 4: does a method affect all networks uniformly?</h3><p>Kendall tau-b between "
                     f"the networks' ECE before and after each method ({b} bins, all networks). Near 1: the method "
                     f"keeps the networks' calibration ranking; low: it reorders them. The full matrices across bin "
                     f"counts are the heatmaps below (<code>analysis/kendall.parquet</code>, figure "
                     f"<code>pre_post</code>, column <code>stage</code>).</p>" + q4)
    if not wins.empty:
        parts.append("<h3>Which method is best for a network, and by how much</h3><p>For each network and metric "
                     "the stages with a finite value compete; the lowest value wins (for accuracy the highest), "
                     "exact ties split the win evenly. The heatmap gives each stage's share of the networks; "
                     "<code>analysis/method_wins.parquet</code> adds outright wins, ties and the median and mean "
                     "margin over the runner-up of the outright wins.</p>"
                     f"<p>ECE ({b} bins): share of networks won (median margin of the outright wins over the "
                     f"runner-up, in ECE)</p>" + wins_html(wins, f"ece_{b}"))
    return "\n".join(parts)


def make_reliability_plots(hcs_df: pd.DataFrame, results: Path, beta: float) -> list[tuple[str, Path]]:
    """Reliability diagrams of the best and the worst network by HCS of every table, pre and
    post side by side (from the shards' bins; a table without shards, e.g. imported, has none)."""
    from calibench.analysis import reliability

    col = f"hcs_{beta:g}"
    out = []
    for (space, hp, dataset), part in hcs_df.dropna(subset=[col]).groupby(["space", "hp", "dataset"]):
        ranked = part.sort_values([col, "arch_index"], ascending=[False, True], kind="stable")
        panels = []
        for label, row in (("best", ranked.iloc[0]), ("worst", ranked.iloc[-1])):
            try:
                found = reliability.load(results, space, dataset, int(row["arch_index"]), hp=str(hp))
            except (OSError, KeyError, ValueError) as exc:
                log.info("no reliability diagram for %s %s %s: %s", space, hp, dataset, exc)
                panels = []
                break
            for stage in ("pre", "post"):
                if stage in found["stages"]:
                    panels.append((f"{label} by HCS_{beta:g}: arch {int(row['arch_index'])}, {stage}\n"
                                   f"acc {row['accuracy']:.3f}, HCS {row[col]:.3f}", found["stages"][stage]))
        if panels:
            path = reliability.figure(panels, f"{_label(space, hp)}, {dataset}: reliability of the best and worst network",
                                      results / "plots" / f"reliability_{target_name(space, hp)}_{dataset}.png")
            out.append((f"Reliability, best and worst by HCS: {space} {dataset}", path))
    return out


def robustness_analysis(df: pd.DataFrame, options: Mapping, bins: Sequence[int], top_k: Sequence[int],
                        analysis_dir: Path, plots: Path, demo: bool) -> list[tuple[str, Path]]:
    """Question 2 (Fig. 3): the configured robustness table joined to the TSS tables of
    ``options["datasets"]`` (default CIFAR-10, where robustness datasets are measured), every
    calibration metric against every robustness column per top-k population
    (``analysis/robustness_kendall.parquet``) and the Fig. 3 plot."""
    from calibench.analysis.nats import robustness

    table = robustness.load_robustness(options["path"], options.get("key", "arch_index"))
    datasets = options.get("datasets") or ["cifar10"]
    joined = robustness.join_robustness(df, table, datasets=datasets)
    metrics = list(dict.fromkeys([*metric_columns(joined, bins), f"post_ece_{nearest_bins(bins)}"]))
    metrics = [m for m in metrics if m in joined.columns]
    kendall = robustness.robustness_kendall(joined, metrics, populations=(*top_k, "all"),
                                            resamples=int(options.get("resamples", 0)), seed=int(options.get("seed", 0)))
    kendall.to_parquet(analysis_dir / "robustness_kendall.parquet", index=False)
    title = " [mini benchmark: not NATS-Bench results]" if demo else ""
    path = robustness.robustness_plot(kendall, plots / "robustness_kendall.png", title=title)
    return [(f"Question 2: Kendall tau of each metric and robustness column against ECE, by population size "
             f"({', '.join(datasets)})", path)]


def architecture_analysis(df: pd.DataFrame, bins: Sequence[int], analysis_dir: Path, plots: Path,
                          demo: bool) -> tuple[list[tuple[str, Path]], list[dict]]:
    """Question 7, Figs. 8 (left) and 9 (:mod:`calibench.analysis.nats.architecture_figures`): the TSS
    kernel-parameter and SSS width-progression tables (``analysis/tss_kernel_parameters.parquet``,
    ``analysis/sss_width_progression.parquet``), their plots and findings."""
    from calibench.analysis.nats import architecture_figures as af
    from calibench.report.page import finding_row

    suffix = " [mini benchmark: not NATS-Bench results]" if demo else ""
    b = nearest_bins(bins)
    made, found = [], []
    kernel = af.kernel_parameter_table(df, bins)
    kernel.to_parquet(analysis_dir / "tss_kernel_parameters.parquet", index=False)
    path = af.plot_kernel_parameters(kernel, plots / "kernel_parameters_tss.png", suffix=suffix)
    if path is not None:
        made.append(("TSS: ECE by cell kernel parameters (Fig. 8)", path))
    for (hp, dataset), part in kernel[kernel["stage"] == "pre"].dropna(subset=["median"]).groupby(["hp", "dataset"]):
        lo, hi = part.loc[part["kernel_params"].idxmin()], part.loc[part["kernel_params"].idxmax()]
        found.append(finding_row("q7", "tss", hp, dataset,
                          f"TSS hp {hp}, {dataset}: median pre ECE ({b} bins) {lo['median']:.3f} at "
                          f"{int(lo['kernel_params'])} cell kernel parameters ({int(lo['n'])} networks) against "
                          f"{hi['median']:.3f} at {int(hi['kernel_params'])} ({int(hi['n'])})",
                          hi["median"] - lo["median"]))
    width = af.width_progression_table(df, bins=bins)
    width.to_parquet(analysis_dir / "sss_width_progression.parquet", index=False)
    path = af.plot_width_progression(width, plots / "width_progression_sss.png", suffix=suffix)
    if path is not None:
        made.append(("SSS: ECE and accuracy of the uniform-width networks 8:8:8:8:8 … 64:64:64:64:64 (Fig. 9)", path))
    col = f"pre_ece_{b}"
    if col in width.columns:
        for (hp, dataset), part in width.dropna(subset=[col]).groupby(["hp", "dataset"]):
            if len(part) < 2:
                continue
            first, last = part.iloc[0], part.iloc[-1]
            found.append(finding_row("q7", "sss", hp, dataset,
                              f"SSS hp {hp}, {dataset}: pre ECE ({b} bins) {first[col]:.3f} at width "
                              f"{int(first['width'])} against {last[col]:.3f} at width {int(last['width'])} "
                              f"(accuracy {first['accuracy']:.3f} → {last['accuracy']:.3f}; {len(part)} widths)",
                              last[col] - first[col]))
    return made, found


def population_groups(df: pd.DataFrame, settings: Mapping, analysis_dir: Path, plots: Path
                      ) -> tuple[list[tuple[str, Path]], str]:
    """Populations beyond NATS-Bench compared by their metadata (``populations.<name>.group_by``;
    Tao et al. App. A-C): per group, ECE before and after temperature scaling and a test
    across groups (``analysis/groups.csv``), the Kendall matrices of each group
    (``analysis/kendall_groups.parquet``), plots and the report's HTML."""
    wanted = settings.get("groups") or {}
    if not wanted:
        return [], ""
    from calibench.analysis import groups

    made, parts, summaries, matrices = [], [], [], []
    for space, columns in wanted.items():
        part = df[df["space"] == space]
        if part.empty:
            continue
        for column in columns:
            if column not in part.columns:
                log.warning("populations.%s.group_by: no column %r in its tables; skipped", space, column)
                parts.append(f"<p>{html.escape(space)}: no metadata column {html.escape(column)!r} to group by.</p>")
                continue
            summary = groups.group_summary(part, column, settings["bins"])
            summaries.append(summary)
            matrices.append(groups.group_kendall(part, column, settings))
            made += groups.plot_groups(part, column, settings["bins"], plots)
            parts.append(f"<h3>{html.escape(space)}, by {html.escape(column)}</h3>" + groups.groups_html(summary))
    if summaries:
        pd.concat(summaries, ignore_index=True).to_csv(analysis_dir / "groups.csv", index=False)
        pd.concat(matrices, ignore_index=True).to_parquet(analysis_dir / "kendall_groups.parquet", index=False)
    return made, "".join(parts)


def _first_seed(nets: pd.DataFrame) -> pd.DataFrame:
    """One row per measured network: its first seed (as the Kendall matrices use)."""
    first = nets.groupby(["space", "hp", "dataset", "arch_index"])["seed"].transform("min") == nets["seed"]
    return nets[first]


def nas_tables(df: pd.DataFrame, options: Mapping | None = None) -> pd.DataFrame:
    """Tao et al. Table 1 for every result table (:func:`calibench.analysis.nats.nas.nas_table` over all its
    architectures): space, hp, dataset, then the NAS columns. ``options`` (``analysis.nas``):
    repeats, budget, seed; the protocol's defaults otherwise."""
    from calibench.analysis.nats import nas

    options = dict(options or {})
    out = []
    for (space, hp, dataset), part in df.groupby(["space", "hp", "dataset"]):
        if part["accuracy"].notna().sum() < 2:
            continue
        t = nas.nas_table(part, repeats=int(options.get("repeats", nas.REPEATS)),
                          budget=int(options.get("budget", nas.BUDGET)), seed=int(options.get("seed", nas.SEED)))
        out.append(t.assign(space=space, hp=str(hp), dataset=dataset))
    if not out:
        return pd.DataFrame(columns=["space", "hp", "dataset"])
    res = pd.concat(out, ignore_index=True)
    return res[["space", "hp", "dataset", *[c for c in res.columns if c not in ("space", "hp", "dataset")]]]


def nas_html(result: pd.DataFrame) -> str:
    from calibench.analysis.nats import nas

    if result.empty:
        return ""
    return "".join(nas.nas_html(part.drop(columns=["space", "hp", "dataset"]), f"{space} hp {hp}, {dataset}")
                   for (space, hp, dataset), part in result.groupby(["space", "hp", "dataset"], sort=True))


def _edges_html(edges: pd.DataFrame) -> str:
    if edges.empty:
        return ""
    return ("<h3>TSS: operations on each edge among the top networks by HCS (beta = 1)</h3>"
            + edges.pivot_table(index=["dataset", "edge"], columns="op", values="count", fill_value=0).to_html())


def _brackets_html(brackets: pd.DataFrame) -> str:
    if brackets.empty:
        return ""
    return ("<h3>SSS: accuracy and ECE by total channel count</h3>"
            + brackets.to_html(index=False, float_format=lambda x: f"{x:.4f}"))


def run_analysis(settings: Mapping, tables: Sequence[str | Path], results: str | Path) -> dict[str, Path]:
    """``settings``: :func:`calibench.config.settings.analysis_settings` (analysis, bins, demo)."""
    results = Path(results)
    analysis_dir = results / "analysis"
    analysis_dir.mkdir(parents=True, exist_ok=True)
    df = load_tables(tables)
    if df.empty:
        raise ValueError(f"no rows in the result tables {list(map(str, tables))}: nothing was measured")
    betas = settings["analysis"]["hcs_betas"]
    top_n = settings["analysis"]["top_n"]
    kendall = kendall_all(df, settings)
    kendall.to_parquet(analysis_dir / "kendall.parquet", index=False)
    findings = question4_findings(kendall, settings["bins"])
    findings.to_csv(analysis_dir / "question4.csv", index=False)
    hcs_df = hcs_table(df, betas)
    hcs_df.to_parquet(analysis_dir / "hcs.parquet", index=False)
    tops = (hcs_df.sort_values(f"hcs_{betas[0]:g}", ascending=False)
            .groupby(["space", "hp", "dataset"]).head(top_n)
            .sort_values(["space", "dataset", f"rank_hcs_{betas[0]:g}"]))
    tops.to_csv(analysis_dir / "top_hcs.csv", index=False)
    edges = edge_op_frequency(hcs_df, top_n, betas[0])
    edges.to_parquet(analysis_dir / "tss_edge_ops.parquet", index=False)
    brackets = size_brackets(df)

    brackets.to_parquet(analysis_dir / "sss_size_brackets.parquet", index=False)
    stages_by_table = table_stages(tables)
    summary = methods_summary(df, settings["bins"], stages_by_table)
    summary.to_parquet(analysis_dir / "methods_summary.parquet", index=False)
    summary.to_csv(analysis_dir / "methods_summary.csv", index=False)
    wins = method_wins(df, settings["bins"], stages_by_table)
    wins.to_parquet(analysis_dir / "method_wins.parquet", index=False)
    plots = make_plots(df, kendall, hcs_df, settings, results / "plots")
    plots += make_method_plots(df, kendall, wins, settings, results / "plots")
    plots += make_reliability_plots(hcs_df, results, betas[0])
    robust = None
    if (settings.get("robustness") or {}).get("path"):
        plots += robustness_analysis(df, settings["robustness"], settings["bins"], settings["analysis"]["top_k"],
                                     analysis_dir, results / "plots", bool(settings["demo"]))
        robust = pd.read_parquet(analysis_dir / "robustness_kendall.parquet")
    level = settings["analysis"].get("bootstrap", {}).get("level", 0.95)
    nats = df[df["space"].isin(NATS_SPACES)]  # what only NATS-Bench's architectures answer
    comparison = hp_compare.compare_hps(nats, level=level)  # question 6 across schedules: jackknife intervals
    comparison.to_parquet(analysis_dir / "hp_comparison.parquet", index=False)
    comparison.to_csv(analysis_dir / "hp_comparison.csv", index=False)
    hp_plot = hp_compare.plot_hp_comparison(nats, results / "plots" / "hp_comparison.png", demo=bool(settings["demo"]))
    if hp_plot is not None:
        plots.append(("ECE by bin count across training schedules, same architectures (Fig. 6c)", hp_plot))
    arch_plots, arch_findings = architecture_analysis(nats, settings["bins"], analysis_dir, results / "plots",
                                                     bool(settings["demo"]))
    plots += arch_plots
    group_plots, group_blocks = population_groups(df, settings, analysis_dir, results / "plots")
    plots += group_plots
    nas_result = nas_tables(nats, settings["analysis"].get("nas", {}))
    nas_result.to_csv(analysis_dir / "nas.csv", index=False)
    n_rows = {Path(t).name: pq.ParquetFile(t).metadata.num_rows for t in tables}  # footer only, no second read
    nets = _first_seed(measured(df))
    found = report.findings(nets, kendall, findings, brackets, edges, settings["bins"], level,
                            robustness=robust, nas=nas_result, architecture=arch_findings)
    extra = hp_compare.findings(comparison, settings["bins"])
    if not extra.empty:
        found = pd.concat([found, extra], ignore_index=True)
    found.to_csv(analysis_dir / "findings.csv", index=False)
    shown = tops[["space", "dataset", "arch_index", "arch_str", "accuracy", "pre_ece_15"]
                 + [f"hcs_{b:g}" for b in betas]]
    width = pd.read_parquet(analysis_dir / "sss_width_progression.parquet")
    claims = report.claims(nets, kendall, findings, settings["bins"], level, width)
    claims.to_csv(analysis_dir / "claims.csv", index=False)
    blocks = {q: report.claims_html(claims, q, level) for q in ("q1", "q3", "q4", "q5")}
    blocks |= {
        "q6": report.claims_html(claims, "q6", level) + hp_compare.comparison_html(comparison),
        "q7": report.claims_html(claims, "q7", level) + _edges_html(edges) + _brackets_html(brackets),
        "nas": "<h3>Top networks by HCS</h3>" + shown.to_html(index=False, float_format=lambda x: f"{x:.4f}")
               + nas_html(nas_result),
        "methods": methods_section(summary, wins, kendall, settings["bins"]),
        "populations": group_blocks,
        "failures": failures_html(results, tables),
    }
    report_path = report.write_report(results, plots, found, n_rows, bool(settings["demo"]), blocks=blocks)
    log.info("analysis written: %s, %d plots, %d findings", report_path, len(plots), len(found))
    return {"report": report_path, "findings": analysis_dir / "findings.csv", "claims": analysis_dir / "claims.csv",
            "nas": analysis_dir / "nas.csv",
            "hp_comparison": analysis_dir / "hp_comparison.parquet", "kendall": analysis_dir / "kendall.parquet", "hcs": analysis_dir / "hcs.parquet",
            "methods_summary": analysis_dir / "methods_summary.parquet",
            "method_wins": analysis_dir / "method_wins.parquet"}
