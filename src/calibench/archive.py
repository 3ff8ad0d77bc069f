"""Trained weights and recorded results from NATS-Bench ``-full`` archives.

Reads through the official API, ``nats_bench.create(dir, space, fast_mode=True)``
(nats-bench-facts.md, "API"), one architecture file at a time. Fast mode caches a
whole architecture file per index; :meth:`NatsArchive.load` drops that cache entry
after use so memory stays flat over thousands of architectures. :func:`prefetch`
loads ahead, in a background thread or in worker processes, so the device is not left
waiting for weights.
"""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .data import check_dataset
from .population import check_space

HPS = {"tss": ("12", "200"), "sss": ("12", "90")}  # hp values whose -full archives keep weights
DEFAULT_HP = {"tss": "200", "sss": "90"}


class ArchiveError(Exception):
    """One architecture cannot be loaded: names the index, the file and the reason."""

    def __init__(self, index: int, path: Path | str, reason: str):
        super().__init__(f"architecture {index} ({path}): {reason}")
        self.index, self.path, self.reason = index, str(path), reason

    def __reduce__(self):  # crosses process boundaries (prefetch workers) intact
        return type(self), (self.index, self.path, self.reason)


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


class NatsArchive:
    """One ``-full`` archive directory of one search space, read at one training schedule ``hp``."""

    def __init__(self, archive_dir: str | Path, space: str, hp: str | None = None):
        self.space = check_space(space)
        self.hp = check_hp(space, hp if hp is not None else DEFAULT_HP[space])
        self.archive_dir = Path(archive_dir)
        if not self.archive_dir.is_dir():
            raise FileNotFoundError(f"NATS-Bench {space} archive directory not found: {self.archive_dir}")
        self._local = threading.local()

    @property
    def api(self):
        """The official API object; one per thread, since it caches and mutates as it reads."""
        api = getattr(self._local, "api", None)
        if api is None:
            from nats_bench import create

            api = create(str(self.archive_dir), self.space, fast_mode=True, verbose=False)  # nats_bench's names too
            self._local.api = api
        return api

    def __len__(self) -> int:
        return len(self.api.meta_archs)

    def _forget(self, index: int) -> None:
        # Fast mode keeps every loaded file (all hps, datasets, seeds, weights).
        self.api.arch2infos_dict.pop(index, None)
        self.api.evaluated_indexes.discard(index)

    def _results(self, index: int):
        path = arch_file(self.archive_dir, index)
        if not 0 <= index < len(self):
            raise ArchiveError(index, path, f"index outside [0, {len(self)})")
        if not path.is_file():
            raise ArchiveError(index, path, "file missing")
        try:
            return self.api.query_meta_info_by_index(index, hp=self.hp)
        except Exception as exc:
            raise ArchiveError(index, path, f"cannot read hp {self.hp!r} ({type(exc).__name__}: {exc})") from exc
        finally:
            self._forget(index)

    def seeds(self, index: int, dataset: str) -> list[int]:
        """The training seeds recorded for this architecture and dataset, ascending."""
        return sorted(self._seeds(self._results(index), index, check_dataset(dataset)))

    def _seeds(self, results, index: int, dataset: str) -> list[int]:
        seeds = results.dataset_seed.get(dataset)
        if not seeds:
            raise ArchiveError(index, arch_file(self.archive_dir, index), f"no {dataset!r} results at hp {self.hp}")
        return sorted(seeds)

    def load(self, index: int, dataset: str, seeds: Sequence[int] | None = None) -> list[ArchiveEntry]:
        """Entries for the given seeds (default: the first, lowest, seed), each with its weights."""
        check_dataset(dataset)
        path = arch_file(self.archive_dir, index)
        results = self._results(index)
        available = self._seeds(results, index, dataset)
        wanted = available[:1] if seeds is None else list(seeds)
        entries = []
        for seed in wanted:
            if seed not in available:
                raise ArchiveError(index, path, f"seed {seed} not recorded for {dataset} (have {available})")
            run = results.all_results[(dataset, seed)]
            state_dict = run.net_state_dict
            if state_dict is None:
                raise ArchiveError(index, path, "no weights stored (a -simple archive, or hp 01?)")
            if not isinstance(state_dict, dict) or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
                raise ArchiveError(index, path, "net_state_dict is not a dict of tensors")
            key = f"ori-test@{run.epochs - 1}"
            if key not in run.eval_acc1es:
                raise ArchiveError(index, path, f"no recorded {key!r} accuracy")
            entries.append(
                ArchiveEntry(
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
            )
        return entries


def _load_or_error(archive: NatsArchive, index: int, dataset: str, seeds) -> list[ArchiveEntry] | ArchiveError:
    try:
        return archive.load(index, dataset, seeds)
    except ArchiveError as exc:
        return exc
    except Exception as exc:  # anything else the unpickler may raise
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


def _load_in_worker(index: int, dataset: str, seeds) -> list[ArchiveEntry] | ArchiveError:
    """In a worker process: weights travel back as numpy arrays (a plain pipe, no shared memory)."""
    loaded = _load_or_error(_worker_archive, index, dataset, seeds)
    if isinstance(loaded, ArchiveError):
        return loaded
    return [dataclasses.replace(e, state_dict={k: v.numpy() for k, v in e.state_dict.items()}) for e in loaded]


def _as_tensors(loaded: list[ArchiveEntry] | ArchiveError) -> list[ArchiveEntry] | ArchiveError:
    if isinstance(loaded, ArchiveError):
        return loaded
    return [dataclasses.replace(e, state_dict={k: torch.from_numpy(np.asarray(v)) for k, v in e.state_dict.items()})
            for e in loaded]


def prefetch(
    archive: NatsArchive,
    indices: Iterable[int],
    dataset: str,
    seeds: Sequence[int] | None = None,
    depth: int = 4,
    workers: int = 1,
) -> Iterator[tuple[int, list[ArchiveEntry] | ArchiveError]]:
    """Yield ``(index, entries or ArchiveError)`` in order, loading up to ``depth`` ahead.

    One worker is a background thread. Several are processes: bz2 decompression releases
    the GIL but unpickling the weights does not (a third of a load), so threads stop
    scaling at about 1.4x on 2 cores (BENCHMARKS.md). A failing architecture yields its
    error instead of stopping the iteration.
    """
    pool: Executor
    if workers <= 1:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive")

        def submit(index: int) -> Future:
            return pool.submit(_load_or_error, archive, index, dataset, seeds)

        def result(future: Future):
            return future.result()
    else:
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(str(archive.archive_dir), archive.space, archive.hp))

        def submit(index: int) -> Future:
            return pool.submit(_load_in_worker, index, dataset, seeds)

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
