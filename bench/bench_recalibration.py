"""Speed of the post-hoc stages (recalibration-spec.md): calibench against the public code.

For one network (default CIFAR-100-sized: N = 10,000, K = 100; ImageNet16-120: --n 6000
--k 120), fits on the 20 % validation part and the whole metric suite (9 bin counts) on
the 80 % test part:
  * all eight stages through ``measure_stages_batch`` (what a measurement job runs);
  * per method: fit, and map of the test part;
  * the same fits and maps through the public implementations, one network at a time:
    netcal ``TemperatureScaling`` (post), netcal ``LogisticCalibration`` (vs: netcal's
    vector scaling, on log-probabilities), dirichletcal ``MultinomialRegression`` (ms: full
    matrix, ODIR, on logits) and ``FullDirichletCalibrator`` (dir), scikit-learn
    ``IsotonicRegression`` one per class (iso), netcal ``HistogramBinning`` (hist). The
    splines have no public package (the authors' repository is scripts): not counted;
  * M networks at once: networks per second on CPU (and CUDA where present, checked
    equal to the CPU);
  * --projection: CPU-hours to add the seven methods to an existing full run (117,702
    networks) from the logits store, from the measured cost at the three dataset sizes.

  * --sweep: ms and dir fit time, iterations and held-out NLL for lambda = mu over the
    spec's grid values 1e-3..1e3 at the two large dataset sizes (which value the search
    would choose decides the cost).

Usage: python bench/bench_recalibration.py [--n 10000] [--k 100] [--batch 8] [--lam 1e3 --mu 1e3]
                                           [--no-public] [--projection] [--sweep]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import numpy as np
import torch

from bench_metrics import problem, timed

STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
DATASET_SIZES = {"cifar10": (10_000, 10), "cifar100": (10_000, 100), "ImageNet16-120": (6_000, 120)}
NETWORKS_PER_DATASET = 6_466 + 32_768  # TSS unique + SSS, each dataset


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def public_fits(z_val: np.ndarray, y_val: np.ndarray, z_test: np.ndarray, lam: float, mu: float) -> dict[str, float]:
    """Seconds per method for fit + map of the test part through the public libraries."""
    from dirichletcal import FullDirichletCalibrator
    from dirichletcal.calib.multinomial import MultinomialRegression
    from netcal.binning import HistogramBinning
    from netcal.scaling import LogisticCalibration, TemperatureScaling
    from sklearn.isotonic import IsotonicRegression

    p_val, p_test = _softmax(z_val), _softmax(z_test)
    k = z_val.shape[1]
    out = {}

    def clock(name, fn):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
        out[name] = time.perf_counter() - start

    def post():
        TemperatureScaling().fit(p_val, y_val).transform(p_test)

    def vs():
        LogisticCalibration().fit(p_val, y_val).transform(p_test)

    def ms():
        MultinomialRegression(method="Full", reg_lambda=lam, reg_mu=mu, reg_norm=True, ref_row=False).fit(
            z_val, y_val).predict_proba(z_test)

    def dirichlet():
        FullDirichletCalibrator(reg_lambda=lam, reg_mu=mu, reg_norm=True, ref_row=False).fit(
            p_val, y_val).predict_proba(p_test)

    def iso():
        cols = []
        for c in range(k):
            model = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p_val[:, c], y_val == c)
            cols.append(model.predict(p_test[:, c]))
        q = np.stack(cols, 1)
        q / np.maximum(q.sum(1, keepdims=True), 1e-300)

    def hist():
        HistogramBinning(bins=15).fit(p_val, y_val).transform(p_test)

    for name, fn in (("post", post), ("vs", vs), ("ms", ms), ("dir", dirichlet), ("iso", iso), ("hist", hist)):
        clock(name, fn)
    return out


def ours_fits(z_val: torch.Tensor, y_val: torch.Tensor, z_test: torch.Tensor, rec: dict, repeats: int) -> dict:
    from calibench.recalibration import fit_stage

    out = {}
    for stage in STAGES[1:]:
        out[stage] = timed(lambda: fit_stage(stage, z_val, y_val, rec).logits(z_test), repeats)
    return out


def measure_all(logits, labels, rec, stages=STAGES):
    from calibench.measure.stages import measure_stages_batch

    return measure_stages_batch(logits, labels, stages=stages, recalibration=rec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8, help="networks fitted and measured at once")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lam", type=float, default=1e3,
                        help="ODIR lambda of ms and dir (default: the held-out-NLL best of --sweep on this problem)")
    parser.add_argument("--mu", type=float, default=1e3, help="ODIR mu of ms and dir")
    parser.add_argument("--no-public", action="store_true")
    parser.add_argument("--projection", action="store_true", help="cost at the three dataset sizes, full population")
    parser.add_argument("--sweep", action="store_true", help="ms and dir over lambda = mu in 1e-3..1e3")
    args = parser.parse_args()

    from calibench.measure.stages import split_indices
    from calibench.runtime import keep_freed_memory

    keep_freed_memory()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    rec = {"ms": {"lambda": args.lam, "mu": args.mu}, "dir": {"lambda": args.lam, "mu": args.mu}}
    logits, labels = problem(args.n, args.k)
    val, test = split_indices(args.n)
    z = logits.double()[None]
    z_val, z_test, y_val = z[:, val], z[:, test], labels[val]

    t_all = timed(lambda: measure_all(logits[None], labels, rec), args.repeats)
    t_two = timed(lambda: measure_all(logits[None], labels, rec, ("pre", "post")), args.repeats)
    out = measure_all(logits[None], labels, rec)
    print(f"\nN = {args.n:,}, K = {args.k}: all eight stages, whole suite: {t_all:.3f} s "
          f"(pre + post alone {t_two:.3f} s)")
    for stage in STAGES:
        fit = {k: round(float(v[0]), 4) for k, v in out[stage].items() if k in ("fit_iterations", "fit_converged")}
        print(f"  {stage:7s} ece_15 {out[stage]['ece_15'][0]:.4f}  nll {out[stage]['nll'][0]:.4f}  "
              f"acc {out[stage]['accuracy'][0]:.4f}  {fit}  {out['failures'][stage][0] or ''}")
    ours = ours_fits(z_val, y_val, z_test, rec, args.repeats)
    print("\nfit + map of the test part, seconds: method, calibench" + ("" if args.no_public else ", public, ratio"))
    public = {} if args.no_public else public_fits(z_val[0].numpy(), y_val.numpy(), z_test[0].numpy(), args.lam,
                                                   args.mu)
    for stage, t in ours.items():
        line = f"  {stage:7s} {t:8.3f}"
        if stage in public:
            line += f" {public[stage]:9.3f} {public[stage] / t:8.1f}x"
        print(line)
    if public:
        common = [s for s in ours if s in public]
        total_ours, total_public = sum(ours[s] for s in common), sum(public[s] for s in common)
        print(f"  {'total':7s} {total_ours:8.3f} {total_public:9.3f} {total_public / total_ours:8.1f}x "
              f"({', '.join(common)})")

    m = args.batch
    batch = torch.stack([problem(args.n, args.k, seed=s)[0] for s in range(m)])
    t_batch = timed(lambda: measure_all(batch, labels, rec), max(1, args.repeats - 1))
    print(f"\nbatched, {m} networks at once, all stages: {m / t_batch:.2f} networks/s on CPU")
    if torch.cuda.is_available():
        cuda = batch.cuda()
        t_cuda = timed(lambda: measure_all(cuda, labels.cuda(), rec), max(1, args.repeats - 1))
        got, want = measure_all(cuda, labels.cuda(), rec), measure_all(batch, labels, rec)
        gap = max(float(np.nanmax(np.abs(got[s]["ece_15"] - want[s]["ece_15"]))) for s in STAGES)
        print(f"batched on {torch.cuda.get_device_name()}: {m / t_cuda:.2f} networks/s; max |ECE cuda - cpu| {gap:.2e}")

    if args.projection:
        print("\nprojection: the seven methods added to a full run from the logits store "
              f"({NETWORKS_PER_DATASET:,} networks per dataset, 3 datasets)")
        hours = 0.0
        for dataset, (n, k) in DATASET_SIZES.items():
            lg, lb = problem(n, k)
            extra = timed(lambda: measure_all(lg[None], lb, rec), 2) - timed(
                lambda: measure_all(lg[None], lb, rec, ("pre", "post")), 2)
            hours += extra * NETWORKS_PER_DATASET / 3600
            print(f"  {dataset:15s} N = {n:,}, K = {k}: +{extra:.3f} s per network")
        print(f"  total: {hours:.1f} h on these 2 cores ({2 * hours:.1f} core-hours), besides reading the store")

    if args.sweep:
        sweep()


def sweep() -> None:
    """Fit time, iterations and held-out NLL of ms and dir at lambda = mu on the spec's grid."""
    from calibench.measure.stages import split_indices
    from calibench.recalibration import fit_stage

    print("\nsweep: lambda = mu; fit on 20 %, NLL on the other 80 % (pre-calibration NLL in brackets)")
    for dataset in ("cifar100", "ImageNet16-120"):
        n, k = DATASET_SIZES[dataset]
        logits, labels = problem(n, k)
        val, test = split_indices(n)
        z = logits.double()[None]
        z_val, z_test, y_val, y_test = z[:, val], z[:, test], labels[val], labels[test]
        pre = float(torch.nn.functional.cross_entropy(z_test[0], y_test))
        for stage in ("ms", "dir"):
            for lam in (1e-3, 1e-1, 1e1, 1e3):
                rec = {stage: {"lambda": lam, "mu": lam}}
                start = time.perf_counter()
                fitted = fit_stage(stage, z_val, y_val, rec)
                log_probs = fitted.log_probs(z_test)[0]
                seconds = time.perf_counter() - start
                nll = float(-log_probs[torch.arange(len(y_test)), y_test].mean())
                print(f"  {dataset:15s} {stage:4s} {lam:7.0e}: {seconds:6.2f} s, "
                      f"{fitted.info['iterations'][0]:4.0f} iterations, NLL {nll:7.3f} ({pre:.3f})")


if __name__ == "__main__":
    main()
