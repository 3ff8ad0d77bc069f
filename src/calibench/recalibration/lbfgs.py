"""The solver of matrix scaling and Dirichlet calibration with ODIR (docs/recalibration.md,
"Matrix scaling with ODIR", "Dirichlet calibration with ODIR"), for
:mod:`calibench.recalibration.scaling` and the lambda, mu search
(:mod:`calibench.recalibration.odir_search`).

K^2 + K parameters (10,100 at K = 100), fitted by L-BFGS (memory 20, in the
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

Convergence (docs/recalibration.md, "Common rules";
:func:`calibench.recalibration.batched.convergence`). A network stops as converged when the
L2 norm of the objective's gradient in (W, b) is below ``tolerance`` (default 1e-6, as for
``vs``; at K = 100 the probabilities are then within about 1e-6 of the optimum's). Where it
would otherwise stop unconverged (after ``max_iterations``, when the line search finds no
decrease, or when the objective has not decreased by more than 1e-14 of itself over 5
iterations: float64 rounding), it is converged if its objective has stopped moving:
relative decrease below 1e-10 over the last 20 iterations with a gradient norm below 1e-3
(a weakly regularised fit at K = 100 creeps along flat directions at gradient norms of a
few 1e-6). A rounding-level stall below that gradient norm goes on until the objective
rule can be judged. A fit that reaches the tolerance is never cut short.
"""

from __future__ import annotations

import torch

from calibench.recalibration.batched import (ARMIJO_C1, FLAT_GRADIENT, _bmv, _gram, _label_rows, _softmax_nll,
                                             convergence, objective_history, push_objective)

WOLFE_C2 = 0.9
LINE_SEARCH_TRIALS = 20
LBFGS_MEMORY = 20
PRECONDITIONER_REFRESH = 5
STALL_WINDOW = 5
STALL_RTOL = 1e-14
CHECK_EVERY = 8  # on a GPU: iterations between the host's looks at which networks still run
COMPACT_SHARE = 0.5  # on a GPU: stopped rows leave the batch once at most this share still runs
_STOP_REASONS = {2: " (line search found no decrease)", 3: " (objective stalled)", 4: ""}


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


def _next_trial(a, phi, dphi, ddphi, f0, gd, finite, armijo, lo, hi):
    """The next trial step after ``a`` was refused, given the bracket [lo, hi] updated with it:
    without sufficient decrease, the minimiser of the quadratic through phi(0), phi'(0), phi(a)
    (a tenth of ``a`` if phi is not finite), kept within [a/1000, a/2]; otherwise safeguarded
    Newton on phi' inside the bracket, bisection, or expansion."""
    curv = phi - f0 - gd * a
    quad = torch.where(finite & (curv > 0), -gd * a * a / (2 * torch.where(curv > 0, curv, 1.0)), 0.1 * a)
    quad = torch.maximum(quad.clamp(min=1e-3 * a, max=0.5 * a), 0.5 * (lo + a) * (lo > 0))
    usable = finite & (ddphi > 0)
    newton = torch.where(usable, a - dphi / torch.where(usable, ddphi, 1.0), a)
    bounded = torch.isfinite(hi)
    width = torch.where(bounded, hi - lo, 0.0)
    inside = usable & (newton > lo + 0.01 * width) & (newton < hi - 0.01 * width)
    step = torch.where(bounded, torch.where(inside, newton, (lo + hi) / 2),
                       torch.where(usable, newton.clamp(min=2 * a, max=10 * a), 4 * a))
    return torch.where(armijo, step, quad)


