"""`calibench explore` (issue 26): its encoding, then the page the shared workflow run wrote, used in
a real headless Chromium as a reader would (skips, saying why, where no browser is installed)."""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.report import explorer
from calibench.report import screenshot as render
from fixtures import WORKFLOW_TINY


# ---------------------------------------------------------------- the encoding (no browser)

def _unescape_js(body: bytes) -> bytes:
    """What a JS string literal of js_binary_string gives back, as the page reads it (independent)."""
    out, i = bytearray(), 0
    while i < len(body):
        if body[i] == 0x5C:
            out.append({ord("n"): 10, ord("r"): 13}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return bytes(out)


def test_columns_keep_three_significant_digits_nan_and_the_infinities():
    rng = np.random.default_rng(0)
    cases = [rng.uniform(0, 0.4, 5000), np.r_[rng.lognormal(12, 2, 997), np.nan, np.inf, -np.inf],
             np.r_[-3.5, 0.0, 2.0, 1e-6], np.zeros(3), np.full(4, np.nan), np.r_[1e-12, 5.0, 1e30]]
    for values in cases:
        data, meta = explorer.encode_column(values)
        back = explorer.decode_column(data, meta, len(values))
        assert np.array_equal(np.isnan(back), np.isnan(values))
        assert np.array_equal(back[np.isinf(values)], values[np.isinf(values)])
        ok = np.isfinite(values)
        rel = np.abs(back[ok] - values[ok]) <= 2.0 ** -9 * np.abs(values[ok]) + 1e-300
        assert rel.all(), (meta, values[ok][~rel][:3], back[ok][~rel][:3])
    assert explorer.encode_column(np.r_[1e-12, 1e30])[1] == {"enc": "f32"}  # beyond float16's exponent


def test_a_data_file_carries_its_bytes_through_the_string_literal():
    payload = bytes(range(256)) * 3 + b'"\\\n\r'
    text = explorer.binary_script("col", ["t", 4], payload)
    m = re.fullmatch(rb'CB\.col\("t",4,(\d+),"(.*)"\);\n', text, flags=re.S)
    assert m is not None
    packed = _unescape_js(m.group(2))
    assert len(packed) == int(m.group(1))
    import gzip

    assert gzip.decompress(packed) == payload


def test_the_page_script_joins_every_part_once_in_one_closure():
    """explorer.js is explorer_js/*.js joined (explorer.PAGE_SCRIPTS): no part left out or twice,
    one closure whose value is start.js's EXPORTS."""
    from importlib import resources

    folder = resources.files("calibench.report").joinpath("explorer_js")
    files = sorted(p.name.removesuffix(".js") for p in folder.iterdir() if p.name.endswith(".js"))
    assert sorted(explorer.PAGE_SCRIPTS) == files and len(set(explorer.PAGE_SCRIPTS)) == len(files)
    code = explorer.page_script().decode()
    assert code.count("const CB = (() => {") == 1 and code.rstrip().endswith("return EXPORTS;\n})();")
    for name in explorer.PAGE_SCRIPTS:
        assert folder.joinpath(f"{name}.js").read_text() in code


# ---------------------------------------------------------------- the page of the shared run

@pytest.fixture(scope="module")
def page(workflow_run):
    html = layout.explorer_page(workflow_run / "results")
    assert html.is_file(), "the workflow's explorer rule wrote no page"
    try:
        with render.Page(html, 1400, 1000, timeout=90) as p:
            p.wait_for("CB.state.painted || CB.state.errors.length", timeout=60)
            yield p
    except render.BrowserNotFound as exc:
        pytest.skip(str(exc))


def _table(workflow_run, table_id: str) -> pd.DataFrame:
    return pd.read_parquet(workflow_run / "results" / "tables" / f"{table_id}.parquet")


def _trace(page, element="scatter", curve=0):
    return page.evaluate(f"(() => {{ const d = document.getElementById('{element}').data[{curve}]; "
                         "return {name: d.name, x: Array.from(d.x), y: Array.from(d.y), "
                         "rows: d.customdata ? Array.from(d.customdata, c => c[0]) : null, meta: d.meta}; })()")


def _close(got, want):
    got, want = np.asarray(got, float), np.asarray(want, float)
    return got.shape == want.shape and np.all(np.abs(got - want) <= 2.0 ** -9 * np.abs(want) + 1e-12)


def _widest_gap_cut(values) -> float | None:
    """A threshold in the widest relative gap between distinct values: far from each at 3 digits."""
    values = np.unique(np.asarray(values, float)[np.isfinite(values)])
    if len(values) < 2:
        return None
    gap = int(np.argmax(np.diff(values) / np.abs(values[1:])))
    assert values[gap + 1] - values[gap] > 0.01 * abs(values[gap + 1]), values
    return float((values[gap] + values[gap + 1]) / 2)


def test_the_report_links_the_explorer_and_the_page_loads_offline_without_errors(workflow_run, page):
    assert "href='explorer/index.html'" in (workflow_run / "results" / "report.html").read_text()
    assert page.evaluate("CB.state.errors") == []
    errors = [m for m in page.console if m.startswith(("error", "exception"))]
    assert errors == [], errors
    results = (workflow_run / "results").resolve().as_uri()
    outside = [u for u in page.requests if not u.startswith(results + "/")]
    assert outside == [], outside  # nothing from the network, nothing outside the results directory
    assert any(u.endswith("/explorer/plotly.min.js") for u in page.requests)
    banner = page.evaluate("document.getElementById('banner').textContent")
    assert "mini benchmark" in banner


def test_the_scatter_holds_every_measured_row_with_the_tables_values(workflow_run, page):
    shown = page.evaluate("CB.state.scatter")
    assert (shown["x"], shown["y"]) == ("accuracy", "pre_ece_15")
    trace = _trace(page)
    table = _table(workflow_run, trace["name"])
    measured = table["arch_index"] == table["measured_by"]  # an isomorph copy is no point of its own
    finite = table[measured & np.isfinite(table["accuracy"]) & np.isfinite(table["pre_ece_15"])]
    assert len(trace["x"]) == len(finite) == shown["tables"][0]["points"] > 0
    assert shown["tables"][0]["measured"] == int(measured.sum()) and shown["tables"][0]["rows"] == len(table)
    by_row = table.iloc[trace["rows"]]
    assert (by_row["arch_index"] == by_row["measured_by"]).all()
    assert _close(trace["x"], by_row["accuracy"]) and _close(trace["y"], by_row["pre_ece_15"])


def test_choosing_another_column_plots_that_columns_values(workflow_run, page):
    page.evaluate("(() => { const s = document.getElementById('ycol'); s.value = 'dir_nll'; "
                  "s.dispatchEvent(new Event('change')); })()")
    page.wait_for("CB.state.scatter.y === 'dir_nll' && document.getElementById('scatter').data[0].y.length > 0")
    trace = _trace(page)
    table = _table(workflow_run, trace["name"])
    expected = table[(table["arch_index"] == table["measured_by"]) & np.isfinite(table["accuracy"])
                     & np.isfinite(table["dir_nll"])]
    assert sorted(trace["rows"]) == list(np.flatnonzero(table.index.isin(expected.index)))
    assert _close(trace["y"], table.iloc[trace["rows"]]["dir_nll"])
    page.evaluate("(() => { const s = document.getElementById('ycol'); s.value = 'pre_ece_15'; "
                  "s.dispatchEvent(new Event('change')); })()")
    page.wait_for("CB.state.scatter.y === 'pre_ece_15'")


def test_clicking_a_point_shows_that_networks_row_and_reliability_diagrams(workflow_run, page):
    from calibench.layout import shard_path
    from calibench.results.shards import read_reliability

    point = 1
    x, y, row = page.evaluate(
        f"(() => {{ const gd = document.getElementById('scatter'), tr = gd.data[0], r = gd.getBoundingClientRect();"
        f" const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;"
        f" return [r.left + xa._offset + xa.l2p(tr.x[{point}]), r.top + ya._offset + ya.l2p(tr.y[{point}]),"
        f" tr.customdata[{point}][0]]; }})()")
    page.click(x, y)
    stages = page.wait_for("CB.state.selected && CB.state.selected.row === " + str(row)
                           + " && document.getElementById('reliability').dataset.stages", timeout=20)
    table = _table(workflow_run, _trace(page)["name"])
    net = table.iloc[row]
    assert page.evaluate("CB.state.selected.index") == int(net["arch_index"])
    shard = shard_path(workflow_run / "results", net["space"], net["hp"], net["dataset"], int(net["measured_by"]))
    bins = read_reliability(shard)[int(net["seed"])]
    assert stages.split(",") == [s for s in net.index.str.removesuffix("_accuracy") if s in bins]
    drawn = page.evaluate("Array.from(document.getElementById('reliability').data[0].customdata)")
    assert drawn == [int(c) for c in bins["pre"]["count"]]  # the pre panel's bars: the shard's bin counts
    text = page.evaluate("document.getElementById('rowtable').textContent")
    assert str(net["arch_str"]) in text and f"{net['accuracy']:.3g}"[:4] in text
    # the whole row on request: every plotted column of the table, each with the table's value
    page.evaluate("document.getElementById('wholerow').click()")
    page.wait_for("!!document.getElementById('wholerowtable')")
    shown = page.evaluate("Array.from(document.querySelectorAll('#wholerowtable tr'), r => "
                          "[r.cells[0].textContent, r.cells[1].textContent])")
    names = [n for n, _ in shown]
    assert names == [c["name"] for c in page.evaluate(f"CB.state.manifest.tables.find(t => t.id === "
                                                        f"'{_trace(page)['name']}').columns")]
    hcs = pd.read_parquet(workflow_run / "results" / "analysis" / "hcs.parquet")
    hcs = hcs[(hcs["space"] == net["space"]) & (hcs["dataset"] == net["dataset"])
              & (hcs["arch_index"] == net["measured_by"])].iloc[0]  # hcs_*: the HCS part's, per measured network
    from calibench.results.archstr import EDGE_NAMES, tss_edge_ops

    ops = tss_edge_ops(net["arch_str"]) if net["space"] == "tss" else None
    for name, value in shown:
        if name == "dataset":
            assert value == net["dataset"]
            continue
        if name.startswith("edge_"):  # a TSS edge's operation, by name (issue 37, item 3)
            assert value == ops[EDGE_NAMES.index(name.removeprefix("edge_"))], name
            continue
        if name.startswith("ops_"):
            assert float(value) == ops.count(name.removeprefix("ops_")), name
            continue
        if name.startswith("channels_"):
            assert value == net["arch_str"].split(":")[int(name.removeprefix("channels_")) - 1], name
            continue
        want = float(net[name] if name in net.index else hcs[name])
        got = {"NaN": math.nan, "+inf": math.inf, "-inf": -math.inf}.get(value)
        got = float(value) if got is None else got
        assert (math.isnan(got) and math.isnan(want)) or got == want or abs(got - want) <= 6e-3 * abs(want), name


def test_the_search_box_finds_an_arch_string(workflow_run, page):
    trace = _trace(page)
    table = _table(workflow_run, trace["name"])
    net = table.iloc[trace["rows"][-1]]
    page.evaluate(f"(() => {{ const s = document.getElementById('search'); s.value = {json.dumps(net['arch_str'])};"
                  " document.getElementById('searchgo').click(); })()")
    page.wait_for(f"CB.state.selected && CB.state.selected.index === {int(net['arch_index'])}")
    assert "found" in page.evaluate("document.getElementById('status').textContent")
    page.evaluate("(() => { const s = document.getElementById('search'); s.value = 'no-such-arch';"
                  " document.getElementById('searchgo').click(); })()")
    page.wait_for("document.getElementById('status').textContent.startsWith('no architecture matches')")


def test_the_column_filter_narrows_the_column_choosers_and_keeps_what_is_chosen(workflow_run, page):
    """Issue 37, item 5: words typed in the filter keep the columns whose names hold every one
    (any case); the chosen x, y and colour stay chosen and in their lists; clearing restores all."""
    def listed(select):
        return page.evaluate(f"Array.from(document.getElementById('{select}').options, o => o.value)")

    def type_filter(text):
        page.evaluate(f"(() => {{ const f = document.getElementById('colfilter'); f.value = {json.dumps(text)};"
                      " f.dispatchEvent(new Event('input')); })()")

    every = listed("xcol")
    chosen = page.evaluate("['xcol', 'ycol', 'ccol'].map(id => document.getElementById(id).value)")
    type_filter("CWCE_em 15")
    matching = [c for c in every if "cwce_em" in c and "15" in c]
    assert len(matching) >= 2, matching  # at least pre and post
    for select, value in zip(["xcol", "ycol", "ccol"], chosen):
        assert set(listed(select)) == set(matching) | {value}
    assert page.evaluate("['xcol', 'ycol', 'ccol'].map(id => document.getElementById(id).value)") == chosen
    assert page.evaluate("document.getElementById('colcount').textContent") == f"{len(matching)} of {len(every)} columns"
    type_filter("")
    assert listed("xcol") == every and page.evaluate("document.getElementById('colcount').textContent") == ""


def test_the_kendall_matrices_hold_the_analysis_values(workflow_run, page):
    page.evaluate("CB.tab('kendall')")
    sel = page.evaluate("Object.fromEntries(['figure','table','metric','stage','population','bins']"
                        ".map(d => [d, document.getElementById('k_' + d).value]))")
    heat = page.evaluate("(() => { const d = document.getElementById('kendall').data[0]; "
                         "return {x: d.x, y: d.y, z: d.z, text: d.text}; })()")
    k = pd.read_parquet(workflow_run / "results" / "analysis" / "kendall.parquet")
    k = k[(k["figure"] == sel["figure"]) & (k["metric"] == sel["metric"]) & (k["population"] == sel["population"])]
    k = k[[f"{r.space}{' hp ' + r.hp if r.hp else ''} · {'all datasets' if r.dataset == '*' else r.dataset}"
           == sel["table"] for r in k.itertuples()]]
    for i, name in enumerate(heat["y"]):
        for j, col in enumerate(heat["x"]):
            want = k[(k["row"] == name) & (k["col"] == col)]
            if len(want):
                tau = want["tau"].iloc[0]
                got = heat["z"][i][j]
                assert (got is None and math.isnan(tau)) or abs(got - tau) < 1e-6
                assert f"n = {int(want['n'].iloc[0])}" in heat["text"][i][j]
    assert len(heat["y"]) >= 2
    # cells on fewer than analysis.min_networks networks are marked on the matrix, not only on hover (issue 34)
    few = page.evaluate("CB.state.manifest.min_networks")
    small = sum(1 for i, name in enumerate(heat["y"]) for j, col in enumerate(heat["x"]) if name != col
                and (m := re.search(r"n = (\d+)", heat["text"][i][j])) and int(m.group(1)) < few)
    marks = page.evaluate("(() => { const d = document.getElementById('kendall').data; "
                          "return d.length > 1 ? d[1].x.length : 0; })()")
    assert small > 0 and marks == small, (small, marks)
    assert f"× marks the {small} cells on fewer than {few} networks" in page.evaluate(
        "document.getElementById('knote').textContent")
    page.evaluate("CB.tab('scatter')")


def test_the_methods_tab_plots_each_stage_against_pre(workflow_run, page):
    page.evaluate("CB.tab('methods')")
    page.wait_for("document.getElementById('methods').data && document.getElementById('methods').data.length")
    tid = page.evaluate("document.getElementById('mtable').value")
    metric = page.evaluate("document.getElementById('mmetric').value")
    table = _table(workflow_run, tid)
    measured = table[table["arch_index"] == table["measured_by"]]
    first = _trace(page, "methods", 0)
    stage = [s for s in ("post", "vs", "ms", "dir", "iso", "hist", "spline") if f"{s}_{metric}" in table][0]
    ok = measured[np.isfinite(measured[f"pre_{metric}"]) & np.isfinite(measured[f"{stage}_{metric}"])]
    assert _close(sorted(first["x"]), sorted(ok[f"pre_{metric}"])) and _close(sorted(first["y"]), sorted(ok[f"{stage}_{metric}"]))
    # fits on too little data are marked and counted per panel (issue 34)
    notes = page.evaluate("document.getElementById('methods').layout.annotations.map(a => a.text)")
    flagged = 0
    for note in notes:
        s = note.split(":")[0]
        column = f"{s}_fit_underdetermined"
        ok = measured[np.isfinite(measured[f"pre_{metric}"]) & np.isfinite(measured[f"{s}_{metric}"])]
        n = int((ok[column] == 1).sum()) if column in ok else 0
        assert (f"; {n} on too little data (×)" in note) == (n > 0), note
        flagged += n
    assert flagged > 0, notes  # the tiny run's fits have too little data somewhere
    page.evaluate("CB.tab('scatter')")


def test_side_by_side_panels_share_one_colour_scale(workflow_run, page):
    page.evaluate("(() => { const c = document.getElementById('alldatasets'); c.checked = true; "
                  "c.dispatchEvent(new Event('change')); })()")
    page.wait_for("CB.state.scatter.tables.length > 1")
    ranges = page.evaluate("document.getElementById('scatter').data.filter(d => d.name !== 'selected')"
                           ".map(d => [d.marker.cmin, d.marker.cmax, d.marker.showscale])")
    shown = page.evaluate("CB.state.scatter")
    assert len(ranges) == len(shown["tables"]) > 1
    assert all(r[:2] == shown["crange"] for r in ranges), ranges  # one scale: the colour bar holds for every panel
    assert [r[2] for r in ranges] == [True] + [False] * (len(ranges) - 1)
    values = []
    for t in shown["tables"]:
        table = _table(workflow_run, t["table"])
        values += table.loc[table["arch_index"] == table["measured_by"], shown["color"]].dropna().tolist()
    assert _close(shown["crange"], [min(values), max(values)])
    assert page.evaluate("document.getElementById('scatter').layout.modebar.orientation") == "v"
    page.evaluate("(() => { const c = document.getElementById('alldatasets'); c.checked = false; "
                  "c.dispatchEvent(new Event('change')); })()")
    page.wait_for("CB.state.scatter.tables.length === 1")


def test_a_tss_tables_isomorphs_are_listed_with_their_representative_not_drawn_again(workflow_run, page):
    """Issue 34: one point per measurement; a copy is named in its representative's hover and
    row, found by a search (its representative's point), and its row says what it repeats."""
    page.evaluate("(() => { const s = document.getElementById('table'); s.value = 'tss_200_cifar10'; "
                  "s.dispatchEvent(new Event('change')); })()")
    page.wait_for("CB.state.scatter.tables[0].table === 'tss_200_cifar10'")
    trace = _trace(page)
    table = _table(workflow_run, "tss_200_cifar10")
    copies = table[table["arch_index"] != table["measured_by"]]
    measured = table[table["arch_index"] == table["measured_by"]]
    assert len(copies) >= 1 and len(trace["x"]) == len(measured)  # each measurement once
    assert _close(trace["y"], table.iloc[trace["rows"]]["pre_ece_15"])
    copy = copies.iloc[0]
    hover = page.evaluate("Array.from(document.getElementById('scatter').data[0].text)")
    rep_point = [table.iloc[r]["arch_index"] for r in trace["rows"]].index(copy["measured_by"])
    assert "also its isomorphs: " in hover[rep_point] and str(int(copy["arch_index"])) in hover[rep_point]
    note = page.evaluate("document.getElementById('scatter').layout.annotations[0].text")
    assert f"of {len(measured)} measured; {len(copies)} isomorph copies in their hover" in note, note
    page.evaluate(f"(() => {{ const s = document.getElementById('search'); s.value = '{int(copy['arch_index'])}';"
                  " document.getElementById('searchgo').click(); })()")
    page.wait_for(f"CB.state.selected && CB.state.selected.index === {int(copy['arch_index'])}")
    text = page.evaluate("document.getElementById('rowtable').textContent")
    assert f"measured by{int(copy['measured_by'])} (same isomorphism class)" in text
    assert f"measured as index {int(copy['measured_by'])}" in page.evaluate("document.getElementById('status').textContent")
    page.evaluate("(() => { const s = document.getElementById('table'); s.selectedIndex = 0; "
                  "s.dispatchEvent(new Event('change')); })()")


def _payload(path: Path) -> tuple[list, bytes]:
    """The JSON arguments and the bytes of one data file of binary_script (the page's reading)."""
    import gzip

    m = re.fullmatch(rb'CB\.\w+\((.*?),?(\d+),"(.*)"\);\n', path.read_bytes(), flags=re.S)
    args = json.loads(b"[" + m.group(1) + b"]") if m.group(1) else []
    packed = _unescape_js(m.group(3))
    assert len(packed) == int(m.group(2))
    return args, gzip.decompress(packed)


def test_a_table_of_two_seeds_keeps_each_rows_own_values(workflow_run, tmp_path):
    table = _table(workflow_run, "tss_200_cifar10")
    other = table.assign(seed=table["seed"] + 111, pre_ece_15=table["pre_ece_15"] * 2)  # seeds: [777, 888]
    both = pd.concat([table, other], ignore_index=True)
    path = tmp_path / "tss_200_cifar10.parquet"
    both.to_parquet(path)
    entry = explorer.export_table(path, tmp_path, tmp_path / "data", None, threads=1)
    n, m = len(both), entry["n_measured"]
    assert (entry["n"], m) == (n, int((both["arch_index"] == both["measured_by"]).sum()))
    _, rows = _payload(tmp_path / "data" / entry["id"] / "rows.js")
    rep = np.frombuffer(rows[4 * n: 8 * n], "<i4")
    column = next(c for c in entry["columns"] if c["name"] == "pre_ece_15")
    _, codes = _payload(tmp_path / "data" / entry["id"] / f"{column['file']}.js")
    values = explorer.decode_column(codes, column, m)[rep]  # each row's value, as the page expands it
    assert _close(values, both["pre_ece_15"])  # the copy of each seed: its representative of that seed


def test_the_networks_tab_sorts_filters_follows_the_scatter_selection_and_downloads(workflow_run, page):
    """Issue 37, item 2: a table of the scatter's table, one row per network (isomorph copies
    included), sortable by any column (NaN last), filtered by "column op number" clauses, reduced
    to a box or lasso selection of the scatter, a click selecting a network, the rows shown as CSV."""
    def evaluate_change(element, value):
        page.evaluate(f"(() => {{ const e = document.getElementById('{element}'); e.value = {json.dumps(value)};"
                      " e.dispatchEvent(new Event('change')); })()")

    page.evaluate("CB.tab('networks')")
    page.wait_for("CB.networks.order.length > 0 && document.querySelectorAll('#nrows tr').length > 0")
    table = _table(workflow_run, page.evaluate("CB.networks.table"))
    assert page.evaluate("CB.networks.order.length") == len(table)
    assert page.evaluate("document.getElementById('ncount').textContent").startswith(f"{len(table)} of {len(table)} networks")
    assert page.evaluate("CB.networks.columns")[:3] == ["accuracy", "params", "flops"]

    page.evaluate("document.querySelector('#nhead td[data-col=\"accuracy\"]').click()")  # highest first
    page.wait_for("CB.networks.sort && CB.networks.sort.column === 'accuracy'")
    order = page.evaluate("Array.from(CB.networks.order)")
    accuracy = table["accuracy"].to_numpy()[order]
    assert sorted(order) == list(range(len(table)))
    assert np.all(accuracy[:-1] >= accuracy[1:] - 2.0 ** -9 * np.abs(accuracy[1:]))  # to the explorer's 3 digits
    first = page.evaluate("Number(document.querySelector('#nrows tr').dataset.row)")
    assert first == order[0]

    cut = _widest_gap_cut(table["accuracy"])  # far from any value at 3 digits
    evaluate_change("nwhere", f"accuracy > {cut}, params >= 0")
    page.wait_for(f"CB.networks.order.length === {int((table['accuracy'] > cut).sum())}")
    csv = pd.read_csv(__import__("io").StringIO(page.evaluate("CB.networksCsv()")))
    kept = table[table["accuracy"] > cut]
    assert sorted(csv["arch_index"]) == sorted(kept["arch_index"])
    assert list(csv.columns[:3]) == ["arch_index", "arch_str", "accuracy"]
    by_index = kept.set_index("arch_index").loc[csv["arch_index"]]
    assert _close(csv["accuracy"], by_index["accuracy"]) and list(csv["arch_str"]) == list(by_index["arch_str"])

    evaluate_change("nwhere", "no_such_column > 1")
    page.wait_for("document.getElementById('ncount').textContent.includes('has no column no_such_column')")
    evaluate_change("nwhere", "")
    page.wait_for(f"CB.networks.order.length === {len(table)}")

    # a box or lasso on the scatter keeps its networks here; a double click (deselect) restores
    picked = page.evaluate("(() => { const gd = document.getElementById('scatter'), tr = gd.data[0];"
                           " gd.emit('plotly_selected', {points: [0, 1].map(k => ({data: tr, pointIndex: k}))});"
                           " return [tr.customdata[0][0], tr.customdata[1][0]]; })()")
    page.wait_for("CB.networks.order.length === 2")
    assert sorted(page.evaluate("Array.from(CB.networks.order)")) == sorted(picked)
    page.evaluate("document.getElementById('scatter').emit('plotly_deselect')")
    page.wait_for(f"CB.networks.order.length === {len(table)}")

    row = page.evaluate("(() => { const tr = document.querySelectorAll('#nrows tr')[1]; tr.click();"
                        " return Number(tr.dataset.row); })()")
    page.wait_for(f"CB.state.selected && CB.state.selected.row === {row}"
                  " && document.getElementById('reliability').dataset.stages", timeout=20)
    assert page.evaluate("CB.state.selected.index") == int(table.iloc[row]["arch_index"])
    assert page.evaluate("document.getElementById('details').parentElement.id") == "tab-networks"
    page.evaluate("CB.tab('scatter')")
    assert page.evaluate("document.getElementById('details').parentElement.id") == "tab-scatter"


def test_colouring_by_a_tss_edge_gives_each_point_the_operation_of_its_arch_string(workflow_run, page):
    """Issue 37, item 3: a TSS edge's operation as the colour: one trace (and legend entry) per
    operation, each point in the trace of the operation its arch string has on that edge; the
    networks table shows the operation by name, and a where-clause selects by it."""
    from calibench.results.archstr import EDGE_NAMES, TSS_OPS, tss_edge_ops

    page.evaluate("(() => { const s = document.getElementById('table'); "
                  "s.value = CB.state.manifest.tables.find(t => t.space === 'tss').id; s.dispatchEvent(new Event('change')); })()")
    tid = page.wait_for("CB.state.scatter && CB.state.scatter.tables[0].table.startsWith('tss') && CB.state.scatter.tables[0].table")
    table = _table(workflow_run, tid)
    measured = table[(table["arch_index"] == table["measured_by"]) & np.isfinite(table["accuracy"])
                     & np.isfinite(table["pre_ece_15"])]
    distinct = {e: {tss_edge_ops(a)[k] for a in measured["arch_str"]} for k, e in enumerate(EDGE_NAMES)}
    most = max(EDGE_NAMES, key=lambda e: len(distinct[e]))  # the edge whose colours tell most apart
    for edge in dict.fromkeys([most, "3<-2"]):
        page.evaluate(f"(() => {{ const s = document.getElementById('ccol'); s.value = 'edge_{edge}';"
                      " s.dispatchEvent(new Event('change')); })()")
        page.wait_for(f"CB.state.scatter.color === 'edge_{edge}'")
        traces = page.evaluate("Array.from(document.getElementById('scatter').data, d => "
                               "({name: d.name, meta: d.meta, rows: Array.from(d.customdata, c => c[0]), legend: d.showlegend}))")
        drawn = 0
        for tr in traces:
            assert tr["meta"] == tid and tr["name"] in TSS_OPS, tr["name"]
            for row in tr["rows"]:
                assert tss_edge_ops(table.iloc[row]["arch_str"])[EDGE_NAMES.index(edge)] == tr["name"]
            drawn += len(tr["rows"])
        # one trace (and legend entry) per operation the drawn networks have on that edge
        assert sorted(t["name"] for t in traces) == sorted(distinct[edge]) and drawn == len(measured)
        assert [t["legend"] for t in traces] == [True] * len(traces)
        assert page.evaluate("document.getElementById('scatter').layout.showlegend") is True
    # the networks table: the operation by name, and "edge = operation" as a filter
    page.evaluate("CB.tab('networks')")
    page.wait_for("Array.from(document.getElementById('naddcol').options, o => o.value).includes('edge_3<-2')"
                  " || CB.networks.columns.includes('edge_3<-2')")
    page.evaluate("(() => { if (CB.networks.columns.includes('edge_3<-2')) return;"
                  " document.getElementById('naddcol').value = 'edge_3<-2'; document.getElementById('nadd').click(); })()")
    page.wait_for("CB.networks.columns.includes('edge_3<-2')")
    op = tss_edge_ops(_table(workflow_run, tid).iloc[0]["arch_str"])[5]
    page.evaluate(f"(() => {{ const e = document.getElementById('nwhere'); e.value = 'edge_3<-2 = {op}';"
                  " e.dispatchEvent(new Event('change')); })()")
    table = _table(workflow_run, tid)
    want = sum(tss_edge_ops(a)[5] == op for a in table["arch_str"])
    page.wait_for(f"CB.networks.order.length === {want}")
    k = page.evaluate("CB.networks.columns.indexOf('edge_3<-2')")
    cells = page.evaluate(f"Array.from(document.querySelectorAll('#nrows tr'), r => r.cells[{k + 2}].textContent)")
    assert cells and set(cells) == {op}
    page.evaluate("(() => { const e = document.getElementById('nwhere'); e.value = '';"
                  " e.dispatchEvent(new Event('change')); const c = document.getElementById('ccol');"
                  " c.value = CB.state.manifest.defaults[2];"
                  " c.dispatchEvent(new Event('change')); CB.tab('scatter'); })()")


@contextlib.contextmanager
def _reopened(html: Path, hash_: str):
    """The explorer page ``html`` opened afresh at the view ``hash_`` (``location.hash``), painted."""
    with render.Page(html, 1400, 1000, timeout=90) as again:
        again.evaluate(f"location.hash = {json.dumps(hash_.removeprefix('#'))}; location.reload(); 1")
        time.sleep(0.3)
        again.wait_for("typeof CB !== 'undefined' && (CB.state.painted || CB.state.errors.length)", timeout=60)
        yield again


def test_reopening_a_views_url_restores_its_table_columns_filter_sort_tab_and_network(workflow_run, page):
    """Issue 37, item 6: every view is a URL. A view made by hand (a table, a colour, the networks
    tab with a column added, a where-clause, a sort, a network clicked) is read back from
    ``location.hash`` in a fresh browser: the same table, columns, filter, order, tab and network."""
    def change(element, value):
        page.evaluate(f"(() => {{ const e = document.getElementById('{element}'); e.value = {json.dumps(value)};"
                      " e.dispatchEvent(new Event('change')); })()")

    sss = page.evaluate("CB.state.manifest.tables.find(t => t.space === 'sss').id")
    change("table", sss)
    page.wait_for(f"CB.state.scatter && CB.state.scatter.tables[0].table === '{sss}'")
    change("ccol", "channels_1")
    page.wait_for("CB.state.scatter.color === 'channels_1'")
    page.evaluate("CB.tab('networks')")
    page.wait_for(f"CB.networks.table === '{sss}'")
    page.evaluate("(() => { document.getElementById('naddcol').value = 'pre_nll'; document.getElementById('nadd').click(); })()")
    page.wait_for("CB.networks.columns.includes('pre_nll')")
    change("nwhere", "accuracy > 0")
    page.wait_for("document.getElementById('ncount').textContent.includes('where accuracy > 0')")
    page.evaluate("document.querySelector('#nhead td[data-col=\"pre_nll\"]').click()")
    page.wait_for("CB.networks.sort && CB.networks.sort.column === 'pre_nll'")
    page.evaluate("document.querySelector('#nrows tr:nth-child(2)').click()")
    page.wait_for("CB.state.selected && document.getElementById('reliability').dataset.stages")
    view = page.evaluate("({hash: location.hash, columns: CB.networks.columns, order: Array.from(CB.networks.order),"
                         " sort: CB.networks.sort, selected: CB.state.selected.index, where: document.getElementById('nwhere').value,"
                         " colour: CB.state.scatter.color, table: CB.state.scatter.tables[0].table})")
    assert "tab=networks" in view["hash"] and f"n={sss}" in view["hash"], view["hash"]
    with _reopened(layout.explorer_page(workflow_run / "results"), view["hash"]) as again:
        again.wait_for(f"CB.state.selected && CB.state.selected.index === {view['selected']}", timeout=30)
        reopened = again.evaluate(
            "({columns: CB.networks.columns, order: Array.from(CB.networks.order), sort: CB.networks.sort,"
            " selected: CB.state.selected.index, where: document.getElementById('nwhere').value,"
            " colour: CB.state.scatter.color, table: CB.state.scatter.tables[0].table,"
            " networksShown: !document.getElementById('tab-networks').classList.contains('hidden'), errors: CB.state.errors})")
    assert reopened.pop("errors") == [] and reopened.pop("networksShown")
    assert reopened == {k: view[k] for k in reopened}, (reopened, view)
    page.evaluate("(() => { history.replaceState(null, '', '#'); const e = document.getElementById('nwhere'); e.value = '';"
                  " e.dispatchEvent(new Event('change')); const t = document.getElementById('table'); t.selectedIndex = 0;"
                  " t.dispatchEvent(new Event('change')); CB.tab('scatter'); })()")


# the RGBA of the scatter's selection canvas at CSS pixels [[x, y], ...] (called with the list)
_OVERLAY_PIXELS = ("(at => { const c = document.getElementById('scattermarks'), r = window.devicePixelRatio || 1;"
                   " const g = c.getContext('2d'); return at.map(([x, y]) =>"
                   " Array.from(g.getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data)); })")


def test_brushes_on_the_parallel_coordinates_select_what_pandas_selects_everywhere(workflow_run, page):
    """Issue 37, item 1: a brush on accuracy > x and one on pre_ece_15 < y (set as a drag sets them,
    at exact cuts) select exactly the networks pandas selects from the table: the count shown, the
    networks table and the scatter's bright points; the view's URL reopens with the same brushes
    and selection; clearing restores every network."""
    t = page.evaluate("document.getElementById('table').value")
    table = _table(workflow_run, t)
    axes = page.evaluate("CB.linked.axes")
    assert axes[:3] == ["accuracy", "params", "flops"]
    finite = np.ones(len(table), bool)
    for name in axes:  # the table's columns; the HCS columns (from hcs.parquet) as the page holds them
        values = table[name] if name in table else page.evaluate(
            f"CB.column(CB.state.manifest.tables.find(u => u.id === '{t}'), '{name}').then(v => Array.from(v))")
        finite &= np.isfinite(np.asarray(values, float))
    drawn = table[(table["arch_index"] == table["measured_by"]) & finite]
    assert sorted(page.evaluate("CB.linked.rows")) == sorted(np.flatnonzero(table.index.isin(drawn.index)))
    lines = page.evaluate("CB.linked.values")
    assert _close(lines[0], table.iloc[page.evaluate("CB.linked.rows")]["accuracy"])  # a line per network, its values
    cut_acc = _widest_gap_cut(table["accuracy"])
    high = table["accuracy"] > cut_acc
    cut_ece = _widest_gap_cut(table.loc[high, "pre_ece_15"])
    cut_ece = cut_ece if cut_ece is not None else float(table.loc[high, "pre_ece_15"].max()) * 2
    want = table[high & (table["pre_ece_15"] < cut_ece)]
    assert 0 < len(want) < len(table)
    page.evaluate(f"CB.linked.brush({{accuracy: [[{cut_acc}, 1e9]], pre_ece_15: [[-1e9, {cut_ece}]]}}).then(() => 1)")
    page.wait_for(f"CB.linked.count === {len(want)}")
    assert page.evaluate("document.getElementById('pcount').textContent").startswith(
        f"{len(want)} of {len(table)} networks selected (accuracy in [")
    rows = set(np.flatnonzero(table.index.isin(want.index)).tolist())
    assert set(page.evaluate("Array.from(CB.networks.selection.rows)")) == rows
    scatter = page.evaluate("(() => { const d = document.getElementById('scatter').data[0], m = CB.linked.marks;"
                            " return {rows: d.customdata.map(c => c[0]), curves: m.map(k => k.curve), picked: m[0].points}; })()")
    assert scatter["curves"] == [0]
    measured = want[want["arch_index"] == want["measured_by"]]  # a copy is drawn as its representative's point
    assert sorted(scatter["rows"][j] for j in scatter["picked"]) == sorted(
        r for r in rows if r in set(np.flatnonzero(table.index.isin(measured.index))) and r in set(scatter["rows"]))
    page.evaluate("CB.tab('networks')")
    page.wait_for(f"CB.networks.order.length === {len(want)}")
    assert sorted(page.evaluate("Array.from(CB.networks.order)")) == sorted(rows)
    assert page.evaluate("document.getElementById('parcoords').closest('section').id") == "tab-networks"

    hash_ = page.evaluate("location.hash")
    view = parse_qs(hash_[1:])
    assert view["b"][0].startswith("accuracy:") and view["pa"][0].startswith("accuracy,"), hash_
    with _reopened(layout.explorer_page(workflow_run / "results"), hash_) as again:
        again.wait_for(f"CB.linked.count === {len(want)} && CB.networks.order.length === {len(want)}", timeout=30)
        assert again.evaluate("CB.state.errors") == []
        assert sorted(again.evaluate("Array.from(CB.networks.order)")) == sorted(rows)

    # brushed on the networks tab (the scatter hidden): the scatter shows the selection once shown
    corner = page.evaluate("(() => { const l = document.getElementById('scatter')._fullLayout;"
                           " return [l.xaxis._offset + 2, l.yaxis._offset + 2]; })()")
    page.evaluate(f"CB.linked.brush({{accuracy: [[{cut_acc}, 1e9]]}}).then(() => 1)")
    page.evaluate("CB.tab('scatter')")
    veil = page.evaluate(_OVERLAY_PIXELS + f"([{json.dumps(corner)}])")[0]
    assert veil[:3] == [255, 255, 255] and 190 <= veil[3] <= 215, veil
    page.evaluate("CB.tab('networks')")
    page.evaluate("document.getElementById('pclear').click()")
    page.wait_for(f"CB.linked.count === null && CB.networks.order.length === {len(table)}")
    assert page.evaluate("CB.linked.marks") is None
    assert "b" not in parse_qs(page.evaluate("location.hash")[1:])
    page.evaluate("(() => { history.replaceState(null, '', '#'); CB.tab('scatter'); })()")
    assert page.evaluate(_OVERLAY_PIXELS + f"([{json.dumps(corner)}])") == [[0, 0, 0, 0]]  # the veil lifted


def _drag(page, x, y0, y1, shift=False):
    """A drag with the mouse from (x, y0) to (x, y1), as a user draws it (press, moves, release)."""
    modifiers = 8 if shift else 0
    page.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x, "y": y0, "button": "left", "buttons": 1,
                                           "clickCount": 1, "modifiers": modifiers})
    for step in range(1, 6):
        page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y0 + (y1 - y0) * step / 5,
                                               "button": "left", "buttons": 1, "modifiers": modifiers})
    page.send("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x, "y": y1, "button": "left", "clickCount": 1,
                                           "modifiers": modifiers})


