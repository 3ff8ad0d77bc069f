"""Fault campaign on the mini benchmark (issue 13; docs/running.md, "Reliability"): the README's command
run to completion once (the reference), then again in a fresh directory with the same mini
benchmark while faults are injected at random moments: ``kill -9`` of the whole run (the
driver and every job: an OOM kill, a lost login node) and ``kill -9`` of one running job
(a node lost under one job; the driver goes on). After each fault the same command is run
again, until one run finishes untouched. Counted: faults injected, runs resumed, files of
the reference missing at the end (goal 0), and tables and analysis files that differ from
the reference (goal 0, compared bit for bit).

    python bench/bench_faults.py --faults 12 --seed 0 [--workdir /tmp/faults] [--json out.json]

Random campaign (issue 33, "Every byte verified"): a finished run (the reference) is copied
once (results, resources, .snakemake); then N faults drawn with a seeded RNG, each kind once
first, are done to the copy one at a time: kill -9 of the whole run, of the driver only, of
Snakemake, of one job, SIGTERM of the driver (each at a random moment of a run given work by
deleting a random shard, logits file or table first), bytes overwritten at a random offset of
a random result file (inside a parquet column chunk's data 60 % of the time for parquet),
truncation (to 0 or a random length), deletion of any result or bookkeeping file, a chunk
manifest and then a shard (or logits file) of its chunk deleted, a full disk (the results on
a tmpfs with 0 to 1 MB left, where a tmpfs can be mounted: root), two runs at once (the
second must refuse, the first finish). After each, the README's command runs until it exits
0 (at most 4 runs; a run refused because a killed driver's Snakemake still lives is tried
again after 2 s and counted apart), then the copy is checked against the reference:
`calibench compare` exit 0, no file of the reference lost, none differing (:func:`differs`;
logs, benchmarks, the report and its checksum excluded; *.damaged, *.changed counted).

    python bench/bench_faults.py --random 100 --seed 0 [--config small|default] [--workdir DIR] [--json out.json]

`--config small` (the default) is one SSS table of the mini benchmark (:data:`SMALL`) with its
analysis and report: a recovery on the README's default config reruns every analysis part
of six tables and the explorer, too slow for a hundred faults on 2 cores (BENCHMARKS.md).
Exits 1 if any fault ends with a file lost or differing.

Prints a markdown table for BENCHMARKS.md. The numbers are the mini benchmark's (a demo of
the workflow, not NATS-Bench results).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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
    out = subprocess.run(["pgrep", "-g", str(group), "-f", f"-m calibench ({JOB_STEPS}) "],
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


# ================================================================ random fault campaign (issue 33)
#
# A finished run (the reference) is copied once (results, resources, .snakemake: the faulty
# copy); then, N times, one fault drawn with a seeded RNG is done to the copy, the README's
# command is run again until it exits 0, and every file of the reference is compared with the
# copy's. A fault that needs a run in flight (the kills, SIGTERM, a full disk, two runs at once)
# first gives the run work: a random shard, logits file or table of the copy is deleted, then
# the command starts and the fault comes at a random moment of it.

KILL_KINDS = ("kill -9 of the whole run", "kill -9 of the driver", "kill -9 of snakemake", "kill -9 of one job",
              "SIGTERM of the driver")
DAMAGE_KINDS = ("bytes overwritten", "truncated", "deleted", "manifest and a shard of its chunk deleted")
OTHER_KINDS = ("disk full", "two runs at once")
KINDS = KILL_KINDS + DAMAGE_KINDS + OTHER_KINDS
JOB_STEPS = "population|labels|infer-chunk|measure-chunk|odir-search|build-table|analysis-part|report|explore"
# Not compared and never damaged: volatile by nature, or the run lock (who holds it) and what
# the repair check set aside.
# Snakemake's marker in a directory output (`.snakemake_timestamp`) is Snakemake's own state.
VOLATILE_NAMES = ("report.html", "report.html.sha256", "report.png", ".calibench-run.lock", ".snakemake_timestamp")
LEFTOVER = (".damaged", ".changed")
# JSON keys that describe a job's history, not its results: timings, the files' size and
# modification time, what this job computed and what it found done, the seal over them.
JOB_HISTORY = ("seconds", "files", "computed", "skipped", "archive_files_read", "logits_removed", "_sha256",
               "fit_files", "fits", "fit_problems",  # the fit store's (issue 35): what this run made, re-applied, found
               "stages_measured")  # and which stages it measured whole, at new bin counts only, or kept

# The smaller configuration (`--config small`): one SSS table of the mini benchmark (2 networks in
# chunks of 1, every stage, lambda and mu given), its analysis and report; no explorer.
SMALL = {
    "minibench": {"build": True, "dir": "resources/minibench", "n_tss": 1, "n_sss": 2, "n_test": 60, "n_train": 30,
                  "seed": 3},
    "spaces": ["sss"], "datasets": ["cifar10"], "bins": [5, 15], "chunk_size": 1, "measure_group": 1,
    "loader_workers": 1, "device": "cpu", "explorer": False,
    "analysis": {"hcs_betas": [1], "top_k": [], "top_n": 3},
    "recalibration": {"odir": {"ms": {"lambda": 0.1, "mu": 0.1}, "dir": {"lambda": 0.1, "mu": 0.1}}},
}


@dataclass
class Campaign:
    """A reference run, its faulty copy and the command that recovers it (``run_args`` after
    ``calibench run --cores 2``, e.g. ``["--configfile", "small.yaml"]``)."""

    reference: Path
    faulty: Path
    rng: random.Random
    run_args: list[str] = field(default_factory=list)
    logs: Path | None = None
    max_reruns: int = 4
    kill_window: float = 20.0  # seconds: a kill comes at a random moment of the first this many of a rerun
    work: tuple = ("shards/", "logits/space=", "tables/")  # what is deleted to give a run work
    records: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.logs = self.logs or self.faulty.parent / f"{self.faulty.name}-logs"

    @property
    def command(self) -> list[str]:
        return RUN + self.run_args

    @property
    def results(self) -> Path:
        return self.faulty / "results"


def clone(reference: Path, faulty: Path) -> Path:
    """The reference's whole working directory (results, resources, .snakemake), times kept."""
    if faulty.exists():
        shutil.rmtree(faulty)
    shutil.copytree(reference, faulty, symlinks=True)
    return faulty


