"""The fits' common rules (docs/recalibration.md, "Common rules"): convergence by the gradient
or by an objective that has stopped moving, and the flags of fits on too little data, from
the numeric rule through the measurement to the wide table's columns."""

import numpy as np
import pytest
import torch

from calibench.measure.stages import measure_stages_batch, split_indices
from calibench.recalibration.base import underdetermined
from calibench.recalibration.batched import (FLAT_GRADIENT, FLAT_RTOL, FLAT_WINDOW, convergence, objective_history,
                                             push_objective)
from calibench.recalibration.scaling import fit_dirichlet, fit_vector_scaling
from calibench.results import shards, tables
from conftest import sample_problem

DIR = {"dir": {"lambda": 0.1, "mu": 0.1}, "max_iterations": 1000}


# ---------------------------------------------------------------- the rule on arrays

def _history(values):
    hist = objective_history(torch.tensor([values[0]], dtype=torch.float64))
    for v in values[1:]:
        hist = push_objective(hist, torch.tensor([v], dtype=torch.float64))
    return hist


def test_convergence_by_gradient_or_by_a_flat_objective():
    f = 0.97
    flat = _history([f * (1 + 0.5 * FLAT_RTOL * (FLAT_WINDOW - i) / FLAT_WINDOW) for i in range(FLAT_WINDOW + 1)])
    moving = _history([f * (1 + 2 * FLAT_RTOL * (FLAT_WINDOW - i) / FLAT_WINDOW) for i in range(FLAT_WINDOW + 1)])
    short = _history([f] * FLAT_WINDOW)  # 19 iterations: the window is not there yet

    def judge(gn, hist, tolerance=1e-6):
        conv, by_objective = convergence(torch.tensor([gn], dtype=torch.float64), hist, tolerance)
        return bool(conv[0]), bool(by_objective[0])

    assert judge(2.66e-6, flat) == (True, True)  # the mini run's Dirichlet fits: at their optimum
    assert judge(2.66e-6, moving) == (False, False)  # still decreasing by more than 1e-10 over 20
    assert judge(2.66e-6, short) == (False, False)
    assert judge(0.5 * FLAT_GRADIENT, flat) == (True, True)
    assert judge(FLAT_GRADIENT, flat) == (False, False)  # a flat objective far from the optimum
    assert judge(9e-7, moving) == (True, False)  # the gradient rule alone
    assert judge(9e-7, flat) == (True, False)


# ---------------------------------------------------------------- the solvers

def _stall_problem():
    """K = 100 classes, 60 validation samples (the mini benchmark's CIFAR-100 split), logits
    near a constant vector: with lambda = mu = 0.1 the Dirichlet fit creeps along flat
    directions and reaches 1,000 iterations at a gradient norm of about 2e-6."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(1, 100)) * 3
    z = base + 0.05 * rng.normal(size=(60, 4)) @ rng.normal(size=(4, 100))
    return z, rng.integers(0, 100, 60)


def test_a_fit_stalled_at_its_optimum_is_converged():
    z, y = _stall_problem()
    fitted = fit_dirichlet(torch.tensor(z)[None], torch.tensor(y), 0.1, 0.1, max_iterations=1000)
    gn = fitted.info["gradient_norm"][0]
    assert fitted.info["iterations"][0] == 1000 and 1e-6 < gn < 1e-5  # the tolerance is never reached
    assert fitted.failures == [None]
    assert fitted.info["converged"][0] == 1 and fitted.info["converged_by_objective"][0] == 1
    assert torch.isfinite(fitted.probs(torch.tensor(z)[None])).all()


def test_a_fit_far_from_its_optimum_at_the_limit_is_not_converged():
    z, y = _stall_problem()
    fitted = fit_dirichlet(torch.tensor(z)[None], torch.tensor(y), 0.1, 0.1, max_iterations=30)
    assert fitted.info["iterations"][0] == 30 and fitted.info["gradient_norm"][0] > 1e-5
    assert fitted.info["converged"][0] == 0 and fitted.info["converged_by_objective"][0] == 0
    assert fitted.failures[0].startswith("did not converge: gradient norm ")


def test_a_fit_that_reaches_the_tolerance_is_not_cut_short():
    """The objective rule is judged only where a fit would stop unconverged: with an
    unreachable tolerance, vector scaling runs to the limit and is converged by the objective
    there; with the spec's tolerance it stops earlier, by the gradient."""
    rng = np.random.default_rng(2)
    z, y = sample_problem(rng, 300, 5)
    z, y = torch.tensor(z)[None], torch.tensor(y)
    usual = fit_vector_scaling(z, y)
    assert usual.info["converged"][0] == 1 and usual.info["converged_by_objective"][0] == 0
    assert usual.info["iterations"][0] < 40
    tight = fit_vector_scaling(z, y, tolerance=0.0, max_iterations=40)
    assert tight.failures == [None] and tight.info["converged_by_objective"][0] == 1
    assert tight.info["iterations"][0] >= FLAT_WINDOW
    torch.testing.assert_close(tight.params["w"], usual.params["w"], atol=1e-6, rtol=0)