def _line_search(u, ud, yi, weight, f0, reg0, gd, r1, r2, frozen=None):
    """Per-network line search along ``u + a ud`` (batched; each network on its own).

    ``phi(a) = NLL(u + a ud) + reg0 + a r1 + a^2 r2`` (the regulariser is quadratic along the
    line), ``phi(0) = f0``, ``phi'(0) = gd < 0``. A trial costs one softmax of (N, K).
    Accepts ``a`` with ``phi(a) <= f0 + c1 a gd`` (plus a few rounding errors of phi) and
    ``|phi'(a)| <= c2 |gd|`` (strong Wolfe), starting at a = 1. Bracketing: a trial
    without sufficient decrease is followed by the minimiser of the quadratic through
    phi(0), phi'(0), phi(a) (kept within [a/1000, a/2]); otherwise safeguarded Newton on
    phi' inside the bracket, or expansion. If the trials run out, the largest step found
    with sufficient decrease is taken. ``frozen`` (B,): networks that have stopped; they drive
    no trial and are not accepted. Returns a, phi(a), the logits u + a ud, q there (rows not
    accepted: u and q of a trial, for the caller to discard), accepted."""
    bsz = u.shape[0]
    dev, dt = u.device, u.dtype
    alpha = torch.ones(bsz, dtype=dt, device=dev)
    lo = torch.zeros(bsz, dtype=dt, device=dev)  # largest step with sufficient decrease, phi' < 0
    hi = torch.full((bsz,), float("inf"), dtype=dt, device=dev)
    frozen = torch.zeros(bsz, dtype=torch.bool, device=dev) if frozen is None else frozen
    done = frozen.clone()
    ud_y_all = torch.gather(ud, -1, yi).squeeze(-1)
    slack = 16 * torch.finfo(dt).eps * f0.abs()
    for trial in range(LINE_SEARCH_TRIALS + 1):
        last = trial == LINE_SEARCH_TRIALS
        if trial == 0:  # every row (frozen ones too: the batch keeps its shape, no host check)
            todo = torch.arange(bsz, device=dev)
        else:
            todo = torch.nonzero(~done & (lo > 0)).flatten() if last else torch.nonzero(~done).flatten()
            if todo.numel() == 0:
                break
        full = trial == 0 or todo.numel() == bsz
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
            done |= ok
            if bool(done.all()):  # the one host synchronisation of a usual iteration
                return out[0], out[1], out[2], out[3], ok & ~frozen
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
        alpha[idx] = _next_trial(a_r, phi_r, dphi_r, ddphi, f0t[rest], gd_r, fin_r, arm_r, lo[idx], hi[idx])
    return out[0], out[1], out[2], out[3], done & ~frozen


def _line_search_masked(u, ud, yi, weight, f0, reg0, gd, r1, r2, frozen):
    """:func:`_line_search` for a GPU: every trial over the whole batch, the rows that are not
    searching masked (no row selection, which would make the host wait for the device), and one
    look of the host per trial, to end the search once no row is left. Each row takes the same
    trials, steps and verdicts as in :func:`_line_search`."""
    dev, dt = u.device, u.dtype
    bsz = u.shape[0]
    alpha = torch.ones(bsz, dtype=dt, device=dev)
    lo = torch.zeros(bsz, dtype=dt, device=dev)
    hi = torch.full((bsz,), float("inf"), dtype=dt, device=dev)
    done = frozen.clone()
    ud_y = torch.gather(ud, -1, yi).squeeze(-1)
    slack = 16 * torch.finfo(dt).eps * f0.abs()
    c2gd = WOLFE_C2 * gd.abs()
    for trial in range(LINE_SEARCH_TRIALS + 1):
        last = trial == LINE_SEARCH_TRIALS
        todo = ~done & (lo > 0) if last else ~done
        a = lo if last else alpha
        v = torch.addcmul(u, a[:, None, None], ud)
        nll_n, e, se = _softmax_nll(v, yi)
        nll = (nll_n * weight).sum(-1)
        qd = torch.linalg.vecdot(e, ud) / se
        phi = nll + reg0 + a * r1 + a * a * r2
        dphi = ((qd - ud_y) * weight).sum(-1) + r1 + 2 * a * r2
        finite = torch.isfinite(phi) & torch.isfinite(dphi)
        armijo = finite & (phi <= f0 + ARMIJO_C1 * a * gd + slack)
        ok = todo & (armijo if last else armijo & (dphi.abs() <= c2gd))
        q = e / se[..., None]
        if trial == 0:
            out_a, out_phi, out_v, out_q = torch.where(ok, a, 0.0), torch.where(ok, phi, f0), v, q
        else:
            out_a, out_phi = torch.where(ok, a, out_a), torch.where(ok, phi, out_phi)
            out_v = torch.where(ok[:, None, None], v, out_v)
            out_q = torch.where(ok[:, None, None], q, out_q)
        done = done | ok
        rest = todo & ~ok
        if last or not bool(rest.any()):  # the one host synchronisation of a trial
            break
        qdd = torch.linalg.vecdot(e * ud, ud) / se
        ddphi = ((qdd - qd ** 2) * weight).sum(-1) + 2 * r2
        hi = torch.where(rest & (~armijo | (dphi > 0)), a, hi)
        lo = torch.where(rest & armijo & (dphi < 0), a, lo)
        alpha = torch.where(rest, _next_trial(a, phi, dphi, ddphi, f0, gd, finite, armijo, lo, hi), alpha)
    return out_a, out_phi, out_v, out_q, done & ~frozen