def disk_full_possible() -> bool:
    """Whether a small tmpfs can be mounted here (root with CAP_SYS_ADMIN): the full-disk fault."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    probe = Path(tempfile.mkdtemp(prefix="calibench-mount-"))
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], capture_output=True)
        return ok
    finally:
        probe.rmdir()


def draw(rng: random.Random, n: int, kinds=KINDS) -> list[str]:
    """``n`` faults: each kind once while ``n`` allows it (in a random order), the rest at random."""
    kinds = list(kinds)
    first = rng.sample(kinds, min(n, len(kinds)))
    return first + [rng.choice(kinds) for _ in range(n - len(first))]


def _volatile(rel: Path) -> bool:
    return any(part in VOLATILE for part in rel.parts) or rel.name in VOLATILE_NAMES or rel.name.endswith(LEFTOVER)


def result_files(results: Path) -> list[str]:
    """Every result and bookkeeping file (relative paths), volatile files and leftovers not."""
    return sorted(str(p.relative_to(results)) for p in results.rglob("*")
                  if p.is_file() and not _volatile(p.relative_to(results)))


def leftovers(results: Path) -> list[str]:
    return sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.name.endswith(LEFTOVER))


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in JOB_HISTORY}
    return [_strip(v) for v in node] if isinstance(node, list) else node


def differs(a: Path, b: Path) -> bool:
    """:func:`_differs`, with JSON compared without a job's history (:data:`JOB_HISTORY`: a chunk
    run again after a fault computes and skips other counts) and a file that cannot be read
    as different."""
    try:
        if a.suffix == ".json":
            return _strip(json.loads(a.read_text())) != _strip(json.loads(b.read_text()))
        return _differs(a, b)
    except Exception:  # noqa: BLE001 - unreadable (damaged, truncated) is different
        return True


def verify(campaign: Campaign) -> dict:
    """The faulty copy against the reference: ``calibench compare`` (its exit status), files of the
    reference missing from the copy, files differing, files only in the copy, leftovers."""
    ref, out = campaign.reference / "results", campaign.results
    cmp_dir = Path(tempfile.mkdtemp(prefix="compare-", dir=campaign.logs or None))
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "compare", str(ref), str(out),
                           "--out", str(cmp_dir)], capture_output=True, text=True)
    shutil.rmtree(cmp_dir, ignore_errors=True)
    want, have = result_files(ref), set(result_files(out))
    lost = [f for f in want if f not in have]
    differing = [f for f in want if f in have and differs(ref / f, out / f)]
    return {"compare_exit": proc.returncode, "compare_tail": (proc.stdout + proc.stderr)[-1500:] if proc.returncode else "",
            "files": len(want), "lost": lost, "differing": differing,
            "extra": sorted(have - set(want)), "leftovers": leftovers(out)}


# ---------------------------------------------------------------- the command, and processes


def _start(campaign: Campaign, log: Path) -> subprocess.Popen:
    return subprocess.Popen(campaign.command, cwd=campaign.faulty, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _log(campaign: Campaign, name: str) -> Path:
    campaign.logs.mkdir(parents=True, exist_ok=True)
    return campaign.logs / f"{len(campaign.records):03d}-{name}.log"


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (Snakemake starts its jobs from worker threads)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _snakemake_of(driver: int) -> int | None:
    return next((p for p in _children(driver) if " -m snakemake " in f" {_cmdline(p)} "), None)


def job_pids(driver: int) -> list[int]:
    """Pids of the workflow's jobs (``python -m calibench <step>``) under a driver."""
    pattern = re.compile(rf"^\S*python\S* (-\S+ )*-m calibench ({JOB_STEPS}) ")  # not their shell
    return [p for p in _descendants(driver) if pattern.search(_cmdline(p) + " ")]


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def _wait_group(group: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not _group_alive(group):
            return True
        time.sleep(0.05)
    return False


def recover(campaign: Campaign, name: str = "recover") -> dict:
    """The README's command until it exits 0 (at most ``max_reruns`` runs); a run refused because
    a live one holds the results (exit 3: what a killed driver leaves running) is tried again
    after 2 s, for at most 10 minutes, and counted apart."""
    start = time.perf_counter()
    reruns = refused = 0
    codes = []
    while reruns < campaign.max_reruns and time.perf_counter() - start < 1800:
        log = _log(campaign, f"{name}{reruns + refused}")
        proc = subprocess.run(campaign.command, cwd=campaign.faulty, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        codes.append(proc.returncode)
        if proc.returncode == 3 and time.perf_counter() - start < 600:
            refused += 1
            time.sleep(2)
            continue
        reruns += 1
        if proc.returncode == 0:
            break
    return {"seconds": round(time.perf_counter() - start, 1), "reruns": reruns, "refused": refused, "exits": codes,
            "recovered": bool(codes) and codes[-1] == 0}


# ---------------------------------------------------------------- faults


def _candidates(campaign: Campaign, prefixes=None) -> list[str]:
    files = result_files(campaign.results)
    return [f for f in files if prefixes is None or f.startswith(prefixes)]


def _work(campaign: Campaign) -> str:
    """Gives the next run work: deletes a random shard, logits file or table of the copy."""
    for prefix in campaign.rng.sample(list(campaign.work), len(campaign.work)):
        files = _candidates(campaign, (prefix,))
        if files:
            target = campaign.rng.choice(files)
            (campaign.results / target).unlink()
            return target
    return ""


def _parquet_data_range(path: Path, rng: random.Random) -> tuple[int, int] | None:
    """The byte range of a random column chunk of a parquet file (its data pages), or None."""
    try:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups)
                  for c in range(meta.num_columns)]
        chunks = [c for c in chunks if c.total_compressed_size > 0]
        if not chunks:
            return None
        col = rng.choice(chunks)
        start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else col.data_page_offset
        return start, start + col.total_compressed_size
    except Exception:  # noqa: BLE001 - not a readable parquet file
        return None


