"""Atomic file writes (readers and resumed runs never see half a file), and the file states
that chunk manifests record (size and mtime; :mod:`calibench.run.repair` compares them)."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[io.BufferedWriter], object]) -> Path:
    """Call ``write`` on a temporary file in the target's directory, fsync it, then ``os.replace``.
    The file gets the mode a plain ``open`` would give it (0666 less the umask; the temporary
    file's own is 0600), so collaborators on a shared results directory can read it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # e.g. a full disk: say which file, leave nothing half-written
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, f"{exc.strerror} (writing {path})", str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def file_state(path: str | os.PathLike) -> list[int] | None:
    """[size, mtime_ns] of a file, None if there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError, TypeError):
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]
