"""NATS-Bench indices of architectures (docs/nats-bench.md, "Archives"): an architecture's
index is its position in the published ``meta_archs`` list of its space.

* SSS: computable for any channel string: the position of ``c1:c2:c3:c4:c5`` in
  ``itertools.product(SSS_CHANNEL_CHOICES, repeat=5)`` (checked against the published meta:
  the order is exactly that).
* TSS: a fixed shuffle, known only from the published meta. :data:`TSS_KNOWN` holds a small
  set of (index, cell string) facts; the mini benchmark draws its TSS cells from it, so every
  mini architecture has a known NATS-Bench index.

:func:`nats_indices` gives every member of an archive's meta its NATS-Bench index (None where
unknown); the population records it (``nats_index``) and the result tables carry it, so a
join with an external per-architecture table keyed by NATS-Bench index pairs the right cells
whatever the archive's own indexing (the mini benchmark re-indexes its cells 0..n-1).
"""

from __future__ import annotations

from collections.abc import Sequence

from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS, format_tss, parse_sss, parse_tss

TSS_SIZE = len(TSS_OPS) ** 6                  # 15,625 cells
SSS_SIZE = len(SSS_CHANNEL_CHOICES) ** 5      # 32,768 channel strings
FULL_SIZE = {"tss": TSS_SIZE, "sss": SSS_SIZE}

