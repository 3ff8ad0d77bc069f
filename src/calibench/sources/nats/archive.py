"""Trained weights and recorded results from NATS-Bench ``-full`` archives.

A ``-full`` archive holds one bz2-compressed pickle per architecture with every state
dict of that architecture: every training schedule ``hp``, every dataset and every seed
(docs/nats-bench.md, "Archives"). :meth:`NatsArchive.load` decompresses a file once and
returns the entries of every requested dataset, so a run reads each file once.

How a file is read. The official API (``nats_bench.create(dir, space, fast_mode=True)``
then ``query_meta_info_by_index``) unpickles every tensor of every hp through one
``torch.load`` each and then deep-copies the whole hp record, weights included; that
was a third of a load, the other two thirds bz2 decompression. Here:

* the file is decompressed in one call (:func:`read_arch_file`, the only place an
  architecture file is decompressed; it logs each read to ``$CALIBENCH_READ_LOG`` when set);
* the pickle is read by a restricted unpickler (:class:`_ArchiveUnpickler`) that resolves
  only the globals the format uses (``collections.OrderedDict``, numpy's ``dtype`` and
  ``scalar``, torch's ``_rebuild_tensor_v2`` and ``storage._load_from_bytes``) and refuses
  any other one; a tensor is not rebuilt while unpickling but kept as its storage bytes
  and view (:class:`_LazyTensor`);
* the requested hp is turned into nats_bench's own ``ArchResults``
  (``ArchResults.create_from_state_dict``, no copy of weights), and only the requested
  state dicts are materialised: each storage's legacy ``torch.save`` bytes are parsed here
  (a magic-number pickle, a version, a system-info dict, the storage record, the key list,
  then an int64 element count and the raw little-endian data) into a tensor with one copy.

The result equals ``api.get_net_param(index, dataset, seed, hp=hp)`` tensor by tensor
(tests/test_archive_loading.py). :func:`prefetch` loads ahead, in a background thread or
in worker processes.
"""

from __future__ import annotations

import bz2
import collections
import ctypes
import dataclasses
import io
import multiprocessing
import os
import pickle
import signal
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from calibench.inference.data import check_dataset
from calibench.sources.errors import SourceError
from calibench.sources.nats.population import check_space

HPS = {"tss": ("12", "200"), "sss": ("12", "90")}  # hp values whose -full archives keep weights
DEFAULT_HP = {"tss": "200", "sss": "90"}
READ_LOG_ENV = "CALIBENCH_READ_LOG"  # when set: one line per architecture-file decompression


class ArchiveError(Exception):
    """One architecture cannot be loaded: names the index, the file and the reason."""

    def __init__(self, index: int, path: Path | str, reason: str):
        super().__init__(f"architecture {index} ({path}): {reason}")
        self.index, self.path, self.reason = index, str(path), reason

    def __reduce__(self):  # crosses process boundaries (prefetch workers) intact
        return type(self), (self.index, self.path, self.reason)


class NoWeightsError(ArchiveError, SourceError):
    """The archive holds a record of the requested (hp, dataset, seed) but no weights for it: a
    ``-simple`` archive, or a training schedule whose weights the archive does not keep (the
    mini benchmark keeps TSS hp 12 weights only with ``minibench.tss_hp12_weights``). A
    configuration error, not one damaged file: :func:`prefetch` raises it instead of yielding
    it, so the job stops with a message naming the hp and the file."""


@dataclass(frozen=True)
class ArchiveEntry:
    """Everything the pipeline takes from the archive for one (architecture, dataset, seed)."""

    index: int
    arch_str: str
    space: str
    hp: str
    dataset: str
    seed: int
    num_classes: int
    params: float  # millions, as recorded
    flops: float  # millions of multiply-adds, as recorded
    recorded_accuracy: float  # NATS-Bench's ori-test top-1 at the last epoch, as a fraction
    source: str
    state_dict: dict = field(repr=False)


def arch_file(archive_dir: str | Path, index: int) -> Path:
    return Path(archive_dir) / f"{index:06d}.pickle.pbz2"


def check_hp(space: str, hp) -> str:
    hp = str(hp)
    if hp not in HPS[space]:
        raise ValueError(f"hp: {space} -full archives keep weights for hp {HPS[space]}, got {hp!r}")
    return hp


