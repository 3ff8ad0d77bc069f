"""Evaluation data (calibench.inference.data): real on-disk formats, normalisation, CIFAR-10-C
Gaussian noise and the official splits (docs/nats-bench.md, "Evaluation data";
docs/metrics.md, "OoD AUROC")."""

import bz2
import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from calibench.inference import data as D
from calibench.atomic import atomic_write

SPLITS = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nats-splits"


def images(rng, n, side):
    return rng.integers(0, 256, size=(n, 3, side, side), dtype=np.uint8)


def raw_pickle(path):
    with open(path, "rb") as f:
        return f.read()


# --------------------------------------------------------------------------- round trips


def test_cifar10_round_trip(tmp_path, rng):
    x, y = images(rng, 37, 32), rng.integers(0, 10, 37)
    path = D.write_cifar10_test(tmp_path, x, y)
    assert path == tmp_path / "cifar-10-batches-py" / "test_batch"
    es = D.load_eval_set("cifar10", tmp_path)
    assert es.dataset == "cifar10" and es.source == path and len(es) == 37
    assert es.images.dtype == np.uint8 and es.images.shape == (37, 3, 32, 32)
    assert es.labels.dtype == np.int64
    np.testing.assert_array_equal(es.images, x)
    np.testing.assert_array_equal(es.labels, y)
    with pytest.raises(dataclasses.FrozenInstanceError):
        es.dataset = "cifar100"


def test_cifar100_round_trip(tmp_path, rng):
    x, y = images(rng, 23, 32), rng.integers(0, 100, 23)
    D.write_cifar100_test(tmp_path, x, y, coarse_labels=y % 20)
    es = D.load_eval_set("cifar100", tmp_path)
    np.testing.assert_array_equal(es.images, x)
    np.testing.assert_array_equal(es.labels, y)
    raw = pickle.loads(raw_pickle(es.source), encoding="latin1")
    assert raw["coarse_labels"] == list(y % 20)


def test_imagenet16_round_trip_keeps_labels_1_to_120_minus_1(tmp_path, rng):
    x = images(rng, 8, 16)
    labels_1based = np.array([1, 121, 120, 1000, 57, 500, 2, 121])
    D.write_imagenet16_val(tmp_path, x, labels_1based)
    es = D.load_eval_set("ImageNet16-120", tmp_path)
    keep = [0, 2, 4, 6]  # file order preserved
    np.testing.assert_array_equal(es.images, x[keep])
    np.testing.assert_array_equal(es.labels, [0, 119, 56, 1])
    assert es.images.shape == (4, 3, 16, 16) and es.images.flags.c_contiguous


def test_writers_reproduce_the_real_key_sets_as_python2_pickles(tmp_path, rng):
    D.write_cifar10_test(tmp_path, images(rng, 3, 32), [0, 1, 2])
    D.write_cifar100_test(tmp_path, images(rng, 3, 32), [0, 1, 99])
    D.write_imagenet16_val(tmp_path, images(rng, 3, 16), [1, 2, 3])
    c10 = raw_pickle(tmp_path / D.EVAL_FILES["cifar10"])
    c100 = raw_pickle(tmp_path / D.EVAL_FILES["cifar100"])
    # Python 2 str keys: bytes with encoding='bytes', str with 'latin1' (like the real files) ...
    assert set(pickle.loads(c10, encoding="bytes")) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert set(pickle.loads(c10, encoding="latin1")) == {"batch_label", "labels", "data", "filenames"}
    assert set(pickle.loads(c100, encoding="bytes")) == {b"filenames", b"batch_label", b"fine_labels", b"coarse_labels", b"data"}
    # ... and, like the real files, not loadable with Python 3's default ASCII decoding.
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(c10)
    entry = pickle.loads(c10, encoding="bytes")
    assert entry[b"data"].dtype == np.uint8 and entry[b"data"].shape == (3, 3072)
    assert entry[b"labels"] == [0, 1, 2] and entry[b"batch_label"] == b"testing batch 1 of 1"
    val = pickle.loads(raw_pickle(tmp_path / D.EVAL_FILES["ImageNet16-120"]), encoding="latin1")
    assert set(val) == {"data", "labels"} and val["data"].shape == (3, 768) and val["labels"] == [1, 2, 3]


