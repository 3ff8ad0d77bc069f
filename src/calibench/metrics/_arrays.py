"""Input conversion and checks shared by the numeric core.

Every public entry point accepts numpy arrays or torch tensors, converts them to
float64 torch tensors (docs/metrics.md, preamble: probabilities in float64) on the
input's device, and raises ``ValueError`` naming the offending argument and index.
"""

from __future__ import annotations

import numpy as np
import torch

# Rows of a probability matrix must sum to 1 within this (float32 softmax of
# 1,000 classes is off by about 1e-6).
PROBABILITY_SUM_TOLERANCE = 1e-4


def to_tensor(x, name: str) -> torch.Tensor:
    """Convert a numpy array, tensor or nested sequence to a tensor (no copy if possible)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        array = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name}: cannot be read as an array ({exc})") from exc
    if array.dtype == object:
        raise ValueError(f"{name}: cannot be read as a numeric array (ragged or non-numeric)")
    return torch.from_numpy(np.ascontiguousarray(array))


def _first_bad_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(mask)[0])


def _describe(index: tuple[int, ...], batched: bool) -> str:
    parts = ("network", "sample", "class") if batched else ("sample", "class")
    return ", ".join(f"{p} {i}" for p, i in zip(parts, index))


def check_scores(x, name: str, batched: bool) -> torch.Tensor:
    """A float64 tensor of shape (N, K), or (M, N, K) when ``batched``; finite, N >= 1, K >= 2."""
    t = to_tensor(x, name)
    want = 3 if batched else 2
    if t.ndim != want:
        shape = "(M, N, K)" if batched else "(N, K)"
        raise ValueError(f"{name}: expected a {want}-D array of shape {shape}, got shape {tuple(t.shape)}")
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name}: expected real numbers, got dtype {t.dtype}")
    n, k = t.shape[-2], t.shape[-1]
    if n == 0:
        raise ValueError(f"{name}: no samples (N = 0)")
    if k < 2:
        raise ValueError(f"{name}: need at least 2 classes, got K = {k}")
    if batched and t.shape[0] == 0:
        raise ValueError(f"{name}: no networks (M = 0)")
    t = t.to(torch.float64)
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        index = _first_bad_index(~finite)
        value = float(t[index])
        raise ValueError(f"{name}: non-finite value {value} at {_describe(index, batched)}")
    return t


def check_labels(labels, n: int, k: int, device: torch.device, name: str = "labels") -> torch.Tensor:
    """Integer labels of shape (N,) in [0, K), as int64 on ``device``."""
    y = to_tensor(labels, name)
    if y.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of shape (N,), got shape {tuple(y.shape)}")
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.is_complex():
        raise ValueError(f"{name}: expected integer class indices, got dtype {y.dtype}")
    if y.shape[0] != n:
        raise ValueError(f"{name}: has {y.shape[0]} entries but the scores have N = {n} rows (shape mismatch)")
    y = y.to(device=device, dtype=torch.int64)
    bad = (y < 0) | (y >= k)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise ValueError(f"{name}[{i}] = {int(y[i])} is outside [0, {k}) (K = {k} classes)")
    return y


def check_logits(logits, labels, batched: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated float64 logits and int64 labels."""
    z = check_scores(logits, "logits", batched)
    y = check_labels(labels, z.shape[-2], z.shape[-1], z.device)
    return z, y


def check_probabilities(probs, labels, batched: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated float64 probabilities (entries in [0, 1], rows summing to 1) and labels."""
    p = check_scores(probs, "probabilities", batched)
    y = check_labels(labels, p.shape[-2], p.shape[-1], p.device)
    outside = (p < 0) | (p > 1)
    if bool(outside.any()):
        index = _first_bad_index(outside)
        raise ValueError(
            f"probabilities: value {float(p[index])} at {_describe(index, batched)} is outside [0, 1]"
        )
    sums = p.sum(dim=-1)
    off = (sums - 1).abs() > PROBABILITY_SUM_TOLERANCE
    if bool(off.any()):
        index = _first_bad_index(off)
        raise ValueError(
            f"probabilities: row at {_describe(index, batched)} sums to {float(sums[index]):.6g}, "
            "not 1 (not a distribution; pass softmax outputs, or logits to measure())"
        )
    return p, y


def check_scores_1d(x, name: str) -> torch.Tensor:
    """A finite, non-empty float64 vector."""
    t = to_tensor(x, name)
    if t.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name}: empty (no samples)")
    t = t.to(torch.float64)
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        i = int(torch.nonzero(~finite)[0, 0])
        raise ValueError(f"{name}[{i}] = {float(t[i])} is not finite")
    return t


def check_bins(bins) -> tuple[int, ...]:
    """Bin counts as a tuple of distinct positive ints, in the given order."""
    if isinstance(bins, (int, np.integer)):
        bins = (bins,)
    out = []
    for b in bins:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"bins: every bin count must be a positive integer, got {b!r}")
        out.append(int(b))
    if not out:
        raise ValueError("bins: at least one bin count is needed")
    if len(set(out)) != len(out):
        raise ValueError(f"bins: duplicate bin counts in {out}")
    return tuple(out)
