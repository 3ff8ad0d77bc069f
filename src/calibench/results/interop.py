"""The published calibration dataset of Tao et al. (ICLR 2024, "A Benchmark Study on
Calibration") as an exchange format: ``calibench export --format tao2024`` and
``calibench import --format tao2024 DIR``.

The published layout
--------------------
One CSV file per (dataset, search space): ``cifar10_tss.csv``, ``cifar10_sss.csv``,
``cifar100_tss.csv``, ``cifar100_sss.csv``, ``ImageNet_tss.csv``, ``ImageNet_sss.csv``
(ImageNet16-120), one row per architecture, the benchmark's default schedule (TSS hp 200,
SSS hp 90), first seed. Columns, as the dataset's README lists them: ``config`` (the
architecture index), ``acc``, ``correct_confidence``, ``incorrect_confidence``, ``arch``
(the architecture string), then ``pre_ECE_5``, ``post_ECE_5``, ``pre_ECE_10``,
``post_ECE_10``, ... (pre and post temperature scaling, per bin count), and the other
families (``ECE_em``, ``cwCE``, ``cwCE_em``, ...) in the same pattern. Values are
fractions (``acc`` too). :data:`COLUMNS` records, per column, how sure that name is and
how its definition differs from ours (docs/metrics.md); :func:`definitions_markdown`
renders it for the README.

Export writes our columns under their names (a differing definition is documented, not
hidden; the Brier score alone is converted, being theirs times 1/K exactly); a column of
theirs that a table does not hold is left out and logged. Two extensions keep a table that
is not the published setting lossless: a file name suffix ``_hp{hp}`` for a schedule other
than the default, and a ``seed`` column when the seed is not 777.

Import reads such files into result tables (``results/tables/{space}_{hp}_{dataset}.parquet``)
with our column names and parquet metadata (``calibench.results.tables.METADATA_KEY``, with
``"source": "tao2024"``), so the analysis, report, NAS and queries run on the published
numbers without any archive. Column names are matched case-insensitively; ``acc`` given in
percent is converted. A malformed file raises ``ValueError`` naming the file and the
column or CSV line. Needs no torch.

``config`` is the NATS-Bench index: export writes a table's ``nats_index`` (its
``arch_index`` is the archive's own; the mini benchmark's are 0, 1, ...; a table without
``nats_index`` gives ``arch_index``) and refuses rows whose NATS-Bench index is unknown;
import sets both ``arch_index`` and ``nats_index`` to it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from calibench import __version__, integrity, layout
from calibench.atomic import atomic_write
from calibench.metrics import registry
from calibench.results import archstr
from calibench.results.scaled_text import divided_text, multiplied_values
from calibench.results.interop_columns import (  # noqa: F401 (the column table, importable from here too)
    ASSUMED, BINNED, CODE, COLUMNS, EXTENSION, ISSUE, OUR_BINNED, PER_ROW, README, REQUIRED, SCALARS,
    UNBINNED, Column, brier_columns, column_key, definition_of, definitions_markdown, our_name)
from calibench.results.tables import (FIRST, METADATA_KEY, NATS_INDEX, PROVENANCE, check_result_table,
                                      table_key as first_row_key, table_metadata)
from calibench.vocabulary import NATS_SPACE_SIZES, not_a_result_table

log = logging.getLogger(__name__)

FORMAT = "tao2024"
DEFAULT_HP = {"tss": "200", "sss": "90"}  # the schedules the published files hold
DEFAULT_SEED = 777  # the first seed of those schedules, the one the published files evaluated
N_ARCHS = NATS_SPACE_SIZES
CLASSES = {"cifar10": 10, "cifar10-valid": 10, "cifar100": 100, "ImageNet16-120": 120}
_FILE_DATASET = {"ImageNet16-120": "ImageNet"}  # our dataset name -> the file name's, where they differ
_DATASET_OF_FILE = {"cifar10": "cifar10", "cifar10-valid": "cifar10-valid", "cifar100": "cifar100",
                    "imagenet": "ImageNet16-120", "imagenet16-120": "ImageNet16-120"}  # lower-case file prefix
_FILE_NAME = re.compile(r"^(?P<dataset>.+?)_(?P<space>tss|sss)(?:_hp(?P<hp>[0-9]+))?\.csv$", re.IGNORECASE)
# The stages the published files hold (the softmax, temperature scaling), the only ones of STAGES they carry.
PUBLISHED_STAGES = ("pre", "post")

# Our metric orders (metrics/suite.py, not imported here: it needs torch).
_BINNED_ORDER = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
_UNBINNED_ORDER = ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "nll", "brier", "accuracy",
                   "mean_conf_correct", "mean_conf_incorrect")


# ---------------------------------------------------------------- export

def export_tao2024(tables: str | Path | Iterable[str | Path], out_dir: str | Path,
                   expand_isomorphs: bool = False) -> list[Path]:
    """Write every result table in the published layout, one CSV per table, under ``out_dir``.

    ``tables``: result table paths, or a directory of them (``results/tables`` or a results
    directory). Each measurement once; ``expand_isomorphs``: TSS isomorph copies too, marked
    (:func:`export_frame`). Returns the files written (a table without rows or without columns,
    one a build that measured no network leaves, writes none, with a warning; so does a table of
    a population beyond NATS-Bench, which the layout cannot hold).
    """
    paths = _table_paths(tables)
    out_dir = Path(out_dir)
    planned: dict[Path, Path] = {}
    for p in paths:
        check_result_table(p)
        key = table_key(p)
        if key[0] not in DEFAULT_HP:
            log.warning("%s: a population beyond NATS-Bench (space %r); the %s layout holds NATS-Bench's spaces "
                        "only, not exported", p, key[0], FORMAT)
            continue
        name = _export_name(*key)
        if out_dir / name in planned:
            raise ValueError(f"{p} and {planned[out_dir / name]} would both be written to {out_dir / name}")
        planned[out_dir / name] = p
    written = []
    for target, p in planned.items():
        with integrity.naming(p):
            table = pd.read_parquet(p)
        if table.columns.empty:
            log.warning("%s: a table without columns (no network measured), nothing to export", p)
            continue
        frame = export_frame(table, source=str(p), expand_isomorphs=expand_isomorphs)
        if frame is None:
            continue
        atomic_write(target, lambda f, fr=frame: f.write(fr.to_csv(index=False, lineterminator="\n").encode()))
        log.info("%s: %d rows, %d columns -> %s", p, len(frame), frame.shape[1], target)
        written.append(target)
    return written


def _table_paths(tables) -> list[Path]:
    if isinstance(tables, (str, Path)):
        root = Path(tables)
        if root.is_dir():
            found = sorted(root.glob("*.parquet")) or layout.result_tables(root)
            if not found:
                raise ValueError(f"no result tables (*.parquet) in {root} or {layout.tables_dir(root)}")
            return found
        return [root]
    return [Path(t) for t in tables]


def is_import(meta: Mapping) -> bool:
    """Whether a result table (``meta``: its :func:`calibench.results.tables.table_metadata`)
    was imported from the published layout by :func:`import_tao2024`, not built by a job."""
    return meta.get("source") == FORMAT


def table_key(path: Path) -> tuple[str, str, str]:
    """(space, hp, dataset) of a result table, from its first row or else its file name."""
    parts = first_row_key(path) or path.stem.split("_", 2)
    if len(parts) != 3:
        raise ValueError(f"{path}: an empty table whose name is not {{space}}_{{hp}}_{{dataset}}.parquet")
    return parts[0], parts[1], parts[2]


def _export_name(space: str, hp: str, dataset: str) -> str:
    suffix = "" if DEFAULT_HP.get(space) == hp else f"_hp{hp}"
    return f"{_FILE_DATASET.get(dataset, dataset)}_{space}{suffix}.csv"


def export_frame(table: pd.DataFrame, source: str = "table", expand_isomorphs: bool = False) -> pd.DataFrame | None:
    """One result table as a DataFrame in the published layout (None if it has no rows).

    One row per measured architecture: a TSS isomorph copy (``measured_by`` another row)
    repeats its representative's values and is left out, unless ``expand_isomorphs``: then
    every row is written with the extension column ``measured_by`` (the config of the row
    whose values it carries; its own config for a measured row). Of several seeds, the
    lowest (the published files hold the first seed; the others are dropped with a
    warning). Logs the published columns left out (metric not in the table) and our columns
    that have no place in the layout.
    """
    why = not_a_result_table(table.columns)
    if why:
        raise ValueError(f"{source}: {why}, not a result table" + (" (a failures file, an analysis output?)"
                                                                    if why != "a shard" else ""))
    if table.empty:
        log.warning("%s: no rows, nothing to export", source)
        return None
    copies = table["measured_by"] != table["arch_index"]
    if copies.any() and not expand_isomorphs:
        log.info("%s: %d isomorph copies left out (each repeats a measured row; --expand-isomorphs writes them)",
                 source, int(copies.sum()))
        table = table[~copies]
    keys = {}
    for key in ("space", "hp", "dataset"):
        values = table[key].dropna().unique()
        if len(values) != 1:
            raise ValueError(f"{source}: column {key!r} must hold one value, found {list(values)}")
        keys[key] = str(values[0])
    dataset = keys["dataset"]
    first = table["seed"] == table.groupby("arch_index")["seed"].transform("min")
    if not first.all():
        log.warning("%s: %d rows of seeds other than each network's first left out (the layout holds one seed)",
                    source, int((~first).sum()))
    # config is the NATS-Bench index: the table's nats_index (its arch_index is the archive's own,
    # the mini benchmark's 0, 1, ...); a table without that column (imported, built before it) its arch_index
    index = NATS_INDEX if NATS_INDEX in table.columns else "arch_index"
    unknown = table[index].isna()
    if unknown.any():
        raise ValueError(f"{source}: {int(unknown.sum())} of {len(table)} rows have no NATS-Bench index ({index} null), "
                         "which the layout's config column holds")
    table = table[first].sort_values(index, kind="stable").reset_index(drop=True)
    out: dict[str, pd.Series] = {}
    omitted: list[str] = []
    used: set[str] = {"arch_index", NATS_INDEX}
    for name in PER_ROW:
        ours = index if name == "config" else SCALARS[name].ours
        if ours in table.columns:
            out[name] = table[ours].astype("int64") if name == "config" else table[ours]
            used.add(ours)
        else:
            omitted.append(name)
    bins = sorted({int(m.group(3)) for c in table.columns if (m := OUR_BINNED.match(c))})
    for col in BINNED.values():
        for b in bins:
            for stage in PUBLISHED_STAGES:
                ours = col.ours.format(stage=stage, B=b)
                theirs = col.theirs.format(stage=stage, B=b)
                if ours in table.columns:
                    out[theirs] = table[ours]
                    used.add(ours)
                else:
                    omitted.append(theirs)
    for metric, col in UNBINNED.items():
        for stage in PUBLISHED_STAGES:
            ours, theirs = col.ours.format(stage=stage), col.theirs.format(stage=stage)
            if ours not in table.columns:
                omitted.append(theirs)
                continue
            values = table[ours]
            if metric == "brier":
                if dataset not in CLASSES:
                    omitted.append(theirs)
                    log.warning("%s: dataset %r has no known class count: %s left out", source, dataset, theirs)
                    continue
                values = divided_text(values, CLASSES[dataset])  # text that import multiplies back exactly
            out[theirs] = values
            used.add(ours)
    for name in ("auc_cifar10c", "auc_svhn"):
        ours = SCALARS[name].ours
        if ours in table.columns:
            out[name] = table[ours]
            used.add(ours)
        elif (table["dataset"] == "cifar10").any():  # the OoD sets are CIFAR-10's only: elsewhere none is missing
            omitted.append(name)
    seeds = table["seed"]
    if (seeds != DEFAULT_SEED).any():  # extension: the published files are all seed 777
        out["seed"] = seeds.astype("int64")
    if expand_isomorphs and copies.any():  # extension: which rows are copies of which
        config_of = dict(zip(table["arch_index"].astype("int64"), table[index].astype("int64")))
        out["measured_by"] = table["measured_by"].astype("int64").map(config_of).astype("int64")
    used.update({"space", "hp", "dataset", "seed", "measured_by"})  # file name, extension, derived on import
    missing = [c for c in ("config", "acc", "arch") if c not in out]
    if missing:
        raise ValueError(f"{source}: cannot export without {missing}")
    if omitted:
        log.warning("%s: published columns left out (not in this table): %s", source, ", ".join(omitted))
    left = [c for c in table.columns if c not in used]
    if left:
        log.info("%s: %d columns with no place in the tao2024 layout left out (e.g. %s; export --verbose names them all)",
                 source, len(left), ", ".join(left[:3]))
        log.debug("%s: columns with no place in the tao2024 layout: %s", source, ", ".join(left))
    return pd.DataFrame(out)


# ---------------------------------------------------------------- import

def import_tao2024(src: str | Path | Iterable[str | Path], results_dir: str | Path, *,
                   overwrite: bool = False) -> list[Path]:
    """Read files in the published layout into result tables under ``results_dir/tables``.

    ``src``: a directory (every ``{dataset}_{space}[_hp{hp}].csv`` in it; other files are
    skipped with a warning), one file, or a list of files. Every file is read and checked
    before any table is written. A table of the same (space, hp, dataset) that was not
    itself imported from tao2024 (a measured one) is not replaced unless ``overwrite``; a
    workflow's results directory (one with ``population/`` or ``chunks/``) is refused.
    Returns the tables written."""
    results_dir = Path(results_dir)
    if results_dir.exists() and not results_dir.is_dir():
        raise ValueError(f"--results {results_dir}: not a directory")
    owned = [d for d in (layout.population_path(results_dir, "x").parent, layout.chunks_dir(results_dir)) if d.is_dir()]
    if owned:
        raise ValueError(f"{results_dir} is a workflow's results directory (it holds {owned[0]}): the workflow owns "
                         "its tables; import into a results directory of its own (e.g. --results published)")
    files = _source_files(src)
    planned: dict[Path, tuple[Path, tuple[str, str, str]]] = {}
    for f in files:
        key = parse_file_name(f)
        target = layout.table_path(results_dir, layout.target_name(key[0], key[1]), key[2])
        if target in planned:
            raise ValueError(f"{f} and {planned[target][0]} are both (space, hp, dataset) = {key}")
        planned[target] = (f, key)
    for target, (f, _) in planned.items():
        if target.exists() and not overwrite and not is_import(table_metadata(target)):
            raise ValueError(f"{f}: {target} exists and holds measured results, not a {FORMAT} import "
                             f"(--overwrite replaces it)")
    converted = [(target, *read_tao2024(f, *key)) for target, (f, key) in planned.items()]
    written = []
    for target, frame, meta in converted:
        if target.exists():
            before = table_metadata(target)
            log.warning("%s: replaces %s (%s)", meta["source_file"], target,
                        f"the import of {before.get('source_file')}" if is_import(before)
                        else "measured results, --overwrite")
        atomic_write(target, lambda out, fr=frame, m=meta: _write_parquet(fr, out, m))
        log.info("%s -> %s: %d rows", meta["source_file"], target, len(frame))
        written.append(target)
    return written


def _source_files(src) -> list[Path]:
    if isinstance(src, (str, Path)):
        root = Path(src)
        if root.is_dir():
            files = []
            for p in sorted(root.iterdir()):
                if p.is_file() and p.suffix.lower() == ".csv":
                    if _FILE_NAME.match(p.name) and p.name.split("_")[0].lower() in _DATASET_OF_FILE:
                        files.append(p)
                    else:
                        log.warning("%s: not a %s file name ({dataset}_{space}[_hp{hp}].csv), skipped", p, FORMAT)
            if not files:
                raise ValueError(f"{root}: no {FORMAT} files ({{dataset}}_{{space}}.csv, e.g. cifar10_tss.csv)")
            return files
        if not root.is_file():
            raise ValueError(f"{root}: no such file or directory")
        return [root]
    return [Path(s) for s in src]


def parse_file_name(path: str | Path) -> tuple[str, str, str]:
    """(space, hp, dataset) of a tao2024 file name, e.g. ``ImageNet_sss.csv`` ->
    ("sss", "90", "ImageNet16-120"); ``cifar100_tss_hp12.csv`` -> ("tss", "12", "cifar100")."""
    name = Path(path).name
    m = _FILE_NAME.match(name)
    dataset = _DATASET_OF_FILE.get(m.group("dataset").lower()) if m else None
    if dataset is None:
        raise ValueError(f"{path}: not a {FORMAT} file name: expected {{dataset}}_{{space}}[_hp{{hp}}].csv with "
                         f"dataset one of cifar10, cifar10-valid, cifar100, ImageNet and space tss or sss")
    space = m.group("space").lower()
    return space, m.group("hp") or DEFAULT_HP[space], dataset


def _whole_rows(path: Path, data: bytes) -> None:
    """ValueError naming the first CSV line with fewer fields than the header (a file cut short:
    pandas would read the missing values as empty). Blank lines are skipped, as pandas does; a
    header's trailing empty names (a trailing comma) need no field."""
    import csv

    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""))
    try:
        header = next(reader, [])
        while header and not header[-1].strip():
            header = header[:-1]
        for row in reader:
            if any(field.strip() for field in row) and len(row) < len(header):
                raise ValueError(f"{path}: line {reader.line_num} has {len(row)} fields, the header {len(header)}: "
                                 "a file cut short?")
    except csv.Error as exc:
        raise ValueError(f"{path}: not a readable CSV file: line {reader.line_num}: {exc}") from None


