"""`calibench explore` on the full population: write time, peak memory, size on disk, and the
first paint of one SSS table's scatter (32,768 points) in a headless Chromium (issue 26).

The tables are those of ``bench/bench_analysis.py`` (six synthetic tables of a real NATS-Bench
run's shape: 145,179 rows, 117,702 measured networks, ~650 columns; ``kendall.parquet`` and
``hcs.parquet`` from its analysis run; reliability bins in the shards of the best and worst
network of each table). Build them first:

    python bench/bench_analysis.py --dir /tmp/calibench-bench-analysis-s1
    python bench/bench_explorer.py --dir /tmp/calibench-bench-analysis-s1

The explorer is written by ``calibench explore`` in its own process (wall time and peak RSS
from ``os.wait4``), then the page is opened ``--repeats`` times in a fresh browser with the
largest SSS table selected (``#t=...``); "first paint" is the time from navigation until the
page has drawn the scatter (``CB.state.painted``, a frame after Plotly's promise resolved).
Then one change of the y column (load, decode and redraw one column of 32,768 values), one
change of the colour to a categorical column (``--ccol``: a trace per category), ten brushes on
the parallel coordinates' accuracy axis (issue 37, item 1: selection counted and marked on the
scatter), the networks tab with every row, three sorts, and ten brushes again with the table shown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def du(path: Path) -> tuple[int, int]:
    """Bytes of the files under ``path`` and their number."""
    sizes = [p.stat().st_size for p in path.rglob("*") if p.is_file()]
    return sum(sizes), len(sizes)


def write(results: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "calibench", "explore", "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read()
    if status != 0:
        sys.exit(f"calibench explore failed:\n{out[-3000:]}")
    return wall, usage.ru_maxrss / 1024


def paint(page: Path, table: str, ycol: str, ccol: str) -> tuple[float, float, int, float, int]:
    from calibench.report.screenshot import Page

    with Page(Path(f"{page}"), 1400, 1000, timeout=120) as p:
        p.evaluate(f"location.hash = 't={table}'; location.reload(); 1")
        time.sleep(0.2)
        p.wait_for("typeof CB !== 'undefined' && (CB.state.painted || CB.state.errors.length)", timeout=120)
        errors = p.evaluate("CB.state.errors")
        if errors:
            sys.exit(f"the page failed: {errors}")
        first = p.evaluate("CB.state.painted") / 1000.0  # ms since navigation started
        parts = p.evaluate("CB.state.firstPaint")
        points = p.evaluate("document.getElementById('scatter').data[0].x.length")
        start = time.perf_counter()
        p.evaluate(f"(() => {{ const s = document.getElementById('ycol'); s.value = '{ycol}'; "
                   "s.dispatchEvent(new Event('change')); })()")
        p.wait_for(f"CB.state.scatter && CB.state.scatter.y === '{ycol}' && !CB.state.drawing", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        change = time.perf_counter() - start
        start = time.perf_counter()  # a categorical colour: a trace and legend entry per category
        p.evaluate(f"(() => {{ const s = document.getElementById('ccol'); s.value = '{ccol}'; "
                   "s.dispatchEvent(new Event('change')); })()")
        p.wait_for(f"CB.state.scatter && CB.state.scatter.color === '{ccol}' && !CB.state.drawing", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        colour = time.perf_counter() - start
        traces = p.evaluate("document.getElementById('scatter').data.length")
        brush_scatter = brushes(p)
        start = time.perf_counter()  # the networks tab with every row, then sorted by a column
        p.evaluate("(() => { document.getElementById('pclear').click(); return 1; })()")
        p.wait_for("CB.linked.count === null")
        p.evaluate("CB.tab('networks')")
        p.wait_for("CB.networks.order.length > 0 && document.querySelectorAll('#nrows tr').length > 0", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        table_first = time.perf_counter() - start
        sorts = []
        for column in ("accuracy", "params", "accuracy"):
            start = time.perf_counter()
            p.evaluate(f"document.querySelector('#nhead td[data-col=\"{column}\"]').click()")
            p.wait_for(f"CB.networks.sort && CB.networks.sort.column === '{column}' "
                       f"&& document.querySelector('#nhead td[data-col=\"{column}\"]').textContent.length > {len(column)}")
            p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
            sorts.append(time.perf_counter() - start)
        brush_table = brushes(p)
    return first, parts, change, points, colour, traces, brush_scatter, table_first, sorts, brush_table


def brushes(p, repeats: int = 10) -> list[tuple[float, float, int]]:
    """Brushes drawn with the mouse on the first parallel-coordinates axis (accuracy), as a user
    draws them (press, ten moves, release; Chrome DevTools input events), each over another part
    of the axis. Per brush: seconds from the release to the selection counted, marked on the
    scatter and (on the networks tab) listed, a frame painted; the part of it spent in the page's
    own code (``CB.linked.updated.ms``: reading the brushes back, selecting among every row,
    marking, listing); the networks selected."""
    out = []
    for k in range(repeats):
        x, top, height = p.evaluate(
            "(() => { const r = document.querySelector('#parcoords .axis-brush rect').getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y, r.height]; })()")
        y0, y1 = top + height * (0.05 + 0.04 * k), top + height * (0.45 + 0.05 * k)
        p.evaluate("CB.linked.updated = null; 1")
        p.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x, "y": y0, "button": "left", "buttons": 1,
                                            "clickCount": 1})
        for step in range(1, 11):
            p.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y0 + (y1 - y0) * step / 10,
                                                "button": "left", "buttons": 1})
        start = time.perf_counter()
        p.send("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x, "y": y1, "button": "left", "clickCount": 1})
        p.wait_for("CB.linked.updated !== null", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        updated = p.evaluate("CB.linked.updated")
        out.append((time.perf_counter() - start, updated["ms"] / 1e3, updated["count"]))
    return out


def reliability_size(networks: int = 117_702, stages: int = 8, n_test: int = 10_000, seed: int = 0) -> tuple[int, int]:
    """Bytes on disk (gzip'd data files, as the explorer writes them) and raw bytes of every
    network's reliability bins in the binary form (``encode_reliability_block``), in blocks of
    256 networks: synthetic bins of a trained network's shape (the test set's top-label
    confidences piled towards 1: a Beta(a, 1) with a drawn per network and stage; a bin's mean
    confidence uniform in it, its correct count binomial at that confidence less up to 15 %: a
    network is overconfident, as trained networks are before recalibration)."""
    import numpy as np

    from calibench.metrics.reliability import RELIABILITY_BINS
    from calibench.report.explorer import BLOCK, binary_script, encode_reliability_block
    from calibench.vocabulary import STAGES

    rng = np.random.default_rng(seed)
    b = RELIABILITY_BINS
    edges = np.linspace(0, 1, b + 1)
    on_disk = raw = 0
    for start in range(0, networks, BLOCK):
        block = {}
        for row in range(start, min(networks, start + BLOCK)):
            block[row] = {}
            for stage in STAGES[:stages]:
                a = rng.uniform(1.5, 12)
                p = np.diff(edges ** a)  # Beta(a, 1): P(conf < x) = x^a
                count = rng.multinomial(n_test, p)
                mean = edges[:-1] + rng.uniform(0, 1, b) / b
                correct = rng.binomial(count, mean * (1 - rng.uniform(0, 0.15)))  # overconfident by up to 15 %
                block[row][stage] = (count, np.where(count > 0, mean, np.nan), correct)
        payload = encode_reliability_block(block)
        raw += len(payload)
        on_disk += len(binary_script("rel", ["sss_90_cifar100", start // BLOCK], payload))
    return on_disk, raw


def column_delta_size(path: Path) -> tuple[int, int, int]:
    """(gzip'd bytes of the table's plotted columns as the explorer encodes them, the same with
    each binned metric stored as its float16 pattern's difference from the same metric at the
    bin count nearest 15, the columns so stored): what that form of the columns would save (not
    built; BENCHMARKS.md, "The explorer at full size")."""
    import gzip
    import re

    import numpy as np
    import pandas as pd

    from calibench.report.explorer import encode_column, plotted_columns, round_significand

    frame = pd.read_parquet(path)
    if "measured_by" in frame:
        frame = frame[frame["arch_index"] == frame["measured_by"]]
    names = plotted_columns(list(frame.columns), {n: frame[n].dtype.kind for n in frame.columns})
    families: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        if m := re.fullmatch(r"(.+)_(\d+)", name):
            families.setdefault(m.group(1), []).append((int(m.group(2)), name))
    ref_of = {name: min(items, key=lambda t: abs(t[0] - 15))[1]
              for items in families.values() if len(items) > 1 for _, name in items}

    def size(data: bytes) -> int:
        return len(gzip.compress(data, 6, mtime=0))

    def pattern(v, exp):  # the explorer's float16 bit pattern of each value, at scale 2**exp
        rounded = np.where(np.isfinite(v), round_significand(v, 8), v)
        return (rounded / 2.0 ** exp).astype("<f2").view("<u2").astype(np.int64)

    plain = delta = stored = 0
    for name in names:
        v = frame[name].to_numpy(float)
        payload, meta = encode_column(v)
        here = size(payload)
        plain += here
        ref = ref_of.get(name, name)
        if ref != name and meta["enc"] == "f16":
            r = frame[ref].to_numpy(float)
            _, ref_meta = encode_column(r)
            mags = np.abs(v[np.isfinite(v) & (v != 0)])
            if ref_meta["enc"] == "f16" and (not mags.size or mags.max() < 2.0 ** (15 + ref_meta["exp"])):
                d = ((pattern(v, ref_meta["exp"]) >> 2) - (pattern(r, ref_meta["exp"]) >> 2) + 8192) % 16384 - 8192
                zigzag = np.where(d >= 0, 2 * d, -2 * d - 1).astype("<u2")
                here = size(zigzag.view(np.uint8).reshape(-1, 2).T.tobytes())
                stored += 1
        delta += here
    return plain, delta, stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/calibench-bench-analysis-s1"),
                    help="bench_analysis.py's data directory (its results/ holds the tables)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--table", default="sss_90_cifar100", help="the table whose scatter is timed")
    ap.add_argument("--ycol", default="vs_ece_100")
    ap.add_argument("--ccol", default="channels_3", help="a categorical colour to time (issue 37, item 3)")
    ap.add_argument("--reliability-size", action="store_true",
                    help="only: the size of every network's reliability bins in the binary form (synthetic bins)")
    ap.add_argument("--column-deltas", action="store_true",
                    help="only the size of --table's columns, plain and with binned metrics as differences")
    args = ap.parse_args()
    if args.column_deltas:
        plain, delta, stored = column_delta_size(args.dir / "results" / "tables" / f"{args.table}.parquet")
        print(f"{args.table}: columns {plain / 1e6:.1f} MB gzip'd; with {stored} binned metrics as differences from "
              f"the metric at the bin count nearest 15: {delta / 1e6:.1f} MB ({100 * (1 - delta / plain):.0f} % less)")
        return
    if args.reliability_size:
        start = time.perf_counter()
        on_disk, raw = reliability_size()
        print(f"reliability bins of 117,702 networks x 8 stages x 15 bins (binary form, 256 networks a file): "
              f"{on_disk / 1e6:.1f} MB on disk ({raw / 1e6:.1f} MB before gzip; {on_disk / 117_702:.0f} bytes a "
              f"network), encoded in {time.perf_counter() - start:.1f} s")
        return
    results = args.dir / "results"
    if not (results / "tables").is_dir():
        sys.exit(f"no tables under {results}: run bench/bench_analysis.py --dir {args.dir} first")
    from bench_analysis import load_line, machine_line

    print(machine_line())
    print(load_line("before"))
    wall, peak = write(results)
    size, files = du(results / "explorer")
    data, _ = du(results / "explorer" / "data")
    print(f"written in {wall:.1f} s, peak RSS {peak:.0f} MB; {size / 1e6:.1f} MB on disk in {files} files "
          f"(data {data / 1e6:.1f} MB, plotly.js {(results / 'explorer' / 'plotly.min.js').stat().st_size / 1e6:.1f} MB)")
    page = results / "explorer" / "index.html"
    for i in range(args.repeats):
        first, parts, change, points, colour, traces, brush_scatter, table_first, sorts, brush_table = paint(
            page, args.table, args.ycol, args.ccol)
        print(f"open {i + 1}: first paint of {args.table} ({points} points) after navigation: the scatter "
              f"{parts.get('scatter', float('nan')) / 1e3:.2f} s, the parallel coordinates "
              f"{parts.get('parcoords', float('nan')) / 1e3:.2f} s, the page ready {first:.2f} s; y -> {args.ycol}: "
              f"{change:.2f} s; colour -> {args.ccol}: {colour:.2f} s ({traces} traces)")
        for where, got in (("scatter tab", brush_scatter), ("networks tab, the table included", brush_table)):
            print(f"  10 brushes drawn on accuracy, {where}: release to painted median "
                  f"{statistics.median(g[0] for g in got) * 1e3:.0f} ms (max {max(g[0] for g in got) * 1e3:.0f}), "
                  f"of which the page's code median {statistics.median(g[1] for g in got) * 1e3:.0f} ms "
                  f"(max {max(g[1] for g in got) * 1e3:.0f}); networks selected {min(g[2] for g in got)}-"
                  f"{max(g[2] for g in got)}")
        print(f"  networks table of every row shown: {table_first:.2f} s; sorted by accuracy, params, accuracy: "
              + ", ".join(f"{x * 1e3:.0f} ms" for x in sorts))
    print(load_line("after"))


if __name__ == "__main__":
    main()
