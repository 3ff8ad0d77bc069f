"""``ood.svhn_subset`` (issue 32, item 5): a seeded subset of the SVHN OoD images, recorded in
CIFAR-10's logits key; null (the default) keeps the keys of logits stored before it existed."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from calibench.config.check import ConfigError, check, load_yaml, schema_default
from calibench.inference import data as D
from calibench.inference.engine import load_eval_data, ood_options
from calibench.sources import keys
from calibench.sources.nats import jobs as nats_jobs
from calibench.store import logits as store

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
N_SVHN = 240


@pytest.fixture(scope="module")
def svhn(tmp_path_factory) -> Path:
    """A small SVHN-format file whose image i holds the value i % 256 in its first pixel."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(N_SVHN, 3, 32, 32), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(N_SVHN) % 256
    return D.write_svhn_test(tmp_path_factory.mktemp("svhn") / "test_32x32.mat", images, rng.integers(0, 10, N_SVHN))


def _ood(svhn_path, **extra) -> dict:
    return {"sets": ["gaussian_noise", "svhn"], "noise_severity": 5, "svhn": str(svhn_path), **extra}


# ------------------------------------------------------------------------------ the draw


def test_the_subset_is_seeded_sorted_of_the_right_size_and_within_the_set():
    rows = D.svhn_subset_rows(26032, 1000, seed=0)
    assert rows.dtype == np.int64 and rows.shape == (1000,)
    assert np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < 26032  # sorted, distinct, rows of the file
    np.testing.assert_array_equal(rows, D.svhn_subset_rows(26032, 1000, seed=0))  # deterministic
    assert not np.array_equal(rows, D.svhn_subset_rows(26032, 1000, seed=1))  # the seed matters
    # the draw is numpy's Generator, as documented: a reader can redraw the rows from the key
    expected = np.sort(np.random.default_rng(0).choice(26032, size=1000, replace=False))
    np.testing.assert_array_equal(rows, expected)
    assert D.svhn_subset_rows(26032, None) is None  # null: every image
    assert D.svhn_subset_rows(26032, 26032) is None  # a subset of every image is the whole set


def test_a_subset_larger_than_the_file_is_an_error_naming_the_file_and_both_sizes(svhn):
    with pytest.raises(ValueError, match=rf"ood.svhn_subset = {N_SVHN + 1} is larger than .*test_32x32.mat.*"
                                         rf"holds {N_SVHN} images"):
        D.load_svhn_test(svhn, subset=N_SVHN + 1)
    with pytest.raises(ValueError, match=str(svhn)):  # at key time already, before any inference
        keys.ood_fields("cifar10", _ood(svhn, svhn_subset=N_SVHN + 1))
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="null or an integer >= 1"):
            D.svhn_subset_rows(100, bad)


def test_load_svhn_test_reads_exactly_the_drawn_rows_and_records_them(svhn):
    full = D.load_svhn_test(svhn)
    assert full.rows is None and len(full) == N_SVHN
    assert D.svhn_test_size(svhn) == N_SVHN == D.svhn_test_size(svhn.parent)  # headers only; a directory too
    part = D.load_svhn_test(svhn, subset=50, seed=7)
    np.testing.assert_array_equal(part.rows, D.svhn_subset_rows(N_SVHN, 50, 7))
    np.testing.assert_array_equal(part.images, full.images[part.rows])
    np.testing.assert_array_equal(part.labels, full.labels[part.rows])
    np.testing.assert_array_equal(part.images[:, 0, 0, 0], part.rows % 256)  # the images of those rows


