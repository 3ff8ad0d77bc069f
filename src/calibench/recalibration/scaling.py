"""Vector scaling (``vs``), matrix scaling with ODIR (``ms``) and Dirichlet calibration with
ODIR (``dir``): recalibration-spec.md, sections "Vector scaling", "Matrix scaling with
ODIR", "Dirichlet calibration with ODIR" and "Common rules".

Pure functions, batched over M networks (float64 torch on the input's device; the same code
on CPU and CUDA). Each network is fitted on its own: its iterates depend only on its own
data, so fitting M networks at once gives what fitting them one at a time gives (bit for
bit on CPU, where every reduction is batch-invariant; see :func:`_gram`).

Objectives (mean over the N validation samples; ``u`` the recalibrated logits):

- ``vs``: ``u = w * z + b`` on the raw logits z; mean NLL, no regulariser; init w = 1, b = 0.
- ``ms``: ``u = W z + b``; ``dir``: ``u = W log_softmax(z) + b``; both minimise
  ``mean NLL + lam/(K(K-1)) sum_{i!=j} W_ij^2 + mu/K sum_j b_j^2``; init W = I, b = 0.

Solvers and convergence (per network):

- ``vs`` (2K parameters): Newton's method with the exact Hessian, a Levenberg ridge of
  1e-9 times its mean diagonal (softmax is shift-invariant in b, and constant-logit
  networks add null directions; the gradient is orthogonal to them, so the ridge does not
  move the answer), Armijo backtracking. Converged when the L2 norm of the gradient of the
  mean NLL in (w, b) is below ``tolerance`` (spec: 1e-6); otherwise, after
  ``max_iterations``, not converged.
- ``ms``/``dir`` (K^2 + K parameters; 10,100 at K = 100): L-BFGS (memory 20, in the
  compact form of Byrd, Nocedal and Schnabel) batched over networks: per-network
  histories, directions and step lengths.

  * Shift classes. The NLL is unchanged by ``W -> W + 1 v^T`` and ``b -> b + s 1``; the
    regulariser is not, and its minimum along these K + 1 directions is explicit
    (:func:`_odir_canonical`). The iterates stay on these canonical points, which removes
    the directions whose only curvature is the regulariser's (weak for small lam).
  * Preconditioner (the L-BFGS initial inverse Hessian, refreshed every
    ``PRECONDITIONER_REFRESH`` iterations): per class, the diagonal of the Hessian in
    (row of W, centred intercept) plus the exact regulariser
    (:func:`_preconditioner_from_sums`); it cuts the iterations about fivefold at K = 100.
  * Line search: the change of the logits along the direction is computed once (one
    N x K x K product), then each trial step costs a softmax only (:func:`_line_search`,
    strong Wolfe conditions, c1 = 1e-4, c2 = 0.9). The NLL is evaluated without
    cancellation (:func:`_softmax_nll`), which the line search needs once a weakly
    regularised fit drives the validation NLL towards 0.

  Converged when the L2 norm of the objective's gradient in (W, b) is below ``tolerance``
  (default 1e-6, as for ``vs``; at K = 100 the probabilities are then within about 1e-6
  of the optimum's). A network stops as not converged after ``max_iterations``, when the
  line search finds no decrease, or when the objective has not decreased by more than
  1e-14 of itself over 5 iterations (float64 rounding): a flat objective with a gradient
  above tolerance.

Failures (recalibration-spec.md, "Common rules"): a network whose validation logits hold
NaN or inf, or whose objective becomes non-finite, is listed in ``failures`` with NaN
parameters; a network that did not converge keeps its last iterate and is listed too.
Degenerate inputs (constant logit rows) give constant, finite outputs; a class absent from
the validation part is driven towards probability 0 (finite parameters: the gradient
tolerance stops the fit).
"""

from __future__ import annotations

import numpy as np
import torch

from calibench.metrics._arrays import check_labels, to_tensor
from calibench.recalibration.base import Fitted, as_info

DEFAULT_MAX_ITERATIONS = 1000
DEFAULT_TOLERANCE = 1e-6
NEWTON_RIDGE = 1e-9
ARMIJO_C1 = 1e-4
WOLFE_C2 = 0.9
MAX_BACKTRACKS = 60
LINE_SEARCH_TRIALS = 20
LBFGS_MEMORY = 20
PRECONDITIONER_REFRESH = 5
STALL_WINDOW = 5
STALL_RTOL = 1e-14


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


