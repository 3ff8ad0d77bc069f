"""What every post-hoc method returns (docs/recalibration.md, "Common rules").

A method is a pure function ``fit_<method>(logits_val, labels_val, **hyper) -> Fitted``
over M networks at once: ``logits_val`` float64 (M, N_val, K) on any device, shared
``labels_val`` int64 (N_val,). The fitted map turns logits (M, N, K) into recalibrated
logits (M, N, K): log-probabilities up to a constant per row, so that their softmax is
the method's probability vector; ``-inf`` where a method gives probability 0 (isotonic,
histogram binning). The metric suite takes them as it takes logits, so every stage is
measured by the same code, and NLL is ``-log p`` of the method's own probabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

# Fits on too little data (docs/recalibration.md, "Common rules"): vs, ms and dir with fewer
# than this many validation samples per class on average; iso and hist with fewer than this
# many validation positives in some class.
MIN_SAMPLES_PER_CLASS = 10
MIN_POSITIVES = 10
PER_CLASS_AVERAGE_STAGES = ("vs", "ms", "dir")
POSITIVES_STAGES = ("iso", "hist")


@dataclass
class Fitted:
    """A recalibration map fitted to M networks.

    ``info``: per-network numbers a reader may want in the shard's provenance, each an
    (M,) float64 array (always ``converged`` as 1.0/0.0 and ``iterations``; then e.g.
    ``temperature``, ``w_norm``, ``lambda``). ``failures``: per network ``None`` or why
    its fit is unusable (the stage is then NaN for that network, docs/recalibration.md
    "Common rules"). ``params``: the fitted parameters, first dimension M.
    """

    method: str
    transform: Callable[[torch.Tensor], torch.Tensor]
    info: dict[str, np.ndarray]
    failures: list[str | None]
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def _apply(self, logits, then: Callable[[torch.Tensor], torch.Tensor] | None = None):
        """The map on a tensor or array: a numpy array (or list) gives a numpy array back."""
        array = not isinstance(logits, torch.Tensor)
        z = torch.as_tensor(np.asarray(logits) if array else logits).to(torch.float64)
        out = self.transform(z)
        out = then(out) if then is not None else out
        return out.cpu().numpy() if array else out

    def logits(self, logits: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """(M, N, K) logits -> (M, N, K) float64 recalibrated logits (log-probabilities up to
        a constant per row; ``-inf`` for probability 0); numpy in, numpy out."""
        return self._apply(logits)

    def log_probs(self, logits: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """(M, N, K) logits -> (M, N, K) float64 log-probabilities of the recalibrated map."""
        return self._apply(logits, lambda z: torch.log_softmax(z, dim=-1))

    def probs(self, logits: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """(M, N, K) logits -> (M, N, K) float64 probabilities, rows summing to 1."""
        return self._apply(logits, lambda z: torch.softmax(z, dim=-1))


def as_info(values: dict[str, torch.Tensor | np.ndarray]) -> dict[str, np.ndarray]:
    """Per-network summaries as float64 numpy arrays."""
    out = {}
    for name, v in values.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().to("cpu", torch.float64).numpy()
        out[name] = np.asarray(v, dtype=np.float64)
    return out


def non_finite_failures(params: dict[str, torch.Tensor], failures: list[str | None]) -> list[str | None]:
    """Mark networks whose parameters hold NaN or inf as failed (keeps earlier reasons)."""
    out = list(failures)
    for name, p in params.items():
        bad = ~torch.isfinite(p.reshape(p.shape[0], -1)).all(dim=1)
        for i in torch.nonzero(bad).flatten().tolist():
            out[i] = out[i] or f"fitted {name} is not finite"
    return out


def underdetermined(stage: str, labels_val, k: int) -> bool | None:
    """Whether ``stage``'s fit has fewer validation samples than it needs
    (docs/recalibration.md, "Common rules"): ``vs``, ``ms``, ``dir`` when N_val < 10 K;
    ``iso``, ``hist`` when some class has fewer than 10 positives among the labels (N_val,)
    (a class absent counts, with 0). None for a stage without the rule (pre, post, spline)."""
    y = labels_val.detach().cpu().numpy() if isinstance(labels_val, torch.Tensor) else np.asarray(labels_val)
    y = y.reshape(-1).astype(np.int64)
    if stage in PER_CLASS_AVERAGE_STAGES:
        return len(y) < MIN_SAMPLES_PER_CLASS * k
    if stage in POSITIVES_STAGES:
        return bool((np.bincount(y, minlength=k)[:k] < MIN_POSITIVES).any())
    return None