def test_both_loading_paths_honour_the_subset(tmp_path, svhn):
    rng = np.random.default_rng(0)
    D.write_cifar10_test(tmp_path, rng.integers(0, 256, size=(20, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, 20))
    ood = _ood(svhn, svhn_subset=30, svhn_subset_seed=4)
    data = load_eval_data("cifar10", tmp_path, **ood_options(ood))
    assert data.ood["svhn"].shape == (30, 3, 32, 32) and data.ood["gaussian_noise"].shape == (20, 3, 32, 32)
    whole = load_eval_data("cifar10", tmp_path, **ood_options(_ood(svhn)))
    rows = D.svhn_subset_rows(N_SVHN, 30, 4)
    torch.testing.assert_close(data.ood["svhn"], whole.ood["svhn"][torch.from_numpy(rows)], rtol=0, atol=0)
    # a user's torch models with their own transform load the sets themselves
    from calibench.sources.torch_models import _eval_data

    mine, classes = _eval_data({"datasets_root": str(tmp_path), "ood": ood}, "mine", "cifar10", "cpu",
                               lambda x: x.float())
    assert classes is None  # a standard dataset: its own class count
    np.testing.assert_array_equal(mine.ood["svhn"].numpy(), D.load_svhn_test(svhn).images[rows].astype(np.float32))


def test_ood_options_take_the_schema_defaults():
    assert schema_default("ood", "svhn_subset") is None and schema_default("ood", "svhn_subset_seed") == 0
    options = ood_options({"sets": ["svhn"], "noise_severity": 3, "svhn": "x.mat"})
    assert options == {"ood": ("svhn",), "svhn_path": "x.mat", "noise_severity": 3, "svhn_subset": None,
                       "svhn_subset_seed": 0}


# ------------------------------------------------------------------------------ the logits key

# Computed before ood.svhn_subset existed (commit 80dd729) from the files _dummy_root writes:
# logits stored then must keep their keys under the default (null).
PINNED_OOD_FIELDS = {"sets": ["gaussian_noise", "svhn"], "noise_severity": 5, "noise_seed": 0,
                     "svhn_sha256": "b9d9341b6c3c706a3f980963eac9008eecdc8f7f81f269167401cbcfe0310f7a"}
PINNED_OOD_DIGEST = "654087ebcf1acc2b"
PINNED_NATS_KEYS = {"cifar10": "9065b1da760ecc70", "cifar100": "04f90d4ec873f384", "ImageNet16-120": "22f7d4fb63d41102"}


def _dummy_root(tmp_path: Path) -> tuple[Path, Path]:
    """Evaluation files of fixed bytes (a key hashes a file, it does not read it)."""
    for dataset, name in D.EVAL_FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"calibench test {dataset}".encode())
    svhn = tmp_path / "svhn.mat"
    svhn.write_bytes(b"calibench test svhn")
    return tmp_path, svhn


def _nats_keys(root, ood) -> dict:
    settings = {"archive": "/x/NATS-tss-v1_0-3ffb9-full", "seeds": "first", "datasets_root": str(root), "ood": ood}
    return {d: nats_jobs.logits_key(settings, "tss", "200", d, 7, "|nor_conv_3x3~0|", "ab" * 32) for d in D.EVAL_FILES}


def test_the_default_keeps_the_keys_of_logits_stored_before_the_setting(tmp_path):
    root, svhn = _dummy_root(tmp_path)
    for ood in (_ood(svhn), _ood(svhn, svhn_subset=None), _ood(svhn, svhn_subset=None, svhn_subset_seed=0),
                _ood(svhn, svhn_subset=None, svhn_subset_seed=9)):  # the seed of no subset changes nothing
        assert keys.ood_fields("cifar10", ood) == PINNED_OOD_FIELDS
        assert store.digest(keys.ood_fields("cifar10", ood)) == PINNED_OOD_DIGEST
        assert _nats_keys(root, ood) == PINNED_NATS_KEYS


