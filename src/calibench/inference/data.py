"""Evaluation data: the test sets in their real on-disk formats, NATS-Bench's
normalisation, CIFAR-10-C Gaussian noise and the official test-set halves.

Formats and constants: docs/nats-bench.md, "Evaluation data". The OoD sets:
docs/metrics.md, "OoD AUROC". Dataset keys are NATS-Bench's: ``"cifar10"``,
``"cifar100"``, ``"ImageNet16-120"``.

Images are uint8 arrays ``N x 3 x H x W`` (the CHW order the pickles store);
labels are int64 in ``[0, K)``.

The writers produce files the readers (and the original dataset loaders) accept:
CIFAR files are emitted as Python 2 pickles, like the real ones, so their string
keys load as ``bytes`` with ``encoding='bytes'`` and as ``str`` with
``encoding='latin1'``.

Reading unpickles files from outside the project, so it uses an unpickler that
only resolves the few globals a numpy array needs: anything else is refused
(``ValueError``) instead of being imported and called.
"""

from __future__ import annotations

import codecs
import collections
import functools
import io
import json
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from calibench.atomic import atomic_write

if TYPE_CHECKING:
    import torch

DATASETS = ("cifar10", "cifar100", "ImageNet16-120")

# Relative to the dataset root; as extracted from the official archives.
EVAL_FILES = {
    "cifar10": "cifar-10-batches-py/test_batch",
    "cifar100": "cifar-100-python/test",
    "ImageNet16-120": "ImageNet16/val_data",
}
SVHN_TEST_FILE = "test_32x32.mat"

# Per-channel (mean, std) in 0..255 units (docs/nats-bench.md, "Evaluation data");
# NATS-Bench normalises with these / 255 after ToTensor.
MEAN_STD: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar10": ((125.3, 123.0, 113.9), (63.0, 62.1, 66.7)),
    "cifar100": ((129.3, 124.1, 112.4), (68.2, 65.4, 70.4)),
    "ImageNet16-120": ((122.68, 116.66, 104.01), (63.22, 61.26, 65.09)),
}

NUM_CLASSES = {"cifar10": 10, "cifar100": 100, "ImageNet16-120": 120}
IMAGE_SIZE = {"cifar10": 32, "cifar100": 32, "ImageNet16-120": 16}
IMAGENET16_ALL_CLASSES = 1000  # val_data labels are 1-based in 1..1000

# CIFAR-10-C Gaussian noise standard deviations for severities 1-5 (docs/metrics.md, "OoD AUROC").
GAUSSIAN_NOISE_STD = (0.04, 0.06, 0.08, 0.09, 0.10)

# Official x-valid / x-test halves (docs/nats-bench.md, "Evaluation data").
SPLIT_FILES = {"cifar100": "cifar100-test-split.txt", "ImageNet16-120": "imagenet-16-120-test-split.txt"}


@dataclass(frozen=True, eq=False)
class EvalSet:
    """An evaluation set: ``images`` uint8 ``N x 3 x H x W``, ``labels`` int64 ``N``."""

    images: np.ndarray
    labels: np.ndarray
    dataset: str
    source: Path
    rows: np.ndarray | None = None  # the file's rows this set holds (sorted), None: every row

    def __len__(self) -> int:
        return len(self.labels)


def check_dataset(dataset: str) -> str:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    return dataset


# --------------------------------------------------------------------------- reading


def _numpy_globals() -> dict[tuple[str, str], object]:
    """The callables a pickled numpy array or scalar refers to, under every module
    name numpy has used (``numpy.core`` in old files, ``numpy._core`` in numpy 2)."""
    reconstruct = np.empty(0).__reduce__()[0]
    scalar = np.int64(0).__reduce__()[0]
    frombuffer = np.empty(0).__reduce_ex__(5)[0]
    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,  # Python 3 protocol-2 bytes
        ("collections", "OrderedDict"): collections.OrderedDict,
    }
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.multiarray", "scalar")] = scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _ArrayUnpickler(pickle.Unpickler):
    _allowed = _numpy_globals()

    def find_class(self, module: str, name: str) -> object:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name} (only numpy arrays are expected)") from None


def _missing(path: Path, what: str) -> FileNotFoundError:
    return FileNotFoundError(f"{what}: file not found: {path}")


