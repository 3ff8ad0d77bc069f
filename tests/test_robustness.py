"""Question 2 (Fig. 3, App. N): the external robustness table (calibench.analysis.nats.robustness).

A fixture in the layout of the Jung et al. 2023 export (clean_acc, fgsm_Linf_acc0_1,
pgd_Linf_acc8_0, brightness, zoom_blur, a non-numeric column) written by the test as CSV
with a shuffled ``arch_index`` column, as parquet keyed by ``arch_str``, and as CSV with no
key column (row i = architecture i); joined to a small expanded TSS result table (isomorph
copies, two seeds, two datasets); taus checked against scipy on hand-built subsets."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from calibench.analysis.nats import robustness as rb
from calibench.analysis import stats
from calibench.sources.nats.archstr import TSS_OPS

N_TABLE = 150          # table indices 0..149
N_ROB = 170            # robustness rows for indices 0..169 except MISSING (150..169 match nothing)
MISSING = {5, 40}      # measured networks without a robustness row
ROB_COLUMNS = ["clean_acc", "fgsm_Linf_acc0_1", "pgd_Linf_acc8_0", "brightness", "zoom_blur"]
METRICS = ["pre_ece_15", "post_ece_15", "pre_ksce", "pre_nll", "pre_ood_auroc_gaussian_noise"]


def arch(i: int) -> str:
    o = [TSS_OPS[(i // 5 ** d) % 5] for d in range(6)]
    return f"|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|"


def rep(i: int) -> int:
    """Isomorphism classes of the fixture: every index ending in 9 is a copy of the one before."""
    return i - 1 if i % 10 == 9 else i


def result_table(seed: int = 0) -> pd.DataFrame:
    """An expanded TSS result table (and one SSS row): cifar10 and cifar100, seed 777 for
    every network and a second seed (888) for a few; copies repeat their representative's
    values; accuracy rounded (ties); OoD AUROC on CIFAR-10 only."""
    rng = np.random.default_rng(seed)
    rows = []
    for dataset in ("cifar10", "cifar100"):
        measured = {}
        for i in range(N_TABLE):
            if rep(i) != i:
                continue
            acc = round(float(rng.uniform(0.3, 0.95)), 2)
            vals = {"accuracy": acc, "pre_ece_15": float(rng.uniform(0.01, 0.3)),
                    "post_ece_15": float(rng.uniform(0.01, 0.1)), "pre_ksce": round(float(rng.uniform(0, 0.2)), 2),
                    "pre_nll": float(rng.uniform(0.2, 2.0)),
                    "pre_ood_auroc_gaussian_noise": float(rng.uniform(0.4, 0.9)) if dataset == "cifar10" else np.nan}
            measured[i] = vals
        for i in range(N_TABLE):
            for s in (777, 888) if i % 7 == 0 else (777,):
                vals = dict(measured[rep(i)])
                if s == 888:  # another training seed: other numbers, must not be used
                    vals = {k: (v if np.isnan(v) else 1 - v) for k, v in vals.items()}
                rows.append({"space": "tss", "hp": "200", "dataset": dataset, "arch_index": i, "measured_by": rep(i),
                             "seed": s, "nats_index": i, "arch_str": arch(i), **vals})
    rows.append({"space": "sss", "hp": "90", "dataset": "cifar10", "arch_index": 0, "measured_by": 0, "seed": 777,
                 "nats_index": 0, "arch_str": "8:8:8:8:8", "accuracy": 0.5, "pre_ece_15": 0.1})
    return pd.DataFrame(rows)


def robustness_raw(seed: int = 1) -> pd.DataFrame:
    """The fixture in index order (before shuffling): the five value columns with ties
    (rounding) and NaNs, a non-numeric column, and arch_index / arch_str."""
    rng = np.random.default_rng(seed)
    idx = [i for i in range(N_ROB) if i not in MISSING]
    n = len(idx)
    df = pd.DataFrame({
        "arch_index": idx, "arch_str": [arch(i) for i in idx],
        "clean_acc": np.round(rng.uniform(0.5, 0.95, n), 2),
        "fgsm_Linf_acc0_1": rng.uniform(0.1, 0.6, n),
        "pgd_Linf_acc8_0": np.round(rng.uniform(0.0, 0.1, n), 2),
        "brightness": rng.uniform(0.4, 0.9, n),
        "zoom_blur": rng.uniform(0.3, 0.8, n),
        "notes": [f"net{i}" for i in idx],
    })
    df.loc[[3, 17, 60], "zoom_blur"] = np.nan
    return df


def shuffled(df: pd.DataFrame, seed: int = 2) -> pd.DataFrame:
    order = np.random.default_rng(seed).permutation(len(df))
    assert (order != np.arange(len(df))).any()
    return df.iloc[order].reset_index(drop=True)


@pytest.fixture
def files(tmp_path: Path):
    raw = robustness_raw()
    by_index = shuffled(raw)[["clean_acc", "fgsm_Linf_acc0_1", "notes", "arch_index", "pgd_Linf_acc8_0",
                              "brightness", "zoom_blur"]]
    by_index.to_csv(tmp_path / "rob_index.csv", index=False)
    shuffled(raw, 3).drop(columns=["arch_index"]).to_parquet(tmp_path / "rob_str.parquet", index=False)
    # row i = architecture i: every index 0..N_ROB-1, no key column
    positional = robustness_raw(4).set_index("arch_index").reindex(range(N_ROB)).reset_index()
    positional = positional.drop(columns=["arch_index", "arch_str"]).assign(notes="x")
    positional.to_csv(tmp_path / "rob_rows.csv", index=False)
    return {"raw": raw, "index": tmp_path / "rob_index.csv", "str": tmp_path / "rob_str.parquet",
            "rows": tmp_path / "rob_rows.csv", "positional": positional, "shuffled": by_index}


# ---------------------------------------------------------------- loading


def test_load_by_index_shuffled(files, caplog):
    with caplog.at_level(logging.WARNING, logger="calibench.analysis.nats.robustness"):
        rob = rb.load_robustness(files["index"], "arch_index")
    assert list(rob.columns) == ["arch_index", "clean_acc", "fgsm_Linf_acc0_1", "pgd_Linf_acc8_0", "brightness",
                                 "zoom_blur"]
    assert "notes" in caplog.text  # the dropped non-numeric column is named
    raw = files["raw"]
    assert rob["arch_index"].tolist() == raw["arch_index"].tolist()  # sorted by key
    # by hand: the file's first row is some architecture; its values are found under its index
    first = files["shuffled"].iloc[0]
    got = rob[rob["arch_index"] == first["arch_index"]].iloc[0]
    for c in ROB_COLUMNS:
        assert got[c] == pytest.approx(first[c], nan_ok=True)
    pd.testing.assert_frame_equal(rob[ROB_COLUMNS], raw[ROB_COLUMNS], check_dtype=False)
    assert rob.attrs == {"source": str(files["index"]), "key": "arch_index"}
    assert rb.robustness_columns(rob) == ROB_COLUMNS


def test_load_by_arch_str(files):
    rob = rb.load_robustness(files["str"], "arch_str")
    assert list(rob.columns) == ["arch_str", *ROB_COLUMNS]
    expected = files["raw"].set_index("arch_str").loc[rob["arch_str"], ROB_COLUMNS]
    np.testing.assert_array_equal(rob[ROB_COLUMNS].to_numpy(), expected.to_numpy())


def test_load_row_order_is_index(files):
    rob = rb.load_robustness(files["rows"], "arch_index")
    assert rob["arch_index"].tolist() == list(range(N_ROB))
    pos = files["positional"]
    for i in (0, 5, 77, N_ROB - 1):  # 5: an all-NaN row of the file is still architecture 5
        np.testing.assert_array_equal(rob.loc[i, ROB_COLUMNS].to_numpy(float), pos.loc[i, ROB_COLUMNS].to_numpy(float))


def test_load_written_pandas_index(tmp_path, files):
    pos = files["positional"]
    pos.to_csv(tmp_path / "ok.csv")  # index written: 'Unnamed: 0' = 0, 1, 2, ... is dropped
    rob = rb.load_robustness(tmp_path / "ok.csv", "arch_index")
    assert list(rob.columns) == ["arch_index", *ROB_COLUMNS]
    # index written, rows shuffled: the row order is not the index order, refuse to guess
    pos.iloc[np.random.default_rng(0).permutation(len(pos))].to_csv(tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=r"bad\.csv.*'Unnamed: 0'"):
        rb.load_robustness(tmp_path / "bad.csv", "arch_index")


# ---------------------------------------------------------------- join


def _measured_first_seed(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["arch_index"] == df["measured_by"]) & (df["seed"] == 777)]


def test_join_by_hand(files, caplog):
    table = result_table()
    rob = rb.load_robustness(files["index"], "arch_index")
    with caplog.at_level(logging.INFO, logger="calibench.analysis.nats.robustness"):
        joined = rb.join_robustness(table, rob, "arch_index")
    tss = table[table["space"] == "tss"]
    expected_rows = tss[~tss["arch_index"].isin(MISSING)]
    assert len(joined) == len(expected_rows)
    assert f"{len(expected_rows)} of {len(tss)} TSS table rows matched" in caplog.text
    assert "20 robustness row(s) match no table row" in caplog.text  # indices 150..169
    assert (joined["space"] == "tss").all()
    assert joined.attrs["robustness_columns"] == ROB_COLUMNS
    # every joined row carries its own index's values, read from the shuffled file by hand
    by_hand = {int(r["arch_index"]): r for _, r in files["shuffled"].iterrows()}
    for _, r in joined.iterrows():
        want = by_hand[int(r["arch_index"])]
        for c in ROB_COLUMNS:
            assert r[c] == pytest.approx(want[c], nan_ok=True)
    # a copy (9 is measured by 8) has its own robustness values, not its representative's
    r9 = joined[(joined["arch_index"] == 9) & (joined["dataset"] == "cifar10")].iloc[0]
    assert r9["measured_by"] == 8 and r9["clean_acc"] == by_hand[9]["clean_acc"] != by_hand[8]["clean_acc"]
    # table columns untouched, table order kept
    pd.testing.assert_frame_equal(joined[table.columns], expected_rows.reset_index(drop=True))


def test_join_by_arch_str_equals_join_by_index(files):
    table = result_table()
    a = rb.join_robustness(table, rb.load_robustness(files["index"], "arch_index"))
    b = rb.join_robustness(table, rb.load_robustness(files["str"], "arch_str"))
    pd.testing.assert_frame_equal(a, b)
    c = rb.join_robustness(table, rb.load_robustness(files["rows"], "arch_index"), datasets=["cifar100"])
    assert set(c["dataset"]) == {"cifar100"}
    assert len(c) == ((table["space"] == "tss") & (table["dataset"] == "cifar100")).sum()  # every index 0..169


def reindexed(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` as an archive of its own indexes it (the mini benchmark: 0, 1, ... in its own
    order): arch_index and measured_by renumbered, nats_index kept."""
    tss = table[table["space"] == "tss"]
    own = {n: i for i, n in enumerate(np.random.default_rng(5).permutation(sorted(set(tss["arch_index"]))))}
    return table.assign(arch_index=[own.get(i, i) for i in table["arch_index"]],
                        measured_by=[own.get(i, i) for i in table["measured_by"]])