def test_a_subset_changes_the_cifar10_key_only(tmp_path, svhn):
    root, _ = _dummy_root(tmp_path)
    default = _nats_keys(root, _ood(svhn))
    assert _nats_keys(root, _ood(svhn, svhn_subset=N_SVHN)) == default  # every image: the same logits
    seen = {default["cifar10"]}
    for extra in ({"svhn_subset": 100}, {"svhn_subset": 101}, {"svhn_subset": 100, "svhn_subset_seed": 1}):
        changed = _nats_keys(root, _ood(svhn, **extra))
        assert changed["cifar100"] == default["cifar100"] and changed["ImageNet16-120"] == default["ImageNet16-120"]
        assert changed["cifar10"] not in seen
        seen.add(changed["cifar10"])
    # no SVHN set evaluated: the subset is moot
    no_svhn = {"sets": ["gaussian_noise"], "noise_severity": 5, "svhn": str(svhn)}
    assert keys.ood_fields("cifar10", {**no_svhn, "svhn_subset": 100}) == keys.ood_fields("cifar10", no_svhn)


def test_the_key_records_which_images_were_used(svhn):
    fields = keys.ood_fields("cifar10", _ood(svhn, svhn_subset=100, svhn_subset_seed=2))
    record = fields["svhn_subset"]
    assert {k: record[k] for k in ("n", "of", "seed")} == {"n": 100, "of": N_SVHN, "seed": 2}
    rows = D.svhn_subset_rows(record["of"], record["n"], record["seed"])  # redrawn from the record ...
    assert hashlib.sha256(rows.astype("<i8").tobytes()).hexdigest() == record["rows_sha256"]  # ... and checked
    json.dumps(fields)  # it goes into every CIFAR-10 logits file's metadata


# ------------------------------------------------------------------------------ the config check


@pytest.mark.parametrize("value, reason", [(0, "less than the minimum of 1"), (-3, "less than the minimum of 1"),
                                           (2.5, "is not of type 'integer', 'null'"),
                                           ("1000", "is not of type 'integer', 'null'"),
                                           (True, "is not of type 'integer', 'null'")])
def test_the_config_check_rejects_what_is_not_a_positive_integer_or_null(tmp_path, value, reason):
    config = load_yaml(REPO / "config" / "config.yaml")
    check(config, schema=SCHEMA)  # the shipped config passes
    bad = copy.deepcopy(config)
    bad["ood"]["svhn_subset"] = value
    with pytest.raises(ConfigError, match=rf"ood\.svhn_subset = .*{reason}") as exc:
        check(bad, schema=SCHEMA)
    assert "svhn_subset_seed" not in str(exc.value)


def test_the_config_check_accepts_a_subset_and_a_seed():
    config = load_yaml(REPO / "config" / "config.yaml")
    for subset, seed in ((None, 0), (1, 0), (2600, 12345)):
        config["ood"].update(svhn_subset=subset, svhn_subset_seed=seed)
        check(config, schema=SCHEMA)
    config["ood"]["svhn_subset_seed"] = -1
    with pytest.raises(ConfigError, match=r"ood\.svhn_subset_seed = -1: -1 is less than the minimum of 0"):
        check(config, schema=SCHEMA)


def test_inference_params_of_a_finished_run_do_not_change_while_the_subset_is_off():
    """Snakemake fills the schema's defaults (svhn_subset null, seed 0) into the config: the
    inference rules' params must stay what they were before the setting existed, or a finished
    run would replan every inference job (and, through the manifests, everything after it)."""
    from calibench.config.settings import inference_settings

    before = {"archives": {"tss": "a"}, "seeds": "first", "datasets": ["cifar10"], "datasets_root": "d",
              "ood": {"sets": ["gaussian_noise", "svhn"], "noise_severity": 5, "svhn": "s.mat"}}
    now = {**before, "ood": {**before["ood"], "svhn_subset": None, "svhn_subset_seed": 0}}
    assert inference_settings(now, "tss") == inference_settings(before, "tss")
    on = {**before, "ood": {**before["ood"], "svhn_subset": 1000, "svhn_subset_seed": 0}}
    assert inference_settings(on, "tss")["ood"]["svhn_subset"] == 1000
