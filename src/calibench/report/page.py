"""The report page: one section per question of Tao et al. (ICLR 2024), each with its
findings (:mod:`calibench.report.findings`), the paper's claims put to the test
(:mod:`calibench.report.claims`), the HTML blocks and figures of the analysis parts, then
NAS, the post-hoc methods and reliability diagrams. :mod:`calibench.report.assemble` builds
it from the parts' outputs.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from calibench import layout
from calibench.analysis.plots import REPORT_CONTENT_PX
from calibench.atomic import atomic_write

__all__ = ["EMPTY_REASONS", "SECTIONS", "STYLE", "left_out_of", "partial_banner", "plot_section", "scrollable_tables",
           "write_report"]

# The page's style. Table cells never wrap (no header or number broken inside a word); a table
# wider than the page scrolls sideways in its own box. The body is REPORT_CONTENT_PX wide plus
# its padding, the width the figures' annotation sizes assume (analysis/plots.py).
STYLE = ("body{font-family:sans-serif;max-width:%dpx;margin:auto;padding:0 12px}img{max-width:100%%}"
         ".scroll{overflow-x:auto;max-width:100%%}"
         "table{border-collapse:collapse;font-size:12px}"
         "td,th{border:1px solid #ccc;padding:2px 6px;white-space:nowrap}"
         ".warn{background:#fff3cd;padding:8px;border:1px solid #e0c070}"
         ".findings li{margin:2px 0}nav li{margin:1px 0}.empty{color:#555}" % (REPORT_CONTENT_PX + 24))

# Why a question has no content in a run (shown in its section and the contents).
EMPTY_REASONS = {
    "q1": "it needs a population measured on two or more datasets.",
    "q2": "it needs a <code>robustness:</code> table in the config (robustness columns per architecture).",
    "q4": "it needs a post-hoc method (e.g. <code>post</code>) among the configured stages.",
    "q7": "it needs a NATS-Bench TSS or SSS table (architecture features).",
}
NO_CONTENT = "nothing in this run's tables answers it."

# (id, heading, what the section asks; paper figures)
SECTIONS = [
    ("failures", "What failed", None),
    ("q1", "Question 1: is calibration consistent across datasets?",
     "Kendall tau of each metric over the same architectures trained on two datasets (Fig. 2, App. K/L)."),
    ("q2", "Question 2: does calibration go with robustness?",
     "Kendall tau of each calibration metric and robustness column against ECE, by population size "
     "(Fig. 3, App. N)."),
    ("q3", "Question 3: do the calibration metrics agree?",
     "Kendall tau of every metric against every other over networks, before and after each method "
     "(Fig. 4a, App. K)."),
    ("q4", "Question 4: is calibration before recalibration a guide to calibration after?",
     "Kendall tau of the networks' ECE before against after each post-hoc method, across bin counts "
     "(Fig. 4b, App. M)."),
    ("q5", "Question 5: are more accurate networks better calibrated?",
     "ECE against accuracy, for all networks and those above 90 % accuracy, coloured by CIFAR-10-C AUROC "
     "(Fig. 5, App. D)."),
    ("q6", "Question 6: how much do the bin count and the training schedule matter?",
     "ECE by bin count before and after temperature scaling, and across training schedules "
     "(Fig. 6, App. G/H)."),
    ("q7", "Question 7: which architectures are well calibrated?",
     "SSS size and width, TSS cell kernels and the edge operations of the best networks by HCS "
     "(Figs. 7-10, App. I)."),
    ("nas", "HCS rankings and architecture search by HCS",
     "The best networks by HCS; regularised evolution, local and random search over each result table, by accuracy and by HCS "
     "(App. F, Table 1); mean ± sd over seeded repeats of the architecture found."),
    ("populations", "Populations beyond NATS-Bench, by group",
     "Models grouped by a column of their metadata (e.g. family, training loss): ECE before and after "
     "temperature scaling per group, a Kruskal-Wallis test across groups, and each group's Kendall matrices "
     "(Tao et al. App. A-C, Figs. 11-19)."),
    ("methods", "Post-hoc recalibration methods", ""),
    ("reliability", "Reliability diagrams",
     "Per-bin accuracy against confidence (15 equal-width bins, top label) of the best and worst network by "
     "HCS, before and after temperature scaling; the shaded gap is the miscalibration."),
]

# plot file name prefix -> section (the first match wins)
_PLOT_SECTIONS = [
    ("kendall_datasets_", "q1"), ("robustness", "q2"), ("kendall_metrics_", "q3"),
    ("kendall_pre_post_", "q4"), ("kendall_pre_methods_", "q4"), ("ece_vs_accuracy", "q5"),
    ("ece_by_bins", "q6"), ("hp_", "q6"), ("kernel", "q7"), ("width", "q7"), ("size", "q7"),
    ("hcs_vs_accuracy", "nas"), ("reliability_", "reliability"), ("ece_by_method", "methods"),
    ("method_win_rates", "methods"), ("groups_", "populations"),
]


def plot_section(path: Path) -> str:
    """The section a plot belongs to, from its file name; ``other`` if none."""
    name = Path(path).name
    return next((section for prefix, section in _PLOT_SECTIONS if name.startswith(prefix)), "other")


def _img(results: Path, title: str, path: Path) -> str:
    rel = Path(path).relative_to(results)
    return f"<h4>{html.escape(title)}</h4><img src='{html.escape(str(rel))}' alt='{html.escape(title)}'>"


def scrollable_tables(text: str) -> str:
    """``text`` with each ``<table>`` in a horizontally scrollable box (``.scroll``)."""
    text = re.sub(r"<table\b", "<div class='scroll'><table", text)
    return text.replace("</table>", "</table></div>")


def demo_banner(underdetermined: Sequence[str] | Mapping[str, Sequence[str]], n_tables: int | None = None) -> str:
    """The mini benchmark's warning; ``underdetermined``: the stages whose fits had too little
    data in some table (docs/recalibration.md, "Common rules"), or stage -> those tables
    (stages flagged on the same tables are named together, with the tables)."""
    text = ("<p class='warn'><b>Mini benchmark:</b> synthetic data and randomly initialised NATS networks "
            "with fitted heads. These are demo numbers, NOT NATS-Bench results.")
    if underdetermined:
        if isinstance(underdetermined, Mapping):
            groups: dict[tuple[str, ...], list[str]] = {}
            for stage, where in underdetermined.items():
                groups.setdefault(tuple(where), []).append(stage)
            parts = []
            for where, stages in groups.items():
                names = ", ".join(f"<code>{html.escape(s)}</code>" for s in stages)
                on = ("every table" if n_tables is not None and len(where) == n_tables
                      else ", ".join(html.escape(w) for w in where))
                parts.append(f"{names} on {on}")
            said = "; ".join(parts)
        else:
            said = ", ".join(f"<code>{html.escape(s)}</code>" for s in underdetermined)
        text += (" Underdetermined on it: " + said
                 + " (fewer validation samples than the fit needs, flagged <code>{stage}_fit_underdetermined</code> "
                   "in the tables): their numbers describe fits on too little data, not the methods.")
    return text + "</p>"


LEFT_OUT_META = "calibench-left-out"  # the parts a partial report leaves out, comma-separated, in its <head>


def left_out_of(page: str | Path) -> list[str]:
    """The parts the report ``page`` was written without (:func:`partial_banner`); [] for a
    whole report or none."""
    try:
        with open(page, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return []
    found = re.search(f"<meta name='{LEFT_OUT_META}' content='([^']*)'>", head)
    return html.unescape(found.group(1)).split(",") if found else []


def partial_banner(left_out: Mapping[str, str], explorer_left_out: bool = False) -> str:
    """The warning of a report written without some of the run's analysis parts (``left_out``:
    part -> why; docs/analysis.md, "When a part fails")."""
    items = "".join(f"<li><code>{html.escape(part)}</code>: {html.escape(why)}</li>" for part, why in left_out.items())
    explorer = ("<p>The explorer reads a part left out: it was not updated, and this report does not link it.</p>"
                if explorer_left_out else "")
    return ("<div class='warn' id='partial'><p><b>Partial report:</b> written without the analysis parts below, "
            "which did not complete in this run; their findings, tables and figures are missing. Every other part "
            "is up to date with the tables and the config. The next <code>calibench run</code> makes them and the "
            "whole report.</p>"
            f"<ul>{items}</ul>{explorer}</div>")


def write_report(results: Path, plots: Sequence[tuple[str, Path]], found: pd.DataFrame,
                 n_rows: Mapping[str, tuple[int, int]], minibench: bool, *, blocks: Mapping[str, str] | None = None,
                 underdetermined: Sequence[str] | Mapping[str, Sequence[str]] = (), n_tables: int | None = None,
                 explorer: bool = False, left_out: Mapping[str, str] | None = None,
                 explorer_left_out: bool = False) -> Path:
    """``results/report.html``: a contents list, then one section per entry of
    :data:`SECTIONS` that has findings, figures or an HTML block (``blocks``: section id ->
    HTML, e.g. tables), each with its computed findings first; a question without any keeps
    its section with one line saying why (:data:`EMPTY_REASONS`); figures placed by
    :func:`plot_section`; figures no section claims at the end. ``underdetermined``: stages
    the mini benchmark's banner names; ``explorer``: link the run's interactive explorer;
    ``left_out``: the parts of the run the page is written without (:func:`partial_banner`)."""
    blocks = {sid: scrollable_tables(b) for sid, b in (blocks or {}).items()}
    by_section: dict[str, list[tuple[str, Path]]] = {}
    for title, path in plots:
        by_section.setdefault(plot_section(path), []).append((title, path))
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>calibench report</title>",
             *([f"<meta name='{LEFT_OUT_META}' content='{html.escape(','.join(left_out))}'>"] if left_out else []),
             f"<style>{STYLE}</style></head><body>", "<h1>calibench report</h1>"]
    if left_out:
        parts.append(partial_banner(left_out, explorer_left_out))
    if explorer:
        link = os.path.relpath(layout.explorer_page(results), layout.report_path(results).parent)
        parts.append(f"<p id='explorer-link'><a href='{link}'>Open the interactive explorer</a>: any two "
                     "columns of the tables as a scatter, each network's reliability diagrams, the Kendall matrices "
                     "with their intervals (<code>calibench explore</code>).</p>")
    if minibench:
        parts.append(demo_banner(underdetermined, n_tables))
    parts.append("<p>Tables: " + ", ".join(f"{html.escape(k)} ({v[0]} networks measured"
                                          + (f", {v[1]} isomorph copies of them" if v[1] else "") + ")"
                                          for k, v in n_rows.items())
                 + ". Every finding below is computed from these tables (<code>analysis/findings.csv</code>).</p>")
    sections = []
    for sid, heading, question in SECTIONS:
        lines = found[found["question"] == sid]["text"].tolist() if not found.empty else []
        figures = by_section.pop(sid, [])
        block = blocks.pop(sid, "")
        empty = not (lines or figures or block)
        if empty and not sid.startswith("q"):
            continue
        body = [f"<section id='{sid}'><h2>{html.escape(heading)}</h2>"]
        if question:
            body.append(f"<p><i>{html.escape(question)}</i></p>")
        if empty:
            reason = EMPTY_REASONS.get(sid, NO_CONTENT)
            if left_out:
                reason = reason[:-1] + ", or a part this report leaves out does (above)."
            body.append(f"<p class='empty'>No content in this run: {reason}</p>")
        if lines:
            body.append("<ul class='findings'>" + "".join(f"<li>{html.escape(t)}</li>" for t in lines) + "</ul>")
        if block:
            body.append(block)
        body.extend(_img(results, t, p) for t, p in figures)
        body.append("</section>")
        sections.append((sid, heading, "\n".join(body)))
    rest = [p for ps in by_section.values() for p in ps]
    extra_blocks = [b for b in blocks.values() if b]
    if rest or extra_blocks:
        sections.append(("other", "Other figures", "<section id='other'><h2>Other figures</h2>"
                         + "".join(extra_blocks) + "".join(_img(results, t, p) for t, p in rest) + "</section>"))
    parts.append("<nav><h2>Contents</h2><ol>" + "".join(
        f"<li><a href='#{sid}'>{html.escape(heading)}</a>"
        + (" (no content in this run)" if "<p class='empty'>" in body else "") + "</li>"
        for sid, heading, body in sections) + "</ol></nav>")
    parts.extend(body for _, _, body in sections)
    parts.append("</body></html>")
    out = layout.report_path(results)
    page = "\n".join(parts).encode()
    atomic_write(out, lambda f: f.write(page))
    return out
