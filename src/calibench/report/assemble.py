"""The report job: ``report.html``, ``analysis/findings.csv`` and ``analysis/claims.csv``
assembled from the analysis parts a run has (:mod:`calibench.analysis.parts`).

It reads each part's manifest (its figures and HTML blocks) and outputs, and the tables
for the findings on networks (questions 5 and 6, the claims); it computes nothing a part
computes. The workflow runs it once every part of the run has succeeded; where parts failed,
``calibench run`` runs it for the parts that are complete (:mod:`calibench.run.partial_report`),
and the page names the parts it leaves out (``settings["left_out"]``).

:func:`run_analysis` runs every part of a set of tables and then the report in one
process (tests, scripts); the workflow runs each part as its own job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from calibench import integrity
from calibench.analysis import parts as analysis_parts
from calibench.analysis import registry
from calibench.analysis.kendall import q4_block, question4_findings
from calibench.analysis.nats import architecture, method_gains, schedules
from calibench.analysis.tables import KEYS, first_seed, load_tables, measured, nearest_bins, table_stages
from calibench.layout import claims_path, findings_path, odir_path, report_path, report_sums
from calibench.vocabulary import SEARCH_FLAG, STAGES
from calibench.report.claims import claims, claims_html
from calibench.report.findings import findings
from calibench.report.page import SECTIONS, write_report
from calibench.results.failures import html as failures_html
from calibench.results.failures import underdetermined_counts
from calibench.results.interop import EXACT_CSV
from calibench.results.provenance import measured_and_copies

log = logging.getLogger(__name__)

CLAIMED = ("q1", "q3", "q4", "q5", "q6", "q7")  # sections that open with the paper's claims


def _read(results: Path, parts: Sequence[str], part: str, key: str) -> pd.DataFrame | None:
    """A part's output ``key`` (calibench.analysis.registry), or None if the run has no such part."""
    if part not in parts:
        return None
    path = registry.output_path(results, part, key)
    if path.suffix == ".csv":  # exact floats back; hp as text (a schedule, "" for a population)
        return pd.read_csv(path, dtype={"hp": str}, keep_default_na=True, **EXACT_CSV)
    return pd.read_parquet(path)


def _networks(tables: Sequence[str | Path], bins: Sequence[int]) -> pd.DataFrame:
    """The measured networks (first seed) with the columns the findings on networks use."""
    lo, hi, b = min(bins), max(bins), nearest_bins(bins)
    wanted = {*KEYS, "accuracy", f"pre_ece_{b}", *(f"{s}_ece_{x}" for s in ("pre", "post") for x in (lo, hi))}
    df = load_tables(tables, wanted)
    return first_seed(measured(df))


def underdetermined_stages(tables: Sequence[str | Path]) -> list[str]:
    """The stages flagged ``{stage}_fit_underdetermined`` for some network of some table, in
    stage order (docs/recalibration.md, "Common rules")."""
    flagged = {stage for t in tables for stage, k in underdetermined_counts(t)[1].items() if k}
    return [s for s in STAGES if s in flagged] + sorted(flagged - set(STAGES))


def underdetermined_where(tables: Sequence[str | Path]) -> dict[str, list[str]]:
    """Stage -> the tables (file stems) where some network's fit of it was flagged
    underdetermined, in stage order (the demo banner's detail)."""
    where: dict[str, list[str]] = {}
    for t in tables:
        for stage, k in underdetermined_counts(t)[1].items():
            if k:
                where.setdefault(stage, []).append(Path(t).stem)
    return {s: where[s] for s in [*[s for s in STAGES if s in where], *sorted(set(where) - set(STAGES))]}


def odir_flags(results: Path, tables: Sequence[str | Path]) -> str:
    """HTML: each lambda, mu search of the run's tables whose chosen pair (the grid's best by
    cross-validated NLL) is still worse than no recalibration, so that the stage is fitted
    with it and flagged (recalibration/odir_{table}.json, ``chosen.{stage}``); "" when none."""
    import html

    lines = []
    for table in tables:
        target, _, dataset = Path(table).stem.rpartition("_")
        path = odir_path(results, target, dataset)
        if not path.is_file():
            continue
        for stage, chosen in integrity.read_json(path)["chosen"].items():
            if chosen.get(f"{stage}_{SEARCH_FLAG}"):
                lines.append(f"<li>{html.escape(Path(table).stem)}, {html.escape(stage)}: "
                             f"{html.escape(str(chosen.get('reason')))}</li>")
    if not lines:
        return ""
    return (f"<p class='warn'>{len(lines)} λ, μ search(es) chose a pair whose cross-validated NLL is worse than "
            "no recalibration: the stage is fitted with the grid's best pair all the same and its rows carry "
            f"<code>{{stage}}_{SEARCH_FLAG}</code> = 1 (the grid does not reach what these populations need; "
            "typically too few validation samples for K² parameters):</p><ul>" + "".join(lines) + "</ul>")


def unstable_html(tables: Sequence[str | Path]) -> str:
    """HTML: per table, the measured networks whose value of a column signals an unstable
    estimator (the table's provenance ``unstable``; :mod:`calibench.metrics.registry`: e.g.
    KDE-ECE above 1), kept as computed; "" when there are none."""
    import html

    from calibench.metrics import registry as metric_registry
    from calibench.results.tables import table_metadata

    lines = []
    for table in tables:
        for name, count in (table_metadata(table).get("unstable") or {}).items():
            meaning = metric_registry.column(name).meaning
            lines.append(f"<li>{html.escape(Path(table).stem)}: <code>{html.escape(name)}</code> above "
                         f"{meaning.unstable_above:g} for {int(count)} measured network(s)</li>")
    if not lines:
        return ""
    return ("<p class='warn'>Values that signal an unstable estimator, kept as computed (never clipped): the "
            "estimator, not the network, is at its limit there (KDE-ECE: a bandwidth from very few or nearly "
            "equal correct confidences); read such rows with care:</p><ul>" + "".join(lines) + "</ul>")


