"""DAG build time of the full real configuration, on a synthetic full-size population.

Writes synthetic archive metas holding every TSS cell (5^6 = 15,625) and every SSS
channel string (8^5 = 32,768), i.e. full-size spaces in another index order, runs the
population checkpoint for both spaces, then times ``snakemake -n`` on config/nats.yaml
with the archive paths pointed at them. Prints jobs per rule and the wall time.

It times the dry run's ``--summary`` too (the plan ``calibench status`` and the partial
report read). It also times what every cluster job pays before its command starts: the Snakemake
process on the node re-parses the Snakefile and builds the DAG of its one target job
(``--target-jobs infer:... --mode remote``, as the SLURM plugin's job step runs it), here
stopped at the dry run (median of 3).

Usage: python bench/bench_dag.py [--chunk-size 200] [--profile profiles/slurm]
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS, format_tss
from calibench.sources.nats.minibench import write_pbz2

ROOT = Path(__file__).resolve().parents[1]


def write_meta(directory: Path, archs: list[str]) -> None:
    write_pbz2(directory / "meta.pickle.pbz2",
               {"meta_archs": archs, "total_archs": len(archs), "arch2infos": None, "evaluated_indexes": set()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk-size", type=int, default=200)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="calibench-dag-"))
    tss = [format_tss((((o[0], 0),), ((o[1], 0), (o[2], 1)), ((o[3], 0), (o[4], 1), (o[5], 2))))
           for o in itertools.product(TSS_OPS, repeat=6)]
    sss = [":".join(map(str, c)) for c in itertools.product(SSS_CHANNEL_CHOICES, repeat=5)]
    write_meta(work / "tss", tss)
    write_meta(work / "sss", sss)
    config = yaml.safe_load((ROOT / "config" / "nats.yaml").read_text())
    # the inputs a run checks before any job are only said to exist here: nothing is read from them
    (work / "datasets").mkdir()
    svhn = work / "test_32x32.mat"
    svhn.touch()
    config.update(archives={"tss": str(work / "tss"), "sss": str(work / "sss")}, chunk_size=args.chunk_size,
                  results=str(work / "results"), datasets_root=str(work / "datasets"))
    if (config.get("ood") or {}).get("svhn"):
        config["ood"]["svhn"] = str(svhn)
    config_file = work / "full.yaml"
    config_file.write_text(yaml.safe_dump(config))
    base = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(ROOT),
            "--configfile", str(config_file)]
    subprocess.run(base + ["--cores", "2", "--quiet", "all", "--"]  # the population checkpoint, locally
                   + [f"{work}/results/population/{s}.json" for s in ("tss", "sss")], check=True)
    dry = base + ["-n", "--cores", "2"] + (["--profile", args.profile, "--slurm-no-account"] if args.profile else [])
    start = time.perf_counter()
    proc = subprocess.run(dry, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    table = re.search(r"Job stats:\n(.*?)\n\n", out, re.S)
    print(table.group(1) if table else out[-2000:])
    print(f"snakemake -n, full real configuration (TSS 6,466 unique + SSS 32,768, 3 datasets, chunk size "
          f"{args.chunk_size}): {seconds:.1f} s")
    # the plan `calibench status` and the partial report (calibench.run.partial_report) read
    start = time.perf_counter()
    proc = subprocess.run(base + ["--summary", "--dry-run", "--cores", "1"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    rows = [line for line in proc.stdout.splitlines() if line.count("\t") >= 5 and not line.startswith("output_file")]
    print(f"snakemake --summary --dry-run, the same: {len(rows):,} output files in {seconds:.1f} s")

    job = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(ROOT),
           "--target-jobs", "infer:target=sss_90,chunk=00000", "--allowed-rules", "infer",
           "--cores", "4", "--force-use-threads", "--force", "--target-files-omit-workdir-adjustment",
           "--max-inventory-time", "0", "--nocolor", "--no-hooks", "--nolock", "--ignore-incomplete",
           "--mode", "remote", "--configfiles", str(config_file), "-n"]
    times = []
    for _ in range(3):
        start = time.perf_counter()
        proc = subprocess.run(job, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0 or "infer" not in proc.stdout + proc.stderr:
            sys.exit(f"the single-job parse failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    bare = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); import snakemake.cli; "
                           "print(time.perf_counter() - t)"], capture_output=True, text=True)
    print(f"per-job start-up on a node (Snakefile parse + DAG of one inference job, --mode remote): "
          f"{sorted(times)[1]:.2f} s (median of 3; importing snakemake alone: {float(bare.stdout):.2f} s)")


if __name__ == "__main__":
    main()
