"""The archive reader: one decompression per file for every dataset, tensor-exact against the official API.

Fixtures: the session's tiny mini benchmark (multi-seed TSS), and a real-shaped archive
built here: one TSS file with every hp, dataset and seed of a real ``-full`` file (a small
architecture, so it builds and reads fast: ~5 MB) and one real-size SSS file (~17 MB, the
real archive's mean).
"""

import bz2
import collections
import io
import os
import pickle
import random
import shutil

import pytest
import torch

from calibench.sources.nats.archive import (HPS, READ_LOG_ENV, ArchiveError, NatsArchive, arch_file, materialise, prefetch,
                               read_arch_file, unpickle_arch_file)
from calibench.inference.data import DATASETS
from calibench.sources.nats.minibench import (REAL_DATASETS, SSS_DIR, TSS_DIR, MiniBenchSpec, build_minibench,
                                 sample_real_size_archs)
from calibench.sources.nats.networks import build_network
from fixtures import SSS_SIMPLE, TSS_SIMPLE, require_shared

SMALL_TSS = "|nor_conv_1x1~0|+|skip_connect~0|none~1|+|none~0|avg_pool_3x3~1|skip_connect~2|"  # ~5 MB real-shaped


@pytest.fixture(scope="module")
def real_shaped(tmp_path_factory):
    real_sss = sample_real_size_archs("sss", random.Random(0), 1)
    return build_minibench(tmp_path_factory.mktemp("real_shaped"),
                           MiniBenchSpec(n_test=20, n_train=30, seed=2, real_size=True),
                           archs={"tss": [SMALL_TSS], "sss": real_sss})


def _raw(path):
    with bz2.open(path, "rb") as f:
        return pickle.load(f)


def _rewrite(path, change):
    record = _raw(path)
    change(record)
    with bz2.open(path, "wb") as f:
        pickle.dump(record, f, protocol=4)


def _assert_equal_to_the_official_api(directory, space, hps=None, indices=None):
    from nats_bench import create

    api = create(str(directory), space, fast_mode=True, verbose=False)
    compared = 0
    for index in indices or range(len(api)):
        for hp in hps or HPS[space]:
            archive = NatsArchive(directory, space, hp)
            info = api.query_meta_info_by_index(index, hp=hp)
            seeds = sorted(set.intersection(*(set(info.dataset_seed[d]) for d in DATASETS)))
            entries = archive.load(index, DATASETS, seeds=seeds)
            assert [(e.dataset, e.seed) for e in entries] == [(d, s) for d in DATASETS for s in seeds]
            for e in entries:
                # = api.get_net_param(index, dataset, seed, hp=hp), without one deep copy of the hp per call
                reference = info.get_net_param(e.dataset, e.seed)
                if compared == 0:
                    assert reference is api.get_net_param(index, e.dataset, e.seed, hp=hp) or all(
                        torch.equal(a, b) for a, b in zip(reference.values(),
                                                          api.get_net_param(index, e.dataset, e.seed, hp=hp).values()))
                assert list(e.state_dict) == list(reference)  # same keys, same order
                for key, tensor in reference.items():
                    ours = e.state_dict[key]
                    assert isinstance(ours, torch.Tensor), key
                    assert (ours.dtype, ours.shape) == (tensor.dtype, tensor.shape), key
                    assert torch.equal(ours, tensor), key
                run = info.all_results[(e.dataset, e.seed)]
                assert (e.index, e.arch_str, e.space, e.hp) == (index, api.arch(index), space, hp)
                assert e.num_classes == api.get_net_config(index, e.dataset)["num_classes"]
                assert (e.params, e.flops) == (float(run.params), float(run.flop))
                assert e.recorded_accuracy == run.eval_acc1es[f"ori-test@{run.epochs - 1}"] / 100
                assert e.source == str(arch_file(directory, index))
                build_network(space, e.arch_str, e.num_classes).load_state_dict(e.state_dict, strict=True)
                compared += 1
        api.arch2infos_dict.pop(index, None)
    return compared


def test_multi_seed_mini_archive_equals_the_official_api(tiny_minibench):
    # hp 200 with seeds 777 and 888 (the tiny archive stores weights for the default hp only);
    # architecture 2, the smallest file of the three
    assert _assert_equal_to_the_official_api(tiny_minibench / TSS_DIR, "tss", hps=["200"], indices=[2]) == 3 * 2


@pytest.mark.parametrize("space", ["tss", "sss"])
def test_real_shaped_archive_equals_the_official_api(real_shaped, space):
    directory = real_shaped / (TSS_DIR if space == "tss" else SSS_DIR)
    # Every state dict of the loadable datasets: TSS hp 12 (111) and hp 200 (777, 888, 999);
    # SSS hp 12 (777, 888, 999) and hp 90 (777).
    assert _assert_equal_to_the_official_api(directory, space) == 3 * 4