def _overwrite(campaign: Campaign) -> dict:
    rng = campaign.rng
    target = rng.choice(_candidates(campaign))
    path = campaign.results / target
    size = path.stat().st_size
    where = "anywhere"
    lo, hi = 0, size
    if path.suffix == ".parquet" and rng.random() < 0.6:
        span = _parquet_data_range(path, rng)
        if span:
            (lo, hi), where = span, "column data"
    n = rng.randint(1, 8)
    offset = rng.randrange(lo, max(lo + 1, hi - n + 1)) if size else 0
    with open(path, "r+b") as f:  # a normal write: the modification time changes
        f.seek(offset)
        old = f.read(n)
        new = bytes(rng.randrange(256) for _ in old)
        if old and new == old:
            new = bytes([new[0] ^ 0xFF]) + new[1:]
        f.seek(offset)
        f.write(new)
    return {"target": target, "offset": offset, "bytes": len(old), "where": where, "size": size}


def _truncate(campaign: Campaign) -> dict:
    rng = campaign.rng
    target = rng.choice(_candidates(campaign))
    path = campaign.results / target
    size = path.stat().st_size
    length = 0 if size <= 1 or rng.random() < 0.4 else rng.randrange(1, size)
    os.truncate(path, length)
    return {"target": target, "offset": length, "size": size}


