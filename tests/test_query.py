"""calibench.results.query: the ``networks`` view's ``hcs_{beta}`` columns are
calibench.metrics.scores.hcs itself (one formula for SQL and the analysis), NULL where an
input is NULL; ``calibench top --by hcs_1`` ranks by them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.config.check import schema_default
from calibench.metrics.scores import hcs
from calibench.results import query
from calibench.run import cli


def write_table(results, target: str, dataset: str, rng, n: int = 40) -> pd.DataFrame:
    space, hp = layout.split_target(target)
    accuracy = rng.uniform(0.05, 0.95, n)
    ece = rng.uniform(0.0, 0.4, n)
    accuracy[3] = np.nan  # a network without an accuracy
    ece[5] = np.nan
    table = pd.DataFrame({"space": space, "hp": hp, "dataset": dataset, "arch_index": np.arange(n),
                          "measured_by": np.arange(n), "seed": 777, "arch_str": [f"a{i}" for i in range(n)],
                          "accuracy": accuracy, "pre_ece_15": ece, "post_ece_15": ece / 2, "temperature": 1.5})
    path = layout.table_path(results, target, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(path, index=False)
    return table


def test_the_hcs_columns_are_the_metrics_function(tmp_path):
    rng = np.random.default_rng(0)
    tables = pd.concat([write_table(tmp_path, "tss_200", "cifar10", rng),
                        write_table(tmp_path, "sss_90", "cifar100", rng)], ignore_index=True)
    betas = schema_default("analysis", "hcs_betas")
    con = query.connect(tmp_path)
    got = con.sql("SELECT space, dataset, arch_index, accuracy, pre_ece_15, "
                  + ", ".join(f"hcs_{b:g}" for b in betas) + " FROM networks").df()
    got = got.sort_values(["space", "arch_index"]).reset_index(drop=True)
    want = tables.sort_values(["space", "arch_index"]).reset_index(drop=True)
    for b in betas:
        expected = hcs(want["accuracy"].to_numpy(), want["pre_ece_15"].to_numpy(), b)
        np.testing.assert_array_equal(got[f"hcs_{b:g}"].to_numpy(dtype=float), expected)  # the same bits
    nulls = con.execute("SELECT count(*) FROM networks WHERE hcs_1 IS NULL").fetchall()[0][0]
    assert nulls == 4  # NULL in, NULL out (accuracy or ECE missing), as the SQL formula gave
    # other betas on request; the SQL function is usable in any query
    con = query.connect(tmp_path, betas=[0.5])
    half = con.sql('SELECT "hcs_0.5" AS h, hcs(accuracy, pre_ece_15, 0.5) AS again FROM networks '
                   'WHERE "hcs_0.5" IS NOT NULL').df()
    np.testing.assert_array_equal(half["h"], half["again"])


def test_top_by_hcs_ranks_by_the_view(tmp_path, capsys):
    rng = np.random.default_rng(1)
    table = write_table(tmp_path, "tss_200", "cifar10", rng)
    assert cli.main(["top", "--space", "tss", "--dataset", "cifar10", "--by", "hcs_1", "-n", "5",
                     "--results", str(tmp_path)]) == 0
    said, *shown = capsys.readouterr().out.splitlines()
    measured = int((table["arch_index"] == table["measured_by"]).sum())
    assert said == f"tss cifar10: the top 5 of {measured} measured networks by hcs_1, highest first (higher is better)"
    assert shown[0].split()[:2] == ["arch_index", "measured_by"] and "hcs_1" in shown[0]
    scores = pd.Series(hcs(table["accuracy"], table["pre_ece_15"], 1), index=table["arch_index"])
    best = scores.dropna().sort_values(ascending=False, kind="stable").index[:5].tolist()
    assert [int(line.split()[0]) for line in shown[1:]] == best


def test_top_of_a_space_with_two_schedules_asks_which_and_ranks_only_that_table(tmp_path, capsys):
    """Two tables of one space and dataset (hp 200 and 12): without --hp, one line naming both and
    exit 2 (ranking them together listed each network twice); with --hp, that table's networks only."""
    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(1))
    twelve = write_table(tmp_path, "tss_12", "cifar10", np.random.default_rng(2))
    argv = ["top", "--space", "tss", "--dataset", "cifar10", "--by", "accuracy", "-n", "100", "--results", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 tables (hp 12, 200): name one with --hp" in err[0], err
    assert cli.main(argv + ["--hp", "12"]) == 0
    said, _, *rows = capsys.readouterr().out.splitlines()
    measured = twelve[twelve["arch_index"] == twelve["measured_by"]]
    assert said.startswith(f"tss cifar10 (hp 12): the top {len(measured)} of {len(measured)} measured networks")
    want = measured.sort_values("accuracy", ascending=False, kind="stable")["arch_index"].tolist()
    assert [int(r.split()[0]) for r in rows] == want
    assert cli.main(argv + ["--hp", "90"]) == 2 and "--hp 90: not measured for tss cifar10" in capsys.readouterr().err


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    """`calibench query ... | head -1`: the closed pipe ends the command quietly with a SIGPIPE's
    status (141), not as a usage mistake (it said "[Errno 32] Broken pipe", exit 2)."""
    import subprocess
    import sys

    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(1))
    proc = subprocess.Popen([sys.executable, "-m", "calibench", "query", "SELECT * FROM range(300000)", "--results",
                             str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Broken pipe" not in err and "Traceback" not in err, err


def test_a_results_path_with_a_quote_is_read(tmp_path, capsys):
    """Paths go into DuckDB's SQL as escaped string literals."""
    results = tmp_path / "it's"
    write_table(results, "tss_200", "cifar10", np.random.default_rng(1), n=12)
    assert cli.main(["query", "SELECT count(*) AS n FROM networks_all", "--results", str(results)]) == 0
    assert "12" in capsys.readouterr().out


@pytest.mark.parametrize("by, lowest_first", [("post_ece_15", True), ("pre_ece_15", True), ("accuracy", False),
                                              ("temperature", False)])
def test_top_puts_the_best_first_and_says_in_which_order(tmp_path, capsys, by, lowest_first):
    """Errors lowest first, accuracy highest first (the registry's direction, as ``nas``
    optimises); a column that is not a score largest first; --ascending/--descending override."""
    from calibench.analysis.nats import nas

    table = write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(2))
    args = ["top", "--space", "tss", "--dataset", "cifar10", "--by", by, "-n", "6", "--results", str(tmp_path)]
    for extra, low in (([], lowest_first), (["--ascending"], True), (["--descending"], False)):
        assert cli.main(args + extra) == 0
        said, _, *rows = capsys.readouterr().out.splitlines()
        assert ("lowest first" if low else "highest first") in said, said
        if not extra:
            assert said.endswith("is better)" if by != "temperature" else "is not a score)"), said
        got = [int(line.split()[0]) for line in rows]
        values = table.set_index("arch_index")[by].dropna()
        # ties (the constant temperature) keep any order: compare the values shown
        want = values.sort_values(ascending=low, kind="stable")
        assert table.set_index("arch_index").loc[got, by].tolist() == want.iloc[:6].tolist()
    if by != "temperature":
        assert nas._maximised(by) is not lowest_first  # nas optimises the same direction


def test_nas_and_top_agree_on_every_registry_column():
    from calibench.analysis.nats import nas
    from calibench.vocabulary import STAGES
    from calibench.metrics import registry

    checked = 0
    for metric, meaning in registry.METRICS.items():
        if meaning.better is None:
            continue
        names = {"hcs": ["hcs_1", "hcs_2.5"], "ood_auroc": [f"{s}_ood_auroc_svhn" for s in STAGES],
                 "recorded_accuracy": ["recorded_accuracy"]}.get(metric)
        names = names or [f"{s}_{metric}" + ("_15" if registry.column(f"{s}_{metric}_15") and
                                              registry.column(f"{s}_{metric}_15").bins else "") for s in STAGES]
        for name in names:
            assert registry.column(name) is not None, name
            assert nas._maximised(name) == registry.best_first_descending(name) == (meaning.better == "higher"), name
            checked += 1
    assert checked > 100


def test_no_tables_says_where_it_looked(tmp_path):
    with pytest.raises(ValueError, match=str(layout.tables_dir(tmp_path))):
        query.connect(tmp_path)


def test_networks_holds_each_measurement_once_and_networks_all_marks_the_copies(tmp_path):
    """Issue 34: TSS isomorph copies repeat their representative's values; ``networks`` counts
    and averages measurements, ``networks_all`` has every row with ``is_copy``."""
    rng = np.random.default_rng(4)
    table = write_table(tmp_path, "tss_200", "cifar10", rng, n=12)
    copies = {5: 1, 6: 1, 9: 2}  # arch_index -> the network it was measured as
    for copy, rep in copies.items():
        for column in ("accuracy", "pre_ece_15", "post_ece_15"):
            table.loc[copy, column] = table.loc[rep, column]
        table.loc[copy, "measured_by"] = rep
    table.to_parquet(layout.table_path(tmp_path, "tss_200", "cifar10"), index=False)
    con = query.connect(tmp_path)
    assert con.execute("SELECT count(*) FROM networks").fetchall()[0][0] == 12 - len(copies)
    assert con.execute("SELECT count(*), sum(is_copy::INT) FROM networks_all").fetchall()[0] == (12, len(copies))
    measured = table[~table["arch_index"].isin(list(copies))]
    got = con.execute("SELECT avg(pre_ece_15) FROM networks").fetchall()[0][0]
    assert got == pytest.approx(measured["pre_ece_15"].mean(), rel=1e-12)
    assert "is_copy" not in [r[0] for r in con.execute("DESCRIBE networks").fetchall()]
    rows = con.execute("SELECT arch_index, measured_by FROM networks_all WHERE is_copy ORDER BY 1").fetchall()
    assert rows == sorted(copies.items())


# ---------------------------------------------------------------- mistakes: one or two lines, exit 2, nothing written

def _cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def write_empty_table(results, target: str, dataset: str):
    """What build-table writes when it measured no network: a sealed table without columns."""
    from calibench.atomic import atomic_write
    from calibench.results import tables

    path = layout.table_path(results, target, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: tables._write_parquet(pd.DataFrame(), f, {"stages": [], "constants": {}}))
    return path


def test_a_table_without_columns_is_left_out_and_named(tmp_path, capsys):
    """A table without columns (DuckDB cannot read one) is left out of networks, named on stderr
    in one line; every query and top go on over the other tables."""
    write_table(tmp_path, "tss_200", "cifar100", np.random.default_rng(5), n=8)
    empty = write_empty_table(tmp_path, "tss_200", "cifar10")
    assert query.connect(tmp_path).execute("SELECT 1").fetchall() == [(1,)]
    capsys.readouterr()
    for sql in ("SELECT 1 AS one", "SELECT count(*) AS n FROM networks"):
        code, out, err = _cli(capsys, "query", sql, "--results", str(tmp_path))
        assert code == 0 and out.split()[-1] == ("1" if "one" in sql else "8"), out
        assert len(err.splitlines()) == 1 and str(empty) in err and "left out of networks" in err, err
    code, out, err = _cli(capsys, "top", "--space", "tss", "--dataset", "cifar100", "-n", "3", "--results", str(tmp_path))
    assert code == 0 and len(out.splitlines()) == 5 and err.count(str(empty)) == 1, (out, err)
    code, out, err = _cli(capsys, "top", "--space", "tss", "--dataset", "cifar10", "--results", str(tmp_path))
    assert code == 2 and "--dataset cifar10: not measured for space tss" in err and str(empty) in err, err
    assert len(err.splitlines()) == 2, err


def test_only_tables_without_columns_is_one_line_and_exit_2(tmp_path, capsys):
    empty = write_empty_table(tmp_path, "tss_200", "cifar10")
    for argv in (["query", "SELECT 1"], ["top", "--space", "tss", "--dataset", "cifar10"]):
        code, out, err = _cli(capsys, *argv, "--results", str(tmp_path))
        assert code == 2 and out == "", out
        said = err.splitlines()
        assert len(said) == 2 and str(empty) in said[0], err  # left out, and why nothing is left
        assert said[1] == (f"calibench {argv[0]}: no result table with columns under {layout.tables_dir(tmp_path)}: "
                           "every table there holds no measured network")


def test_a_table_duckdb_cannot_read_is_named(tmp_path):
    """Should DuckDB fail on the tables where the checks before it passed, the error names the
    first table it cannot read on its own (main: one line, exit 2)."""
    import duckdb

    write_table(tmp_path, "tss_200", "cifar100", np.random.default_rng(6), n=6)
    empty = write_empty_table(tmp_path, "tss_200", "cifar10")
    tables = layout.result_tables(tmp_path)
    error = query._unreadable_table(duckdb.connect(), tables, RuntimeError("both"))
    assert isinstance(error, ValueError) and str(error).startswith(f"{empty}: DuckDB cannot read this result table (")
    assert len(str(error).splitlines()) == 1


@pytest.mark.parametrize("where", ["the table", "a new file", "through a link", "the results directory"])
def test_output_inside_the_results_is_refused_and_nothing_written(tmp_path, capsys, where):
    results = tmp_path / "results"
    write_table(results, "tss_200", "cifar10", np.random.default_rng(7), n=6)
    table = layout.table_path(results, "tss_200", "cifar10")
    before = table.read_bytes()
    (tmp_path / "link").symlink_to(table.parent)
    output = {"the table": table, "a new file": results / "new.csv", "the results directory": results / "x.parquet",
              "through a link": tmp_path / "link" / table.name}[where]
    code, out, err = _cli(capsys, "query", "SELECT 1 AS a", "-o", str(output), "--results", str(results))
    assert code == 2 and out == "", out
    assert err.splitlines() == [err.rstrip("\n")] and err.startswith(f"calibench query: --output {output}: inside "
                                                                       f"the results directory {results}"), err
    assert ("through a link" in err) == (where == "through a link"), err
    assert table.read_bytes() == before
    assert not (results / "new.csv").exists() and not (results / "x.parquet").exists()
    code, out, err = _cli(capsys, "query", "SELECT 1 AS a", "-o", str(tmp_path / "out.csv"), "--results", str(results))
    assert code == 0 and (tmp_path / "out.csv").read_text().split() == ["a", "1"], err


def test_export_out_inside_what_it_reads_is_refused(tmp_path, capsys):
    results = tmp_path / "results"
    write_table(results, "tss_200", "cifar10", np.random.default_rng(8), n=6)
    table = layout.table_path(results, "tss_200", "cifar10")
    before = sorted(p.name for p in results.rglob("*"))
    for argv, refused in ((["--results", str(results), "--out", str(results / "tao")], True),
                          (["--out", str(table.parent), str(table)], True),  # a table's results directory
                          (["--out", str(tmp_path / "ex"), str(table)], False)):
        code, out, err = _cli(capsys, "export", "--format", "tao2024", *argv)
        if refused:
            assert code == 2 and out == "" and len(err.splitlines()) == 1, err
            assert err.startswith(f"calibench export: --out {argv[argv.index('--out') + 1]}: inside the results "
                                  f"directory {results}; calibench export only reads it"), err
        else:
            assert code == 0 and out.split() == [str(tmp_path / "ex" / "cifar10_tss.csv")], (out, err)
    assert sorted(p.name for p in results.rglob("*")) == before


def test_top_by_an_unknown_column_names_the_stages_only(tmp_path, capsys):
    table = write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(9), n=6)
    table.assign(recorded_accuracy=0.5, pre_accuracy=0.5, vs_accuracy=0.5).to_parquet(
        layout.table_path(tmp_path, "tss_200", "cifar10"), index=False)
    code, out, err = _cli(capsys, "top", "--space", "tss", "--dataset", "cifar10", "--by", "nosuch",
                          "--results", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1 and "recorded" not in err, err
    assert "(stages present: pre, post, vs; hcs columns: hcs_1, hcs_2, hcs_3)" in err, err


@pytest.mark.parametrize("sql, said", [("INSTALL httpfs", "an INSTALL statement: extensions are not allowed"),
                                       ("FORCE INSTALL httpfs", "an INSTALL statement: extensions are not allowed"),
                                       ("LOAD httpfs", "a LOAD statement: extensions are not allowed"),
                                       ("ATTACH 'x.db'", "an ATTACH statement: calibench query only reads"),
                                       # EXPLAIN ANALYZE runs the statement it explains
                                       ("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{table}' (FORMAT parquet)",
                                        "a COPY statement under EXPLAIN: calibench query only reads"),
                                       ("/* x */ explain -- y\n analyse COPY networks TO 'copy.csv'",
                                        "a COPY statement under EXPLAIN"),
                                       ("EXPLAIN ANALYZE INSTALL httpfs",
                                        "an INSTALL statement under EXPLAIN: extensions are not allowed"),
                                       ("EXPLAIN DELETE FROM networks", "a DELETE statement under EXPLAIN"),
                                       ("EXPLAIN (FORMAT json) COPY networks TO 'copy.csv'",
                                        "a COPY statement under EXPLAIN")])
def test_statements_that_do_not_read_are_named(tmp_path, capsys, sql, said, monkeypatch):
    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(10), n=6)
    table = layout.table_path(tmp_path, "tss_200", "cifar10")
    before = table.read_bytes()
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "query", sql.format(table=table), "--results", str(tmp_path))
    assert code == 2 and err.startswith(f"calibench query: {said}") and len(err.splitlines()) == 1, err
    assert table.read_bytes() == before and not (tmp_path / "copy.csv").exists()


