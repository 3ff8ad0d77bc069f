"""What a reader needs to reproduce a number: the software that computed it (calibench version
and git commit when run from a checkout, Python, numpy, torch, pyarrow), the device, and the
keys of its logits and measurement (columns ``logits_key`` and ``config_hash``).

Every shard carries its provenance as JSON in its parquet schema metadata (no column, so a
shard written before provenance existed stays valid); a table records how many of its rows
came with each distinct provenance, and the table build warns when there is more than one
(:func:`calibench.results.tables.build_table`). ``calibench provenance TABLE`` prints it
(:func:`calibench.results.tables.provenance_summary`).
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
