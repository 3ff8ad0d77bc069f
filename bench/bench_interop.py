"""Exporting one full-size result table in the tao2024 layout and importing it back: wall time
of ``export_frame`` + the CSV write, of ``read_tao2024``, and whether every exported value came
back bit for bit (the Brier score's text included: calibench.results.scaled_text).

The table is synthetic, with the columns a result table has (``metric_names`` of the default
bin counts at every stage, the provenance, ``nats_index``) and random values in each metric's
range (a few NaN and +inf NLLs), for a full SSS population (32,768 networks) on CIFAR-100.

    python bench/bench_interop.py                   # 32,768 networks, CIFAR-100 (K = 100)
    python bench/bench_interop.py --networks 2000 --dataset ImageNet16-120
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def synthetic_table(networks: int, dataset: str, seed: int = 0) -> pd.DataFrame:
    from calibench.metrics.suite import metric_names
    from calibench.results import tables
    from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES
    from calibench.vocabulary import STAGES

    rng = np.random.default_rng(seed)
    index = np.arange(networks)
    channels = list(itertools.islice(itertools.product(SSS_CHANNEL_CHOICES, repeat=5), networks))
    cols = {"space": "sss", "hp": "90", "dataset": dataset, "arch_index": index, "measured_by": index,
            "seed": np.full(networks, 777), tables.NATS_INDEX: index,
            "arch_str": [":".join(map(str, c)) for c in channels], "params": rng.uniform(0.1, 1, networks),
            "flops": rng.uniform(1, 100, networks), "temperature": rng.uniform(0.5, 3, networks),
            "accuracy": rng.uniform(0.1, 0.95, networks), "recorded_accuracy": rng.uniform(0.1, 0.95, networks),
            "n_eval": np.full(networks, 8000), "config_hash": "k", "logits_key": "l", "source_bytes": 1,
            "source_mtime": "t", "calibench_version": "bench"}
    for stage in STAGES:
        for name in metric_names():
            high = 2.0 if name == "brier" else 5.0 if name == "nll" else 1.0
            values = rng.uniform(0, high, networks)
            values[rng.random(networks) < 0.01] = np.nan
            if name == "nll":
                values[rng.random(networks) < 0.001] = np.inf
            cols[f"{stage}_{name}"] = values
    return pd.DataFrame(cols)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", type=int, default=32_768)
    parser.add_argument("--dataset", default="cifar100", choices=("cifar10", "cifar100", "ImageNet16-120"))
    args = parser.parse_args()
    from calibench.results import interop

    table = synthetic_table(args.networks, args.dataset)
    print(f"table: {len(table):,} rows, {table.shape[1]} columns ({args.dataset})")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        frame = interop.export_frame(table, source="bench")
        t1 = time.perf_counter()
        path = Path(tmp) / interop._export_name("sss", "90", args.dataset)
        path.write_text(frame.to_csv(index=False, lineterminator="\n"))
        t2 = time.perf_counter()
        back, meta = interop.read_tao2024(path, "sss", "90", args.dataset)
        t3 = time.perf_counter()
        size = path.stat().st_size
    carried = set(back.columns) - set(meta["unavailable"]) - set(meta["derived"])
    ours = [c for c in back.columns if c in table.columns and c in carried and pd.api.types.is_float_dtype(back[c])]
    differ = [c for c in ours if not np.array_equal(table[c].to_numpy(float), back[c].to_numpy(float), equal_nan=True)]
    brier = [c for c in ours if c.endswith("_brier")]
    naive = sum(int(((table[c] / interop.CLASSES[args.dataset]) * interop.CLASSES[args.dataset] != table[c]).sum())
                for c in brier)
    print(f"export_frame {t1 - t0:.2f} s, CSV write {t2 - t1:.2f} s ({size / 1e6:.1f} MB, {frame.shape[1]} columns), "
          f"read_tao2024 {t3 - t2:.2f} s")
    print(f"float columns compared: {len(ours)}, differing: {len(differ)} {differ[:8]}; Brier values that x / K * K "
          f"in float64 would have changed: {naive} of {len(brier) * len(table)}")


if __name__ == "__main__":
    main()
