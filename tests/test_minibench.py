"""The mini benchmark: real on-disk formats, read by the official API, deterministic, varied."""

import bz2
import hashlib
import pickle

import numpy as np
import pytest
import torch

from calibench.inference import data as data_io
from calibench.run.cli import main as cli_main
from calibench.sources.nats.minibench import SSS_DIR, TSS_DIR, MiniBenchSpec, build_minibench
from fixtures import SSS_SIMPLE, TSS_SIMPLE, require_shared


def _load(path):
    with bz2.open(path, "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize("space", ["tss", "sss"])
def test_structure_matches_the_real_sample_archives_key_by_key(tiny_minibench, space):
    require_shared()
    real_dir, mini_dir = (TSS_SIMPLE, tiny_minibench / TSS_DIR) if space == "tss" else (SSS_SIMPLE, tiny_minibench / SSS_DIR)
    real_meta, mini_meta = _load(real_dir / "meta.pickle.pbz2"), _load(mini_dir / "meta.pickle.pbz2")
    assert set(mini_meta) == set(real_meta)
    assert mini_meta["total_archs"] == len(mini_meta["meta_archs"]) == 3
    assert mini_meta["arch2infos"] is None and mini_meta["evaluated_indexes"] == set()

    real, mini = _load(real_dir / "000011.pickle.pbz2"), _load(mini_dir / "000001.pickle.pbz2")
    assert type(mini) is type(real)  # OrderedDict
    assert list(mini) == list(real)  # the same hp keys, in the same order
    for hp in real:
        assert set(mini[hp]) == set(real[hp]), hp
        assert mini[hp]["arch_index"] == 1
        assert mini[hp]["arch_str"] == mini_meta["meta_archs"][1]
        for (dataset, seed), result in mini[hp]["all_results"].items():
            assert dataset in {"cifar10", "cifar100", "ImageNet16-120"}
            assert isinstance(seed, int) and seed in mini[hp]["dataset_seed"][dataset]
            real_seed = min(real[hp]["dataset_seed"][dataset])
            real_result = real[hp]["all_results"][(dataset, real_seed)]
            assert set(result) == set(real_result), (hp, dataset)
            assert set(result["arch_config"]) == set(real_result["arch_config"])
            assert result["eval_names"] and set(result["eval_names"]) == set(real_result["eval_names"])
            for key in ("params", "flop"):
                assert isinstance(result[key], float)
            assert isinstance(result["seed"], str) and int(result["seed"]) == seed
            assert result["epochs"] == real_result["epochs"]
            assert f"ori-test@{result['epochs'] - 1}" in result["eval_acc1es"]
            weights = result["net_state_dict"]
            if hp not in ("200", "90"):
                assert weights is None  # stored for the default schedules only
            else:
                assert all(isinstance(v, torch.Tensor) for v in weights.values())


def test_official_api_reads_it(tiny_minibench):
    from nats_bench import create

    api = create(str(tiny_minibench / TSS_DIR), "tss", fast_mode=True, verbose=False)
    assert len(api) == 3
    weights = api.get_net_param(2, "cifar100", None, hp="200")
    assert sorted(weights) == [777, 888]
    assert weights[777]["classifier.weight"].shape == (100, 64)
    config = api.get_net_config(2, "ImageNet16-120")
    assert config["name"] == "infer.tiny" and config["num_classes"] == 120
    api = create(str(tiny_minibench / SSS_DIR), "sss", fast_mode=True, verbose=False)
    weights = api.get_net_param(0, "cifar10", 777, hp="90")
    assert weights["classifier.weight"].shape[0] == 10


def test_datasets_in_real_formats(tiny_minibench):
    root = tiny_minibench / "datasets"
    c10 = data_io.load_eval_set("cifar10", root)
    c100 = data_io.load_eval_set("cifar100", root)
    inet = data_io.load_eval_set("ImageNet16-120", root)
    assert c10.images.shape == (120, 3, 32, 32) and c100.images.shape == (120, 3, 32, 32)
    assert inet.images.shape == (120, 3, 16, 16)  # the distractor labels > 120 were dropped
    assert c100.labels.max() < 100 and inet.labels.max() < 120
    svhn = data_io.load_svhn_test(root / "svhn" / "test_32x32.mat")
    assert svhn.images.shape[1:] == (3, 32, 32)


def _canonical(obj, h):
    """Feed a decoded object into a hash: tensors and arrays by dtype, shape and bytes."""
    if isinstance(obj, torch.Tensor):
        obj = obj.numpy()
    if isinstance(obj, np.ndarray):
        h.update(f"{obj.dtype}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _canonical(obj[key], h)
    elif isinstance(obj, (list, tuple, set)):
        for item in sorted(obj) if isinstance(obj, set) else obj:
            _canonical(item, h)
    else:
        h.update(repr(obj).encode())


def _digest(root):
    """Content digest: pickled tensors and MATLAB headers carry incidental bytes (storage
    ids, a creation timestamp), so archives and .mat files are compared decoded."""
    from scipy.io import loadmat

    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        if path.suffix == ".pbz2":
            _canonical(_load(path), h)
        elif path.suffix == ".mat":
            _canonical({k: v for k, v in loadmat(path).items() if not k.startswith("__")}, h)
        else:
            h.update(path.read_bytes())
    return h.hexdigest()


def test_deterministic_from_the_seed(tmp_path):
    """The same files from the same seed, also when built by two worker processes (make run's
    rule: one thread each, where one process uses the job's threads); another seed differs."""
    spec = MiniBenchSpec(n_tss=1, n_sss=1, n_test=40, n_train=30, seed=5)  # one network per space: the time is theirs
    a = build_minibench(tmp_path / "a", spec)
    b = build_minibench(tmp_path / "b", spec, workers=2)
    c = build_minibench(tmp_path / "c", MiniBenchSpec(n_tss=1, n_sss=1, n_test=40, n_train=30, seed=6))
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_networks_differ_in_accuracy(tiny_minibench):
    accuracies = []
    for space, directory in (("tss", TSS_DIR), ("sss", SSS_DIR)):
        for i in range(3):
            record = _load(tiny_minibench / directory / f"{i:06d}.pickle.pbz2")
            hp = "200" if space == "tss" else "90"
            result = record[hp]["all_results"][("cifar10", 777)]
            accuracies.append(result["eval_acc1es"][f"ori-test@{result['epochs'] - 1}"])
    assert len(set(np.round(accuracies, 6))) >= 4
    assert max(accuracies) > 30.0  # well above the 10 % of chance: the images are learnable


def test_cli_writes_a_labelled_minibench(tmp_path, capsys):
    out = tmp_path / "mb"
    assert cli_main(["make-minibench", str(out), "--n-tss", "1", "--n-sss", "1", "--n-test", "30",
                     "--n-train", "30", "--quiet"]) == 0
    assert "NOT NATS-Bench results" in capsys.readouterr().out
    assert "NOT NATS-Bench results" in (out / "README.txt").read_text()
    assert (out / TSS_DIR / "000000.pickle.pbz2").is_file() and (out / SSS_DIR / "000000.pickle.pbz2").is_file()


def test_real_size_is_off_by_default_and_leaves_the_default_readme_as_it_was():
    assert MiniBenchSpec().real_size is False
    assert MiniBenchSpec().describe() == (
        "MiniBenchSpec(n_tss=6, n_sss=6, n_test=300, n_train=100, seed=0, second_seed=False)")
    assert MiniBenchSpec(real_size=True).describe().endswith("second_seed=False, real_size=True)")


def test_real_size_architectures_aim_at_the_real_mean_file_size():
    import random
    import statistics

    from calibench.sources.nats.minibench import (BZ2_BYTES_PER_PARAM, REAL_MEAN_FILE_BYTES, REAL_STATE_DICTS, _parameters,
                                     sample_real_size_archs, sample_tss_archs)

    for space in ("tss", "sss"):
        archs = sample_real_size_archs(space, random.Random(0), 5)
        assert len(set(archs)) == 5
        if space == "tss":  # the isomorphic pair of the default mini benchmark comes first
            assert archs[:2] == sample_tss_archs(random.Random(0), 2)
        mean_bytes = statistics.mean(_parameters(space, a) for a in archs) * BZ2_BYTES_PER_PARAM[space]
        assert mean_bytes * REAL_STATE_DICTS[space] == pytest.approx(REAL_MEAN_FILE_BYTES[space], rel=0.1)


# ---------------------------------------------------------------- n_test per dataset

def _test_sets(root):
    """The test sets as the project's readers see them (ImageNet16-120's distractors dropped)."""
    sets = {d: data_io.load_eval_set(d, root / "datasets") for d in ("cifar10", "cifar100", "ImageNet16-120")}
    sets["svhn"] = data_io.load_svhn_test(root / "datasets" / "svhn" / "test_32x32.mat")
    return sets


def _arrays_digest(sets):
    h = hashlib.sha256()
    for name in sorted(sets):
        for array in (sets[name].images, sets[name].labels):
            h.update(f"{name}{array.dtype}{array.shape}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


# The default spec's test sets (n_test=300, n_train=100, seed 0), as built before n_test could be a
# mapping (commit bc7546b): the integer form must keep building exactly these.
DEFAULT_TEST_SETS_SHA256 = "190a829d3f12a3ebd31e304ec0d46acf6b1eac1a4d83660f77ac85b679bf2031"


def test_n_test_per_dataset_and_the_integer_form_unchanged(tmp_path):
    # archs={}: the datasets only (no network), the part n_test decides.
    per_dataset = {"cifar10": 500, "cifar100": 300, "ImageNet16-120": 300}
    sets = _test_sets(build_minibench(tmp_path / "map", MiniBenchSpec(n_test=per_dataset), archs={}))
    assert {d: len(sets[d].labels) for d in per_dataset} == per_dataset
    assert len(sets["svhn"].labels) == 250  # the OoD set follows CIFAR-10's size
    assert sets["cifar10"].images.shape == (500, 3, 32, 32) and sets["ImageNet16-120"].images.shape == (300, 3, 16, 16)

    integer = _test_sets(build_minibench(tmp_path / "int", MiniBenchSpec(n_test=300), archs={}))
    assert {d: len(integer[d].labels) for d in per_dataset} == dict.fromkeys(per_dataset, 300)
    assert _arrays_digest(integer) == DEFAULT_TEST_SETS_SHA256
    same = _test_sets(build_minibench(tmp_path / "same", MiniBenchSpec(n_test=dict.fromkeys(per_dataset, 300)),
                                      archs={}))
    assert _arrays_digest(same) == DEFAULT_TEST_SETS_SHA256  # a mapping of equal sizes is the integer form

    spec = MiniBenchSpec(n_test={"ImageNet16-120": 300, "cifar10": 500, "cifar100": 300})  # any order
    assert spec == MiniBenchSpec(n_test=per_dataset) and hash(spec) == hash(MiniBenchSpec(n_test=per_dataset))
    assert spec.describe() == ("MiniBenchSpec(n_tss=6, n_sss=6, n_test={'cifar10': 500, 'cifar100': 300, "
                               "'ImageNet16-120': 300}, n_train=100, seed=0, second_seed=False)")
    with pytest.raises(ValueError, match="n_test: a mapping needs exactly the datasets"):
        MiniBenchSpec(n_test={"cifar10": 500, "cifar100": 300})


def test_the_cli_takes_n_test_per_dataset(tmp_path, capsys):
    from calibench.run.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["make-minibench", "x", "--n-test", "300"]).n_test == 300
    assert parse(["make-minibench", "x", "--n-test", "cifar10=500,cifar100=300,ImageNet16-120=300"]).n_test == {
        "cifar10": 500, "cifar100": 300, "ImageNet16-120": 300}
    assert cli_main(["make-minibench", str(tmp_path / "mb"), "--n-test", "cifar10=500,cifar100=300"]) == 2
    assert "n_test: a mapping needs exactly the datasets" in capsys.readouterr().err


def test_the_default_config_gives_cifar10_enough_validation_samples_for_vs_ms_dir(tmp_path):
    """config/config.yaml's n_test, split as the measurement splits it: CIFAR-10 has N_val = 100
    = 10 K, so vs, ms and dir are not underdetermined on it; CIFAR-100 and ImageNet16-120 (60
    validation samples) stay underdetermined, as the demo banner says."""
    from pathlib import Path

    import yaml

    from calibench.measure.stages import split_indices
    from calibench.recalibration.base import underdetermined

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    n_test, split = config["minibench"]["n_test"], config["temperature"]
    assert n_test == {"cifar10": 500, "cifar100": 300, "ImageNet16-120": 300}
    sets = _test_sets(build_minibench(tmp_path / "mb", MiniBenchSpec(n_test=n_test), archs={}))
    for dataset, k, enough in (("cifar10", 10, True), ("cifar100", 100, False), ("ImageNet16-120", 120, False)):
        val, _ = split_indices(len(sets[dataset].labels), split["val_fraction"], split["seed"])
        assert len(val) == (100 if dataset == "cifar10" else 60)
        for stage in ("vs", "ms", "dir"):
            assert underdetermined(stage, sets[dataset].labels[val], k) is (not enough), (dataset, stage)
    assert underdetermined("vs", np.zeros(99, dtype=np.int64), 10) is True  # the rule's edge: 100 = 10 K is enough
