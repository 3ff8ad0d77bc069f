"""The tao2024 exchange format (calibench.results.interop): our result tables -> the published
layout -> result tables again equal the originals on every shared column; a file written
here in the published layout imports and the analysis and queries run on it; malformed
files fail naming the file and the column or line."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.analysis import kendall as ak
from calibench.analysis import tables as at
from calibench.analysis.hcs import hcs_table
from calibench.analysis.methods import methods_summary
from calibench.analysis.nats.architecture import edge_op_frequency, size_brackets
from calibench.metrics.scores import hcs as hcs_score
from calibench.results import shards
from calibench.results import tables
from calibench.results import interop
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS
from calibench.sources.nats.population import representatives

BINS = (5, 10, 15, 20, 25, 50, 100, 200, 500)
BINNED = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
UNBINNED = ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "nll", "brier", "accuracy", "mean_conf_correct",
            "mean_conf_incorrect")


def tss_strings(n: int) -> list[str]:
    """The first ``n`` TSS cells in product order: many isomorphs among them."""
    out = []
    for ops in itertools.islice(itertools.product(TSS_OPS, repeat=6), n):
        it = iter(ops)
        out.append("+".join("|" + "|".join(f"{next(it)}~{s}" for s in range(j)) + "|" for j in (1, 2, 3)))
    return out


def sss_strings(n: int) -> list[str]:
    return [":".join(str(c) for c in ch) for ch in itertools.islice(itertools.product(SSS_CHANNEL_CHOICES, repeat=5),
                                                                     n)]


def stage_values(rng, index: int, stages, ood: bool) -> dict[str, dict[str, float]]:
    out = {}
    for stage in stages:
        row = {f"{m}_{b}": float(rng.uniform(0, 0.4)) for m in BINNED for b in BINS}
        row.update({m: float(rng.uniform(0.05, 1.0)) for m in UNBINNED})
        row["brier"] = float(rng.uniform(0.1, 1.6))
        row["nll"] = float("inf") if index % 7 == 3 else float(rng.uniform(0.1, 4))
        if index % 5 == 2:
            row["mean_conf_incorrect"] = float("nan")  # every sample right
        if ood and stage == "pre":
            row["ood_auroc_gaussian_noise"] = float(rng.uniform(0.4, 1))
            row["ood_auroc_svhn"] = float(rng.uniform(0.4, 1))
        if stage != "pre":
            row["fit_converged"] = 1.0
        out[stage] = row
    if index % 6 == 1:
        out["post"]["ece_15"] = float("nan")
    return out


def build(results: Path, space: str, hp: str, dataset: str, n: int, seed: int = 777,
          stages=("pre", "post", "vs"), pre_kdece: dict[int, float] | None = None) -> Path:
    """A result table made as the workflow makes it (shards -> calibench.results.tables.build_table):
    TSS measures the class representatives among the first ``n`` cells and expands them.
    ``pre_kdece``: that value for those networks."""
    arch_strs = tss_strings(n) if space == "tss" else sss_strings(n)
    reps = representatives(space, arch_strs)
    selected = sorted(set(reps))
    doc = {"space": space, "arch_strs": arch_strs, "representatives": reps, "selected": selected,
           "chunks": [selected]}
    pop = layout.population_path(results, space)
    pop.parent.mkdir(parents=True, exist_ok=True)
    pop.write_text(json.dumps(doc))
    rng = np.random.default_rng(n + len(dataset))
    for i in selected:
        prov = {"space": space, "hp": hp, "dataset": dataset, "arch_index": i, "arch_str": arch_strs[i], "seed": seed,
                "params": 0.1 + i, "flops": 2.0 * i, "temperature": 1.5, "accuracy": float(rng.uniform(0.1, 0.95)),
                "recorded_accuracy": 0.5, "n_eval": 100, "config_hash": f"k{i}", "logits_key": f"l{i}",
                "logits_file": "x"}
        values = stage_values(rng, i, stages, ood=dataset == "cifar10")
        if i in (pre_kdece or {}):
            values["pre"]["kdece"] = pre_kdece[i]
        shards.write_atomic_parquet(shards.shard_table(prov, values), layout.shard_path(results, space, hp, dataset, i))
    manifest = results / "manifests" / f"{space}_{hp}_{dataset}.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"shards": {str(i): f"k{i}" for i in selected}, "failures": []}))
    out = results / "tables" / f"{space}_{hp}_{dataset}.parquet"
    tables.build_table(space, hp, dataset, results, out, [manifest], results / "failures" / "x.parquet")
    return out


def assert_same(original: pd.DataFrame, back: pd.DataFrame, skip: set[str]) -> list[str]:
    """Every column in both (but ``skip``) equal, bit for bit (the Brier score too: x / K, times K)."""
    assert len(original) == len(back)
    shared = [c for c in original.columns if c in back.columns and c not in skip]
    for c in shared:
        a, b = original[c].to_numpy(), back[c].to_numpy()
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            a, b = a.astype(float), b.astype(float)
            assert np.array_equal(a, b, equal_nan=True), c
        else:
            assert [str(x) for x in a] == [str(x) for x in b], c
    return shared


# ---------------------------------------------------------------- round trip

def test_a_column_written_divided_by_k_comes_back_bit_for_bit():
    """The Brier score's scaling (theirs: ours / K): the text written gives every float64 back
    exactly, where float arithmetic does not (x / K * K != x for about one value in ten)."""
    from calibench.results.scaled_text import divided_text, multiplied_values

    rng = np.random.default_rng(5)
    for k in (10, 100, 120):
        x = np.concatenate([rng.uniform(0, 2, 5000), [np.nan, np.inf, 0.0, 5e-324, 1e-300, 2.0, 1.0 / 3.0]])
        assert ((x / k) * k != x).sum() > 100  # the float round trip is not exact
        text = divided_text(pd.Series(x), k)
        assert text.iloc[5000] is None and text.iloc[5001] == "inf"
        assert np.array_equal(multiplied_values(text.tolist(), k), x, equal_nan=True)
        # any reader gets the quotient itself: the text is an ordinary number, within an ulp of x / k
        parsed = pd.to_numeric(text).to_numpy(dtype=float)
        finite = np.isfinite(x)
        assert np.all(np.abs(parsed[finite] - x[finite] / k) <= np.spacing(x[finite] / k))
    # two neighbouring floats with one float quotient (x / 10 in [0.125, 0.25) is coarser than x's step): both
    a = 1.5 + 2.0 ** -52 * 3
    neighbours = np.array([a, np.nextafter(a, 2.0)])
    assert neighbours[0] / 10 == neighbours[1] / 10
    assert np.array_equal(multiplied_values(divided_text(pd.Series(neighbours), 10).tolist(), 10), neighbours)
    # a published value (their file, their digits): the decimal product rounded once
    assert multiplied_values(["0.0123", " 1e-3", "", None], 100).tolist()[:2] == [1.23, 0.1]
    assert np.isnan(multiplied_values(["", None], 100)).all()
    with pytest.raises(ValueError, match=r"row 1: not a number: 'x'"):
        multiplied_values(["0.1", "x"], 10)


def test_export_import_round_trip_equals_the_tables(tmp_path, caplog):
    results = tmp_path / "results"
    made = [build(results, "tss", "200", "cifar10", 40),  # isomorph copies, OoD columns
            build(results, "sss", "90", "ImageNet16-120", 9),
            build(results, "sss", "12", "cifar100", 7, seed=111)]  # not the published schedule or seed
    caplog.set_level(logging.INFO, logger="calibench.results.interop")
    # By default each measurement once: the TSS isomorph copies (rows repeating a measured row) stay out
    once = interop.export_tao2024(results / "tables", tmp_path / "once")
    tss_made = pd.read_parquet(made[0])
    measured = tss_made[tss_made["arch_index"] == tss_made["measured_by"]]
    assert len(measured) < len(tss_made)
    assert len(once) == 3 and tmp_path / "once" / "cifar10_tss.csv" in once
    written = pd.read_csv(tmp_path / "once" / "cifar10_tss.csv")
    assert written["config"].tolist() == sorted(measured["arch_index"]) and "measured_by" not in written
    assert "isomorph copies left out" in caplog.text
    back_once = interop.import_tao2024(tmp_path / "once", tmp_path / "imported_once")
    got = pd.read_parquet(tmp_path / "imported_once" / "tables" / "tss_200_cifar10.parquet")
    assert (got["arch_index"] == got["measured_by"]).all() and len(got) == len(measured) and len(back_once) == 3
    skip = set(tables.table_metadata(tmp_path / "imported_once" / "tables" / "tss_200_cifar10.parquet")["unavailable"])
    assert_same(measured.reset_index(drop=True), got, skip | {"pre_accuracy", "post_accuracy"})
    # --expand-isomorphs: every row, the copies marked by measured_by (the config of the measured row)
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="calibench.results.interop")
    files = interop.export_tao2024(results / "tables", tmp_path / "tao", expand_isomorphs=True)
    assert sorted(f.name for f in files) == ["ImageNet_sss.csv", "cifar100_sss_hp12.csv", "cifar10_tss.csv"]
    # no place in the layout: counted at INFO with three examples, every name at DEBUG (export --verbose)
    counted = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "no place" in r.getMessage()]
    assert len(counted) == 3 and all(re.search(r": \d+ columns with no place .* \(e\.g\. [^,]+, [^,]+, [^;]+;", m)
                                     for m in counted), counted
    named = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert "vs_ece_15" in named and "pre_ace_15" in named
    caplog.set_level(logging.INFO, logger="calibench.results.interop")

    header = pd.read_csv(tmp_path / "tao" / "cifar10_tss.csv", nrows=0).columns.tolist()
    assert header[:9] == ["config", "acc", "correct_confidence", "incorrect_confidence", "arch", "pre_ECE_5",
                          "post_ECE_5", "pre_ECE_10", "post_ECE_10"]
    for name in ("pre_ECE_em_500", "post_cwCE_15", "pre_cwCE_em_100", "post_MCE_5", "pre_NLL", "post_Brier",
                 "pre_KSCE", "pre_KDECE", "post_MMCE", "auc_cifar10c", "auc_svhn"):
        assert name in header, name
    assert "seed" not in header and "temperature" not in header and header[-1] == "measured_by"
    for f in files:  # every column written is in the definitions table
        assert all(interop.definition_of(c) for c in pd.read_csv(f, nrows=0).columns), f
    assert "seed" in pd.read_csv(tmp_path / "tao" / "cifar100_sss_hp12.csv", nrows=0).columns
    assert "auc_cifar10c" not in pd.read_csv(tmp_path / "tao" / "ImageNet_sss.csv", nrows=0).columns
    published = pd.read_csv(tmp_path / "tao" / "cifar10_tss.csv")
    original = pd.read_parquet(made[0])
    np.testing.assert_allclose(published["pre_Brier"], original["pre_brier"] / 10, rtol=1e-15)  # theirs: / K

    back = interop.import_tao2024(tmp_path / "tao", tmp_path / "imported")
    assert sorted(p.name for p in back) == sorted(p.name for p in made)
    carried = {"space", "hp", "dataset", "arch_index", "measured_by", "seed", "arch_str", "accuracy",
               "pre_mean_conf_correct", "pre_mean_conf_incorrect", "pre_ece_15", "post_cwce_em_500", "post_mce_50",
               "pre_nll", "post_brier", "pre_ksce", "pre_kdece", "post_mmce"}
    for path in made:
        imported = tmp_path / "imported" / "tables" / path.name
        meta = tables.table_metadata(imported)
        assert meta["source"] == "tao2024" and meta["stages"] == ["pre", "post"]
        skip = set(meta["unavailable"]) | {"pre_accuracy", "post_accuracy"}  # acc copies, see meta["derived"]
        original, got = pd.read_parquet(path), pd.read_parquet(imported)
        shared = assert_same(original, got, skip)
        assert carried <= set(shared), carried - set(shared)
        lead = tables.FIRST + [tables.NATS_INDEX] + tables.PROVENANCE  # the published files are NATS-Bench indexed
        assert list(got.columns[:len(lead)]) == lead
        assert (got["nats_index"] == got["arch_index"]).all()
        assert (got["pre_accuracy"] == got["accuracy"]).all()
    tss = pd.read_parquet(tmp_path / "imported" / "tables" / "tss_200_cifar10.parquet")
    assert (tss["measured_by"] != tss["arch_index"]).sum() > 5  # the copies found again
    assert {"pre_ood_auroc_gaussian_noise", "pre_ood_auroc_svhn"} <= set(tss.columns)

    # Exporting the imported tables gives the same files, byte for byte.
    again = interop.export_tao2024(tmp_path / "imported", tmp_path / "tao2", expand_isomorphs=True)
    for f in again:
        assert f.read_bytes() == (tmp_path / "tao" / f.name).read_bytes(), f.name


def test_export_skips_a_table_without_columns_with_a_warning_and_writes_the_others(tmp_path, caplog):
    """A table without columns (what a build that measured no network leaves) is named and
    skipped, as the docstring says; the other tables of the directory are still exported."""
    results = tmp_path / "results"
    build(results, "sss", "90", "cifar10", 5)
    empty = layout.table_path(results, layout.target_name("tss", "200"), "cifar10")
    pd.DataFrame().to_parquet(empty)
    caplog.set_level(logging.INFO, logger="calibench.results.interop")
    written = interop.export_tao2024(results / "tables", tmp_path / "out")
    assert [p.name for p in written] == ["cifar10_sss.csv"]
    assert f"{empty}: a table without columns (no network measured), nothing to export" in caplog.text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cifar10_sss.csv"]


def test_export_writes_the_nats_bench_index_as_config(tmp_path):
    """A table whose archive indexes its cells its own way (the mini benchmark) exports each
    row's nats_index as config, in that order; a row of unknown NATS-Bench index is refused."""
    table = pd.read_parquet(build(tmp_path / "results", "sss", "90", "cifar10", 5))
    nats = [900, 12, 31000, 7, 4096]
    frame = interop.export_frame(table.assign(nats_index=[nats[i] for i in table["arch_index"]]), source="t")
    assert frame["config"].tolist() == sorted(nats)
    assert frame["arch"].tolist() == [table["arch_str"][nats.index(n)] for n in sorted(nats)]
    unknown = table.assign(nats_index=pd.array([1, None, 3, 4, 5], dtype="Int64"))
    with pytest.raises(ValueError, match=r"t: 1 of 5 rows have no NATS-Bench index \(nats_index null\)"):
        interop.export_frame(unknown, source="t")


