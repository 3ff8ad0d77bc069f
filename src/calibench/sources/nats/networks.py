"""NATS-Bench networks (docs/nats-bench.md, "Networks").

:func:`build_network` rebuilds ``infer.tiny`` (TSS) and ``infer.shape.tiny`` (SSS)
with the state-dict keys and shapes of ``xautodl.models.get_cell_based_tiny_net``,
so benchmark weights load with ``strict=True``. :func:`inference_network` turns a
loaded network into a faster eval-only form with the same logits.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from calibench.sources.nats.archstr import SSS_GENOTYPE, Cell, parse_sss, parse_tss

__all__ = ["build_network", "inference_network", "count_parameters", "multiply_adds"]

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
        self.cell, self.c_out = cell, c_out
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
        self.c_out = c_out
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


def randomise_(net: nn.Module, seed: int, stats_batch: int = 0) -> nn.Module:
    """In place, for tests and benchmarks: He-scaled random weights (biases N(0, 0.1)) and random
    batch-norm parameters and running statistics, so that folding matters; returns ``net`` in
    eval mode. ``stats_batch`` > 0: the running statistics of a training-mode pass over that many
    random 32x32 images (activations at a realistic scale), then perturbed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.normal_(0, (2 / m.weight[0].numel()) ** 0.5, generator=g)
                if m.bias is not None:
                    m.bias.normal_(0, 0.1, generator=g)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.2, generator=g)
                if stats_batch:
                    m.reset_running_stats()
                    m.momentum = None
                else:
                    m.running_mean.normal_(0, 0.2, generator=g)
                    m.running_var.uniform_(0.5, 2.0, generator=g)
        if stats_batch:
            net.train()(torch.randn(stats_batch, 3, 32, 32, generator=g))
            for m in net.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.add_(torch.randn(m.num_features, generator=g) * 0.2 * m.running_var.sqrt())
                    m.running_var.mul_(torch.empty(m.num_features).uniform_(0.5, 2.0, generator=g))
    return net.eval()


def count_parameters(net: nn.Module) -> float:
    """Parameters in millions (1e6, not 2**20), as NATS-Bench records ``params``
    (xautodl ``count_parameters_in_MB``: all parameters, no buffers)."""
    return sum(p.numel() for p in net.parameters()) / 1e6


