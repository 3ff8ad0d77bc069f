"""One parquet shard per measured network: the pipeline's unit of storage and of resume.

Layout: ``{results}/shards/space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet``
(:func:`calibench.layout.shard_path`; hive-style, so DuckDB and pyarrow read the tree as one dataset). Long format, one
row per (seed, stage, metric, bins) with the provenance a reader needs repeated on
every row. Writes are atomic (temporary file, then rename); a shard that exists,
reads, and carries the expected key (``config_hash``: the measurement settings plus the
key of the stored logits it measured, ``logits_key``) is valid and is never recomputed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from calibench import __version__
from calibench import integrity
from calibench import layout
from calibench.vocabulary import ROW_COLUMNS

_TYPES = dict(
    [
        ("space", pa.string()),
        ("hp", pa.string()),
        ("dataset", pa.string()),
        ("arch_index", pa.int32()),
        ("arch_str", pa.string()),
        ("seed", pa.int32()),
        ("stage", pa.string()),  # pre | post | vs | ms | dir | iso | hist | spline
        ("metric", pa.string()),  # the suite's names, and fit_* for a stage's fitted parameters
        ("bins", pa.int16()),  # null for unbinned metrics
        ("value", pa.float64()),
        ("params", pa.float64()),
        ("flops", pa.float64()),
        ("temperature", pa.float64()),
        ("accuracy", pa.float64()),  # measured, whole evaluation set
        ("recorded_accuracy", pa.float64()),  # NATS-Bench's ori-test
        ("n_eval", pa.int32()),
        ("config_hash", pa.string()),  # the shard's key: measurement settings + logits_key
        ("logits_key", pa.string()),  # the stored logits it measured (calibench.store.logits)
        ("logits_file", pa.string()),  # relative to the results directory
        ("source_bytes", pa.int64()),  # the file the logits came from (archive, ...): size when they were written
        ("source_mtime", pa.string()),  # and its modification time, UTC ISO 8601
        ("calibench_version", pa.string()),
    ]
)
SHARD_SCHEMA = pa.schema([(name, _TYPES[name]) for name in ROW_COLUMNS])  # names: calibench.layout
# Columns added after shards were first written: a shard without them is still valid (no
# recomputation); tables read them as null.
OPTIONAL_COLUMNS = ("source_bytes", "source_mtime")
REQUIRED_COLUMNS = frozenset(SHARD_SCHEMA.names) - set(OPTIONAL_COLUMNS)
FAILURE_SCHEMA = pa.schema(
    [("space", pa.string()), ("hp", pa.string()), ("dataset", pa.string()), ("arch_index", pa.int32()),
     ("seed", pa.int32()), ("stage", pa.string()), ("source", pa.string()), ("reason", pa.string())]
)


def config_hash(settings: Mapping) -> str:
    """A short stable hash of the settings that change a shard's numbers."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def split_metric_name(name: str) -> tuple[str, int | None]:
    """``ece_15`` -> ("ece", 15); ``ksce`` -> ("ksce", None)."""
    head, _, tail = name.rpartition("_")
    if head and tail.isdigit():
        return head, int(tail)
    return name, None


def shard_table(provenance: Mapping, stages: Mapping[str, Mapping[str, float]]) -> pa.Table:
    """Rows for one network: ``stages`` maps stage -> {metric name: value} (one seed).

    ``provenance`` holds space, hp, dataset, arch_index, arch_str, seed, params, flops,
    temperature, accuracy, recorded_accuracy, n_eval, config_hash, logits_key, logits_file, and
    optionally source_bytes and source_mtime.
    """
    rows = {name: [] for name in SHARD_SCHEMA.names}
    for stage, values in stages.items():
        for name, value in values.items():
            metric, bins = split_metric_name(name)
            rows["stage"].append(stage)
            rows["metric"].append(metric)
            rows["bins"].append(bins)
            rows["value"].append(float(value))
    n = len(rows["stage"])
    for key in SHARD_SCHEMA.names:
        if key in ("stage", "metric", "bins", "value"):
            continue
        value = __version__ if key == "calibench_version" else provenance.get(key) if key in OPTIONAL_COLUMNS \
            else provenance[key]
        rows[key] = [value] * n
    return pa.Table.from_pydict(rows, schema=SHARD_SCHEMA)


def write_atomic_parquet(table: pa.Table, path: str | Path) -> Path:
    """Write sealed (:mod:`calibench.integrity`) to a temporary file in the same directory, then
    rename: readers never see half a file, and a changed byte is found before use."""
    return integrity.write_parquet(table, path, compression="zstd")


STAGE_FAILURES_KEY = b"calibench_stage_failures"


def with_stage_failures(table: pa.Table, failures: list[dict]) -> pa.Table:
    """The shard with the reasons of its NaN stages in its schema metadata, so that a later
    run that keeps the shard still reports them (docs/recalibration.md, "Common rules")."""
    metadata = dict(table.schema.metadata or {})
    metadata[STAGE_FAILURES_KEY] = json.dumps(failures).encode()
    return table.replace_schema_metadata(metadata)


def read_stage_failures(path: str | Path) -> list[dict]:
    """The stage failures a shard recorded (:func:`with_stage_failures`); [] if none."""
    metadata = integrity.read_parquet(path, schema_only=True).metadata or {}
    return json.loads(metadata.get(STAGE_FAILURES_KEY, b"[]"))


