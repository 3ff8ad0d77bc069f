"""Vector scaling, matrix scaling / Dirichlet calibration with ODIR and the lambda/mu search
(docs/recalibration.md: "Vector scaling", "Matrix scaling with ODIR", "Dirichlet calibration
with ODIR", "Choosing lambda and mu"), against dirichletcal 0.5.3 and netcal 1.4.0 and by
their defining properties."""

import collections
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from calibench.recalibration import odir_search
from calibench.recalibration.lbfgs import _odir_canonical, odir_objective
from calibench.recalibration.scaling import (
    fit_dirichlet,
    fit_matrix_scaling,
    fit_vector_scaling,
    matrix_scaling_map,
    vector_scaling_map,
)
from calibench.recalibration.temperature import fit_temperature_scaling
from conftest import random_logits, sample_problem

FITS = {
    "vs": lambda z, y, **kw: fit_vector_scaling(z, y, **kw),
    "ms": lambda z, y, **kw: fit_matrix_scaling(z, y, 0.1, 0.1, **kw),
    "dir": lambda z, y, **kw: fit_dirichlet(z, y, 0.1, 0.1, **kw),
}


def _softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _batch(rng, m, n, k, label_temperature=1.5):
    """M networks on one labelled set: logits differ per network, labels are shared."""
    z0, y = sample_problem(rng, n, k, label_temperature=label_temperature)
    zs = [z0] + [z0 * rng.uniform(0.5, 2.0) + rng.normal(size=(n, k)) for _ in range(m - 1)]
    return torch.tensor(np.stack(zs)), torch.tensor(y)


def _structured(rng, n, k):
    """Overconfident logits with class-dependent biases and scales, labels from a calibrated
    model: the kind of miscalibration matrix scaling is meant to repair."""
    proto = rng.normal(size=(k, 4))
    h = rng.normal(size=(n, 4))
    z_true = 1.5 * h @ proto.T + rng.normal(size=(1, k)) * 0.5
    p = _softmax(z_true)
    y = np.minimum((rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1), k - 1)
    z = z_true * rng.uniform(1.2, 2.5, size=(1, k)) + rng.normal(size=(1, k))
    return z, y


# --------------------------------------------------------------------------------------
# dirichletcal 0.5.3