def test_a_brush_drawn_with_the_mouse_selects_the_values_under_it_and_the_scatter_shows_them(workflow_run, page):
    """A drag along the accuracy axis brushes the range of values under it (the axis's scale read
    from its ticks); the selection is every network whose page value lies in it; a shift-drag adds
    a second range, a click on a range removes it; dragging an axis's name reorders the axes. The
    scatter's selection canvas veils its panel and draws each selected point in its own colour."""
    t = page.evaluate("document.getElementById('table').value")
    page.wait_for("document.querySelectorAll('#parcoords .axis-brush rect').length === CB.linked.axes.length")
    axis = page.evaluate("CB.linked.axes").index("accuracy")
    box = page.evaluate(f"(() => {{ const r = document.querySelectorAll('#parcoords .axis-brush rect')[{axis}]"
                        ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + 4, r.y + r.height - 4]; })()")
    x, top, bottom = box
    (v0, v1), (y_0, y_1) = page.evaluate(f"""(() => {{ const g = document.querySelectorAll('#parcoords g.axis')[{axis}],
        r = g.querySelector('line').getBoundingClientRect(); return [g.dataset.range.split(',').map(Number),
        [r.y + r.height, r.y]]; }})()""")  # the axis's range, drawn from its line's bottom to its top
    value_at = lambda y: v0 + (y - y_0) * (v1 - v0) / (y_1 - y_0)
    accuracy = np.asarray(page.evaluate(f"CB.column(CB.state.manifest.tables.find(u => u.id === '{t}'), 'accuracy')"
                                        ".then(v => Array.from(v))"), float)
    measured = np.asarray(page.evaluate(f"CB.rows(CB.state.manifest.tables.find(u => u.id === '{t}'))"
                                        ".then(r => Array.from(r.isRep))"), bool)
    y_of = lambda v: y_0 + (v - v0) * (y_1 - y_0) / (v1 - v0)
    drawn = np.unique(page.evaluate(f"CB.linked.values[{axis}]"))  # the lines' accuracies: the axis's range
    assert len(drawn) >= 2
    ya, yb = y_of(drawn[-1]) + 0.25 * (top - y_of(drawn[-1])), y_of((drawn[0] + drawn[-1]) / 2)  # the upper half
    _drag(page, x, ya, yb)
    page.wait_for("CB.linked.count !== null")
    (lo, hi), = page.evaluate("CB.linked.brushes.accuracy")
    scale = abs(v1 - v0) / abs(y_1 - y_0)  # data units per pixel
    assert abs(hi - value_at(ya)) < scale and abs(lo - value_at(yb)) < scale
    inside = (accuracy >= lo) & (accuracy <= hi)
    assert 0 < page.evaluate("CB.linked.count") == int(inside.sum()) < measured.sum()
    assert set(page.evaluate("Array.from(CB.networks.selection.rows)")) == set(np.flatnonzero(inside).tolist())
    # the scatter: its panel veiled, each bright point drawn again in its own colour above the veil
    marks = page.evaluate("CB.linked.marks")
    curve = page.evaluate("(() => { const gd = document.getElementById('scatter'), d = gd.data[0],"
                          " xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis; return {rows: d.customdata.map(c => c[0]),"
                          " xy: d.x.map((v, j) => [xa._offset + xa.l2p(v), ya._offset + ya.l2p(d.y[j])]),"
                          " corner: [xa._offset + 2, ya._offset + 2]}; })()")
    bright = marks[0]["points"]
    assert sorted(curve["rows"][j] for j in bright) == sorted(r for r in curve["rows"] if inside[r] and measured[r])
    corner, point = page.evaluate(_OVERLAY_PIXELS + f"({json.dumps([curve['corner'], curve['xy'][bright[0]]])})")
    assert corner[:3] == [255, 255, 255] and 190 <= corner[3] <= 215  # the veil: white at 0.8
    assert point[3] > 215 and point[:3] != [255, 255, 255]  # a selected point above it, opaque and coloured
    # shift adds a range; a click on a range takes it off
    page.evaluate("CB.linked.updated = null; 1")
    _drag(page, x, yb + 6, bottom, shift=True)
    page.wait_for("CB.linked.updated !== null")
    ranges = page.evaluate("CB.linked.brushes.accuracy")
    assert len(ranges) == 2 and ranges[0] == [lo, hi]
    either = inside | ((accuracy >= ranges[1][0]) & (accuracy <= ranges[1][1]))
    assert page.evaluate("CB.linked.count") == int(either.sum())
    assert "accuracy in [" in page.evaluate("document.getElementById('pcount').textContent")
    page.evaluate("CB.linked.updated = null; 1")
    _drag(page, x, (ya + yb) / 2, (ya + yb) / 2)  # a click inside the first range
    page.wait_for("CB.linked.updated !== null")
    assert page.evaluate("CB.linked.brushes.accuracy") == [ranges[1]]
    # an axis's name dragged onto the last axis moves it there
    names = page.evaluate("CB.linked.axes")
    title, last = page.evaluate("(() => { const a = document.querySelectorAll('#parcoords .axis-title'), r = a[0]"
                                ".getBoundingClientRect(), s = a[a.length - 1].getBoundingClientRect();"
                                " return [[r.x + 6, r.y + r.height / 2], [s.x + 2, s.y + s.height / 2]]; })()")
    page.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": title[0], "y": title[1], "button": "left",
                                           "buttons": 1, "clickCount": 1})
    page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": last[0], "y": last[1], "button": "left", "buttons": 1})
    page.send("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": last[0], "y": last[1], "button": "left",
                                           "clickCount": 1})
    page.wait_for(f"CB.linked.axes[CB.linked.axes.length - 1] === {json.dumps(names[0])}")
    assert page.evaluate("CB.linked.axes") == names[1:] + names[:1]
    assert "pa=" + names[1] in page.evaluate("location.hash")
    page.evaluate("document.getElementById('pclear').click()")
    page.wait_for("CB.linked.count === null")
    page.evaluate(f"(() => {{ history.replaceState(null, '', '#'); const e = document.getElementById('paxes');"
                  f" e.value = {json.dumps(', '.join(names))}; e.dispatchEvent(new Event('change')); return 1; }})()")
    page.wait_for(f"JSON.stringify(CB.linked.axes) === {json.dumps(json.dumps(names, separators=(',', ':')))}")


