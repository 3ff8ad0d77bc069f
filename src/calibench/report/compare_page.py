"""What ``calibench compare`` shows and writes (issue 26, part 2): a short summary for the
terminal with a one-line verdict, the CSV (one row per table x column), and an HTML page
with a figure of the per-column differences and the settings that differ. The numbers come
from :mod:`calibench.analysis.compare`.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from calibench import layout, vocabulary
from calibench.analysis.compare import Comparison
from calibench.analysis.plots import DPI, REPORT_CONTENT_PX, pyplot
from calibench.atomic import atomic_write
from calibench.report.page import STYLE

SHOWN_SETTINGS = 6  # settings listed on the terminal (the page lists all)
PAGE_DIFFERING_ROWS = 40  # differing columns per table listed on the page (the CSV has all)


def default_out(cmp: Comparison) -> Path:
    """``./compare-{A}-vs-{B}`` (:func:`calibench.layout.compare_dir`); two runs of the same
    folder name are told apart by their parent folder's."""
    a, b = cmp.a.name, cmp.b.name
    if a == b:
        a, b = (f"{r.path.resolve().parent.name}-{r.name}" for r in (cmp.a, cmp.b))
    return layout.compare_dir(a, b)


def _g(x: float) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _tau(x: float) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"


def _keys(keys: list) -> str:
    shown = ", ".join("/".join(str(v) for v in k) for k in keys[:3])
    return shown + (f", ... ({len(keys)})" if len(keys) > 3 else "")


def _names(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f", ... ({len(names)})" if len(names) > n else "")


def _largest(data: pd.DataFrame) -> str:
    """The differing column to name: the most NaN mismatches, else the largest difference."""
    diff = data[data["status"] == "differs"]
    if diff.empty:
        return ""
    worst = diff.sort_values(["n_nan_mismatch", "max_abs_diff"], ascending=False, na_position="last").iloc[0]
    if worst["n_nan_mismatch"]:
        n = int(worst["n_nan_mismatch"])
        return f"; worst: {worst['column']} (NaN on one side only in {n} row{'s' if n != 1 else ''})"
    if pd.isna(worst["max_abs_diff"]):
        return f"; e.g. {worst['column']} ({worst['n_differ']} rows differ)"
    return (f"; largest: {worst['column']} max |diff| {_g(worst['max_abs_diff'])}, "
            f"median {_g(worst['median_abs_diff'])}, tau {_tau(worst['kendall_tau'])}")


def settings_rows(cmp: Comparison) -> list[tuple[str, str, str, list[str]]]:
    """(key, A, B, tables) of each setting that differs, the same difference in several tables once."""
    seen: dict[tuple, list[str]] = {}
    for t in cmp.tables:
        for key, a, b in t.settings:
            seen.setdefault((key, a, b), []).append(t.name)
    return [(*k, tables) for k, tables in seen.items()]


def tables_label(tables: list[str], cmp: Comparison) -> str:
    both = [t.name for t in cmp.tables if t.side == "both"]
    return "every table" if len(tables) == len(both) and len(both) > 1 else _names(tables, 3)


def verdict(cmp: Comparison) -> str:
    """One line: EQUAL (within atol) or DIFFERENT, with what makes it so."""
    both = [t for t in cmp.tables if t.side == "both"]
    one_sided = [t for t in cmp.tables if t.side != "both"]
    # a table with a side in the tao2024 layout: its columns on one side only are not compared
    data = pd.concat([t.columns[t.columns["kind"] == "data"].assign(external=t.external is not None)
                      for t in both]) if both else pd.DataFrame(columns=["status", "external"])
    aside_rows = data["external"].astype(bool) & data["status"].isin(("only_a", "only_b"))
    uncompared = int(aside_rows.sum())
    data = data[~aside_rows]
    layouts = sorted({t.external for t in both if t.external})
    aside = (f"; {uncompared} data columns in one run only, not compared (the {', '.join(layouts)} layout "
             "holds fewer)" if uncompared else "")
    networks = sum(t.networks["n_both"] for t in both)
    settings = len(settings_rows(cmp))
    tail = f" (and {settings} setting{'s differ' if settings != 1 else ' differs'})" if settings else ""
    if cmp.equal:
        return (f"verdict: EQUAL: {len(both)} tables, {networks} networks, {len(data)} data columns "
                f"(summed over the tables) equal within atol {cmp.atol:g}{aside}{tail}")
    parts = []
    if one_sided:
        parts.append(f"{len(one_sided)} table{'s' if len(one_sided) != 1 else ''} in one run only")
    uneven = sum(1 for t in both if t.networks["n_only_a"] or t.networks["n_only_b"])
    if uneven:
        parts.append(f"{uneven} table{'s' if uneven != 1 else ''} with networks in one run only")
    counts = data["status"].value_counts()
    for status, label in (("differs", "differ by more than atol %g" % cmp.atol), ("only_a", "only in A"),
                          ("only_b", "only in B")):
        if counts.get(status, 0):
            parts.append(f"{counts[status]} data columns {label}")
    return f"verdict: DIFFERENT: {'; '.join(parts)}{aside}{tail}"