def test_export_of_several_seeds_keeps_the_first_and_omitted_columns_are_logged(tmp_path, caplog):
    results = tmp_path / "results"
    path = build(results, "sss", "90", "cifar100", 4, stages=("pre", "post"))
    table = pd.read_parquet(path)
    other = table.assign(seed=888, accuracy=0.0)
    two = pd.concat([table, other]).drop(columns=[c for c in table.columns if "_mce_" in c])
    caplog.set_level(logging.INFO, logger="calibench.results.interop")
    frame = interop.export_frame(two, source="t")
    assert len(frame) == 4 and (frame["acc"] > 0).all()
    assert "4 rows of seeds other" in caplog.text
    assert "pre_MCE_15" in caplog.text  # left out: not in the table
    assert "auc_cifar10c" not in caplog.text  # OoD columns are CIFAR-10's: a CIFAR-100 table misses none
    assert not any("_MCE_" in c for c in frame.columns) and "pre_MMCE" in frame.columns


# ---------------------------------------------------------------- a file in the published layout

def published_file(rng, space: str, n: int, percent: bool = False, copies: bool = False) -> pd.DataFrame:
    """A file as the published dataset holds it (their column names and order, fractions),
    with a written pandas index and a column we have no counterpart for."""
    if space == "tss":
        arch = tss_strings(n)
        reps = representatives("tss", arch)
    else:
        arch = sss_strings(n)
        reps = list(range(n))
    rows = {}
    for i in range(n):
        if copies and reps[i] != i:
            rows[i] = dict(rows[reps[i]], config=i, arch=arch[i])  # the reference copied isomorphs' rows
            continue
        acc = float(rng.uniform(0.3, 0.94))
        row = {"config": i, "acc": 100 * acc if percent else acc, "correct_confidence": float(rng.uniform(0.6, 1)),
               "incorrect_confidence": float(rng.uniform(0.3, 0.8)), "arch": arch[i]}
        for family in ("ECE", "ECE_em", "cwCE", "cwCE_em"):
            for b in BINS:
                for stage in ("pre", "post"):
                    row[f"{stage}_{family}_{b}"] = float(rng.uniform(0.005, 0.3)) * (1 if stage == "pre" else 0.4)
        row["robust_acc_fgsm"] = float(rng.uniform(0, 0.5))  # no calibench counterpart
        rows[i] = row
    frame = pd.DataFrame([rows[i] for i in rng.permutation(n)])  # any row order
    frame.index.name = None
    return frame


