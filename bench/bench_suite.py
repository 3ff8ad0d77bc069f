"""Where the test suite's CPU time goes: runs ``pytest`` (``make test``'s arguments unless given
after ``--``) with every Python process it starts accounting for itself, and prints the CPU
seconds per test (in the pytest worker and in the processes it started: Snakemake, jobs,
loaders), per test file and per kind of process.

    python bench/bench_suite.py                 # the whole suite, as make test runs it
    python bench/bench_suite.py -- tests/test_failure_reporting.py -p no:xdist

On 2 cores the suite is CPU-bound: its wall time is about its CPU time over 1.75, so CPU
seconds are what a cut must save (BENCHMARKS.md, "The test suite"). How: a ``sitecustomize``
module on ``PYTHONPATH`` appends, at each process's exit, its own CPU time (RUSAGE_SELF) with
``PYTEST_CURRENT_TEST`` (which pytest sets, and child processes inherit); a pytest plugin adds
the worker's own CPU time per test. Processes killed by a signal are not counted.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE_TEST = ["-n", "3", "--dist", "loadfile", "--no-loadscope-reorder"]

SITECUSTOMIZE = '''
import atexit, os, resource, sys
def _calibench_account():
    try:
        r = resource.getrusage(resource.RUSAGE_SELF)
        test = os.environ.get("PYTEST_CURRENT_TEST", "-")
        argv = " ".join(sys.argv[:4])[:200].replace("\\t", " ").replace("\\n", " ")
        fd = os.open(os.environ["CALIBENCH_SUITE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"proc\\t{test}\\t{r.ru_utime + r.ru_stime:.3f}\\t{argv}\\n".encode())
        os.close(fd)
    except Exception:
        pass
atexit.register(_calibench_account)
'''

PLUGIN = '''
import os, resource, time
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.time()
    yield
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    fd = os.open(os.environ["CALIBENCH_SUITE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.write(fd, f"test\\t{item.nodeid}\\t{cpu:.3f}\\t{time.time() - t0:.2f}\\t{worker}\\t{t0:.2f}\\n".encode())
    os.close(fd)
'''


def kind(argv: str) -> str:
    """What a process was: snakemake, a calibench command (a job's name), a loader, ..."""
    words = argv.split()
    if "snakemake" in argv and "calibench" not in argv:
        return "snakemake"
    if "calibench" in argv and len(words) > 1:
        return "calibench " + words[1]
    return words[0].rsplit("/", 1)[-1] if words else "?"


def summarize(log: Path, top: int) -> str:
    by_test: dict[str, float] = collections.defaultdict(float)
    procs: collections.Counter = collections.Counter()
    by_kind: dict[str, float] = collections.defaultdict(float)
    kinds: collections.Counter = collections.Counter()
    in_tests = unattributed = 0.0
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if fields[0] == "test":
            by_test[fields[1]] += float(fields[2])
            in_tests += float(fields[2])
        elif fields[0] == "proc":
            cpu = float(fields[2])
            if fields[1] == "-":  # the pytest processes themselves (their tests are counted above)
                unattributed += cpu
                continue
            test = fields[1].rsplit(" ", 1)[0]  # "(setup)", "(call)" dropped
            by_test[test] += cpu
            procs[test] += 1
            by_kind[kind(fields[3])] += cpu
            kinds[kind(fields[3])] += 1
    by_file: dict[str, float] = collections.defaultdict(float)
    for test, cpu in by_test.items():
        by_file[test.split("::")[0]] += cpu
    total = sum(by_test.values())
    out = [f"CPU seconds: {total:.0f} in tests ({in_tests:.0f} in the pytest workers, {total - in_tests:.0f} in "
           f"processes they started); pytest's own processes {unattributed:.0f} in all (their tests included)", "",
           "per file:"]
    out += [f"  {cpu:8.1f}  {name}" for name, cpu in sorted(by_file.items(), key=lambda x: -x[1])[:top]]
    out += ["", "per test (processes started):"]
    out += [f"  {cpu:8.1f}  ({procs[name]:3d})  {name}" for name, cpu in sorted(by_test.items(), key=lambda x: -x[1])[:top]]
    out += ["", "per kind of process started by tests:"]
    out += [f"  {cpu:8.1f}  ({kinds[name]:3d})  {name}" for name, cpu in sorted(by_kind.items(), key=lambda x: -x[1])[:top]]
    return "\n".join(out)


def timeline(log: Path, start: float, busy: list[tuple[float, float]]) -> str:
    """Per xdist worker: when its last test ended and how long it spent in tests; and the
    machine's busy cores per minute (from /proc/stat), to show where capacity idles."""
    workers: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if fields[0] == "test" and len(fields) >= 6:
            w = workers[fields[4]]
            w[0] += float(fields[3])
            w[1] = max(w[1], float(fields[5]) + float(fields[3]) - start)
            w[2] += 1
    out = ["per worker: tests, wall in tests, last test ended at (s from the start)"]
    out += [f"  {name:6s} {n:4d} {inside:7.0f} {end:7.0f}" for name, (inside, end, n) in sorted(workers.items())]
    if busy:
        out += ["", "busy cores per minute (/proc/stat):",
                "  " + " ".join(f"{b:.1f}" for _, b in busy)]
    return "\n".join(out)


def _sample_busy(stop, out: list, period: float = 60.0) -> None:
    def read():
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait
    ncpu = os.cpu_count() or 1
    last = read()
    while not stop.wait(period):
        now = read()
        total, idle = now[0] - last[0], now[1] - last[1]
        out.append((time.time(), ncpu * (1 - idle / total) if total else 0.0))
        last = now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("--log", type=Path, help="keep the raw accounting here (default: a temporary file)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: make test's)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="calibench-suite-") as tmp:
        tmp = Path(tmp)
        (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (tmp / "calibench_suite_cpu.py").write_text(PLUGIN)
        log = args.log or tmp / "accounting.tsv"
        log.unlink(missing_ok=True)
        env = {**os.environ, "CALIBENCH_SUITE_LOG": str(log.resolve()),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")]))}
        start, cpu0 = time.time(), os.times()
        busy: list[tuple[float, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_busy, args=(stop, busy), daemon=True)
        if Path("/proc/stat").exists():
            sampler.start()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "calibench_suite_cpu", "-q",
                               *(args.pytest_args or MAKE_TEST)], cwd=ROOT, env=env)
        wall, cpu1 = time.time() - start, os.times()
        stop.set()
        children = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
        print(f"\npytest exit {proc.returncode}; wall {wall:.0f} s; CPU of everything it waited for "
              f"{children:.0f} s ({children / wall:.2f} cores on average)\n")
        print(summarize(log, args.top))
        print()
        print(timeline(log, start, busy))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
