"""Many NATS networks in one forward pass (issue 32, item 2).

One NATS network is small (8 to 64 channels): on a GPU its convolutions leave most of the
chip idle. :class:`StackedNetwork` runs M networks of one cell genotype together: their
folded (BatchNorm-free) weights are zero-padded to a shared channel configuration and laid
side by side, so each convolution is one *grouped* convolution (``groups=M``: the channels
of the M networks concatenated), the stem one plain convolution of the shared images, the
classifier a grouped 1x1 convolution. Activations are ``(B, M * C, H, W)``, channels-last.

Exactness. Every padded channel stays exactly 0: its weight rows, bias, BatchNorm scale
and shift and classifier columns are 0, ReLU(0) = 0, the average of zeros is 0. A padded
input channel meets zero weights. So each network's logits are its own, up to the order
in which float32 sums are taken (within about 1e-7 of the largest logit).

* SSS (size space): one genotype, five widths per network. A bucket is padded to the
  per-position maximum. A ``skip_connect`` from a cell's input is an Identity where the
  network's widths agree and a 1x1 projection where they do not; where the bucket needs a
  projection, an Identity becomes an exact 1x1 identity convolution (weight 1 on the
  diagonal, 0 elsewhere, bias 0). :func:`sss_buckets` forms buckets of similar widths so
  padding costs at most ``max_overhead`` (25 %) more multiply-adds than the networks alone.
* TSS (topology space): networks of one cell string (the seeds of an architecture) share
  their structure exactly and stack without padding. Different cells do not: a "super-cell"
  holding every operation on every edge, with the absent ones zeroed, would run up to five
  operations per edge where each network runs one, up to 5x the work, so each TSS bucket is
  one cell string (:func:`bucket_entries`).
* Datasets hold different images: a bucket never mixes datasets.

Shapes on CUDA: :func:`stacked_logits` splits the images into sub-batches of one fixed size
(the last one zero-padded to it), so every forward pass of a bucket has the same shapes, as
``torch.backends.cudnn.benchmark`` wants; this module does not switch it on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from calibench.inference.engine import Launched, enqueue_to_host
from calibench.sources.nats.archstr import parse_sss
from calibench.sources.nats.networks import (
    AvgPool, NormalCell, ProjectedSkip, ReLUConvBN, ResidualReduction, TinyNetwork, Zero, _bn_affine, _Edge,
    _eval_only_, _fold, _PrunedCell,
)

__all__ = ["StackedNetwork", "bucket_entries", "resolve_networks_per_pass", "sss_buckets", "sss_multiply_adds",
           "launch_stacked", "stacked_logits", "CUDA_NETWORKS_PER_PASS"]

CUDA_NETWORKS_PER_PASS = 64  # networks_per_pass: auto for TSS on CUDA (1 on the CPU and for SSS)
_CL = torch.channels_last
_CPU_CHUNK_BYTES = 16 << 20  # CPU sub-batch: bytes of the widest stacked activation (as InferenceNetwork)
_CUDA_CHUNK_BYTES = 1 << 30  # CUDA sub-batch: about one 64-channel network's activation at 4,000 images


def resolve_networks_per_pass(setting: int | str, device: torch.device, space: str | None = None) -> int:
    """Config ``networks_per_pass``: a positive integer, or ``auto``: 1 on the CPU (stacking
    does not pay there, and 1 keeps the logits bit-equal to one-by-one) and for SSS on CUDA,
    64 for TSS (or an unnamed space) on CUDA. SSS's stacked passes are grouped convolutions,
    which ran 3-4x slower per network than one network per pass through the inference job on
    an H100 and an H200 (docs/cluster.md, "The GPU path")."""
    if setting == "auto":
        if torch.device(device).type != "cuda" or space == "sss":
            return 1
        return CUDA_NETWORKS_PER_PASS
    try:
        number = int(setting)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(setting).strip() != str(number):
        raise ValueError(f"networks_per_pass: expected a positive integer or auto, got {setting!r}")
    return number


# --------------------------------------------------------------------------- #
# Buckets
# --------------------------------------------------------------------------- #


def sss_multiply_adds(channels: Sequence[int], size: int = 32, projection: Sequence[bool] | None = None) -> int:
    """Multiply-adds of one ``size`` x ``size`` image through the convolutions of the SSS network
    of ``channels`` (its five widths; the classifier left out). ``projection``: per normal cell
    (positions 0, 2, 4), whether its skip edge is a 1x1 projection; default: where its input
    and output widths differ. Equals :func:`calibench.sources.nats.networks.multiply_adds` less
    the classifier's."""
    c = list(channels)
    if len(c) != 5:
        raise ValueError(f"expected 5 SSS widths, got {channels!r}")
    hw = size * size
    total = 27 * hw * c[0]  # stem: 3 -> c0, 3x3
    c_prev, k = c[0], 0
    for i, width in enumerate(c):
        if i in (1, 3):  # residual reduction: two 3x3 convs at half size, 1x1 shortcut after 2x2 pooling
            hw //= 4
            total += hw * (9 * c_prev * width + 9 * width * width + c_prev * width)
        else:  # SSS cell: 3x3 convs 0->1, 0->2 (c_prev -> width), 1->2, 1->3, 2->3 (width -> width)
            proj = (c_prev != width) if projection is None else bool(projection[k])
            total += hw * (9 * (2 * c_prev * width + 3 * width * width) + (c_prev * width if proj else 0))
            k += 1
        c_prev = width
    return total