# (NATS-Bench TSS index, cell string): copied from the published NATS-Bench TSS meta
# (NATS-tss-v1_0-3ffb9, meta.pickle.pbz2, ``meta_archs[index]``). The first two are one
# isomorphism class (node 1 = skip of the input, so node 2 is conv3x3 of the input either
# way); the other 62 are a seeded random choice of the space, one per isomorphism class and
# none in the first two's class, in index order.
TSS_KNOWN: tuple[tuple[int, str], ...] = (
    (1037, "|skip_connect~0|+|none~0|nor_conv_3x3~1|+|none~0|none~1|nor_conv_3x3~2|"),
    (10242, "|skip_connect~0|+|nor_conv_3x3~0|none~1|+|none~0|none~1|nor_conv_3x3~2|"),
    (473, "|avg_pool_3x3~0|+|none~0|nor_conv_1x1~1|+|skip_connect~0|none~1|nor_conv_1x1~2|"),
    (591, "|nor_conv_1x1~0|+|none~0|nor_conv_1x1~1|+|nor_conv_3x3~0|nor_conv_1x1~1|none~2|"),
    (754, "|skip_connect~0|+|skip_connect~0|skip_connect~1|+|nor_conv_3x3~0|avg_pool_3x3~1|none~2|"),
    (1060, "|nor_conv_1x1~0|+|skip_connect~0|nor_conv_1x1~1|+|none~0|avg_pool_3x3~1|nor_conv_1x1~2|"),
    (1441, "|avg_pool_3x3~0|+|nor_conv_3x3~0|none~1|+|avg_pool_3x3~0|skip_connect~1|avg_pool_3x3~2|"),
    (1605, "|avg_pool_3x3~0|+|avg_pool_3x3~0|none~1|+|nor_conv_1x1~0|none~1|nor_conv_3x3~2|"),
    (1620, "|avg_pool_3x3~0|+|skip_connect~0|skip_connect~1|+|none~0|avg_pool_3x3~1|nor_conv_1x1~2|"),
    (2169, "|nor_conv_3x3~0|+|skip_connect~0|skip_connect~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"),
    (2171, "|skip_connect~0|+|none~0|skip_connect~1|+|none~0|nor_conv_1x1~1|nor_conv_1x1~2|"),
    (2305, "|skip_connect~0|+|skip_connect~0|avg_pool_3x3~1|+|nor_conv_1x1~0|nor_conv_3x3~1|avg_pool_3x3~2|"),
    (2516, "|nor_conv_3x3~0|+|avg_pool_3x3~0|none~1|+|nor_conv_3x3~0|skip_connect~1|avg_pool_3x3~2|"),
    (2626, "|nor_conv_1x1~0|+|skip_connect~0|nor_conv_3x3~1|+|nor_conv_1x1~0|nor_conv_1x1~1|none~2|"),
    (3265, "|avg_pool_3x3~0|+|nor_conv_3x3~0|nor_conv_1x1~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"),
    (3347, "|none~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_1x1~1|nor_conv_1x1~2|"),
    (4050, "|nor_conv_3x3~0|+|avg_pool_3x3~0|skip_connect~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (4346, "|none~0|+|skip_connect~0|avg_pool_3x3~1|+|avg_pool_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|"),
    (4408, "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|nor_conv_1x1~0|none~1|avg_pool_3x3~2|"),
    (4677, "|nor_conv_1x1~0|+|nor_conv_1x1~0|avg_pool_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|nor_conv_3x3~2|"),
    (4802, "|nor_conv_3x3~0|+|nor_conv_1x1~0|avg_pool_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|nor_conv_3x3~2|"),
    (4823, "|skip_connect~0|+|avg_pool_3x3~0|none~1|+|skip_connect~0|skip_connect~1|avg_pool_3x3~2|"),
    (5022, "|none~0|+|none~0|skip_connect~1|+|skip_connect~0|skip_connect~1|avg_pool_3x3~2|"),
    (5076, "|nor_conv_3x3~0|+|skip_connect~0|skip_connect~1|+|skip_connect~0|avg_pool_3x3~1|nor_conv_3x3~2|"),
    (5092, "|skip_connect~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|none~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (5672, "|avg_pool_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|none~0|avg_pool_3x3~1|avg_pool_3x3~2|"),
    (5959, "|nor_conv_3x3~0|+|skip_connect~0|none~1|+|nor_conv_3x3~0|none~1|nor_conv_1x1~2|"),
    (6120, "|nor_conv_1x1~0|+|skip_connect~0|nor_conv_3x3~1|+|none~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (6274, "|avg_pool_3x3~0|+|skip_connect~0|skip_connect~1|+|none~0|none~1|nor_conv_1x1~2|"),
    (6313, "|nor_conv_1x1~0|+|avg_pool_3x3~0|skip_connect~1|+|nor_conv_1x1~0|nor_conv_3x3~1|avg_pool_3x3~2|"),
    (6374, "|skip_connect~0|+|avg_pool_3x3~0|none~1|+|skip_connect~0|avg_pool_3x3~1|none~2|"),
    (6766, "|skip_connect~0|+|nor_conv_1x1~0|nor_conv_3x3~1|+|none~0|none~1|skip_connect~2|"),
    (7287, "|nor_conv_1x1~0|+|avg_pool_3x3~0|nor_conv_1x1~1|+|none~0|nor_conv_1x1~1|nor_conv_3x3~2|"),
    (7304, "|nor_conv_1x1~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_1x1~0|none~1|skip_connect~2|"),
    (7568, "|avg_pool_3x3~0|+|avg_pool_3x3~0|nor_conv_1x1~1|+|avg_pool_3x3~0|nor_conv_1x1~1|nor_conv_3x3~2|"),
    (7659, "|none~0|+|nor_conv_1x1~0|avg_pool_3x3~1|+|nor_conv_1x1~0|nor_conv_3x3~1|skip_connect~2|"),
    (7807, "|nor_conv_1x1~0|+|nor_conv_3x3~0|skip_connect~1|+|avg_pool_3x3~0|avg_pool_3x3~1|skip_connect~2|"),
    (7994, "|avg_pool_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|skip_connect~0|avg_pool_3x3~1|skip_connect~2|"),
    (8447, "|skip_connect~0|+|avg_pool_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|skip_connect~1|none~2|"),
    (8982, "|none~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|avg_pool_3x3~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (9098, "|nor_conv_3x3~0|+|none~0|nor_conv_1x1~1|+|nor_conv_3x3~0|skip_connect~1|nor_conv_1x1~2|"),
    (9363, "|avg_pool_3x3~0|+|skip_connect~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (9422, "|avg_pool_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|avg_pool_3x3~0|none~1|nor_conv_3x3~2|"),
    (10061, "|nor_conv_1x1~0|+|none~0|avg_pool_3x3~1|+|nor_conv_1x1~0|none~1|avg_pool_3x3~2|"),
    (10156, "|none~0|+|nor_conv_3x3~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_1x1~1|nor_conv_1x1~2|"),
    (10483, "|avg_pool_3x3~0|+|none~0|avg_pool_3x3~1|+|none~0|avg_pool_3x3~1|nor_conv_1x1~2|"),
    (10956, "|skip_connect~0|+|avg_pool_3x3~0|nor_conv_1x1~1|+|avg_pool_3x3~0|avg_pool_3x3~1|skip_connect~2|"),
    (10999, "|none~0|+|nor_conv_1x1~0|avg_pool_3x3~1|+|avg_pool_3x3~0|none~1|avg_pool_3x3~2|"),
    (11140, "|avg_pool_3x3~0|+|avg_pool_3x3~0|skip_connect~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|"),
    (11560, "|none~0|+|nor_conv_1x1~0|none~1|+|nor_conv_3x3~0|nor_conv_3x3~1|avg_pool_3x3~2|"),
    (11694, "|nor_conv_1x1~0|+|avg_pool_3x3~0|nor_conv_3x3~1|+|skip_connect~0|avg_pool_3x3~1|nor_conv_3x3~2|"),
    (11880, "|avg_pool_3x3~0|+|none~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_1x1~1|skip_connect~2|"),
    (12256, "|nor_conv_1x1~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_3x3~1|none~2|"),
    (12731, "|none~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|avg_pool_3x3~1|skip_connect~2|"),
    (12850, "|skip_connect~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|none~0|none~1|nor_conv_1x1~2|"),
    (13180, "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|nor_conv_1x1~0|avg_pool_3x3~1|nor_conv_1x1~2|"),
    (13250, "|nor_conv_1x1~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_1x1~2|"),
    (13710, "|nor_conv_1x1~0|+|none~0|avg_pool_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|nor_conv_1x1~2|"),
    (13918, "|nor_conv_3x3~0|+|nor_conv_1x1~0|none~1|+|skip_connect~0|none~1|avg_pool_3x3~2|"),
    (14152, "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_1x1~1|avg_pool_3x3~2|"),
    (14406, "|avg_pool_3x3~0|+|nor_conv_3x3~0|none~1|+|avg_pool_3x3~0|nor_conv_3x3~1|none~2|"),
    (14998, "|avg_pool_3x3~0|+|skip_connect~0|skip_connect~1|+|nor_conv_3x3~0|skip_connect~1|skip_connect~2|"),
    (15222, "|skip_connect~0|+|avg_pool_3x3~0|nor_conv_3x3~1|+|none~0|none~1|skip_connect~2|"),
    (15624, "|nor_conv_1x1~0|+|none~0|nor_conv_1x1~1|+|none~0|nor_conv_1x1~1|nor_conv_1x1~2|"),
)
_TSS_INDEX = {arch: index for index, arch in TSS_KNOWN}


def sss_index(arch_str: str) -> int:
    """The NATS-Bench SSS index of a channel string (ValueError if it is none)."""
    index = 0
    for c in parse_sss(arch_str):
        index = index * len(SSS_CHANNEL_CHOICES) + SSS_CHANNEL_CHOICES.index(c)
    return index


def tss_index(arch_str: str) -> int | None:
    """The NATS-Bench TSS index of a cell string if it is one of :data:`TSS_KNOWN`, else None
    (ValueError if it is no TSS cell)."""
    return _TSS_INDEX.get(format_tss(parse_tss(arch_str.strip())))


def nats_indices(space: str, arch_strs: Sequence[str]) -> list[int | None]:
    """The NATS-Bench index of each member of an archive's meta (in its order): SSS computed;
    TSS the position itself when the meta lists the whole space (a NATS-Bench archive),
    else :func:`tss_index` (None for a cell not in :data:`TSS_KNOWN`)."""
    if space == "sss":
        return [sss_index(a) for a in arch_strs]
    if space != "tss":
        raise ValueError(f"space: expected 'tss' or 'sss', got {space!r}")
    if len(arch_strs) == TSS_SIZE:
        return list(range(TSS_SIZE))
    return [tss_index(a) for a in arch_strs]
