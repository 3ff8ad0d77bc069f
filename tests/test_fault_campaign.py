"""A small seeded random fault campaign (issue 33, item 5; ``bench/bench_faults.py --random``):
faults of six kinds done to a copy of the session's SMALL_SSS run (one table, two networks in
chunks of one), each recovered with the README's command (`calibench run`, here for the
table) and checked against the untouched run: `calibench compare` equal, no file of the
reference lost, none differing."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_faults  # noqa: E402
from fixtures import clone_run  # noqa: E402

# Six kinds, one fault each (8 took 115 s on 2 busy cores: kill -9 of Snakemake, truncation, a
# full disk (root only) and two runs at once are left to the benchmark); a kill comes within 6 s of the
# start of a rerun given work by deleting a logits file (inference, measurement, the table).
KINDS = ["kill -9 of the whole run", "kill -9 of one job", "SIGTERM of the driver",
         "bytes overwritten", "deleted", "manifest and a shard of its chunk deleted"]

def test_a_seeded_campaign_of_six_faults_loses_and_changes_nothing(small_sss_run, tmp_path):
    faulty = clone_run(small_sss_run, tmp_path / "faulty")
    campaign = bench_faults.Campaign(
        small_sss_run, faulty, random.Random(33), ["--configfile", "tiny.yaml", "--space", "sss", "--dataset", "cifar10"],
        logs=tmp_path / "logs", max_reruns=3, kill_window=6.0, work=("logits/space=",))
    start = time.perf_counter()
    records = bench_faults.run_campaign(campaign, len(KINDS), KINDS, progress=None)
    summary = bench_faults.summarize(records)
    shown = json.dumps(records, indent=1, default=str)
    assert sorted(r["kind"] for r in records) == sorted(KINDS)  # each kind once
    # a deleted file the next run would not have looked for (Snakemake plans nothing for a missing
    # output whose consumers are up to date) is made again too: the repair check's lost_outputs
    assert all(r["verdict"] == "ok" for r in records), shown
    assert summary["files_differing"] == 0 and summary["compare_failed"] == 0, shown
    assert summary["files_lost"] == 0, shown
    assert all(r["files"] == records[0]["files"] > 10 for r in records)  # every file of the reference checked
    print(f"{len(records)} faults in {time.perf_counter() - start:.0f} s;", bench_faults.markdown(records, summary))
