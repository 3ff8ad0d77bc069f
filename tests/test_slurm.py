"""The workflow through snakemake-executor-plugin-slurm on a real single-node SLURM.

Installs SLURM from Debian's packages if absent (root only), writes a one-node
configuration with two fake GPUs, starts munged, slurmctld and slurmd, and stops what
it started whatever happens. Opt out with CALIBENCH_SKIP_SLURM=1.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures import SMALL_SSS, copy_workflow

CONF_DIR = Path("/etc/slurm")
TINY = SMALL_SSS  # the session's shared local run is the reference (conftest.py)
SET_RESOURCES = ["infer:mem_mb=2000", "infer:cpus_per_task=1", "measure:mem_mb=1000", "measure:cpus_per_task=1",
                 "analysis:mem_mb=2000", "table:mem_mb=1000"]
LOCAL_PARTITION = ["--slurm-no-account", "--slurm-status-command", "squeue", "--seconds-between-status-checks", "1",
                   "--slurm-init-seconds-before-status-checks", "1",
                   "--default-resources", "slurm_partition=debug", "mem_mb=1000", "cpus_per_task=1", "runtime=30",
                   "gpu=0"]

pytestmark = pytest.mark.skipif(os.environ.get("CALIBENCH_SKIP_SLURM") == "1", reason="CALIBENCH_SKIP_SLURM=1")


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _install_slurm():
    if shutil.which("slurmctld") and shutil.which("munged") and shutil.which("sbatch"):
        return
    if os.geteuid() != 0:
        pytest.skip("SLURM is not installed and installing it needs root (set CALIBENCH_SKIP_SLURM=1 to opt out)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env, timeout=600)
    proc = _run(["apt-get", "install", "-y", "-qq", "slurmctld", "slurmd", "slurm-client", "munge"], env=env, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"could not install SLURM: {proc.stderr[-2000:]}")


def _slurm_conf(state: Path) -> str:
    return "\n".join([
        "ClusterName=calibench", "SlurmctldHost=localhost", "SlurmUser=root", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "ReturnToService=2", f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/d", f"SlurmctldPidFile={state}/ctld.pid", f"SlurmdPidFile={state}/d.pid",
        f"SlurmctldLogFile={state}/ctld.log", f"SlurmdLogFile={state}/d.log",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none", "MinJobAge=600",
        "KillWait=5",  # SIGTERM, then SIGKILL 5 s later (a job's grace period at its time limit)
        "GresTypes=gpu",
        f"NodeName=localhost NodeHostname={socket.gethostname()} CPUs={os.cpu_count()} RealMemory=8000 Gres=gpu:2 "
        "State=UNKNOWN",
        "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=gpu Nodes=localhost Default=NO MaxTime=INFINITE State=UP", ""])  # the GPU jobs' partition


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    _install_slurm()
    pytest.importorskip("snakemake_executor_plugin_slurm")
    state = tmp_path_factory.mktemp("slurm-state")
    for sub in ("ctld", "d"):
        (state / sub).mkdir()
    CONF_DIR.mkdir(exist_ok=True)
    backups = {}
    # A machine's own configuration is put back afterwards; one that this fixture wrote in a run
    # that was killed before its clean-up is not (a controller that no longer runs makes every
    # later Snakemake start wait 9 s for `scontrol`, BENCHMARKS.md "Workflow").
    ours = (CONF_DIR / "slurm.conf").is_file() and "ClusterName=calibench" in (CONF_DIR / "slurm.conf").read_text()
    for name in ("slurm.conf", "gres.conf"):
        if (CONF_DIR / name).exists() and not ours:
            backups[name] = (CONF_DIR / name).read_bytes()
    started_munge = False
    try:
        if _run(["scontrol", "ping"], timeout=10).returncode == 0:
            _run(["scontrol", "shutdown"], timeout=30)  # a controller of another configuration
            time.sleep(2)
        (CONF_DIR / "slurm.conf").write_text(_slurm_conf(state))
        (CONF_DIR / "gres.conf").write_text("NodeName=localhost Name=gpu File=/dev/null\n"
                                            "NodeName=localhost Name=gpu File=/dev/zero\n")
        if _run(["pgrep", "-x", "munged"]).returncode != 0:
            Path("/run/munge").mkdir(exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            assert _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"]).returncode == 0
            started_munge = True
        assert _run(["slurmctld"]).returncode == 0
        assert _run(["slurmd"]).returncode == 0
        deadline = time.time() + 60
        while time.time() < deadline:
            if "idle" in _run(["sinfo", "-h", "-o", "%t"]).stdout:
                break
            time.sleep(1)
        else:
            pytest.fail(f"SLURM node never became idle: {(state / 'd.log').read_text()[-2000:]}")
        yield state
    finally:
        _run(["scontrol", "shutdown"], timeout=30)
        for pidfile in ("ctld.pid", "d.pid"):
            pid = state / pidfile
            if pid.exists():
                _run(["kill", pid.read_text().strip()])
        if started_munge:
            _run(["pkill", "-x", "munged"])
        for name in ("slurm.conf", "gres.conf"):
            if name in backups:
                (CONF_DIR / name).write_bytes(backups[name])
            else:
                (CONF_DIR / name).unlink(missing_ok=True)


def _project(tmp: Path) -> Path:
    return copy_workflow(tmp, TINY)


SNAKEMAKE = [sys.executable, "-m", "snakemake"]
CONFIG = ["--configfile", "tiny.yaml"]  # nargs="+": targets must come before it
SLURM_ARGS = ["--profile", "profiles/slurm", *LOCAL_PARTITION, "--set-resources", *SET_RESOURCES]
TABLE = "results/tables/sss_90_cifar10.parquet"
# The partitions a user sets once (profiles/slurm/config.yaml): GPU jobs to "gpu", the rest to "debug".
PARTITIONS = {**os.environ, "CALIBENCH_SLURM_GPU_PARTITION": "gpu", "CALIBENCH_SLURM_CPU_PARTITION": "debug"}


def _slurm_jobs(workdir: Path) -> list[dict]:
    """The SLURM jobs a run in ``workdir`` submitted (the controller keeps finished ones for MinJobAge):
    rule (the plugin's comment), partition and the GPUs asked for (TresPerJob, from --gpus)."""
    jobs = []
    for line in _run(["scontrol", "-o", "show", "job"]).stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("WorkDir") == str(workdir):
            gpus = re.search(r"gpu:(\d+)", fields.get("TresPerJob", ""))
            jobs.append({"id": fields["JobId"], "rule": re.sub(r"^rule_|_wildcards_.*$", "", fields.get("Comment", "")),
                         "partition": fields["Partition"], "gpus": int(gpus.group(1)) if gpus else 0})
    return jobs


def _stored_times(workdir: Path) -> dict:
    """Logits files and shards with their modification times (relative paths)."""
    results = workdir / "results"
    return {str(p.relative_to(results)): p.stat().st_mtime_ns
            for sub in ("logits", "shards") for p in (results / sub).rglob("arch=*.parquet")}


def _job_ids(workdir: Path) -> dict[str, str]:
    """SLURM job id of each inference log, from the line calibench writes at the start of a job."""
    ids = {}
    for job_log in sorted((workdir / "results" / "logs" / "infer").glob("*.log")):
        match = re.search(r"SLURM job (\d+) .*GPUs allocated: (\S+)", job_log.read_text())
        assert match, f"{job_log} does not say it ran as a SLURM job"
        ids[job_log.name] = match.groups()
    return ids


def _log_span(job_log: Path) -> tuple[str, str]:
    """First and last timestamps of a calibench job log."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", job_log.read_text(), re.M)
    return stamps[0], stamps[-1]


@pytest.fixture(scope="module")
def local_run(small_sss_run):
    """The same tiny workflow run locally (the session's shared SMALL_SSS run, read-only): the
    reference tables, and a mini benchmark to share."""
    return small_sss_run


def _cluster_project(tmp: Path, local: Path) -> Path:
    """The local run's mini benchmark, population and labels (not what these tests are about: each
    SLURM job level costs the plugin's status-check interval, about 12 s)."""
    cluster = _project(tmp)
    shutil.copytree(local / "resources", cluster / "resources")  # the same mini benchmark, not rebuilt
    shutil.copytree(local / "results" / "population", cluster / "results" / "population")
    shutil.copytree(local / "results" / "logits" / "labels", cluster / "results" / "logits" / "labels")
    return cluster


def _assert_table_equals_local(cluster: Path, local: Path) -> None:
    """The tables are equal, except an underdetermined ``ms`` or ``dir`` fit's flat optimum: there
    L-BFGS stops where the float sums of the job's threads lead it (2 here, 1 locally;
    docs/recalibration.md), at the same objective."""
    a, b = pd.read_parquet(local / TABLE), pd.read_parquet(cluster / TABLE)
    flat = [s for s in ("ms", "dir") if f"{s}_fit_underdetermined" in a and (a[f"{s}_fit_underdetermined"] == 1).all()]
    for s in flat:
        np.testing.assert_allclose(b[f"{s}_fit_objective"], a[f"{s}_fit_objective"], rtol=1e-9)
    free = [c for c in a.columns if not any(c.startswith(f"{s}_") and not c.endswith("_underdetermined") for s in flat)]
    assert len(free) > 100  # the other stages, exactly
    pd.testing.assert_frame_equal(a[free], b[free], check_exact=True)


def _assert_logits_equal_local(cluster: Path, local: Path) -> None:
    from calibench.store import logits as store

    names = sorted(p.relative_to(local) for p in (local / "results" / "logits").rglob("arch=*.parquet"))
    assert len(names) == 2 and names == sorted(p.relative_to(cluster)
                                               for p in (cluster / "results" / "logits").rglob("arch=*.parquet"))
    for name in names:
        a, b = store.read_network_logits(local / name), store.read_network_logits(cluster / name)
        assert [s.seed for s in a.seeds] == [s.seed for s in b.seeds] and a.key == b.key
        for x, y in zip(a.seeds, b.seeds):
            assert list(x.sets) == list(y.sets)
            for name_ in x.sets:
                np.testing.assert_array_equal(x.sets[name_], y.sets[name_])


def test_workflow_on_slurm_matches_a_local_run_and_survives_scancel(slurm, local_run, tmp_path):
    cluster = _cluster_project(tmp_path / "cluster", local_run)
    # First run: cancel the first inference job that SLURM starts.
    run = subprocess.Popen(SNAKEMAKE + [TABLE] + SLURM_ARGS + CONFIG, cwd=cluster, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=PARTITIONS)
    cancelled = None
    deadline = time.time() + 600
    while time.time() < deadline and cancelled is None and run.poll() is None:
        jobs = _run(["squeue", "-h", "-o", "%i %k %T"]).stdout.split("\n")  # %k: the plugin's rule comment
        for line in jobs:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "RUNNING" and "rule_infer" in parts[1]:
                cancelled = parts[0]
                _run(["scancel", cancelled])
                break
        time.sleep(0.2)
    first_output, _ = run.communicate(timeout=900)
    assert cancelled is not None, f"no inference job was seen running:\n{first_output[-3000:]}"
    assert run.returncode != 0, "the run with a cancelled job should report a failure"
    # Only the cancelled job failed: the other chunk's job finished and kept its output.
    assert first_output.count("Error in rule infer") == 1, first_output[-3000:]
    assert len(list((cluster / "results" / "chunks" / "infer" / "sss_90").glob("*.json"))) == 1
    survivors = _stored_times(cluster)

    proc = _run(SNAKEMAKE + [TABLE] + SLURM_ARGS + CONFIG, cwd=cluster, timeout=900, env=PARTITIONS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # device: cpu: the GPU rules' jobs ask for no GPU and go, like the CPU rules' (table), to the CPU partition.
    jobs = _slurm_jobs(cluster)
    assert {"infer", "measure", "table"} <= {job["rule"] for job in jobs}, jobs
    assert all(job["partition"] == "debug" and job["gpus"] == 0 for job in jobs), jobs

    # Every inference job ran as a SLURM job (its log names the job id), the cancelled one included.
    ids = _job_ids(cluster)
    assert len(ids) == 2 and len({job for job, _ in ids.values()}) == 2
    assert f"SLURM jobid {cancelled} " in first_output  # the job we cancelled was one the plugin submitted
    assert all(gpus == "none" for _, gpus in ids.values())  # device: cpu asks for no GPU

    # Nothing lost, nothing computed twice: logits and shards that survived the cancel were not rewritten.
    after = _stored_times(cluster)
    assert {Path(p).name for p in after} == {"arch=000000.parquet", "arch=000001.parquet"} and len(after) == 4
    for name, mtime in survivors.items():
        assert after[name] == mtime, f"{name} was computed twice"
    for chunk in (cluster / "results" / "chunks" / "measure" / "sss_90_cifar10").glob("*.json"):
        summary = json.loads(chunk.read_text())
        assert summary["computed"] + summary["skipped"] == 1 and not summary["failed"]
    _assert_table_equals_local(cluster, local_run)


def test_chunks_grouped_per_gpu_run_in_one_slurm_job(slurm, local_run, tmp_path):
    """--groups packs chunks into one SLURM job with one GPU (gpu is scoped local), run in series and
    in dependency order: here two chunks' inference and measurement in one group (this config gives
    lambda, mu; with the search docs/cluster.md keeps them in two groups, which Snakemake schedules the same way)."""
    cluster = _cluster_project(tmp_path / "grouped", local_run)
    # device: cpu asks for no GPU; the user's --set-resources asks for one anyway, to see it shared.
    group = ["--profile", "profiles/slurm", *LOCAL_PARTITION, "--set-resources", *SET_RESOURCES, "infer:gpu=1",
             "measure:gpu=1", "--groups", "infer=gpu", "measure=gpu", "--group-components", "gpu=2", "--resources", "gpu=1"]
    chunks = [f"results/chunks/measure/sss_90_cifar10/chunk{i:05d}.json" for i in (0, 1)]
    proc = _run(SNAKEMAKE + chunks + group + CONFIG, cwd=cluster, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = _job_ids(cluster)
    assert len(ids) == 2
    (job, gpus), = set(ids.values())  # both chunks: the same SLURM job, the same single fake GPU
    assert gpus.isdigit(), gpus
    # One SLURM job in all, one GPU: the four jobs one after another, each measurement after its inference.
    jobs = _slurm_jobs(cluster)
    assert len(jobs) == 1 and jobs[0]["gpus"] == 1 and jobs[0]["id"] == job, jobs
    group_logs = list((cluster / "results" / "logs" / "slurm").glob("group_*/**/*.log"))
    assert len(group_logs) == 1, group_logs
    logs = cluster / "results" / "logs"
    spans = {i: (_log_span(logs / f"infer/sss_90_chunk{i:05d}.log"), _log_span(logs / f"measure/sss_90_cifar10_chunk{i:05d}.log"))
             for i in (0, 1)}
    assert all(infer[1] <= measure[0] for infer, measure in spans.values()), spans
    ordered = sorted(span for pair in spans.values() for span in pair)
    assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:])), ordered
    # In series on the one GPU: the second chunk starts after the first has finished.
    spans = sorted(_log_span(log) for log in (cluster / "results" / "logs" / "infer").glob("*.log"))
    assert spans[0][1] <= spans[1][0], spans
    _assert_logits_equal_local(cluster, local_run)


def test_inference_job_given_a_gpu_without_cuda_fails_clearly(slurm, local_run, tmp_path):
    """device: auto asks SLURM for a GPU; a node whose torch cannot see it stops with a message."""
    cluster = _cluster_project(tmp_path / "nocuda", local_run)
    target = "results/chunks/infer/sss_90/chunk00000.json"
    proc = _run(SNAKEMAKE + [target] + SLURM_ARGS + ["--config", "device=auto"] + CONFIG, cwd=cluster, timeout=600,
                env=PARTITIONS)
    assert proc.returncode != 0
    (job,) = _slurm_jobs(cluster)  # submitted to the GPU partition with one GPU
    assert (job["rule"], job["partition"], job["gpus"]) == ("infer", "gpu", 1), job
    text = (cluster / "results" / "logs" / "infer" / "sss_90_chunk00000.log").read_text()
    assert re.search(r"GPUs allocated: \d", text), text
    assert "but torch sees no CUDA device" in text and "device: cpu" in text, text
    assert "Traceback" not in text, text  # a configuration error, said plainly
    assert not list((cluster / "results" / "logits").rglob("arch=*.parquet"))

    # The other GPU rules ask the same (a dry run: their resources are what the plugin turns into -p and --gpus);
    # the CPU rules ask for no GPU and go to the CPU partition.
    (cluster / "search.yaml").write_text("recalibration: {odir: {ms: {lambda: null, mu: null}}}\n")
    proc = _run(SNAKEMAKE + [TABLE, "-n"] + SLURM_ARGS + ["--config", "device=auto", "--configfile", "tiny.yaml",
                                                          "search.yaml"], cwd=cluster, timeout=300, env=PARTITIONS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    planned = {rule: dict(re.findall(r"(\w+)=([^,]*)", resources)) for rule, resources in
               re.findall(r"^rule (\w+):\n(?:[ \t]+.*\n)*?[ \t]+resources: (.*)$", proc.stdout + proc.stderr, re.M)}
    for rule, (gpus, partition) in {"infer": ("1", "gpu"), "measure": ("1", "gpu"), "odir_search": ("1", "gpu"),
                                    "table": ("0", "debug")}.items():
        assert (planned[rule]["gpu"], planned[rule]["slurm_partition"]) == (gpus, partition), (rule, planned[rule])


def test_a_logits_population_runs_on_slurm_and_asks_for_no_gpu(slurm, tmp_path):
    """A population beyond NATS-Bench goes through the same rules and profile; importing files
    needs no GPU, so its import jobs ask for none even where the config's device is auto (its
    measurements would ask for one, which these fake GPUs cannot give: here they are told not to)."""
    import numpy as np

    config = {"spaces": [], "minibench": {**TINY["minibench"], "build": False}, "bins": [5, 15],
              "stages": ["pre", "post"], "device": "auto", "analysis": TINY["analysis"],
              "populations": {"zoo": {"source": "logits", "path": "zoo", "chunk_size": 2}}}
    cluster = copy_workflow(tmp_path / "zoo-cluster", config)
    rng = np.random.default_rng(1)
    y = rng.integers(0, 10, 400)
    (cluster / "zoo" / "cifar10").mkdir(parents=True)
    for i in range(3):
        np.savez(cluster / "zoo" / "cifar10" / f"m{i}.npz", logits=rng.normal(size=(400, 10)).astype(np.float32) * (i + 1),
                 labels=y)
    (cluster / "zoo" / "models.csv").write_text("model,family\nm0,a\nm1,a\nm2,b\n")
    target = ["results/tables/zoo_cifar10.parquet"]
    # the population document and the labels here (each SLURM job level costs about 12 s); the networks on SLURM
    local = ["results/population/zoo.json", "results/logits/labels/space=zoo/dataset=cifar10.parquet"]
    proc = _run(SNAKEMAKE + local + ["--cores", "2"] + CONFIG, cwd=cluster, timeout=300)
    assert proc.returncode == 0 and (cluster / "results/population/zoo.json").is_file(), proc.stderr[-3000:]
    proc = _run(SNAKEMAKE + target + SLURM_ARGS + ["measure:gpu=0"] + CONFIG, cwd=cluster, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = _job_ids(cluster)
    assert sorted(ids) == ["zoo_chunk00000.log", "zoo_chunk00001.log"]
    assert all(gpus == "none" for _, gpus in ids.values())
    table = pd.read_parquet(cluster / "results/tables/zoo_cifar10.parquet")
    assert table["arch_str"].tolist() == ["m0", "m1", "m2"] and table["family"].tolist() == ["a", "a", "b"]


def test_a_job_killed_by_its_time_limit_mid_chunk_is_completed_by_the_rerun(slurm, local_run, tmp_path):
    """SLURM's own time limit ends a measurement job (SIGTERM, then SIGKILL after KillWait) while one
    of its chunk's two shards is written: the job is TIMEOUT, and the rerun measures only the
    missing network, equal to the local run's."""
    import signal

    cluster = copy_workflow(tmp_path / "timeout", {**TINY, "chunk_size": 2})  # both SSS networks in one chunk
    shutil.copytree(local_run / "resources", cluster / "resources")
    target = "results/chunks/measure/sss_90_cifar10/chunk00000.json"
    shard = {i: cluster / f"results/shards/space=sss/hp=90/dataset=cifar10/arch={i:06d}.parquet" for i in (0, 1)}
    # inference locally (not what is tested; saves a SLURM job), the measurement on SLURM
    proc = _run(SNAKEMAKE + ["results/chunks/infer/sss_90/chunk00000.json", "--cores", "2"] + CONFIG, cwd=cluster,
                timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    limited = [*SLURM_ARGS, "measure:runtime=1", "--latency-wait", "5"]  # one minute: SLURM's smallest time limit
    run = subprocess.Popen(SNAKEMAKE + [target] + limited + CONFIG, cwd=cluster, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)

    def job_processes():
        pids = []
        for pid in _run(["pgrep", "-f", "calibench measure-chunk"]).stdout.split():
            try:
                if Path(os.readlink(f"/proc/{pid}/cwd")) == cluster:
                    pids.append(int(pid))
            except OSError:  # ended meanwhile
                pass
        return pids

    job, pids = None, []
    try:
        deadline = time.time() + 600
        while time.time() < deadline and run.poll() is None:
            if not pids:  # the job has started
                pids = job_processes()
            elif shard[0].exists():  # mid-chunk: hold the job here until its time limit ends it
                pids = job_processes()  # now, so the job's python process is among them
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                break
            time.sleep(0.002)
        assert pids and shard[0].exists(), f"no measurement job was seen mid-chunk:\n{run.communicate()[0][-3000:]}"
        assert not shard[1].exists(), "the job measured both networks before it could be held: rerun the test"
        for line in _run(["squeue", "-h", "-o", "%i %k"]).stdout.splitlines():
            if "rule_measure" in line:
                job = line.split()[0]
        assert job is not None
        deadline = time.time() + 300
        while time.time() < deadline and "JobState=TIMEOUT" not in (state := _run(["scontrol", "show", "job", job]).stdout):
            time.sleep(1)
        assert "JobState=TIMEOUT" in state, state
    finally:  # the driver would take a minute more to report the failure; it is not what is tested
        if run.poll() is None:
            run.kill()
            run.wait()
        _run(["scancel", "--user", "root"])
        _run(SNAKEMAKE + ["--unlock"] + CONFIG, cwd=cluster, timeout=300)  # the lock of the driver killed here
    assert not shard[1].exists() and not (cluster / target).exists()
    kept = shard[0].stat().st_mtime_ns

    proc = _run(SNAKEMAKE + [target, "--cores", "2"] + CONFIG, cwd=cluster, timeout=900)  # the rerun, here locally
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((cluster / target).read_text())
    assert (summary["skipped"], summary["computed"], summary["failed"]) == (1, 1, [])
    assert shard[0].stat().st_mtime_ns == kept  # nothing computed twice
    reference = local_run / "results/shards/space=sss/hp=90/dataset=cifar10/arch=000001.parquet"
    columns = ["stage", "metric", "bins", "value"]
    pd.testing.assert_frame_equal(pd.read_parquet(reference)[columns], pd.read_parquet(shard[1])[columns])
