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
Then one change of the y column (load, decode and redraw one column of 32,768 values), and
one change of the colour to a categorical column (``--ccol``: a trace per category).
"""

from __future__ import annotations

import argparse
import os
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
        points = p.evaluate("document.getElementById('scatter').data[0].x.length")
        start = time.perf_counter()
        p.evaluate(f"(() => {{ const s = document.getElementById('ycol'); s.value = '{ycol}'; "
                   "s.dispatchEvent(new Event('change')); })()")
        p.wait_for(f"CB.state.scatter && CB.state.scatter.y === '{ycol}'", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        change = time.perf_counter() - start
        start = time.perf_counter()  # a categorical colour: a trace and legend entry per category
        p.evaluate(f"(() => {{ const s = document.getElementById('ccol'); s.value = '{ccol}'; "
                   "s.dispatchEvent(new Event('change')); })()")
        p.wait_for(f"CB.state.scatter && CB.state.scatter.color === '{ccol}'", timeout=60)
        p.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
        colour = time.perf_counter() - start
        traces = p.evaluate("document.getElementById('scatter').data.length")
    return first, change, points, colour, traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/calibench-bench-analysis-s1"),
                    help="bench_analysis.py's data directory (its results/ holds the tables)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--table", default="sss_90_cifar100", help="the table whose scatter is timed")
    ap.add_argument("--ycol", default="vs_ece_100")
    ap.add_argument("--ccol", default="channels_3", help="a categorical colour to time (issue 37, item 3)")
    args = ap.parse_args()
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
        first, change, points, colour, traces = paint(page, args.table, args.ycol, args.ccol)
        print(f"open {i + 1}: first paint of {args.table} ({points} points) {first:.2f} s after navigation; "
              f"y -> {args.ycol}: {change:.2f} s; colour -> {args.ccol}: {colour:.2f} s ({traces} traces)")
    print(load_line("after"))


if __name__ == "__main__":
    main()
