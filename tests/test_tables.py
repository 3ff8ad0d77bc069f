"""The wide result table equals the former pandas pivot (the oracle below) on small synthetic shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibench import layout
from calibench.results import shards
from calibench.results import tables

HP, DATASET = "200", "cifar10"
STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
FIT = {"post": ["fit_temperature"], "vs": ["fit_w_norm", "fit_b_norm"], "hist": ["fit_n_bins"]}


# ---------------------------------------------------------------- the oracle: the former algorithm

def oracle_wide_table(long: pd.DataFrame) -> pd.DataFrame:
    if long.empty:
        return pd.DataFrame()
    long = long.copy()
    long["column"] = [f"{s}_{m}" if pd.isna(b) else f"{s}_{m}_{int(b)}"
                      for s, m, b in zip(long["stage"], long["metric"], long["bins"])]
    order = list(pd.unique(long["column"]))
    keys = ["space", "hp", "dataset", "arch_index", "seed"]
    values = long.pivot_table(index=keys, columns="column", values="value", aggfunc="first", dropna=False)[order]
    info = long.groupby(keys)[tables.PROVENANCE].first()
    return info.join(values).reset_index()


def oracle_build_table(space, hp, dataset, results, manifests) -> pd.DataFrame:
    results = Path(results)
    doc = json.loads(layout.population_path(results, space).read_text())
    expected = {}
    for m in manifests:
        expected.update({int(i): k for i, k in json.loads(Path(m).read_text())["shards"].items()})
    long = shards.read_shards(results, space, hp, dataset, indices=sorted(expected)).to_pandas()
    keep = long["arch_index"].map(expected).eq(long["config_hash"]) & long["arch_index"].isin(doc["selected"])
    wide = oracle_wide_table(long[keep])
    measured = set(wide["arch_index"]) if not wide.empty else set()
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
    return wide.reset_index(drop=True)


# ---------------------------------------------------------------- synthetic shards

def metric_names(bins=(5, 15)) -> list[str]:
    binned = [f"{m}_{b}" for m in ("ece", "ece_em", "cwce") for b in bins]
    return binned + ["ksce", "nll", "brier", "accuracy", "ood_auroc_gaussian_noise", "ood_auroc_svhn"]


def stage_values(rng, index: int, seed: int, stages=STAGES) -> dict[str, dict[str, float]]:
    out = {}
    for stage in stages:
        row = {m: float(rng.gamma(2.0, 0.03)) for m in metric_names()}
        row.update({m: 15.0 if m == "fit_n_bins" else float(rng.uniform(0.5, 3)) for m in FIT.get(stage, [])})
        out[stage] = row
    out["pre"]["nll"] = float("inf") if index % 3 == 0 else out["pre"]["nll"]  # a probability of 0
    if index % 4 == 1:
        out["vs"] = dict.fromkeys(out["vs"], float("nan"))  # a failed fit
    if seed == 2:
        out["post"]["ece_15"] = float("nan")
    return out


def provenance(space, index, seed, key, arch_str) -> dict:
    return {"space": space, "hp": HP, "dataset": DATASET, "arch_index": index, "arch_str": arch_str, "seed": seed,
            "params": 0.1 * index, "flops": 2.0 * index, "temperature": 1.0 + 0.01 * index + seed,
            "accuracy": 0.5 + 0.01 * seed, "recorded_accuracy": float("nan") if index == 2 else 0.6, "n_eval": 100,
            "config_hash": key, "logits_key": f"logits{index:04d}", "logits_file": f"logits/arch={index:06d}.parquet"}


def key_of(index: int) -> str:
    return f"key{index:04d}"


def write_population(results: Path, space: str, arch_strs, representatives, selected) -> None:
    doc = {"space": space, "arch_strs": list(arch_strs), "representatives": list(representatives),
           "selected": list(selected), "chunks": [list(selected)]}
    path = layout.population_path(results, space)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def write_shard(results: Path, space: str, index: int, seeds, arch_str: str, key: str | None = None,
                stages=STAGES, reorder: bool = False) -> None:
    rng = np.random.default_rng(index)
    parts = [shards.shard_table(provenance(space, index, seed, key or key_of(index), arch_str),
                                stage_values(rng, index, seed, stages)) for seed in seeds]
    table = pa.concat_tables(parts)
    if reorder:  # another writer: columns in another order, bins as int64
        table = table.select(table.column_names[::-1]).set_column(
            table.column_names[::-1].index("bins"), "bins", table["bins"].cast(pa.int64()))
    shards.write_atomic_parquet(table, layout.shard_path(results, space, HP, DATASET, index))


def write_manifests(results: Path, space: str, groups: list[list[int]], failed=()) -> list[Path]:
    out = []
    for c, indices in enumerate(groups):
        path = results / "manifests" / f"{space}_{c}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        failures = [{"space": space, "hp": HP, "dataset": DATASET, "arch_index": i, "seed": None, "source": "x",
                     "reason": "failed", "stage": "measurement"} for i in failed if c == 0]
        path.write_text(json.dumps({"shards": {str(i): key_of(i) for i in indices}, "failures": failures}))
        out.append(path)
    return out


def check(space: str, results: Path, manifests: list[Path], tmp: Path) -> pd.DataFrame:
    out, failures = tmp / "table.parquet", tmp / "failures.parquet"
    got = tables.build_table(space, HP, DATASET, results, out, manifests, failures)
    want = oracle_build_table(space, HP, DATASET, results, manifests)
    pd.testing.assert_frame_equal(got, want)
    old = tmp / "old.parquet"
    want.to_parquet(old, index=False)
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(old))
    assert pq.read_schema(out).remove_metadata() == pq.read_schema(old).remove_metadata()
    recorded = [f for m in manifests for f in json.loads(m.read_text())["failures"]]
    selected = json.loads(layout.population_path(results, space).read_text())["selected"]
    measured = set(got["measured_by"]) if not got.empty else set()
    unexplained = set(selected) - measured - {f["arch_index"] for f in recorded}  # shard deleted or stale
    rows = pq.read_table(failures).to_pandas()
    assert len(rows) == len(recorded) + len(unexplained)
    assert set(rows.loc[rows["stage"] == "table", "arch_index"]) == unexplained
    return got


# ---------------------------------------------------------------- tests

def test_sss_equals_the_pivot_with_stale_unselected_missing_and_seeds(tmp_path):
    results = tmp_path / "results"
    n = 12
    arch_strs = [f"{8 * (i % 8 + 1)}:16:24:32:{8 * (i % 5 + 1)}" for i in range(n)]
    selected = [i for i in range(n) if i != 7]  # 7: measured, but no longer selected
    write_population(results, "sss", arch_strs, range(n), selected)
    for i in range(n):
        if i == 4:
            continue  # selected, in its manifest, but the shard is missing
        if i == 9:
            continue  # failed: no shard, in the failures
        seeds = (1, 2) if i in (3, 8) else (1,)
        key = "stale0000" if i == 5 else None  # an old shard: not the key its manifest recorded
        stages = STAGES[:3] if i == 0 else STAGES  # the first shard has fewer stages: columns by first appearance
        write_shard(results, "sss", i, seeds, arch_strs[i], key=key, stages=stages, reorder=(i == 6))
    manifests = write_manifests(results, "sss", [[0, 1, 2, 3, 4, 5], [6, 7, 8, 10, 11]], failed=[9])
    got = check("sss", results, manifests, tmp_path)
    assert sorted(set(got["arch_index"])) == [0, 1, 2, 3, 6, 8, 10, 11]
    assert list(got.columns[:len(tables.FIRST + tables.PROVENANCE)]) == tables.FIRST + tables.PROVENANCE
    assert (got["arch_index"] == got["measured_by"]).all()
    assert len(got) == 8 + 2  # two networks with two seeds
    assert np.isinf(got.loc[got["arch_index"] == 0, "pre_nll"]).all()
    assert got.loc[got["arch_index"] == 1, "vs_ece_5"].isna().all()
    assert got.loc[got["seed"] == 2, "post_ece_15"].isna().all()
    assert got.loc[got["arch_index"] == 0, "spline_nll"].isna().all()  # stages its shard lacks
    assert got["recorded_accuracy"].isna().sum() == 1
    meta = tables.table_metadata(tmp_path / "table.parquet")
    assert meta["stages"] == list(STAGES)
    assert meta["constants"] == {"hist": {"fit_n_bins": 15.0}}


def test_tss_rows_expand_to_every_member_of_a_measured_class(tmp_path):
    results = tmp_path / "results"
    arch_strs = [f"|op{i}~0|+|x~0|y~1|" for i in range(10)]
    representatives = [0, 0, 2, 3, 2, 5, 5, 5, 8, 9]  # classes {0,1}, {2,4}, {3}, {5,6,7}, {8}, {9}
    selected = [0, 2, 3, 5, 8, 9]
    write_population(results, "tss", arch_strs, representatives, selected)
    for i in (0, 2, 3, 5, 9):  # 8: missing
        write_shard(results, "tss", i, (1, 2) if i == 5 else (1,), arch_strs[i], key="old" if i == 3 else None)
    manifests = write_manifests(results, "tss", [selected])
    got = check("tss", results, manifests, tmp_path)
    assert list(got["arch_index"]) == [0, 1, 2, 4, 5, 5, 6, 6, 7, 7, 9]
    assert list(got["measured_by"]) == [0, 0, 2, 2, 5, 5, 5, 5, 5, 5, 9]
    assert list(got["arch_str"]) == [arch_strs[i] for i in got["arch_index"]]
    row0, row1 = got.iloc[0], got.iloc[1]
    assert row0["pre_ece_15"] == row1["pre_ece_15"]


def test_no_shard_gives_an_empty_table_and_the_failures(tmp_path):
    results = tmp_path / "results"
    write_population(results, "sss", ["8:8:8:8:8", "16:8:8:8:8"], [0, 1], [0, 1])
    manifests = write_manifests(results, "sss", [[]], failed=[0, 1])
    out = tmp_path / "table.parquet"
    got = tables.build_table("sss", HP, DATASET, results, out, manifests, tmp_path / "failures.parquet")
    assert got.empty and pd.read_parquet(out).empty
    assert tables.table_metadata(out)["stages"] == []
    assert pq.read_table(tmp_path / "failures.parquet").num_rows == 2


def test_wide_table_keeps_the_first_non_missing_value_of_duplicates():
    rng = np.random.default_rng(0)
    parts = [shards.shard_table(provenance("sss", i, 1, key_of(i), "8:8:8:8:8"), stage_values(rng, i, 1))
             for i in (3, 1, 3)]  # network 3 twice: its cells hold two values
    long = pa.concat_tables(parts).to_pandas()
    first = long.index[:5]
    long.loc[first, "value"] = np.nan  # the first copy's value missing: the second one's counts
    long.loc[long.index[:3], "arch_str"] = None  # provenance: the first non-missing too
    got = tables.wide_table(long)
    want = oracle_wide_table(long)
    pd.testing.assert_frame_equal(got, want)
    assert tables.wide_table(long.iloc[:0]).empty


@pytest.mark.parametrize("threads", [1, 3])
def test_reading_order_does_not_depend_on_threads(tmp_path, monkeypatch, threads):
    results = tmp_path / "results"
    write_population(results, "sss", [f"{8 * (i + 1)}:8:8:8:8" for i in range(6)], range(6), range(6))
    for i in range(6):
        write_shard(results, "sss", i, (1,), f"{8 * (i + 1)}:8:8:8:8", stages=STAGES[: 2 + i])
    manifests = write_manifests(results, "sss", [list(range(6))])
    monkeypatch.setattr(tables, "_read_threads", lambda: threads)
    got = check("sss", results, manifests, tmp_path)
    assert list(dict.fromkeys(c.split("_")[0] for c in got.columns[len(tables.FIRST + tables.PROVENANCE):])) == list(STAGES[:7])
