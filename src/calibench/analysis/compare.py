"""Two runs side by side (issue 26, part 2; ``calibench compare RUN_A RUN_B``).

A run is a results directory (its tables under :func:`calibench.layout.tables_dir`), a folder
of result tables, one table, or a folder (or file) of tao2024 CSVs (read with
:func:`calibench.results.interop.read_tao2024`, keyed by file name). Tables are matched by
(space, hp, dataset) and read one pair at a time, only the columns asked for.

Rows are matched by (network, seed): the network is ``nats_index`` where both tables hold it
for every row (a tao2024 file knows only the NATS-Bench index; the mini benchmark's
``arch_index`` is not it); a population of one's own by the model's name, ``arch_str`` (its
``arch_index`` depends on the run's history, :mod:`calibench.sources.indices`: a setting
there, as ``measured_by``); else ``arch_index``. Per column shared by both, over the rows in
both (:func:`numeric_difference`, :func:`label_difference`): the largest and the median
absolute difference, the rows where exactly one side is NaN (both NaN: equal; +inf equals
+inf), the rows that differ by more than ``atol``, and Kendall's tau-b of the two rankings
(:func:`calibench.analysis.tau_b.kendall_tau`; 1 for identical columns, and for columns that
rank the rows alike, without computing it; NaN for a constant one); a column of one side only
is ``only_a`` / ``only_b``.

Settings, not data (:data:`SETTING_COLUMNS`): ``config_hash`` and ``logits_key`` key the
settings and software a number was computed with (changed with the settings even where no
number is), ``source_bytes``, ``source_mtime`` the logits' archive file, ``calibench_version``. They are
compared like the rest and written to the CSV (``kind`` ``setting``), but their differences
are reported among the settings that differ and never make two runs unequal; the other
provenance columns (params, flops, temperature, accuracy, recorded_accuracy, n_eval,
arch_str) are data. The other settings come from each table's schema metadata (software per
provenance group, the config record: file names and SHA-256s, the effective config's
SHA-256, stages, fitted constants, coverage, tao2024 source) and, for a results directory,
the lambda, mu search record (:func:`calibench.layout.odir_path`) where both runs keep one;
config file paths are compared by file name, as two copies of a run live in different folders.

A table read from the tao2024 layout (a CSV, or a table ``calibench import`` wrote) holds only
what that layout carries (:func:`not_carried`): the columns its import derived or could not
fill are that side's absent columns, and a column one side holds and the other does not is
not compared and does not make the runs different (the layout carries a few of calibench's
columns); of the settings, only those both sides record are compared.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibench import integrity, layout
from calibench.analysis.tables import measured
from calibench.analysis.tau_b import kendall_tau
from calibench.results import interop
from calibench.results.tables import NATS_INDEX, PROVENANCE, check_result_table, table_metadata
from calibench.vocabulary import NATS_SPACES

SETTING_COLUMNS = ("config_hash", "logits_key", "source_bytes", "source_mtime", "calibench_version")
POSITIONS = ("arch_index", "measured_by")  # a population's models matched by name: their rows, a setting
assert set(SETTING_COLUMNS) <= set(PROVENANCE)
STATUSES = ("equal", "differs", "only_a", "only_b")
CSV_COLUMNS = ["table", "column", "status", "n_both", "n_only_a", "n_only_b", "max_abs_diff", "median_abs_diff",
               "n_nan_mismatch", "kendall_tau", "n_differ", "kind"]
_MATCH = ("arch_index", NATS_INDEX, "seed", "space", "arch_str")  # the columns rows are matched by


# ---------------------------------------------------------------- one column (pure)

def numeric_difference(a, b, atol: float = 0.0) -> dict:
    """Two aligned numeric columns: ``max_abs_diff``, ``median_abs_diff`` (over rows where
    neither is NaN; NaN where there are none), ``n_nan_mismatch`` (exactly one side NaN),
    ``n_differ`` (those plus rows differing by more than ``atol``), ``kendall_tau`` and
    ``status`` (``equal`` when ``n_differ`` is 0). Equal infinities differ by 0."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    mismatch = int(np.count_nonzero(nan_a ^ nan_b))
    both = ~(nan_a | nan_b)
    x, y = a[both], b[both]
    same = x == y
    with np.errstate(invalid="ignore"):
        d = np.where(same, 0.0, np.abs(x - y))
    n_differ = mismatch + int(np.count_nonzero(d > atol))
    if len(x) < 2 or x.min() == x.max():
        tau = math.nan  # tau_b's own value for fewer than two rows or a constant column
    elif same.all() or same_order(x, y):  # tau_b is 1: every pair concordant or tied in both
        tau = 1.0
    else:
        tau = kendall_tau(x, y)  # over the rows where neither is NaN, as kendall_tau's own policy
    return {"status": "equal" if n_differ == 0 else "differs",
            "max_abs_diff": float(d.max()) if len(d) else math.nan,
            "median_abs_diff": float(np.median(d)) if len(d) else math.nan,
            "n_nan_mismatch": mismatch, "kendall_tau": tau, "n_differ": n_differ}


