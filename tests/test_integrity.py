"""Every byte verified (issue 33): result files carry a content check that is verified before
use; damage is named, set aside and rebuilt by the same run; lost bookkeeping loses nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibench import integrity, layout
from calibench.results import shards
from calibench.run import repair
from fixtures import SMALL_SSS_TABLE, clone_run

SHARD_DIR = "results/shards/space=sss/hp=90/dataset=cifar10"
LOGITS_DIR = "results/logits/space=sss/hp=90/dataset=cifar10"
MEASURE = "results/chunks/measure/sss_90_cifar10"


def _overwrite(path: Path, where: float, data: bytes = b"\xde\xad\xbe\xef") -> int:
    """A few bytes overwritten (a normal write: the mtime changes) at ``where`` of the column data."""
    raw = bytearray(path.read_bytes())
    data_end = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    offset = 4 + int((data_end - 4 - len(data)) * where)
    raw[offset:offset + len(data)] = data
    path.write_bytes(bytes(raw))
    return offset


def _sample_table() -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({"arch_index": np.arange(300, dtype=np.int32), "stage": ["pre", "post", "dir"] * 100,
                     "value": rng.random(300)}).replace_schema_metadata({"calibench": json.dumps({"k": [1, 2]})})


def test_a_sealed_parquet_file_reads_back_equal_and_any_changed_byte_is_caught_or_harmless(tmp_path):
    table = _sample_table()
    path = integrity.write_parquet(table, tmp_path / "t.parquet", compression="zstd")
    back = integrity.read_parquet(path)
    assert back.equals(table) and back.schema.metadata == table.schema.metadata
    assert integrity.is_sealed(path) and integrity.check(path) is None
    # Parquet's own page checksums are written too (readers without calibench can verify them)
    assert pq.read_table(path, page_checksum_verification=True).equals(table)
    raw = path.read_bytes()
    caught = 0
    for offset in range(0, len(raw), 3):  # every third byte: data, page headers, footer, markers
        damaged = bytearray(raw)
        damaged[offset] ^= 0x5A
        (tmp_path / "d.parquet").write_bytes(bytes(damaged))
        try:
            read = integrity.read_parquet(tmp_path / "d.parquet")
        except integrity.DamagedFile as exc:
            assert exc.path == str(tmp_path / "d.parquet")
            caught += 1
            continue
        # what is not caught changes nothing a reader gets (e.g. the writer's name in the footer)
        assert read.equals(table) and read.schema.metadata == table.schema.metadata, offset
    assert caught > 0.9 * len(range(0, len(raw), 3))


def test_empty_truncated_and_foreign_files_are_named_with_their_cause(tmp_path):
    path = integrity.write_parquet(_sample_table(), tmp_path / "t.parquet")
    raw = path.read_bytes()
    path.write_bytes(b"")
    assert integrity.check(path) == "empty file"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(integrity.DamagedFile, match="t.parquet: damaged .not a parquet file"):
        integrity.read_parquet(path)
    assert integrity.check(tmp_path / "none.parquet") == "missing"
    # a file written before seals existed is read as before, and said to be unsealed
    pq.write_table(_sample_table(), path)
    assert integrity.read_parquet(path).equals(_sample_table()) and not integrity.is_sealed(path)


def test_a_sealed_json_file_catches_a_changed_value_and_reads_back_without_its_seal(tmp_path):
    doc = {"shards": {"0": "abc", "1": "def"}, "files": {"0": [10, 20]}, "seconds": 1.25}
    path = integrity.write_json(doc, tmp_path / "m.json")
    assert integrity.read_json(path) == doc and integrity.JSON_KEY in json.loads(path.read_text())
    path.write_text(path.read_text().replace('"def"', '"deg"'))
    with pytest.raises(integrity.DamagedFile, match="m.json: damaged .its content does not match"):
        integrity.read_json(path)
    path.write_text("{\"shards\": ")
    assert integrity.check(path).startswith("unreadable JSON")


def _calibench_run(workdir: Path) -> subprocess.CompletedProcess:
    """The README's command for the one table (it repairs before Snakemake starts)."""
    proc = subprocess.run([sys.executable, "-m", "calibench", "run", "--configfile", "tiny.yaml", "--space", "sss",
                           "--dataset", "cifar10"], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _snakemake(workdir: Path, *args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", "tiny.yaml", "--cores", "2", *args],
                          cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _frames_equal(a: Path, b: Path) -> None:
    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b), check_exact=True)


