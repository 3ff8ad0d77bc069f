"""NATS-Bench architecture strings as the result tables and the tao2024 files carry them
(docs/nats-bench.md, "Networks", "TSS unique architectures"): parsed and checked, the six
edge operations of a TSS cell, and TSS cells keyed by isomorphism class. The one place
downstream of the logits store that knows them: the tao2024 import and the NATS-Bench
analyses (:mod:`calibench.analysis.nats`) read them here.

TSS: ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``, node j (1..3) summing one edge ``op~i`` from
each earlier node i, in order. SSS: five channel counts ``c1:c2:c3:c4:c5``.

:mod:`calibench.sources.nats` reads the same strings from the archives, upstream of the
logits store; nothing downstream of the store imports a source (docs/architecture.md), so the
few facts the results and the analysis need are stated here, on the results side.
tests/test_interop.py checks that they agree with the source's on every TSS cell.
"""

from __future__ import annotations

TSS_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
SSS_CHANNEL_CHOICES = (8, 16, 24, 32, 40, 48, 56, 64)
EDGE_NAMES = ("1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2")


# One TSS cell: per node 1..3 the (operation, source node) of each incoming edge.
Cell = tuple[tuple[tuple[str, int], ...], ...]


def _edge(token: str, arch_str: str) -> tuple[str, int]:
    op, tilde, source = token.partition("~")
    if tilde != "~" or op not in TSS_OPS or not source.isdecimal():
        raise ValueError(f"TSS architecture {arch_str!r}: bad edge {token!r} (expected op~input, op one of {TSS_OPS})")
    return op, int(source)


def parse_tss(arch_str: str) -> Cell:
    """The edges of a TSS cell string; ``ValueError`` naming the string if it is malformed."""
    nodes = arch_str.split("+")
    if len(nodes) != 3:
        raise ValueError(f"TSS architecture {arch_str!r}: {len(nodes)} nodes separated by '+', expected 3")
    cell = []
    for j, node in enumerate(nodes, start=1):
        if len(node) < 2 or node[0] != "|" or node[-1] != "|":
            raise ValueError(f"TSS architecture {arch_str!r}: node {j} is not written between '|'")
        edges = tuple(_edge(token, arch_str) for token in node[1:-1].split("|"))
        if tuple(source for _, source in edges) != tuple(range(j)):
            raise ValueError(f"TSS architecture {arch_str!r}: node {j} must take its inputs 0..{j - 1} in order")
        cell.append(edges)
    return tuple(cell)


def format_tss(cell: Cell) -> str:
    """The canonical string of a parsed cell (:func:`parse_tss`'s inverse)."""
    return "+".join("|" + "".join(f"{op}~{source}|" for op, source in node) for node in cell)


def tss_edge_ops(arch_str: str) -> tuple[str, ...]:
    """The six edge operations of a TSS cell, in string order (:data:`EDGE_NAMES`)."""
    return tuple(op for node in parse_tss(arch_str) for op, _ in node)


def parse_sss(arch_str: str) -> tuple[int, ...]:
    """The five channel counts of an SSS string; ``ValueError`` naming it if malformed."""
    parts = arch_str.split(":")
    if len(parts) != 5 or not all(p.isdecimal() for p in parts):
        raise ValueError(f"SSS architecture {arch_str!r}: expected 5 channel counts separated by ':'")
    channels = tuple(int(p) for p in parts)
    if any(c not in SSS_CHANNEL_CHOICES for c in channels):
        raise ValueError(f"SSS architecture {arch_str!r}: a channel count not in {SSS_CHANNEL_CHOICES}")
    return channels


def check(space: str, arch_str: str) -> None:
    """``ValueError`` naming the string if it is not an architecture of ``space`` (tss, sss)."""
    if space == "tss":
        parse_tss(arch_str)
    else:
        parse_sss(arch_str)


def tss_class_key(arch_str: str) -> str:
    """A key shared by exactly the cells of one isomorphism class (NATS-Bench's
    ``to_unique_str(consider_zero=True)``, 6,466 classes of 15,625 cells).

    Each node is named by what it computes from the input node ``0``: an edge through
    ``none``, or from a node that is zero (``#``), gives ``#``; ``skip_connect`` passes its
    source's name on; any other op gives ``(source)@op``. A node is the sorted sum of its
    edges' names (several zero edges stay ``#+#``, as in the reference, whose class count
    depends on it); the cell is its output node, node 3.
    """
    names = ["0"]
    for edges in parse_tss(arch_str):
        terms = sorted("#" if op == "none" or names[source] == "#"
                       else names[source] if op == "skip_connect"
                       else f"({names[source]})@{op}"
                       for op, source in edges)
        names.append("+".join(terms))
    return names[3]
