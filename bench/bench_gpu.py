"""The GPU path, measured on a GPU (BENCHMARKS.md, "GPU"): what an evaluate job and a
measurement job cost per network on CUDA, how far CUDA logits are from a float64 reference,
and the whole population's GPU time.

1. Inference, per network, through the job's own ``network_logits`` (build, strict load,
   BN folding, to the device, every evaluation image and OoD image): real TSS and SSS
   architectures (from NATS-Bench metas given by --meta-dir, else the mini benchmark's
   samplers), 100 classes, random weights with non-trivial BN statistics; CIFAR-10 with its
   two OoD sets (10,000 noise + 26,032 SVHN images), CIFAR-100 (10,000 at 32x32) and
   ImageNet16-120 (6,000 at 16x16). Batch sizes 1000 (the default) and --big-batch.
   cuDNN's TF32 convolutions (PyTorch's default) against full float32: the largest logit
   error relative to the logits' scale, against the same network in float64 on the CPU.
2. Measurement: ``measure_stages_batch`` with every stage (what a measurement job runs) at
   the three dataset sizes, M networks at once; the largest |metric difference| against
   the CPU on two networks.
3. Projection: GPU hours for 117,702 networks (inference + measurement; archive reading
   overlaps in loader processes and is projected from the CPU figures in BENCHMARKS.md).

Usage: python bench/bench_gpu.py [--device cuda] [--archs 4] [--meta-dir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import bz2
import pickle
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench_metrics import problem

POPULATION = {"tss": 6466, "sss": 32768}
# dataset -> (image size, N, classes, OoD images)
DATASETS = {"cifar10": (32, 10_000, 10, 10_000 + 26_032), "cifar100": (32, 10_000, 100, 0),
            "ImageNet16-120": (16, 6_000, 120, 0)}
STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
ODIR = {"ms": {"lambda": 1e-1, "mu": 1e-1}, "dir": {"lambda": 1e-1, "mu": 1e-1}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def archs_of(space: str, n: int, meta_dir: Path | None) -> list[str]:
    name = "NATS-tss-v1_0-3ffb9-simple" if space == "tss" else "NATS-sss-v1_0-50262-simple"
    if meta_dir is not None and (meta_dir / name / "meta.pickle.pbz2").is_file():
        with bz2.open(meta_dir / name / "meta.pickle.pbz2") as f:
            return random.Random(0).sample(pickle.load(f)["meta_archs"], n)
    from calibench.sources.nats.minibench import sample_sss_archs, sample_tss_archs

    return (sample_tss_archs if space == "tss" else sample_sss_archs)(random.Random(0), n)


def entry_of(space: str, arch: str, classes: int, dataset: str):
    from calibench.sources.nats.archive import ArchiveEntry
    from calibench.sources.nats.networks import build_network

    net = build_network(space, arch, classes)
    gen = torch.Generator().manual_seed(hash(arch) % 2**31)
    for m in net.modules():  # non-trivial BN statistics, so folding is exercised
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) * 1.5 + 0.5)
    return ArchiveEntry(0, arch, space, "200" if space == "tss" else "90", dataset, 777, classes, 0.0, 0.0, 0.0,
                        "bench", net.state_dict())


def eval_data(dataset: str, device: torch.device, scale: float = 1.0):
    from calibench.inference.engine import EvalData, activation_format

    size, n, classes, ood = DATASETS[dataset]
    n = max(8, int(n * scale))
    gen = torch.Generator().manual_seed(1)
    fmt = activation_format(device)  # the job's layout: NCHW on CUDA, channels_last on the CPU
    images = torch.randn(n, 3, size, size, generator=gen).contiguous(memory_format=fmt)
    out = EvalData(dataset, images.to(device), torch.randint(0, classes, (n,), generator=gen).to(device), "bench")
    if ood:
        out.ood["ood"] = torch.randn(max(8, int(ood * scale)), 3, size, size, generator=gen).contiguous(
            memory_format=fmt).to(device)
    return out


def logit_error(space: str, arch: str, device: torch.device, tf32: bool) -> float:
    """Largest |logit - float64 CPU logit| over 256 images, relative to the largest |logit|."""
    from calibench.inference.engine import activation_format
    from calibench.sources.nats.networks import build_network, inference_network

    entry = entry_of(space, arch, 100, "cifar100")
    net = build_network(space, arch, 100)
    net.load_state_dict(entry.state_dict)
    x = torch.randn(256, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        ref = inference_network(net).double()(x.double().contiguous(memory_format=torch.channels_last))
        torch.backends.cudnn.allow_tf32 = tf32
        fmt = activation_format(device)  # the job's layout on that device
        got = inference_network(net, fmt).to(device)(x.to(device).contiguous(memory_format=fmt)).cpu()
    return float((got.double() - ref).abs().max() / ref.abs().max())


def bench_inference(device: torch.device, archs: dict, batches: list[int], scale: float,
                    modes: list[tuple[bool, bool]]) -> dict:
    """Per-network seconds for each (tf32, cudnn.benchmark) mode, space, dataset and batch size."""
    from calibench.sources.nats.stream import network_logits

    per_network = {}
    for tf32, autotune in modes:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = autotune
        for space, sample in archs.items():
            for dataset in DATASETS:
                data = eval_data(dataset, device, scale)
                classes = DATASETS[dataset][2]
                entries = [entry_of(space, a, classes, dataset) for a in sample]
                for batch in batches:
                    network_logits(entries[0], data, device, batch)  # warm-up: kernels, allocator
                    times = []
                    for entry in entries:
                        sync(device)
                        start = time.perf_counter()
                        network_logits(entry, data, device, batch)
                        sync(device)
                        times.append(time.perf_counter() - start)
                    images = data.n + sum(v.shape[0] for v in data.ood.values())
                    t = statistics.median(times)
                    per_network[(tf32, autotune, space, dataset, batch)] = t
                    print(f"  inference {space} {dataset:15s} tf32={tf32!s:5s} autotune={autotune!s:5s} batch "
                          f"{batch:5d}: {t * 1e3:7.1f} ms per network (median of {len(times)}; {images / t:9.0f} "
                          "images/s)", flush=True)
    return per_network


def worst_gaps(gpu: dict, cpu: dict) -> str:
    """Per stage: the value with the largest |cuda - cpu| and the one with the largest relative gap."""
    parts = []
    for stage in STAGES:
        absolute, relative = (0.0, ""), (0.0, "")
        for name, want in cpu[stage].items():
            if name.startswith("fit_iterations"):
                continue
            a, b = np.asarray(gpu[stage][name], float), np.asarray(want, float)
            both = np.isfinite(a) & np.isfinite(b)
            if (np.isfinite(a) != np.isfinite(b)).any():
                parts.append(f"{stage} {name}: finite on one device only")
            if not both.any():
                continue
            gap = np.abs(a - b)[both]
            rel = gap / np.maximum(np.abs(b[both]), 1e-12)
            absolute = max(absolute, (float(gap.max()), name))
            relative = max(relative, (float(rel.max()), name))
        parts.append(f"{stage}: abs {absolute[0]:.1e} ({absolute[1]}), rel {relative[0]:.1e} ({relative[1]})")
    return "\n      ".join(parts)


def bench_measurement(device: torch.device, batch: int, scale: float, check: bool,
                      stage_sets: tuple = (STAGES,), datasets: tuple = tuple(DATASETS)) -> dict:
    from calibench.measure.stages import measure_stages_batch

    per_network = {}
    for dataset, stages in ((d, st) for d in datasets for st in stage_sets):
        _, n, k, ood = DATASETS[dataset]
        n = max(200, int(n * scale))
        z = torch.stack([problem(n, k, seed=s)[0] for s in range(batch)])
        y = problem(n, k)[1]
        ood_logits = {"ood": torch.randn(batch, max(50, int(ood * scale)), k) * 2} if ood else {}
        kwargs = {"stages": stages, "recalibration": ODIR}

        def run():
            out = measure_stages_batch(z.to(device), y.to(device),
                                       ood_logits={a: b.to(device) for a, b in ood_logits.items()}, **kwargs)
            sync(device)
            return out

        run()
        times = []
        for _ in range(2):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        t = min(times) / batch
        per_network[(dataset, stages)] = t
        line = (f"  measurement {dataset:15s} N={n} K={k}, {batch} networks at once, {'+'.join(stages)}: "
                f"{t * 1e3:7.1f} ms per network")
        if check and device.type == "cuda" and stages == STAGES:
            gpu = measure_stages_batch(z[:2].to(device), y.to(device),
                                       ood_logits={a: b[:2].to(device) for a, b in ood_logits.items()}, **kwargs)
            cpu = measure_stages_batch(z[:2], y, ood_logits={a: b[:2] for a, b in ood_logits.items()}, **kwargs)
            line += "\n      " + worst_gaps(gpu, cpu)
        print(line, flush=True)
    return per_network


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--archs", type=int, default=4, help="architectures per space")
    parser.add_argument("--meta-dir", type=Path, default=None, help="folder holding the NATS-Bench -simple metas")
    parser.add_argument("--big-batch", type=int, default=5000)
    parser.add_argument("--measure-batch", type=int, default=32, help="networks measured at once")
    parser.add_argument("--quick", action="store_true", help="small sizes: check that the script runs")
    args = parser.parse_args()
    device = torch.device(args.device)
    scale = 0.02 if args.quick else 1.0
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else "")
          + f", {torch.get_num_threads()} CPU threads", flush=True)
    archs = {space: archs_of(space, args.archs, args.meta_dir) for space in ("tss", "sss")}

    print("\nlogit error against float64 on the CPU (relative to the largest |logit|):")
    for space, sample in archs.items():
        for tf32 in ((True, False) if device.type == "cuda" else (False,)):
            errors = [logit_error(space, a, device, tf32) for a in sample]
            print(f"  {space} tf32={tf32!s:5s}: max {max(errors):.1e}, median {statistics.median(errors):.1e}")

    cuda = device.type == "cuda"
    modes = [(True, False), (False, False), (False, True)] if cuda else [(False, False)]
    print("\ninference per network (network_logits: build, load, fold, to device, all images):")
    inference = bench_inference(device, archs, [1000, args.big_batch], scale, modes)
    print("\nmeasurement per network (measure_stages_batch):")
    measurement = bench_measurement(device, args.measure_batch, scale, check=True)
    if not args.quick:
        bench_measurement(device, args.measure_batch, scale, check=False, stage_sets=tuple((s,) for s in STAGES),
                          datasets=("cifar100",))

    for tf32 in ((True, False) if cuda else (False,)):
        best = {(space, d): min(((autotune, b) for t, autotune, sp, dd, b in inference
                                 if t == tf32 and sp == space and dd == d),
                                key=lambda ab: inference[(tf32, *ab[:1], space, d, ab[1])])
                for space in archs for d in DATASETS}
        seconds = {key: inference[(tf32, best[key][0], *key, best[key][1])] for key in best}
        hours = {space: sum(POPULATION[space] * (seconds[(space, d)] + measurement[(d, STAGES)]) for d in DATASETS)
                 / 3600 for space in archs}
        print(f"\nprojection{' (QUICK sizes: not a projection)' if args.quick else ''}, "
              f"{'TF32' if tf32 else 'float32'} convolutions, best batch and autotune: TSS {hours['tss']:.2f} h + "
              f"SSS {hours['sss']:.2f} h = {sum(hours.values()):.2f} h on one {device.type} for 117,702 networks "
              "(inference + every stage's measurement)")
        for space, d in best:
            print(f"  {space} {d:15s}: inference {seconds[(space, d)] * 1e3:7.1f} ms (autotune {best[(space, d)][0]}, "
                  f"batch {best[(space, d)][1]}) + measurement {measurement[(d, STAGES)] * 1e3:6.1f} ms per network")


if __name__ == "__main__":
    main()
