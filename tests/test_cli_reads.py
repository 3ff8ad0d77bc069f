"""Commands that read result tables (export, nas, compare, provenance, explore --compare):
a damaged table or a file that is not a result table is refused in one line, and no output
of theirs lands inside a run they read."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow as pa

from calibench import integrity, layout
from calibench.run import cli


def _sealed_table(results, target="tss_200", dataset="cifar10", n=12):
    space, hp = layout.split_target(target)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"space": space, "hp": hp, "dataset": dataset, "arch_index": np.arange(n),
                          "measured_by": np.arange(n), "seed": 777, "arch_str": [f"a{i}" for i in range(n)],
                          "accuracy": rng.uniform(0.2, 0.9, n), "pre_accuracy": rng.uniform(0.2, 0.9, n),
                          "pre_ece_15": rng.uniform(0, 0.3, n), "post_ece_15": rng.uniform(0, 0.2, n)})
    path = layout.table_path(results, target, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    integrity.write_parquet(pa.Table.from_pandas(frame, preserve_index=False), path)
    return path


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_a_damaged_table_is_refused_by_every_command_that_reads_it(tmp_path, capsys):
    """One flipped byte of a sealed table: export, nas, compare and provenance say it is damaged,
    exit 2 and write nothing (they read it with pandas and spread the wrong value)."""
    good = _sealed_table(tmp_path / "good")
    table = _sealed_table(tmp_path / "run")
    data = bytearray(table.read_bytes())
    data[12] ^= 0x01  # inside the first column chunk, not the footer
    table.write_bytes(bytes(data))
    assert integrity.check(table) not in (None, "missing")
    out = tmp_path / "out"
    for argv in (["export", "--format", "tao2024", "--results", str(tmp_path / "run"), "--out", str(out)],
                 ["nas", str(table), "--out", str(out), "--budget", "3", "--repeats", "1"],
                 ["compare", str(tmp_path / "good"), str(tmp_path / "run"), "--out", str(out)],
                 ["provenance", str(table)]):
        assert cli.main(argv) == 2, argv
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) <= 2 and str(table) in err[0] and "damaged" in err[0], (argv, err)
        assert not out.exists(), argv
    assert cli.main(["provenance", str(good)]) == 0  # the check passes a whole table


def test_compare_refuses_a_failures_file_as_a_run(tmp_path, capsys):
    _sealed_table(tmp_path / "run")
    failures = tmp_path / "failures.parquet"
    pd.DataFrame({"space": ["tss"], "hp": ["200"], "dataset": ["cifar10"], "arch_index": [3], "stage": ["ms"],
                  "source": ["x"], "reason": ["diverged"]}).to_parquet(failures, index=False)
    assert cli.main(["compare", str(tmp_path / "run"), str(failures), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{failures}: not a result table" in err and not (tmp_path / "out").exists()


def test_no_output_of_a_reading_command_lands_inside_a_run_it_reads(tmp_path, capsys, monkeypatch):
    """export --out ./x from inside tables/, compare of two table files with --out in their
    run, and explore --compare with --out a run: each refused in one line, the run unchanged."""
    table = _sealed_table(tmp_path / "run")
    other = _sealed_table(tmp_path / "other")
    before = _files(tmp_path / "run")
    monkeypatch.chdir(table.parent)
    cases = [["export", "--format", "tao2024", "--out", "./x", table.name],
             ["export", "--format", "tao2024", "--out", "../leak", table.name],
             ["compare", str(table), str(other), "--out", str(tmp_path / "run" / "cmp")],
             ["compare", str(table), str(other)],  # the default folder, here inside the run
             ["explore", str(tmp_path / "run"), "--compare", str(tmp_path / "other"), "--out", str(tmp_path / "run")]]
    for argv in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 2 and "inside the results directory" in err[0], (argv, err)
        assert _files(tmp_path / "run") == before, argv
    shutil.rmtree(tmp_path / "other")


def test_a_table_that_is_not_calibench_s_is_named_as_such_and_explore_leaves_nothing(tmp_path, capsys):
    """A parquet file of someone else's under tables/ (metric columns, no space/hp/dataset):
    query, top and explore say "not a result table" in one line, exit 2, and explore leaves no
    folder behind (it stopped on KeyError 'space' after making its staging folder)."""
    foreign = layout.table_path(tmp_path / "run", "tss_200", "cifar10")
    foreign.parent.mkdir(parents=True)
    pd.DataFrame({"model": ["a", "b"], "pre_ece_15": [0.1, 0.2], "measured_by": [0, 1]}).to_parquet(foreign)
    before = _files(tmp_path / "run")
    for argv in (["query", "SELECT count(*) FROM networks", "--results", str(tmp_path / "run")],
                 ["top", "--space", "tss", "--dataset", "cifar10", "--results", str(tmp_path / "run")],
                 ["explore", str(tmp_path / "run")],
                 ["export", "--format", "tao2024", "--out", str(tmp_path / "x"), str(foreign.parent)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("not a result table" in err[0] or "a directory" in err[0]), (argv, err)
    assert sorted(p for p in (tmp_path / "run").rglob("*")) == sorted(set(before) | {foreign.parent})


def test_a_results_directory_that_is_missing_or_a_file_is_named_as_such(tmp_path, capsys):
    """``--results`` that does not exist, or is a file: every reading command says which, in one
    line naming the path, rather than "no result tables … run the workflow first" or an errno."""
    a_file = tmp_path / "afile"
    a_file.write_text("x\n")
    missing = tmp_path / "nothing"
    csv_dir = tmp_path / "published"
    csv_dir.mkdir()
    for results, said in ((missing, "no such directory"), (a_file, "not a directory")):
        for argv in (["query", "--results", str(results), "select 1"],
                     ["top", "--results", str(results), "--space", "sss", "--dataset", "cifar10"],
                     ["nas", "--results", str(results)],
                     ["explore", "--results", str(results)],
                     ["export", "--format", "tao2024", "--results", str(results), "--out", str(tmp_path / "out")]):
            assert cli.main(argv) == 2, argv
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [f"calibench {argv[0]}: --results {results}: {said}"], (argv, err)
    assert cli.main(["import", str(csv_dir), "--format", "tao2024", "--results", str(a_file)]) == 2
    assert capsys.readouterr().err.strip() == f"calibench import: --results {a_file}: not a directory"
    assert not (tmp_path / "out").exists() and a_file.read_text() == "x\n"
    assert cli.main(["provenance", str(csv_dir)]) == 2
    assert capsys.readouterr().err.strip() == f"calibench provenance: {csv_dir}: a directory, not a table"
    assert cli.main(["nas", str(csv_dir), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (f"calibench nas: {csv_dir}: a directory, not a result table "
                                               "(a run's tables: --results)")
