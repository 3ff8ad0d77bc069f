"""Signals named and forwarded (issue 33, item 4): a job killed by a signal is reported as such;
SIGTERM to `calibench run` stops Snakemake and its jobs, leaves no process behind and the next run
completes it; a refusal names the process that holds the results.

The real runs here are the SMALL_SSS run (conftest's `small_sss_run`, shared) cloned with its
measurement taken away, so that each run has two measurement jobs of a few seconds to kill.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from calibench.results import failures
from calibench.run import runlock
from calibench.run.runlock import RunInUse, run_guard
from fixtures import SMALL_SSS_TABLE, clone_run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc (Linux)")

RUN = [sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--cores", "2", "--space", "sss"]


# ---------------------------------------------------------------- helpers

def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def session_processes(sid: int) -> dict[int, str]:
    """The live (not zombie) processes of session ``sid``: pid -> command line."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out[int(stat.parent.name)] = cmdline(int(stat.parent.name))
    return out


def parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (None once it has ended)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def start(tmp_path):
    """Start a command in its own session (a login shell's job); every process of the session is
    killed at the end."""
    procs = []

    def run(argv, cwd) -> subprocess.Popen:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        procs.append(proc)
        return proc

    yield run
    for proc in procs:
        for pid in session_processes(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


def measurement_to_redo(tmp_path: Path, small_sss_run: Path) -> Path:
    """The finished SMALL_SSS run with its measurement (shards, manifests, table) taken away."""
    workdir = clone_run(small_sss_run, tmp_path / "run")
    for sub in ("shards", "chunks/measure", "tables", "failures"):
        path = workdir / "results" / sub
        if path.exists():
            subprocess.run(["rm", "-rf", str(path)], check=True)
    return workdir


def wait_for_job(run: subprocess.Popen, step: str = "measure-chunk", timeout: float = 300) -> int:
    """The pid of a job's program (`python -m calibench <step>`, not its shell) of the run's session."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, cmd in session_processes(run.pid).items():
            if f"-m calibench {step} " in cmd and not cmd.startswith(("/bin/sh", "/usr/bin/bash", "bash")):
                return pid
        assert run.poll() is None, f"the run ended before any {step} job:\n{run.stdout.read()[-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"no {step} job within {timeout} s")


# ---------------------------------------------------------------- 1. a job killed by a signal

def test_exit_statuses_of_signals_are_named():
    assert failures.signal_exit(137).startswith("killed by SIGKILL (exit status 137)")
    assert failures.signal_exit(143) == "killed by SIGTERM (exit status 143)"
    assert failures.signal_exit(130) == "killed by SIGINT (exit status 130)"
    assert failures.signal_exit(139) == "killed by SIGSEGV (exit status 139)"
    assert failures.signal_exit(134) == "killed by SIGABRT (exit status 134)"
    assert failures.signal_exit(-9).startswith("killed by SIGKILL (signal 9)")
    for ordinary in (0, 1, 2, 127, 128, 255):
        assert failures.signal_exit(ordinary) is None


# Snakemake 9.27's log of a run whose measurement job was killed (kill -9 of its Python program,
# then of another job's shell), as captured; the settings JSON shortened.
KILLED = """\
RuleException:
CalledProcessError in file "/tmp/sig/k_python/workflow/rules/measure.smk", line 28:
Command 'set -euo pipefail;  OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench measure-chunk --settings '{...}' --target sss_90 --dataset cifar10 --chunk 00001 --results results --logits-manifest results/chunks/infer/sss_90/chunk00001.json --labels results/logits/labels/dataset=cifar10.parquet --manifest results/chunks/measure/sss_90_cifar10/chunk00001.json  --keep-logits True --device cpu --batch-size 1000 --loader-workers 1 --measure-group 1 --networks-per-pass auto > results/logs/measure/sss_90_cifar10_chunk00001.log 2>&1' returned non-zero exit status 137.
[Fri Nov 27 02:05:57 2026]
Error in rule measure:
    message: None
    jobid: 7
    input: results/chunks/infer/sss_90/chunk00001.json, results/logits/labels/dataset=cifar10.parquet
    output: results/chunks/measure/sss_90_cifar10/chunk00001.json
    log: results/logs/measure/sss_90_cifar10_chunk00001.log (check log file(s) for error details)
    shell:
        OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench measure-chunk --settings '{...}' --target sss_90 --dataset cifar10 --chunk 00001 --results results --logits-manifest results/chunks/infer/sss_90/chunk00001.json --labels results/logits/labels/dataset=cifar10.parquet --manifest results/chunks/measure/sss_90_cifar10/chunk00001.json  --keep-logits True --device cpu --batch-size 1000 --loader-workers 1 --measure-group 1 --networks-per-pass auto > results/logs/measure/sss_90_cifar10_chunk00001.log 2>&1
        (command exited with non-zero exit code)
RuleException:
CalledProcessError in file "/tmp/sig/k_bash/workflow/rules/measure.smk", line 28:
Command 'set -euo pipefail;  OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench measure-chunk --settings '{...}' --target sss_90 --dataset cifar10 --chunk 00000 --results results > results/logs/measure/sss_90_cifar10_chunk00000.log 2>&1' died with <Signals.SIGKILL: 9>.
[Fri Nov 27 02:06:36 2026]
Error in rule measure:
    message: None
    jobid: 4
    output: results/chunks/measure/sss_90_cifar10/chunk00000.json
    log: results/logs/measure/sss_90_cifar10_chunk00000.log (check log file(s) for error details)
    shell:
        OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench measure-chunk --settings '{...}' --target sss_90 --dataset cifar10 --chunk 00000 --results results > results/logs/measure/sss_90_cifar10_chunk00000.log 2>&1
        (command exited with non-zero exit code)
RuleException:
CalledProcessError in file "/tmp/sig/k_bash/workflow/rules/inference.smk", line 57:
Command 'set -euo pipefail;  OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench infer-chunk --chunk 00000 > results/logs/infer/sss_90_chunk00000.log 2>&1' returned non-zero exit status 1.
[Fri Nov 27 02:06:37 2026]
Error in rule infer:
    message: None
    jobid: 2
    log: results/logs/infer/sss_90_chunk00000.log (check log file(s) for error details)
    shell:
        OMP_NUM_THREADS=1 "$CALIBENCH_PYTHON" -m calibench infer-chunk --chunk 00000 > results/logs/infer/sss_90_chunk00000.log 2>&1
        (command exited with non-zero exit code)
Error in rule labels:
    jobid: 3
    log: results/logs/labels/cifar10.log (check log file(s) for error details)
Exiting because a job execution failed. Look above for error messages
"""


def test_a_job_killed_by_a_signal_is_reported_as_such_whatever_its_log_says(tmp_path):
    (tmp_path / ".snakemake" / "log").mkdir(parents=True)
    (tmp_path / ".snakemake" / "log" / "2026-11-27T020556.735162.snakemake.log").write_text(KILLED)
    logs = tmp_path / "results" / "logs"
    (logs / "measure").mkdir(parents=True)
    (logs / "infer").mkdir()
    done = ("2026-11-27 02:06:00,566 INFO calibench.measure.jobs: chunk 1 done: 1 measured, 0 skipped, 0 failed "
            "in 1.2 s\n")
    (logs / "measure" / "sss_90_cifar10_chunk00001.log").write_text(done)
    (logs / "infer" / "sss_90_chunk00000.log").write_text("Traceback (most recent call last):\n  File x\n"
                                                          "ValueError: chunk 0: no weights\n")
    measure = Path("results/logs/measure")
    assert failures.failed_job_ends(tmp_path / ".snakemake" / "log" / "2026-11-27T020556.735162.snakemake.log") == {
        measure / "sss_90_cifar10_chunk00001.log": 137, measure / "sss_90_cifar10_chunk00000.log": -9,
        Path("results/logs/infer/sss_90_chunk00000.log"): 1}
    lines = failures.failed_jobs_summary(tmp_path).splitlines()
    assert lines[0] == "calibench: 4 job(s) failed:"
    assert lines[1].startswith("  results/logs/measure/sss_90_cifar10_chunk00001.log: killed by SIGKILL (exit status 137)")
    assert lines[1].endswith(f"; its log ends: {done.strip()}")  # said after the signal, as what it is
    assert lines[2] == ("  results/logs/measure/sss_90_cifar10_chunk00000.log: killed by SIGKILL (signal 9): "
                        "out of memory (the kernel's OOM killer), or kill -9")
    assert lines[3] == "  results/logs/infer/sss_90_chunk00000.log: ValueError: chunk 0: no weights"
    assert lines[4] == "  results/logs/labels/cifar10.log: (no log written)"


def test_sigkill_of_a_job_in_a_run_is_reported_as_such(tmp_path, small_sss_run, start):
    workdir = measurement_to_redo(tmp_path, small_sss_run)
    run = start(RUN, workdir)
    job = wait_for_job(run)
    chunk = cmdline(job).split("--chunk ")[1].split()[0]
    os.kill(job, signal.SIGKILL)
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 1, output[-3000:]
    assert "calibench: 1 job(s) failed:" in output, output[-3000:]
    assert (f"  results/logs/measure/sss_90_cifar10_chunk{chunk}.log: killed by SIGKILL (exit status 137): "
            "out of memory (the kernel's OOM killer), or kill -9") in output, output[-3000:]
    assert session_processes(run.pid) == {}


# ---------------------------------------------------------------- 2. SIGTERM to `calibench run`

def test_sigterm_stops_snakemake_and_its_jobs_and_the_next_run_completes_it(tmp_path, small_sss_run, start):
    workdir = measurement_to_redo(tmp_path, small_sss_run)
    run = start(RUN, workdir)
    wait_for_job(run)
    t0 = time.monotonic()
    os.kill(run.pid, signal.SIGTERM)  # the driver only, as `kill <pid>` or a scheduler's stop does
    output, _ = run.communicate(timeout=120)
    stopped_in = time.monotonic() - t0
    assert run.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "calibench: stopped by SIGTERM; Snakemake stopped its jobs; `calibench run` resumes from here" in output
    assert "job(s) failed" not in output  # stopped jobs are not failures
    assert session_processes(run.pid) == {}, "a process of the run outlived it"
    assert not (workdir / ".snakemake" / "locks").exists(), "Snakemake's own stop releases its locks"
    with open(workdir / "results" / runlock.LOCK_NAME, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: raises if still held
    assert not (workdir / SMALL_SSS_TABLE).exists()

    again = subprocess.run(RUN, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "stale" not in again.stdout + again.stderr  # nothing left to release
    pd.testing.assert_frame_equal(pd.read_parquet(small_sss_run / SMALL_SSS_TABLE),
                                  pd.read_parquet(workdir / SMALL_SSS_TABLE), check_exact=True)
    print(f"stopped {stopped_in:.2f} s after SIGTERM")


# A Snakemake that does not stop: it and its job ignore SIGTERM and SIGINT; its job also started
# a daemon (its own session) that would outlive everything.
STUBBORN = """\
import signal, subprocess, sys, time
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
job = subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
                        "for s in (signal.SIGTERM, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\\n"
                        "time.sleep(300)"])