def test_a_join_by_index_pairs_nats_bench_indices_not_the_archive_s_own(files):
    """The tables' arch_index is the archive's own (the mini benchmark's 0, 1, ...); a file
    keyed by NATS-Bench index joins to each row's nats_index, so every row gets its own
    cell's values: the same as a join by the cell's string."""
    table = reindexed(result_table())
    assert (table["arch_index"] != table["nats_index"]).mean() > 0.9
    by_index = rb.join_robustness(table, rb.load_robustness(files["index"], "arch_index"))
    by_cell = rb.join_robustness(table, rb.load_robustness(files["str"], "arch_str"))
    pd.testing.assert_frame_equal(by_index, by_cell)
    want = files["raw"].set_index("arch_str")
    np.testing.assert_array_equal(by_index["clean_acc"], want.loc[by_index["arch_str"], "clean_acc"])
    assert len(by_index) == (~table["nats_index"].isin(MISSING) & (table["space"] == "tss")).sum()


def test_a_join_by_index_without_nats_bench_indices_is_refused(files):
    rob = rb.load_robustness(files["index"], "arch_index")
    table = result_table()
    unknown = table.assign(nats_index=pd.array([None] * len(table), dtype="Int64"))
    with pytest.raises(ValueError) as err:
        rb.join_robustness(unknown, rob)
    assert str(err.value) == (
        f"robustness table {str(files['index'])!r} (key arch_index): result table tss_200_cifar10: 344 of 344 TSS "
        "rows have no NATS-Bench index (nats_index null), so a join by arch_index cannot pair their rows with the right "
        "cells; join by the cell: robustness.key: arch_str")
    with pytest.raises(ValueError, match="no nats_index column .* robustness.key: arch_str"):
        rb.join_robustness(table.drop(columns=["nats_index"]), rob)
    rb.join_robustness(unknown, rb.load_robustness(files["str"], "arch_str"))  # by the cell: fine