def read_tao2024(path: str | Path, space: str, hp: str, dataset: str) -> tuple[pd.DataFrame, dict]:
    """One file in the published layout as a result table (our columns, one row per network)
    and its metadata. ``ValueError`` naming the file and the column or CSV line on a
    malformed file."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = _case_variants("arch") + brier_columns(pd.read_csv(io.BytesIO(data), nrows=0).columns)
        raw = pd.read_csv(io.BytesIO(data), dtype={c: str for c in text}, **EXACT_CSV)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV file: {exc}") from None
    _whole_rows(path, data)
    raw.columns = [str(c).strip() for c in raw.columns]
    dropped = [c for c in raw.columns if c.startswith("Unnamed:")]  # a written index
    raw = raw.drop(columns=dropped)
    lower: dict[str, str] = {}
    for c in raw.columns:
        key = column_key(c)
        if key in lower:
            raise ValueError(f"{path}: columns {lower[key]!r} and {c!r} are the same column (names are matched "
                             f"without case)")
        lower[key] = c
    missing = [r for r in REQUIRED if r.lower() not in lower]
    if missing:
        raise ValueError(f"{path}: missing required column(s) {', '.join(map(repr, missing))} "
                         f"(has {', '.join(raw.columns[:12])}{', ...' if raw.shape[1] > 12 else ''})")
    n = len(raw)
    meta_notes: dict[str, str] = {}

    def line(i: int) -> int:  # CSV line of data row i: the header is line 1
        return int(i) + 2

    def numeric(name: str) -> np.ndarray:
        col = raw[lower[name]]
        values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(np.isnan(values) & col.notna().to_numpy())
        if len(bad):
            raise ValueError(f"{path}: column {lower[name]!r}, line {line(bad[0])}: not a number: "
                             f"{col.iloc[bad[0]]!r}")
        if col.dtype.kind == "f":
            values = col.to_numpy(dtype=float)  # the parser's own values (exact round trip)
        return values

    # config -> arch_index
    config = numeric("config")
    bad = np.flatnonzero(~np.isfinite(config) | (config != np.round(config)) | (config < 0)
                         | (config >= N_ARCHS[space]))
    if len(bad):
        raise ValueError(f"{path}: column {lower['config']!r}, line {line(bad[0])}: "
                         f"{raw[lower['config']].iloc[bad[0]]} is not an architecture index of {space} "
                         f"(0..{N_ARCHS[space] - 1})")
    arch_index = config.astype(np.int64)
    _no_duplicates(path, lower["config"], arch_index, line)
    # arch -> arch_str
    arch = raw[lower["arch"]]
    arch_strs = []
    for i, a in enumerate(arch):
        if not isinstance(a, str) or not a.strip():
            raise ValueError(f"{path}: column {lower['arch']!r}, line {line(i)}: no architecture string")
        a = a.strip()
        try:
            archstr.check(space, a)
        except ValueError as exc:
            raise ValueError(f"{path}: column {lower['arch']!r}, line {line(i)}: {exc}") from None
        arch_strs.append(a)
    _no_duplicates(path, lower["arch"], np.array(arch_strs, dtype=object), line)

    out: dict[str, np.ndarray | list] = {}
    for name in ("acc", "correct_confidence", "incorrect_confidence"):
        if name not in lower:
            continue
        values = numeric(name)
        finite = values[np.isfinite(values)]
        over = np.isfinite(values) & (values > 1)
        if len(finite) and over.any() and not over[np.isfinite(values)].all() and finite.min() >= 0:
            # mixed scales: name the value that is not on the scale of most of the column
            fractions = (~over & np.isfinite(values)).sum() >= over.sum()
            odd = np.flatnonzero(over if fractions else (~over & np.isfinite(values)))[0]
            raise ValueError(f"{path}: column {lower[name]!r}, line {line(odd)}: {_shown(raw[lower[name]].iloc[odd])} "
                             f"is {'not a fraction in [0, 1] among fractions' if fractions else 'a fraction among percent values'}"
                             "; percent is read only when the whole column is in percent")
        if len(finite) and finite.min() > 1 and finite.max() <= 100:
            values = values / 100
            meta_notes[SCALARS[name].ours] = f"{lower[name]} in percent, divided by 100"
            log.warning("%s: column %r is in percent: divided by 100", path, lower[name])
        wrong = np.flatnonzero((values < 0) | (values > 1) | np.isinf(values) | (np.isnan(values) & (name == "acc")))
        if len(wrong):
            raise ValueError(f"{path}: column {lower[name]!r}, line {line(wrong[0])}: "
                             f"{_shown(raw[lower[name]].iloc[wrong[0]])} is not a fraction in [0, 1] (or percent)")
        out[SCALARS[name].ours] = values
    metrics: dict[str, np.ndarray] = {}
    unstable: dict[str, int] = {}  # values that signal an unstable estimator (KDE-ECE above 1), kept as they are
    dropped_unknown = []
    for key, column in lower.items():
        if key in PER_ROW or key in ("seed", "measured_by"):
            continue
        ours, family = our_name(key)
        if ours is None:
            dropped_unknown.append(column)
            continue
        values = numeric(key)
        if family == "brier":  # theirs: divided by K; the text times K in decimal, one rounding (exact round trip)
            values = multiplied_values(raw[column].tolist(), CLASSES[dataset])
        wrong = registry.outside_range(ours, values)  # any value calibench itself writes passes
        if wrong:
            meaning, k = registry.column(ours).meaning, (CLASSES[dataset] if family == "brier" else 1)
            high = "∞" if meaning.high is None else _shown(meaning.high / k)  # in the file's scale
            raise ValueError(f"{path}: column {column!r}, line {line(wrong[0])}: {_shown(values[wrong[0]] / k)} is "
                             f"outside [{_shown(meaning.low / k)}, {high}]"
                             + (" (in percent?)" if meaning.high == 1.0 else ""))
        if registry.unstable(ours, values):
            unstable[ours] = len(registry.unstable(ours, values))
        metrics[ours] = values
    if dropped_unknown:
        log.warning("%s: columns with no calibench counterpart, not imported: %s", path, ", ".join(dropped_unknown))
    if "seed" in lower:
        seed = numeric("seed")
        bad = np.flatnonzero(~np.isfinite(seed) | (seed != np.round(seed)))
        if len(bad):
            raise ValueError(f"{path}: column {lower['seed']!r}, line {line(bad[0])}: not an integer seed")
        seed = seed.astype(np.int32)
    else:
        seed = np.full(n, DEFAULT_SEED, np.int32)

    order = np.argsort(arch_index, kind="stable")
    accuracy = out["accuracy"]
    columns: dict[str, object] = {
        "space": [space] * n, "hp": [hp] * n, "dataset": [dataset] * n, "arch_index": arch_index,
        "measured_by": np.zeros(n, np.int32), "seed": seed, NATS_INDEX: pd.array(arch_index, dtype="Int64"),
        "arch_str": arch_strs,
        "params": np.full(n, np.nan), "flops": np.full(n, np.nan), "temperature": np.full(n, np.nan),
        "accuracy": accuracy, "recorded_accuracy": np.full(n, np.nan), "n_eval": np.full(n, np.nan),
        "config_hash": [None] * n, "logits_key": [None] * n, "source_bytes": np.full(n, np.nan),
        "source_mtime": [None] * n, "calibench_version": [None] * n,
    }
    derived = {"measured_by": "the smallest index of the rows of the same TSS isomorphism class holding "
                              "identical values (SSS: the index itself)",
               NATS_INDEX: "config (the published files are indexed as NATS-Bench)",
               "pre_accuracy": "acc (their pre stage is measured on the whole test set)",
               "post_accuracy": "acc (temperature scaling keeps every prediction; the accuracy of their 80 % "
                                "post part is not published)"}
    if "seed" not in lower:
        derived["seed"] = f"{DEFAULT_SEED}, the first seed the published files evaluated"
    for stage in PUBLISHED_STAGES:
        for metric in _BINNED_ORDER:
            for name in sorted((m for m in metrics if _stage_metric(m) == (stage, metric)), key=_bins_of):
                columns[name] = metrics[name]
        for metric in _UNBINNED_ORDER:
            if metric == "accuracy":
                columns[f"{stage}_accuracy"] = accuracy
            elif f"{stage}_{metric}" in metrics:
                columns[f"{stage}_{metric}"] = metrics[f"{stage}_{metric}"]
            elif stage == "pre" and metric.startswith("mean_conf_") and f"pre_{metric}" in out:
                columns[f"pre_{metric}"] = out[f"pre_{metric}"]
        if stage == "pre":
            for name in ("pre_ood_auroc_gaussian_noise", "pre_ood_auroc_svhn"):
                if name in metrics:
                    columns[name] = metrics[name]
    frame = pd.DataFrame(columns).take(order).reset_index(drop=True)
    lead = FIRST + [NATS_INDEX] + PROVENANCE  # as calibench.results.tables writes a NATS-Bench population's table
    values = ["accuracy"] + [c for c in frame.columns if c not in lead]
    if "measured_by" in lower:  # written by export --expand-isomorphs: the config of the measured row
        given = numeric("measured_by")[order]
        unknown = np.flatnonzero(~np.isin(given, frame["arch_index"].to_numpy()))
        if len(unknown):
            raise ValueError(f"{path}: column {lower['measured_by']!r}, line {line(order[unknown[0]])}: "
                             f"{_shown(given[unknown[0]])} is the config of no row of the file")
        frame["measured_by"] = given.astype(np.int32)
        derived.pop("measured_by")
    else:
        frame["measured_by"] = _measured_by(space, frame, values)
    frame = frame[lead + [c for c in frame.columns if c not in lead]]
    unavailable = [c for c in PROVENANCE if c not in ("arch_str", "accuracy")]
    meta = {"stages": list(PUBLISHED_STAGES), "constants": {}, "source": FORMAT, "source_file": path.name,
            "source_sha256": hashlib.sha256(data).hexdigest(), "imported_by": f"calibench {__version__}",
            "derived": derived, "unavailable": unavailable, "converted": {**meta_notes,
            **({f"{s}_brier": "theirs times K" for s in PUBLISHED_STAGES if f"{s}_brier" in metrics})},
            "not_imported": dropped + dropped_unknown, **({"unstable": unstable} if unstable else {})}
    return frame, meta


# read_csv options that give every float back exactly as written (pandas 3's parser does by
# default and deprecates the option; pandas 2's default parser can be off by one ulp)
EXACT_CSV = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def _shown(value) -> str:
    """A cell for an error message: missing values said so, numbers as plain numbers."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "a missing value"
    return repr(float(value)) if isinstance(value, (float, np.floating, int, np.integer)) else repr(value)


