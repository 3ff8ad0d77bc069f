"""Archive loading: the old reader (official API, one file read per dataset) against the new one.

Builds (or reuses, ``--dir``) a real-size mini benchmark (``MiniBenchSpec(real_size=True)``:
files shaped and sized like the real ``-full`` ones, ~27.5 MB TSS and ~17.4 MB SSS on
average) and measures, in this one process (one loader), per architecture file:

* ``bz2``: ``bz2.decompress`` of the file's bytes, the bound of any loader;
* ``old``: the previous ``NatsArchive.load`` (``nats_bench.create(dir, space, fast_mode=True)``
  + ``query_meta_info_by_index``, which deep-copies the whole hp record; a private copy
  of it is kept below), one dataset per load, so a run's three datasets cost three loads;
* ``new``: ``calibench.sources.nats.archive.NatsArchive.load(index, [all three datasets])``, one load;

each as the best of ``--repeats`` rounds per file (the three take turns in a round), then
loads/s, MB/s of bz2 and the share of a load that is not decompression; then ``prefetch``
throughput (new reader, the three datasets) with 1 loader (a thread) and 2..N loader
processes (and, for comparison, 2..N plain threads); and a projection of one
pass over the files a full run needs (6,466 unique TSS + 32,768 SSS files at the real mean
sizes) in core-hours, against the old design's three passes.

Usage: python bench/bench_loading.py [--dir DIR] [--files 3] [--repeats 5] [--loaders N_CPUS]
"""

from __future__ import annotations

import argparse
import bz2
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from calibench.sources.nats.archive import ArchiveEntry, ArchiveError, NatsArchive, arch_file, prefetch
from calibench.inference.data import DATASETS
from calibench.sources.nats.minibench import REAL_MEAN_FILE_BYTES, SSS_DIR, TSS_DIR, MiniBenchSpec, build_minibench

RUN_FILES = {"tss": 6466, "sss": 32768}  # unique TSS architectures, all SSS ones
DIRS = {"tss": TSS_DIR, "sss": SSS_DIR}


class OldReader:
    """The previous reader, as it was (calibench before the single-read loader), for comparison."""

    def __init__(self, archive_dir: Path, space: str, hp: str):
        from nats_bench import create

        self.archive_dir, self.space, self.hp = archive_dir, space, hp
        self.api = create(str(archive_dir), space, fast_mode=True, verbose=False)

    def _results(self, index: int):
        path = arch_file(self.archive_dir, index)
        try:
            return self.api.query_meta_info_by_index(index, hp=self.hp)
        except Exception as exc:
            raise ArchiveError(index, path, f"cannot read hp {self.hp!r} ({type(exc).__name__}: {exc})") from exc
        finally:
            self.api.arch2infos_dict.pop(index, None)
            self.api.evaluated_indexes.discard(index)

    def load(self, index: int, dataset: str) -> list[ArchiveEntry]:
        path = arch_file(self.archive_dir, index)
        results = self._results(index)
        seed = sorted(results.dataset_seed[dataset])[0]
        run = results.all_results[(dataset, seed)]
        state_dict = run.net_state_dict
        if not isinstance(state_dict, dict) or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
            raise ArchiveError(index, path, "net_state_dict is not a dict of tensors")
        key = f"ori-test@{run.epochs - 1}"
        return [ArchiveEntry(index=index, arch_str=results.arch_str, space=self.space, hp=self.hp, dataset=dataset,
                             seed=int(seed), num_classes=int(run.arch_config["class_num"]), params=float(run.params),
                             flops=float(run.flop), recorded_accuracy=float(run.eval_acc1es[key]) / 100.0,
                             source=str(path), state_dict=state_dict)]