def check_datasets(datasets: str | Sequence[str]) -> tuple[str, ...]:
    """One dataset name or a sequence of them, validated, in the given order."""
    names = (datasets,) if isinstance(datasets, str) else tuple(datasets)
    if not names:
        raise ValueError("datasets: at least one dataset is needed")
    for name in names:
        check_dataset(name)
    if len(set(names)) != len(names):
        raise ValueError(f"datasets: {list(names)} names a dataset twice")
    return names


# --------------------------------------------------------------------------- reading a file


def read_arch_file(path: str | Path) -> bytes:
    """The decompressed pickle of one architecture file: the one place such a file is decompressed.

    With ``$CALIBENCH_READ_LOG`` set, each call appends ``<absolute path>\\n`` to that file
    (one ``O_APPEND`` write, so lines from concurrent loader processes do not interleave).
    """
    path = Path(path)
    log = os.environ.get(READ_LOG_ENV)
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{path.resolve()}\n".encode())
        finally:
            os.close(fd)
    return bz2.decompress(path.read_bytes())


_TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization's legacy format
_TORCH_PROTOCOL = 1001
_STORAGE_DTYPES = {  # legacy storage class -> (numpy dtype of the bytes, torch dtype)
    "FloatStorage": (np.float32, torch.float32),
    "DoubleStorage": (np.float64, torch.float64),
    "HalfStorage": (np.float16, torch.float16),
    "BFloat16Storage": (np.int16, torch.bfloat16),
    "LongStorage": (np.int64, torch.int64),
    "IntStorage": (np.int32, torch.int32),
    "ShortStorage": (np.int16, torch.int16),
    "CharStorage": (np.int8, torch.int8),
    "ByteStorage": (np.uint8, torch.uint8),
    "BoolStorage": (np.bool_, torch.bool),
}


class _LegacyStorage:
    """A storage as pickled in the archives: the bytes ``torch.storage._load_from_bytes`` would
    hand to ``torch.load``. Parsed only when a tensor on it is materialised, then kept."""

    __slots__ = ("payload", "_flat")

    def __init__(self, payload):
        if not isinstance(payload, (bytes, bytearray)):
            raise pickle.UnpicklingError(f"storage payload is a {type(payload).__name__}, not bytes")
        self.payload = payload
        self._flat: torch.Tensor | None = None

    def flat(self) -> torch.Tensor:
        if self._flat is None:
            self._flat = _parse_legacy_storage(self.payload)
            self.payload = None  # the bytes are not needed twice
        return self._flat


class _StorageType:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _StorageUnpickler(pickle.Unpickler):
    """The small pickles inside a legacy ``torch.save`` of one storage: no global but a storage class."""

    def __init__(self, file):
        super().__init__(file)
        self.records: list[tuple] = []

    def find_class(self, module: str, name: str):
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"refusing global {module}.{name} inside a tensor storage")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r} inside a tensor storage")
        self.records.append(pid)
        return pid


def _parse_legacy_storage(payload: bytes) -> torch.Tensor:
    """A legacy (pre-zip) ``torch.save`` of one storage -> a 1-D CPU tensor with its elements.

    The location recorded with the storage (``cpu``, ``cuda:0``) is ignored: weights load
    on the CPU, as with ``map_location='cpu'``."""
    f = io.BytesIO(payload)

    def next_pickle() -> tuple[object, _StorageUnpickler]:
        unpickler = _StorageUnpickler(f)
        return unpickler.load(), unpickler

    if next_pickle()[0] != _TORCH_MAGIC:
        raise pickle.UnpicklingError("tensor storage without torch's legacy magic number")
    if next_pickle()[0] != _TORCH_PROTOCOL:
        raise pickle.UnpicklingError("tensor storage of an unknown torch protocol version")
    sys_info = next_pickle()[0]
    if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
        raise pickle.UnpicklingError("tensor storage not written little-endian")
    _, unpickler = next_pickle()
    if len(unpickler.records) != 1:
        raise pickle.UnpicklingError("tensor storage record is not one storage")
    _, storage_type, key, _location, numel, view = unpickler.records[0]
    if view is not None:
        raise pickle.UnpicklingError("storage views are not supported")
    keys = next_pickle()[0]
    if not isinstance(keys, list) or key not in keys:
        raise pickle.UnpicklingError("tensor storage key list does not name its storage")
    np_dtype, torch_dtype = _STORAGE_DTYPES[storage_type.name]
    itemsize = np.dtype(np_dtype).itemsize
    pos = f.tell()
    for k in keys:  # one key in practice; the data follow in key order
        if pos + 8 > len(payload):
            raise pickle.UnpicklingError("tensor storage truncated")
        (count,) = struct.unpack_from("<q", payload, pos)
        pos += 8
        if k == key:
            if count != numel or pos + count * itemsize > len(payload):
                raise pickle.UnpicklingError("tensor storage size does not match its data")
            array = np.frombuffer(payload, dtype=np_dtype, count=count, offset=pos).copy()
            tensor = torch.from_numpy(array)
            return tensor.view(torch_dtype) if tensor.dtype != torch_dtype else tensor
        pos += count * itemsize
    raise pickle.UnpicklingError("tensor storage data not found")  # not reached: key is in keys


