"""The logits store: exact round trip, labels once, readable without calibench, keys."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from calibench.integrity import DamagedFile
from calibench import layout
from calibench.store import logits as store
from calibench.sources.nats import jobs as nats_jobs
from calibench.config.settings import INFERENCE_VERSION, inference_settings

META = "a" * 64  # the archive's meta SHA-256, as the population records it


def _config(root):
    """A configuration whose evaluation files exist (the key hashes their bytes)."""
    for name, content in (("cifar-10-batches-py/test_batch", b"c10"), ("cifar-100-python/test", b"c100"),
                          ("ImageNet16/val_data", b"in16"), ("svhn/test_32x32.mat", b"svhn")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return {"archives": {"tss": "/data/NATS-tss-v1_0-3ffb9-full", "sss": "/data/NATS-sss-v1_0-50262-full"},
            "seeds": "first", "datasets": ["cifar10", "cifar100"], "datasets_root": str(root),
            "ood": {"sets": ["gaussian_noise", "svhn"], "noise_severity": 5, "svhn": str(root / "svhn/test_32x32.mat")}}


def _seed(rng, seed, n, k, ood=()):
    sets = {store.TEST_SET: (rng.normal(size=(n, k)) * 4).astype(np.float32)}
    sets.update({f"ood_{name}": (rng.normal(size=(n + 7, k)) * 4).astype(np.float32) for name in ood})
    return store.SeedLogits(seed, 0.5, 80.0, 0.91, "/data/000012.pickle.pbz2", sets)


def _write(tmp_path, rng, seeds, labels, dataset="cifar10", index=12):
    settings = inference_settings(_config(tmp_path), "tss")
    key = nats_jobs.logits_key(settings, "tss", "200", dataset, index, "|a~0|", META)
    fields = nats_jobs.key_fields(settings, "tss", "200", dataset, index, "|a~0|", META)
    path = layout.logits_path(tmp_path, "tss", "200", dataset, index)
    store.write_network_logits(path, key=key, fields=fields, space="tss", hp="200", dataset=dataset, index=index,
                               arch_str="|a~0|", labels=labels, seeds=seeds)
    return path, key


def test_round_trip_is_bit_identical_for_every_seed_and_set(tmp_path, rng):
    labels = rng.integers(0, 10, size=50)
    seeds = [_seed(rng, 777, 50, 10, ood=("gaussian_noise", "svhn")), _seed(rng, 888, 50, 10, ood=("gaussian_noise", "svhn"))]
    seeds[0].sets[store.TEST_SET][3, 4] = np.float32(np.nextafter(np.float32(1), np.float32(2)))  # last-bit detail
    path, key = _write(tmp_path, rng, seeds, labels)
    back = store.read_network_logits(path)
    assert back.key == key and [s.seed for s in back.seeds] == [777, 888]
    for written, read in zip(seeds, back.seeds):
        assert set(read.sets) == {"test", "ood_gaussian_noise", "ood_svhn"}
        for name, values in written.sets.items():
            assert read.sets[name].dtype == np.float32
            assert read.sets[name].tobytes() == values.tobytes(), name  # bit-identical
        assert (read.params, read.flops, read.recorded_accuracy) == (0.5, 80.0, 0.91)
    assert back.meta["labels_sha256"] == store.labels_sha256(labels)


def test_readable_with_pyarrow_and_numpy_as_the_readme_shows(tmp_path, rng):
    labels = rng.integers(0, 100, size=40)
    seeds = [_seed(rng, 777, 40, 100)]
    path, _ = _write(tmp_path, rng, seeds, labels, dataset="cifar100")
    labels_file = store.write_labels(layout.labels_path(tmp_path, "cifar100"), labels, dataset="cifar100", key="k",
                                     source="test")
    # docs/running.md, "The logits store": no calibench involved below.
    t = pq.read_table(path, filters=[("set", "=", "test"), ("seed", "=", 777)])
    logits = np.column_stack([t[c].to_numpy() for c in t.column_names if c.startswith("logit_")])
    y = pq.read_table(labels_file)["label"].to_numpy()
    meta = json.loads(pq.read_schema(path).metadata[b"calibench"])
    np.testing.assert_array_equal(logits, seeds[0].sets["test"])
    np.testing.assert_array_equal(y, labels)
    assert meta["arch_str"] == "|a~0|" and meta["num_classes"] == 100 and meta["networks"][0]["seed"] == 777
    assert logits.shape == (40, 100) and logits.dtype == np.float32


def test_duckdb_reads_the_store_as_one_hive_dataset(tmp_path, rng):
    import duckdb

    labels = rng.integers(0, 10, size=30)
    for index in (3, 4):
        _write(tmp_path, rng, [_seed(rng, 777, 30, 10)], labels, index=index)
    con = duckdb.connect()
    rows = con.execute(f"SELECT space, dataset, arch_index, count(*) AS n, avg(logit_0) AS m FROM read_parquet("
                       f"'{tmp_path}/logits/space=*/hp=*/dataset=*/*.parquet', hive_partitioning = true) "
                       "WHERE set = 'test' GROUP BY ALL ORDER BY arch_index").fetchall()
    assert [r[:4] for r in rows] == [("tss", "cifar10", 3, 30), ("tss", "cifar10", 4, 30)]


def test_labels_are_stored_once_and_checked(tmp_path, rng):
    labels = rng.integers(0, 120, size=25)
    path = store.write_labels(layout.labels_path(tmp_path, "ImageNet16-120"), labels, dataset="ImageNet16-120",
                              key="k", source="x")
    back = store.read_labels(path)
    np.testing.assert_array_equal(back.labels, labels)
    assert back.meta["n"] == 25 and back.meta["labels_sha256"] == store.labels_sha256(labels)
    assert sorted(p.name for p in (tmp_path / "logits" / "labels").iterdir()) == ["dataset=ImageNet16-120.parquet"]


def test_the_key_follows_exactly_what_changes_logits(tmp_path):
    base = inference_settings(_config(tmp_path), "tss")

    def key(settings=base, hp="200", dataset="cifar10", index=5, meta=META):
        return nats_jobs.logits_key(settings, "tss", hp, dataset, index, "|a~0|", meta)

    k = key()
    assert k == key(dict(base))  # stable
    changed = {
        "archive release": {**base, "archive": "/data/NATS-tss-v1_1-xxxxx-full"},
        "seeds": {**base, "seeds": [777, 888]},
        "ood severity": {**base, "ood": {**base["ood"], "noise_severity": 3}},
    }
    for what, settings in changed.items():
        assert key(settings) != k, what
    assert key(hp="12") != k and key(dataset="cifar100") != k and key(index=6) != k and key(meta="b" * 64) != k
    # The same archive and datasets elsewhere: the same logits (moving data does not recompute them).
    moved = tmp_path / "moved"
    moved.mkdir()
    _config(moved)
    elsewhere = {**base, "archive": "/scratch/NATS-tss-v1_0-3ffb9-full", "datasets_root": str(moved),
                 "ood": {**base["ood"], "svhn": str(moved / "svhn/test_32x32.mat")}}
    assert key(elsewhere) == k
    # Other file content under the same path: other logits.
    (tmp_path / "cifar-10-batches-py/test_batch").write_bytes(b"other test set")
    assert key() != k
    # OoD settings reach CIFAR-10 only; the datasets list is not part of a file's key.
    c100 = key(dataset="cifar100")
    assert key(changed["ood severity"], dataset="cifar100") == c100
    assert key({**base, "datasets": ["cifar100"]}, dataset="cifar100") == c100
    assert nats_jobs.key_fields(base, "tss", "200", "cifar10", 5, "|a~0|", META)["inference_version"] == INFERENCE_VERSION


def test_truncated_or_foreign_files_are_not_valid(tmp_path, rng):
    labels = rng.integers(0, 10, size=20)
    path, key = _write(tmp_path, rng, [_seed(rng, 777, 20, 10)], labels)
    assert store.is_valid(path, key) and not store.is_valid(path, "0" * 16)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert not store.is_valid(path, key)
    with pytest.raises(DamagedFile, match=f"{path.name}: damaged"):
        store.read_network_logits(path)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pq.read_table(store.write_labels(tmp_path / "l.parquet", labels, dataset="cifar10", key="k",
                                                    source="x")).replace_schema_metadata(None), foreign)
    assert store.stored_key(foreign) is None
    with pytest.raises(store.StoreError, match="not a calibench store file"):
        store.read_network_logits(foreign)


def test_list_store_reads_footers(tmp_path, rng):
    labels = rng.integers(0, 10, size=20)
    for index in (1, 2, 3):
        _write(tmp_path, rng, [_seed(rng, 777, 20, 10, ood=("svhn",))], labels, index=index)
    df = store.list_store(tmp_path)
    assert list(df["arch_index"]) == [1, 2, 3] and set(df["sets"]) == {"test,ood_svhn"}
    assert (df["bytes"] > 0).all() and df["key"].nunique() == 3


def _produce_three(rng):
    def produce(todo):
        for index in sorted(todo):
            sets = {store.TEST_SET: rng.normal(size=(20, 4)).astype(np.float32)}
            yield index, "cifar10", [store.SeedLogits(0, 1.0, 2.0, 0.5, f"src{index}", sets)]
    return produce


def test_the_store_is_written_in_the_background_and_every_file_is_there_before_the_manifest(tmp_path, rng):
    import threading

    from calibench.inference.jobs import store_chunk_logits

    threads = set()
    original = store.write_network_logits

    def recording(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return original(*args, **kwargs)

    labels = rng.integers(0, 4, 20)
    fields = {(i, "cifar10"): {"i": i} for i in range(3)}
    results, manifest = tmp_path / "results", tmp_path / "infer.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "write_network_logits", recording)
        summary = store_chunk_logits("zoo", "", 0, results, manifest, [0, 1, 2], ["cifar10"], fields,
                                     ["a", "b", "c"], lambda d: labels, _produce_three(rng), progress=False)
    assert threads and all(name.startswith("store-writer") for name in threads)
    assert summary["computed"] == 3 and json.loads(manifest.read_text())["computed"] == 3
    for i in range(3):
        assert store.is_valid(layout.logits_path(results, "zoo", "", "cifar10", i), store.digest({"i": i}))


def test_a_background_write_that_fails_fails_the_job_and_writes_no_manifest(tmp_path, rng):
    from calibench.inference.jobs import store_chunk_logits

    original = store.write_network_logits

    def full_disk(path, **kwargs):
        if kwargs["index"] == 1:
            raise OSError(28, "No space left on device", str(path))
        return original(path, **kwargs)

    labels = rng.integers(0, 4, 20)
    fields = {(i, "cifar10"): {"i": i} for i in range(3)}
    results, manifest = tmp_path / "results", tmp_path / "infer.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "write_network_logits", full_disk)
        with pytest.raises(OSError, match="No space left on device"):
            store_chunk_logits("zoo", "", 0, results, manifest, [0, 1, 2], ["cifar10"], fields, ["a", "b", "c"],
                               lambda d: labels, _produce_three(rng), progress=False)
    assert not manifest.exists()
    assert store.is_valid(layout.logits_path(results, "zoo", "", "cifar10", 0), store.digest({"i": 0}))
    assert not layout.logits_path(results, "zoo", "", "cifar10", 1).exists()
