"""Stable indices for a population of one's own (docs/populations.md, "Editing a population").

A model's ``arch_index`` keys its logits, fits and shards in the store. Were it its row in
``models.csv`` (or its place among the callables' models), a model added at the top would
shift every other and have them all measured again. So the population job records each
name's index (:func:`calibench.layout.population_indices_path`) and keeps it: a model seen
before keeps its index, a new one takes the next free index, a removed one leaves its index
unused (not selected). A first build numbers the models in their order."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from calibench import integrity

log = logging.getLogger(__name__)


def _known(path: Path) -> dict[str, int]:
    try:
        doc = integrity.read_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, integrity.DamagedFile) as exc:
        log.warning("%s: %s; the models are numbered afresh, in their order", path, exc)
        return {}
    indices = doc.get("indices") if isinstance(doc, dict) else None
    if not isinstance(indices, dict) or not all(isinstance(v, int) and v >= 0 for v in indices.values()) \
            or len(set(indices.values())) != len(indices):
        log.warning("%s: not a list of model indices; the models are numbered afresh, in their order", path)
        return {}
    return {str(k): int(v) for k, v in indices.items()}


def assign(names: Sequence[str], path: str | Path) -> tuple[list[str], list[int], dict[str, int]]:
    """(arch_strs, selected, index of each name) for ``names`` (unique), with the indices
    recorded in ``path`` kept and the record updated: ``arch_strs[i]`` is the name of index i
    (a removed model's name where it is no longer listed), ``selected`` the indices of
    ``names``, ascending."""
    path = Path(path)
    known = _known(path)
    free = max(known.values(), default=-1) + 1
    index: dict[str, int] = {}
    for name in names:
        if name in known:
            index[name] = known[name]
        else:
            index[name] = free
            free += 1
    every = {**known, **index}
    arch_strs = [""] * (max(every.values(), default=-1) + 1)
    for name, i in every.items():
        arch_strs[i] = name
    moved = sum(1 for position, name in enumerate(names) if index[name] != position)
    if known and moved:
        log.info("%s: %d of %d models keep the index of an earlier build (not their place in the list); "
                 "%d new, %d no longer listed", path, moved, len(names), len(set(names) - set(known)),
                 len(set(known) - set(names)))
    integrity.write_json({"indices": every}, path)
    return arch_strs, sorted(index.values()), index
