"""The fit store (issue 35): every network's fitted maps kept, so that a change of bins or
metrics re-applies them and a change of one stage's fit settings refits that stage only.
Through the measurement job itself, on a synthetic population (N = 300, K = 10, five
networks, every stage)."""

import copy
import json

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.config import settings as stage_settings
from calibench.measure.jobs import measure_chunk_job
from calibench.results import shards
from calibench.store import fits as fit_store
from test_measure_device import M, _config, _population

FITTED = ["post", "vs", "ms", "dir", "iso", "hist", "spline"]


def _measure(results_root, config, name="m", group="auto"):
    results, manifest, labels_file = results_root
    return measure_chunk_job(stage_settings.measurement_settings(config), {"device": "cpu", "measure_group": group},
                             "zoo", "", "cifar10", 0, results, manifest, labels_file,
                             results.parent / f"{name}.json", progress=False)


def _shards(results):
    return {i: pd.read_parquet(layout.shard_path(results, "zoo", "", "cifar10", i)) for i in range(M)}


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """Measured once with the test config: every fit made and stored."""
    root = tmp_path_factory.mktemp("fits")
    made = _population(root / "a")
    summary = _measure(made, _config())
    assert summary["fits"] == {"made": {s: M for s in FITTED}, "reused": {}}
    return root, made


def _copy(first, tmp_path):
    import shutil

    root, _ = first
    shutil.copytree(root / "a", tmp_path / "a")
    return tmp_path / "a" / "results", tmp_path / "a" / "infer.json", layout.labels_path(tmp_path / "a" / "results",
                                                                                           "cifar10", space="zoo")


def test_a_bins_change_refits_nothing_and_equals_a_measurement_from_scratch_bit_for_bit(first, tmp_path):
    made = _copy(first, tmp_path)
    fit_files = {i: layout.fits_path(made[0], "zoo", "", "cifar10", i) for i in range(M)}
    before = {i: p.stat().st_mtime_ns for i, p in fit_files.items()}
    config = _config()
    config["bins"] = [5, 15, 50]
    summary = _measure(made, config, "again")
    assert summary["computed"] == M
    assert summary["fits"] == {"made": {}, "reused": {s: M for s in FITTED}}
    # every stage keeps its rows at 5 and 15 bins and its unbinned metrics; 50 alone is measured
    assert summary["stages_measured"] == {"whole": {}, "new_bins": {s: M for s in ["pre"] + FITTED}, "kept": {}}
    assert {i: p.stat().st_mtime_ns for i, p in fit_files.items()} == before  # nothing written again
    scratch = _population(tmp_path / "scratch")
    assert _measure(scratch, config)["fits"]["made"] == {s: M for s in FITTED}
    served, fresh = _shards(made[0]), _shards(scratch[0])
    assert any((s["bins"] == 50).any() for s in served.values())
    for i in range(M):
        pd.testing.assert_frame_equal(served[i], fresh[i], check_exact=True)


def test_a_hist_bins_change_refits_hist_only_and_leaves_the_other_stages_bit_identical(first, tmp_path):
    made = _copy(first, tmp_path)
    before = _shards(made[0])
    config = _config()
    config["recalibration"]["hist_bins"] = 7
    summary = _measure(made, config, "hist")
    # the other stages' rows are kept as they were: their fits are not even re-applied
    assert summary["fits"] == {"made": {"hist": M}, "reused": {}}
    assert summary["stages_measured"] == {"whole": {"hist": M}, "new_bins": {},
                                          "kept": {s: M for s in ["pre"] + FITTED if s != "hist"}}
    after = _shards(made[0])
    for i in range(M):
        keep = ["stage", "metric", "bins", "value"]
        a = before[i][before[i]["stage"] != "hist"][keep].reset_index(drop=True)
        b = after[i][after[i]["stage"] != "hist"][keep].reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert not before[i][before[i]["stage"] == "hist"]["value"].equals(after[i][after[i]["stage"] == "hist"]["value"])
    stored = fit_store.read_network_fits(layout.fits_path(made[0], "zoo", "", "cifar10", 0))
    assert stored[0]["hist"].params["bin_values"].shape == (10, 7)  # the new fit replaced the old one
    for i in range(M):  # the reliability bins in the settings' stage order, as from scratch (hist was last)
        bins = shards.read_reliability(layout.shard_path(made[0], "zoo", "", "cifar10", i))
        assert bins and all(list(by_stage) == list(config["stages"]) for by_stage in bins.values()), [list(b) for b in bins.values()]


