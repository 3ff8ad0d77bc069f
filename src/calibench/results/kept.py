"""What of an earlier shard still holds under new settings (issue 35; docs/results.md, "Shards",
and docs/running.md, "The fit store").

A shard records, besides its key, the bin counts it was measured at and per stage the key of
everything else its rows depend on (:func:`stage_keys`). When the settings change, a stage
whose key is unchanged keeps its rows: only the bin counts it lacks are measured, from the
stored fits, and merged in the order a measurement from scratch gives, so the shard equals one
bit for bit (each bin count's values do not depend on the others measured with it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibench import integrity
from calibench.metrics.suite import BINNED_METRICS, binned_metric_names
from calibench.results import shards
from calibench.store import logits as store


def stage_keys(settings: Mapping, logits_key: str) -> dict[str, str]:
    """Per stage, the key of everything its shard rows depend on but the bin counts
    (:func:`calibench.config.settings.stage_measurement_settings`) and the logits."""
    from calibench.config.settings import stage_measurement_settings

    return {stage: store.digest({"stage": stage_measurement_settings(settings, stage), "logits": logits_key})
            for stage in settings["stages"]}


@dataclass(frozen=True)
class KeptRows:
    """An earlier shard of a network whose rows are kept, stage by stage, under new settings."""

    values: dict  # {seed: {stage: {name: value}}} (:func:`calibench.results.shards.stage_values`)
    temperature: dict  # {seed: temperature column}
    reliability: dict  # {seed: {stage: bins}}
    stage_failures: list[dict]
    new_bins: dict  # per kept stage, the bin counts it lacks (in the settings' order)


def kept_rows_of(path: Path, settings: Mapping, keys: Mapping[str, str], seeds: list[int]) -> KeptRows | None:
    """What of the shard at ``path`` (made with other settings) still holds: the stages whose key
    (:func:`stage_keys`) is unchanged, with the bin counts they lack; None if no stage holds, or the
    shard fails its check, predates its record or lacks a seed."""
    try:
        table = integrity.read_parquet(path)
    except (OSError, integrity.DamagedFile):
        return None
    measured = shards.read_measured(table)
    if measured is None:
        return None
    values = shards.stage_values(table)
    old_bins = set(measured["bins"])
    new_bins = {stage: tuple(b for b in settings["bins"] if b not in old_bins) for stage, key in keys.items()
                if measured["stages"].get(stage) == key and all(stage in values.get(seed, {}) for seed in seeds)}
    if not new_bins:
        return None
    temperature = dict(zip(table["seed"].to_pylist(), table["temperature"].to_pylist()))
    failures = json.loads((table.schema.metadata or {}).get(shards.STAGE_FAILURES_KEY, b"[]"))
    reliability = {int(seed): {stage: {k: np.array([np.nan if v is None else v for v in bins], dtype=float)
                                       for k, bins in rel.items()} for stage, rel in stages.items()}
                   for seed, stages in json.loads((table.schema.metadata or {}).get(shards.RELIABILITY_KEY,
                                                                                      b"{}")).items()}
    new_bins = {stage: b for stage, b in new_bins.items()
                if all(stage in reliability.get(seed, {}) for seed in seeds)}
    if not new_bins:
        return None
    return KeptRows(values, temperature, reliability, failures, new_bins)


def kept_plan(group: list, kept_rows: Mapping[int, KeptRows], settings: Mapping) -> dict:
    """The stages of ``group`` whose rows are kept, with the bin counts to add: those that every
    network keeps (:func:`kept_rows_of`) and, but for ``pre``, re-applies from the fit store (a
    stage fitted now is measured whole)."""
    kept = [kept_rows.get(n.index) for n in group]
    plan = {}
    for stage in settings["stages"]:
        if any(k is None or stage not in k.new_bins for k in kept):
            continue
        if stage != "pre" and any(stage not in n.fits for n in group):
            continue
        plan[stage] = tuple(b for b in settings["bins"] if any(b in k.new_bins[stage] for k in kept))
    return plan


def merged_reliability(kept: KeptRows, seed: int, plan: Mapping[str, tuple], measured: Mapping[str, Mapping],
                       settings: Mapping) -> dict:
    """One seed's reliability bins in the settings' stage order, as a measurement from scratch
    writes them: a kept stage's (``plan``) as kept, the others as measured now."""
    return {stage: kept.reliability[seed][stage] if stage in plan else measured[stage]
            for stage in settings["stages"] if stage in plan or stage in measured}


def merged_stages(kept: KeptRows, seed: int, plan: Mapping[str, tuple], measured: Mapping[str, Mapping],
                  settings: Mapping) -> dict:
    """One seed's stages as a measurement from scratch orders them: a kept stage's (``plan``)
    binned values at the settings' bins (measured now or kept), then its kept unbinned ones; the
    other stages as measured now."""
    out = {}
    for stage in settings["stages"]:
        if stage not in plan:
            out[stage] = dict(measured[stage])
            continue
        old, new = kept.values[seed][stage], measured.get(stage, {})
        binned = {name: new[name] if name in new else old[name] for name in binned_metric_names(settings["bins"])}
        unbinned = {name: v for name, v in old.items() if shards.split_metric_name(name)[0] not in BINNED_METRICS}
        out[stage] = {**binned, **unbinned}
    return out
