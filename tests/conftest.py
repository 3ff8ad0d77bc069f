import os
import sys
from pathlib import Path

# The xdist workers and their Snakemake jobs share the cores: OpenMP threads that spin while they
# wait (libgomp's default) took twice the time of passive ones here (three builds at once, 62 s
# against 29 s). Set before torch is imported; the jobs the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One thread per worker for what the tests compute in-process: three workers already fill the two
# cores, and a second torch thread only adds CPU time (BENCHMARKS.md, "The test suite, where its CPU
# goes"). Workflow jobs set their own (OMP_NUM_THREADS={threads}).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


def cuda_sleep_cycles(seconds: float) -> int:
    """The argument of ``torch.cuda._sleep`` (GPU clock cycles) that keeps the GPU busy about
    ``seconds``, measured on it: for tests that a host call does not wait for the device."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10**8)
    end.record()
    torch.cuda.synchronize()
    return int(10**8 * seconds * 1000 / start.elapsed_time(end))


def random_logits(rng: np.random.Generator, n: int, k: int, scale: float = 3.0) -> np.ndarray:
    """Logits whose softmax mixes confident and unsure rows (continuous, no ties)."""
    return rng.normal(size=(n, k)) * scale * rng.uniform(0.2, 2.0, size=(n, 1))


def sample_problem(rng: np.random.Generator, n: int, k: int, label_temperature: float = 1.5, scale: float = 3.0):
    """Logits and labels drawn from softmax(logits / label_temperature): miscalibrated, not random."""
    logits = random_logits(rng, n, k, scale)
    z = logits / label_temperature
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((n, 1))
    labels = np.minimum((u > np.cumsum(p, axis=1)).sum(axis=1), k - 1)
    return logits, labels


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def tiny_minibench(tmp_path_factory):
    """A very small mini benchmark (3 + 3 architectures, 120 test images), built once per session."""
    from calibench.sources.nats.minibench import MiniBenchSpec, build_minibench

    from fixtures import build_once, shared_root

    spec = MiniBenchSpec(n_tss=3, n_sss=3, n_test=120, n_train=60, seed=1, second_seed=True)
    return build_once(shared_root(tmp_path_factory), "tiny-minibench", lambda out: build_minibench(out, spec))


@pytest.fixture(scope="session")
def workflow_run(tmp_path_factory):
    """The WORKFLOW_TINY run, finished once per session and shared read-only (fixtures.py)."""
    from fixtures import workflow_run as build

    return build(tmp_path_factory)


@pytest.fixture(scope="session")
def small_sss_run(tmp_path_factory):
    """The SMALL_SSS run to its table, finished once per session and shared read-only (fixtures.py)."""
    from fixtures import small_sss_run as build

    return build(tmp_path_factory)



# Test files that take minutes (full Snakemake runs, a SLURM cluster), longest first. `make test`
# hands files to its three workers in collection order (--dist loadfile --no-loadscope-reorder):
# the longest start first, so no long file is left to run alone at the end.
SLOW_FILES = ["test_slurm.py", "test_workflow.py", "test_workflow_reruns.py", "test_failure_reporting.py",
              "test_own_populations.py", "test_workflow_contract.py", "test_minibench.py", "test_archive_loading.py",
              "test_faults.py", "test_analysis_parts.py", "test_archive_inference.py", "test_analysis_methods.py"]


# `make test-fast` (pytest -m fast): the numeric core, the config and CLI checks, the package's
# shape and its documentation; no workflow run (under a minute on 2 cores, BENCHMARKS.md).
FAST_FILES = {"test_spec_vectors.py", "test_calibration.py", "test_recalibration_scaling.py",
              "test_recalibration_nonparametric.py", "test_properties.py", "test_stats.py", "test_reliability.py",
              "test_crosscheck.py", "test_fit_rules.py", "test_stage_transform.py", "test_layering.py", "test_docs.py",
              "test_packaging.py", "test_layout.py", "test_precision.py", "test_nats_index.py", "test_query.py",
              "test_inputs.py", "test_faults.py", "test_tables.py", "test_groups.py", "test_analysis_registry.py",
              "test_method_gains.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FAST_FILES:
            item.add_marker(pytest.mark.fast)
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))  # stable: test order within a file kept