def _load_pickle_dict(path: Path, what: str) -> dict[str, object]:
    """Unpickle a dict (``encoding='latin1'``, as the original loaders) with str keys.

    Python 2 files load with str keys; bytes keys (a Python 3 file written with
    bytes keys) are decoded, so both key styles are accepted."""
    if not path.exists():
        raise _missing(path, what)
    if not path.is_file():
        raise ValueError(f"{what}: {path} is not a file")
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="latin1").load()
    except Exception as e:  # any failure to decode is a corrupt or foreign file
        raise ValueError(f"{what}: {path} is not a readable pickle ({type(e).__name__}: {e})") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: {path} holds a {type(obj).__name__}, expected a dict")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _get(entry: dict[str, object], key: str, path: Path, what: str) -> object:
    if key not in entry:
        keys = ", ".join(sorted(map(str, entry)))
        raise ValueError(f"{what}: {path} has no key {key!r} (keys: {keys})")
    return entry[key]


def _image_rows(data: object, side: int, path: Path, what: str) -> np.ndarray:
    """``data`` (uint8 ``N x 3*side*side``, CHW order) as ``N x 3 x side x side``."""
    arr = np.asarray(data)
    width = 3 * side * side
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what}: {path}: 'data' has shape {arr.shape}, expected (N, {width}) = 3 x {side} x {side} per row")
    if arr.dtype != np.uint8:
        raise ValueError(f"{what}: {path}: 'data' has dtype {arr.dtype}, expected uint8")
    return np.ascontiguousarray(arr).reshape(-1, 3, side, side)


