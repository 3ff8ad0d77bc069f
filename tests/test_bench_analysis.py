"""bench/bench_analysis.py's synthetic result tables have the real tables' layout: rebuilt
from shards by calibench.results.tables.build_table, a few of their networks give the same frame
(columns, order, dtypes, TSS expansion, values) and the same schema metadata keys; the
reliability shards it writes are readable. (The analysis itself is not run here: see the
script.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "bench" / "bench_analysis.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_analysis", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def prepared(bench, tmp_path_factory):
    config = bench.load_config(ROOT / "config" / "nats.yaml")
    directory = tmp_path_factory.mktemp("bench_analysis")
    return config, directory, bench.prepare(directory, config, 0.002)


def _rebuild(name: str, mine: pd.DataFrame, stages: list[str], results: Path, arch_strs, reps) -> pd.DataFrame:
    """``build_table`` on shards holding the values of a few of ``mine``'s measured networks."""
    from calibench import layout
    from calibench.results import shards
    from calibench.results import tables

    space, hp, dataset = str(mine["space"][0]), str(mine["hp"][0]), str(mine["dataset"][0])
    nets = mine[mine["arch_index"] == mine["measured_by"]].head(5)
    selected = sorted(int(i) for i in nets["measured_by"])
    doc = {"space": space, "arch_strs": arch_strs, "representatives": reps, "selected": selected,
           "chunks": [selected]}
    (results / "population").mkdir(parents=True, exist_ok=True)
    (results / "population" / f"{space}.json").write_text(json.dumps(doc))
    columns = [c for c in mine.columns if c.partition("_")[0] in stages]
    for row in nets.to_dict("records"):
        values = {s: {} for s in stages}
        for c in columns:
            stage, _, metric = c.partition("_")
            values[stage][metric] = row[c]
        provenance = {k: row[k] for k in ("space", "hp", "dataset", "arch_str", "params", "flops", "temperature",
                                          "accuracy", "recorded_accuracy", "config_hash", "logits_key",
                                          "source_bytes", "source_mtime")}
        provenance.update(arch_index=int(row["measured_by"]), seed=int(row["seed"]), n_eval=int(row["n_eval"]),
                          logits_file="synthetic")
        shards.write_atomic_parquet(shards.shard_table(provenance, values),
                                    layout.shard_path(results, space, hp, dataset, provenance["arch_index"]))
    manifest = results / f"{name}.json"
    manifest.write_text(json.dumps({"shards": {str(int(r["measured_by"])): r["config_hash"]
                                               for r in nets.to_dict("records")}, "failures": []}))
    out = results / "tables" / f"{name}.parquet"
    tables.build_table(space, hp, dataset, results, out, [manifest])
    return out, mine[mine["measured_by"].isin(selected)].reset_index(drop=True)


def test_synthetic_tables_match_what_build_table_writes(bench, prepared, tmp_path):
    from calibench.results import tables
    from calibench.sources.nats.population import representatives

    config, directory, info = prepared
    assert not info["reused"]
    assert len(info["tables"]) == len(config["spaces"]) * len(config["datasets"])
    rng = np.random.default_rng(0)
    for space, dataset in (("tss", "cifar10"), ("sss", "cifar100")):
        hp = str(config["hp"][space])
        path = directory / "results" / "tables" / f"{space}_{hp}_{dataset}.parquet"
        mine = pd.read_parquet(path)
        meta = tables.table_metadata(path)
        assert meta["stages"] == list(config["stages"])
        assert ("pre_ood_auroc_gaussian_noise" in mine.columns) == (dataset == "cifar10")
        pop = (bench.tss_population if space == "tss" else bench.sss_population)(1.0, rng)
        reps = representatives(space, pop["arch_strs"])
        out, expected = _rebuild(f"{space}_{hp}_{dataset}", mine, meta["stages"], tmp_path / space, pop["arch_strs"],
                                 reps)
        pd.testing.assert_frame_equal(pd.read_parquet(out), expected, check_dtype=True)
        assert pq.read_schema(out).names == pq.read_schema(path).names
        assert set(pq.read_schema(out).metadata) == set(pq.read_schema(path).metadata)
        if space == "tss":  # every member of a class, measured_by naming its representative
            assert len(mine) > (mine["arch_index"] == mine["measured_by"]).sum()
            assert mine["arch_index"].is_unique and mine["arch_index"].is_monotonic_increasing


def test_reliability_shards_and_reuse(bench, prepared):
    from calibench.analysis import reliability

    config, directory, info = prepared
    assert info["reliability_shards"] >= 2 * len(info["tables"])
    found = list((directory / "results" / "shards").rglob("arch=*.parquet"))
    assert found
    space = found[0].parts[-4].split("=", 1)[1]
    dataset = found[0].parts[-2].split("=", 1)[1]
    arch = int(found[0].stem.split("=", 1)[1])
    got = reliability.load(directory / "results", space, dataset, arch)
    assert {"pre", "post"} <= set(got["stages"])
    assert bench.prepare(directory, config, 0.002)["reused"]
