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


# ---------------------------------------------------------------- NaN and infinity; populations


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


@pytest.mark.parametrize("selection, said", [
    ({"mode": "list"}, "population.sss.indices: required with mode: list"),
    ({"mode": "list", "indices": []}, "population.sss.indices = []: [] should be non-empty"),
    ({"mode": "sample"}, "population.sss.n: required with mode: sample"),
])
def test_a_selection_the_schema_can_refuse_names_the_key(default, selection, said):
    _, config = default
    config["population"]["sss"] = selection
    assert said in _error(config)


def _archive(tmp_path, space, n):
    """An archive directory whose meta lists ``n`` architectures (all the config check reads)."""
    import bz2
    import pickle

    archs = {"tss": "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|none~1|nor_conv_1x1~2|",
             "sss": "8:8:8:8:8"}
    path = tmp_path / space
    path.mkdir()
    with bz2.open(path / "meta.pickle.pbz2", "wb") as f:
        pickle.dump({"meta_archs": [archs[space]] * n, "total_archs": n}, f)
    return str(path)


@pytest.mark.parametrize("selection, said", [
    ({"mode": "list", "indices": [2, 99999]}, "population.sss.indices = [2, 99999]: index 99999 is outside [0, 7) "
                                              "(7 architectures: the archive "),
    ({"mode": "range", "start": 5, "stop": 2}, "population.sss = {'mode': 'range', 'start': 5, 'stop': 2}: range "
                                               "start 5 is not below stop 2: it selects no network"),
    ({"mode": "range", "start": 7}, "range start 7 is not below stop 7: it selects no network (stop left out"),
    ({"mode": "range", "start": 3, "stop": 9}, "population.sss.stop = 9: range [3, 9) is outside [0, 7]"),
    ({"mode": "sample", "n": 8}, "population.sss.n = 8: must lie in [1, 7] for sss"),
    ({"mode": "all", "indices": [1]}, "unknown keys ['indices'] for mode 'all'"),
])
def test_a_selection_that_selects_no_network_or_one_the_archive_lacks_is_a_config_error(tmp_path, default, selection,
                                                                                       said):
    from calibench.sources import check_populations

    path, config = default
    config["minibench"]["build"] = False
    config["archives"]["sss"] = _archive(tmp_path, "sss", 7)
    config["population"]["sss"] = selection
    path.write_text(yaml.safe_dump(config))
    check.check(config, [path], schema=SCHEMA)  # nothing a schema can see
    with pytest.raises(check.ConfigError) as caught:
        check_populations(config, [path])
    assert said in str(caught.value) and f"(set in {path})" in str(caught.value), str(caught.value)
    config["population"]["sss"] = {"mode": "range", "start": 3, "stop": 7}
    check_populations(config, [path])


def test_the_size_a_selection_is_checked_against_is_the_mini_benchmark_this_run_builds(tmp_path, default):
    from calibench.sources import check_populations

    _, config = default  # minibench.build: true, n_tss 6 and the archives under minibench.dir (none built here)
    config["minibench"]["dir"] = str(tmp_path / "mini")
    config["archives"]["tss"] = str(tmp_path / "mini" / "NATS-tss-v1_0-3ffb9-full")
    config["population"]["tss"] = {"mode": "list", "indices": [6]}
    with pytest.raises(check.ConfigError, match=r"population.tss.indices = \[6\]: index 6 is outside \[0, 6\) "
                                                r"\(6 architectures: the mini benchmark this run builds, "
                                                r"minibench.n_tss = 6\)"):
        check_populations(config)
    config["population"]["tss"] = {"mode": "list", "indices": [5]}
    check_populations(config)
    # no archive and no mini benchmark: NATS-Bench's own size bounds the indices
    config["minibench"]["build"] = False
    config["population"]["tss"] = {"mode": "list", "indices": [15625]}
    with pytest.raises(check.ConfigError, match=r"index 15625 is outside \[0, 15625\) \(15625 architectures: "
                                                r"NATS-Bench's TSS"):
        check_populations(config)


def test_a_population_job_that_fails_leaves_the_population_file_as_it_was(tmp_path, default):
    # the job's own check (an archive changed since planning): a SourceError naming the key, nothing written
    from calibench.sources import SourceError, write_population

    out = tmp_path / "population.json"
    out.write_text("the previous population")
    settings_ = {"archive": _archive(tmp_path, "sss", 3), "population": {"mode": "list", "indices": [3]},
                 "chunk_size": 2}
    with pytest.raises(SourceError, match=r"population.sss.indices: index 3 is outside \[0, 3\)"):
        write_population(settings_, "sss", out)
    assert out.read_text() == "the previous population"