def write_published(frame: pd.DataFrame, path: Path, index: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=index)
    return path


def test_a_published_layout_file_imports_and_the_analysis_runs(tmp_path, caplog):
    rng = np.random.default_rng(3)
    src = tmp_path / "published"
    write_published(published_file(rng, "tss", 60, percent=True, copies=True), src / "cifar10_tss.csv", index=True)
    write_published(published_file(rng, "sss", 30), src / "ImageNet_sss.csv")
    (src / "README.md").write_text("not a table")
    (src / "notes.csv").write_text("a,b\n1,2\n")
    results = tmp_path / "results"
    caplog.set_level(logging.WARNING, logger="calibench.results.interop")
    paths = interop.import_tao2024(src, results)
    assert sorted(p.name for p in paths) == ["sss_90_ImageNet16-120.parquet", "tss_200_cifar10.parquet"]
    assert "notes.csv" in caplog.text and "in percent" in caplog.text and "robust_acc_fgsm" in caplog.text

    tss = pd.read_parquet(results / "tables" / "tss_200_cifar10.parquet")
    assert list(tss["arch_index"]) == list(range(60))
    assert tss["accuracy"].between(0.3, 0.94).all()  # percent -> fraction
    assert (tss["seed"] == 777).all() and (tss["hp"] == "200").all()
    reps = representatives("tss", tss_strings(60))
    assert list(tss["measured_by"]) == reps  # copied rows -> their class representative
    meta = tables.table_metadata(results / "tables" / "tss_200_cifar10.parquet")
    assert meta["source"] == "tao2024" and meta["source_file"] == "cifar10_tss.csv"
    assert meta["converted"]["accuracy"].startswith("acc in percent")
    assert set(meta["not_imported"]) == {"Unnamed: 0", "robust_acc_fgsm"}
    # calibench provenance says where an imported table came from (not "built before tables recorded provenance")
    from calibench.results.provenance import provenance_summary

    told = provenance_summary(results / "tables" / "tss_200_cifar10.parquet")
    digest = hashlib.sha256((src / "cifar10_tss.csv").read_bytes()).hexdigest()
    assert f"from tao2024 file cifar10_tss.csv (sha256 {digest})" in told and "built before" not in told
    assert "not in the source (empty): " in told and "temperature" in told

    table_paths = sorted((results / "tables").glob("*.parquet"))
    df = at.load_tables(table_paths)
    hcs = hcs_table(df, [1, 2])
    assert len(hcs) == len(set(reps)) + 30  # measured networks only
    want = hcs_score(tss["accuracy"], tss["pre_ece_15"], 1)
    np.testing.assert_allclose(hcs[hcs["space"] == "tss"].sort_values("arch_index")["hcs_1"],
                               want[tss["arch_index"] == tss["measured_by"]])
    tau = ak.kendall_matrix(at.measured(df), ["pre_ece_15", "post_ece_15", "pre_cwce_em_100", "accuracy"])
    assert len(tau) == 16 and tau["tau"].notna().all()
    settings = {"analysis": {"hcs_betas": [1], "top_k": [10], "top_n": 5}, "bins": list(BINS), "demo": False}
    kendall = ak.kendall_all(df, settings)
    # one dataset per space here: no cross-dataset matrix (Fig. 2 needs two datasets)
    assert set(kendall["figure"]) == {"metrics", "pre_post"}
    assert set(kendall.loc[kendall["figure"] == "pre_post", "stage"]) == {"post"}
    assert at.table_stages(table_paths) == {("tss", "200", "cifar10"): ["pre", "post"],
                                            ("sss", "90", "ImageNet16-120"): ["pre", "post"]}
    summary = methods_summary(df, BINS, at.table_stages(table_paths))
    assert set(summary["stage"]) == {"pre", "post"}
    assert not edge_op_frequency(hcs, 5, 1).empty and not size_brackets(df).empty

    from calibench.results import query

    con = query.connect(results)
    top = con.sql("SELECT space, arch_index, hcs_1 FROM networks WHERE arch_index = measured_by "
                  "ORDER BY hcs_1 DESC LIMIT 3").df()
    assert len(top) == 3 and top["hcs_1"].is_monotonic_decreasing