daemon = subprocess.Popen(["sleep", "300"], start_new_session=True)
with open(sys.argv[1], "w") as f:
    f.write(f"{job.pid} {daemon.pid}")
time.sleep(float(sys.argv[2]))
"""

# `calibench run`'s following of Snakemake (workflow._follow) with a short grace period, the
# stand-in as Snakemake.
DRIVER = """\
import sys
from pathlib import Path
from calibench.run.workflow import _follow
grace, results, *cmd = sys.argv[1:]
code, _, _, stop = _follow(cmd, (), Path(results), verbose=False, grace_s=float(grace))
print(stop[1] if stop else f"exit {code}", flush=True)
sys.exit(128 + stop[0] if stop else code)
"""


@pytest.mark.parametrize("signalled", [True, False], ids=["does-not-stop", "leaves-a-daemon"])
def test_what_does_not_stop_is_killed_and_nothing_outlives_the_driver(tmp_path, start, signalled):
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    (tmp_path / "driver.py").write_text(DRIVER)
    pids = tmp_path / "pids"
    run = start([sys.executable, str(tmp_path / "driver.py"), "1.5", str(tmp_path / "results"), sys.executable,
                 str(tmp_path / "stubborn.py"), str(pids), "300" if signalled else "0.3"], tmp_path)
    deadline = time.monotonic() + 30
    while not pids.exists() or not pids.read_text():
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.02)
    job, daemon = map(int, pids.read_text().split())
    t0 = time.monotonic()
    if signalled:
        os.kill(run.pid, signal.SIGTERM)
    output, _ = run.communicate(timeout=60)
    if signalled:
        assert run.returncode == 143, output
        assert "stopped by SIGTERM; Snakemake had not stopped its jobs 1.5 s after it was told to" in output
        assert "were killed (SIGKILL)" in output
        assert 1.5 <= time.monotonic() - t0 < 15
    else:  # the job's own program ended; what it left is killed, and said
        assert run.returncode == 0, output
        assert "calibench: 2 process(es) that outlived their Snakemake job were killed" in output
    assert not alive(job) and not alive(daemon)
    assert session_processes(run.pid) == {}


# ---------------------------------------------------------------- 3. a refusal names the live holder

SNAKEFILE = """\
rule slow:
    output: "out/slow.txt"
    shell: "sleep 60; echo done > {output}"
