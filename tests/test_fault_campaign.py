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
import pytest  # noqa: E402
from fixtures import clone_run  # noqa: E402

# Six kinds, one fault each (8 took 115 s on 2 busy cores: kill -9 of Snakemake, truncation, a
# full disk (root only) and two runs at once are left to the benchmark); a kill comes within 6 s of the
# start of a rerun given work by deleting a logits file (inference, measurement, the table).
KINDS = ["kill -9 of the whole run", "kill -9 of one job", "SIGTERM of the driver",
         "bytes overwritten", "deleted", "manifest and a shard of its chunk deleted"]

# Known gap (issue 33, found by this campaign; the repair check's, not this test's): a file that
# jobs read but that no run looks for once what was built from it exists is not made again when
# deleted. Snakemake (9.27) plans nothing for a missing output of a job whose requested outputs
# are present ("Nothing to be done"), and the repair check finds damaged ones, not deleted ones.
KNOWN_LOST = ("logits/labels/", "population/", "failures/", "analysis/parts/", "recalibration/odir_")


def _known_gap(record: dict) -> bool:
    return (record["kind"] == "deleted" and record["recovered"] and not record["differing"]
            and record["compare_exit"] == 0 and record["lost"] == [record["target"]]
            and record["target"].startswith(KNOWN_LOST))


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
    gaps = [r for r in records if r["verdict"] != "ok" and _known_gap(r)]
    assert all(r["verdict"] == "ok" for r in records if r not in gaps), shown
    assert summary["files_differing"] == 0 and summary["compare_failed"] == 0, shown
    assert summary["files_lost"] == sum(len(r["lost"]) for r in gaps), shown
    assert all(r["files"] == records[0]["files"] > 10 for r in records)  # every file of the reference checked
    print(f"{len(records)} faults in {time.perf_counter() - start:.0f} s;", bench_faults.markdown(records, summary))
    if gaps:
        pytest.xfail("deleted and not made again by the next run (known gap, KNOWN_LOST): "
                     + ", ".join(r["target"] for r in gaps))
