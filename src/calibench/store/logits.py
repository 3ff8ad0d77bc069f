"""The logits store: every network's float32 logits, kept between inference and measurement.

Inference (the expensive, once-only work) ends here; recalibration, metrics, tables and
analysis start here and never open an archive. Layout under ``{results}/logits/``
(hive-style, so pyarrow and DuckDB read each tree as one dataset; the paths are
:func:`calibench.layout.logits_path` and :func:`calibench.layout.labels_path`)::

    labels/dataset={dataset}.parquet                         labels, once per dataset
    space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet   one network's logits

A logits file has one row per (seed, set, image): ``arch_index`` and ``seed`` (int32), ``set`` (``test``, or
``ood_gaussian_noise`` / ``ood_svhn`` for CIFAR-10), ``image`` (int32, the row of that
set) and ``logit_0`` … ``logit_{K-1}`` (float32, bit-identical to what the network
produced; float64 where a logits population gave float64). A labels file has ``image`` (int32) and ``label`` (int16). Both carry their
provenance as JSON under the parquet schema metadata key ``calibench``; a logits file's
``key`` is made only from what changes logits (:func:`key_fields`), so a file whose key
matches the configuration is valid and is never computed again. Writes are atomic.

Reading without calibench (docs/running.md, "The logits store")::

    t = pyarrow.parquet.read_table(path, filters=[("set", "=", "test")])
    logits = numpy.column_stack([t[c].to_numpy() for c in t.column_names if c.startswith("logit_")])

This module needs numpy and pyarrow only (no torch), so the workflow can import it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from calibench import layout
from calibench import integrity


FORMAT_VERSION = 1
META_KEY = b"calibench"
TEST_SET = "test"


class StoreError(ValueError):
    """A store file that cannot be used: names the file and the reason."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


# ---------------------------------------------------------------- keys

