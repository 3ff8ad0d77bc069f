"""calibench.analysis.groups: a population's models compared by a metadata column (Tao et al., ICLR 2024,
App. A-C), checked against scipy and numpy on a synthetic wide table."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, kruskal

from calibench.analysis import groups

BINS = [5, 15]
DATASETS = ["c10", "c100"]
SETTINGS = {"bins": BINS, "analysis": {"top_k": [100], "bootstrap": {"resamples": 0, "seed": 0, "level": 0.95,
                                                                     "scope": "findings"}}}
# family -> (networks, ECE offset): "hot" is clearly worse calibrated; "pair" and "solo" are too small
# for Kendall matrices and for the Kruskal-Wallis test (5 networks a group).
FAMILIES = {"cold": (10, 0.0), "mid": (10, 0.01), "hot": (10, 0.15), "pair": (2, 0.02), "solo": (1, 0.03)}


def wide_table(families=FAMILIES, space="zoo", hp="", seed=0) -> pd.DataFrame:
    """One row per (network, dataset), as the wide result tables hold a user population."""
    rng = np.random.default_rng(seed)
    family = np.concatenate([[f] * n for f, (n, _) in families.items()])
    offset = np.concatenate([[o] * n for _, (n, o) in families.items()])
    n = len(family)
    base = rng.uniform(0.01, 0.06, n)  # each network's own calibration, shared (noisily) by the datasets
    frames = []
    for d, dataset in enumerate(DATASETS):
        pre = base + offset + rng.normal(0, 0.01, n) + 0.02 * d
        post = 0.3 * pre + rng.uniform(0.0, 0.01, n)
        acc = rng.uniform(0.6, 0.95, n) - 0.2 * d
        frames.append(pd.DataFrame({
            "space": space, "hp": hp, "dataset": dataset, "arch_index": np.arange(n), "measured_by": np.arange(n),
            "seed": 0, "arch_str": [f"net{i}" for i in range(n)], "accuracy": acc,
            "pre_accuracy": acc, "post_accuracy": acc,
            "pre_ece_15": pre, "pre_ece_5": pre * 0.9 + rng.uniform(0, 0.005, n),
            "post_ece_15": post, "post_ece_5": post * 0.9 + rng.uniform(0, 0.005, n),
            "pre_nll": 0.5 + 5 * pre + rng.normal(0, 0.05, n), "post_nll": 0.5 + 5 * post + rng.normal(0, 0.05, n),
            "family": family, "loss": np.where(np.arange(n) % 2, "focal", "ce"),
        }))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def table():
    return wide_table()


@pytest.fixture(scope="module")
def summary(table):
    return groups.group_summary(table, "family", BINS)


@pytest.fixture(scope="module")
def matrices(table):
    return groups.group_kendall(table, "family", SETTINGS)


# ---------------------------------------------------------------- group_kendall

def test_group_kendall_taus_equal_scipy_on_each_group(table, matrices):
    assert set(matrices["group_by"]) == {"family"}
    for family in ("cold", "mid", "hot"):
        m = matrices[(matrices["group"] == family) & (matrices["figure"] == "datasets")
                     & (matrices["metric"] == "pre_ece_15") & (matrices["population"] == "all")
                     & (matrices["row"] == "c10") & (matrices["col"] == "c100")]
        assert len(m) == 1
        rows = table[table["family"] == family]
        a = rows[rows["dataset"] == "c10"].set_index("arch_index")["pre_ece_15"]
        b = rows[rows["dataset"] == "c100"].set_index("arch_index")["pre_ece_15"]
        both = pd.concat([a, b], axis=1, join="inner")
        assert m["n"].iloc[0] == len(both) == FAMILIES[family][0]
        assert m["tau"].iloc[0] == pytest.approx(kendalltau(both.iloc[:, 0], both.iloc[:, 1]).statistic, abs=1e-12)


def test_group_kendall_metric_matrix_of_a_group_equals_scipy(table, matrices):
    """Fig. 4a within one group and dataset: pre ECE against pre NLL."""
    m = matrices[(matrices["group"] == "hot") & (matrices["figure"] == "metrics") & (matrices["dataset"] == "c100")
                 & (matrices["row"] == "pre_ece_15") & (matrices["col"] == "pre_nll") & matrices["stage"].isna()]
    assert len(m) == 1
    rows = table[(table["family"] == "hot") & (table["dataset"] == "c100")]
    assert m["tau"].iloc[0] == pytest.approx(kendalltau(rows["pre_ece_15"], rows["pre_nll"]).statistic, abs=1e-12)


def test_group_kendall_skips_small_groups_and_logs(table, caplog):
    with caplog.at_level(logging.INFO, logger="calibench.analysis.groups"):
        m = groups.group_kendall(table, "family", SETTINGS)
    assert set(m["group"]) == {"cold", "mid", "hot"}
    assert "pair" in caplog.text and "solo" in caplog.text


def test_group_kendall_group_values_are_strings(table):
    t = table.assign(size=np.where(table["arch_index"] < 15, 1, 2))
    m = groups.group_kendall(t, "size", SETTINGS)
    assert set(m["group"]) == {"1", "2"}


def test_group_kendall_counts_measured_networks_not_isomorph_copies():
    small = wide_table({"x": (2, 0.0), "y": (5, 0.1)})
    copies = small[small["family"] == "x"].assign(arch_index=lambda f: f["arch_index"] + 100)  # copies of x's 2
    m = groups.group_kendall(pd.concat([small, copies], ignore_index=True), "family", SETTINGS)
    assert set(m["group"]) == {"y"}  # x: 2 measured networks, 4 rows (was counted as 4)


def test_group_kendall_empty_when_no_group_qualifies():
    small = wide_table({"x": (2, 0.0), "y": (1, 0.1)})
    m = groups.group_kendall(small, "family", SETTINGS)
    assert m.empty and {"group_by", "group", "row", "col", "tau"} <= set(m.columns)


def test_a_missing_column_raises_naming_it_and_the_metadata(table):
    for call in (lambda: groups.group_kendall(table, "optimizer", SETTINGS),
                 lambda: groups.group_summary(table, "optimizer", BINS)):
        with pytest.raises(ValueError, match="optimizer") as err:
            call()
        assert "family" in str(err.value) and "loss" in str(err.value)


# ---------------------------------------------------------------- group_summary

def test_group_summary_one_row_per_group_and_stage(table, summary):
    assert len(summary) == len(DATASETS) * len(FAMILIES) * 2  # stages pre and post
    assert not summary.duplicated(["space", "hp", "dataset", "group_by", "group", "stage"]).any()
    assert set(summary["stage"]) == {"pre", "post"} and set(summary["group_by"]) == {"family"}
    assert (summary["ece_bins"] == 15).all()


def test_group_summary_statistics_equal_numpy(table, summary):
    for (dataset, family), rows in table.groupby(["dataset", "family"]):
        for stage in ("pre", "post"):
            s = summary[(summary["dataset"] == dataset) & (summary["group"] == family) & (summary["stage"] == stage)]
            assert len(s) == 1
            s = s.iloc[0]
            values = rows[f"{stage}_ece_15"].to_numpy()
            assert s["n"] == len(rows) == FAMILIES[family][0]
            assert s["ece_median"] == pytest.approx(np.median(values), abs=1e-12)
            assert s["ece_q25"] == pytest.approx(np.quantile(values, 0.25), abs=1e-12)
            assert s["ece_q75"] == pytest.approx(np.quantile(values, 0.75), abs=1e-12)
            assert s["accuracy_median"] == pytest.approx(np.median(rows["accuracy"]), abs=1e-12)


def test_kruskal_wallis_equals_scipy_and_separates_the_families(table, summary):
    for dataset in DATASETS:
        for stage in ("pre", "post"):
            rows = table[table["dataset"] == dataset]
            # every family of 5 or more networks (the chi-square approximation); "pair" and "solo" do not enter
            samples = [rows.loc[rows["family"] == f, f"{stage}_ece_15"].to_numpy()
                       for f in ("cold", "mid", "hot")]
            expected = kruskal(*samples).pvalue
            p = summary.loc[(summary["dataset"] == dataset) & (summary["stage"] == stage), "p_groups"]
            assert p.nunique() == 1  # one test per (space, hp, dataset, stage), on every group's row
            assert p.iloc[0] == pytest.approx(expected, rel=1e-12)
            assert p.iloc[0] < 0.01


def test_kruskal_wallis_not_separated_when_the_groups_are_alike():
    alike = wide_table({"u": (12, 0.0), "v": (12, 0.0)}, seed=3)
    s = groups.group_summary(alike, "family", BINS)
    pre = s[(s["dataset"] == "c10") & (s["stage"] == "pre")]
    assert pre["p_groups"].iloc[0] > 0.01


def test_p_groups_nan_with_fewer_than_two_testable_groups():
    one = groups.group_summary(wide_table({"only": (8, 0.0)}), "family", BINS)
    assert one["p_groups"].isna().all() and (one["n"] == 8).all()
    lonely = groups.group_summary(wide_table({"big": (8, 0.0), "solo": (1, 0.1)}), "family", BINS)
    assert lonely["p_groups"].isna().all()
    pairs = groups.group_summary(wide_table({"a": (2, 0.0), "b": (2, 0.5), "c": (2, 1.0)}), "family", BINS)
    assert pairs["p_groups"].isna().all()  # groups of 2: the chi-square approximation does not hold
    assert groups.group_summary(wide_table({"a": (5, 0.0), "b": (5, 0.5)}), "family", BINS)["p_groups"].notna().all()


def test_group_summary_counts_measured_networks_of_the_first_seed(table):
    copy = table[table["arch_index"] == 0].assign(arch_index=999)  # an isomorph copy: measured_by 0
    other_seed = table.assign(seed=1, pre_ece_15=table["pre_ece_15"] + 1.0)  # a second seed, not summarised
    s = groups.group_summary(pd.concat([table, copy, other_seed], ignore_index=True), "family", BINS)
    base = groups.group_summary(table, "family", BINS)
    pd.testing.assert_frame_equal(s, base)


def test_group_summary_keeps_spaces_and_hps_apart():
    both = pd.concat([wide_table(space="zoo"), wide_table(space="tss", hp="200", seed=1)], ignore_index=True)
    s = groups.group_summary(both, "family", BINS)
    assert set(zip(s["space"], s["hp"])) == {("zoo", ""), ("tss", "200")}
    solo = groups.group_summary(wide_table(space="tss", hp="200", seed=1), "family", BINS)
    mine = s[s["space"] == "tss"].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, solo)


# ---------------------------------------------------------------- plots and HTML

def _png_shape(path):
    from matplotlib.image import imread

    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return imread(path).shape


def test_plot_groups_writes_valid_pngs(tmp_path):
    both = pd.concat([wide_table(space="zoo"), wide_table(space="my zoo", hp="200", seed=1)], ignore_index=True)
    made = groups.plot_groups(both, "family", BINS, tmp_path / "plots", demo=" (demo)")
    names = sorted(p.name for _, p in made)
    assert names == sorted(["groups_family_zoo.png", "groups_kendall_family_zoo.png",
                            "groups_family_my_zoo_200.png", "groups_kendall_family_my_zoo_200.png"])
    for title, path in made:
        assert title and path.is_file() and path.parent == tmp_path / "plots"
        h, w, channels = _png_shape(path)
        assert h > 100 and w > 100 and channels in (3, 4)


def test_plot_groups_many_models_one_dataset(tmp_path):
    """Legible with many networks (no points over 200 per group); one dataset: no cross-dataset heatmap."""
    big = wide_table({"a": (250, 0.0), "b": (30, 0.05)}, seed=2)
    big = big[big["dataset"] == "c10"]
    made = groups.plot_groups(big, "family", BINS, tmp_path)
    assert [p.name for _, p in made] == ["groups_family_zoo.png"]
    assert len(_png_shape(made[0][1])) == 3


def test_groups_html(summary):
    text = groups.groups_html(summary)
    assert text.count("<table") == 1 and "</table>" in text
    s = summary[(summary["dataset"] == "c10") & (summary["group"] == "hot") & (summary["stage"] == "pre")].iloc[0]
    assert f"{s['ece_median']:.4f} [{s['ece_q25']:.4f}, {s['ece_q75']:.4f}]" in text
    assert f"{s['p_groups']:.2g}" in text
    assert "hot" in text and "solo" in text
    assert "<table" not in groups.groups_html(summary.iloc[0:0])


def test_groups_html_escapes_group_names():
    t = wide_table({"<b>x</b>": (4, 0.0), "y&z": (4, 0.1)})
    text = groups.groups_html(groups.group_summary(t, "family", BINS))
    assert "<b>x</b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text and "y&amp;z" in text
