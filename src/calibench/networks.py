"""NATS-Bench networks (nats-bench-facts.md, "Networks").

:func:`build_network` rebuilds ``infer.tiny`` (TSS) and ``infer.shape.tiny`` (SSS)
with the state-dict keys and shapes of ``xautodl.models.get_cell_based_tiny_net``,
so benchmark weights load with ``strict=True``. :func:`inference_network` turns a
loaded network into a faster eval-only form with the same logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .archstr import SSS_GENOTYPE, Cell, parse_sss, parse_tss

__all__ = ["build_network", "inference_network", "count_parameters"]

TSS_C, TSS_N = 16, 5


# --------------------------------------------------------------------------- #
# Training form: module names and order mirror xautodl (the state-dict keys).
# --------------------------------------------------------------------------- #


class ReLUConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1):
        super().__init__()
        self.op = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2, bias=False),
            nn.BatchNorm2d(c_out),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x)


class Zero(nn.Module):
    def __init__(self, c_out: int):
        super().__init__()
        self.c_out = c_out

    def forward(self, x: Tensor) -> Tensor:
        return x.new_zeros(x.shape[0], self.c_out, *x.shape[2:])


class ProjectedSkip(nn.Module):
    """``skip_connect`` between widths (SSS): 1x1 conv + BN, no ReLU (xautodl's stride-1 FactorizedReduce)."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


class AvgPool(nn.Module):
    """3x3 average pool excluding padding, after a 1x1 ReLUConvBN when widths differ."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.preprocess = ReLUConvBN(c_in, c_out, 1) if c_in != c_out else None
        self.op = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x if self.preprocess is None else self.preprocess(x))


def _edge(op: str, c_in: int, c_out: int) -> nn.Module:
    if op == "none":
        return Zero(c_out)
    if op == "skip_connect":
        return nn.Identity() if c_in == c_out else ProjectedSkip(c_in, c_out)
    if op == "nor_conv_1x1":
        return ReLUConvBN(c_in, c_out, 1)
    if op == "nor_conv_3x3":
        return ReLUConvBN(c_in, c_out, 3)
    if op == "avg_pool_3x3":
        return AvgPool(c_in, c_out)
    raise ValueError(f"unknown operation {op!r}")


class NormalCell(nn.Module):
    """4-node DAG; edges out of node 0 map c_in -> c_out, all others c_out -> c_out."""

    def __init__(self, cell: Cell, c_in: int, c_out: int):
        super().__init__()
        self.cell = cell
        self.layers = nn.ModuleList(
            _edge(op, c_in if src == 0 else c_out, c_out) for node in cell for op, src in node
        )

    def forward(self, x: Tensor) -> Tensor:
        nodes, layers = [x], iter(self.layers)
        for node in self.cell:
            nodes.append(sum(next(layers)(nodes[src]) for _, src in node))
        return nodes[-1]


class ResidualReduction(nn.Module):
    """ResNet basic block, stride 2: two ReLUConvBN 3x3; shortcut avg-pool 2x2 then 1x1 conv (no BN)."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv_a = ReLUConvBN(c_in, c_out, 3, stride=2)
        self.conv_b = ReLUConvBN(c_out, c_out, 3)
        self.downsample = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(c_in, c_out, 1, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.downsample(x) + self.conv_b(self.conv_a(x))


class TinyNetwork(nn.Module):
    """Stem, three stages of cells joined by two residual reductions, BN-ReLU, pool, linear.

    ``channels`` has 3N+2 entries, one per cell or reduction; the stem has ``channels[0]``.
    """

    def __init__(self, cell: Cell, channels: list[int], num_classes: int):
        super().__init__()
        n = (len(channels) - 2) // 3
        self.stem = nn.Sequential(nn.Conv2d(3, channels[0], 3, padding=1, bias=False), nn.BatchNorm2d(channels[0]))
        self.cells = nn.ModuleList()
        c_prev = channels[0]
        for i, c in enumerate(channels):
            self.cells.append(ResidualReduction(c_prev, c) if i in (n, 2 * n + 1) else NormalCell(cell, c_prev, c))
            c_prev = c
        self.lastact = nn.Sequential(nn.BatchNorm2d(c_prev), nn.ReLU())
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c_prev, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(x)
        for cell in self.cells:
            x = cell(x)
        features = self.global_pooling(self.lastact(x)).flatten(1)
        return features, self.classifier(features)


def build_network(space: str, arch_str: str, num_classes: int) -> TinyNetwork:
    """The NATS-Bench network of ``arch_str`` in ``space`` ("tss" or "sss"); ``ValueError`` if either is invalid."""
    if space == "tss":
        channels = [TSS_C] * TSS_N + [2 * TSS_C] * (TSS_N + 1) + [4 * TSS_C] * (TSS_N + 1)
        return TinyNetwork(parse_tss(arch_str), channels, num_classes)
    if space == "sss":
        return TinyNetwork(parse_tss(SSS_GENOTYPE), list(parse_sss(arch_str)), num_classes)
    raise ValueError(f"unknown search space {space!r} (expected 'tss' or 'sss')")


def count_parameters(net: nn.Module) -> float:
    """Parameters in millions (1e6, not 2**20), as NATS-Bench records ``params``
    (xautodl ``count_parameters_in_MB``: all parameters, no buffers)."""
    return sum(p.numel() for p in net.parameters()) / 1e6
