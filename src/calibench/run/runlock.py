"""One run at a time per results directory, and recovery from killed runs.

``calibench run`` wraps ``python -m snakemake ...`` in :func:`run_guard`::

    with run_guard(workdir, results, cmd) as guard:
        code = subprocess.call(cmd, cwd=workdir, pass_fds=guard.pass_fds)

The guard does three things.

1. It takes an exclusive, non-blocking ``flock`` on ``<results>/.calibench-run.lock``
   and writes who holds it (pid, host, start time, command) into that file.
   If another live process holds the flock, :class:`RunInUse` is raised naming
   that holder, and nothing is touched: the recorded run, or, when that process
   has exited (``kill -9`` of the driver), the process that holds the flock now
   (its Snakemake, found through ``/proc/<pid>/fdinfo``).  The kernel drops a flock when its
   holder dies, ``kill -9`` included, so a free flock means no guarded run is
   alive: the file's content from an earlier run is simply overwritten.

2. Holding the flock, it looks at Snakemake's lock files in
   ``<workdir>/.snakemake/locks/``.  A run killed with ``kill -9`` (OOM killer,
   lost login node) leaves them behind and every later run of an overlapping
   target fails with Snakemake's ``LockException``.  The locks are *stale* when
   no live Snakemake process on this host has ``workdir`` as its working
   directory (read from ``/proc/<pid>/cmdline`` and ``/proc/<pid>/cwd``; the
   current process and its ancestors are not counted).  Stale locks are
   released, with ``snakemake --unlock`` built from the run's own command
   (the default) or by deleting the lock files, and one WARNING is logged on
   the ``calibench.run.runlock`` logger.  If a live Snakemake process is found,
   the locks are left alone and :class:`RunInUse` names that process.
   Where staleness cannot be proven (no ``/proc``, e.g. macOS; or a Snakemake
   process of the lock files' owner whose cwd cannot be read) the locks are
   left for Snakemake to report.

3. It releases the flock on exit.  The file stays; its content describes the
   last run that held it.

Limits: only processes on this host are seen.  A Snakemake process started
without the guard on another host, in the same workdir on a shared file
system, is invisible here; guarded runs on other hosts are excluded by the
flock where the file system supports it (NFS does; Lustre needs ``-o flock``;
where flock is unsupported the guard only logs a warning and leaves
Snakemake's locks alone).  Jobs a killed run had submitted to SLURM keep
running; the guard does not look at the queue.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

try:  # POSIX only; on Windows the guard degrades to a no-op for its own lock.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "RunGuard",
    "RunInUse",
    "SnakemakeProcess",
    "find_snakemake_processes",
    "is_snakemake_command",
    "release_stale_locks",
    "run_guard",
    "snakemake_lock_files",
]

log = logging.getLogger("calibench.run.runlock")

LOCK_NAME = ".calibench-run.lock"
"""Name of the guard's lock file inside the results directory."""

UNLOCK_TIMEOUT_S = 300
"""Limit for ``snakemake --unlock`` (it parses the Snakefile: about 2 s)."""

_PROC = Path("/proc")


class RunInUse(RuntimeError):
    """Another run is live: a guarded run holds the results directory, or a
    Snakemake process works in the workdir.

    Attributes: ``results`` and ``workdir`` (Paths, either may be None),
    ``holder`` (the JSON record read from the lock file, or None) and
    ``process`` (the live process that holds the results or works in the workdir, as a
    :class:`SnakemakeProcess`, or None: for a guarded run, set when the recorded process is
    not the one holding the lock, e.g. the Snakemake of a ``calibench run`` killed with -9).
    """

    def __init__(self, message: str, *, results: Path | None = None, workdir: Path | None = None,
                 holder: dict | None = None, process: SnakemakeProcess | None = None):
        super().__init__(message)
        self.results = results
        self.workdir = workdir
        self.holder = holder
        self.process = process