def _lbfgs_direction(state, g, it: int, memory: int, order):
    """``H g`` for the L-BFGS inverse Hessian with initial matrix ``H0 = gamma P``, in the
    compact form of Byrd, Nocedal and Schnabel (1994):
    ``H g = H0 g + S p1 + H0 Y p2`` with ``p2 = -R^-1 S^T g`` and
    ``p1 = R^-T ((D + Y^T H0 Y) R^-1 S^T g - Y^T H0 g)``, R the upper triangle of S^T Y in
    chronological order, D its diagonal. Slots of skipped updates are zero and inert.
    ``state["Pg"]`` holds P g; ``order``: the ``min(it, memory)`` slots in chronological order,
    ``(it - n + j) % memory`` for j < n, on g's device."""
    gamma = state["gamma"][:, None]
    hg = gamma * state["Pg"]
    n_hist = min(it, memory)
    if n_hist == 0:
        return hg
    SPY = state["SPY"]  # S and P Y stacked: one pass over them per product
    ac = _bmv(SPY, g)  # S^T g and (P Y)^T g, every slot
    a_all, c_all = ac[:, :memory], ac[:, memory:]
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
    return hg + _bmv(SPY, torch.cat([coef1, coef2], dim=1), transpose=True)


def _lbfgs_update(state, slot: int, good, s_vec, y_vec, py, sy, masked: bool = False):
    """Store the pair (s, y) (and P y) in ``slot`` where ``good`` (else a zero slot) and
    update the cached products S^T Y, Y^T P Y and the scale gamma = s^T y / y^T P y.
    ``masked``: mask without asking the host whether any pair is bad."""
    if masked or not bool(good.all()):
        zero = torch.zeros((), dtype=s_vec.dtype, device=s_vec.device)
        s_vec = torch.where(good[:, None], s_vec, zero)
        y_vec = torch.where(good[:, None], y_vec, zero)
        py = torch.where(good[:, None], py, zero)
    Y, SPY = state["Y"], state["SPY"]
    memory = Y.shape[1]
    SPY[:, slot], Y[:, slot], SPY[:, memory + slot] = s_vec, y_vec, py
    state["SY"][:, slot, :] = _bmv(Y, s_vec)
    state["SY"][:, :, slot] = _bmv(SPY[:, :memory], y_vec)
    ypy = _bmv(Y, py)
    state["YPY"][:, slot, :] = ypy
    state["YPY"][:, :, slot] = ypy
    state["valid"][:, slot] = good
    yy = ypy[:, slot]
    state["gamma"] = torch.where(good, sy / torch.where(good, yy, 1.0), state["gamma"])


def _lbfgs_new_preconditioner(state, pre):
    """Recompute the cached P Y and Y^T P Y after the preconditioner changed."""
    Y = state["Y"]
    memory = Y.shape[1]
    state["SPY"][:, memory:] = PY = _apply_preconditioner(pre, Y)
    if Y.device.type == "cpu":  # per network, as a batch of one computes it
        state["YPY"] = torch.stack([torch.mm(Y[i], PY[i].T) for i in range(Y.shape[0])])
    else:
        state["YPY"] = torch.bmm(Y, PY.transpose(1, 2))


