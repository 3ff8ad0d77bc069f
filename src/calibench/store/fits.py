"""The fit store: every network's fitted recalibration maps, kept between measurements
(issue 35; docs/running.md, "The fit store").

A change of metrics or bin counts re-applies the stored maps instead of fitting again; a
change of one stage's fit settings refits that stage only. One file per network and
dataset, beside the logits store (:func:`calibench.layout.fits_path`)::

    fits/space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet

One row per (seed, stage): ``space``, ``hp``, ``dataset``, ``arch_index``, ``seed`` (int32),
``stage``, ``fit_key`` (what
the fit was made with: :func:`fit_key`), ``failure`` (why the fit is unusable, or null),
``info_{name}`` (float64: the fit's summaries, the ``fit_{name}`` columns of a shard, in the
order of ``summary_order``, the fit's own) and,
per parameter, ``param_{name}`` (its values, float64, flattened in C order) with
``shape_{name}`` (int32). A fit that raised keeps its failure and no parameters. Files are
sealed and written atomically (:mod:`calibench.integrity`): a damaged or partial file is
never read.

This module needs numpy and pyarrow only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from calibench import integrity
from calibench.store.logits import META_KEY, StoreError, digest

FORMAT_VERSION = 1
PARAM, SHAPE, INFO = "param_", "shape_", "info_"


def _list(item: pa.DataType) -> pa.DataType:
    """A list type as Parquet reads it back (element name ``element``), so the seal's schema matches."""
    return pa.list_(pa.field("element", item))


@dataclass(frozen=True)
class StageFit:
    """One stage fitted to one network (one seed): the key it was made with, its parameters
    (None where the fit raised), its summaries and why it is unusable (None if it is not)."""

    key: str
    params: dict[str, np.ndarray] | None
    info: dict[str, float] = field(default_factory=dict)
    failure: str | None = None


def fit_key(stage_settings: Mapping, logits_key: str, labels_sha256: str) -> str:
    """The key of a stage's fit: exactly what changes it (the stage's own options, the split,
    the fits' rules: :func:`calibench.config.settings.stage_fit_settings`), the logits fitted
    and the labels they were fitted to."""
    return digest({"fit": dict(stage_settings), "logits": logits_key, "labels": labels_sha256})


def fit_keys(settings: Mapping, logits_key: str, labels_sha256: str) -> dict[str, str]:
    """Per fitted stage of ``settings["stages"]`` (measurement settings), the key its fit-store
    entry must have (:func:`fit_key`): what a measurement job checks, and what ``calibench status``
    compares to say a fit is re-applied."""
    from calibench.config.settings import stage_fit_settings

    return {stage: fit_key(stage_fit_settings(settings, stage), logits_key, labels_sha256)
            for stage in settings["stages"] if stage != "pre"}


def write_network_fits(path: str | Path, index: int, fits: Mapping[int, Mapping[str, StageFit]], *,
                       space: str, hp: str, dataset: str, meta: Mapping | None = None) -> Path:
    """Write one network's fits, ``{seed: {stage: StageFit}}``, sealed and atomically."""
    rows = [(int(seed), stage, fit) for seed, stages in sorted(fits.items()) for stage, fit in sorted(stages.items())]
    info_names = sorted({name for _, _, f in rows for name in f.info})
    param_names = sorted({name for _, _, f in rows for name in (f.params or {})})
    columns: dict[str, pa.Array] = {
        "space": pa.array([space] * len(rows), pa.string()),
        "hp": pa.array([hp] * len(rows), pa.string()),
        "dataset": pa.array([dataset] * len(rows), pa.string()),
        "arch_index": pa.array([int(index)] * len(rows), pa.int32()),
        "seed": pa.array([s for s, _, _ in rows], pa.int32()),
        "stage": pa.array([st for _, st, _ in rows], pa.string()),
        "fit_key": pa.array([f.key for _, _, f in rows], pa.string()),
        "failure": pa.array([f.failure for _, _, f in rows], pa.string()),
        "summary_order": pa.array([list(f.info) for _, _, f in rows], _list(pa.string())),
    }
    for name in info_names:
        columns[INFO + name] = pa.array([float(f.info[name]) if name in f.info else None for _, _, f in rows],
                                        pa.float64())
    for name in param_names:
        values = [np.asarray(f.params[name], dtype=np.float64) if f.params and name in f.params else None
                  for _, _, f in rows]
        columns[PARAM + name] = pa.array([None if v is None else v.ravel() for v in values], _list(pa.float64()))
        columns[SHAPE + name] = pa.array([None if v is None else list(v.shape) for v in values], _list(pa.int32()))
    table = pa.table(columns)
    table = table.replace_schema_metadata({META_KEY: json.dumps({"format": FORMAT_VERSION, **(meta or {})},
                                                                sort_keys=True).encode()})
    return integrity.write_parquet(table, path, compression="zstd")


def read_network_fits(path: str | Path) -> dict[int, dict[str, StageFit]]:
    """One network's fits, ``{seed: {stage: StageFit}}``, after the file's content check:
    FileNotFoundError if it is missing, :class:`calibench.integrity.DamagedFile` if it fails
    its check, :class:`~calibench.store.logits.StoreError` if it is not a fit-store file."""
    table = integrity.read_parquet(path)
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None or json.loads(raw).get("format") != FORMAT_VERSION:
        raise StoreError(path, "not a calibench fit-store file (no or another format version)")
    data = table.to_pydict()
    names = table.column_names
    out: dict[int, dict[str, StageFit]] = {}
    for r in range(table.num_rows):
        params = {}
        for column in names:
            if column.startswith(PARAM) and data[column][r] is not None:
                name = column[len(PARAM):]
                params[name] = np.asarray(data[column][r], dtype=np.float64).reshape(data[SHAPE + name][r])
        info = {name: float(data[INFO + name][r]) for name in data["summary_order"][r]}
        out.setdefault(int(data["seed"][r]), {})[data["stage"][r]] = StageFit(
            data["fit_key"][r], params or None, info, data["failure"][r])
    return out


def read_valid_fits(path: str | Path, expected: Mapping[int, Mapping[str, str]]
                    ) -> tuple[dict[int, dict[str, StageFit]], str | None]:
    """The stored fits whose keys match ``expected`` (``{seed: {stage: key}}``), and what was
    wrong with the file (None: nothing; a missing file is not a problem, it was never written).
    A file that fails its check or cannot be read gives no fits and its problem; the caller
    sets it aside and fits again."""
    try:
        stored = read_network_fits(path)
    except FileNotFoundError:
        return {}, None
    except integrity.DamagedFile as exc:
        return {}, f"damaged ({exc.cause})"
    except (OSError, StoreError, ValueError, KeyError, pa.ArrowException) as exc:
        return {}, f"unreadable ({type(exc).__name__}: {exc})"
    valid = {seed: {stage: fit for stage, fit in stored.get(seed, {}).items() if keys.get(stage) == fit.key}
             for seed, keys in expected.items()}
    return {seed: fits for seed, fits in valid.items() if fits}, None