def _around_validation(z_val, y_val, n, rng):
    """Logits (n, K) and labels whose validation part (docs/metrics.md's split) is the given one."""
    k = z_val.shape[1]
    val_idx, test_idx = split_indices(n)
    z = np.empty((n, k))
    y = np.empty(n, dtype=np.int64)
    z[val_idx], y[val_idx] = z_val, y_val
    z[test_idx] = z_val.mean(0) + 0.05 * rng.normal(size=(len(test_idx), k))
    y[test_idx] = rng.integers(0, k, len(test_idx))
    return torch.tensor(z)[None], torch.tensor(y)


def test_the_stage_is_measured_at_the_optimum_and_nan_far_from_it():
    z_val, y_val = _stall_problem()
    z, y = _around_validation(z_val, y_val, 300, np.random.default_rng(3))
    out = measure_stages_batch(z, y, bins=(15,), stages=("pre", "dir"), recalibration=DIR)
    assert out["failures"]["dir"] == [None]
    assert np.isfinite(out["dir"]["ece_15"][0]) and np.isfinite(out["dir"]["nll"][0])
    assert out["dir"]["fit_converged"][0] == 1 and out["dir"]["fit_converged_by_objective"][0] == 1
    assert out["dir"]["fit_iterations"][0] == 1000
    far = measure_stages_batch(z, y, bins=(15,), stages=("pre", "dir"), recalibration={**DIR, "max_iterations": 30})
    assert far["failures"]["dir"][0].startswith("did not converge")
    assert np.isnan(far["dir"]["ece_15"][0]) and np.isnan(far["dir"]["accuracy"][0])
    assert far["dir"]["fit_converged"][0] == 0 and far["dir"]["fit_underdetermined"][0] == 1  # 60 < 10 x 100


# ---------------------------------------------------------------- fits on too little data

def test_underdetermined_thresholds():
    k = 4
    at = np.repeat(np.arange(k), 10)  # N_val = 10 K, 10 positives in every class
    for stage in ("vs", "ms", "dir"):
        assert underdetermined(stage, at, k) is False
        assert underdetermined(stage, at[:-1], k) is True  # 10 K - 1
        assert underdetermined(stage, torch.tensor(np.r_[at, at]), k) is False
        assert underdetermined(stage, np.zeros(10 * k, dtype=np.int64), k) is False  # the average only
    for stage in ("iso", "hist"):
        assert underdetermined(stage, at, k) is False
        assert underdetermined(stage, at[1:], k) is True  # class 0: 9 positives
        assert underdetermined(stage, np.r_[at, at][1:], k) is False  # 19 of class 0
        assert underdetermined(stage, np.repeat(np.arange(k - 1), 40), k) is True  # class 3 absent
        assert underdetermined(stage, torch.tensor(np.r_[at, [1] * 50]), k) is False
    for stage in ("pre", "post", "spline"):
        assert underdetermined(stage, at, k) is None


def _labelled(n_val, per_class, k, rng, n):
    """Logits and labels of n samples whose validation part holds ``per_class[c]`` samples of class c."""
    y_val = np.repeat(np.arange(k), per_class)
    assert len(y_val) == n_val
    z_val, _ = sample_problem(rng, n_val, k)
    z, y = _around_validation(z_val, rng.permutation(y_val), n, rng)
    return torch.cat([z, z * 0.5]), y  # two networks


STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
OPTIONS = {"ms": {"lambda": 1.0, "mu": 1.0}, "dir": {"lambda": 1.0, "mu": 1.0}}


@pytest.mark.parametrize("n, per_class, flags", [
    (150, [10, 10, 10], dict.fromkeys(("vs", "ms", "dir", "iso", "hist"), 0.0)),  # N_val = 30 = 10 K
    (145, [9, 10, 10], dict.fromkeys(("vs", "ms", "dir", "iso", "hist"), 1.0)),  # N_val = 29
    (200, [20, 11, 9], {"vs": 0.0, "ms": 0.0, "dir": 0.0, "iso": 1.0, "hist": 1.0}),  # N_val = 40, class 2: 9
])
def test_flags_reach_the_shard_and_the_wide_table(n, per_class, flags):
    k = len(per_class)
    z, y = _labelled(sum(per_class), per_class, k, np.random.default_rng(n), n)
    out = measure_stages_batch(z, y, bins=(15,), stages=STAGES, recalibration=OPTIONS)
    for stage in STAGES:
        if stage in flags:
            np.testing.assert_array_equal(out[stage]["fit_underdetermined"], [flags[stage]] * 2)
        else:
            assert "fit_underdetermined" not in out[stage]
    rows = []
    for i in range(2):
        provenance = {"space": "tss", "hp": "200", "dataset": "cifar10", "arch_index": i, "arch_str": "a", "seed": 777,
                      "params": 1.0, "flops": 1.0, "temperature": 1.0, "accuracy": 0.5, "recorded_accuracy": 0.5,
                      "n_eval": n, "config_hash": "h", "logits_key": "k", "logits_file": "f"}
        stages = {s: {name: float(v[i]) for name, v in out[s].items()} for s in STAGES}
        rows.append(shards.shard_table(provenance, stages).to_pandas())
    import pandas as pd

    wide = tables.wide_table(pd.concat(rows, ignore_index=True))
    flag_columns = sorted(c for c in wide.columns if c.endswith("_fit_underdetermined"))
    assert flag_columns == sorted(f"{s}_fit_underdetermined" for s in flags)
    for stage, value in flags.items():
        assert wide[f"{stage}_fit_underdetermined"].tolist() == [value, value]
