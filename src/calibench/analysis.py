"""The paper's questions, answered from the result tables (Tao et al., ICLR 2024).

Reads only the wide tables. Writes tidy parquet files under ``{results}/analysis/``,
PNG plots under ``{results}/plots/`` and one HTML report, ``{results}/report.html``:

* Kendall tau-b matrices: one metric across datasets (Fig. 2), metrics against each
  other within a dataset (Fig. 4a), pre- against post-temperature-scaling ECE across
  bin counts (Fig. 4b), for the top-k networks by accuracy and for all of them.
* HCS_beta (metrics-spec.md, "Harmonic Calibration Score") rankings with the top n per
  dataset; for TSS the operation frequency on each edge among the top n (Fig. 10), for
  SSS ECE and accuracy by size bracket (Fig. 7).
* Plots: the heatmaps, ECE by bin count before and after scaling (Fig. 6), ECE against
  accuracy (Fig. 5), HCS against accuracy (Fig. 8).
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

from .archstr import parse_sss, tss_edge_ops

log = logging.getLogger(__name__)

EDGE_NAMES = ("1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2")
HCS_ECE = "pre_ece_15"


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


def kendall_matrix(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Tidy tau-b matrix over pairwise-complete rows: columns row, col, tau, n."""
    rows, done = [], {}
    for a in columns:
        for b in columns:
            if (b, a) in done:  # tau-b is symmetric: each pair is computed once
                tau, n = done[(b, a)]
            else:
                pair = df[[a, b]].dropna() if a != b else df[[a]].dropna()
                n = len(pair)
                if a == b:
                    tau = 1.0 if n > 1 else np.nan
                elif n > 1:
                    tau = kendalltau(pair[a], pair[b]).statistic
                else:
                    tau = np.nan
                done[(a, b)] = tau, n
            rows.append({"row": a, "col": b, "tau": float(tau), "n": n})
    return pd.DataFrame(rows)


def _top_populations(df: pd.DataFrame, top_k: Sequence[int], by: str = "accuracy"):
    yield "all", df
    for k in top_k:
        if len(df) > k:
            yield f"top{k}", df.nlargest(k, by)


def _binned(bins: Sequence[int], metric: str, stage: str = "pre") -> list[str]:
    return [f"{stage}_{metric}_{b}" for b in bins]


def metric_columns(df: pd.DataFrame, bins: Sequence[int]) -> list[str]:
    """The Fig. 4a metric set at 15 bins (or the first configured bin count) plus the rest."""
    b = 15 if 15 in bins else bins[0]
    wanted = [f"pre_{m}_{b}" for m in ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")]
    wanted += ["pre_ksce", "pre_ks_top2", "pre_ks_within_top2", "pre_kdece", "pre_mmce", "pre_nll", "pre_brier",
               "accuracy"]
    wanted += [c for c in df.columns if c.startswith("pre_ood_auroc_")]
    return [c for c in wanted if c in df.columns and df[c].notna().sum() > 1]


def kendall_all(df: pd.DataFrame, settings: Mapping) -> pd.DataFrame:
    bins = settings["bins"]
    top_k = settings["analysis"]["top_k"]
    out = []
    for (space, hp), group in df.groupby(["space", "hp"]):
        nets = measured(group)
        first_seed = nets.groupby(["dataset", "arch_index"])["seed"].transform("min") == nets["seed"]
        nets = nets[first_seed]
        # Fig. 2: one metric across datasets.
        for metric in ("pre_ece_15", "post_ece_15", "pre_nll", "accuracy"):
            if metric not in nets.columns:
                continue
            wide = nets.pivot_table(index="arch_index", columns="dataset", values=metric)
            acc = nets.pivot_table(index="arch_index", columns="dataset", values="accuracy").mean(axis=1)
            wide = wide.assign(_acc=acc)
            for population, part in _top_populations(wide, top_k, "_acc"):
                m = kendall_matrix(part, [c for c in wide.columns if c != "_acc"])
                out.append(m.assign(figure="datasets", metric=metric, space=space, hp=hp, dataset="*",
                                    population=population))
        for dataset, part_all in nets.groupby("dataset"):
            for population, part in _top_populations(part_all, top_k):
                m = kendall_matrix(part, metric_columns(part, bins))
                out.append(m.assign(figure="metrics", metric="*", space=space, hp=hp, dataset=dataset,
                                    population=population))
                cols = [c for c in _binned(bins, "ece", "pre") + _binned(bins, "ece", "post")
                        if c in part.columns and part[c].notna().sum() > 1]
                m = kendall_matrix(part, cols)
                m = m[m["row"].str.startswith("pre_") & m["col"].str.startswith("post_")]
                out.append(m.assign(figure="pre_post", metric="ece", space=space, hp=hp, dataset=dataset,
                                    population=population))
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
    nets["bracket"] = pd.cut(nets["channels"], edges, right=False).astype(str)
    return (nets.groupby(["hp", "dataset", "bracket"], observed=True)
            .agg(networks=("arch_index", "size"), accuracy=("accuracy", "mean"),
                 pre_ece_15=("pre_ece_15", "mean"), post_ece_15=("post_ece_15", "mean"))
            .reset_index())


# ---------------------------------------------------------------- plots and report

def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _heatmap(m: pd.DataFrame, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    grid = m.pivot(index="row", columns="col", values="tau")
    rows = list(dict.fromkeys(m["row"]))
    cols = list(dict.fromkeys(m["col"]))
    grid = grid.loc[rows, cols]
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(cols), 0.8 + 0.5 * len(rows)))
    im = ax.imshow(grid.values, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(cols)), [c.removeprefix("pre_") for c in cols], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [r.removeprefix("pre_") for r in rows], fontsize=7)
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid.values[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, fraction=0.04, label="Kendall tau-b")
    ax.set_title(title, fontsize=9)
    _save(fig, path)


