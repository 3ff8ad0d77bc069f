"""``calibench compare`` on two full-size runs (issue 26, part 2): wall time and peak RSS of
the command's process (``os.wait4``), reading six tables of ~658 columns and 145,179 rows per run.

Run A: the six synthetic tables of ``bench/bench_analysis.py`` (its ``prepare``, reused where
they exist: ``/tmp/calibench-bench-analysis-s1``). Run B: a copy of each table with

* the ``post_ece_*`` and ``post_ece_em_*`` columns perturbed (relative 1e-6, seeded),
* ``vs_nll`` NaN in 3 rows where A has a value (NaN mismatches),
* one more bin count: ``{stage}_ece_30`` for every stage (``{stage}_ece_25`` x 1.02),
* 7 networks dropped,
* another git commit in the tables' provenance metadata (a setting that differs).

``--worst`` adds run C: every metric value perturbed (relative 1e-12, the way a GPU run
differs from a CPU one), so every column differs and most need a full Kendall tau.

    python bench/bench_compare.py             # A vs A, A vs B
    python bench/bench_compare.py --worst     # and A vs C
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_analysis as ba  # noqa: E402  (the synthetic tables: prepare, write_table, machine_line)

GENERATOR = 1  # bump when run B or C changes: a directory of another version is rebuilt
KEYS = ("space", "hp", "dataset", "arch_index", "measured_by", "seed", "nats_index")


def _metric_columns(wide) -> list[str]:
    from calibench.results.tables import FIRST, PROVENANCE

    return [c for c in wide.columns if c not in FIRST + PROVENANCE + ["nats_index"] and wide[c].dtype.kind == "f"]


def make_b(wide, meta: dict, rng) -> tuple:
    """Run B's table from run A's (see the module's docstring)."""
    wide = wide.copy()
    for c in [c for c in wide.columns if c.startswith(("post_ece_", "post_ece_em_"))]:
        wide[c] = wide[c] * (1 + 1e-6 * rng.standard_normal(len(wide)))
    have = np.flatnonzero(wide["vs_nll"].notna().to_numpy())
    wide.loc[rng.choice(have, 3, replace=False), "vs_nll"] = np.nan
    for stage in meta["stages"]:
        src = f"{stage}_ece_25"
        if src in wide:
            wide.insert(wide.columns.get_loc(src) + 1, f"{stage}_ece_30", wide[src] * 1.02)
    wide = wide.drop(index=rng.choice(len(wide), 7, replace=False)).reset_index(drop=True)
    meta = {**meta, "provenance": [{"provenance": {"git_commit": "bench-run-b"}, "rows": len(wide)}]}
    return wide, meta


def make_c(wide, meta: dict, rng) -> tuple:
    """Run C's table: every metric value times 1 + 1e-12 noise."""
    wide = wide.copy()
    for c in _metric_columns(wide):
        wide[c] = wide[c] * (1 + 1e-12 * rng.standard_normal(len(wide)))
    return wide, meta


def derive(tables: list[str], out: Path, how, seed: int) -> list[str]:
    """``how`` applied to each table of run A, under ``out/results/tables`` (kept if made before)."""
    import pandas as pd

    from calibench.results.tables import table_metadata

    marker = out / "bench.json"
    want = {"generator": GENERATOR, "how": how.__name__, "from": tables,
            "sizes": [Path(t).stat().st_size for t in tables]}
    if marker.is_file() and json.loads(marker.read_text()) == want:
        return sorted(str(p) for p in (out / "results" / "tables").glob("*.parquet"))
    rng = np.random.default_rng(seed)
    written = []
    for t in tables:
        wide, meta = how(pd.read_parquet(t), table_metadata(t), rng)
        path = out / "results" / "tables" / Path(t).name
        ba.write_table(wide, meta, path)
        written.append(str(path))
        del wide
    marker.write_text(json.dumps(want))
    return written


def run_compare(a: Path, b: Path, out: Path, extra: list[str]) -> dict:
    """``calibench compare a b`` in its own process: wall time, peak RSS (``wait4``), exit code, verdict."""
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "calibench", "compare", str(a), str(b), "--out", str(out),
                                 *extra], stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    text = log.read_text()
    verdict = next((line for line in text.splitlines() if line.startswith("verdict:")), text[-400:])
    return {"a": str(a), "b": str(b), "args": extra, "exit": os.waitstatus_to_exitcode(status),
            "wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024), "verdict": verdict,
            "log": str(log)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ba.ROOT / "config" / "nats.yaml")
    ap.add_argument("--scale", type=float, default=1.0, help="share of each table's networks (bench_analysis)")
    ap.add_argument("--dir", type=Path, default=None, help="run A (default: bench_analysis's directory)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/calibench-bench-compare"), help="runs B, C, outputs")
    ap.add_argument("--worst", action="store_true", help="also A vs C: every metric value perturbed")
    args = ap.parse_args()
    directory = args.dir or Path(f"/tmp/calibench-bench-analysis-s{args.scale:g}")
    info = ba.prepare(directory, ba.load_config(args.config), args.scale)
    run_a = directory / "results"
    rows = sum(r[0] for r in info["rows"].values())
    print(f"run A: {run_a}: {len(info['tables'])} tables, {rows} rows, {max(info['columns'].values())} columns, "
          f"{info['bytes'] / 1e6:.0f} MB ({'reused' if info['reused'] else 'written'})")
    start = time.perf_counter()
    derive(info["tables"], args.work / "run_b", make_b, 1)
    runs = [(run_a, run_a, "a_vs_a"), (run_a, args.work / "run_b" / "results", "a_vs_b")]
    if args.worst:
        derive(info["tables"], args.work / "run_c", make_c, 2)
        runs.append((run_a, args.work / "run_c" / "results", "a_vs_c"))
    print(f"runs B{', C' if args.worst else ''} ready in {time.perf_counter() - start:.0f} s under {args.work}")
    print(ba.machine_line())
    print(ba.load_line("before"))
    results = []
    for a, b, name in runs:
        r = run_compare(a, b, args.work / f"out_{name}", [])
        results.append({"name": name, **r})
        print(f"{name}: exit {r['exit']}, {r['wall_s']:.1f} s, peak RSS {r['peak_rss_mb']} MB\n  {r['verdict']}")
    print(ba.load_line("after"))
    (args.work / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
