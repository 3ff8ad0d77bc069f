"""What ``ood.svhn_subset`` changes: per-network SVHN AUROC and the networks' OoD ranking on a
subset of the 26,032 SVHN test images against all of them (issue 32, item 5).

A synthetic population (the mini benchmark's SVHN file holds 250 images): ``--networks``
networks, each with max-softmax-like scores on the 10,000 CIFAR-10 test images (in
distribution) and on 26,032 OoD images, binormal with a target AUROC drawn uniformly from
``--auroc`` (default 0.6-0.99). ``--shared`` is the correlation of an image's score across
networks (0: independent networks; real networks share which SVHN images look like CIFAR-10,
which moves their AUROCs together on a subset and keeps the ranking steadier). The subsets are
drawn as the pipeline draws them (``calibench.inference.data.svhn_subset_rows``, one subset for
every network), for ``--seeds`` subset seeds. The AUROC depends on the scores only, so
subsetting the OoD scores is exactly subsetting the images for an already-computed network.

For each subset size: the largest and the RMS change of a network's AUROC, the Kendall tau-b of
the networks' AUROC ranking (subset against all; mean and minimum over the seeds), and the
standard error Hanley & McNeil (1982) predict (``se_exact``: the same with the population's own
variance of c_j instead of their exponential model's Q1 - A^2): for the AUROC of n OoD against 10,000 ID images
(``se_hm``, sampling error against the populations) and of the subset's change against the full
set (``se_change``: the OoD term of their variance, (Q1 - A^2) / n with Q1 = A / (2 - A), times the finite-population
factor 1 - n / 26,032, since the ID images and the other images are shared).

    .venv/bin/python bench/bench_ood_subset.py                 # independent networks, AUROC 0.6-0.99
    .venv/bin/python bench/bench_ood_subset.py --shared 0.5    # networks sharing image difficulty
    .venv/bin/python bench/bench_ood_subset.py --auroc 0.85,0.95
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from calibench.inference.data import svhn_subset_rows

N_ID, N_SVHN = 10_000, 26_032
# the other images an architecture is inferred on: CIFAR-10 test and its Gaussian noise, CIFAR-100
# test, ImageNet16-120 val (16 x 16, so about a quarter of a 32 x 32 image's arithmetic)
OTHER_IMAGES = 2 * N_ID + 10_000 + 6_000


def population(rng, networks: int, lo: float, hi: float, shared: float):
    """Target AUROCs and each network's per-OoD-image contribution c_j = P(ID score > s_j) + 1/2 P(=),
    so that the AUROC of a set S of OoD images is the mean of c_j over S (exact, ties count 1/2)."""
    target = rng.uniform(lo, hi, networks)
    shift = np.sqrt(2.0) * stats.norm.ppf(target)  # binormal, unit variances: AUROC = Phi(shift / sqrt 2)
    z_id, z_ood = rng.standard_normal(N_ID), rng.standard_normal(N_SVHN)  # what the networks share
    a, b = np.sqrt(shared), np.sqrt(1.0 - shared)
    contrib = np.empty((networks, N_SVHN))
    for i in range(networks):
        ident = np.sort(a * z_id + b * rng.standard_normal(N_ID) + shift[i]).astype(np.float32)
        ood = (a * z_ood + b * rng.standard_normal(N_SVHN)).astype(np.float32)
        above = N_ID - np.searchsorted(ident, ood, side="right")
        ties = np.searchsorted(ident, ood, side="right") - np.searchsorted(ident, ood, side="left")
        contrib[i] = (above + 0.5 * ties) / N_ID
    return target, contrib


def hanley_mcneil(auroc: np.ndarray, n_pos: int, n_neg: int) -> np.ndarray:
    """Hanley & McNeil's standard error of an AUROC from n_pos positives and n_neg negatives."""
    q1, q2 = auroc / (2 - auroc), 2 * auroc**2 / (1 + auroc)
    var = (auroc * (1 - auroc) + (n_pos - 1) * (q1 - auroc**2) + (n_neg - 1) * (q2 - auroc**2)) / (n_pos * n_neg)
    return np.sqrt(var)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", type=int, default=200)
    parser.add_argument("--auroc", default="0.6,0.99", help="lo,hi of the networks' AUROCs (uniform)")
    parser.add_argument("--shared", type=float, default=0.0, help="correlation of an image's score across networks")
    parser.add_argument("--sizes", default="1000,2600,5000,10000")
    parser.add_argument("--seeds", type=int, default=5, help="subset seeds (ood.svhn_subset_seed 0 .. seeds-1)")
    parser.add_argument("--seed", type=int, default=0, help="the population's seed")
    args = parser.parse_args(argv)
    lo, hi = (float(x) for x in args.auroc.split(","))
    start = time.perf_counter()
    target, contrib = population(np.random.default_rng(args.seed), args.networks, lo, hi, args.shared)
    full = contrib.mean(axis=1)
    q1 = full / (2 - full)  # E[c_j^2]: two ID images both above one OoD image
    gaps = np.diff(np.sort(full))
    print(f"{args.networks} networks, AUROC on all {N_SVHN} SVHN images: {full.min():.3f} .. {full.max():.3f} "
          f"(target {lo} .. {hi}; median gap between neighbours {np.median(gaps):.2e}), shared {args.shared}, "
          f"population seed {args.seed}, subset seeds 0..{args.seeds - 1}")
    print(f"{'n':>6} {'max |dA|':>9} {'rms dA':>8} {'se_change':>9} {'rms/se':>6} {'se_exact':>8} {'se_hm(n)':>8} "
          f"{'se_hm(all)':>10} {'tau mean':>8} {'tau min':>7} {'cost':>5}")
    for n in (int(s) for s in args.sizes.split(",")):
        deltas, taus = [], []
        for seed in range(args.seeds):
            rows = svhn_subset_rows(N_SVHN, n, seed)
            sub = contrib[:, rows].mean(axis=1)
            deltas.append(sub - full)
            taus.append(stats.kendalltau(full, sub).statistic)
        deltas = np.concatenate(deltas)
        se_change = np.sqrt((q1 - full**2) / n * (1 - n / N_SVHN))
        rms_se = np.sqrt(np.mean(se_change**2))
        se_exact = np.sqrt(np.mean(contrib.var(axis=1) / n * (1 - n / N_SVHN)))  # the c_j's own variance
        rms = np.sqrt(np.mean(deltas**2))
        cost = (n + OTHER_IMAGES) / (N_SVHN + OTHER_IMAGES)  # images inferred per architecture
        print(f"{n:>6} {np.abs(deltas).max():>9.4f} {rms:>8.4f} {rms_se:>9.4f} {rms / rms_se:>6.2f} {se_exact:>8.4f} "
              f"{np.sqrt(np.mean(hanley_mcneil(full, N_ID, n) ** 2)):>8.4f} "
              f"{np.sqrt(np.mean(hanley_mcneil(full, N_ID, N_SVHN) ** 2)):>10.4f} "
              f"{np.mean(taus):>8.3f} {np.min(taus):>7.3f} {cost:>5.2f}")
    print(f"({time.perf_counter() - start:.1f} s; se_* are RMS over the networks; cost: images inferred per "
          f"architecture on the three datasets against all SVHN images, {N_SVHN + OTHER_IMAGES})")


if __name__ == "__main__":
    main()
