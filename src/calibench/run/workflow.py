"""`calibench run` and `calibench repair`: the workflow driven through Snakemake, with the
results directory held for the run (:mod:`calibench.run.runlock`), one progress line per
rule (:mod:`calibench.run.progress`) and a summary of this run."""

from __future__ import annotations

import argparse
import collections
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from calibench import layout, vocabulary
from calibench.run.status import _measurement_plan
from calibench.run.targets import _check_profile, _config_and_targets



def _repairs_pending(config: dict) -> list[str]:
    """What the repair check would redo now (:mod:`calibench.run.repair`): after a run, files its
    jobs found damaged and set aside (a shard or logits file whose bytes changed with its
    modification time kept), which a second pass rebuilds."""
    from calibench.run import repair

    results, logits = Path(config["results"]), bool(config["keep_logits"])
    damaged = repair.damaged_outputs(results, logits)
    asked = set(repair.lost_parts(damaged))  # a part or population that failed in this run: not run twice
    return ([f"{path}: {cause}" for path, cause, _ in damaged if path not in asked]
            + [f"{manifest}: {'; '.join(why)}" for manifest, why in repair.changed_chunks(results, logits)])


def _repair(config: dict, by: str = "this run") -> list[str]:
    """The repair before Snakemake starts (:func:`calibench.run.repair.repair_before_run`), each
    line on the terminal."""
    from calibench.run import repair

    said = repair.repair_before_run(Path(config["results"]), logits=bool(config["keep_logits"]), by=by)
    for line in said:
        print(f"calibench: {line}", file=sys.stderr, flush=True)
    return said


def _check_snakemake_args(given: list[str]) -> None:
    """The options after ``--`` read by Snakemake's own parser first: one that is not Snakemake's,
    or a bad value, in one line (Snakemake would print its usage amid the Snakefile's notes)."""
    if not given:
        return
    from snakemake.cli import get_argument_parser

    parser = get_argument_parser()

    def error(message: str):
        raise ValueError(f"snakemake option after --: {message}")

    parser.error = error
    try:
        _, unknown = parser.parse_known_args(given)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - Snakemake's own value checks (CliException and the like)
        raise ValueError(f"snakemake option after --: {str(exc).strip().splitlines()[-1]}") from None
    if unknown:
        raise ValueError(f"not options of snakemake: {' '.join(unknown)} (calibench run passes what follows -- to snakemake)")


def _repair_command(args: argparse.Namespace) -> int:
    """``calibench repair``: set aside what fails its content check and the chunks whose files
    changed, under the run lock, so that the next run (``calibench run`` or a plain
    ``snakemake``) rebuilds them; runs no job."""
    from calibench.run.runlock import RunInUse, run_guard

    try:
        config, _ = _config_and_targets(args)
    except ValueError as exc:
        print(f"calibench: {exc}", file=sys.stderr)
        return 2
    try:
        with run_guard(Path.cwd(), Path(config["results"]), [sys.executable, "-m", "calibench", "repair"]):
            said = _repair(config, by="the next run")
    except RunInUse as exc:
        logging.getLogger("calibench").error("%s", exc)
        return 3
    print("calibench repair: " + (f"{len(said)} line(s) above; the next run rebuilds what was set aside" if said
                                  else "nothing to repair"))
    return 0


