"""Architecture search at full size: wall time of the whole Table-1 protocol (calibench.analysis.nats.nas).

Builds synthetic result tables holding every architecture (TSS: 15,625 cell strings; SSS:
32,768 channel strings) with accuracy and ECE that depend smoothly on the architecture
(convolutions / channels) plus noise, then times ``nas_table`` with the protocol defaults:
3 algorithms x 4 objectives (accuracy, HCS_1/2/3) x 100 repeats x budget 100 distinct
queries. Reports the best of ``--rounds`` timings, the queries per second and the machine
(with its load average: other jobs slow single runs).

    python bench/bench_nas.py
    python bench/bench_nas.py --repeats 1000 --budget 300
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import time

import numpy as np
import pandas as pd

from calibench.analysis.nats import nas
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS


def tss_table(rng: np.random.Generator) -> pd.DataFrame:
    ops = np.array(list(itertools.product(range(len(TSS_OPS)), repeat=6)))
    strings = [f"|{TSS_OPS[o[0]]}~0|+|{TSS_OPS[o[1]]}~0|{TSS_OPS[o[2]]}~1|+|{TSS_OPS[o[3]]}~0|"
               f"{TSS_OPS[o[4]]}~1|{TSS_OPS[o[5]]}~2|" for o in ops]
    conv = ((ops == 2) | (ops == 3)).sum(axis=1)
    acc = np.clip(0.55 + 0.06 * conv + rng.normal(0, 0.03, len(ops)), 0.1, 0.95)
    ece = np.clip(0.01 + 0.01 * conv + rng.gamma(2.0, 0.01, len(ops)), 0.001, 0.5)
    return frame("tss", strings, acc, ece, rng)


def sss_table(rng: np.random.Generator) -> pd.DataFrame:
    ch = np.array(list(itertools.product(SSS_CHANNEL_CHOICES, repeat=5)))
    strings = [":".join(map(str, c)) for c in ch]
    size = ch.sum(axis=1) / 320
    acc = np.clip(0.8 + 0.13 * size + rng.normal(0, 0.01, len(ch)), 0.1, 0.97)
    ece = np.clip(0.02 + 0.03 * size + rng.gamma(2.0, 0.005, len(ch)), 0.001, 0.5)
    return frame("sss", strings, acc, ece, rng)


def frame(space, strings, acc, ece, rng) -> pd.DataFrame:
    n = len(strings)
    return pd.DataFrame({"space": space, "hp": "200" if space == "tss" else "90", "dataset": "cifar10",
                         "arch_index": np.arange(n), "arch_str": strings, "accuracy": acc, "pre_ece_15": ece,
                         "pre_mmce": ece * rng.uniform(0.3, 0.6, n), "pre_ksce": ece * rng.uniform(0.8, 1.0, n)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=nas.BUDGET)
    parser.add_argument("--repeats", type=int, default=nas.REPEATS)
    parser.add_argument("--rounds", type=int, default=3, help="timings per table; the best is reported")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, Python {platform.python_version()}, "
          f"numpy {np.__version__}, pandas {pd.__version__}")
    rng = np.random.default_rng(0)
    for name, build in (("tss", tss_table), ("sss", sss_table)):
        df = build(rng)
        runs = len(nas.ALGORITHMS) * len(nas.OBJECTIVES) * args.repeats
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            out = nas.nas_table(df, budget=args.budget, repeats=args.repeats)
            times.append(time.perf_counter() - t)
        best = min(times)
        queries = float((out["queries_mean"] * out["repeats"]).sum())
        print(f"{name}: {len(df):,} architectures, {runs:,} runs x budget {args.budget}: "
              f"{best:.2f} s (rounds: {', '.join(f'{x:.2f}' for x in times)}), "
              f"{queries / best:,.0f} distinct queries/s, {1e3 * best / runs:.2f} ms per run")
        print(out[["algorithm", "objective", "accuracy_mean", "pre_ece_15_mean", "hcs_1_mean", "hit_rate"]]
              .round(4).to_string(index=False))


if __name__ == "__main__":
    main()
