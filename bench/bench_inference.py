"""Speed of the inference engine: our inference form against xautodl's plain model.

For a sample of TSS and SSS architectures (real architecture strings from the shared
NATS-Bench meta when present, else the mini benchmark's samplers) it times, over
``--images`` CIFAR-shaped images (default 10,000) and ImageNet16-shaped images (6,000):
  * xautodl's model (eval, NCHW) and ours (``inference_network``), checking the logits
    agree within 1e-4;
  * networks per second and images per second on CPU, and on CUDA when available;
  * weight loading (bz2 + unpickle through the official API) from the mini benchmark's
    -full archives, in archives/s and MB/s;
and projects the wall time of all 117,702 networks (6,466 x 3 TSS + 32,768 x 3 SSS).

Usage: python bench/bench_inference.py [--archs 4] [--images 10000] [--no-xautodl] [--minibench DIR]
"""

from __future__ import annotations

import argparse
import bz2
import pickle
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from calibench.sources.nats.archstr import SSS_GENOTYPE
from calibench.sources.nats.networks import build_network, inference_network, multiply_adds

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nats-bench-samples"
POPULATION = {"tss": 6466, "sss": 32768}
DATASETS = (("cifar10", 32, 10_000, 10), ("cifar100", 32, 10_000, 100), ("ImageNet16-120", 16, 6_000, 120))


def sample_archs(space: str, n: int, seed: int = 0) -> list[str]:
    meta = SHARED / ("NATS-tss-v1_0-3ffb9-simple" if space == "tss" else "NATS-sss-v1_0-50262-simple") / "meta.pickle.pbz2"
    if meta.is_file():
        with bz2.open(meta) as f:
            archs = pickle.load(f)["meta_archs"]
        return random.Random(seed).sample(archs, n)
    from calibench.sources.nats.minibench import sample_sss_archs, sample_tss_archs

    sampler = sample_tss_archs if space == "tss" else sample_sss_archs
    return sampler(random.Random(seed), n)


def xautodl_model(space: str, arch: str, k: int):
    from xautodl.config_utils import dict2config
    from xautodl.models import CellStructure, get_cell_based_tiny_net

    if space == "tss":
        cfg = {"name": "infer.tiny", "C": 16, "N": 5, "genotype": CellStructure.str2structure(arch), "num_classes": k}
    else:
        cfg = {"name": "infer.shape.tiny", "channels": arch, "genotype": SSS_GENOTYPE, "num_classes": k}
    return get_cell_based_tiny_net(dict2config(cfg, None)).eval()


def sgemm_peak() -> float:
    """GFLOP/s of a large float32 matrix product on this CPU: the practical arithmetic ceiling."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    a @ b
    start = time.perf_counter()
    for _ in range(3):
        a @ b
    return 3 * 2 * 4096**3 / (time.perf_counter() - start) / 1e9


def run(fn, images: torch.Tensor, batch: int) -> tuple[float, torch.Tensor]:
    sync = torch.cuda.synchronize if images.is_cuda else (lambda: None)
    with torch.inference_mode():
        fn(images[:batch])  # warm-up
        sync()
        start = time.perf_counter()
        out = torch.cat([fn(b) for b in images.split(batch)])
        sync()
    return time.perf_counter() - start, out


def bench_networks(device: torch.device, archs: dict[str, list[str]], n_images: int, with_xautodl: bool, batch: int):
    per_network: dict[tuple[str, int], list[float]] = {}
    for space, sample in archs.items():
        if not sample:
            continue
        for size, n in ((32, n_images), (16, int(n_images * 0.6))):
            images = torch.randn(n, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
            ours_t, ref_t = [], []
            for arch in sample:
                net = build_network(space, arch, 100)
                for m in net.modules():  # non-trivial BN statistics, so folding is exercised
                    if isinstance(m, torch.nn.BatchNorm2d):
                        m.running_mean.uniform_(-0.5, 0.5)
                        m.running_var.uniform_(0.5, 2.0)
                net.eval()
                gflop = 2 * multiply_adds(net, size) * n / 1e9
                fast = inference_network(net).to(device)
                t_ours, logits = run(fast, images, batch)
                ours_t.append(t_ours)
                line = (f"  {device.type} {space} {size}x{size} {arch:<92} ours {n / t_ours:8.0f} img/s "
                        f"{gflop / t_ours:6.1f} GFLOP/s")
                if with_xautodl:
                    ref = xautodl_model(space, arch, 100)
                    ref.load_state_dict(net.state_dict())
                    ref = ref.to(device)
                    t_ref, ref_out = run(lambda x: ref(x.contiguous())[1], images, batch)
                    ref_t.append(t_ref)
                    diff = (ref_out - logits).abs().max().item()
                    assert diff <= 1e-4 * max(1.0, ref_out.abs().max().item()), f"logits differ by {diff}"
                    line += (f"  xautodl {n / t_ref:8.0f} img/s {gflop / t_ref:6.1f} GFLOP/s  x{t_ref / t_ours:.2f}"
                             f"  max|diff| {diff:.1e}")
                print(line, flush=True)
            per_network[(space, size)] = ours_t
            mean = statistics.mean(ours_t)
            summary = f"{device.type} {space} {size}x{size}: {1 / mean:.2f} networks/s, {n / mean:.0f} images/s (ours)"
            if ref_t:
                summary += f"; xautodl {1 / statistics.mean(ref_t):.2f} networks/s; speed-up x{sum(ref_t) / sum(ours_t):.2f}"
            print(summary, flush=True)
    return per_network


def project(per_network: dict, n_images: int, device: str) -> None:
    """Seconds for the whole population: each dataset's test-set size scales the measured time."""
    total = 0.0
    for space in ("tss", "sss"):
        if (space, 32) not in per_network:
            continue
        for _, size, n_eval, _ in DATASETS:
            seconds = statistics.mean(per_network[(space, size)]) * n_eval / (n_images if size == 32 else int(n_images * 0.6))
            total += POPULATION[space] * seconds
    measured = [s for s in ("tss", "sss") if (s, 32) in per_network]
    if not measured:
        return
    who = "all 117,702 networks" if len(measured) == 2 else f"the {measured[0].upper()} networks only"
    print(f"projection, {who} on one {device}: {total / 3600:.1f} h of inference "
          f"(inference only; weight loading overlaps it in background loaders)")


