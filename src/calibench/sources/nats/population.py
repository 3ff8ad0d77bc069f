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
from calibench.vocabulary import NATS_SPACE_SIZES

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
    ValueError naming the key (:func:`selection_problems`) for a spec that selects no
    network or one ``arch_strs`` does not hold.
    """
    check_space(space)
    selection = dict(selection or {})
    n_archs = len(arch_strs)
    reps = representatives(space, arch_strs) if reps is None else reps
    base = sorted(set(reps)) if space == "tss" else list(range(n_archs))
    problems = selection_problems(space, selection, n_archs, n_base=len(base))
    if problems:
        raise ValueError("; ".join(f"population.{space}{'.' + key if key else ''}: {text}" for key, text in problems))
    mode = selection.pop("mode", default_mode(space))
    unique_only = bool(selection.pop("unique_only", space == "tss"))
    if mode == "all":
        chosen = list(range(n_archs))
        unique_only = False
    elif mode == "unique":
        chosen = sorted(set(reps))
    elif mode == "list":
        chosen = list(selection["indices"])
    elif mode == "range":
        chosen = list(range(int(selection.get("start", 0)), int(selection.get("stop", n_archs))))
    else:
        chosen = random.Random(int(selection.get("seed", 0))).sample(base, int(selection["n"]))
    if unique_only:
        chosen = [reps[i] for i in chosen]
    return sorted(set(chosen))


def default_mode(space: str) -> str:
    """The selection of a space whose config gives no ``mode``: TSS's representatives, all of SSS."""
    return "unique" if space == "tss" else "all"


# the keys each mode takes besides ``mode`` and ``unique_only``
MODE_KEYS = {"all": (), "unique": (), "list": ("indices",), "range": ("start", "stop"), "sample": ("n", "seed")}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def selection_problems(space: str, selection: Mapping | None, n_archs: int, n_base: int | None = None,
                       size_note: str = "") -> list[tuple[str, str]]:
    """What is wrong with a selection spec over a space of ``n_archs`` architectures, as
    (key under ``population.<space>``, "" for the entry itself; what is wrong): a mode that
    does not exist, a key the mode does not take, ``list`` without indices or with an index
    outside ``[0, n_archs)``, a ``range`` that is empty or reaches past ``n_archs``, ``sample``
    without ``n`` or with more than ``n_base`` (the set it draws from; None: not checked).
    [] for a spec that selects at least one network. ``size_note``: where ``n_archs`` comes
    from, said with the problems that depend on it. The config check before any job
    (:func:`check_selections`) and the population job (:func:`select`) both ask it."""
    selection = dict(selection or {})
    sized = f" ({size_note})" if size_note else ""
    mode = selection.get("mode", default_mode(space))
    if mode not in SELECTION_MODES:
        return [("mode", f"expected one of {SELECTION_MODES}, got {mode!r}")]
    out = []
    unknown = sorted(set(selection) - {"mode", "unique_only", *MODE_KEYS[mode]})
    if unknown:
        takes = ", ".join(MODE_KEYS[mode]) or "no other key"
        out.append(("", f"unknown keys {unknown} for mode {mode!r} (it takes {takes}, and unique_only)"))
    if mode == "list":
        indices = selection.get("indices")
        if indices is None:
            out.append(("indices", "required with mode: list"))
        elif not indices:
            out.append(("indices", "an empty list selects no network"))
        else:
            bad = [i for i in indices if not _is_int(i) or not 0 <= i < n_archs]
            if bad:
                out.append(("indices", f"index {bad[0]!r} is outside [0, {n_archs})"
                            + (f", and {len(bad) - 1} more" if len(bad) > 1 else "") + sized))
    elif mode == "range":
        start, stop = selection.get("start", 0), selection.get("stop", n_archs)
        if not _is_int(start) or not _is_int(stop):
            out.append(("", f"range start and stop are integers, got {start!r}, {stop!r}"))
        elif start >= stop:
            out.append(("", f"range start {start} is not below stop {stop}: it selects no network"
                        + ("" if "stop" in selection else " (stop left out: the number of architectures"
                           + (f", {size_note})" if size_note else ")"))))
        elif start < 0 or stop > n_archs:
            out.append(("stop" if stop > n_archs else "start",
                        f"range [{start}, {stop}) is outside [0, {n_archs}]{sized}"))
    elif mode == "sample":
        n = selection.get("n")
        if n is None:
            out.append(("n", "required with mode: sample"))
        elif not _is_int(n) or not 1 <= n <= (n_base if n_base is not None else n_archs):
            out.append(("n", f"must lie in [1, {n_base if n_base is not None else n_archs}] "
                             f"for {space}{sized}"))
    return out


# NATS-Bench's sizes: the most architectures an archive of a space holds
SPACE_SIZES = NATS_SPACE_SIZES


def space_size(config: Mapping, space: str) -> tuple[int, str, list[str] | None]:
    """How many architectures the run's archive of ``space`` holds, cheaply, before any job:
    (count, where it comes from, the arch strings of the archive's meta where it was read, else
    None). The mini
    benchmark this run builds: its ``minibench.n_<space>`` (else the built one's meta); an
    archive on disk: its meta's length; else NATS-Bench's size (an upper bound)."""
    from calibench.config.settings import under_minibench

    archive = Path(config["archives"][space])
    mini = config.get("minibench") or {}
    key = f"n_{space}"
    if mini.get("build") and under_minibench(config, archive) and key in mini:
        return int(mini[key]), f"the mini benchmark this run builds, minibench.{key} = {mini[key]}", None
    if (archive / META_FILE).is_file():
        arch_strs = read_meta(archive)
        return len(arch_strs), f"the archive {archive}", arch_strs
    return SPACE_SIZES[space], f"NATS-Bench's {space.upper()} (no archive at {archive} yet)", None


def check_selections(config: Mapping) -> list[tuple[list, object, str]]:
    """Each problem of the ``population`` entries of the NATS-Bench spaces the config runs, as
    (key path, value, what is wrong): :func:`selection_problems` over the archive's size
    (:func:`space_size`), before any job (a population job that fails has lost its previous
    file already: Snakemake removes a job's outputs before it runs)."""
    out = []
    selections = config.get("population") or {}
    for space in [s for s in config.get("spaces") or [] if s in SPACES]:
        selection = selections.get(space)
        if not isinstance(selection, Mapping):
            continue
        try:
            n_archs, where, arch_strs = space_size(config, space)
            n_base = None
            if space == "tss" and selection.get("mode") == "sample" and arch_strs is not None:
                n_base = len(set(tss_representatives(arch_strs)))  # about 0.15 s for 15,625
        except ValueError:  # a damaged meta: the population job names it
            n_archs, where, n_base = SPACE_SIZES[space], f"NATS-Bench's {space.upper()}", None
        for key, text in selection_problems(space, selection, n_archs, n_base=n_base,
                                            size_note=f"{n_archs} architectures: {where}"):
            path = ["population", space, *([key] if key else [])]
            out.append((path, selection.get(key) if key else dict(selection), text))
    return out


def chunks(indices: Sequence[int], size: int) -> list[list[int]]:
    """Consecutive chunks of at most ``size`` indices (the inference and measurement jobs' unit of work)."""
    if size < 1:
        raise ValueError(f"chunk size must be positive, got {size}")
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]
