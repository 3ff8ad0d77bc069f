"""Several training schedules (hp) per space (question 6, Fig. 6c): the comparison's
functions against direct pandas / scipy computations on a hand-made two-hp table, the
figure, the config schema and the planned DAG (dry runs only), the mini benchmark's hp 12
weights, and the error of a schedule whose archive holds no weights."""

import collections
import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy.stats import kendalltau

from calibench.config import settings

from calibench.analysis.nats import schedules as hp_compare
from calibench.sources.nats.archive import ArchiveError, NatsArchive, NoWeightsError, arch_file, prefetch
from fixtures import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
BINS = [5, 15, 50]
STAGES = ["pre", "post", "iso"]


# ---------------------------------------------------------------- a hand-made two-hp table

def _two_hp_table() -> pd.DataFrame:
    """TSS at hp 12 and 200 on two datasets, SSS at hp 90 only. Architectures 0-7 under both
    TSS schedules, 8 only under hp 12, 9 only under hp 200; 10 is an isomorph copy of 3
    (measured_by 3, to be left out); architecture 2 has two seeds under hp 200 (the lowest
    counts); a few NaN values."""
    rng = np.random.default_rng(7)
    rows = []
    for dataset in ("cifar100", "cifar10"):  # not in the report's order, on purpose
        for hp, archs, seed in (("12", list(range(9)), 111), ("200", [*range(8), 9], 777)):
            for a in archs:
                seeds = [seed, 888] if (hp, a) == ("200", 2) else [seed]
                for s in seeds:
                    rows.append({"space": "tss", "hp": hp, "dataset": dataset, "arch_index": a, "measured_by": a,
                                 "seed": s})
            rows.append({"space": "tss", "hp": hp, "dataset": dataset, "arch_index": 10, "measured_by": 3,
                         "seed": seed})
        for a in range(5):
            rows.append({"space": "sss", "hp": "90", "dataset": dataset, "arch_index": a, "measured_by": a,
                         "seed": 777})
    df = pd.DataFrame(rows)
    df["accuracy"] = rng.uniform(0.3, 0.9, len(df))
    for stage in STAGES:
        for b in BINS:  # an architecture's own level, noise, and hp 12 worse by 0.05
            level = {key: rng.uniform(0.01, 0.2) for key in set(zip(df["dataset"], df["arch_index"]))}
            base = np.array([level[key] for key in zip(df["dataset"], df["arch_index"])])
            df[f"{stage}_ece_{b}"] = (base * (1 + 0.05 * b ** 0.5) + rng.normal(0, 0.01, len(df))
                                      + np.where(df["hp"] == "12", 0.05, 0.0))
    df["pre_cwce_15"] = rng.uniform(0, 0.1, len(df))  # another metric: not an ECE column
    # NaN values: one per side and one on both sides, in pre ECE at 15 bins, cifar10
    c10 = df["dataset"] == "cifar10"
    for hp, a in (("12", 1), ("200", 4), ("12", 6), ("200", 6)):
        df.loc[c10 & (df["hp"] == hp) & (df["arch_index"] == a), "pre_ece_15"] = np.nan
    # the isomorph copy and the second seed carry values that would change every statistic
    df.loc[df["arch_index"] == 10, [c for c in df.columns if "_ece_" in c]] = 5.0
    df.loc[(df["arch_index"] == 2) & (df["seed"] == 888), [c for c in df.columns if "_ece_" in c]] = -5.0
    return df


def _direct(df, dataset, stage, b):
    """The expected row, straight from pandas and scipy."""
    col = f"{stage}_ece_{b}"
    t = df[(df["space"] == "tss") & (df["dataset"] == dataset) & (df["arch_index"] == df["measured_by"])]
    t = t[~((t["arch_index"] == 2) & (t["seed"] == 888))]
    a = t[t["hp"] == "12"].set_index("arch_index")[col]
    z = t[t["hp"] == "200"].set_index("arch_index")[col]
    shared = sorted(set(a.index) & set(z.index))
    a, z = a.loc[shared], z.loc[shared]
    both = a.notna() & z.notna()
    d = (z - a)[both]
    x, y = a[both].to_numpy(), z[both].to_numpy()
    loo = np.array([kendalltau(np.delete(x, i), np.delete(y, i)).statistic for i in range(len(x))])
    n = len(x)
    se = math.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum())
    tau = kendalltau(x, y).statistic
    return {"shared": shared, "n_a": int(a.notna().sum()), "n_b": int(z.notna().sum()), "n": int(both.sum()),
            "median_a": a.median(), "q25_a": a.quantile(0.25), "q75_a": a.quantile(0.75),
            "median_b": z.median(), "q25_b": z.quantile(0.25), "q75_b": z.quantile(0.75),
            "median_diff": d.median(), "q25_diff": d.quantile(0.25), "q75_diff": d.quantile(0.75),
            "share_b_lower": float((d < 0).mean()), "tau": tau,
            "lo": max(-1.0, tau - 1.959963984540054 * se), "hi": min(1.0, tau + 1.959963984540054 * se)}


