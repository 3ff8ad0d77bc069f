"""Vector scaling (``vs``), matrix scaling with ODIR (``ms``) and Dirichlet calibration with
ODIR (``dir``): docs/recalibration.md, sections "Vector scaling", "Matrix scaling with
ODIR", "Dirichlet calibration with ODIR" and "Common rules".

Pure functions, batched over M networks (float64 torch on the input's device; the same code
on CPU and CUDA). Each network is fitted on its own: its iterates depend only on its own
data, so fitting M networks at once gives what fitting them one at a time gives (bit for
bit on CPU, where every reduction is batch-invariant; see
:func:`calibench.recalibration.batched._gram`).

Objectives (mean over the N validation samples; ``u`` the recalibrated logits):

- ``vs``: ``u = w * z + b`` on the raw logits z; mean NLL, no regulariser; init w = 1, b = 0.
- ``ms``: ``u = W z + b``; ``dir``: ``u = W log_softmax(z) + b``; both minimise
  ``mean NLL + lam/(K(K-1)) sum_{i!=j} W_ij^2 + mu/K sum_j b_j^2``; init W = I, b = 0.

Solvers and convergence (per network):

- ``vs`` (2K parameters): Newton's method with the exact Hessian, a Levenberg ridge of
  1e-9 times its mean diagonal (softmax is shift-invariant in b, and constant-logit
  networks add null directions; the gradient is orthogonal to them, so the ridge does not
  move the answer), Armijo backtracking. Converged when the L2 norm of the gradient of the
  mean NLL in (w, b) is below ``tolerance`` (spec: 1e-6). After ``max_iterations``, or when
  no step decreases the objective, converged if the objective has stopped moving (relative
  decrease below 1e-10 over the last 20 iterations with a gradient norm below 1e-3;
  :func:`calibench.recalibration.batched.convergence`), otherwise not converged.
- ``ms``/``dir`` (K^2 + K parameters; 10,100 at K = 100): preconditioned L-BFGS on
  canonical points, batched over networks (:mod:`calibench.recalibration.lbfgs`: solver,
  line search, convergence).

Failures (docs/recalibration.md, "Common rules"): a network whose validation logits hold
NaN or inf, or whose objective becomes non-finite, is listed in ``failures`` with NaN
parameters; a network that did not converge keeps its last iterate and is listed too (its
stage is NaN). ``info`` records ``iterations``, ``converged`` and ``converged_by_objective``
(1 where only the objective rule held).
Degenerate inputs (constant logit rows) give constant, finite outputs; a class absent from
the validation part is driven towards probability 0 (finite parameters: the gradient
tolerance stops the fit).
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.metrics._arrays import check_labels, to_tensor
from calibench.recalibration.base import Fitted, as_info
from calibench.recalibration.batched import (ARMIJO_C1, _gram, _label_rows, _softmax_nll, convergence,
                                             objective_history, push_objective)
from calibench.recalibration.lbfgs import _fit_odir

# Iteration limit of vs, ms and dir (config recalibration.max_iterations). The spec fixes 1,000 for vs,
# whose Newton steps converge in far fewer; ms and dir (L-BFGS) near a flat optimum can need more: a
# mini-benchmark TSS CIFAR-100 Dirichlet fit reached gradient norm 1e-6 at iteration 1,047.
DEFAULT_MAX_ITERATIONS = 2000
DEFAULT_TOLERANCE = 1e-6
NEWTON_RIDGE = 1e-9
MAX_BACKTRACKS = 60


# --------------------------------------------------------------------------------------
# inputs


def _check_batch(logits_val, labels_val) -> tuple[torch.Tensor, torch.Tensor, list[str | None]]:
    """(M, N, K) float64 logits, (N,) int64 labels, and per-network failures for networks
    with non-finite logits (their logits are replaced by zeros for the fit)."""
    z = to_tensor(logits_val, "logits_val")
    if z.ndim != 3:
        raise ValueError(f"logits_val: expected a 3-D array of shape (M, N, K), got shape {tuple(z.shape)}")
    if z.dtype == torch.bool or z.is_complex():
        raise ValueError(f"logits_val: expected real numbers, got dtype {z.dtype}")
    m, n, k = z.shape
    if m == 0 or n == 0:
        raise ValueError(f"logits_val: no networks or no samples (shape {tuple(z.shape)})")
    if k < 2:
        raise ValueError(f"logits_val: need at least 2 classes, got K = {k}")
    z = z.to(torch.float64)
    y = check_labels(labels_val, n, k, z.device, "labels_val")
    finite = torch.isfinite(z).flatten(1).all(dim=1)
    failures: list[str | None] = [None] * m
    if not bool(finite.all()):
        z = torch.where(finite[:, None, None], z, torch.zeros((), dtype=z.dtype, device=z.device))
        for i in torch.nonzero(~finite).flatten().tolist():
            failures[i] = "validation logits are not finite"
    return z, y, failures


def _per_network(value, m: int, name: str, device) -> torch.Tensor:
    """A scalar or an (M,) sequence as an (M,) float64 tensor (finite, >= 0)."""
    t = torch.as_tensor(value.detach() if isinstance(value, torch.Tensor) else np.asarray(value, dtype=np.float64),
                        dtype=torch.float64, device=device)
    if t.ndim == 0:
        t = t.expand(m).clone()
    if t.shape != (m,):
        raise ValueError(f"{name}: expected a scalar or shape ({m},), got shape {tuple(t.shape)}")
    if not bool((torch.isfinite(t) & (t >= 0)).all()):
        raise ValueError(f"{name}: must be finite and >= 0, got {t.tolist()}")
    return t


def _uniform_weights(m: int, n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.full((m, n), 1.0 / n, dtype=like.dtype, device=like.device)


def _ok(failures: list[str | None]) -> torch.Tensor:
    return torch.tensor([f is None for f in failures])


def _nan_where_unusable(p: torch.Tensor, failures: list[str | None]) -> torch.Tensor:
    """NaN parameters for networks without a usable iterate (non-finite input or objective)."""
    bad = [i for i, f in enumerate(failures) if f is not None and "not finite" in f]
    if bad:
        p = p.clone()
        p[torch.tensor(bad, device=p.device)] = float("nan")
    return p


# --------------------------------------------------------------------------------------
# maps from given parameters


def _vs_info(w: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "w_norm": torch.linalg.vector_norm(w, dim=-1),
        "b_norm": torch.linalg.vector_norm(b, dim=-1),
        "w_mean": w.mean(dim=-1),
    }


def _ms_info(W: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    diag = torch.diagonal(W, dim1=-2, dim2=-1)
    return {
        "w_norm": torch.linalg.matrix_norm(W),
        "w_offdiag_norm": torch.linalg.matrix_norm(W - torch.diag_embed(diag)),
        "w_diag_mean": diag.mean(dim=-1),
        "b_norm": torch.linalg.vector_norm(b, dim=-1),
    }


def vs_transform(w: torch.Tensor, b: torch.Tensor):
    """The map ``w * z + b`` of (M, K) parameters (stage ``vs``)."""
    def transform(z: torch.Tensor) -> torch.Tensor:
        return z * w.to(z.device)[:, None, :] + b.to(z.device)[:, None, :]

    return transform


def ms_transform(W: torch.Tensor, b: torch.Tensor, dirichlet: bool = False):
    """The map ``W x + b`` of (M, K, K), (M, K) parameters, ``x = z`` (``ms``) or
    ``x = log_softmax(z)`` (``dir``)."""
    def transform(z: torch.Tensor) -> torch.Tensor:
        x = torch.log_softmax(z, dim=-1) if dirichlet else z
        return torch.baddbmm(b.to(z.device)[:, None, :], x, W.to(z.device).transpose(1, 2))

    return transform


def _vs_fitted(w, b, info, failures) -> Fitted:
    return Fitted(method="vs", transform=vs_transform(w, b), info=as_info(info), failures=failures,
                  params={"w": w, "b": b})


def _ms_fitted(W, b, dirichlet: bool, info, failures) -> Fitted:
    return Fitted(method="dir" if dirichlet else "ms", transform=ms_transform(W, b, dirichlet), info=as_info(info),
                  failures=failures, params={"W": W, "b": b})


def vector_scaling_map(w, b) -> Fitted:
    """The map ``softmax(w * z + b)`` for given w, b of shape (M, K) (or (K,) for one network)."""
    w = to_tensor(w, "w").to(torch.float64)
    b = to_tensor(b, "b").to(device=w.device, dtype=torch.float64)
    if w.ndim == 1:
        w, b = w[None], b[None]
    if w.ndim != 2 or b.shape != w.shape:
        raise ValueError(f"w, b: expected equal shapes (M, K), got {tuple(w.shape)} and {tuple(b.shape)}")
    m = w.shape[0]
    info = _vs_info(w, b) | {"converged": torch.ones(m), "iterations": torch.zeros(m)}
    return _vs_fitted(w, b, info, [None] * m)


def matrix_scaling_map(W, b, dirichlet: bool = False) -> Fitted:
    """The map ``softmax(W x + b)`` for given W (M, K, K) and b (M, K) (or (K, K), (K,)), with
    ``x = z`` (matrix scaling, "ms") or ``x = log_softmax(z)`` (``dirichlet=True``, "dir")."""
    W = to_tensor(W, "W").to(torch.float64)
    b = to_tensor(b, "b").to(device=W.device, dtype=torch.float64)
    if W.ndim == 2:
        W, b = W[None], b[None]
    if W.ndim != 3 or W.shape[1] != W.shape[2] or b.shape != W.shape[:2]:
        raise ValueError(f"W, b: expected shapes (M, K, K) and (M, K), got {tuple(W.shape)} and {tuple(b.shape)}")
    m = W.shape[0]
    info = _ms_info(W, b) | {"converged": torch.ones(m), "iterations": torch.zeros(m)}
    return _ms_fitted(W, b, dirichlet, info, [None] * m)


# --------------------------------------------------------------------------------------
# vector scaling: Newton


def _vs_value_grad(z, yi, weight, w, b):
    """Mean NLL of softmax(w * z + b), its gradient in (w, b), and q."""
    u = torch.addcmul(b[:, None, :], z, w[:, None, :])
    nll, e, se = _softmax_nll(u, yi)
    f = (nll * weight).sum(-1)
    q = e / se[..., None]
    gu = q * weight[..., None]
    gu.scatter_add_(-1, yi, -weight[..., None])
    return f, torch.cat([(gu * z).sum(1), gu.sum(1)], dim=-1), q


def _vs_hessian(z, weight, q):
    """Hessian of the mean NLL in (w, b): sum_n J_n^T (diag q_n - q_n q_n^T) J_n with
    J_n = [diag z_n, I]; three K x N x K products."""
    k = z.shape[-1]
    qw = q * weight[..., None]
    qzw = qw * z
    qz = q * z
    hww = -_gram(qzw, qz)
    hwb = -_gram(qzw, q)
    hbb = -_gram(qw, q)
    idx = torch.arange(k, device=z.device)
    hww[:, idx, idx] += (qzw * z).sum(1)
    diag_wb = qzw.sum(1)
    hwb[:, idx, idx] += diag_wb
    hbb[:, idx, idx] += qw.sum(1)
    return torch.cat([torch.cat([hww, hwb], dim=2), torch.cat([hwb.transpose(1, 2), hbb], dim=2)], dim=1)


def _fit_vs(z, y, weight, max_iterations: int, tolerance: float):
    """Newton's method for vector scaling, B problems at once (each on its own).

    Returns w, b (B, K), iterations, converged, converged by the objective rule, gradient
    norm, reasons (None if converged)."""
    bsz, _, k = z.shape
    dev, dt = z.device, z.dtype
    yi = _label_rows(y, bsz)
    w = torch.ones(bsz, k, dtype=dt, device=dev)
    b = torch.zeros(bsz, k, dtype=dt, device=dev)
    iterations = torch.zeros(bsz, dtype=torch.int64)
    converged = torch.zeros(bsz, dtype=torch.bool)
    by_objective = torch.zeros(bsz, dtype=torch.bool)
    gnorm = torch.full((bsz,), float("nan"), dtype=dt)
    reasons: list[str | None] = [None] * bsz
    active = torch.arange(bsz, device=dev)
    eye = torch.eye(2 * k, dtype=dt, device=dev)
    za, ya, wa = z, yi, weight
    f, g, q = _vs_value_grad(za, ya, wa, w, b)
    hist = objective_history(f)
    ls_failed = torch.zeros(bsz, dtype=torch.bool, device=dev)
    for it in range(max_iterations + 1):
        gn = torch.linalg.vector_norm(g, dim=-1)
        ids = active.cpu()
        gnorm[ids], iterations[ids] = gn.cpu(), it
        bad = ~(torch.isfinite(f) & torch.isfinite(gn))
        _, flat = convergence(gn, hist, tolerance)
        end = ls_failed | (it == max_iterations)  # no further iterate: the objective rule decides
        flat = flat & ~bad & end
        done = ((gn < tolerance) & ~bad) | flat
        stop = bad | done | end
        if bool(stop.any()):
            converged[ids[done.cpu()]] = True
            by_objective[ids[flat.cpu()]] = True
            for i, j in zip(ids[stop.cpu()].tolist(), torch.nonzero(stop).flatten().tolist()):
                if bool(bad[j]):
                    reasons[i] = f"objective not finite after {it} iterations"
                elif not bool(done[j]):
                    why = " (line search found no decrease)" if bool(ls_failed[j]) else ""
                    reasons[i] = f"did not converge{why}: gradient norm {float(gn[j]):.3g} after {it} iterations"
            keep = ~stop
            active, za, ya, wa, f, g, q, hist = (t[keep] for t in (active, za, ya, wa, f, g, q, hist))
            if active.numel() == 0:
                break
        wv, bv = w[active], b[active]
        h = _vs_hessian(za, wa, q)
        ridge = NEWTON_RIDGE * torch.diagonal(h, dim1=-2, dim2=-1).abs().mean(-1).clamp(min=1e-300)
        for _ in range(30):  # raise the ridge until the Cholesky factor exists
            chol, info = torch.linalg.cholesky_ex(h + ridge[:, None, None] * eye)
            failed = info != 0
            if not bool(failed.any()):
                break
            ridge = torch.where(failed, ridge * 100, ridge)
        step = -torch.cholesky_solve(g.unsqueeze(-1), chol).squeeze(-1)
        gd = (g * step).sum(-1)
        step = torch.where((gd < 0)[:, None], step, -g)  # guard; a PD model gives descent
        gd = (g * step).sum(-1)
        # Armijo backtracking, per network; the full step first for all
        tw, tb = wv + step[:, :k], bv + step[:, k:]
        ft, gt, qt = _vs_value_grad(za, ya, wa, tw, tb)
        ok = torch.isfinite(ft) & (ft <= f + ARMIJO_C1 * gd)
        pending = ~ok
        if bool(pending.any()):
            new = [torch.where(ok[:, None], tw, wv), torch.where(ok[:, None], tb, bv), torch.where(ok, ft, f),
                   torch.where(ok[:, None], gt, g), torch.where(ok[:, None, None], qt, q)]
            alpha = torch.full_like(f, 0.5)
            for _ in range(MAX_BACKTRACKS):
                todo = torch.nonzero(pending).flatten()
                if todo.numel() == 0:
                    break
                st = step[todo] * alpha[todo, None]
                tw, tb = wv[todo] + st[:, :k], bv[todo] + st[:, k:]
                ft, gt, qt = _vs_value_grad(za[todo], ya[todo], wa[todo], tw, tb)
                ok = torch.isfinite(ft) & (ft <= f[todo] + ARMIJO_C1 * alpha[todo] * gd[todo])
                sel = todo[ok]
                for dst, src in zip(new, (tw, tb, ft, gt, qt)):
                    dst[sel] = src[ok]
                pending[sel] = False
                alpha[todo[~ok]] *= 0.5
            tw, tb, ft, gt, qt = new
        w[active], b[active] = tw, tb
        f, g, q = ft, gt, qt
        hist = push_objective(hist, f)
        ls_failed = pending  # such a network keeps its point and stops at the next check
    return w, b, iterations, converged, by_objective, gnorm, reasons


def fit_vector_scaling(logits_val, labels_val, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                       tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Vector scaling of M networks, ``softmax(w * z + b)`` on the raw logits
    (docs/recalibration.md, "Vector scaling"): logits (M, N, K), shared labels (N,); mean
    validation NLL, no regulariser, init w = 1, b = 0; Newton's method to a gradient norm
    below ``tolerance`` (module docstring).

    ``info``: w_norm, b_norm (L2; b is reported with mean 0, its free shift), w_mean,
    iterations, converged, converged_by_objective, gradient_norm.
    """
    z, y, failures = _check_batch(logits_val, labels_val)
    m, n, _ = z.shape
    with torch.no_grad():
        w, b, iterations, converged, by_objective, gnorm, reasons = _fit_vs(z, y, _uniform_weights(m, n, z),
                                                                             max_iterations, tolerance)
    failures = [f or r for f, r in zip(failures, reasons)]
    b = b - b.mean(-1, keepdim=True)  # softmax is shift-invariant in b: report mean(b) = 0
    w, b = _nan_where_unusable(w, failures), _nan_where_unusable(b, failures)
    ok = _ok(failures)
    info = _vs_info(w, b) | {"iterations": iterations, "converged": converged & ok,
                             "converged_by_objective": by_objective & ok, "gradient_norm": gnorm}
    return _vs_fitted(w, b, info, failures)


