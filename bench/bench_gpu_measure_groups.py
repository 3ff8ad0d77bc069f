"""Measurement per network against the networks per batched call (issue 32; BENCHMARKS.md,
"GPU session 2026-11-27, second").

The H200 measured a measurement job at K = 100 on 16 networks: ms and dir were 94 % of it and
the GPU was idle three quarters of the time, about 6.4 ms per L-BFGS iteration of the whole
16-network batch. If the loop is bound by launches and host looks, not by the device's work,
a real chunk (200 networks, ``measure_group: auto`` puts them in one call on a GPU) pays the
same per iteration for 12x the networks. This script measures that directly:
``measure_stages_batch`` (what ``measure_chunk_job`` calls per group) on G networks at once,
for each G of ``--groups``, at a real evaluation-set size, and prints per G the wall time per
network, per stage (``--stages``, each timed alone), and the fits' iterations.

    python bench/bench_gpu_measure_groups.py --device cuda                      # CIFAR-100 sizes
    python bench/bench_gpu_measure_groups.py --device cuda --groups 16,64,256 --stages ms,dir
    python bench/bench_gpu_measure_groups.py --cpu-smoke                        # runs, small sizes

Logits: synthetic, one shared label vector, per network a class margin and a temperature drawn
at random (accuracies about 40-90 %, over-confident), float32 as the logits store keeps them.
Their fits' iterations are not the real population's, so the figure that carries over is the
time per iteration per group size, printed with the iterations. lambda, mu: ``--odir``
(config/nats.yaml's search picks them per table). ``--time-limit``: no new group size is
started after it; ``--out``: JSON, rewritten after each group.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from calibench.measure.stages import measure_stages_batch  # noqa: E402

DATASETS = {"cifar10": (10_000, 10), "cifar100": (10_000, 100), "ImageNet16-120": (6_000, 120)}


def population(g: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """g networks' logits (g, n, k) float32 on one label vector (n,)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, k, (n,), generator=gen)
    margin = torch.empty(g, 1, 1).uniform_(1.0, 4.0, generator=gen)
    scale = torch.empty(g, 1, 1).uniform_(1.5, 4.0, generator=gen)
    z = torch.randn(g, n, k, generator=gen) + margin * torch.nn.functional.one_hot(y, k)
    return (z * scale).float(), y


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_call(z, y, stages, odir, device) -> tuple[float, dict]:
    sync(device)
    start = time.perf_counter()
    out = measure_stages_batch(z, y, stages=stages, recalibration=odir)
    sync(device)
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dataset", default="cifar100", choices=sorted(DATASETS))
    parser.add_argument("--groups", default="16,64,200", help="networks per call, ascending")
    parser.add_argument("--stages", default="pre,post,vs,ms,dir,iso,hist,spline",
                        help="each timed alone, then all together (unless --no-all)")
    parser.add_argument("--odir", default="0.1,0.1", help="lambda,mu of ms and dir")
    parser.add_argument("--n", type=int, default=None, help="evaluation samples (default: the dataset's)")
    parser.add_argument("--time-limit", type=float, default=150.0)
    parser.add_argument("--no-all", dest="all", action="store_false", help="skip the call with every stage at once")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cpu-smoke", action="store_true", help="CPU, N = 400, groups 2,4: the script runs")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.device, args.groups, args.n = "cpu", "2,4", 400
    device = torch.device(args.device)
    n, k = DATASETS[args.dataset]
    n = args.n or n
    groups = [int(g) for g in args.groups.split(",")]
    stages = [s for s in args.stages.split(",") if s]
    lam, mu = (float(v) for v in args.odir.split(","))
    odir = {"ms": {"lambda": lam, "mu": mu}, "dir": {"lambda": lam, "mu": mu}}
    report = {"what": "measure_stages_batch per network against networks per call",
              "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dataset": args.dataset, "n": n, "classes": k, "odir": [lam, mu],
              "groups": {}}
    print(f"{report['device']}, torch {torch.__version__}; {args.dataset}: N = {n}, K = {k}; "
          f"lambda, mu = {lam:g}, {mu:g}", flush=True)
    began = time.perf_counter()
    warm_z, warm_y = population(2, min(n, 400), k, seed=99)
    timed_call(warm_z.to(device), warm_y.to(device), stages, odir, device)  # kernels, allocator, imports
    for g in groups:
        if time.perf_counter() - began > args.time_limit:
            print(f"(time limit: {g} networks per call not run)", flush=True)
            break
        z, y = population(g, n, k)
        z, y = z.to(device), y.to(device)
        row = {"stages": {}}
        for stage in stages + (["all"] if args.all and len(stages) > 1 else []):
            chosen = stages if stage == "all" else [stage]
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            seconds, out = timed_call(z, y, chosen, odir, device)
            entry = {"ms_per_network": round(1e3 * seconds / g, 2), "seconds": round(seconds, 3)}
            for name in chosen if stage != "all" else ():
                metrics = out.get(name, {})
                its = metrics.get("fit_iterations")
                if its is not None and float(torch.as_tensor(its, dtype=torch.float64).nan_to_num(0).max()) > 0:
                    its = torch.as_tensor(its, dtype=torch.float64)
                    entry["iterations_max"] = int(its.nan_to_num(0).max())
                    entry["ms_per_iteration_of_the_batch"] = (round(1e3 * seconds / max(1, int(its.nan_to_num(0).max())), 3))
                    failures = out.get("failures", {}).get(name, [])
                    entry["not_converged"] = sum(f is not None for f in failures)
            if device.type == "cuda":
                entry["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
            row["stages"][stage] = entry
            extra = "".join(f", {key} {entry[key]}" for key in ("iterations_max", "ms_per_iteration_of_the_batch",
                                                                "not_converged", "peak_gib") if key in entry)
            print(f"  {g:4d} networks per call, {stage:6s}: {entry['ms_per_network']:9.2f} ms per network{extra}",
                  flush=True)
        report["groups"][g] = row
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(report, indent=1))
            tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