def test_schedules_pairs_and_columns():
    df = _two_hp_table()
    assert hp_compare.schedules(df) == {"tss": ["12", "200"]}  # sss has one schedule: nothing to compare
    assert hp_compare.hp_pairs(df) == [("tss", "12", "200")]
    assert hp_compare.binned_columns(df) == {s: BINS for s in STAGES}
    assert hp_compare.binned_columns(df, "cwce") == {"pre": [15]}
    three = pd.concat([df, df[df["hp"] == "12"].assign(hp="90")])
    assert hp_compare.hp_pairs(three) == [("tss", "12", "90"), ("tss", "12", "200"), ("tss", "90", "200")]


def test_paired_joins_measured_architectures_on_their_first_seed():
    df = _two_hp_table()
    joined = hp_compare.paired(df, "tss", "cifar10", "12", "200", ["pre_ece_5"])
    assert list(joined.columns) == ["arch_index", "pre_ece_5@12", "pre_ece_5@200"]
    assert joined["arch_index"].tolist() == list(range(8))  # 8 and 9: one schedule only; 10: a copy
    first = df[(df["dataset"] == "cifar10") & (df["hp"] == "200") & (df["arch_index"] == 2) & (df["seed"] == 777)]
    assert joined.loc[joined["arch_index"] == 2, "pre_ece_5@200"].item() == first["pre_ece_5"].item()


def test_compare_hps_equals_direct_pandas_and_scipy():
    df = _two_hp_table()
    out = hp_compare.compare_hps(df)
    assert list(out.columns) == hp_compare.COLUMNS
    assert len(out) == 2 * len(STAGES) * len(BINS)  # 2 datasets, every stage and bin count; no sss rows
    assert out["dataset"].drop_duplicates().tolist() == ["cifar10", "cifar100"]
    assert set(out["stage"]) == set(STAGES) and set(out["metric"]) == {"ece"}
    assert (out[["space", "hp_a", "hp_b"]].drop_duplicates().values.tolist() == [["tss", "12", "200"]])
    for r in out.itertuples():
        want = _direct(df, r.dataset, r.stage, r.bins)
        for key in ("n_a", "n_b", "n"):
            assert getattr(r, key) == want[key], (r.dataset, r.stage, r.bins, key)
        for key in ("median_a", "q25_a", "q75_a", "median_b", "q25_b", "q75_b", "median_diff", "q25_diff",
                    "q75_diff", "share_b_lower", "tau", "lo", "hi"):
            assert getattr(r, key) == pytest.approx(want[key], rel=1e-12, abs=1e-12), (r.dataset, r.stage, key)
        assert r.interval == "jackknife"
    nan_row = out[(out["dataset"] == "cifar10") & (out["stage"] == "pre") & (out["bins"] == 15)].iloc[0]
    assert (nan_row["n_a"], nan_row["n_b"], nan_row["n"]) == (6, 6, 5)  # arch 1, 4 one side each, 6 both
    full = out[(out["dataset"] == "cifar100")]
    assert (full["n"] == 8).all()
    assert (full["median_diff"] < 0).all() and (full["tau"] > 0.3).all()  # hp 12 worse, same ranking


def test_compare_hps_options_and_nothing_to_compare():
    df = _two_hp_table()
    some = hp_compare.compare_hps(df, stages=["post"], bins=[15, 50])
    assert set(some["stage"]) == {"post"} and set(some["bins"]) == {15, 50}
    boot = hp_compare.compare_hps(df, stages=["pre"], bins=[5], interval="bootstrap", resamples=200, seed=1)
    assert (boot["interval"] == "bootstrap").all()
    # (a tau of 1 and its resamples' can differ in the last bit: 1 - 2**-53 against 1.0)
    assert (boot["lo"] <= boot["tau"] + 1e-12).all() and (boot["tau"] <= boot["hi"] + 1e-12).all()
    with pytest.raises(ValueError, match="interval"):
        hp_compare.compare_hps(df, interval="percentile")
    single = df[df["hp"] != "12"]
    empty = hp_compare.compare_hps(single)
    assert empty.empty and list(empty.columns) == hp_compare.COLUMNS
    assert hp_compare.findings(empty, min_networks=2).empty and hp_compare.comparison_html(empty) == ""
    # two schedules but no architecture measured under both: no rows
    apart = df[~((df["hp"] == "200") & (df["arch_index"] != 9))]
    assert hp_compare.compare_hps(apart).empty


