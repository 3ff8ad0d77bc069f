"""Question 6 across training schedules (Tao et al., ICLR 2024, Fig. 6c): how the
calibration of the same architectures differs between two training schedules ``hp``
(NATS-Bench TSS: 12 against 200 epochs; SSS: 12 against 90), bin count by bin count,
before and after temperature scaling and after any other post-hoc stage in the tables.

Pure functions over the concatenated wide result tables
(:func:`calibench.analysis.tables.load_tables`: one row per (space, hp, dataset, arch_index,
seed), binned metrics in columns ``{stage}_{metric}_{bins}``, e.g. ``pre_ece_15``,
``post_ece_15``). A config gives several schedules per space with a list,
``hp: {tss: ["12", "200"]}``; a space with one schedule has nothing to compare and adds
nothing here.

Which networks. Measured networks only (``arch_index == measured_by``: TSS isomorph
copies would add ties), one seed per (space, hp, dataset, architecture): the lowest, as
the Kendall matrices use (the schedules' seeds differ anyway: TSS hp 12 has 111, hp 200
777). Two schedules are compared on the architectures measured under both (an inner join
on ``arch_index``); an architecture measured under one schedule only is left out.

Per (space, dataset, pair of schedules ``hp_a`` < ``hp_b`` by number of epochs, stage,
metric, bin count) -- one row of :func:`compare_hps`:

* ``n_a``, ``median_a``, ``q25_a``, ``q75_a`` (and the same for ``b``): the metric under
  each schedule over the joined architectures that have a value there (NaN left out);
* ``n``, ``median_diff``, ``q25_diff``, ``q75_diff``, ``share_b_lower``: over the
  architectures with a value under both, the paired difference ``b - a`` (longer schedule
  minus shorter: negative where the longer schedule is better calibrated) and the share of
  architectures whose value is lower under ``b``;
* ``tau``, ``lo``, ``hi``, ``interval``: Kendall tau-b between the two schedules' values
  over the same architectures (:func:`calibench.analysis.stats.kendall_tau`: does the ranking of
  architectures by calibration carry over from one schedule to the other?), with the
  jackknife interval (:func:`calibench.analysis.stats.kendall_jackknife`, default) or the percentile
  bootstrap (:func:`calibench.analysis.stats.kendall_bootstrap`); ``interval`` names the one given,
  null where there is none (fewer than three pairs for the jackknife, an undefined tau).

Quantiles are pandas' (linear interpolation). :func:`plot_hp_comparison` draws the
Fig. 6c-like figure, :func:`findings` the report's sentences, :func:`comparison_html`
a table for the report.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.analysis.findings import FINDING_COLUMNS
from calibench.analysis.tables import nearest_bins
from calibench.analysis.plots import pyplot

__all__ = ["COLUMNS", "schedules", "hp_pairs", "binned_columns", "paired", "compare_hps", "findings",
           "comparison_html", "plot_hp_comparison"]

COLUMNS = ["space", "dataset", "hp_a", "hp_b", "stage", "metric", "bins",
           "n_a", "median_a", "q25_a", "q75_a", "n_b", "median_b", "q25_b", "q75_b",
           "n", "median_diff", "q25_diff", "q75_diff", "share_b_lower", "tau", "lo", "hi", "interval"]
# docs/recalibration.md's stages in report order (calibench.recalibration.STAGES); any other
# stage found in the columns follows, by name.
STAGE_ORDER = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
DATASET_ORDER = ("cifar10", "cifar100", "ImageNet16-120")
SPACE_ORDER = ("tss", "sss")  # the config's order
_KEYS = ["space", "hp", "dataset", "arch_index"]


# ---------------------------------------------------------------- which tables, which columns

def _hp_key(hp: str):
    """Schedules sort by their number of epochs ("12" before "200"), anything else after, by name."""
    return (0, int(hp), hp) if hp.isdigit() else (1, 0, hp)


def _dataset_key(dataset: str):
    return (DATASET_ORDER.index(dataset), "") if dataset in DATASET_ORDER else (len(DATASET_ORDER), dataset)


def schedules(df: pd.DataFrame) -> dict[str, list[str]]:
    """space -> its schedules, shortest first, for every space with two or more in ``df``
    (TSS first)."""
    if df.empty or not {"space", "hp"} <= set(df.columns):
        return {}
    out = {}
    for space, hps in df.groupby("space", sort=True)["hp"]:
        found = sorted({str(h) for h in hps.dropna()}, key=_hp_key)
        if len(found) > 1:
            out[str(space)] = found
    return dict(sorted(out.items(), key=lambda kv: (SPACE_ORDER.index(kv[0]) if kv[0] in SPACE_ORDER else 9, kv[0])))


def hp_pairs(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(space, hp_a, hp_b) for every pair of schedules of a space, ``hp_a`` the shorter."""
    return [(space, a, b) for space, hps in schedules(df).items()
            for i, a in enumerate(hps) for b in hps[i + 1:]]