@pytest.mark.parametrize("space", ["tss", "sss"])
def test_real_shaped_files_have_the_real_layout(real_shaped, space):
    directory, sample = (real_shaped / TSS_DIR, TSS_SIMPLE) if space == "tss" else (real_shaped / SSS_DIR, SSS_SIMPLE)
    path = arch_file(directory, 0)
    if space == "sss":  # a real-size file: near the real archive's mean of about 17.4 MB
        assert 12e6 < path.stat().st_size < 25e6
    mini = unpickle_arch_file(read_arch_file(path))  # tensors lazy: the reader is checked against the API above
    assert type(mini) is collections.OrderedDict and list(mini) == list(HPS[space] if space == "tss" else ("01", "12", "90"))
    stored = 0
    for hp, record in mini.items():
        assert list(record["dataset_seed"]) == list(REAL_DATASETS)
        for (dataset, seed), result in record["all_results"].items():
            assert seed in record["dataset_seed"][dataset]
            last = result["epochs"] - 1
            assert len(result["train_acc1es"]) == result["epochs"] and f"ori-test@{last}" in result["eval_acc1es"]
            weights = result["net_state_dict"]
            if weights is not None:
                net = build_network(space, record["arch_str"], result["arch_config"]["class_num"])
                net.load_state_dict(materialise(weights), strict=True)
                stored += 1
    assert stored == {"tss": 17, "sss": 16}[space]
    if space == "sss":  # hp 01: records without weights, as in the real archive
        assert mini["01"]["clear_net_done"] and all(r["net_state_dict"] is None for r in mini["01"]["all_results"].values())
    require_shared()
    real = _raw(sample / "000011.pickle.pbz2")
    assert list(real) == list(mini)
    for hp in real:
        assert set(mini[hp]) == set(real[hp])
        assert {d: sorted(s) for d, s in mini[hp]["dataset_seed"].items()} == \
            {d: sorted(s) for d, s in real[hp]["dataset_seed"].items()}, hp
        assert set(mini[hp]["all_results"]) == set(real[hp]["all_results"]), hp
        for key, result in mini[hp]["all_results"].items():
            assert set(result) == set(real[hp]["all_results"][key]), (hp, key)
            assert set(result["eval_names"]) == set(real[hp]["all_results"][key]["eval_names"]), (hp, key)


def test_each_file_is_decompressed_once_for_every_dataset(tiny_minibench, tmp_path, monkeypatch):
    log = tmp_path / "reads.log"
    monkeypatch.setenv(READ_LOG_ENV, str(log))
    archive = NatsArchive(tiny_minibench / SSS_DIR, "sss")
    files = [str(arch_file(archive.archive_dir, i).resolve()) for i in range(3)]

    assert len(archive.load(1, DATASETS)) == 3
    assert log.read_text().splitlines() == [files[1]]
    log.unlink()
    for workers in (1, 2):  # a background thread; spawned loader processes
        loaded = list(prefetch(archive, [0, 1, 2], DATASETS, workers=workers))
        assert [(i, [e.dataset for e in entries]) for i, entries in loaded] == [(i, list(DATASETS)) for i in range(3)]
        assert sorted(log.read_text().splitlines()) == files, workers
        log.unlink()


def test_first_seed_is_per_dataset_and_listed_seeds_apply_to_every_dataset(tiny_minibench, tmp_path):
    directory = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, directory)

    def seeds_777_888_but_cifar100_only_888(record):
        runs, seeds = record["90"]["all_results"], record["90"]["dataset_seed"]
        for dataset in DATASETS:
            runs[(dataset, 888)] = dict(runs[(dataset, 777)], seed="0888")
            seeds[dataset] = [777, 888]
        del runs[("cifar100", 777)]
        seeds["cifar100"] = [888]

    _rewrite(arch_file(directory, 0), seeds_777_888_but_cifar100_only_888)  # the smallest file
    archive = NatsArchive(directory, "sss")
    entries = archive.load(0, ["cifar100", "cifar10"])
    assert [(e.dataset, e.seed) for e in entries] == [("cifar100", 888), ("cifar10", 777)]
    assert [(e.dataset, e.seed) for e in archive.load(0, ["cifar10", "cifar100"], seeds=[888])] == [
        ("cifar10", 888), ("cifar100", 888)]
    with pytest.raises(ArchiveError, match=r"000000\.pickle\.pbz2.*seed 777 not recorded for cifar100"):
        archive.load(0, ["cifar10", "cifar100"], seeds=[777])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "not_a_pickle", "not_a_dict", "no_hp"])
