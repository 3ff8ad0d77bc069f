"""Many SSS networks per forward pass against one at a time (issue 32, item 2).

For each M in ``--networks``: M SSS architectures (random weights, 10 classes), either M
consecutive NATS-Bench indices from a seeded start (``--population chunk``, the default: what a
chunk of the population holds) or M random ones (``--population random``), grouped into buckets
by :func:`calibench.sources.nats.stacked.sss_buckets` (at most M per bucket, padding overhead at
most ``--max-overhead``, 25 %), then timed over ``--images`` random normalised 32x32 images in
batches of ``--batch-size``:

* one-by-one: each network's inference form (today's path, ``module_logits``'s loop);
* stacked: each bucket's :class:`~calibench.sources.nats.stacked.StackedNetwork`.

Prints network-images per second (M x images / seconds) of each, the speed-up, the number of
buckets and their padding overhead in multiply-adds, and the largest |stacked - one-by-one|
logit relative to the largest |logit|. Each timing is the best of ``--repeats`` after one
warm-up run. ``--device cuda`` times on the GPU (full float32, synchronised); ``--nchw``
runs the stacked networks in contiguous NCHW instead of channels-last (which layout a GPU's
grouped convolutions prefer); ``--vmap`` adds, for M networks of one configuration (no
padding), ``torch.func.vmap`` over ``functional_call`` of stacked one-network modules against
the grouped convolutions (functorch lowers a convolution with batched weights to a grouped one);
``--cudnn-benchmark`` lets cuDNN time its algorithms per shape (the stacked passes keep fixed
shapes on CUDA; the warm-up run pays for the search).

Usage: python bench/bench_stacked.py [--networks 1 8 32 64] [--images 256] [--batch-size 256]
       [--population chunk|random] [--max-overhead 0.25] [--device cpu] [--threads N] [--nchw]
       [--vmap] [--cudnn-benchmark] [--repeats 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import time

import torch

from calibench.inference.engine import resolve_device
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, parse_sss
from calibench.sources.nats.minibench import sample_sss_archs
from calibench.sources.nats.networks import build_network, inference_network, randomise_
from calibench.sources.nats.stacked import StackedNetwork, sss_buckets, sss_multiply_adds, stacked_logits


randomise = randomise_


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn, device: torch.device, repeats: int):
    out = fn()  # warm-up (and cuDNN's algorithm choice)
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best, out


@torch.inference_mode()
def one_by_one(nets, images: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    return [torch.cat([net(b) for b in images.split(batch_size)]).float().cpu() for net in nets]


def stacked(stacks, images: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    out = []
    for net in stacks:
        logits, _ = stacked_logits(net, images, None, batch_size)
        out.extend(logits)
    return out


def architectures(m: int, population: str) -> list[str]:
    if population == "random":
        return sample_sss_archs(random.Random(m), m)
    every = [":".join(map(str, c)) for c in itertools.product(SSS_CHANNEL_CHOICES, repeat=5)]  # NATS-Bench order
    start = random.Random(m).randrange(len(every) - m)
    return every[start:start + m]


def bench(m: int, images: torch.Tensor, batch_size: int, device: torch.device, repeats: int, population: str,
          max_overhead: float, channels_last: bool) -> dict:
    archs = architectures(m, population)
    configs = [parse_sss(a) for a in archs]
    nets = [randomise(build_network("sss", a, 10), seed) for seed, a in enumerate(archs)]
    buckets = sss_buckets(configs, max_size=m, max_overhead=max_overhead)
    own = sum(sss_multiply_adds(c) for c in configs)
    padded = sum(len(b) * sss_multiply_adds([max(col) for col in zip(*(configs[i] for i in b))]) for b in buckets)
    fast = [inference_network(n).to(device) for n in nets]
    stacks = [StackedNetwork([nets[i] for i in b], channels_last).to(device) for b in buckets]
    order = [i for b in buckets for i in b]
    t_one, ref = _best(lambda: one_by_one(fast, images, batch_size), device, repeats)
    t_stack, got = _best(lambda: stacked(stacks, images, batch_size), device, repeats)
    err = max(float((got[k] - ref[i]).abs().max() / ref[i].abs().max()) for k, i in enumerate(order))
    n = m * images.shape[0]
    return {"networks": m, "images": images.shape[0], "batch_size": batch_size, "buckets": len(buckets),
            "padding_overhead": padded / own - 1, "one_by_one_images_per_s": n / t_one,
            "stacked_images_per_s": n / t_stack, "speedup": t_one / t_stack, "max_rel_error": err,
            "first_archs": archs[:3]}


def bench_vmap(m: int, images: torch.Tensor, batch_size: int, device: torch.device, repeats: int,
               channels_last: bool) -> dict:
    """M networks of one configuration: grouped convolutions against vmap over functional_call."""
    from torch.func import functional_call, stack_module_state, vmap

    arch = "32:32:32:32:32"
    nets = [randomise(build_network("sss", arch, 10), seed) for seed in range(m)]
    grouped = StackedNetwork(nets, channels_last).to(device)
    singles = [StackedNetwork([n], channels_last).to(device) for n in nets]
    params, buffers = stack_module_state(singles)
    base = copy.deepcopy(singles[0]).to("meta")

    def one(p, b, x):
        return functional_call(base, (p, b), (x,))

    batched = vmap(one, in_dims=(0, 0, None))

    @torch.inference_mode()
    def run_vmap():
        return torch.cat([batched(params, buffers, x)[:, 0] for x in images.split(batch_size)], dim=1).cpu()

    @torch.inference_mode()
    def run_grouped():
        return torch.cat([grouped(x) for x in images.split(batch_size)], dim=1).cpu()

    t_grouped, a = _best(run_grouped, device, repeats)
    t_vmap, b = _best(run_vmap, device, repeats)
    n = m * images.shape[0]
    return {"networks": m, "arch": arch, "grouped_images_per_s": n / t_grouped, "vmap_images_per_s": n / t_vmap,
            "max_abs_difference": float((a - b).abs().max())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--networks", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--device", default="cpu")
    p.add_argument("--population", choices=("chunk", "random"), default="chunk")
    p.add_argument("--max-overhead", type=float, default=0.25)
    p.add_argument("--nchw", action="store_true", help="stacked networks in contiguous NCHW, not channels-last")
    p.add_argument("--vmap", action="store_true", help="also time vmap against grouped convolutions")
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True (CUDA)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    g = torch.Generator().manual_seed(0)
    images = torch.randn(args.images, 3, 32, 32, generator=g).to(device).contiguous(memory_format=torch.channels_last)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device {device} ({name}), torch {torch.__version__}, {args.images} images 32x32, batch {args.batch_size}, "
          f"{args.population} SSS architectures, padding <= {args.max_overhead:.0%}, "
          f"stacked {'NCHW' if args.nchw else 'channels-last'}")
    print(f"{'M':>4} {'buckets':>7} {'padding':>8} {'one-by-one img/s':>17} {'stacked img/s':>14} {'speed-up':>8} "
          f"{'max rel err':>11}")
    rows = []
    for m in args.networks:
        r = bench(m, images, args.batch_size, device, args.repeats, args.population, args.max_overhead, not args.nchw)
        rows.append(r)
        print(f"{m:>4} {r['buckets']:>7} {r['padding_overhead']:>7.1%} {r['one_by_one_images_per_s']:>17,.0f} "
              f"{r['stacked_images_per_s']:>14,.0f} {r['speedup']:>7.2f}x {r['max_rel_error']:>11.1e}", flush=True)
    vmap_rows = []
    if args.vmap:
        print(f"\n{'M':>4} {'same config':>14} {'grouped img/s':>14} {'vmap img/s':>11} {'max |diff|':>10}")
        for m in args.networks:
            r = bench_vmap(m, images, args.batch_size, device, args.repeats, not args.nchw)
            vmap_rows.append(r)
            print(f"{m:>4} {r['arch']:>14} {r['grouped_images_per_s']:>14,.0f} {r['vmap_images_per_s']:>11,.0f} "
                  f"{r['max_abs_difference']:>10.1e}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": str(device), "device_name": name, "args": vars(args), "rows": rows,
                       "vmap": vmap_rows}, f, indent=1)


if __name__ == "__main__":
    main()
