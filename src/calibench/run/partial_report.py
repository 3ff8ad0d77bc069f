"""The report of the parts that exist, after a run in which analysis parts failed
(docs/analysis.md, "When a part fails").

The report rule needs every part, so Snakemake does not run it once one part has failed; the
other parts complete (``keep-going``). ``calibench run`` then writes the report itself from the
parts this run left complete, naming those it left out and why, so that one failing part loses
nothing else and no report older than the config is left standing. It does so only where the
tables and every other part are up to date (Snakemake's own plan, a dry run's ``--summary``):
a report is never assembled from tables or parts a later job would still change. The page is
left older than its inputs (:func:`_behind_its_inputs`), so that the next run, ``calibench run``
or a plain ``snakemake``, makes the left-out parts and then the whole report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from calibench import layout

# rules whose pending outputs do not stop a partial report: the report's own, the explorer's
# (left unlinked while it waits) and the workflow's target rule
_AFTER_PARTS = ("assemble_report", "explorer", "all")


def pending_rules(configfile: str, targets: Sequence[str]) -> set[str] | None:
    """The rules with an output Snakemake would still make for ``targets`` (a dry run's
    ``--summary``: its plan is not ``no update``); None where Snakemake cannot plan."""
    from calibench.run.status import summary_plan

    proc, rows = summary_plan(configfile, list(targets))
    return {cells[2] for cells in rows if cells[-1] != "no update"} if proc.returncode == 0 else None


def left_out_parts(parts: Mapping[str, Sequence[str]], pending: set[str], failed: Mapping[str, str]) -> dict[str, str]:
    """Part -> why the report leaves it out, for each of ``parts`` (name -> the parts whose
    outputs it reads) whose rule Snakemake still plans: ``failed: <cause>`` for those in
    ``failed`` (part -> what its log says), else why it did not run."""
    from calibench.analysis.registry import rule_name

    out = {}
    for part, reads in parts.items():
        if rule_name(part) not in pending:
            continue
        if part in failed:
            out[part] = f"failed: {failed[part]}"
            continue
        waits = [q for q in reads if rule_name(q) in pending]
        out[part] = (f"not run: it reads the outputs of {', '.join(waits)}, left out too" if waits
                     else "not run in this run (Snakemake stopped before it)")
    return out


def _behind_its_inputs(report: Path, inputs: Sequence[Path]) -> None:
    """``report``'s modification time set one second before its newest input's: Snakemake's
    ``mtime`` trigger then plans the report again, and with it the parts it lacks (a missing
    input of an up-to-date output is not planned otherwise), from any entry point."""
    newest = max(p.stat().st_mtime for p in inputs if p.exists())
    os.utime(report, (report.stat().st_atime, min(report.stat().st_mtime, newest - 1.0)))


def write_partial_report(config: Mapping, configfile: str, targets: Sequence[str],
                         snakemake_log: Path | None) -> list[str]:
    """After a failed run: the report (``results/report.html``, its findings and claims) of the
    parts that are complete, when only analysis parts (and what comes after them) are left
    to run; lines for the terminal, [] where it writes nothing."""
    from calibench.analysis.registry import config_parts, config_report_settings, rule_name
    from calibench.results import failures

    results = Path(config["results"])
    report = layout.report_path(results)
    if str(report) not in targets or snakemake_log is None or not Path(snakemake_log).is_file():
        return []
    pending = pending_rules(configfile, targets)
    if pending is None:
        return []
    parts = {part.name: [q for q, _ in part.reads] for _, part in config_parts(config)}
    before = sorted(pending - set(_AFTER_PARTS) - {rule_name(p) for p in parts})
    if before:
        return [f"calibench: {report} not written: jobs it needs did not complete ({', '.join(before)})"]
    failed = {}
    ends = failures.failed_job_ends(snakemake_log)
    part_of_rule = {rule_name(p): p for p in parts}
    for rule in failures.failed_rules(snakemake_log):
        if (part := part_of_rule.get(rule)) is not None:
            job_log = layout.log_path(results, f"analysis/{part}")
            failed[part] = f"{failures.job_cause(job_log, ends.get(job_log))} (log: {job_log})"
    left_out = left_out_parts(parts, pending, failed)
    if not left_out or "assemble_report" not in pending:
        return []
    settings = config_report_settings(config)
    settings["parts"] = [p for p in settings["parts"] if p not in left_out]
    settings["left_out"] = left_out
    if settings["explorer"] and "explorer" in pending:
        settings["explorer"] = False
        settings["explorer_left_out"] = True
    tables = [t for t in targets if t.endswith(".parquet")]
    log = layout.log_path(results, "report")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "calibench", "report", "--settings", json.dumps(settings),
                               "--results", str(results), "--tables", *tables], stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        return [f"calibench: the report without {', '.join(left_out)} failed too: {failures.cause(log)} (log: {log})"]
    _behind_its_inputs(report, [Path(t) for t in tables]
                       + [layout.part_manifest(results, p) for p in settings["parts"]])
    named = ", ".join(f"{p} ({'failed' if p in failed else 'not run'})" for p in left_out)
    return [f"calibench: report written without {named}, every other part up to date: {report.resolve()}; "
            "the next `calibench run` makes them and the whole report"]