@dataclass(frozen=True)
class SnakemakeProcess:
    """A Snakemake process seen in /proc.  ``cwd_known`` is False when its
    working directory could not be read (another user's process)."""

    pid: int
    argv: tuple[str, ...]
    uid: int
    cwd_known: bool = True

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass
class RunGuard:
    """What :func:`run_guard` yields.

    ``record`` is what was written to ``lock_path``.  ``released_stale`` says
    whether stale Snakemake locks were released.  ``pass_fds`` holds the
    flock's descriptor when there is one: give it to ``subprocess`` so that the
    flock stays held while Snakemake lives even if the wrapper dies first.
    """

    lock_path: Path
    record: dict
    released_stale: bool = False
    fd: int | None = None
    pass_fds: tuple[int, ...] = field(default=())


# --- Snakemake command lines ---------------------------------------------------------

_PY_OPTS_WITH_ARG = {"W", "X"}


def _snakemake_prefix_len(argv: Sequence[str]) -> int:
    """Number of leading argv items that name the Snakemake program, 0 if argv
    does not run Snakemake: ``snakemake ...``, ``python [opts] -m snakemake ...``,
    ``python [opts] /path/bin/snakemake ...`` (how a console script's shebang runs)."""
    if not argv:
        return 0
    name = os.path.basename(argv[0])
    if name == "snakemake":
        return 1
    if not (name.startswith("python") or name.startswith("pypy")):
        return 0
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--check-hash-based-pycs":
            i += 2
            continue
        if a.startswith("--"):  # --version, --help and the like: not running a program
            return 0
        if a == "-" or not a.startswith("-"):  # the script
            return i + 1 if os.path.basename(a) == "snakemake" else 0
        # a cluster of one-letter options, e.g. -u, -uB, -msnakemake, -um snakemake
        for j in range(1, len(a)):
            c = a[j]
            if c == "c":
                return 0
            if c == "m":
                rest = a[j + 1:]
                if rest:
                    return i + 1 if rest in ("snakemake", "snakemake.__main__") else 0
                if i + 1 < len(argv) and argv[i + 1] in ("snakemake", "snakemake.__main__"):
                    return i + 2
                return 0
            if c in _PY_OPTS_WITH_ARG:
                if j + 1 == len(a):
                    i += 1  # the argument is the next item
                break
        i += 1
    return 0


def is_snakemake_command(argv: Sequence[str]) -> bool:
    """Whether the command line runs Snakemake (see :func:`_snakemake_prefix_len`)."""
    return _snakemake_prefix_len(argv) > 0


# --- /proc ---------------------------------------------------------------------------

def _proc_available() -> bool:
    return (_PROC / "self" / "cmdline").exists() and (_PROC / "self" / "cwd").exists()


def _parent_pid(pid: int) -> int | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _self_and_ancestors() -> set[int]:
    pids = set()
    pid: int | None = os.getpid()
    while pid and pid not in pids:
        pids.add(pid)
        pid = _parent_pid(pid)
    return pids


def _same_dir(st: os.stat_result, ref: os.stat_result) -> bool:
    return (st.st_dev, st.st_ino) == (ref.st_dev, ref.st_ino)


def find_snakemake_processes(workdir: str | os.PathLike) -> list[SnakemakeProcess] | None:
    """Live Snakemake processes on this host whose working directory is ``workdir``,
    plus Snakemake processes whose working directory cannot be read
    (``cwd_known=False``).  The current process and its ancestors are skipped,
    and so are zombies.  ``None`` when there is no /proc to read."""
    if not _proc_available():
        return None
    ref = os.stat(workdir)
    skip = _self_and_ancestors()
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in skip:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        parts = raw.split(b"\0")
        if parts and not parts[-1]:
            parts.pop()  # cmdline ends with a NUL
        argv = tuple(a.decode(errors="replace") for a in parts)
        if not is_snakemake_command(argv):
            continue
        try:
            uid = entry.stat().st_uid
        except OSError:
            continue
        try:
            cwd = os.stat(entry / "cwd")
        except FileNotFoundError:
            continue  # exited meanwhile (or a zombie)
        except OSError:  # e.g. another user's process: EACCES
            found.append(SnakemakeProcess(pid, argv, uid, cwd_known=False))
            continue
        if _same_dir(cwd, ref):
            found.append(SnakemakeProcess(pid, argv, uid))
    return found


# --- Snakemake's lock files ----------------------------------------------------------