def test_tables_built_before_nats_index_join_by_index_only_on_the_whole_space(tmp_path, files):
    """A table without nats_index (built before it existed): its arch_index is NATS-Bench's
    only where the population's archive lists the whole TSS space."""
    import json

    from calibench import layout

    old = result_table().drop(columns=["nats_index"])
    rob = rb.load_robustness(files["index"], "arch_index")
    doc = layout.population_path(tmp_path, "tss")
    doc.parent.mkdir(parents=True)
    doc.write_text(json.dumps({"arch_strs": ["x"] * 3}))  # a mini benchmark's: its own indices
    with pytest.raises(ValueError, match="no nats_index column"):
        rb.join_robustness(rb._index_full_space(old, tmp_path), rob)
    doc.write_text(json.dumps({"arch_strs": ["x"] * rb.TSS_SIZE}))  # NATS-Bench's archive
    joined = rb.join_robustness(rb._index_full_space(old, tmp_path), rob)
    want = rb.join_robustness(result_table(), rob)
    pd.testing.assert_frame_equal(joined[want.columns], want)


def test_join_renames_colliding_columns(files):
    rob = rb.load_robustness(files["index"]).rename(columns={"brightness": "accuracy"})
    joined = rb.join_robustness(result_table(), rob)
    assert "accuracy_robustness" in joined.columns
    assert joined.attrs["robustness_columns"] == ["clean_acc", "fgsm_Linf_acc0_1", "pgd_Linf_acc8_0",
                                                  "accuracy_robustness", "zoom_blur"]


