"""Which NATS-Bench architectures gain most from which post-hoc method (docs/analysis.md,
"Which architectures gain most from a method"): per table and method, each network's gain in
ECE, ``pre_ece_B - {method}_ece_B`` (B the bin count nearest 15; positive: the method lowers
its ECE), regressed by least squares on its architecture:

* TSS: the operation on each of the six edges, one indicator per (edge, operation), ``none``
  each edge's reference (24 features): a coefficient is the gain's difference between that
  operation and ``none`` on that edge, the other edges held fixed;
* SSS: the five layers' channel counts in steps of 8 (5 features): a coefficient is the
  gain's change per 8 more channels in that layer, the other layers held fixed.

Intervals: heteroskedasticity-robust standard errors (HC3, MacKinnon & White 1985), Student t
with n - p degrees of freedom, at the configured level. A feature's verdict ("more gain",
"less gain") needs its Holm-adjusted p-value, over the features of one table and method,
below 1 - level; else "undecided". A regression on fewer than ``min_networks`` networks, on
no more networks than coefficients, or with collinear features decides nothing and reports
no coefficient (its ``note`` says why). A feature constant over the table (an operation no
network has on an edge) is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis.nats.architecture_figures import DATASET_ORDER
from calibench.analysis.tables import STAGE_NAMES, STAGES, first_seed, measured, nearest_bins
from calibench.results.archstr import EDGE_NAMES, TSS_OPS, parse_sss, tss_edge_ops

REFERENCE_OP = "none"
COLUMNS = ["space", "hp", "dataset", "stage", "metric", "feature", "n", "p", "r2", "mean_gain", "coef", "se", "low",
           "high", "p_value", "p_holm", "verdict", "note"]


def architecture_features(space: str, arch_strs: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """The regressors of ``arch_strs`` (no intercept) and their names (module docstring)."""
    if space == "tss":
        names = [f"edge {edge}: {op}" for edge in EDGE_NAMES for op in TSS_OPS if op != REFERENCE_OP]
        ops = [tss_edge_ops(a) for a in arch_strs]
        x = np.array([[float(o[e] == op) for e, _ in enumerate(EDGE_NAMES) for op in TSS_OPS if op != REFERENCE_OP]
                      for o in ops]).reshape(len(arch_strs), len(names))
        return x, names
    if space == "sss":
        x = np.array([parse_sss(a) for a in arch_strs], dtype=float).reshape(len(arch_strs), 5) / 8.0
        return x, [f"layer {i + 1}: channels / 8" for i in range(5)]
    raise ValueError(f"no architecture features for space {space!r} (tss, sss)")


def ols_hc3(x: np.ndarray, y: np.ndarray) -> dict:
    """Least squares of ``y`` on ``x`` (its first column the intercept, full column rank,
    more rows than columns): coefficients, HC3 standard errors, residual degrees of freedom
    and R^2. A row of leverage 1 gives infinite standard errors."""
    n, p = x.shape
    xtx_inv = np.linalg.inv(x.T @ x)
    coef = xtx_inv @ (x.T @ y)
    resid = y - x @ coef
    leverage = np.einsum("ij,jk,ik->i", x, xtx_inv, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(leverage < 1 - 1e-12, resid ** 2 / (1 - leverage) ** 2, np.inf)
    if np.isinf(weight).any():
        se = np.full(p, np.inf)
    else:
        cov = xtx_inv @ (x.T * weight) @ x @ xtx_inv
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / total if total > 0 else np.nan
    return {"coef": coef, "se": se, "df": n - p, "r2": r2}


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def _one(x: np.ndarray, names: list[str], y: np.ndarray, level: float, min_networks: int) -> tuple[list[dict], str]:
    """Rows (feature, coef, interval, verdict) of one regression, and its note ("" if decided)."""
    from scipy import stats

    keep = x.std(axis=0) > 0
    x, names = x[:, keep], [n for n, k in zip(names, keep) if k]
    design = np.column_stack([np.ones(len(y)), x])
    n, p = design.shape
    blank = [{"feature": f, "coef": np.nan, "se": np.nan, "low": np.nan, "high": np.nan, "p_value": np.nan,
              "p_holm": np.nan, "verdict": "undecided"} for f in names]
    if n < max(int(min_networks), 1):
        return blank, f"too few networks to decide (n = {n}, fewer than min_networks = {int(min_networks)})"
    if n <= p:
        return blank, f"too few networks to decide (n = {n} networks for {p} coefficients)"
    rank = np.linalg.matrix_rank(design)
    if rank < p:
        return blank, f"collinear features (rank {rank} of {p} coefficients): nothing decided"
    fit = ols_hc3(design, y)
    q = stats.t.ppf(0.5 + level / 2, fit["df"])
    coef, se = fit["coef"][1:], fit["se"][1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        p_value = np.where(se > 0, 2 * stats.t.sf(np.abs(coef / se), fit["df"]), np.where(coef == 0, 1.0, 0.0))
    p_holm = holm(p_value)
    rows = []
    for f, c, s, pv, ph in zip(names, coef, se, p_value, p_holm):
        verdict = "undecided" if not ph < 1 - level else ("more gain" if c > 0 else "less gain")
        rows.append({"feature": f, "coef": c, "se": s, "low": c - q * s, "high": c + q * s, "p_value": pv,
                     "p_holm": ph, "verdict": verdict})
    return [{**r, "r2": fit["r2"]} for r in rows], ""


def method_gains(df: pd.DataFrame, bins: Sequence[int], level: float = 0.95, min_networks: int = 0) -> pd.DataFrame:
    """One row per (space, hp, dataset, method, feature) of the NATS-Bench tables in ``df``
    (measured networks, first seed): :data:`COLUMNS` (module docstring)."""
    b = nearest_bins(bins)
    rows = []
    if df.empty or "arch_str" not in df.columns:
        return pd.DataFrame(columns=COLUMNS)
    nets = first_seed(measured(df[df["space"].isin(["tss", "sss"])]))
    methods = [s for s in STAGES if s != "pre" and f"{s}_ece_{b}" in nets.columns]
    for (space, hp, dataset), part in nets.groupby(["space", "hp", "dataset"]):
        x_all, names = architecture_features(space, list(part["arch_str"]))
        for stage in methods:
            gain = (part[f"pre_ece_{b}"] - part[f"{stage}_ece_{b}"]).to_numpy(dtype=float)
            ok = np.isfinite(gain)
            if not ok.any():
                continue
            found, note = _one(x_all[ok], names, gain[ok], level, min_networks)
            n = int(ok.sum())
            for r in found:
                rows.append({"space": space, "hp": str(hp), "dataset": dataset, "stage": stage,
                             "metric": f"ece_{b}", "n": n, "p": len(found) + 1, "r2": r.pop("r2", np.nan),
                             "mean_gain": float(gain[ok].mean()), **r, "note": note})
    return pd.DataFrame(rows, columns=COLUMNS)


def findings(gains: pd.DataFrame) -> list[dict]:
    """Question 7 for the post-hoc methods, one finding per table: for each method whose gain a
    feature decides, its largest decided coefficient with its interval; the methods left
    undecided, and why where nothing is decided. The finding's number: the largest decided
    coefficient of the table (NaN where none is)."""
    from calibench.analysis.findings import finding_row

    out = []
    for (space, hp, dataset), table in gains.groupby(["space", "hp", "dataset"], sort=False):
        bins = table["metric"].iloc[0].rpartition("_")[2]
        head = f"{space.upper()} hp {hp}, {dataset}: the gain in ECE ({bins} bins) from each method by architecture"
        decided = table[table["verdict"] != "undecided"]
        if decided.empty:
            note = table["note"].iloc[0]
            out.append(finding_row("q7", space, hp, dataset, f"{head}: no feature decides for any method — "
                                   + (note or f"n = {int(table['n'].max())}, every Holm-adjusted p above the level")))
            continue
        said, best = [], None
        for stage in [s for s in STAGES if s in set(decided["stage"])]:
            rows = decided[decided["stage"] == stage]
            top = rows.loc[rows["coef"].abs().idxmax()]
            said.append(f"{stage} most with {top['feature']} ({top['coef']:+.4f} [{top['low']:+.4f}, "
                        f"{top['high']:+.4f}], n = {int(top['n'])})")
            best = top if best is None or abs(top["coef"]) > abs(best["coef"]) else best
        rest = [s for s in dict.fromkeys(table["stage"]) if s not in set(decided["stage"])]
        out.append(finding_row("q7", space, hp, dataset, f"{head}: " + "; ".join(said)
                               + (f"; no feature decides for {', '.join(rest)}" if rest else ""),
                               best["coef"], best["low"], best["high"], "HC3"))
    return out


def _lines(space: str, hp: str, dataset: str, table: pd.DataFrame) -> list[dict]:
    """The report table's rows of one result table: a method each."""
    lines = []
    for stage, part in table.groupby("stage", sort=False):
        decided = part[part["verdict"] != "undecided"].sort_values("coef", ascending=False)
        said = "; ".join(f"{r.feature} {r.coef:+.4f} [{r.low:+.4f}, {r.high:+.4f}]" for r in decided.itertuples())
        first = part.iloc[0]
        why = f"undecided: {first['note']}" if first["note"] else "undecided"
        lines.append({"table": f"{space} {hp} {dataset}", "method": f"{stage} ({STAGE_NAMES.get(stage, stage)})",
                      "n": int(first["n"]), "R²": "" if pd.isna(first["r2"]) else f"{first['r2']:.3f}",
                      "mean gain": f"{first['mean_gain']:+.4f}",
                      "features that decide (coefficient, interval)": said or why})
    return lines


