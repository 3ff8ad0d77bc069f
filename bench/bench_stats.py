"""Bootstrap intervals for Kendall tau-b (calibench.analysis.stats) at population size.

Synthetic metric columns for a full SSS population (default 32,768 networks) that look
like the tables': an accuracy on 10,000 test images (ties: values k / 10000), ECE-like
and NLL-like columns correlated with it and with each other, a few NaN (failed fits)
and a few +inf NLLs. Times, each the median of ``--repeat`` runs where cheap:

* ``kendall_tau`` (O(n log n)) against ``scipy.stats.kendalltau`` on one pair;
* ``kendall_bootstrap``: tau and a 95% interval from ``--resamples`` resamples, one pair,
  split into drawing the resamples (multiplicities) and the per-pair work;
* the plain loop (``rng.integers`` + ``scipy.stats.kendalltau`` per resample) on a few
  resamples, extrapolated to ``--resamples``;
* ``kendall_matrix_ci`` over ``--metrics`` columns (M (M - 1) / 2 pairs, one set of
  resamples), run once.

The machine line gives cores, torch threads, library versions and the load average
before the run (other work on a shared machine slows every figure).

    python bench/bench_stats.py                       # 32,768 networks, 1,000 resamples, 8 metrics
    python bench/bench_stats.py --n 15625 --metrics 4 # TSS size
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time

import numpy as np
import pandas as pd
import scipy
import torch
from scipy.stats import kendalltau

from calibench.analysis import stats


def population(n: int, metrics: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=n)
    cols = {"accuracy": np.round(np.clip(0.7 + 0.08 * skill + 0.02 * rng.normal(size=n), 0, 1) * 10000) / 10000}
    for j in range(1, metrics):
        v = np.abs(0.05 - 0.01 * skill * rng.uniform(0.2, 1.0) + 0.02 * rng.normal(size=n))
        if j % 3 == 2:  # NLL-like: a few infinite
            v = np.where(rng.random(n) < 0.001, np.inf, 1 + 10 * v)
        cols[f"m{j}"] = v
    df = pd.DataFrame(cols)
    failed = rng.random(n) < 0.002  # failed fits: NaN in every post-hoc column
    df.loc[failed, [c for c in df.columns if c != "accuracy"]] = np.nan
    return df


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, repeat: int):
    """Median wall time, median CPU time (user + sys, both threads) and the last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu() - c)
    return statistics.median(walls), statistics.median(cpus), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32768, help="networks (rows)")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=8, help="columns of the matrix (0: no matrix)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--loop", type=int, default=20, help="resamples of the plain scipy loop (extrapolated)")
    args = ap.parse_args()

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, "
          f"scipy {scipy.__version__}, python {platform.python_version()}")
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared machine: other work slows "
          f"every figure)")
    n, b = args.n, args.resamples
    df = population(n, max(args.metrics, 2))
    x, y = df["accuracy"].to_numpy(), df["m1"].to_numpy()
    keep = ~(np.isnan(x) | np.isnan(y))
    print(f"n = {n:,} networks ({int(keep.sum()):,} complete for the pair), {b:,} resamples")

    t_ours, _, tau = timed(lambda: stats.kendall_tau(x, y), args.repeat)
    t_scipy, _, ref = timed(lambda: kendalltau(x[keep], y[keep]).statistic, args.repeat)
    print(f"kendall_tau: {t_ours * 1e3:.1f} ms (scipy {t_scipy * 1e3:.1f} ms), |diff| = {abs(tau - ref):.1e}")

    t_draw, _, _ = timed(lambda: list(stats._multiplicities(n, b, 0, stats._chunk(n, b))), args.repeat)
    t_pair, c_pair, (tau, lo, hi) = timed(lambda: stats.kendall_bootstrap(x, y, b, seed=0), args.repeat)
    print(f"kendall_bootstrap, one pair: {t_pair:.2f} s wall, {c_pair:.2f} s CPU (drawing the resamples "
          f"{t_draw:.2f} s of it), {t_pair / b * 1e3:.2f} ms per resample; tau = {tau:.4f} [{lo:.4f}, {hi:.4f}]")

    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(args.loop):
        idx = rng.integers(0, n, n)
        xi, yi = x[idx], y[idx]
        k = ~(np.isnan(xi) | np.isnan(yi))
        kendalltau(xi[k], yi[k])
    per = (time.perf_counter() - t) / args.loop
    print(f"plain scipy loop: {per * 1e3:.1f} ms per resample, {per * b:.1f} s for {b:,} "
          f"(extrapolated from {args.loop}); ours {per * b / t_pair:.1f}x faster")

    if args.metrics >= 2:
        cols = list(df.columns[:args.metrics])
        pairs = len(cols) * (len(cols) - 1) // 2
        t_mat, c_mat, out = timed(lambda: stats.kendall_matrix_ci(df, cols, resamples=b, seed=0), 1)
        width = (out["hi"] - out["lo"])[out["row"] != out["col"]]
        print(f"kendall_matrix_ci, {len(cols)} metrics ({pairs} pairs): {t_mat:.1f} s wall, {c_mat:.1f} s CPU, "
              f"{t_mat / pairs:.2f} s per pair; interval widths {width.min():.4f}-{width.max():.4f}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
