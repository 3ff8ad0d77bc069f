"""Result tables: the shards of one (space, hp, dataset) as one wide table, one row per
network, TSS rows expanded from class representatives to every member index. Needs no
torch: table jobs start fast.

The build scales to a full population (32,768 SSS networks x every stage, ~21 M long
rows; bench/bench_tables.py): shards are read by a few threads (only the needed columns,
strings dictionary-encoded), each shard's (stage, metric, bins) layout is turned into
column names once per distinct layout, and values are scattered into a preallocated
float64 matrix indexed by (row, column) instead of a pandas pivot; provenance is taken
once per (arch_index, seed). The result equals the former pivot, which is
``groupby(keys).first()`` semantics: per cell the first non-missing value in shard order,
columns in order of first appearance (tests/test_tables.py holds that oracle).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from calibench import integrity, layout
from calibench.results import shards
from calibench.atomic import atomic_write
from calibench.metrics import registry
from calibench.results.provenance import PROVENANCE_KEY, TABLE_METADATA_KEY, environment, of_shard, split

log = logging.getLogger(__name__)

KEYS = ["space", "hp", "dataset", "arch_index", "seed"]
PROVENANCE = ["arch_str", "params", "flops", "temperature", "accuracy", "recorded_accuracy", "n_eval",
              "config_hash", "logits_key", "source_bytes", "source_mtime", "calibench_version"]
FIRST = ["space", "hp", "dataset", "arch_index", "measured_by", "seed"]  # the wide table's leading columns
# A NATS-Bench population's tables: each row's NATS-Bench index (``arch_index`` is the archive's
# own; the mini benchmark's differ), null where unknown; after FIRST. Joins by index use it.
NATS_INDEX = "nats_index"
_STRINGS = ["space", "hp", "dataset", "stage", "metric", "arch_str", "config_hash", "logits_key", "source_mtime",
            "calibench_version"]
_COLUMNS = ["space", "hp", "dataset", "arch_index", "seed", "stage", "metric", "bins", "value", *PROVENANCE[:-1],
            "calibench_version"]
_TYPES = {f.name: f.type for f in shards.SHARD_SCHEMA}
METADATA_KEY = TABLE_METADATA_KEY  # the wide table's schema metadata: JSON with its stages and per-stage constants


# ---------------------------------------------------------------- one shard, digested

@dataclass
class _Layout:
    """The distinct (stage, metric, bins) of a run of long rows, shared by every shard of that layout."""

    names: tuple[str, ...]  # wide column names, in order of first appearance
    parts: tuple[tuple, ...]  # (stage, metric, bins) of each name
    pos: np.ndarray  # per row: index into names


@dataclass
class _Digest:
    """A shard reduced to what the wide table needs."""

    keys: list[tuple]  # per group: (space, hp, dataset, arch_index, seed)
    provenance: list[list]  # per group: PROVENANCE values, first non-missing in row order
    group: np.ndarray  # per row: index into keys
    layout: _Layout
    values: np.ndarray  # per row, float64
    duplicates: bool  # some (group, column) holds more than one row


def _column_name(stage, metric, bins) -> str:
    # The former formatting of pandas values: a missing stage or metric reads "nan".
    stage = "nan" if stage is None else stage
    metric = "nan" if metric is None else metric
    return f"{stage}_{metric}" if bins is None or bins != bins else f"{stage}_{metric}_{int(bins)}"


_SHARD_INDICES = [shards.SHARD_SCHEMA.names.index(c) for c in _COLUMNS]


def _read_shard(path: Path, provenance: list | None = None) -> dict[str, pa.Array]:
    # The whole file in one read (shards are small), checked against its seal, then
    # ParquetFile.reader with column indices (the shard schema's, checked after the read).
    # ``provenance``: the shard's recorded provenance (raw bytes, or None) is appended to it.
    data = Path(path).read_bytes()
    integrity.verify_bytes(path, data)  # DamagedFile if a byte changed since it was written
    try:
        f = pq.ParquetFile(pa.BufferReader(data), read_dictionary=_STRINGS)
    except KeyError:  # a shard written before a column was added (shards.OPTIONAL_COLUMNS)
        names = pq.read_schema(pa.BufferReader(data)).names
        f = pq.ParquetFile(pa.BufferReader(data), read_dictionary=[c for c in _STRINGS if c in names])
    with f:
        if provenance is not None:
            provenance.append((f.schema_arrow.metadata or {}).get(PROVENANCE_KEY))
        table = None
        if f.metadata.num_columns == len(shards.SHARD_SCHEMA):
            table = f.reader.read_all(column_indices=_SHARD_INDICES, use_threads=False)
        if table is None or table.column_names != _COLUMNS:
            names = f.schema_arrow.names
            table = f.reader.read_all(column_indices=[names.index(c) for c in _COLUMNS if c in names],
                                      use_threads=False)
    return _conform(table)


_CONFORMING: list[pa.Schema] = []  # a schema that _conform leaves as it is (the shards' own)


def _conform(table: pa.Table) -> dict[str, pa.Array]:
    """Every needed column as one array, with the shard schema's type (strings dictionary-encoded)."""
    if _CONFORMING and table.schema.equals(_CONFORMING[0]) and all(c.num_chunks == 1 for c in table.columns):
        return dict(zip(_COLUMNS, (c.chunk(0) for c in table.columns)))
    arrays = {}
    for name in _COLUMNS:
        want = _TYPES[name]
        if name not in table.column_names:
            col = pa.nulls(table.num_rows, want)
        else:
            col = table[name]
            plain = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
            if plain != want and not (pa.types.is_string(want) and pa.types.is_large_string(plain)):
                col = col.cast(want)
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if name in _STRINGS and not pa.types.is_dictionary(col.type):
            col = col.cast(pa.string()).dictionary_encode()
        arrays[name] = col
    if not _CONFORMING and table.column_names == _COLUMNS and all(
            arrays[n].type == table.schema.field(n).type for n in _COLUMNS):
        _CONFORMING.append(table.schema)
    return arrays