# ---------------------------------------------------------------- Kendall tau


def test_kendall_against_scipy_per_population(files):
    table = result_table()
    joined = rb.join_robustness(table, rb.load_robustness(files["index"]))
    pops = (20, 50, 1000, "all")
    k = rb.robustness_kendall(joined, METRICS, ROB_COLUMNS, populations=pops)
    assert list(k.columns) == rb.KENDALL_COLUMNS
    by_hand = files["raw"].set_index("arch_index")
    checked = 0
    for dataset in ("cifar10", "cifar100"):
        nets = _measured_first_seed(table[(table["space"] == "tss") & (table["dataset"] == dataset)])
        nets = nets[~nets["arch_index"].isin(MISSING)].copy()
        for c in ROB_COLUMNS:
            nets[c] = by_hand.loc[nets["arch_index"], c].to_numpy()
        sub = k[k["dataset"] == dataset]
        assert set(sub["population"]) == {"top20", "top50", "all"}  # 1000 > the 134 networks
        for label, size in (("top20", 20), ("top50", 50), ("all", len(nets))):
            order = np.lexsort((nets["arch_index"].to_numpy(), -nets["accuracy"].to_numpy()))
            part = nets.iloc[order[:size]]
            rows = sub[sub["population"] == label]
            assert (rows["population_size"] == size).all()
            metrics = [m for m in METRICS if nets[m].notna().sum() > 1]  # no OoD AUROC on CIFAR-100
            assert (dataset == "cifar10") == ("pre_ood_auroc_gaussian_noise" in metrics)
            for m in metrics:
                for c in ROB_COLUMNS:
                    row = rows[(rows["metric"] == m) & (rows["robustness"] == c) & (rows["kind"] == "robustness")]
                    assert len(row) == 1
                    x, y = part[m].to_numpy(float), part[c].to_numpy(float)
                    keep = ~(np.isnan(x) | np.isnan(y))
                    assert row["n"].item() == keep.sum()
                    assert row["tau"].item() == pytest.approx(kendalltau(x[keep], y[keep]).statistic, abs=1e-12)
                    want = stats.kendall_jackknife(x, y)  # resamples 0: jackknife intervals
                    assert (row["lo"].item(), row["hi"].item()) == pytest.approx(want[1:], abs=1e-12)
                    assert row["interval"].item() == "jackknife"
                    checked += 1
            # Fig. 3's other lines: every other metric against pre_ece_15
            for m in metrics[1:]:
                row = rows[(rows["metric"] == "pre_ece_15") & (rows["robustness"] == m) & (rows["kind"] == "metric")]
                x, y = part["pre_ece_15"].to_numpy(float), part[m].to_numpy(float)
                assert row["tau"].item() == pytest.approx(kendalltau(x, y).statistic, abs=1e-12)
            assert len(rows) == len(metrics) * len(ROB_COLUMNS) + len(metrics) - 1
    assert checked == 3 * 25 + 3 * 20