def _label_vector(labels: object, key: str, n: int, lo: int, hi: int, path: Path, what: str) -> np.ndarray:
    """``labels`` as int64 of length ``n`` with values in ``[lo, hi]``."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{what}: {path}: {key!r} must be a 1-D list of integers, got dtype {arr.dtype}, shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(f"{what}: {path}: {key!r} has {len(arr)} entries but 'data' has {n} images")
    arr = arr.astype(np.int64)
    bad = np.flatnonzero((arr < lo) | (arr > hi))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{what}: {path}: {key}[{i}] = {arr[i]} is outside [{lo}, {hi}] ({bad.size} such labels)")
    return arr


def load_eval_set(dataset: str, root: str | os.PathLike) -> EvalSet:
    """Read a dataset's evaluation set from under ``root`` (docs/nats-bench.md, "Evaluation data").

    ``cifar10``: ``cifar-10-batches-py/test_batch`` (10,000 images); ``cifar100``:
    ``cifar-100-python/test`` (``fine_labels``); ``ImageNet16-120``: ``ImageNet16/val_data``,
    keeping labels 1..120 minus 1 in file order (6,000 images of the real file)."""
    check_dataset(dataset)
    path = Path(root) / EVAL_FILES[dataset]
    what = f"{dataset} evaluation set"
    entry = _load_pickle_dict(path, what)
    images = _image_rows(_get(entry, "data", path, what), IMAGE_SIZE[dataset], path, what)
    n = len(images)
    if dataset == "ImageNet16-120":
        labels = _label_vector(_get(entry, "labels", path, what), "labels", n, 1, IMAGENET16_ALL_CLASSES, path, what)
        keep = labels <= NUM_CLASSES[dataset]
        images, labels = images[keep], labels[keep] - 1
        if not len(labels):
            raise ValueError(f"{what}: {path} has no image with a label in 1..{NUM_CLASSES[dataset]}")
    else:
        key = "labels" if dataset == "cifar10" else "fine_labels"
        labels = _label_vector(_get(entry, key, path, what), key, n, 0, NUM_CLASSES[dataset] - 1, path, what)
    return EvalSet(images=np.ascontiguousarray(images), labels=labels, dataset=dataset, source=path)


def _scipy_io():
    try:
        import scipy.io
    except ImportError as e:  # scipy is not a runtime dependency: SVHN is optional
        raise ImportError("reading or writing SVHN .mat files needs scipy (pip install scipy)") from e
    return scipy.io


def _svhn_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path / SVHN_TEST_FILE if path.is_dir() else path


def svhn_test_size(path: str | os.PathLike) -> int:
    """The number of images in SVHN's ``test_32x32.mat`` (26,032 in the real file), read from the
    file's variable headers without loading the images."""
    path = _svhn_file(path)
    if not path.exists():
        raise _missing(path, "SVHN test set")
    st = path.stat()
    return _svhn_test_size(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _svhn_test_size(path: str, size: int, mtime_ns: int) -> int:
    try:
        shapes = {name: shape for name, shape, _ in _scipy_io().whosmat(path)}
    except Exception as e:
        raise ValueError(f"SVHN test set: {path} is not a readable MATLAB v5 file ({type(e).__name__}: {e})") from e
    shape = shapes.get("X")
    if shape is None or len(shape) != 4 or tuple(shape[:3]) != (32, 32, 3):
        raise ValueError(f"SVHN test set: {path}: 'X' has shape {shape}, expected (32, 32, 3, N)")
    return int(shape[3])


def svhn_subset_rows(total: int, subset: int | None, seed: int = 0, source: object = "SVHN test set"
                     ) -> np.ndarray | None:
    """The rows of an SVHN test set of ``total`` images that ``ood.svhn_subset`` selects: None
    (every image) for ``subset`` None or equal to ``total``; else ``subset`` distinct rows drawn by
    ``numpy.random.default_rng(seed)`` (``choice`` without replacement), sorted, int64. A subset
    larger than the set is a ValueError naming ``source`` and both sizes (not silently all
    images: the setting would then not mean what it says)."""
    if subset is None:
        return None
    if isinstance(subset, bool) or not isinstance(subset, (int, np.integer)) or subset < 1:
        raise ValueError(f"ood.svhn_subset must be null or an integer >= 1, got {subset!r}")
    if subset > total:
        raise ValueError(f"ood.svhn_subset = {subset} is larger than the SVHN test set {source}, which holds "
                         f"{total} images; set it to at most {total}, or null for every image")
    if subset == total:
        return None
    rows = np.random.default_rng(int(seed)).choice(int(total), size=int(subset), replace=False)
    return np.sort(rows).astype(np.int64)


def load_svhn_test(path: str | os.PathLike, subset: int | None = None, seed: int = 0) -> EvalSet:
    """Read SVHN's ``test_32x32.mat`` (docs/metrics.md, "OoD AUROC"); a directory means the file in it.

    MATLAB v5 file: ``X`` uint8 ``32 x 32 x 3 x N``, ``y`` ``N x 1`` in 1..10 where 10 is the digit 0.
    Returns ``dataset="svhn"``, images ``N x 3 x 32 x 32``, labels = digits 0..9. ``subset``
    (``ood.svhn_subset``): only the rows :func:`svhn_subset_rows` draws with ``seed``, in file
    order, recorded in ``rows``."""
    path = _svhn_file(path)
    what = "SVHN test set"
    if not path.exists():
        raise _missing(path, what)
    sio = _scipy_io()
    try:
        mat = sio.loadmat(str(path))
    except Exception as e:
        raise ValueError(f"{what}: {path} is not a readable MATLAB v5 file ({type(e).__name__}: {e})") from e
    X, y = _get(mat, "X", path, what), _get(mat, "y", path, what)
    if not isinstance(X, np.ndarray) or X.ndim != 4 or X.shape[:3] != (32, 32, 3):
        raise ValueError(f"{what}: {path}: 'X' has shape {np.shape(X)}, expected (32, 32, 3, N)")
    if X.dtype != np.uint8:
        raise ValueError(f"{what}: {path}: 'X' has dtype {X.dtype}, expected uint8")
    n = X.shape[3]
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dtype.kind == "f" and np.all(y == np.round(y)):  # MATLAB doubles are fine if integral
        y = y.astype(np.int64)
    labels = _label_vector(y, "y", n, 1, 10, path, what) % 10
    rows = svhn_subset_rows(n, subset, seed, path)
    if rows is not None:
        X, labels = X[..., rows], labels[rows]
    images = np.ascontiguousarray(X.transpose(3, 2, 0, 1))
    return EvalSet(images=images, labels=labels, dataset="svhn", source=path, rows=rows)


# --------------------------------------------------------------------------- writing


def _check_images(images: np.ndarray, side: int, what: str) -> np.ndarray:
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise ValueError(f"{what}: images must be uint8, got {images.dtype}")
    if images.ndim != 4 or images.shape[1:] != (3, side, side) or images.shape[0] == 0:
        raise ValueError(f"{what}: images must have shape (N > 0, 3, {side}, {side}), got {images.shape}")
    return np.ascontiguousarray(images)


def _check_labels(labels: object, n: int, lo: int, hi: int, what: str) -> list[int]:
    arr = np.asarray(labels)
    if arr.shape != (n,) or arr.dtype.kind not in "iu":
        raise ValueError(f"{what}: labels must be {n} integers, got dtype {arr.dtype}, shape {arr.shape}")
    if n and (arr.min() < lo or arr.max() > hi):
        raise ValueError(f"{what}: labels must lie in [{lo}, {hi}], got [{arr.min()}, {arr.max()}]")
    return [int(v) for v in arr]


# Python 2 pickle (protocol 2) emitter for the CIFAR files. Every str is written as
# a Python 2 str (SHORT_BINSTRING / BINSTRING) and a uint8 array as Python 2 numpy
# pickled it (numpy.core.multiarray._reconstruct + BUILD with the raw bytes).


def _py2_pickle(obj: object) -> bytes:
    out: list[bytes] = [b"\x80\x02"]
    _py2_emit(obj, out.append)
    out.append(b".")
    return b"".join(out)


def _py2_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _py2_emit(obj: object, w: Callable[[bytes], object]) -> None:
    if obj is None:
        w(b"N")
    elif obj is True or obj is False:
        w(b"\x88" if obj else b"\x89")
    elif isinstance(obj, (str, bytes)):
        raw = obj.encode("latin1") if isinstance(obj, str) else obj
        w((b"U" + bytes([len(raw)]) if len(raw) < 256 else b"T" + struct.pack("<i", len(raw))) + raw)
    elif isinstance(obj, (int, np.integer)):
        v = int(obj)
        if 0 <= v < 256:
            w(b"K" + bytes([v]))
        elif 0 <= v < 65536:
            w(b"M" + struct.pack("<H", v))
        else:
            w(b"J" + struct.pack("<i", v))  # struct.error beyond 32 bits; never needed here
    elif isinstance(obj, tuple):
        if 1 <= len(obj) <= 3:
            for item in obj:
                _py2_emit(item, w)
            w({1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(obj)])
        else:
            w(b"(")
            for item in obj:
                _py2_emit(item, w)
            w(b"t")
    elif isinstance(obj, list):
        w(b"]")
        for start in range(0, len(obj), 1000):  # cPickle's APPENDS batches
            w(b"(")
            for item in obj[start : start + 1000]:
                _py2_emit(item, w)
            w(b"e")
    elif isinstance(obj, dict):
        w(b"}(")
        for k, v in obj.items():
            _py2_emit(k, w)
            _py2_emit(v, w)
        w(b"u")
    elif isinstance(obj, np.ndarray) and obj.dtype == np.uint8:
        # _reconstruct(ndarray, (0,), 'b'), then BUILD with (1, shape, dtype, fortran, data)
        w(_py2_global("numpy.core.multiarray", "_reconstruct") + _py2_global("numpy", "ndarray"))
        _py2_emit((0,), w)
        _py2_emit("b", w)
        w(b"\x87R(")  # TUPLE3, REDUCE, MARK
        _py2_emit(1, w)
        _py2_emit(tuple(obj.shape), w)
        # dtype('u1', 0, 1), then BUILD with its version-3 state
        w(_py2_global("numpy", "dtype"))
        _py2_emit(("u1", 0, 1), w)
        w(b"R")
        _py2_emit((3, "|", None, None, None, -1, -1, 0), w)
        w(b"b")
        _py2_emit(False, w)
        _py2_emit(np.ascontiguousarray(obj).tobytes(), w)
        w(b"tb")  # TUPLE, BUILD
    else:
        raise TypeError(f"cannot write {type(obj).__name__} in a Python 2 pickle")


def _filenames(prefix: str, n: int) -> list[str]:
    return [f"{prefix}_s_{i:06d}.png" for i in range(n)]


def write_cifar10_test(root: str | os.PathLike, images: np.ndarray, labels: object) -> Path:
    """Write ``root/cifar-10-batches-py/test_batch`` as the real file: a Python 2 pickle with
    keys ``batch_label``, ``labels``, ``data`` (uint8 ``N x 3072``), ``filenames``."""
    images = _check_images(images, 32, "write_cifar10_test")
    labels = _check_labels(labels, len(images), 0, 9, "write_cifar10_test")
    entry = {
        "batch_label": "testing batch 1 of 1",
        "labels": labels,
        "data": images.reshape(len(images), -1),
        "filenames": _filenames("test", len(images)),
    }
    return atomic_write(Path(root) / EVAL_FILES["cifar10"], lambda f: f.write(_py2_pickle(entry)))


def write_cifar100_test(
    root: str | os.PathLike, images: np.ndarray, labels: object, coarse_labels: object | None = None
) -> Path:
    """Write ``root/cifar-100-python/test`` as the real file: a Python 2 pickle with keys
    ``filenames``, ``batch_label``, ``fine_labels``, ``coarse_labels``, ``data``.

    ``coarse_labels`` defaults to ``fine // 5``: a placeholder, not CIFAR-100's superclass
    map (nothing here reads coarse labels)."""
    images = _check_images(images, 32, "write_cifar100_test")
    fine = _check_labels(labels, len(images), 0, 99, "write_cifar100_test")
    coarse = [v // 5 for v in fine] if coarse_labels is None else _check_labels(coarse_labels, len(images), 0, 19, "write_cifar100_test")
    entry = {
        "filenames": _filenames("test", len(images)),
        "batch_label": "testing batch 1 of 1",
        "fine_labels": fine,
        "coarse_labels": coarse,
        "data": images.reshape(len(images), -1),
    }
    return atomic_write(Path(root) / EVAL_FILES["cifar100"], lambda f: f.write(_py2_pickle(entry)))


def write_imagenet16_val(root: str | os.PathLike, images: np.ndarray, labels_1based: object) -> Path:
    """Write ``root/ImageNet16/val_data``: a pickle with keys ``data`` (uint8 ``N x 768``)
    and ``labels`` (1-based, 1..1000: labels above 120 are dropped by the reader)."""
    images = _check_images(images, 16, "write_imagenet16_val")
    labels = _check_labels(labels_1based, len(images), 1, IMAGENET16_ALL_CLASSES, "write_imagenet16_val")
    entry = {"data": images.reshape(len(images), -1), "labels": labels}
    return atomic_write(Path(root) / EVAL_FILES["ImageNet16-120"], lambda f: pickle.dump(entry, f, protocol=4))


def write_svhn_test(path: str | os.PathLike, images: np.ndarray, labels: object) -> Path:
    """Write SVHN's ``test_32x32.mat`` (MATLAB v5, compressed): ``X`` uint8 ``32 x 32 x 3 x N``,
    ``y`` uint8 ``N x 1`` with digit 0 stored as 10. ``labels`` are digits 0..9."""
    images = _check_images(images, 32, "write_svhn_test")
    digits = np.asarray(_check_labels(labels, len(images), 0, 9, "write_svhn_test"), dtype=np.uint8)
    X = np.ascontiguousarray(images.transpose(2, 3, 1, 0))
    y = np.where(digits == 0, 10, digits).astype(np.uint8)[:, None]
    sio = _scipy_io()
    buffer = io.BytesIO()
    sio.savemat(buffer, {"X": X, "y": y}, do_compression=True, format="5")
    payload = bytearray(buffer.getvalue())
    # the 116-byte text of a v5 header holds the writing time: fixed here, so the same data gives
    # the same bytes (the file's hash enters the logits keys)
    payload[:116] = MAT_HEADER_TEXT.ljust(116).encode("ascii")
    return atomic_write(Path(path), lambda f: f.write(payload))


MAT_HEADER_TEXT = "MATLAB 5.0 MAT-file, written by calibench"


# --------------------------------------------------------------------------- transforms


def normalize(
    images_uint8: np.ndarray | torch.Tensor,
    dataset: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """NATS-Bench's input transform: ToTensor (``x / 255``) then Normalize with the
    dataset's mean / 255 and std / 255 (docs/nats-bench.md, "Evaluation data").

    The same operations in the same precision as torchvision (divide by 255, subtract
    the mean, divide by the std, constants cast to ``dtype``), so float32 results match
    it bit for bit. ``images_uint8``: ``N x 3 x H x W``; returns a tensor on ``device``."""
    check_dataset(dataset)
    import torch  # here: reading data (labels jobs, the store's keys) needs no torch

    dtype = torch.float32 if dtype is None else dtype
    x = images_uint8 if isinstance(images_uint8, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(images_uint8))
    if x.dtype != torch.uint8:
        raise ValueError(f"normalize: images must be uint8, got {x.dtype}")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"normalize: images must have shape (N, 3, H, W), got {tuple(x.shape)}")
    if not dtype.is_floating_point:
        raise ValueError(f"normalize: dtype must be a floating type, got {dtype}")
    mean, std = MEAN_STD[dataset]
    x = x.to(device).to(dtype).div(255)
    m = torch.tensor([v / 255 for v in mean], dtype=dtype, device=x.device).view(-1, 1, 1)
    s = torch.tensor([v / 255 for v in std], dtype=dtype, device=x.device).view(-1, 1, 1)
    return x.sub_(m).div_(s)


def gaussian_noise(images_uint8: np.ndarray, severity: int = 5, seed: int = 0, *, _chunk: int = 1024) -> np.ndarray:
    """CIFAR-10-C Gaussian noise (docs/metrics.md, "OoD AUROC"; Hendrycks & Dietterich 2019).

    ``np.uint8(clip(x / 255 + N(0, s^2), 0, 1) * 255)`` with s = 0.04, 0.06, 0.08, 0.09, 0.10
    for severities 1-5. The conversion truncates like ``np.uint8`` on their saved images
    (no rounding), so the mean drops by about half a grey level. Noise comes from
    ``np.random.default_rng(seed)`` drawn in C order over the whole array (chunking does
    not change it), so the result depends only on the images, severity and seed."""
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 1 <= severity <= 5:
        raise ValueError(f"gaussian_noise: severity must be an integer in 1..5, got {severity!r}")
    images = np.asarray(images_uint8)
    if images.dtype != np.uint8:
        raise ValueError(f"gaussian_noise: images must be uint8, got {images.dtype}")
    s = GAUSSIAN_NOISE_STD[int(severity) - 1]
    rng = np.random.default_rng(seed)
    out = np.empty_like(images)
    flat_in, flat_out = images.reshape(-1), out.reshape(-1)
    step = max(1, _chunk * (int(np.prod(images.shape[1:])) if images.ndim > 1 else 1))
    for start in range(0, flat_in.size, step):
        x = flat_in[start : start + step] / 255.0
        x += rng.normal(0.0, s, size=x.shape)
        flat_out[start : start + step] = (np.clip(x, 0.0, 1.0) * 255).astype(np.uint8)
    return out


# --------------------------------------------------------------------------- official split


def official_split(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a NATS-Bench split file (``cifar100-test-split.txt``, ``imagenet-16-120-test-split.txt``;
    docs/nats-bench.md, "Evaluation data"): JSON ``{"xvalid": ["int", [...]], "xtest": ["int", [...]]}``
    with the indices as strings. Returns ``(xvalid, xtest)`` int64 index arrays into the full test set."""
    path = Path(path)
    what = "official split"
    if not path.exists():
        raise _missing(path, what)
    try:
        spec = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: {path} is not a JSON file ({e})") from e
    if not isinstance(spec, dict):
        raise ValueError(f"{what}: {path} holds a JSON {type(spec).__name__}, expected an object")
    halves = []
    for key in ("xvalid", "xtest"):
        value = _get(spec, key, path, what)
        if isinstance(value, list) and len(value) == 2 and value[0] == "int" and isinstance(value[1], list):
            value = value[1]  # ["int", [...]]: the format AutoDL-Projects writes
        if not isinstance(value, list):
            raise ValueError(f"{what}: {path}: {key!r} must be [\"int\", [indices]] or a list of indices")
        try:
            idx = np.array([int(v) for v in value], dtype=np.int64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: {path}: {key!r} holds a non-integer index ({e})") from e
        if idx.size and idx.min() < 0:
            raise ValueError(f"{what}: {path}: {key!r} holds a negative index {idx.min()}")
        if len(np.unique(idx)) != len(idx):
            raise ValueError(f"{what}: {path}: {key!r} repeats an index")
        halves.append(idx)
    common = np.intersect1d(halves[0], halves[1])
    if common.size:
        raise ValueError(f"{what}: {path}: index {common[0]} is in both xvalid and xtest ({common.size} shared)")
    return halves[0], halves[1]
