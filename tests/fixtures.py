"""Where the shared NATS-Bench sample files live (next to the repository in CI)."""

import shutil
from pathlib import Path

import pytest
import yaml

SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-tss-v1_0-3ffb9-simple"
SSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-sss-v1_0-50262-simple"


ROOT = Path(__file__).resolve().parents[1]


def copy_workflow(tmp: Path, overrides: dict) -> Path:
    """A copy of the workflow (not the package) in ``tmp``, with ``overrides`` as tiny.yaml.
    The explorer is off unless ``overrides`` turns it on (WORKFLOW_TINY does: the explorer's
    tests read the shared run's; elsewhere its job would only cost time)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "config", "profiles", "environment.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp / name)
    (tmp / "tiny.yaml").write_text(yaml.safe_dump({"explorer": False, **overrides}))
    return tmp


def require_shared():
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED_FIXTURES}")


# ---------------------------------------------------------------- finished runs shared by test files
#
# A workflow run of a configuration is built once per test session, whatever the number of
# pytest-xdist workers (a file lock in the session's common temporary directory), and shared
# read-only: a test that changes files works on a copy (`clone_run`).

import os
import subprocess
import sys

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
DATASETS = ["cifar10", "cifar100", "ImageNet16-120"]

# Both spaces, three datasets, every stage, the lambda, mu search: the README's workflow in small.
WORKFLOW_TINY = {
    "minibench": {"build": True, "dir": "resources/minibench", "n_tss": 3, "n_sss": 4, "n_test": 60, "n_train": 30,
                  "seed": 3},
    "datasets": DATASETS,
    "bins": [5, 15, 50],
    "chunk_size": 4,  # one chunk per space (TSS: 2 unique of 3; SSS: 4): chunking is tested by SMALL_SSS and test_determinism
    "measure_group": 1,
    # archive loading in the job's own thread (the CPU's default): the loader processes of a GPU
    # node are run through the workflow by test_determinism, and would cost this run about 4 CPU s an inference job
    # 200 bootstrap resamples, not the config's 1000: the intervals are checked for being there and
    # holding their tau, and resamples cost the Kendall part about 3 CPU s a run
    "analysis": {"hcs_betas": [1, 2], "top_k": [2], "top_n": 3, "bootstrap": {"resamples": 200}},
    "explorer": True,
    # Every stage (the config's default); a small lambda, mu search keeps the test fast: its fits at
    # K = 100 on 30 samples run to whatever limit they get, so 25 iterations, not the config's 1000
    # (unconverged fits are still scored: the search's plumbing is what the run tests)
    "recalibration": {"odir": {"search": {"networks": 2, "folds": 2, "seed": 0, "grid": [1.0e+1, 1.0e+3],
                                          "max_iterations": 25}}},
}

# One SSS table, two networks in chunks of one, every stage with lambda, mu given: the
# reference of the SLURM tests and the one-core side of the determinism test.
SMALL_SSS = {
    "minibench": {"build": True, "dir": "resources/minibench", "n_tss": 1, "n_sss": 2, "n_test": 60, "n_train": 30,
                  "seed": 3},
    "spaces": ["sss"], "datasets": ["cifar10"], "bins": [5, 15], "chunk_size": 1, "measure_group": 1,
    "loader_workers": 1, "device": "cpu",
    "analysis": {"hcs_betas": [1], "top_k": [], "top_n": 3},
    "recalibration": {"odir": {"ms": {"lambda": 0.1, "mu": 0.1}, "dir": {"lambda": 0.1, "mu": 0.1}}},
}
SMALL_SSS_TABLE = "results/tables/sss_90_cifar10.parquet"


def shared_root(tmp_path_factory) -> Path:
    """The temporary directory every xdist worker of this session shares."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"


def build_once(root: Path, name: str, build) -> Path:
    """``build(workdir)`` once per session for ``name``; every later caller gets the finished directory."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    workdir, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if workdir.exists():  # a build that failed in another worker: start again
                shutil.rmtree(workdir)
            build(workdir)
            done.touch()
    return workdir


def run_snakemake(workdir: Path, *args, env=None, timeout=900) -> subprocess.CompletedProcess:
    proc = subprocess.run(SNAKEMAKE + ["--configfile", "tiny.yaml", "--cores", "2", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def clone_run(src: Path, dst: Path) -> Path:
    """A finished run's whole working directory (results, resources, Snakemake's metadata), times kept."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def workflow_run(tmp_path_factory) -> Path:
    """WORKFLOW_TINY run to the end (report included), with the archive read log of every job.
    Its mini benchmark is the session's (:func:`workflow_minibench`, the same spec) copied in
    place, so Snakemake finds the minibench rule's outputs and does not build it a second time
    (the rule's job is run by the SMALL_SSS run)."""
    def build(workdir):
        copy_workflow(workdir, WORKFLOW_TINY)
        shutil.copytree(workflow_minibench(tmp_path_factory), workdir / WORKFLOW_TINY["minibench"]["dir"])
        read_log = workdir / "archive_reads.log"
        run_snakemake(workdir, env={**os.environ, "CALIBENCH_READ_LOG": str(read_log)})

    return build_once(shared_root(tmp_path_factory), "workflow", build)


def workflow_minibench(tmp_path_factory) -> Path:
    """The mini benchmark that WORKFLOW_TINY's run builds (``resources/minibench``), built on its own
    once per session: tests that need only the archives start without waiting for the whole run."""
    from calibench.sources import make_minibench

    sizes = {k: v for k, v in WORKFLOW_TINY["minibench"].items() if k not in ("build", "dir")}
    return build_once(shared_root(tmp_path_factory), "workflow-minibench",
                      lambda out: make_minibench(out, sizes, progress=False))


def small_sss_run(tmp_path_factory) -> Path:
    """SMALL_SSS run to its table (no analysis)."""
    def build(workdir):
        copy_workflow(workdir, SMALL_SSS)
        run_snakemake(workdir, SMALL_SSS_TABLE)

    return build_once(shared_root(tmp_path_factory), "small-sss", build)
