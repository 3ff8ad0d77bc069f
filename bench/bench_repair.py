"""Cost of the check every run makes before Snakemake builds its DAG (calibench.run.repair): every
chunk manifest compared with the files its job wrote, at full size.

Writes synthetic results for the full population: 117,702 small shard files under
``shards/``, their measurement manifests (chunks of 200, as config/nats.yaml) recording each
file's size and mtime, and inference manifests for the 48,393 unique networks and their
117,702 logits files (empty files standing in), then times ``repair.changed_chunks`` (median
of 3, warm file-system cache) and once more after deleting one shard and overwriting
another (both must be found).

    python bench/bench_repair.py [--dir /tmp/repair] [--chunk-size 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from calibench import layout
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
                path.write_text(json.dumps(measure))
            path = results / "chunks" / "infer" / f"{space}_{hp}" / f"chunk{c:05d}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(infer))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--chunk-size", type=int, default=200)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
