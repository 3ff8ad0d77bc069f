"""Building one wide result table at full size: wall time and peak memory of ``build_table``.

Writes synthetic shards the way measurement jobs do (``shards.shard_table`` +
``write_atomic_parquet``, one file per network) for a full SSS population (32,768
networks), CIFAR-10 (metric names of ``metric_names(bins)`` at 9 bin counts plus the two
OoD AUROCs), every stage with its fitted-parameter rows (``fit_*``), with realistic
random values (a few NaN from failed fits, a few +inf NLLs); a population file and one
measurement manifest per chunk of 200 (a handful of failed networks). Then builds the
table in a fresh subprocess and reports its wall time and peak RSS
(``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a measuring process whose only child is the
build), the shard-writing time and the bytes on disk.

    python bench/bench_tables.py                                   # 32,768 networks, 8 stages (~21 M long rows)
    python bench/bench_tables.py --stages 2 --dataset cifar100 --no-fit   # the former 2-stage size (~4.8 M rows)
    python bench/bench_tables.py --old                             # the former pandas-pivot build, for comparison

The data directory (``--dir``, default under /tmp) is reused when it holds the same
configuration; the table is written to ``{dir}/results/tables/``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
FIT = {  # fitted parameters per stage (rows with bins null)
    "pre": (),
    "post": ("fit_temperature", "fit_nll_val", "fit_iterations", "fit_converged", "fit_seconds"),
    "vs": ("fit_w_norm", "fit_b_norm", "fit_nll_val", "fit_iterations", "fit_converged", "fit_seconds"),
    "ms": ("fit_w_norm", "fit_b_norm", "fit_nll_val", "fit_iterations", "fit_converged", "fit_seconds"),
    "dir": ("fit_w_norm", "fit_b_norm", "fit_lambda", "fit_mu", "fit_nll_val", "fit_iterations", "fit_converged",
            "fit_seconds"),
    "iso": ("fit_n_knots", "fit_nll_val", "fit_seconds"),
    "hist": ("fit_n_bins", "fit_nll_val", "fit_seconds"),
    "spline": ("fit_n_knots", "fit_nll_val", "fit_seconds", "fit_converged"),
}
CONSTANT_FITS = {"fit_n_bins": 15.0}  # the same in every row (a setting recorded as a fitted parameter)
SPACE, HP, CHUNK = "sss", "90", 200


# ---------------------------------------------------------------- the former build (before figure)

def old_build_table(space, hp, dataset, results, out, manifests, failures_out=None):
    """``calibench.results.tables.build_table`` as it was before the rewrite (pandas pivot)."""
    import pandas as pd

    from calibench.results import shards
    from calibench.atomic import atomic_write

    def wide_table(long):
        if long.empty:
            return pd.DataFrame()
        long = long.copy()
        long["column"] = [f"{s}_{m}" if pd.isna(b) else f"{s}_{m}_{int(b)}"
                          for s, m, b in zip(long["stage"], long["metric"], long["bins"])]
        order = list(pd.unique(long["column"]))
        keys = ["space", "hp", "dataset", "arch_index", "seed"]
        provenance = ["arch_str", "params", "flops", "temperature", "accuracy", "recorded_accuracy", "n_eval",
                      "config_hash", "logits_key", "calibench_version"]
        values = long.pivot_table(index=keys, columns="column", values="value", aggfunc="first", dropna=False)[order]
        info = long.groupby(keys)[provenance].first()
        return info.join(values).reset_index()

    results = Path(results)
    doc = json.loads((results / "population" / f"{space}.json").read_text())
    expected, failed = {}, []
    for m in manifests:
        summary = json.loads(Path(m).read_text())
        expected.update({int(i): k for i, k in summary["shards"].items()})
        failed += summary["failures"]
    long = shards.read_shards(results, space, hp, dataset, indices=sorted(expected)).to_pandas()
    keep = long["arch_index"].map(expected).eq(long["config_hash"]) & long["arch_index"].isin(doc["selected"])
    wide = wide_table(long[keep])
    measured = set(wide["arch_index"]) if not wide.empty else set()
    if space == "tss" and not wide.empty:
        reps = doc["representatives"]
        members = pd.DataFrame({"arch_index": range(len(reps)), "measured_by": reps})
        members = members[members["measured_by"].isin(measured)]
        wide = wide.rename(columns={"arch_index": "measured_by"}).merge(members, on="measured_by")
        wide["arch_str"] = [doc["arch_strs"][i] for i in wide["arch_index"]]
    elif not wide.empty:
        wide["measured_by"] = wide["arch_index"]
    if not wide.empty:
        first = ["space", "hp", "dataset", "arch_index", "measured_by", "seed"]
        wide = wide[first + [c for c in wide.columns if c not in first]].sort_values(["arch_index", "seed"])
    atomic_write(out, lambda f: wide.to_parquet(f, index=False))
    fail_out = failures_out or results / "failures" / f"{space}_{hp}_{dataset}.parquet"
    shards.write_atomic_parquet(shards.failures_table(failed), fail_out)
    return wide


# ---------------------------------------------------------------- synthetic shards

def stage_names(dataset: str, stages: int, fit: bool) -> dict[str, list[str]]:
    from calibench.metrics.suite import DEFAULT_BINS, metric_names

    ood = ["ood_auroc_gaussian_noise", "ood_auroc_svhn"] if dataset == "cifar10" else []
    names = metric_names(DEFAULT_BINS) + ood
    return {s: names + (list(FIT[s]) if fit else []) for s in STAGES[:stages]}


def _value(rng: np.random.Generator, name: str) -> float:
    if name in CONSTANT_FITS:
        return CONSTANT_FITS[name]
    if name.startswith("nll"):
        return float("inf") if rng.random() < 1e-3 else float(rng.lognormal(0.0, 0.5))
    if name.startswith("fit_iterations") or name.startswith("fit_n_"):
        return float(rng.integers(3, 200))
    if name.startswith("fit_converged"):
        return float(rng.random() < 0.99)
    if name.startswith(("accuracy", "ood_auroc", "mean_conf")):
        return float(rng.uniform(0.3, 0.99))
    return float(rng.gamma(2.0, 0.03))  # calibration errors, Brier, fitted norms: small positive


def _write_chunk(job) -> int:
    from calibench import layout
    from calibench.results import shards

    results, dataset, names, indices, arch_strs = job
    written = 0
    for index, arch_str in zip(indices, arch_strs):
        path = layout.shard_path(results, SPACE, HP, dataset, index)
        if path.is_file():
            continue
        rng = np.random.default_rng(index)
        values = {}
        for stage, metrics in names.items():
            row = {m: _value(rng, m) for m in metrics}
            if stage != "pre" and rng.random() < 2e-3:  # a failed fit: the stage's numbers are NaN
                row = dict.fromkeys(row, float("nan"))
            values[stage] = row
        provenance = {"space": SPACE, "hp": HP, "dataset": dataset, "arch_index": index, "arch_str": arch_str,
                      "seed": 777, "params": float(rng.uniform(0.1, 1.5)), "flops": float(rng.uniform(5, 200)),
                      "temperature": float(rng.uniform(0.8, 3.0)), "accuracy": float(rng.uniform(0.5, 0.95)),
                      "recorded_accuracy": float(rng.uniform(0.5, 0.95)), "n_eval": 10_000,
                      "config_hash": f"{index * 2654435761 % 16**16:016x}", "logits_key": f"{index * 40503:016x}",
                      "logits_file": f"logits/space={SPACE}/hp={HP}/dataset={dataset}/arch={index:06d}.parquet"}
        shards.write_atomic_parquet(shards.shard_table(provenance, values), path)
        written += 1
    return written


def prepare(directory: Path, networks: int, stages: int, dataset: str, fit: bool, workers: int) -> dict:
    """Shards, population and manifests under ``directory/results`` (kept if already there)."""
    from calibench import layout

    results = directory / "results"
    config = {"networks": networks, "stages": stages, "dataset": dataset, "fit": fit}
    marker = directory / "bench.json"
    if marker.is_file() and json.loads(marker.read_text())["config"] == config:
        info = json.loads(marker.read_text())
        info["reused"] = True
        return info
    if marker.is_file() or (results / "shards").exists():
        sys.exit(f"{directory} holds another configuration; pass another --dir or delete it")
    names = stage_names(dataset, stages, fit)
    arch_strs = [":".join(map(str, c)) for c in itertools.product((8, 16, 24, 32, 40, 48, 56, 64), repeat=5)]
    arch_strs = (arch_strs * (networks // len(arch_strs) + 1))[:networks]
    selected = list(range(networks))
    failed = set(range(4321, networks, 9973))  # a few networks whose measurement failed: no shard
    chunks = [selected[i:i + CHUNK] for i in range(0, networks, CHUNK)]
    doc = {"space": SPACE, "arch_strs": arch_strs, "representatives": selected, "selected": selected,
           "chunks": chunks}
    (results / "population").mkdir(parents=True, exist_ok=True)
    (results / "population" / f"{SPACE}.json").write_text(json.dumps(doc))
    todo = [i for i in selected if i not in failed]
    jobs = [(results, dataset, names, todo[i:i + 64], [arch_strs[j] for j in todo[i:i + 64]])
            for i in range(0, len(todo), 64)]
    start = time.perf_counter()
    with Pool(workers) as pool:
        written = sum(pool.imap_unordered(_write_chunk, jobs))
    seconds = time.perf_counter() - start
    manifests = []
    for c, indices in enumerate(chunks):
        path = results / "manifests" / "measure" / f"{SPACE}_{HP}_{dataset}_{c:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "shards": {str(i): f"{i * 2654435761 % 16**16:016x}" for i in indices if i not in failed},
            "failures": [{"space": SPACE, "hp": HP, "dataset": dataset, "arch_index": i, "seed": None,
                          "source": "synthetic", "reason": "bench: failed measurement", "stage": "measurement"}
                         for i in indices if i in failed]}))
        manifests.append(str(path))
    files = list(layout.shard_dir(results, SPACE, HP, dataset).glob("arch=*.parquet"))
    info = {"config": config, "manifests": manifests, "shards": len(files),
            "long_rows": len(files) * sum(len(v) for v in names.values()),
            "rows_per_network": sum(len(v) for v in names.values()),
            "shard_bytes": sum(f.stat().st_size for f in files), "write_seconds": round(seconds, 1),
            "written": written, "write_workers": workers}
    marker.write_text(json.dumps(info))
    info["reused"] = False
    return info


# ---------------------------------------------------------------- the measured build

BUILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
t0 = time.perf_counter()
if {old!r}:
    from bench_tables import old_build_table as build_table
else:
    from calibench.results.tables import build_table
t1 = time.perf_counter()
wide = build_table({space!r}, {hp!r}, {dataset!r}, {results!r}, {out!r}, {manifests!r})
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "build_s": t2 - t1, "rows": len(wide), "columns": wide.shape[1]}}))
"""