def _delete(campaign: Campaign) -> dict:
    target = campaign.rng.choice(_candidates(campaign))
    (campaign.results / target).unlink()
    return {"target": target}


def _delete_manifest_and_shard(campaign: Campaign) -> dict:
    """A measurement chunk's manifest, then a shard (or, for an inference manifest, a logits
    file) of that chunk."""
    rng = campaign.rng
    manifests = _candidates(campaign, ("chunks/",))
    if not manifests:
        return _delete(campaign)
    target = rng.choice(manifests)
    manifest = campaign.results / target
    summary = json.loads(manifest.read_text())
    manifest.unlink()
    space, hp = summary.get("space"), summary.get("hp")
    datasets = [summary["dataset"]] if "dataset" in summary else list(summary.get("datasets") or [])
    kind = "shards" if "/measure/" in f"/{target}" else "logits"
    files = [f"{kind}/space={space}/hp={hp}/dataset={d}/arch={int(i):06d}.parquet"
             for d in datasets for i in summary.get("indices", [])]
    files = [f for f in files if (campaign.results / f).exists()]
    second = rng.choice(files) if files else ""
    if second:
        (campaign.results / second).unlink()
    return {"target": target, "then": second}


def _kill(campaign: Campaign, kind: str) -> dict:
    """Gives the run work, starts the command and, at a random moment of it, does ``kind``."""
    rng = campaign.rng
    work = _work(campaign)
    at = rng.uniform(0.5, campaign.kill_window)
    run = _start(campaign, _log(campaign, "faulted"))
    started = time.perf_counter()
    while run.poll() is None and time.perf_counter() - started < at:
        time.sleep(0.02)
    info = {"target": work, "at_s": round(time.perf_counter() - started, 1), "injected": False}
    victim = None
    if kind == "kill -9 of one job":  # the first moment from `at` on with a job running
        while run.poll() is None and not (jobs := job_pids(run.pid)):
            time.sleep(0.02)
        if run.poll() is None and jobs:
            victim = rng.choice(jobs)
            info["victim"] = re.search(rf"-m calibench ({JOB_STEPS})", _cmdline(victim)).group(1)
            info["at_s"] = round(time.perf_counter() - started, 1)
    if run.poll() is None:
        try:
            if kind == "kill -9 of the whole run":
                os.killpg(run.pid, signal.SIGKILL)
            elif kind == "kill -9 of the driver":
                os.kill(run.pid, signal.SIGKILL)
            elif kind == "SIGTERM of the driver":
                os.kill(run.pid, signal.SIGTERM)
            elif kind == "kill -9 of snakemake":
                victim = _snakemake_of(run.pid)
            if kind == "kill -9 of one job" or kind == "kill -9 of snakemake":
                if victim is not None:
                    os.kill(victim, signal.SIGKILL)
                    info["injected"] = True
            else:
                info["injected"] = True
        except ProcessLookupError:
            pass
    try:
        info["driver_exit"] = run.wait(timeout=1800)
    except subprocess.TimeoutExpired:
        info["driver_exit"] = "running after 1800 s"
    if kind == "kill -9 of the whole run":
        _wait_group(run.pid, 30)
    if kind == "SIGTERM of the driver":  # what a clean stop leaves running, 30 s after the signal
        _wait_group(run.pid, 30)
        info["left_running"] = len(_group_pids(run.pid))
    return info