def snakemake_lock_files(workdir: str | os.PathLike) -> list[Path]:
    """The files in ``<workdir>/.snakemake/locks/`` (``0.input.lock``, ``0.output.lock``:
    the input and output paths of a running DAG).  Snakemake removes the whole
    directory when a run ends, unless the run was killed."""
    lockdir = Path(workdir) / ".snakemake" / "locks"
    try:
        return sorted(p for p in lockdir.iterdir() if p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _unlock_command(command: Sequence[str]) -> list[str] | None:
    n = _snakemake_prefix_len(command)
    if not n:
        return None
    return [*command[:n], "--unlock", *command[n:]]


def _remove(files: Sequence[Path]) -> None:
    for f in files:
        f.unlink(missing_ok=True)


def _in_use_by_process(workdir: Path, p: SnakemakeProcess, locks_left: bool = True) -> RunInUse:
    lockdir = workdir / ".snakemake" / "locks"
    left = f"the lock files in {lockdir} were left alone" if locks_left else \
        f"it started while stale lock files in {lockdir} were being released"
    return RunInUse(
        f"{workdir} is in use by a running Snakemake process (pid {p.pid} on {socket.gethostname()}: "
        f"{p.command}); {left}. "
        f"Wait for it to finish, or stop it (kill {p.pid}), then run again.",
        workdir=workdir, process=p)


def release_stale_locks(workdir: str | os.PathLike, command: Sequence[str] | None = None, *,
                        unlock: str = "snakemake") -> bool:
    """Release Snakemake's locks in ``workdir`` if they are provably stale.

    Returns True when stale lock files were released (one WARNING logged), False
    when there were none or staleness cannot be proven (they are left; a WARNING
    says why).  Raises :class:`RunInUse` when a live Snakemake process works in
    ``workdir``.  Call it only while holding the guard's flock (as
    :func:`run_guard` does), so that no guarded run starts meanwhile.

    ``unlock="snakemake"`` runs ``command`` with ``--unlock`` inserted after the
    program (so the same Snakefile, config files and profile are used; about 2 s)
    in ``workdir``; if ``command`` is not a Snakemake command line, or that fails,
    or leaves lock files, the files are removed directly.  ``unlock="files"``
    removes the lock files directly, which is what Snakemake's file persistence
    does on unlock (it deletes ``.snakemake/locks``).
    """
    if unlock not in ("snakemake", "files"):
        raise ValueError(f"unlock must be 'snakemake' or 'files', not {unlock!r}")
    workdir = Path(workdir).absolute()
    lockdir = workdir / ".snakemake" / "locks"
    locks = snakemake_lock_files(workdir)
    if not locks:
        return False
    procs = find_snakemake_processes(workdir)
    if procs is None:
        log.warning("%d Snakemake lock file(s) in %s; there is no /proc here to check for a live "
                    "Snakemake process, so they are left alone (if no run is active, release them "
                    "with `snakemake --unlock`)", len(locks), lockdir)
        return False
    live = [p for p in procs if p.cwd_known]
    if live:
        raise _in_use_by_process(workdir, live[0])
    owners = set()
    for f in locks:
        try:
            owners.add(f.stat().st_uid)
        except FileNotFoundError:
            pass
    unknown = [p for p in procs if p.uid in owners]
    if unknown:
        p = unknown[0]
        log.warning("Snakemake lock file(s) in %s left alone: cannot tell whether Snakemake process "
                    "%d (uid %d: %s) works in %s", lockdir, p.pid, p.uid, p.command, workdir)
        return False

    how = "by deleting the lock files"
    if unlock == "snakemake" and (cmd := _unlock_command(command or ())):
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=UNLOCK_TIMEOUT_S)
            ok = r.returncode == 0
            detail = (r.stderr or r.stdout)[-2000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, detail = False, str(e)
        log.debug("%s: %s in %.2f s", shlex.join(cmd), "ok" if ok else "failed", time.monotonic() - t0)
        if ok and not snakemake_lock_files(workdir):
            how = "with snakemake --unlock"
        else:
            log.debug("snakemake --unlock did not release the locks; deleting them: %s", detail)
    _remove(locks)
    log.warning("released a stale Snakemake lock in %s (%d lock file(s) %s; no live Snakemake process "
                "on %s works in %s: left by a killed run)",
                lockdir, len(locks), how, socket.gethostname(), workdir)
    # A Snakemake started without the guard during the release would have lost its locks:
    # do not start a second run next to it.
    again = [p for p in (find_snakemake_processes(workdir) or ()) if p.cwd_known]
    if again:
        raise _in_use_by_process(workdir, again[0], locks_left=False)
    return True


# --- the guard -----------------------------------------------------------------------

def _read_record(fd: int, tries: int = 10) -> dict | None:
    """The holder's JSON record; retried briefly, as the holder writes it just after locking."""
    for i in range(tries):
        try:
            raw = os.pread(fd, 1 << 16, 0)
            rec = json.loads(raw.decode())
            if isinstance(rec, dict):
                return rec
        except (OSError, ValueError):
            pass
        if i + 1 < tries:
            time.sleep(0.05)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_holders(lock_path: Path) -> list[SnakemakeProcess] | None:
    """The processes on this host whose open file holds the flock on ``lock_path`` (Linux: the
    kernel lists a lock held through a descriptor in ``/proc/<pid>/fdinfo/<fd>``), Snakemake
    processes first; the current process and its ancestors are left out. ``None`` when this
    cannot be read (no /proc, or the lock file is gone)."""
    if not _proc_available():
        return None
    try:
        ref = os.stat(lock_path)
    except OSError:
        return None
    skip = _self_and_ancestors()
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                if not _same_dir(os.stat(fd), ref):
                    continue
                info = (entry / "fdinfo" / fd.name).read_text()
            except OSError:
                continue
            if any(line.startswith("lock:") and " FLOCK " in line for line in info.splitlines()):
                try:
                    raw = (entry / "cmdline").read_bytes()
                    uid = entry.stat().st_uid
                except OSError:
                    break
                argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
                found.append(SnakemakeProcess(int(entry.name), argv, uid))
                break
    return sorted(found, key=lambda p: (not is_snakemake_command(p.argv), p.pid))


def _in_use_by_run(results: Path, lock_path: Path, rec: dict | None) -> RunInUse:
    """The refusal when another run holds ``lock_path``. It names the process that holds the
    lock now: the run's recorded ``calibench run`` while that lives, else what it started
    (its Snakemake, which received the lock's descriptor) when the recorded process has exited."""
    here_host = socket.gethostname()
    holder = None
    if rec is None or rec.get("host") == here_host:
        holders = _lock_holders(lock_path) or []
        if rec is None or not any(p.pid == rec.get("pid") for p in holders):
            holder = holders[0] if holders else None
    if rec is None:
        who = f"another process (its record in {lock_path} could not be read)"
        stop = "stop it"
        if holder is not None:
            who = f"pid {holder.pid} on {here_host}: {holder.command}"
            stop = f"stop it (kill {holder.pid})"
    else:
        pid, host = rec.get("pid"), rec.get("host")
        cmd = rec.get("command")
        cmd = shlex.join(cmd) if isinstance(cmd, list) else str(cmd)
        who = f"pid {pid} on {host}, started {rec.get('started')}: {cmd}"
        here = host == here_host
        stop = f"stop it (kill {pid}{'' if here else f' on {host}'})"
        if holder is not None:
            gone = "has exited" if isinstance(pid, int) and not _pid_alive(pid) else "no longer holds the lock"
            who += f" (that process {gone}; the lock is held by pid {holder.pid}, which it started: {holder.command})"
            stop = f"stop that process (kill {holder.pid}" + (
                "; Snakemake then exits once its running jobs end)" if is_snakemake_command(holder.argv) else ")")
        elif here and isinstance(pid, int) and not _pid_alive(pid):
            who += " (that process has exited; a process it started still holds the lock)"
    return RunInUse(
        f"{results} is in use by another calibench run: {who}. "
        f"Wait for it to finish, or {stop}, then run again.",
        results=results, holder=rec, process=holder)


@contextmanager
def run_guard(workdir: str | os.PathLike, results: str | os.PathLike, command: Sequence[str], *,
              unlock: str = "snakemake") -> Iterator[RunGuard]:
    """Hold ``<results>/.calibench-run.lock`` for the duration of a run, after
    releasing Snakemake locks in ``workdir`` left by a killed run.

    ``workdir`` is the directory Snakemake runs in (its cwd or ``--directory``);
    ``command`` is the Snakemake command line, recorded in the lock file and,
    with ``--unlock`` inserted, used to release stale locks (``unlock``: see
    :func:`release_stale_locks`).  Raises :class:`RunInUse` when another guarded
    run holds ``results`` (nothing is touched then) or a live Snakemake process
    works in ``workdir`` (its locks are left alone).  Yields a :class:`RunGuard`.
    """
    workdir = Path(workdir).absolute()
    results = Path(results).absolute()
    results.mkdir(parents=True, exist_ok=True)
    lock_path = results / LOCK_NAME
    command = [str(c) for c in command]
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "workdir": str(workdir),
    }
    guard = RunGuard(lock_path, record)
    fd: int | None = None
    if fcntl is not None:
        flags = os.O_CLOEXEC | os.O_CREAT
        try:
            fd = os.open(lock_path, os.O_RDWR | flags, 0o644)
        except PermissionError:
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)  # someone else's file: lock only
    try:
        locked = False
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                raise _in_use_by_run(results, lock_path, _read_record(fd)) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                log.warning("cannot flock %s (%s): concurrent runs are not excluded, and Snakemake "
                            "locks in %s are left alone", lock_path, e.strerror, workdir)
        if locked:
            data = (json.dumps(record) + "\n").encode()
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            except OSError as e:
                log.debug("could not write %s: %s", lock_path, e)
            guard.fd, guard.pass_fds = fd, (fd,)
            guard.released_stale = release_stale_locks(workdir, command, unlock=unlock)
        elif fcntl is None:
            log.debug("no flock on this platform: runs in %s are not guarded", results)
        yield guard
    finally:
        if fd is not None:
            os.close(fd)  # drops the flock