def _padded_cost(configs: Sequence[Sequence[int]], size: int) -> int:
    top = [max(col) for col in zip(*configs)]
    prev = [top[0], *top[:-1]]
    projection = [any(cfg[i] != (cfg[i - 1] if i else cfg[0]) for cfg in configs) or top[i] != prev[i]
                  for i in (0, 2, 4)]
    return sss_multiply_adds(top, size, projection)


def sss_buckets(configs: Sequence[Sequence[int]], max_size: int, max_overhead: float = 0.25,
                size: int = 32) -> list[list[int]]:
    """Buckets of SSS networks (positions into ``configs``, each a network's five widths) to
    run together: a partition of ``range(len(configs))``, each bucket at most ``max_size``
    networks whose padded configuration (the per-position maximum) costs at most
    ``1 + max_overhead`` times their own multiply-adds together. A pure function.

    Greedy over the networks sorted by their widths, most expensive position first (the
    32x32 cell, then the 16x16 cell and reduction, then the 8x8 ones): a network joins the
    current bucket if the bucket stays within both limits, else opens the next one.
    Networks of one configuration are adjacent in that order, so they share buckets; the
    buckets come in the order of their first network's position, each in position order.
    """
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    if max_overhead < 0:
        raise ValueError(f"max_overhead must be >= 0, got {max_overhead}")
    configs = [tuple(int(w) for w in c) for c in configs]
    costs = [sss_multiply_adds(c, size) for c in configs]
    order = sorted(range(len(configs)), key=lambda i: ((configs[i][0], configs[i][2], configs[i][1],
                                                        configs[i][4], configs[i][3]), i))
    buckets: list[list[int]] = []
    current: list[int] = []
    own = 0
    for i in order:
        if current and len(current) < max_size:
            members = [configs[j] for j in current] + [configs[i]]
            if _padded_cost(members, size) * len(members) <= (1 + max_overhead) * (own + costs[i]):
                current.append(i)
                own += costs[i]
                continue
        if current:
            buckets.append(sorted(current))
        current, own = [i], costs[i]
    if current:
        buckets.append(sorted(current))
    return sorted(buckets, key=lambda b: b[0])


def bucket_entries(keys: Sequence[tuple[str, str, str]], max_size: int, max_overhead: float = 0.25,
                   size: int = 32) -> list[list[int]]:
    """Buckets (positions into ``keys``) of networks to run together; each key is
    ``(space, dataset, arch_str)``. Never across datasets (different images) or spaces; TSS
    networks only with the same cell string (see the module's note), SSS by :func:`sss_buckets`.
    A partition, each bucket in position order, the buckets by their first position."""
    groups: dict[tuple, list[int]] = {}
    for i, (space, dataset, arch_str) in enumerate(keys):
        if space not in ("tss", "sss"):
            raise ValueError(f"unknown search space {space!r} (expected 'tss' or 'sss')")
        groups.setdefault((space, dataset, arch_str if space == "tss" else ""), []).append(i)
    buckets: list[list[int]] = []
    for (space, _, _), members in groups.items():
        if space == "tss":
            buckets += [members[k:k + max_size] for k in range(0, len(members), max_size)]
        else:
            configs = [parse_sss(keys[i][2]) for i in members]
            buckets += [[members[j] for j in b] for b in sss_buckets(configs, max_size, max_overhead, size)]
    return sorted(buckets, key=lambda b: b[0])


