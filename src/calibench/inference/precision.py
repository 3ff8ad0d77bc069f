"""Arithmetic of the forward pass (config ``precision``; issue 32, item 3).

* ``float32``: every convolution and matrix product in full float32 (TF32 off; on an H200,
  logits within 2e-7 of float64, relative to the largest logit). The default.
* ``tf32x3``: compensated TF32. Each operand ``a`` of a convolution or linear layer is split
  into its TF32 part ``hi = tf32(a)`` (10-bit mantissa, round to nearest even) and the
  remainder ``lo = a - hi`` (exact in float32); the product is
  ``hi_x hi_w + hi_x lo_w + lo_x hi_w``, three products on TF32 tensor cores, whose dropped
  term ``lo_x lo_w`` is about 2^-22 of the product (the "3xTF32" of NVIDIA's CUTLASS).
  Accuracy near float32's; speed where tensor cores outrun float32 units (GPUs only).
* ``tf32``: plain TF32 (PyTorch's default for convolutions): 1.7e-4 to 3.4e-4 from float64 on
  an H200, beyond the 1e-4 agreement the logits are held to. An explicit opt-in only.

On the CPU no TF32 unit exists: the modes *emulate* it (operands rounded to TF32 explicitly,
products in float32), so the error of each mode can be measured anywhere
(``bench/bench_precision.py``); only their speed needs a GPU. The modes change logits within
their stated error, so the logits key records the mode
(:func:`calibench.inference.precision_modes.precision_fields`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from calibench.inference.precision_modes import check_precision
_TF32_DROPPED_BITS = 13  # float32 keeps 23 mantissa bits, TF32 10


def round_to_tf32(t: Tensor) -> Tensor:
    """``t`` (float32) rounded to TF32's 10-bit mantissa, to nearest, ties to even; infinities
    and NaN pass unchanged (a finite value that rounds past the largest float32 becomes inf, as
    in any rounding)."""
    if t.dtype != torch.float32:
        raise TypeError(f"round_to_tf32: expected float32, got {t.dtype}")
    bits = t.view(torch.int32)  # same element size: strides (channels-last) kept
    half = 1 << (_TF32_DROPPED_BITS - 1)
    lsb = (bits >> _TF32_DROPPED_BITS) & 1
    rounded = (bits + (half - 1) + lsb) & ~((1 << _TF32_DROPPED_BITS) - 1)
    return torch.where(torch.isfinite(t), rounded.view(torch.float32), t)


def split_tf32(t: Tensor) -> tuple[Tensor, Tensor]:
    """``(hi, lo)`` with ``hi = tf32(t)`` and ``lo = t - hi`` (exact: Sterbenz), so ``hi + lo == t``."""
    hi = round_to_tf32(t)
    return hi, t - hi


@contextlib.contextmanager
def tf32_allowed(device: torch.device) -> Iterator[None]:
    """TF32 tensor cores on for the products inside (CUDA); the process's setting restored after."""
    if device.type != "cuda":
        yield
        return
    conv, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul


class _LowPrecision(nn.Module):
    """A bias-free product (convolution or linear) in ``tf32`` or ``tf32x3``; the bias added in float32."""

    def __init__(self, mode: str, weight: Tensor, bias: Tensor | None, conv: dict | None):
        super().__init__()
        self.mode, self.conv = mode, conv
        hi, lo = split_tf32(weight.detach())
        self.register_buffer("w_hi", hi)
        self.register_buffer("w_lo", round_to_tf32(lo) if mode == "tf32x3" else None)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def _product(self, x: Tensor, w: Tensor) -> Tensor:
        if self.conv is None:
            return F.linear(x, w)
        return F.conv2d(x, w, None, **self.conv)

    def forward(self, x: Tensor) -> Tensor:
        emulate = x.device.type != "cuda"  # TF32 hardware rounds its inputs itself
        x_hi, x_lo = split_tf32(x)
        with tf32_allowed(x.device):
            out = self._product(x_hi, self.w_hi)
            if self.mode == "tf32x3":
                out = out + self._product(x_hi, self.w_lo)
                out = out + self._product(round_to_tf32(x_lo) if emulate else x_lo, self.w_hi)
        if self.bias is not None:
            out = out + (self.bias if self.conv is None else self.bias.view(1, -1, 1, 1))
        return out


def _replacement(module: nn.Module, mode: str) -> nn.Module | None:
    if isinstance(module, nn.Conv2d):
        conv = {"stride": module.stride, "padding": module.padding, "dilation": module.dilation,
                "groups": module.groups}
        return _LowPrecision(mode, module.weight, module.bias, conv)
    if isinstance(module, nn.Linear):
        return _LowPrecision(mode, module.weight, module.bias, None)
    return None


def with_precision(net: nn.Module, precision: str) -> nn.Module:
    """``net`` with its convolutions and linear layers computed in ``precision`` (in place; a
    float32 network, eval only). ``float32`` returns ``net`` unchanged. Functional convolutions
    inside the network (the exact 3x3 average pool of the inference form) stay in float32:
    TF32 is switched on only around the replaced products."""
    check_precision(precision)
    if precision == "float32":
        return net
    for name, child in list(net.named_children()):
        new = _replacement(child, precision)
        if new is not None:
            setattr(net, name, new)
        else:
            with_precision(child, precision)
    return net