def make_plots(df: pd.DataFrame, kendall: pd.DataFrame, hcs_df: pd.DataFrame, settings: Mapping, plots: Path) -> list[tuple[str, Path]]:
    """All plots; titles of a mini-benchmark run say so, since its numbers are not NATS-Bench's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, Path]] = []
    for old in plots.glob("*.png"):  # plots of an earlier configuration must not outlive it
        old.unlink()
    demo = " [mini benchmark: not NATS-Bench results]" if settings["demo"] else ""
    for (figure, metric, space, hp, dataset), m in kendall[kendall["population"] == "all"].groupby(
            ["figure", "metric", "space", "hp", "dataset"]):
        name = f"kendall_{figure}_{metric}_{space}_{hp}_{dataset}".replace("*", "all").replace("-", "_")
        title = {"datasets": f"{metric} across datasets", "metrics": f"metrics, {dataset}",
                 "pre_post": f"ECE pre vs post scaling, {dataset}"}[figure] + f" ({space}, hp {hp})" + demo
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
        fig.suptitle(f"ECE by bin count ({space}, hp {hp}){demo}", fontsize=10)
        made.append((f"ECE by bin count, {space}", _save(fig, plots / f"ece_by_bins_{space}_{hp}.png")))
        for what, ycol in (("ece", "pre_ece_15"), ("hcs", "hcs_1")):
            fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
            source = group if what == "ece" else hcs_df[(hcs_df["space"] == space) & (hcs_df["hp"] == hp)]
            for ax, dataset in zip(axes[0], datasets):
                part = source[source["dataset"] == dataset]
                ax.scatter(part["accuracy"], part[ycol], s=10, alpha=0.7)
                if what == "ece" and "post_ece_15" in part:
                    ax.scatter(part["accuracy"], part["post_ece_15"], s=10, alpha=0.7, marker="x")
                ax.set_xlabel("accuracy")
                ax.set_title(dataset, fontsize=9)
            axes[0][0].set_ylabel("ECE (15 bins; o pre, x post)" if what == "ece" else "HCS (beta = 1)")
            fig.suptitle(f"{what.upper()} against accuracy ({space}, hp {hp}){demo}", fontsize=10)
            made.append((f"{what.upper()} against accuracy, {space}",
                         _save(fig, plots / f"{what}_vs_accuracy_{space}_{hp}.png")))
    return made


def write_report(results: Path, plots: list[tuple[str, Path]], tops: pd.DataFrame, edges: pd.DataFrame,
                 brackets: pd.DataFrame, n_rows: Mapping[str, int], minibench: bool) -> Path:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>calibench report</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
             ".warn{background:#fff3cd;padding:8px;border:1px solid #e0c070}</style></head><body>",
             "<h1>calibench report</h1>"]
    if minibench:
        parts.append("<p class='warn'><b>Mini benchmark:</b> synthetic data and randomly initialised NATS networks "
                     "with fitted heads. These are demo numbers, NOT NATS-Bench results.</p>")
    parts.append("<h2>Tables</h2><ul>" + "".join(
        f"<li>{html.escape(k)}: {v} rows</li>" for k, v in n_rows.items()) + "</ul>")
    parts.append("<h2>Top networks by HCS</h2>" + tops.to_html(index=False, float_format=lambda x: f"{x:.4f}"))
    if not edges.empty:
        parts.append("<h2>TSS: operations on each edge among the top networks by HCS (beta = 1)</h2>"
                     + edges.pivot_table(index=["dataset", "edge"], columns="op", values="count", fill_value=0)
                     .to_html())
    if not brackets.empty:
        parts.append("<h2>SSS: accuracy and ECE by total channel count</h2>"
                     + brackets.to_html(index=False, float_format=lambda x: f"{x:.4f}"))
    parts.append("<h2>Plots</h2>")
    for title, path in plots:
        rel = path.relative_to(results)
        parts.append(f"<h3>{html.escape(title)}</h3><img src='{html.escape(str(rel))}' alt='{html.escape(title)}'>")
    parts.append("</body></html>")
    out = results / "report.html"
    out.write_text("\n".join(parts))
    return out


def run_analysis(settings: Mapping, tables: Sequence[str | Path], results: str | Path) -> dict[str, Path]:
    """``settings``: :func:`calibench.settings.analysis_settings` (analysis, bins, demo)."""
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
    plots = make_plots(df, kendall, hcs_df, settings, results / "plots")
    n_rows = {Path(t).name: pq.ParquetFile(t).metadata.num_rows for t in tables}  # footer only, no second read
    report = write_report(results, plots, tops[["space", "dataset", "arch_index", "arch_str", "accuracy", "pre_ece_15"]
                                                + [f"hcs_{b:g}" for b in betas]],
                          edges, brackets, n_rows, bool(settings["demo"]))
    log.info("analysis written: %s, %d plots", report, len(plots))
    return {"report": report, "kendall": analysis_dir / "kendall.parquet", "hcs": analysis_dir / "hcs.parquet"}
