"""The post-hoc method analysis (calibench.analysis.kendall, methods and the report): question 4 for every method, the
per-method distribution table, the win shares and margins, the plots and the report,
on small synthetic wide tables with failed fits (NaN) and infinite NLLs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, rankdata, wilcoxon

from calibench.analysis import kendall as ak
from calibench.analysis import methods as am
from calibench.analysis import tables as at
from calibench.report.assemble import run_analysis
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS

BINS = [5, 15, 50]
ALL_STAGES = list(at.STAGES)
BINNED = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
UNBINNED = ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "nll", "brier", "accuracy", "mean_conf_correct",
            "mean_conf_incorrect")
HP = {"tss": "200", "sss": "90"}


def settings(demo=False, top_k=(10,)):
    return {"analysis": {"hcs_betas": [1, 2], "top_k": list(top_k), "top_n": 3}, "bins": list(BINS), "demo": demo}


def wide_table(rng: np.random.Generator, space: str, dataset: str, n: int, stages, copies: int = 0,
               full: bool = True) -> pd.DataFrame:
    """A wide result table as calibench.results.tables builds it: ``n`` measured networks (and, for
    TSS, ``copies`` isomorph rows repeating networks 0, 1, ...), every metric of every stage
    (``full``; else only those the method analysis reads, for faster plots), fitted-parameter
    columns, failed fits (a stage all NaN for a network), infinite NLLs of iso/hist,
    accuracy unchanged by post and spline (exact ties) and some exact ECE ties."""
    binned = BINNED if full else ("ece", "cwce", "ace", "tace")
    unbinned = UNBINNED if full else ("ksce", "nll", "brier", "accuracy")
    rows = []
    for i in range(n):
        if space == "tss":
            arch = "+".join("|" + "|".join(f"{rng.choice(TSS_OPS)}~{s}" for s in range(j)) + "|" for j in (1, 2, 3))
        else:
            arch = ":".join(str(rng.choice(SSS_CHANNEL_CHOICES)) for _ in range(5))
        acc = float(rng.uniform(0.3, 0.95))
        row = {"space": space, "hp": HP[space], "dataset": dataset, "arch_index": i, "measured_by": i, "seed": 777,
               "arch_str": arch, "params": float(rng.uniform(0.1, 2)), "flops": float(rng.uniform(5, 200)),
               "temperature": float(rng.uniform(0.5, 3)), "accuracy": acc, "recorded_accuracy": acc, "n_eval": 1000}
        base = rng.uniform(0.02, 0.3)
        for stage in stages:
            scale = 1.0 if stage == "pre" else rng.uniform(0.1, 1.2)
            for metric in binned:
                for b in BINS:
                    row[f"{stage}_{metric}_{b}"] = float(base * scale * rng.uniform(0.8, 1.25) * (1 + b / 100))
            for metric in unbinned:
                row[f"{stage}_{metric}"] = float(rng.uniform(0.05, 2.0))
            row[f"{stage}_accuracy"] = acc if stage in ("pre", "post", "spline") else float(
                np.clip(acc + rng.choice([-0.01, 0.0, 0.01]), 0, 1))
            if stage != "pre":
                row[f"{stage}_fit_converged"] = 1.0
                row[f"{stage}_fit_w_norm"] = float(rng.uniform(1, 5))
        rows.append(row)
    df = pd.DataFrame(rows)
    present = [s for s in stages if s != "pre"]
    for k, stage in enumerate(present):  # failed fits: all metrics of a stage NaN for some networks
        failed = (np.arange(n) % (len(present) + 3)) == k
        cols = [c for c in df.columns if c.startswith(f"{stage}_") and "_fit_" not in c]
        df.loc[failed, cols] = np.nan
        df.loc[failed, f"{stage}_fit_converged"] = 0.0
    for stage in ("iso", "hist"):
        if stage in stages:
            df.loc[df.index[(np.arange(n) % 4 == 1) & df[f"{stage}_nll"].notna()], f"{stage}_nll"] = np.inf
    if "vs" in stages and "post" in stages:  # exact ECE ties between two methods
        tie = df["vs_ece_15"].notna() & df["post_ece_15"].notna() & (np.arange(n) % 5 == 0)
        df.loc[tie, "vs_ece_15"] = df.loc[tie, "post_ece_15"]
    if copies:
        extra = df.iloc[:copies].copy()
        extra["arch_index"] = np.arange(n, n + copies)
        df = pd.concat([df, extra], ignore_index=True)
    return df


def population(rng, stages, spaces=("tss", "sss"), datasets=("cifar10", "cifar100"), n=30, full=True):
    return {(space, dataset): wide_table(rng, space, dataset, n, stages, copies=3 if space == "tss" else 0, full=full)
            for space in spaces for dataset in datasets}


@pytest.fixture(scope="module")
def df():
    """Every stage, two spaces, two datasets (the tests read it, never change it)."""
    return pd.concat(population(np.random.default_rng(7), ALL_STAGES).values(), ignore_index=True)


# ---------------------------------------------------------------- stages and statistics

def _best_stages(net, stages, metric: str, skip_flagged: bool = False):
    """The oracle of a network's best stages on ``metric`` (ties all win): (winners, signed
    values, signed best); winners empty where no stage has a finite value. ``skip_flagged``:
    fits on too little data do not compete."""
    sign = -1 if metric == "accuracy" else 1
    values = {s: sign * net[f"{s}_{metric}"] for s in stages if math.isfinite(net[f"{s}_{metric}"])
              and not (skip_flagged and net.get(f"{s}_fit_underdetermined", 0.0) == 1)}
    if not values:
        return [], values, None
    best = min(values.values())
    return [s for s, v in values.items() if v == best], values, best


def test_stages_are_detected_from_the_accuracy_columns(df):
    assert at.stages_present(df) == ALL_STAGES  # recorded_accuracy is no stage
    assert at.method_stages(df) == ALL_STAGES[1:]
    two = df[[c for c in df.columns if not c.startswith(tuple(f"{s}_" for s in ALL_STAGES[2:]))]]
    assert at.stages_present(two) == ["pre", "post"]
    reordered = df[list(reversed(df.columns))]
    assert at.stages_present(reordered) == ALL_STAGES


def test_nearest_bins_and_summary_metrics():
    assert at.nearest_bins([5, 15, 50]) == 15
    assert at.nearest_bins([5, 10, 20, 50]) == 10  # equally close: the smaller
    assert at.nearest_bins([30, 50, 100]) == 30
    assert at.summary_metrics([5, 10]) == ["ece_10", "cwce_10", "ace_10", "tace_10", "ksce", "nll", "brier",
                                           "accuracy"]


def test_describe_values_by_hand():
    d = am.describe_values([4.0, np.nan, 1.0, np.inf, 3.0, 2.0])
    assert (d["n"], d["n_nan"], d["n_inf"]) == (6, 1, 1)
    # Kept, sorted: 1 2 3 4 inf; positions (n-1)q = 1, 2, 3.
    assert (d["q25"], d["median"], d["q75"], d["iqr"]) == (2.0, 3.0, 4.0, 2.0)
    assert d["mean"] == np.inf
    d = am.describe_values([1.0, 2.0, 4.0, 10.0])
    assert d["q25"] == pytest.approx(1.75) and d["median"] == 3.0 and d["q75"] == pytest.approx(5.5)
    assert d["iqr"] == pytest.approx(3.75) and d["mean"] == 4.25
    d = am.describe_values([1.0, np.inf, np.inf])  # interpolating towards inf gives inf; inf - inf: NaN
    assert d["q25"] == np.inf and d["median"] == np.inf and d["q75"] == np.inf and np.isnan(d["iqr"])
    d = am.describe_values([np.nan, np.nan])
    assert (d["n"], d["n_nan"], d["n_inf"]) == (2, 2, 0)
    assert all(np.isnan(d[k]) for k in ("mean", "median", "q25", "q75", "iqr"))


def test_methods_summary_matches_an_independent_computation(df):
    summary = am.methods_summary(df, BINS)
    metrics = ["ece_15", "cwce_15", "ace_15", "tace_15", "ksce", "nll", "brier", "accuracy"]
    assert list(summary.columns) == ["space", "hp", "dataset", "stage", "metric", "n", "n_nan", "n_inf", "mean",
                                     "median", "q25", "q75", "iqr", "n_underdetermined", "n_worse_than_pre", "best",
                                     "next_stage", "p_vs_next", "n_vs_next", "networks_vs_next"]
    assert len(summary) == 2 * 2 * len(ALL_STAGES) * len(metrics)
    assert set(summary["metric"]) == set(metrics)
    nets = df[df["arch_index"] == df["measured_by"]]
    saw_nan = saw_inf = False
    for row in summary.itertuples():
        values = nets[(nets["space"] == row.space) & (nets["dataset"] == row.dataset)][f"{row.stage}_{row.metric}"]
        assert row.n == len(values) == 30  # TSS isomorph copies left out
        assert row.n_nan == values.isna().sum()
        assert row.n_inf == np.isinf(values).sum()
        saw_nan |= row.n_nan > 0
        saw_inf |= row.n_inf > 0
        kept = values.dropna().to_numpy()
        if row.n_inf == 0:
            expected = np.quantile(kept, [0.25, 0.5, 0.75])
            np.testing.assert_allclose([row.q25, row.median, row.q75], expected, rtol=1e-12)
            assert row.mean == pytest.approx(kept.mean(), rel=1e-12)
            assert row.iqr == pytest.approx(expected[2] - expected[0], rel=1e-12)
        else:  # inf as a huge value: quantiles that interpolate towards it are inf
            big = np.quantile(np.where(np.isinf(kept), 1e300, kept), [0.25, 0.5, 0.75])
            expected = np.where(big > 1e200, np.inf, big)
            np.testing.assert_allclose([row.q25, row.median, row.q75], expected, rtol=1e-12)
            assert row.mean == np.inf
    assert saw_nan and saw_inf
    failed = summary[(summary["stage"] != "pre") & (summary["n_nan"] > 0)]
    assert set(failed["stage"]) == set(ALL_STAGES[1:])  # every method failed somewhere
    assert (summary[summary["stage"] == "pre"]["n_nan"] == 0).all()


def test_a_method_that_failed_everywhere_in_a_table_keeps_its_rows(tmp_path):
    rng = np.random.default_rng(2)
    tables = population(rng, ["pre", "post", "ms"], spaces=("sss",), full=False)
    tables[("sss", "cifar100")] = tables[("sss", "cifar100")].drop(columns=[
        c for c in tables[("sss", "cifar100")].columns if c.startswith("ms_")])  # ms not run there
    broken = tables[("sss", "cifar10")]
    broken.loc[:, [c for c in broken.columns if c.startswith("ms_") and "_fit_" not in c]] = np.nan
    paths = _write(tables, tmp_path)
    listed = at.table_stages(paths)
    assert listed == {("sss", "90", "cifar10"): ["pre", "post", "ms"], ("sss", "90", "cifar100"): ["pre", "post"]}
    df = at.load_tables(paths)
    summary = am.methods_summary(df, BINS, listed)
    ms = summary[summary["stage"] == "ms"]
    assert set(ms["dataset"]) == {"cifar10"} and (ms["n_nan"] == 30).all() and ms["median"].isna().all()
    wins = am.method_wins(df, BINS, listed)
    ms = wins[wins["stage"] == "ms"]
    assert set(ms["dataset"]) == {"cifar10"} and (ms["share"] == 0).all() and (ms["n_networks"] == 30).all()
    # Without the tables' own stage lists, an all-NaN stage cannot be told from one not run.
    assert "ms" not in set(am.methods_summary(df, BINS).query("dataset == 'cifar10'")["stage"])


# ---------------------------------------------------------------- wins

def _hand_table() -> pd.DataFrame:
    """Seven networks, three stages; ECE and accuracy given, the other metrics absent."""
    ece = {  # pre, post, vs
        0: (0.10, 0.05, 0.07),  # post, margin 0.02
        1: (0.10, 0.04, 0.04),  # post and vs tie
        2: (0.02, 0.05, np.nan),  # pre, margin 0.03 (vs failed)
        3: (np.nan, np.nan, 0.20),  # vs alone: a win without a margin
        4: (np.nan, np.nan, np.nan),  # no contest
        5: (0.30, 0.10, np.inf),  # post, margin 0.2 (inf takes no part)
        6: (0.50, 0.45, 0.90),  # post, margin 0.05
    }
    acc = {0: (0.9, 0.9, 0.85), 1: (0.8, 0.8, 0.85), 2: (0.7, 0.7, np.nan), 3: (np.nan, np.nan, 0.6),
           4: (np.nan, np.nan, np.nan), 5: (0.5, 0.5, 0.4), 6: (0.6, 0.6, 0.62)}
    rows = []
    for i in range(7):
        row = {"space": "sss", "hp": "90", "dataset": "cifar10", "arch_index": i, "measured_by": i, "seed": 777}
        for s, stage in enumerate(("pre", "post", "vs")):
            row[f"{stage}_ece_15"] = ece[i][s]
            row[f"{stage}_accuracy"] = acc[i][s]
        rows.append(row)
    return pd.DataFrame(rows)


def test_method_wins_by_hand():
    wins = am.method_wins(_hand_table(), [15]).set_index(["metric", "stage"])
    assert set(wins.index.get_level_values("metric")) == {"ece_15", "accuracy"}  # the other metrics: no columns
    ece = wins.loc["ece_15"]
    assert list(ece.index) == ["pre", "post", "vs"]
    assert (ece["n_networks"] == 6).all()
    assert list(ece["outright"]) == [1, 3, 1] and list(ece["tied"]) == [0, 1, 1]
    np.testing.assert_allclose(ece["share"], [1 / 6, 3.5 / 6, 1.5 / 6])
    assert ece.loc["post", "n_margin"] == 3
    assert ece.loc["post", "margin_median"] == pytest.approx(0.05)
    assert ece.loc["post", "margin_mean"] == pytest.approx((0.02 + 0.2 + 0.05) / 3)
    assert ece.loc["pre", "margin_median"] == pytest.approx(0.03) and ece.loc["pre", "n_margin"] == 1
    assert ece.loc["vs", "n_margin"] == 0 and np.isnan(ece.loc["vs", "margin_median"])
    acc = wins.loc["accuracy"]  # highest wins: pre and post always tie (temperature keeps the arg-max)
    assert list(acc["outright"]) == [0, 0, 3] and list(acc["tied"]) == [3, 3, 0]
    np.testing.assert_allclose(acc["share"], [1.5 / 6, 1.5 / 6, 3 / 6])
    assert acc.loc["vs", "n_margin"] == 2  # 0.85 - 0.8 and 0.62 - 0.6; 0.6 alone has no runner-up
    assert acc.loc["vs", "margin_median"] == pytest.approx(0.035)
    assert acc.loc["vs", "margin_mean"] == pytest.approx(0.035)


def test_method_wins_match_a_row_by_row_computation(df):
    wins = am.method_wins(df, BINS)
    assert np.allclose(wins.groupby(["space", "hp", "dataset", "metric"])["share"].sum(), 1.0)
    nets = df[df["arch_index"] == df["measured_by"]]
    checked_ties = 0
    for (space, dataset, metric), part in wins.groupby(["space", "dataset", "metric"]):
        group = nets[(nets["space"] == space) & (nets["dataset"] == dataset)]
        stages = list(part["stage"])
        share = dict.fromkeys(stages, 0.0)
        margins = {s: [] for s in stages}
        outright = dict.fromkeys(stages, 0)
        n = 0
        for _, net in group.iterrows():
            winners, values, best = _best_stages(net, stages, metric)
            if not winners:
                continue
            n += 1
            for s in winners:
                share[s] += 1 / len(winners)
            checked_ties += len(winners) > 1
            others = sorted(v for s, v in values.items() if s not in winners)
            if len(winners) == 1:
                outright[winners[0]] += 1
                if others:
                    margins[winners[0]].append(others[0] - best)
        for row in part.itertuples():
            assert row.n_networks == n
            assert row.share == pytest.approx(share[row.stage] / n, abs=1e-12)
            assert row.outright == outright[row.stage]
            assert row.n_margin == len(margins[row.stage])
            if margins[row.stage]:
                assert row.margin_median == pytest.approx(np.median(margins[row.stage]), abs=1e-12)
                assert row.margin_mean == pytest.approx(np.mean(margins[row.stage]), abs=1e-12)
                assert row.margin_median > 0
    assert checked_ties > 0


# ---------------------------------------------------------------- question 4

def test_question_4_for_every_method_matches_scipy(df):
    df = df[df["space"] == "tss"]  # with isomorph copies, which Kendall leaves out
    kendall = ak.kendall_all(df, settings())
    assert set(kendall["figure"]) == {"datasets", "metrics", "pre_post"}
    q4 = kendall[kendall["figure"] == "pre_post"]
    assert set(q4["stage"]) == set(ALL_STAGES[1:])
    assert kendall[kendall["figure"] == "datasets"]["stage"].isna().all()
    # question 3: every metric against every other before (stage null) and after each method
    q3 = kendall[kendall["figure"] == "metrics"]
    assert set(q3["stage"].dropna()) == set(ALL_STAGES[1:]) and q3["stage"].isna().any()
    after = q3[(q3["stage"] == "iso") & (q3["population"] == "all")]
    assert {"iso_ece_15", "iso_ksce", "iso_accuracy"} <= set(after["row"]) and not after["row"].str.startswith("pre_").any()
    nets_all = df[df["arch_index"] == df["measured_by"]]
    one = after[(after["row"] == "iso_ece_15") & (after["col"] == "iso_ksce")].iloc[0]
    pair = nets_all[(nets_all["dataset"] == one["dataset"])][["iso_ece_15", "iso_ksce"]].dropna()
    assert one["tau"] == pytest.approx(kendalltau(pair["iso_ece_15"], pair["iso_ksce"]).statistic, abs=1e-12)
    # question 1: every metric across datasets, and each method's ECE
    q1 = set(kendall[kendall["figure"] == "datasets"]["metric"])
    assert {"pre_ece_15", "pre_ksce", "pre_mmce", "pre_cwce_15", "spline_ece_15", "dir_ece_15"} <= q1
    assert set(q4["population"]) == {"all", "top10"}
    nets = df[df["arch_index"] == df["measured_by"]]
    for (space, dataset, population, stage), block in q4.groupby(["space", "dataset", "population", "stage"]):
        assert len(block) == len(BINS) ** 2
        assert set(block["row"]) == {f"pre_ece_{b}" for b in BINS}
        assert set(block["col"]) == {f"{stage}_ece_{b}" for b in BINS}
        part = nets[(nets["space"] == space) & (nets["dataset"] == dataset)]
        if population == "top10":
            part = part.nlargest(10, "accuracy")
        for row in block.itertuples():
            pair = part[[row.row, row.col]].dropna()
            assert row.n == len(pair)
            assert row.tau == pytest.approx(kendalltau(pair[row.row], pair[row.col]).statistic, abs=1e-12)


def test_every_kendall_tau_gets_the_interval_its_scope_names(df):
    """analysis.bootstrap: with scope findings the taus the report states (question 4 and
    Fig. 2 of pre/post ECE at 15 bins) get calibench.analysis.stats' bootstrap of their pair, on the same resamples for every
    pair of a matrix, and every other tau its jackknife interval; scope all bootstraps
    every tau; resamples 0 jackknifes every tau."""
    from calibench.analysis import stats

    part = df[(df["space"] == "sss") & (df["dataset"] == "cifar10")]
    nets = part[part["arch_index"] == part["measured_by"]]
    conf = settings()
    conf["analysis"]["bootstrap"] = {"resamples": 200, "seed": 3, "level": 0.9}
    kendall = ak.kendall_all(part, conf)
    plain = ak.kendall_all(part, settings())
    conf["analysis"]["bootstrap"]["scope"] = "all"
    every = ak.kendall_all(part, conf)
    for k in (kendall, plain, every):
        np.testing.assert_allclose(k["tau"], plain["tau"], rtol=0, atol=1e-12)
        off = k[(k["row"] != k["col"]) & k["tau"].notna()]
        assert (off["lo"] <= off["tau"] + 1e-12).all() and (off["tau"] <= off["hi"] + 1e-12).all()
        assert (off["hi"] - off["lo"] > 0).mean() > 0.9
        assert k.loc[(k["row"] == k["col"]) | k["tau"].isna(), "interval"].isna().all()
    defined = plain["tau"].notna() & (plain["row"] != plain["col"])
    assert set(plain.loc[defined, "interval"]) == {"jackknife"}
    assert set(every.loc[defined, "interval"]) == {"bootstrap"}
    stated = kendall["row"].str.endswith("_ece_15") & kendall["col"].str.endswith("_ece_15")
    finding = defined & (((kendall["figure"] == "pre_post") & stated)
                         | ((kendall["figure"] == "datasets") & kendall["metric"].isin(["pre_ece_15", "post_ece_15"])))
    assert (finding & (kendall["figure"] == "pre_post")).sum() > 0
    assert set(kendall.loc[finding, "interval"]) == {"bootstrap"}
    assert set(kendall.loc[defined & ~finding, "interval"]) == {"jackknife"}
    q4 = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all") & (kendall["stage"] == "spline")]
    same_row, other_row = q4[stated[q4.index]].iloc[0], q4[~stated[q4.index]].iloc[0]
    want = stats.kendall_bootstrap(nets[same_row["row"]].to_numpy(float), nets[same_row["col"]].to_numpy(float),
                                   200, 3, 0.9)
    assert (same_row["tau"], same_row["lo"], same_row["hi"]) == pytest.approx(want, abs=1e-12)
    want = stats.kendall_jackknife(nets[other_row["row"]].to_numpy(float), nets[other_row["col"]].to_numpy(float),
                                   0.9)
    assert (other_row["tau"], other_row["lo"], other_row["hi"]) == pytest.approx(want, abs=1e-12)


def test_question_4_keeps_the_temperature_scaling_rows_of_a_two_stage_run():
    rng = np.random.default_rng(3)
    two = pd.concat(population(rng, ["pre", "post"], spaces=("sss",)).values(), ignore_index=True)
    kendall = ak.kendall_all(two, settings())
    q4 = kendall[kendall["figure"] == "pre_post"]
    assert set(q4["stage"]) == {"post"}
    assert q4["row"].str.startswith("pre_ece_").all() and q4["col"].str.startswith("post_ece_").all()
    assert len(q4) == 2 * 2 * len(BINS) ** 2  # datasets, populations (all, top10)


def test_summary_html_marks_the_best_medians_and_counts_failures(df):
    # the stages are alike but for spline's ECE (15 bins): half of each network's best; a best median
    # among alike stages is not bold (it was), spline's is
    df = df.assign(spline_ece_15=df[[f"{s}_ece_15" for s in ALL_STAGES]].min(axis=1) * 0.5)
    summary = am.methods_summary(df, BINS)
    grid = am.summary_grid(summary).reset_index()
    assert len(grid) == 2 * 2 * len(ALL_STAGES)
    assert list(grid["stage"].astype(str).iloc[:len(ALL_STAGES)]) == ALL_STAGES  # the report order
    nets = df[df["arch_index"] == df["measured_by"]]
    for _, row in grid.iterrows():
        part = nets[(nets["space"] == row["space"]) & (nets["dataset"] == row["dataset"])]
        stage = str(row["stage"])
        assert row["networks"] == len(part) and row["failed"] == part[f"{stage}_accuracy"].isna().sum()
        n_inf = np.isinf(part[f"{stage}_nll"]).sum()
        assert (f"({n_inf} inf)" in row["nll"]) == (n_inf > 0)
    seen = set()
    for (space, dataset, metric), part in summary.groupby(["space", "dataset", "metric"]):
        sign = -1 if metric == "accuracy" else 1
        ranked = part[np.isfinite(part["median"])].assign(key=lambda f: sign * f["median"]).sort_values(
            "key", kind="stable")
        best, nxt = ranked.iloc[0], ranked.iloc[1]
        assert list(part.loc[part["best"], "stage"]) == [best["stage"]] and best["next_stage"] == nxt["stage"]
        rows = nets[(nets["space"] == space) & (nets["dataset"] == dataset)]
        x, y = rows[f"{best['stage']}_{metric}"], rows[f"{nxt['stage']}_{metric}"]
        d = (sign * (y - x))[np.isfinite(x) & np.isfinite(y)]
        d = d[d != 0]
        p = wilcoxon(d).pvalue if len(d) else np.nan
        ahead = bool(len(d)) and p < 0.05 and np.sum(np.sign(d) * rankdata(np.abs(d))) > 0
        cells = grid[(grid["space"] == space) & (grid["dataset"] == dataset)].set_index("stage")[metric]
        bold = [str(stage) for stage, cell in cells.items() if cell.startswith("<b>")]
        assert bold == ([best["stage"]] if ahead else []), (space, dataset, metric, p)
        if ahead:  # the test against scipy's, on the same networks
            assert best["p_vs_next"] == pytest.approx(p, rel=1e-12) and best["n_vs_next"] == len(d)
            assert best["networks_vs_next"] == int((np.isfinite(x) & np.isfinite(y)).sum())
            assert cells[best["stage"]].startswith(f"<b>{am._fmt(best['median'])} [{am._fmt(best['q25'])}–")
        else:
            assert f"best median, not ahead of {nxt['stage']}" in cells[best["stage"]]
        seen.add(ahead)
    assert seen == {True, False}  # both cases occur in this population
    assert "<table" in am.summary_html(summary) and am.summary_html(summary.iloc[:0]) == ""
    # Below analysis.min_networks no test decides: nothing bold, every best median says so with its n.
    few = am.summary_grid(summary, min_networks=int(summary["networks_vs_next"].max()) + 1)
    cells = few[list(dict.fromkeys(summary["metric"]))].to_numpy().ravel()
    assert not any(cell.startswith("<b>") for cell in cells)
    for best in summary[summary["best"] & summary["next_stage"].notna()].itertuples():
        cell = few.loc[(best.space, best.hp, best.dataset, best.stage), best.metric]
        assert (f"best median; against {best.next_stage}: too few networks to decide (n = {best.networks_vs_next})"
                in cell), cell
    tested = summary["best"] & summary["next_stage"].notna()
    at_n = am.summary_grid(summary, min_networks=int(summary.loc[tested, "networks_vs_next"].min()))
    pd.testing.assert_frame_equal(at_n, grid.set_index(["space", "hp", "dataset", "stage"]))


def test_wins_html_gives_shares_and_margins(df):
    wins = am.method_wins(df, BINS)
    text = am.wins_html(wins, "ece_15")
    row = wins[(wins["metric"] == "ece_15") & (wins["stage"] == "spline") & (wins["space"] == "sss")
               & (wins["dataset"] == "cifar10")].iloc[0]
    assert f"{100 * row.share:.0f}% ({am._fmt(row.margin_median)})" in text
    assert f"<td>{row.n_networks}</td>" in text  # the table's contests: n


# ---------------------------------------------------------------- end to end

def _write(tables, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for (space, dataset), table in tables.items():
        path = directory / f"{space}_{HP[space]}_{dataset}.parquet"
        table.to_parquet(path, index=False)
        paths.append(path)
    return paths


def _png_ok(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_run_analysis_with_five_methods(tmp_path):
    stages = ["pre", "post", "vs", "iso", "spline"]
    rng = np.random.default_rng(5)
    tables = population(rng, stages, spaces=("sss",), full=False)
    for (_, dataset), t in tables.items():  # vs on too little data in one table: read from the tables
        t["vs_fit_underdetermined"] = float(dataset == "cifar100")
    results = tmp_path / "results"
    out = run_analysis(settings(demo=True, top_k=()), _write(tables, tmp_path / "tables"), results)
    analysis = results / "analysis"
    for name in ("kendall.parquet", "hcs.parquet", "top_hcs.csv", "methods_summary.parquet", "methods_summary.csv",
                 "method_wins.parquet"):
        assert (analysis / name).is_file(), name
    assert out["methods_summary"] == analysis / "methods_summary.parquet"
    assert out["method_wins"] == analysis / "method_wins.parquet"
    summary = pd.read_parquet(analysis / "methods_summary.parquet")
    csv = pd.read_csv(analysis / "methods_summary.csv", dtype={"hp": str})
    assert len(csv) == len(summary) and list(csv.columns) == list(summary.columns)
    wins = pd.read_parquet(analysis / "method_wins.parquet")
    assert set(wins["stage"]) == set(stages)
    vs = (summary["stage"] == "vs") & (summary["dataset"] == "cifar100")
    assert (summary.loc[vs, "n_underdetermined"] == 30).all() and (summary.loc[~vs, "n_underdetermined"] == 0).all()
    assert wins.loc[(wins["stage"] == "vs") & (wins["dataset"] == "cifar100"), "share"].isna().all()
    report = out["report"].read_text()
    assert "sss_90_cifar100: vs 30 of 30 networks" in report
    for heading in ("Post-hoc recalibration methods", "Distribution over networks", "Question 4",
                    "Which method is best for a network"):
        assert heading in report
    best = summary[summary["best"]]  # a best median per table and metric: bold where the paired test says so
    assert len(best) == 2 * 8
    # analysis.min_networks (30 by default): a test on fewer networks with both values decides nothing
    few = best["next_stage"].notna() & (best["networks_vs_next"] < 30)
    not_ahead = best[~few & ~(best["p_vs_next"] < 0.05) & best["next_stage"].notna()]
    assert report.count("best median, not ahead of") == len(not_ahead)
    assert report.count("best median; against") == few.sum() > 0
    assert "<th>failed</th>" in report and "<th>networks</th>" in report and " inf)</small>" in report
    plots = sorted((results / "plots").rglob("*.png"))
    for plot in plots:
        assert _png_ok(plot), plot
        assert plot.relative_to(results).as_posix() in report
    names = {p.name for p in plots}
    assert {"ece_by_method.png", "method_win_rates.png"} <= names
    for space, dataset in tables:
        assert f"kendall_pre_methods_{space}_{HP[space]}_{dataset}.png" in names
        assert f"kendall_pre_post_ece_{space}_{HP[space]}_{dataset}.png" in names



def test_run_analysis_with_pre_and_post_only(tmp_path):
    rng = np.random.default_rng(11)
    tables = population(rng, ["pre", "post"], spaces=("tss",), datasets=("cifar10",), full=False)  # isomorph copies
    results = tmp_path / "results"
    run_analysis(settings(top_k=()), _write(tables, tmp_path / "tables"), results)
    wins = pd.read_parquet(results / "analysis" / "method_wins.parquet")
    assert set(wins["stage"]) == {"pre", "post"}
    summary = pd.read_parquet(results / "analysis" / "methods_summary.parquet")
    assert set(summary["stage"]) == {"pre", "post"} and len(summary) == 2 * 8
    found = {p.name: p for p in (results / "plots").rglob("*.png")}
    names = set(found)
    assert not any(n.startswith("kendall_pre_methods") for n in names)  # the post heatmap says it all
    assert {"ece_by_method.png", "method_win_rates.png", "kendall_pre_post_ece_tss_200_cifar10.png"} <= names
    report = (results / "report.html").read_text()
    assert "Post-hoc recalibration methods" in report
    for name in names:
        assert _png_ok(found[name]) and found[name].relative_to(results).as_posix() in report


def test_run_analysis_with_a_robustness_table(tmp_path):
    """Question 2 through the analysis job: the configured table (rows shuffled, keyed by
    arch_index) joined to the TSS CIFAR-10 table; taus equal scipy's on the joined networks."""
    rng = np.random.default_rng(8)
    tables = population(rng, ["pre", "post"], spaces=("tss",), datasets=("cifar10",), full=False)
    tss = tables[("tss", "cifar10")]
    tss.insert(6, "nats_index", tss["arch_index"])  # as a NATS-Bench archive's tables carry it
    measured_rows = tss[tss["arch_index"] == tss["measured_by"]]
    rob = pd.DataFrame({"arch_index": measured_rows["arch_index"].to_numpy(),
                        "clean_acc": rng.uniform(80, 95, len(measured_rows)),
                        "pgd_Linf_acc8_0": rng.uniform(0, 30, len(measured_rows)),
                        "note": "x"}).sample(frac=1.0, random_state=1)
    rob.to_csv(tmp_path / "rob.csv", index=False)
    conf = settings(demo=True, top_k=(10,))
    conf["robustness"] = {"path": str(tmp_path / "rob.csv"), "key": "arch_index"}
    results = tmp_path / "results"
    out = run_analysis(conf, _write(tables, tmp_path / "tables"), results)
    kendall = pd.read_parquet(results / "analysis" / "robustness_kendall.parquet")
    assert set(kendall["robustness"]) >= {"clean_acc", "pgd_Linf_acc8_0"} and set(kendall["population"]) == {"all", "top10"}
    row = kendall[(kendall["metric"] == "pre_ece_15") & (kendall["robustness"] == "clean_acc")
                  & (kendall["population"] == "all")].iloc[0]
    joined = measured_rows.merge(rob, on="arch_index")
    assert row["tau"] == pytest.approx(kendalltau(joined["pre_ece_15"], joined["clean_acc"]).statistic, abs=1e-12)
    assert _png_ok(results / "plots" / "robustness" / "robustness_kendall.png")
    assert "plots/robustness/robustness_kendall.png" in out["report"].read_text()
    conf["robustness"]["key"] = "arch_name"
    with pytest.raises(ValueError, match="arch_name"):
        run_analysis(conf, _write(tables, tmp_path / "tables2"), tmp_path / "results2")


