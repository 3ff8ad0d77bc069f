"""Cost of the check every run makes before Snakemake builds its DAG (calibench.run.repair): every
chunk manifest verified against its seal and compared with the files its job wrote, lost
manifests looked for, and every result table read whole and checked against its seal
(calibench.integrity), at full size.

Writes synthetic results for the full population: 117,702 small shard files under
``shards/``, their measurement manifests (chunks of 200, as config/nats.yaml) recording each
file's size and mtime, and inference manifests for the 48,393 unique networks and their
117,702 logits files (empty files standing in), then times ``repair.changed_chunks`` (median
of 3, warm file-system cache) and once more after deleting one shard and overwriting
another (both must be found); then writes the six result tables at full size (TSS 15,625
rows, SSS 32,768; ``--columns`` float64 columns, sealed as the table build writes them) and
times ``repair.damaged_outputs`` (every byte of every table hashed), then once more with
bytes of one table overwritten (it must be found).

    python bench/bench_repair.py [--dir /tmp/repair] [--chunk-size 200] [--columns 660]

``--copied``: instead, the cost of a run copied without its modification times (tar, scp):
sealed files of a shard's and of a CIFAR-100 logits file's size with a manifest recording
them (``integrity.written_state``), every time changed, then ``repair.changes`` timed as a
plan makes it (every file's content checked), as a run makes it (checked, times given back),
and once more after (a ``stat`` each); per file, projected to the population's files.

    python bench/bench_repair.py --copied [--dir /tmp/repair] [--files 400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from calibench import integrity, layout
from calibench.run import repair

# (space, hp, networks per dataset): TSS's 6,466 unique cells and SSS's 32,768, on 3 datasets
POPULATION = [("tss", "200", 6466), ("sss", "90", 32768)]
DATASETS = ["cifar10", "cifar100", "ImageNet16-120"]


def build(results: Path, chunk: int) -> int:
    files = 0
    for space, hp, n in POPULATION:
        for c, start in enumerate(range(0, n, chunk)):
            indices = list(range(start, min(n, start + chunk)))
            infer = {"space": space, "hp": hp, "chunk": c, "indices": indices, "datasets": {}, "files": {},
                     "failures": []}
            for dataset in DATASETS:
                written = {}
                for i in indices:
                    for path in (layout.shard_path(results, space, hp, dataset, i),
                                 layout.logits_path(results, space, hp, dataset, i)):
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(b"x")
                        files += 1
                    written[str(i)] = repair.file_state(layout.shard_path(results, space, hp, dataset, i))
                infer["datasets"][dataset] = {str(i): "k" for i in indices}
                infer["files"][dataset] = {str(i): repair.file_state(layout.logits_path(results, space, hp, dataset, i))
                                           for i in indices}
                measure = {"space": space, "hp": hp, "dataset": dataset, "chunk": c, "indices": indices,
                           "shards": {str(i): "k" for i in indices}, "files": written, "failures": []}
                path = results / "chunks" / "measure" / f"{space}_{hp}_{dataset}" / f"chunk{c:05d}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                integrity.write_json(measure, path)
            path = results / "chunks" / "infer" / f"{space}_{hp}" / f"chunk{c:05d}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            integrity.write_json(infer, path)
        chunks = [list(range(start, min(n, start + chunk))) for start in range(0, n, chunk)]
        integrity.write_json({"space": space, "selected": list(range(n)), "chunks": chunks},
                             layout.population_path(results, space))
    return files


def build_tables(results: Path, columns: int) -> int:
    """The six tables, sealed; returns their bytes."""
    rng = np.random.default_rng(0)
    total = 0
    for space, hp, _ in POPULATION:
        rows = 15625 if space == "tss" else 32768
        for dataset in DATASETS:
            data = {"arch_index": pa.array(np.arange(rows, dtype=np.int64))}
            data.update({f"c{j}": pa.array(rng.random(rows)) for j in range(columns)})
            path = integrity.write_parquet(pa.table(data), layout.table_path(results, f"{space}_{hp}", dataset),
                                           compression="snappy")
            total += path.stat().st_size
    return total


def copied(root: Path, n: int) -> None:
    """Per-file cost of the check on a copied run (see the module's docstring)."""
    import os

    rng = np.random.default_rng(0)
    # a mini run's shard is 17 KB (a full-size one: its stages' rows, bins included, about as
    # large); a CIFAR-100 network's logits, every seed, 2.2 MB sealed (BENCHMARKS.md)
    for name, floats, count in (("shard", 2_000, n), ("logits file", 280_000, max(1, n // 8))):
        results = root / name.split()[0] / "results"
        states = {}
        for i in range(count):
            path = layout.shard_path(results, "sss", "90", "cifar100", i)
            path.parent.mkdir(parents=True, exist_ok=True)
            integrity.write_parquet(pa.table({"v": rng.random(floats).astype(np.float64 if name == "shard" else
                                                                               np.float32)}), path)
            states[str(i)] = integrity.written_state(path)
        manifest = root / name.split()[0] / "manifest.json"
        integrity.write_json({"space": "sss", "hp": "90", "dataset": "cifar100", "files": states,
                              "shards": {k: "k" for k in states}}, manifest)
        size = layout.shard_path(results, "sss", "90", "cifar100", 0).stat().st_size
        for i in range(count):
            os.utime(layout.shard_path(results, "sss", "90", "cifar100", i))  # as scp leaves it
        timed = {}
        for label, settle in (("plan (content checked)", False), ("run (checked, time given back)", True),
                              ("next start (stat only)", False)):
            start = time.perf_counter()
            assert repair.changes(manifest, results, settle=settle) == []
            timed[label] = (time.perf_counter() - start) / count
        total = 117_702 * timed["plan (content checked)"]
        print(f"{name}s of {size / 1e3:,.0f} kB, {count} copied: " + "; ".join(
            f"{label} {ms * 1e3:.2f} ms a file" for label, ms in timed.items())
            + f"; the population's 117,702 checked once: {total:,.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--chunk-size", type=int, default=200)
    parser.add_argument("--columns", type=int, default=660)
    parser.add_argument("--copied", action="store_true", help="time the check of a run copied without its times")
    parser.add_argument("--files", type=int, default=400)
    args = parser.parse_args()
    if args.copied:
        copied(args.dir or Path(tempfile.mkdtemp(prefix="calibench-copied-")), args.files)
        return
    results = (args.dir or Path(tempfile.mkdtemp(prefix="calibench-repair-"))) / "results"
    start = time.perf_counter()
    files = build(results, args.chunk_size)
    manifests = len(list((results / "chunks").glob("*/*/chunk*.json")))
    print(f"built {files:,} files and {manifests:,} manifests in {time.perf_counter() - start:.0f} s")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        changed = repair.changed_chunks(results)
        times.append(time.perf_counter() - start)
        assert changed == [], changed[:3]
    print(f"changed_chunks, nothing changed: {statistics.median(times):.2f} s (median of 3; "
          f"{files:,} files stat'ed against {manifests:,} manifests)")
    layout.shard_path(results, "sss", "90", "cifar100", 12345).unlink()
    layout.shard_path(results, "tss", "200", "cifar10", 7).write_bytes(b"garbage")
    start = time.perf_counter()
    changed = repair.changed_chunks(results)
    seconds = time.perf_counter() - start
    assert len(changed) == 2, changed
    print(f"changed_chunks, one shard deleted and one overwritten: {seconds:.2f} s, found: "
          + "; ".join(repair.describe(m, r) for m, r in changed))
    start = time.perf_counter()
    size = build_tables(results, args.columns)
    print(f"wrote 6 tables ({size / 1e6:,.0f} MB) in {time.perf_counter() - start:.0f} s")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        damaged = repair.damaged_outputs(results)
        times.append(time.perf_counter() - start)
        assert damaged == [], damaged
    print(f"damaged_outputs, nothing damaged: {statistics.median(times):.2f} s (median of 3; "
          f"{size / 1e6 / statistics.median(times):,.0f} MB/s)")
    table = layout.table_path(results, "sss_90", "cifar100")
    raw = bytearray(table.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 4] = b"\xde\xad\xbe\xef"
    table.write_bytes(bytes(raw))
    start = time.perf_counter()
    damaged = repair.damaged_outputs(results)
    seconds = time.perf_counter() - start
    assert [p for p, _, _ in damaged] == [table], damaged
    print(f"damaged_outputs, bytes of one table overwritten: {seconds:.2f} s, found: {damaged[0][0]}: {damaged[0][1]}")


if __name__ == "__main__":
    main()