def test_kendall_bootstrap_intervals(files):
    joined = rb.join_robustness(result_table(), rb.load_robustness(files["index"]), datasets=["cifar10"])
    k = rb.robustness_kendall(joined, ["pre_ece_15", "pre_nll"], ["clean_acc", "zoom_blur"], populations=(40,),
                              resamples=60, seed=3, level=0.9)
    nets = _measured_first_seed(joined)
    part = nets.sort_values("arch_index").nlargest(40, "accuracy")
    ref = stats.kendall_cross_ci(part, ["pre_ece_15", "pre_nll"], ["clean_acc", "zoom_blur"], 60, 3, 0.9)
    got = k[k["kind"] == "robustness"].reset_index(drop=True)
    np.testing.assert_allclose(got[["tau", "lo", "hi"]].to_numpy(float), ref[["tau", "lo", "hi"]].to_numpy(float))
    assert (got["lo"] <= got["tau"]).all() and (got["tau"] <= got["hi"]).all()


# ---------------------------------------------------------------- errors


def _write(tmp_path: Path, name: str, df: pd.DataFrame) -> Path:
    p = tmp_path / name
    df.to_parquet(p, index=False) if name.endswith(".parquet") else df.to_csv(p, index=False)
    return p


def test_errors_name_the_cause(tmp_path, files):
    raw = files["raw"]
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        rb.load_robustness(tmp_path / "nowhere.csv")
    (tmp_path / "rob.xlsx").write_text("x")
    with pytest.raises(ValueError, match=r"rob\.xlsx.*extension"):
        rb.load_robustness(tmp_path / "rob.xlsx")
    with pytest.raises(ValueError, match="unknown key 'arch_id'"):
        rb.load_robustness(files["index"], "arch_id")
    dup = pd.concat([raw, raw.iloc[[7]]], ignore_index=True)  # row 7: architecture 8 (5 is missing)
    with pytest.raises(ValueError, match=r"dup\.csv.*duplicate key arch_index=8 in rows \[7, 168\]"):
        rb.load_robustness(_write(tmp_path, "dup.csv", dup), "arch_index")
    with pytest.raises(ValueError, match=r"dup\.parquet.*duplicate key arch_str="):
        rb.load_robustness(_write(tmp_path, "dup.parquet", dup), "arch_str")
    with pytest.raises(ValueError, match=r"nonum\.csv.*no numeric column"):
        rb.load_robustness(_write(tmp_path, "nonum.csv", raw[["arch_index", "arch_str", "notes"]]))
    with pytest.raises(ValueError, match=r"nostr\.csv.*no key column 'arch_str'"):
        rb.load_robustness(_write(tmp_path, "nostr.csv", raw.drop(columns=["arch_str"])), "arch_str")
    bad = raw.copy()
    bad.loc[4, "arch_str"] = "|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|"
    with pytest.raises(ValueError, match=r"badstr\.csv.*'arch_str', row 4.*conv~0"):
        rb.load_robustness(_write(tmp_path, "badstr.csv", bad), "arch_str")
    for value, name in ((2.5, "frac"), (-1, "neg"), (15625, "big")):
        bad = raw.astype({"arch_index": float})
        bad.loc[9, "arch_index"] = value
        with pytest.raises(ValueError, match=rf"{name}\.csv.*'arch_index', row 9: {float(value)} is not a TSS"):
            rb.load_robustness(_write(tmp_path, f"{name}.csv", bad))
    with pytest.raises(ValueError, match=r"empty\.csv.*no rows"):
        rb.load_robustness(_write(tmp_path, "empty.csv", raw.iloc[:0]))
    far = raw.assign(arch_index=raw["arch_index"] + 10000)
    rob = rb.load_robustness(_write(tmp_path, "far.csv", far))
    with pytest.raises(ValueError, match=r"far\.csv.*no row matches any architecture"):
        rb.join_robustness(result_table(), rob)
    joined = rb.join_robustness(result_table(), rb.load_robustness(files["index"]))
    with pytest.raises(ValueError, match=r"\['pgd_Linf_acc9_0'\]"):
        rb.robustness_kendall(joined, METRICS, ["clean_acc", "pgd_Linf_acc9_0"])
    with pytest.raises(ValueError, match="population 1"):
        rb.robustness_kendall(joined, METRICS, ROB_COLUMNS, populations=(1, "all"))