def test_explain_and_explain_analyze_of_a_read_run(tmp_path, capsys):
    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(10), n=6)
    for sql in ("EXPLAIN SELECT count(*) FROM networks", "EXPLAIN ANALYZE SELECT count(*) FROM networks",
                "EXPLAIN (SELECT 1)"):
        code, out, err = _cli(capsys, "query", sql, "--results", str(tmp_path))
        assert code == 0 and "plan" in out, (sql, err)


def test_output_into_another_runs_tables_folder_is_refused(tmp_path, capsys):
    """-o may not land among the result tables of a run other than the one --results reads."""
    write_table(tmp_path / "a", "tss_200", "cifar10", np.random.default_rng(7), n=6)
    other = layout.table_path(tmp_path / "b", "tss_200", "cifar10")
    write_table(tmp_path / "b", "tss_200", "cifar10", np.random.default_rng(8), n=6)
    before = other.read_bytes()
    for output in (other, other.parent / "new.parquet"):
        code, out, err = _cli(capsys, "query", "SELECT 1 AS a", "-o", str(output), "--results", str(tmp_path / "a"))
        assert code == 2 and f"inside the results directory {tmp_path / 'b'}" in err, err
    assert other.read_bytes() == before and not (other.parent / "new.parquet").exists()


@pytest.mark.parametrize("url", ["https://example.com/x.csv", "s3://bucket/x.parquet"])
def test_a_remote_path_is_refused_without_loading_an_extension(tmp_path, capsys, url):
    """A SELECT over a remote path would make DuckDB install and load httpfs by itself; the
    connection forbids that, and the user reads one line naming the path."""
    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(11), n=6)
    reader = "read_csv" if url.endswith(".csv") else "read_parquet"
    code, out, err = _cli(capsys, "query", f"SELECT * FROM {reader}('{url}')", "--results", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{url} needs DuckDB's httpfs extension, which calibench query does not load" in err, err
    con = query.connect(tmp_path)
    loaded = {name for name, in con.sql("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()}
    assert "httpfs" not in loaded
    assert con.sql("SELECT current_setting('autoload_known_extensions'), "
                   "current_setting('autoinstall_known_extensions')").fetchall() == [(False, False)]


def con_value(results, sql: str):
    write_table(results, "tss_200", "cifar10", np.random.default_rng(12), n=6)
    return query.connect(results).execute(sql).fetchall()[0][0]


def test_hcs_out_of_its_range_is_nan_in_python_and_null_in_sql(tmp_path, capsys):
    """hcs is defined for accuracy and ECE in [0, 1] and beta > 0: NaN outside (Python), NULL in
    SQL, as for a NULL input; printed as NULL, a real NaN as NaN."""
    assert hcs(0.9, 0.1, 1) == pytest.approx(0.9)
    bad = [(0.5, 2, 1), (1.5, 0.1, 1), (-0.1, 0.1, 1), (0.5, -0.1, 1), (0.5, 0.1, 0), (0.5, 0.1, -1),
           (np.nan, 0.1, 1)]
    assert all(np.isnan(hcs(*args)) for args in bad)
    # acc 0, ECE 1: the formula's 0/0, where the score is its limit 0; next to it the score is small
    assert [hcs(0, 1, b) for b in (0.5, 1, 3)] == [0.0, 0.0, 0.0]
    near = hcs(np.array([1e-9, 0.0, 1e-9]), np.array([1.0, 1 - 1e-9, 1 - 1e-9]), 2)
    assert (near >= 0).all() and (near < 3e-9).all(), near
    assert con_value(tmp_path, "SELECT hcs(0, 1, 2)") == 0.0
    np.testing.assert_array_equal(hcs([0.9, 2.0, 0.5], [0.1, 0.1, 1.5], 1), [hcs(0.9, 0.1, 1), np.nan, np.nan])
    write_table(tmp_path, "tss_200", "cifar10", np.random.default_rng(11), n=6)
    con = query.connect(tmp_path)
    calls = ", ".join(f"hcs({a}, {e}, {b})" for a, e, b in bad + [(0.9, 0.1, 1)]).replace("nan", "'nan'::DOUBLE")
    got = con.execute(f"SELECT {calls}, hcs(NULL, 0.1, 1), hcs(0.5, NULL, 1), hcs(0.5, 0.1, NULL)").fetchall()[0]
    assert got[:len(bad)] == (None,) * len(bad) and got[len(bad)] == pytest.approx(0.9)
    assert got[len(bad) + 1:] == (None, None, None)
    code, out, err = _cli(capsys, "query", "SELECT hcs(NULL, 0.1, 1) AS h, hcs(0.5, 2, 1) AS out_of_range, "
                          "'nan'::DOUBLE AS nan, NULL::VARCHAR AS s, 0.25::DOUBLE AS x", "--results", str(tmp_path))
    assert code == 0 and out.split() == ["h", "out_of_range", "nan", "s", "x", "NULL", "NULL", "NaN", "NULL", "0.25"], out