def same_order(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether NaN-free ``x`` and ``y`` rank the rows alike, ties included (then Kendall's
    tau-b is 1 unless they are constant): sorted by x, y never decreases, rises exactly where
    x rises. One sort, where the tau itself costs an inversion count too."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    step_x, step_y = xs[1:] != xs[:-1], ys[1:] != ys[:-1]
    return bool((ys[1:] >= ys[:-1]).all() and (step_x == step_y).all())


def label_difference(a, b) -> dict:
    """Two aligned non-numeric columns: ``n_differ`` (rows whose values differ; both missing
    is equal), ``n_nan_mismatch`` (exactly one missing), ``status``; no numeric statistics."""
    a, b = np.asarray(a, object), np.asarray(b, object)
    miss_a, miss_b = pd.isna(a), pd.isna(b)
    eq = np.fromiter(((not (ma or mb)) and bool(x == y) for x, y, ma, mb in zip(a, b, miss_a, miss_b)), bool, len(a))
    same = (miss_a & miss_b) | eq
    n_differ = int(np.count_nonzero(~same))
    return {"status": "equal" if n_differ == 0 else "differs", "max_abs_diff": math.nan,
            "median_abs_diff": math.nan, "n_nan_mismatch": int(np.count_nonzero(miss_a ^ miss_b)),
            "kendall_tau": math.nan, "n_differ": n_differ}


def _numeric(s: pd.Series) -> bool:
    """Numbers (bool, int, float, nullable Int), or a column holding nothing (numeric with any)."""
    return (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)
            or bool(s.isna().all()))


def column_difference(a: pd.Series, b: pd.Series, atol: float = 0.0) -> dict:
    """:func:`numeric_difference` where both columns are numeric, else :func:`label_difference`."""
    if _numeric(a) and _numeric(b):
        return numeric_difference(a.to_numpy(dtype=float, na_value=np.nan),
                                  b.to_numpy(dtype=float, na_value=np.nan), atol)
    return label_difference(a.astype(object).to_numpy(), b.astype(object).to_numpy())


# ---------------------------------------------------------------- one table pair (pure)