def test_two_pairs_undefined_tau_and_interval():
    df = _two_hp_table()
    small = df[df["arch_index"].isin([0, 1, 3])]  # arch 1 has NaN pre_ece_15 under hp 12 on cifar10
    out = hp_compare.compare_hps(small, stages=["pre"], bins=[15])
    row = out[out["dataset"] == "cifar10"].iloc[0]
    assert row["n"] == 2 and not math.isnan(row["tau"])
    assert math.isnan(row["lo"]) and math.isnan(row["hi"]) and pd.isna(row["interval"])  # jackknife needs 3


def test_findings_and_html_name_the_schedules():
    from calibench.analysis.findings import FINDING_COLUMNS

    out = hp_compare.compare_hps(_two_hp_table())
    found = hp_compare.findings(out, BINS, min_networks=2)
    assert list(found.columns) == FINDING_COLUMNS
    assert len(found) == 2 * 2  # pre and post at 15 bins, two datasets
    assert (found["question"] == "q6").all() and (found["hp"] == "12 vs 200").all()
    assert found["dataset"].tolist() == ["cifar10", "cifar10", "cifar100", "cifar100"]
    first = found.iloc[0]
    want = out[(out["dataset"] == "cifar10") & (out["stage"] == "pre") & (out["bins"] == 15)].iloc[0]
    assert first["value"] == want["tau"] and first["lo"] == want["lo"]
    assert "pre ECE (15 bins), tss hp 12 against hp 200, cifar10" in first["text"]
    assert f"median {want['median_a']:.3f} against {want['median_b']:.3f}" in first["text"]
    assert f"[{want['lo']:.2f}, {want['hi']:.2f}]" in first["text"] and "too few" not in first["text"]
    # below analysis.min_networks architectures: tau without its interval, and no decision
    few = hp_compare.findings(out, BINS, min_networks=int(want["n"]) + 1).iloc[0]
    assert few["text"].endswith(f"tau {want['tau']:.2f}, too few networks to decide (n = {int(want['n'])})")
    assert few["value"] == want["tau"] and math.isnan(few["lo"]) and pd.isna(few["interval"])
    page = hp_compare.comparison_html(out)
    assert "hp 12: median [IQR]" in page and "hp 200: median [IQR]" in page and "<table" in page
    assert "iso" not in page  # pre and post only by default


def test_plot_writes_a_png_and_nothing_without_two_schedules(tmp_path):
    df = _two_hp_table()
    path = hp_compare.plot_hp_comparison(df, tmp_path / "plots" / "hp_comparison.png", demo=True)
    assert path == tmp_path / "plots" / "hp_comparison.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    none = tmp_path / "none" / "hp_comparison.png"
    assert hp_compare.plot_hp_comparison(df[df["hp"] != "200"], none) is None
    assert not none.parent.exists()
    assert hp_compare.plot_hp_comparison(df[["space", "hp", "dataset", "arch_index"]], none) is None


# ---------------------------------------------------------------- config: schema, settings, DAG

def _config(**changes) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config.update(changes)
    return config


def _validate(config: dict) -> None:
    from snakemake.utils import validate

    validate(config, str(SCHEMA))


@pytest.mark.parametrize("hp", [{"tss": "200", "sss": "90"}, {"tss": ["12", "200"], "sss": "90"},
                                {"tss": ["200"], "sss": ["12", "90"]}])
def test_schema_accepts_one_schedule_or_a_list(hp):
    _validate(_config(hp=hp))


@pytest.mark.parametrize("hp, message", [
    ({"tss": ["12", "201"]}, "'201' is not one of"),
    ({"sss": ["90", "200"]}, "'200' is not one of"),
    ({"tss": "201"}, "'201' is not one of"),
    ({"tss": []}, "should be non-empty"),
    ({"tss": ["12", "12"]}, "non-unique"),
    ({"tss": [200]}, "200 is not one of"),
])
def test_schema_refuses_a_bad_schedule_naming_it(hp, message):
    from snakemake.exceptions import WorkflowError

    with pytest.raises(WorkflowError, match=message):
        _validate(_config(hp=hp))


