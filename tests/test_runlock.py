"""calibench.run.runlock with real Snakemake runs: killed runs, live runs, guarded and unguarded.

Every run here is a real `python -m snakemake` on a throwaway Snakefile whose rule sleeps,
started in its own session so that `os.killpg(pid, SIGKILL)` kills the driver and its job
at once, as the OOM killer or a lost login node would.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibench.run import runlock
from calibench.run.runlock import RunInUse, is_snakemake_command, run_guard, snakemake_lock_files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc (Linux)")

SNAKEFILE = """\
rule slow:
    output: "out/slow.txt"
    params: delay=config.get("delay", 60)
    shell: "sleep {params.delay}; echo done > {output}"
"""

# What `calibench run` does: the guard around a snakemake subprocess.
HELPER = """\
import logging, subprocess, sys
from calibench.run.runlock import run_guard
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
workdir, results, *cmd = sys.argv[1:]
with run_guard(workdir, results, cmd) as guard:
    code = subprocess.call(cmd, cwd=workdir, pass_fds=guard.pass_fds)
sys.exit(code)
"""

SLOW = [sys.executable, "-m", "snakemake", "--cores", "1", "out/slow.txt"]
QUICK = [*SLOW, "--config", "delay=0"]  # the same target, without the wait
WAIT_S = 25


@pytest.fixture
def workdir(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "Snakefile").write_text(SNAKEFILE)
    return wd


@pytest.fixture
def spawn(tmp_path):
    """Start a process in a new session (its pid is its process group); all are killed at the end."""
    procs = []

    def start(argv, cwd):
        log = open(tmp_path / f"proc{len(procs)}.log", "wb")
        p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        procs.append(p)
        return p

    yield start
    for p in procs:
        kill_group(p)


def group_alive(pgid: int) -> bool:
    """Whether a process of the group is still running (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()
    deadline = time.monotonic() + 10
    while group_alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not group_alive(p.pid)


def wait_for_locks(workdir: Path, p: subprocess.Popen) -> list[Path]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        locks = snakemake_lock_files(workdir)
        incomplete = workdir / ".snakemake" / "incomplete"
        if locks and incomplete.is_dir() and any(incomplete.iterdir()):  # its job started: marked incomplete
            return locks
        assert p.poll() is None, f"process exited early with {p.returncode}"
        time.sleep(0.05)
    raise AssertionError("no Snakemake lock files appeared")


def snapshot(*paths: Path) -> dict:
    """Names, mtimes and contents of the files (recursively) under the given paths, except
    Snakemake's own run logs (``.snakemake/log/``), which a live run keeps appending to."""
    out = {}
    for root in paths:
        for f in [root] if root.is_file() else sorted(root.rglob("*")):
            if f.is_file() and not (f.parent.name == "log" and f.parent.parent.name == ".snakemake"):
                out[str(f)] = (f.stat().st_mtime_ns, f.read_bytes())
    return out


def runlock_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "calibench.run.runlock" and r.levelno == logging.WARNING]