# --------------------------------------------------------------------------------------
# matrix scaling / Dirichlet calibration with ODIR


def _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet: bool) -> Fitted:
    z, y, failures = _check_batch(logits_val, labels_val)
    m, n, k = z.shape
    lam_t = _per_network(lam, m, "lam", z.device)
    mu_t = _per_network(mu, m, "mu", z.device)
    with torch.no_grad():
        x = torch.log_softmax(z, dim=-1) if dirichlet else z
        theta, f, gnorm, iterations, converged, by_objective, reasons = _fit_odir(
            x, y, _uniform_weights(m, n, z), lam_t / (k * (k - 1)), mu_t / k, max_iterations, tolerance)
    failures = [f0 or r for f0, r in zip(failures, reasons)]
    W = _nan_where_unusable(theta[:, : k * k].reshape(m, k, k), failures)
    b = _nan_where_unusable(theta[:, k * k :], failures)
    ok = _ok(failures)
    info = _ms_info(W, b) | {"lambda": lam_t, "mu": mu_t, "iterations": iterations, "converged": converged & ok,
                             "converged_by_objective": by_objective & ok, "gradient_norm": gnorm, "objective": f}
    return _ms_fitted(W, b, dirichlet, info, failures)


def fit_matrix_scaling(logits_val, labels_val, lam, mu, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                       tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Matrix scaling with ODIR of M networks, ``softmax(W z + b)`` (docs/recalibration.md,
    "Matrix scaling with ODIR"): logits (M, N, K), shared labels (N,); ``lam``, ``mu``
    scalars or (M,). Minimises ``mean NLL + lam/(K(K-1)) sum_{i!=j} W_ij^2 + mu/K sum_j b_j^2``
    from W = I, b = 0 by preconditioned L-BFGS (module docstring: solver, convergence).

    ``info``: w_norm (Frobenius), w_offdiag_norm, w_diag_mean, b_norm, lambda, mu,
    iterations, converged, converged_by_objective, gradient_norm, objective.
    """
    return _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet=False)


def fit_dirichlet(logits_val, labels_val, lam, mu, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                  tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Dirichlet calibration with ODIR of M networks (docs/recalibration.md, "Dirichlet
    calibration with ODIR"): matrix scaling with ODIR applied to ``log_softmax(z)``; same
    objective, start, solver and ``info`` as :func:`fit_matrix_scaling`."""
    return _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet=True)