"""

# What `calibench run` does: the guard around a Snakemake subprocess that receives the lock's descriptor.
GUARDED = """\
import subprocess, sys
from calibench.run.runlock import run_guard
workdir, results, *cmd = sys.argv[1:]
with run_guard(workdir, results, cmd) as guard:
    sys.exit(subprocess.call(cmd, cwd=workdir, pass_fds=guard.pass_fds))
"""


def test_a_refusal_names_the_process_that_holds_the_lock_when_the_driver_is_gone(tmp_path, start):
    workdir, results = tmp_path / "wd", tmp_path / "wd" / "results"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "guarded.py").write_text(GUARDED)
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1", "out/slow.txt"]
    driver = start([sys.executable, str(tmp_path / "guarded.py"), str(workdir), str(results), *snakemake], workdir)
    deadline = time.monotonic() + 60
    while not (workdir / ".snakemake" / "incomplete").exists():  # Snakemake runs its job
        assert time.monotonic() < deadline and driver.poll() is None
        time.sleep(0.05)
    # the driver's own child (a fork of Snakemake about to exec its job's shell has its command line too)
    (holder,) = [pid for pid, cmd in session_processes(driver.pid).items()
                 if cmd.startswith(" ".join(snakemake)) and parent(pid) == driver.pid]

    # While the driver lives, it is named: stopping it stops the run.
    with pytest.raises(RunInUse) as live:
        with run_guard(workdir, results, snakemake):
            pytest.fail("the guard must not be entered")
    assert f"pid {driver.pid} " in str(live.value) and f"(kill {driver.pid})" in str(live.value)
    assert live.value.process is None

    os.kill(driver.pid, signal.SIGKILL)  # the driver only: its Snakemake goes on, holding the lock
    driver.wait()
    with pytest.raises(RunInUse) as gone:
        with run_guard(workdir, results, snakemake):
            pytest.fail("the guard must not be entered")
    msg = str(gone.value)
    assert f"pid {driver.pid} " in msg and "has exited" in msg
    assert f"the lock is held by pid {holder}, which it started: {' '.join(snakemake)}" in msg
    assert f"kill {holder};" in msg and f"kill {driver.pid}" not in msg
    assert gone.value.process.pid == holder
    # What a Snakefile sees (runlock.live_run, from another Snakemake): the same holder.
    seen = runlock.live_run(workdir, results, ["--cores", "1"])
    assert seen is not None and seen.process.pid == holder and f"kill {holder};" in str(seen)
