"""Bit-identical results (issue 13): the same configuration gives the same tables, bit for bit,
whatever the chunk size, the number of cores, the number of archive loader processes and so
the order in which jobs ran. (Interrupted and resumed: tests/test_workflow.py, kill -9.)"""

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from fixtures import SMALL_SSS, copy_workflow

CONFIG = SMALL_SSS  # every stage, lambda, mu given (the search is proven in test_workflow.py)
TABLES = ["results/tables/sss_90_cifar10.parquet"]


def _run(workdir, cores: int):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", "tiny.yaml", "--cores", str(cores),
                           *TABLES], cwd=workdir, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_tables_are_bit_identical_across_chunking_cores_and_loaders(tmp_path, small_sss_run):
    one = small_sss_run  # the session's shared run: chunks of 1, one loader, 2 cores
    assert (CONFIG["chunk_size"], CONFIG["loader_workers"]) == (1, 1)
    many = copy_workflow(tmp_path / "many", {**CONFIG, "chunk_size": 200, "loader_workers": 2,
                                             "minibench": {**CONFIG["minibench"], "build": False}})
    shutil.copytree(one / "resources", many / "resources")  # the same mini benchmark
    _run(many, cores=1)
    assert len(list((one / "results/chunks/infer/sss_90").glob("*.json"))) == 2
    assert len(list((many / "results/chunks/infer/sss_90").glob("*.json"))) == 1
    for table in TABLES:
        a, b = pd.read_parquet(one / table), pd.read_parquet(many / table)
        assert len(a) == 2 and a.shape[1] > 250  # every stage's every metric
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_batched_measurement_equals_alone_bit_for_bit_where_the_readme_says():
    """docs/running.md, "Reliability": pre, post (temperature scaling), vs, iso and hist measured in a batch of
    networks equal each network measured alone, bit for bit (ms, dir and spline: within 1e-9)."""
    import numpy as np
    import torch

    from calibench.measure.stages import measure_stages_batch

    rng = np.random.default_rng(0)
    n, k = 400, 10
    labels = torch.from_numpy(rng.integers(0, k, n))
    logits = torch.from_numpy((rng.normal(size=(5, n, k)) * rng.uniform(0.5, 3, size=(5, 1, 1))).astype(np.float32))
    ood = torch.from_numpy(rng.normal(size=(5, 100, k)).astype(np.float32))
    stages = ["pre", "post", "vs", "ms", "dir", "iso", "hist", "spline"]
    options = dict(bins=[5, 15], stages=stages, recalibration={
        "temperature": {"method": "nll"}, "ms": {"lambda": 1.0, "mu": 1.0}, "dir": {"lambda": 1.0, "mu": 1.0},
        "max_iterations": 300, "tolerance": 1e-6, "hist_bins": 15, "spline_knots": 6})
    batch = measure_stages_batch(logits, labels, ood_logits={"noise": ood}, **options)
    for i in range(5):
        alone = measure_stages_batch(logits[i:i + 1], labels, ood_logits={"noise": ood[i:i + 1]}, **options)
        for stage in stages:
            for metric, values in alone[stage].items():
                a, b = batch[stage][metric][i], values[0]
                if stage in ("pre", "post", "vs", "iso", "hist"):
                    assert a == b or (np.isnan(a) and np.isnan(b)), (stage, metric, a, b)
                elif metric not in ("fit_gradient_norm", "ood_auroc_noise"):  # near 0; a rank tie
                    assert a == pytest.approx(b, rel=1e-9, abs=1e-12, nan_ok=True), (stage, metric)