def gains_html(gains: pd.DataFrame, level: float) -> str:
    """The report's table: per table and method, n, R^2, the mean gain and the decided
    features, largest first; "undecided" with its reason where nothing is (one line for a
    table where no method can decide, for one reason)."""
    if gains.empty:
        return ""
    lines = []
    for (space, hp, dataset), table in gains.groupby(["space", "hp", "dataset"], sort=False):
        notes = set(table["note"])
        if len(notes) == 1 and notes != {""}:
            lines.append({"table": f"{space} {hp} {dataset}", "method": f"all {table['stage'].nunique()}",
                          "n": int(table["n"].max()), "R²": "", "mean gain": "",
                          "features that decide (coefficient, interval)": f"undecided: {notes.pop()}"})
        else:
            lines += _lines(space, hp, dataset, table)
    metric = gains["metric"].iloc[0]
    return (f"<h3>Which architectures gain most from each method</h3><p>The gain is pre ECE minus the method's "
            f"ECE ({metric.rpartition('_')[2]} bins; positive: the method lowers it), regressed on the architecture "
            f"(TSS: the operation on each edge against <code>none</code>; SSS: each layer's channels in steps of 8). "
            f"Intervals at {level:.0%} (HC3); a feature decides where its Holm-adjusted p-value is below "
            f"{1 - level:.2g}. All coefficients: <code>analysis/method_gains.parquet</code>.</p>"
            + pd.DataFrame(lines).to_html(index=False, escape=True))


