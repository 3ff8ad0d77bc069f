"""SQL over the results with DuckDB: ``networks`` (one row per measured network and dataset,
with ``hcs_{beta}`` columns), ``networks_all`` (the same with every TSS isomorph copy, marked
``is_copy``) and ``metrics`` (the long shards).

The ``hcs_{beta}`` columns are :func:`calibench.metrics.scores.hcs` itself, registered as the
SQL function ``hcs(accuracy, ece, beta)``: queries and the analysis share one formula.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from calibench import layout
from calibench.config.check import schema_default
from calibench.vocabulary import STAGES

HCS_ECE = "pre_ece_15"  # the ECE of HCS (docs/metrics.md: the pre stage's 15-bin ECE)


def _hcs_arrow(accuracy, ece, beta):
    """:func:`calibench.metrics.scores.hcs` over DuckDB's arrow vectors: NULL in, NULL out, and
    NULL wherever the Python function gives NaN (an input out of its range, or NaN)."""
    import numpy as np
    import pyarrow as pa

    from calibench.metrics.hcs import hcs  # numpy only: a query pays for no torch

    columns = [c.to_numpy(zero_copy_only=False).astype(float) for c in (accuracy, ece, beta)]
    values = np.broadcast_to(hcs(*columns), (len(accuracy),))
    nulls = np.isnan(values)  # a NULL input reads as NaN here
    for c in (accuracy, ece, beta):
        nulls |= c.is_null().to_numpy(zero_copy_only=False)
    return pa.array(values, pa.float64(), mask=nulls)


def register_hcs(con) -> None:
    """The SQL function ``hcs(accuracy, ece, beta)`` on ``con``: :func:`calibench.metrics.scores.hcs`."""
    con.create_function("hcs", _hcs_arrow, ["DOUBLE", "DOUBLE", "DOUBLE"], "DOUBLE", type="arrow",
                        null_handling="special")


def connect(results: str | Path = "results", betas=None):
    """A DuckDB connection with the views ``networks`` (measurements), ``networks_all`` (with
    isomorph copies), ``metrics`` and ``fits``; ValueError if no results.
    ``betas``: the ``hcs_{beta}`` columns (default: the config schema's ``analysis.hcs_betas``)."""
    import duckdb

    results = check_results_dir(results)
    tables = layout.result_tables(results)
    if not tables:
        raise ValueError(f"no result tables under {layout.tables_dir(results)}: run the workflow first")
    from calibench.results.tables import check_result_table

    for table in tables:  # every byte checked before a query reads them (DuckDB checks nothing)
        check_result_table(table)
    tables = _with_columns(tables, results)
    # nothing fetched or loaded behind the user's back: a SELECT over an https:// path would
    # otherwise install and load httpfs by itself (INSTALL and LOAD are refused in _sql)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    register_hcs(con)
    files = ", ".join(sql_string(t) for t in tables)
    betas = schema_default("analysis", "hcs_betas") if betas is None else betas
    hcs = ", ".join(f'hcs(accuracy, {HCS_ECE}, {float(b)!r}) AS "hcs_{b:g}"' for b in betas)
    # networks: each measurement once; networks_all: every row, TSS isomorph copies too (is_copy),
    # each carrying its representative's (measured_by's) values
    try:
        con.execute(f"CREATE VIEW networks_all AS SELECT *, {hcs}, coalesce(arch_index <> measured_by, false) "
                    f"AS is_copy FROM read_parquet([{files}], union_by_name = true)")
    except duckdb.Error as exc:
        raise _unreadable_table(con, tables, exc) from None
    con.execute("CREATE VIEW networks AS SELECT * EXCLUDE (is_copy) FROM networks_all WHERE NOT is_copy")
    for view, (_, folder_of, _) in _FILE_VIEWS.items():  # metrics, and the fit store's summaries (issue 35)
        if any(folder_of(results).rglob("*.parquet")):
            try:
                _create(con, view, folder_of(results))
            except duckdb.Error as exc:
                if not _leave_out_damaged(con, results, exc):
                    raise
    return con


def _with_columns(tables: list[Path], results: Path) -> list[Path]:
    """``tables`` without those that have no columns (what a build that measured no network
    writes; DuckDB cannot read one), named on stderr; ValueError if no table is left."""
    import sys

    import pyarrow.parquet as pq

    from calibench import integrity

    empty = []
    for table in tables:
        with integrity.naming(table):
            if not pq.read_schema(table).names:
                empty.append(table)
    if empty:
        print(f"calibench query: {len(empty)} result table(s) without columns (no network measured) left out of "
              "networks: " + ", ".join(str(p) for p in empty[:5]) + (" ..." if len(empty) > 5 else ""),
              file=sys.stderr)
    kept = [t for t in tables if t not in set(empty)]
    if not kept:
        raise ValueError(f"no result table with columns under {layout.tables_dir(results)}: "
                         "every table there holds no measured network")
    return kept


def _unreadable_table(con, tables: list[Path], exc: Exception) -> ValueError:
    """The error to raise when DuckDB cannot make the ``networks`` view over ``tables``: the
    first table it cannot read on its own, named, or else the tables together."""
    import duckdb

    for table in tables:
        try:
            con.execute(f"DESCRIBE SELECT * FROM read_parquet({sql_string(table)})")
        except duckdb.Error as own:
            return ValueError(f"{table}: DuckDB cannot read this result table ({_user_message(own)})")
    return ValueError(f"the result tables under {tables[0].parent} do not combine into one view "
                      f"({_user_message(exc)})")


# The views over per-network files: the columns they show, the folder they read, what a file is.
_FILE_VIEWS = {"metrics": ("*", layout.shards_dir, "shard"),
               "fits": ("COLUMNS('^(space|hp|dataset|arch_index|seed|stage|fit_key|failure|info_.+)$')",
                        layout.fits_dir, "fit-store file")}


def sql_string(value) -> str:
    """``value`` as an SQL string literal (a path with a quote in it stays one string)."""
    return "'" + str(value).replace("'", "''") + "'"


def _parquet_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.parquet"))


def _create(con, view: str, files: Path | list[Path]) -> None:
    """``view`` over every parquet file under a folder (a glob) or over the ``files`` listed."""
    columns = _FILE_VIEWS[view][0]
    source = (sql_string(f"{files}/**/*.parquet") if isinstance(files, Path)
              else "[" + ", ".join(sql_string(p) for p in files) + "]")
    con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {columns} FROM read_parquet({source}, "
                "hive_partitioning = false, union_by_name = true)")


def _leave_out_damaged(con, results: Path, exc: Exception) -> bool:
    """After ``exc`` from the ``metrics`` or ``fits`` view: redefine each without its damaged
    files, naming them on stderr; False if none is damaged (``exc`` has another cause)."""
    import sys

    found = False
    for view, (_, folder_of, noun) in _FILE_VIEWS.items():
        folder = folder_of(results)
        bad = damaged_files(folder)
        if not bad:
            continue
        found = True
        print(f"calibench query: {len(bad)} damaged {noun}(s) left out of {view} ({type(exc).__name__}): "
              + ", ".join(str(p) for p in bad[:5]) + (" ..." if len(bad) > 5 else "")
              + "; `calibench run` measures them again", file=sys.stderr)
        _create(con, view, [p for p in _parquet_files(folder) if p not in set(bad)])
    return found


def damaged_shards(results: str | Path) -> list[Path]:
    """Shards that are not parquet files (no PAR1 magic at both ends): a damaged or foreign file."""
    return damaged_files(layout.shards_dir(results))


def damaged_files(folder: str | Path) -> list[Path]:
    """Files under ``folder`` that are not parquet files (no PAR1 magic at both ends)."""
    bad = []
    for path in _parquet_files(Path(folder)):
        try:
            with open(path, "rb") as f:
                head = f.read(4)
                f.seek(max(0, path.stat().st_size - 4))
                tail = f.read(4)
        except OSError:
            bad.append(path)
            continue
        if head != b"PAR1" or tail != b"PAR1":
            bad.append(path)
    return bad


# Statements that only read: DuckDB's kinds, and the first words of a MULTI statement (a PIVOT's,
# where a COPY or CREATE of one is MULTI too)
_READS = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL", "PIVOT", "UNPIVOT", "FROM", "WITH", "("})


def _first_word(sql: str) -> str:
    """The statement's first keyword (upper case), past comments: DuckDB calls a PIVOT a MULTI
    statement, as it does a COPY or CREATE of one."""
    words = _first_words(sql, 1)
    return words[0] if words else ""


def _first_words(sql: str, n: int) -> list[str]:
    """The statement's first ``n`` keywords (upper case; an opening parenthesis is one), past comments."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S).lstrip()
    match = re.match(r"\(|[A-Za-z]+", text)
    words = []
    while match and len(words) < n:
        words.append(match.group(0).upper())
        text = text[match.end():].lstrip()
        match = re.match(r"\(|[A-Za-z]+", text)
    return words


def _a(word: str) -> str:
    return "an" if word[:1] in "AEIOU" else "a"


def _sql(con, sql: str, results: Path):
    """``con.sql(sql)`` materialised; if a damaged shard breaks the ``metrics`` view, the query
    runs again without the damaged shards, naming them (the next run measures them again)."""
    import duckdb

    _check_reads(con, sql)
    try:
        rel = con.sql(sql)
        return rel, _arrow(rel)
    except duckdb.Error as exc:
        if not _leave_out_damaged(con, results, exc):
            raise
        rel = con.sql(sql)
        return rel, _arrow(rel)


def _check_reads(con, sql: str, explained: bool = False) -> None:
    """QueryError unless ``sql`` is one statement that only reads; the statement an EXPLAIN
    explains is checked too (EXPLAIN ANALYZE runs it: a COPY under it would write)."""
    statements = con.extract_statements(sql)
    if len(statements) != 1:
        raise QueryError("no SQL statement given" if not statements else
                         f"{len(statements)} statements given: one at a time")
    try:
        kind = statements[0].type.name
    except ValueError:  # a kind this duckdb's Python enum lacks (UPDATE EXTENSIONS): the first word
        kind = "MULTI"
    kind = _first_word(sql) if kind == "MULTI" else kind
    reads = "calibench query only reads (SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)"
    under = " under EXPLAIN" if explained else ""
    if kind == "LOAD":  # DuckDB's kind of INSTALL, FORCE INSTALL and LOAD alike
        word = "INSTALL" if "INSTALL" in _first_words(sql, 2) else "LOAD"
        raise QueryError(f"{_a(word)} {word} statement{under}: extensions are not allowed; {reads}")
    if kind not in _READS or (explained and kind == "EXPLAIN"):
        raise QueryError(f"{_a(kind)} {kind} statement{under}: {reads}; -o FILE writes a result")
    if kind == "EXPLAIN":  # EXPLAIN [(options)] [ANALYZE|ANALYSE] statement
        text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", statements[0].query, flags=re.S)
        inner = re.sub(r"^\s*EXPLAIN\s*(\(\s*(FORMAT|ANALY[SZ]E)\b[^()]*\)\s*)?(ANALY[SZ]E\b)?", "", text, count=1,
                       flags=re.I)
        _check_reads(con, inner, explained=True)


def _arrow(rel):
    """The relation's rows as one pyarrow Table (it keeps NULL apart from NaN; pandas does not)."""
    import pyarrow as pa

    table = rel.arrow()  # a RecordBatchReader in DuckDB 1.4+, a Table before
    return table.read_all() if isinstance(table, pa.RecordBatchReader) else table


def _shown(table, df):
    """``df`` (``table`` as pandas) for printing: NULL where ``table`` holds NULL, in every
    column type (pandas shows a NULL double as NaN, a real NaN too; a NULL string as None)."""
    import pandas as pd

    shown = df.copy()
    for i in range(table.num_columns):
        nulls = table.column(i).is_null().to_numpy(zero_copy_only=False)
        if not nulls.any():
            continue
        column = df.iloc[:, [i]]
        if pd.api.types.is_float_dtype(column.dtypes.iloc[0]):  # pandas' common float format, kept
            text = [line.strip() for line in column.to_string(index=False, header=False).splitlines()]
        else:
            text = column.iloc[:, 0].astype(object).tolist()
        shown.isetitem(i, pd.Series(["NULL" if null else value for value, null in zip(text, nulls)],
                                    index=df.index, dtype=object))
    return shown


VIEWS_HELP = ("views: networks (one row per measured network and table: the tables' columns, e.g. space, hp, "
              "dataset, arch_index, arch_str, accuracy, {stage}_{metric}, and hcs_{beta}), networks_all (the same "
              "with TSS isomorph copies, is_copy true: each repeats its measured_by's values), metrics (one row per shard "
              "value: space, hp, dataset, arch_index, seed, stage, metric, bins, value) and fits (one row per network, "
              "seed and fitted stage: fit_key, failure and the fit's summaries info_*, e.g. info_temperature, "
              "info_iterations); docs/results.md, \"Querying\"")


class QueryError(ValueError):
    """A query DuckDB cannot run (bad SQL, an unknown view or column): its message and the views."""


def _user_message(exc: Exception) -> str:
    """DuckDB's message without its error-class prefix lines, on at most two lines."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("LINE ") and not set(line) <= {"^", " "}]
    return " ".join(lines[:2])


def run_query(sql: str, results: str | Path = "results", output: str | Path | None = None, con=None):
    """Run SQL; print the result (NULL shown as NULL), or write it as CSV/parquet when
    ``output`` is given: never inside ``results``. ``con``: a connection from :func:`connect`."""
    import duckdb

    if output is not None:
        output = Path(output)
        if output.suffix not in (".csv", ".parquet"):
            raise ValueError(f"--output {output}: use a .csv or .parquet file name")
        refuse_inside(output, results, "--output", "calibench query only reads it")
        if output.resolve().parent.name == layout.tables_dir(".").name:  # another run's result tables
            refuse_inside(output, output.resolve().parent.parent, "--output",
                          "a query's result is not written among a run's result tables")
        if output.is_dir() or not output.parent.is_dir():
            raise ValueError(f"--output {output}: " + ("a directory" if output.is_dir() else f"no directory {output.parent}"))
    con = connect(results) if con is None else con
    try:
        rel, table = _sql(con, sql, Path(results))
    except duckdb.Error as exc:
        for view, (_, folder_of, noun) in _FILE_VIEWS.items():  # a view over files this results directory lacks
            if f"name {view} does not exist" in str(exc) and not any(folder_of(results).rglob("*.parquet")):
                raise QueryError(f"view {view}: no {noun} under {folder_of(results)} (tables imported with "
                                 "calibench import have none; the networks view has their values)") from None
        needed = re.search(r"requires the extension (\w+)", str(exc))
        if needed:
            raise QueryError(f"{_user_message(exc).split(' requires')[0]} needs DuckDB's {needed.group(1)} "
                             "extension, which calibench query does not load: it reads local files only") from None
        raise QueryError(f"{_user_message(exc)}\n{VIEWS_HELP}") from exc
    if output is None:
        import pandas as pd

        df = con.from_arrow(table).df()  # DuckDB's own pandas types, as rel.df() gives
        with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200):
            print(_shown(table, df).to_string(index=False))
        return df
    try:
        (rel.write_parquet if output.suffix == ".parquet" else rel.write_csv)(str(output))
    except duckdb.Error as exc:
        raise ValueError(f"--output {output}: {_user_message(exc)}") from None
    print(f"wrote {output}")
    return output


def check_results_dir(results: str | Path, option: str = "--results") -> Path:
    """``results`` as a Path; ValueError (one line naming it) where it does not exist or is not a
    directory, before a command says it holds no tables."""
    results = Path(results)
    if not results.exists():
        raise ValueError(f"{option} {results}: no such directory")
    if not results.is_dir():
        raise ValueError(f"{option} {results}: not a directory")
    return results


def results_dir_of(path: str | Path) -> Path | None:
    """The results directory a run argument belongs to, links resolved: a directory itself, a
    table in a ``tables/`` folder that folder's parent; None for a file elsewhere."""
    resolved = Path(path).resolve()
    if resolved.is_dir():
        return resolved
    return resolved.parent.parent if resolved.parent.name == layout.tables_dir(".").name else None


def refuse_inside_runs(path: str | Path, runs, option: str, why: str) -> None:
    """:func:`refuse_inside` for each run argument's results directory (:func:`results_dir_of`)."""
    for run in runs:
        results = results_dir_of(run)
        if results is not None:
            refuse_inside(path, results, option, why)


def refuse_inside(path: str | Path, results: str | Path, option: str, why: str) -> None:
    """ValueError (one line naming ``path``) if ``path`` is ``results`` or lies inside it, symlinks
    resolved: a command that reads a results directory writes no file of its own there."""
    target, root = Path(path).resolve(), Path(results).resolve()
    if target == root or root in target.parents:
        linked = f" (through a link: {target})" if target != Path(os.path.abspath(path)) else ""
        raise ValueError(f"{option} {path}: inside the results directory {results}{linked}; {why}: "
                         "write the output elsewhere")


def top(space: str, dataset: str, by: str = "hcs_1", n: int = 20, results: str | Path = "results",
        ascending: bool | None = None, hp: str | None = None):
    """The top ``n`` measured networks of one table by any column of the ``networks`` view
    (every stage's metric, e.g. ``vs_ece_15``, ``spline_ksce``, ``ms_fit_lambda``): best first
    by the column's direction (:mod:`calibench.metrics.registry`: lowest first for an error,
    highest first for accuracy, HCS, AUROC; largest first for a column that is not a score),
    which a first line says; ``ascending`` overrides. ``hp``: the table's schedule, needed
    where the space holds several for ``dataset``."""
    from calibench.metrics import registry

    import difflib

    con = connect(results)
    columns = [r[0] for r in con.execute("DESCRIBE networks").fetchall()]
    if by not in columns:
        near = difflib.get_close_matches(by, columns, n=4, cutoff=0.6)
        stages = [s for s in STAGES if any(c.startswith(f"{s}_") for c in columns)]  # not recorded_accuracy's
        raise QueryError(f"--by {by}: not a column of the networks view"
                         + (f"; nearest: {', '.join(near)}" if near else "")
                         + f" (stages present: {', '.join(stages)}; hcs columns: "
                         + ", ".join(c for c in columns if c.startswith("hcs_")) + ")")
    pairs = con.execute("SELECT DISTINCT space, dataset FROM networks ORDER BY 1, 2").fetchall()
    if (space, dataset) not in pairs:
        spaces = sorted({s for s, _ in pairs})
        if space not in spaces:
            raise QueryError(f"--space {space}: not in the tables (spaces: {', '.join(spaces)})")
        raise QueryError(f"--dataset {dataset}: not measured for space {space} "
                         f"(datasets: {', '.join(d for s, d in pairs if s == space)})")
    hps = [r[0] for r in con.execute("SELECT DISTINCT hp FROM networks WHERE space = ? AND dataset = ? ORDER BY 1",
                                     [space, dataset]).fetchall()]
    if hp is None and len(hps) > 1:
        raise QueryError(f"{space} {dataset} has {len(hps)} tables (hp {', '.join(hps)}): name one with --hp")
    hp = hps[0] if hp is None else str(hp)
    if hp not in hps:
        raise QueryError(f"--hp {hp}: not measured for {space} {dataset} (hp: {', '.join(hps)})")
    count = con.execute("SELECT count(*) FROM networks WHERE space = ? AND hp = ? AND dataset = ?",
                        [space, hp, dataset]).fetchall()[0][0]
    shown = [c for c in ("arch_index", "measured_by", "arch_str", "accuracy", "pre_ece_15", "post_ece_15",
                         "temperature") if c in columns]
    shown += [by] if by not in shown else []
    descending = registry.best_first_descending(by) if ascending is None else not ascending
    order = "DESC" if descending else "ASC"
    label = f"{space} {dataset}" + (f" (hp {hp})" if len(hps) > 1 else "")
    print(f"{label}: the top {min(int(n), count)} of {count} measured networks by {by}, "
          f"{registry.direction_words(by, descending)}")
    select = ", ".join(f'"{c}"' for c in shown)
    sql = (f"SELECT {select} FROM networks WHERE space = {sql_string(space)} AND hp = {sql_string(hp)} "
           f"AND dataset = {sql_string(dataset)} ORDER BY \"{by}\" {order} NULLS LAST LIMIT {int(n)}")
    return run_query(sql, results, con=con)