@pytest.fixture(scope="module")
def dirichletcal_full():
    """dirichletcal's FullDirichletCalibrator, with its JAX objective, gradient and Hessian
    jit-compiled (the same functions; eager JAX takes minutes for these fits).

    Its objective equals the spec's (reg_norm=True divides lambda by K(K-1) and mu by K; the
    off-diagonal of W and the intercepts are penalised; ref_row=False keeps all K rows),
    with three differences, all inactive on the inputs below:
    - the loss clips the fitted probabilities to [eps, 1 - eps] (eps = 2.2e-16), so a
      sample fitted beyond them has no gradient (ours: exact log_softmax);
    - K is the number of classes present in the labels (np.unique), not the number of
      columns: a class absent from the validation part breaks it (ours: fits K columns);
    - its input is log(clip(p, tiny, 1)) of the probabilities (ours: log_softmax(z); equal
      unless a probability underflows).
    Also, fit() with reg_norm=True rescales reg_lambda/reg_mu in place, so an object must
    not be fitted twice. K <= 36 uses its Newton method (gradient L1 norm < 1e-8)."""
    pytest.importorskip("dirichletcal")
    jax = pytest.importorskip("jax")
    from dirichletcal.calib import multinomial
    from dirichletcal.calib.fulldirichlet import FullDirichletCalibrator

    saved = (multinomial._objective, multinomial._gradient, multinomial._hessian)
    static = (4, 5, 8, 9, 10)  # k, method, ref_row, initializer, reg_format
    objective = saved[0]
    multinomial._objective = jax.jit(objective, static_argnums=static)
    multinomial._gradient = jax.jit(jax.grad(objective, argnums=0), static_argnums=static)
    multinomial._hessian = jax.jit(jax.hessian(objective, argnums=0), static_argnums=static)

    def fit(p, y, lam, mu):
        cal = FullDirichletCalibrator(reg_lambda=lam, reg_mu=mu, reg_norm=True, ref_row=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal.fit(p, y)
        return cal

    yield fit
    multinomial._objective, multinomial._gradient, multinomial._hessian = saved


@pytest.mark.parametrize("k, n, kind, pairs", [
    (3, 300, "random", [(1e-2, 1e-2), (1.0, 0.1), (10.0, 10.0)]),
    (10, 400, "structured", [(0.1, 0.1), (1.0, 10.0)]),
])
def test_dirichlet_matches_dirichletcal(dirichletcal_full, k, n, kind, pairs):
    rng = np.random.default_rng(k)
    if kind == "random":
        z, y = sample_problem(rng, n, k, label_temperature=2.0, scale=1.5)
    else:
        z, y = _structured(rng, n, k)
    y[:k] = np.arange(k)  # every class present (dirichletcal's K is the number present)
    lp = torch.log_softmax(torch.tensor(z), dim=-1)
    p = lp.exp().numpy()
    for lam, mu in pairs:
        theirs = dirichletcal_full(p, y, lam, mu)
        p_theirs = theirs.predict_proba(p)
        eps = np.finfo(np.float64).eps
        assert eps < p_theirs[np.arange(n), y].min() and p_theirs.max() < 1 - eps  # no clipping
        ours = fit_dirichlet(torch.tensor(z)[None], torch.tensor(y), lam, mu)
        assert ours.failures == [None]
        p_ours = ours.probs(torch.tensor(z)[None])[0].numpy()
        np.testing.assert_allclose(p_ours, p_theirs, atol=1e-4, rtol=0)
        # the same objective: ours is at least as low as theirs at their solution
        lam_ = torch.tensor([lam / (k * (k - 1))], dtype=torch.float64)
        mu_ = torch.tensor([mu / k], dtype=torch.float64)
        w = torch.full((1, n), 1.0 / n, dtype=torch.float64)
        theta_theirs = torch.tensor(np.concatenate([theirs.weights[:, :-1].ravel(), theirs.weights[:, -1]]))[None]
        theta_ours = torch.cat([ours.params["W"].flatten(1), ours.params["b"]], dim=-1)
        f_theirs = odir_objective(lp[None], torch.tensor(y), w, lam_, mu_, theta_theirs)[0]
        f_ours = odir_objective(lp[None], torch.tensor(y), w, lam_, mu_, theta_ours)[0]
        assert float(f_ours) <= float(f_theirs) + 1e-10
        assert abs(float(ours.info["objective"][0]) - float(f_ours)) < 1e-12


# --------------------------------------------------------------------------------------
# netcal 1.4.0


@pytest.fixture(scope="module")
def netcal_scaling():
    return pytest.importorskip("netcal.scaling")


def _netcal_fit(cls, p, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = cls(method="mle", **kw)
        cal.fit(p, y, tensorboard=False)
        return cal, cal.transform(p)


def test_vector_scaling_equals_netcal_on_log_probabilities(netcal_scaling):
    """netcal's vector scaling (LogisticCalibration, temperature_only=False) fits
    softmax(w * log p + b) to probabilities: ours on logits that are already
    log-probabilities is the same model (netcal minimises with a finite-difference BFGS,
    hence the 1e-4)."""
    rng = np.random.default_rng(0)
    z, y = sample_problem(rng, 600, 5, label_temperature=1.5)
    lp = torch.log_softmax(torch.tensor(z), dim=-1)
    cal, q_netcal = _netcal_fit(netcal_scaling.LogisticCalibration, lp.exp().numpy(), y, temperature_only=False)
    ours = fit_vector_scaling(lp[None], torch.tensor(y))
    np.testing.assert_allclose(ours.probs(lp[None])[0].numpy(), q_netcal, atol=1e-4, rtol=0)
    np.testing.assert_allclose(ours.params["w"][0].numpy(), cal.weights, atol=1e-4)
    b = ours.params["b"][0].numpy()
    np.testing.assert_allclose(b - b.mean(), cal.intercept - cal.intercept.mean(), atol=1e-4)


def test_vector_scaling_on_raw_logits_differs_from_netcal(netcal_scaling):
    """The spec's vs acts on the raw logits (docs/recalibration.md, "Vector scaling"): it is
    not invariant to a per-sample offset of the logits (w * (z + c) = w * z + c w), netcal's
    log-probability input is. With offsets the two fits differ; without them they agree."""
    rng = np.random.default_rng(1)
    z, y = sample_problem(rng, 600, 5, label_temperature=1.5)
    z_off = z + rng.normal(size=(600, 1)) * 5.0
    p = _softmax(z_off)  # the same probabilities as softmax(z)
    _, q_netcal = _netcal_fit(netcal_scaling.LogisticCalibration, p, y, temperature_only=False)
    ours_raw = fit_vector_scaling(torch.tensor(z_off)[None], torch.tensor(y))
    q_raw = ours_raw.probs(torch.tensor(z_off)[None])[0].numpy()
    assert np.abs(q_raw - q_netcal).max() > 1e-2
    # netcal sees only probabilities: the offsets change nothing for it
    _, q_netcal_plain = _netcal_fit(netcal_scaling.LogisticCalibration, _softmax(z), y, temperature_only=False)
    np.testing.assert_allclose(q_netcal, q_netcal_plain, atol=1e-5)
    # ours on log_softmax(z_off) is netcal's model again
    lp = torch.log_softmax(torch.tensor(z_off), dim=-1)[None]
    np.testing.assert_allclose(fit_vector_scaling(lp, torch.tensor(y)).probs(lp)[0].numpy(), q_netcal, atol=1e-4)


def test_temperature_scaling_is_vector_scaling_with_equal_weights(netcal_scaling):
    """Temperature scaling is vs restricted to w = 1/T, b = 0, and equals netcal's
    TemperatureScaling (a single weight on log p: shift-invariant, so raw logits agree)."""
    rng = np.random.default_rng(2)
    z, y = sample_problem(rng, 600, 5, label_temperature=1.5)
    zt = torch.tensor(z)[None]
    post = fit_temperature_scaling(zt, torch.tensor(y))
    t = float(post.info["temperature"][0])
    as_vs = vector_scaling_map(torch.full((1, 5), 1.0 / t, dtype=torch.float64), torch.zeros(1, 5))
    np.testing.assert_allclose(as_vs.probs(zt).numpy(), post.probs(zt).numpy(), atol=1e-12, rtol=0)
    _, q_netcal = _netcal_fit(netcal_scaling.TemperatureScaling, _softmax(z), y)
    np.testing.assert_allclose(post.probs(zt)[0].numpy(), q_netcal, atol=1e-5, rtol=0)
    assert post.info["converged"][0] == 1 and 1 <= post.info["iterations"][0] < 100, post.info


def test_temperature_info_counts_newton_steps_per_network():
    """Each network reports its own Newton steps; one pinned at a bound of [0.05, 20] takes none."""
    rng = np.random.default_rng(3)
    z, y = sample_problem(rng, 400, 4, label_temperature=2.0)
    pinned = np.zeros_like(z)
    pinned[np.arange(len(y)), y] = 50.0  # all correct with a margin: T = 0.05
    post = fit_temperature_scaling(torch.tensor(np.stack([z, pinned])), torch.tensor(y))
    assert post.info["temperature"][1] == pytest.approx(0.05)
    assert post.info["iterations"][0] >= 1 and post.info["iterations"][1] == 0
    assert post.failures == [None, None] and post.info["converged"].tolist() == [1.0, 1.0]


# --------------------------------------------------------------------------------------
# properties


@pytest.mark.parametrize("method", ["vs", "ms", "dir"])
def test_rows_sum_to_one_and_info(method):
    rng = np.random.default_rng(3)
    z, y = _batch(rng, 2, 300, 6)
    fitted = FITS[method](z, y)
    assert fitted.method == method and fitted.failures == [None, None]
    z_test = torch.tensor(np.stack([random_logits(rng, 200, 6), random_logits(rng, 200, 6)]))
    p = fitted.probs(z_test)
    assert torch.isfinite(p).all()
    assert (p.sum(-1) - 1).abs().max() < 1e-12
    keys = {"vs": {"w_norm", "b_norm", "w_mean"},
            "ms": {"w_norm", "w_offdiag_norm", "w_diag_mean", "b_norm", "lambda", "mu"}}[
        "vs" if method == "vs" else "ms"] | {"iterations", "converged", "gradient_norm"}
    assert keys <= set(fitted.info)
    for v in fitted.info.values():
        assert v.shape == (2,) and v.dtype == np.float64
    assert (fitted.info["converged"] == 1).all() and (fitted.info["gradient_norm"] < 1e-6).all()


def test_identity_parameters_give_the_softmax():
    rng = np.random.default_rng(4)
    z = torch.tensor(np.stack([random_logits(rng, 100, 7), random_logits(rng, 100, 7)]))
    p = torch.softmax(z, dim=-1)
    maps = [vector_scaling_map(torch.ones(2, 7), torch.zeros(2, 7)),
            matrix_scaling_map(torch.eye(7).expand(2, 7, 7), torch.zeros(2, 7)),
            matrix_scaling_map(torch.eye(7), torch.zeros(7), dirichlet=True)]
    for i, fitted in enumerate(maps):
        q = fitted.probs(z if i < 2 else z[:1])
        torch.testing.assert_close(q, p[: q.shape[0]], atol=1e-14, rtol=0)


def test_vector_scaling_recovers_a_known_map():
    """Labels drawn from softmax(w* z + b*): the fit finds w* and b* up to b's shift."""
    rng = np.random.default_rng(5)
    n, k = 40000, 4
    z = rng.normal(size=(n, k)) * 2.0
    w_true = np.array([0.5, 1.0, 1.5, 0.8])
    b_true = np.array([0.3, -0.2, 0.0, 0.6])
    p = _softmax(w_true * z + b_true)
    y = np.minimum((rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1), k - 1)
    fitted = fit_vector_scaling(torch.tensor(z)[None], torch.tensor(y))
    w = fitted.params["w"][0].numpy()
    b = fitted.params["b"][0].numpy()
    np.testing.assert_allclose(w, w_true, atol=0.05)
    np.testing.assert_allclose(b - b.mean(), b_true - b_true.mean(), atol=0.05)


def test_odir_canonical_keeps_the_probabilities_and_lowers_the_regulariser():
    rng = np.random.default_rng(6)
    k = 5
    theta = torch.tensor(rng.normal(size=(2, k * k + k)))
    canon = _odir_canonical(theta, k)
    torch.testing.assert_close(_odir_canonical(canon, k), canon, atol=1e-14, rtol=0)
    z = torch.tensor(rng.normal(size=(2, 50, k)))
    y = torch.tensor(rng.integers(0, k, 50))
    w = torch.full((2, 50), 1 / 50, dtype=torch.float64)
    lam_, mu_ = torch.tensor([0.3, 0.0]), torch.tensor([0.2, 0.1])
    f, _ = odir_objective(z, y, w, lam_, mu_, theta)
    f_c, g_c = odir_objective(z, y, w, lam_, mu_, canon)
    assert (f_c <= f + 1e-12).all()
    maps = [matrix_scaling_map(t[:, : k * k].reshape(2, k, k), t[:, k * k :]) for t in (theta, canon)]
    torch.testing.assert_close(maps[0].probs(z), maps[1].probs(z), atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", ["vs", "ms", "dir"])
def test_constant_logits_give_finite_constant_outputs(method):
    """A network whose logits do not depend on the image (docs/recalibration.md, "Common
    rules"), next to an ordinary one; with and without a class absent from the labels."""
    rng = np.random.default_rng(7)
    n, k = 200, 5
    ordinary, y = sample_problem(rng, n, k)
    constant = np.tile(rng.normal(size=(1, k)), (n, 1))
    for labels in (y, np.where(y == 2, 0, y)):  # the second: class 2 absent
        fitted = FITS[method](torch.tensor(np.stack([constant, ordinary])), torch.tensor(labels))
        p = fitted.probs(torch.tensor(np.stack([constant, random_logits(rng, n, k)])))
        assert torch.isfinite(p).all()
        assert (p[0] - p[0, :1]).abs().max() < 1e-12  # all rows equal
        assert fitted.failures == [None, None]
        freq = np.bincount(labels, minlength=k) / n
        np.testing.assert_allclose(p[0, 0].numpy(), freq, atol=1e-5)  # the NLL optimum


@pytest.mark.parametrize("method", ["vs", "ms", "dir"])
def test_batched_equals_one_at_a_time(method):
    rng = np.random.default_rng(8)
    z, y = _batch(rng, 3, 250, 6)
    together = FITS[method](z, y)
    for i in range(3):
        alone = FITS[method](z[i : i + 1], y)
        for name, value in together.params.items():
            torch.testing.assert_close(value[i : i + 1], alone.params[name], atol=1e-9, rtol=0)
        assert together.info["iterations"][i] == alone.info["iterations"][0]


def test_per_network_lambda_mu():
    rng = np.random.default_rng(9)
    z, y = _batch(rng, 2, 200, 4)
    both = fit_matrix_scaling(z, y, [0.01, 10.0], [1.0, 0.0])
    second = fit_matrix_scaling(z[1:], y, 10.0, 0.0)
    torch.testing.assert_close(both.params["W"][1:], second.params["W"], atol=1e-9, rtol=0)
    np.testing.assert_array_equal(both.info["lambda"], [0.01, 10.0])
    with pytest.raises(ValueError, match="lam"):
        fit_matrix_scaling(z, y, [-1.0, 1.0], 0.0)


@pytest.mark.parametrize("method", ["vs", "ms", "dir"])
def test_failures_are_flagged_per_network(method):
    """Non-finite logits and a non-finite objective are flagged, with NaN parameters, while
    the other networks are fitted as on their own (docs/recalibration.md, "Common rules")."""
    rng = np.random.default_rng(10)
    z, y = _batch(rng, 3, 200, 5)
    z = z.clone()
    z[0, 3, 1] = float("nan")
    z[2] = z[2] * 1e306  # finite, but the objective overflows
    fitted = FITS[method](z, y)
    assert fitted.failures[0] == "validation logits are not finite"
    assert fitted.failures[1] is None
    assert "not finite" in fitted.failures[2]
    assert fitted.info["converged"].tolist() == [0.0, 1.0, 0.0]
    alone = FITS[method](z[1:2], y)
    for name, value in fitted.params.items():
        assert torch.isnan(value[0]).all() and torch.isnan(value[2]).all()
        torch.testing.assert_close(value[1:2], alone.params[name], atol=1e-9, rtol=0)


@pytest.mark.parametrize("method", ["vs", "ms", "dir"])
def test_not_converged_is_flagged(method):
    """A network stopped by max_iterations is flagged (and keeps its last iterate) while a
    network that converges within them, in the same batch, is not."""
    rng = np.random.default_rng(11)
    n, k = 200, 5
    ordinary, y = sample_problem(rng, n, k, label_temperature=2.0)
    constant = np.tile(rng.normal(size=(1, k)), (n, 1))
    z = torch.tensor(np.stack([constant, ordinary]))
    fast = int(FITS[method](z[:1], torch.tensor(y)).info["iterations"][0])
    slow = int(FITS[method](z[1:], torch.tensor(y)).info["iterations"][0])
    assert slow > fast + 1
    fitted = FITS[method](z, torch.tensor(y), max_iterations=fast + 1)
    assert fitted.failures[0] is None and fitted.info["converged"].tolist() == [1.0, 0.0]
    reason = fitted.failures[1]
    assert reason.startswith("did not converge: gradient norm ") and reason.endswith(f"after {fast + 1} iterations")
    assert fitted.info["iterations"].tolist() == [fast, fast + 1]
    assert torch.isfinite(fitted.probs(z)).all()  # the last iterate is kept


# --------------------------------------------------------------------------------------
# the lambda, mu search


def test_search_picks_the_best_grid_pair():
    """Against a brute-force loop: every (lambda, mu) and fold fitted with the public fit,
    from W = I (the search batches networks x folds and warm-starts along the grid)."""
    rng = np.random.default_rng(12)
    m, n, k, folds = 2, 80, 3, 3
    z, y = _batch(rng, m, n, k, label_temperature=2.0)
    for method, fit, grid in (("ms", fit_matrix_scaling, (1e-1, 1e1)), ("dir", fit_dirichlet, (1.0, 1e2))):
        result = odir_search.search_odir(z, y, method, grid=grid, folds=folds, seed=3)
        assign = odir_search.fold_assignment(n, folds, 3)
        brute = np.zeros((len(grid), len(grid)))
        for i, lam in enumerate(grid):
            for j, mu in enumerate(grid):
                for f in range(folds):
                    tr, te = np.nonzero(assign != f)[0], np.nonzero(assign == f)[0]
                    lp = fit(z[:, tr], y[tr], lam, mu).log_probs(z[:, te])
                    brute[i, j] += float(-lp[:, torch.arange(len(te)), y[te]].mean(-1).sum())
        brute /= m * folds
        np.testing.assert_allclose(result["mean_nll"], brute, rtol=1e-6)
        bi, bj = np.unravel_index(np.argmin(brute), brute.shape)
        assert result["best_index"] == (bi, bj)
        assert (result["lambda"], result["mu"]) == (grid[bi], grid[bj])
        assert result["nll"] == pytest.approx(brute.min(), rel=1e-6)
        assert result["not_converged"].sum() == 0 and result["iterations"].shape == brute.shape
        assert not result["worse_than_identity"] and result["reason"] is None
        assert result["nll"] <= result["identity_nll"]
        # one network's folds a call (a GPU's chunk when its memory holds no more): the same search
        split = odir_search.search_odir(z, y, method, grid=grid, folds=folds, seed=3, chunk=folds)
        np.testing.assert_allclose(split["mean_nll"], result["mean_nll"], rtol=1e-12)
        assert split["best_index"] == result["best_index"] and (split["iterations"] == result["iterations"]).all()


def _identity_cv_nll(z, y, assign):
    """Held-out NLL of the network's own softmax, averaged over folds then networks (numpy)."""
    z = np.asarray(z, dtype=np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = -logp[:, np.arange(len(y)), np.asarray(y)]
    return float(np.mean([picked[:, assign == f].mean(-1) for f in range(assign.max() + 1)]))


def test_search_keeps_its_best_pair_when_it_is_worse_than_identity_and_flags_it():
    """docs/recalibration.md ("Choosing lambda and mu"): 30 calibrated samples of 10 classes (4
    per class and fold to fit the free diagonal of W): on the default grid every pair overfits,
    the best (lambda=1e3, mu=1e1) is worse than no recalibration on the same folds; the search
    still takes it (never the "strongest pair", whose CV NLL is worse still) and flags it."""
    z, y = sample_problem(np.random.default_rng(0), 30, 10, label_temperature=1.0)
    result = odir_search.search_odir(torch.tensor(z)[None], torch.tensor(y), "ms", folds=5, seed=0)
    assert result["grid"] == list(odir_search.DEFAULT_GRID)
    identity = _identity_cv_nll(z[None], y, odir_search.fold_assignment(30, 5, 0))
    assert result["identity_nll"] == pytest.approx(identity, rel=1e-12)
    best = np.unravel_index(np.argmin(result["mean_nll"]), result["mean_nll"].shape)
    assert (best[0], best[1]) == (5, 4) and result["mean_nll"][best] > identity + 1.0
    assert result["mean_nll"][5, 5] > result["mean_nll"][best]  # the withdrawn fallback's pair: worse
    assert (result["lambda"], result["mu"], result["best_index"]) == (1e3, 1e1, (5, 4))
    assert result["nll"] == result["mean_nll"][5, 4] and result["worse_than_identity"] is True
    assert "worse than no recalibration" in result["reason"] and "lambda=1000, mu=10;" in result["reason"]


def test_search_folds_ties_and_exclusions():
    assign = odir_search.fold_assignment(23, 5, 0)
    assert sorted(np.bincount(assign).tolist()) == [4, 4, 5, 5, 5]
    np.testing.assert_array_equal(assign, odir_search.fold_assignment(23, 5, 0))
    # ties: the first pair in grid order (lambda outer, mu inner); NaN never wins
    table = np.array([[3.0, np.nan, 2.0], [2.0, 2.5, 2.0], [np.nan, 2.0, 4.0]])
    assert odir_search.best_pair(table) == (0, 2)
    rng = np.random.default_rng(13)
    z, y = _batch(rng, 3, 60, 3)
    z = z.clone()
    z[1, 0, 0] = float("inf")
    result = odir_search.search_odir(z, y, "ms", grid=(1e-2, 1.0), folds=3)
    assert result["excluded"] == [1] and result["networks"] == [0, 2]
    assert result["mean_nll"].shape == (2, 2) and np.isfinite(result["mean_nll"]).all()
    with pytest.raises(ValueError, match="method"):
        odir_search.search_odir(z, y, "vs")


def test_fit_stage_accepts_numpy_arrays_for_every_stage():
    """Issue 25 item 9: ``fit_stage("post", ...)`` took only tensors (AttributeError on
    ``labels.expand``); every stage now gives the same fit from arrays as from tensors."""
    from calibench.recalibration import fit_stage

    z, y = _batch(np.random.default_rng(21), 2, 120, 4)
    options = {"ms": {"lambda": 0.1, "mu": 0.1}, "dir": {"lambda": 0.1, "mu": 0.1}}
    for stage in ("post", "vs", "ms", "dir", "iso", "hist", "spline"):
        from_arrays = fit_stage(stage, z.numpy(), y.numpy(), options)
        from_tensors = fit_stage(stage, z, y, options)
        np.testing.assert_array_equal(from_arrays.probs(z).numpy(), from_tensors.probs(z).numpy(), err_msg=stage)
    post = fit_stage("post", z.numpy(), y.numpy())
    assert post.info["temperature"].tolist() == fit_temperature_scaling(z, y).info["temperature"].tolist()


def _odir_batch(k: int, n: int, b: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, k, generator=g, dtype=torch.float64) * torch.linspace(0.3, 5, b, dtype=torch.float64)[:, None, None]
    y = torch.randint(0, k, (n,), generator=g)
    lam = torch.logspace(-4, 2, b, dtype=torch.float64) / (k * (k - 1))  # fits of very different lengths
    return x, y, torch.full((b, n), 1.0 / n, dtype=torch.float64), lam, lam * (k - 1)


class _HostLooks(TorchDispatchMode):
    """Counts what makes a GPU's host wait for the device, by the operators the CPU runs
    for it: a tensor's value read (``item``, ``bool``, ``int``), ``nonzero`` and boolean-mask
    indexing (their output's size is on the device), and tensors made from host data
    (``torch.tensor(list)``: a copy to the device). Also every operator (a kernel launch or
    a dispatch on a GPU)."""

    def __init__(self):
        super().__init__()
        self.looks = collections.Counter()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops += 1
        if name in ("_local_scalar_dense", "nonzero", "masked_select", "lift_fresh"):
            self.looks[name] += 1
        elif name in ("index", "index_put", "index_put_") and any(
                t is not None and t.dtype == torch.bool for t in args[1]):
            self.looks[f"{name} by mask"] += 1
        return func(*args, **(kwargs or {}))


class _FullPasses(TorchDispatchMode):
    """Memory traffic over (B, N, K) arrays, in passes: each operator's tensor inputs and outputs
    of at least half that size, one pass each (views read nothing; gather and in-place scatters
    touch (B, N) elements; an out-of-place scatter copies its input: two)."""

    _VIEWS = {"view", "_unsafe_view", "expand", "slice", "select", "transpose", "t", "unsqueeze", "squeeze",
              "as_strided", "detach", "alias"}

    def __init__(self, full: int):
        super().__init__()
        self.full, self.passes = full, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in self._VIEWS or name in ("gather", "scatter_", "scatter_add_"):
            return out
        big = [t for t in torch.utils._pytree.tree_leaves((args, kwargs, out))
               if isinstance(t, torch.Tensor) and 2 * t.numel() >= self.full]
        if name == "scatter":
            big = big[:1] * 2
        self.passes[name] += sum(t.numel() for t in big) / self.full
        return out


def test_an_odir_iteration_on_the_gpus_schedule_makes_at_most_30_passes_over_the_batch():
    """With 200 networks per call the part of an L-BFGS iteration that grows with the batch is its
    passes over the (B, N, K) arrays (BENCHMARKS.md, "The ODIR iteration's memory passes"): the gradient is one product
    with the fixed weighted design, the NLL's other-class sum zeroes the label entry in place,
    and a masked iteration keeps no copy of the logits and probabilities of networks without a
    step. Counted on the masked path (the GPU's) run on the CPU, K = 40, eight fits of 11 to 16
    iterations: 28.0 an iteration, 39.9 before (K = 100, 38 to 400 iterations: 20.2, 29.2)."""
    from calibench.recalibration import lbfgs

    x, y, w, lam, mu = _odir_batch(40, 2000, 8, seed=3)
    with _FullPasses(x.numel()) as counter:
        result = lbfgs._fit_odir(x, y, w, lam, mu, 400, 1e-6, masked=True)
    iterations = int(result[3].max())
    assert bool(result[4].all()) and iterations >= 10
    per_iteration = sum(counter.passes.values()) / iterations
    assert per_iteration <= 30, (round(per_iteration, 2), counter.passes)


@pytest.mark.parametrize("k", [10, 40])
def test_masked_lbfgs_takes_the_unmasked_iterates_with_a_look_per_iteration(k):
    """The GPU's schedule (stopped networks frozen in the batch, the host looking every
    CHECK_EVERY iterations, line-search trials over the whole batch) run on the CPU: the same
    iterations, verdicts and reasons as the CPU's (a look every iteration, stopped rows dropped),
    parameters within 1e-12; host looks (what synchronises a GPU: value reads, nonzero, mask
    indexing, copies from the host) at most 1.75 per iteration: one per line-search trial and one
    every CHECK_EVERY iterations. The H200 measured 6 per iteration before the line search was
    masked (BENCHMARKS.md, "GPU session 2026-11-27, second")."""
    from calibench.recalibration import lbfgs

    x, y, w, lam, mu = _odir_batch(k, 300, 10, seed=k)
    results, per_iteration, looks = {}, {}, {}
    for masked in (False, True):
        with _HostLooks() as counter:
            results[masked] = lbfgs._fit_odir(x, y, w, lam, mu, 400, 1e-6, masked=masked)
        looks[masked] = counter.looks
        per_iteration[masked] = sum(counter.looks.values()) / int(results[masked][3].max())
    (t0, f0, _, i0, c0, l0, r0), (t1, f1, _, i1, c1, l1, r1) = results[False], results[True]
    assert torch.equal(i0, i1) and torch.equal(c0, c1) and torch.equal(l0, l1) and r0 == r1
    assert int(i0.min()) < int(i0.max())  # some networks stop before others: frozen, then dropped
    assert torch.allclose(t0, t1, rtol=0, atol=1e-12) and torch.allclose(f0, f1, rtol=1e-13, atol=0)
    # masked: value reads only (no mask indexing, no copy from the host in the loop), one per
    # line-search trial and one every CHECK_EVERY iterations, and two nonzero per compaction
    # (each at least halves the batch: at most 4 for 10 networks)
    assert set(looks[True]) <= {"_local_scalar_dense", "nonzero"}, looks[True]
    assert looks[True]["nonzero"] <= 8, looks[True]
    assert per_iteration[True] <= 1.75, per_iteration  # measured 1.50 at K = 10, 1.37 at K = 40
    # unmasked (the CPU's): also the stop test, descent, step and update checks and mask
    # indexing (measured 9.2 and 9.8)
    assert per_iteration[False] > 3, per_iteration
