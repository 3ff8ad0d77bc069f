"""Which architectures gain most from which method (calibench.analysis.nats.method_gains): the
regression finds planted effects with the right sign and leaves null features undecided, its
coefficients and HC3 intervals equal statsmodels', and too few networks decide nothing."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from calibench.analysis.nats import method_gains as mg
from calibench.results.archstr import SSS_CHANNEL_CHOICES, TSS_OPS

BINS = [5, 15, 50]


def tss_cell(ops) -> str:
    it = iter(ops)
    return "+".join("|" + "|".join(f"{next(it)}~{s}" for s in range(j)) + "|" for j in (1, 2, 3))


def frame(space: str, arch_strs: list[str], gains: dict[str, np.ndarray], dataset: str = "cifar10",
          pre: np.ndarray | None = None) -> pd.DataFrame:
    n = len(arch_strs)
    pre = np.full(n, 0.2) if pre is None else pre
    out = {"space": space, "hp": "200" if space == "tss" else "90", "dataset": dataset, "arch_index": np.arange(n),
           "measured_by": np.arange(n), "seed": 777, "arch_str": arch_strs, "pre_ece_15": pre}
    out.update({f"{stage}_ece_15": pre - gain for stage, gain in gains.items()})
    return pd.DataFrame(out)


def tss_population(rng, n: int) -> list[str]:
    return [tss_cell(rng.choice(TSS_OPS, 6)) for _ in range(n)]


def test_planted_tss_effects_are_found_with_their_sign_and_null_ones_stay_undecided(tmp_path):
    rng = np.random.default_rng(11)
    cells = tss_population(rng, 3000)
    conv = np.array([c.split("+")[1].split("|")[2].startswith("nor_conv_3x3") for c in cells])  # edge 2<-1
    skip = np.array([c.split("+")[2].split("|")[3].startswith("skip_connect") for c in cells])  # edge 3<-2
    noise = rng.normal(0, 0.004, len(cells)) * (1 + conv)  # heteroskedastic: what HC3 is for
    gains = {"post": 0.01 + 0.006 * conv - 0.004 * skip + noise, "iso": rng.normal(0.0, 0.01, len(cells))}
    out = mg.method_gains(frame("tss", cells, gains), BINS, level=0.95, min_networks=30)
    assert list(out.columns) == mg.COLUMNS
    post = out[out["stage"] == "post"].set_index("feature")
    assert len(post) == 24 and (post["n"] == 3000).all() and (post["p"] == 25).all()
    assert post.loc["edge 2<-1: nor_conv_3x3", "verdict"] == "more gain"
    assert post.loc["edge 3<-2: skip_connect", "verdict"] == "less gain"
    for feature, truth in (("edge 2<-1: nor_conv_3x3", 0.006), ("edge 3<-2: skip_connect", -0.004)):
        assert post.loc[feature, "low"] < truth < post.loc[feature, "high"], feature
    others = post.drop(index=["edge 2<-1: nor_conv_3x3", "edge 3<-2: skip_connect"])
    assert (others["verdict"] == "undecided").sum() >= 21  # Holm: at most a stray false positive
    iso = out[out["stage"] == "iso"]
    assert (iso["verdict"] == "undecided").sum() >= 23 and (iso["note"] == "").all()
    assert post["mean_gain"].iloc[0] == pytest.approx(gains["post"].mean(), rel=1e-12)
    # the heatmap: one per (space, hp), a panel per dataset in the study's order
    two = pd.concat([frame("tss", cells, gains, dataset=d) for d in ("cifar100", "cifar10")])
    made = mg.plot_gains(mg.method_gains(two, BINS, min_networks=30), tmp_path, suffix=" (demo)")
    assert [p.name for _, p in made] == ["method_gains_tss_200.png"]
    from PIL import Image

    with Image.open(made[0][1]) as image:
        assert 400 < image.width < 1400 and 500 < image.height < 1200, image.size  # 24 features legible
    assert mg.plot_gains(mg.method_gains(frame("tss", cells[:10], {"post": gains["post"][:10]}), BINS), tmp_path) == []


def test_coefficients_and_intervals_equal_statsmodels_hc3():
    sm = pytest.importorskip("statsmodels.api")
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(3)
    strings = [":".join(map(str, c)) for c in itertools.product(SSS_CHANNEL_CHOICES, repeat=5)]
    sss = list(rng.choice(strings, 800, replace=False))
    channels = np.array([[int(v) for v in s.split(":")] for s in sss], dtype=float)
    gain = 0.002 * channels[:, 4] / 8 + rng.normal(0, 0.01, len(sss)) * (1 + channels[:, 0] / 64)
    out = mg.method_gains(frame("sss", sss, {"vs": gain}, dataset="cifar100"), BINS, level=0.9, min_networks=30)
    fit = sm.OLS(gain, sm.add_constant(channels / 8)).fit(cov_type="HC3", use_t=True)
    interval = fit.conf_int(alpha=0.1)[1:]
    np.testing.assert_allclose(out["coef"], fit.params[1:], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out["se"], fit.bse[1:], rtol=1e-10)
    np.testing.assert_allclose(out[["low", "high"]].to_numpy(), interval, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out["p_value"], fit.pvalues[1:], rtol=1e-8, atol=1e-300)
    np.testing.assert_allclose(out["p_holm"], multipletests(fit.pvalues[1:], method="holm")[1], rtol=1e-8)
    assert out["r2"].iloc[0] == pytest.approx(fit.rsquared, rel=1e-12)
    assert out.set_index("feature").loc["layer 5: channels / 8", "verdict"] == "more gain"
    assert list(out["feature"]) == [f"layer {i}: channels / 8" for i in range(1, 6)]


def test_too_few_networks_collinear_or_constant_features_decide_nothing():
    rng = np.random.default_rng(5)
    cells = tss_population(rng, 40)
    gains = {"post": rng.normal(0.01, 0.01, 40)}
    few = mg.method_gains(frame("tss", cells, gains), BINS, min_networks=50)
    assert (few["verdict"] == "undecided").all() and few["coef"].isna().all()
    assert few["note"].iloc[0] == "too few networks to decide (n = 40, fewer than min_networks = 50)"
    under = mg.method_gains(frame("tss", cells[:12], {"post": gains["post"][:12]}), BINS, min_networks=0)
    assert under["note"].iloc[0].startswith("too few networks to decide (n = 12 networks for ")
    # two layers always equal: collinear
    sss = [f"{c}:{c}:{d}:32:64" for c in (8, 16, 24, 32) for d in (8, 16, 24, 32, 40, 48, 56, 64)]
    col = mg.method_gains(frame("sss", sss, {"post": rng.normal(0, 0.01, len(sss))}), BINS, min_networks=0)
    assert col["note"].iloc[0] == "collinear features (rank 3 of 4 coefficients): nothing decided"
    assert list(col["feature"]) == ["layer 1: channels / 8", "layer 2: channels / 8", "layer 3: channels / 8"]
    # an operation no network has on an edge is no feature; NaN gains leave their network out
    no_pool = [c for c in tss_population(rng, 600) if "avg_pool_3x3~0|+" not in c.split("+")[0] + "+"]
    g = rng.normal(0, 0.01, len(no_pool))
    g[:7] = np.nan
    out = mg.method_gains(frame("tss", no_pool, {"post": g}), BINS, min_networks=0)
    assert "edge 1<-0: avg_pool_3x3" not in set(out["feature"]) and len(out) == 23
    assert (out["n"] == len(no_pool) - 7).all()


def test_holm_matches_its_definition_and_the_report_table_says_verdicts():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, running maximum
    np.testing.assert_allclose(mg.holm(p), [0.04, 0.09, np.nan, 0.09, 0.5], equal_nan=True)
    rng = np.random.default_rng(11)
    cells = tss_population(rng, 3000)
    conv = np.array([c.split("+")[1].split("|")[2].startswith("nor_conv_3x3") for c in cells])
    out = mg.method_gains(frame("tss", cells, {"post": 0.01 * conv + rng.normal(0, 0.004, 3000)}), BINS,
                          min_networks=30)
    html = mg.gains_html(out, 0.95)
    assert "Which architectures gain most from each method" in html and "edge 2&lt;-1: nor_conv_3x3 +0.0" in html
    few = mg.method_gains(frame("tss", cells[:10], {"post": rng.normal(0, 0.01, 10)}), BINS, min_networks=30)
    assert "undecided: too few networks to decide (n = 10" in mg.gains_html(few, 0.95)
    assert mg.gains_html(few, 0.95).count("</tr>") == 2  # the header, and one line for the table's methods
    # the report's findings: one per table, the largest decided coefficient with its interval and n
    found = mg.findings(out)
    assert len(found) == 1 and found[0]["question"] == "q7" and found[0]["interval"] == "HC3"
    decided = out[out["verdict"] != "undecided"]
    top = decided.loc[decided["coef"].abs().idxmax()]
    assert top["feature"] == "edge 2<-1: nor_conv_3x3"
    assert (found[0]["value"], found[0]["lo"], found[0]["hi"]) == (top["coef"], top["low"], top["high"])
    assert found[0]["text"].startswith("TSS hp 200, cifar10: the gain in ECE (15 bins) from each method by "
                                       "architecture: post most with edge 2<-1: nor_conv_3x3 (+0.01")
    assert "n = 3000)" in found[0]["text"]
    nothing = mg.findings(few)
    assert nothing[0]["text"].endswith("no feature decides for any method — too few networks to decide (n = 10, "
                                       "fewer than min_networks = 30)") and np.isnan(nothing[0]["value"])
