"""calibench.layout holds every results path once, and the config schema every default once.

The patterns the workflow's rules declare are pinned here as the strings a finished results
directory holds: a change to the layout would make Snakemake rebuild (or lose) finished
results, so it must be a deliberate one. The settings' defaults are the schema's.
"""

from __future__ import annotations

import json
from pathlib import Path

from calibench import layout
from calibench.config import settings
from calibench.config.check import schema_default, schema_defaults
from calibench.run import repair

PATTERNS = {  # layout function and arguments -> the rule's pattern, as the previous releases wrote it
    ("population_path", ("{space}",)): "results/population/{space}.json",
    ("labels_path", ("{dataset}",)): "results/logits/labels/dataset={dataset}.parquet",
    ("infer_manifest", ("{target}", "{chunk}")): "results/chunks/infer/{target}/chunk{chunk}.json",
    ("measure_manifest", ("{target}", "{dataset}", "{chunk}")):
        "results/chunks/measure/{target}_{dataset}/chunk{chunk}.json",
    ("odir_path", ("{target}", "{dataset}")): "results/recalibration/odir_{target}_{dataset}.json",
    ("table_path", ("{target}", "{dataset}")): "results/tables/{target}_{dataset}.parquet",
    ("failures_path", ("{target}", "{dataset}")): "results/failures/{target}_{dataset}.parquet",
    ("log_path", ("measure/{target}_{dataset}_chunk{chunk}",)): "results/logs/measure/{target}_{dataset}_chunk{chunk}.log",
    ("benchmark_path", ("infer/{target}_chunk{chunk}",)): "results/benchmarks/infer/{target}_chunk{chunk}.tsv",
    ("report_path", ()): "results/report.html",
    ("logits_path", ("tss", "200", "cifar10", 7)): "results/logits/space=tss/hp=200/dataset=cifar10/arch=000007.parquet",
    ("logits_path", ("zoo", "", "own", 7)): "results/logits/space=zoo/dataset=own/arch=000007.parquet",
    ("shard_path", ("sss", "90", "ImageNet16-120", 32767)):
        "results/shards/space=sss/hp=90/dataset=ImageNet16-120/arch=032767.parquet",
    ("infer_manifest", ("tss_200", 3)): "results/chunks/infer/tss_200/chunk00003.json",
    ("measure_manifest", ("zoo", "own", 12)): "results/chunks/measure/zoo_own/chunk00012.json",
}


def test_the_rules_patterns_and_the_stored_paths_are_the_previous_ones():
    for (name, args), want in PATTERNS.items():
        assert str(getattr(layout, name)("results", *args)) == want, name
    assert str(layout.labels_path("results", "{dataset}", space="{space}")) == \
        "results/logits/labels/space={space}/dataset={dataset}.parquet"
    assert layout.target_name("tss", "200") == "tss_200" and layout.target_name("zoo", "") == "zoo"
    for target in ("tss_200", "sss_12", "zoo", "my-models"):
        assert layout.target_name(*layout.split_target(target)) == target


def test_matching_lists_what_a_pattern_matches(tmp_path):
    made = [layout.measure_manifest(tmp_path, t, d, c) for t, d, c in
            [("tss_200", "cifar10", 0), ("tss_200", "cifar100", 0), ("zoo", "own", 1)]]
    made.append(layout.infer_manifest(tmp_path, "tss_200", 0))
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert layout.matching(layout.measure_manifest(tmp_path, "*", "*", "*")) == sorted(made[:3])
    assert layout.matching(layout.measure_manifest(tmp_path, "tss_200", "*", 0)) == made[:2]
    assert layout.matching(layout.infer_manifest(tmp_path, "*", "*")) == [made[3]]
    assert layout.matching(made[3]) == [made[3]] and layout.matching(tmp_path / "none.json") == []


def test_set_aside_finds_the_measurement_chunks_and_tables_of_an_inference_chunk(tmp_path):
    infer = layout.infer_manifest(tmp_path, "tss_200", 1)
    measures = [layout.measure_manifest(tmp_path, "tss_200", d, 1) for d in ("cifar10", "ImageNet16-120")]
    other = layout.measure_manifest(tmp_path, "tss_200", "cifar10", 2)  # another chunk: kept
    tables = [layout.table_path(tmp_path, "tss_200", d) for d in ("cifar10", "ImageNet16-120")]
    for path in [infer, *measures, other, *tables]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({}))
    moved = repair.set_aside(tmp_path, [(infer, ["deleted"])])
    assert sorted(moved) == sorted([infer, *measures, *tables])
    assert other.exists() and all(Path(f"{p}{repair.SET_ASIDE}").exists() for p in moved)
    # rebuilt: what was set aside goes once its original is back and passes its content check
    from calibench import integrity

    integrity.write_json({"rebuilt": True}, infer)
    infer.with_name(infer.name + ".changed.changed").write_text("{}")  # not ours: kept
    assert repair.clear_rebuilt(tmp_path) == [Path(f"{infer}{repair.SET_ASIDE}")]
    assert all(Path(f"{p}{repair.SET_ASIDE}").exists() for p in moved if p != infer)
    measures[0].write_text("{not json")  # back, but damaged: its set-aside copy stays
    assert repair.clear_rebuilt(tmp_path) == [] and Path(f"{measures[0]}{repair.SET_ASIDE}").exists()


def test_the_defaults_are_the_schemas():
    defaults = schema_defaults()
    assert defaults["recalibration"] == {"max_iterations": 2000, "tolerance": 1e-6, "hist_bins": 15,
                                         "spline_knots": 6, "odir": {"search": {
                                             "networks": 64, "folds": 5, "seed": 0, "max_iterations": 1000,
                                             "grid": [1e-7, 1e-5, 1e-3, 1e-1, 1e1, 1e3]}}}
    assert defaults["analysis"]["hcs_betas"] == [1, 2, 3]
    assert (defaults["batch_size"], defaults["loader_workers"], defaults["measure_group"]) == (1000, "auto", "auto")
    defaults["batch_size"] = 1  # a copy: the schema's defaults stay as they are
    assert schema_default("batch_size") == 1000
    config = {"stages": ["pre", "post", "vs", "ms", "dir", "iso", "hist", "spline"],
              "temperature": {"method": "nll", "val_fraction": 0.2, "seed": 42}}
    rec = settings.recalibration_settings(config)
    assert rec == {"max_iterations": 2000, "tolerance": 1e-6, "ms": {"lambda": None, "mu": None},
                   "dir": {"lambda": None, "mu": None}, "hist_bins": 15, "spline_knots": 6}
    search = settings.odir_search_settings(config)
    assert search == {"stages": ["ms", "dir"], "networks": 64, "folds": 5, "seed": 0,
                      "grid": [1e-7, 1e-5, 1e-3, 1e-1, 1e1, 1e3], "split": {"val_fraction": 0.2, "seed": 42},
                      "max_iterations": 1000, "tolerance": 1e-6, "fit_rules": settings.FIT_RULES}
    given = dict(config, recalibration={"max_iterations": 50, "odir": {"search": {"folds": 3, "grid": [1.0]}}})
    search = settings.odir_search_settings(given)
    assert (search["folds"], search["grid"], search["networks"], search["max_iterations"]) == (3, [1.0], 64, 50)