def binned_columns(df: pd.DataFrame, metric: str = "ece") -> dict[str, list[int]]:
    """stage -> the bin counts of its ``{stage}_{metric}_{bins}`` columns in ``df`` (ascending);
    stages in :data:`STAGE_ORDER`, any other after them by name."""
    pattern = re.compile(rf"^([a-z]+)_{re.escape(metric)}_(\d+)$")
    found: dict[str, set[int]] = {}
    for col in df.columns:
        m = pattern.match(str(col))
        if m:
            found.setdefault(m.group(1), set()).add(int(m.group(2)))
    order = [s for s in STAGE_ORDER if s in found] + sorted(s for s in found if s not in STAGE_ORDER)
    return {s: sorted(found[s]) for s in order}


def _networks(df: pd.DataFrame) -> pd.DataFrame:
    """Measured networks, one row (the lowest seed) per (space, hp, dataset, arch_index); hp as text."""
    nets = df
    if "measured_by" in nets.columns:
        nets = nets[nets["arch_index"] == nets["measured_by"]]
    nets = nets.assign(hp=nets["hp"].astype(str))
    if "seed" in nets.columns:
        nets = nets.sort_values([*_KEYS, "seed"], kind="stable")
    return nets.drop_duplicates(_KEYS, keep="first")


