"""Run B's side of the explorer (issue 37, item 4; docs/tools.md, "Two runs in the explorer"):
for each column ``calibench compare`` finds different, run B's values and B - A per network,
written as the page's data files beside run A's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.report.explorer_encoding import binary_script, encode_column

B_SUFFIX, DIFF_SUFFIX = " [B]", " [B-A]"  # run B's column and the difference, beside run A's
LISTED_KEYS = 50  # networks of one run only named per table (the count is exact)


def _plain(value):
    """A key value as JSON holds it: an index as int, a model's name as str."""
    return value if isinstance(value, str) else int(value)


def network_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per network, B - A: 0 where the two are equal (equal infinities, as
    :func:`calibench.analysis.compare.numeric_difference` counts them), NaN where either is
    NaN or they are opposite infinities."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    with np.errstate(invalid="ignore"):
        d = b - a
    return np.where(a == b, 0.0, d)


def compare_columns(measured: pd.DataFrame, plotted: Sequence[str], result, ref_b, out: Path, first: int,
                    tid: str) -> tuple[list[dict], dict]:
    """Run B's side of one table: for each plotted column whose status in ``result`` (the
    comparison of :func:`calibench.analysis.compare.compare_runs`) is ``differs``, run B's
    values on run A's measured rows (NaN where B has no such network; rows matched as
    ``compare`` matches them) and B - A (:func:`network_differences`), each encoded as a
    column of its own (the difference on its own scale, so a small one keeps its 3 digits).
    Returns (their manifest entries, the table's summary: networks in both and in one run
    only, the columns that differ, are equal, or are in one run only)."""
    from calibench.analysis.compare import align, match_key, measured_rows, read_table, table_columns

    rows = result.columns.set_index("column")
    data = result.columns[result.columns["kind"] == "data"]
    status = rows["status"]
    differing = [c for c in plotted if status.get(c) == "differs"]
    need = set(differing) | {"arch_index", "nats_index", "seed", "measured_by", "space", "arch_str"}
    frame_b, _ = read_table(ref_b, [c for c in table_columns(ref_b) if c in need])
    frame_b, _ = measured_rows(frame_b)
    key = match_key(measured, frame_b)
    ia, ib, only_a, only_b = align(measured, frame_b, key)
    entries = []
    for name in differing:
        b_values = np.full(len(measured), np.nan)
        b_values[ia] = frame_b[name].to_numpy(dtype=float, na_value=np.nan)[ib]
        a_values = measured[name].to_numpy(dtype=float, na_value=np.nan)
        diff = network_differences(a_values, b_values)
        for prefix, suffix, values in (("b", B_SUFFIX, b_values), ("d", DIFF_SUFFIX, diff)):
            payload, meta = encode_column(values)
            file = f"{prefix}{first + len(entries)}"
            (out / f"{file}.js").write_bytes(binary_script("file", [tid, file], payload))
            entries.append({"name": name + suffix, "file": file, "group": "run B" if prefix == "b" else "B - A",
                            "of": name, **meta})
    counts = data["status"].value_counts()
    figures = ("n_differ", "max_abs_diff", "median_abs_diff", "n_nan_mismatch", "kendall_tau")
    stats = {name: {f: (None if pd.isna(v := rows.at[name, f]) else (int(v) if f.startswith("n_") else float(v)))
                    for f in figures} for name in differing}
    summary = {"key": key, "n_both": int(len(ia)), "n_only_a": len(only_a), "n_only_b": len(only_b),
               "only_a": [list(map(_plain, k)) for k in only_a[:LISTED_KEYS]],
               "only_b": [list(map(_plain, k)) for k in only_b[:LISTED_KEYS]],
               "differs": differing, "stats": stats, "n_differs": int(counts.get("differs", 0)),
               "n_equal": int(counts.get("equal", 0)),
               "only_columns_a": data.loc[data["status"] == "only_a", "column"].tolist(),
               "only_columns_b": data.loc[data["status"] == "only_b", "column"].tolist()}
    return entries, summary


def compare_manifest(cmp) -> dict:
    """What the page's header says of two runs: their paths, the verdict, the settings that
    differ and the tables of one run only (as ``calibench compare`` says them)."""
    from calibench.report import compare_page

    return {"a": str(cmp.a.path), "b": str(cmp.b.path), "a_kind": cmp.a.kind, "b_kind": cmp.b.kind,
            "verdict": compare_page.verdict(cmp), "atol": cmp.atol,
            "settings": [[key, a, b, compare_page.tables_label(tables, cmp)]
                         for key, a, b, tables in compare_page.settings_rows(cmp)],
            "tables_one_run": [[t.name, "A" if t.side == "only_a" else "B", int(t.networks.get("rows", 0))]
                               for t in cmp.tables if t.side != "both"]}
