"""The logit error of each inference precision (issue 32, item 3; BENCHMARKS.md, "Precision").

For 16 architectures per space (the extremes included: SSS all 8 and all 64 channels and
mixed widths; TSS all ``none``, all ``nor_conv_3x3``, all ``skip_connect``, pooling-only and
random cells), random weights with batch-norm statistics taken from a batch (activations at
a trained network's scale), 100 classes: the largest |logit - float64 logit| over
``--images`` random normalised 32x32 images, relative to the largest |float64 logit|, for
today's float32 inference form and for ``tf32x3`` and ``tf32`` (calibench.inference.precision).
The float64 reference is the training form (unfolded batch norm) in float64.

On the CPU the TF32 modes are emulated (operands rounded to TF32, products in float32): the
errors are those of the arithmetic, not of a particular GPU's kernels; on CUDA the same modes
run on tensor cores (``--device cuda``), with the reference on the CPU.

Usage: python bench/bench_precision.py [--images 128] [--archs 16] [--device cpu] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from calibench.inference.precision import with_precision
from calibench.inference.precision_modes import PRECISIONS
from calibench.sources.nats.minibench import sample_sss_archs, sample_tss_archs
from calibench.sources.nats.networks import build_network, inference_network, randomise_

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")


def tss_cell(ops: list[str]) -> str:
    """The arch string of a TSS cell with the six edge operations in order."""
    e = iter(ops)
    return f"|{next(e)}~0|+|{next(e)}~0|{next(e)}~1|+|{next(e)}~0|{next(e)}~1|{next(e)}~2|"


def architectures(space: str, n: int) -> list[str]:
    rng = random.Random(1)
    if space == "sss":
        fixed = ["8:8:8:8:8", "64:64:64:64:64", "8:64:8:64:8", "64:8:64:8:64"]
        rest = [a for a in sample_sss_archs(rng, 4 * n) if a not in fixed]
    else:
        fixed = [tss_cell([op] * 6) for op in ("none", "nor_conv_3x3", "skip_connect", "avg_pool_3x3")]
        rest = [a for a in sample_tss_archs(rng, min(64, 4 * n)) if a not in fixed]
        rest += [tss_cell([rng.choice(OPS) for _ in range(6)]) for _ in range(n)]
    return (fixed + rest)[:n]


def relative_error(z: torch.Tensor, ref: torch.Tensor) -> float:
    return float((z.double().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-300))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--archs", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    images = torch.randn(args.images, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    rows = []
    for space in ("sss", "tss"):
        for i, arch in enumerate(architectures(space, args.archs)):
            net = randomise_(build_network(space, arch, 100), seed=1000 + i, stats_batch=32)
            with torch.no_grad():
                ref = net.double()(images.double())[1]
                net.float()
            row = {"space": space, "arch": arch, "max_abs_logit": float(ref.abs().max())}
            for mode in PRECISIONS:
                fast = with_precision(inference_network(net), mode).to(device)
                with torch.inference_mode():
                    start = time.perf_counter()
                    z = fast(images.to(device).contiguous(memory_format=torch.channels_last))
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    row[f"{mode}_seconds"] = time.perf_counter() - start
                row[mode] = relative_error(z, ref)
            rows.append(row)
            print(f"{space} {arch:70s} float32 {row['float32']:.2e}  tf32x3 {row['tf32x3']:.2e}  "
                  f"tf32 {row['tf32']:.2e}", flush=True)
    print(f"\n{args.images} images, {args.archs} architectures per space, device {device}"
          f"{' (TF32 emulated)' if device.type != 'cuda' else ''}, torch {torch.__version__}")
    print("largest logit error relative to the largest |float64 logit|:")
    for space in ("sss", "tss"):
        sub = [r for r in rows if r["space"] == space]
        print(f"  {space}: " + ", ".join(f"{m} max {max(r[m] for r in sub):.2e} (median "
                                        f"{sorted(r[m] for r in sub)[len(sub) // 2]:.2e})" for m in PRECISIONS))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": str(device), "torch": torch.__version__, "images": args.images, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