# ---------------------------------------------------------------- fits on too little data

def _flagged_population():
    """Two SSS tables with pre, post, vs, iso: vs flagged on every network of CIFAR-100 (its
    N_val < 10 K), iso on every third network of CIFAR-10; post carries no flag column."""
    tables = population(np.random.default_rng(21), ["pre", "post", "vs", "iso"], spaces=("sss",), full=False)
    for (space, dataset), t in tables.items():
        t["vs_fit_underdetermined"] = 1.0 if dataset == "cifar100" else 0.0
        t["iso_fit_underdetermined"] = (np.arange(len(t)) % 3 == 0).astype(float) if dataset == "cifar10" else 0.0
    return tables


def test_flagged_fits_are_counted_with_the_stages_worse_than_pre():
    df = pd.concat(_flagged_population().values(), ignore_index=True)
    summary = am.methods_summary(df, BINS)
    plain = am.methods_summary(df.drop(columns=[c for c in df.columns if c.endswith("_fit_underdetermined")]), BINS)
    stats = ["n", "n_nan", "n_inf", "mean", "median", "q25", "q75", "iqr"]
    pd.testing.assert_frame_equal(summary[stats], plain[stats])  # the distributions keep every network
    assert (plain["n_underdetermined"] == 0).all()
    for row in summary.itertuples():
        part = df[df["dataset"] == row.dataset]
        flag = f"{row.stage}_fit_underdetermined"
        assert row.n_underdetermined == (int((part[flag] == 1).sum()) if flag in part else 0)
        mine, pre = part[f"{row.stage}_{row.metric}"], part[f"pre_{row.metric}"]
        worse = (mine < pre) if row.metric == "accuracy" else (mine > pre)
        assert row.n_worse_than_pre == int(worse.sum())
    vs = summary[(summary["stage"] == "vs") & (summary["dataset"] == "cifar100")]
    assert (vs["n_underdetermined"] == 30).all()
    assert summary.query("stage == 'iso' and dataset == 'cifar10'")["n_underdetermined"].eq(10).all()
    nll = summary[summary["metric"] == "nll"]
    assert nll["n_worse_than_pre"].gt(0).any() and (nll[nll["stage"] == "pre"]["n_worse_than_pre"] == 0).all()