def measure(args_json: str) -> None:
    """Runs one build as this process's only child; prints its figures as JSON."""
    job = json.loads(args_json)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", BUILD.format(**job)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(proc.stderr[-4000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(wall_s=wall, peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", type=int, default=32_768)
    parser.add_argument("--stages", type=int, default=len(STAGES), choices=range(1, len(STAGES) + 1))
    parser.add_argument("--dataset", default="cifar10", choices=("cifar10", "cifar100", "ImageNet16-120"))
    parser.add_argument("--no-fit", dest="fit", action="store_false", help="no fit_* rows (as the 2-stage shards)")
    parser.add_argument("--dir", type=Path, default=None, help="data directory (reused if it holds the same data)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes writing shards")
    parser.add_argument("--old", action="store_true", help="build with the former pandas-pivot algorithm")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure(args.measure)
    directory = args.dir or Path("/tmp") / (f"calibench-bench-tables-{SPACE}-n{args.networks}-s{args.stages}-"
                                            f"{args.dataset}{'' if args.fit else '-nofit'}")
    info = prepare(directory, args.networks, args.stages, args.dataset, args.fit, args.workers)
    print(f"shards: {info['shards']:,} networks x {info['rows_per_network']} rows = {info['long_rows']:,} long rows, "
          f"{info['shard_bytes'] / 1e6:,.0f} MB on disk ({info['shard_bytes'] / max(info['shards'], 1) / 1e3:.1f} "
          f"kB/shard); written in {info['write_seconds']} s by {info['write_workers']} processes"
          + (" (reused)" if info["reused"] else ""))
    results = directory / "results"
    out = results / "tables" / f"{SPACE}_{HP}_{args.dataset}{'_old' if args.old else ''}.parquet"
    job = {"bench": str(Path(__file__).resolve().parent), "old": args.old, "space": SPACE, "hp": HP,
           "dataset": args.dataset, "results": str(results), "out": str(out), "manifests": info["manifests"]}
    proc = subprocess.run([sys.executable, __file__, "--measure", json.dumps(job)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-4000:])
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"build_table ({'old pandas pivot' if args.old else 'current'}): {r['build_s']:.1f} s "
          f"(process {r['wall_s']:.1f} s incl. {r['import_s']:.1f} s imports), peak RSS {r['peak_rss_mb']:,.0f} MB; "
          f"table {r['rows']:,} rows x {r['columns']:,} columns, {out.stat().st_size / 1e6:,.0f} MB; "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