RELIABILITY_KEY = b"calibench_reliability"


def with_reliability(table: pa.Table, reliability: Mapping[int, Mapping[str, Mapping]]) -> pa.Table:
    """The shard with its reliability-diagram bins in its schema metadata: ``{seed: {stage:
    {"count", "confidence", "accuracy"}}}`` (:mod:`calibench.metrics.reliability`); NaN
    (empty bins, failed stages) is stored as null."""
    def listed(values):
        return [None if v != v else float(v) for v in values]

    blob = {str(seed): {stage: {k: listed(rel[k]) for k in ("count", "confidence", "accuracy")}
                        for stage, rel in stages.items()}
            for seed, stages in reliability.items()}
    metadata = dict(table.schema.metadata or {})
    metadata[RELIABILITY_KEY] = json.dumps(blob).encode()
    return table.replace_schema_metadata(metadata)


def read_reliability(path: str | Path) -> dict[int, dict]:
    """``{seed: {stage: {"count", "confidence", "accuracy"}}}`` of a shard, float arrays
    with NaN where a bin is empty or the stage failed; {} for a shard written without them."""
    try:
        metadata = integrity.read_parquet(path, schema_only=True).metadata or {}
    except integrity.DamagedFile as exc:  # a reader moves no file: the next run's repair check does
        raise integrity.DamagedFile(path, f"{exc.cause}; calibench run measures it again") from None
    blob = json.loads(metadata.get(RELIABILITY_KEY, b"{}"))
    return {int(seed): {stage: {k: np.array([np.nan if v is None else v for v in values], dtype=float)
                                for k, values in rel.items()}
                        for stage, rel in stages.items()}
            for seed, stages in blob.items()}


MEASURED_KEY = b"calibench_measured"


def with_measured(table: pa.Table, bins, stage_keys: Mapping[str, str]) -> pa.Table:
    """The shard with what its rows were measured with in its schema metadata: the bin counts
    and, per stage, the key of everything else its rows depend on
    (:func:`calibench.config.settings.stage_measurement_settings`)."""
    metadata = dict(table.schema.metadata or {})
    metadata[MEASURED_KEY] = json.dumps({"bins": list(bins), "stages": dict(stage_keys)}).encode()
    return table.replace_schema_metadata(metadata)


def read_measured(table: pa.Table) -> dict | None:
    """``{"bins": [...], "stages": {stage: key}}`` of a shard read back; None for one written
    without it (before calibench kept it)."""
    blob = (table.schema.metadata or {}).get(MEASURED_KEY)
    return None if blob is None else json.loads(blob)


def stage_values(table: pa.Table) -> dict[int, dict[str, dict[str, float]]]:
    """A shard's values as :func:`shard_table` took them: ``{seed: {stage: {name: value}}}``,
    names ``{metric}_{bins}`` for binned rows, in the rows' order."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    columns = [table[c].to_pylist() for c in ("seed", "stage", "metric", "bins", "value")]
    for seed, stage, metric, bins, value in zip(*columns):
        out.setdefault(seed, {}).setdefault(stage, {})[metric if bins is None else f"{metric}_{bins}"] = value
    return out


def shard_problem(path: str | Path, expected_hash: str) -> str | None:
    """Why a shard cannot be kept (None if it can): missing, damaged (its content check,
    :mod:`calibench.integrity`), empty, another schema, or made with other settings."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    try:
        data = path.read_bytes()
        file = pq.ParquetFile(pa.BufferReader(data), metadata=integrity.verify_bytes(path, data))  # one footer read
        if file.metadata.num_rows == 0 or not REQUIRED_COLUMNS <= set(file.schema_arrow.names):
            return "no rows or not the shard schema"
        hashes = file.read(columns=["config_hash"]).column(0).unique().to_pylist()
    except integrity.DamagedFile as exc:
        return f"damaged ({exc.cause})"
    except Exception as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"
    return None if hashes == [expected_hash] else "made with other settings"


def is_valid_shard(path: str | Path, expected_hash: str) -> bool:
    """True if the shard passes its content check, has the schema, holds rows, and was made
    with this config."""
    return shard_problem(path, expected_hash) is None


def read_shards(results: str | Path, space: str, hp: str, dataset: str, indices=None) -> pa.Table:
    """The shards of one (space, hp, dataset) (those of ``indices`` if given), concatenated
    (an empty table if none)."""
    if indices is None:
        files = layout.matching(layout.shard_path(results, space, hp, dataset, "*"))
    else:
        files = [p for p in (layout.shard_path(results, space, hp, dataset, i) for i in indices) if p.is_file()]
    if not files:
        return SHARD_SCHEMA.empty_table()
    return pa.concat_tables([_with_all_columns(integrity.read_parquet(f)) for f in files])


def _with_all_columns(table: pa.Table) -> pa.Table:
    """A shard read back in :data:`SHARD_SCHEMA` (null columns for an older shard's missing ones)."""
    columns = [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in SHARD_SCHEMA]
    return pa.Table.from_arrays(columns, schema=SHARD_SCHEMA)


def failures_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=FAILURE_SCHEMA)

