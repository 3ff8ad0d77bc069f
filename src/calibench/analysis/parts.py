"""The analysis as parts: each part is one Snakemake job (``calibench analysis-part --part
NAME``) with its own outputs, so that one failing part loses nothing of the others.

A part reads the result tables (only the columns it uses), writes its files under
``{results}/analysis/``, its figures under ``{results}/plots/{part}/`` and, last, its
manifest ``{results}/analysis/parts/{part}.json``: the figures (title, path relative to
the results directory) and the HTML blocks it contributes to the report (section, order,
HTML). The report (:mod:`calibench.report.assemble`) reads the manifests of the parts a
run has, in the registry's order.

The parts themselves (module, outputs, title, settings, when a run has them) are listed in
:mod:`calibench.analysis.registry`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from calibench import integrity
from calibench.analysis import registry
from calibench.layout import analysis_dir, part_manifest, part_plots_dir

log = logging.getLogger(__name__)


def run_part(part: str, settings: Mapping, tables: Sequence[str | Path], results: str | Path,
             threads: int = 1) -> Path:
    """Run one part; returns its manifest. ``settings``: the part's
    :func:`calibench.analysis.registry.part_settings`; ``threads``: what a part that computes
    in threads (kendall) may use (the numbers do not depend on it)."""
    results = Path(results)
    integrity.verify(tables)  # every byte of the tables checked before any is used
    found = registry.find(part, settings)
    runner = registry.import_module(found, settings).run
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
    written = [p for p in registry.output_paths(results, found).values() if p.is_file()] + sorted(plots.glob("*.png"))
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
