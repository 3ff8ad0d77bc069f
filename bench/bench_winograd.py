"""Would Winograd convolution lift SSS inference on CPU? A measured answer.

SSS networks are dense 3x3 convolutions already running near this CPU's float32 ceiling
(bench_inference.py). Winograd F(2x2, 3x3) needs 2.25x fewer multiplies; this script
builds it from PyTorch operations (input tile transform, 16 batched matrix products,
output transform, channels-last) and times it against ``F.conv2d`` for the SSS widths
at 32x32 and 16x16, with batches sized like the inference engine's 16 MB sub-batches.
It is a feasibility measurement, not part of the engine.

Usage: python bench/bench_winograd.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

# F(2x2, 3x3) (Lavin & Gray 2016): Y = A^T [(G g G^T) * (B^T d B)] A on 4x4 input tiles.
G = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]], dtype=torch.float64)


def transformed_weight(w: torch.Tensor) -> torch.Tensor:
    """(Cout, Cin, 3, 3) -> (16, Cin, Cout): G g G^T per channel pair, one matrix per tile point."""
    u = torch.einsum("ai,ocij,bj->abco", G, w.double(), G)
    return u.reshape(16, w.shape[1], w.shape[0]).float().contiguous()


def winograd_conv(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """3x3, stride 1, padding 1 convolution of an NHWC tensor (B, H, W, C), H and W even."""
    b, h, w, c = x.shape
    cout = u.shape[-1]
    th, tw = h // 2, w // 2
    xp = F.pad(x, (0, 0, 1, 1, 1, 1))
    rows = [xp[:, r : r + 2 * th : 2] for r in range(4)]
    t = [rows[0] - rows[2], rows[1] + rows[2], rows[2] - rows[1], rows[1] - rows[3]]  # B^T d
    v = torch.empty(4, 4, b, th, tw, c)
    for i in range(4):
        cols = [t[i][:, :, j : j + 2 * tw : 2] for j in range(4)]  # (B^T d) B
        torch.sub(cols[0], cols[2], out=v[i, 0])
        torch.add(cols[1], cols[2], out=v[i, 1])
        torch.sub(cols[2], cols[1], out=v[i, 2])
        torch.sub(cols[1], cols[3], out=v[i, 3])
    m = torch.bmm(v.view(16, -1, c), u).view(4, 4, b, th, tw, cout)
    r0, r1 = m[0] + m[1] + m[2], m[1] - m[2] - m[3]  # A^T m
    y = torch.empty(b, th, 2, tw, 2, cout)
    for a, r in enumerate((r0, r1)):  # (A^T m) A
        torch.add(r[0] + r[1], r[2], out=y[:, :, a, :, 0])
        torch.sub(r[1] - r[2], r[3], out=y[:, :, a, :, 1])
    return y.view(b, h, w, cout)


def seconds(fn, repeats: int = 5) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    for c in (64, 48, 32, 16):
        for size in (32, 16):
            batch = max(1, (16 << 20) // (size * size * c * 4))
            x = torch.randn(batch, c, size, size).contiguous(memory_format=torch.channels_last)
            w = torch.randn(c, c, 3, 3) / (3 * c**0.5)
            u = transformed_weight(w)
            nhwc = x.permute(0, 2, 3, 1)  # the same memory, viewed as NHWC
            with torch.inference_mode():
                direct = F.conv2d(x, w, padding=1)
                err = (winograd_conv(nhwc, u).permute(0, 3, 1, 2) - direct).abs().max().item()
                t_direct = seconds(lambda: F.conv2d(x, w, padding=1))
                t_wino = seconds(lambda: winograd_conv(nhwc, u))
            gflop = 2 * batch * size * size * c * c * 9 / 1e9
            print(f"C={c:2d} {size}x{size} batch {batch:4d}: conv2d {t_direct * 1e3:6.1f} ms "
                  f"({gflop / t_direct:5.0f} GFLOP/s), Winograd {t_wino * 1e3:6.1f} ms, "
                  f"speed-up x{t_direct / t_wino:.2f}, max|diff| {err:.1e}")


if __name__ == "__main__":
    main()
