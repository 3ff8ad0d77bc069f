"""The finished tiny workflow changed and run again (split from test_workflow.py so the two
files run on different workers): what a config change reruns, kill -9 and resume."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibench import integrity, layout
from calibench.recalibration import STAGES
from calibench.store import logits as store
from fixtures import copy_workflow, workflow_minibench
from test_workflow import (ANALYSIS_JOBS, CALIBENCH_RUN, DATASETS, SELECTED, TINY, _clone, _mtimes, _planned_jobs,
                           _set_config, _snakemake)


def _start_run(workdir: Path) -> subprocess.Popen:
    """The README's command for one space's tables (no analysis: resuming is what is tested), as
    its own process group (a login shell's job)."""
    return subprocess.Popen(CALIBENCH_RUN + ["--configfile", "tiny.yaml", "--cores", "2", "--space", "sss"], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _kill_group_when(run: subprocess.Popen, ready, what: str, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and run.poll() is None and not ready():
        time.sleep(0.1)  # each look walks the store: finer polling cost 30 s of CPU
    assert run.poll() is None, f"the run ended before {what}:\n{run.communicate()[0][-3000:]}"
    os.killpg(run.pid, signal.SIGKILL)  # the driver and every job: an OOM kill, a lost login node
    run.wait()
    deadline = time.time() + 30  # the jobs and loaders of the group take a moment to die
    while time.time() < deadline:
        try:
            os.killpg(run.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)


def _stored(results: Path, sub: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (results / sub).rglob("arch=*.parquet")}


def test_kill_9_of_the_whole_run_then_the_readme_command_completes_it(tmp_path, tmp_path_factory, request):
    # Two stages and two datasets: the test is about resuming, and fits and jobs cost time.
    datasets = ["cifar10", "cifar100"]
    workdir = copy_workflow(tmp_path / "killed", {**TINY, "spaces": ["sss"], "stages": ["pre", "post"],
                                                  "datasets": datasets,
                                                  "minibench": {**TINY["minibench"], "build": False}})
    # The run's own mini benchmark, built on its own: this test needs no finished run, so it runs
    # first in this file while another worker builds the run the others clone.
    shutil.copytree(workflow_minibench(tmp_path_factory), workdir / "resources" / "minibench")
    results = workdir / "results"
    n_logits = len(SELECTED["sss"]) * len(datasets)

    # 1. Killed mid-inference.
    run = _start_run(workdir)
    _kill_group_when(run, lambda: len(_stored(results, "logits")) >= 2, "any logits were stored")
    kept = _stored(results, "logits")
    assert 2 <= len(kept) < n_logits, "not killed in the middle of inference"
    assert any((workdir / ".snakemake" / "locks").iterdir()), "the killed run should have left its lock"
    for path in kept:  # atomic writes: every file left behind is whole
        assert store.read_network_logits(path).seeds

    # 2. The README's command again: killed mid-measurement this time.
    run = _start_run(workdir)
    _kill_group_when(run, lambda: len(_stored(results, "shards")) >= 2, "any shards were written")
    shards_kept = _stored(results, "shards")
    assert len(shards_kept) < n_logits, "not killed in the middle of measurement"
    for path, mtime in kept.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was computed twice"
    kept = _stored(results, "logits")

    # 3. A live run refuses a second one on the same results; then the first completes.
    run = _start_run(workdir)
    started = []
    for line in run.stdout:  # `calibench run` prints its snakemake command once it holds the results
        started.append(line)
        if line.startswith("+ "):
            break
    second = subprocess.run(CALIBENCH_RUN + ["--configfile", "tiny.yaml", "--cores", "1", "--space", "sss"], cwd=workdir,
                            capture_output=True, text=True, timeout=120)
    output, _ = run.communicate(timeout=900)
    output = "".join(started) + output
    assert run.returncode == 0, output[-4000:]
    assert "stale" in output, output[-3000:]  # the lock of the killed run was released, and said so
    assert second.returncode != 0 and "in use" in (second.stdout + second.stderr), second.stdout + second.stderr

    for path, mtime in kept.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was computed twice"
    for path, mtime in shards_kept.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was computed twice"
    assert len(_stored(results, "logits")) == n_logits and len(_stored(results, "shards")) == n_logits
    finished_run = request.getfixturevalue("workflow_run")  # by now another worker has (nearly) finished it
    for dataset in datasets:  # the same numbers as an uninterrupted run
        # The archive files' sizes and times differ between two builds of the same mini benchmark (torch's
        # legacy pickle names storages by address); they describe the file, not the numbers.
        resumed = pd.read_parquet(results / "tables" / f"sss_90_{dataset}.parquet").drop(
            columns=["config_hash", "source_bytes", "source_mtime"])
        uninterrupted = pd.read_parquet(finished_run / "results" / "tables" / f"sss_90_{dataset}.parquet")
        pd.testing.assert_frame_equal(uninterrupted[resumed.columns], resumed, check_exact=True)  # bit for bit


@pytest.fixture(scope="module")
def finished_run(workflow_run):
    """The session's WORKFLOW_TINY run (conftest.py): read-only here; tests that change files clone it."""
    return workflow_run


def test_rerunning_one_table_touches_nothing_else(tmp_path, finished_run):
    workdir = _clone(finished_run, tmp_path / "one")
    results = workdir / "results"
    before = _mtimes(results)
    target = results / "tables" / "sss_90_cifar100.parquet"
    target.unlink()
    _snakemake(workdir, "results/tables/sss_90_cifar100.parquet")
    after = _mtimes(results)
    changed = {p for p in after if before.get(p) != after[p]}
    # The rule's two outputs and its job record; nothing else.
    assert changed == {target, results / "failures" / "sss_90_cifar100.parquet",
                       results / "benchmarks" / "tables" / "sss_90_cifar100.tsv"}


def test_new_measurement_settings_need_no_archive_and_rerun_only_measurement(tmp_path, finished_run):
    workdir = _clone(finished_run, tmp_path / "remeasure")
    results = workdir / "results"
    # The archives and datasets go away; the mini benchmark is no longer part of the DAG.
    shutil.move(workdir / "resources", tmp_path / "moved-resources")
    # (Two stages from here on: the test is about what reruns, and fits cost time.)
    _set_config(workdir, minibench={**TINY["minibench"], "build": False}, bins=[5, 15, 30], stages=["pre", "post"])
    logits_before = _mtimes(results / "logits")
    planned = _planned_jobs(workdir)
    assert planned == {"measure": 2 * 3, "table": 6, **ANALYSIS_JOBS, "all": 1}, planned  # a chunk per space, 3 datasets
    infer_records = _mtimes(results / "benchmarks" / "infer")
    # Run up to the SSS tables (the plan above includes TSS and the analysis, which measure the same way).
    tables = [f"results/tables/sss_90_{d}.parquet" for d in DATASETS]
    _snakemake(workdir, *tables)
    for dataset in DATASETS:
        table = pd.read_parquet(results / "tables" / f"sss_90_{dataset}.parquet")
        assert "pre_ece_30" in table.columns and "post_ece_30" in table.columns
        assert "pre_ece_50" not in table.columns
        for _, row in table.iterrows():
            assert row["logits_key"] == store.stored_key(layout.logits_path(results, "sss", "90", dataset,
                                                                           row["arch_index"]))
    assert _mtimes(results / "logits") == logits_before  # the store was read, not rewritten
    # the fit store (issue 35): the bins changed, the temperature fits did not: none was made again
    for dataset in DATASETS:
        for chunk in (0,):  # the shared run's one SSS chunk
            manifest = integrity.read_json(layout.measure_manifest(results, "sss_90", dataset, chunk))
            fits = manifest["fits"]
            assert fits["made"] == {} and set(fits["reused"]) == {"post"} and fits["reused"]["post"] >= 2, fits
            # the rows at 5 and 15 bins and the unbinned metrics are kept; 30 bins alone is measured
            measured = manifest["stages_measured"]
            assert set(measured["new_bins"]) == {"pre", "post"} and not measured["whole"], measured

    ece_before = pd.read_parquet(results / "tables" / "sss_90_cifar100.parquet")["post_ece_15"]
    _set_config(workdir, temperature={"method": "grid_ece", "val_fraction": 0.2, "seed": 42})
    assert set(_planned_jobs(workdir)) == {"measure", "table", *ANALYSIS_JOBS, "all"}
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml",
                             "--space", "sss"], cwd=workdir, capture_output=True, text=True, timeout=300)
    line = next(x for x in status.stdout.splitlines() if "sss_90_cifar100.parquet" in x)
    assert "grid_ece" in line and "fits made again: post" in line and "re-applied" not in line, status.stdout
    assert line.endswith("rows kept: pre)"), line  # pre does not depend on the temperature fit
    dry = subprocess.run(CALIBENCH_RUN + ["--configfile", "tiny.yaml", "--cores", "1", "--space", "sss", "--", "-n"],
                         cwd=workdir, capture_output=True, text=True, timeout=300)  # a dry run says the same
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    said = next(x for x in dry.stdout.splitlines() if x.startswith("dry run: ") and "sss_90_cifar100.parquet" in x)
    assert "grid_ece" in said and "fits made again: post" in said and "re-applied" not in said, said
    _snakemake(workdir, "results/tables/sss_90_cifar100.parquet")  # one table: the others would measure alike
    manifest = integrity.read_json(layout.measure_manifest(results, "sss_90", "cifar100", 0))
    fits = manifest["fits"]
    assert set(fits["made"]) == {"post"} and fits["reused"] == {}, fits
    assert set(manifest["stages_measured"]["whole"]) == {"post"} and set(manifest["stages_measured"]["kept"]) == {"pre"}
    ece_after = pd.read_parquet(results / "tables" / "sss_90_cifar100.parquet")["post_ece_15"]
    assert not np.allclose(ece_before, ece_after)  # a different temperature fit, measured from the same logits
    assert _mtimes(results / "benchmarks" / "infer") == infer_records  # no inference job ran
    assert _mtimes(results / "logits") == logits_before


def test_adding_a_stage_reruns_only_measurement_and_opens_no_archive(tmp_path, finished_run):
    workdir = _clone(finished_run, tmp_path / "stages")
    results = workdir / "results"
    target = "results/tables/sss_90_cifar100.parquet"
    without = [s for s in STAGES if s != "spline"]
    _set_config(workdir, stages=without)
    _snakemake(workdir, target)
    assert not any(c.startswith("spline_") for c in pd.read_parquet(results / target.split("/", 1)[1]).columns)
    # Later: spline is added, with the archives and datasets gone.
    shutil.move(workdir / "resources", tmp_path / "moved-resources")
    _set_config(workdir, minibench={**TINY["minibench"], "build": False}, stages=list(STAGES))
    logits_before = _mtimes(results / "logits")
    searches = _mtimes(results / "recalibration")
    # spline's fits stayed in the fit store while it was dropped: status says they are re-applied
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml",
                             "--space", "sss"], cwd=workdir, capture_output=True, text=True, timeout=300)
    line = next(x for x in status.stdout.splitlines() if "sss_90_cifar100.parquet" in x)
    assert "fits made again: none; re-applied from the fit store and measured whole: spline" in line, status.stdout
    proc = _snakemake(workdir, target, "-n", "--quiet", "rules")
    planned = proc.stdout + proc.stderr
    assert "measure" in planned and "infer" not in planned and "odir_search" not in planned, planned
    _snakemake(workdir, target)
    table = pd.read_parquet(results / target.split("/", 1)[1])
    assert table["spline_ksce"].between(0, 1).all() and table["spline_accuracy"].between(0, 1).all()
    assert _mtimes(results / "logits") == logits_before and _mtimes(results / "recalibration") == searches
    fits = integrity.read_json(layout.measure_manifest(results, "sss_90", "cifar100", 0))["fits"]
    assert fits["made"] == {} and set(fits["reused"]) >= {"spline"}, fits  # as status said