class _LazyTensor:
    """``torch._utils._rebuild_tensor_v2``'s arguments, kept until the tensor is wanted."""

    __slots__ = ("storage", "offset", "size", "stride", "requires_grad")

    def __init__(self, storage, offset, size, stride, requires_grad, backward_hooks=None, metadata=None):
        if not isinstance(storage, _LegacyStorage):
            raise pickle.UnpicklingError(f"tensor on a {type(storage).__name__}, not a storage")
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)
        self.requires_grad = bool(requires_grad)

    def materialise(self) -> torch.Tensor:
        flat = self.storage.flat()
        if any(s < 0 for s in self.size) or any(s < 0 for s in self.stride) or self.offset < 0:
            raise ValueError("negative tensor size, stride or offset")
        extent = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride)) + 1
        if 0 not in self.size and extent > flat.numel():
            raise ValueError(f"tensor view of {extent} elements on a storage of {flat.numel()}")
        tensor = flat.as_strided(self.size, self.stride, self.offset)
        return tensor.requires_grad_() if self.requires_grad else tensor


def _scalar_global():
    return np.int64(0).__reduce__()[0]  # numpy's scalar reconstructor, whatever its module name


class _ArchiveUnpickler(pickle.Unpickler):
    """The per-architecture pickle of a ``-full`` archive, with tensors left lazy.

    Only the globals the format uses resolve; any other one raises ``UnpicklingError``
    naming it (the caller adds the file)."""

    _allowed = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "scalar"): _scalar_global(),
        ("numpy._core.multiarray", "scalar"): _scalar_global(),
        ("torch._utils", "_rebuild_tensor_v2"): _LazyTensor,
        ("torch.storage", "_load_from_bytes"): _LegacyStorage,
    }

    def find_class(self, module: str, name: str):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing global {module}.{name}: not part of the NATS-Bench archive format") from None


def unpickle_arch_file(raw: bytes):
    """The decompressed pickle of an architecture file -> its ``OrderedDict`` (hp -> record), tensors lazy."""
    return _ArchiveUnpickler(io.BytesIO(raw)).load()


def materialise(state_dict) -> dict:
    """Replace every lazy tensor of an unpickled state dict by its tensor (in place; returned)."""
    for key, value in state_dict.items():
        if not isinstance(value, _LazyTensor):
            raise TypeError(f"{key!r} is a {type(value).__name__}, not a tensor")
        state_dict[key] = value.materialise()
    return state_dict


# --------------------------------------------------------------------------- the archive