@pytest.mark.parametrize("key_type", [str, bytes])
def test_reader_accepts_str_and_bytes_keys(tmp_path, rng, key_type):
    """Files written by Python 3 with either key type (e.g. re-saved copies) read the same."""
    x, y = images(rng, 5, 32), [3, 1, 4, 1, 5]
    k = (lambda s: s) if key_type is str else (lambda s: s.encode())
    path = tmp_path / D.EVAL_FILES["cifar10"]
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        pickle.dump({k("data"): x.reshape(5, -1), k("labels"): y, k("batch_label"): k("b")}, f, protocol=pickle.HIGHEST_PROTOCOL)
    es = D.load_eval_set("cifar10", tmp_path)
    np.testing.assert_array_equal(es.images, x)
    np.testing.assert_array_equal(es.labels, y)
    # numpy label arrays (not lists) are fine too, and so is ImageNet16 with bytes keys
    val = tmp_path / D.EVAL_FILES["ImageNet16-120"]
    val.parent.mkdir(parents=True)
    with open(val, "wb") as f:
        pickle.dump({k("data"): images(rng, 2, 16).reshape(2, -1), k("labels"): np.array([7, 700])}, f, protocol=2)
    np.testing.assert_array_equal(D.load_eval_set("ImageNet16-120", tmp_path).labels, [6])


def test_svhn_round_trip_and_raw_layout(tmp_path, rng):
    sio = pytest.importorskip("scipy.io")
    x, y = images(rng, 11, 32), np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
    path = D.write_svhn_test(tmp_path / "svhn" / "test_32x32.mat", x, y)
    raw = sio.loadmat(str(path))
    assert raw["X"].shape == (32, 32, 3, 11) and raw["X"].dtype == np.uint8
    np.testing.assert_array_equal(raw["X"][:, :, :, 4], x[4].transpose(1, 2, 0))  # HWC per image
    assert raw["y"].shape == (11, 1) and raw["y"][0, 0] == 10 and raw["y"][-1, 0] == 10 and raw["y"][5, 0] == 5
    for where in (path, path.parent):  # a directory means the file in it
        es = D.load_svhn_test(where)
        assert es.dataset == "svhn" and es.source == path
        np.testing.assert_array_equal(es.images, x)
        np.testing.assert_array_equal(es.labels, y)


def test_writers_are_atomic_and_overwrite(tmp_path, rng):
    D.write_cifar10_test(tmp_path, images(rng, 4, 32), [0, 0, 0, 0])
    x = images(rng, 6, 32)
    D.write_cifar10_test(tmp_path, x, [1] * 6)
    np.testing.assert_array_equal(D.load_eval_set("cifar10", tmp_path).images, x)
    target = tmp_path / D.EVAL_FILES["cifar10"]

    def fail(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, fail)
    np.testing.assert_array_equal(D.load_eval_set("cifar10", tmp_path).images, x)  # old file intact
    assert sorted(p.name for p in target.parent.iterdir()) == ["test_batch"]  # no temp file left


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda r, rng: D.write_cifar10_test(r, images(rng, 2, 32).astype(np.int16), [0, 1]), "must be uint8"),
        (lambda r, rng: D.write_cifar10_test(r, images(rng, 2, 16), [0, 1]), r"shape \(N > 0, 3, 32, 32\)"),
        (lambda r, rng: D.write_cifar10_test(r, images(rng, 2, 32), [0, 10]), r"labels must lie in \[0, 9\]"),
        (lambda r, rng: D.write_cifar10_test(r, images(rng, 2, 32), [0]), "labels must be 2 integers"),
        (lambda r, rng: D.write_cifar100_test(r, images(rng, 2, 32), [0, 1], [0, 20]), r"\[0, 19\]"),
        (lambda r, rng: D.write_imagenet16_val(r, images(rng, 2, 16), [0, 1]), r"\[1, 1000\]"),
    ],
)
def test_writer_validation(tmp_path, rng, call, msg):
    with pytest.raises(ValueError, match=msg):
        call(tmp_path, rng)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


# --------------------------------------------------------------------------- reader errors