def _run(args: argparse.Namespace) -> int:
    """A thin wrapper over snakemake: targets from --space/--dataset, everything else passed on.

    It holds the results directory for the run (:mod:`calibench.run.runlock`): a second run on
    the same results stops with a message and touches nothing, and a Snakemake lock left
    by a killed run (kill -9, OOM, a lost login node) is released, with a log line. SIGINT,
    SIGTERM or SIGHUP stop Snakemake and its jobs (:func:`_follow`), release the results and
    exit with 128 + the signal's number; the next run resumes. Where only analysis parts failed,
    the report is written from the others (:mod:`calibench.run.partial_report`).
    """
    from calibench.run.runlock import RunInUse, run_guard

    try:
        config, targets = _config_and_targets(args)
        _check_profile(args.profile)
        _check_snakemake_args(args.snakemake_args)
    except ValueError as exc:
        print(f"calibench: {exc}", file=sys.stderr)
        return 2
    results = config["results"]
    cmd = [sys.executable, "-m", "snakemake", "--configfile", args.configfile, "--cores", str(args.cores)]
    if args.profile:
        cmd += ["--profile", args.profile]
    cmd += targets + args.snakemake_args
    from calibench.run import repair

    if repair.dry_run(args.snakemake_args):
        return _dry_run(cmd, config, targets)
    try:
        with run_guard(Path.cwd(), Path(results), cmd) as guard:
            _repair(config)
            print("+", " ".join(cmd), flush=True)
            started = time.time()
            code, progress, log_file, stop = _follow(cmd, guard.pass_fds, Path(results), verbose=args.verbose)
            found = _repairs_pending(config) if stop is None else []
            if found:  # jobs found files damaged and set them aside: rebuilt now, not by the next run
                print("calibench: found during this run and set aside: " + "; ".join(found[:3])
                      + (f"; and {len(found) - 3} more" if len(found) > 3 else "") + "; running once more to rebuild",
                      file=sys.stderr, flush=True)
                first = progress
                _repair(config)
                code, progress, log_file, stop = _follow(cmd, guard.pass_fds, Path(results), verbose=args.verbose)
                progress.add(first)
            partial = []
            if code != 0 and stop is None:  # analysis parts failed: the report of those that are complete
                from calibench.run.partial_report import write_partial_report

                try:
                    partial = write_partial_report(config, args.configfile, targets, log_file)
                except KeyboardInterrupt:  # the report stays as it was (written atomically)
                    partial = ["calibench: interrupted while writing the report of the parts that completed"]
    except RunInUse as exc:
        logging.getLogger("calibench").error("%s", exc)
        return 3
    from calibench.results import failures

    stopped = stop is not None and code != 0  # a signal stopped the run (not one that came as it finished)
    if code == 0:  # what this run set aside and rebuilt: the copies go now, not at the next run
        from calibench.run import repair

        repair.clear_rebuilt(Path(results))
    tables = [t for t in targets if t.endswith(".parquet")]
    told = [stop[1] if stopped else "",
            failures.failed_jobs_summary(Path.cwd(), since=started - 1) if code != 0 and not stopped else "",
            failures.terminal_summary(results, tables, since=started - 1 if code != 0 else None),
            failures.underdetermined_summary(tables, bool((config.get("analysis") or {}).get("include_underdetermined"))),
            failures.search_summary(tables), *partial]
    try:
        for text in told:
            if text:
                print(text, file=sys.stderr, flush=True)
        ran, failed = progress.jobs()
        computed, skipped, how = _networks_measured(Path(results), since=started - 1)
        print(f"calibench: {ran} job(s) run" + (f", {failed} failed" if failed and not stopped else "")
              + f" in {time.time() - started:.0f} s; networks measured: {computed}{how}, already measured: {skipped}; "
              f"Snakemake's log: {log_file}", flush=True)
        if code == 0 and str(layout.report_path(results)) in targets:
            print(f"report: {layout.report_path(results).resolve()}")
        if code == 0 and str(layout.explorer_page(results)) in targets:
            print(f"explorer: {layout.explorer_page(results).resolve()}")
    except OSError:  # e.g. the terminal that SIGHUP came from is gone
        pass
    return 128 + stop[0] if stopped else code


def _dry_run(cmd: list[str], config: dict, targets: list[str]) -> int:
    """``calibench run -- -n``: Snakemake's plan on the terminal, then per table the fits its
    measurement makes again and those it re-applies. Like any planning it changes no file: no
    run lock, no log file, no repair (a dry run of the Snakefile only lists the repairs)."""
    code, _, _, stop = _follow(cmd, (), Path(config["results"]), verbose=True, keep_log=False)
    if code == 0:
        for line in _measurement_plan(config, [t for t in targets if t.endswith(".parquet")]):
            print(f"dry run: {line}", flush=True)
    return 128 + stop[0] if stop is not None and code != 0 else code