# ---------------------------------------------------------------- malformed files

def _good(rng) -> pd.DataFrame:
    return published_file(rng, "sss", 6)


def _set(column: str, row: int, value):
    """A damage: ``column`` on data row ``row`` (CSV line row + 2) set to ``value``."""
    def damage(f: pd.DataFrame) -> pd.DataFrame:
        values = f[column].astype(object) if isinstance(value, str) else f[column]
        return f.assign(**{column: values.where(f.index != row, value)})
    return damage


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.drop(columns=["arch"]), r"missing required column\(s\) 'arch'"),
    (lambda f: f.drop(columns=["post_ECE_15"]), r"missing required column\(s\) 'post_ECE_15'"),
    (_set("arch", 2, "64:32:7:8:8"), r"column 'arch', line 4: .*64:32:7:8:8"),
    (lambda f: _set("config", 3, f["config"][0])(f), r"column 'config': .* line 5 repeats line 2"),
    (lambda f: _set("arch", 4, f["arch"][1])(f), r"column 'arch': .* line 6 repeats line 3"),
    (_set("config", 1, 40000), r"column 'config', line 3: 40000 is not an architecture index of sss \(0\.\.32767\)$"),
    (_set("acc", 5, "high"), r"column 'acc', line 7: not a number: 'high'"),
    (_set("acc", 5, np.nan), r"column 'acc', line 7: a missing value is not a fraction"),
    (_set("acc", 0, 150.0), r"column 'acc', line 2: .*not a fraction"),
    (_set("pre_ECE_15", 1, 12.5), r"column 'pre_ECE_15', line 3: .*outside"),
    # their Brier is divided by K (100 here): the value and the range both in the file's scale
    (lambda f: _set("pre_Brier", 1, 0.5)(f.assign(pre_Brier=0.001)), r"column 'pre_Brier', line 3: 0\.5 is outside \[0\.0, 0\.02\]$"),
    (lambda f: f.assign(PRE_ECE_15=f["pre_ECE_15"]), r"'pre_ECE_15' and 'PRE_ECE_15' are the same column"),
])
def test_a_malformed_file_names_the_file_and_the_column(tmp_path, damage, message):
    path = write_published(damage(_good(np.random.default_rng(1))), tmp_path / "in" / "cifar100_sss.csv")
    with pytest.raises(ValueError, match=message) as err:
        interop.import_tao2024(path, tmp_path / "results")
    assert str(path) in str(err.value)
    assert not (tmp_path / "results" / "tables").exists()  # nothing written


