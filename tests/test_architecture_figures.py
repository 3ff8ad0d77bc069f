"""Question 7's architecture figures (calibench.analysis.nats.architecture_figures): cell kernel parameters
of TSS strings, ECE by kernel parameters (Fig. 8 left), the SSS uniform-width progression
(Fig. 9) and their plots, on small hand-made wide tables with ties, NaN, isomorph copies
and rows of the other search space."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from calibench.analysis.nats import architecture_figures as af
from calibench.sources.nats.archstr import SSS_GENOTYPE, TSS_OPS

ALL_3X3 = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|"
ALL_1X1 = "|nor_conv_1x1~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_1x1~1|nor_conv_1x1~2|"
ALL_NONE = "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"
MIXED_A = "|nor_conv_3x3~0|+|nor_conv_1x1~0|skip_connect~1|+|none~0|avg_pool_3x3~1|nor_conv_3x3~2|"  # 9+1+9
MIXED_B = "|nor_conv_1x1~0|+|nor_conv_3x3~0|none~1|+|skip_connect~0|nor_conv_3x3~1|avg_pool_3x3~2|"  # 1+9+9
NO_WEIGHTS = "|skip_connect~0|+|avg_pool_3x3~0|none~1|+|skip_connect~0|avg_pool_3x3~1|none~2|"
ONE_1X1 = "|none~0|+|none~0|none~1|+|none~0|none~1|nor_conv_1x1~2|"
# Kernel parameters derived by hand: 9 per nor_conv_3x3, 1 per nor_conv_1x1.
HAND = {ALL_3X3: 54, ALL_1X1: 6, ALL_NONE: 0, MIXED_A: 19, MIXED_B: 19, NO_WEIGHTS: 0, ONE_1X1: 1,
        SSS_GENOTYPE: 45}


def single_edge(op: str, edge: int) -> str:
    """A cell with ``op`` on edge ``edge`` (string order) and ``none`` elsewhere."""
    ops = ["none"] * 6
    ops[edge] = op
    return f"|{ops[0]}~0|+|{ops[1]}~0|{ops[2]}~1|+|{ops[3]}~0|{ops[4]}~1|{ops[5]}~2|"


# ---------------------------------------------------------------- kernel parameters

@pytest.mark.parametrize("arch,expected", sorted(HAND.items()))
def test_kernel_parameters_of_hand_written_cells(arch, expected):
    assert af.tss_kernel_parameters(arch) == expected


@pytest.mark.parametrize("op,weights", [("none", 0), ("skip_connect", 0), ("nor_conv_1x1", 1),
                                        ("nor_conv_3x3", 9), ("avg_pool_3x3", 0)])
def test_kernel_parameters_of_each_operation_on_each_edge(op, weights):
    assert op in TSS_OPS
    for edge in range(6):
        assert af.tss_kernel_parameters(single_edge(op, edge)) == weights


def test_kernel_parameters_vectorised_and_validated():
    rng = np.random.default_rng(7)
    archs = ["+".join("|" + "|".join(f"{rng.choice(TSS_OPS)}~{s}" for s in range(j)) + "|" for j in (1, 2, 3))
             for _ in range(300)] + list(HAND)
    got = af.kernel_parameters(pd.Series(archs))
    # An independent oracle: count the op names in the string.
    assert got.tolist() == [9 * a.count("nor_conv_3x3") + a.count("nor_conv_1x1") for a in archs]
    assert got.dtype == np.int64 and af.kernel_parameters([]).shape == (0,)
    assert set(got) <= {9 * a + b for a in range(7) for b in range(7 - a)}  # 28 attainable values
    with pytest.raises(ValueError):
        af.tss_kernel_parameters("|conv_5x5~0|+|none~0|none~1|+|none~0|none~1|none~2|")
    with pytest.raises(ValueError):
        af.tss_kernel_parameters("8:8:8:8:8")


def test_stage_labels_cover_the_stages():
    assert set(af.STAGE_LABELS) == set(af.STAGE_ORDER)

def tss_rows() -> pd.DataFrame:
    """TSS rows: kernel values 54, 19 (two strings, tied ECE), 6, 0 (two strings), one NaN
    post, an isomorph copy (arch_index != measured_by) and a second hp and dataset."""
    rows = [
        # hp, dataset, arch_index, measured_by, seed, arch, accuracy, pre, post
        ("200", "cifar10", 0, 0, 777, ALL_3X3, 0.93, 0.050, 0.010),
        ("200", "cifar10", 1, 1, 777, MIXED_A, 0.90, 0.040, 0.012),
        ("200", "cifar10", 2, 2, 777, MIXED_B, 0.89, 0.040, np.nan),  # tie with MIXED_A, failed post fit
        ("200", "cifar10", 3, 3, 777, ALL_1X1, 0.85, 0.030, 0.020),
        ("200", "cifar10", 4, 4, 777, ALL_NONE, 0.10, 0.300, 0.050),
        ("200", "cifar10", 5, 5, 777, NO_WEIGHTS, 0.60, 0.100, 0.030),
        ("200", "cifar10", 6, 6, 777, ONE_1X1, 0.40, 0.200, 0.040),
        ("200", "cifar10", 7, 1, 777, ALL_3X3, 0.90, 0.040, 0.012),  # copy of 1 under another string
        ("200", "cifar10", 8, 8, 777, MIXED_B, 0.91, 0.060, 0.015),
        ("200", "cifar10", 9, 9, 777, MIXED_A, 0.92, 0.040, 0.011),  # a third tie at 19
        ("200", "cifar100", 0, 0, 777, ALL_3X3, 0.70, 0.150, 0.020),
        ("200", "cifar100", 1, 1, 777, MIXED_A, 0.65, 0.120, 0.030),
        ("200", "cifar100", 3, 3, 777, ALL_1X1, 0.55, 0.080, 0.025),
        ("12", "cifar10", 0, 0, 111, ALL_3X3, 0.80, 0.020, 0.015),
        ("12", "cifar10", 3, 3, 111, ALL_1X1, 0.70, np.nan, np.nan),  # all NaN at one kernel value
    ]
    df = pd.DataFrame(rows, columns=["hp", "dataset", "arch_index", "measured_by", "seed", "arch_str", "accuracy",
                                     "pre_ece_15", "post_ece_15"])
    df.insert(0, "space", "tss")
    df["pre_ece_5"] = df["pre_ece_15"] / 2
    return df


def sss_rows() -> pd.DataFrame:
    """SSS rows: uniform widths 8 (two seeds), 16, 64 and 40 (only on ImageNet16-120), and
    non-uniform strings that must not be picked; a NaN vs ECE; stages pre, post, vs."""
    rows = [
        # hp, dataset, arch_index, seed, arch, accuracy, pre, post, vs
        ("12", "cifar10", 0, 777, "8:8:8:8:8", 0.50, 0.10, 0.02, 0.03),
        ("12", "cifar10", 0, 888, "8:8:8:8:8", 0.54, 0.12, 0.04, np.nan),
        ("12", "cifar10", 9, 777, "16:16:16:16:16", 0.60, 0.08, 0.02, 0.02),
        ("12", "cifar10", 3, 777, "8:8:8:8:16", 0.51, 0.50, 0.50, 0.50),
        ("90", "cifar10", 0, 777, "8:8:8:8:8", 0.70, 0.05, 0.02, 0.01),
        ("90", "cifar10", 32767, 777, "64:64:64:64:64", 0.93, 0.04, 0.01, 0.01),
        ("90", "cifar10", 32766, 777, "64:64:64:64:56", 0.93, 0.90, 0.90, 0.90),
        ("90", "cifar10", 5, 777, "32:16:32:32:32", 0.80, 0.90, 0.90, 0.90),
        ("90", "ImageNet16-120", 0, 777, "8:8:8:8:8", 0.20, 0.03, 0.02, 0.02),
        ("90", "ImageNet16-120", 18724, 777, "40:40:40:40:40", 0.40, 0.09, 0.03, 0.04),
        ("90", "ImageNet16-120", 32767, 777, "64:64:64:64:64", 0.45, 0.12, 0.04, 0.05),
    ]
    df = pd.DataFrame(rows, columns=["hp", "dataset", "arch_index", "seed", "arch_str", "accuracy", "pre_ece_15",
                                     "post_ece_15", "vs_ece_15"])
    df.insert(0, "space", "sss")
    df["measured_by"] = df["arch_index"]
    return df


def both_spaces() -> pd.DataFrame:
    return pd.concat([tss_rows(), sss_rows()], ignore_index=True)


def expected_kernel_stats(df: pd.DataFrame, stage: str) -> pd.DataFrame:
    """The statistics straight from pandas over the measured TSS rows."""
    nets = df[(df["space"] == "tss") & (df["arch_index"] == df["measured_by"])].copy()
    nets["k"] = nets["arch_str"].map(HAND)
    col = f"{stage}_ece_15"
    g = nets.groupby(["hp", "dataset", "k"])
    out = pd.DataFrame({"n": g.size(), "n_nan": g[col].apply(lambda s: int(s.isna().sum())),
                        "mean": g[col].mean(), "median": g[col].median(), "q25": g[col].quantile(0.25),
                        "q75": g[col].quantile(0.75), "accuracy_median": g["accuracy"].median()})
    out["iqr"] = out["q75"] - out["q25"]
    # The table keeps a stage only for the (hp, dataset) where it has a value.
    keep = nets.groupby(["hp", "dataset"])[col].apply(lambda s: s.notna().any())
    return out[[bool(keep[(h, d)]) for h, d, _ in out.index]]


def test_kernel_parameter_table_matches_pandas():
    df = both_spaces()
    table = af.kernel_parameter_table(df, bins=[5, 15, 50])
    assert list(table.columns) == af.KERNEL_COLUMNS
    assert set(table["metric"]) == {"ece_15"} and set(table["stage"]) == {"pre", "post"}
    assert table["n"].sum() == 2 * (len(tss_rows()) - 1)  # two stages everywhere; the isomorph copy left out
    for stage in ("pre", "post"):
        exp = expected_kernel_stats(df, stage)
        got = table[table["stage"] == stage].set_index(["hp", "dataset", "kernel_params"])
        got.index = got.index.set_names(["hp", "dataset", "k"])
        assert sorted(got.index) == sorted(exp.index)
        got = got.loc[exp.index]
        for col in ("n", "n_nan"):
            assert got[col].tolist() == exp[col].astype(int).tolist(), (stage, col)
        for col in ("mean", "median", "q25", "q75", "iqr", "accuracy_median"):
            np.testing.assert_allclose(got[col].to_numpy(float), exp[col].to_numpy(float), rtol=0, atol=1e-12,
                                       err_msg=f"{stage} {col}")
    # Hand checks: three networks tie at 19 kernel parameters on CIFAR-10 (pre ECE .04, .06, .04).
    row = table[(table["hp"] == "200") & (table["dataset"] == "cifar10") & (table["kernel_params"] == 19)
                & (table["stage"] == "pre")].iloc[0]
    assert (row["n"], row["median"], row["q25"], row["q75"]) == (4, 0.04, 0.04, 0.045)
    post = table[(table["hp"] == "200") & (table["dataset"] == "cifar10") & (table["kernel_params"] == 19)
                 & (table["stage"] == "post")].iloc[0]
    assert post["n"] == 4 and post["n_nan"] == 1 and post["median"] == pytest.approx(0.012)
    # The isomorph copy (string ALL_3X3, values of network 1) is not counted at 54.
    at54 = table[(table["hp"] == "200") & (table["dataset"] == "cifar10") & (table["kernel_params"] == 54)]
    assert at54["n"].tolist() == [1, 1] and at54["median"].tolist() == [0.05, 0.01]
    # hp 12, kernel 6: every value NaN, kept with NaN statistics; order: hp, dataset, kernel, stage.
    nan_row = table[(table["hp"] == "12") & (table["kernel_params"] == 6)]
    assert nan_row["n_nan"].tolist() == [1, 1] and nan_row["median"].isna().all()
    assert table["hp"].tolist() == sorted(table["hp"].tolist())
    c10 = table[(table["hp"] == "200") & (table["dataset"] == "cifar10")]
    assert c10["kernel_params"].tolist() == sorted(c10["kernel_params"].tolist())
    assert c10["stage"].tolist()[:2] == ["pre", "post"]
    assert list(dict.fromkeys(table[table["hp"] == "200"]["dataset"])) == ["cifar10", "cifar100"]


def test_kernel_parameter_table_copies_bins_and_stages():
    df = tss_rows()
    with_copies = af.kernel_parameter_table(df, bins=[15], stages=("pre",), include_copies=True)
    at54 = with_copies[(with_copies["hp"] == "200") & (with_copies["dataset"] == "cifar10")
                       & (with_copies["kernel_params"] == 54)].iloc[0]
    assert at54["n"] == 2 and at54["median"] == pytest.approx(0.045)  # the copy counts under its own string
    # The configured bin count nearest 15 (5 of 5 and 50) picks the columns.
    five = af.kernel_parameter_table(df, bins=[5, 50], stages=("pre", "post"))
    assert set(five["metric"]) == {"ece_5"} and set(five["stage"]) == {"pre"}  # no post_ece_5 column
    ref = af.kernel_parameter_table(df, bins=[15], stages=("pre",))
    np.testing.assert_allclose(five["median"].to_numpy(float), ref["median"].to_numpy(float) / 2)
    # A stage without a column, or all NaN in a (hp, dataset), gives no rows there.
    df2 = df.assign(vs_ece_15=np.where(df["hp"] == "12", 0.01, np.nan))
    vs = af.kernel_parameter_table(df2, bins=[15], stages=("vs", "dir"))
    assert set(vs["stage"]) == {"vs"} and set(vs["hp"]) == {"12"}


def test_kernel_parameter_table_without_tss_rows():
    for df in (sss_rows(), pd.DataFrame(), tss_rows().iloc[:0]):
        table = af.kernel_parameter_table(df, bins=[15])
        assert table.empty and list(table.columns) == af.KERNEL_COLUMNS
    assert af.kernel_parameter_table(tss_rows(), bins=[15], stages=("iso",)).empty
    # No measured_by column: rows used as they are.
    plain = tss_rows().drop(columns="measured_by")
    assert af.kernel_parameter_table(plain, bins=[15], stages=("pre",))["n"].sum() == len(plain)


def test_width_progression_picks_exactly_the_uniform_networks():
    df = both_spaces()
    table = af.width_progression_table(df, stages=["pre", "post", "vs", "dir"], bins=[5, 15])
    assert list(table.columns) == af.WIDTH_KEYS + ["pre_ece_15", "post_ece_15", "vs_ece_15"]
    assert list(zip(table["hp"], table["dataset"], table["width"])) == [
        ("12", "cifar10", 8), ("12", "cifar10", 16), ("90", "cifar10", 8), ("90", "cifar10", 64),
        ("90", "ImageNet16-120", 8), ("90", "ImageNet16-120", 40), ("90", "ImageNet16-120", 64)]
    for _, row in table.iterrows():
        assert row["arch_str"] == ":".join([str(row["width"])] * 5)
    # Against pandas over the uniform SSS rows: means over the seeds, NaN skipped.
    sss = sss_rows()
    uniform = sss[sss["arch_str"].map(lambda a: len(set(a.split(":"))) == 1)]
    exp = uniform.groupby(["hp", "dataset", "arch_str"]).agg(
        n=("seed", "size"), accuracy=("accuracy", "mean"), pre_ece_15=("pre_ece_15", "mean"),
        post_ece_15=("post_ece_15", "mean"), vs_ece_15=("vs_ece_15", "mean"))
    got = table.set_index(["hp", "dataset", "arch_str"]).loc[exp.index]
    assert got["n"].tolist() == exp["n"].tolist()
    for col in ("accuracy", "pre_ece_15", "post_ece_15", "vs_ece_15"):
        np.testing.assert_allclose(got[col].to_numpy(float), exp[col].to_numpy(float), atol=1e-12, err_msg=col)
    eight = table[(table["hp"] == "12") & (table["width"] == 8)].iloc[0]
    assert eight["n"] == 2 and eight["accuracy"] == pytest.approx(0.52) and eight["vs_ece_15"] == pytest.approx(0.03)
    # Default stages: every stage with a column.
    default = af.width_progression_table(df)
    assert [c for c in default.columns if "_ece_" in c] == ["pre_ece_15", "post_ece_15", "vs_ece_15"]


def test_width_progression_without_sss_or_uniform_rows():
    assert af.width_progression_table(tss_rows()).empty
    assert af.width_progression_table(pd.DataFrame()).empty
    sss = sss_rows()
    none_uniform = sss[sss["arch_str"].str.split(":").map(lambda c: len(set(c)) > 1)]
    assert len(none_uniform) == 3
    table = af.width_progression_table(none_uniform, stages=["pre"])
    assert table.empty and list(table.columns) == af.WIDTH_KEYS + ["pre_ece_15"]


# ---------------------------------------------------------------- plots

def read_png(path):
    import matplotlib.image as mpimg

    assert path.exists() and path.stat().st_size > 2000
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
    assert float(image[..., :3].std()) > 0.01  # not a blank canvas
    return image


def test_plots_write_readable_pngs_at_population_scale(tmp_path):
    """All 15,625 TSS cells on three datasets (aggregated, so legible and quick), a second
    hp with one dataset only (empty panels), and the hand-made SSS rows."""
    rng = np.random.default_rng(3)
    archs = [single_edge("none", 0).replace("none", "{}").format(*ops) for ops in itertools.product(TSS_OPS, repeat=6)]
    n = len(archs)
    assert n == 15625 and len(set(archs)) == n
    k = np.array([9 * a.count("nor_conv_3x3") + a.count("nor_conv_1x1") for a in archs])
    pre = 0.02 + 0.002 * k + rng.gamma(2.0, 0.01, n)
    df = pd.DataFrame({"space": "tss", "hp": "200", "dataset": rng.choice(["cifar10", "cifar100", "ImageNet16-120"], n),
                       "arch_index": np.arange(n), "measured_by": np.arange(n), "seed": 777, "arch_str": archs,
                       "accuracy": rng.uniform(0.1, 0.95, n), "pre_ece_15": pre, "post_ece_15": pre / 4})
    df = pd.concat([df, tss_rows().query("hp == '12'"), sss_rows()], ignore_index=True)
    table = af.kernel_parameter_table(df, bins=[15])
    full = table[table["hp"] == "200"]
    assert full["kernel_params"].nunique() == 28 and full.groupby("stage")["n"].sum().tolist() == [n, n]
    path = af.plot_kernel_parameters(table, tmp_path / "plots" / "kernel.png", suffix=" [mini benchmark]")
    assert path == tmp_path / "plots" / "kernel.png"
    read_png(path)
    widths = af.width_progression_table(df)
    read_png(af.plot_width_progression(widths, tmp_path / "width.png", title="mini benchmark"))


def test_plots_of_empty_tables_write_nothing(tmp_path):
    empty_k = af.kernel_parameter_table(sss_rows(), bins=[15])
    empty_w = af.width_progression_table(tss_rows())
    assert af.plot_kernel_parameters(empty_k, tmp_path / "k.png") is None
    assert af.plot_width_progression(empty_w, tmp_path / "w.png") is None
    nan_only = af.kernel_parameter_table(tss_rows()[tss_rows()["hp"] == "12"].assign(pre_ece_15=np.nan),
                                         bins=[15], stages=("pre",))
    assert af.plot_kernel_parameters(nan_only, tmp_path / "n.png") is None
    assert not list(tmp_path.iterdir())