def paired(df: pd.DataFrame, space: str, dataset: str, hp_a: str, hp_b: str,
           columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The architectures of ``space`` and ``dataset`` measured under both schedules (first
    seed each), joined on ``arch_index``: column ``arch_index``, then ``{column}@{hp}`` for
    each of ``columns`` (default: every binned ECE column) under ``hp_a`` then ``hp_b``;
    sorted by ``arch_index``."""
    if columns is None:
        columns = [f"{s}_ece_{b}" for s, bins in binned_columns(df).items() for b in bins]
    columns = list(columns)
    nets = _networks(df[(df["space"] == space) & (df["dataset"] == dataset)])
    sides = []
    for hp in (str(hp_a), str(hp_b)):
        side = nets[nets["hp"] == hp].set_index("arch_index")[columns]
        sides.append(side.rename(columns={c: f"{c}@{hp}" for c in columns}))
    joined = sides[0].join(sides[1], how="inner").sort_index()
    joined.index.name = "arch_index"
    return joined.reset_index()


# ---------------------------------------------------------------- the comparison

def _quartiles(v: pd.Series) -> tuple[int, float, float, float]:
    v = v.dropna()
    if v.empty:
        return 0, math.nan, math.nan, math.nan
    return len(v), float(v.median()), float(v.quantile(0.25)), float(v.quantile(0.75))


def _tau(a: np.ndarray, b: np.ndarray, interval: str, level: float, resamples: int, seed: int):
    if interval == "jackknife":
        tau, lo, hi = stats.kendall_jackknife(a, b, level)
    elif interval == "bootstrap":
        tau, lo, hi = stats.kendall_bootstrap(a, b, resamples, seed, level)
    else:
        raise ValueError(f"interval must be 'jackknife' or 'bootstrap', got {interval!r}")
    named = interval if not (math.isnan(lo) or math.isnan(hi)) else None
    return float(tau), float(lo), float(hi), named


def compare_hps(df: pd.DataFrame, metric: str = "ece", stages: Sequence[str] | None = None,
                bins: Sequence[int] | None = None, level: float = 0.95, interval: str = "jackknife",
                resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per (space, dataset, hp_a, hp_b, stage, bins) of :data:`COLUMNS` (module
    docstring), for every space with two or more schedules and every dataset measured under
    both of a pair; empty (with those columns) when no space has two. ``stages`` and
    ``bins`` restrict the stages and bin counts (default: every ``{stage}_{metric}_{bins}``
    column of ``df``); ``interval``: "jackknife" (default, cheap) or "bootstrap"
    (``resamples``, ``seed``)."""
    rows = []
    pairs = hp_pairs(df)
    if pairs:
        columns = binned_columns(df, metric)
        if stages is not None:
            columns = {s: b for s, b in columns.items() if s in set(stages)}
        if bins is not None:
            wanted = {int(b) for b in bins}
            columns = {s: [b for b in bs if b in wanted] for s, bs in columns.items()}
        names = [f"{s}_{metric}_{b}" for s, bs in columns.items() for b in bs]
        for space, hp_a, hp_b in pairs:
            in_space = df[df["space"] == space]
            datasets = sorted(set(in_space.loc[in_space["hp"].astype(str) == hp_a, "dataset"])
                              & set(in_space.loc[in_space["hp"].astype(str) == hp_b, "dataset"]), key=_dataset_key)
            for dataset in datasets:
                joined = paired(df, space, dataset, hp_a, hp_b, names)
                if joined.empty:
                    continue
                for stage, bs in columns.items():
                    for b in bs:
                        col = f"{stage}_{metric}_{b}"
                        a, z = joined[f"{col}@{hp_a}"].astype(float), joined[f"{col}@{hp_b}"].astype(float)
                        n_a, med_a, q25_a, q75_a = _quartiles(a)
                        n_b, med_b, q25_b, q75_b = _quartiles(z)
                        diff = (z - a)[a.notna() & z.notna()]
                        n, med_d, q25_d, q75_d = _quartiles(diff)
                        tau, lo, hi, named = _tau(a.to_numpy(), z.to_numpy(), interval, level, resamples, seed)
                        rows.append({"space": space, "dataset": dataset, "hp_a": hp_a, "hp_b": hp_b,
                                     "stage": stage, "metric": metric, "bins": int(b),
                                     "n_a": n_a, "median_a": med_a, "q25_a": q25_a, "q75_a": q75_a,
                                     "n_b": n_b, "median_b": med_b, "q25_b": q25_b, "q75_b": q75_b,
                                     "n": n, "median_diff": med_d, "q25_diff": q25_d, "q75_diff": q75_d,
                                     "share_b_lower": float((diff < 0).mean()) if n else math.nan,
                                     "tau": tau, "lo": lo, "hi": hi, "interval": named})
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.astype({"n_a": "int64", "n_b": "int64", "n": "int64", "bins": "int64"})


# ---------------------------------------------------------------- report

def _ordered(part: pd.DataFrame, stages: Sequence[str]) -> pd.DataFrame:
    """Rows by space, pair, dataset (cifar10, cifar100, ImageNet16-120 first), stage as in
    ``stages``, bin count."""
    datasets = {d: i for i, d in enumerate(sorted(set(part["dataset"]), key=_dataset_key))}
    order = part.assign(_d=part["dataset"].map(datasets), _s=part["stage"].map({s: i for i, s in enumerate(stages)}),
                        _p=part["space"].map(lambda s: SPACE_ORDER.index(s) if s in SPACE_ORDER else len(SPACE_ORDER)),
                        _a=part["hp_a"].map(lambda h: _hp_key(h)[1]), _b=part["hp_b"].map(lambda h: _hp_key(h)[1]))
    return order.sort_values(["_p", "space", "_a", "hp_a", "_b", "hp_b", "_d", "_s", "bins"], kind="stable").drop(
        columns=["_d", "_s", "_p", "_a", "_b"])


def findings(comparison: pd.DataFrame, bins: Sequence[int] | None = None,
             stages: Sequence[str] = ("pre", "post"), *, min_networks: int) -> pd.DataFrame:
    """The report's question-6 sentences on the schedules (``calibench.analysis.findings.FINDING_COLUMNS``),
    one per (space, dataset, pair, stage) at the bin count nearest 15 among ``bins``
    (default: those of ``comparison``): the two medians, the median paired difference and
    tau with its interval. ``hp`` reads "12 vs 200"; ``value`` is tau. Below ``min_networks``
    architectures (``analysis.min_networks``) tau has no interval: "too few networks to decide"."""
    if comparison.empty:
        return pd.DataFrame(columns=FINDING_COLUMNS)
    b = nearest_bins(list(bins) if bins else sorted(set(comparison["bins"])))
    part = _ordered(comparison[(comparison["bins"] == b) & comparison["stage"].isin(list(stages))], stages)
    rows = []
    for r in part.itertuples():
        few = r.n < min_networks
        ci = "" if few or r.interval is None or pd.isna(r.interval) else f" [{r.lo:.2f}, {r.hi:.2f}] ({r.interval})"
        ci += f", {stats.too_few(r.n)}" if few else ""
        tau = "n/a" if math.isnan(r.tau) else f"{r.tau:.2f}"
        text = (f"{r.stage} {r.metric.upper()} ({b} bins), {r.space} hp {r.hp_a} against hp {r.hp_b}, {r.dataset}: "
                f"median {r.median_a:.3f} against {r.median_b:.3f}, median paired difference {r.median_diff:+.3f} "
                f"(lower under hp {r.hp_b} for {100 * r.share_b_lower:.0f} % of {r.n} architectures); "
                f"tau {tau}{ci}")
        rows.append({"question": "q6", "space": r.space, "hp": f"{r.hp_a} vs {r.hp_b}", "dataset": r.dataset,
                     "text": text, "value": float(r.tau), "lo": np.nan if few else float(r.lo),
                     "hi": np.nan if few else float(r.hi),
                     "interval": None if few or r.interval is None or pd.isna(r.interval) else r.interval})
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def _tau_cell(tau: float, lo: float, hi: float) -> str:
    if math.isnan(tau):
        return ""
    return f"{tau:.2f}" + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")


def comparison_html(comparison: pd.DataFrame, stages: Sequence[str] = ("pre", "post")) -> str:
    """An HTML table of :func:`compare_hps` for the report (``stages`` only; every bin count):
    median [IQR] under each schedule, the median paired difference, tau [interval], n. Empty
    when there is nothing to compare."""
    part = comparison[comparison["stage"].isin(list(stages))]
    if part.empty:
        return ""

    def q(m, lo, hi):
        return "" if math.isnan(m) else f"{m:.4f} [{lo:.4f}, {hi:.4f}]"

    part = _ordered(part, stages)
    blocks = []
    for space, hp_a, hp_b in dict.fromkeys(zip(part["space"], part["hp_a"], part["hp_b"])):
        group = part[(part["space"] == space) & (part["hp_a"] == hp_a) & (part["hp_b"] == hp_b)]
        shown = pd.DataFrame({
            "dataset": group["dataset"], "stage": group["stage"], "bins": group["bins"],
            f"hp {hp_a}: median [IQR]": [q(*v) for v in zip(group["median_a"], group["q25_a"], group["q75_a"])],
            f"hp {hp_b}: median [IQR]": [q(*v) for v in zip(group["median_b"], group["q25_b"], group["q75_b"])],
            f"median of hp {hp_b} - hp {hp_a}": [("" if math.isnan(v) else f"{v:+.4f}") for v in group["median_diff"]],
            "tau [interval]": [_tau_cell(t, lo, hi) for t, lo, hi in zip(group["tau"], group["lo"], group["hi"])],
            "n": group["n"],
        })
        metric = str(group["metric"].iloc[0]).upper()
        blocks.append(f"<h3>{html.escape(f'{space}: {metric} under hp {hp_a} against hp {hp_b}, same architectures')}"
                      f"</h3>" + shown.to_html(index=False, escape=True))
    return "".join(blocks)


# ---------------------------------------------------------------- the figure

_HP_COLOURS = ("#d95f02", "#1b9e77", "#7570b3", "#e7298a")
_STAGE_STYLES = {"pre": ("-", "o"), "post": ("--", "s")}


def plot_hp_comparison(table: pd.DataFrame, path: str | Path, metric: str = "ece",
                       stages: Sequence[str] = ("pre", "post"), demo: bool = False) -> Path | None:
    """Fig. 6c-like: ``metric`` against bin count, one line per (schedule, stage) -- the
    median over the architectures measured under every schedule of the space, with the
    interquartile range shaded -- one panel per dataset, one row per space with two or more
    schedules. ``table``: the concatenated wide tables. Returns ``path``, or None, writing
    nothing, when no space has two schedules (or no architecture is measured under all of a
    space's schedules)."""
    spaces = schedules(table)
    if not spaces:
        return None
    columns = binned_columns(table, metric)
    stages = [s for s in stages if s in columns]
    if not stages:
        return None
    panels = []
    for space, hps in spaces.items():
        nets = _networks(table[table["space"] == space])
        datasets = sorted(set.intersection(*(set(nets.loc[nets["hp"] == hp, "dataset"]) for hp in hps)),
                          key=_dataset_key)
        for dataset in datasets:
            part = nets[nets["dataset"] == dataset]
            shared = set.intersection(*(set(part.loc[part["hp"] == hp, "arch_index"]) for hp in hps))
            if shared:
                panels.append((space, hps, dataset, part[part["arch_index"].isin(shared)], len(shared)))
    if not panels:
        return None
    plt = pyplot()

    rows = list(dict.fromkeys(p[0] for p in panels))
    ncols = max(sum(1 for p in panels if p[0] == space) for space in rows)
    fig, axes = plt.subplots(len(rows), ncols, figsize=(4.6 * ncols, 3.6 * len(rows)), squeeze=False)
    used = set()
    for space in rows:
        r = rows.index(space)
        for c, (_, hps, dataset, part, n) in enumerate(p for p in panels if p[0] == space):
            ax = axes[r][c]
            used.add((r, c))
            for k, hp in enumerate(hps):
                colour = _HP_COLOURS[k % len(_HP_COLOURS)]
                sub = part[part["hp"] == hp]
                for stage in stages:
                    bins = columns[stage]
                    values = [sub[f"{stage}_{metric}_{b}"].astype(float).dropna() for b in bins]
                    med = np.array([v.median() if len(v) else np.nan for v in values])
                    lo = np.array([v.quantile(0.25) if len(v) else np.nan for v in values])
                    hi = np.array([v.quantile(0.75) if len(v) else np.nan for v in values])
                    style, marker = _STAGE_STYLES.get(stage, (":", "^"))
                    ax.plot(bins, med, linestyle=style, marker=marker, markersize=4, color=colour,
                            label=f"hp {hp}, {stage}")
                    ax.fill_between(bins, lo, hi, color=colour, alpha=0.12 if stage == "pre" else 0.07, linewidth=0)
            all_bins = sorted({b for s in stages for b in columns[s]})
            ax.set_xscale("log")
            ax.set_xticks(all_bins, [str(b) for b in all_bins], fontsize=7)
            ax.minorticks_off()
            ax.set_xlabel("bins")
            ax.set_ylabel(f"{metric.upper()} (median, IQR shaded)", fontsize=8)
            ax.set_title(f"{space}, {dataset}: {n} architectures", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best")
    for r in range(len(rows)):
        for c in range(ncols):
            if (r, c) not in used:
                axes[r][c].set_visible(False)
    marker = " [mini benchmark: not NATS-Bench results]" if demo else ""
    fig.suptitle(f"{metric.upper()} by bin count across training schedules, same architectures "
                 f"(Fig. 6c){marker}", fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the schedules part



def run(settings, tables, results: Path, plots: Path) -> dict:
    """The schedules part (only in a run with two or more schedules of a space):
    ``analysis/hp_comparison.parquet``/``.csv`` (:func:`compare_hps`, jackknife intervals at
    ``settings["level"]``), Fig. 6c under ``plots/schedules/`` and the report's table."""
    from calibench.analysis.tables import KEYS, load_tables
    from calibench.analysis.registry import output_path
    from calibench.vocabulary import NATS_SPACES

    binned = re.compile(r"^[a-z]+_ece_\d+$")
    df = load_tables(tables, lambda c: c in KEYS or bool(binned.match(c)))
    nats = df[df["space"].isin(NATS_SPACES)] if not df.empty else df
    comparison = compare_hps(nats, level=settings["level"])
    comparison.to_parquet(output_path(results, "schedules", "comparison"), index=False)
    comparison.to_csv(output_path(results, "schedules", "comparison_csv"), index=False)
    path = plot_hp_comparison(nats, plots / "hp_comparison.png", demo=bool(settings["demo"])) if not nats.empty \
        else None
    made = [("ECE by bin count across training schedules, same architectures (Fig. 6c)", path)] if path else []
    return {"plots": made, "blocks": [("q6", 20, comparison_html(comparison))]}