def test_names_and_targets_are_checked(tmp_path):
    frame = _good(np.random.default_rng(2))
    bad = write_published(frame, tmp_path / "in" / "mnist_sss.csv")
    with pytest.raises(ValueError, match="mnist_sss.csv: not a tao2024 file name"):
        interop.import_tao2024([bad], tmp_path / "results")
    good = write_published(frame, tmp_path / "in2" / "cifar100_sss.csv")
    measured = build(tmp_path / "results", "sss", "90", "cifar100", 3)  # a measured table already there
    shutil.rmtree(tmp_path / "results" / "population")  # its tables copied out of the workflow's results
    with pytest.raises(ValueError, match="holds measured results"):
        interop.import_tao2024(good, tmp_path / "results")
    assert tables.table_metadata(measured).get("source") is None
    interop.import_tao2024(good, tmp_path / "results", overwrite=True)
    assert tables.table_metadata(measured)["source"] == "tao2024"
    interop.import_tao2024(good, tmp_path / "results")  # an import may replace an import
    assert interop.parse_file_name("ImageNet_tss_hp12.csv") == ("tss", "12", "ImageNet16-120")


def test_every_exported_column_has_a_definition():
    doc = interop.definitions_markdown()
    assert doc.count("\n") == len(interop.COLUMNS) + 2
    for c in interop.COLUMNS:
        assert f"`{c.theirs}`" in doc and c.source in (interop.README, interop.ISSUE, interop.CODE, interop.ASSUMED,
                                                       interop.EXTENSION)
    for row in doc.splitlines():  # five cells a row: a pipe inside a cell is escaped
        assert len(re.findall(r"(?<!\\)\|", row)) == 6, row
    for word in ("divided by K", "unsigned", "NLL", "grid"):
        assert word in doc, word


