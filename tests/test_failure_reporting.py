"""What went wrong is told where the user looks, and what was repaired is picked up (issue 15):
`calibench run` (the README's command) on a tiny mini benchmark with a broken archive file,
damaged and deleted shards, a missing dataset file, bad config files and a concurrent run."""

import json
import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibench.results import failures
from calibench.run import repair
from fixtures import WORKFLOW_TINY, copy_workflow, workflow_minibench

RUN = [sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--cores", "2"]
# The table only, no analysis: where a test is about measurement, the analysis parts would only cost time.
RUN_TABLE = RUN + ["--space", "sss"]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--configfile", "tiny.yaml", "--cores", "2"]
TINY = {
    # the session's mini benchmark (fixtures.workflow_minibench), copied in: the minibench rule's job is
    # run by the small SSS run; three of its SSS networks
    "minibench": {**WORKFLOW_TINY["minibench"], "build": False},
    "population": {"sss": {"mode": "range", "start": 0, "stop": 3}},
    "spaces": ["sss"], "datasets": ["cifar10"], "bins": [5, 15], "stages": ["pre", "post"], "chunk_size": 2,
    # no analysis part: the report's failure section is what these tests read (analysis.parts, docs/analysis.md)
    "measure_group": 1, "analysis": {"hcs_betas": [1], "top_k": [], "top_n": 3, "parts": []},
}
TABLE = "results/tables/sss_90_cifar10.parquet"
SHARDS = "results/shards/space=sss/hp=90/dataset=cifar10"
ARCHIVE = "resources/minibench/NATS-sss-v1_0-50262-full/000001.pickle.pbz2"


def _run(workdir: Path, cmd=RUN, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("visible"), TINY)
    shutil.copytree(workflow_minibench(tmp_path_factory), workdir / TINY["minibench"]["dir"])
    proc = _run(workdir, RUN_TABLE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "calibench:" not in proc.stderr  # nothing failed, nothing to say
    return workdir


def _clone(finished: Path, dst: Path, results: bool = True) -> Path:
    shutil.copytree(finished, dst, symlinks=True, ignore=None if results else shutil.ignore_patterns("results",
                                                                                                        ".snakemake"))
    return dst


def test_a_broken_archive_is_told_on_the_terminal_and_in_the_report_then_retried_once_repaired(finished, tmp_path):
    workdir = _clone(finished, tmp_path / "broken", results=False)
    good = (workdir / ARCHIVE).read_bytes()
    (workdir / ARCHIVE).write_bytes(good[: len(good) // 3])  # truncated
    proc = _run(workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stderr[proc.stderr.index("calibench: 1 network result(s) missing"):]
    assert "sss_90_cifar10: 2 of 3 selected networks measured" in said
    assert f"sss_90_cifar10 arch 1 [inference] {ARCHIVE}: " in said and "end-of-stream marker" in said
    report = (workdir / "results/report.html").read_text()
    assert "What failed" in report and ARCHIVE in report and "2 of 3" not in report.split("What failed")[0]
    assert "<b>1 of 3 selected networks are not in the tables</b>" in report

    (workdir / ARCHIVE).write_bytes(good)  # repaired: the next run retries it
    again = _run(workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{ARCHIVE}: changed since it failed" in again.stderr and "this chunk runs again" in again.stderr
    table = pd.read_parquet(workdir / TABLE)
    assert sorted(table["arch_index"]) == [0, 1, 2]
    assert pd.read_parquet(workdir / "results/failures/sss_90_cifar10.parquet").empty
    assert "network result(s) missing" not in again.stderr  # nothing left to report
    reference = pd.read_parquet(finished / TABLE)
    assert table.loc[1, "source_mtime"] > reference.loc[1, "source_mtime"]  # the archive was written again
    pd.testing.assert_frame_equal(table.drop(columns="source_mtime"), reference.drop(columns="source_mtime"))
    assert "Every selected network was measured" in (workdir / "results/report.html").read_text()
    assert "Nothing to be done" in _run(workdir).stderr  # one run (the note goes to stderr)


def test_a_damaged_and_a_deleted_shard_are_noticed_by_query_and_table_and_measured_again(finished, tmp_path):
    workdir = _clone(finished, tmp_path / "damaged")
    shards = workdir / SHARDS
    original = {i: pd.read_parquet(shards / f"arch={i:06d}.parquet") for i in range(3)}
    kept = (shards / "arch=000001.parquet").stat().st_mtime_ns
    (shards / "arch=000000.parquet").write_bytes(os.urandom(3000))  # garbage
    (shards / "arch=000002.parquet").unlink()

    query = _run(workdir, [sys.executable, "-m", "calibench.run.cli", "query", "SELECT count(DISTINCT arch_index) AS n "
                           "FROM metrics"])
    assert query.returncode == 0, query.stderr
    assert "1 damaged shard(s) left out of metrics" in query.stderr and "arch=000000.parquet" in query.stderr
    assert query.stdout.split()[-1] == "1"
    fit = workdir / "results/fits/space=sss/hp=90/dataset=cifar10/arch=000000.parquet"  # the fit store (issue 35)
    fit.write_bytes(os.urandom(2000))
    query = _run(workdir, [sys.executable, "-m", "calibench.run.cli", "query", "SELECT count(DISTINCT arch_index) AS n "
                           "FROM fits"])
    assert query.returncode == 0, query.stderr
    assert "1 damaged fit-store file(s) left out of fits" in query.stderr and "arch=000000.parquet" in query.stderr
    assert query.stdout.split()[-1] == "2"  # arch 2's fits stay beside its deleted shard

    proc = _run(workdir, RUN_TABLE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "arch=000000.parquet: changed since it was written" in proc.stderr
    assert "arch=000002.parquet: deleted" in proc.stderr
    for i in range(3):
        got = pd.read_parquet(shards / f"arch={i:06d}.parquet")
        pd.testing.assert_frame_equal(got, original[i])
    assert (shards / "arch=000001.parquet").stat().st_mtime_ns == kept  # nothing computed twice
    assert fit.with_name(fit.name + ".damaged").is_file() and fit.stat().st_size > 2000  # set aside, fitted again
    manifests = [json.loads(p.read_text()) for p in (workdir / "results/chunks/measure/sss_90_cifar10").glob("*.json")]
    assert sorted((m["skipped"], m["computed"]) for m in manifests) == [(0, 1), (1, 1)]
    pd.testing.assert_frame_equal(pd.read_parquet(workdir / TABLE), pd.read_parquet(finished / TABLE))
    assert "Nothing to be done" in _run(workdir, RUN_TABLE).stderr  # one run (the note goes to stderr)


def test_a_table_built_over_a_damaged_shard_reports_it_and_goes_on(finished, tmp_path):
    from calibench.results.tables import build_table, table_metadata

    workdir = _clone(finished, tmp_path / "table")
    results = workdir / "results"
    (results / SHARDS.split("results/")[1] / "arch=000002.parquet").write_bytes(b"PAR1 not a parquet file")
    out, failed = tmp_path / "t.parquet", tmp_path / "f.parquet"
    manifests = sorted((results / "chunks/measure/sss_90_cifar10").glob("*.json"))
    wide = build_table("sss", "90", "cifar10", results, out, manifests, failures_out=failed)
    assert sorted(wide["arch_index"]) == [0, 1]
    rows = pd.read_parquet(failed)
    assert list(rows["arch_index"]) == [2] and rows["stage"].iloc[0] == "table"
    assert rows["reason"].iloc[0].startswith("shard damaged since it was measured (not a parquet file")
    assert not (results / SHARDS.split("results/")[1] / "arch=000002.parquet").exists()  # set aside
    assert table_metadata(out)["coverage"] == {"selected": 3, "measured": 2, "missing": [2]}


def test_a_failed_job_is_told_with_its_cause(finished, tmp_path):
    workdir = _clone(finished, tmp_path / "nodata", results=False)
    (workdir / "resources/minibench/datasets/cifar-10-batches-py/test_batch").unlink()
    proc = _run(workdir)
    assert proc.returncode != 0
    said = proc.stderr[proc.stderr.index("calibench: "):]
    assert "job(s) failed:" in said and "FileNotFoundError" in said
    assert "resources/minibench/datasets/cifar-10-batches-py/test_batch" in said
    assert "results/logs/" in said  # where the whole story is


def test_config_errors_name_the_file_line_and_key_in_a_few_lines(finished, tmp_path):
    workdir = _clone(finished, tmp_path / "config", results=False)
    (workdir / "tiny.yaml").write_text("bins: [5, 15\nspaces: [sss]\n")  # a missing ]
    proc = _run(workdir)
    assert proc.returncode == 2
    assert "tiny.yaml:2:7: YAML syntax error: expected ',' or ']'" in proc.stderr
    (workdir / "tiny.yaml").write_text("bins: [5, -15]\nchunk_size: 0\n")
    for proc in (_run(workdir), _run(workdir, SNAKEMAKE + ["-n"])):
        assert proc.returncode != 0
        text = proc.stdout + proc.stderr
        assert "bins.1 = -15: -15 is less than the minimum of 1 (set in" in text and "tiny.yaml)" in text
        assert "chunk_size = 0: 0 is less than the minimum of 1" in text
        assert len(text.splitlines()) < 15, text  # not the schema and config dumped
    lines = [ln for ln in (workdir / "config/config.yaml").read_text().splitlines() if not ln.startswith("bins:")]
    (workdir / "config/config.yaml").write_text("\n".join(lines) + "\n")
    (workdir / "tiny.yaml").write_text("spaces: [sss]\n")
    proc = _run(workdir, SNAKEMAKE + ["-n"])
    text = proc.stdout + proc.stderr
    assert "bins: required key missing" in text and len(text.splitlines()) < 15, text
    assert not (workdir / "results").exists()


def test_a_population_of_no_network_or_past_the_archive_and_a_nan_are_refused_before_any_job(finished, tmp_path):
    # each was a config the schema let through: the run wrote an empty population and replaced the
    # table by a 0-row parquet, failed at job time having deleted the population file, or measured
    # every TACE as 0.0; now a config error (exit 2) naming the key and the file, and nothing changes
    workdir = _clone(finished, tmp_path / "refused")
    kept = {p: p.read_bytes() for p in sorted((workdir / "results").glob("tables/*.parquet"))
            + sorted((workdir / "results").glob("population/*.json"))}
    assert len(kept) == 2
    tiny = yaml.safe_load((workdir / "tiny.yaml").read_text())
    archive = "resources/minibench/NATS-sss-v1_0-50262-full"
    for over, said in [
        ({"population": {"sss": {"mode": "list"}}}, "population.sss.indices: required with mode: list"),
        ({"population": {"sss": {"mode": "list", "indices": []}}},
         "population.sss.indices = []: [] should be non-empty"),
        ({"population": {"sss": {"mode": "range", "start": 5, "stop": 2}}},
         "population.sss = {'mode': 'range', 'start': 5, 'stop': 2}: range start 5 is not below stop 2: it selects "
         "no network (set in tiny.yaml)"),
        ({"population": {"sss": {"mode": "list", "indices": [1, 99999]}}},
         f"population.sss.indices = [1, 99999]: index 99999 is outside [0, 4) (4 architectures: the archive {archive}) "
         "(set in tiny.yaml)"),
        ({"tace_threshold": float("nan")}, "tace_threshold = nan: not a finite number: no key takes NaN or infinity "
                                           "(set in tiny.yaml)"),
        ({"temperature": {"val_fraction": float("nan")}}, "temperature.val_fraction = nan: not a finite number"),
    ]:
        (workdir / "tiny.yaml").write_text(yaml.safe_dump({**tiny, **over}))
        proc = _run(workdir, RUN_TABLE)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 2, text
        assert said in proc.stderr and "Traceback" not in text and len(text.splitlines()) <= 3, text
    proc = _run(workdir, SNAKEMAKE + ["-n"])  # a plain snakemake refuses it too, as it plans
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "temperature.val_fraction = nan: not a finite number" in text
    (workdir / "tiny.yaml").write_text(yaml.safe_dump({**tiny, "population": {"sss": {"mode": "list",
                                                                                   "indices": [4]}}}))
    proc = _run(workdir, SNAKEMAKE + ["-n"])
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "population.sss.indices = [4]: index 4 is outside [0, 4)" in text, text
    assert len(text.splitlines()) < 15, text
    assert {p: p.read_bytes() for p in kept} == kept  # the table and the population as they were


def test_a_second_run_while_one_is_live_is_told_not_to_unlock(finished, tmp_path):
    # The finished run with a bin count added: the live run has measurement jobs to do, and no inference.
    workdir = _clone(finished, tmp_path / "busy")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump({"explorer": False, **TINY, "bins": [5, 15, 30]}))
    shutil.rmtree(workdir / "results/logs")  # the jobs' logs of this run are how it is seen to be under way
    live = subprocess.Popen(RUN_TABLE, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        def jobs_started():  # a job's log (the run's own Snakemake log comes first)
            return any("snakemake" not in p.parts for p in (workdir / "results/logs").rglob("*.log"))

        while time.time() < deadline and not jobs_started():
            time.sleep(0.1)
        assert live.poll() is None
        os.killpg(live.pid, signal.SIGSTOP)  # held mid-run while the second run and the dry run look at it
        plain = _run(workdir, SNAKEMAKE)
        assert plain.returncode != 0
        assert "is in use by another calibench run: pid" in plain.stderr
        # said while parsing, before Snakemake's own lock message (which suggests --unlock)
        assert "Do not use --unlock" in plain.stderr.split("cannot be locked")[0], plain.stderr
        assert "Nothing to be done" not in _run(workdir, SNAKEMAKE + ["-n"]).stdout  # a dry run is not stopped
    finally:
        os.killpg(live.pid, signal.SIGCONT)
        live.wait(timeout=300)
    assert live.returncode == 0


# ---------------------------------------------------------------- units

def test_changes_compares_recorded_files_and_failed_sources(tmp_path):
    results = tmp_path / "results"
    shard = results / "shards/space=zoo/dataset=c10/arch=000004.parquet"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"x" * 10)
    archive = tmp_path / "a.pbz2"
    manifest = tmp_path / "m.json"
    doc = {"space": "zoo", "hp": "", "dataset": "c10", "shards": {"4": "k"}, "files": {"4": repair.file_state(shard)},
           "failures": [{"stage": "measurement", "source": str(archive), "source_state": None, "reason": "gone"}]}
    manifest.write_text(json.dumps(doc))
    assert repair.changes(manifest, results) == []
    archive.write_bytes(b"back")
    assert repair.changes(manifest, results) == [f"{archive}: restored since it failed (gone)"]
    archive.unlink()
    shard.write_bytes(b"y" * 11)
    assert repair.changes(manifest, results) == [f"{shard}: changed since it was written"]
    shard.unlink()
    assert repair.changes(manifest, results) == [f"{shard}: deleted"]


def test_failed_job_logs_are_read_from_snakemakes_log(tmp_path):
    log = tmp_path / "run.snakemake.log"
    log.write_text("Error in rule infer:\n    jobid: 3\n    log: results/logs/infer/a.log (check log file(s) for error "
                   "details)\nError in rule labels:\n    log: results/logs/labels/b.log (check log file(s) for error "
                   "details)\n")
    assert failures.failed_job_logs(log) == [Path("results/logs/infer/a.log"), Path("results/logs/labels/b.log")]
    job = tmp_path / "a.log"
    job.write_text("2026 INFO start\nTraceback (most recent call last):\n  File x\nFileNotFoundError: cifar10: "
                   "file not found: d/test_batch\n")
    assert failures.cause(job) == "FileNotFoundError: cifar10: file not found: d/test_batch"
    assert failures.cause(tmp_path / "none.log") == "(no log written)"


def test_terminal_summary_of_nan_stages_only_names_them_without_a_repair_hint(tmp_path):
    from calibench.results import shards

    rows = [{"space": "tss", "hp": "200", "dataset": "cifar100", "arch_index": i, "seed": 777, "stage": "dir",
             "source": f"logits/arch={i:06d}.parquet", "reason": "did not converge"} for i in (0, 3)]
    shards.write_atomic_parquet(shards.failures_table(rows), tmp_path / "failures" / "tss_200_cifar100.parquet")
    text = failures.terminal_summary(tmp_path, [])
    # the folder of this results directory (not a fixed results/failures/): where the run wrote them
    assert text.splitlines()[0] == f"calibench: 2 recalibration stage(s) NaN ({tmp_path / 'failures' / '*.parquet'}):"
    assert "tss_200_cifar100 arch 3 seed 777 [dir] logits/arch=000003.parquet: did not converge" in text
    assert "Repair the file" not in text
