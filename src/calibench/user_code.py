"""A user's own code that a config names (``module:ATTRIBUTE``: a torch population's models and
data, an extra analysis part): found on the config's ``python_path`` folders, and fingerprinted
by its module file's SHA-256 so an edit of it reruns what it made."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def on_path(python_path: Sequence[str] | None) -> Iterator[None]:
    """``python_path``'s folders first on ``sys.path`` while the block runs."""
    added = [str(Path(p).resolve()) for p in python_path or [] if str(Path(p).resolve()) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)


def module_sha256(module: str, python_path: Sequence[str] | None = ()) -> str | None:
    """SHA-256 of the file of ``module`` (found on ``python_path`` first, not imported); None if
    it has none."""
    with on_path(python_path):
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
    origin = getattr(found, "origin", None)
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin and Path(origin).is_file() else None
