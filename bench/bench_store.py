"""Logits store at full size: bytes per network, write and read times, and the cost of a
re-measurement from the store (pre + post for every network), projected to the population.

    python bench/bench_store.py            # CIFAR-10 (+ OoD sets), CIFAR-100, ImageNet16-120 at full size
    python bench/bench_store.py --repeat 5

Logits are synthetic (normal, with a per-row scale: confident and unsure rows) at the real
evaluation-set sizes: CIFAR-10 10,000 test + 10,000 Gaussian-noise + 26,032 SVHN images
x 10 classes, CIFAR-100 10,000 x 100, ImageNet16-120 6,000 x 120. Trained networks'
logits have as much mantissa entropy, so the sizes carry over. The measurement runs the
pipeline's own code path (read the file, split, NLL temperature fit, every metric at 9
bin counts pre and post, OoD AUROCs), one network at a time as measure jobs do on a CPU.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch

from calibench import layout
from calibench.store import logits as store
from calibench.measure.jobs import StoredNetwork, _measure_group, shard_key
from calibench.runtime import keep_freed_memory

SETS = {"cifar10": (10, {"test": 10_000, "ood_gaussian_noise": 10_000, "ood_svhn": 26_032}),
        "cifar100": (100, {"test": 10_000}), "ImageNet16-120": (120, {"test": 6_000})}
TSS_UNIQUE, SSS = 6_466, 32_768
MEASURE = {"bins": [5, 10, 15, 20, 25, 50, 100, 200, 500], "tace_threshold": 0.001,
           "temperature": {"method": "nll", "val_fraction": 0.2, "seed": 42}, "stages": ["pre", "post"]}


def _logits(rng, n, k):
    return (rng.normal(size=(n, k)) * 3 * rng.uniform(0.2, 2.0, size=(n, 1))).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(torch.get_num_threads())
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dataset, (k, sizes) in SETS.items():
            n = sizes["test"]
            labels = rng.integers(0, k, size=n)
            sets = {name: _logits(rng, m, k) for name, m in sizes.items()}
            raw = sum(v.nbytes for v in sets.values())
            key = f"bench-{dataset}"
            path = layout.logits_path(tmp, "tss", "200", dataset, 0)
            writes, reads, measures = [], [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                store.write_network_logits(path, key=key, fields={}, space="tss", hp="200", dataset=dataset, index=0,
                                           arch_str="x", labels=labels,
                                           seeds=[store.SeedLogits(777, 1.0, 1.0, 0.9, "x", sets)])
                writes.append(time.perf_counter() - t)
                t = time.perf_counter()
                back = store.read_network_logits(path)
                reads.append(time.perf_counter() - t)
                s = back.seeds[0]
                net = StoredNetwork(0, "x", 777, 1.0, 1.0, 0.9, torch.from_numpy(s.sets["test"]),
                                    {name[4:]: torch.from_numpy(v) for name, v in s.sets.items() if name != "test"},
                                    key, "x")
                t = time.perf_counter()
                _measure_group([net], torch.from_numpy(labels), MEASURE, "tss", "200", dataset,
                               {0: shard_key(MEASURE, key)})
                measures.append(time.perf_counter() - t)
            assert all(np.array_equal(back.seeds[0].sets[name], v) for name, v in sets.items())
            rows.append((dataset, raw, path.stat().st_size, statistics.median(writes), statistics.median(reads),
                         statistics.median(measures)))
    print(f"{'dataset':<16}{'raw MB':>8}{'file MB':>9}{'write s':>9}{'read s':>8}{'measure s':>11}")
    for dataset, raw, size, w, r, m in rows:
        print(f"{dataset:<16}{raw / 1e6:>8.2f}{size / 1e6:>9.2f}{w:>9.3f}{r:>8.3f}{m:>11.3f}")
    per_arch = sum(r[2] for r in rows)
    archs = TSS_UNIQUE + SSS
    print(f"\nper architecture (one seed, three datasets): {per_arch / 1e6:.2f} MB")
    print(f"full population ({TSS_UNIQUE:,} unique TSS + {SSS:,} SSS architectures, 117,702 networks): "
          f"{per_arch * archs / 1e9:.0f} GB")
    seconds = sum(r[4] + r[5] for r in rows)  # read + measure, per architecture over its three datasets
    print(f"re-measurement from the store (read + pre + post, one core pair): {seconds:.2f} s per architecture, "
          f"{seconds * archs / 3600:.0f} h for the population on this machine")


if __name__ == "__main__":
    main()
