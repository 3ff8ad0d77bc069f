"""Speed of the metric suite: calibench against public per-metric code.

Prints, for one network (default N = 10,000 samples, K = 100 classes):
  * ``measure``: the whole suite, one stage, all 9 bin counts;
  * ``measure_stages``: split + NLL temperature fit + pre and post suites;
  * the same suite through torchmetrics (ECE, MCE), uncertainty-calibration
    (equal-mass ECE, classwise ECE and equal-mass classwise ECE) and netcal (MMCE,
    O(N^2)); metrics they lack (ACE/TACE, KS, KDE-ECE) are not counted for them;
  * the batched form's networks per second on CPU, and on CUDA when available (and with
    ``mce: signed``, which keeps the top-label bins' signed sums too).

Usage: python bench/bench_metrics.py [--n 10000] [--k 100] [--batch 16] [--no-public] [--no-tune]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch


def problem(n: int, k: int, seed: int = 0):
    """Logits at three scales with labels drawn from softmax(logits / 1.5): overconfident nets."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 3.0 * rng.uniform(0.2, 2.0, size=(n, 1))
    z = logits / 1.5
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = np.minimum((rng.random((n, 1)) > np.cumsum(p, 1)).sum(1), k - 1)
    return torch.from_numpy(logits).float(), torch.from_numpy(labels)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def public_suite(probs: np.ndarray, labels: np.ndarray, bins) -> None:
    import calibration as uc
    from netcal.metrics import MMCE
    from torchmetrics.functional.classification import multiclass_calibration_error

    p, y = torch.from_numpy(probs), torch.from_numpy(labels)
    k = probs.shape[1]
    for b in bins:
        multiclass_calibration_error(p, y, num_classes=k, n_bins=b, norm="l1")
        multiclass_calibration_error(p, y, num_classes=k, n_bins=b, norm="max")
        uc.get_ece_em(probs, labels, num_bins=b)
        for scheme in (uc.get_equal_prob_bins, uc.get_equal_bins):
            uc.lower_bound_scaling_ce(probs, labels, p=1, debias=False, num_bins=b, binning_scheme=scheme, mode="marginal")
    MMCE().measure(probs, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16, help="networks in the batched measurement")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-public", action="store_true", help="skip the public libraries (slow)")
    parser.add_argument("--no-tune", action="store_true", help="leave glibc malloc at its defaults")
    args = parser.parse_args()

    from calibench import metrics
    from calibench.measure import stages as calibration
    from calibench.runtime import keep_freed_memory

    tuned = False if args.no_tune else keep_freed_memory()
    logits, labels = problem(args.n, args.k)
    bins = metrics.DEFAULT_BINS
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, malloc tuned: {tuned}")
    print(f"one network: N = {args.n}, K = {args.k}, bins = {bins}")

    t_measure = timed(lambda: metrics.measure(logits, labels), args.repeats)
    print(f"  calibench measure (one stage, {len(metrics.metric_names())} values): {t_measure * 1e3:8.1f} ms")
    t_stages = timed(lambda: calibration.measure_stages(logits, labels), args.repeats)
    print(f"  calibench measure_stages (fit + pre + post):         {t_stages * 1e3:8.1f} ms")

    if not args.no_public:
        probs = torch.softmax(logits.double(), -1).numpy()
        y = labels.numpy()
        t_public = timed(lambda: public_suite(probs, y, bins), 1)
        print(f"  torchmetrics + uncertainty-calibration + netcal:     {t_public * 1e3:8.1f} ms "
              f"({t_public / t_measure:.0f}x slower, fewer metrics)")

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        batch = logits[None].repeat(args.batch, 1, 1).to(device)
        y = labels.to(device)
        t = timed(lambda: metrics.measure_batch(batch, y), max(1, args.repeats // 3))
        print(f"  measure_batch on {device}: {args.batch} networks in {t:.2f} s = {args.batch / t:.1f} networks/s")
        t = timed(lambda: metrics.measure_batch(batch, y, mce="signed"), max(1, args.repeats // 3))
        print(f"  measure_batch on {device}, mce signed: {args.batch / t:.1f} networks/s")
        t = timed(lambda: calibration.measure_stages_batch(batch, y), max(1, args.repeats // 3))
        print(f"  measure_stages_batch on {device}: {args.batch / t:.1f} networks/s (pre + post + fit)")


if __name__ == "__main__":
    main()