@pytest.mark.parametrize("dataset", D.DATASETS)
def test_missing_file_names_path_and_dataset(tmp_path, dataset):
    expected = tmp_path / D.EVAL_FILES[dataset]
    with pytest.raises(FileNotFoundError) as err:
        D.load_eval_set(dataset, tmp_path)
    assert str(expected) in str(err.value) and dataset in str(err.value)


def test_unknown_dataset_lists_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'cifar10-valid'; known: cifar10, cifar100, ImageNet16-120"):
        D.load_eval_set("cifar10-valid", tmp_path)
    with pytest.raises(ValueError, match="known: cifar10"):
        D.normalize(np.zeros((1, 3, 2, 2), np.uint8), "imagenet")


def _put(root, dataset, payload: bytes) -> Path:
    path = root / D.EVAL_FILES[dataset]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return path


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"this is not a pickle",
        pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]})[:-40],  # truncated
        bz2.compress(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]})),  # a .pbz2 by mistake
    ],
    ids=["empty", "text", "truncated", "bz2"],
)
def test_corrupt_file_is_a_value_error_naming_the_file(tmp_path, payload):
    path = _put(tmp_path, "cifar10", payload)
    with pytest.raises(ValueError, match="not a readable pickle") as err:
        D.load_eval_set("cifar10", tmp_path)
    assert str(path) in str(err.value)


def test_foreign_globals_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("executed",))

    path = _put(tmp_path, "cifar10", pickle.dumps({"data": Evil(), "labels": []}))
    with pytest.raises(ValueError, match=r"refusing to load global builtins\.print") as err:
        D.load_eval_set("cifar10", tmp_path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "dataset,entry,msg",
    [
        ("cifar10", {"data": np.zeros((2, 3072), np.uint8)}, r"has no key 'labels' \(keys: data\)"),
        ("cifar100", {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]}, "has no key 'fine_labels'"),
        ("cifar10", {"labels": [0, 1]}, "has no key 'data'"),
        ("cifar10", {"data": np.zeros((2, 768), np.uint8), "labels": [0, 1]}, r"'data' has shape \(2, 768\), expected \(N, 3072\)"),
        ("ImageNet16-120", {"data": np.zeros((2, 3072), np.uint8), "labels": [1, 1]}, r"expected \(N, 768\)"),
        ("cifar10", {"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "dtype float32, expected uint8"),
        ("cifar10", {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, r"labels\[1\] = 10 is outside \[0, 9\]"),
        ("cifar100", {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [-1, 5]}, r"fine_labels\[0\] = -1 is outside \[0, 99\]"),
        ("ImageNet16-120", {"data": np.zeros((2, 768), np.uint8), "labels": [0, 1]}, r"labels\[0\] = 0 is outside \[1, 1000\]"),
        ("ImageNet16-120", {"data": np.zeros((2, 768), np.uint8), "labels": [1, 1001]}, r"labels\[1\] = 1001"),
        ("ImageNet16-120", {"data": np.zeros((2, 768), np.uint8), "labels": [121, 999]}, "no image with a label in 1..120"),
        ("cifar10", {"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "'labels' has 1 entries but 'data' has 2 images"),
        ("cifar10", {"data": np.zeros((2, 3072), np.uint8), "labels": [0.0, 1.0]}, "must be a 1-D list of integers"),
    ],
)
def test_unexpected_content_is_a_value_error(tmp_path, dataset, entry, msg):
    path = _put(tmp_path, dataset, pickle.dumps(entry))
    with pytest.raises(ValueError, match=msg) as err:
        D.load_eval_set(dataset, tmp_path)
    assert str(path) in str(err.value) and dataset in str(err.value)


def test_not_a_dict_and_a_directory(tmp_path):
    _put(tmp_path, "cifar10", pickle.dumps([1, 2, 3]))
    with pytest.raises(ValueError, match="holds a list, expected a dict"):
        D.load_eval_set("cifar10", tmp_path)
    (tmp_path / D.EVAL_FILES["cifar100"]).mkdir(parents=True)
    with pytest.raises(ValueError, match="is not a file"):
        D.load_eval_set("cifar100", tmp_path)


def test_svhn_errors(tmp_path, rng):
    sio = pytest.importorskip("scipy.io")
    with pytest.raises(FileNotFoundError, match="SVHN test set: file not found: .*test_32x32.mat"):
        D.load_svhn_test(tmp_path)
    bad = tmp_path / "bad.mat"
    bad.write_bytes(b"garbage" * 100)
    with pytest.raises(ValueError, match="bad.mat is not a readable MATLAB"):
        D.load_svhn_test(bad)
    sio.savemat(str(bad), {"X": np.zeros((32, 32, 3, 2), np.uint8)})
    with pytest.raises(ValueError, match="has no key 'y'"):
        D.load_svhn_test(bad)
    sio.savemat(str(bad), {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[0], [1]], np.uint8)})
    with pytest.raises(ValueError, match=r"y\[0\] = 0 is outside \[1, 10\]"):
        D.load_svhn_test(bad)
    sio.savemat(str(bad), {"X": np.zeros((3, 32, 32, 2), np.uint8), "y": np.array([[1], [1]], np.uint8)})
    with pytest.raises(ValueError, match=r"'X' has shape \(3, 32, 32, 2\)"):
        D.load_svhn_test(bad)


# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("dataset", D.DATASETS)
def test_normalize_matches_hand_computation(dataset):
    mean, std = D.MEAN_STD[dataset]
    x = np.zeros((2, 3, 4, 4), np.uint8)
    x[0, :, 0, 0] = (0, 128, 255)
    x[1, :, 3, 2] = (17, 200, 101)
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-12)):
        out = D.normalize(x, dataset, dtype=dtype)
        assert out.dtype == dtype and out.shape == (2, 3, 4, 4) and out.device.type == "cpu"
        for n, h, w in ((0, 0, 0), (1, 3, 2), (1, 0, 1)):
            for c in range(3):
                hand = (x[n, c, h, w] / 255 - mean[c] / 255) / (std[c] / 255)
                assert out[n, c, h, w].item() == pytest.approx(hand, abs=tol), (n, c, h, w)
    # spot values: the CIFAR-10 red channel of a black pixel is -125.3 / 63.0
    if dataset == "cifar10":
        assert D.normalize(x, dataset, dtype=torch.float64)[0, 0, 1, 1].item() == pytest.approx(-125.3 / 63.0, abs=1e-12)