def test_the_results_side_architecture_strings_agree_with_the_source():
    """calibench.results.archstr (what the import checks and groups by) states the same NATS
    facts as calibench.sources.nats: every TSS cell in the same isomorphism class, the same
    strings accepted and refused."""
    from calibench.results import archstr
    from calibench.sources.nats.archstr import parse_sss, parse_tss
    from calibench.sources.nats.population import tss_canonical_form

    cells = tss_strings(15625)
    assert [archstr.tss_class_key(c) for c in cells] == [tss_canonical_form(c) for c in cells]
    assert len({archstr.tss_class_key(c) for c in cells}) == 6466
    assert archstr.TSS_OPS == TSS_OPS and archstr.SSS_CHANNEL_CHOICES == SSS_CHANNEL_CHOICES
    for s in sss_strings(300):
        assert archstr.parse_sss(s) == parse_sss(s)
    for bad in ("|none~0|", "|none~0|+|none~0|none~1|+|none~0|none~1|", "|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|",
                "none~0|+|none~0|none~1|+|none~0|none~1|none~2|", "|none~0|+|none~1|none~0|+|none~0|none~1|none~2|",
                "|none~0|+|none~0|none~1|+|none~0|none~1|none~x|"):
        with pytest.raises(ValueError, match="TSS architecture"):
            parse_tss(bad)
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            archstr.check("tss", bad)
    for bad in ("64:32:7:8:8", "8:8:8:8", "a:b:c:d:e", "8:8:8:8:8:8"):
        with pytest.raises(ValueError, match="SSS architecture"):
            parse_sss(bad)
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            archstr.check("sss", bad)


