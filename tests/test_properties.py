"""Properties that hold for any input (hypothesis), and consistency of the batched form."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calibench.metrics import registry as metric_registry
from calibench import metrics as M
from conftest import sample_problem

BINNED = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")


@st.composite
def problems(draw):
    n = draw(st.integers(min_value=1, max_value=60))
    k = draw(st.integers(min_value=2, max_value=6))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    # Coarse logits produce ties, fine ones do not: both matter.
    coarse = draw(st.booleans())
    logits = rng.integers(-3, 4, size=(n, k)).astype(float) if coarse else rng.normal(size=(n, k)) * 3
    labels = rng.integers(0, k, size=n)
    return logits, labels, seed, coarse


@settings(max_examples=60, deadline=None)
@given(problems())
def test_sample_permutation_invariance(problem):
    logits, labels, seed, coarse = problem
    perm = np.random.default_rng(seed + 1).permutation(len(labels))
    a = M.measure(logits, labels, bins=(2, 5, 15))
    b = M.measure(logits[perm], labels[perm], bins=(2, 5, 15))
    for key in a:
        if coarse and key.startswith(("ace_", "tace_")):
            continue  # by the spec, tied values keep sample order inside ACE's rank ranges
        if np.isnan(a[key]):
            assert np.isnan(b[key]), key
        else:
            assert b[key] == pytest.approx(a[key], abs=1e-9), key


@settings(max_examples=60, deadline=None)
@given(problems())
def test_bounds(problem):
    logits, labels, _, _ = problem
    r = M.measure(logits, labels, bins=(1, 3, 10))
    for name in BINNED:
        for b in (1, 3, 10):
            assert 0.0 <= r[f"{name}_{b}"] <= 1.0 + 1e-12, (name, b)
        assert r[f"ece_{b}"] <= r[f"mce_{b}"] + 1e-12  # a weighted mean never exceeds the max
    for name in ("ksce", "ks_top2", "ks_within_top2", "mmce", "accuracy"):
        assert 0.0 <= r[name] <= 1.0 + 1e-12, name
    if not np.isnan(r["kdece"]):  # not bounded by 1 (docs/metrics.md): above 1 it is flagged unstable, never clipped
        assert r["kdece"] >= 0.0
        assert (r["kdece"] > 1.0) == bool(metric_registry.unstable("kdece", [r["kdece"]]))
    assert 0.0 <= r["brier"] <= 2.0 + 1e-12
    assert r["nll"] >= 0.0
    # One bin: ECE is |accuracy - mean confidence|.
    probs = torch.softmax(torch.from_numpy(logits), -1).numpy()
    assert r["ece_1"] == pytest.approx(abs(r["accuracy"] - probs.max(1).mean()), abs=1e-12)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_calibrated_synthetic_data_drives_ece_to_zero(n):
    """Labels drawn from the model's own softmax: ECE shrinks like 1/sqrt(N)."""
    logits, labels = sample_problem(np.random.default_rng(n), n, 10, label_temperature=1.0)
    r = M.measure(logits, labels, bins=(15,))
    bound = 3.0 * np.sqrt(15 / n)  # a few standard errors of 15 bin means
    assert r["ece_15"] < bound
    assert r["ece_em_15"] < bound
    assert r["ksce"] < 3.0 / np.sqrt(n) * 2
    assert r["kdece"] < bound


def test_ece_falls_with_n_for_calibrated_and_not_for_miscalibrated():
    calibrated, miscalibrated = [], []
    for n in (1_000, 100_000):
        logits, labels = sample_problem(np.random.default_rng(3), n, 10, label_temperature=1.0)
        calibrated.append(M.measure(logits, labels, bins=(15,))["ece_15"])
        logits, labels = sample_problem(np.random.default_rng(3), n, 10, label_temperature=2.0)
        miscalibrated.append(M.measure(logits, labels, bins=(15,))["ece_15"])
    assert calibrated[1] < calibrated[0] / 3
    assert miscalibrated[1] > 0.1 and miscalibrated[0] > 0.1


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=10_000))
def test_batched_equals_single(m, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(m, 50, 4)) * rng.uniform(0.5, 4, size=(m, 1, 1))
    labels = rng.integers(0, 4, size=50)
    batch = M.measure_batch(logits, labels, bins=(3, 15))
    for i in range(m):
        single = M.measure(logits[i], labels, bins=(3, 15))
        for key, value in single.items():
            np.testing.assert_array_equal(batch[key][i], value, err_msg=key)  # bit for bit


def test_batched_chunking_does_not_change_results():
    rng = np.random.default_rng(5)
    logits = torch.from_numpy(rng.normal(size=(7, 300, 10)) * 3).float()
    labels = torch.from_numpy(rng.integers(0, 10, size=300))
    whole = M.measure_batch(logits, labels)
    chunked = M.measure_batch(logits, labels, chunk_elements=2 * 300 * 10)  # 2 networks a chunk
    for key in whole:
        np.testing.assert_allclose(chunked[key], whole[key], rtol=0, atol=1e-12, err_msg=key)


def test_default_suite_keys():
    r = M.measure(np.random.default_rng(0).normal(size=(100, 5)), np.arange(100) % 5)
    for metric in BINNED:
        for b in (5, 10, 15, 20, 25, 50, 100, 200, 500):
            assert f"{metric}_{b}" in r
    for metric in M.UNBINNED_METRICS:
        assert metric in r
    assert len(r) == 7 * 9 + 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_equals_cpu():
    rng = np.random.default_rng(9)
    logits = torch.from_numpy(rng.normal(size=(4, 2000, 100)) * 3)
    labels = torch.from_numpy(rng.integers(0, 100, size=2000))
    cpu = M.measure_batch(logits, labels)
    gpu = M.measure_batch(logits.cuda(), labels.cuda())
    for key in cpu:
        np.testing.assert_allclose(gpu[key], cpu[key], rtol=0, atol=1e-9, err_msg=key)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_every_recalibration_stage_on_cuda_equals_cpu():
    """The same code on the GPU: every stage's fit, its parameters and the whole metric suite
    (issue 10; docs/recalibration.md)."""
    from calibench.measure.stages import measure_stages_batch
    from calibench.recalibration import STAGES

    rng = np.random.default_rng(10)
    logits = torch.from_numpy(rng.normal(size=(3, 1500, 20)) * rng.uniform(1, 6, size=(3, 1, 1)))
    labels = torch.from_numpy(rng.integers(0, 20, size=1500))
    ood = {"noise": torch.from_numpy(rng.normal(size=(3, 300, 20)))}
    rec = {"ms": {"lambda": 1e-1, "mu": 1e-1}, "dir": {"lambda": 1e1, "mu": 1e1}}
    kwargs = {"stages": STAGES, "recalibration": rec}
    cpu = measure_stages_batch(logits, labels, ood_logits=ood, **kwargs)
    gpu = measure_stages_batch(logits.cuda(), labels.cuda(), ood_logits={k: v.cuda() for k, v in ood.items()},
                               **kwargs)
    assert gpu["failures"] == cpu["failures"]
    for stage in STAGES:
        assert set(gpu[stage]) == set(cpu[stage]), stage
        for key, want in cpu[stage].items():
            # iterative fits stop at a gradient-norm tolerance: parameters agree to about its size
            atol = 1e-5 if stage in ("ms", "dir", "vs") else 1e-9
            if key.startswith("fit_iterations"):
                continue  # the path to the tolerance may differ by an iteration in floating point
            np.testing.assert_allclose(gpu[stage][key], want, rtol=0, atol=atol, err_msg=f"{stage} {key}")