def test_rankings_leave_flagged_fits_out_by_default():
    df = pd.concat(_flagged_population().values(), ignore_index=True)
    wins = am.method_wins(df, BINS)
    assert np.allclose(wins.groupby(["dataset", "metric"])["share"].sum(), 1.0)
    left = wins[(wins["stage"] == "vs") & (wins["dataset"] == "cifar100")]
    assert left["share"].isna().all() and (left["outright"] == 0).all() and (left["tied"] == 0).all()
    assert (left["n_underdetermined"] == 30).all()
    # Row by row: a flagged stage takes no part for that network.
    for (dataset, metric), part in wins.groupby(["dataset", "metric"]):
        nets = df[df["dataset"] == dataset]
        share, n = dict.fromkeys(part["stage"], 0.0), 0
        for _, net in nets.iterrows():
            winners, _, _ = _best_stages(net, share, metric, skip_flagged=True)
            if not winners:
                continue
            n += 1
            for s in winners:
                share[s] += 1 / len(winners)
        for row in part.itertuples():
            assert row.n_networks == n
            if not (row.stage == "vs" and dataset == "cifar100"):
                assert row.share == pytest.approx(share[row.stage] / n, abs=1e-12)
    iso = wins[(wins["stage"] == "iso") & (wins["dataset"] == "cifar10")]
    assert (iso["n_underdetermined"] == 10).all() and iso["share"].notna().all()
    # Included on request: as if there were no flags.
    included = am.method_wins(df, BINS, include_underdetermined=True)
    plain = am.method_wins(df.drop(columns=[c for c in df.columns if c.endswith("_fit_underdetermined")]), BINS)
    pd.testing.assert_frame_equal(included, plain)
    assert "too little data" in am.wins_html(wins[wins["dataset"] == "cifar100"], "ece_15")