def test_a_kde_ece_above_one_is_kept_flagged_and_round_trips_exactly(tmp_path):
    """Issue 34: a network with 3 correct predictions of 240 (K = 100), all three at nearly the
    same confidence, has a KDE-ECE above 1, as Mix-n-Match's own estimator gives it (the
    bandwidth, from the correct predictions' spread, is a few grid steps: the integrand carried
    across the gaps between samples). The registry gives KDE-ECE no upper bound: the table keeps
    the value, counts it in its provenance, and export -> import -> compare is exact."""
    import reference
    from calibench import metrics
    from calibench.analysis.compare import compare_runs

    rng = np.random.default_rng(3)
    n, k = 240, 100
    logits = rng.normal(size=(n, k)) * 2.0
    logits[:3] = logits[0] + rng.normal(size=(3, k)) * 0.01
    pred = logits.argmax(1)
    labels = np.where(np.arange(n) < 3, pred, (pred + 1 + rng.integers(0, k - 1, n)) % k)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    assert (probs.argmax(1) == labels).sum() == 3
    value = float(metrics.kdece(probs, labels))
    assert value > 1.2 and value == pytest.approx(reference.kdece_mix_n_match(probs, labels), abs=1e-9)

    results = tmp_path / "results"
    table = build(results, "sss", "90", "cifar100", 6, stages=("pre", "post"), pre_kdece={4: value})
    assert tables.table_metadata(table)["unstable"] == {"pre_kdece": 1}
    assert pd.read_parquet(table).set_index("arch_index").loc[4, "pre_kdece"] == value  # kept, not clipped
    from calibench.report.assemble import unstable_html

    said = unstable_html([table])
    assert "<li>sss_90_cifar100: <code>pre_kdece</code> above 1 for 1 measured network(s)</li>" in said, said
    files = interop.export_tao2024(results / "tables", tmp_path / "tao")
    back = interop.import_tao2024(tmp_path / "tao", tmp_path / "imported")
    imported = tables.table_metadata(back[0])
    assert imported["unstable"] == {"pre_kdece": 1}
    assert pd.read_parquet(back[0]).set_index("arch_index").loc[4, "pre_kdece"] == value
    cmp = compare_runs(results, tmp_path / "tao", ["pre_kdece", "pre_ece_15", "post_ece_15", "accuracy"], atol=0.0)
    csv = cmp.csv_frame()
    assert set(csv["status"]) == {"equal"} and (csv["max_abs_diff"].fillna(0) == 0).all(), csv
    assert len(files) == 1