# --- a live run, seen from a Snakefile -------------------------------------------------

# Snakemake options that neither run jobs nor take the lock: a live run does not stop them.
_NO_RUN_FLAGS = {"-n", "--dry-run", "--dryrun", "--unlock", "--lint", "-l", "--list", "--list-rules",
                 "--list-target-rules", "--lt", "-S", "--summary", "-D", "--detailed-summary", "--dag",
                 "--rulegraph", "--filegraph", "--report", "--list-changes", "--lc", "--cleanup-metadata",
                 "--cm", "--version", "-h", "--help"}


def live_run(workdir: str | os.PathLike, results: str | os.PathLike,
             argv: Sequence[str] = ()) -> RunInUse | None:
    """The run already using ``workdir``/``results``, if any, for a Snakemake about to start
    (``argv``: its options; a dry run, ``--unlock`` and the like are never stopped): a
    ``calibench run`` holding ``results`` that is not this process's ancestor, or another live
    Snakemake process in ``workdir`` on this host. Snakemake itself would only say that the
    directory "cannot be locked" and suggest ``--unlock``, which breaks a live run."""
    if _NO_RUN_FLAGS & set(argv):
        return None
    workdir, results = Path(workdir).absolute(), Path(results).absolute()
    lock_path = results / LOCK_NAME
    if fcntl is not None and lock_path.is_file():
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = None
        if fd is not None:
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except BlockingIOError:
                    rec = _read_record(fd)
                    if not (rec and rec.get("host") == socket.gethostname()
                            and rec.get("pid") in _self_and_ancestors()):
                        exc = _in_use_by_run(results, lock_path, rec)
                        return RunInUse(f"{exc} Do not use --unlock: it would break the live run.",
                                        results=results, holder=rec, process=exc.process)
                except OSError:
                    pass
            finally:
                os.close(fd)
    found = find_snakemake_processes(workdir) or []
    for p in found:
        if p.cwd_known and not (_NO_RUN_FLAGS & set(p.argv)) and "--mode" not in p.argv:
            return RunInUse(
                f"{workdir} is in use by a running Snakemake process (pid {p.pid} on {socket.gethostname()}: "
                f"{p.command}). Wait for it to finish, or stop it (kill {p.pid}), then run again. "
                "Do not use --unlock: it would break the live run.", workdir=workdir, process=p)
    return None
