"""Decide only with enough data (issue 25): calibench.analysis.stats.interval_side and
wilcoxon_paired, the findings and claims below and above ``analysis.min_networks``, on small
synthetic tables (no workflow run)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, wilcoxon

from calibench.analysis import stats
from calibench.config.check import schema_default
from calibench.analysis import registry
from calibench.report import claims as rc
from calibench.report.findings import findings


def test_interval_side():
    assert stats.interval_side(-0.3, -0.1, 0) is True and stats.interval_side(0.1, 0.3, 0) is False
    assert stats.interval_side(-0.1, 0.1, 0) is None and stats.interval_side(0.4, 0.6, 0.5) is None
    assert stats.interval_side(1.0, 1.0, 0) is None  # zero width: never significant
    assert stats.interval_side(0.3, 0.3, 0.5) is None and stats.interval_side(np.nan, 0.2, 0.5) is None
    assert stats.interval_side(0.9999999999999999, 1.0, 0.5) is None  # a quantile's rounding is no width


def test_wilcoxon_paired_is_scipys_on_the_finite_pairs():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, 60)
    y = x + rng.normal(0.6, 1, 60)
    x[[4, 9]], y[17] = np.nan, np.inf
    w, p, n, med = stats.wilcoxon_paired(x, y)
    keep = np.isfinite(x) & np.isfinite(y)
    want = wilcoxon(y[keep] - x[keep])
    assert n == 57 and (w, p) == (float(want.statistic), float(want.pvalue))
    assert med == np.median(y[keep] - x[keep]) and p < 0.05
    w, p, n, med = stats.wilcoxon_paired(x[:5], x[:5])
    assert math.isnan(w) and math.isnan(p) and med == 0
    with pytest.raises(ValueError, match="shapes"):
        stats.wilcoxon_paired(x, y[:3])


def _q4(x, y, resamples=200):
    tau, lo, hi = stats.kendall_bootstrap(x, y, resamples, 0, 0.95)
    return pd.DataFrame([{"space": "tss", "hp": "200", "dataset": "cifar10", "stage": "post", "tau": tau,
                          "lo": lo, "hi": hi, "n": len(x), "interval": "bootstrap"}])


def _found(q4, m=30):
    empty = pd.DataFrame()
    nets = pd.DataFrame(columns=["space", "hp", "dataset", "accuracy"])
    return findings(nets, empty, q4, empty, empty, [15], 0.95, min_networks=m)


def test_question4_decides_from_enough_networks_only():
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 0.2, 200)
    y = x + rng.normal(0, 0.05, 200)  # a known positive tau (about 0.6)
    q4 = _q4(x, y)
    assert q4["tau"].iloc[0] == pytest.approx(kendalltau(x, y).statistic, abs=1e-12) and q4["lo"].iloc[0] > 0.4
    row = _found(q4).iloc[0]
    assert row["text"].endswith(f"tau {q4['tau'].iloc[0]:.2f} [{q4['lo'].iloc[0]:.2f}, {q4['hi'].iloc[0]:.2f}] "
                                "(bootstrap), 200 networks (interval excludes 0: differs from 0 at 95%)")
    assert (row["lo"], row["hi"], row["interval"]) == (q4["lo"].iloc[0], q4["hi"].iloc[0], "bootstrap")
    # 3 networks in perfect agreement: the bootstrap interval is [1, 1] and decides nothing
    three = _q4([0.1, 0.2, 0.3], [0.05, 0.1, 0.2])
    assert np.allclose(three[["tau", "lo", "hi"]].values, 1, rtol=0, atol=1e-15)  # lo: 0.9999999999999999
    row = _found(three).iloc[0]
    assert row["text"].endswith("tau 1.00, too few networks to decide (n = 3)") and "differs" not in row["text"]
    assert math.isnan(row["lo"]) and math.isnan(row["hi"]) and row["interval"] is None
    # with the minimum lowered to 3, the degenerate interval is still not significant
    row = _found(three, m=3).iloc[0]
    assert row["text"].endswith("(zero-width interval: not significant)") and "differs" not in row["text"]
    # an interval around 0 names what it tests
    flat = _q4(x, np.random.default_rng(1).uniform(size=200))  # independent of x
    assert flat["lo"].iloc[0] < 0 < flat["hi"].iloc[0]
    assert _found(flat).iloc[0]["text"].endswith("(0 inside the interval: no difference from 0 at 95%)")


def test_question4_claim_needs_networks_and_a_wide_interval():
    q4 = _q4([0.1, 0.2, 0.3], [0.05, 0.1, 0.2])
    out = rc.claims(pd.DataFrame(columns=["space", "hp", "dataset", "accuracy"]), pd.DataFrame(), q4, [15],
                    min_networks=30).set_index("question")
    assert out.loc["q4", "verdict"] == "undecided (too few networks)" and out.loc["q4", "tested"] == 0
    assert out.loc["q4", "evidence"] == "tss cifar10 tau 1.00: too few networks to decide (n = 3)"
    out = rc.claims(pd.DataFrame(columns=["space", "hp", "dataset", "accuracy"]), pd.DataFrame(), q4, [15],
                    min_networks=3).set_index("question")
    assert out.loc["q4", "verdict"] == "undecided at this level"  # [1, 1] is not above 0.5


def test_verdicts():
    assert rc._verdict(2, 2) == "holds" and rc._verdict(0, 3) == "does not hold"
    assert rc._verdict(1, 1, 5) == "holds in 1 of 6 (5 undecided)"
    assert rc._verdict(1, 2, 0, 3) == "holds in 1 of 5 (3 with too few networks)"
    assert rc._verdict(2, 2, 0, 1) == "holds in 2 of 3 (1 with too few networks)"
    assert rc._verdict(0, 0, 0, 6) == "undecided (too few networks)"
    assert rc._verdict(0, 0, 2, 1) == "undecided at this level (1 with too few networks)"
    assert rc._verdict(0, 0) == "not tested (no data)"


def _bins_table(n, rng, post_slope):
    """``n`` networks: ECE at 5 and 25 bins; the relative change after temperature scaling
    ``post_slope`` times that before, plus noise."""
    pre5, post5 = rng.uniform(0.02, 0.2, n), rng.uniform(0.01, 0.05, n)
    change = rng.uniform(0.1, 0.4, n)
    return pd.DataFrame({"space": "tss", "hp": "200", "dataset": "cifar10", "accuracy": rng.uniform(0.3, 0.8, n),
                         "pre_ece_15": pre5, "pre_ece_5": pre5, "pre_ece_25": pre5 * (1 + change),
                         "post_ece_5": post5,
                         "post_ece_25": post5 * (1 + post_slope * change + rng.normal(0, 0.05, n))})


def test_question6_is_a_wilcoxon_test_checked_against_scipy():
    rng = np.random.default_rng(5)
    nets = _bins_table(200, rng, 3.0)
    out = rc.claims(nets, pd.DataFrame(), pd.DataFrame(), [5, 15, 25], min_networks=30).set_index("question")
    pre = nets["pre_ece_25"] / nets["pre_ece_5"] - 1
    post = nets["post_ece_25"] / nets["post_ece_5"] - 1
    want = wilcoxon(post - pre)
    assert want.pvalue < 1e-10
    assert out.loc["q6", "verdict"] == "holds"
    assert out.loc["q6", "evidence"] == (f"tss cifar10: median change pre {np.median(pre):+.0%}, post "
                                         f"{np.median(post):+.0%}; Wilcoxon signed-rank W = {want.statistic:.1f}, "
                                         f"p = {want.pvalue:.3g}, n = 200: yes")
    assert "Wilcoxon" in out.loc["q6", "test"]
    # the same medians' direction without a significant difference: undecided, not "holds"
    same = _bins_table(200, np.random.default_rng(6), 1.0)
    text, ok = rc.bins_outcome("t", same["pre_ece_5"], same["pre_ece_25"], same["post_ece_5"], same["post_ece_25"],
                               0.95, 30)
    p = wilcoxon((same["post_ece_25"] / same["post_ece_5"]) - (same["pre_ece_25"] / same["pre_ece_5"])).pvalue
    assert (ok is None) == (p >= 0.05) and f"p = {p:.3g}" in text
    # 5 networks: too few
    few = _bins_table(5, rng, 3.0)
    out = rc.claims(few, pd.DataFrame(), pd.DataFrame(), [5, 15, 25], min_networks=30).set_index("question")
    assert out.loc["q6", "verdict"] == "undecided (too few networks)"
    assert out.loc["q6", "evidence"] == "tss cifar10: too few networks to decide (n = 5)"
    assert out.loc["q5", "evidence"] == "tss cifar10: networks above 90 %: too few networks to decide (n = 0)"


def test_min_networks_reaches_the_report_settings_from_the_schema():
    base = {"analysis": {"hcs_betas": [1], "top_k": [], "top_n": 3}, "bins": [15], "demo": False}
    assert schema_default("analysis", "min_networks") == 30
    assert registry.report_settings(base)["min_networks"] == 30
    base["analysis"]["min_networks"] = 50
    assert registry.report_settings(base)["min_networks"] == 50
    assert "min_networks" not in str(registry.part_settings(base, registry.find("kendall")))  # only the report decides with it


def _sss_table(n, rng, dataset, slope):
    """``n`` SSS networks of random channel strings, pre ECE ``slope`` x total channels + noise."""
    widths = rng.choice([8, 16, 24, 32, 40, 48, 56, 64], size=(n, 5))
    arch = [":".join(str(c) for c in w) for w in widths]
    ece = 0.1 + slope * widths.sum(1) / 320 + rng.normal(0, 0.02, n)
    return pd.DataFrame({"space": "sss", "hp": "90", "dataset": dataset, "arch_str": arch,
                         "accuracy": rng.uniform(0.3, 0.8, n), "pre_ece_15": ece})


def test_question7_ranks_every_sss_network_by_width_checked_against_scipy():
    from scipy.stats import kendalltau

    rng = np.random.default_rng(7)
    wider_worse = pd.concat([_sss_table(300, rng, "cifar100", 0.1), _sss_table(300, rng, "ImageNet16-120", 0.1),
                             _sss_table(300, rng, "cifar10", -0.1)])  # CIFAR-10 is not a complex dataset: not asked
    out = rc.claims(wider_worse, pd.DataFrame(), pd.DataFrame(), [15], min_networks=30).set_index("question")
    assert out.loc["q7", "verdict"] == "holds" and out.loc["q7", "tested"] == 2
    part = wider_worse[wider_worse["dataset"] == "cifar100"]
    tau = kendalltau([sum(int(c) for c in a.split(":")) for a in part["arch_str"]], part["pre_ece_15"]).statistic
    assert f"sss cifar100: channels against pre_ece_15: tau {tau:.2f} [" in out.loc["q7", "evidence"]
    assert "300 networks: yes" in out.loc["q7", "evidence"] and "cifar10:" not in out.loc["q7", "evidence"]
    narrower_worse = _sss_table(300, rng, "cifar100", -0.1)
    out = rc.claims(narrower_worse, pd.DataFrame(), pd.DataFrame(), [15], min_networks=30).set_index("question")
    assert out.loc["q7", "verdict"] == "does not hold"
    from calibench.analysis.stats import kendall_jackknife

    for seed in range(4):  # no relation: whatever the noise gives, the interval decides
        unrelated = _sss_table(300, np.random.default_rng(seed), "cifar100", 0.0)
        _, ok = rc.width_outcomes(unrelated, "pre_ece_15", 0.95, 30)[0]
        widths = [sum(int(c) for c in a.split(":")) for a in unrelated["arch_str"]]
        _, lo, hi = kendall_jackknife(widths, unrelated["pre_ece_15"], 0.95)
        assert ok is (None if lo <= 0 <= hi else lo > 0)
    few = _sss_table(8, rng, "ImageNet16-120", 0.1)  # the 8 uniform-width networks were all the old test had
    out = rc.claims(few, pd.DataFrame(), pd.DataFrame(), [15], min_networks=30).set_index("question")
    assert out.loc["q7", "verdict"] == "undecided (too few networks)"


def _metric_pairs(n: int, intervals: list[tuple[float, float]]) -> pd.DataFrame:
    """Kendall rows of the ``metrics`` figure: one pair of pre error metrics per interval."""
    names = ["pre_ace_15", "pre_brier", "pre_ece_15", "pre_ksce", "pre_mce_15"]  # in order: row < col
    rows = [{"figure": "metrics", "space": "tss", "hp": "200", "dataset": "cifar10", "population": "all",
             "stage": None, "metric": None, "row": names[0], "col": names[i + 1], "tau": (lo + hi) / 2, "lo": lo,
             "hi": hi, "n": n} for i, (lo, hi) in enumerate(intervals)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("intervals, verdict", [
    ([(-0.05, 0.6)] * 3, "undecided at this level"),  # no pair decided: not evidence against (was "does not hold")
    ([(0.1, 0.6), (0.2, 0.5), (-0.05, 0.6)], "holds"),  # most pairs above 0
    ([(-0.6, -0.1), (-0.5, -0.2), (-0.05, 0.6)], "does not hold"),  # most below
    ([(0.1, 0.6), (-0.6, -0.1), (-0.05, 0.6), (-0.05, 0.6)], "undecided at this level"),
])
def test_question3_counts_undecided_pairs_as_undecided_not_against(intervals, verdict):
    kendall = _metric_pairs(40, intervals)
    out = rc.claims(pd.DataFrame(columns=["space", "hp", "dataset", "accuracy"]), kendall, pd.DataFrame(), [15],
                    min_networks=30)
    q3 = out[out["claim"] == rc.CLAIMS["q3"][0]].iloc[0]  # q3b shares the question
    assert q3["verdict"] == verdict, q3["evidence"]
    above = sum(lo > 0 for lo, _ in intervals)
    below = sum(hi < 0 for _, hi in intervals)
    assert q3["evidence"].startswith(f"tss cifar10: {above} of {len(intervals)} pairs above 0, {below} below, 40 networks")