def test_the_methods_section_counts_flagged_fits_and_ranks_without_them():
    df = pd.concat(_flagged_population().values(), ignore_index=True)
    summary = am.methods_summary(df, BINS)
    grid = am.summary_grid(summary).reset_index()
    by_stage = grid.set_index(["dataset", "stage"])
    assert by_stage.loc[("cifar100", "vs"), "too little data"] == 30
    assert by_stage.loc[("cifar10", "iso"), "too little data"] == 10
    assert by_stage.loc[("cifar10", "post"), "too little data"] == 0
    nll = summary[summary["metric"] == "nll"].set_index(["dataset", "stage"])["n_worse_than_pre"]
    assert by_stage.loc[("cifar10", "vs"), "NLL worse than pre"] == str(nll[("cifar10", "vs")])
    assert by_stage.loc[("cifar10", "pre"), "NLL worse than pre"] == "–"
    flagged = {("cifar100", "vs"), ("cifar10", "iso")}
    for metric in am.summary_metrics(BINS):
        part = summary[summary["metric"] == metric]
        best = {(d, s) for d, s in zip(part.loc[part["best"], "dataset"], part.loc[part["best"], "stage"])}
        assert len(best) == 2 and not best & flagged  # never a flagged row
        for dataset in ("cifar10", "cifar100"):
            rows = part[(part["dataset"] == dataset) & ~part["stage"].isin([s for d, s in flagged if d == dataset])]
            top = rows["median"].max() if metric == "accuracy" else rows["median"].min()
            assert {b for b in best if b[0] == dataset} <= {(dataset, s) for s in rows.loc[rows["median"] == top, "stage"]}
        bold = {(d, str(s)) for (d, s), cell in by_stage[metric].items() if cell.startswith("<b>")}
        assert bold <= best
    # Included on request: ranked as if there were no flags
    ranked_all = am.methods_summary(df, BINS, include_underdetermined=True)
    plain = am.methods_summary(df.drop(columns=[c for c in df.columns if c.endswith("_fit_underdetermined")]), BINS)
    tested = ["best", "next_stage", "p_vs_next", "n_vs_next"]
    pd.testing.assert_frame_equal(ranked_all[tested], plain[tested])
    text = "".join(h for _, _, h in am.section_blocks(summary, am.method_wins(df, BINS), BINS))
    assert "sss_90_cifar10: iso 10 of 30 networks; sss_90_cifar100: vs 30 of 30 networks" in text
    assert "describe a fit on too little data, not the method" in text
    assert "<th>too little data</th>" in text and "<th>NLL worse than pre</th>" in text
    assert "leave them out" in text