def test_bins_removed_or_reordered_and_a_stage_dropped_then_added_back_measure_nothing_they_keep(first, tmp_path):
    """Rows that hold are kept: fewer bin counts, another order, a stage dropped, then the stage
    added back (its fit still in the store: measured whole from it, nothing refitted); each
    result equals a measurement from scratch with those settings, bit for bit."""
    made = _copy(first, tmp_path)
    config = _config()
    config["bins"] = [15]
    config["stages"] = [s for s in config["stages"] if s != "spline"]
    summary = _measure(made, config, "fewer")
    assert summary["computed"] == M
    assert summary["fits"] == {"made": {}, "reused": {}}
    assert summary["stages_measured"] == {"whole": {}, "new_bins": {}, "kept": {s: M for s in config["stages"]}}
    assert not any((s["stage"] == "spline").any() or (s["bins"] == 5).any() for s in _shards(made[0]).values())
    config["bins"] = [15, 5]  # 5 measured again, after 15
    config["stages"] = _config()["stages"]
    summary = _measure(made, config, "back")
    assert summary["fits"] == {"made": {}, "reused": {s: M for s in FITTED}}
    assert summary["stages_measured"]["whole"] == {"spline": M}
    assert summary["stages_measured"]["new_bins"] == {s: M for s in config["stages"] if s != "spline"}
    scratch = _population(tmp_path / "scratch")
    _measure(scratch, config)
    served, fresh = _shards(made[0]), _shards(scratch[0])
    for i in range(M):
        pd.testing.assert_frame_equal(served[i], fresh[i], check_exact=True)
        kept, new = (layout.shard_path(r, "zoo", "", "cifar10", i) for r in (made[0], scratch[0]))
        assert shards.read_stage_failures(kept) == shards.read_stage_failures(new)
        a, b = shards.read_reliability(kept), shards.read_reliability(new)
        assert a.keys() == b.keys() and all(
            np.array_equal(a[seed][stage][k], b[seed][stage][k], equal_nan=True)
            for seed in a for stage in a[seed] for k in a[seed][stage])


def test_a_damaged_fit_store_file_is_named_set_aside_and_refitted(first, tmp_path):
    made = _copy(first, tmp_path)
    path = layout.fits_path(made[0], "zoo", "", "cifar10", 2)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the column data, not the footer
    path.write_bytes(bytes(data))
    truncated = layout.fits_path(made[0], "zoo", "", "cifar10", 3)
    truncated.write_bytes(truncated.read_bytes()[:100])  # what a torn write would leave
    config = _config()
    config["bins"] = [5, 15, 50]
    summary = _measure(made, config, "damaged")
    named = {p["file"]: p["problem"] for p in summary["fit_problems"]}
    assert set(named) == {str(p.relative_to(made[0])) for p in (path, truncated)}
    assert all(v.startswith(("damaged", "unreadable")) for v in named.values()), named
    # a stage is refitted for its whole batch (the five networks), as its fits were made
    assert summary["fits"] == {"made": {s: M for s in FITTED}, "reused": {}}
    assert path.with_name(path.name + ".damaged").is_file()
    assert set(fit_store.read_network_fits(path)[0]) == set(FITTED)  # written again, whole
    scratch = _population(tmp_path / "scratch")
    _measure(scratch, config)
    served, fresh = _shards(made[0]), _shards(scratch[0])
    for i in range(M):
        pd.testing.assert_frame_equal(served[i], fresh[i], check_exact=True)


def test_the_format_round_trips_parameters_summaries_order_and_failures(tmp_path):
    rng = np.random.default_rng(0)
    fits = {0: {"iso": fit_store.StageFit("k1", {"x": rng.random((3, 4)), "y": rng.random((3, 4))},
                                          {"knots": 2.5, "converged": 1.0, "absent_classes": 0.0}, None),
                "ms": fit_store.StageFit("k2", None, {}, "ms fit failed: RuntimeError: boom")},
            1: {"post": fit_store.StageFit("k3", {"temperature": np.float64(1.75)},
                                           {"temperature": 1.75, "iterations": 4.0}, "did not converge")}}
    path = fit_store.write_network_fits(tmp_path / "arch=000007.parquet", 7, fits, space="zoo", hp="", dataset="c10")
    back = fit_store.read_network_fits(path)
    assert set(back) == {0, 1} and set(back[0]) == {"iso", "ms"}
    np.testing.assert_array_equal(back[0]["iso"].params["x"], fits[0]["iso"].params["x"])
    assert list(back[0]["iso"].info) == ["knots", "converged", "absent_classes"]  # the fit's own order
    assert back[0]["ms"].params is None and back[0]["ms"].failure == "ms fit failed: RuntimeError: boom"
    assert back[1]["post"].params["temperature"].shape == () and back[1]["post"].failure == "did not converge"
    valid, problem = fit_store.read_valid_fits(path, {0: {"iso": "k1", "ms": "other"}, 1: {"post": "k3"}})
    assert problem is None and set(valid[0]) == {"iso"} and set(valid[1]) == {"post"}
    assert fit_store.read_valid_fits(tmp_path / "missing.parquet", {0: {}}) == ({}, None)
    import duckdb

    rows = duckdb.sql(f"SELECT dataset, arch_index, seed, stage, info_temperature FROM read_parquet('{path}') "
                      "ORDER BY seed, stage").fetchall()
    assert rows == [("c10", 7, 0, "iso", None), ("c10", 7, 0, "ms", None), ("c10", 7, 1, "post", 1.75)]


