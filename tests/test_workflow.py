"""The Snakemake workflow end to end on a tiny mini benchmark, resume after kill -9, and lint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from calibench import metrics
from calibench.analysis import hcs
from fixtures import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
TINY = {
    "minibench": {"build": True, "dir": "resources/minibench", "n_tss": 3, "n_sss": 2, "n_test": 60, "n_train": 30,
                  "seed": 3},
    "datasets": ["cifar10", "cifar100"],
    "bins": [5, 15, 50],
    "chunk_size": 2,
    "measure_group": 1,
    "loader_workers": 2,  # archive loading in worker processes, as on a GPU node
    "analysis": {"hcs_betas": [1, 2], "top_k": [2], "top_n": 3},
}




def _snakemake(workdir: Path, *args, check=True):
    proc = subprocess.run(SNAKEMAKE + ["--configfile", "tiny.yaml", "--cores", "2", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"), TINY)
    _snakemake(workdir)
    return workdir


def test_every_shard_exists_with_the_spec_metric_names(finished_run):
    results = finished_run / "results"
    names = set(metrics.metric_names(TINY["bins"]))
    for space, hp in (("tss", "200"), ("sss", "90")):
        selected = json.loads((results / "population" / f"{space}.json").read_text())["selected"]
        assert selected == ([0, 2] if space == "tss" else [0, 1])  # mini TSS archs 0 and 1 are isomorphic
        for dataset in TINY["datasets"]:
            for index in selected:
                path = results / "shards" / f"space={space}" / f"hp={hp}" / f"dataset={dataset}" / f"arch={index:06d}.parquet"
                shard = pq.read_table(path).to_pandas()
                got = {f"{m}_{int(b)}" if not pd.isna(b) else m for m, b in zip(shard["metric"], shard["bins"])}
                ood = {"ood_auroc_gaussian_noise", "ood_auroc_svhn"} if dataset == "cifar10" else set()
                assert got == names | ood, (space, dataset, index)
                assert set(shard["stage"]) == {"pre", "post"}
                assert (shard["arch_index"] == index).all() and shard["config_hash"].nunique() == 1
                assert shard["temperature"].between(0.05, 20).all()


def test_tables_count_networks_and_expand_tss(finished_run):
    results = finished_run / "results"
    for dataset in TINY["datasets"]:
        tss = pd.read_parquet(results / "tables" / f"tss_200_{dataset}.parquet")
        assert list(tss["arch_index"]) == [0, 1, 2]  # three indices, two measured networks
        assert list(tss["measured_by"]) == [0, 0, 2]
        row0, row1 = tss.iloc[0], tss.iloc[1]
        assert row0["pre_ece_15"] == row1["pre_ece_15"] and row0["arch_str"] != row1["arch_str"]
        sss = pd.read_parquet(results / "tables" / f"sss_90_{dataset}.parquet")
        assert len(sss) == 2 and (sss["arch_index"] == sss["measured_by"]).all()
        for col in ("accuracy", "recorded_accuracy", "temperature", "pre_ece_15", "post_cwce_em_50", "pre_kdece"):
            assert col in tss.columns and col in sss.columns
        np.testing.assert_allclose(sss["accuracy"], sss["recorded_accuracy"], atol=1.5 / 60)


def test_kendall_matrices_are_symmetric_with_unit_diagonal(finished_run):
    kendall = pd.read_parquet(finished_run / "results" / "analysis" / "kendall.parquet")
    assert set(kendall["figure"]) == {"datasets", "metrics", "pre_post"}
    square = kendall[kendall["figure"] != "pre_post"]
    for _, m in square.groupby(["figure", "metric", "space", "dataset", "population"]):
        grid = m.pivot(index="row", columns="col", values="tau")
        grid = grid.loc[grid.columns]
        values = grid.to_numpy()
        np.testing.assert_allclose(np.diag(values), 1.0)
        finite = np.isfinite(values) & np.isfinite(values.T)
        np.testing.assert_allclose(values[finite], values.T[finite], atol=1e-12)


def test_hcs_equals_the_formula_on_the_table_columns(finished_run):
    results = finished_run / "results"
    ranking = pd.read_parquet(results / "analysis" / "hcs.parquet")
    table = pd.read_parquet(results / "tables" / "sss_90_cifar100.parquet")
    merged = ranking[(ranking["space"] == "sss") & (ranking["dataset"] == "cifar100")].merge(
        table[["arch_index", "accuracy", "pre_ece_15"]], on="arch_index", suffixes=("", "_table"))
    assert len(merged) == 2
    for beta in (1, 2):
        a, e = merged["accuracy_table"], merged["pre_ece_15_table"]
        expected = (1 + beta) * a * (1 - e) / (beta * a + (1 - e))
        np.testing.assert_allclose(merged[f"hcs_{beta}"], expected, rtol=1e-12)
    assert hcs(0.9, 0.1, 1) == pytest.approx(0.9)  # equal accuracy and 1 - ECE give that value


def test_report_and_plots_exist(finished_run):
    results = finished_run / "results"
    report = (results / "report.html").read_text()
    assert "NOT NATS-Bench results" in report
    images = [p for p in (results / "plots").glob("*.png")]
    assert len(images) >= 10
    for image in images:
        assert image.read_bytes()[:4] == b"\x89PNG"
        assert f"plots/{image.name}" in report
    for job_log in ("logs/analysis.log", "logs/minibench.log", "logs/population/tss.log"):
        assert (results / job_log).is_file()


def test_every_evaluate_job_records_its_time_and_peak_memory(finished_run):
    results = finished_run / "results"
    chunks = sorted((results / "chunks").rglob("chunk*.json"))
    records = sorted((results / "benchmarks" / "evaluate").glob("*.tsv"))
    assert len(records) == len(chunks) > 0
    for record in records:
        row = pd.read_csv(record, sep="\t").iloc[0]
        assert row["s"] > 0 and 50 < row["max_rss"] < 8000, (record, row.to_dict())  # MB: torch alone is ~300


def test_query_views(finished_run):
    from calibench.query import run_query

    df = run_query("SELECT space, dataset, count(*) AS n, max(hcs_1) AS best FROM networks GROUP BY ALL ORDER BY ALL",
                   results=finished_run / "results")
    assert list(df["n"]) == [2, 2, 3, 3]
    long = run_query("SELECT count(DISTINCT metric) AS m FROM metrics WHERE bins IS NULL", results=finished_run / "results")
    assert long["m"][0] == len(metrics.UNBINNED_METRICS) + 2  # plus the two OoD AUROCs (CIFAR-10)


def test_rerunning_one_table_touches_nothing_else(finished_run):
    results = finished_run / "results"
    before = {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file() and "logs" not in p.parts}
    target = results / "tables" / "sss_90_cifar100.parquet"
    target.unlink()
    _snakemake(finished_run, "results/tables/sss_90_cifar100.parquet")
    after = {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file() and "logs" not in p.parts}
    changed = {p for p in after if before.get(p) != after[p]}
    # The rule's two outputs and its job record; nothing else.
    assert changed == {target, results / "failures" / "sss_90_cifar100.parquet",
                       results / "benchmarks" / "tables" / "sss_90_cifar100.tsv"}


def test_a_bad_config_value_stops_the_run_before_any_job(tmp_path):
    workdir = copy_workflow(tmp_path, {**TINY, "chunk_size": 0})
    proc = _snakemake(workdir, "-n", check=False)
    assert proc.returncode != 0
    assert "chunk_size" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def _children(pid: int) -> list[int]:
    """Child processes of ``pid`` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_kill_and_resume_computes_only_the_missing_shards(tmp_path):
    tiny = {**TINY, "minibench": {**TINY["minibench"], "n_sss": 4}, "chunk_size": 4, "datasets": ["cifar100"],
            "spaces": ["sss"]}
    straight = copy_workflow(tmp_path / "straight", tiny)
    interrupted = copy_workflow(tmp_path / "interrupted", tiny)
    _snakemake(straight)
    # Prepare the interrupted copy up to the evaluate job, then run that job by hand and kill it.
    _snakemake(interrupted, "results/population/sss.json")
    settings = json.loads(json.dumps(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())))
    settings.update({k: v for k, v in tiny.items() if k != "minibench"})
    settings["minibench"] = tiny["minibench"]
    manifest = interrupted / "results" / "chunks" / "sss_90_cifar100" / "chunk00000.json"
    cmd = [sys.executable, "-m", "calibench.cli", "evaluate-chunk", "--settings", json.dumps(settings), "--space", "sss",
           "--hp", "90", "--dataset", "cifar100", "--chunk", "0", "--results", "results", "--manifest", str(manifest),
           "--quiet"]
    shard_dir = interrupted / "results" / "shards" / "space=sss" / "hp=90" / "dataset=cifar100"
    job = subprocess.Popen(cmd, cwd=interrupted, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(list(shard_dir.glob("arch=*.parquet"))) < 2:
        time.sleep(0.05)
    loaders = _children(job.pid)  # loader_workers: 2, i.e. two loader processes (and multiprocessing's tracker)
    assert len(loaders) >= 2, loaders
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in loaders):
        time.sleep(0.1)
    assert not [pid for pid in loaders if Path(f"/proc/{pid}").exists()], "loader processes outlived the killed job"
    done_before = sorted(p.name for p in shard_dir.glob("arch=*.parquet"))
    assert 2 <= len(done_before) < 4, "the job was not killed in the middle of its chunk"
    assert not manifest.exists()
    for name in done_before:  # every shard left behind is complete (atomic writes)
        assert pq.read_table(shard_dir / name).num_rows > 0
    mtimes = {name: (shard_dir / name).stat().st_mtime_ns for name in done_before}
    _snakemake(interrupted)
    summary = json.loads(manifest.read_text())
    assert summary["skipped"] == len(done_before) and summary["computed"] == 4 - len(done_before)
    assert all((shard_dir / name).stat().st_mtime_ns == t for name, t in mtimes.items())  # not recomputed
    a = pd.read_parquet(straight / "results" / "tables" / "sss_90_cifar100.parquet")
    b = pd.read_parquet(interrupted / "results" / "tables" / "sss_90_cifar100.parquet")
    pd.testing.assert_frame_equal(a, b)


def test_snakemake_lint_passes():
    proc = subprocess.run(SNAKEMAKE + ["--lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "good condition" in proc.stdout + proc.stderr