def summary_text(cmp: Comparison) -> str:
    """The terminal summary: a few lines per table, the settings that differ, the verdict."""
    def side(run) -> str:
        n = len(run.tables)
        return f"{run.path} ({'' if run.kind == 'tables' else run.kind + ', '}{n} table{'s' if n != 1 else ''})"

    lines = [f"A: {side(cmp.a)}", f"B: {side(cmp.b)}"]
    if cmp.patterns:
        lines.append(f"columns matching: {' '.join(cmp.patterns)}")
    for t in cmp.tables:
        if t.side != "both":
            lines.append(f"{t.name}: only in {'A' if t.side == 'only_a' else 'B'} ({t.networks['rows']} rows)")
            continue
        n = t.networks
        lines.append(f"{t.name}: {n['n_both']} networks in both, {n['n_only_a']} only in A, {n['n_only_b']} only "
                     f"in B (matched by {', '.join(n['key'])})")
        if n.get("copies_a") or n.get("copies_b"):
            lines.append(f"  isomorph copies left out (they repeat their representative's values): "
                         f"A {n.get('copies_a', 0)}, B {n.get('copies_b', 0)}")
        for side in ("a", "b"):
            if n[f"only_{side}"]:
                lines.append(f"  networks only in {side.upper()}: {_keys(n[f'only_{side}'])}")
        data = t.columns[t.columns["kind"] == "data"]
        counts = data["status"].value_counts()
        both = counts.get("equal", 0) + counts.get("differs", 0)
        compared = (f"{counts.get('equal', 0)} equal, {counts.get('differs', 0)} differ" if n["n_both"] else
                    f"{both} in both, not compared (no network in both)")
        lines.append(f"  data columns: {compared}, {counts.get('only_a', 0)} only in A, "
                     f"{counts.get('only_b', 0)} only in B{_largest(data)}")
        for status, side in (("only_a", "A"), ("only_b", "B")):
            names = data.loc[data["status"] == status, "column"].tolist()
            if names:
                lines.append(f"  only in {side}: {_names(names)}")
    rows = settings_rows(cmp)
    if rows:
        lines.append(f"settings that differ ({len(rows)}):")
        for key, a, b, tables in rows[:SHOWN_SETTINGS]:
            lines.append(f"  {key}: {_short(a)} -> {_short(b)} [{tables_label(tables, cmp)}]")
        if len(rows) > SHOWN_SETTINGS:
            lines.append(f"  ... and {len(rows) - SHOWN_SETTINGS} more (the page lists every one)")
    lines.append(verdict(cmp))
    return "\n".join(lines)


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


# ---------------------------------------------------------------- figure

