"""What a reader needs to reproduce a number: the software that computed it (calibench version
and git commit when run from a checkout, Python, numpy, torch, pyarrow), the device, and the
keys of its logits and measurement (columns ``logits_key`` and ``config_hash``).

Every shard carries its provenance as JSON in its parquet schema metadata (no column, so a
shard written before provenance existed stays valid); a table records how many of its rows
came with each distinct provenance, and the table build warns when there is more than one
(:func:`calibench.results.tables.build_table`). ``calibench provenance TABLE`` prints it
(:func:`provenance_summary`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

PROVENANCE_KEY = b"calibench_provenance"
TABLE_METADATA_KEY = b"calibench"  # a result table's schema metadata (calibench.results.tables)
CONFIG_ENV = "CALIBENCH_CONFIG_PROVENANCE"  # set by the Snakefile for its jobs: config_record() as JSON
UNKNOWN = {"calibench_version": None, "note": "written before shards recorded their provenance"}


def _git_commit() -> str | None:
    """The commit of the checkout calibench runs from (``-dirty`` with uncommitted changes to
    tracked files); None for an installed package."""
    root = Path(__file__).resolve().parents[3]  # src/calibench/results/provenance.py
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) or None


@functools.lru_cache(maxsize=1)
def environment() -> dict:
    """The software of this process (once per process)."""
    import numpy
    import pyarrow

    from calibench import __version__

    torch = sys.modules.get("torch")
    if torch is not None:
        torch_version = torch.__version__
    else:  # the table and analysis jobs need no torch: its installed version, without a second of importing it
        try:
            torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_version = None
    return {"calibench_version": __version__, "git_commit": _git_commit(), "python": platform.python_version(),
            "numpy": numpy.__version__, "torch": torch_version, "pyarrow": pyarrow.__version__,
            "platform": platform.platform(terse=True)}


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def config_record(config_files: list, config: Mapping) -> dict:
    """The configuration a run was started with: each config file (path, SHA-256 of its bytes)
    and the SHA-256 of the effective config (files, ``--config`` overrides and schema defaults
    merged), so a reader can tell which config produced a result."""
    files = []
    for path in config_files:
        try:
            files.append({"path": str(path), "sha256": _sha256(Path(path).read_bytes())})
        except OSError:
            files.append({"path": str(path), "sha256": None})
    return {"files": files, "effective_sha256": _sha256(json.dumps(config, sort_keys=True, default=str).encode())}


def current_config() -> dict | None:
    """The config record the workflow handed this job (:data:`CONFIG_ENV`); None outside a workflow."""
    raw = os.environ.get(CONFIG_ENV)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def measurement(device: str, logits_meta: Mapping | None = None) -> dict:
    """A shard's provenance: this process's software, the measuring device, the calibench
    version that wrote the logits it measured, and the config the run was started with."""
    return {**environment(), "device": str(device),
            "logits_written_by": (logits_meta or {}).get("calibench_version"), "config": current_config()}


def split(provenance: Mapping) -> tuple[dict, dict | None]:
    """(software and device, config record) of a shard's provenance: a table groups its rows by
    the first; the config record is kept apart, as it changes with settings that change no
    number of the shards already measured."""
    return {k: v for k, v in provenance.items() if k != "config"}, provenance.get("config")


def dumps(provenance: Mapping) -> bytes:
    return json.dumps(provenance, sort_keys=True).encode()


def of_shard(schema_metadata: Mapping | None) -> dict:
    """The provenance a shard recorded (:data:`UNKNOWN` for one written without it)."""
    raw = (schema_metadata or {}).get(PROVENANCE_KEY)
    return json.loads(raw) if raw else dict(UNKNOWN)


def measured_and_copies(table: str | Path) -> tuple[int, int]:
    """(measured rows, TSS isomorph copies: arch_index != measured_by) of one result table."""
    import pyarrow.parquet as pq

    if "measured_by" not in pq.read_schema(table).names:
        return pq.ParquetFile(table).metadata.num_rows, 0
    keys = pq.read_table(table, columns=["arch_index", "measured_by"])
    copies = int((keys["arch_index"].to_numpy() != keys["measured_by"].to_numpy()).sum())
    return keys.num_rows - copies, copies


def provenance_summary(table: str | Path) -> str:
    """A table's provenance as text: its rows, and each distinct provenance with its row count."""
    import pyarrow.parquet as pq

    from calibench.vocabulary import not_a_result_table

    schema = pq.read_schema(table)
    why = not_a_result_table(schema.names)
    if why == "a shard":
        raise ValueError(f"{table}: a shard, not a result table (shards record their provenance per row: "
                         "calibench query's metrics view shows it)")
    if why is not None:
        raise ValueError(f"{table}: not a result table ({why}: a failures file, an analysis output?); "
                         "provenance reads the tables a run writes (calibench status lists them)")
    raw = schema.metadata or {}
    meta = json.loads(raw[TABLE_METADATA_KEY]) if TABLE_METADATA_KEY in raw else {}
    groups = meta.get("provenance")
    lines = [f"{table}"]
    if groups is None and meta.get("imported_by"):  # calibench import (results.interop): its source file
        lines.append(f"  imported by {meta['imported_by']} from {meta.get('source')} file {meta.get('source_file')} "
                     f"(sha256 {meta.get('source_sha256')}); stages {', '.join(meta.get('stages', []))}")
        lines += [f"  {name}: {how}" for name, how in sorted((meta.get("derived") or {}).items())]
        if meta.get("unavailable"):
            lines.append("  not in the source (empty): " + ", ".join(meta["unavailable"]))
        return "\n".join(lines)
    if groups is None:
        return "\n".join(lines + ["  built before tables recorded provenance: rebuild it to see"])
    # The table's rows (the groups count shards, one per measured network): TSS isomorph copies
    # (arch_index != measured_by) included.
    measured, copies = measured_and_copies(table)
    total = measured + copies
    copies = f" ({copies} of them copies of an isomorphic TSS cell's measurement)" if copies else ""
    lines.append(f"  {total} rows{copies}; {len(groups)} distinct provenance{'s' if len(groups) != 1 else ''}"
                 + (" (MIXED)" if len(groups) > 1 else ""))
    built = meta.get("built_by")
    if built:
        lines.append("  table built by: " + ", ".join(f"{k} {v}" for k, v in built.items() if v is not None))
    for g in groups:
        lines.append(f"  {g['rows']} rows measured with:")
        lines += [f"    {k}: {v}" for k, v in sorted(g["provenance"].items())]
    for c in meta.get("configs", []):
        record = c["config"]
        if record is None:
            lines.append(f"  {c['rows']} rows: config not recorded (measured outside the workflow or before it was)")
            continue
        files = ", ".join(f"{f['path']} (sha256 {str(f['sha256'])[:16]})" for f in record.get("files", []))
        lines.append(f"  {c['rows']} rows under config {record.get('effective_sha256', '')[:16]}: {files or 'no file'}")
    sources = meta.get("sources")
    if sources:
        lines.append(f"  source files (size and mtime per row: source_bytes, source_mtime columns): {sources['rows']} "
                     f"rows recorded, {sources['missing']} without, modified {sources['first_mtime']} to "
                     f"{sources['last_mtime']}")
    lines.append("  per row: logits_key (the logits measured) and config_hash (the measurement settings) columns")
    return "\n".join(lines)