class NatsArchive:
    """One ``-full`` archive directory of one search space, read at one training schedule ``hp``."""

    def __init__(self, archive_dir: str | Path, space: str, hp: str | None = None):
        self.space = check_space(space)
        self.hp = check_hp(space, hp if hp is not None else DEFAULT_HP[space])
        self.archive_dir = Path(archive_dir)
        if not self.archive_dir.is_dir():
            raise FileNotFoundError(f"NATS-Bench {space} archive directory not found: {self.archive_dir}")
        self._meta_archs: list[str] | None = None
        self._local = threading.local()

    @property
    def meta_archs(self) -> list[str]:
        """Architecture strings in index order, from ``meta.pickle.pbz2``."""
        if self._meta_archs is None:
            path = self.archive_dir / "meta.pickle.pbz2"
            try:
                meta = _ArchiveUnpickler(io.BytesIO(bz2.decompress(path.read_bytes()))).load()
                archs = list(meta["meta_archs"])
            except Exception as exc:
                raise ValueError(f"{path}: not a readable NATS-Bench meta file ({type(exc).__name__}: {exc})") from exc
            self._meta_archs = archs
        return self._meta_archs

    @property
    def api(self):
        """The official API object (one per thread). Not used for loading; kept for inspection."""
        api = getattr(self._local, "api", None)
        if api is None:
            from nats_bench import create

            api = create(str(self.archive_dir), self.space, fast_mode=True, verbose=False)
            self._local.api = api
        return api

    def __len__(self) -> int:
        return len(self.meta_archs)

    def _results(self, index: int):
        """nats_bench's ``ArchResults`` of this archive's hp, weights still lazy; one decompression."""
        from nats_bench.api_utils import ArchResults

        path = arch_file(self.archive_dir, index)
        if not 0 <= index < len(self):
            raise ArchiveError(index, path, f"index outside [0, {len(self)})")
        if not path.is_file():
            raise ArchiveError(index, path, "file missing")
        try:
            per_hp = unpickle_arch_file(read_arch_file(path))
        except Exception as exc:  # bz2 (OSError, EOFError), pickle, or a refused global
            raise ArchiveError(index, path, f"cannot read ({type(exc).__name__}: {exc})") from exc
        if not isinstance(per_hp, dict):
            raise ArchiveError(index, path, f"cannot read: holds a {type(per_hp).__name__}, not a dict of hps")
        if self.hp not in per_hp:
            raise ArchiveError(index, path, f"cannot read hp {self.hp!r} (the file has hps {list(per_hp)})")
        try:
            return ArchResults.create_from_state_dict(per_hp[self.hp])
        except Exception as exc:
            raise ArchiveError(index, path, f"cannot read hp {self.hp!r} ({type(exc).__name__}: {exc})") from exc

    def seeds(self, index: int, dataset: str) -> list[int]:
        """The training seeds recorded for this architecture and dataset, ascending."""
        return self._seeds(self._results(index), index, check_dataset(dataset))

    def _seeds(self, results, index: int, dataset: str) -> list[int]:
        seeds = results.dataset_seed.get(dataset)
        if not seeds:
            raise ArchiveError(index, arch_file(self.archive_dir, index), f"no {dataset!r} results at hp {self.hp}")
        return sorted(seeds)

    def load(self, index: int, datasets: str | Sequence[str], seeds: Sequence[int] | None = None) -> list[ArchiveEntry]:
        """Entries of every requested dataset from one read of the file, each with its weights.

        Ordered by ``datasets`` as given, then seed ascending. ``seeds=None``: the first
        (lowest) recorded seed of each dataset; a list: those seeds for every dataset
        (``ArchiveError`` if one is not recorded)."""
        names = check_datasets(datasets)
        wanted_seeds = None if seeds is None else sorted({int(s) for s in seeds})
        path = arch_file(self.archive_dir, index)
        results = self._results(index)
        entries = []
        for dataset in names:
            available = self._seeds(results, index, dataset)
            wanted = available[:1] if wanted_seeds is None else wanted_seeds
            for seed in wanted:
                if seed not in available:
                    raise ArchiveError(index, path, f"seed {seed} not recorded for {dataset} (have {available})")
                entries.append(self._entry(results, index, path, dataset, seed))
        return entries

    def _entry(self, results, index: int, path: Path, dataset: str, seed: int) -> ArchiveEntry:
        run = results.all_results.get((dataset, seed))
        if run is None:
            raise ArchiveError(index, path, f"no result record for ({dataset!r}, {seed}) at hp {self.hp}")
        state_dict = run.net_state_dict
        if state_dict is None:
            raise NoWeightsError(index, path, f"no weights stored at hp {self.hp} for ({dataset}, seed {seed}) in "
                                              f"{self.archive_dir}: a -simple archive, or a schedule whose weights "
                                              f"this archive does not keep (the mini benchmark keeps TSS hp 12 "
                                              f"weights only with minibench.tss_hp12_weights: true)")
        if not isinstance(state_dict, dict):
            raise ArchiveError(index, path, "net_state_dict is not a dict of tensors")
        try:
            materialise(state_dict)
        except Exception as exc:
            raise ArchiveError(index, path, f"net_state_dict is not a dict of tensors ({type(exc).__name__}: {exc})") from exc
        key = f"ori-test@{run.epochs - 1}"
        if key not in run.eval_acc1es:
            raise ArchiveError(index, path, f"no recorded {key!r} accuracy")
        return ArchiveEntry(
            index=index,
            arch_str=results.arch_str,
            space=self.space,
            hp=self.hp,
            dataset=dataset,
            seed=int(seed),
            num_classes=int(run.arch_config["class_num"]),
            params=float(run.params),
            flops=float(run.flop),
            recorded_accuracy=float(run.eval_acc1es[key]) / 100.0,
            source=str(path),
            state_dict=state_dict,
        )


