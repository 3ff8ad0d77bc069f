"""Binned calibration errors on sorted rows with prefix sums (docs/metrics.md).

A *row* is one 1-D problem: scores ``v`` (top-label confidences, or one class's
probabilities) and targets ``t`` (hits, or the indicator ``y = k``). Each row is
sorted once; every bin of every bin count is then a contiguous range of the sorted
row, so its sums are two lookups in the prefix sums. All bin counts are handled in
one pass: their ranges are concatenated and reduced per bin count with
``index_add_`` / ``scatter_reduce_``. Nothing loops over samples or bins in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class SortedRows:
    """Rows sorted ascending by score, with inclusive prefix sums of scores and targets."""

    values: torch.Tensor  # (R, N) sorted scores
    targets: torch.Tensor | None  # (R, N) targets in the same order, where kept
    cum_values: torch.Tensor  # (R, N): cumsum of sorted scores
    cum_targets: torch.Tensor  # (R, N): cumsum of targets, same order

    @property
    def n(self) -> int:
        return self.values.shape[-1]


def prefix_at(cum: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Sum of the first ``index`` sorted entries, read from an inclusive cumsum (0 at index 0)."""
    values = torch.gather(cum, -1, (index - 1).clamp(min=0)).to(torch.float64)
    return torch.where(index > 0, values, torch.zeros_like(values))


def sort_rows(values: torch.Tensor, targets: torch.Tensor, stable: bool = False) -> SortedRows:
    """Sort (R, N) rows by value; ``stable`` keeps sample order inside ties (ACE/TACE)."""
    sorted_values, order = torch.sort(values, dim=-1, stable=stable)
    sorted_targets = torch.gather(targets, -1, order)
    return SortedRows(
        sorted_values, sorted_targets, torch.cumsum(sorted_values, -1), torch.cumsum(sorted_targets, -1)
    )


_FLOAT64_INF_BITS = 0x7FF0000000000000


def _ordered_bits(values: torch.Tensor, highest: int) -> torch.Tensor | None:
    """The bit patterns of float64 ``values`` read as int64, where they all lie in [0, ``highest``]
    (then they sort as the values do); None otherwise (a negative value, a -0.0 or a NaN: sign bit
    set or bits above inf's)."""
    if values.dtype != torch.float64 or not values.is_contiguous() or not values.numel():
        return None
    bits = values.view(torch.int64)
    return bits if int(bits.amin()) >= 0 and int(bits.amax()) <= highest else None