def _codes(array: pa.DictionaryArray) -> np.ndarray:
    """Dictionary indices as int64, -1 where missing."""
    idx = array.indices
    if idx.null_count:
        idx = idx.fill_null(-1)
    return idx.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _ints(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Integers as int64 and their validity (None: all valid)."""
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return array.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid
    return array.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), None


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class _Digester:
    """Turns shards into digests, keeping only the rows of a selected arch_index whose
    config_hash is the one ``expected`` records for it (``expected=None``: every row).
    Layouts are cached by content: thousands of shards share a handful."""

    def __init__(self, expected: Mapping[int, str] | None = None, selected: Iterable[int] | None = None):
        self.expected = expected
        self.selected = None if selected is None else set(selected)
        self.layouts: dict[tuple, _Layout] = {}

    def _keep(self, t: dict[str, pa.Array], arch: np.ndarray) -> np.ndarray | bool:
        """Rows whose config_hash is the one recorded for their arch_index, and selected."""
        if self.expected is None:
            return True
        hashes = t["config_hash"]
        dictionary = hashes.dictionary.to_pylist()
        codes = _codes(hashes)
        first = arch[0]
        if (arch == first).all():
            want = self.expected.get(int(first)) if (self.selected is None or int(first) in self.selected) else None
            if want is None or want not in dictionary:
                return False
            code = dictionary.index(want)
            return True if (codes == code).all() else codes == code
        keep = np.zeros(len(arch), bool)
        for a in np.unique(arch):
            want = self.expected.get(int(a)) if (self.selected is None or int(a) in self.selected) else None
            if want is not None and want in dictionary:
                keep |= (arch == a) & (codes == dictionary.index(want))
        return keep

    def digest(self, t: dict[str, pa.Array]) -> _Digest | None:
        if len(t["value"]) == 0:
            return None
        arch, arch_valid = _ints(t["arch_index"])
        seed, seed_valid = _ints(t["seed"])
        keep = self._keep(t, arch)
        if keep is False:
            return None
        mask = None if keep is True else keep
        for valid in (arch_valid, seed_valid):  # missing keys: dropped, as groupby drops them
            if valid is not None:
                mask = valid if mask is None else mask & valid
        key_codes = []
        for name in ("space", "hp", "dataset"):
            col = t[name]
            if col.null_count:
                mask = col.is_valid().to_numpy(zero_copy_only=False) if mask is None else \
                    mask & col.is_valid().to_numpy(zero_copy_only=False)
            key_codes.append(None if len(col.dictionary) == 1 and not col.null_count else _codes(col))
        if mask is not None and not mask.all():
            if not mask.any():
                return None
            keep = pa.array(mask)
            return self.digest_rows({name: col.filter(keep) for name, col in t.items()})  # recomputed from those
        return self._digest(t, arch, seed, key_codes)

    def digest_rows(self, t: dict[str, pa.Array]) -> _Digest | None:
        """A table already filtered (rows all kept and with their keys)."""
        arch, _ = _ints(t["arch_index"])
        seed, _ = _ints(t["seed"])
        codes = [None if len(t[c].dictionary) == 1 else _codes(t[c]) for c in ("space", "hp", "dataset")]
        return self._digest(t, arch, seed, codes)

    def _digest(self, t: dict[str, pa.Array], arch: np.ndarray, seed: np.ndarray, key_codes: list) -> _Digest:
        n = len(arch)
        # Groups: one per (space, hp, dataset, arch_index, seed), mostly one per seed.
        if all(c is None for c in key_codes) and (arch == arch[0]).all():
            if (seed == seed[0]).all():
                first_rows, group = np.zeros(1, np.int64), np.zeros(n, np.int64)
            else:
                _, first_rows, group = np.unique(seed, return_index=True, return_inverse=True)
        else:
            stacked = np.stack([np.zeros(n, np.int64) if c is None else c for c in key_codes] + [arch, seed], 1)
            _, first_rows, group = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        keys = [(t["space"][int(r)].as_py(), t["hp"][int(r)].as_py(), t["dataset"][int(r)].as_py(), int(arch[r]),
                 int(seed[r])) for r in first_rows]
        provenance = [self._provenance(t, int(r), group, g) for g, r in enumerate(first_rows)]
        layout = self._layout(t)
        values = t["value"].to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        n_names = len(layout.names)
        if len(first_rows) == 1:
            duplicates = n_names < n
        else:
            duplicates = np.unique(group * n_names + layout.pos).size < n
        return _Digest(keys, provenance, group, layout, values, bool(duplicates))

    @staticmethod
    def _provenance(t: dict[str, pa.Array], row: int, group: np.ndarray, g: int) -> list:
        out = []
        for name in PROVENANCE:
            value = t[name][row].as_py()
            if _missing(value):  # the first non-missing value of the group, if any
                for r in np.flatnonzero(group == g):
                    value = t[name][int(r)].as_py()
                    if not _missing(value):
                        break
            out.append(value)
        return out

    def _layout(self, t: dict[str, pa.Array]) -> _Layout:
        stage, metric, bins = t["stage"], t["metric"], t["bins"]
        stage_codes, metric_codes = _codes(stage), _codes(metric)
        bins_values = bins.to_numpy(zero_copy_only=False).astype(np.float64)  # missing: NaN
        key = (tuple(stage.dictionary.to_pylist()), tuple(metric.dictionary.to_pylist()), stage_codes.tobytes(),
               metric_codes.tobytes(), bins_values.tobytes())
        layout = self.layouts.get(key)
        if layout is None:
            stages, metrics = key[0] + (None,), key[1] + (None,)  # code -1: missing
            parts = [(stages[s], metrics[m], None if b != b else int(b))
                     for s, m, b in zip(stage_codes, metric_codes, bins_values)]
            names = [_column_name(*p) for p in parts]
            index: dict[str, int] = {}
            first_parts = []
            for name, p in zip(names, parts):
                if name not in index:
                    index[name] = len(index)
                    first_parts.append(p)
            layout = _Layout(tuple(index), tuple(first_parts), np.array([index[n] for n in names], np.int64))
            self.layouts[key] = layout
        return layout


# ---------------------------------------------------------------- digests -> wide table

@dataclass
class _Wide:
    """Digests merged in shard order: rows (one per key), columns (names in order of first
    appearance), and per shard its rows and values until :meth:`frame` scatters them."""

    rows: dict[tuple, int] = field(default_factory=dict)  # key -> row, in order of appearance
    provenance: list[list] = field(default_factory=list)
    columns: dict[str, int] = field(default_factory=dict)  # name -> column, in order of first appearance
    parts: list[tuple] = field(default_factory=list)  # (stage, metric, bins) per column
    mapped: dict[int, tuple[_Layout, np.ndarray]] = field(default_factory=dict)  # id(layout) -> per row, its column
    shards: list[tuple] = field(default_factory=list)  # (rows per group, group per row, id(layout), values)
    duplicates: bool = False  # some cell has more than one value

    def add(self, d: _Digest | None) -> None:
        if d is None:
            return
        rows = np.empty(len(d.keys), np.int64)
        for g, (key, prov) in enumerate(zip(d.keys, d.provenance)):
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = len(self.rows)
                self.provenance.append(list(prov))
            else:  # the same network and seed in an earlier shard: its first non-missing values stay
                self.duplicates = True
                have = self.provenance[row]
                for i, v in enumerate(prov):
                    if _missing(have[i]) and not _missing(v):
                        have[i] = v
            rows[g] = row
        if id(d.layout) not in self.mapped:
            for name, part in zip(d.layout.names, d.layout.parts):
                if name not in self.columns:
                    self.columns[name] = len(self.columns)
                    self.parts.append(part)
            cols = np.array([self.columns[n] for n in d.layout.names], np.int64)
            self.mapped[id(d.layout)] = (d.layout, cols[d.layout.pos])  # the layout stays alive with its id
        self.shards.append((rows, None if len(rows) == 1 else d.group, id(d.layout), d.values))
        self.duplicates |= d.duplicates

    def matrix(self, position: np.ndarray) -> np.ndarray:
        """(rows, columns) float64, row ``r`` at ``position[r]``, column-major (each column
        contiguous); NaN where no value. Empties ``shards``."""
        out = np.full((len(self.rows), len(self.columns)), np.nan, order="F")
        if not self.duplicates:
            for rows, group, shape, values in self.shards:
                cols = self.mapped[shape][1]
                out[position[rows[0]] if group is None else position[rows][group], cols] = values
            self.shards.clear()
            return out
        # Per cell the first non-missing value, as groupby().first().
        flat = np.concatenate([self.mapped[shape][1] * len(self.rows) +
                               (position[rows[0]] if group is None else position[rows][group])
                               for rows, group, shape, _ in self.shards])
        values = np.concatenate([values for *_, values in self.shards])
        self.shards.clear()
        present = ~np.isnan(values)
        cells, first = np.unique(flat[present], return_index=True)
        out.reshape(-1, order="F")[cells] = values[present][first]
        return out


def _assemble(wide: _Wide) -> tuple[pd.DataFrame, dict]:
    """The wide frame (keys, provenance, values; sorted by key) and its metadata."""
    keys = list(wide.rows)
    order = sorted(range(len(keys)), key=lambda i: tuple(_sortable(v) for v in keys[i]))
    position = np.empty(len(keys), np.int64)
    position[order] = np.arange(len(keys))
    matrix = wide.matrix(position)
    keys = [keys[i] for i in order]
    provenance = [wide.provenance[i] for i in order]
    frame = {name: [k[j] for k in keys] for j, name in enumerate(KEYS)}
    frame.update({name: [p[j] for p in provenance] for j, name in enumerate(PROVENANCE)})
    head = pd.DataFrame({name: _series(name, values) for name, values in frame.items()})
    values = pd.DataFrame(matrix, columns=pd.Index(list(wide.columns), dtype=object), copy=False)
    out = pd.concat([head, values], axis=1)
    return out, _metadata(wide, matrix)


def _sortable(value):
    return (1, "") if value is None else (0, value)


def _series(name: str, values: list) -> pd.Series:
    kind = _TYPES[name]
    if pa.types.is_integer(kind):
        if any(v is None for v in values):
            return pd.Series([np.nan if v is None else v for v in values], dtype="float64")
        return pd.Series(values, dtype=kind.to_pandas_dtype())
    if pa.types.is_floating(kind):
        return pd.Series([np.nan if v is None else v for v in values], dtype="float64")
    return pa.array(values, type=pa.string()).to_pandas()


def _metadata(wide: _Wide, matrix: np.ndarray) -> dict:
    """Stages in order of appearance; per stage the fitted parameters (``fit_*``) that hold one
    value in every row that has one (failed fits, NaN, aside); ``unstable``: per column, the
    measured networks whose value signals an unstable estimator (:mod:`calibench.metrics.registry`)."""
    stages: list = []
    constants: dict[str, dict] = {}
    unstable: dict[str, int] = {}
    for j, (stage, metric, bins) in enumerate(wide.parts):
        if stage not in stages:
            stages.append(stage)
        name = f"{stage}_{metric}" if bins is None else f"{stage}_{metric}_{bins}"
        if isinstance(metric, str) and len(matrix) and registry.unstable(name, matrix[:, j]):
            unstable[name] = len(registry.unstable(name, matrix[:, j]))  # kept as they are, counted
        if isinstance(metric, str) and metric.startswith("fit_") and len(matrix):
            column = matrix[:, j]
            column = column[~np.isnan(column)]
            if len(column) and np.isfinite(column[0]) and (column == column[0]).all():
                name = metric if bins is None else f"{metric}_{bins}"
                constants.setdefault(stage, {})[name] = float(column[0])
    return {"stages": stages, "constants": constants, **({"unstable": unstable} if unstable else {})}


def _finish(wide: pd.DataFrame, space: str, doc: Mapping | None, measured: set) -> pd.DataFrame:
    """Rows expanded to every member of a measured class (a population document whose
    ``representatives`` map members to others: NATS-Bench TSS's isomorphism classes);
    measured_by; the NATS-Bench index (``nats_index``) where the document has one; column order;
    sorting."""
    if wide.empty:
        return wide
    reps = (doc or {}).get("representatives") or []
    if any(r != i for i, r in enumerate(reps)):
        members: dict[int, list[int]] = {}
        for i, r in enumerate(reps):
            if r in measured:
                members.setdefault(r, []).append(i)
        by = wide["arch_index"].to_numpy()
        take = [(row, i) for row, rep in enumerate(by) for i in members.get(int(rep), ())]
        rows = np.array([row for row, _ in take], np.int64)
        index = np.array([i for _, i in take], np.int64)
        wide = wide.take(rows).reset_index(drop=True)
        wide.insert(3, "measured_by", wide.pop("arch_index"))
        wide.insert(3, "arch_index", index)  # int64, as the former merge with range() gave
        wide["arch_str"] = pd.Series([doc["arch_strs"][i] for i in index], dtype=wide["arch_str"].dtype)
    else:
        wide.insert(4, "measured_by", wide["arch_index"])
    wide = wide[FIRST + [c for c in wide.columns if c not in FIRST]]
    extra = 0
    # A NATS-Bench population: each member's NATS-Bench index (null where unknown), after the keys.
    nats = (doc or {}).get("nats_index")
    if nats is not None:
        wide.insert(len(FIRST), NATS_INDEX, pd.array(nats, dtype="Int64").take(wide["arch_index"].to_numpy()))
        extra = 1
    # A population beyond NATS-Bench: its models.csv metadata, by member index, after the keys.
    for j, (name, values) in enumerate(((doc or {}).get("metadata") or {}).items()):
        column = pd.Series(values).take(wide["arch_index"].to_numpy())
        wide.insert(len(FIRST) + extra + j, name, column.to_numpy())
    order = np.lexsort((wide["seed"].to_numpy(), wide["arch_index"].to_numpy()))  # stable, as sort_values
    if (order != np.arange(len(order))).any():
        wide = wide.take(order)
    return wide.reset_index(drop=True)


def wide_table(long: pd.DataFrame) -> pd.DataFrame:
    """Long shards -> one row per (arch_index, seed): ``{stage}_{metric}[_{bins}]`` columns."""
    if long.empty:
        return pd.DataFrame()
    table = pa.Table.from_pandas(long, preserve_index=False)
    merged = _Wide()
    merged.add(_Digester().digest(_conform(table)))
    if not merged.rows:
        return pd.DataFrame()
    return _assemble(merged)[0]


def _ordered_map(fn, items: list, threads: int, window: int = 256):
    """``map(fn, items)`` on a thread pool (parquet decoding releases the GIL), in order, at most
    ``window`` results ahead of the consumer."""
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _read_threads() -> int:
    """Two per core this process may run on (a SLURM job's cpuset, not the node), 2 to 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(8, 2 * cores))


def build_table(space: str, hp: str, dataset: str, results: str | Path, out: str | Path,
                manifests: list[str | Path], failures_out: str | Path | None = None) -> pd.DataFrame:
    """The wide result table of one (space, hp, dataset) from its measurement manifests: each
    network's row comes from the shard with the key its manifest recorded, so a stale
    shard never enters; reports how many networks are missing."""
    results = Path(results)
    doc = integrity.read_json(layout.population_path(results, space))
    expected: dict[int, str] = {}
    failed = []
    settings: Counter = Counter()  # the measurement settings of each chunk (manifests before them: none)
    for m in manifests:
        summary = integrity.read_json(m)
        expected.update({int(i): k for i, k in summary["shards"].items()})
        failed += summary["failures"]
        if summary.get("settings") is not None:
            settings[json.dumps(summary["settings"], sort_keys=True)] += 1
    files = [p for p in (layout.shard_path(results, space, hp, dataset, i) for i in sorted(expected)) if p.is_file()]
    digester = _Digester(expected, doc["selected"])
    merged = _Wide()
    unreadable: dict[int, str] = {}

    def read(path):
        found: list = []
        try:
            return digester.digest(_read_shard(path, found)), found[0]
        except Exception as exc:  # a damaged shard (set aside: the repair check sees it gone) is left out
            index = layout.member_index(path)
            unreadable[index] = (f"damaged since it was measured ({exc.cause}), set aside as "
                                 f"{integrity.set_aside(path).name}" if isinstance(exc, integrity.DamagedFile)
                                 else f"unreadable since it was measured ({type(exc).__name__}: {exc})")
            log.warning("%s: shard left out (%s)", path, unreadable[index])
            return None, None

    by_provenance: Counter = Counter()  # raw provenance -> rows of the table from shards with it
    for d, raw in _ordered_map(read, files, _read_threads()):
        merged.add(d)
        if d is not None:
            by_provenance[raw] += len(d.keys)
    if merged.rows:
        wide, meta = _assemble(merged)
    else:
        wide, meta = pd.DataFrame(), {"stages": [], "constants": {}}
    del merged
    software: Counter = Counter()
    configs: Counter = Counter()
    for raw, n in by_provenance.items():
        soft, config = split(of_shard({PROVENANCE_KEY: raw} if raw else None))
        software[json.dumps(soft, sort_keys=True)] += n
        configs[json.dumps(config, sort_keys=True)] += n
    meta["provenance"] = [{"provenance": json.loads(p), "rows": n} for p, n in software.most_common()]
    meta["configs"] = [{"config": json.loads(c), "rows": n} for c, n in configs.most_common()]
    if len(settings) == 1:  # what `calibench status` and `compare` name, key by key
        meta["settings"] = json.loads(next(iter(settings)))
    elif settings:
        meta["settings_by_chunks"] = [{"settings": json.loads(c), "chunks": n} for c, n in settings.most_common()]
    if not wide.empty and "source_mtime" in wide:
        mtimes = wide["source_mtime"].dropna()
        meta["sources"] = {"rows": int(len(mtimes)), "missing": int(len(wide) - len(mtimes)),
                           "first_mtime": mtimes.min() if len(mtimes) else None,
                           "last_mtime": mtimes.max() if len(mtimes) else None}
    meta["built_by"] = {k: v for k, v in environment().items() if k in ("calibench_version", "git_commit")}
    if len(software) > 1:
        log.warning("%s: rows measured with %d different provenances: %s (calibench provenance %s)", out,
                    len(software), "; ".join(f"{g['rows']} rows {g['provenance'].get('calibench_version')} "
                                             f"{g['provenance'].get('git_commit') or ''}".rstrip()
                                             for g in meta["provenance"]), out)
    measured = set(wide["arch_index"].tolist()) if not wide.empty else set()
    missing = sorted(set(doc["selected"]) - measured)
    explained = {f["arch_index"] for f in failed}
    for index in sorted(set(missing) - explained):  # no shard and no failure: deleted or damaged since
        path = layout.shard_path(results, space, hp, dataset, index)
        why = (unreadable[index] if index in unreadable else "deleted since it was measured" if not path.exists()
               else "not the shard its chunk recorded")
        failed.append({"space": space, "hp": hp, "dataset": dataset, "arch_index": int(index), "seed": None,
                       "stage": "table", "source": str(path),
                       "reason": f"shard {why}; the next run measures it again"})
    if missing:
        log.warning("%s hp=%s %s: %d of %d selected architectures have no shard (failed: %d)",
                    space, hp, dataset, len(missing), len(doc["selected"]), len({f['arch_index'] for f in failed}))
    meta["coverage"] = {"selected": len(doc["selected"]), "measured": len(measured), "missing": missing}
    wide = _finish(wide, space, doc, measured)
    atomic_write(out, lambda f: _write_parquet(wide, f, meta))
    fail_out = failures_out or layout.failures_path(results, layout.target_name(space, hp), dataset)
    shards.write_atomic_parquet(shards.failures_table(failed), fail_out)  # creates the directory
    log.info("%s: %d rows (%d measured networks, %d missing, %d failed)", out, len(wide), len(measured),
             len(missing), len(failed))
    return wide


def _write_parquet(wide: pd.DataFrame, f, meta: Mapping) -> None:
    """As ``DataFrame.to_parquet(index=False)``, plus the table's metadata under ``METADATA_KEY``."""
    table = pa.Table.from_pandas(wide, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), METADATA_KEY: json.dumps(meta).encode()})
    integrity.write_parquet_to(f, table, compression="snappy")


def check_result_table(path: str | Path) -> None:
    """ValueError naming ``path`` unless it is a result table whose bytes pass their check
    (:func:`calibench.integrity.verify`: a damaged table is refused, not read): a shard, or a
    file without metric columns (a failures file), is named as not one. A table without
    columns (a build that measured no network) is one, and so is one without ``measured_by``."""
    from calibench.vocabulary import not_a_result_table

    if Path(path).is_dir():
        raise ValueError(f"{path}: a directory, not a result table (a run's tables: --results)")
    integrity.verify([path])
    with integrity.naming(path):
        names = pq.read_schema(path).names
    why = not_a_result_table(names) if names else None
    if why is None and names and not {"space", "hp", "dataset", "arch_index"} <= set(names):
        why = "no space, hp, dataset and arch_index columns"
    if why is not None and why != "no measured_by column":
        hint = ": a failures file?" if why.startswith("no pre_") else ""
        raise ValueError(f"{path}: not a result table ({why}{hint})")


def table_key(path: str | Path) -> tuple[str, str, str] | None:
    """(space, hp, dataset) of a result table, from its first row; None if it has no rows or no
    such columns (a table of a build that measured no network)."""
    with integrity.naming(path), pq.ParquetFile(path) as table:
        if table.metadata.num_rows == 0 or not {"space", "hp", "dataset"} <= set(table.schema_arrow.names):
            return None
        first = table.read_row_group(0, columns=["space", "hp", "dataset"]).slice(0, 1).to_pylist()[0]
    return str(first["space"]), str(first["hp"]), str(first["dataset"])


def table_metadata(path: str | Path) -> dict:
    """The metadata a wide table was written with: ``stages``, ``constants`` ({stage: {fit_*: value}})."""
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[METADATA_KEY]) if METADATA_KEY in meta else {}