def test_analysis_settings_rerun_only_the_analysis_and_no_change_reruns_nothing(tmp_path, finished_run):
    workdir = _clone(finished_run, tmp_path / "analysis")
    results = workdir / "results"
    assert _planned_jobs(workdir) == {}
    before = _mtimes(results)
    _set_config(workdir, analysis={**TINY["analysis"], "top_n": 2})
    # top_n: the HCS part (top_hcs.csv) and the architecture part (edge operations of the top n);
    # the reliability diagrams and the explorer read hcs.parquet, which the HCS part writes again; then the report
    rerun = {"analysis_hcs": 1, "analysis_architecture": 1, "analysis_reliability": 1, "assemble_report": 1,
             "explorer": 1}
    assert _planned_jobs(workdir) == {**rerun, "all": 1}
    _snakemake(workdir)
    changed = {p.relative_to(results) for p, t in _mtimes(results).items() if before.get(p) != t}
    assert {p.parts[0] for p in changed} == {"analysis", "plots", "report.html", "report.html.sha256", "explorer",
                                             "benchmarks"}
    assert {p for p in changed if p.parts[0] == "benchmarks"} == {
        Path("benchmarks/analysis/hcs.tsv"), Path("benchmarks/analysis/architecture.tsv"),
        Path("benchmarks/analysis/reliability.tsv"), Path("benchmarks/report.tsv"), Path("benchmarks/explorer.tsv")}
    assert len(pd.read_csv(results / "analysis" / "top_hcs.csv")) == 2 * 6  # top 2 of each of 6 tables
    assert _planned_jobs(workdir) == {}