def digest(fields: Mapping) -> str:
    """A short stable hash of a JSON-able mapping."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 23):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (cached per size and modification time)."""
    st = os.stat(path)
    return _file_sha256(os.path.abspath(path), st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------- metadata

def _metadata(path: str | Path, verify: bool = False) -> dict:
    """A store file's calibench metadata (from the footer; with ``verify``, after checking
    every byte against the file's seal, :mod:`calibench.integrity`)."""
    try:
        schema = integrity.read_parquet(path, schema_only=True) if verify else pq.read_schema(path)
    except (FileNotFoundError, integrity.DamagedFile):
        raise
    except Exception as exc:
        raise StoreError(path, f"unreadable parquet footer ({type(exc).__name__}: {exc})") from exc
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise StoreError(path, "no calibench metadata (not a calibench store file)")
    return json.loads(raw)


def stored_key(path: str | Path, verify: bool = False) -> str | None:
    """The key a store file was written with; None if it is missing, truncated, foreign or
    (with ``verify``) fails its content check."""
    try:
        return _metadata(path, verify).get("key")
    except (OSError, StoreError, ValueError):
        return None


def problem(path: str | Path, expected_key: str) -> str | None:
    """Why a store file cannot be kept (None if it can): missing, damaged (its content check,
    :mod:`calibench.integrity`), unreadable, or made for another key."""
    if not Path(path).is_file():
        return "missing"
    try:
        key = _metadata(path, verify=True).get("key")
    except integrity.DamagedFile as exc:
        return f"damaged ({exc.cause})"
    except (OSError, StoreError, ValueError) as exc:
        return f"unreadable ({exc})"
    return None if key == expected_key else "made with other settings"


def is_valid(path: str | Path, expected_key: str) -> bool:
    """True if the file exists, passes its content check, and was made for ``expected_key``."""
    return problem(path, expected_key) is None


def _write(path: str | Path, table: pa.Table, meta: Mapping) -> Path:
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    floats = [n for n in table.column_names if n.startswith("logit_")]
    return integrity.write_parquet(table, path, compression="zstd", use_dictionary=["set", "arch_index", "seed"],
                                   use_byte_stream_split=floats or False)


def labels_sha256(labels: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(labels, dtype=np.int64).tobytes()).hexdigest()


# ---------------------------------------------------------------- labels

def write_labels(path: str | Path, labels: np.ndarray, *, dataset: str, key: str, source: str,
                 classes: int | None = None) -> Path:
    """The labels of one evaluation set, once per dataset; ``classes``: the logit columns its
    models must have, where the source knows it (recorded as ``meta["classes"]``)."""
    labels = np.asarray(labels)
    table = pa.table({"image": pa.array(np.arange(len(labels), dtype=np.int32)),
                      "label": pa.array(labels.astype(np.int16))})
    meta = {"format": FORMAT_VERSION, "kind": "labels", "dataset": dataset, "key": key, "n": len(labels),
            "labels_sha256": labels_sha256(labels), "source": source}
    if classes is not None:
        meta["classes"] = int(classes)
    return _write(path, table, meta)


@dataclass(frozen=True)
class Labels:
    labels: np.ndarray  # (N,) int64
    meta: dict


def _read_store_file(path: Path, what: str, columns=None) -> tuple[dict, pa.Table]:
    """A store file's metadata and table; StoreError naming the file if missing or unreadable."""
    if not path.is_file():
        raise StoreError(path, f"{what} file missing")
    try:
        table = integrity.read_parquet(path, columns=columns)  # DamagedFile if it fails its check
    except FileNotFoundError as exc:
        raise StoreError(path, f"{what} file missing") from exc
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise StoreError(path, "no calibench metadata (not a calibench store file)")
    return json.loads(raw), table


def read_labels(path: str | Path) -> Labels:
    path = Path(path)
    meta, table = _read_store_file(path, "labels", columns=["label"])
    labels = table.column(0).to_numpy().astype(np.int64)
    if meta.get("kind") != "labels" or len(labels) != meta.get("n") or labels_sha256(labels) != meta.get("labels_sha256"):
        raise StoreError(path, "labels do not match their recorded count and checksum")
    return Labels(labels, meta)


# ---------------------------------------------------------------- logits

@dataclass(frozen=True)
class SeedLogits:
    """One trained network (one seed): its recorded facts and float32 logits per set."""

    seed: int
    params: float
    flops: float
    recorded_accuracy: float
    source: str
    sets: dict[str, np.ndarray]  # "test" -> (N, K); "ood_<name>" -> (Q, K)


def source_stat(source: str) -> dict:
    """Size and modification time (UTC, ISO 8601) of the file a network's logits came from
    (its archive file, logits file or model file), read when the logits are written, so a
    reader can tell later whether that file has changed; {} where ``source`` is no file."""
    try:
        st = os.stat(source)
    except (OSError, ValueError, TypeError):
        return {}
    from datetime import datetime, timezone

    return {"source_bytes": int(st.st_size),
            "source_mtime": datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat(timespec="seconds")}


def write_network_logits(path: str | Path, *, key: str, fields: Mapping, space: str, hp: str, dataset: str,
                         index: int, arch_str: str, labels: np.ndarray, seeds: Sequence[SeedLogits]) -> Path:
    """One architecture's logits on one dataset, every configured seed, as one parquet file."""
    if not seeds:
        raise ValueError(f"{path}: no seeds to write")
    k = seeds[0].sets[TEST_SET].shape[1]
    dtype = np.asarray(seeds[0].sets[TEST_SET]).dtype  # float32 (networks run here); float64 if given so
    blocks, seed_col, set_col, image_col = [], [], [], []
    for s in seeds:
        for name, values in s.sets.items():
            values = np.asarray(values)
            if values.dtype != dtype or dtype not in (np.float32, np.float64) or values.ndim != 2 or values.shape[1] != k:
                raise ValueError(f"{path}: seed {s.seed} set {name!r}: expected float32 or float64 (n, {k}) like the "
                                 f"test set, got {values.dtype} {values.shape}")
            blocks.append(values)
            seed_col.append(np.full(len(values), s.seed, dtype=np.int32))
            set_col += [name] * len(values)
            image_col.append(np.arange(len(values), dtype=np.int32))
    matrix = np.concatenate(blocks)
    columns = {"arch_index": pa.array(np.full(len(matrix), index, dtype=np.int32)),
               "seed": pa.array(np.concatenate(seed_col)), "set": pa.array(set_col, pa.string()),
               "image": pa.array(np.concatenate(image_col))}
    columns.update({f"logit_{j}": pa.array(np.ascontiguousarray(matrix[:, j])) for j in range(k)})
    from calibench import __version__

    meta = {
        "format": FORMAT_VERSION, "kind": "logits", "key": key, "key_fields": dict(fields), "space": space, "hp": hp,
        "dataset": dataset, "arch_index": int(index), "arch_str": arch_str, "num_classes": int(k),
        "n_test": int(seeds[0].sets[TEST_SET].shape[0]), "labels_sha256": labels_sha256(labels),
        "sets": list(seeds[0].sets), "calibench_version": __version__,
        "networks": [{"seed": int(s.seed), "params": float(s.params), "flops": float(s.flops),
                      "recorded_accuracy": float(s.recorded_accuracy), "source": s.source, **source_stat(s.source)}
                     for s in seeds],
    }
    return _write(path, pa.table(columns), meta)


@dataclass(frozen=True)
class NetworkLogitsFile:
    """A logits file read back: metadata and one :class:`SeedLogits` per seed."""

    path: Path
    meta: dict
    seeds: list[SeedLogits]

    @property
    def key(self) -> str:
        return self.meta["key"]


def read_network_logits(path: str | Path) -> NetworkLogitsFile:
    """Read one logits file; StoreError naming the file if it is missing, truncated or inconsistent."""
    path = Path(path)
    meta, table = _read_store_file(path, "logits")
    k = int(meta["num_classes"])
    names = [f"logit_{j}" for j in range(k)]
    if not set(names) <= set(table.column_names):
        raise StoreError(path, f"expected columns logit_0 … logit_{k - 1}")
    matrix = np.column_stack([table.column(n).to_numpy() for n in names])
    seed_col = table.column("seed").to_numpy()
    set_col = table.column("set")
    seeds = []
    for net in meta["networks"]:
        sets = {}
        for name in meta["sets"]:
            in_set = pc.equal(set_col, name).to_numpy(zero_copy_only=False)
            sets[name] = matrix[in_set & (seed_col == net["seed"])]
        if sets[TEST_SET].shape[0] != meta["n_test"]:
            raise StoreError(path, f"seed {net['seed']}: {sets[TEST_SET].shape[0]} test rows, expected {meta['n_test']}")
        seeds.append(SeedLogits(net["seed"], net["params"], net["flops"], net["recorded_accuracy"], net["source"], sets))
    return NetworkLogitsFile(path, meta, seeds)


def list_store(results: str | Path):
    """One row per logits file (space, hp, dataset, arch_index, seeds, sets, n_test, classes, bytes,
    key), read from the footers only; a pandas DataFrame."""
    import pandas as pd

    rows = []
    for path in sorted([*layout.matching(layout.logits_path(results, "*", "*", "*", "*")),
                        *layout.matching(layout.logits_path(results, "*", "", "*", "*"))]):
        try:
            meta = _metadata(path)
        except (OSError, StoreError, ValueError) as exc:
            rows.append({"path": str(path), "problem": str(exc), "bytes": path.stat().st_size})
            continue
        rows.append({"space": meta["space"], "hp": meta["hp"], "dataset": meta["dataset"],
                     "arch_index": meta["arch_index"], "arch_str": meta["arch_str"],
                     "seeds": ",".join(str(n["seed"]) for n in meta["networks"]), "sets": ",".join(meta["sets"]),
                     "n_test": meta["n_test"], "classes": meta["num_classes"], "bytes": path.stat().st_size,
                     "key": meta["key"], "path": str(path)})
    return pd.DataFrame(rows)