def test_normalize_float32_is_totensor_then_normalize():
    """Same operations and precision as torchvision's ToTensor + Normalize."""
    rng = np.random.default_rng(0)
    x = images(rng, 3, 16)
    t = torch.from_numpy(x).to(torch.float32).div(255)
    mean, std = D.MEAN_STD["ImageNet16-120"]
    ref = (t - torch.tensor([m / 255 for m in mean]).view(-1, 1, 1)) / torch.tensor([s / 255 for s in std]).view(-1, 1, 1)
    assert torch.equal(D.normalize(x, "ImageNet16-120"), ref)
    assert torch.equal(D.normalize(torch.from_numpy(x), "ImageNet16-120"), ref)  # tensors accepted


def test_normalize_rejects_bad_input():
    with pytest.raises(ValueError, match="must be uint8"):
        D.normalize(np.zeros((1, 3, 2, 2), np.float32), "cifar10")
    with pytest.raises(ValueError, match=r"shape \(N, 3, H, W\)"):
        D.normalize(np.zeros((3, 2, 2), np.uint8), "cifar10")


# --------------------------------------------------------------------------- Gaussian noise


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_gaussian_noise_statistics_on_mid_grey(severity):
    s = D.GAUSSIAN_NOISE_STD[severity - 1]
    x = np.full((40, 3, 32, 32), 128, np.uint8)  # 122,880 pixels; clipping is > 5 sigma away
    out = D.gaussian_noise(x, severity=severity, seed=1).astype(np.float64)
    # truncation to uint8 (np.uint8 semantics) lowers the mean by ~0.5 grey levels
    assert out.mean() - 128 == pytest.approx(-0.5, abs=0.15)
    assert out.std() == pytest.approx(np.sqrt((s * 255) ** 2 + 1 / 12), rel=0.01)


