"""NATS-Bench architecture strings (docs/nats-bench.md, "Networks").

TSS: ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``: node j (1..3) sums one edge from
each earlier node i, labelled ``op~i``. SSS: five channel counts ``c1:c2:c3:c4:c5``.
"""

from __future__ import annotations

TSS_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
SSS_CHANNEL_CHOICES = (8, 16, 24, 32, 40, 48, 56, 64)
SSS_GENOTYPE = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"

# One cell: for each node j = 1..3, its incoming edges as (op, source node).
Cell = tuple[tuple[tuple[str, int], ...], ...]


def parse_tss(arch_str: str) -> Cell:
    """Parse a TSS cell string; ``ValueError`` naming the string if it is malformed."""
    nodes = []
    parts = arch_str.split("+")
    if len(parts) != 3:
        raise ValueError(f"TSS architecture {arch_str!r}: expected 3 nodes separated by '+', got {len(parts)}")
    for j, part in enumerate(parts, start=1):
        if not (part.startswith("|") and part.endswith("|")):
            raise ValueError(f"TSS architecture {arch_str!r}: node {j} is not enclosed in '|'")
        edges = []
        for token in part[1:-1].split("|"):
            op, sep, source = token.partition("~")
            if not sep or op not in TSS_OPS or not source.isdigit():
                raise ValueError(f"TSS architecture {arch_str!r}: bad edge {token!r} (expected op~input, op in {TSS_OPS})")
            edges.append((op, int(source)))
        if [s for _, s in edges] != list(range(j)):
            raise ValueError(f"TSS architecture {arch_str!r}: node {j} must take inputs 0..{j - 1} in order")
        nodes.append(tuple(edges))
    return tuple(nodes)


def format_tss(cell: Cell) -> str:
    return "+".join("|" + "|".join(f"{op}~{src}" for op, src in node) + "|" for node in cell)


def tss_edge_ops(arch_str: str) -> tuple[str, ...]:
    """The 6 edge operations in string order: (1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2)."""
    return tuple(op for node in parse_tss(arch_str) for op, _ in node)


def parse_sss(arch_str: str) -> tuple[int, ...]:
    """Parse an SSS channel string ``c1:c2:c3:c4:c5``."""
    try:
        channels = tuple(int(c) for c in arch_str.split(":"))
    except ValueError:
        raise ValueError(f"SSS architecture {arch_str!r}: expected 5 integers separated by ':'") from None
    if len(channels) != 5 or any(c not in SSS_CHANNEL_CHOICES for c in channels):
        raise ValueError(f"SSS architecture {arch_str!r}: expected 5 channel counts from {SSS_CHANNEL_CHOICES}")
    return channels