def _sort_bits(bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    sorted_bits, order = torch.sort(bits, dim=-1, stable=True)
    return sorted_bits.view(torch.float64), order


def stable_sort(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.sort(values, dim=-1, stable=True)``, faster for float64 rows of values in [0, inf]:
    their bit patterns read as int64 sort in the same order (about 1.4x faster on the CPU)."""
    bits = _ordered_bits(values, _FLOAT64_INF_BITS)
    return torch.sort(values, dim=-1, stable=True) if bits is None else _sort_bits(bits)


def sort_class_rows(values: torch.Tensor, labels: torch.Tensor, classes: torch.Tensor) -> SortedRows:
    """Stably sort one row per class, ``values`` (R, N) against ``1[labels = classes[r]]``; the
    indicator's cumsum stays integer.

    On the CPU, probabilities in [0, 1] (float64) are sorted as packed keys (:func:`_sort_keys`):
    the value's bit pattern shifted left, the indicator in the freed bit, and a zero replaced by
    its sample index below every other value, so that zeros keep sample order as a stable sort
    keeps them. Keys without repeats have one order, so no permutation is needed and numpy's
    vectorised sort runs on a thread per core (:func:`_sort_packed`, about 2x the stable sort).
    Rows that repeat a value other than zero (a step map's, e.g. ``hist``; a few rows are
    sampled first) take the stable sort.
    """
    bits = _ordered_bits(values, _FLOAT64_ONE_BITS) if values.device.type == "cpu" else None
    if bits is not None and not _sample_repeats(bits.numpy()):
        hits = labels[None, :] == classes[:, None]
        sorted_values, sorted_hits, tied = _sort_packed(bits.numpy(), hits.numpy())
        if tied.size:  # ties keep sample order (ACE, TACE): those rows by the stable sort
            rows = torch.from_numpy(tied)
            stable_values, order = _sort_bits(bits[rows])
            sorted_values[rows] = stable_values
            sorted_hits[rows] = (labels[order] == classes[rows, None]).long()
        return SortedRows(sorted_values, None, torch.cumsum(sorted_values, -1), torch.cumsum(sorted_hits, -1))
    sorted_values, order = stable_sort(values) if bits is None else _sort_bits(bits)  # the range is known
    hits = labels[order] == classes[:, None]
    return SortedRows(sorted_values, None, torch.cumsum(sorted_values, -1), torch.cumsum(hits, -1))


_FLOAT64_ONE_BITS = 0x3FF0000000000000  # below 2**62: one bit left over when shifted


def _sort_keys(bits: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Rows of value bits (float64 in [0, 1] read as int64) as order-keeping keys without ties
    at zero: a zero becomes its sample index, any other value its bits + N (below 2**62); and
    whether there was a zero."""
    n = bits.shape[-1]
    keys = np.add(bits, n, out=out)
    has_zero = bool(bits.size) and int(bits.min()) == 0
    if has_zero:
        np.copyto(keys, np.broadcast_to(np.arange(n, dtype=np.int64), keys.shape), where=bits == 0)
    return keys, has_zero


def _sample_repeats(bits: np.ndarray, rows: int = 4) -> bool:
    """Whether any of a few rows spread over ``bits`` (R, N) repeats a value other than zero."""
    sample = np.sort(_sort_keys(bits[np.unique(np.linspace(0, bits.shape[0] - 1, rows).astype(int))])[0], axis=-1)
    return bool((sample[:, 1:] == sample[:, :-1]).any())


def _sort_packed(bits: np.ndarray, hits: np.ndarray):
    """Sorted values (R, N) float64 and indicators (R, N) int64 of :func:`sort_class_rows` from
    the packed keys, and the rows that repeat a value (left for the stable sort); rows split
    among ``torch.get_num_threads()`` threads (numpy's sort releases the GIL)."""
    rows, n = bits.shape
    sorted_keys = np.empty((rows, n), np.int64)  # the sorted values' bits in the end, in place
    sorted_hits = np.empty((rows, n), np.int64)
    tied = np.zeros(rows, bool)

    def sort_part(part: slice) -> None:
        keys, has_zero = _sort_keys(bits[part], out=sorted_keys[part])
        keys <<= 1
        keys |= hits[part]
        keys.sort(axis=-1)
        np.bitwise_and(keys, 1, out=sorted_hits[part])
        keys >>= 1
        tied[part] = (keys[:, 1:] == keys[:, :-1]).any(axis=1)
        keys -= n
        if has_zero:
            np.maximum(keys, 0, out=keys)  # the zeros' keys (their indices) back to 0.0's bits

    step = -(-rows // max(1, min(torch.get_num_threads(), rows)))
    parts = [slice(i, min(i + step, rows)) for i in range(0, rows, step)]
    if len(parts) == 1:
        sort_part(parts[0])
    else:
        list(_sort_pool(len(parts)).map(sort_part, parts))
    return torch.from_numpy(sorted_keys.view(np.float64)), torch.from_numpy(sorted_hits), np.flatnonzero(tied)


_POOLS: dict = {}


def _sort_pool(workers: int):
    from concurrent.futures import ThreadPoolExecutor

    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="calibench-sort")
    return _POOLS[workers]


@dataclass(frozen=True)
class Segments:
    """Bins of several bin counts, as boundary indices into the sorted rows.

    Bin count g contributes ``B_g + 1`` boundaries ``0 = b_0 <= ... <= b_B = N``;
    bin j is the index range ``[b_j, b_{j+1})``. ``pairs`` selects, among the
    differences of neighbouring boundaries, those inside one bin count.
    """

    boundaries: torch.Tensor  # (R, sum(B_g + 1)) int64
    pairs: torch.Tensor  # (sum(B_g),) int64: column j means the bin [boundaries[j], boundaries[j+1])
    group: torch.Tensor  # (sum(B_g),) int64: which bin count each bin belongs to
    n_groups: int


def _segments_from_boundaries(boundaries: list[torch.Tensor]) -> Segments:
    """Each (R, B + 1) boundary tensor (0 ... N) gives B consecutive bins."""
    device = boundaries[0].device
    sizes = [b.shape[-1] - 1 for b in boundaries]
    offsets = np.concatenate([[0], np.cumsum([s + 1 for s in sizes])[:-1]])
    pairs = np.concatenate([o + np.arange(s) for o, s in zip(offsets, sizes)])
    group = np.repeat(np.arange(len(sizes)), sizes)
    return Segments(
        torch.cat(boundaries, dim=-1),
        torch.from_numpy(pairs).to(device),
        torch.from_numpy(group).to(device),
        len(sizes),
    )


def _with_ends(inner: torch.Tensor, n: int) -> torch.Tensor:
    rows = inner.shape[0]
    zero = torch.zeros((rows, 1), dtype=torch.int64, device=inner.device)
    full = torch.full((rows, 1), n, dtype=torch.int64, device=inner.device)
    return torch.cat([zero, inner, full], dim=-1)


def equal_width_segments(rows: SortedRows, bins: tuple[int, ...]) -> Segments:
    """Equal-width bins, edges ``linspace(0, 1, B + 1)``, right-closed ``(lo, hi]``, first bin ``[0, hi]``."""
    interior = [np.linspace(0.0, 1.0, b + 1)[1:-1] for b in bins]
    edges = torch.from_numpy(np.concatenate(interior)).to(rows.values.device)
    r = rows.values.shape[0]
    # right=True counts values <= edge: a value on an edge belongs to the lower bin.
    idx = torch.searchsorted(rows.values, edges.expand(r, -1).contiguous(), right=True)
    pieces = torch.split(idx, [b - 1 for b in bins], dim=-1)
    return _segments_from_boundaries([_with_ends(p, rows.n) for p in pieces])


def equal_mass_segments(rows: SortedRows, bins: tuple[int, ...]) -> Segments:
    """Kumar et al. 2019 equal-mass bins (docs/metrics.md, "Equal-mass bins").

    ``array_split`` of the sorted values into ``min(B, N)`` chunks; edges at the
    midpoints between neighbouring chunks; right-closed, so ties never straddle.
    Merged (duplicate) edges become empty ranges, which contribute nothing.
    """
    n = rows.n
    cut_positions = []
    counts = []
    for b in bins:
        parts = min(b, n)
        q, rem = divmod(n, parts)
        i = np.arange(1, parts)
        cut_positions.append(i * q + np.minimum(i, rem))
        counts.append(parts - 1)
    cuts = torch.from_numpy(np.concatenate(cut_positions).astype(np.int64)).to(rows.values.device)
    r = rows.values.shape[0]
    cuts = cuts.expand(r, -1)
    last_of_chunk = torch.gather(rows.values, -1, cuts - 1)
    first_of_next = torch.gather(rows.values, -1, cuts)
    edges = (last_of_chunk + first_of_next) / 2.0
    idx = torch.searchsorted(rows.values, edges.contiguous(), right=True)
    pieces = torch.split(idx, counts, dim=-1)
    return _segments_from_boundaries([_with_ends(p, n) for p in pieces])


def adaptive_segments(rows: SortedRows, bins: tuple[int, ...], threshold: float) -> tuple[Segments, torch.Tensor]:
    """Nixon et al. 2019 rank ranges over the values ``> threshold`` (docs/metrics.md, ACE/TACE).

    Returns the ranges and the number of kept values per row. The rows must come
    from a stable sort so that tied values keep sample order.
    """
    n = rows.n
    device = rows.values.device
    r = rows.values.shape[0]
    limit = torch.full((r, 1), threshold, dtype=rows.values.dtype, device=device)
    first_kept = torch.searchsorted(rows.values, limit, right=True)  # (R, 1)
    kept = n - first_kept
    all_boundaries = []
    for b in bins:
        ranges = torch.clamp(kept, max=b)
        size = kept // torch.clamp(ranges, min=1)
        rank = torch.arange(b, device=device).expand(r, -1)
        start = torch.where(rank < ranges, first_kept + rank * size, torch.full_like(rank, n))
        all_boundaries.append(torch.cat([start, torch.full((r, 1), n, dtype=torch.int64, device=device)], dim=-1))
    return _segments_from_boundaries(all_boundaries), kept.squeeze(-1)


@dataclass(frozen=True)
class SegmentSums:
    count: torch.Tensor  # (R, S)
    gap: torch.Tensor  # (R, S): |sum of targets - sum of values| in the range
    segments: Segments
    over: torch.Tensor | None = None  # (R, S): sum of values - sum of targets (kept where asked: ``signed``)


def segment_sums(rows: SortedRows, segments: Segments, signed: bool = False) -> SegmentSums:
    """Per row and segment: the count, the absolute gap and, with ``signed``, the signed one
    (values over targets: a top-label bin's overconfidence times its count)."""
    bounds = segments.boundaries
    count = torch.diff(bounds, dim=-1)[..., segments.pairs]
    sum_values = torch.diff(prefix_at(rows.cum_values, bounds), dim=-1)[..., segments.pairs]
    sum_targets = torch.diff(prefix_at(rows.cum_targets, bounds), dim=-1)[..., segments.pairs]
    over = sum_values - sum_targets if signed else None
    return SegmentSums(count, (sum_targets - sum_values).abs(), segments, over)


def segment_sums_many(rows: SortedRows, many: list[Segments], signed: bool = False) -> list[SegmentSums]:
    """:func:`segment_sums` of several segment sets of the same rows in one pass (one gather per
    prefix sum instead of one per set); each result equals its own call's, element for element."""
    sizes = [s.boundaries.shape[-1] for s in many]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    joined = Segments(torch.cat([s.boundaries for s in many], dim=-1),
                      torch.cat([s.pairs + int(o) for s, o in zip(many, offsets)]), many[0].group, 0)
    sums = segment_sums(rows, joined, signed)
    widths = [s.pairs.shape[0] for s in many]
    overs = torch.split(sums.over, widths, dim=-1) if signed else [None] * len(many)
    return [SegmentSums(count, gap, s, over) for s, count, gap, over in
            zip(many, torch.split(sums.count, widths, dim=-1), torch.split(sums.gap, widths, dim=-1), overs)]


def total_gap(sums: SegmentSums) -> torch.Tensor:
    """Per row and bin count, ``sum_b |sum(t)_b - sum(v)_b|``: (R, G). Divide by N for ECE."""
    out = torch.zeros((sums.gap.shape[0], sums.segments.n_groups), dtype=sums.gap.dtype, device=sums.gap.device)
    return out.index_add_(1, sums.segments.group, sums.gap)


def max_gap(sums: SegmentSums, signed: bool = False) -> torch.Tensor:
    """Per row and bin count, ``max_b |mean(t)_b - mean(v)_b|`` over non-empty bins: (R, G).
    ``signed`` (sums made with ``signed=True``): ``max(0, max_b (mean(v)_b - mean(t)_b))``, the
    largest overconfidence, 0 for a row underconfident in every bin (docs/metrics.md,
    "Equal-width bins": Tao et al.'s MCE)."""
    gap = sums.over if signed else sums.gap
    if gap is None:
        raise ValueError("a signed maximum gap needs segment sums made with signed=True")
    per_bin = torch.where(sums.count > 0, gap / sums.count.clamp(min=1), torch.zeros_like(gap))
    out = torch.zeros((per_bin.shape[0], sums.segments.n_groups), dtype=per_bin.dtype, device=per_bin.device)
    index = sums.segments.group.expand(per_bin.shape[0], -1)
    return out.scatter_reduce_(1, index, per_bin, reduce="amax", include_self=True)
