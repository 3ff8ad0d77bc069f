"""Fault campaign on the mini benchmark (issue 13; README, "Reliability"): the README's command
run to completion once (the reference), then again in a fresh directory with the same mini
benchmark while faults are injected at random moments: ``kill -9`` of the whole run (the
driver and every job: an OOM kill, a lost login node) and ``kill -9`` of one running job
(a node lost under one job; the driver goes on). After each fault the same command is run
again, until one run finishes untouched. Counted: faults injected, runs resumed, files of
the reference missing at the end (goal 0), and tables and analysis files that differ from
the reference (goal 0, compared bit for bit).

    python bench/bench_faults.py --faults 12 --seed 0 [--workdir /tmp/faults] [--json out.json]

Prints a markdown table for BENCHMARKS.md. The numbers are the mini benchmark's (a demo of
the workflow, not NATS-Bench results).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RUN = [sys.executable, "-m", "calibench.run.cli", "run", "--cores", "2"]
# Files that differ between any two runs by nature: logs, timings, the report (it embeds timings),
# Snakemake's own state.
VOLATILE = ("logs", "benchmarks", "report.html", "report.png")


def _workflow(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for name in ("Snakefile", "workflow", "config", "profiles", "environment.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, directory / name)
    return directory


def _run_to_end(directory: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(RUN, cwd=directory, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run in {directory} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def _jobs(group: int) -> list[int]:
    """Pids of the calibench jobs (not the driver) in a process group."""
    out = subprocess.run(["pgrep", "-g", str(group), "-f", "calibench.run.cli (infer|measure-chunk|odir-search|build-table|analysis)"],
                         capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _killpg_and_wait(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _files(results: Path) -> set[str]:
    return {str(p.relative_to(results)) for p in results.rglob("*")
            if p.is_file() and not any(part in VOLATILE for part in p.relative_to(results).parts)}


def _progress(results: Path) -> int:
    """Logits files and shards written so far."""
    return sum(1 for sub in ("logits", "shards") for _ in (results / sub).rglob("arch=*.parquet"))


def _differs(a: Path, b: Path) -> bool:
    """Different results: tables compared as frames bit for bit, other parquet files by their
    data (their metadata records the software, e.g. the git commit), JSON without timings."""
    if a.suffix == ".parquet":
        if "tables" in a.parts:
            try:
                pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b), check_exact=True)
                return False
            except AssertionError:
                return True
        try:  # NaN equals NaN here (a failed stage's values); metadata (provenance) not compared
            pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b), check_exact=True)
            return False
        except AssertionError:
            return True
    if a.suffix == ".json":
        def strip(node):
            if isinstance(node, dict):
                return {k: strip(v) for k, v in node.items() if k not in ("seconds", "files")}
            return [strip(v) for v in node] if isinstance(node, list) else node
        return strip(json.loads(a.read_text())) != strip(json.loads(b.read_text()))
    return a.read_bytes() != b.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="calibench-faults-"))
    rng = random.Random(args.seed)

    reference = _workflow(work / "reference")
    seconds = _run_to_end(reference)
    print(f"reference run: {seconds:.0f} s", flush=True)
    faulty = _workflow(work / "faulty")
    shutil.copytree(reference / "resources", faulty / "resources")  # the same mini benchmark

    total = _progress(reference / "results")
    injected = {"kill -9 of the whole run": 0, "kill -9 of one job": 0}
    runs = 0
    while True:
        runs += 1
        run = subprocess.Popen(RUN, cwd=faulty, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        faulted = False
        done = _progress(faulty / "results")
        if sum(injected.values()) < args.faults:
            # a random moment of the remaining work: once that many more logits files and shards
            # exist, or, with all of them written, a few seconds into the tables and analysis
            at = done + rng.randint(1, max(1, (total - done) // 3)) if done < total else None
            deadline = time.time() + rng.uniform(1.0, 8.0)
            whole = rng.random() < 0.5
            while run.poll() is None and (_progress(faulty / "results") < at if at is not None
                                          else time.time() < deadline):
                time.sleep(0.01)
            if run.poll() is None:
                if whole:
                    _killpg_and_wait(run.pid)
                    injected["kill -9 of the whole run"] += 1
                    faulted = True
                else:
                    jobs = _jobs(run.pid)
                    if jobs:
                        os.kill(rng.choice(jobs), signal.SIGKILL)
                        injected["kill -9 of one job"] += 1
                        faulted = True
        run.wait()
        if not faulted and run.returncode == 0:
            break
        print(f"run {runs}: {'fault injected' if faulted else 'ended'} at {_progress(faulty / 'results')} of "
              f"{total} files (exit {run.returncode})", flush=True)
        if runs > 10 * args.faults + 10:
            raise SystemExit("the run never completed")

    want, have = _files(reference / "results"), _files(faulty / "results")
    lost = sorted(want - have)
    compared = sorted(f for f in want & have if f.startswith(("tables/", "analysis/", "failures/", "shards/",
                                                              "logits/", "population/", "recalibration/")))
    differing = sorted(f for f in compared if _differs(reference / "results" / f, faulty / "results" / f))
    tables = [f for f in compared if f.startswith("tables/")]
    summary = {
        "faults_injected": sum(injected.values()), "by_kind": injected, "runs": runs, "runs_resumed": runs - 1,
        "reference_seconds": round(seconds, 1), "files_compared": len(compared), "tables_compared": len(tables),
        "files_lost": lost, "files_differing": differing,
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print("\n| faults injected | of them: kill -9 of the whole run / of one job | runs resumed | files lost | "
          "tables and result files differing from an uninterrupted run |")
    print("|---|---|---|---|---|")
    print(f"| {summary['faults_injected']} | {injected['kill -9 of the whole run']} / {injected['kill -9 of one job']} "
          f"| {summary['runs_resumed']} | {len(lost)} of {len(want)} | {len(differing)} of {len(compared)} "
          f"({len(tables)} tables) |")
    if lost or differing:
        print("lost:", lost[:20], "\ndiffering:", differing[:20])
        sys.exit(1)


if __name__ == "__main__":
    main()
