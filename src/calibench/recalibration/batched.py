"""Batched float64 primitives shared by the solvers of :mod:`calibench.recalibration.scaling`
(vector scaling's Newton) and :mod:`calibench.recalibration.lbfgs` (the ODIR L-BFGS): B
problems at once, each on its own, bit for bit as a batch of one on CPU (see :func:`_gram`).
"""

from __future__ import annotations

import torch

ARMIJO_C1 = 1e-4  # sufficient decrease of both solvers' line searches


def _label_rows(y: torch.Tensor, bsz: int) -> torch.Tensor:
    """Labels (N,) or (B, N) as (B, N, 1) for gather/scatter."""
    if y.ndim == 1:
        y = y.expand(bsz, -1)
    return y.unsqueeze(-1)


def _gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a^T b`` per network, a (B, N, P), b (B, N, Q) -> (B, P, Q). Small products are
    summed elementwise: CPU bmm of a transposed operand takes another path for a batch of
    one than for several when P, Q are small (results differ in the last bit), and each
    network's fit must not depend on its batch."""
    if a.shape[-1] * b.shape[-1] <= 128:
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
    rest = e.scatter(-1, yi, 0.0).sum(-1, keepdim=True)
    se = e_y + rest
    d = vmax - torch.gather(v, -1, yi)
    nll = torch.where(d > 0, d + torch.log(se), torch.log1p(rest))
    return nll.squeeze(-1), e, se.squeeze(-1)