def test_the_fit_key_follows_the_stage_settings_only():
    config = _config()
    base = stage_settings.measurement_settings(config)
    other = copy.deepcopy(config)
    other["bins"] = [5, 15, 50]
    other["recalibration"]["hist_bins"] = 7
    changed = stage_settings.measurement_settings(other)
    for stage in FITTED:
        same = stage_settings.stage_fit_settings(base, stage) == stage_settings.stage_fit_settings(changed, stage)
        assert same == (stage != "hist"), stage
    assert json.dumps(stage_settings.stage_fit_settings(base, "ms"), sort_keys=True).count("lambda") == 1


def test_kill_9_while_fits_are_written_then_the_rerun_equals_an_uninterrupted_measurement(tmp_path):
    """A job killed while it writes the fit store: every fit file left is whole (sealed, atomic),
    the rerun makes only what is missing, and every shard equals an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    made = _population(tmp_path / "killed")
    results, manifest, labels_file = made
    config = _config()
    settings = stage_settings.measurement_settings(config)
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    code = ("import json, sys; from calibench.measure.jobs import measure_chunk_job; "
            f"measure_chunk_job(json.load(open({str(tmp_path / 'settings.json')!r})), "
            "{'device': 'cpu', 'measure_group': 1}, 'zoo', '', 'cifar10', 0, "
            f"{str(results)!r}, {str(manifest)!r}, {str(labels_file)!r}, {str(tmp_path / 'k.json')!r}, progress=False)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    job = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    fits_dir = layout.fits_path(results, "zoo", "", "cifar10", 0).parent
    deadline = time.monotonic() + 300
    while job.poll() is None and time.monotonic() < deadline:
        if len(list(fits_dir.glob("arch=*.parquet"))) >= 2:
            os.killpg(job.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    job.wait(timeout=60)
    assert job.returncode == -signal.SIGKILL, "the job ended before it was killed"
    kept = sorted(fits_dir.glob("arch=*.parquet"))
    assert 2 <= len(kept) < M
    for path in kept:  # whole files only
        assert set(fit_store.read_network_fits(path)[0]) == set(FITTED)
    # the same group size as the killed job (a batched fit's last bits depend on its batch's size)
    summary = _measure(made, config, "rerun", group=1)
    assert summary["fit_problems"] == []
    assert sum(summary["fits"]["made"].values()) <= (M - len(kept) + 1) * len(FITTED)  # at most the one in flight
    scratch = _population(tmp_path / "scratch")
    _measure(scratch, config, group=1)
    served, fresh = _shards(results), _shards(scratch[0])
    for i in range(M):
        pd.testing.assert_frame_equal(served[i], fresh[i], check_exact=True)


def test_a_deleted_fit_file_under_valid_shards_is_named_and_its_chunk_measured_again_bit_for_bit(first, tmp_path):
    """No setting changed, every shard valid, one fit file gone (the repair check sees it gone from
    the manifest's fit_files): the job measures the chunk again in its original batches, names the
    file, and every shard comes out as it was."""
    from calibench.run import repair

    made = _copy(first, tmp_path)
    results = made[0]
    before = _shards(results)
    path = layout.fits_path(results, "zoo", "", "cifar10", 3)
    path.unlink()
    manifest = results.parent / "m.json"  # the first measurement's manifest
    assert any("arch=000003.parquet: deleted" in r for r in repair.changes(manifest, results))
    summary = _measure(made, _config(), "again")
    assert summary["fit_problems"] == [{"file": str(path.relative_to(results)), "problem": "missing"}]
    assert summary["computed"] == M and summary["fits"]["made"] == {s: M for s in FITTED}
    assert set(fit_store.read_network_fits(path)[0]) == set(FITTED)
    after = _shards(results)
    for i in range(M):
        pd.testing.assert_frame_equal(before[i].drop(columns=["source_mtime"], errors="ignore"),
                                      after[i].drop(columns=["source_mtime"], errors="ignore"), check_exact=True)
    assert _measure(made, _config(), "third")["computed"] == 0  # nothing left to do