def bench_loading(minibench: Path | None, max_workers: int, repeats: int) -> None:
    """Archives per second through ``prefetch`` (what inference jobs use) with 1..max_workers workers
    (1: a background thread; more: processes, whose start-up is part of the time)."""
    from calibench.sources.nats.archive import NatsArchive, prefetch
    from calibench.sources.nats.minibench import MiniBenchSpec, TSS_DIR, SSS_DIR, build_minibench

    if minibench is None:
        minibench = Path(tempfile.mkdtemp()) / "mb"
        build_minibench(minibench, MiniBenchSpec(n_test=50, n_train=50))
    for space, directory in (("tss", TSS_DIR), ("sss", SSS_DIR)):
        archive = NatsArchive(minibench / directory, space)
        files = sorted((minibench / directory).glob("0*.pickle.pbz2"))
        megabytes = sum(f.stat().st_size for f in files) / 1e6
        indices = list(range(len(files))) * repeats  # as many loads as a chunk, so worker start-up counts as in a job
        for workers in range(1, max_workers + 1):
            start = time.perf_counter()
            for _, loaded in prefetch(archive, indices, "cifar10", depth=2 * workers, workers=workers):
                assert not isinstance(loaded, Exception), loaded
            t = time.perf_counter() - start
            print(f"weight loading {space}, {workers} worker(s): {len(indices) / t:.1f} archives/s, "
                  f"{repeats * megabytes / t:.1f} MB/s of bz2 ({megabytes / len(files):.1f} MB per mini archive file)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", type=int, default=4, help="architectures per space")
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--no-xautodl", action="store_true")
    parser.add_argument("--spaces", default="tss,sss", help="comma-separated subset of tss,sss; 'none' for loading only")
    parser.add_argument("--no-loading", action="store_true", help="skip the weight-loading measurement")
    parser.add_argument("--loaders", type=int, default=2, help="measure loading with 1..N workers")
    parser.add_argument("--loads-per-file", type=int, default=10, help="each mini archive file is loaded this often")
    parser.add_argument("--minibench", type=Path, default=None, help="an existing mini benchmark (else one is built)")
    args = parser.parse_args()
    from calibench.runtime import keep_freed_memory

    keep_freed_memory()
    flush = torch.set_flush_denormal(True)  # both models alike; denormal activations are slow on x86
    spaces = args.spaces.split(",")
    archs = {space: sample_archs(space, args.archs) if space in spaces else [] for space in ("tss", "sss")}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, CUDA: {torch.cuda.is_available()}, "
          f"flush denormals: {flush}")
    print(f"float32 matrix product (4096^3) on this CPU: {sgemm_peak():.0f} GFLOP/s "
          "(GFLOP/s below count the training-form convolutions and classifier of each network)")
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    for device in devices:
        per_network = bench_networks(device, archs, args.images, not args.no_xautodl, args.batch)
        project(per_network, args.images, device.type)
    if not args.no_loading:
        bench_loading(args.minibench, args.loaders, args.loads_per_file)


if __name__ == "__main__":
    main()