def _group_pids(group: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group:
                    out.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def _two_runs(campaign: Campaign) -> dict:
    """Two runs at once on the copy: the second must refuse, touching nothing, and the first finish."""
    work = _work(campaign)
    log = _log(campaign, "first")
    first = _start(campaign, log)
    started = time.perf_counter()
    while first.poll() is None and "+ " not in log.read_text() and time.perf_counter() - started < 60:
        time.sleep(0.05)  # the first holds the results once it prints the Snakemake command
    time.sleep(campaign.rng.uniform(0.0, 2.0))
    second = subprocess.run(campaign.command, cwd=campaign.faulty, capture_output=True, text=True)
    (campaign.logs / f"{len(campaign.records):03d}-second.log").write_text(second.stdout + second.stderr)
    code = first.wait()
    return {"target": work, "second_exit": second.returncode, "first_exit": code,
            "first_seconds": round(time.perf_counter() - started, 1),
            "second_refused": second.returncode == 3,
            "ok": second.returncode != 0 and code == 0}


def _disk_full(campaign: Campaign) -> dict:
    """The copy's results on a tmpfs with 0 bytes, up to 64 KB or up to 1 MB left free (one of
    the three at random), a run with work to do (it
    fails, or not), then the disk freed, and the results copied back (times kept)."""
    rng = campaign.rng
    results = campaign.results
    aside = campaign.faulty / "results.before-disk"
    mount = campaign.faulty / "results.tmpfs"
    shutil.move(results, aside)
    mount.mkdir()
    used = sum(p.stat().st_size + 4096 for p in aside.rglob("*") if p.is_file())
    free = rng.choice([0, rng.randrange(0, 64 << 10), rng.randrange(0, 1 << 20)])  # bytes left free
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={used + (4 << 20)}", "tmpfs", str(mount)], check=True)
    info = {"free_bytes": free}
    try:
        subprocess.run(["cp", "-a", f"{aside}/.", str(mount)], check=True)
        results.symlink_to(mount.name)
        work = _work(campaign)
        filler = mount / "filler"
        with open(filler, "wb") as f:  # fill the disk, then free `free` bytes of it
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        try:
            st = os.statvfs(mount)
            os.truncate(filler, max(0, filler.stat().st_size - free + st.f_bavail * st.f_frsize))
        except OSError:
            pass
        log = _log(campaign, "full")
        proc = subprocess.run(campaign.command, cwd=campaign.faulty, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        info.update(target=work, full_exit=proc.returncode,
                    enospc="No space left on device" in log.read_text(errors="replace"))
        filler.unlink()
        info["recovery"] = recover(campaign, "recover")
    finally:
        if results.is_symlink():
            results.unlink()
        subprocess.run(["cp", "-a", f"{mount}/.", str(results)], check=True)
        subprocess.run(["umount", str(mount)], check=True)
        mount.rmdir()
        shutil.rmtree(aside)
    return info


def inject(campaign: Campaign, kind: str) -> dict:
    """Does one fault to the copy; the record says what and where."""
    if kind in KILL_KINDS:
        return _kill(campaign, kind)
    return {"bytes overwritten": _overwrite, "truncated": _truncate, "deleted": _delete,
            "manifest and a shard of its chunk deleted": _delete_manifest_and_shard,
            "two runs at once": _two_runs, "disk full": _disk_full}[kind](campaign)


def fault(campaign: Campaign, kind: str, seed: int | None = None) -> dict:
    """One fault, its recovery and the check against the reference: the record. With ``seed``
    the fault draws from its own RNG, so what one fault draws (e.g. which of the jobs running
    at the moment of a kill) never shifts the faults after it."""
    record = {"n": len(campaign.records), "kind": kind}
    started = time.perf_counter()
    master = campaign.rng
    if seed is not None:
        campaign.rng = random.Random(seed)
    try:
        record.update(inject(campaign, kind))
    finally:
        campaign.rng = master
    recovery = record.pop("recovery", None) or recover(campaign)
    record.update(recovery_seconds=recovery["seconds"], reruns=recovery["reruns"], refused=recovery["refused"],
                  exits=recovery["exits"], recovered=recovery["recovered"])
    if kind == "two runs at once":  # the first run's time is the recovery
        record["recovery_seconds"] = round(record["first_seconds"] + recovery["seconds"], 1)
    found = verify(campaign)
    record.update(compare_exit=found["compare_exit"], files=found["files"], lost=found["lost"],
                  differing=found["differing"], extra=found["extra"], leftovers=len(found["leftovers"]))
    bad = (not record["recovered"] or found["lost"] or found["differing"] or found["compare_exit"] != 0
           or (kind == "two runs at once" and not record["ok"]))
    record["verdict"] = "FAIL" if bad else "ok"
    if bad:
        record["compare_tail"] = found["compare_tail"]
    record["seconds"] = round(time.perf_counter() - started, 1)
    campaign.records.append(record)
    return record


def run_campaign(campaign: Campaign, n: int, kinds=KINDS, progress=print) -> list[dict]:
    """``n`` faults drawn from ``kinds``; after a failed check the copy is kept aside
    (``faulty.fail-NNN``) and made again from the reference, so each fault starts from a clean copy."""
    kinds = draw(campaign.rng, n, kinds)
    seeds = [campaign.rng.getrandbits(64) for _ in kinds]
    for kind, seed in zip(kinds, seeds):
        record = fault(campaign, kind, seed)
        if progress:
            progress(f"fault {record['n']:3d} {record['verdict']:4s} {kind:42s} {_where(record):60s} "
                     f"{record['recovery_seconds']:6.1f} s, {record['reruns']} rerun(s)"
                     + (f", refused {record['refused']}x" if record["refused"] else "")
                     + (f"; lost {record['lost'][:3]} differing {record['differing'][:3]} compare exit "
                        f"{record['compare_exit']} exits {record['exits']}" if record["verdict"] != "ok" else ""))
        if record["verdict"] != "ok":
            shutil.move(campaign.faulty, campaign.faulty.with_name(f"{campaign.faulty.name}.fail-{record['n']:03d}"))
            clone(campaign.reference, campaign.faulty)
    return campaign.records


def _where(record: dict) -> str:
    where = record.get("target", "")
    if "offset" in record and record["kind"] != "deleted":
        where += f" @{record['offset']}" + (f" ({record['where']})" if record.get("where") == "column data" else "")
    if record.get("then"):
        where += f" + {record['then']}"
    if record.get("victim"):
        where += f" [{record['victim']}]"
    if "at_s" in record:
        where += f" at {record['at_s']} s" + ("" if record.get("injected") else " (run ended first)")
    return where


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(records: list[dict]) -> dict:
    times = [r["recovery_seconds"] for r in records]
    by_kind: dict[str, dict] = {}
    for r in records:
        k = by_kind.setdefault(r["kind"], {"faults": 0, "failed": 0, "reruns": 0, "not_injected": 0})
        k["faults"] += 1
        k["failed"] += r["verdict"] != "ok"
        k["reruns"] += r["reruns"]
        k["not_injected"] += r.get("injected") is False
    return {"faults": len(records), "failed": sum(r["verdict"] != "ok" for r in records), "by_kind": by_kind,
            "files_lost": sum(len(r["lost"]) for r in records),
            "files_differing": sum(len(r["differing"]) for r in records),
            "tables_differing": sum(1 for r in records for f in r["differing"] if f.startswith("tables/")),
            "compare_failed": sum(r["compare_exit"] != 0 for r in records),
            "reruns": sum(r["reruns"] for r in records), "refused": sum(r["refused"] for r in records),
            "leftovers_at_end": records[-1]["leftovers"] if records else 0,
            "recovery_seconds": {"median": round(percentile(times, 0.5), 1), "p90": round(percentile(times, 0.9), 1),
                                 "max": round(max(times), 1) if times else None}}


def markdown(records: list[dict], summary: dict) -> str:
    lines = ["| kind | faults | failed | reruns | run ended before the fault |", "|---|---|---|---|---|"]
    for kind, k in summary["by_kind"].items():
        lines.append(f"| {kind} | {k['faults']} | {k['failed']} | {k['reruns']} | {k['not_injected']} |")
    rs = summary["recovery_seconds"]
    lines += ["", f"faults {summary['faults']}, failed {summary['failed']}; files lost {summary['files_lost']}, "
                  f"files differing {summary['files_differing']} (tables {summary['tables_differing']}), "
                  f"`calibench compare` not equal {summary['compare_failed']}; reruns {summary['reruns']}, "
                  f"refused while a run was live {summary['refused']}; leftovers (*.damaged, *.changed) at the end "
                  f"{summary['leftovers_at_end']}",
              f"recovery time: median {rs['median']} s, p90 {rs['p90']} s, max {rs['max']} s", "",
              "| # | kind | target | recovery s | reruns | verdict |", "|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['n']} | {r['kind']} | {_where(r)} | {r['recovery_seconds']} | {r['reruns']} | {r['verdict']} |")
    return "\n".join(lines)


def random_main(args) -> None:
    work = args.workdir or Path(tempfile.mkdtemp(prefix="calibench-faults-"))
    run_args = []
    reference = work / "reference"
    if not (reference / "results").is_dir():
        if reference.exists():
            shutil.rmtree(reference)
        _workflow(reference)
        if args.config == "small":
            (reference / "small.yaml").write_text(json.dumps(SMALL))
        start = time.perf_counter()
        subprocess.run(RUN + (["--configfile", "small.yaml"] if args.config == "small" else []), cwd=reference,
                       check=True, capture_output=True)
        print(f"reference run ({args.config} config): {time.perf_counter() - start:.0f} s", flush=True)
    if args.config == "small":
        run_args = ["--configfile", "small.yaml"]
    faulty = clone(reference, work / "faulty")
    campaign = Campaign(reference, faulty, random.Random(args.seed), run_args, logs=work / "logs",
                        kill_window=args.kill_window)
    kinds = [k for k in KINDS if not args.kinds or k in args.kinds.split(",")]
    if "disk full" in kinds and not disk_full_possible():
        kinds.remove("disk full")
        print("disk full: skipped (no tmpfs can be mounted here: needs root with CAP_SYS_ADMIN)", flush=True)
    try:
        run_campaign(campaign, args.random, kinds,
                     progress=lambda line: (print(line, flush=True), args.json and _dump(args, campaign)))
    finally:
        _dump(args, campaign)
    summary = summarize(campaign.records)
    print("\n" + markdown(campaign.records, summary))
    if summary["failed"]:
        sys.exit(1)


def _dump(args, campaign: Campaign) -> None:
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "config": args.config, "cores": 2,
                                         "summary": summarize(campaign.records), "records": campaign.records},
                                        indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=12, help="the kill -9 campaign (issue 13): at most this many faults")
    parser.add_argument("--random", type=int, default=None, metavar="N",
                        help="the random campaign (issue 33): N faults of every kind, each recovered and checked")
    parser.add_argument("--config", choices=("default", "small"), default="small",
                        help="--random: the README's default config or the smaller one (SMALL; default)")
    parser.add_argument("--kill-window", type=float, default=None,
                        help="--random: seconds of a rerun within which a kill comes (default 20 small, 60 default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=None, help="--random: only these kinds (comma-separated, e.g. deleted)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.random is not None:
        if args.kill_window is None:
            args.kill_window = 20.0 if args.config == "small" else 60.0
        return random_main(args)
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
