"""Batched float64 primitives shared by the solvers of :mod:`calibench.recalibration.scaling`
(vector scaling's Newton) and :mod:`calibench.recalibration.lbfgs` (the ODIR L-BFGS): B
problems at once, each on its own. On the CPU the small products are summed as a batch of one
would (:func:`_gram`, :func:`_bmv`); larger ones (K * (K + 1) above 128) are one batched product,
whose last bits can depend on the batch (docs/recalibration.md, "The stages in a run").
"""

from __future__ import annotations

import torch

ARMIJO_C1 = 1e-4  # sufficient decrease of both solvers' line searches
# Convergence (docs/recalibration.md, "Common rules"): a gradient norm below the tolerance, or
# an objective that has stopped moving: relative decrease below FLAT_RTOL over the last
# FLAT_WINDOW iterations with a gradient norm below FLAT_GRADIENT.
FLAT_WINDOW = 20
FLAT_RTOL = 1e-10
FLAT_GRADIENT = 1e-3


def _label_rows(y: torch.Tensor, bsz: int) -> torch.Tensor:
    """Labels (N,) or (B, N) as (B, N, 1) for gather/scatter."""
    if y.ndim == 1:
        y = y.expand(bsz, -1)
    return y.unsqueeze(-1)


def _gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a^T b`` per network, a (B, N, P), b (B, N, Q) -> (B, P, Q). Small products on the CPU
    are summed elementwise: CPU bmm of a transposed operand takes another path for a batch of
    one than for several when P, Q are small (results differ in the last bit), and each
    network's fit must not depend on its batch. On other devices one batched product: the
    elementwise sum makes a (B, N, P, Q) temporary, Q times the size of ``a`` (11 at
    K = 10), where the GPU's iterations are bound by such passes."""
    if a.device.type == "cpu" and a.shape[-1] * b.shape[-1] <= 128:
        return (a[..., :, None] * b[..., None, :]).sum(1)
    return torch.bmm(a.transpose(1, 2), b)


def _bmv(a: torch.Tensor, v: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """``a v`` (or ``a^T v``) per network: a (B, L, P), v (B, P) (or (B, L)). On CPU one
    matrix-vector product per network, as a batch of one would do it (batched bmm takes
    another path and differs in the last bits); on other devices one batched product."""
    if a.device.type == "cpu":
        if transpose:
            return torch.stack([torch.mv(a[i].T, v[i]) for i in range(a.shape[0])])
        return torch.stack([torch.mv(a[i], v[i]) for i in range(a.shape[0])])
    if transpose:
        return torch.bmm(a.transpose(1, 2), v[:, :, None]).squeeze(-1)
    return torch.bmm(a, v[:, :, None]).squeeze(-1)


def _softmax_nll(v: torch.Tensor, yi: torch.Tensor):
    """Per-sample ``-log softmax(v)[y]`` (B, N), accurate also when it is tiny, with
    ``e = exp(v - max v)`` and its row sums ``se`` (so ``q = e / se``).

    ``logsumexp(v) - v_y`` loses all digits of an NLL below ~1e-16 * |v|, which an
    overfitting (nearly separable) fit reaches; here ``log1p`` of the other classes' mass
    when y is the arg-max (otherwise the NLL is at least log 2)."""
    vmax = v.amax(-1, keepdim=True)
    e = torch.exp(v - vmax)
    e_y = torch.gather(e, -1, yi)
    # the other classes' sum with e_y zeroed in place and put back: (B, N) writes, not a copy of e
    rest = e.scatter_(-1, yi, 0.0).sum(-1, keepdim=True)
    e.scatter_(-1, yi, e_y)
    se = e_y + rest
    d = vmax - torch.gather(v, -1, yi)
    nll = torch.where(d > 0, d + torch.log(se), torch.log1p(rest))
    return nll.squeeze(-1), e, se.squeeze(-1)


def objective_history(f: torch.Tensor, length: int = FLAT_WINDOW + 1) -> torch.Tensor:
    """The start of a per-problem history of the objective (B, length), oldest first: NaN,
    then ``f`` (B,) last. Append with :func:`push_objective`."""
    hist = torch.full((f.shape[0], length), float("nan"), dtype=f.dtype, device=f.device)
    hist[:, -1] = f
    return hist


def push_objective(hist: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``hist`` shifted by one iteration, ``f`` (B,) last."""
    return torch.cat([hist[:, 1:], f[:, None]], dim=1)


def convergence(gnorm: torch.Tensor, hist: torch.Tensor, tolerance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(converged, by objective) per problem, docs/recalibration.md "Common rules": converged
    when the gradient norm (B,) is below ``tolerance``, or when the objective has stopped
    moving: ``f[-21] - f[-1] < 1e-10 |f[-1]|`` over the last 20 iterations of ``hist`` (B, >= 21),
    with a gradient norm below 1e-3. ``by objective``: converged by the second rule only.
    A history shorter than the window (NaN entries) is never flat. The solvers stop at the
    tolerance and judge the second rule where a fit would otherwise stop unconverged."""
    by_gradient = gnorm < tolerance
    old, new = hist[:, -FLAT_WINDOW - 1], hist[:, -1]
    flat = (old - new < FLAT_RTOL * new.abs()) & (gnorm < FLAT_GRADIENT)
    return by_gradient | flat, flat & ~by_gradient
