"""The fit store at full evaluation-set size (issue 35): what a bins-only change costs when the
stored maps are re-applied, against a from-scratch eight-stage measurement of the same networks,
what writing the store adds, and its size.

    python bench/bench_fit_store.py [--networks 512] [--n 10000] [--classes 100] [--workdir DIR]

Synthetic CIFAR-100-sized networks (random logits with a label signal: timings only), through
the measurement job itself (measure_chunk_job, device cpu, measure_group auto), every stage,
the config's bins, lambda = mu = 1 for ms and dir (no search). Steps: (1) from scratch, fits
written (the time of the fit-store writes measured inside it); (2) bins + [1000] on the same
results: every shard re-measured, every fit re-applied; (3) the store's bytes per network.
"""

from __future__ import annotations

from calibench.runtime import short_omp_spin

short_omp_spin()  # before torch, as a measurement job does

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import yaml

from calibench import layout
from calibench.config import settings as stage_settings
from calibench.measure import jobs
from calibench.store import fits as fit_store
from calibench.store import logits as store

ROOT = Path(__file__).resolve().parents[1]
POPULATION = 117_702  # NATS-Bench networks x datasets


def build(results: Path, m: int, n: int, k: int, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    labels_file = layout.labels_path(results, "cifar100", space="zoo")
    store.write_labels(labels_file, labels, dataset="cifar100", key="bench", source="bench_fit_store")
    keys = {}
    for i in range(m):
        scale = rng.uniform(0.5, 3.0)
        z = (rng.normal(0, scale, (n, k)) + rng.uniform(1, 4) * np.eye(k)[labels]).astype(np.float32)
        fields = {"bench": "fit_store", "index": i}
        keys[i] = store.digest(fields)
        store.write_network_logits(layout.logits_path(results, "zoo", "", "cifar100", i), key=keys[i], fields=fields,
                                   space="zoo", hp="", dataset="cifar100", index=i, arch_str=f"net{i}", labels=labels,
                                   seeds=[store.SeedLogits(0, np.nan, np.nan, np.nan, "bench", {"test": z})])
    manifest = results.parent / "infer.json"
    manifest.write_text(json.dumps({"indices": list(range(m)), "failures": [],
                                    "datasets": {"cifar100": {str(i): kk for i, kk in keys.items()}}}))
    return manifest, labels_file


def config(bins=None) -> dict:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["recalibration"]["odir"]["ms"] = cfg["recalibration"]["odir"]["dir"] = {"lambda": 1.0, "mu": 1.0}
    if bins is not None:
        cfg["bins"] = bins
    return cfg


def measure(results, manifest, labels_file, cfg, name):
    t0 = time.perf_counter()
    summary = jobs.measure_chunk_job(stage_settings.measurement_settings(cfg), {"device": "cpu", "measure_group": "auto"},
                                     "zoo", "", "cifar100", 0, results, manifest, labels_file,
                                     results.parent / f"{name}.json", progress=True)
    return time.perf_counter() - t0, summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--networks", type=int, default=512)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_fit_store"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    results = args.workdir / "results"
    t0 = time.perf_counter()
    manifest, labels_file = build(results, args.networks, args.n, args.classes)
    print(f"{args.networks} networks of N = {args.n}, K = {args.classes} written in {time.perf_counter() - t0:.1f} s")

    writes = []
    original = fit_store.write_network_fits

    def timed_write(*a, **kw):
        t = time.perf_counter()
        out = original(*a, **kw)
        writes.append(time.perf_counter() - t)
        return out

    fit_store.write_network_fits = timed_write
    base = config()
    scratch, s1 = measure(results, manifest, labels_file, base, "scratch")
    write_seconds = sum(writes)
    bins, s2 = measure(results, manifest, labels_file, config(list(base["bins"]) + [1000]), "bins")
    fit_store.write_network_fits = original
    sizes = [layout.fits_path(results, "zoo", "", "cifar100", i).stat().st_size for i in range(args.networks)]
    per_network = float(np.mean(sizes))
    doc = {
        "networks": args.networks, "n": args.n, "classes": args.classes, "bins": base["bins"],
        "from_scratch_seconds": round(scratch, 1), "fits_made": s1["fits"]["made"],
        "fit_store_write_seconds": round(write_seconds, 2),
        "write_share_of_scratch": round(write_seconds / scratch, 4),
        "bins_change_seconds": round(bins, 1), "bins_change_fits": s2["fits"],
        "bins_change_share_of_scratch": round(bins / scratch, 4),
        "fit_store_bytes_per_network": round(per_network), "projected_gb_for_population": round(per_network * POPULATION / 1e9, 2),
    }
    print(json.dumps(doc, indent=1))
    print(f"from scratch {scratch:.1f} s ({scratch / args.networks * 1e3:.0f} ms per network), fit-store writes "
          f"{write_seconds:.2f} s ({100 * write_seconds / scratch:.1f} %); bins-only change {bins:.1f} s "
          f"({100 * bins / scratch:.1f} % of from scratch; fits made {s2['fits']['made']}); "
          f"{per_network / 1e3:.1f} kB per network, {per_network * POPULATION / 1e9:.1f} GB for {POPULATION:,}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