# --------------------------------------------------------------------------- #
# The stacked network
# --------------------------------------------------------------------------- #


def _conv(weights: Sequence[Tensor], biases: Sequence[Tensor | None] | None, c_out: int, c_in: int,
          stride: int = 1, padding: int = 0, shared_input: bool = False) -> nn.Conv2d:
    """The grouped convolution of M networks' weights ``(c_out_m, c_in_m, k, k)``, each zero-padded
    to ``(c_out, c_in, k, k)``; ``shared_input``: one input for all (the stem), not M groups."""
    m, (k_h, k_w) = len(weights), weights[0].shape[2:]
    w0 = weights[0]
    weight = w0.new_zeros(m, c_out, 3 if shared_input else c_in, k_h, k_w)
    bias = w0.new_zeros(m, c_out)
    for j, w in enumerate(weights):
        weight[j, :w.shape[0], :w.shape[1]] = w
        if biases is not None and biases[j] is not None:
            bias[j, :biases[j].shape[0]] = biases[j]
    conv = nn.Conv2d(weight.shape[2] * (1 if shared_input else m), m * c_out, (k_h, k_w), stride, padding,
                     groups=1 if shared_input else m, bias=biases is not None, device=w0.device, dtype=w0.dtype)
    conv.weight = nn.Parameter(weight.flatten(0, 1), requires_grad=False)
    if biases is not None:
        conv.bias = nn.Parameter(bias.flatten(), requires_grad=False)
    return conv.to(memory_format=_CL)


def _padded_bias(biases: Sequence[Tensor], c_out: int) -> Tensor:
    out = biases[0].new_zeros(len(biases), c_out)
    for j, b in enumerate(biases):
        out[j, :b.shape[0]] = b
    return out.flatten()


