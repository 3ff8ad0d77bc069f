"""The analysis as parts: each part is one Snakemake job (``calibench analysis-part --part
NAME``) with its own outputs, so that one failing part loses nothing of the others.

A part reads the result tables (only the columns it uses), writes its files under
``{results}/analysis/``, its figures under ``{results}/plots/{part}/`` and, last, its
manifest ``{results}/analysis/parts/{part}.json``: the figures (title, path relative to
the results directory) and the HTML blocks it contributes to the report (section, order,
HTML). The report (:mod:`calibench.report.assemble`) reads the manifests of the parts a
run has, in :data:`PARTS` order.

Parts (module; outputs besides the manifest and figures):

* ``kendall`` (:mod:`.kendall`): ``kendall.parquet``, ``question4.csv``;
* ``overview`` (:mod:`.overview`): figures only (ECE by bin count, ECE against accuracy);
* ``hcs`` (:mod:`.hcs`): ``hcs.parquet``, ``top_hcs.csv``;
* ``methods`` (:mod:`.methods`): ``methods_summary.parquet``/``.csv``, ``method_wins.parquet``;
* ``reliability`` (:mod:`.reliability`): figures from the shards, after ``hcs``;
* ``groups`` (:mod:`.groups`): ``groups.csv``, ``kendall_groups.parquet`` (empty without groups);
* NATS-Bench only (:mod:`.nats`): ``nas`` (``nas.csv``), ``architecture`` (``tss_edge_ops``,
  ``sss_size_brackets``, ``tss_kernel_parameters``, ``sss_width_progression``),
  ``schedules`` (``hp_comparison.parquet``/``.csv``; with two schedules of a space),
  ``robustness`` (``robustness_kendall.parquet``; with ``robustness.path``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from calibench import integrity
from calibench.layout import analysis_dir, part_manifest, part_plots_dir  # noqa: F401 (part_manifest: used by the report)
from calibench.vocabulary import NATS_SPACES

log = logging.getLogger(__name__)

MODULES = {"kendall": "kendall", "overview": "overview", "hcs": "hcs", "methods": "methods",
           "reliability": "reliability", "groups": "groups", "nas": "nats.nas", "architecture": "nats.architecture",
           "schedules": "nats.schedules", "robustness": "nats.robustness"}
PARTS = tuple(MODULES)  # the report's order
NATS_PARTS = ("nas", "architecture", "schedules", "robustness")


def module(part: str):
    if part not in MODULES:
        raise ValueError(f"unknown analysis part {part!r}; parts: {', '.join(PARTS)}")
    return importlib.import_module(f"calibench.analysis.{MODULES[part]}")


def outputs(results: str | Path, part: str) -> list[Path]:
    """The files a part writes under ``analysis/`` (its manifest and figures aside)."""
    return [analysis_dir(results) / name for name in module(part).OUTPUTS]


def run_part(part: str, settings: Mapping, tables: Sequence[str | Path], results: str | Path,
             threads: int = 1) -> Path:
    """Run one part; returns its manifest. ``settings``:
    :func:`calibench.config.settings.analysis_part_settings` of the part; ``threads``: what a
    part that computes in threads (kendall) may use (the numbers do not depend on it)."""
    results = Path(results)
    integrity.verify(tables)  # every byte of the tables checked before any is used
    runner = module(part).run
    runtime = {"threads": threads} if "threads" in inspect.signature(runner).parameters else {}
    analysis_dir(results).mkdir(parents=True, exist_ok=True)
    plots = part_plots_dir(results, part)
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):  # figures of an earlier configuration must not outlive it
        old.unlink()
    made = runner(settings, list(tables), results, plots, **runtime)
    doc = {"part": part,
           "plots": [{"title": title, "path": Path(path).relative_to(results).as_posix()}
                     for title, path in made["plots"]],
           "blocks": [{"section": section, "order": order, "html": text}
                      for section, order, text in made["blocks"] if text]}
    # the content check of every file the part wrote (issue 33): the report and the repair
    # check verify them against it before use
    written = [p for p in outputs(results, part) if p.is_file()] + sorted(plots.glob("*.png"))
    doc["files"] = {p.relative_to(results).as_posix(): integrity.sha256_file(p) for p in written}
    path = part_manifest(results, part)
    integrity.write_json(doc, path)
    log.info("analysis part %s: %d figures, %d report blocks", part, len(doc["plots"]), len(doc["blocks"]))
    return path


def read_manifest(results: str | Path, part: str) -> dict:
    """A part's manifest, once it and every file it lists pass their content checks
    (:class:`calibench.integrity.DamagedFile` naming the first that does not)."""
    doc = integrity.read_json(part_manifest(results, part))
    problem = part_problem(results, doc)
    if problem:
        raise integrity.DamagedFile(*problem)
    return doc


def part_problem(results: str | Path, doc: dict) -> tuple[Path, str] | None:
    """(file, cause) of the first file a part's manifest lists that fails its check, or None."""
    for name, sha in (doc.get("files") or {}).items():
        cause = integrity.check_listed(Path(results) / name, sha)
        if cause:
            return Path(results) / name, cause
    return None


def parts_of(settings: Mapping, table_keys: Sequence[tuple[str, str, str]]) -> list[str]:
    """The parts a run has, from its analysis settings
    (:func:`calibench.config.settings.analysis_settings`) and the (space, hp, dataset) of its
    tables; what :func:`calibench.config.settings.analysis_parts` says from the config."""
    nats = {space: {hp for s, hp, _ in table_keys if s == space} for space, _, _ in table_keys
            if space in NATS_SPACES}
    out = ["kendall", "overview", "hcs", "methods", "reliability", "groups"]
    if nats:
        out += ["nas", "architecture"]
    if any(len(hps) > 1 for hps in nats.values()):
        out.append("schedules")
    if (settings.get("robustness") or {}).get("path"):
        out.append("robustness")
    return out
