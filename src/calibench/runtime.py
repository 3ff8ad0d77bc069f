"""Process-level settings for long-running measurement jobs."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# OpenMP threads spin this many times before they sleep once a parallel region ends (libgomp's
# default, 300,000 pauses, is 15-20 ms on recent x86 cores): long enough to take a core from
# the metric suite's sorting threads (numpy, between torch's regions), for no gain in torch's
# own back-to-back regions (BENCHMARKS.md, "The fit store").
OMP_SPIN_COUNT = "10000"

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def keep_freed_memory(threshold_bytes: int = 1 << 30) -> bool:
    """Let glibc's malloc reuse freed large blocks instead of returning them to the OS.

    By default every array above 128 KiB is a fresh ``mmap`` whose pages fault in on
    first touch; the metric suite allocates dozens of such arrays per network, and
    on small VMs the faults cost 10-25 % of its time (BENCHMARKS.md). This is the
    ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` tuning, applied from inside
    the process. Entry points of batch jobs call it; a library import never does.
    Returns False where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok_mmap = mallopt(_M_MMAP_THRESHOLD, min(threshold_bytes, 2**31 - 1))
    ok_trim = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    return bool(ok_mmap and ok_trim)


def short_omp_spin() -> None:
    """Shorten OpenMP's spin before its threads sleep (:data:`OMP_SPIN_COUNT`) unless the
    environment sets it: effective only before torch is imported, so entry points of batch
    jobs call it first; a library import never does."""
    import os

    os.environ.setdefault("GOMP_SPINCOUNT", OMP_SPIN_COUNT)


def conda_jobs_environment(python_variable: str) -> str:
    """For ``snakemake --sdm conda``: jobs run the ``python`` of their conda environment (named
    in ``python_variable``) with this checkout's ``src/`` first on ``PYTHONPATH``; returns that
    folder. ValueError where calibench is installed rather than run from a checkout (its folder,
    site-packages, would bring the driving environment's other packages along)."""
    import os
    from pathlib import Path

    import calibench

    source = Path(calibench.__file__).resolve().parents[1]
    if source.name != "src" or not (source.parent / "pyproject.toml").is_file():
        raise ValueError(f"--sdm conda runs the jobs with a checkout's calibench (pip install -e .); this one is "
                         f"installed in {source}")
    os.environ[python_variable] = "python"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    return str(source)
