"""A run a user can trust (issue 24): params carry settings only, planning changes nothing on
disk, results are shared by the umask, and mistakes on the command line are one or two lines."""

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.atomic import atomic_write
from calibench.run import repair
from calibench.run.cli import main as cli_main
from fixtures import clone_run

SNAKEMAKE = ["-m", "snakemake", "--configfile", "tiny.yaml", "--cores", "2"]


def _snapshot(root: Path, snakemakes_own: bool = False) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root`` but Snakemake's own state (.snakemake/: its logs and file-state
    cache, which a Snakemake call refreshes; with ``snakemakes_own``, those too): mode, mtime
    and content hash."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and (snakemakes_own or path.relative_to(root).parts[0] != ".snakemake"):
            st = path.stat()
            out[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _snakemake(workdir: Path, *args, python=sys.executable, check=True):
    proc = subprocess.run([python, *SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def finished(workflow_run, tmp_path_factory):
    """A clone of the session's finished WORKFLOW_TINY run that this module may change."""
    return clone_run(workflow_run, tmp_path_factory.mktemp("trust") / "run")


# ---------------------------------------------------------------- params carry settings only

def test_another_interpreter_path_plans_nothing(finished, tmp_path):
    """A venv of its own (another interpreter path, the same packages) finds nothing to do."""
    venv = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "snakemake").is_dir())
    (site / "calibench-test.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    other = venv / "bin" / "python"
    assert str(other) != sys.executable
    proc = _snakemake(finished, "-n", python=str(other))
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_the_svhn_file_of_the_mini_benchmark_is_the_same_bytes_each_time(tmp_path):
    from calibench.inference.data import load_svhn_test, write_svhn_test

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(20, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, 20)
    a = write_svhn_test(tmp_path / "a.mat", images, labels).read_bytes()
    b = write_svhn_test(tmp_path / "b.mat", images, labels).read_bytes()
    assert a == b
    back = load_svhn_test(tmp_path / "a.mat")
    np.testing.assert_array_equal(back.images, images)


# ---------------------------------------------------------------- planning changes nothing

PARSE_WITH_THE_API = """
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path("Snakefile"),
                            config_settings=ConfigSettings(configfiles=[Path("tiny.yaml")]))
    workflow.dag()
print("parsed")
"""


def test_parsing_changes_no_file_whatever_the_entry_point_and_a_run_repairs(finished):
    """Parsing the Snakefile only reads (issue 36): a dry run, --lint, --summary, a plain run of
    a table that is up to date, and the Python API with a deleted shard present change no file's
    bytes, name or mode and name the chunk and the command that repairs it; `calibench repair`,
    then a plain Snakemake run, rebuilds it."""
    results = finished / "results"
    table = layout.table_path(results, "sss_90", "cifar10")
    shard = layout.shard_path(results, "sss", "90", "cifar10", 1)
    shard.unlink()
    before = _snapshot(finished)
    for how in (["-n"], ["--lint"], ["--summary"], [str(table.relative_to(finished))]):
        proc = _snakemake(finished, *how, check=how != ["--lint"])
        assert _snapshot(finished) == before, f"{how} changed files"
        said = proc.stderr + proc.stdout
        assert f"{shard.relative_to(finished)}: deleted" in said and "a run would run this chunk again" in said, said[-2000:]
        assert "`calibench repair` does" in said, said[-2000:]
    api = subprocess.run([sys.executable, "-c", PARSE_WITH_THE_API], cwd=finished, capture_output=True, text=True,
                         timeout=300)
    assert api.returncode == 0 and "parsed" in api.stdout, api.stderr[-2000:]
    assert f"{shard.relative_to(finished)}: deleted" in api.stderr and _snapshot(finished) == before
    # a dry run through `calibench run` too: Snakemake's plan on the terminal, no run lock, no log file
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--", "-np"],
                          cwd=finished, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and _snapshot(finished) == before, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = proc.stdout + proc.stderr  # Snakemake's own words, on the terminal (no log file)
    assert "Job stats" in said or "Nothing to be done" in said, said[-2000:]
    assert f"{shard.relative_to(finished)}: deleted" in said and "a run would run this chunk again" in said, said[-2000:]
    assert table.is_file() and not list(results.rglob(f"*{repair.SET_ASIDE}"))
    # `calibench repair` sets the chunk aside; the next plain run rebuilds it (only the table is asked for)
    fixed = subprocess.run([sys.executable, "-m", "calibench", "repair", "--configfile", "tiny.yaml"], cwd=finished,
                           capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0 and "the next run runs this chunk again" in fixed.stderr, fixed.stderr
    assert not table.exists() and table.with_name(table.name + repair.SET_ASIDE).is_file()
    proc = _snakemake(finished, str(table.relative_to(finished)))
    assert shard.is_file() and len(pd.read_parquet(table)) == 4
    assert "calibench:" not in proc.stderr  # nothing left to repair


@pytest.mark.parametrize("argv, dry", [
    (["-n"], True), (["-np"], True), (["-pn"], True), (["--dry-run"], True), (["--dryrun"], True),
    (["--lint"], False), (["-S"], False), (["--notemp"], False), (["-j", "4"], False), (["--", "-n"], False),
])
def test_which_command_lines_are_dry_runs(argv, dry):
    assert repair.dry_run(argv) is dry  # `calibench run -- -n`: no run lock, no log file


# ---------------------------------------------------------------- shared results

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_atomic_writes_get_the_mode_of_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = atomic_write(tmp_path / "x.parquet", lambda f: f.write(b"data"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_finished_run_is_readable_by_the_group_and_others(workflow_run):
    """The session's run was written under the test process's umask (022 here)."""
    umask = os.umask(0o022)
    os.umask(umask)
    expected = 0o666 & ~umask
    files = [p for p in (workflow_run / "results").rglob("*") if p.is_file()]
    assert len(files) > 100  # a finished run: shards, logits, fits, tables, analysis, report
    wrong = [str(p) for p in files if stat.S_IMODE(p.stat().st_mode) != expected]
    assert not wrong, wrong[:10]


# ---------------------------------------------------------------- one-line answers to mistakes

def _cli(capsys, *argv):
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, words", [
    (["query", "SELECT * FROM network"], ["networks", "views: networks"]),
    (["query", "SELEC 1"], ["syntax error", "views: networks"]),
    (["query", "SELECT no_such_column FROM networks"], ["no_such_column", "views: networks"]),
    (["top", "--space", "sss", "--dataset", "cifar10", "--by", "hcs_9"], ["--by hcs_9", "nearest: hcs_3, hcs_2, hcs_1"]),
    (["top", "--space", "sss", "--dataset", "cifar1O", "--by", "hcs_1"], ["--dataset cifar1O",
                                                                           "(datasets: ImageNet16-120, cifar10, cifar100)"]),
    (["top", "--space", "tsss", "--dataset", "cifar10", "--by", "hcs_1"], ["--space tsss", "sss, tss"]),
    (["reliability", "--space", "tsss", "--dataset", "cifar10", "--arch", "0"], ["--space tsss", "sss, tss"]),
    (["reliability", "--space", "sss", "--dataset", "cifar10", "--arch", "123"], ["--arch 123", "0, 1, 2, 3"]),
    (["reliability", "--space", "sss", "--dataset", "svhn", "--arch", "0"], ["--dataset svhn", "cifar10"]),
    (["query", ""], ["no SQL statement given"]),
    (["query", "SELECT 1; SELECT 2"], ["2 statements given: one at a time"]),
    (["query", "COPY (SELECT * FROM networks) TO 'x.parquet'"], ["a COPY statement: calibench query only reads"]),
    (["query", "SELECT 1", "-o", "/nonexistent/dir/out.csv"], ["--output /nonexistent/dir/out.csv: no directory"]),
    (["reliability", "--space", "sss", "--dataset", "cifar10", "--arch", "0", "--out", "/nonexistent/x.png"],
     ["--out /nonexistent/x.png: no directory /nonexistent"]),
    (["logits", "--results", "/nonexistent"], ["--results /nonexistent: no such directory"]),
])
def test_a_mistake_is_one_or_two_lines_and_exit_2(workflow_run, capsys, argv, words):
    results = str(workflow_run / "results")
    code, out, err = _cli(capsys, *argv, *([] if "--results" in argv else ["--results", results]))
    assert code == 2, (out, err)
    assert "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, err
    assert err.startswith(f"calibench {argv[0]}: ")
    for word in words:
        assert word in err, (word, err)


def test_a_file_that_is_not_a_result_table_is_named_and_nothing_is_written(workflow_run, capsys, tmp_path):
    """Cut short, a shard, or a file where a directory goes: one or two lines naming it, exit 2,
    no output written (nas checks every table before it writes a result)."""
    results = workflow_run / "results"
    table = sorted((results / "tables").glob("*.parquet"))[0]
    cut = tmp_path / table.name
    cut.write_bytes(table.read_bytes()[:500])
    shard = sorted((results / "shards").rglob("*.parquet"))[0]
    copy = tmp_path / "run"
    (copy / "tables").mkdir(parents=True)
    for t in sorted((results / "tables").glob("*.parquet")):
        (copy / "tables" / t.name).write_bytes(t.read_bytes())
    (copy / "tables" / table.name).write_bytes(cut.read_bytes())
    cases = [
        (["provenance", str(cut)], str(cut)),
        (["export", "--format", "tao2024", "--out", str(tmp_path / "ex1"), str(cut)], str(cut)),
        (["export", "--format", "tao2024", "--out", str(tmp_path / "ex2"), str(shard)], "not a result table"),
        (["export", "--format", "tao2024", "--out", str(cut), "--results", str(results)], f"--out {cut}: not a directory"),
        (["compare", str(results), str(cut), "--out", str(tmp_path / "cmp")], str(cut)),
        (["nas", "--out", str(tmp_path / "nas"), "--results", str(copy)], str(copy / "tables" / table.name)),
        (["explore", "--settings", "[1, 2]", "--results", str(results)], "--settings: a JSON object, not list"),
        (["compare", str(shard), str(results), "--out", str(tmp_path / "cmp")], "not a result table (a shard)"),
        (["provenance", str(shard)], "a shard, not a result table"),
        (["provenance", str(results / "analysis" / "hcs.parquet")], "not a result table (no measured_by column"),
        (["provenance", str(sorted((results / "failures").glob("*.parquet"))[0])],
         "not a result table (no pre_* metric columns"),
        (["screenshot", "--report", str(results / "report.html"), "--out", str(tmp_path / "x.txt")],
         f"--out {tmp_path / 'x.txt'}: the screenshot is a PNG"),
        (["reliability", "--space", "sss", "--dataset", "cifar10", "--arch", "0", "--stages", "", "--results",
          str(results)], "--stages: name at least one stage"),
    ]
    for argv, words in cases:
        code, out, err = _cli(capsys, *argv)
        assert code == 2 and "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, (argv, err)
        assert err.startswith(f"calibench {argv[0]}: ") and words in err, (argv, err)
    assert not any((tmp_path / name).exists() for name in ("ex1", "ex2", "cmp", "nas")), list(tmp_path.iterdir())


def test_debug_shows_the_traceback(workflow_run, capsys):
    with pytest.raises(ValueError, match="network"):
        cli_main(["--debug", "query", "SELECT * FROM network", "--results", str(workflow_run / "results")])
    with pytest.raises(ValueError, match="no such file or directory"):  # commands that once caught their own errors
        cli_main(["--debug", "import", "--format", "tao2024", str(workflow_run / "nowhere"), "--results", "x"])


@pytest.mark.parametrize("argv, words", [
    (["run", "--cores", "0"], ["calibench run: error: argument --cores", "positive number of cores or 'all', got '0'"]),
    (["run", "--cores", "two"], ["argument --cores", "got 'two'"]),
    (["top", "--by", "hcs_1"], ["calibench top: error:", "--space, --dataset"]),
    (["nosuch"], ["calibench: error:", "invalid choice: 'nosuch'"]),
    (["top", "--space", "sss", "--dataset", "cifar10", "-n", "0"], ["argument -n: expected a positive number"]),
    (["make-minibench", "out", "--n-test", "-5"], ["argument --n-test: expected a positive number", "got '-5'"]),
    (["make-minibench", "out", "--n-tss", "0"], ["argument --n-tss: expected a positive number of TSS"]),
    (["explore", "--threads", "0"], ["argument --threads: expected a positive number of threads"]),
    (["screenshot", "--width", "-100"], ["argument --width: expected a positive number of pixels"]),
    (["repair", "--bogus"], ["calibench repair: error: unrecognized arguments: --bogus"]),
    (["logits", "--bogus"], ["calibench logits: error: unrecognized arguments: --bogus"]),
])
def test_a_mistake_argparse_catches_is_two_lines_and_exit_2(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 2 and "usage:" not in err, err
    assert err.strip().splitlines()[1].endswith("--help` lists the options)")
    for word in words:
        assert word in err, (word, err)


def test_query_help_names_the_views(capsys):
    with pytest.raises(SystemExit):
        cli_main(["query", "--help"])
    out = capsys.readouterr().out
    assert "networks      one row per measured network" in out and "metrics       one row per shard value" in out
    assert "networks_all  the same plus every TSS isomorph copy (is_copy: true)" in out
    assert "DESCRIBE networks" in out


# ---------------------------------------------------------------- imports refuse mixed scales

def test_one_value_over_1_among_fractions_is_an_error_naming_line_and_column(tmp_path):
    from calibench.results.interop import import_tao2024
    from test_interop import published_file, write_published

    frame = published_file(np.random.default_rng(5), "sss", 20)
    frame.loc[7, "acc"] = 1.5
    src = write_published(frame, tmp_path / "published" / "cifar10_sss.csv")
    with pytest.raises(ValueError) as err:
        import_tao2024(src.parent, tmp_path / "results")
    assert str(err.value) == (f"{src}: column 'acc', line 9: 1.5 is not a fraction in [0, 1] among fractions; "
                              "percent is read only when the whole column is in percent")
    assert not (tmp_path / "results" / "tables").exists() or not list((tmp_path / "results" / "tables").iterdir())
    frame.loc[7, "acc"] = 0.5
    frame["acc"] *= 100  # the whole column in percent: read, converted
    write_published(frame, src)
    import_tao2024(src.parent, tmp_path / "results")
    table = pd.read_parquet(tmp_path / "results" / "tables" / "sss_90_cifar10.parquet")
    assert table["accuracy"].between(0, 1).all() and table["accuracy"].max() > 0.5


# ---------------------------------------------------------------- calibench status

def test_status_names_what_a_run_would_do_and_changes_nothing(workflow_run, tmp_path):
    run = clone_run(workflow_run, tmp_path / "status")
    status = [sys.executable, "-m", "calibench", "status", "--configfile", "tiny.yaml"]
    proc = subprocess.run(status, cwd=run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "16 complete, 0 to run: nothing to do", proc.stdout  # 6 tables, 8 parts
    assert "complete  results/analysis/parts/nas.json  (analysis_nas)" in proc.stdout.splitlines()

    shard = layout.shard_path(Path("results"), "sss", "90", "cifar100", 2)
    (run / shard).unlink()
    before = _snapshot(run, snakemakes_own=True)  # Snakemake's own state too: no run log, no cache written
    proc = subprocess.run(status, cwd=run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "to run    results/tables/sss_90_cifar100.parquet  (damaged: " in proc.stdout and f"{shard}: deleted" in proc.stdout
    assert "to run    results/report.html  (after its tables)" in lines
    assert "to run    results/explorer/index.html  (after its tables)" in lines
    assert "to run    results/analysis/parts/kendall.json  (analysis_kendall: after its tables)" in lines
    assert lines[-1] == "5 complete, 11 to run: `calibench run` completes them"
    assert _snapshot(run, snakemakes_own=True) == before

    # A changed setting is named with both values, table by table (issue 34)
    import yaml

    config = yaml.safe_load((run / "tiny.yaml").read_text())
    assert config["bins"] == [5, 15, 50]
    config["bins"] = [5, 15]
    (run / "tiny.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(status, cwd=run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ("to run    results/tables/tss_200_cifar10.parquet  (settings changed: bins: 5, 15, 50 → 5, 15; "
            "fits made again: none; rows kept: pre, post, vs, ms, dir, iso, hist, spline)") \
        in proc.stdout.splitlines(), proc.stdout  # issue 35: a bin count dropped refits and measures nothing
    assert "a measurement setting changed: the measure job of each chunk of those tables reruns from the stored " \
           "logits" in proc.stdout, proc.stdout

    # the lambda, mu search's grid: the search is named with the key and both values, and what it may refit
    config["bins"] = [5, 15, 50]
    config["recalibration"]["odir"]["search"]["grid"] = [10.0, 100.0]
    (run / "tiny.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(status, cwd=run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ("to run    results/tables/tss_200_cifar10.parquet  (the lambda, mu search reruns: "
            "recalibration.odir.search.grid: 10.0, 1000.0 → 10.0, 100.0; fits made again: none; rows kept: pre, "
            "post, vs, ms, dir, iso, hist, spline (ms, dir: fitted again where the search chooses another lambda, "
            "mu))") in proc.stdout.splitlines(), proc.stdout

    bad = subprocess.run(status + ["--space", "tsss"], cwd=run, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "calibench status: --space tsss: not in this config (spaces and populations: sss, tss)")


def test_the_plan_of_a_rerun_names_pre_when_it_is_measured_again(workflow_run, monkeypatch):
    """pre has no fit: a setting that changes its rows (the split, the TACE threshold) measures it
    again, and the plan says so beside the fitted stages (read from the finished run, nothing run)."""
    import copy

    from calibench.run import status
    from calibench.run.targets import _merged_config

    monkeypatch.chdir(workflow_run)
    config = _merged_config("tiny.yaml")
    table = "results/tables/tss_200_cifar10.parquet"
    recorded = status._recorded_settings(table)
    split = copy.deepcopy(config)
    split["temperature"]["val_fraction"] = 0.3
    assert status._fit_plan(split, table, recorded) == (
        "fits made again: post, vs, ms, dir, iso, hist, spline; measured again (no fit): pre")
    # the search's split changed too: it is named, and its stages are not said twice
    said = status._search_changed(split, table)
    assert said == "the lambda, mu search reruns: temperature.val_fraction: 0.2 → 0.3", said
    assert status._after_search(split, status._fit_stages(split, table, recorded).refitted) == ""
    assert status._rerun_plan(split, table, recorded) == (
        "settings changed: temperature.val_fraction: 0.2 → 0.3; " + said + "; fits made again: post, vs, ms, dir, iso, "
        "hist, spline; measured again (no fit): pre")
    tace = copy.deepcopy(config)
    tace["tace_threshold"] *= 2
    assert status._fit_plan(tace, table, recorded).endswith(
        "re-applied from the fit store and measured whole: post, vs, ms, dir, iso, hist, spline; "
        "measured again (no fit): pre")
    assert status._search_changed(tace, table) == ""  # the threshold is not the search's
    # pre on the whole evaluation set (Tao et al.'s pre-scaling numbers): pre alone is measured again
    whole = copy.deepcopy(config)
    whole["pre_samples"] = "all"
    assert status._settings_changed(whole, recorded) == "settings changed: pre_samples: test_part → all"
    assert status._fit_plan(whole, table, recorded) == (
        "fits made again: none; measured again (no fit): pre; rows kept: post, vs, ms, dir, iso, hist, spline")
    # MCE signed (Tao et al.'s): every stage measured again, no fit made
    signed = copy.deepcopy(config)
    signed["mce"] = "signed"
    assert status._settings_changed(signed, recorded) == "settings changed: mce: unsigned → signed"
    assert status._fit_plan(signed, table, recorded) == (
        "fits made again: none; re-applied from the fit store and measured whole: post, vs, ms, dir, iso, hist, "
        "spline; measured again (no fit): pre")


# ---------------------------------------------------------------- archives and datasets named by their key

def _without_build(workdir: Path) -> None:
    import yaml

    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    config["minibench"]["build"] = False
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))


def test_a_missing_archive_is_named_by_its_key_before_any_job(tmp_path):
    from fixtures import WORKFLOW_TINY, copy_workflow

    workdir = copy_workflow(tmp_path / "fresh", WORKFLOW_TINY)
    _without_build(workdir)
    proc = _snakemake(workdir, check=False)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if "archives.sss" in line]
    assert len(said) == 1, proc.stderr[-2000:]
    for key, why in (("archives.sss = resources/minibench/NATS-sss-v1_0-50262-full", "no meta.pickle.pbz2 there"),
                     ("archives.tss = resources/minibench/NATS-tss-v1_0-3ffb9-full", "no meta.pickle.pbz2 there"),
                     ("datasets_root = resources/minibench/datasets", "not found"),
                     ("ood.svhn = resources/minibench/datasets/svhn/test_32x32.mat", "not found")):
        assert f"{key}: {why}" in said[0], said[0]
    assert said[0].endswith("point it at your copy (config/nats.yaml) or build the mini benchmark"), said[0]
    assert not (workdir / "results").exists()


def test_a_finished_run_with_its_archives_moved_plans_nothing_and_says_so(workflow_run, tmp_path):
    """The mini benchmark moved away: the archives, datasets and SVHN file are named, nothing
    is planned (the logits store holds every network)."""
    run = clone_run(workflow_run, tmp_path / "moved")
    os.rename(run / "resources", tmp_path / "elsewhere")
    _without_build(run)
    proc = _snakemake(run, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("calibench: ")]
    assert said == ["calibench: not found: archives.sss = resources/minibench/NATS-sss-v1_0-50262-full; "
                    "archives.tss = resources/minibench/NATS-tss-v1_0-3ffb9-full; datasets_root = "
                    "resources/minibench/datasets; ood.svhn = resources/minibench/datasets/svhn/test_32x32.mat; "
                    "networks already in the logits store need none (any other fails, naming the file)"], said

    # The config pointed at the new place: params name inputs, not paths. The mini benchmark this run
    # built was the population's input, so its set of inputs changes once (a user's archive never is
    # one): the population is written again, but no network is inferred or measured again, no manifest
    # is lost and the table is the same (issue 34). One table's jobs: every table's are alike, and the
    # whole DAG again (searches, the analysis) would cost two minutes of the suite.
    import yaml

    config = yaml.safe_load((run / "tiny.yaml").read_text())
    new = str(tmp_path / "elsewhere" / "minibench")
    config["archives"] = {"tss": f"{new}/NATS-tss-v1_0-3ffb9-full", "sss": f"{new}/NATS-sss-v1_0-50262-full"}
    config["datasets_root"] = f"{new}/datasets"
    config.setdefault("ood", {})["svhn"] = f"{new}/datasets/svhn/test_32x32.mat"
    (run / "tiny.yaml").write_text(yaml.safe_dump(config))
    table = "results/tables/sss_90_cifar10.parquet"
    manifests = sorted((run / "results" / "chunks").rglob("*.json"))
    stored = {p: p.stat().st_mtime_ns for sub in ("logits", "shards") for p in (run / "results" / sub).rglob("arch=*")}
    before = pd.read_parquet(run / table)
    proc = _snakemake(run, table)
    assert not [line for line in proc.stderr.splitlines() if line.startswith("calibench: not found")], proc.stderr[-2000:]
    assert "checkpoint population:" in proc.stdout + proc.stderr  # the population was written again
    assert sorted((run / "results" / "chunks").rglob("*.json")) == manifests
    assert {p: p.stat().st_mtime_ns for p in stored} == stored  # nothing inferred or measured again
    after = pd.read_parquet(run / table)
    pd.testing.assert_frame_equal(before.drop(columns=["config_hash"]), after.drop(columns=["config_hash"]))
    proc = _snakemake(run, table, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


# ---------------------------------------------------------------- a terminal a person can follow

SNAKEMAKE_OUTPUT = """Job stats:
job        count
-------  -------
infer          2
measure        2
total          4

[Wed Nov 25 21:22:11 2026]
rule infer:
    output: results/chunks/infer/sss_90/chunk00000.json
    jobid: 5
[Wed Nov 25 21:22:11 2026]
rule infer:
    jobid: 8
calibench: results/chunks/x.json: deleted: this chunk runs again
Finished jobid: 5 (Rule: infer)
1 of 4 steps (25%) done
checkpoint population:
    jobid: 1
Finished jobid: 8 (Rule: infer)
rule measure:
    jobid: 4
Error in rule measure:
    jobid: 4
rule measure:
    jobid: 7
rule measure:
    jobid: 9
Finished jobid: 7 (Rule: measure)
Finished jobid: 9 (Rule: measure)
Finished jobid: 1 (Rule: population)
"""


def test_progress_lines_per_rule_never_go_back():
    from calibench.run.progress import RunProgress

    said, noted, now = [], [], iter(range(0, 1000, 10))
    progress = RunProgress(said.append, noted.append, clock=lambda: next(now))
    for line in SNAKEMAKE_OUTPUT.splitlines(keepends=True):
        progress.feed(line)
    assert noted == ["calibench: results/chunks/x.json: deleted: this chunk runs again"]
    assert [line.split("]", 1)[1].split(",")[0].split() for line in said] == [
        ["infer", "1/2", "done"], ["infer", "2/2", "done"], ["measure", "0/2", "done"], ["measure", "1/3", "done"],
        ["measure", "2/3", "done"], ["population", "1/1", "done"]]
    assert "1 failed" in said[2] and "left" in said[0]
    for rule in ("infer", "measure"):  # done counts and totals never decrease
        seen = [(d, t) for r, d, t in progress.shown if r == rule]
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(seen, seen[1:]))
    assert progress.jobs() == (5, 1)


def test_calibench_run_shows_progress_and_a_summary_of_this_run(small_sss_run, tmp_path):
    import json

    run = clone_run(small_sss_run, tmp_path / "progress")
    (run / layout.shard_path(Path("results"), "sss", "90", "cifar10", 1)).unlink()
    proc = subprocess.run([sys.executable, "-m", "calibench", "run", "--configfile", "tiny.yaml", "--space", "sss",
                           "--dataset", "cifar10"], cwd=run, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    progress = [line for line in lines if line.startswith("[")]
    assert [line.split("]", 1)[1].split()[:2] for line in progress] == [["measure", "1/1"], ["table", "1/1"]], lines
    assert "Finished jobid" not in proc.stdout + proc.stderr  # Snakemake's job log went to its file
    summary = next(line for line in lines if line.startswith("calibench: ") and "job(s) run" in line)
    manifests = [json.loads(p.read_text()) for p in (run / "results/chunks/measure/sss_90_cifar10").glob("*.json")]
    assert "calibench: 2 job(s) run in " in summary and "networks measured: 1, already measured: 0;" in summary
    assert sum(m["computed"] for m in manifests) == 2  # the other chunk's manifest is from the first run
    log = Path(run, summary.rsplit("Snakemake's log: ", 1)[1])
    assert "Finished jobid" in log.read_text() and log.parent == run / "results/logs/snakemake"


# ---------------------------------------------------------------- joins by index use NATS-Bench's indices

def test_the_mini_benchmark_s_tables_carry_nats_bench_indices_and_a_join_by_index_pairs_the_right_cells(
        workflow_run, tmp_path):
    """The mini benchmark's own indices are 0, 1, ... of its meta; its tables' nats_index is each
    cell's position in the published NATS-Bench meta (shared fixtures), and a robustness file in
    the Jung et al. layout (row i = NATS-Bench TSS architecture i, no key column) joined by index
    gives every row the values of its own cell."""
    from calibench.analysis.nats import robustness
    from calibench.analysis.tables import load_tables
    from calibench.sources.nats.archstr import TSS_OPS, tss_edge_ops
    from calibench.sources.nats.population import read_meta
    from fixtures import SSS_SIMPLE, TSS_SIMPLE, require_shared

    require_shared()
    meta = {"tss": read_meta(TSS_SIMPLE), "sss": read_meta(SSS_SIMPLE)}
    paths = layout.result_tables(workflow_run / "results")
    for path in paths:
        table = pd.read_parquet(path)
        space = table["space"].iloc[0]
        assert table["nats_index"].notna().all(), path
        assert [meta[space][i] for i in table["nats_index"]] == table["arch_str"].tolist(), path
        assert (table["nats_index"] != table["arch_index"]).any(), path  # its own indices are not NATS-Bench's

    def code(arch: str) -> int:  # a number that names the cell: its six edge operations in base 5
        return sum(TSS_OPS.index(op) * 5 ** k for k, op in enumerate(tss_edge_ops(arch)))

    jung = pd.DataFrame({"cell_code": [code(a) for a in meta["tss"]], "clean_acc": np.linspace(0.5, 0.9, 15625)})
    jung.to_csv(tmp_path / "robustness.csv", index=False)
    tss = load_tables([p for p in paths if p.name.startswith("tss_")])
    joined = robustness.join_robustness(tss, robustness.load_robustness(tmp_path / "robustness.csv", "arch_index"))
    assert len(joined) == len(tss) > 0 and set(joined["arch_index"]) == {0, 1, 2}
    assert joined["cell_code"].tolist() == [code(a) for a in joined["arch_str"]]


@pytest.mark.parametrize("after, words", [
    (["--bogus-flag"], "not options of snakemake: --bogus-flag"),
    (["--cores", "x"], "snakemake option after --: Error parsing number of cores"),
])
def test_a_bad_snakemake_option_after_the_dashes_is_one_line_before_anything_runs(capsys, monkeypatch, tmp_path,
                                                                                  after, words):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the checkout's config; nothing may be written
    before = sorted(Path(".").glob("results*"))
    code, out, err = _cli(capsys, "run", "--configfile", "config/config.yaml", "--", *after)
    assert code == 2 and err.strip().splitlines() == [f"calibench: {err.strip()[len('calibench: '):]}"], err
    assert words in err and sorted(Path(".").glob("results*")) == before


@pytest.mark.parametrize("sql", ["PIVOT networks ON space USING avg(accuracy)", "CALL pragma_table_info('networks')",
                                 "DESCRIBE networks", "SUMMARIZE SELECT accuracy FROM networks",
                                 "-- a comment\nWITH t AS (SELECT 1 AS one) SELECT * FROM t"])
def test_every_kind_of_read_runs_in_query(workflow_run, capsys, sql):
    code, out, err = _cli(capsys, "query", sql, "--results", str(workflow_run / "results"))
    assert code == 0 and out.strip() and not err.strip(), err


def test_a_write_dressed_as_a_pivot_is_refused(workflow_run, capsys, tmp_path):
    target = tmp_path / "x.csv"
    code, out, err = _cli(capsys, "query", f"COPY (PIVOT networks ON space USING avg(accuracy)) TO '{target}'",
                          "--results", str(workflow_run / "results"))
    assert code == 2 and "a COPY statement: calibench query only reads" in err and not target.exists(), err


def test_the_metrics_view_of_imported_tables_says_why_it_is_empty(workflow_run, capsys, tmp_path):
    results = str(workflow_run / "results")
    assert _cli(capsys, "export", "--format", "tao2024", "--out", str(tmp_path / "csv"), "--results", results)[0] == 0
    assert _cli(capsys, "import", "--format", "tao2024", str(tmp_path / "csv"), "--results", str(tmp_path / "imp"))[0] == 0
    code, out, err = _cli(capsys, "query", "SELECT count(*) FROM metrics", "--results", str(tmp_path / "imp"))
    assert code == 2 and f"view metrics: no shard under {tmp_path / 'imp' / 'shards'}" in err, err
    code, out, err = _cli(capsys, "query", "SELECT count(*) AS n FROM networks", "--results", str(tmp_path / "imp"))
    assert code == 0 and int(out.split()[-1]) > 0, (out, err)


def test_the_closing_summary_says_which_stages_a_rerun_kept_and_which_it_measured(tmp_path):
    """Networks measured by a rerun that kept some stages' rows are said with what was measured of
    them (``stages_measured`` of the chunks' manifests written by this run); older manifests do not count."""
    import json
    import time

    from calibench.run.workflow import _networks_measured

    results = tmp_path / "results"
    old = layout.measure_manifest(results, "sss_90", "cifar10", 0)
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"computed": 5, "skipped": 0, "stages_measured": {"whole": {"ms": 5}}}))
    os.utime(old, (time.time() - 100, time.time() - 100))
    since = time.time() - 10
    assert _networks_measured(results, since) == (0, 0, "")
    whole = layout.measure_manifest(results, "sss_90", "cifar100", 0)
    whole.parent.mkdir(parents=True)
    whole.write_text(json.dumps({"computed": 3, "skipped": 1, "stages_measured": {"whole": {"pre": 3, "post": 3}}}))
    assert _networks_measured(results, since) == (3, 1, "")  # measured from scratch: nothing more to say
    rerun = layout.measure_manifest(results, "tss_200", "cifar10", 1)
    rerun.parent.mkdir(parents=True)
    rerun.write_text(json.dumps({"computed": 4, "skipped": 0, "stages_measured": {
        "whole": {"spline": 4}, "new_bins": {"post": 4, "pre": 4}, "kept": {"hist": 4, "vs": 4}}}))
    # pre and post were measured whole in one table and at the new bin counts only in the other: said with counts
    assert _networks_measured(results, since) == (
        7, 1, " (stages measured whole: pre (1 table), post (1 table), spline; at the new bin counts only: "
              "pre (1 table), post (1 table); rows kept: vs, hist)")
    other = layout.measure_manifest(results, "tss_200", "cifar100", 0)
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({"computed": 2, "skipped": 0, "stages_measured": {
        "whole": {"spline": 2}, "new_bins": {"post": 2, "pre": 2}, "kept": {"hist": 2, "vs": 2}}}))
    assert _networks_measured(results, since) == (
        9, 1, " (stages measured whole: pre (1 table), post (1 table), spline; at the new bin counts only: "
              "pre (2 tables), post (2 tables); rows kept: vs, hist)")