def _case_variants(name: str) -> list[str]:
    return [name, name.upper(), name.capitalize()]


def _no_duplicates(path: Path, column: str, values: np.ndarray, line) -> None:
    seen: dict = {}
    for i, v in enumerate(values):
        if v in seen:
            shown = v.item() if isinstance(v, np.generic) else v
            raise ValueError(f"{path}: column {column!r}: {shown!r} on line {line(i)} repeats line {line(seen[v])}")
        seen[v] = i


def _stage_metric(name: str) -> tuple[str, str]:
    stage, rest = name.split("_", 1)
    head, _, tail = rest.rpartition("_")
    return (stage, head) if tail.isdigit() else (stage, rest)


def _bins_of(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def _measured_by(space: str, frame: pd.DataFrame, value_columns: Sequence[str]) -> np.ndarray:
    """SSS: each index. TSS: the smallest index of the same isomorphism class whose row holds
    the same values (a copied row, as the reference copied its measurements to isomorphs);
    a member measured on its own is its own representative. Rows sorted by index."""
    index = frame["arch_index"].to_numpy()
    if space != "tss":
        return index.astype(np.int32)
    values = np.ascontiguousarray(frame[list(value_columns)].to_numpy(dtype=float, copy=True))  # ours to write
    values[np.isnan(values)] = np.nan  # one NaN bit pattern
    first: dict[tuple, int] = {}
    out = np.empty(len(index), np.int32)
    for i, arch in enumerate(frame["arch_str"]):
        out[i] = first.setdefault((archstr.tss_class_key(arch), values[i].tobytes()), int(index[i]))
    return out


def _write_parquet(frame: pd.DataFrame, f, meta: dict) -> None:
    """As calibench.results.tables writes a result table: the frame, its pandas metadata and ours."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for name in ("space", "hp", "dataset", "arch_str", "config_hash", "logits_key", "source_mtime", "calibench_version"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table[name].cast(pa.large_string()))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           METADATA_KEY: json.dumps(meta).encode()})
    integrity.write_parquet_to(f, table, compression="snappy")