def plot_gains(gains: pd.DataFrame, plots: Path, suffix: str = "") -> list[tuple[str, Path]]:
    """Per (space, hp): the coefficients as a features x methods heatmap, one panel per
    dataset, decided cells marked with a dot; nothing where no coefficient was estimated."""
    from calibench.analysis.plots import pyplot, save

    made = []
    for (space, hp), fam in gains.dropna(subset=["coef"]).groupby(["space", "hp"]):
        plt = pyplot()
        datasets = sorted(dict.fromkeys(fam["dataset"]), key=lambda d: (DATASET_ORDER.index(d) if d in DATASET_ORDER
                                                                        else len(DATASET_ORDER), d))
        features = list(dict.fromkeys(fam["feature"]))
        stages = [s for s in STAGES if s in set(fam["stage"])]
        limit = float(np.nanmax(np.abs(fam["coef"]))) or 1.0
        fig, axes = plt.subplots(1, len(datasets), squeeze=False, sharey=True,
                                 figsize=(1.6 + 0.5 * len(stages) * len(datasets), 1.5 + 0.28 * len(features)))
        im = None
        for ax, dataset in zip(axes[0], datasets):
            part = fam[fam["dataset"] == dataset]
            grid = part.pivot(index="feature", columns="stage", values="coef").reindex(index=features, columns=stages)
            im = ax.imshow(grid.to_numpy(dtype=float), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
            decided = part[part["verdict"] != "undecided"]
            ax.scatter([stages.index(s) for s in decided["stage"]], [features.index(f) for f in decided["feature"]],
                       s=8, c="black")
            ax.set_xticks(range(len(stages)), stages, fontsize=7)
            ax.set_yticks(range(len(features)), features, fontsize=7)
            ax.set_title(f"{dataset} (n = {int(part['n'].max())})", fontsize=8)
        fig.colorbar(im, ax=axes, fraction=0.03, label="gain in ECE per feature (dot: decided)")
        fig.suptitle(f"Which {space.upper()} architectures gain most from each method (hp {hp}){suffix}", fontsize=9)
        path = plots / f"method_gains_{space}_{hp}.png"
        save(fig, path, layout=False)
        made.append((f"{space.upper()} hp {hp}: gain in ECE from each method by architecture feature", path))
    return made