# ---------------------------------------------------------------- Fig. 3


def test_plot_is_png_with_thirty_lines(tmp_path, files):
    joined = rb.join_robustness(result_table(), rb.load_robustness(files["index"]))
    rng = np.random.default_rng(5)
    extra = {}
    for attack in ("fgsm", "pgd", "aa_apgd_ce", "aa_square"):
        for eps in ("0_1", "0_5", "1_0", "2_0", "4_0"):
            extra[f"{attack}_Linf_acc{eps}"] = joined["clean_acc"] * rng.uniform(0.2, 1.0, len(joined))
    for corruption in ("brightness", "contrast", "defocus_blur", "elastic_transform", "fog", "zoom_blur"):
        extra[corruption] = rng.uniform(0.3, 0.9, len(joined))
    wide = pd.concat([joined.drop(columns=ROB_COLUMNS[1:]), pd.DataFrame(extra)], axis=1)
    columns = ["clean_acc", *extra]
    assert len(columns) == 27
    k = rb.robustness_kendall(wide, METRICS, columns, populations=(20, 50, 100, "all"))
    path = rb.robustness_plot(k, tmp_path / "plots" / "fig3.png", title="[test]")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    h, w = matplotlib.image.imread(path).shape[:2]
    assert w > 600 and h > 300
    # few lines with bootstrap intervals: drawn as error bars
    small = rb.robustness_kendall(joined, ["pre_ece_15", "pre_nll"], ["clean_acc", "pgd_Linf_acc8_0"],
                                  populations=(30, "all"), resamples=10)
    assert small["lo"].notna().any()
    assert rb.robustness_plot(small, tmp_path / "small.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="pre_ece_99"):
        rb.robustness_plot(k, tmp_path / "none.png", reference="pre_ece_99")