def _fit_odir(x, y, weight, lam_, mu_, max_iterations: int, tolerance: float, theta0=None,
              memory: int = LBFGS_MEMORY, refresh: int = PRECONDITIONER_REFRESH, masked: bool | None = None):
    """Preconditioned L-BFGS on canonical points for B ODIR problems at once (each on its
    own): inputs x (B, N, K), labels (N,) or (B, N), sample weights (B, N) summing to 1
    (zero for padding), ``lam_``, ``mu_`` (B,) normalised. ``theta0`` (B, K*K + K): start
    (default W = I, b = 0).

    Per iteration: two N x K x K products (the logits' change along the direction, the
    gradient, as ``q^T [w x, w]`` less its fixed label part), and every ``refresh`` iterations
    one more (the preconditioner's sums, ``s^T [w x, w, w x^2]``).
    Host synchronisations. ``masked`` (default: on any device but the CPU): a network that stops
    is recorded on the device and frozen in the batch (zero steps); the host looks every
    ``CHECK_EVERY`` iterations (to end, or to drop the stopped rows once at most
    ``COMPACT_SHARE`` still run), and otherwise once per line-search trial
    (:func:`_line_search_masked`: trials over the whole batch, no row selection); the history's
    slot order is made on the device once. 1.4-1.5 looks per iteration on the test problems,
    against about 9 unmasked and the 6 an H200 counted before the line search was masked
    (BENCHMARKS.md). Unmasked (the CPU): a look every iteration and stopped rows dropped at
    once, as a CPU's cost is per row. Both give each network the same iterates;
    the last bits can differ with the batch's composition (tests/test_recalibration_scaling.py).

    Returns theta (B, K*K + K), objective, gradient norm, iterations, converged, converged
    by the objective rule (module docstring), reasons."""
    bsz, n, k = x.shape
    dev, dt = x.device, x.dtype
    p = k * k + k
    yi = _label_rows(y, bsz)
    if theta0 is None:
        theta0 = torch.cat([torch.eye(k, dtype=dt, device=dev).flatten().expand(bsz, -1),
                            torch.zeros(bsz, k, dtype=dt, device=dev)], dim=-1)
    theta = _odir_canonical(theta0.to(dt), k)
    # What each row records where its network stops, on the device (no host transfer per
    # iteration), in the batch's rows; moved to ``out`` (one row per problem) when rows leave it
    record = dict(theta=theta.clone(), f=torch.full((bsz,), float("nan"), dtype=dt, device=dev),
                  g=torch.full((bsz,), float("nan"), dtype=dt, device=dev),
                  it=torch.zeros(bsz, dtype=torch.int64, device=dev),
                  conv=torch.zeros(bsz, dtype=torch.bool, device=dev),
                  flat=torch.zeros(bsz, dtype=torch.bool, device=dev),
                  why=torch.zeros(bsz, dtype=torch.int8, device=dev))  # _STOP_REASONS
    out = {name: t.clone() for name, t in record.items()}
    rows = torch.arange(bsz, device=dev)  # each row's problem (rows leave the batch at compaction)
    # the history's slots in chronological order, made on the device once: ring[s] lists the
    # slots from s on, so iteration it reads ring[0, :it] until the memory is full, then ring[it % memory]
    steps = torch.arange(memory, device=dev)
    ring = (steps[None, :] + steps[:, None]) % memory
    active = torch.ones(bsz, dtype=torch.bool, device=dev)

    # The weighted design [w x, w, w x^2] (B, N, 2K + 1), made once: the gradient's data part is
    # q^T [w x, w] less its constant label part, and the preconditioner's sums are s^T of all of
    # it; each one product, no (B, N, K) temporaries (docs/recalibration.md, "Matrix scaling with ODIR")
    design = torch.cat([x * weight[..., None], weight[..., None], x * x * weight[..., None]], dim=-1)
    # row j: the sum of [w x_n, w_n] over the samples labelled j (a product with the one-hot
    # labels: a scatter-add over samples would add in no fixed order on a GPU)
    labelled = _gram(torch.zeros_like(x).scatter_(-1, yi, 1.0), design[..., : k + 1])

    def gradient(dw, lab, lw, mw, th, q):
        W = th[:, : k * k].view(-1, k, k)
        b = th[:, k * k :]
        data = _gram(q, dw[..., : k + 1]) - lab  # (B, K, K + 1): the NLL's gradient in W, then in b
        off = W - torch.diag_embed(torch.diagonal(W, dim1=-2, dim2=-1))
        gW = data[..., :k] + (2 * lw)[:, None, None] * off
        gb = data[..., k] + (2 * mw)[:, None] * b
        reg = lw * (off * off).sum((1, 2)) + mw * (b * b).sum(-1)
        return torch.cat([gW.flatten(1), gb], dim=-1), reg

    def preconditioner(dw, lw, mw, q):
        sums = _gram(q * (1 - q), dw)  # (B, K, 2K + 1): s^T [x, 1, x^2], s = w q (1 - q)
        return _preconditioner_from_sums(torch.cat([sums[..., :k], sums[..., k + 1 :]], dim=-1), sums[..., k], lw, mw)

    u = torch.baddbmm(theta[:, None, k * k :], x, theta[:, : k * k].view(bsz, k, k).transpose(1, 2))
    nll_n, e, se = _softmax_nll(u, yi)
    q = e / se[..., None]
    nll = (nll_n * weight).sum(-1)
    g, reg = gradient(design, labelled, lam_, mu_, theta, q)
    f = nll + reg
    pre = preconditioner(design, lam_, mu_, q)
    work = dict(x=x, design=design, labelled=labelled, yi=yi, weight=weight, lam_=lam_, mu_=mu_)
    state = dict(theta=theta, u=u, q=q, f=f, reg=reg, g=g,
                 SPY=torch.zeros(bsz, 2 * memory, p, dtype=dt, device=dev),  # S, then P Y
                 Y=torch.zeros(bsz, memory, p, dtype=dt, device=dev),
                 SY=torch.zeros(bsz, memory, memory, dtype=dt, device=dev),
                 YPY=torch.zeros(bsz, memory, memory, dtype=dt, device=dev),
                 valid=torch.zeros(bsz, memory, dtype=torch.bool, device=dev),
                 gamma=torch.ones(bsz, dtype=dt, device=dev),
                 f_hist=objective_history(f),
                 ls_failed=torch.zeros(bsz, dtype=torch.bool, device=dev),
                 Pg=_apply_preconditioner(pre, g))
    # On the CPU a frozen row costs as much as a running one and a look costs nothing: look every
    # iteration and drop stopped rows at once. On a GPU rows are nearly free and looks are not.
    masked = dev.type != "cpu" if masked is None else masked
    check_every, compact_share = (CHECK_EVERY, COMPACT_SHARE) if masked else (1, 1.0)
    it = 0
    while True:
        f, g, f_hist, ls_failed = state["f"], state["g"], state["f_hist"], state["ls_failed"]
        gn = torch.linalg.vector_norm(g, dim=-1)
        bad = ~(torch.isfinite(f) & torch.isfinite(gn))
        _, flat = convergence(gn, f_hist, tolerance)
        stalled = f_hist[:, -STALL_WINDOW - 1] - f_hist[:, -1] <= STALL_RTOL * f_hist[:, -1].abs()
        end = ls_failed | (it >= max_iterations)  # no further iterate: the objective rule decides
        flat = flat & ~bad & (end | stalled)
        conv = ((gn < tolerance) & ~bad) | flat
        # a rounding-level stall ends the fit once the objective rule holds, or far from the optimum
        stop = bad | conv | end | (stalled & (gn >= FLAT_GRADIENT))
        # A network that stops is recorded now and masked from then on (its rows stay in the batch,
        # frozen: zero steps); the host looks only every CHECK_EVERY iterations, to end the fit or
        # drop the stopped rows once they are most of the batch.
        newly = stop & active
        why = torch.where(bad, 1, torch.where(conv, 0, torch.where(ls_failed, 2, torch.where(stalled, 3, 4))))
        for name, value in (("theta", state["theta"]), ("f", f), ("g", gn), ("it", it), ("conv", conv),
                            ("flat", flat), ("why", why.to(torch.int8))):
            record[name] = torch.where(newly[:, None] if name == "theta" else newly, value, record[name])
        active = active & ~stop
        if it % check_every == 0 or it >= max_iterations:
            running = int(active.sum())
            if running == 0:
                break
            if running <= compact_share * active.numel() and running < active.numel():
                keep = torch.nonzero(active).flatten()
                leave = torch.nonzero(~active).flatten()
                for name, t in record.items():
                    out[name][rows[leave]] = t[leave]
                record = {name: t[keep] for name, t in record.items()}
                rows, active = rows[keep], active[keep]
                state = {name: t[keep] for name, t in state.items()}
                work = {name: t[keep] for name, t in work.items()}
                pre = tuple(t[keep] for t in pre)
        theta, f, g = state["theta"], state["f"], state["g"]
        lw, mw = work["lam_"], work["mu_"]
        if it > 0 and it % refresh == 0:
            pre = preconditioner(work["design"], lw, mw, state["q"])
            _lbfgs_new_preconditioner(state, pre)
            state["Pg"] = _apply_preconditioner(pre, g)
        r = _lbfgs_direction(state, g, it, memory, ring[0, :it] if it < memory else ring[it % memory])
        d = _odir_canonical(-r, k)  # canonical points stay canonical along d
        gd = _dot(g, d)
        # not a descent direction (rounding only): the preconditioned gradient instead
        not_descent = ~(gd < 0)
        if masked or bool(not_descent.any()):
            d = torch.where(not_descent[:, None], _odir_canonical(-state["Pg"], k), d)
            gd = torch.where(not_descent, _dot(g, d), gd)
        bw = theta.shape[0]
        D, db = d[:, : k * k].view(bw, k, k), d[:, k * k :]
        W, b = theta[:, : k * k].view(bw, k, k), theta[:, k * k :]
        offD = D - torch.diag_embed(torch.diagonal(D, dim1=-2, dim2=-1))
        offW = W - torch.diag_embed(torch.diagonal(W, dim1=-2, dim2=-1))
        r1 = 2 * lw * (offW * offD).sum((1, 2)) + 2 * mw * (b * db).sum(-1)
        r2 = lw * (offD * offD).sum((1, 2)) + mw * (db * db).sum(-1)
        ud = torch.baddbmm(db[:, None, :], work["x"], D.transpose(1, 2))
        search = _line_search_masked if masked else _line_search
        a, f_new, u_new, q_new, accepted = search(state["u"], ud, work["yi"], work["weight"], f,
                                                  state["reg"], gd, r1, r2, frozen=~active)
        it += 1
        a = torch.where(accepted, a, torch.zeros_like(a))
        theta_new = theta + a[:, None] * d
        # a network without a step (line search failed, or stopped) keeps its point
        if not masked and not bool(accepted.all()):
            u_new = torch.where(accepted[:, None, None], u_new, state["u"])
            q_new = torch.where(accepted[:, None, None], q_new, state["q"])
        g_new, reg_new = gradient(work["design"], work["labelled"], lw, mw, theta_new, q_new)
        if masked:
            # Its gradient and regulariser are restored instead of its (N, K) logits and
            # probabilities: two `where`s over (B, N, K) fewer an iteration. Its u and q then hold
            # a trial's, and go on changing while it is frozen (each line search's first trial
            # and preconditioner refresh still compute on them), but nothing of it is recorded
            # after it stops (ls_failed stops it at the next iteration), and every row is
            # computed on its own.
            g_new = torch.where(accepted[:, None], g_new, g)
            reg_new = torch.where(accepted, reg_new, state["reg"])
        f_new = torch.where(accepted, f_new, f)
        s_vec = theta_new - theta
        y_vec = g_new - g
        sy = _dot(s_vec, y_vec)
        good = accepted & (sy > 1e-10 * torch.sqrt(_dot(s_vec, s_vec) * _dot(y_vec, y_vec)))
        pg_new = _apply_preconditioner(pre, g_new)
        _lbfgs_update(state, (it - 1) % memory, good, s_vec, y_vec, pg_new - state["Pg"], sy, masked)
        state.update(theta=theta_new, u=u_new, q=q_new, f=f_new, reg=reg_new, g=g_new, Pg=pg_new,
                     f_hist=push_objective(state["f_hist"], f_new), ls_failed=~accepted & active)
    for name, t in record.items():
        out[name][rows] = t
    theta_out = out["theta"]
    f_out, g_out, it_out, conv_out, flat_out, why_out = (
        out[name].cpu() for name in ("f", "g", "it", "conv", "flat", "why"))
    reasons: list[str | None] = [None] * bsz
    for i, code in enumerate(why_out.tolist()):
        if code == 1:
            reasons[i] = f"objective not finite after {int(it_out[i])} iterations"
        elif code:
            reasons[i] = (f"did not converge{_STOP_REASONS[code]}: gradient norm {float(g_out[i]):.3g} after "
                          f"{int(it_out[i])} iterations")
    return theta_out, f_out, g_out, it_out, conv_out, flat_out, reasons
