"""A user's own code that a config names (``module:ATTRIBUTE``: a torch population's models and
data, an extra analysis part): found on the config's ``python_path`` folders, and fingerprinted
by its module file's SHA-256 and those of the user's modules it imports, so an edit of any of
them reruns what it made."""

from __future__ import annotations

import ast
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
    """Fingerprint of ``module``'s code (found on ``python_path`` first, not imported): the
    SHA-256 of its file where it imports no module of the user's own; else the SHA-256 of
    every such file's name and SHA-256, the module's included, so that an edit of a helper
    module it imports (directly or through another) reruns what it made too. The user's own
    modules are those an ``import`` statement of these files names (read, not run) that lie
    in a ``python_path`` folder or in the folder the module was found in; installed packages
    (under the interpreter's prefix or a site-packages folder) are not. None if it has no file."""
    with on_path(python_path):
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
    origin = getattr(found, "origin", None)
    if not origin or not Path(origin).is_file():
        return None
    origin = Path(origin).resolve()
    package = origin.name == "__init__.py"
    parts = module.split(".")
    depth = len(parts) - 1 + package
    roots = [Path(p).resolve() for p in python_path or []]
    if depth < len(origin.parents):
        roots.append(origin.parents[depth])
    files = {module: origin}
    todo = [(module, origin)]
    while todo:
        name, path = todo.pop()
        for imported in _imported_names(path, name, path.name == "__init__.py"):
            if imported not in files:
                local = _local_file(imported, roots)
                if local is not None and local not in files.values():
                    files[imported] = local
                    todo.append((imported, local))
    if len(files) == 1:
        return hashlib.sha256(origin.read_bytes()).hexdigest()
    lines = "\n".join(f"{name} {hashlib.sha256(path.read_bytes()).hexdigest()}" for name, path in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i + 1]) for i in range(len(parts))]


def _imported_names(path: Path, name: str, is_package: bool) -> set[str]:
    """The dotted names an ``import`` or ``from ... import`` of the file may load (relative ones
    resolved against ``name``'s package), their parent packages included; none if it does not parse."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return set()
    package = (name if is_package else name.rpartition(".")[0]).split(".")
    package = [p for p in package if p]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:max(len(package) - (node.level - 1), 0)]
                base = base + node.module.split(".") if node.module else base
            else:
                base = node.module.split(".")
            if not base:
                continue
            out.update(_with_parents(".".join(base)))
            out.update(f"{'.'.join(base)}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def _installed(path: Path) -> bool:
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return "site-packages" in path.parts or "dist-packages" in path.parts or any(
        path.is_relative_to(p) for p in prefixes)


def _local_file(name: str, roots: Sequence[Path]) -> Path | None:
    """The file of the user's module ``name`` in the first root that holds it, or None."""
    parts = name.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.parent / f"{parts[-1]}.py", base / "__init__.py"):
            if candidate.is_file():
                candidate = candidate.resolve()
                return None if _installed(candidate) else candidate
    return None