def plot_png(cmp: Comparison) -> bytes | None:
    """One strip per table in both runs: each column's largest absolute difference on a log
    axis, in table order with the stages marked; equal columns on the floor, NaN
    mismatches, one-sided and differing non-numeric columns marked on the ceiling."""
    both = [t for t in cmp.tables if t.side == "both" and len(t.columns)]
    if not both:
        return None
    plt = pyplot()

    positive = pd.concat([t.columns["max_abs_diff"] for t in both])
    positive = positive[(positive > 0) & np.isfinite(positive)]
    # Decades spanning the differences; below them the floor (equal), above the ceiling.
    lo = math.floor(math.log10(positive.min())) if len(positive) else -16
    hi = math.ceil(math.log10(positive.max())) if len(positive) else 0
    if cmp.atol > 0:
        lo, hi = min(lo, math.floor(math.log10(cmp.atol))), max(hi, math.ceil(math.log10(cmp.atol)))
    hi = max(hi, lo + 1)
    floor, ceiling = 10.0 ** (lo - 1), 10.0 ** (hi + 1)
    width = REPORT_CONTENT_PX / DPI
    fig, axes = plt.subplots(len(both), 1, figsize=(width, 1.0 + 1.6 * len(both)), squeeze=False, dpi=DPI)
    marks = [("equal", "#bbbbbb", "|", "equal (floor)"), ("differs", "#1f77b4", "o", "differs: max |A - B|"),
             ("nan", "#d62728", "x", "NaN on one side only"), ("label", "#9467bd", "D", "non-numeric, differs"),
             ("only_a", "#ff7f0e", "v", "only in A"), ("only_b", "#2ca02c", "^", "only in B")]
    present: set = set()
    for ax, t in zip(axes[:, 0], both):
        c = t.columns.reset_index(drop=True)
        x = np.arange(len(c))
        d = c["max_abs_diff"].to_numpy(float)
        status = c["status"].to_numpy()
        kind = np.select([status == "equal", status == "only_a", status == "only_b", c["n_nan_mismatch"] > 0,
                          np.isnan(d)], ["equal", "only_a", "only_b", "nan", "label"], "differs")
        y = np.where(kind == "equal", floor,
                     np.where(kind == "differs", np.clip(d, floor * 10, ceiling / 10), ceiling))
        for name, colour, marker, _ in marks:
            sel = kind == name
            if sel.any():
                present.add(name)
                ax.scatter(x[sel], y[sel], s=14 if name == "equal" else 10, c=colour, marker=marker,
                           linewidths=0.8, zorder=2 if name == "equal" else 3)
        ax.set_yscale("log")
        ax.set_ylim(floor / 3, ceiling * 3)
        ax.set_xlim(-1, len(c))
        for level in (floor * 3, ceiling / 3):
            ax.axhline(level, color="#cccccc", lw=0.6)
        step = max(1, (hi - lo + 1) // 4)
        decades = [10.0 ** e for e in range(lo, hi + 1, step)]
        ax.set_yticks([floor, *decades, ceiling])
        ax.set_yticklabels(["equal", *(f"1e{e}" for e in range(lo, hi + 1, step)), "n/a"])
        ax.minorticks_off()
        if cmp.atol > 0:
            ax.axhline(cmp.atol, color="#888888", lw=0.8, ls="--")
        n = t.networks
        ax.set_title(f"{t.name}: {n['n_both']} networks in both, {n['n_only_a']} only in A, {n['n_only_b']} only "
                     f"in B", fontsize=9, loc="left")
        ax.set_ylabel("max |A - B|", fontsize=8)
        ax.tick_params(labelsize=7)
        stages = [name.split("_", 1)[0] if name.split("_", 1)[0] in vocabulary.STAGES else "" for name in c["column"]]
        starts = [i for i in range(len(stages)) if i == 0 or stages[i] != stages[i - 1]]
        ticks, labels = [], []
        for j, start in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else len(stages)
            if start:
                ax.axvline(start - 0.5, color="#dddddd", lw=0.8, zorder=1)
            if end - start >= 0.03 * len(stages):  # room for a label
                ticks.append((start + end - 1) / 2)
                labels.append(stages[start] or ("keys" if start == 0 else "other"))
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=7)
    handles = [plt.Line2D([], [], ls="", marker=m, color=col, label=label) for name, col, m, label in marks
               if name in present]
    fig.legend(handles=handles, fontsize=7, ncol=len(handles), loc="upper left", frameon=False)
    axes[-1, 0].set_xlabel("table columns in table order, by stage (n/a: one-sided, NaN on one side, or a "
                           "non-numeric column that differs)" + (f"; dashed: atol {cmp.atol:g}" if cmp.atol else ""),
                           fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (1.0 + 1.6 * len(both))))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


