"""Measurement on the job's device (issue 32, item 1): ``measure_chunk_job`` and
``odir_search_job`` honour ``device``, size ``measure_group: auto`` from the device, and record
the device they measured on. The CPU path is the one CI runs; the CUDA comparisons run where a
GPU is present (bench/gpu_check.sh) and skip elsewhere."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from calibench import layout
from calibench.config import settings as stage
from calibench.measure.jobs import (AUTO_GROUP_CPU, AUTO_GROUP_MAX, group_size_for, measure_chunk_job,
                                    odir_search_job, search_chunk_for)
from calibench.results import provenance
from calibench.store import logits as store

ROOT = Path(__file__).resolve().parents[1]
N, K, M = 300, 10, 5
CUDA = torch.cuda.is_available()


def _population(tmp: Path) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(7)
    results = tmp / "results"
    labels = rng.integers(0, K, N)
    labels_file = layout.labels_path(results, "cifar10", space="zoo")
    store.write_labels(labels_file, labels, dataset="cifar10", key="k", source="test")
    keys = {}
    for i in range(M):
        z = rng.normal(0, 1 + i, size=(N, K)) + 3 * np.eye(K)[labels] * rng.uniform(0.5, 1.5)
        fields = {"test": "device", "index": i}
        keys[i] = store.digest(fields)
        store.write_network_logits(layout.logits_path(results, "zoo", "", "cifar10", i), key=keys[i], fields=fields,
                                   space="zoo", hp="", dataset="cifar10", index=i, arch_str=f"m{i}", labels=labels,
                                   seeds=[store.SeedLogits(0, np.nan, np.nan, np.nan, "test",
                                                           {"test": z.astype(np.float32)})])
    manifest = tmp / "infer.json"
    manifest.write_text(json.dumps({"indices": list(range(M)), "failures": [],
                                    "datasets": {"cifar10": {str(i): k for i, k in keys.items()}}}))
    population = layout.population_path(results, "zoo")
    population.parent.mkdir(parents=True, exist_ok=True)
    population.write_text(json.dumps({"space": "zoo", "selected": list(range(M))}))
    return results, manifest, labels_file


def _config() -> dict:
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["bins"] = [5, 15]
    config["recalibration"]["odir"]["ms"] = config["recalibration"]["odir"]["dir"] = {"lambda": 1.0, "mu": 1.0}
    config["recalibration"]["max_iterations"] = 300
    return config


def _measure(tmp: Path, runtime: dict, name: str) -> tuple[Path, dict]:
    results, manifest, labels_file = _population(tmp / name)
    summary = measure_chunk_job(stage.measurement_settings(_config()), runtime, "zoo", "", "cifar10", 0, results,
                                manifest, labels_file, tmp / name / "measure.json", progress=False)
    return results, summary


def _shard(results: Path, i: int) -> tuple[pd.DataFrame, dict]:
    path = layout.shard_path(results, "zoo", "", "cifar10", i)
    return pd.read_parquet(path), provenance.of_shard(pq.read_schema(path).metadata)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return _measure(tmp_path_factory.mktemp("device"), {"device": "cpu", "measure_group": "auto"}, "cpu")


def test_auto_group_is_the_cpu_batch_there_and_sized_from_free_memory_on_cuda():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert group_size_for(3, cpu, 10_000, 100) == 3 and group_size_for("auto", cpu, 10_000, 100) == AUTO_GROUP_CPU
    # CIFAR-100 on an 80 GB card with 70 GB free: 8 * (24 * 1e6 + 80 * 10,100) bytes a network
    per_network = 8 * (24 * 10_000 * 100 + 80 * 10_100)
    assert group_size_for("auto", cuda, 10_000, 100, free_bytes=70 << 30) == int(0.5 * (70 << 30) // per_network)
    assert 100 < group_size_for("auto", cuda, 10_000, 100, free_bytes=70 << 30) < AUTO_GROUP_MAX
    # CIFAR-10 with both OoD sets (46,032 logits of 10 classes): capped
    assert group_size_for("auto", cuda, 46_032, 10, free_bytes=70 << 30) == AUTO_GROUP_MAX
    assert group_size_for("auto", cuda, 10_000, 100, free_bytes=1 << 20) == 1  # never 0


def test_the_searchs_calls_are_sized_from_free_memory_on_cuda_and_left_to_the_search_on_the_cpu():
    """The lambda, mu search fits all (network, fold) problems in one call on a GPU; a larger
    ``recalibration.odir.networks`` than the memory holds is split into calls, not run out of memory."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert search_chunk_for(cpu, 1_600, 100) is None  # search_odir's own CPU batch
    per_fit = 8 * (24 * 1_600 * 100 + 80 * 10_100)  # CIFAR-100: 2,000 validation samples, 4/5 of them fitted
    assert search_chunk_for(cuda, 1_600, 100, free_bytes=70 << 30) == int(0.5 * (70 << 30) // per_fit)
    assert search_chunk_for(cuda, 1_600, 100, free_bytes=24 << 30) >= 64 * 5  # the default sample: one call
    assert search_chunk_for(cuda, 1_600, 100, free_bytes=8 << 30) < 64 * 5
    assert search_chunk_for(cuda, 1_600, 100, free_bytes=1 << 20) == 1  # never 0


def test_measure_group_auto_on_the_cpu_gives_the_shards_of_group_8_bit_for_bit(cpu_run, tmp_path):
    results, summary = cpu_run
    assert summary["computed"] == M and summary["failed"] == []
    other, _ = _measure(tmp_path, {"measure_group": 8}, "group8")
    for i in range(M):
        a, recorded = _shard(results, i)
        b, _ = _shard(other, i)
        pd.testing.assert_frame_equal(a, b)
        assert recorded["device"] == "cpu"


def test_a_bad_measure_group_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "calibench", "measure-chunk", "--settings", "{}", "--target", "x",
                          "--dataset", "cifar10", "--results", str(tmp_path), "--chunk", "0", "--manifest", "m",
                          "--logits-manifest", "l", "--labels", "y", "--measure-group", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "expected a positive integer or auto, got '0'" in out.stderr


def test_the_search_records_its_device(tmp_path):
    results, manifest, labels_file = _population(tmp_path)
    settings = stage.odir_search_settings(_config())
    settings.update(networks=3, folds=2, grid=[1.0, 100.0], max_iterations=200)
    settings["stages"] = ["ms"]
    out = odir_search_job(settings, "zoo", "", "cifar10", results, [manifest], labels_file, tmp_path / "odir.json",
                          device="cpu")
    assert out["device"] == "cpu" and json.loads((tmp_path / "odir.json").read_text())["device"] == "cpu"
    assert out["chosen"]["ms"]["lambda"] in (1.0, 100.0) and len(out["networks"]) == 3


def test_a_search_with_the_same_inputs_reads_its_kept_result_and_fits_nothing(tmp_path, monkeypatch, caplog):
    """A rerun of the search (a model added to a population, which reruns every job after its
    population file) fits nothing when its settings, labels and sampled logits are those of a
    search it kept; any of them changed, or the kept file damaged, and it fits again."""
    import calibench.recalibration.odir_search as odir_search
    from calibench import integrity

    results, manifest, labels_file = _population(tmp_path)
    settings = stage.odir_search_settings(_config())
    settings.update(networks=3, folds=2, grid=[1.0, 100.0], max_iterations=50)
    settings["stages"] = ["ms"]
    first = odir_search_job(settings, "zoo", "", "cifar10", results, [manifest], labels_file, tmp_path / "a.json")
    kept = layout.odir_search_store(results, "zoo", "cifar10", first["key"])
    assert integrity.read_json(kept) == first
    fitted = []
    real = odir_search.search_odir
    monkeypatch.setattr(odir_search, "search_odir", lambda *a, **k: fitted.append(1) or real(*a, **k))
    with caplog.at_level("INFO", logger="calibench"):
        again = odir_search_job(settings, "zoo", "", "cifar10", results, [manifest], labels_file, tmp_path / "b.json")
    assert not fitted and again == first and (tmp_path / "b.json").read_bytes() == (tmp_path / "a.json").read_bytes()
    assert "nothing is fitted" in caplog.text
    # another grid: another key, a fit
    other = odir_search_job({**settings, "grid": [1.0, 10.0]}, "zoo", "", "cifar10", results, [manifest],
                            labels_file, tmp_path / "c.json")
    assert fitted == [1] and other["key"] != first["key"]
    # one sampled network's logits changed (its key in the inference manifest): a fit
    doc = json.loads(manifest.read_text())
    index = str(first["networks"][0])
    doc["datasets"]["cifar10"][index] = "0" * 16
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    # (no stored logits have that key: the network is left out, the others fitted)
    fewer = odir_search_job(settings, "zoo", "", "cifar10", results, [changed], labels_file, tmp_path / "d.json")
    assert fitted == [1, 1] and fewer["key"] != first["key"] and len(fewer["networks"]) == 2
    # the kept file damaged: set aside, and the search fits again to the same result
    kept.write_bytes(kept.read_bytes().replace(b'"lambda"', b'"lambdA"', 1))
    caplog.clear()
    with caplog.at_level("WARNING", logger="calibench"):
        refit = odir_search_job(settings, "zoo", "", "cifar10", results, [manifest], labels_file, tmp_path / "e.json")
    assert "damaged" in caplog.text and "the search runs again" in caplog.text
    assert kept.with_name(kept.name + ".damaged").is_file() and integrity.read_json(kept)["key"] == first["key"]
    assert refit["chosen"] == first["chosen"] and len(fitted) == 3


# ------------------------------------------------------------------ on a GPU (bench/gpu_check.sh)
# Tolerances of CUDA against the CPU (BENCHMARKS.md, "The GPU path"): the metric suite and the
# closed-form or convex one-parameter-per-class fits agree to rounding; ms and dir at a flat optimum
# and the order of tied hist outputs move binned metrics by up to about 2e-2.
EXACT_STAGES = ("pre", "post", "vs", "iso", "spline")
LOOSE_STAGES = ("ms", "dir", "hist")
# iso and spline map many scores to one value (a step, the last knot, a clip at 1): exact ties in the
# recalibrated confidences, which a last-ulp difference of the fit (2e-15 measured, H200) can split
# or join, and metrics that read ranks or bin edges move by a sample or so. Measured on an H200
# (bench/gpu_cpu_agreement.py, 2026-11-27): spline ece_em_15 and ksce 2.1e-4, every other value of
# these stages within 1e-15. Those metrics get 1e-3 there; everything else 1e-6.
TIE_READING = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace", "ksce", "ks_top2", "ks_within_top2")
TIED_OUTPUT_STAGES = ("iso", "spline")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_measurement_agrees_with_the_cpu_and_records_its_device(cpu_run, tmp_path):
    results, _ = cpu_run
    gpu, summary = _measure(tmp_path, {"device": "cuda", "measure_group": "auto"}, "cuda")
    assert summary["computed"] == M
    for i in range(M):
        a, _ = _shard(results, i)
        b, recorded = _shard(gpu, i)
        assert recorded["device"].startswith("cuda:") and torch.cuda.get_device_name(0) in recorded["device"]
        merged = a.merge(b, on=["stage", "metric", "bins"], suffixes=("_cpu", "_gpu"))
        assert len(merged) == len(a) == len(b)
        finite = np.isfinite(merged["value_cpu"]) & np.isfinite(merged["value_gpu"])
        assert (np.isnan(merged["value_cpu"]) == np.isnan(merged["value_gpu"])).all()
        diff = (merged["value_cpu"] - merged["value_gpu"]).abs().where(finite, 0.0)
        scale = merged["value_cpu"].abs().clip(lower=1.0)
        exact = merged["stage"].isin(EXACT_STAGES) & ~merged["metric"].str.startswith("fit_")
        tie_reading = merged["stage"].isin(TIED_OUTPUT_STAGES) & merged["metric"].isin(TIE_READING)
        tolerance = np.where(tie_reading, 1e-3, 1e-6) * scale
        shown = ["stage", "metric", "bins", "value_cpu", "value_gpu"]
        assert (diff[exact] <= tolerance[exact]).all(), merged[exact & (diff > tolerance)][shown].to_string()
        loose = merged["stage"].isin(LOOSE_STAGES) & ~merged["metric"].str.startswith("fit_")
        assert (diff[loose] <= 2e-2 * scale[loose]).all(), merged[loose & (diff > 2e-2 * scale)][shown].to_string()


def test_the_command_line_shortens_openmps_spin_before_torch_and_keeps_a_users_setting():
    """Measurement jobs sort on numpy threads between torch's OpenMP regions; libgomp's default
    spin (about 15-20 ms) would take their core (calibench.runtime.short_omp_spin)."""
    import subprocess
    import sys

    from calibench import runtime

    code = ("import os, sys\nfrom calibench.run.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)")
    env = {k: v for k, v in __import__("os").environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-2:] == [runtime.OMP_SPIN_COUNT, "False"], out.stdout + out.stderr
    env["GOMP_SPINCOUNT"] = "500"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-2:] == ["500", "False"], out.stdout + out.stderr