def _label_rows(y: torch.Tensor, bsz: int) -> torch.Tensor:
    """Labels (N,) or (B, N) as (B, N, 1) for gather/scatter."""
    if y.ndim == 1:
        y = y.expand(bsz, -1)
    return y.unsqueeze(-1)


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


def _vs_fitted(w, b, info, failures) -> Fitted:
    def transform(z: torch.Tensor) -> torch.Tensor:
        return z * w.to(z.device)[:, None, :] + b.to(z.device)[:, None, :]

    return Fitted(method="vs", transform=transform, info=as_info(info), failures=failures,
                  params={"w": w, "b": b})


def _ms_fitted(W, b, dirichlet: bool, info, failures) -> Fitted:
    def transform(z: torch.Tensor) -> torch.Tensor:
        x = torch.log_softmax(z, dim=-1) if dirichlet else z
        return torch.baddbmm(b.to(z.device)[:, None, :], x, W.to(z.device).transpose(1, 2))

    return Fitted(method="dir" if dirichlet else "ms", transform=transform, info=as_info(info),
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

    Returns w, b (B, K), iterations, converged, gradient norm, reasons (None if converged)."""
    bsz, _, k = z.shape
    dev, dt = z.device, z.dtype
    yi = _label_rows(y, bsz)
    w = torch.ones(bsz, k, dtype=dt, device=dev)
    b = torch.zeros(bsz, k, dtype=dt, device=dev)
    iterations = torch.zeros(bsz, dtype=torch.int64)
    converged = torch.zeros(bsz, dtype=torch.bool)
    gnorm = torch.full((bsz,), float("nan"), dtype=dt)
    reasons: list[str | None] = [None] * bsz
    active = torch.arange(bsz, device=dev)
    eye = torch.eye(2 * k, dtype=dt, device=dev)
    za, ya, wa = z, yi, weight
    f, g, q = _vs_value_grad(za, ya, wa, w, b)
    ls_failed = torch.zeros(bsz, dtype=torch.bool, device=dev)
    for it in range(max_iterations + 1):
        gn = torch.linalg.vector_norm(g, dim=-1)
        ids = active.cpu()
        gnorm[ids], iterations[ids] = gn.cpu(), it
        bad = ~(torch.isfinite(f) & torch.isfinite(gn))
        done = (gn < tolerance) & ~bad
        stop = bad | done | ls_failed | (it == max_iterations)
        if bool(stop.any()):
            converged[ids[done.cpu()]] = True
            for i, j in zip(ids[stop.cpu()].tolist(), torch.nonzero(stop).flatten().tolist()):
                if bool(bad[j]):
                    reasons[i] = f"objective not finite after {it} iterations"
                elif not bool(done[j]):
                    why = " (line search found no decrease)" if bool(ls_failed[j]) else ""
                    reasons[i] = f"did not converge{why}: gradient norm {float(gn[j]):.3g} after {it} iterations"
            keep = ~stop
            active, za, ya, wa, f, g, q = (t[keep] for t in (active, za, ya, wa, f, g, q))
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
        ls_failed = pending  # such a network keeps its point and stops at the next check
    return w, b, iterations, converged, gnorm, reasons


def fit_vector_scaling(logits_val, labels_val, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                       tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Vector scaling of M networks, ``softmax(w * z + b)`` on the raw logits
    (recalibration-spec.md, "Vector scaling"): logits (M, N, K), shared labels (N,); mean
    validation NLL, no regulariser, init w = 1, b = 0; Newton's method to a gradient norm
    below ``tolerance`` (module docstring).

    ``info``: w_norm, b_norm (L2; b is reported with mean 0, its free shift), w_mean,
    iterations, converged, gradient_norm.
    """
    z, y, failures = _check_batch(logits_val, labels_val)
    m, n, _ = z.shape
    with torch.no_grad():
        w, b, iterations, converged, gnorm, reasons = _fit_vs(z, y, _uniform_weights(m, n, z),
                                                               max_iterations, tolerance)
    failures = [f or r for f, r in zip(failures, reasons)]
    b = b - b.mean(-1, keepdim=True)  # softmax is shift-invariant in b: report mean(b) = 0
    w, b = _nan_where_unusable(w, failures), _nan_where_unusable(b, failures)
    info = _vs_info(w, b) | {"iterations": iterations, "converged": converged & _ok(failures),
                             "gradient_norm": gnorm}
    return _vs_fitted(w, b, info, failures)


# --------------------------------------------------------------------------------------
# matrix scaling / Dirichlet calibration with ODIR


def odir_objective(x, y, weight, lam_, mu_, theta):
    """The ODIR objective and its gradient at ``theta = (vec W, b)`` (B, K*K + K), for inputs
    x (B, N, K) (z for ms, log_softmax(z) for dir), labels (N,) or (B, N), sample weights
    (B, N) summing to 1, and the normalised weights ``lam_ = lam/(K(K-1))``,
    ``mu_ = mu/K`` (B,). A reference evaluation (the fit uses the same formulas)."""
    bsz, _, k = x.shape
    yi = _label_rows(y, bsz)
    W = theta[:, : k * k].view(bsz, k, k)
    b = theta[:, k * k :]
    u = torch.baddbmm(b[:, None, :], x, W.transpose(1, 2))
    nll_n, e, se = _softmax_nll(u, yi)
    nll = (nll_n * weight).sum(-1)
    gu = e / se[..., None] * weight[..., None]
    gu.scatter_add_(-1, yi, -weight[..., None])
    off = W - torch.diag_embed(torch.diagonal(W, dim1=-2, dim2=-1))
    f = nll + lam_ * (off * off).sum((1, 2)) + mu_ * (b * b).sum(-1)
    gW = _gram(gu, x) + (2 * lam_)[:, None, None] * off
    gb = gu.sum(1) + (2 * mu_)[:, None] * b
    return f, torch.cat([gW.flatten(1), gb], dim=-1)


def _odir_canonical(theta, k: int):
    """The point of theta's shift class with the smallest regulariser (linear, idempotent).

    The NLL is unchanged by ``W -> W + 1 v^T`` (the same ``v . x`` added to every class
    logit) and by ``b -> b + s 1``. Along these directions the regulariser's minimum is
    explicit: ``v_j = -mean_{i != j} W_ij`` (each column's off-diagonal mean becomes 0) and
    ``s = -mean(b)``."""
    bsz = theta.shape[0]
    W = theta[:, : k * k].view(bsz, k, k)
    b = theta[:, k * k :]
    col = (W.sum(1) - torch.diagonal(W, dim1=-2, dim2=-1)) / (k - 1)
    return torch.cat([(W - col[:, None, :]).flatten(1), b - b.mean(-1, keepdim=True)], dim=-1)


def _preconditioner_from_sums(sums, ss, lam_, mu_):
    """Per-class curvature model of the ODIR objective, from ``s = weight q (1 - q)``:
    ``sums = s^T [x, x^2]`` (B, K, 2K) and ``ss = sum_n s`` (B, K).

    For class k, in the coordinates (w, c) = (row k of W, centred intercept
    ``c = b_k + w . m_k``), m_k the s-weighted mean input, the data part of the Hessian's
    diagonal block is ``[[sum s (x - m_k)(x - m_k)^T, 0], [0, sum s]]``. The model keeps
    its diagonal, ``diag(d_w)`` and ``a = sum s``, and adds the regulariser exactly:
    ``2 lam_`` on the off-diagonal w and ``rho = 2 mu_`` on ``b_k = c - w . m_k``.
    Returns (m, 1/d_w, a, rho, m . m/d_w) for :func:`_apply_preconditioner`."""
    k = ss.shape[-1]
    sx, sxx = sums[..., :k], sums[..., k:]
    tiny = torch.finfo(sums.dtype).tiny
    m = sx / ss.clamp(min=tiny)[..., None]
    dw = (sxx - sx * m).clamp(min=0)
    dw = dw + (2 * lam_)[:, None, None] * (1.0 - torch.eye(k, dtype=sums.dtype, device=sums.device))
    # floors: a class or an input without curvature still gets a finite step
    scale = torch.maximum(dw.flatten(1).amax(-1), ss.amax(-1)).clamp(min=tiny)
    inv_dw = 1.0 / torch.maximum(dw, 1e-10 * scale[:, None, None]).clamp(min=tiny)
    a = torch.maximum(ss, 1e-10 * scale[:, None]).clamp(min=tiny)
    return m, inv_dw, a, (2 * mu_)[:, None].expand_as(a), torch.linalg.vecdot(m * m, inv_dw)


def _apply_preconditioner(pre, g):
    """``P g``, P the inverse of the model of :func:`_preconditioner_from_sums` (symmetric
    positive definite), g in (vec W, b) coordinates: (B, K*K + K), or (B, L, K*K + K).

    Per class, with ``g'_w = g_w - g_b m`` (the gradient in (w, c)), the model's solve is
    ``db = (g_b - a m . g'_w/d_w) / (a + rho + rho a m . m/d_w)`` and
    ``dw = (g'_w + rho m db) / d_w``: no difference of large terms, whatever the sizes of
    a (the class's curvature) and rho (its intercept's penalty)."""
    m, inv_dw, a, rho, s_m = pre
    flat = g.ndim == 2
    if flat:
        g = g[:, None]
    bsz, nvec, _ = g.shape
    k = a.shape[-1]
    m, inv_dw, a, rho, s_m = m[:, None], inv_dw[:, None], a[:, None], rho[:, None], s_m[:, None]
    gW = g[..., : k * k].reshape(bsz, nvec, k, k)
    gb = g[..., k * k :]
    hw = (gW - gb[..., None] * m) * inv_dw
    db = (gb - a * torch.linalg.vecdot(m, hw)) / (a + rho + rho * a * s_m)
    hw = torch.addcmul(hw, (rho * db)[..., None] * m, inv_dw)
    out = torch.cat([hw.flatten(2), db], dim=-1)
    return out[:, 0] if flat else out


def _dot(a, b):
    return (a * b).sum(-1)


def _line_search(u, ud, yi, weight, f0, reg0, gd, r1, r2):
    """Per-network line search along ``u + a ud`` (batched; each network on its own).

    ``phi(a) = NLL(u + a ud) + reg0 + a r1 + a^2 r2`` (the regulariser is quadratic along the
    line), ``phi(0) = f0``, ``phi'(0) = gd < 0``. A trial costs one softmax of (N, K).
    Accepts ``a`` with ``phi(a) <= f0 + c1 a gd`` (plus a few rounding errors of phi) and
    ``|phi'(a)| <= c2 |gd|`` (strong Wolfe), starting at a = 1. Bracketing: a trial
    without sufficient decrease is followed by the minimiser of the quadratic through
    phi(0), phi'(0), phi(a) (kept within [a/1000, a/2]); otherwise safeguarded Newton on
    phi' inside the bracket, or expansion. If the trials run out, the largest step found
    with sufficient decrease is taken. Returns a, phi(a), the logits u + a ud, q there,
    accepted."""
    bsz = u.shape[0]
    dev, dt = u.device, u.dtype
    alpha = torch.ones(bsz, dtype=dt, device=dev)
    lo = torch.zeros(bsz, dtype=dt, device=dev)  # largest step with sufficient decrease, phi' < 0
    hi = torch.full((bsz,), float("inf"), dtype=dt, device=dev)
    done = torch.zeros(bsz, dtype=torch.bool, device=dev)
    ud_y_all = torch.gather(ud, -1, yi).squeeze(-1)
    slack = 16 * torch.finfo(dt).eps * f0.abs()
    for trial in range(LINE_SEARCH_TRIALS + 1):
        last = trial == LINE_SEARCH_TRIALS
        todo = torch.nonzero(~done & (lo > 0)).flatten() if last else torch.nonzero(~done).flatten()
        if todo.numel() == 0:
            break
        full = todo.numel() == bsz
        uu, dd, ww, yy, ud_y = (u, ud, weight, yi, ud_y_all) if full else (
            u[todo], ud[todo], weight[todo], yi[todo], ud_y_all[todo])
        a = lo[todo] if last else alpha[todo]
        v = torch.addcmul(uu, a[:, None, None], dd)
        nll_n, e, se = _softmax_nll(v, yy)
        nll = (nll_n * ww).sum(-1)
        qd = torch.linalg.vecdot(e, dd) / se
        r1t, r2t = r1[todo], r2[todo]
        phi = nll + reg0[todo] + a * r1t + a * a * r2t
        dphi = ((qd - ud_y) * ww).sum(-1) + r1t + 2 * a * r2t
        f0t, gdt = f0[todo], gd[todo]
        finite = torch.isfinite(phi) & torch.isfinite(dphi)
        armijo = finite & (phi <= f0t + ARMIJO_C1 * a * gdt + slack[todo])
        ok = armijo if last else armijo & (dphi.abs() <= WOLFE_C2 * gdt.abs())
        if trial == 0:
            # the usual case is a = 1 everywhere; the results of this trial (all networks)
            # are kept, and rows of networks accepted later are overwritten
            out = (torch.where(ok, a, 0.0), torch.where(ok, phi, f0), v, e / se[..., None])
            if bool(ok.all()):
                return out[0], out[1], out[2], out[3], ok
            done |= ok
        elif bool(ok.any()):
            sel = todo[ok]
            done[sel] = True
            out[0][sel], out[1][sel], out[2][sel] = a[ok], phi[ok], v[ok]
            out[3][sel] = e[ok] / se[ok][..., None]
        rest = ~ok
        if last or not bool(rest.any()):
            break
        idx = todo[rest]
        a_r, dphi_r, phi_r, gd_r = a[rest], dphi[rest], phi[rest], gdt[rest]
        fin_r, arm_r = finite[rest], armijo[rest]
        qdd = torch.linalg.vecdot(e[rest] * dd[rest], dd[rest]) / se[rest]
        ddphi = ((qdd - qd[rest] ** 2) * ww[rest]).sum(-1) + 2 * r2t[rest]
        hi[idx] = torch.where(~arm_r | (dphi_r > 0), a_r, hi[idx])
        lo[idx] = torch.where(arm_r & (dphi_r < 0), a_r, lo[idx])
        l_, h_ = lo[idx], hi[idx]
        # no sufficient decrease: quadratic interpolation from 0 (or a tenth if phi is not finite)
        curv = phi_r - f0t[rest] - gd_r * a_r
        quad = torch.where(fin_r & (curv > 0), -gd_r * a_r * a_r / (2 * torch.where(curv > 0, curv, 1.0)), 0.1 * a_r)
        quad = torch.maximum(quad.clamp(min=1e-3 * a_r, max=0.5 * a_r), 0.5 * (l_ + a_r) * (l_ > 0))
        # otherwise Newton on phi' inside the bracket, bisection, or expansion
        usable = fin_r & (ddphi > 0)
        newton = torch.where(usable, a_r - dphi_r / torch.where(usable, ddphi, 1.0), a_r)
        bounded = torch.isfinite(h_)
        width = torch.where(bounded, h_ - l_, 0.0)
        inside = usable & (newton > l_ + 0.01 * width) & (newton < h_ - 0.01 * width)
        step = torch.where(bounded, torch.where(inside, newton, (l_ + h_) / 2),
                           torch.where(usable, newton.clamp(min=2 * a_r, max=10 * a_r), 4 * a_r))
        alpha[idx] = torch.where(arm_r, step, quad)
    failed = torch.nonzero(~done).flatten()
    if failed.numel():  # unchanged: the caller keeps these networks' state
        out[2][failed] = u[failed]
    return out[0], out[1], out[2], out[3], done


def _lbfgs_direction(state, g, it: int, memory: int):
    """``H g`` for the L-BFGS inverse Hessian with initial matrix ``H0 = gamma P``, in the
    compact form of Byrd, Nocedal and Schnabel (1994):
    ``H g = H0 g + S p1 + H0 Y p2`` with ``p2 = -R^-1 S^T g`` and
    ``p1 = R^-T ((D + Y^T H0 Y) R^-1 S^T g - Y^T H0 g)``, R the upper triangle of S^T Y in
    chronological order, D its diagonal. Slots of skipped updates are zero and inert.
    ``state["Pg"]`` holds P g."""
    gamma = state["gamma"][:, None]
    hg = gamma * state["Pg"]
    n_hist = min(it, memory)
    if n_hist == 0:
        return hg
    order = torch.tensor([(it - n_hist + j) % memory for j in range(n_hist)], device=g.device)
    S, PY = state["S"], state["PY"]
    a_all = _bmv(S, g)  # S^T g, every slot
    c_all = _bmv(PY, g)  # (P Y)^T g
    a, c = a_all[:, order], gamma * c_all[:, order]
    sy = state["SY"][:, order][:, :, order]
    ypy = gamma[:, :, None] * state["YPY"][:, order][:, :, order]
    valid = state["valid"][:, order]
    R = torch.triu(sy) + torch.diag_embed((~valid).to(g.dtype))
    Dg = torch.diagonal(sy, dim1=-2, dim2=-1)
    t = torch.linalg.solve_triangular(R, a[:, :, None], upper=True)  # R^-1 S^T g
    rhs = torch.linalg.vecdot(ypy, t.transpose(1, 2))[:, :, None] + Dg[:, :, None] * t - c[:, :, None]
    p1 = torch.linalg.solve_triangular(R.transpose(1, 2), rhs, upper=False).squeeze(-1)
    p2 = -t.squeeze(-1)
    coef1 = torch.zeros_like(a_all)
    coef2 = torch.zeros_like(a_all)
    coef1[:, order] = p1
    coef2[:, order] = gamma * p2
    return hg + _bmv(S, coef1, transpose=True) + _bmv(PY, coef2, transpose=True)


def _lbfgs_update(state, slot: int, good, s_vec, y_vec, py, sy):
    """Store the pair (s, y) (and P y) in ``slot`` where ``good`` (else a zero slot) and
    update the cached products S^T Y, Y^T P Y and the scale gamma = s^T y / y^T P y."""
    if not bool(good.all()):
        zero = torch.zeros((), dtype=s_vec.dtype, device=s_vec.device)
        s_vec = torch.where(good[:, None], s_vec, zero)
        y_vec = torch.where(good[:, None], y_vec, zero)
        py = torch.where(good[:, None], py, zero)
    S, Y, PY = state["S"], state["Y"], state["PY"]
    S[:, slot], Y[:, slot], PY[:, slot] = s_vec, y_vec, py
    state["SY"][:, slot, :] = _bmv(Y, s_vec)
    state["SY"][:, :, slot] = _bmv(S, y_vec)
    ypy = _bmv(Y, py)
    state["YPY"][:, slot, :] = ypy
    state["YPY"][:, :, slot] = ypy
    state["valid"][:, slot] = good
    yy = ypy[:, slot]
    state["gamma"] = torch.where(good, sy / torch.where(good, yy, 1.0), state["gamma"])


def _lbfgs_new_preconditioner(state, pre):
    """Recompute the cached P Y and Y^T P Y after the preconditioner changed."""
    Y = state["Y"]
    state["PY"] = PY = _apply_preconditioner(pre, Y)
    state["YPY"] = torch.stack([_bmv(Y, PY[:, i]) for i in range(Y.shape[1])], dim=2)


def _fit_odir(x, y, weight, lam_, mu_, max_iterations: int, tolerance: float, theta0=None,
              memory: int = LBFGS_MEMORY, refresh: int = PRECONDITIONER_REFRESH):
    """Preconditioned L-BFGS on canonical points for B ODIR problems at once (each on its
    own): inputs x (B, N, K), labels (N,) or (B, N), sample weights (B, N) summing to 1
    (zero for padding), ``lam_``, ``mu_`` (B,) normalised. ``theta0`` (B, K*K + K): start
    (default W = I, b = 0).

    Per iteration: two N x K x K products (the logits' change along the direction, the
    gradient), and every ``refresh`` iterations two more (the preconditioner).
    Returns theta (B, K*K + K), objective, gradient norm, iterations, converged, reasons."""
    bsz, n, k = x.shape
    dev, dt = x.device, x.dtype
    p = k * k + k
    yi = _label_rows(y, bsz)
    if theta0 is None:
        theta0 = torch.cat([torch.eye(k, dtype=dt, device=dev).flatten().expand(bsz, -1),
                            torch.zeros(bsz, k, dtype=dt, device=dev)], dim=-1)
    theta = _odir_canonical(theta0.to(dt), k)
    theta_out = theta.clone()
    f_out = torch.full((bsz,), float("nan"), dtype=dt)
    g_out = torch.full((bsz,), float("nan"), dtype=dt)
    it_out = torch.zeros(bsz, dtype=torch.int64)
    conv_out = torch.zeros(bsz, dtype=torch.bool)
    reasons: list[str | None] = [None] * bsz
    ids = torch.arange(bsz)

    def gradient(xw, yw, ww, lw, mw, th, q):
        W = th[:, : k * k].view(-1, k, k)
        b = th[:, k * k :]
        gu = q * ww[..., None]
        gu.scatter_add_(-1, yw, -ww[..., None])
        off = W - torch.diag_embed(torch.diagonal(W, dim1=-2, dim2=-1))
        gW = _gram(gu, xw) + (2 * lw)[:, None, None] * off
        gb = gu.sum(1) + (2 * mw)[:, None] * b
        reg = lw * (off * off).sum((1, 2)) + mw * (b * b).sum(-1)
        return torch.cat([gW.flatten(1), gb], dim=-1), reg

    def preconditioner(xc, ww, lw, mw, q):
        s = q * (1 - q) * ww[..., None]
        return _preconditioner_from_sums(_gram(s, xc), s.sum(1), lw, mw)

    u = torch.baddbmm(theta[:, None, k * k :], x, theta[:, : k * k].view(bsz, k, k).transpose(1, 2))
    nll_n, e, se = _softmax_nll(u, yi)
    q = e / se[..., None]
    nll = (nll_n * weight).sum(-1)
    g, reg = gradient(x, yi, weight, lam_, mu_, theta, q)
    f = nll + reg
    xcat = torch.cat([x, x * x], dim=-1)
    pre = preconditioner(xcat, weight, lam_, mu_, q)
    work = dict(x=x, xcat=xcat, yi=yi, weight=weight, lam_=lam_, mu_=mu_)
    state = dict(theta=theta, u=u, q=q, f=f, reg=reg, g=g,
                 S=torch.zeros(bsz, memory, p, dtype=dt, device=dev),
                 Y=torch.zeros(bsz, memory, p, dtype=dt, device=dev),
                 PY=torch.zeros(bsz, memory, p, dtype=dt, device=dev),
                 SY=torch.zeros(bsz, memory, memory, dtype=dt, device=dev),
                 YPY=torch.zeros(bsz, memory, memory, dtype=dt, device=dev),
                 valid=torch.zeros(bsz, memory, dtype=torch.bool, device=dev),
                 gamma=torch.ones(bsz, dtype=dt, device=dev),
                 f_hist=f[:, None].repeat(1, STALL_WINDOW + 1),
                 ls_failed=torch.zeros(bsz, dtype=torch.bool, device=dev),
                 Pg=_apply_preconditioner(pre, g))
    it = 0
    while True:
        f, g, f_hist, ls_failed = state["f"], state["g"], state["f_hist"], state["ls_failed"]
        gn = torch.linalg.vector_norm(g, dim=-1)
        bad = ~(torch.isfinite(f) & torch.isfinite(gn))
        conv = (gn < tolerance) & ~bad
        stalled = (f_hist[:, 0] - f_hist[:, -1] <= STALL_RTOL * f_hist[:, -1].abs()) & (it >= STALL_WINDOW)
        stop = bad | conv | stalled | ls_failed | (it >= max_iterations)
        if bool(stop.any()):
            sel = torch.nonzero(stop).flatten()
            cpu_ids = ids[sel.cpu()]
            theta_out[cpu_ids.to(dev)] = state["theta"][sel]
            f_out[cpu_ids] = f[sel].cpu()
            g_out[cpu_ids] = gn[sel].cpu()
            it_out[cpu_ids] = it
            conv_out[cpu_ids] = conv[sel].cpu()
            for i, j in zip(cpu_ids.tolist(), sel.tolist()):
                if bool(bad[j]):
                    reasons[i] = f"objective not finite after {it} iterations"
                elif not bool(conv[j]):
                    why = (" (line search found no decrease)" if bool(ls_failed[j])
                           else " (objective stalled)" if bool(stalled[j]) else "")
                    reasons[i] = f"did not converge{why}: gradient norm {float(gn[j]):.3g} after {it} iterations"
            keep = torch.nonzero(~stop).flatten()
            if keep.numel() == 0:
                break
            ids = ids[keep.cpu()]
            state = {name: t[keep] for name, t in state.items()}
            work = {name: t[keep] for name, t in work.items()}
            pre = tuple(t[keep] for t in pre)
        theta, f, g = state["theta"], state["f"], state["g"]
        lw, mw = work["lam_"], work["mu_"]
        if it > 0 and it % refresh == 0:
            pre = preconditioner(work["xcat"], work["weight"], lw, mw, state["q"])
            _lbfgs_new_preconditioner(state, pre)
            state["Pg"] = _apply_preconditioner(pre, g)
        r = _lbfgs_direction(state, g, it, memory)
        d = _odir_canonical(-r, k)  # canonical points stay canonical along d
        gd = _dot(g, d)
        not_descent = ~(gd < 0)
        if bool(not_descent.any()):  # rounding only: fall back to the preconditioned gradient
            d = torch.where(not_descent[:, None], _odir_canonical(-state["Pg"], k), d)
            gd = _dot(g, d)
        bw = theta.shape[0]
        D, db = d[:, : k * k].view(bw, k, k), d[:, k * k :]
        W, b = theta[:, : k * k].view(bw, k, k), theta[:, k * k :]
        offD = D - torch.diag_embed(torch.diagonal(D, dim1=-2, dim2=-1))
        offW = W - torch.diag_embed(torch.diagonal(W, dim1=-2, dim2=-1))
        r1 = 2 * lw * (offW * offD).sum((1, 2)) + 2 * mw * (b * db).sum(-1)
        r2 = lw * (offD * offD).sum((1, 2)) + mw * (db * db).sum(-1)
        ud = torch.baddbmm(db[:, None, :], work["x"], D.transpose(1, 2))
        a, f_new, u_new, q_new, accepted = _line_search(state["u"], ud, work["yi"], work["weight"], f,
                                                        state["reg"], gd, r1, r2)
        it += 1
        a = torch.where(accepted, a, torch.zeros_like(a))
        theta_new = theta + a[:, None] * d
        if not bool(accepted.all()):  # such a network keeps its point (and stops)
            failed = torch.nonzero(~accepted).flatten()
            q_new[failed] = state["q"][failed]
        g_new, reg_new = gradient(work["x"], work["yi"], work["weight"], lw, mw, theta_new, q_new)
        f_new = torch.where(accepted, f_new, f)
        s_vec = theta_new - theta
        y_vec = g_new - g
        sy = _dot(s_vec, y_vec)
        good = accepted & (sy > 1e-10 * torch.sqrt(_dot(s_vec, s_vec) * _dot(y_vec, y_vec)))
        pg_new = _apply_preconditioner(pre, g_new)
        _lbfgs_update(state, (it - 1) % memory, good, s_vec, y_vec, pg_new - state["Pg"], sy)
        state.update(theta=theta_new, u=u_new, q=q_new, f=f_new, reg=reg_new, g=g_new, Pg=pg_new,
                     f_hist=torch.cat([state["f_hist"][:, 1:], f_new[:, None]], dim=1), ls_failed=~accepted)
    return theta_out, f_out, g_out, it_out, conv_out, reasons


def _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet: bool) -> Fitted:
    z, y, failures = _check_batch(logits_val, labels_val)
    m, n, k = z.shape
    lam_t = _per_network(lam, m, "lam", z.device)
    mu_t = _per_network(mu, m, "mu", z.device)
    with torch.no_grad():
        x = torch.log_softmax(z, dim=-1) if dirichlet else z
        theta, f, gnorm, iterations, converged, reasons = _fit_odir(
            x, y, _uniform_weights(m, n, z), lam_t / (k * (k - 1)), mu_t / k, max_iterations, tolerance)
    failures = [f0 or r for f0, r in zip(failures, reasons)]
    W = _nan_where_unusable(theta[:, : k * k].reshape(m, k, k), failures)
    b = _nan_where_unusable(theta[:, k * k :], failures)
    info = _ms_info(W, b) | {"lambda": lam_t, "mu": mu_t, "iterations": iterations,
                             "converged": converged & _ok(failures), "gradient_norm": gnorm, "objective": f}
    return _ms_fitted(W, b, dirichlet, info, failures)