def test_damaged_files_raise_an_archive_error_naming_the_file(tiny_minibench, tmp_path, damage):
    directory = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, directory)
    path = arch_file(directory, 1)
    payload = path.read_bytes()
    path.write_bytes({
        "truncated": payload[: len(payload) // 2],
        "garbage": b"BZh91AY&SY corrupted",
        "not_a_pickle": bz2.compress(b"this is not a pickle"),
        "not_a_dict": bz2.compress(pickle.dumps([1, 2, 3], protocol=4)),
        "no_hp": bz2.compress(pickle.dumps(collections.OrderedDict(), protocol=4)),
    }[damage])
    archive = NatsArchive(directory, "sss")
    with pytest.raises(ArchiveError, match="cannot read") as caught:
        archive.load(1, DATASETS)
    assert caught.value.index == 1 and caught.value.path == str(path)
    (_, error), = prefetch(archive, [1], DATASETS, workers=1)
    assert isinstance(error, ArchiveError) and error.path == str(path)
    assert [e.dataset for e in archive.load(2, DATASETS)] == list(DATASETS)  # the others still load


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_foreign_global_is_refused_not_run(tiny_minibench, tmp_path):
    directory = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, directory)
    marker = tmp_path / "ran"

    def plant(record):
        record["90"]["all_results"][("cifar10", 777)]["latency"] = [_Exploit(marker)]

    _rewrite(arch_file(directory, 0), plant)
    archive = NatsArchive(directory, "sss")
    with pytest.raises(ArchiveError, match=r"000000\.pickle\.pbz2.*refusing global (posix|os)\.system"):
        archive.load(0, "cifar10")
    assert not marker.exists()


def test_a_foreign_global_inside_a_tensor_storage_is_refused(tiny_minibench, tmp_path):
    """The storage bytes are a pickle too: a crafted one must not reach torch.load."""
    directory = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, directory)
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    for part in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}, _Exploit(marker)):
        pickle.dump(part, buffer, protocol=2)

    class EvilStorage:
        def __reduce__(self):
            return torch.storage._load_from_bytes, (buffer.getvalue(),)

    class EvilTensor:
        def __reduce__(self):
            return torch._utils._rebuild_tensor_v2, (EvilStorage(), 0, (2,), (1,), False, collections.OrderedDict())

    def plant(record):
        record["90"]["all_results"][("cifar10", 777)]["net_state_dict"]["classifier.bias"] = EvilTensor()

    _rewrite(arch_file(directory, 0), plant)
    with pytest.raises(ArchiveError, match=r"000000\.pickle\.pbz2.*refusing global (posix|os)\.system"):
        NatsArchive(directory, "sss").load(0, "cifar10")
    assert not marker.exists()


@pytest.mark.parametrize("space", ["tss", "sss"])
def test_the_real_sample_files_read_with_only_the_allowed_globals(space):
    """NATS-Bench's published -simple files (numpy scalars, OrderedDicts): read as pickle reads
    them; they hold no weights, which is an ArchiveError naming the file."""
    require_shared()
    directory = TSS_SIMPLE if space == "tss" else SSS_SIMPLE
    path = arch_file(directory, 11)
    assert unpickle_arch_file(read_arch_file(path)) == _raw(path)
    archive = NatsArchive(directory, space)
    assert len(archive) == {"tss": 15625, "sss": 32768}[space]
    assert archive.seeds(11, "cifar100") == ([777, 888, 999] if space == "tss" else [777])
    with pytest.raises(ArchiveError, match=r"000011\.pickle\.pbz2.*no weights stored"):
        archive.load(11, DATASETS)


def test_tensors_of_every_dtype_and_layout_rebuild_exactly():
    """The storage parser against torch's own unpickling: dtypes, 0-d, empty, strided views, _metadata."""
    state_dict = build_network("sss", "8:16:8:8:8", 10).state_dict()  # an OrderedDict with _metadata
    tensors = {
        "float16": torch.tensor(3.5, dtype=torch.float16), "bool": torch.tensor([True, False, True]),
        "bfloat16": torch.randn(4).to(torch.bfloat16), "float64": torch.randn(2, 3, dtype=torch.float64),
        "int8": torch.tensor([-3, 4], dtype=torch.int8), "uint8": torch.arange(5, dtype=torch.uint8),
        "int16": torch.tensor([-300], dtype=torch.int16), "int32": torch.tensor([7, -7], dtype=torch.int32),
        "transposed": torch.arange(12.0).reshape(3, 4).t(), "sliced": torch.arange(10.0)[2:8:2], "empty": torch.empty(0, 5),
    }
    unpickled = unpickle_arch_file(pickle.dumps({"sd": state_dict, **tensors}, protocol=4))
    sd = materialise(unpickled.pop("sd"))
    assert type(sd) is collections.OrderedDict and sd._metadata == state_dict._metadata
    assert list(sd) == list(state_dict) and all(torch.equal(sd[k], v) for k, v in state_dict.items())
    back = materialise(unpickled)
    for name, tensor in tensors.items():
        ours = back[name]
        assert (ours.dtype, ours.shape, ours.stride()) == (tensor.dtype, tensor.shape, tensor.stride()), name
        assert torch.equal(ours, tensor), name
