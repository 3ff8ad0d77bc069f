"""Faults survived (issue 13): bad numbers in the logits store never crash a measurement chunk
(each has its documented outcome: a failure row naming the file, a NaN stage with its reason,
or a valid number); shards and tables record their provenance; every config the schema
rejects is named by key."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibench import integrity, layout
from calibench.store import logits as store
from calibench.config import settings as stage
from calibench.results import shards
from calibench.measure.stages import split_indices
from calibench.measure.jobs import measure_chunk_job

ROOT = Path(__file__).resolve().parents[1]
N, K = 500, 10


def _write(results: Path, index: int, z: np.ndarray, labels: np.ndarray) -> str:
    fields = {"test": "faults", "index": index}
    key = store.digest(fields)
    store.write_network_logits(layout.logits_path(results, "zoo", "", "cifar10", index), key=key, fields=fields,
                               space="zoo", hp="", dataset="cifar10", index=index, arch_str=f"m{index}",
                               labels=labels, seeds=[store.SeedLogits(0, np.nan, np.nan, np.nan, "test",
                                                                      {"test": z.astype(np.float32)})])
    return key


@pytest.fixture
def measured(tmp_path):
    """One chunk of six networks, three of them with bad numbers, measured in one batch."""
    rng = np.random.default_rng(0)
    _, test = split_indices(N, 0.2, 42)
    labels = rng.integers(0, K - 1, N)
    labels[test[:40]] = K - 1  # class 9 only in the test part: the validation split lacks it
    results = tmp_path / "results"
    store.write_labels(layout.labels_path(results, "cifar10", space="zoo"), labels, dataset="cifar10", key="k",
                       source="test")
    good = rng.normal(0, 2, size=(N, K))
    nan = good.copy()
    nan[[3, 17], 2] = np.nan
    inf = good.copy()
    inf[5, 0] = np.inf
    one_class = np.zeros((N, K))
    one_class[:, 4] = 6.0  # predicts class 4 for every image
    nets = {0: good, 1: nan, 2: good * 3, 3: inf, 4: one_class, 5: good / 2}
    keys = {i: _write(results, i, z, labels) for i, z in nets.items()}
    manifest = tmp_path / "infer.json"
    manifest.write_text(json.dumps({"indices": list(nets), "datasets": {"cifar10": {str(i): k for i, k in keys.items()}},
                                    "failures": []}))
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["bins"] = [5, 15]
    config["recalibration"]["odir"]["ms"] = config["recalibration"]["odir"]["dir"] = {"lambda": 1.0, "mu": 1.0}
    config["recalibration"]["max_iterations"] = 200
    def measure():
        return measure_chunk_job(stage.measurement_settings(config), {"measure_group": 8}, "zoo", "", "cifar10", 0,
                                 results, manifest, layout.labels_path(results, "cifar10", space="zoo"),
                                 tmp_path / "measure.json", progress=False)

    return results, measure(), measure


def test_non_finite_logits_are_failures_naming_the_file_and_the_rest_is_measured(measured):
    results, summary, _ = measured
    assert summary["failed"] == [1, 3]
    reasons = {f["arch_index"]: f for f in summary["failures"] if f["stage"] == "measurement"}
    assert "non-finite value nan at network 0, sample 3, class 2" in reasons[1]["reason"]
    assert "non-finite value inf at network 0, sample 5, class 0" in reasons[3]["reason"]
    assert reasons[1]["source"].endswith("space=zoo/dataset=cifar10/arch=000001.parquet")
    assert sorted(int(i) for i in summary["shards"]) == [0, 2, 4, 5]
    for i in (0, 2, 4, 5):
        assert layout.shard_path(results, "zoo", "", "cifar10", i).is_file()
    for i in (1, 3):
        assert not layout.shard_path(results, "zoo", "", "cifar10", i).exists()


def test_one_class_predictor_and_a_validation_split_without_a_class_give_numbers(measured):
    results, _, _ = measured
    long = pd.read_parquet(layout.shard_path(results, "zoo", "", "cifar10", 4))
    values = long.set_index(["stage", "metric", "bins"])["value"]
    # Predicting one class with confidence c everywhere: one bin, ECE = c - accuracy on the test part.
    labels = store.read_labels(layout.labels_path(results, "cifar10", space="zoo")).labels
    _, test = split_indices(N, 0.2, 42)
    confidence = np.exp(6.0) / (np.exp(6.0) + K - 1)
    for b in (5, 15):
        assert values.loc[("pre", "ece", b)] == pytest.approx(confidence - np.mean(labels[test] == 4), abs=1e-6)
    ece = long[(long["metric"] == "ece") & (long["bins"] == 15)].set_index("stage")["value"]
    assert set(ece.index) == {"pre", "post", "vs", "ms", "dir", "iso", "hist", "spline"}
    assert np.isfinite(ece).all()
    # Isotonic and histogram binning never saw class 9 in the validation split: they give it
    # probability 0, so their NLL is +inf on test images of class 9 (a valid number, not a crash).
    good = pd.read_parquet(layout.shard_path(results, "zoo", "", "cifar10", 0))
    nll = good[good["metric"] == "nll"].set_index("stage")["value"]
    assert nll["iso"] == np.inf and nll["hist"] == np.inf
    assert np.isfinite(nll[["pre", "post", "vs", "ms", "dir"]]).all()


def test_shards_and_tables_record_their_provenance_and_a_mixed_table_says_so(measured, caplog):
    import pyarrow.parquet as pq

    from calibench.results import provenance
    from calibench.results.provenance import provenance_summary
    from calibench.results.tables import build_table, table_metadata

    results, summary, _ = measured
    recorded = provenance.of_shard(pq.read_schema(layout.shard_path(results, "zoo", "", "cifar10", 0)).metadata)
    import numpy
    import torch

    from calibench import __version__
    assert recorded["calibench_version"] == __version__ and recorded["device"] == "cpu"
    assert recorded["numpy"] == numpy.__version__ and recorded["torch"] == torch.__version__
    assert recorded["logits_written_by"] == __version__
    assert recorded["git_commit"] is None or len(recorded["git_commit"].removesuffix("-dirty")) == 40
    doc = {"space": "zoo", "selected": [0, 1, 2, 3, 4, 5], "arch_strs": [f"m{i}" for i in range(6)],
           "representatives": None}
    (results / "population").mkdir()
    (results / "population" / "zoo.json").write_text(json.dumps(doc))
    manifest = results.parent / "measure.json"
    out = results / "tables" / "zoo_cifar10.parquet"
    build_table("zoo", "", "cifar10", results, out, [manifest])
    groups = table_metadata(out)["provenance"]
    assert recorded["config"] is None  # measured outside the workflow
    assert groups == [{"provenance": provenance.split(recorded)[0], "rows": 4}]
    # One shard as an older calibench wrote it (no provenance): the table says how many rows of each.
    path = layout.shard_path(results, "zoo", "", "cifar10", 5)
    table = pq.read_table(path)
    metadata = {k: v for k, v in table.schema.metadata.items()
                if k not in (provenance.PROVENANCE_KEY, integrity.SEALED_MARK)}  # nor a seal
    pq.write_table(table.replace_schema_metadata(metadata), path)
    with caplog.at_level("WARNING"):
        build_table("zoo", "", "cifar10", results, out, [manifest])
    assert "rows measured with 2 different provenances: 3 rows" in caplog.text
    text = provenance_summary(out)
    assert "4 rows; 2 distinct provenances (MIXED)" in text and "1 rows measured with" in text
    assert "written before shards recorded their provenance" in text


def test_shards_and_tables_record_the_source_file_and_the_config(tmp_path, monkeypatch):
    """Each row: size and mtime of the file its logits came from; each shard and table: the config
    files (SHA-256) and effective config it ran under. An older shard without the source columns
    stays valid (nothing recomputed) and reads as null."""
    import os

    import pyarrow.parquet as pq

    from calibench.results import provenance
    from calibench.results.provenance import provenance_summary
    from calibench.results.tables import build_table, table_metadata

    rng = np.random.default_rng(1)
    labels = rng.integers(0, K, N)
    results = tmp_path / "results"
    store.write_labels(layout.labels_path(results, "cifar10", space="zoo"), labels, dataset="cifar10", key="k",
                       source="test")
    archives = {}
    for i in range(3):
        archives[i] = tmp_path / f"{i:06d}.pickle.pbz2"
        archives[i].write_bytes(bytes(1000 + i))
        os.utime(archives[i], (1_600_000_000 + i, 1_600_000_000 + i))
    keys = {}
    for i, source in archives.items():
        fields = {"test": "sources", "index": i}
        keys[i] = store.digest(fields)
        store.write_network_logits(layout.logits_path(results, "zoo", "", "cifar10", i), key=keys[i], fields=fields,
                                   space="zoo", hp="", dataset="cifar10", index=i, arch_str=f"m{i}", labels=labels,
                                   seeds=[store.SeedLogits(0, np.nan, np.nan, np.nan, str(source),
                                                           {"test": rng.normal(0, 2, (N, K)).astype(np.float32)})])
    for i in archives:  # the archive changes after its logits were written: the logits keep the old stat
        archives[i].write_bytes(bytes(5))
    manifest = tmp_path / "infer.json"
    manifest.write_text(json.dumps({"indices": list(archives), "datasets": {"cifar10": {str(i): k for i, k in keys.items()}},
                                    "failures": []}))
    config_file = tmp_path / "my.yaml"
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config.update(bins=[5, 15], stages=["pre", "post"])
    config_file.write_text(yaml.safe_dump(config))
    record = provenance.config_record([config_file], config)
    monkeypatch.setenv(provenance.CONFIG_ENV, json.dumps(record))
    summary = measure_chunk_job(stage.measurement_settings(config), {"measure_group": 1}, "zoo", "", "cifar10", 0,
                                results, manifest, layout.labels_path(results, "cifar10", space="zoo"),
                                tmp_path / "measure.json", progress=False)
    assert summary["failed"] == []
    import hashlib

    assert record["files"] == [{"path": str(config_file), "sha256": hashlib.sha256(config_file.read_bytes()).hexdigest()}]
    for i in archives:
        path = layout.shard_path(results, "zoo", "", "cifar10", i)
        long = pd.read_parquet(path)
        assert (long["source_bytes"] == 1000 + i).all()
        assert (long["source_mtime"] == f"2020-09-13T12:26:{40 + i:02d}+00:00").all()
        assert provenance.of_shard(pq.read_schema(path).metadata)["config"] == record
    # shard 2 as an older calibench wrote it: no source columns, no config
    path = layout.shard_path(results, "zoo", "", "cifar10", 2)
    old = pq.read_table(path).drop_columns(["source_bytes", "source_mtime"])
    meta = provenance.of_shard(old.schema.metadata)
    del meta["config"]
    unsealed = {k: v for k, v in old.schema.metadata.items() if k != integrity.SEALED_MARK}  # nor a seal
    pq.write_table(old.replace_schema_metadata({**unsealed, provenance.PROVENANCE_KEY: provenance.dumps(meta)}), path)
    assert shards.is_valid_shard(path, summary["shards"]["2"])
    (results / "population").mkdir()
    (results / "population" / "zoo.json").write_text(json.dumps({"space": "zoo", "selected": [0, 1, 2],
                                                                  "arch_strs": ["m0", "m1", "m2"],
                                                                  "representatives": None}))
    out = results / "tables" / "zoo_cifar10.parquet"
    wide = build_table("zoo", "", "cifar10", results, out, [tmp_path / "measure.json"]).set_index("arch_index")
    assert wide.loc[0, "source_bytes"] == 1000 and wide.loc[1, "source_bytes"] == 1001
    assert np.isnan(wide.loc[2, "source_bytes"]) and pd.isna(wide.loc[2, "source_mtime"])
    meta = table_metadata(out)
    assert len(meta["provenance"]) == 1 and meta["provenance"][0]["rows"] == 3  # same software: not mixed
    assert meta["configs"] == [{"config": record, "rows": 2}, {"config": None, "rows": 1}]
    assert meta["sources"] == {"rows": 2, "missing": 1, "first_mtime": "2020-09-13T12:26:40+00:00",
                               "last_mtime": "2020-09-13T12:26:41+00:00"}
    text = provenance_summary(out)
    assert f"2 rows under config {record['effective_sha256'][:16]}: {config_file}" in text
    assert "1 rows: config not recorded" in text and "2 rows recorded, 1 without" in text


# ---------------------------------------------------------------- bad config, property-based

def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, node


DEFAULT = yaml.safe_load((ROOT / "config/config.yaml").read_text())
LEAVES = [(path, value) for path, value in _leaves(DEFAULT)]
NUMERIC = [path for path, value in LEAVES if isinstance(value, (int, float)) and not isinstance(value, bool)
           and path != ("loader_workers",)]


def _mutated(path, value):
    import copy

    config = copy.deepcopy(DEFAULT)
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return config


def _schema_error(config):
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))
    except WorkflowError as exc:
        return str(exc)
    return None


def test_every_config_the_schema_rejects_names_the_key():
    from hypothesis import given, settings, strategies as st

    values = st.one_of(st.text(max_size=5), st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.none(),
                       st.booleans(), st.lists(st.integers(-3, 3), max_size=3), st.just({"x": 1}))

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(leaf=st.sampled_from(LEAVES), value=values)
    def check(leaf, value):
        path, _ = leaf
        error = _schema_error(_mutated(path, value))
        if error is not None:  # rejected: the message points at the key
            instance = "".join(f"[{k!r}]" for k in path)
            assert f"On instance{instance}" in error or f"On instance{instance[:instance.rfind('[')]}" in error, \
                (path, value, error[-500:])

    check()


def test_a_number_replaced_by_text_is_always_rejected():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(path=st.sampled_from(NUMERIC), text=st.text(min_size=1, max_size=8))
    def check(path, text):
        error = _schema_error(_mutated(path, text))
        assert error is not None, (path, text)
        assert "".join(f"[{k!r}]" for k in path) in error

    check()


def test_nan_or_infinity_at_any_numeric_key_is_a_config_error_naming_it():
    # JSON Schema passes NaN through every minimum and maximum: calibench's check refuses any
    # non-finite number, wherever it is, with its key (the file: tests/test_config_messages.py)
    from calibench.config.check import ConfigError, check

    floats = [float("nan"), float("inf"), float("-inf")]
    for n, path in enumerate(NUMERIC):
        value = floats[n % 3]
        with pytest.raises(ConfigError) as caught:
            check(_mutated(path, value), schema=ROOT / "workflow/schemas/config.schema.yaml")
        assert f"  {'.'.join(map(str, path))} = {value!r}: not a finite number" in str(caught.value), str(caught.value)
    with pytest.raises(ConfigError, match=r"  bins.2 = nan: not a finite number"):  # inside a list too
        check(_mutated(("bins",), [5, 15, float("nan")]), schema=ROOT / "workflow/schemas/config.schema.yaml")


def test_a_truncated_shard_is_measured_again_alone_and_equals_the_original(measured):
    results, _, measure_again = measured
    path = layout.shard_path(results, "zoo", "", "cifar10", 2)
    before = pd.read_parquet(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a shard cut short (a full disk, a copy interrupted)
    assert not shards.is_valid_shard(path, before["config_hash"].iloc[0])
    summary = measure_again()
    assert (summary["computed"], summary["skipped"]) == (1, 3)  # the damaged shard only; 1 and 3 fail again
    pd.testing.assert_frame_equal(pd.read_parquet(path), before, check_exact=True)


# ---------------------------------------------------------------- disk full

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only): a real full disk, not a mock."""
    import os
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_full_disk_names_the_file_leaves_no_partial_file_and_the_rerun_completes(small_disk, tmp_path):
    import os
    import subprocess
    import sys

    from calibench.sources import write_labels, write_population

    rng = np.random.default_rng(0)
    zoo = tmp_path / "zoo"
    (zoo / "cifar10").mkdir(parents=True)
    y = rng.integers(0, K, 400)
    names = [f"m{i}" for i in range(8)]
    for name in names:
        np.savez(zoo / "cifar10" / f"{name}.npz", logits=rng.normal(size=(400, K)).astype(np.float32), labels=y)
    (zoo / "models.csv").write_text("model\n" + "\n".join(names) + "\n")
    results = small_disk / "results"
    settings = {"source": "logits", "path": str(zoo), "datasets": ["cifar10"], "chunk_size": 8}
    write_population(settings, "zoo", results / "population" / "zoo.json")
    write_labels(settings, "cifar10", layout.labels_path(results, "cifar10", space="zoo"), space="zoo")
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler = small_disk / "filler"
    filler.write_bytes(bytes(max(0, free - 3 * 20_000)))  # room for about two logits files
    job = [sys.executable, "-m", "calibench.run.cli", "infer-chunk", "--settings",
           json.dumps({**settings, "inference_version": stage.INFERENCE_VERSION}), "--target", "zoo", "--chunk", "0",
           "--results", str(results), "--manifest", str(results / "chunks" / "zoo" / "chunk00000.json"), "--quiet"]
    full = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert full.returncode != 0
    assert "No space left on device (writing " in full.stderr and "space=zoo/dataset=cifar10/arch=" in full.stderr
    directory = results / "logits" / "space=zoo" / "dataset=cifar10"
    left = sorted(p.name for p in directory.iterdir())
    assert left and all(n.startswith("arch=") and n.endswith(".parquet") for n in left), left  # no temporary files
    kept = {n: (directory / n).stat().st_mtime_ns for n in left}
    for n in left:  # every file a reader can see is whole
        assert store.read_network_logits(directory / n).seeds[0].sets["test"].shape == (400, K)
    assert not (results / "chunks").exists() or not any((results / "chunks").rglob("*.json"))
    filler.unlink()
    again = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((results / "chunks" / "zoo" / "chunk00000.json").read_text())
    assert (summary["skipped"], summary["computed"], summary["failures"]) == (len(kept), 8 - len(kept), [])
    for n, mtime in kept.items():
        assert (directory / n).stat().st_mtime_ns == mtime  # nothing computed twice

    # The same for the shards of the measurement job, then for the table.
    def fill():
        stat = os.statvfs(small_disk)
        filler.write_bytes(bytes(max(0, stat.f_bavail * stat.f_frsize - 12_000)))

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config.update(bins=[5, 15], stages=["pre", "post"])
    measure = [sys.executable, "-m", "calibench.run.cli", "measure-chunk", "--settings",
               json.dumps(stage.measurement_settings(config)), "--target", "zoo", "--dataset", "cifar10", "--chunk", "0",
               "--results", str(results), "--logits-manifest", str(results / "chunks" / "zoo" / "chunk00000.json"),
               "--labels", str(layout.labels_path(results, "cifar10", space="zoo")),
               "--manifest", str(results / "chunks" / "measure" / "chunk00000.json"), "--quiet"]
    fill()
    full = subprocess.run(measure, capture_output=True, text=True, timeout=300)
    assert full.returncode != 0 and "No space left on device (writing " in full.stderr
    # a shard, or the fit-store file written just before it (issue 35)
    assert any(f"{d}/space=zoo/dataset=cifar10/arch=" in full.stderr for d in ("shards", "fits")), full.stderr[-2000:]
    shard_dir = results / "shards" / "space=zoo" / "dataset=cifar10"
    written = {p.name: p.stat().st_mtime_ns for p in shard_dir.iterdir()} if shard_dir.exists() else {}
    assert all(n.startswith("arch=") for n in written) and len(written) < 8
    filler.unlink()
    again = subprocess.run(measure, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((results / "chunks" / "measure" / "chunk00000.json").read_text())
    assert (summary["skipped"], summary["computed"]) == (len(written), 8 - len(written))
    assert all((shard_dir / n).stat().st_mtime_ns == m for n, m in written.items())

    table = [sys.executable, "-m", "calibench.run.cli", "build-table", "--target", "zoo", "--dataset", "cifar10",
             "--results", str(results), "--out", str(results / "tables" / "zoo_cifar10.parquet"),
             "--manifests", str(results / "chunks" / "measure" / "chunk00000.json")]
    stat = os.statvfs(small_disk)
    filler.write_bytes(bytes(max(0, stat.f_bavail * stat.f_frsize - 4_000)))
    full = subprocess.run(table, capture_output=True, text=True, timeout=300)
    assert full.returncode != 0 and "No space left on device (writing " in full.stderr and "zoo_cifar10.parquet" in full.stderr
    assert not (results / "tables").exists() or not any((results / "tables").iterdir())  # no partial table
    filler.unlink()
    again = subprocess.run(table, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(pd.read_parquet(results / "tables" / "zoo_cifar10.parquet")) == 8


# ---------------------------------------------------------------- paths and columns named before any job

def test_every_path_and_column_the_config_names_is_checked_by_its_key(tmp_path, monkeypatch):
    """Issue 34: calibench.config.inputs, as the Snakefile calls it before any job."""
    import yaml

    monkeypatch.chdir(tmp_path)  # the config's relative paths: nothing there, whatever `make run` built in the checkout

    from calibench.config.check import schema_defaults
    from calibench.config.inputs import check_inputs

    config = {**schema_defaults(), **yaml.safe_load((Path(__file__).parents[1] / "config" / "config.yaml").read_text())}
    config["minibench"] = {**config["minibench"], "build": False}
    results = tmp_path / "results"
    found = check_inputs(config, results)  # a fresh run, nothing there: each key named
    shown = "; ".join(found.stop)
    for key in ("archives.tss", "archives.sss", "datasets_root", "ood.svhn"):
        assert f"{key} = " in shown, shown
    assert found.notes == []
    # finished: the populations are written, the logits store stands in: one line, no stop
    for space in ("tss", "sss"):
        path = layout.population_path(results, space)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    found = check_inputs(config, results)
    assert found.stop == [] and [n.split(" = ")[0] for n in found.notes] == [
        "archives.sss", "archives.tss", "datasets_root", "ood.svhn"]
    # what no stored result stands in for stops the run whatever is written
    config["robustness"] = {**(config.get("robustness") or {}), "path": str(tmp_path / "robust.csv"), "key": "arch_str"}
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "models.csv").write_text("model,family\nm0,a\n")
    config["populations"] = {"gone": {"source": "logits", "path": str(tmp_path / "gone")}}
    with pytest.raises(ValueError, match=f"populations.gone.path: {tmp_path / 'gone'} is not a directory"):
        check_inputs(config, results)
    config["populations"] = {"zoo": {"source": "logits", "path": str(tmp_path / "zoo"), "group_by": ["family", "loss"]}}
    found = check_inputs(config, results)
    assert f"robustness.path = {tmp_path / 'robust.csv'}: not found" in found.stop[0], found.stop
    assert f"populations.zoo.group_by: loss: not a column of {tmp_path / 'zoo' / 'models.csv'} (its columns: model, " \
           f"family)" in found.stop, found.stop
    (tmp_path / "robust.csv").write_text("arch_index,clean_acc\n0,1.0\n")
    found = check_inputs(config, results)
    assert any(s.startswith("robustness.key = arch_str: ") and "no column arch_str" in s for s in found.stop), found.stop
