"""The inference job's frame that every population source shares (:func:`store_chunk_logits`):
which (member, dataset) logits are missing or stale, a source's producer for those
(:mod:`calibench.sources`: NATS-Bench's archives, a logits directory, torch models), the
store, the chunk's manifest, failures recorded. A killed job resumes where it stopped:
rerunning it skips every logits file whose key matches.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from calibench import integrity, layout
from calibench.integrity import write_json
from calibench.store import logits as store

log = logging.getLogger(__name__)


def log_slurm() -> None:
    if os.environ.get("SLURM_JOB_ID"):
        log.info("SLURM job %s (array task %s) on %s, GPUs allocated: %s", os.environ["SLURM_JOB_ID"],
                 os.environ.get("SLURM_ARRAY_TASK_ID", "-"), os.environ.get("SLURMD_NODENAME", "?"),
                 os.environ.get("CUDA_VISIBLE_DEVICES", "none"))


def progress_bar(iterable, enabled: bool, **kwargs):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, mininterval=5, **kwargs)


class BackgroundWriter:
    """Store writes on one background thread, so the device computes the next network meanwhile
    (docs/architecture.md: on a GPU node the store is written in the background). At most
    ``pending`` writes wait (their logits held in memory); a write that fails raises in the
    caller at the next submit or on leaving the ``with`` block, which waits for every write,
    so a manifest is written only after all of its files are (each file itself atomic)."""

    def __init__(self, pending: int = 8):
        self.pending = pending
        self._futures: deque[Future] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")

    def submit(self, write: Callable, *args, **kwargs) -> None:
        while self._futures and (self._futures[0].done() or len(self._futures) >= self.pending):
            self._futures.popleft().result()  # raises the write's error here
        self._futures.append(self._pool.submit(write, *args, **kwargs))

    def __enter__(self) -> "BackgroundWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            while self._futures:
                future = self._futures.popleft()
                if exc_type is None:
                    future.result()
                else:  # already failing: wait for the writes in flight, report the first error
                    future.exception()
        finally:
            self._pool.shutdown(wait=True)


def store_chunk_logits(space: str, hp: str, chunk: int, results: str | Path, manifest: str | Path,
                       indices: list[int], datasets: list[str], fields: Mapping, names: list[str],
                       labels_of: Callable[[str], np.ndarray], produce: Callable, progress: bool = True,
                       what: str = "models") -> dict:
    """The inference job's frame, for every source: each (member, dataset) whose stored logits
    lack the key made of ``fields[index, dataset]`` is computed by ``produce(todo)`` (``todo``:
    index -> the datasets it needs), which yields ``(index, dataset, [SeedLogits, ...])`` or
    ``(index, dataset, failure dict)`` (``source``, ``reason``, ``seed``); logits go into the
    store, failures into the manifest, and a failure never stops the others. ``labels_of``:
    a dataset's labels (loaded only if something is computed)."""
    results = Path(results)
    keys = {pair: store.digest(f) for pair, f in fields.items()}
    todo: dict[int, list[str]] = {}
    for i in indices:
        for d in datasets:
            path = layout.logits_path(results, space, hp, d, i)
            problem = store.problem(path, keys[i, d])
            if problem is not None:
                todo.setdefault(i, []).append(d)
                if problem.startswith(("damaged", "unreadable")):
                    log.warning("%s: %s: computed again", path, problem)
    todo = {i: needed for i, needed in todo.items() if needed}
    log_slurm()
    n_pairs = len(indices) * len(datasets)
    n_todo = sum(len(v) for v in todo.values())
    label = f"{space} hp={hp}" if hp else space
    log.info("%s chunk %d: %d %s x %d datasets, %d logits files already stored (skipped), %d to compute",
             label, chunk, len(indices), what, len(datasets), n_pairs - n_todo, n_todo)
    failures: list[dict] = []
    computed = 0
    start = time.perf_counter()
    if todo:
        labels: dict[str, np.ndarray] = {}
        with BackgroundWriter() as writer:
            for index, dataset, out in progress_bar(produce(todo), progress, total=n_todo,
                                                 desc=f"{label} chunk {chunk}", unit="logits"):
                if isinstance(out, Mapping):
                    failures.append({"space": space, "hp": hp, "dataset": dataset, "arch_index": index,
                                     "seed": out.get("seed"), "source": out["source"], "reason": out["reason"],
                                     "stage": "inference", **integrity.failed_source(out["source"])})
                    continue
                if dataset not in labels:
                    labels[dataset] = labels_of(dataset)
                writer.submit(store.write_network_logits, layout.logits_path(results, space, hp, dataset, index),
                              key=keys[index, dataset], fields=fields[index, dataset], space=space, hp=hp,
                              dataset=dataset, index=index, arch_str=names[index], labels=labels[dataset], seeds=out)
                computed += 1
    failed = {(f["arch_index"], f["dataset"]) for f in failures}
    summary = {
        "space": space, "hp": hp, "chunk": chunk, "indices": indices, "datasets": {
            d: {str(i): keys[i, d] for i in indices if (i, d) not in failed} for d in datasets},
        "files": {d: {str(i): integrity.written_state(layout.logits_path(results, space, hp, d, i)) for i in indices
                      if (i, d) not in failed} for d in datasets},
        "skipped": n_pairs - n_todo, "computed": computed, "archive_files_read": len(todo), "failures": failures,
        "seconds": round(time.perf_counter() - start, 3),
    }
    for f in failures:
        log.warning("%s %d %s failed (%s): %s", what.rstrip("s"), f["arch_index"], f["dataset"], f["source"],
                    f["reason"])
    log.info("chunk %d done: %d logits files computed, %d skipped, %d failed in %.1f s", chunk, computed,
             summary["skipped"], len(failed), summary["seconds"])
    write_json(summary, manifest)
    return summary