def test_the_parallel_coordinates_sample_of_a_large_table_is_seeded_and_drawn_from_its_rows(page):
    """Over 2,000 lines (a brush strokes every line again: 32,768 take 0.4-0.6 s on a CPU) the plot
    draws a seeded sample: the same rows every time, distinct, in order, all from the rows given;
    fewer are drawn whole."""
    rows = list(range(0, 30000, 3))
    first = page.evaluate(f"CB.sampleRows({rows}, 2000)")
    assert first == page.evaluate(f"CB.sampleRows({rows}, 2000)") and len(first) == len(set(first)) == 2000
    assert first == sorted(first) and set(first) <= set(rows)
    assert 0.4 < np.mean(np.asarray(first) < 15000) < 0.6  # spread over the rows, not their start
    assert page.evaluate("CB.sampleRows([5, 7, 9], 2000)") == [5, 7, 9]


def _decode_reliability(data: bytes) -> dict:
    """The binary reliability block as explorer.py's docstring defines it (an independent reader)."""
    import struct

    assert data[:4] == b"CBR2"
    width, n_names = data[4], data[5]
    o, names = 6, []
    for _ in range(n_names):
        names.append(data[o + 1:o + 1 + data[o]].decode("ascii"))
        o += 1 + data[o]
    (networks,), o = struct.unpack_from("<I", data, o), o + 4
    heads = []
    for _ in range(networks):
        row, mask = struct.unpack_from("<iH", data, o)
        o += 6
        stages = []
        for k, name in enumerate(names):
            if mask >> k & 1:
                stages.append((name, struct.unpack_from("<H", data, o)[0]))
                o += 2
        heads.append((row, stages))
    total = sum(b for _, stages in heads for _, b in stages)

    def numbers(start):  # width byte planes, the low bytes first
        return [sum(data[start + j * total + t] << (8 * j) for j in range(width)) for t in range(total)]

    counts, zigzag = numbers(o), numbers(o + width * total)
    q = data[o + 2 * width * total:]
    assert len(q) == total
    out, t = {}, 0
    for row, stages in heads:
        out[row] = {}
        for name, b in stages:
            count, conf, correct = [], [], []
            for i in range(b):
                c, z = counts[t], zigzag[t]
                expected = (c * (255 * i + q[t]) * 2 + 255 * b) // (510 * b)  # round(c (255 i + q) / (255 b)), half up
                count.append(c)
                correct.append(expected + (z // 2 if z % 2 == 0 else -(z + 1) // 2))
                conf.append((i + q[t] / 255) / b if c else None)
                t += 1
            out[row][name] = (count, conf, correct)
    return out


def test_reliability_bins_in_binary_decode_to_the_bins_exactly_and_within_the_stated_precision():
    """Issue 37, item 7: counts and correct counts exact (uint16, uint32 past 65,535), each bin's
    mean confidence within 1/(510 B) of its value, empty bins without one, absent stages absent."""
    rng = np.random.default_rng(3)

    def bins(b, n, big=1):
        conf = rng.uniform(0, 1, n)
        idx = np.minimum((conf * b).astype(int), b - 1)
        count = np.bincount(idx, minlength=b) * big
        mean = np.array([conf[idx == i].mean() if (idx == i).any() else np.nan for i in range(b)])
        correct = np.array([int((rng.uniform(size=c) < 0.7).sum()) for c in count])
        return count, mean, correct

    block = {0: {"pre": bins(15, 500), "ts": bins(15, 40)}, 7: {"pre": bins(10, 9)}, 255: {"dir": bins(20, 3000)}}
    for big in (1, 1000):  # 1000: counts past 65,535 take four bytes
        if big > 1:
            block = {3: {"pre": bins(15, 2000, big)}}
        data = explorer.encode_reliability_block(block)
        assert data[4] == (4 if big > 1 else 2)
        back = _decode_reliability(data)
        assert set(back) == set(block)
        for row, stages in block.items():
            assert set(back[row]) == set(stages)
            for stage, (count, mean, correct) in stages.items():
                got_count, got_conf, got_correct = back[row][stage]
                assert got_count == list(count) and got_correct == list(correct)
                b = len(count)
                for i in range(b):
                    if count[i]:
                        assert abs(got_conf[i] - mean[i]) <= 1 / (510 * b) + 1e-12
                    else:
                        assert got_conf[i] is None
    with pytest.raises(ValueError, match="17 stages"):
        explorer.encode_reliability_block({0: {f"s{k:02d}": bins(5, 10) for k in range(17)}})


def test_the_pages_reliability_bins_are_the_shards(workflow_run, page):
    """Every reliability file the explorer wrote decodes (in Python and in the page alike) to the
    bins of the shards: counts and correct counts exact, confidences within 1/(510 B)."""
    import gzip
    from calibench.layout import shard_path
    from calibench.results.shards import read_reliability

    checked = 0
    for t in page.evaluate("CB.state.manifest.tables"):
        table = _table(workflow_run, t["id"])
        measured = table[table["arch_index"] == table["measured_by"]].reset_index(drop=True)
        for b in t["rel_blocks"]:
            text = (workflow_run / "results" / "explorer" / "data" / t["id"] / f"rel{b}.js").read_bytes()
            m = re.fullmatch(rb'CB\.rel\("[^"]+",\d+,(\d+),"(.*)"\);\n', text, flags=re.S)
            data = gzip.decompress(_unescape_js(m.group(2)))
            back = _decode_reliability(data)
            in_page = page.evaluate(f"CB.decodeReliability(new Uint8Array({list(data)}), 'test')")
            assert {int(k): {s: [list(c), list(f), list(k2)] for s, (c, f, k2) in v.items()} for k, v in in_page.items()} \
                == {k: {s: [list(c), list(f), list(k2)] for s, (c, f, k2) in v.items()} for k, v in back.items()}
            for row, stages in back.items():
                net = measured.iloc[row]
                shard = shard_path(workflow_run / "results", net["space"], net["hp"], net["dataset"],
                                   int(net["arch_index"]))
                want = read_reliability(shard)[int(net["seed"])]
                assert set(stages) == {s for s, v in want.items() if np.nansum(v["count"]) > 0}
                for stage, (count, conf, correct) in stages.items():
                    w = want[stage]
                    assert count == [int(c) for c in w["count"]]
                    assert correct == [int(round(a * c)) if c else 0 for a, c in zip(np.nan_to_num(w["accuracy"]), count)]
                    ok = [c is None if n == 0 else abs(c - x) <= 1 / (510 * len(count)) + 1e-12
                          for c, x, n in zip(conf, w["confidence"], count)]
                    assert all(ok), (stage, conf, list(w["confidence"]))
                    checked += 1
    assert checked > 0


def test_the_column_lists_group_each_stages_metric_over_its_bin_counts_and_filter_by_name_parts(workflow_run, page):
    """Issue 37, item 5: the lists group a stage's metric over its bin counts ("pre · ece by bins"
    holds pre_ece_<bins> for every bin count of the run), a stage's unbinned metrics apart; the
    filter's stage:, metric: and bins: words name exactly."""
    def groups(select):
        return page.evaluate(f"Object.fromEntries(Array.from(document.querySelectorAll('#{select} optgroup'),"
                             " g => [g.label, Array.from(g.children, o => o.value)]))")

    t = page.evaluate("CB.state.manifest.tables.find(u => u.id === document.getElementById('table').value)")
    # explorer_bins: auto keeps 5, 15, 100 and 500 where measured: the run's 5 and 15, not its 50
    assert t["bins"] == [5, 15] and t["table_bins"] == WORKFLOW_TINY["bins"] == [5, 15, 50]
    assert not any(c["name"].endswith("_50") for c in t["columns"])
    assert page.evaluate("document.getElementById('binsnote').textContent").startswith(
        "binned metrics at 5, 15 bins here; at 50 too in the table")
    listed = groups("ycol")
    assert listed["pre · ece by bins"] == [f"pre_ece_{b}" for b in t["bins"]]
    assert "pre_nll" in listed["pre · unbinned"] and "pre_accuracy" in listed["pre · unbinned"]
    assert all(not re.search(r"_\d+$", n) for n in listed["pre · unbinned"])
    assert "accuracy" in listed["network"]
    page.evaluate("(() => { const f = document.getElementById('colfilter'); f.value = 'stage:pre metric:ece bins:15';"
                  " f.dispatchEvent(new Event('input')); })()")
    shown = page.evaluate("Array.from(document.getElementById('ycol').options, o => o.value)")
    assert set(shown) - {page.evaluate("document.getElementById('ycol').value")} <= {"pre_ece_15"} and "pre_ece_15" in shown
    page.evaluate("(() => { const f = document.getElementById('colfilter'); f.value = '';"
                  " f.dispatchEvent(new Event('input')); })()")


def test_the_bin_counts_in_the_page_follow_explorer_bins_and_a_wrong_one_is_named(workflow_run, tmp_path):
    """explorer_bins: auto keeps 5, 15, 100, 500 where measured (all if none is); all, or a list,
    as asked; a bin count the run does not measure stops the workflow naming the key, and
    `calibench explore --bins` one no table has exits 2 in one line."""
    import shutil
    import subprocess
    import sys

    from calibench.config.settings import explorer_bins

    run = {"bins": [5, 10, 15, 20, 25, 50, 100, 200, 500]}
    assert explorer_bins(run) == explorer_bins({**run, "explorer_bins": "auto"}) == [5, 15, 100, 500]
    assert explorer_bins({"bins": [7, 9]}) == "all" and explorer_bins({**run, "explorer_bins": "all"}) == "all"
    assert explorer_bins({**run, "explorer_bins": [200, 10]}) == [10, 200]
    with pytest.raises(ValueError, match=r"^explorer_bins: \[150\] not among the bin counts the run measures"):
        explorer_bins({**run, "explorer_bins": [15, 150]})
    results = tmp_path / "results"
    shutil.copytree(workflow_run / "results" / "tables", results / "tables")

    def explore(*args):
        return subprocess.run([sys.executable, "-m", "calibench", "explore", "--results", str(results), *args],
                              capture_output=True, text=True, timeout=300)

    def page_bins():
        text = (results / "explorer" / "data" / "manifest.js").read_text()
        manifest = json.loads(text[text.index("{"):text.rindex("}") + 1])
        return {t["id"]: (t["bins"], sorted({int(c["name"].rsplit("_", 1)[1]) for c in t["columns"]
                                             if re.fullmatch(r"pre_ece_\d+", c["name"])})) for t in manifest["tables"]}

    for bins, want in (("all", [5, 15, 50]), ([50], [50])):  # as the CLI's --bins passes them
        explorer.write_explorer(results, bins=bins)
        assert set(map(str, page_bins().values())) == {str((want, want))}
    assert explore("--bins", "5,50").returncode == 0
    assert set(map(str, page_bins().values())) == {str(([5, 50], [5, 50]))}
    for wrong, said in (("150,5", "bins [150]: no table has binned metrics at that bin count (they have 5, 15, 50)"),
                        ("5,x", "--bins x: not a bin count"), ("all,5", "--bins takes bin counts (5,15,100), or all")):
        proc = explore("--bins", wrong)
        said_lines = [line for line in proc.stderr.splitlines() if not line[:4].isdigit()]  # less the log's lines
        assert proc.returncode == 2 and len(said_lines) == 1 and said_lines[0].startswith(f"calibench explore: {said}"), \
            proc.stderr
    assert set(map(str, page_bins().values())) == {str(([5, 50], [5, 50]))}  # the failed runs left the page as it was


# ---------------------------------------------------------------- two runs (issue 37, item 4)

def _perturbed_copy(results: Path, root: Path, table: str, rng) -> dict:
    """Run B: the run's tables, with ``table``'s post_ece_15 moved for one network, NaN for
    another, one network dropped, and every table's config_hash changed (a setting)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from calibench import layout
    from calibench.results.tables import METADATA_KEY

    changed = {}
    for path in layout.result_tables(results):
        frame = pd.read_parquet(path)
        frame["config_hash"] = "another-hash"
        if path.stem == table:
            measured = frame.index[frame["arch_index"] == frame["measured_by"]]
            moved, missing, dropped = measured[0], measured[1], measured[-1]
            frame.loc[moved, "post_ece_15"] += rng.uniform(1e-4, 1e-3)
            frame.loc[missing, "post_ece_15"] = np.nan
            changed = {"moved": int(frame.at[moved, "arch_index"]), "missing": int(frame.at[missing, "arch_index"]),
                       "dropped": frame.loc[dropped, ["nats_index", "seed"]].astype(int).tolist()}
            frame = frame.drop(index=dropped)
        arrow = pa.Table.from_pandas(frame, preserve_index=False)
        target = layout.table_path(root, *path.stem.rsplit("_", 1))
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(arrow.replace_schema_metadata({**arrow.schema.metadata,
                                                     METADATA_KEY: pq.read_schema(path).metadata[METADATA_KEY]}), target)
    return changed


def test_two_runs_side_by_side_show_compares_differences_network_by_network(workflow_run, tmp_path, rng, capsys):
    """Issue 37, item 4: `calibench explore RUN_A --compare RUN_B` against a copy with one perturbed
    column: the column that differs is offered, each network's B - A is the difference pandas
    computes for it (matched by network and seed), the figures are calibench compare's, and the
    networks of one run only and the settings that differ are named."""
    from calibench import layout
    from calibench.analysis.compare import compare_runs
    from calibench.run.cli import main as cli_main

    results, table = workflow_run / "results", "sss_90_cifar100"
    changed = _perturbed_copy(results, tmp_path / "b", table, rng)
    assert cli_main(["explore", str(results), "--out", str(tmp_path / "x")]) == 2  # --out goes with --compare
    assert "--compare" in capsys.readouterr().err
    assert cli_main(["explore", str(tmp_path / "nowhere"), "--compare", str(tmp_path / "b")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such file or directory" in capsys.readouterr().err
    assert cli_main(["explore", str(results), "--compare", str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    assert not (results / "explorer" / "data.tmp").exists()  # the run's own explorer is not where it goes
    html = layout.explorer_page(tmp_path / "cmp")
    stats = compare_runs(results, tmp_path / "b").csv_frame().set_index(["table", "column"]).loc[(table, "post_ece_15")]
    a, b = _table(workflow_run, table), pd.read_parquet(layout.table_path(tmp_path / "b", "sss_90", "cifar100"))
    both = a.merge(b, on=["nats_index", "seed"], suffixes=("", "_b"))
    want = dict(zip(both["arch_index"], both["post_ece_15_b"] - both["post_ece_15"]))
    try:
        with render.Page(html, 1400, 1000, timeout=90) as p:
            p.wait_for("CB.state.painted || CB.state.errors.length", timeout=60)
            p.evaluate(f"(() => {{ const t = document.getElementById('table'); t.value = '{table}'; "
                       "t.dispatchEvent(new Event('change')); })()")
            p.wait_for(f"CB.state.scatter.tables[0].table === '{table}' && !CB.state.drawing")
            offered = p.evaluate("Array.from(document.getElementById('cmpcol').options, o => o.value).filter(Boolean)")
            assert offered == ["post_ece_15"]  # config_hash differs too, but it is a setting, not plotted
            p.evaluate("(() => { const s = document.getElementById('cmpcol'); s.value = 'post_ece_15'; "
                       "s.dispatchEvent(new Event('change')); })()")
            p.wait_for("CB.state.scatter.y === 'post_ece_15 [B]' && !CB.state.drawing")
            trace = p.evaluate("(() => { const d = document.getElementById('scatter').data[0]; return {x: Array.from(d.x),"
                               " y: Array.from(d.y), d: Array.from(d.marker.color), rows: d.customdata.map(c => c[0])}; })()")
            texts = {k: p.evaluate(f"document.getElementById('{k}').textContent") for k in ("cmpnote", "cmptable", "cmphead")}
            p.evaluate("CB.tab('networks')")  # the networks table: the two columns beside run A's, and where-clauses on them
            p.evaluate("(() => { const w = document.getElementById('nwhere'); w.value = 'post_ece_15 [B-A] > 0'; "
                       "w.dispatchEvent(new Event('change')); })()")
            p.wait_for("CB.networks.notes.startsWith('where post_ece_15 [B-A]')")
            listed = p.evaluate("Array.from(CB.networks.order, i => CB.state.tables[CB.networks.table].index[i])")
            shown = p.evaluate("CB.networks.columns")
            assert p.evaluate("CB.state.errors") == [] and p.evaluate("CB.state.scatter.color") == "post_ece_15 [B-A]"
            view = p.evaluate("location.hash")
        with _reopened(html, view) as p:  # the view's URL reopens the same two columns
            assert (p.evaluate("CB.state.scatter.y"), p.evaluate("CB.state.scatter.color")) == (
                "post_ece_15 [B]", "post_ece_15 [B-A]")
    except render.BrowserNotFound as exc:
        pytest.skip(str(exc))
    drawn = a.iloc[trace["rows"]]["arch_index"].tolist()
    # drawn: the networks in both runs with a value on each side (not the NaN one, not the dropped one)
    assert sorted(drawn) == sorted(i for i, d in want.items() if np.isfinite(d)) and changed["missing"] not in drawn
    got = np.array(trace["d"])
    expected = np.array([want[i] for i in drawn])
    assert np.all(np.abs(got - expected) <= 2.0 ** -9 * np.abs(expected)), (got, expected)  # the difference's own 3 digits
    assert _close(trace["x"], a.iloc[trace["rows"]]["post_ece_15"])
    assert _close(trace["y"], [a.loc[a["arch_index"] == i, "post_ece_15"].iloc[0] + want[i] for i in drawn])
    assert abs(np.max(np.abs(got)) - stats["max_abs_diff"]) <= 2.0 ** -9 * stats["max_abs_diff"]
    assert np.count_nonzero(got) + stats["n_nan_mismatch"] == stats["n_differ"] == 2  # the moved one and the NaN one
    assert f"{int(stats['n_differ'])} of {int(stats['n_both'])} networks differ (1 NaN on one side only)" in texts["cmpnote"]
    assert f"only in A (1): {changed['dropped'][0]}/{changed['dropped'][1]}" in texts["cmptable"]
    assert "verdict: DIFFERENT" in texts["cmphead"] and "setting" in texts["cmphead"]
    assert {"post_ece_15", "post_ece_15 [B]", "post_ece_15 [B-A]"} <= set(shown)
    assert listed == [changed["moved"]]  # the one network moved up, the NaN one and the dropped one not


def test_an_explorer_written_again_by_hand_keeps_the_runs_demo_banner_and_min_networks(workflow_run, tmp_path):
    """`calibench explore` over a run's own explorer (written by the workflow from its config) keeps its
    mini-benchmark banner and ``analysis.min_networks``; a run without an explorer gets neither
    unless asked (``--demo``)."""
    import shutil
    import subprocess
    import sys

    from calibench.config.check import schema_default

    def manifest(results):
        text = (results / "explorer" / "data" / "manifest.js").read_text()
        return json.loads(text[text.index("{"):text.rindex("}") + 1])

    ran = manifest(workflow_run / "results")
    assert ran["demo"] is True  # the mini benchmark's run
    results = tmp_path / "results"
    shutil.copytree(workflow_run / "results" / "tables", results / "tables")
    explorer.write_explorer(results)  # nothing to keep: no banner, the schema's min_networks
    fresh = manifest(results)
    assert fresh["demo"] is False and fresh["min_networks"] == schema_default("analysis", "min_networks")
    kept = dict(ran, demo=True, min_networks=fresh["min_networks"] + 7)
    (results / "explorer" / "data" / "manifest.js").write_text(f"CB.manifest({json.dumps(kept)});\n")
    proc = subprocess.run([sys.executable, "-m", "calibench", "explore", "--results", str(results)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    again = manifest(results)
    assert again["demo"] is True and again["min_networks"] == fresh["min_networks"] + 7
    shutil.rmtree(results / "explorer")
    explorer.write_explorer(results, demo=True)
    assert manifest(results)["demo"] is True


def test_the_explorers_checksums_list_only_its_own_files_not_one_set_aside_beside_them(workflow_run, tmp_path):
    """A page set aside by the repair check (``index.html.changed``, removed once its rebuild passes)
    was listed in the rebuilt explorer's SHA256SUMS; removed, it was missing at the next run's check,
    which set the page aside again: every `calibench run` rebuilt the explorer."""
    import shutil

    from calibench import integrity
    from calibench.run import repair

    results = tmp_path / "results"
    shutil.copytree(workflow_run / "results" / "tables", results / "tables")
    explorer.write_explorer(results)
    root = layout.explorer_dir(results)
    stray = root / f"index.html{repair.SET_ASIDE}"
    shutil.copy(root / "index.html", stray)
    explorer.write_explorer(results)
    sums = layout.explorer_sums(results)
    listed = [line.split("  ", 1)[1] for line in sums.read_text().splitlines()]
    assert "index.html" in listed and "plotly.min.js" in listed and "data/manifest.js" in listed
    assert not any(name.endswith(repair.SET_ASIDE) for name in listed), listed
    assert repair.clear_rebuilt(results) == [stray]  # the rebuild passes: the set-aside copy goes
    assert integrity.check_sums(sums) is None  # and the page still passes its check