def test_the_closing_summary_counts_flagged_fits_per_table(tmp_path):
    from calibench.results import failures

    paths = _write(_flagged_population(), tmp_path)
    text = failures.underdetermined_summary(paths)
    lines = text.splitlines()
    assert lines[0].startswith("calibench: fits on too little data") and "not the method" in lines[0]
    assert "rankings in the report leave them out" in lines[0]
    assert lines[1:] == ["  sss_90_cifar10: iso 10 of 30 networks", "  sss_90_cifar100: vs 30 of 30 networks"]
    assert "include them" in failures.underdetermined_summary(paths, ranked=True)
    clean = _flagged_population()
    for t in clean.values():
        t["vs_fit_underdetermined"] = 0.0
        t["iso_fit_underdetermined"] = 0.0
    assert failures.underdetermined_summary(_write(clean, tmp_path / "clean")) == ""
    assert failures.underdetermined_summary([tmp_path / "missing.parquet"]) == ""


def test_the_closing_summary_names_searches_worse_than_identity(tmp_path):
    """docs/recalibration.md, "Choosing lambda and mu": a table whose search chose a pair worse
    than identity carries {stage}_search_worse_than_identity = 1; the run's summary names it."""
    from calibench.results import failures

    tables = _flagged_population()
    first, second = sorted(tables)
    tables[first]["ms_search_worse_than_identity"] = 0.0
    tables[first]["dir_search_worse_than_identity"] = 1.0
    tables[second]["ms_search_worse_than_identity"] = 0.0
    paths = _write(tables, tmp_path)
    text = failures.search_summary(paths)
    assert text.startswith("calibench: 1 lambda, mu search(es) chose a pair whose cross-validated NLL is worse")
    assert text.endswith(f": {first[0]}_{HP[first[0]]}_{first[1]} dir"), text
    tables[first]["dir_search_worse_than_identity"] = 0.0
    assert failures.search_summary(_write(tables, tmp_path / "clean")) == ""
    assert failures.search_summary([tmp_path / "missing.parquet"]) == ""


