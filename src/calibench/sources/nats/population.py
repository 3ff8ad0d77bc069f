"""Which architectures to evaluate (docs/nats-bench.md, "Archives", "TSS unique architectures").

The population always comes from the archive's ``meta.pickle.pbz2`` (index order),
never from a hard-coded list. TSS architectures fall into 6,466 isomorphism classes
under NATS-Bench's ``to_unique_str(consider_zero=True)``; each class is represented by
its smallest index, and results for a representative stand for its whole class.
"""

from __future__ import annotations

import bz2
import pickle
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from calibench.sources.nats.archstr import parse_sss, parse_tss

SPACES = ("tss", "sss")
META_FILE = "meta.pickle.pbz2"
SELECTION_MODES = ("all", "unique", "list", "range", "sample")


class _MetaUnpickler(pickle.Unpickler):
    """NATS-Bench's meta file holds only dicts, lists, sets, strings, numbers and None: no
    class or function may be loaded from it (a foreign pickle could otherwise run code)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}: a NATS-Bench meta file loads none")


def read_meta(archive_dir: str | Path) -> list[str]:
    """Architecture strings in index order from ``{archive_dir}/meta.pickle.pbz2``."""
    path = Path(archive_dir) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"NATS-Bench archive meta not found: {path}")
    try:
        with bz2.open(path, "rb") as f:
            meta = _MetaUnpickler(f).load()
    except Exception as exc:
        raise ValueError(f"{path}: cannot read the archive meta ({type(exc).__name__}: {exc})") from exc
    if not isinstance(meta, Mapping) or "meta_archs" not in meta:
        raise ValueError(f"{path}: not a NATS-Bench meta file (no 'meta_archs' key)")
    archs = list(meta["meta_archs"])
    total = meta.get("total_archs", len(archs))
    if total != len(archs):
        raise ValueError(f"{path}: total_archs = {total} but meta_archs lists {len(archs)} architectures")
    return archs


def check_space(space: str) -> str:
    if space not in SPACES:
        raise ValueError(f"space: expected one of {SPACES}, got {space!r}")
    return space


def tss_canonical_form(arch_str: str) -> str:
    """The class key of a TSS cell, with ``to_unique_str(consider_zero=True)``'s rules.

    Node 0 is "0". An edge contributes "#" (zero) if its op is ``none`` or its source
    node's key is exactly "#"; its source's key if the op is ``skip_connect``; else
    "(source)@op". A node's key is its edge contributions sorted and joined by "+"
    (so a node of several zero edges is "#+#", not "#": the reference's rule, kept
    because the published class count depends on it). The cell's key is node 3's.
    """
    keys = ["0"]
    for node in parse_tss(arch_str):
        parts = []
        for op, source in node:
            src = keys[source]
            if op == "none" or src == "#":
                parts.append("#")
            elif op == "skip_connect":
                parts.append(src)
            else:
                parts.append(f"({src})@{op}")
        keys.append("+".join(sorted(parts)))
    return keys[-1]


def tss_representatives(arch_strs: Sequence[str]) -> list[int]:
    """For each index, the smallest index of its isomorphism class."""
    first: dict[str, int] = {}
    out = []
    for index, arch in enumerate(arch_strs):
        out.append(first.setdefault(tss_canonical_form(arch), index))
    return out


def representatives(space: str, arch_strs: Sequence[str]) -> list[int]:
    """Class representative of every index: TSS isomorphism classes; SSS maps each to itself."""
    if check_space(space) == "tss":
        return tss_representatives(arch_strs)
    for index, arch in enumerate(arch_strs):
        try:
            parse_sss(arch)
        except ValueError as exc:
            raise ValueError(f"SSS meta index {index}: {exc}") from None
    return list(range(len(arch_strs)))


def select(space: str, arch_strs: Sequence[str], selection: Mapping | None = None,
           reps: Sequence[int] | None = None) -> list[int]:
    """Indices to evaluate, sorted, from a selection spec (the config's ``population`` entry).

    ``{"mode": "unique"}`` (TSS default: class representatives), ``{"mode": "all"}``
    (SSS default), ``{"mode": "list", "indices": [...]}``, ``{"mode": "range", "start": a,
    "stop": b}`` (half-open), ``{"mode": "sample", "n": n, "seed": s}`` (a seeded sample
    of the default set: unique for TSS, all for SSS). For TSS, ``list`` and ``range``
    map each index to its class representative and deduplicate, since one measurement
    stands for the class; ``"unique_only": false`` evaluates the given indices as they are.
    ``reps``: :func:`representatives` of ``arch_strs`` when the caller has them already.
    """
    check_space(space)
    selection = dict(selection or {})
    mode = selection.pop("mode", "unique" if space == "tss" else "all")
    if mode not in SELECTION_MODES:
        raise ValueError(f"population.mode: expected one of {SELECTION_MODES}, got {mode!r}")
    n_archs = len(arch_strs)
    reps = representatives(space, arch_strs) if reps is None else reps
    unique_only = bool(selection.pop("unique_only", space == "tss"))
    base = sorted(set(reps)) if space == "tss" else list(range(n_archs))

    if mode == "all":
        chosen = list(range(n_archs))
        unique_only = False
    elif mode == "unique":
        chosen = sorted(set(reps))
    elif mode == "list":
        chosen = [_check_index(i, n_archs) for i in selection.pop("indices", [])]
    elif mode == "range":
        start, stop = int(selection.pop("start", 0)), int(selection.pop("stop", n_archs))
        if not 0 <= start <= stop <= n_archs:
            raise ValueError(f"population range [{start}, {stop}) is outside [0, {n_archs}]")
        chosen = list(range(start, stop))
    else:
        n = int(selection.pop("n"))
        if not 0 < n <= len(base):
            raise ValueError(f"population.n = {n}: must lie in [1, {len(base)}] for {space}")
        chosen = random.Random(int(selection.pop("seed", 0))).sample(base, n)
    if selection:
        raise ValueError(f"population: unknown keys {sorted(selection)} for mode {mode!r}")
    if unique_only:
        chosen = [reps[i] for i in chosen]
    return sorted(set(chosen))


def _check_index(index, n_archs: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_archs:
        raise ValueError(f"population index {index!r} is outside [0, {n_archs})")
    return index


def chunks(indices: Sequence[int], size: int) -> list[list[int]]:
    """Consecutive chunks of at most ``size`` indices (the inference and measurement jobs' unit of work)."""
    if size < 1:
        raise ValueError(f"chunk size must be positive, got {size}")
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]
