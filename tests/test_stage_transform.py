"""A fitted recalibration map rebuilt from its stored parameters (issue 35, item 1): every stage's
map from ``stage_transform(stage, params)`` gives the fit's own output bit for bit, after the
parameters went through float64 numpy (what a store keeps), for the whole batch and per network."""

import numpy as np
import pytest
import torch

from calibench.recalibration import STAGE_PARAMS, fit_stage, stage_transform

OPTIONS = {"ms": {"lambda": 1.0, "mu": 1.0}, "dir": {"lambda": 1.0, "mu": 1.0}, "max_iterations": 200}


def _population(m=3, n=400, k=10, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    z = rng.normal(0, 1, (m, n, k)) * rng.uniform(1, 4, (m, 1, 1)) + 2.5 * np.eye(k)[labels]
    return torch.from_numpy(z.astype(np.float32)).double(), torch.from_numpy(labels)


def _stored(params):
    return {name: np.array(v.detach().cpu().numpy(), dtype=np.float64) for name, v in params.items()}


@pytest.mark.parametrize("stage", sorted(STAGE_PARAMS))
def test_a_map_rebuilt_from_stored_parameters_is_the_fits_own_bit_for_bit(stage):
    z, y = _population()
    val, test = slice(0, 150), slice(150, None)
    fitted = fit_stage(stage, z[:, val], y[val], OPTIONS)
    assert set(STAGE_PARAMS[stage]) <= set(fitted.params)
    stored = _stored(fitted.params)
    want = fitted.logits(z[:, test])
    got = stage_transform(stage, stored)(z[:, test].to(torch.float64))
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.isneginf(want).any() == torch.isneginf(got).any()
    # one network at a time, as a store serves them
    for i in range(z.shape[0]):
        alone = stage_transform(stage, {name: v[i : i + 1] for name, v in stored.items()})(z[i : i + 1, test])
        torch.testing.assert_close(alone[0], want[i], rtol=0, atol=0, equal_nan=True)


def test_unknown_stages_and_missing_parameters_are_named():
    with pytest.raises(ValueError, match="'pre' has no fitted map"):
        stage_transform("pre", {})
    with pytest.raises(ValueError, match=r"ms: parameters \['b'\] missing"):
        stage_transform("ms", {"W": np.eye(3)[None]})


def test_a_fitted_map_takes_numpy_arrays_and_gives_numpy_back():
    """docs/python.md: arrays in, numbers out. A fitted map applied to a numpy array gives a numpy
    array, equal to what the tensor gives (it raised AttributeError: 'numpy.ndarray' has no 'to')."""
    import numpy as np
    import torch

    from calibench import recalibration

    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(2, 200, 5)), rng.integers(0, 5, 200)
    for stage in ("post", "vs", "ms", "dir", "iso", "hist", "spline"):
        fitted = recalibration.fit_stage(stage, z, y, {s: {"lambda": 1e-1, "mu": 1e-1} for s in ("ms", "dir")})
        for name in ("logits", "log_probs", "probs"):
            out = getattr(fitted, name)(z)
            assert isinstance(out, np.ndarray) and out.shape == z.shape, (stage, name)
            np.testing.assert_array_equal(out, getattr(fitted, name)(torch.as_tensor(z)).numpy())
        assert np.allclose(fitted.probs(z).sum(-1), 1)
