"""The architecture part: which NATS-Bench architectures are well calibrated (Tao et al.,
ICLR 2024, question 7, Figs. 7-10).

Outputs (under ``{results}/analysis/``):

* ``tss_edge_ops.parquet``: TSS, how often each operation sits on each edge among the top
  ``analysis.top_n`` networks by HCS (the first beta) per table (Fig. 10);
* ``sss_size_brackets.parquet``: SSS, mean ECE (pre, post) and accuracy by total channel
  count bracket (Fig. 7);
* ``tss_kernel_parameters.parquet``, ``sss_width_progression.parquet`` and their plots
  (Figs. 8 left and 9, :mod:`calibench.analysis.nats.architecture_figures`) under
  ``plots/architecture/``; the report's tables of edge operations and size brackets;
* ``method_gains.parquet``: which architectures gain most from each post-hoc method, the
  gain in ECE regressed on architecture features, with intervals and verdicts, its report
  table and heatmaps (:mod:`calibench.analysis.nats.method_gains`).

The question-7 findings are the report's (:func:`findings` builds the kernel and width ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from calibench.analysis.findings import finding_row
from calibench.analysis.hcs import COLUMNS as HCS_COLUMNS
from calibench.analysis.hcs import hcs_table
from calibench.analysis.nats import architecture_figures as af
from calibench.analysis.nats import method_gains as mg
from calibench.results.archstr import EDGE_NAMES, parse_sss, tss_edge_ops
from calibench.analysis.tables import STAGES, demo_suffix, first_seed, load_tables, measured, nearest_bins
from calibench.analysis.registry import output_path
from calibench.analysis.stats import too_few
from calibench.vocabulary import NATS_SPACES

SIZE_EDGES = [0, 80, 120, 160, 200, 240, 280, 321]  # total channels of the five layers: 40 .. 320


def edge_op_frequency(hcs_df: pd.DataFrame, top_n: int, beta: float) -> pd.DataFrame:
    """TSS: how often each operation sits on each edge among the top n measured networks by
    HCS (Fig. 10; ``hcs_df``: :func:`calibench.analysis.hcs.hcs_table`); ``networks``: the
    measured networks of the table (all of them are counted where it holds no more than n)."""
    rows = []
    col = f"hcs_{beta:g}"
    for (hp, dataset), part in hcs_df[hcs_df["space"] == "tss"].groupby(["hp", "dataset"]):  # measured rows only
        top = part.nlargest(top_n, col)
        for arch in top["arch_str"]:
            for edge, op in zip(EDGE_NAMES, tss_edge_ops(arch)):
                rows.append({"hp": hp, "dataset": dataset, "edge": edge, "op": op, "networks": len(part)})
    if not rows:
        return pd.DataFrame(columns=["hp", "dataset", "edge", "op", "networks", "count"])
    return pd.DataFrame(rows).value_counts().rename("count").reset_index()


def size_brackets(df: pd.DataFrame) -> pd.DataFrame:
    """SSS: mean ECE (pre, post) and accuracy by total channel count bracket (Fig. 7), over the
    measured networks (one row each, its first seed, as the Kendall matrices use)."""
    nets = first_seed(measured(df[df["space"] == "sss"])).copy()
    if nets.empty:
        return pd.DataFrame()
    nets["channels"] = [sum(parse_sss(a)) for a in nets["arch_str"]]
    nets["bracket"] = pd.cut(nets["channels"], SIZE_EDGES, right=False)  # categorical: numeric order
    return (nets.groupby(["hp", "dataset", "bracket"], observed=True)
            .agg(networks=("arch_index", "size"), accuracy=("accuracy", "mean"),
                 pre_ece_15=("pre_ece_15", "mean"), post_ece_15=("post_ece_15", "mean"))
            .reset_index().astype({"bracket": str}))


def edges_html(edges: pd.DataFrame) -> str:
    if edges.empty:
        return ""
    return ("<h3>TSS: operations on each edge among the top networks by HCS (beta = 1)</h3>"
            + edges.pivot_table(index=["dataset", "edge"], columns="op", values="count", fill_value=0).to_html())


def brackets_html(brackets: pd.DataFrame) -> str:
    if brackets.empty:
        return ""
    return ("<h3>SSS: accuracy and ECE by total channel count</h3>"
            + brackets.to_html(index=False, float_format=lambda x: f"{x:.4f}"))


def few_networks(n: int, min_networks: int) -> str:
    """The caveat of a question-7 finding on fewer than ``min_networks`` networks, or ""."""
    return f" — {too_few(n)}" if int(n) < int(min_networks) else ""


def findings(kernel: pd.DataFrame, width: pd.DataFrame, bins: Sequence[int], min_networks: int = 0) -> list[dict]:
    """Question 7 from Figs. 8 and 9: the median pre ECE at the fewest against the most cell
    kernel parameters (TSS), and the pre ECE of the narrowest against the widest uniform
    network (SSS), per (hp, dataset); rows of :func:`calibench.analysis.findings.finding_row`,
    each naming its networks and reading "too few networks" below ``min_networks``."""
    b = nearest_bins(bins)
    found = []
    if not kernel.empty:
        for (hp, dataset), part in kernel[kernel["stage"] == "pre"].dropna(subset=["median"]).groupby(
                ["hp", "dataset"]):
            lo, hi = part.loc[part["kernel_params"].idxmin()], part.loc[part["kernel_params"].idxmax()]
            found.append(finding_row("q7", "tss", hp, dataset,
                                     f"TSS hp {hp}, {dataset}: median pre ECE ({b} bins) {lo['median']:.3f} at "
                                     f"{int(lo['kernel_params'])} cell kernel parameters ({int(lo['n'])} networks) "
                                     f"against {hi['median']:.3f} at {int(hi['kernel_params'])} ({int(hi['n'])})"
                                     + few_networks(min(lo["n"], hi["n"]), min_networks),
                                     hi["median"] - lo["median"]))
    col = f"pre_ece_{b}"
    if col in width.columns:
        for (hp, dataset), part in width.dropna(subset=[col]).groupby(["hp", "dataset"]):
            if len(part) < 2:
                continue
            first, last = part.iloc[0], part.iloc[-1]
            found.append(finding_row("q7", "sss", hp, dataset,
                                     f"SSS hp {hp}, {dataset}: pre ECE ({b} bins) {first[col]:.3f} at width "
                                     f"{int(first['width'])} against {last[col]:.3f} at width {int(last['width'])} "
                                     f"(accuracy {first['accuracy']:.3f} → {last['accuracy']:.3f}; {len(part)} widths, "
                                     f"one network each)" + few_networks(len(part), min_networks),
                                     last[col] - first[col]))
    return found


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``architecture``."""
    bins = settings["bins"]
    b = nearest_bins(bins)
    wanted = {*HCS_COLUMNS, "measured_by", *(f"{s}_ece_{b}" for s in STAGES)}
    df = load_tables(tables, wanted)
    nats = df[df["space"].isin(NATS_SPACES)] if not df.empty else df
    beta = settings["analysis"]["hcs_betas"][0]
    edges = edge_op_frequency(hcs_table(nats, [beta]), settings["analysis"]["top_n"], beta)
    edges.to_parquet(output_path(results, "architecture", "edges"), index=False)
    brackets = size_brackets(nats)
    brackets.to_parquet(output_path(results, "architecture", "brackets"), index=False)
    suffix = demo_suffix(settings)
    made = []
    kernel = af.kernel_parameter_table(nats, bins)
    kernel.to_parquet(output_path(results, "architecture", "kernel"), index=False)
    path = af.plot_kernel_parameters(kernel, plots / "kernel_parameters_tss.png", suffix=suffix)
    if path is not None:
        made.append(("TSS: ECE by cell kernel parameters (Fig. 8)", path))
    width = af.width_progression_table(nats, bins=bins)
    width.to_parquet(output_path(results, "architecture", "width"), index=False)
    path = af.plot_width_progression(width, plots / "width_progression_sss.png", suffix=suffix)
    if path is not None:
        made.append(("SSS: ECE and accuracy of the uniform-width networks 8:8:8:8:8 … 64:64:64:64:64 (Fig. 9)", path))
    gains = mg.method_gains(nats, bins, level=settings["level"], min_networks=settings["min_networks"])
    gains.to_parquet(output_path(results, "architecture", "gains"), index=False)
    made += mg.plot_gains(gains, plots, suffix=suffix)
    return {"plots": made, "blocks": [("q7", 20, edges_html(edges) + brackets_html(brackets)
                                       + mg.gains_html(gains, settings["level"]))]}