def test_settings_hps_and_the_minibench_check():
    assert settings.hps({"hp": {"tss": "200"}}, "tss") == ["200"]
    assert settings.hps({"hp": {"tss": ["12", "200"]}}, "tss") == ["12", "200"]
    with pytest.raises(ValueError, match="no training schedule given for space 'sss'"):
        settings.hps({"hp": {"tss": "200"}}, "sss")
    mini = {"build": True, "dir": "x"}
    settings.check_hps({"minibench": mini, "spaces": ["tss", "sss"], "hp": {"tss": "200", "sss": "90"}})
    with pytest.raises(ValueError, match=r"tss hp 12 .*minibench.tss_hp12_weights: true"):
        settings.check_hps({"minibench": mini, "spaces": ["tss"], "hp": {"tss": ["12", "200"]}})
    settings.check_hps({"minibench": {**mini, "tss_hp12_weights": True}, "spaces": ["tss"],
                        "hp": {"tss": ["12", "200"]}})
    with pytest.raises(ValueError, match="sss hp 12"):
        settings.check_hps({"minibench": {**mini, "tss_hp12_weights": True}, "spaces": ["sss"],
                            "hp": {"sss": ["12", "90"]}})
    settings.check_hps({"minibench": {**mini, "real_size": True}, "spaces": ["sss"], "hp": {"sss": ["12", "90"]}})
    settings.check_hps({"minibench": {"build": False, "dir": "x"}, "spaces": ["tss"], "hp": {"tss": "12"}})


def test_minibench_weighted_hps_agree_with_the_minibench():
    from calibench.sources.nats import minibench

    spec, with_12 = minibench.MiniBenchSpec(), minibench.MiniBenchSpec(tss_hp12_weights=True)
    for space, hps in minibench.SCHEDULES.items():
        assert tuple(hp for hp in hps if not minibench.weightless(space, hp, spec)) == \
            settings.MINIBENCH_WEIGHTED_HPS[space]
    assert not minibench.weightless("tss", "12", with_12) and minibench.weightless("sss", "12", with_12)
    assert spec.describe() == "MiniBenchSpec(n_tss=6, n_sss=6, n_test=300, n_train=100, seed=0, second_seed=False)"
    assert with_12.describe().endswith("second_seed=False, tss_hp12_weights=True)")


def _dry_run(tmp_path: Path, overrides: dict) -> subprocess.CompletedProcess:
    workdir = copy_workflow(tmp_path, overrides)
    return subprocess.run([sys.executable, "-m", "snakemake", "--configfile", "tiny.yaml", "--cores", "1", "-n", "-p"],
                          cwd=workdir, capture_output=True, text=True, timeout=300)


MINI = {"build": True, "dir": "resources/minibench", "n_tss": 3, "n_sss": 4, "n_test": 60, "n_train": 30, "seed": 3}


def test_dry_run_plans_one_table_per_schedule(tmp_path):
    proc = _dry_run(tmp_path, {"minibench": {**MINI, "tss_hp12_weights": True}, "hp": {"tss": ["12", "200"]},
                               "datasets": ["cifar10", "cifar100"]})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    tables = {line.split("output: ")[1].split(",")[0] for line in text.splitlines()
              if "output: results/tables/" in line}
    assert tables == {f"results/tables/{s}_{d}.parquet" for s in ("tss_12", "tss_200", "sss_90")
                      for d in ("cifar10", "cifar100")}
    assert "--tss-hp12-weights" in text  # the mini benchmark keeps the hp 12 weights


def test_dry_run_stops_on_a_schedule_the_minibench_holds_no_weights_for(tmp_path):
    proc = _dry_run(tmp_path, {"minibench": MINI, "hp": {"tss": ["12", "200"]}, "datasets": ["cifar10"]})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "tss hp 12" in text and "minibench.tss_hp12_weights" in text
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- archives: hp 12 weights and none

TINY_ARCH = "|nor_conv_1x1~0|+|skip_connect~0|none~1|+|avg_pool_3x3~0|none~1|skip_connect~2|"


@pytest.fixture
def one_thread():
    """Tiny fits run far faster on one thread than on many contending for two cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _canonical(obj):
    """Decoded content, comparable with ==: tensors as (dtype, shape, bytes)."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), tuple(obj.shape), obj.numpy().tobytes())
    if isinstance(obj, dict):
        return tuple((repr(k), _canonical(v)) for k, v in sorted(obj.items(), key=lambda kv: repr(kv[0])))
    if isinstance(obj, (list, tuple)):
        return tuple(_canonical(v) for v in obj)
    return repr(obj)