def fit_matrix_scaling(logits_val, labels_val, lam, mu, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                       tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Matrix scaling with ODIR of M networks, ``softmax(W z + b)`` (recalibration-spec.md,
    "Matrix scaling with ODIR"): logits (M, N, K), shared labels (N,); ``lam``, ``mu``
    scalars or (M,). Minimises ``mean NLL + lam/(K(K-1)) sum_{i!=j} W_ij^2 + mu/K sum_j b_j^2``
    from W = I, b = 0 by preconditioned L-BFGS (module docstring: solver, convergence).

    ``info``: w_norm (Frobenius), w_offdiag_norm, w_diag_mean, b_norm, lambda, mu,
    iterations, converged, gradient_norm, objective.
    """
    return _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet=False)


def fit_dirichlet(logits_val, labels_val, lam, mu, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                  tolerance: float = DEFAULT_TOLERANCE) -> Fitted:
    """Dirichlet calibration with ODIR of M networks (recalibration-spec.md, "Dirichlet
    calibration with ODIR"): matrix scaling with ODIR applied to ``log_softmax(z)``; same
    objective, start, solver and ``info`` as :func:`fit_matrix_scaling`."""
    return _fit_matrix(logits_val, labels_val, lam, mu, max_iterations, tolerance, dirichlet=True)