def _follow(cmd: list[str], pass_fds, results: Path, verbose: bool, grace_s: float = 30.0, keep_log: bool = True):
    """Run Snakemake with its output going whole to ``logs/snakemake/run-*.log`` (and the
    terminal if ``verbose``), one progress line per rule on the terminal otherwise.

    SIGINT, SIGTERM or SIGHUP to this process stop the run: Snakemake gets SIGTERM (its own stop:
    it starts no new job, and exits once its running jobs have ended, removing their incomplete
    outputs and its locks) and every process under it, its jobs, the signal received (SIGHUP:
    SIGTERM), a job started meanwhile too. A terminal's Ctrl-C reaches Snakemake and the jobs
    itself (one process group): the jobs get no second SIGINT, only SIGTERM if still running 2 s
    later (a second SIGINT makes Snakemake leave with a traceback). A third of ``grace_s`` on,
    Snakemake gets SIGINT (its cancel, which also cancels the cluster jobs it submitted); after
    ``grace_s``, or on a second signal, it and every process under it are killed (SIGKILL).
    On Linux this process is the reaper of its orphaned descendants meanwhile (``prctl``), so
    nothing of the run outlives it: a job's program orphaned while Snakemake runs (its shell was
    killed; Snakemake has counted the job failed, and it would go on writing outputs that
    Snakemake removed) is killed at once, and whatever is left when Snakemake exits is killed then.

    ``keep_log=False``: no log file (a dry run changes no file).

    Returns (exit status, progress, log file or None, stop): ``stop`` is None, or (the signal's number,
    the line that says how the run stopped) when a signal stopped it.
    """
    import os
    import signal
    import threading
    from collections import deque

    from calibench.run.progress import RunProgress

    log_file = layout.log_path(results, f"snakemake/run-{time.strftime('%Y%m%dT%H%M%S')}") if keep_log else None
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    progress = RunProgress(lambda text: print(text, flush=True), lambda text: print(text, file=sys.stderr, flush=True))
    tail: deque[str] = deque(maxlen=12)
    received: list[int] = []  # stop signals, in order
    told: set[int] = set()  # processes given the stop signal (they are stopping)
    orphans: set[int] = set()  # killed while Snakemake ran
    proc_dir = Path("/proc")

    def state(pid: int) -> tuple[int, str] | None:  # (parent pid, state letter), None once gone
        try:
            fields = (proc_dir / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()
            return int(fields[1]), fields[0]
        except (OSError, IndexError, ValueError):
            return None

    def processes() -> dict[int, tuple[int, str]]:
        return {int(e.name): st for e in proc_dir.glob("[0-9]*") if (st := state(int(e.name)))}

    def under(pid: int) -> list[int]:  # live descendants, parents first
        table = processes()
        out, todo = [], [pid]
        while todo:
            parent = todo.pop(0)
            kids = sorted(c for c, (p, _) in table.items() if p == parent)
            out += [c for c in kids if table[c][1] != "Z"]
            todo += kids
        return out

    def send(pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def subreaper(on: bool) -> bool | None:  # the previous setting; None where unsupported
        if not sys.platform.startswith("linux"):
            return None
        try:
            import ctypes

            libc, before = ctypes.CDLL(None, use_errno=True), ctypes.c_int(0)
            if libc.prctl(37, ctypes.byref(before), 0, 0, 0) or libc.prctl(36, int(on), 0, 0, 0):  # PR_[GS]ET_CHILD_SUBREAPER
                return None
            return bool(before.value)
        except (OSError, AttributeError):
            return None

    def from_terminal() -> bool:  # in the terminal's foreground process group: Ctrl-C reached every process
        for fd in (0, 1, 2):
            try:
                return os.tcgetpgrp(fd) == os.getpgrp()
            except OSError:
                continue
        return False

    def kill_orphans(snakemake: int) -> None:  # this process's children other than Snakemake
        try:
            kids = {int(c) for t in (proc_dir / str(os.getpid()) / "task").iterdir()
                    for c in (t / "children").read_text().split()}
        except (OSError, ValueError):  # no /proc/<pid>/task/<tid>/children
            kids = {c for c, (parent, _) in processes().items() if parent == os.getpid()}
        for pid in kids - {snakemake}:
            if pid not in orphans and (state(pid) or (0, "Z"))[1] != "Z":
                send(pid, signal.SIGKILL)
                if pid not in told:  # one told to stop is stopping: not counted as left behind
                    orphans.add(pid)
            try:
                os.waitpid(pid, os.WNOHANG)  # that pid only: never Snakemake, which Popen waits for
            except ChildProcessError:
                pass

    def wait(proc: subprocess.Popen, reaper: bool) -> tuple[int, bool]:  # (exit status, killed with SIGKILL)
        since, interrupted, to_jobs, jobs_from = None, False, signal.SIGTERM, 0.0
        while True:
            try:
                return proc.wait(timeout=0.2), False
            except subprocess.TimeoutExpired:
                pass
            if reaper:
                kill_orphans(proc.pid)
            if not received:
                continue
            now = time.monotonic()
            if since is None:
                since = now
                send(proc.pid, signal.SIGTERM)
                keyboard = received[0] == signal.SIGINT and from_terminal()
                if received[0] in (signal.SIGINT, signal.SIGTERM) and not keyboard:
                    to_jobs = received[0]
                jobs_from = since + (2.0 if keyboard else 0.0)
            if len(received) > 1 or now - since > grace_s:
                for pid in [proc.pid, *under(proc.pid)]:
                    send(pid, signal.SIGKILL)
                return proc.wait(), True
            if now - since > grace_s / 3 and not interrupted:
                send(proc.pid, signal.SIGINT)
                interrupted = True
            if now >= jobs_from:
                for pid in set(under(proc.pid)) - told:
                    send(pid, to_jobs)
                    told.add(pid)

    def kill_leftovers() -> int:  # once Snakemake has exited: what is left under this process
        killed: set[int] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = under(os.getpid())
            for pid in set(left) - killed:
                send(pid, signal.SIGKILL)
                killed.add(pid)
            while True:  # reap them, and any orphan that ended earlier (Snakemake is reaped already)
                try:
                    if not os.waitpid(-1, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
            if not left:
                break
            time.sleep(0.02)
        return len((killed - told) | orphans)

    def read(proc: subprocess.Popen, log) -> None:
        try:
            for line in proc.stdout:
                log.write(line)
                try:
                    if verbose:
                        print(line, end="", flush=True)
                    elif not received:  # once stopped, the jobs' ends are no failures to count
                        tail.append(line.rstrip())
                        progress.feed(line)
                except OSError:  # the terminal went away (SIGHUP): Snakemake's output still goes to the log
                    pass
        except ValueError:  # the pipe was closed
            pass

    signals = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in signals}
    before = subreaper(True)
    try:
        with open(log_file or os.devnull, "w") as log, subprocess.Popen(cmd, pass_fds=pass_fds, stdout=subprocess.PIPE,
                                                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
            reader = threading.Thread(target=read, args=(proc, log), name="snakemake-output", daemon=True)
            reader.start()
            code, killed = wait(proc, before is not None)
            left = kill_leftovers() if before is not None else 0  # they would also hold the output pipe
            reader.join(timeout=30)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        if before is not None:
            subreaper(before)
    stop = None
    if received:
        name = signal.Signals(received[0]).name
        if killed:
            how = (f"Snakemake had not stopped its jobs {grace_s:g} s after it was told to (or a second signal "
                   "came), so it and its jobs were killed (SIGKILL); `calibench run` resumes from here (it "
                   "releases the lock they left)")
        else:
            how = "Snakemake stopped its jobs" + (f" ({left} process(es) they left were killed)" if left else "") \
                + "; `calibench run` resumes from here"
        stop = (received[0], f"calibench: stopped by {name}; {how}")
    elif left:
        print(f"calibench: {left} process(es) that outlived their Snakemake job were killed", file=sys.stderr, flush=True)
    if code != 0 and stop is None and not verbose and not any(progress.jobs()):  # stopped before any job: say why
        print("\n".join(t for t in tail if t.strip()), file=sys.stderr, flush=True)
    return code, progress, log_file, stop


_MEASURED_HOW = (("whole", "stages measured whole"), ("new_bins", "at the new bin counts only"),
                 ("kept", "rows kept"))


def _networks_measured(results: Path, since: float) -> tuple[int, int, str]:
    """Networks this run's measurement chunks computed, those they found measured, and, where
    some stages' rows were kept from an earlier measurement (docs/running.md, "The fit store"),
    " (stages measured whole: ...; at the new bin counts only: ...; rows kept: ...)"; a stage
    measured one way in some tables and another way in others is said with its count of tables
    in each ("dir (2 tables)")."""
    computed = skipped = 0
    stages: dict[str, dict[str, set]] = {how: {} for how, _ in _MEASURED_HOW}  # how -> stage -> tables
    for manifest in layout.matching(layout.measure_manifest(results, "*", "*", "*")):
        try:
            if manifest.stat().st_mtime < since:
                continue
            summary = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        computed += int(summary.get("computed", 0))
        skipped += int(summary.get("skipped", 0))
        for how, found in stages.items():
            for stage in (summary.get("stages_measured") or {}).get(how) or {}:
                found.setdefault(stage, set()).add(manifest.parent.name)
    if not (stages["new_bins"] or stages["kept"]):
        return computed, skipped, ""
    order = {s: i for i, s in enumerate(vocabulary.STAGES)}
    ways = collections.Counter(stage for found in stages.values() for stage in found)

    def named(stage: str, tables: set) -> str:
        return stage if ways[stage] == 1 else f"{stage} ({len(tables)} table{'s' if len(tables) > 1 else ''})"

    said = [f"{words}: " + ", ".join(named(s, stages[how][s]) for s in sorted(stages[how], key=lambda s: order.get(s, 99)))
            for how, words in _MEASURED_HOW if stages[how]]
    return computed, skipped, " (" + "; ".join(said) + ")"