def cpu_snapshot() -> tuple[float, float, float]:
    """(wall seconds, CPU seconds used by the whole machine, CPU seconds used by this process and its children)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    except (OSError, ValueError):
        busy = float("nan")
    t = os.times()
    return time.perf_counter(), busy, t.user + t.system + t.children_user + t.children_system


def others_load(start: tuple[float, float, float]) -> str:
    """How many CPUs other processes kept busy since ``start`` (the measurements compete with them)."""
    wall, busy, own = (b - a for a, b in zip(start, cpu_snapshot()))
    return f"other processes kept {max(0.0, busy - own) / wall:.2f} of {os.cpu_count()} CPUs busy"


def best_interleaved(fns: list, repeats: int) -> list[float]:
    """Best time of each function over ``repeats`` rounds, the functions taking turns in every
    round (so a change in the machine's load affects them alike)."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
    return [min(ts) for ts in times]


def measure_space(root: Path, space: str, repeats: int) -> dict:
    """Per file: bz2 bound, old load (one dataset), new load (three datasets); summed over the files."""
    directory = root / DIRS[space]
    files = sorted(directory.glob("0*.pickle.pbz2"))
    new = NatsArchive(directory, space)
    old = OldReader(directory, space, new.hp)
    sizes, t_bz2, t_old, t_new = [], [], [], []
    for index, path in enumerate(files):
        payload = path.read_bytes()
        sizes.append(len(payload) / 1e6)
        b, o, n = best_interleaved([lambda: bz2.decompress(payload), lambda: old.load(index, DATASETS[0]),
                                    lambda: new.load(index, DATASETS)], repeats)
        t_bz2.append(b)
        t_old.append(o)
        t_new.append(n)
        print(f"  {space} {path.name}: {sizes[-1]:.1f} MB, bz2 {t_bz2[-1]:.2f} s, old (1 dataset) {t_old[-1]:.2f} s, "
              f"new (3 datasets) {t_new[-1]:.2f} s", flush=True)
    mb, bz, o, n = sum(sizes), sum(t_bz2), sum(t_old), sum(t_new)
    return {"files": len(files), "mb": mb, "bz2": bz, "old": o, "new": n}


def measure_prefetch(root: Path, space: str, max_loaders: int, rounds: int) -> list[tuple[str, float, float]]:
    directory = root / DIRS[space]
    files = sorted(directory.glob("0*.pickle.pbz2"))
    mb = sum(f.stat().st_size for f in files) / 1e6 * rounds
    archive = NatsArchive(directory, space)
    indices = list(range(len(files))) * rounds
    rows = []
    for loaders in range(1, max_loaders + 1):
        start = time.perf_counter()
        for _, loaded in prefetch(archive, indices, DATASETS, depth=2 * loaders, workers=loaders):
            assert not isinstance(loaded, Exception), loaded
        t = time.perf_counter() - start
        rows.append(("1 thread" if loaders == 1 else f"{loaders} processes", len(indices) / t, mb / t))
    for loaders in range(2, max_loaders + 1):  # for comparison: prefetch uses processes for more than one loader
        start = time.perf_counter()
        with ThreadPoolExecutor(loaders) as pool:
            for loaded in pool.map(lambda i: archive.load(i, DATASETS), indices):
                assert loaded
        t = time.perf_counter() - start
        rows.append((f"{loaders} threads (not prefetch)", len(indices) / t, mb / t))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="a real-size mini benchmark to reuse (built there if absent)")
    parser.add_argument("--files", type=int, default=3, help="architecture files per space when building")
    parser.add_argument("--repeats", type=int, default=5, help="each measurement is the best of this many")
    parser.add_argument("--loaders", type=int, default=len(os.sched_getaffinity(0)),
                        help="prefetch with 1..N loaders (1: a thread; more: processes)")
    parser.add_argument("--rounds", type=int, default=4, help="prefetch reads every file this often")
    args = parser.parse_args()
    from calibench.runtime import keep_freed_memory

    keep_freed_memory()  # as the pipeline's job entry points do: freed buffers are reused, not faulted in again

    print(f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads")
    root = args.dir or Path(tempfile.mkdtemp(prefix="calibench-loading-")) / "mb"
    if not (root / TSS_DIR).is_dir():
        start = time.perf_counter()
        build_minibench(root, MiniBenchSpec(n_tss=args.files, n_sss=args.files, n_test=50, n_train=50, real_size=True))
        print(f"built a real-size mini benchmark ({args.files} + {args.files} files) in {root} "
              f"in {time.perf_counter() - start:.0f} s")

    start = cpu_snapshot()
    results = {space: measure_space(root, space, args.repeats) for space in ("tss", "sss")}
    print(f"single-loader measurements: {others_load(start)}")
    print()
    print("| space | files, mean size | bz2.decompress (bound) | old: 1 dataset per load | "
          "new: 3 datasets per load | not decompression, old / new | one file for 3 datasets, old / new |")
    print("|---|---|---|---|---|---|---|")
    for space, r in results.items():
        f = r["files"]
        print(f"| {space.upper()} | {f}, {r['mb'] / f:.1f} MB | {f / r['bz2']:.2f} files/s, {r['mb'] / r['bz2']:.1f} MB/s | "
              f"{f / r['old']:.2f} loads/s, {r['mb'] / r['old']:.1f} MB/s | {f / r['new']:.2f} loads/s, "
              f"{r['mb'] / r['new']:.1f} MB/s | {1 - r['bz2'] / r['old']:.0%} / {1 - r['bz2'] / r['new']:.0%} | "
              f"{3 * r['old'] / f:.2f} s / {r['new'] / f:.2f} s ({3 * r['old'] / r['new']:.1f}x) |")

    print()
    print("prefetch, new reader, the three datasets per file (worker start-up included):")
    print("| space | loaders | archives/s | MB/s of bz2 |")
    print("|---|---|---|---|")
    start = cpu_snapshot()
    for space in ("tss", "sss"):
        for kind, per_s, mb_s in measure_prefetch(root, space, args.loaders, args.rounds):
            print(f"| {space.upper()} | {kind} | {per_s:.2f} | {mb_s:.1f} |", flush=True)
    print(f"prefetch measurements: {others_load(start)}")

    print()
    old_h = new_h = bound_h = 0.0
    for space, r in results.items():
        mean_mb = REAL_MEAN_FILE_BYTES[space] / 1e6
        per_mb = {k: r[k] / r["mb"] for k in ("bz2", "old", "new")}  # seconds per MB of bz2, one loader
        new_h += RUN_FILES[space] * mean_mb * per_mb["new"] / 3600
        old_h += 3 * RUN_FILES[space] * mean_mb * per_mb["old"] / 3600
        bound_h += RUN_FILES[space] * mean_mb * per_mb["bz2"] / 3600
    total_gb = sum(RUN_FILES[s] * REAL_MEAN_FILE_BYTES[s] for s in RUN_FILES) / 1e9
    print(f"projection, one loader core: the {sum(RUN_FILES.values()):,} files a full run reads "
          f"({RUN_FILES['tss']:,} TSS x {REAL_MEAN_FILE_BYTES['tss'] / 1e6} MB + {RUN_FILES['sss']:,} SSS x "
          f"{REAL_MEAN_FILE_BYTES['sss'] / 1e6} MB = {total_gb:.0f} GB): new, one pass {new_h:.0f} core-hours "
          f"(bz2 bound {bound_h:.0f}); old, three passes (one per dataset) {old_h:.0f} core-hours ({old_h / new_h:.1f}x)")


if __name__ == "__main__":
    main()