# --------------------------------------------------------------------------- prefetch


def _load_or_error(archive: NatsArchive, index: int, datasets, seeds) -> list[ArchiveEntry] | ArchiveError:
    """The entries, or the ArchiveError of a file that cannot be loaded; a :class:`NoWeightsError`
    (a schedule without weights: the configuration's fault) is raised."""
    try:
        return archive.load(index, datasets, seeds)
    except NoWeightsError:
        raise
    except ArchiveError as exc:
        return exc
    except Exception as exc:  # anything else the reader may raise
        return ArchiveError(index, arch_file(archive.archive_dir, index), f"{type(exc).__name__}: {exc}")


_worker_archive: NatsArchive | None = None


def _exit_with_parent() -> None:
    """A loader process ends with the job that started it, even after a kill -9 (Linux prctl)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pool's broken pipe ends it at the next call
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _start_worker(archive_dir: str, space: str, hp: str) -> None:
    global _worker_archive
    _exit_with_parent()
    torch.set_num_threads(1)
    _worker_archive = NatsArchive(archive_dir, space, hp)


def _load_in_worker(index: int, datasets, seeds) -> list[ArchiveEntry] | ArchiveError:
    """In a worker process: weights travel back as numpy arrays (a plain pipe, no shared memory)."""
    loaded = _load_or_error(_worker_archive, index, datasets, seeds)
    if isinstance(loaded, ArchiveError):
        return loaded
    return [dataclasses.replace(e, state_dict={k: v.detach().numpy() for k, v in e.state_dict.items()})
            for e in loaded]


def _as_tensors(loaded: list[ArchiveEntry] | ArchiveError) -> list[ArchiveEntry] | ArchiveError:
    if isinstance(loaded, ArchiveError):
        return loaded
    return [dataclasses.replace(e, state_dict={k: torch.from_numpy(np.asarray(v)) for k, v in e.state_dict.items()})
            for e in loaded]


def prefetch(
    archive: NatsArchive,
    indices: Iterable[int],
    datasets: str | Sequence[str],
    seeds: Sequence[int] | None = None,
    depth: int = 4,
    workers: int = 1,
) -> Iterator[tuple[int, list[ArchiveEntry] | ArchiveError]]:
    """Yield ``(index, entries of every dataset or ArchiveError)`` in order, loading up to ``depth`` ahead.

    Each architecture file is read once for all ``datasets`` (see :meth:`NatsArchive.load`).
    One worker is a background thread; several are spawned processes (bz2 releases the
    GIL, unpickling does not). A failing architecture yields its error instead of
    stopping the iteration, except a :class:`NoWeightsError` (the requested hp holds no
    weights), which is raised: every file of that schedule would fail the same way.
    """
    datasets = check_datasets(datasets)
    pool: Executor
    if workers <= 1:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive")

        def submit(index: int) -> Future:
            return pool.submit(_load_or_error, archive, index, datasets, seeds)

        def result(future: Future):
            return future.result()
    else:
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(str(archive.archive_dir), archive.space, archive.hp))

        def submit(index: int) -> Future:
            return pool.submit(_load_in_worker, index, datasets, seeds)

        def result(future: Future):
            return _as_tensors(future.result())

    pending: deque[tuple[int, Future]] = deque()
    it = iter(indices)
    with pool:
        for index in it:
            pending.append((index, submit(index)))
            if len(pending) >= depth:
                break
        while pending:
            index, future = pending.popleft()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt, submit(nxt)))
            yield index, result(future)