def assert_flock_free(results: Path) -> None:
    with open(results / runlock.LOCK_NAME, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held


def test_killed_guarded_run_leaves_a_real_stale_lock_that_the_guard_releases(tmp_path, workdir, spawn, caplog):
    helper = tmp_path / "guarded_run.py"
    helper.write_text(HELPER)
    results = workdir / "results"
    p = spawn([sys.executable, str(helper), str(workdir), str(results), *SLOW], workdir)
    locks = wait_for_locks(workdir, p)
    assert {f.name for f in locks} == {"0.output.lock"}
    assert locks[0].read_text().split() == ["out/slow.txt"]  # outputs, relative to the workdir

    kill_group(p)  # kill -9 of the whole run: wrapper, snakemake and its job
    assert snakemake_lock_files(workdir) == locks, "a killed run leaves its locks"
    before = snapshot(*locks)

    # The stale lock is real: the same command without the guard fails, and leaves it.
    plain = subprocess.run(QUICK, cwd=workdir, capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0
    assert "Directory cannot be locked" in plain.stdout + plain.stderr
    assert not (workdir / "out/slow.txt").exists()
    assert snapshot(*locks) == before

    # With the guard: released (with snakemake --unlock), one warning, and the run completes.
    caplog.set_level(logging.WARNING, logger="calibench.run.runlock")
    t0 = time.monotonic()
    with run_guard(workdir, results, QUICK) as guard:
        entered = time.monotonic() - t0
        assert guard.released_stale
        assert snakemake_lock_files(workdir) == []
        rerun = subprocess.run(QUICK, cwd=workdir, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (workdir / "out/slow.txt").read_text() == "done\n"
    assert snakemake_lock_files(workdir) == []
    (warning,) = runlock_warnings(caplog)
    assert warning.startswith(f"released a stale Snakemake lock in {workdir / '.snakemake' / 'locks'} ")
    assert "snakemake --unlock" in warning and "killed run" in warning
    # The dead run's record was overwritten by ours, and our flock is gone.
    record = json.loads((results / runlock.LOCK_NAME).read_text())
    assert record["pid"] == os.getpid() and record["command"] == QUICK
    assert_flock_free(results)
    print(f"guard entry with snakemake --unlock: {entered:.2f} s")


def test_second_guard_while_a_guarded_run_is_live_raises_and_touches_nothing(tmp_path, workdir, spawn):
    helper = tmp_path / "guarded_run.py"
    helper.write_text(HELPER)
    results = workdir / "results"
    p = spawn([sys.executable, str(helper), str(workdir), str(results), *SLOW], workdir)
    wait_for_locks(workdir, p)
    record = json.loads((results / runlock.LOCK_NAME).read_text())
    assert record["pid"] == p.pid
    before = snapshot(workdir / ".snakemake", results)
    assert any(k.endswith(".lock") and "/locks/" in k for k in before)

    with pytest.raises(RunInUse) as ei:
        with run_guard(workdir, results, QUICK):
            pytest.fail("the guard must not be entered")
    msg = str(ei.value)
    assert f"pid {p.pid} " in msg and str(results) in msg
    assert "out/slow.txt" in msg and record["started"] in msg and "Wait for it" in msg
    assert ei.value.holder == record
    assert snapshot(workdir / ".snakemake", results) == before
    assert p.poll() is None, "the live run goes on"


def test_flock_passed_to_snakemake_outlives_a_killed_wrapper(tmp_path, workdir, spawn):
    helper = tmp_path / "guarded_run.py"
    helper.write_text(HELPER)
    results = workdir / "results"
    p = spawn([sys.executable, str(helper), str(workdir), str(results), *SLOW], workdir)
    locks = wait_for_locks(workdir, p)
    os.kill(p.pid, signal.SIGKILL)  # only the wrapper: its snakemake goes on
    p.wait()
    assert group_alive(p.pid)
    before = snapshot(*locks)

    with pytest.raises(RunInUse) as ei:
        with run_guard(workdir, results, QUICK):
            pytest.fail("the guard must not be entered")
    msg = str(ei.value)
    assert f"pid {p.pid} " in msg and "has exited" in msg
    assert snapshot(*locks) == before


def test_live_unguarded_snakemake_is_not_unlocked(tmp_path, workdir, spawn, caplog):
    p = spawn(SLOW, workdir)  # snakemake itself, no guard
    locks = wait_for_locks(workdir, p)
    before = snapshot(*locks)
    results = tmp_path / "results"
    caplog.set_level(logging.WARNING, logger="calibench.run.runlock")

    with pytest.raises(RunInUse) as ei:
        with run_guard(workdir, results, QUICK):
            pytest.fail("the guard must not be entered")
    msg = str(ei.value)
    assert f"pid {p.pid} " in msg and "snakemake --cores 1 out/slow.txt" in msg
    assert ei.value.process.pid == p.pid
    assert snapshot(*locks) == before
    assert runlock_warnings(caplog) == []
    assert_flock_free(results)  # released on the way out
    assert p.poll() is None


def test_locks_of_a_dead_process_are_released(workdir, spawn, caplog):
    p = spawn(SLOW, workdir)
    locks = wait_for_locks(workdir, p)
    kill_group(p)
    with pytest.raises(ProcessLookupError):
        os.kill(p.pid, 0)
    assert snakemake_lock_files(workdir) == locks
    caplog.set_level(logging.WARNING, logger="calibench.run.runlock")

    t0 = time.monotonic()
    with run_guard(workdir, workdir / "results", QUICK, unlock="files") as guard:
        entered = time.monotonic() - t0
        assert guard.released_stale
    assert snakemake_lock_files(workdir) == []
    (warning,) = runlock_warnings(caplog)
    assert "released a stale Snakemake lock" in warning and "deleting the lock files" in warning
    assert entered < 1.0
    # Nothing to release the next time, and no more warnings.
    with run_guard(workdir, workdir / "results", QUICK) as guard:
        assert not guard.released_stale
    assert len(runlock_warnings(caplog)) == 1


def test_without_proc_locks_are_left_for_snakemake_to_report(workdir, monkeypatch, caplog):
    lockdir = workdir / ".snakemake" / "locks"
    lockdir.mkdir(parents=True)
    (lockdir / "0.output.lock").write_text("out/slow.txt\n")
    before = snapshot(lockdir)
    monkeypatch.setattr(runlock, "_PROC", workdir / "no-proc")  # as on macOS
    caplog.set_level(logging.WARNING, logger="calibench.run.runlock")
    with run_guard(workdir, workdir / "results", QUICK) as guard:
        assert not guard.released_stale
    assert snapshot(lockdir) == before
    (warning,) = runlock_warnings(caplog)
    assert "no /proc" in warning and "left alone" in warning


@pytest.mark.parametrize("argv, expected", [
    (["/v/bin/python", "-m", "snakemake", "--cores", "1"], True),
    (["python3.11", "-u", "-m", "snakemake"], True),
    (["python3", "-msnakemake"], True),
    (["python", "-W", "ignore", "-m", "snakemake"], True),
    (["/v/bin/python", "/v/bin/snakemake", "--cores", "1"], True),  # a console script via its shebang
    (["/v/bin/snakemake"], True),
    (["python", "-m", "pytest", "-k", "snakemake"], False),
    (["python", "-c", "import snakemake"], False),
    (["python", "/v/bin/pytest", "tests/snakemake"], False),
    (["vim", "Snakefile"], False),
    (["bash", "-c", "snakemake --cores 1"], False),
    ([], False),
])
def test_is_snakemake_command(argv, expected):
    assert is_snakemake_command(argv) is expected
