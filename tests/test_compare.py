"""``calibench compare`` (issue 26, part 2; calibench.analysis.compare, report.compare_page):
a run against itself, against a copy with one more bin count, against its own tao2024
export, a perturbed column cross-checked with numpy and scipy, and usage mistakes. Reads the
session's finished ``workflow_run`` only; what it changes is a copy of the tables, or small
tables built here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from calibench import layout
from calibench.analysis.compare import CSV_COLUMNS, compare_runs, label_difference, numeric_difference
from calibench.results import interop
from calibench.results.tables import METADATA_KEY
from calibench.run.cli import main


def results_of(workflow_run: Path) -> Path:
    return workflow_run / "results"


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- 1. a run against itself

def test_a_run_against_itself_is_equal(workflow_run, tmp_path):
    results = results_of(workflow_run)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "calibench", "compare", str(results), str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].startswith("verdict: EQUAL: 6 tables"), lines[-2]
    assert lines[-1] == f"written: {layout.compare_csv(out)}, {layout.compare_page(out)}"
    csv = pd.read_csv(layout.compare_csv(out))
    assert list(csv.columns) == CSV_COLUMNS
    tables = layout.result_tables(results)
    assert sorted(csv["table"].unique()) == sorted(p.stem for p in tables)
    assert len(csv) == sum(len(pq.read_schema(p).names) for p in tables)  # every column of every table, once
    assert (csv["status"] == "equal").all() and (csv["n_only_a"] == 0).all() and (csv["n_only_b"] == 0).all()
    assert (csv["max_abs_diff"].dropna() == 0).all() and (csv["n_nan_mismatch"] == 0).all()
    # networks are compared on what each measured: isomorph copies repeat their representative's values
    keys = {p.stem: pd.read_parquet(p, columns=["arch_index", "measured_by"]) for p in tables}
    rows = {name: int((k["arch_index"] == k["measured_by"]).sum()) for name, k in keys.items()}
    assert (csv["n_both"] == csv["table"].map(rows)).all()
    copies = sum(int((k["arch_index"] != k["measured_by"]).sum()) for k in keys.values())
    assert copies > 0 and "isomorph copies left out" in proc.stdout
    page = layout.compare_page(out).read_text()
    assert "data:image/png;base64," in page and "verdict: EQUAL" in page


# ---------------------------------------------------------------- 2. one more bin count

def test_one_more_bin_count_is_listed_one_sided(workflow_run, tmp_path, capsys):
    results = results_of(workflow_run)
    added = {}
    for path in layout.result_tables(results):
        frame = pd.read_parquet(path)
        new = []
        for column in [c for c in frame.columns if c.endswith("_ece_15") and "_em_" not in c]:
            name = column[: -len("15")] + "20"
            assert name not in frame
            frame.insert(frame.columns.get_loc(column) + 1, name, frame[column] * 1.01)  # made up, not re-derived
            new.append(name)
        added[path.stem] = new
        frame["config_hash"] = "another-hash"  # settings: reported, never making the runs unequal
        meta = json.loads(pq.read_schema(path).metadata[METADATA_KEY])
        meta["provenance"][0]["provenance"]["git_commit"] = "another-commit"
        assert meta["settings"]["bins"] == [5, 15, 50]  # what each chunk was measured with
        meta["settings"]["bins"] = [5, 15, 20, 50]
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY: json.dumps(meta).encode()})
        target = layout.table_path(tmp_path / "b", *path.stem.rsplit("_", 1))
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target)
    assert all(len(v) == 8 for v in added.values())  # every stage
    code, out, _ = run_cli(capsys, results, tmp_path / "b", "--out", tmp_path / "out")
    assert code == 1
    verdict = out.strip().splitlines()[-2]
    assert verdict.startswith("verdict: DIFFERENT: 48 data columns only in B (and "), verdict
    assert "  software.git_commit: " in out and " -> another-commit [every table]" in out
    assert "  settings.bins: 5, 15, 50 -> 5, 15, 20, 50 [every table]" in out, out  # the key, both values
    assert "  column config_hash (" in out
    csv = pd.read_csv(layout.compare_csv(tmp_path / "out"))
    for table, names in added.items():
        rows = csv[csv["table"] == table]
        assert sorted(rows.loc[rows["status"] == "only_b", "column"]) == sorted(names)
        data = rows[~rows["column"].isin(names) & (rows["kind"] == "data")]
        assert len(data) and (data["status"] == "equal").all()
        setting = rows.set_index("column").loc["config_hash"]
        assert (setting["kind"], setting["status"], setting["n_differ"]) == ("setting", "differs", setting["n_both"])
        order = rows["column"].tolist()  # each new column beside its stage's 15 bins
        assert all(order[order.index(n) - 1] == n[: -len("20")] + "15" for n in names)


# ---------------------------------------------------------------- 3. its own tao2024 export

def test_the_tao2024_export_of_a_run_equals_it_on_the_exported_columns(workflow_run, tmp_path, capsys):
    results = results_of(workflow_run)
    written = interop.export_tao2024(results, tmp_path / "tao")
    assert len(written) == 6
    exported = set()
    for f in written:
        frame, meta = interop.read_tao2024(f, *interop.parse_file_name(f))
        # the CSV's own columns, under our names (config: nats_index), not those the import derives or lacks
        own = set(frame.columns) - set(meta["derived"]) - set(meta["unavailable"]) - {"space", "hp", "dataset"}
        exported |= own - {"arch_index"} | {"nats_index"}
    assert {"arch_str", "accuracy", "pre_ece_15", "post_brier", "pre_mean_conf_correct"} <= exported
    cmp = compare_runs(results, tmp_path / "tao", sorted(exported), atol=0.0)
    csv = cmp.csv_frame()
    assert set(csv["status"]) <= {"equal", "differs"}  # every exported column on both sides
    assert all(t.networks["key"] == ["nats_index", "seed"] for t in cmp.tables)  # the CSVs know NATS-Bench's index
    assert all(t.networks["n_only_a"] == t.networks["n_only_b"] == 0 for t in cmp.tables)
    numeric = csv[csv["column"] != "arch_str"]
    # exact round trip, the Brier score included (theirs = ours / K, written as text that times K gives ours back)
    assert (numeric["max_abs_diff"].fillna(0) == 0).all(), numeric[numeric["max_abs_diff"] > 0]
    code, out, _ = run_cli(capsys, results, tmp_path / "tao", "--atol", "0", "--out", tmp_path / "out",
                           "--columns", *sorted(exported))
    assert code == 0, out
    assert out.strip().splitlines()[-2].startswith("verdict: EQUAL: 6 tables")
    # Unnarrowed: the CSVs hold what the layout carries; the columns their import derives or
    # lacks (params, the temperature, pre_accuracy = acc, arch_index = config) are absent on
    # that side, and columns of one side only are named but not compared: the run equals its
    # export, as it does its import (a table `calibench import` wrote)
    interop.import_tao2024(tmp_path / "tao", tmp_path / "imported")
    for other in (tmp_path / "tao", tmp_path / "imported"):
        code, out, _ = run_cli(capsys, results, other, "--atol", "0", "--out", tmp_path / "out2")  # bit for bit
        verdict = out.strip().splitlines()[-2]
        measured = sum(len(interop.read_tao2024(f, *interop.parse_file_name(f))[0]) for f in written)
        assert code == 0 and verdict.startswith(f"verdict: EQUAL: 6 tables, {measured} networks"), out[-1500:]
        assert "data columns in one run only, not compared (the tao2024 layout holds fewer)" in verdict, verdict
        assert "settings that differ (1):\n  stages: pre, post, vs, ms, dir, iso, hist, spline -> pre, post" in out
        csv = pd.read_csv(layout.compare_csv(tmp_path / "out2")).set_index(["table", "column"])
        for column in ("params", "temperature", "pre_accuracy", "arch_index", "measured_by", "vs_ece_15"):
            assert csv.loc[("sss_90_cifar10", column), "status"] == "only_a", column
        assert csv.loc[("sss_90_cifar10", "pre_ece_15"), "status"] == "equal"
    # with the isomorph copies, marked by measured_by in NATS-Bench's indices (the mini benchmark's are
    # its archive's): still equal, measured_by is not compared (it read "differs" on every TSS table)
    interop.export_tao2024(results, tmp_path / "tao_all", expand_isomorphs=True)
    interop.import_tao2024(tmp_path / "tao_all", tmp_path / "imported_all")
    code, out, _ = run_cli(capsys, results, tmp_path / "imported_all", "--atol", "0", "--out", tmp_path / "out4")
    assert code == 0 and "verdict: EQUAL: 6 tables" in out, out[-1500:]
    csv = pd.read_csv(layout.compare_csv(tmp_path / "out4")).set_index(["table", "column"])
    assert csv.loc[("tss_200_cifar10", "measured_by"), "status"] == "only_a"
    # a difference in a carried column still makes them different
    frame = pd.read_csv(tmp_path / "tao" / "cifar10_sss.csv")
    frame.loc[0, "pre_ECE_15"] += 1e-3  # (pandas rewrites the Brier text as floats: within 1e-12, not bit for bit)
    frame.to_csv(tmp_path / "tao" / "cifar10_sss.csv", index=False)
    code, out, _ = run_cli(capsys, results, tmp_path / "tao", "--atol", "1e-12", "--out", tmp_path / "out3")
    assert code == 1 and "verdict: DIFFERENT: 1 data columns differ by more than atol 1e-12" in out, out[-1500:]


# ---------------------------------------------------------------- 4. a perturbed column

def write_table(root: Path, frame: pd.DataFrame) -> Path:
    path = layout.table_path(root, "tss_200", "cifar10")
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return root


def small_pair(tmp_path: Path, rng) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    n = 60
    a = np.round(rng.uniform(0, 0.3, n), 3)  # ties, as table values have
    b = a + rng.normal(0, 1e-3, n)
    a[5], b[5] = np.inf, np.inf  # equal infinities: no difference
    a[7], b[7] = np.nan, np.nan  # both missing: equal
    base = pd.DataFrame({"space": "tss", "hp": "200", "dataset": "cifar10", "arch_index": np.arange(n),
                         "seed": 777, "arch_str": [f"net{i}" for i in range(n)], "pre_ece_15": a,
                         "accuracy": rng.uniform(0.1, 0.9, n)})
    other = base.assign(pre_ece_15=b).iloc[::-1]  # rows in another order: matched by key, not position
    return write_table(tmp_path / "a", base), write_table(tmp_path / "b", other), a, b


def test_a_perturbed_column_against_numpy_and_scipy(tmp_path, capsys, rng):
    run_a, run_b, a, b = small_pair(tmp_path, rng)
    cmp = compare_runs(run_a, run_b)
    row = cmp.csv_frame().set_index("column").loc["pre_ece_15"]
    keep = ~(np.isnan(a) | np.isnan(b)) & np.isfinite(a)
    d = np.abs(a[keep] - b[keep])
    d_all = np.concatenate([d, [0.0]])  # the equal infinities, a row with no difference
    assert row["status"] == "differs"
    assert row["max_abs_diff"] == d.max()
    assert row["median_abs_diff"] == np.median(d_all)
    assert row["n_nan_mismatch"] == 0 and row["n_differ"] == len(d)
    complete = ~(np.isnan(a) | np.isnan(b))
    assert row["kendall_tau"] == pytest.approx(stats.kendalltau(a[complete], b[complete]).statistic, abs=1e-12)
    assert cmp.csv_frame().set_index("column").loc["accuracy", "status"] == "equal"
    below, above = d.max() * 0.999, d.max() * 1.001
    assert run_cli(capsys, run_a, run_b, "--atol", below, "--out", tmp_path / "o1")[0] == 1
    code, out, _ = run_cli(capsys, run_a, run_b, "--atol", above, "--out", tmp_path / "o2")
    assert code == 0, out
    # a NaN on one side only is a difference whatever the tolerance
    b2 = b.copy()
    b2[3] = np.nan
    frame = pd.read_parquet(layout.table_path(run_b, "tss_200", "cifar10"))
    frame["pre_ece_15"] = b2[frame["arch_index"].to_numpy()]
    write_table(tmp_path / "b2", frame)
    code, out, _ = run_cli(capsys, run_a, tmp_path / "b2", "--atol", 1.0, "--out", tmp_path / "o3")
    assert code == 1 and "pre_ece_15 (NaN on one side only in 1 row)" in out


def test_column_statistics_follow_their_definitions(rng):
    for _ in range(200):
        n = int(rng.integers(0, 25))
        a = rng.integers(0, 5, n).astype(float)
        b = [a.copy(), a + rng.normal(0, 1e-3, n), 3 * a + 1, np.round(a * rng.uniform(0.3, 2))][int(rng.integers(4))]
        if n:
            a[rng.random(n) < 0.15] = np.inf
            b[rng.random(n) < 0.1] = np.nan
        found = numeric_difference(a, b)
        keep = ~(np.isnan(a) | np.isnan(b))
        want = stats.kendalltau(a[keep], b[keep]).statistic if keep.sum() >= 2 else np.nan
        assert found["kendall_tau"] == pytest.approx(want, abs=1e-12, nan_ok=True), (a, b)
        assert found["n_nan_mismatch"] == int((np.isnan(a) ^ np.isnan(b)).sum())
    same = numeric_difference([1.0, np.inf, np.nan, 2.0], [1.0, np.inf, np.nan, 2.0])
    assert same == {"status": "equal", "max_abs_diff": 0.0, "median_abs_diff": 0.0, "n_nan_mismatch": 0,
                    "kendall_tau": 1.0, "n_differ": 0}
    assert np.isnan(numeric_difference([0.5, 0.5, np.nan], [0.5, 0.5, np.nan])["kendall_tau"])  # constant
    assert numeric_difference([1.0, np.inf], [1.0, -np.inf])["max_abs_diff"] == np.inf
    labels = label_difference(["x", None, None, "y", np.nan], ["x", None, "z", "q", None])
    assert (labels["status"], labels["n_differ"], labels["n_nan_mismatch"]) == ("differs", 2, 1)
    assert label_difference([None, "x"], [np.nan, "x"])["status"] == "equal"  # both missing: equal


# ---------------------------------------------------------------- 5. usage mistakes

def test_usage_mistakes_exit_2_in_one_or_two_lines(tmp_path, capsys, rng):
    run_a, *_ = small_pair(tmp_path, rng)
    missing = tmp_path / "no-such-run"
    code, out, err = run_cli(capsys, run_a, missing)
    assert code == 2 and out == ""
    assert 1 <= len(err.strip().splitlines()) <= 2 and str(missing) in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, tmp_path / "empty", run_a)
    assert code == 2 and str(tmp_path / "empty") in err and len(err.strip().splitlines()) <= 2
    code, _, err = run_cli(capsys, run_a, run_a, "--columns", "no_such_*")
    assert code == 2 and "no_such_*" in err
    # --out: a file, or inside a run it reads: refused before any work, nothing written
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in run_a.rglob("*"))
    for out, said in ((tmp_path / "afile", f"--out {tmp_path / 'afile'}: not a directory"),
                      (run_a / "tables", f"--out {run_a / 'tables'}: inside the results directory {run_a}")):
        code, printed, err = run_cli(capsys, run_a, run_a, "--out", out)
        assert code == 2 and printed == "" and err.strip().startswith(f"calibench compare: {said}"), err
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run_a.rglob("*")) == before and (tmp_path / "afile").read_text() == "x"


def test_a_populations_models_are_matched_by_name_not_by_their_row(tmp_path, capsys, rng):
    """A model added at the top of models.csv shifts every other's arch_index (its row): the
    runs are still the same measurements of the same models, matched by name; the rows are a
    setting that differs, and the new model is one of run B only."""
    names = [f"m{i}" for i in range(8)]
    ece = rng.uniform(0, 0.3, len(names))

    def table(root: Path, models, values) -> Path:
        frame = pd.DataFrame({"space": "zoo", "hp": "", "dataset": "cifar10", "arch_index": np.arange(len(models)),
                              "measured_by": np.arange(len(models)), "seed": 0, "arch_str": models,
                              "pre_ece_15": values})
        path = layout.table_path(root, "zoo", "cifar10")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path, index=False)
        return root

    run_a = table(tmp_path / "a", names, ece)
    run_b = table(tmp_path / "b", ["new", *names], np.r_[0.5, ece])
    cmp = compare_runs(run_a, run_b)
    (t,) = cmp.tables
    assert t.networks["key"] == ["arch_str", "seed"] and t.networks["n_both"] == 8
    assert t.networks["only_b"] == [("new", 0)] and not t.networks["only_a"]
    rows = t.columns.set_index("column")
    assert rows.loc["pre_ece_15", "status"] == "equal" and rows.loc["arch_index", "kind"] == "setting"
    assert ("column arch_index (8 of 8 rows differ)", "8 values, e.g. 0", "8 values, e.g. 1") in t.settings
    run_c = table(tmp_path / "c", names[::-1], np.r_[ece[::-1][:-1], ece[0] + 0.01])  # m0 last, its ECE changed
    rows = compare_runs(run_a, run_c).tables[0].columns.set_index("column")
    assert rows.loc["pre_ece_15", "status"] == "differs" and rows.loc["pre_ece_15", "n_differ"] == 1
    assert rows.loc["pre_ece_15", "max_abs_diff"] == pytest.approx(0.01, abs=1e-12)
    code, out, _ = run_cli(capsys, run_a, tmp_path / "a", "--out", tmp_path / "o")
    assert code == 0, out


def test_disjoint_runs_compare_no_column(tmp_path, capsys):
    def table(root: Path, index) -> Path:
        frame = pd.DataFrame({"space": "tss", "hp": "200", "dataset": "cifar10", "arch_index": index, "seed": 777,
                              "arch_str": [f"n{i}" for i in index], "pre_ece_15": np.linspace(0, 1, len(index))})
        return write_table(root, frame)

    code, out, _ = run_cli(capsys, table(tmp_path / "a", np.arange(5)), table(tmp_path / "b", np.arange(10, 15)),
                           "--out", tmp_path / "o")
    assert code == 1 and "0 networks in both, 5 only in A, 5 only in B" in out
    assert "data columns: 7 in both, not compared (no network in both)" in out and "equal," not in out