def match_key(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The columns rows are matched by: ``nats_index`` where both tables have it for every
    row; ``arch_str`` (the model's name) where both are tables of a population beyond
    NATS-Bench's spaces; else ``arch_index``; then ``seed`` where both have it."""
    if all(NATS_INDEX in f and f[NATS_INDEX].notna().all() for f in (a, b)):
        net = NATS_INDEX
    elif all(own_population(f) for f in (a, b)):
        net = "arch_str"
    else:
        net = "arch_index"
    for f, side in ((a, "A"), (b, "B")):
        if net not in f:
            raise ValueError(f"table of run {side} has no {net} column: rows cannot be matched")
    return [net] + (["seed"] if "seed" in a and "seed" in b else [])


def align(a: pd.DataFrame, b: pd.DataFrame, key: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(rows of ``a``, rows of ``b``) in both, in ``a``'s order, and the keys in one only."""
    ka, kb = (pd.MultiIndex.from_arrays([_key_values(f, c, side) for c in key], names=list(key))
              for f, side in ((a, "A"), (b, "B")))
    for k, side in ((ka, "A"), (kb, "B")):
        if not k.is_unique:
            first = k[k.duplicated()][0]
            said = ", ".join(f"{name} {value}" for name, value in zip(key, first if isinstance(first, tuple) else (first,)))
            raise ValueError(f"run {side}: several rows have {said}: not one table of networks (a shard?)")
    where = kb.get_indexer(ka)
    ia = np.flatnonzero(where >= 0)
    ib = where[ia]
    only_a = [tuple(k) for k in ka[where < 0]]
    only_b = [tuple(k) for k in kb[~np.isin(np.arange(len(kb)), ib)]]
    return ia, ib, only_a, only_b


def own_population(f: pd.DataFrame) -> bool:
    """Whether ``f`` is a table of a population beyond NATS-Bench's spaces, with model names."""
    return ("space" in f and "arch_str" in f and not f["space"].isin(NATS_SPACES).any()
            and f["arch_str"].notna().all())


def _key_values(f: pd.DataFrame, column: str, side: str) -> np.ndarray:
    if column == "arch_str":
        return f[column].astype(str).to_numpy(dtype=object)
    values = f[column].to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(values).any():
        raise ValueError(f"run {side}: {column} is missing in {int(np.isnan(values).sum())} rows: "
                         "rows cannot be matched")
    return values.astype(np.int64)


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, columns: Sequence[str] | None = None,
                   atol: float = 0.0, cols_a: Sequence[str] | None = None,
                   cols_b: Sequence[str] | None = None) -> tuple[dict, pd.DataFrame]:
    """One table pair: (networks: ``key``, ``n_both``, ``only_a``, ``only_b`` (keys), the
    columns: one row per column of ``columns`` (default: every column) in either table, in
    :func:`union_order`, CSV_COLUMNS but ``table``). ``cols_a`` / ``cols_b``: the
    tables' column names where the frames hold only some of them (read narrowed)."""
    key = match_key(a, b)
    ia, ib, only_a, only_b = align(a, b, key)
    settings = set(SETTING_COLUMNS) | set(POSITIONS if key[0] == "arch_str" else ())
    cols_a, cols_b = list(cols_a or a.columns), list(cols_b or b.columns)
    wanted = set(cols_a) | set(cols_b) if columns is None else set(columns)
    set_b, set_a = set(cols_b), set(cols_a)
    order = [c for c in union_order(cols_a, cols_b) if c in wanted]
    counts = {"n_both": len(ia), "n_only_a": len(only_a), "n_only_b": len(only_b)}
    rows = []
    for c in order:
        kind = "setting" if c in settings else "data"
        if c not in set_b or c not in set_a:
            rows.append({"column": c, "status": "only_a" if c in set_a else "only_b", **counts,
                         "max_abs_diff": math.nan, "median_abs_diff": math.nan, "n_nan_mismatch": 0,
                         "kendall_tau": math.nan, "n_differ": 0, "kind": kind})
            continue
        sa, sb = a[c], b[c]
        found = column_difference(sa.iloc[ia] if len(ia) != len(a) else sa,
                                  sb.iloc[ib] if not _identity(ib, len(b)) else sb, atol)
        rows.append({"column": c, **counts, **found, "kind": kind})
    frame = pd.DataFrame(rows, columns=[c for c in CSV_COLUMNS if c != "table"])
    return {"key": key, **counts, "only_a": only_a, "only_b": only_b, "rows_a": ia, "rows_b": ib}, frame


def measured_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the rows that are measurements, the number of isomorph copies left out): a copy (TSS,
    ``arch_index`` != ``measured_by``) repeats its representative's values, so runs are
    compared on what each measured."""
    if "measured_by" not in frame.columns:
        return frame, 0
    kept = measured(frame)
    if len(kept) == len(frame):
        return frame, 0
    return kept.reset_index(drop=True), len(frame) - len(kept)


def union_order(cols_a: Sequence[str], cols_b: Sequence[str]) -> list[str]:
    """``cols_a``, with each column of ``cols_b`` only placed after its predecessor in ``cols_b``
    (``pre_ece_30`` of B after ``pre_ece_25``), so a column stays among its stage's."""
    out = list(cols_a)
    have = set(out)
    last = -1  # position in ``out`` of the previous column of B
    for c in cols_b:
        if c in have:
            last = out.index(c)
        else:
            last += 1
            out.insert(last, c)
            have.add(c)
    return out


def _identity(index: np.ndarray, n: int) -> bool:
    return len(index) == n and bool((index == np.arange(n)).all())


def select_columns(names: Iterable[str], patterns: Sequence[str] | None) -> list[str]:
    """The names matching any of the fnmatch ``patterns`` (case-sensitive; None: every name)."""
    names = list(names)
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


# ---------------------------------------------------------------- settings (pure)

def flatten_settings(value, prefix: str = "") -> dict[str, str]:
    """Nested settings as ``{"a.b": "value"}`` strings, as compare and ``calibench status`` show them."""
    out: dict[str, str] = {}
    _flatten(prefix, value, out)
    return out


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, Mapping):
        for k in sorted(value, key=str):
            _flatten(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
        out[prefix] = json.dumps(value, sort_keys=True, default=str)
    elif isinstance(value, (list, tuple)):
        out[prefix] = ", ".join(str(v) for v in value)
    else:
        out[prefix] = "" if value is None else str(value)


def table_settings(meta: Mapping, odir: Mapping | None = None) -> dict[str, str]:
    """A table's settings as ``key: value`` strings, from its schema metadata (as
    :func:`calibench.results.tables.build_table` or tao2024's reader writes it) and its lambda,
    mu search record (``odir``): software per provenance group (a key with several values
    lists each with its rows), the measurement settings key by key, the config record (files by name
    with SHA-256), stages,
    constants, coverage, sources, tao2024 source fields."""
    out: dict[str, str] = {}
    if "settings" in meta:  # the measurement settings, key by key: the differences a reader looks for first
        _flatten("settings", meta["settings"], out)
    groups = meta.get("provenance") or []
    for name in sorted({k for g in groups for k in g["provenance"]}):
        values = [(g["provenance"].get(name), g["rows"]) for g in groups]
        if len({str(v) for v, _ in values}) == 1:
            out[f"software.{name}"] = "" if values[0][0] is None else str(values[0][0])
        else:
            out[f"software.{name}"] = "; ".join(f"{v} ({n} rows)" for v, n in values)
    configs = meta.get("configs") or []
    records = []
    for c in configs:
        rec = c.get("config")
        if rec is None:
            records.append(("not recorded", "", c["rows"]))
            continue
        files = ", ".join(f"{Path(str(f['path'])).name} (sha256 {str(f['sha256'])[:16]})" for f in rec.get("files", []))
        records.append((str(rec.get("effective_sha256")), files, c["rows"]))
    if records:
        several = len(records) > 1
        out["config.effective_sha256"] = "; ".join(r[0] + (f" ({r[2]} rows)" if several else "") for r in records)
        out["config.files"] = "; ".join(r[1] + (f" ({r[2]} rows)" if several else "") for r in records)
    for name in ("settings_by_chunks", "stages", "constants", "coverage", "sources", "built_by", "source",
                 "source_file", "source_sha256", "imported_by", "converted"):
        if name in meta:
            value = meta[name]
            if name == "coverage" and isinstance(value, Mapping):
                value = {**value, "missing": len(value.get("missing") or [])}
            _flatten(name, value, out)
    if odir:
        _flatten("odir.settings", odir.get("settings") or {}, out)
        for stage, chosen in (odir.get("chosen") or {}).items():
            for k in ("lambda", "mu"):
                if k in (chosen or {}):
                    out[f"odir.chosen.{stage}.{k}"] = str(chosen[k])
    return out


def settings_differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, A value, B value) of every key whose values differ, ``(absent)`` on a side without it."""
    keys = list(a) + [k for k in b if k not in a]
    return [(k, a.get(k, "(absent)"), b.get(k, "(absent)")) for k in keys if a.get(k) != b.get(k)]


def column_settings(a: pd.DataFrame, b: pd.DataFrame, ia: np.ndarray, ib: np.ndarray,
                    names: Sequence[str] = SETTING_COLUMNS) -> list[tuple[str, str, str]]:
    """(``column NAME (N of M rows differ)``, A, B) of each setting column whose aligned rows
    differ: on each side its value where one, else how many distinct values."""
    out = []
    for name in names:
        if name not in a and name not in b:
            continue
        va = a[name].iloc[ia].astype(object).to_numpy() if name in a else np.full(len(ia), None, object)
        vb = b[name].iloc[ib].astype(object).to_numpy() if name in b else np.full(len(ib), None, object)
        n = label_difference(va, vb)["n_differ"]
        if n:
            out.append((f"column {name} ({n} of {len(ia)} rows differ)", _describe(va), _describe(vb)))
    return out


def _describe(values: np.ndarray) -> str:
    present = [v for v in values if not pd.isna(v)]
    if not present:
        return "(none)"
    distinct = sorted({str(v) for v in present})
    return distinct[0] if len(distinct) == 1 else f"{len(distinct)} values, e.g. {distinct[0]}"


# ---------------------------------------------------------------- runs (files)

def not_carried(meta: Mapping) -> set[str] | None:
    """The columns of a table read from the tao2024 layout (``meta``: its schema metadata or
    the reader's) that its file did not carry: derived on import (``pre_accuracy`` is the file's
    ``acc``, ``measured_by`` found from equal rows), unavailable in the layout (params, the
    temperature, provenance), ``arch_index`` (the file's config, the NATS-Bench index that
    rows are matched by) and ``measured_by`` (derived, or carried by ``export --expand-isomorphs``
    as NATS-Bench indices too, where a mini benchmark's are its archive's). None if measured."""
    if not interop.is_import(meta):
        return None
    return (set(meta.get("unavailable") or []) | (set(meta.get("derived") or {}) - {NATS_INDEX})
            | {"arch_index", "measured_by"})


@dataclass
class TableRef:
    """One table of a run: its (space, hp, dataset), file and format (``table``, ``tao2024``)."""

    key: tuple[str, str, str]
    path: Path
    format: str
    results: Path | None = None  # the results directory (its lambda, mu search records)
    read: tuple | None = field(default=None, repr=False)  # a tao2024 file's (frame, settings), read once
    external: set[str] | None = field(default=None, repr=False)  # not_carried, once table_columns read it

    @property
    def name(self) -> str:
        return f"{layout.target_name(self.key[0], self.key[1])}_{self.key[2]}"


@dataclass
class Run:
    """A run to compare: where it is, a short name, and its tables by (space, hp, dataset)."""

    path: Path
    kind: str  # results, tables, tao2024
    tables: dict[tuple, TableRef] = field(default_factory=dict)

    @property
    def name(self) -> str:
        p = self.path.resolve()
        return p.parent.name if p.name == layout.tables_dir("").name and p.parent.name else p.stem


def open_run(path: str | Path) -> Run:
    """The tables of a run (see the module's docstring). ``ValueError`` naming ``path`` where
    it does not exist or holds no tables (a usage mistake: ``calibench compare`` exits 2)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix.lower() == ".csv":
            return _tao_run(path, [path])
        if path.suffix.lower() == ".parquet":
            return _table_run(path, "tables", [path], None)
        raise ValueError(f"{path}: neither a result table (.parquet) nor a tao2024 file (.csv)")
    found = layout.result_tables(path)
    if found:
        return _table_run(path, "results", found, path)
    found = sorted(path.glob("*.parquet"))
    if found:
        return _table_run(path, "tables", found, path.parent if path.name == layout.tables_dir("").name else None)
    csvs = sorted(p for p in path.glob("*.csv") if p.is_file())
    if csvs:
        return _tao_run(path, csvs)
    raise ValueError(f"{path}: no result tables ({layout.tables_dir(path)}/*.parquet, *.parquet) "
                     f"and no tao2024 files ({{dataset}}_{{space}}.csv)")


def _table_run(path: Path, kind: str, files: list[Path], results: Path | None) -> Run:
    run = Run(path, kind)
    for f in files:
        check_result_table(f)
        key = interop.table_key(f)
        if key in run.tables:
            raise ValueError(f"{f} and {run.tables[key].path} are both (space, hp, dataset) = {key}")
        run.tables[key] = TableRef(key, f, "table", results)
    return run


def _tao_run(path: Path, files: list[Path]) -> Run:
    run = Run(path, "tao2024")
    for f in files:
        try:
            key = interop.parse_file_name(f)
        except ValueError:
            if len(files) == 1:
                raise
            continue  # another CSV beside the tao2024 files
        if key in run.tables:
            raise ValueError(f"{f} and {run.tables[key].path} are both (space, hp, dataset) = {key}")
        run.tables[key] = TableRef(key, f, "tao2024")
    if not run.tables:
        raise ValueError(f"{path}: no tao2024 files ({{dataset}}_{{space}}[_hp{{hp}}].csv, e.g. cifar10_tss.csv)")
    return run


def table_columns(ref: TableRef) -> list[str]:
    """A table's column names (a parquet table's from its schema, without reading it); sets
    ``ref.external`` (:func:`not_carried`)."""
    if ref.format == "table":
        import pyarrow.parquet as pq

        with integrity.naming(ref.path):
            names = pq.read_schema(ref.path).names
        ref.external = not_carried(table_metadata(ref.path))
        return names
    if ref.read is None:  # a CSV has no schema to read alone: the file, kept for read_table
        frame, meta = interop.read_tao2024(ref.path, *ref.key)
        ref.read = frame, table_settings(meta)
        ref.external = not_carried(meta)
    return list(ref.read[0].columns)


def read_table(ref: TableRef, columns: Sequence[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """(frame, settings): the table's ``columns`` (None: all) and its settings (:func:`table_settings`)."""
    if ref.format == "tao2024":
        if ref.read is None:
            frame, meta = interop.read_tao2024(ref.path, *ref.key)
            ref.read = frame, table_settings(meta)
        (frame, settings), ref.read = ref.read, None
        return (frame if columns is None else frame[[c for c in frame.columns if c in set(columns)]]), settings
    import pyarrow.parquet as pq

    with integrity.naming(ref.path):
        table = pq.read_table(ref.path, columns=None if columns is None else list(columns))
    frame = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    odir = None
    if ref.results is not None:
        record = layout.odir_path(ref.results, layout.target_name(ref.key[0], ref.key[1]), ref.key[2])
        if record.is_file():
            odir = integrity.read_json(record)
    return frame, table_settings(table_metadata(ref.path), odir)


# ---------------------------------------------------------------- two runs

@dataclass
class TableResult:
    """One (space, hp, dataset): in both runs (``side`` ``both``) or one (``only_a``, ``only_b``)."""

    name: str
    key: tuple[str, str, str]
    side: str
    networks: dict = field(default_factory=dict)  # compare_frames' first result
    columns: pd.DataFrame | None = None  # compare_frames' second, with ``table``
    settings: list[tuple[str, str, str]] = field(default_factory=list)
    external: str | None = None  # a side read from this layout (tao2024): its columns' set is the layout's

    @property
    def equal(self) -> bool:
        if self.side != "both" or self.networks["n_only_a"] or self.networks["n_only_b"]:
            return False
        data = self.columns[self.columns["kind"] == "data"]
        compared = data[data["status"].isin(("equal", "differs"))] if self.external else data
        return bool((compared["status"] == "equal").all())


@dataclass
class Comparison:
    a: Run
    b: Run
    atol: float
    patterns: list[str] | None
    tables: list[TableResult]

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    def csv_frame(self) -> pd.DataFrame:
        """One row per table x column (a table of one run only: one row, column ``*``)."""
        parts = []
        for t in self.tables:
            if t.side == "both":
                parts.append(t.columns)
            else:
                n = t.networks.get("rows", 0)
                parts.append(pd.DataFrame([{"table": t.name, "column": "*", "status": t.side, "n_both": 0,
                                            "n_only_a": n if t.side == "only_a" else 0,
                                            "n_only_b": n if t.side == "only_b" else 0, "n_nan_mismatch": 0,
                                            "n_differ": 0, "kind": "table"}]))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CSV_COLUMNS)
        return frame.reindex(columns=CSV_COLUMNS)


def compare_runs(path_a: str | Path, path_b: str | Path, patterns: Sequence[str] | None = None,
                 atol: float = 0.0) -> Comparison:
    """Compare two runs table by table (one pair in memory at a time, only the columns
    matching ``patterns`` and those rows are matched by). ``ValueError`` for a usage
    mistake (a missing path, no tables, no column matching ``patterns``)."""
    if not (atol >= 0 and math.isfinite(atol)):
        raise ValueError(f"--atol must be a finite number >= 0, got {atol}")
    run_a, run_b = open_run(path_a), open_run(path_b)
    keys = list(run_a.tables) + [k for k in run_b.tables if k not in run_a.tables]
    results, matched_any, pairs = [], not patterns, 0
    for key in keys:
        ref_a, ref_b = run_a.tables.get(key), run_b.tables.get(key)
        if ref_a is None or ref_b is None:
            ref = ref_a or ref_b
            results.append(TableResult(ref.name, key, "only_a" if ref_b is None else "only_b",
                                       {"rows": _row_count(ref)}))
            continue
        pairs += 1
        names_a, names_b = table_columns(ref_a), table_columns(ref_b)
        # a side in the tao2024 layout holds the columns its file carried; the rest are absent there
        held_a, held_b = ([c for c in names if c not in (ref.external or ())]
                          for names, ref in ((names_a, ref_a), (names_b, ref_b)))
        external = interop.FORMAT if ref_a.external is not None or ref_b.external is not None else None
        chosen = select_columns(list(dict.fromkeys(held_a + held_b)), patterns)
        matched_any |= bool(chosen)
        need = set(chosen) | set(_MATCH) | set(SETTING_COLUMNS) | {"measured_by"}
        frame_a, settings_a = read_table(ref_a, [c for c in names_a if c in need])
        frame_b, settings_b = read_table(ref_b, [c for c in names_b if c in need])
        (frame_a, copies_a), (frame_b, copies_b) = measured_rows(frame_a), measured_rows(frame_b)
        networks, columns = compare_frames(frame_a, frame_b, chosen, atol, held_a, held_b)
        networks.update(copies_a=copies_a, copies_b=copies_b)
        for prefix in ("odir.", "settings."):  # one side without (an import, an older table): unknown, not different
            if not (_has(settings_a, prefix) and _has(settings_b, prefix)):
                settings_a, settings_b = ({k: v for k, v in st.items() if not k.startswith(prefix)}
                                          for st in (settings_a, settings_b))
        if external:  # what the layout does not record is unknown on that side, not different
            settings_a, settings_b = ({k: v for k, v in st.items() if k in settings_a and k in settings_b}
                                      for st in (settings_a, settings_b))
        rows_a, rows_b = networks.pop("rows_a"), networks.pop("rows_b")
        positions = POSITIONS if networks["key"][0] == "arch_str" else ()
        settings = settings_differences(settings_a, settings_b) + column_settings(
            frame_a, frame_b, rows_a, rows_b, [c for c in (*SETTING_COLUMNS, *positions) if not external or
                                               (c in held_a and c in held_b)])
        del frame_a, frame_b
        columns.insert(0, "table", ref_a.name)
        results.append(TableResult(ref_a.name, key, "both", networks, columns, settings, external))
    if pairs and not matched_any:
        raise ValueError(f"no column of the tables matches --columns {' '.join(patterns)}")
    return Comparison(run_a, run_b, atol, list(patterns) if patterns else None, results)


def _has(settings: Mapping[str, str], prefix: str) -> bool:
    return any(k.startswith(prefix) for k in settings)


def _row_count(ref: TableRef) -> int:
    if ref.format == "table":
        import pyarrow.parquet as pq

        with integrity.naming(ref.path):
            return pq.ParquetFile(ref.path).metadata.num_rows
    return len(interop.read_tao2024(ref.path, *ref.key)[0])