@pytest.mark.parametrize("name", ["zoo__cifar10.parquet", "tss_200_cifar10.parquet"])
def test_every_part_runs_on_a_table_without_columns(tmp_path, name):
    """A table whose every network failed holds no column: each part finds nothing to do and
    writes its outputs (overview, hcs and methods stopped on a KeyError 'arch_index')."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from calibench.analysis import parts as analysis_parts
    from calibench.analysis import registry

    table = tmp_path / "tables" / name
    table.parent.mkdir()
    pq.write_table(pa.table({}), table)
    s = {**settings(demo=True, top_k=()), "groups": {}, "seeds": "first"}
    s["analysis"].update({"bootstrap": {"resamples": 0, "seed": 0, "level": 0.95, "scope": "findings"},
                          "nas": {"repeats": 2, "budget": 5, "seed": 0}})
    names = ["kendall", "overview", "hcs", "methods", "groups"]
    if name.startswith("tss"):
        names += ["architecture", "nas", "schedules", "reliability"]
    for part in names:
        analysis_parts.run_part(part, registry.part_settings(s, registry.find(part)), [str(table)], tmp_path / "results")
        assert analysis_parts.part_manifest(tmp_path / "results", part).is_file(), part
    assert len(pd.read_parquet(tmp_path / "results" / "analysis" / "hcs.parquet")) == 0