# ---------------------------------------------------------------- page, CSV

def page_html(cmp: Comparison, png: bytes | None) -> str:
    """The page: runs, verdict, a summary table, the figure, the settings and the differing columns."""
    e = html.escape
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>calibench compare</title>"
           f"<style>{STYLE}</style></head><body>", "<h1>calibench compare</h1>",
           f"<p>A: <code>{e(str(cmp.a.path))}</code> ({e(cmp.a.kind)})<br>B: <code>{e(str(cmp.b.path))}</code> "
           f"({e(cmp.b.kind)})<br>atol {cmp.atol:g}"
           + (f"; columns matching <code>{e(' '.join(cmp.patterns))}</code>" if cmp.patterns else "") + "</p>",
           f"<p><b>{e(verdict(cmp))}</b></p>", "<h2>Tables</h2>"]
    summary = []
    for t in cmp.tables:
        row = {"table": t.name, "in": {"both": "both", "only_a": "A only", "only_b": "B only"}[t.side]}
        if t.side == "both":
            data = t.columns[t.columns["kind"] == "data"]
            counts = data["status"].value_counts()
            row.update({"networks in both": t.networks["n_both"], "only in A": t.networks["n_only_a"],
                        "only in B": t.networks["n_only_b"], "matched by": ", ".join(t.networks["key"]),
                        **{f"columns {s}": int(counts.get(s, 0)) for s in ("equal", "differs", "only_a", "only_b")},
                        "largest |diff|": _g(data["max_abs_diff"].max()) if len(data) else ""})
        summary.append(row)
    out.append(f"<div class='scroll'>{pd.DataFrame(summary).to_html(index=False, na_rep='')}</div>")
    if png is not None:
        out += ["<h2>Differences per column</h2>",
                f"<img alt='largest absolute difference per column' src='data:image/png;base64,"
                f"{base64.b64encode(png).decode()}'>"]
    out.append("<h2>Settings that differ</h2>")
    rows = settings_rows(cmp)
    if rows:
        frame = pd.DataFrame([{"setting": k, "A": a, "B": b, "tables": tables_label(t, cmp)} for k, a, b, t in rows])
        out.append(f"<div class='scroll'>{frame.to_html(index=False)}</div>")
    else:
        out.append("<p>none: the tables' provenance, config records, constants and setting columns agree.</p>")
    out.append("<h2>Columns that differ or are one-sided</h2><p>Up to %d per table, NaN mismatches and the "
               "largest differences first; <code>compare.csv</code> has every column.</p>" % PAGE_DIFFERING_ROWS)
    listed = []
    for t in cmp.tables:
        if t.side != "both":
            continue
        bad = t.columns[(t.columns["status"] != "equal") & (t.columns["kind"] == "data")]
        order = ["n_nan_mismatch", "max_abs_diff", "n_differ"]
        listed.append(bad.sort_values(order, ascending=False, na_position="last").head(PAGE_DIFFERING_ROWS))
    bad = pd.concat(listed) if listed else pd.DataFrame()
    if bad.empty:
        out.append("<p>none.</p>")
    else:
        bad = bad[["table", "column", "status", "max_abs_diff", "median_abs_diff", "n_nan_mismatch", "n_differ",
                   "kendall_tau"]].copy()
        bad["kendall_tau"] = [_tau(v) if s == "differs" else "" for v, s in zip(bad["kendall_tau"], bad["status"])]
        out.append(f"<div class='scroll'>{bad.to_html(index=False, na_rep='', float_format=_g)}</div>")
    out.append("</body></html>")
    return "\n".join(out)


def write(cmp: Comparison, out: str | Path) -> tuple[Path, Path]:
    """``compare.csv`` and ``compare.html`` under ``out`` (created); returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, page_path = layout.compare_csv(out), layout.compare_page(out)
    frame = cmp.csv_frame()
    atomic_write(csv_path, lambda f: f.write(frame.to_csv(index=False, lineterminator="\n").encode()))
    text = page_html(cmp, plot_png(cmp))
    atomic_write(page_path, lambda f: f.write(text.encode()))
    return csv_path, page_path