def _stacked_edge(layers: Sequence[nn.Module], widths: Sequence[int], src: int, c_in: int, c_out: int):
    """(edge or None, bias or None) of one cell edge across the M networks (``layers``: theirs,
    ``widths``: their cells' output widths), padded to ``c_in`` -> ``c_out``."""
    first = layers[0]
    if isinstance(first, Zero):
        return None, None
    if all(isinstance(layer, nn.Identity) for layer in layers):
        return _Edge(src, False, None, False), None
    if all(isinstance(layer, (nn.Identity, ProjectedSkip)) for layer in layers):
        like = next(layer.conv.weight for layer in layers if isinstance(layer, ProjectedSkip))
        weights, biases = [], []
        for layer, width in zip(layers, widths):
            if isinstance(layer, ProjectedSkip):
                folded, bias = _fold(layer.conv, layer.bn)
                weights.append(folded.weight.detach())
                biases.append(bias)
            else:  # an Identity where the bucket needs a projection: an exact 1x1 identity convolution
                weights.append(torch.eye(width, dtype=like.dtype, device=like.device).view(width, width, 1, 1))
                biases.append(like.new_zeros(width))
        return _Edge(src, False, _conv(weights, None, c_out, c_in), False), _padded_bias(biases, c_out)
    if all(isinstance(layer, ReLUConvBN) for layer in layers):
        folded = [_fold(layer.op[1], layer.op[2]) for layer in layers]
        kernel, stride = layers[0].op[1].kernel_size[0], layers[0].op[1].stride[0]
        conv = _conv([f.weight.detach() for f, _ in folded], None, c_out, c_in, stride, kernel // 2)
        return _Edge(src, True, conv, False), _padded_bias([b for _, b in folded], c_out)
    if all(isinstance(layer, AvgPool) and layer.preprocess is None for layer in layers):
        return _Edge(src, False, None, True), None
    if all(isinstance(layer, AvgPool) and layer.preprocess is not None for layer in layers):
        folded = [_fold(layer.preprocess.op[1], layer.preprocess.op[2]) for layer in layers]
        conv = _conv([f.weight.detach() for f, _ in folded], None, c_out, c_in)
        return _Edge(src, True, conv, True), _padded_bias([b for _, b in folded], c_out)
    raise ValueError(f"cannot stack edge modules {sorted({type(layer).__name__ for layer in layers})}")


class _StackedCell(_PrunedCell):
    """M normal cells of one genotype, pruned as the inference form."""

    def __init__(self, cells: Sequence[NormalCell], c_in: int, c_out: int):
        genotype = cells[0].cell
        if any(cell.cell != genotype for cell in cells):
            raise ValueError("cannot stack cells of different genotypes")
        layers_of = [list(cell.layers) for cell in cells]
        widths = [cell.c_out for cell in cells]
        rows, k = [], 0
        for node in genotype:
            row = []
            for _, src in node:
                edge, bias = _stacked_edge([layers[k] for layers in layers_of], widths, src,
                                           c_in if src == 0 else c_out, c_out)
                row.append((src, edge, bias))
                k += 1
            rows.append(row)
        super().__init__(rows, len(cells) * c_out)


class _StackedReduction(nn.Module):
    def __init__(self, blocks: Sequence[ResidualReduction], c_in: int, c_out: int):
        super().__init__()
        a = [_fold(b.conv_a.op[1], b.conv_a.op[2]) for b in blocks]
        b_ = [_fold(b.conv_b.op[1], b.conv_b.op[2]) for b in blocks]
        self.conv_a = _conv([f.weight.detach() for f, _ in a], [s for _, s in a], c_out, c_in, 2, 1)
        self.conv_b = _conv([f.weight.detach() for f, _ in b_], [s for _, s in b_], c_out, c_out, 1, 1)
        # 2x2 average pool then 1x1 conv == 2x2 stride-2 conv with the 1x1 weight / 4 (as the inference form).
        shortcut = [(b.downsample[1].weight.detach() / 4).expand(-1, -1, 2, 2) for b in blocks]
        self.shortcut = _conv(shortcut, None, c_out, c_in, 2, 0)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv_b(self.conv_a(F.relu(x)).relu_())
        return out.add_(self.shortcut(x))


class StackedNetwork(nn.Module):
    """M loaded :class:`~calibench.sources.nats.networks.TinyNetwork` of one genotype and class
    count, padded to the per-position maximum width and run as one; ``forward(x)`` gives the
    logits of each, ``(M, B, K)``. Built on the networks' device and dtype; eval only.
    ``channels_last``: the layout of the weights and activations (False: contiguous NCHW, for
    measuring which layout a GPU's grouped convolutions prefer)."""

    def __init__(self, nets: Sequence[TinyNetwork], channels_last: bool = True):
        super().__init__()
        if not nets:
            raise ValueError("no networks to stack")
        nets = list(nets)
        first = nets[0]
        if any(not isinstance(n, TinyNetwork) for n in nets):
            raise TypeError("expected networks from build_network")
        kinds = [type(c) for c in first.cells]
        if any([type(c) for c in n.cells] != kinds for n in nets):
            raise ValueError("cannot stack networks of different depths or cell layouts")
        classes = {n.classifier.out_features for n in nets}
        if len(classes) != 1:
            raise ValueError(f"cannot stack networks of different class counts {sorted(classes)}")
        m, self.num_networks, self.num_classes = len(nets), len(nets), classes.pop()
        stem = [_fold(n.stem[0], n.stem[1]) for n in nets]
        c_prev = max(n.stem[0].out_channels for n in nets)
        self.stem = _conv([f.weight.detach() for f, _ in stem], [s for _, s in stem], c_prev, 3, 1, 1,
                          shared_input=True)
        cells, widths, scale = [], [c_prev], 1
        self.channels = [c_prev]
        for i, kind in enumerate(kinds):
            column = [n.cells[i] for n in nets]
            c_out = max(c.c_out for c in column)
            if kind is ResidualReduction:
                cells.append(_StackedReduction(column, c_prev, c_out))
                scale *= 4
            else:
                cells.append(_StackedCell(column, c_prev, c_out))
            widths.append(c_out / scale)
            self.channels.append(c_out)
            c_prev = c_out
        self.cells = nn.ModuleList(cells)
        head = [_bn_affine(n.lastact[0]) for n in nets]
        dtype = first.classifier.weight.dtype
        self.register_buffer("head_scale", _padded_bias([s.to(dtype) for s, _ in head], c_prev).view(1, -1, 1, 1))
        self.register_buffer("head_shift", _padded_bias([t.to(dtype) for _, t in head], c_prev).view(1, -1, 1, 1))
        weights = [n.classifier.weight.detach().view(self.num_classes, -1, 1, 1) for n in nets]
        self.classifier = _conv(weights, [n.classifier.bias.detach() for n in nets], self.num_classes, c_prev)
        self.width_per_pixel = m * max(widths)  # widest stacked activation per input pixel
        self.memory_format = _CL if channels_last else torch.contiguous_format
        _eval_only_(self, self.memory_format)

    def activation_bytes(self, height: int, width: int, element_size: int = 4) -> float:
        """Bytes of the widest stacked activation of one image."""
        return self.width_per_pixel * height * width * element_size

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu":
            return self._forward(x)
        chunk = max(1, int(_CPU_CHUNK_BYTES // self.activation_bytes(*x.shape[2:], x.element_size())))
        if x.shape[0] <= chunk:
            return self._forward(x)
        return torch.cat([self._forward(part) for part in x.split(chunk)], dim=1)

    def _forward(self, x: Tensor) -> Tensor:
        x = self.stem(x.contiguous(memory_format=self.memory_format))
        for cell in self.cells:
            x = cell(x)
        x = torch.addcmul(self.head_shift, x, self.head_scale).relu_()
        logits = self.classifier(x.mean((2, 3), keepdim=True))  # (B, M * K, 1, 1)
        return logits.view(x.shape[0], self.num_networks, self.num_classes).transpose(0, 1)


def stacked_batch(net: StackedNetwork, images: Tensor, batch_size: int) -> int:
    """Images per forward pass: ``batch_size`` on the CPU (where the network splits further to
    stay in cache); on CUDA at most what keeps the widest stacked activation within 1 GiB."""
    if images.device.type == "cpu":
        return max(1, batch_size)
    per_image = net.activation_bytes(*images.shape[2:], images.element_size())
    return max(1, min(batch_size, int(_CUDA_CHUNK_BYTES // per_image)))


@torch.inference_mode()
def _run(net: StackedNetwork, images: Tensor, batch: int) -> Tensor:
    pad = images.device.type == "cuda"  # fixed shapes (cudnn.benchmark-friendly); the CPU runs the rest as is
    outs = []
    for part in images.split(batch):
        n = part.shape[0]
        if pad and n < batch:
            part = torch.cat([part, part.new_zeros(batch - n, *part.shape[1:])])
        outs.append(net(part)[:, :n].float())
    return torch.cat(outs, dim=1)


def launch_stacked(net: StackedNetwork, images: Tensor, ood: dict[str, Tensor] | None = None,
                   batch_size: int = 1000) -> Launched:
    """The passes of ``net``'s networks over ``images`` and each OoD set, enqueued with the
    copies of their float32 logits ``(M, N, K)`` to the host (:func:`~calibench.inference.engine.enqueue_to_host`):
    on a GPU the host can prepare the next bucket meanwhile."""
    batch = stacked_batch(net, images, batch_size)
    return enqueue_to_host(_run(net, images, batch), {name: _run(net, x, batch) for name, x in (ood or {}).items()})


def stacked_logits(net: StackedNetwork, images: Tensor, ood: dict[str, Tensor] | None = None,
                   batch_size: int = 1000) -> tuple[Tensor, dict[str, Tensor]]:
    """The float32 logits ``(M, N, K)`` of ``net``'s networks on ``images`` and on each OoD set,
    on the CPU, unchecked (the caller checks each network's)."""
    return launch_stacked(net, images, ood, batch_size).host()
