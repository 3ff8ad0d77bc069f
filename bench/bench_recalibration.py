"""Speed of the post-hoc stages (docs/recalibration.md): calibench against the public code.

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


def _nll_and_grad(u: np.ndarray, y: np.ndarray):
    """Mean NLL of softmax(u) at labels y and its gradient with respect to u."""
    u = u - u.max(1, keepdims=True)
    lse = np.log(np.exp(u).sum(1))
    n = len(y)
    p = np.exp(u - lse[:, None])
    p[np.arange(n), y] -= 1.0
    return float((lse - u[np.arange(n), y]).mean()), p / n


def fair_fits(z_val: np.ndarray, y_val: np.ndarray, z_test: np.ndarray, lam: float, mu: float) -> dict[str, float]:
    """Seconds per method for fit + map of the test part by the fastest correct public route to
    the SAME model and stopping rule (docs/recalibration.md): scipy's bounded scalar search of
    the NLL over T in [0.05, 20] (post); scipy L-BFGS-B with the analytic gradient to a
    gradient of 1e-6 (vs, ms, dir: the spec's objective, raw logits, W = I, b = 0 start);
    scikit-learn's isotonic regression per class (iso); NumPy histogram binning, 15 equal-width
    right-closed bins per class (hist)."""
    from scipy.optimize import minimize, minimize_scalar
    from sklearn.isotonic import IsotonicRegression

    n, k = z_val.shape
    out = {}

    def clock(name, fn):
        start = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - start

    def post():
        t = minimize_scalar(lambda t: _nll_and_grad(z_val / t, y_val)[0], bounds=(0.05, 20), method="bounded",
                            options={"xatol": 1e-6}).x
        _softmax(z_test / t)

    def vs():
        def f(x):
            w, b = x[:k], x[k:]
            value, g = _nll_and_grad(z_val * w + b, y_val)
            return value, np.concatenate([(g * z_val).sum(0), g.sum(0)])
        x = minimize(f, np.r_[np.ones(k), np.zeros(k)], jac=True, method="L-BFGS-B",
                     options={"gtol": 1e-6 / np.sqrt(2 * k), "maxiter": 1000}).x
        _softmax(z_test * x[:k] + x[k:])

    def odir(inputs_val, inputs_test):
        off = 1.0 - np.eye(k)
        lam_n, mu_n = lam / (k * (k - 1)), mu / k

        def f(x):
            w, b = x[: k * k].reshape(k, k), x[k * k:]
            value, g = _nll_and_grad(inputs_val @ w.T + b, y_val)
            value += lam_n * ((w * off) ** 2).sum() + mu_n * (b ** 2).sum()
            gw = g.T @ inputs_val + 2 * lam_n * w * off
            return value, np.concatenate([gw.ravel(), g.sum(0) + 2 * mu_n * b])
        x = minimize(f, np.r_[np.eye(k).ravel(), np.zeros(k)], jac=True, method="L-BFGS-B",
                     options={"gtol": 1e-6 / np.sqrt(k * k + k), "maxiter": 1000}).x
        _softmax(inputs_test @ x[: k * k].reshape(k, k).T + x[k * k:])

    def log_softmax(z):
        u = z - z.max(1, keepdims=True)
        return u - np.log(np.exp(u).sum(1, keepdims=True))

    p_val, p_test = _softmax(z_val), _softmax(z_test)

    def iso():
        cols = [IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p_val[:, c], y_val == c)
                .predict(p_test[:, c]) for c in range(k)]
        q = np.stack(cols, 1)
        q / np.maximum(q.sum(1, keepdims=True), 1e-300)

    def hist():
        edges = np.linspace(0, 1, 16)
        b_val = np.clip(np.searchsorted(edges, p_val, side="left") - 1, 0, 14)  # right-closed (lo, hi]
        b_test = np.clip(np.searchsorted(edges, p_test, side="left") - 1, 0, 14)
        onehot = np.eye(k)[y_val]
        values = np.zeros((k, 15))
        for c in range(k):
            counts = np.bincount(b_val[:, c], minlength=15)
            hits = np.bincount(b_val[:, c], weights=onehot[:, c], minlength=15)
            values[c] = np.where(counts > 0, hits / np.maximum(counts, 1), (edges[:-1] + edges[1:]) / 2)
        q = values[np.arange(k), b_test]
        q / np.maximum(q.sum(1, keepdims=True), 1e-300)

    for name, fn in (("post", post), ("vs", vs), ("ms", lambda: odir(z_val, z_test)),
                     ("dir", lambda: odir(log_softmax(z_val), log_softmax(z_test))), ("iso", iso), ("hist", hist)):
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
    parser.add_argument("--fair", type=int, default=0, metavar="R",
                        help="R repeats of ours against the same model and stopping rule in scipy/scikit-learn/NumPy")
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

    if args.fair:
        fair(z_val, y_val, z_test, rec, args)

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


def fair(z_val, y_val, z_test, rec, args) -> None:
    """Ours against :func:`fair_fits`, each method --fair times: median and range of the ratio."""
    ratios: dict[str, list[float]] = {}
    for _ in range(args.fair):
        ours = ours_fits(z_val, y_val, z_test, rec, 1)
        theirs = fair_fits(z_val[0].numpy(), y_val.numpy(), z_test[0].numpy(), args.lam, args.mu)
        for stage, t in theirs.items():
            ratios.setdefault(stage, []).append(t / ours[stage])
    print(f"\nlike with like, {args.fair} repeats (ratio = reference time / calibench time, median [min, max]):")
    for stage, r in ratios.items():
        print(f"  {stage:7s} {np.median(r):7.1f}x [{min(r):.1f}, {max(r):.1f}]")


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
