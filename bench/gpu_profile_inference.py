"""Where one NATS network's forward pass spends its GPU time (issue 32: "what limits it, from
a profile"). For the widest and narrowest networks of each space, at the jobs' batch of 2,500
images of 32x32, it times the job's own eval-only network (calibench.sources.nats.networks.
inference_network) in variants (cuDNN autotuning, memory format, TF32) and prints achieved
images/s and TFLOP/s from the networks' multiply-adds, then torch.profiler's top kernels of the
job's default variant. Random weights: timings only.

    python bench/gpu_profile_inference.py [--device cuda] [--batch 2500] [--repeats 5] [--profile]
"""

from __future__ import annotations

import argparse
import time

import torch

from calibench.inference.engine import activation_format
from calibench.sources.nats.networks import build_network, inference_network, multiply_adds, randomise_

CONV = "nor_conv_3x3"
NETWORKS = {
    "tss all conv3x3": ("tss", f"|{CONV}~0|+|{CONV}~0|{CONV}~1|+|{CONV}~0|{CONV}~1|{CONV}~2|"),
    "tss pool+skip": ("tss", "|avg_pool_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|nor_conv_1x1~0|skip_connect~1|avg_pool_3x3~2|"),
    "sss widest": ("sss", "64:64:64:64:64"),
    "sss narrowest": ("sss", "8:8:8:8:8"),
}


def timed(net, x, repeats: int, device) -> float:
    with torch.inference_mode():
        for _ in range(2):
            net(x)
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        t0 = time.perf_counter()
        for _ in range(repeats):
            net(x)
        torch.cuda.synchronize(device) if device.type == "cuda" else None
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=2500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="also torch.profiler's top kernels (its CUDA start-up took over 40 s on an H200)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'}")
    job_format = activation_format(device)  # NCHW on CUDA since session 46, channels_last on the CPU
    inputs = {fmt: torch.randn(args.batch, 3, 32, 32, device=device).contiguous(memory_format=fmt)
              for fmt in (torch.channels_last, torch.contiguous_format)}
    job_name = "NCHW" if job_format is torch.contiguous_format else "channels_last"
    default_nets = {}
    for label, (space, arch) in NETWORKS.items():
        tiny = randomise_(build_network(space, arch, 100), seed=0)
        flop = 2 * multiply_adds(tiny, 32) * args.batch
        nets = {fmt: inference_network(tiny, fmt).to(device) for fmt in inputs}
        default_nets[label] = nets[job_format]
        variants = []
        for name, bench, tf32, fmt in ((f"job default ({job_name}, fp32)", False, False, job_format),
                                       ("job default + cudnn.benchmark", True, False, job_format),
                                       ("NCHW fp32", False, False, torch.contiguous_format),
                                       ("channels_last fp32", False, False, torch.channels_last),
                                       ("channels_last TF32 + benchmark", True, True, torch.channels_last),
                                       ("NCHW TF32 + benchmark", True, True, torch.contiguous_format)):
            torch.backends.cudnn.benchmark = bench
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
            s = timed(nets[fmt], inputs[fmt], args.repeats, device)
            variants.append(f"{name}: {args.batch / s:,.0f} img/s, {flop / s / 1e12:.2f} TFLOP/s")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        print(f"\n{label} ({space} {arch}; {flop / args.batch / 2e6:.0f} M multiply-adds per image)")
        for v in variants:
            print("   ", v)
    if device.type != "cuda" or not args.profile:
        return
    from torch.profiler import ProfilerActivity, profile

    for label in ("tss all conv3x3", "sss widest"):
        net = default_nets[label]
        with torch.inference_mode():
            net(inputs[job_format])
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    net(inputs[job_format])
                torch.cuda.synchronize()
        print(f"\nprofile, {label}, job default ({job_name}), 3 passes of {args.batch} images:")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))


if __name__ == "__main__":
    main()