def test_gaussian_noise_formula_determinism_and_chunking():
    rng = np.random.default_rng(3)
    x = images(rng, 7, 32)
    out = D.gaussian_noise(x, severity=4, seed=11)
    assert out.dtype == np.uint8 and out.shape == x.shape
    noise = np.random.default_rng(11).normal(0.0, 0.09, size=x.shape)
    np.testing.assert_array_equal(out, np.uint8(np.clip(x / 255 + noise, 0, 1) * 255))  # Hendrycks & Dietterich
    np.testing.assert_array_equal(out, D.gaussian_noise(x, severity=4, seed=11))
    np.testing.assert_array_equal(out, D.gaussian_noise(x, severity=4, seed=11, _chunk=2))
    assert not np.array_equal(out, D.gaussian_noise(x, severity=4, seed=12))
    np.testing.assert_array_equal(x, images(np.random.default_rng(3), 7, 32))  # input untouched


def test_gaussian_noise_clips_at_black_and_white():
    x = np.zeros((4, 3, 32, 32), np.uint8)
    x[2:] = 255
    out = D.gaussian_noise(x, severity=5, seed=0)
    assert (out[2:] <= 255).all() and (out[2:] == 255).mean() == pytest.approx(0.5, abs=0.05)
    assert (out[:2] == 0).mean() > 0.5  # everything below 0 clips to 0, small values truncate to 0


@pytest.mark.parametrize("severity", [0, 6, -1, 2.0, True, "5"])
def test_gaussian_noise_bad_severity(severity):
    with pytest.raises(ValueError, match="severity must be an integer in 1..5"):
        D.gaussian_noise(np.zeros((1, 3, 2, 2), np.uint8), severity=severity)


def test_gaussian_noise_needs_uint8():
    with pytest.raises(ValueError, match="must be uint8"):
        D.gaussian_noise(np.zeros((1, 3, 2, 2), np.float32))


# --------------------------------------------------------------------------- official splits


@pytest.mark.parametrize("name,n", [("cifar100-test-split.txt", 10000), ("imagenet-16-120-test-split.txt", 6000)])
def test_official_split_files(name, n):
    path = SPLITS / name
    if not path.is_file():
        pytest.skip(f"{path} not available (shared/fixtures sits next to the checkout)")
    xvalid, xtest = D.official_split(path)
    assert len(xvalid) == len(xtest) == n // 2
    assert xvalid.dtype == xtest.dtype == np.int64
    assert not np.intersect1d(xvalid, xtest).size
    np.testing.assert_array_equal(np.sort(np.concatenate([xvalid, xtest])), np.arange(n))
    assert D.SPLIT_FILES[{10000: "cifar100", 6000: "ImageNet16-120"}[n]] == name


def test_official_split_format_and_errors(tmp_path):
    path = tmp_path / "split.txt"
    path.write_text(json.dumps({"xvalid": ["int", ["1", "3"]], "xtest": ["int", ["0", "2"]]}))
    xv, xt = D.official_split(path)
    assert xv.tolist() == [1, 3] and xt.tolist() == [0, 2]
    path.write_text(json.dumps({"xvalid": [1, 3], "xtest": [0, 2]}))  # bare lists accepted
    assert D.official_split(path)[0].tolist() == [1, 3]
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        D.official_split(tmp_path / "missing.txt")
    for content, msg in [
        ("{not json", "is not a JSON file"),
        (json.dumps({"xvalid": ["int", ["1"]]}), "has no key 'xtest'"),
        (json.dumps({"xvalid": ["int", ["1", "2"]], "xtest": ["int", ["2"]]}), "index 2 is in both xvalid and xtest"),
        (json.dumps({"xvalid": ["int", ["a"]], "xtest": ["int", []]}), "'xvalid' holds a non-integer index"),
        (json.dumps({"xvalid": ["int", ["1", "1"]], "xtest": ["int", []]}), "'xvalid' repeats an index"),
        (json.dumps({"xvalid": ["int", ["-1"]], "xtest": ["int", []]}), "negative index -1"),
        (json.dumps([1, 2]), "expected an object"),
    ]:
        path.write_text(content)
        with pytest.raises(ValueError, match=msg) as err:
            D.official_split(path)
        assert str(path) in str(err.value)