def test_bytes_changed_in_a_shard_a_logits_file_and_a_table_are_found_named_and_rebuilt_equal(small_sss_run,
                                                                                               tmp_path):
    workdir = clone_run(small_sss_run, tmp_path / "run")
    shard, logits = workdir / SHARD_DIR / "arch=000000.parquet", workdir / LOGITS_DIR / "arch=000001.parquet"
    table = workdir / SMALL_SSS_TABLE
    for path, where in ((shard, 0.5), (logits, 0.3), (table, 0.6)):
        _overwrite(path, where)
        assert integrity.check(path).startswith("its data does not match")
    # what a dry run and status say, changing nothing
    dry = _snakemake(workdir, "-n", SMALL_SSS_TABLE)
    assert f"{SMALL_SSS_TABLE}: damaged (its data does not match its SHA-256" in dry.stderr
    assert "a run would set it aside and rebuild it" in dry.stderr and table.exists()
    proc = _calibench_run(workdir)
    assert f"set aside as {table.name}.damaged; this run rebuilds it" in proc.stderr
    assert f"{shard.relative_to(workdir)}: changed since it was written" in proc.stderr
    measure_log = (workdir / "results/logs/measure/sss_90_cifar10_chunk00000.log").read_text()
    assert f"{shard.name}: damaged (its data does not match its SHA-256" in measure_log and "measured again" in measure_log
    infer_log = (workdir / "results/logs/infer/sss_90_chunk00001.log").read_text()
    assert f"{logits.name}: damaged" in infer_log and "computed again" in infer_log
    for path in (shard, logits, table):  # rebuilt, equal to the untouched run's
        _frames_equal(small_sss_run / path.relative_to(workdir), path)
        assert integrity.check(path) is None
    assert (workdir / f"{SMALL_SSS_TABLE}.damaged").is_file()  # kept for inspection
    compare = subprocess.run([sys.executable, "-m", "calibench.run.cli", "compare", str(small_sss_run / "results"),
                              str(workdir / "results"), "--out", str(tmp_path / "cmp")], capture_output=True, text=True)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert "Nothing to be done" in _snakemake(workdir, SMALL_SSS_TABLE).stderr


def test_an_empty_table_and_a_lost_manifest_are_told_by_status_and_the_next_run_restores_everything(small_sss_run,
                                                                                                     tmp_path):
    workdir = clone_run(small_sss_run, tmp_path / "run")
    table = workdir / SMALL_SSS_TABLE
    table.write_bytes(b"")
    (workdir / MEASURE / "chunk00001.json").unlink()
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml",
                             "--space", "sss"], cwd=workdir, capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.endswith(")") and SMALL_SSS_TABLE in line)
    assert row.startswith("to run") and f"damaged: {SMALL_SSS_TABLE}: empty file" in row
    assert f"{MEASURE}/chunk00001.json: manifest lost (its table exists)" in status.stdout
    # with its manifest gone, a shard of that chunk is deleted too: the next run measures it again
    shard = workdir / SHARD_DIR / "arch=000001.parquet"
    shard.unlink()
    proc = _calibench_run(workdir)
    assert f"{MEASURE}/chunk00001.json: manifest lost" in proc.stderr and "empty file" in proc.stderr
    assert not list((workdir / "results").rglob(f"*{repair.SET_ASIDE}"))  # rebuilt: the set-aside copies are gone
    summary = integrity.read_json(workdir / MEASURE / "chunk00001.json")
    assert summary["computed"] == 1 and summary["shards"].keys() == {"1"}
    _frames_equal(small_sss_run / SHARD_DIR / "arch=000001.parquet", shard)
    _frames_equal(small_sss_run / SMALL_SSS_TABLE, table)