def write(settings: Mapping, tables: Sequence[str | Path], results: str | Path) -> dict[str, Path]:
    """The report of the parts ``settings["parts"]``, in that order (``settings``:
    :func:`calibench.analysis.registry.config_report_settings`); ``settings["left_out"]``
    (part -> why), where present, names the parts of the run this report leaves out, and
    ``settings["explorer_left_out"]`` says the explorer was not updated with it."""
    results = Path(results)
    parts = list(settings["parts"])
    bins, level, few = settings["bins"], settings["level"], settings["min_networks"]
    manifests = {p: analysis_parts.read_manifest(results, p) for p in parts}
    nets = _networks(tables, bins)
    kendall = _read(results, parts, "kendall", "kendall")
    kendall = pd.DataFrame() if kendall is None else kendall
    q4 = question4_findings(kendall, bins)
    kernel = _read(results, parts, "architecture", "kernel")
    width = _read(results, parts, "architecture", "width")
    brackets = _read(results, parts, "architecture", "brackets")
    edges = _read(results, parts, "architecture", "edges")
    found = findings(nets, kendall, q4, pd.DataFrame() if brackets is None else brackets,
                     pd.DataFrame() if edges is None else edges, bins, level, min_networks=few,
                     robustness=_read(results, parts, "robustness", "kendall"),
                     nas=_read(results, parts, "nas", "nas"),
                     architecture=architecture.findings(kernel, width, bins, few) if kernel is not None else ())
    gains = _read(results, parts, "architecture", "gains")
    if gains is not None and not gains.empty:  # which architectures gain most from each method
        found = pd.concat([found, pd.DataFrame(method_gains.findings(gains))], ignore_index=True)
    comparison = _read(results, parts, "schedules", "comparison")
    if comparison is not None:
        extra = schedules.findings(comparison, bins, min_networks=few)
        if not extra.empty:
            found = pd.concat([found, extra], ignore_index=True)
    found.to_csv(findings_path(results), index=False)
    claimed = claims(nets, kendall, q4, bins, level, min_networks=few)
    claimed.to_csv(claims_path(results), index=False)

    pieces: dict[str, list[tuple[int, str]]] = {sid: [] for sid, _, _ in SECTIONS}
    for sid in CLAIMED:
        pieces[sid].append((0, claims_html(claimed, sid, level)))
    pieces["failures"].append((0, failures_html(results, tables)))
    pieces["failures"].append((1, unstable_html(tables)))
    pieces["methods"].append((-1, odir_flags(results, tables)))
    if "kendall" in parts:
        pieces["methods"].append((20, q4_block(kendall, bins, few)))
    plots = []
    for part in parts:
        plots += [(p["title"], results / p["path"]) for p in manifests[part]["plots"]]
        for block in manifests[part]["blocks"]:
            if part == "kendall" and block["section"] == "methods":
                continue  # question 4's table, written by the kendall part before the report made it
            pieces.setdefault(block["section"], []).append((block["order"], block["html"]))
    blocks = {sid: "\n".join(text for _, text in sorted(items, key=lambda item: item[0]) if text)
              for sid, items in pieces.items()}
    n_rows = {Path(t).name: measured_and_copies(t) for t in tables}
    page = write_report(results, plots, found, n_rows, bool(settings["demo"]), blocks=blocks,
                        underdetermined=underdetermined_where(tables), n_tables=len(tables),
                        explorer=bool(settings.get("explorer")), left_out=settings.get("left_out") or {},
                        explorer_left_out=bool(settings.get("explorer_left_out")))
    log.info("report written: %s, %d parts, %d figures, %d findings%s", page, len(parts), len(plots), len(found),
             f"; left out: {', '.join(settings['left_out'])}" if settings.get("left_out") else "")
    # the content check of the report job's outputs (issue 33; `sha256sum -c report.html.sha256`)
    # and the part manifests it was made from: one gone (a part stopped mid-run, its outputs
    # removed) takes the report with it, as Snakemake would not see it
    integrity.write_sums([page, findings_path(results), claims_path(results),
                          *(analysis_parts.part_manifest(results, p) for p in parts)], report_sums(results))
    return {"report": page, "findings": findings_path(results), "claims": claims_path(results)}


def run_analysis(settings: Mapping, tables: Sequence[str | Path], results: str | Path) -> dict[str, Path]:
    """Every part the tables and ``settings`` (:func:`calibench.config.settings.analysis_settings`)
    call for, then the report, in this process. Returns the report's files and the parts'
    main outputs by name (``kendall``, ``hcs``, ``nas``...)."""
    results = Path(results)
    tables = [str(t) for t in tables]
    rows = load_tables(tables, {"space"})
    if rows.empty:
        raise ValueError(f"no rows in the result tables {tables}: nothing was measured")
    parts = registry.parts_of_tables(settings, list(table_stages(tables)))
    for part in parts:
        analysis_parts.run_part(part.name, registry.part_settings(settings, part), tables, results)
    done = write({**registry.report_settings(settings), "parts": [p.name for p in parts]}, tables, results)
    named = {path.stem: path for part in parts for path in registry.output_paths(results, part).values()
             if path.suffix == ".parquet" or path.name == "nas.csv"}
    return {**named, **done, "report": report_path(results)}