def test_a_bad_config_value_stops_the_run_before_any_job(tmp_path):
    workdir = copy_workflow(tmp_path, {**TINY, "chunk_size": 0})
    proc = _snakemake(workdir, "-n", check=False)
    assert proc.returncode != 0
    assert "chunk_size" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()
    # what the schema cannot see: a bin count for the explorer that the run does not measure
    workdir = copy_workflow(tmp_path / "bins", {**TINY, "explorer_bins": [TINY["bins"][0], 7777]})
    proc = _snakemake(workdir, "-n", check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "explorer_bins: [7777] not among the bin counts the run measures" in said, said
    assert "Traceback" not in said and not (workdir / "results").exists()
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml"],
                            cwd=workdir, capture_output=True, text=True)
    assert status.returncode == 2 and status.stderr.strip().splitlines() == [
        "calibench status: explorer_bins: [7777] not among the bin counts the run measures "
        f"(bins: {TINY['bins']}); drop them, or write all"], status.stderr
    # a population path that is not a directory: its key, without the package's frames
    workdir = copy_workflow(tmp_path / "zoo", {**TINY, "populations": {"zoo": {"source": "logits",
                                                                             "path": str(tmp_path / "nowhere")}}})
    proc = _snakemake(workdir, "-n", check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"populations.zoo.path: {tmp_path / 'nowhere'} is not a directory" in said, said
    assert "settings.py" not in said and not (workdir / "results").exists()
    # mini benchmark sizes left out of every config file: make-minibench's own defaults
    workdir = copy_workflow(tmp_path / "sizes", {k: v for k, v in TINY.items() if k != "minibench"})
    default = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    default["minibench"] = {"build": True, "dir": "resources/minibench"}
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(default))
    proc = _snakemake(workdir, "-n", "-p", "resources/minibench/README.txt", check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "make-minibench resources/minibench  --workers" in said, said


def test_keep_logits_false_leaves_no_store_and_the_same_results(tmp_path, finished_run):
    # Two stages: the test is about the store, and the lambda, mu search and fits cost time.
    workdir = copy_workflow(tmp_path / "drop", {**TINY, "spaces": ["sss"], "datasets": ["cifar100"],
                                                "stages": ["pre", "post"], "keep_logits": False})
    shutil.copytree(finished_run / "resources", workdir / "resources")
    _set_config(workdir, minibench={**TINY["minibench"], "build": False})
    _snakemake(workdir, "results/tables/sss_90_cifar100.parquet")
    results = workdir / "results"
    assert not [p for p in (results / "logits").rglob("*") if p.is_file()], "logits left behind"
    assert not list((results / "chunks" / "infer").rglob("*.json"))  # temporary: removed once measured
    dropped = pd.read_parquet(results / "tables" / "sss_90_cifar100.parquet")
    kept = pd.read_parquet(finished_run / "results" / "tables" / "sss_90_cifar100.parquet")
    same = [c for c in dropped.columns if c != "config_hash"]  # the stages differ, so the shard keys do
    assert all(c.startswith(("pre_", "post_")) or not c.startswith(tuple(f"{s}_" for s in STAGES)) for c in same)
    pd.testing.assert_frame_equal(kept[same], dropped[same])
    assert _planned_jobs(workdir) == {**ANALYSIS_JOBS, "all": 1}  # finished tables stay finished