def test_a_lost_manifest_is_found_from_the_population_and_a_damaged_one_is_set_aside(small_sss_run, tmp_path):
    results = clone_run(small_sss_run, tmp_path / "run") / "results"
    assert repair.changed_chunks(results) == [] and repair.damaged_outputs(results) == []
    infer = layout.infer_manifest(results, "sss_90", 0)
    infer.unlink()
    measure = layout.measure_manifest(results, "sss_90", "cifar10", 1)
    measure.write_text(measure.read_text().replace('"computed": 1', '"computed": 2'))
    changed = dict(repair.changed_chunks(results))
    assert changed[infer] == ["manifest lost (its chunk was measured): every file of the chunk is checked"]
    assert changed[measure] == [f"{measure}: its content does not match its SHA-256 (changed since it was written)"]
    moved = repair.set_aside(results, list(changed.items()))
    assert layout.table_path(results, "sss_90", "cifar10") in moved and not measure.exists()
    # damaged labels take the measurement manifests that read them with them
    labels = layout.labels_path(results, "cifar10")
    _overwrite(labels, 0.5)
    damaged = repair.damaged_outputs(results)
    assert [(p, c.split(" (")[0]) for p, c, _ in damaged] == [(labels, "its data does not match its SHA-256")]
    assert set(damaged[0][2]) == set(layout.matching(layout.measure_manifest(results, "sss_90", "cifar10", "*")))


def test_a_file_whose_time_alone_changed_is_the_same_by_its_content_and_a_run_gives_its_time_back(tmp_path):
    """A copy that did not keep times (scp, tar's whole seconds) is no change; new content of the
    same size is, found by the seal and by the SHA-256 the manifest kept."""
    results = tmp_path / "results"
    shard = layout.shard_path(results, "zoo", "", "c10", 4)
    shard.parent.mkdir(parents=True)
    integrity.write_parquet(pa.table({"v": np.arange(50, dtype=np.int64) + 100}), shard, compression="none")
    recorded = integrity.written_state(shard)
    assert recorded[:2] == repair.file_state(shard) and recorded[2] == integrity.sealed_digest(shard)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"space": "zoo", "hp": "", "dataset": "c10", "shards": {"4": "k"},
                                    "files": {"4": recorded}}))
    copied = (recorded[1] // 10**9 + 3600) * 10**9  # an hour later, in whole seconds
    os.utime(shard, ns=(copied, copied))
    assert repair.changes(manifest, results) == [] and repair.file_state(shard)[1] == copied  # planning: untouched
    assert repair.changes(manifest, results, settle=True) == [] and repair.file_state(shard) == recorded[:2]
    # bytes changed, the footer's seal kept: the file fails its own check
    os.utime(shard, ns=(copied, copied))
    _overwrite(shard, 0.5)
    assert repair.file_state(shard)[0] == recorded[0] and integrity.sealed_digest(shard) == recorded[2]
    assert repair.changes(manifest, results, settle=True) == [f"{shard}: changed since it was written"]
    # another sealed file of the same size passes its own check, not the manifest's SHA-256
    integrity.write_parquet(pa.table({"v": np.arange(50, dtype=np.int64)}), shard, compression="none")
    assert repair.file_state(shard)[0] == recorded[0] and integrity.check(shard) is None
    assert repair.changes(manifest, results, settle=True) == [f"{shard}: changed since it was written"]
    # a manifest from before the SHA-256 was kept is held to the time
    integrity.write_parquet(pa.table({"v": np.arange(50, dtype=np.int64) + 100}), shard, compression="none")
    manifest.write_text(json.dumps({"space": "zoo", "hp": "", "dataset": "c10", "shards": {"4": "k"},
                                    "files": {"4": recorded[:2]}}))
    assert repair.changes(manifest, results) == [f"{shard}: changed since it was written"]


def test_a_failed_source_copied_with_another_time_is_not_taken_for_a_replaced_one(tmp_path):
    archive = tmp_path / "000007.pickle.pbz2"
    archive.write_bytes(b"not an archive")
    failure = {"source": str(archive), "reason": "unreadable", "stage": "inference",
               **integrity.failed_source(archive)}
    assert failure["source_sha256"] == integrity.sha256_file(archive) and integrity.same_source(failure)
    os.utime(archive, ns=(10**18, 10**18))  # copied: same bytes, another time
    assert integrity.same_source(failure)
    archive.write_bytes(b"an archive ago")  # replaced: same size, other bytes
    assert not integrity.same_source(failure)
    archive.unlink()  # gone: nothing to retry
    assert integrity.same_source(failure)
    restored = {"source": str(archive), **integrity.failed_source(archive)}  # failed while missing
    assert restored["source_state"] is None and "source_sha256" not in restored
    archive.write_bytes(b"back")
    assert not integrity.same_source(restored)


def test_a_run_copied_with_tar_and_scp_plans_nothing_and_runs_nothing(small_sss_run, tmp_path):
    """tar keeps whole seconds, scp none: every shard and logits file's time differs from its
    manifest's; their content is checked instead, and the copy is as finished as the original."""
    workdir = tmp_path / "copy"
    workdir.mkdir()
    packed = subprocess.run(f"tar -C {small_sss_run} -cf - . | tar -C {workdir} -xf -", shell=True)
    assert packed.returncode == 0
    shard = workdir / SHARD_DIR / "arch=000001.parquet"
    recorded = integrity.read_json(workdir / MEASURE / "chunk00001.json")["files"]["1"]
    assert shard.stat().st_mtime_ns % 10**9 == 0 and shard.stat().st_mtime_ns != recorded[1]
    for path in [*(workdir / SHARD_DIR).iterdir(), *(workdir / LOGITS_DIR).iterdir()]:
        os.utime(path)  # as scp leaves them: the time of the copy
    copied = repair.file_state(shard)
    assert repair.changed_chunks(workdir / "results") == []
    dry = _snakemake(workdir, "-n", SMALL_SSS_TABLE)
    assert "calibench:" not in dry.stderr and "Nothing to be done" in dry.stdout + dry.stderr
    assert repair.file_state(shard) == copied  # planning changed nothing, not even a time
    proc = _calibench_run(workdir)
    assert "changed since" not in proc.stderr and "Nothing to be done" in proc.stderr
    assert repair.file_state(shard) == recorded[:2]  # given back: the next check reads no byte of it


def test_a_shard_damaged_without_a_trace_is_measured_again_by_its_job(small_sss_run, tmp_path):
    """Damage with the modification time kept (bit rot): the jobs' own checks find it, and the
    same `calibench run` rebuilds it."""
    results = clone_run(small_sss_run, tmp_path / "run") / "results"
    shard = results / SHARD_DIR.removeprefix("results/") / "arch=000000.parquet"
    manifest = integrity.read_json(layout.measure_manifest(results, "sss_90", "cifar10", 0))
    key = manifest["shards"]["0"]
    assert shards.shard_problem(shard, key) is None
    state = os.stat(shard)
    _overwrite(shard, 0.2)
    os.utime(shard, ns=(state.st_atime_ns, state.st_mtime_ns))
    assert repair.changed_chunks(results) == []  # nothing on the outside says so
    assert shards.shard_problem(shard, key).startswith("damaged (its data does not match")
    # the table built from it (here: its table damaged too) finds it; the same `calibench run` rebuilds it
    _overwrite(results / SMALL_SSS_TABLE.removeprefix("results/"), 0.5)
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--cores", "2",
                           "--space", "sss"], cwd=results.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"found during this run and set aside: results/chunks/measure/sss_90_cifar10/chunk00000.json: " \
           f"results/{SHARD_DIR.removeprefix('results/')}/arch=000000.parquet: deleted; running once more" in proc.stderr
    assert "networks measured: 1" in proc.stdout
    _frames_equal(small_sss_run / SMALL_SSS_TABLE, results.parent / SMALL_SSS_TABLE)
    assert pd.read_parquet(results / "failures/sss_90_cifar10.parquet").empty