def multiply_adds(net: nn.Module, size: int) -> int:
    """Multiply-adds of one ``size`` x ``size`` image through the convolutions and linear layers
    (the measure NATS-Bench records as ``flops``, in millions there)."""
    total = 0

    def count(module, inputs, output):
        nonlocal total
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            total += output.numel() * (module.in_channels // module.groups) * kh * kw
        else:
            total += output.numel() * module.in_features

    handles = [m.register_forward_hook(count) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            net(torch.zeros(1, 3, size, size))
    finally:
        for h in handles:
            h.remove()
    return total


# --------------------------------------------------------------------------- #
# Inference form: BatchNorm folded into convs, `none` edges and unused nodes
# dropped, one ReLU per source node, in-place sums, one memory layout throughout.
# --------------------------------------------------------------------------- #

_CL = torch.channels_last


def _bn_affine(bn: nn.BatchNorm2d) -> tuple[Tensor, Tensor]:
    """Eval-mode BatchNorm as ``x * scale + shift``, in float64."""
    scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
    return scale, bn.bias.detach().double() - bn.running_mean.double() * scale


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[nn.Conv2d, Tensor]:
    """``conv`` (bias-free) then eval-mode ``bn``, as a bias-free conv plus a separate bias."""
    scale, shift = _bn_affine(bn)
    dtype = conv.weight.dtype
    weight = (conv.weight.detach().double() * scale.view(-1, 1, 1, 1)).to(dtype)
    folded = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=False)
    folded.weight = nn.Parameter(weight, requires_grad=False)
    return folded.to(memory_format=_CL), shift.to(dtype)


def _with_bias(conv: nn.Conv2d, bias: Tensor) -> nn.Conv2d:
    conv.bias = nn.Parameter(bias, requires_grad=False)
    return conv


@functools.cache
def _inverse_pool_count(height: int, width: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    ones = torch.ones(1, 1, height, width, device=device, dtype=dtype)
    return 1 / F.avg_pool2d(ones, 3, stride=1, padding=1, divisor_override=1)


def _avg_pool_3x3(h: Tensor) -> Tensor:
    """3x3, stride 1, padding 1, padding excluded from the count (xautodl's POOLING); a depthwise
    conv is several times faster than ``avg_pool2d`` on channels_last CPU tensors."""
    window_sum = F.conv2d(h, h.new_ones(h.shape[1], 1, 3, 3), padding=1, groups=h.shape[1])
    return window_sum.mul_(_inverse_pool_count(*h.shape[2:], h.device, h.dtype))


def _eval_only_(net: nn.Module, memory_format: torch.memory_format) -> None:
    """In place: every conv weight in ``memory_format`` (NCHW by a clone: ``.contiguous()`` keeps a
    1x1 weight's channels-last strides), no gradients, eval mode."""
    if memory_format is torch.contiguous_format:
        for module in net.modules():
            if isinstance(module, nn.Conv2d):
                module.weight = nn.Parameter(module.weight.clone(memory_format=torch.contiguous_format),
                                             requires_grad=False)
    net.requires_grad_(False)
    net.eval()


class _Edge(nn.Module):
    """A live edge: [ReLU] -> [conv without bias] -> [3x3 average pool]; identity if none of them.
    The conv is one network's or, stacked, M networks' as one grouped conv."""

    def __init__(self, src: int, relu: bool, conv: nn.Conv2d | None, pool: bool):
        super().__init__()
        self.src, self.relu, self.conv, self.pool = src, relu, conv, pool
        self.fresh = conv is not None or pool  # returns a new tensor (safe to add into)

    def forward(self, nodes: list[Tensor | None], relus: dict[int, Tensor]) -> Tensor:
        h = nodes[self.src]
        if self.relu:
            if self.src not in relus:
                relus[self.src] = F.relu(h)
            h = relus[self.src]
        if self.conv is not None:
            h = self.conv(h)
        return _avg_pool_3x3(h) if self.pool else h


def _edge_parts(layer: nn.Module) -> tuple[bool, nn.Conv2d | None, Tensor | None, bool] | None:
    """(relu, conv, bias, pool) of a training-form edge; None for ``none``."""
    if isinstance(layer, Zero):
        return None
    if isinstance(layer, nn.Identity):
        return False, None, None, False
    if isinstance(layer, ProjectedSkip):
        return (False, *_fold(layer.conv, layer.bn), False)
    if isinstance(layer, ReLUConvBN):
        return (True, *_fold(layer.op[1], layer.op[2]), False)
    if isinstance(layer, AvgPool):
        if layer.preprocess is None:
            return False, None, None, True
        return (True, *_fold(layer.preprocess.op[1], layer.preprocess.op[2]), True)
    raise TypeError(f"unexpected edge module {type(layer).__name__}")


class _Node(nn.Module):
    """Sum of live edges plus the summed biases of all its conv edges (pooling keeps a constant):
    carried by its first plain convolution where it has one, else added after the sum."""

    def __init__(self, index: int, edges: list[_Edge], bias: Tensor | None, channels: int):
        super().__init__()
        self.index, self.channels = index, channels
        edges = sorted(edges, key=lambda e: not (e.conv is not None and not e.pool))  # plain convs first
        if bias is not None and edges and edges[0].conv is not None and not edges[0].pool:
            edges[0].conv.bias, bias = nn.Parameter(bias, requires_grad=False), None
        self.edges = nn.ModuleList(edges)
        self.register_buffer("bias", None if bias is None else bias.view(1, -1, 1, 1))

    def forward(self, nodes: list[Tensor | None], relus: dict[int, Tensor]) -> Tensor:
        acc, fresh = None, False
        for edge in self.edges:
            h = edge(nodes, relus)
            if acc is None:
                acc, fresh = h, edge.fresh
            elif fresh:
                acc.add_(h)
            else:
                acc, fresh = acc + h, True
        if acc is None:  # every input is `none` or zero
            x = nodes[0]
            acc, fresh = x.new_zeros(x.shape[0], self.channels, *x.shape[2:]), True
            if not x.is_contiguous():  # channels-last, as the rest
                acc = acc.contiguous(memory_format=_CL)
        if self.bias is not None:
            acc = acc.add_(self.bias) if fresh else acc + self.bias
        return acc


class _PrunedCell(nn.Module):
    """A cell without its `none` edges, edges out of exactly-zero nodes (a conv's bias survives them:
    conv(relu(0)) = bias) and nodes that do not reach the output. ``rows``: per node, its incoming
    edges as (source node, :class:`_Edge` or None for `none`, folded bias or None); ``channels``:
    the width of every node."""

    def __init__(self, rows: list[list[tuple[int, _Edge | None, Tensor | None]]], channels: int):
        super().__init__()
        zero = [False]  # node j is exactly zero
        specs = []
        for row in rows:
            edges, bias = [], None
            for src, edge, b in row:
                if b is not None:
                    bias = b if bias is None else bias + b
                if edge is not None and not zero[src]:
                    edges.append(edge)
            zero.append(not edges and bias is None)
            specs.append((edges, bias))
        needed = {len(specs)}
        for j in range(len(specs), 0, -1):
            if j in needed:
                needed.update(e.src for e in specs[j - 1][0])
        self.nodes = nn.ModuleList(
            _Node(j, *specs[j - 1], channels) for j in range(1, len(specs) + 1) if j in needed
        )
        self.num_nodes = len(specs) + 1

    def forward(self, x: Tensor) -> Tensor:
        nodes: list[Tensor | None] = [x] + [None] * (self.num_nodes - 1)
        relus: dict[int, Tensor] = {}
        for node in self.nodes:
            nodes[node.index] = node(nodes, relus)
        return nodes[-1]


class _FastCell(_PrunedCell):
    """The inference form of one :class:`NormalCell`."""

    def __init__(self, cell: NormalCell):
        parts = iter([_edge_parts(layer) for layer in cell.layers])
        rows = []
        for node in cell.cell:
            row = []
            for _, src in node:
                part = next(parts)
                if part is None:
                    row.append((src, None, None))
                else:
                    relu, conv, bias, pool = part
                    row.append((src, _Edge(src, relu, conv, pool), bias))
            rows.append(row)
        super().__init__(rows, cell.c_out)


class _FastReduction(nn.Module):
    def __init__(self, block: ResidualReduction):
        super().__init__()
        self.conv_a = _with_bias(*_fold(block.conv_a.op[1], block.conv_a.op[2]))
        self.conv_b = _with_bias(*_fold(block.conv_b.op[1], block.conv_b.op[2]))
        # 2x2 average pool then 1x1 conv == 2x2 stride-2 conv with the 1x1 weight / 4.
        w = block.downsample[1].weight.detach()
        self.shortcut = nn.Conv2d(w.shape[1], w.shape[0], 2, stride=2, bias=False)
        self.shortcut.weight = nn.Parameter((w / 4).expand(-1, -1, 2, 2).contiguous(), requires_grad=False)
        self.shortcut.to(memory_format=_CL)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv_b(self.conv_a(F.relu(x)).relu_())
        return out.add_(self.shortcut(x))


class InferenceNetwork(nn.Module):
    """Eval-only form of a :class:`TinyNetwork`; ``forward`` returns logits only."""

    def __init__(self, net: TinyNetwork, memory_format: torch.memory_format = _CL):
        super().__init__()
        # CPU sub-batch size in bytes of the widest activation. Measured (BENCHMARKS.md): TSS's
        # many narrow cells run best at 4 MB, SSS's few wide convolutions at 16 MB.
        self.chunk_bytes = (4 << 20) if len(net.cells) > 5 else (16 << 20)
        self.stem = _with_bias(*_fold(net.stem[0], net.stem[1]))
        self.cells = nn.ModuleList(
            _FastReduction(c) if isinstance(c, ResidualReduction) else _FastCell(c) for c in net.cells
        )
        dtype = net.classifier.weight.dtype
        scale, shift = _bn_affine(net.lastact[0])
        self.register_buffer("head_scale", scale.to(dtype).view(1, -1, 1, 1))
        self.register_buffer("head_shift", shift.to(dtype).view(1, -1, 1, 1))
        self.classifier = copy.deepcopy(net.classifier)
        # Widest activation per input pixel: channels / (4 ** reductions so far), over all cells.
        widths, scale = [net.stem[0].out_channels], 1
        for cell in net.cells:
            scale *= 4 if isinstance(cell, ResidualReduction) else 1
            widths.append(cell.c_out / scale)
        self.width_per_pixel = max(widths)
        if memory_format not in (_CL, torch.contiguous_format):
            raise ValueError(f"memory_format: expected torch.channels_last or torch.contiguous_format, got {memory_format}")
        self.memory_format = memory_format
        _eval_only_(self, memory_format)

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu":
            return self._forward(x)
        # On CPU, sub-batches whose activations stay in cache run faster (and avoid page faults on big allocations).
        per_image = self.width_per_pixel * x.shape[2] * x.shape[3] * x.element_size()
        chunk = max(1, int(self.chunk_bytes // per_image))
        if x.shape[0] <= chunk:
            return self._forward(x)
        return torch.cat([self._forward(part) for part in x.split(chunk)])

    def _forward(self, x: Tensor) -> Tensor:
        x = self.stem(x.contiguous(memory_format=self.memory_format))
        for cell in self.cells:
            x = cell(x)
        x = torch.addcmul(self.head_shift, x, self.head_scale).relu_()
        return self.classifier(x.mean((2, 3)))


def inference_network(net: TinyNetwork, memory_format: torch.memory_format = _CL) -> InferenceNetwork:
    """A faster eval-only copy of ``net`` (weights loaded) returning logits; BN uses running stats.
    ``memory_format``: the layout of its weights and activations, ``torch.channels_last`` (the
    CPU's) or ``torch.contiguous_format`` (NCHW, CUDA's: :func:`calibench.inference.engine.activation_format`)."""
    if not isinstance(net, TinyNetwork):
        raise TypeError(f"expected a network from build_network, got {type(net).__name__}")
    return InferenceNetwork(net, memory_format)
