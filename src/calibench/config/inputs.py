"""Every path and column the config names, checked before any job, each named by its key.

On a fresh run a missing input stops the run in one line (:class:`MissingInput`); once a
space's or population's document is written, the logits store is what later runs read, so
inputs only new networks would need are said in one line and the run goes on (their jobs,
if any, fail naming the file). An input that no stored result can stand in for (the
robustness table of an analysis part, a ``group_by`` column) always stops the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from calibench import layout, vocabulary
from calibench.config import settings as stage


class MissingInput(ValueError):
    """A config key whose path or column is not there (the message names the key)."""


@dataclass
class InputCheck:
    """``stop``: what a run cannot start without; ``notes``: inputs missing that the stored
    results stand in for (one line on the terminal)."""

    stop: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def raise_if_stopped(self) -> None:
        if self.stop:
            raise MissingInput("; ".join(self.stop))


def _written(results: Path, spaces) -> bool:
    return all(layout.population_path(results, s).is_file() for s in spaces)


def check_inputs(config: Mapping, results: str | Path) -> InputCheck:
    """The archives, datasets, SVHN file, robustness table and ``group_by`` columns of
    ``config``, by key (a logits population's directory: :func:`calibench.config.settings.populations`)."""
    results = Path(results)
    out = InputCheck()
    targets = stage.targets(config)
    nats = sorted({space for space, _ in targets.values() if space in vocabulary.NATS_SPACES})
    ood = config.get("ood") or {}
    needed = [(f"archives.{s}", config["archives"][s], "meta.pickle.pbz2", [s]) for s in nats]
    if nats:
        needed.append(("datasets_root", config["datasets_root"], "", nats))
        if "svhn" in (ood.get("sets") or []) and ood.get("svhn") and "cifar10" in config["datasets"]:
            needed.append(("ood.svhn", ood["svhn"], "", nats))
    for key, value, inside, spaces in needed:
        path = Path(value, inside)
        if path.exists() or stage.under_minibench(config, path, built=True):
            continue
        if not _written(results, spaces):
            out.stop.append(f"{key} = {value}: " + (f"no {inside} there" if inside else "not found"))
        else:
            out.notes.append(f"{key} = {value}")
    robustness = config.get("robustness") or {}
    if robustness.get("path"):
        path = Path(robustness["path"])
        if not path.is_file():
            out.stop.append(f"robustness.path = {robustness['path']}: not found (a CSV or parquet file; null: no "
                            "robustness analysis)")
        elif robustness.get("key") == "arch_str" and "arch_str" not in _columns(path):
            out.stop.append(f"robustness.key = arch_str: {path} has no column arch_str (its columns: "
                            f"{', '.join(_columns(path)[:8])})")
    for name, spec in stage.populations(config).items():
        wanted = list(spec.get("group_by") or [])
        if not wanted or spec["source"] != "logits":
            continue
        models = Path(spec["path"], "models.csv")
        if not models.is_file():
            continue  # a store tree, or a directory said missing above: the job names it
        have = _columns(models)
        unknown = [c for c in wanted if c not in have]
        if unknown:
            out.stop.append(f"populations.{name}.group_by: {', '.join(unknown)}: not a column of {models} "
                            f"(its columns: {', '.join(have)})")
    return out


def _columns(path: Path) -> list[str]:
    """The column names of a CSV (its header line) or parquet file (its schema)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    import csv

    with open(path, newline="") as f:
        return next(csv.reader(f), [])