def test_damaged_analysis_outputs_and_pages_are_found_with_what_must_be_made_again(workflow_run, tmp_path):
    import shutil

    results = tmp_path / "results"
    shutil.copytree(workflow_run / "results", results)
    assert repair.damaged_outputs(results) == []
    # the pages' checksums are sha256sum's own format
    check = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=layout.explorer_dir(results),
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    hcs = layout.analysis_path(results, "hcs.parquet")
    hcs.write_bytes(hcs.read_bytes()[:-100])
    report = layout.report_path(results)
    report.write_text(report.read_text().replace("<h2>", "<h2>x", 1))
    script = layout.explorer_dir(results) / "explorer.js"
    script.write_text(script.read_text() + "//")
    found = {path: (cause, with_it) for path, cause, with_it in repair.damaged_outputs(results)}
    assert found[hcs] == ("its content does not match the SHA-256 recorded for it",
                          [layout.part_manifest(results, "hcs"), report, layout.explorer_page(results)])
    assert found[report] == ("its content does not match the SHA-256 recorded for it", [])
    assert found[script][1] == [layout.explorer_page(results)]
    repair.set_aside_damaged(results, list(zip(found, *zip(*found.values()))))
    assert not hcs.exists() and not report.exists() and not layout.part_manifest(results, "hcs").exists()
    assert not layout.explorer_page(results).exists() and Path(f"{hcs}.damaged").is_file()