def test_minibench_hp12_weights_are_a_deterministic_less_fitted_head(one_thread, tmp_path):
    from calibench.sources.nats import minibench
    from calibench.sources.nats.networks import build_network

    spec_on = minibench.MiniBenchSpec(n_test=30, n_train=30, seed=2, tss_hp12_weights=True)
    spec_off = minibench.MiniBenchSpec(n_test=30, n_train=30, seed=2)
    splits = {"cifar10": minibench._make_dataset(np.random.default_rng(2), "cifar10", spec_on)}
    on = minibench._build_arch_file("tss", 0, TINY_ARCH, splits, spec_on)
    again = minibench._build_arch_file("tss", 0, TINY_ARCH, splits, spec_on)
    off = minibench._build_arch_file("tss", 0, TINY_ARCH, splits, spec_off)
    assert _canonical(on) == _canonical(again)  # content-deterministic
    assert _canonical(on["200"]) == _canonical(off["200"])  # hp 200 unchanged by the option
    assert off["12"]["all_results"][("cifar10", 111)]["net_state_dict"] is None and off["12"]["clear_net_done"]
    r12, r200 = on["12"]["all_results"][("cifar10", 111)], on["200"]["all_results"][("cifar10", 777)]
    assert not on["12"]["clear_net_done"]
    assert r12["eval_acc1es"] == off["12"]["all_results"][("cifar10", 111)]["eval_acc1es"]  # the same fit
    sd12, sd200 = r12["net_state_dict"], r200["net_state_dict"]
    assert set(sd12) == set(sd200)
    head = {"classifier.weight", "classifier.bias"}
    assert all(torch.equal(sd12[k], sd200[k]) for k in sd12 if k not in head)  # the same body
    assert not torch.equal(sd12["classifier.weight"], sd200["classifier.weight"])
    build_network("tss", TINY_ARCH, 10).load_state_dict(sd12, strict=True)
    # written as an archive, NatsArchive reads hp 12 with its weights
    directory = tmp_path / minibench.TSS_DIR
    minibench.write_pbz2(arch_file(directory, 0), on)
    minibench.write_pbz2(directory / "meta.pickle.pbz2", {"meta_archs": [TINY_ARCH], "total_archs": 1,
                                                           "arch2infos": None, "evaluated_indexes": set()})
    (entry,) = NatsArchive(directory, "tss", "12").load(0, "cifar10")
    assert entry.hp == "12" and entry.seed == 111 and torch.equal(entry.state_dict["classifier.bias"],
                                                                  sd12["classifier.bias"])


def _weightless_archive(directory: Path) -> Path:
    """A one-architecture TSS archive whose hp 12 record has no weights (as the default mini benchmark's)."""
    from calibench.sources.nats.minibench import _result_record, write_pbz2

    config = {"channel": 16, "num_cells": 5, "arch_str": TINY_ARCH, "class_num": 10}
    per_hp = collections.OrderedDict()
    for hp, epochs, seed in (("12", 12, 111), ("200", 200, 777)):
        record = _result_record("cifar10", epochs, seed, None, 0.5, 0.5, 1.0, config, 0.1, 10.0)
        per_hp[hp] = {"arch_index": 0, "arch_str": TINY_ARCH, "all_results": {("cifar10", seed): record},
                      "dataset_seed": {"cifar10": [seed]}, "clear_net_done": True}
    write_pbz2(arch_file(directory, 0), per_hp)
    write_pbz2(directory / "meta.pickle.pbz2", {"meta_archs": [TINY_ARCH], "total_archs": 1, "arch2infos": None,
                                                "evaluated_indexes": set()})
    return directory


def test_a_schedule_without_weights_stops_loading_naming_the_hp_and_file(tmp_path):
    archive = NatsArchive(_weightless_archive(tmp_path / "NATS-tss-v1_0-3ffb9-full"), "tss", "12")
    with pytest.raises(NoWeightsError, match=r"000000\.pickle\.pbz2\): no weights stored at hp 12 "
                                             r"for \(cifar10, seed 111\)"):
        archive.load(0, "cifar10")
    # prefetch raises it (every file of the schedule would fail alike) instead of yielding a failure
    with pytest.raises(NoWeightsError, match="hp 12"):
        list(prefetch(archive, [0], "cifar10"))
    err = NoWeightsError(0, "/a/000000.pickle.pbz2", "no weights stored at hp 12")
    back = pickle.loads(pickle.dumps(err))  # crosses from loader processes intact
    assert type(back) is NoWeightsError and isinstance(back, ArchiveError) and str(back) == str(err)