@pytest.mark.parametrize("text, cut", [
    (b"a,b,c\n1,2,3\n4,5,6\n", None),
    (b"a,b,c\r1,2,3\r4,5,6\r", None),                # old Mac line ends
    (b"a,b,c\r\n1,2,3\r\n\r\n4,5,6\r\n", None),    # CRLF, a blank line
    (b"a,b,c\n1,2,3\n  \n", None),                   # a whitespace-only last line
    (b"a,b,c,\n1,2,3\n", None),                       # a header's trailing comma
    (b'a,b,c\n1,"x, y\nz",3\n4,5,\n', None),          # quoted comma and newline, a trailing empty field
    (b"\xef\xbb\xbfa,b,c\n1,2,3\n4,5", 3),           # cut short: line 3
])
def test_a_csv_cut_short_is_named_by_line_and_valid_ones_pass(tmp_path, text, cut):
    from calibench.results import interop

    path = tmp_path / "cifar10_tss.csv"
    if cut is None:
        interop._whole_rows(path, text)
    else:
        with pytest.raises(ValueError, match=f"line {cut} has 2 fields, the header 3: a file cut short"):
            interop._whole_rows(path, text)


def test_a_workflows_results_directory_is_refused_and_an_import_is_not_repaired_away(tmp_path, capsys):
    """The workflow owns its results' tables: an import there is refused before anything is
    read or written. A results directory of imports alone has no failures files, and the
    repair check before a run does not take that for a lost output (it set the tables aside)."""
    from calibench.run import repair
    from calibench.run.cli import main

    good = write_published(_good(np.random.default_rng(4)), tmp_path / "in" / "cifar100_sss.csv")
    workflow = tmp_path / "results"
    (workflow / "population").mkdir(parents=True)
    with pytest.raises(ValueError, match="is a workflow's results directory .*population.*--results published"):
        interop.import_tao2024(good, workflow)
    assert not (workflow / "tables").exists()
    assert main(["import", "--format", "tao2024", str(good), "--results", str(workflow)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calibench import: ") and len(err.strip().splitlines()) <= 2 and "Traceback" not in err
    imported = tmp_path / "published"
    (table,) = interop.import_tao2024(good, imported)
    assert repair.lost_outputs(imported) == []
    assert repair.repair_before_run(imported) == [] and table.exists()


def test_a_population_table_is_not_exported_and_a_second_import_says_what_it_replaces(tmp_path, caplog):
    results = tmp_path / "results"
    nats = build(results, "sss", "90", "cifar100", 3)
    zoo = pd.read_parquet(nats).assign(space="zoo", hp="", arch_str=lambda f: [f"m{i}" for i in range(len(f))])
    zoo.to_parquet(results / "tables" / "zoo_cifar100.parquet")
    caplog.set_level(logging.WARNING, logger="calibench.results.interop")
    written = interop.export_tao2024(results, tmp_path / "tao")
    assert [p.name for p in written] == ["cifar100_sss.csv"]  # not cifar100_zoo_hp.csv
    assert "zoo_cifar100.parquet: a population beyond NATS-Bench (space 'zoo')" in caplog.text
    caplog.clear()
    interop.import_tao2024(written, tmp_path / "published")
    assert "replaces" not in caplog.text
    interop.import_tao2024(written, tmp_path / "published")
    assert "cifar100_sss.csv: replaces" in caplog.text and "the import of cifar100_sss.csv" in caplog.text
