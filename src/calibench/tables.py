"""Result tables: the shards of one (space, hp, dataset) as one wide table, one row per
network, TSS rows expanded from class representatives to every member index. Needs no
torch: table jobs start fast.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from . import shards
from .atomic import atomic_write

log = logging.getLogger(__name__)


def population_path(results: str | Path, space: str) -> Path:
    return Path(results) / "population" / f"{space}.json"


def wide_table(long: pd.DataFrame) -> pd.DataFrame:
    """Long shards -> one row per (arch_index, seed): ``{stage}_{metric}[_{bins}]`` columns."""
    if long.empty:
        return pd.DataFrame()
    long = long.copy()
    long["column"] = [f"{s}_{m}" if pd.isna(b) else f"{s}_{m}_{int(b)}"
                      for s, m, b in zip(long["stage"], long["metric"], long["bins"])]
    order = list(pd.unique(long["column"]))  # the shards' order: metric by metric, bins as configured
    keys = ["space", "hp", "dataset", "arch_index", "seed"]
    provenance = ["arch_str", "params", "flops", "temperature", "accuracy", "recorded_accuracy", "n_eval",
                  "config_hash", "logits_key", "calibench_version"]
    values = long.pivot_table(index=keys, columns="column", values="value", aggfunc="first", dropna=False)[order]
    info = long.groupby(keys)[provenance].first()
    wide = info.join(values).reset_index()
    return wide


def build_table(space: str, hp: str, dataset: str, results: str | Path, out: str | Path,
                manifests: list[str | Path], failures_out: str | Path | None = None) -> pd.DataFrame:
    """The wide result table of one (space, hp, dataset) from its measurement manifests: each
    network's row comes from the shard with the key its manifest recorded, so a stale
    shard never enters; reports how many networks are missing."""
    results = Path(results)
    doc = json.loads(population_path(results, space).read_text())
    expected: dict[int, str] = {}
    failed = []
    for m in manifests:
        summary = json.loads(Path(m).read_text())
        expected.update({int(i): k for i, k in summary["shards"].items()})
        failed += summary["failures"]
    long = shards.read_shards(results, space, hp, dataset, indices=sorted(expected)).to_pandas()
    keep = long["arch_index"].map(expected).eq(long["config_hash"]) & long["arch_index"].isin(doc["selected"])
    wide = wide_table(long[keep])
    measured = set(wide["arch_index"]) if not wide.empty else set()
    missing = sorted(set(doc["selected"]) - measured)
    if missing:
        log.warning("%s hp=%s %s: %d of %d selected architectures have no shard (failed: %d)",
                    space, hp, dataset, len(missing), len(doc["selected"]), len({f['arch_index'] for f in failed}))
    if space == "tss" and not wide.empty:
        reps = doc["representatives"]
        members = pd.DataFrame({"arch_index": range(len(reps)), "measured_by": reps})
        members = members[members["measured_by"].isin(measured)]
        wide = wide.rename(columns={"arch_index": "measured_by"}).merge(members, on="measured_by")
        wide["arch_str"] = [doc["arch_strs"][i] for i in wide["arch_index"]]
    elif not wide.empty:
        wide["measured_by"] = wide["arch_index"]
    if not wide.empty:
        first = ["space", "hp", "dataset", "arch_index", "measured_by", "seed"]
        wide = wide[first + [c for c in wide.columns if c not in first]].sort_values(["arch_index", "seed"])
    atomic_write(out, lambda f: wide.to_parquet(f, index=False))
    fail_out = failures_out or results / "failures" / f"{space}_{hp}_{dataset}.parquet"
    shards.write_atomic_parquet(shards.failures_table(failed), fail_out)  # creates the directory
    log.info("%s: %d rows (%d measured networks, %d missing, %d failed)", out, len(wide), len(measured),
             len(missing), len(failed))
    return wide
