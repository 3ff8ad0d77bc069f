"""Config errors say what the schema accepts and where the value came from; keys the schema
lets a config leave out are filled by the schema (docs/config.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibench.config import check, settings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / check.SCHEMA


@pytest.fixture
def default(tmp_path):
    """The default config as a file and as the dict Snakemake would hold."""
    path = tmp_path / "config.yaml"
    path.write_text((ROOT / "config" / "config.yaml").read_text())
    return path, yaml.safe_load(path.read_text())


def _error(config, files=()) -> str:
    with pytest.raises(check.ConfigError) as caught:
        check.check(config, files, schema=SCHEMA)
    return str(caught.value)


@pytest.mark.parametrize("key, value, said", [
    ("measure_group", "many", "measure_group = 'many': expected an integer >= 1, or 'auto'"),
    ("loader_workers", -1, "loader_workers = -1: -1 is less than the minimum of 1"),  # the integer form's rule
    ("seeds", ["777"], "seeds = ['777']: at [0]: '777' is not of type 'integer'"),
    ("explorer_bins", [5, 0], "explorer_bins = [5, 0]: at [1]: 0 is less than the minimum of 1"),
    ("seeds", "all", "seeds = 'all': expected 'first', or a list"),
    ("stages", ["post", "vs"], "stages = ['post', 'vs']: must contain 'pre'"),
    ("populations", {"zoo": {"source": "logits"}},
     "populations.zoo = {'source': 'logits'}: expected a mapping with path, or a mapping with models"),
])
def test_a_value_of_the_wrong_form_is_told_what_the_schema_accepts(default, key, value, said):
    path, config = default
    config[key] = value
    path.write_text(yaml.safe_dump(config))
    text = _error(config, [path])
    assert f"  {said} (set in {path})" in text, text
    assert "is not valid under any of the given schemas" not in text


def test_a_value_given_with_config_is_not_blamed_on_the_file(default):
    path, config = default
    config["tace_threshold"] = 2  # as `--config tace_threshold=2` over the file's 0.001
    assert "tace_threshold = 2: 2 is greater than or equal to the maximum of 1 (a default or --config value)" in \
        _error(config, [path])
    path.write_text(yaml.safe_dump(config))  # now the file says 2
    assert f"(set in {path})" in _error(config, [path])


def test_a_space_that_runs_needs_its_archive_and_one_that_does_not_may_leave_it_out(default):
    _, config = default
    del config["archives"]["sss"]
    assert "  archives.sss: required key missing" in _error(config)
    config["spaces"] = ["tss"]
    check.check(config, schema=SCHEMA)


def test_keys_with_a_schema_default_may_be_left_out_and_the_settings_hold_the_default(default):
    _, config = default
    del config["analysis"]["hcs_betas"]
    for key in ("n_tss", "n_sss", "n_test", "n_train", "seed"):  # make-minibench's own defaults then
        del config["minibench"][key]
    check.check(config, schema=SCHEMA)
    assert check.schema_default("analysis", "hcs_betas") == [1, 2, 3]
    config["robustness"] = {"path": "rob.csv"}
    check.check(config, schema=SCHEMA)
    assert settings.analysis_settings(config)["robustness"] == {
        "path": "rob.csv", "key": "arch_index", "datasets": ["cifar10"], "resamples": 0, "seed": 0}


def test_the_order_of_the_bin_counts_changes_no_setting(default):
    _, config = default
    shuffled = {**config, "bins": list(reversed(config["bins"]))}
    assert settings.measurement_settings(shuffled) == settings.measurement_settings(config)
    assert settings.analysis_settings(shuffled) == settings.analysis_settings(config)
    assert settings.explorer_settings(shuffled) == settings.explorer_settings(config)


def test_a_mapping_merged_from_two_files_is_blamed_on_the_last_not_on_config(tmp_path, default):
    path, config = default
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump({"populations": {"zoo": {"source": "torch"}}}))
    config["populations"] = {"zoo": {"source": "torch", "path": "x"}}  # merged: path from the first file
    text = _error(config, [path, over])
    assert f"(set in {over})" in text and "--config" not in text, text


# ---------------------------------------------------------------- NaN and infinity


@pytest.mark.parametrize("key, text, named", [
    ("tace_threshold", ".nan", "tace_threshold"),
    ("temperature.val_fraction", ".nan", "temperature.val_fraction"),
    ("recalibration.tolerance", "-.inf", "recalibration.tolerance"),
    ("analysis.bootstrap.level", ".nan", "analysis.bootstrap.level"),
    ("analysis.hcs_betas", "[1, .nan]", "analysis.hcs_betas.1"),
    ("recalibration.odir.search.grid", "[.inf, 10]", "recalibration.odir.search.grid.0"),
    ("recalibration.odir.ms.lambda", ".inf", "recalibration.odir.ms.lambda"),
])
def test_nan_and_infinity_are_refused_with_the_key_and_the_file(default, key, text, named):
    # JSON Schema's bounds cannot refuse NaN (every comparison with it is false): the check's walk does
    path, config = default
    *parents, last = key.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(text)
    path.write_text(yaml.safe_dump(config))  # .nan, .inf in the file: the file is blamed, not --config
    said = _error(config, [path])
    assert f"  {named} = " in said and "not a finite number" in said and f"(set in {path})" in said, said
    assert len(said.splitlines()) == 2, said  # one line, not also the bound an infinity breaks
