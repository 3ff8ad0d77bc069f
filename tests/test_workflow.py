"""The Snakemake workflow end to end on a tiny mini benchmark: the two stages and the logits
store, every post-hoc method, results that follow the config, kill -9 of the whole run and
resume, and lint."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from calibench import layout
from calibench.store import logits as store
from calibench import metrics
from calibench.metrics.scores import hcs
from calibench.recalibration import STAGES
from fixtures import WORKFLOW_TINY

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
CALIBENCH_RUN = [sys.executable, "-m", "calibench.run.cli", "run"]  # the README's command (`calibench run`)
DATASETS = ["cifar10", "cifar100", "ImageNet16-120"]
TINY = WORKFLOW_TINY
SELECTED = {"tss": [0, 2], "sss": [0, 1, 2, 3]}  # mini TSS archs 0 and 1 are isomorphic
N_STORED = (2 + 4) * len(DATASETS)  # logits files (and shards) of a finished run
# The analysis parts of a NATS-Bench run (calibench.analysis.parts), the report and the explorer: one job each.
PARTS = ("kendall", "overview", "hcs", "methods", "reliability", "groups", "nas", "architecture")
ANALYSIS_JOBS = {**{f"analysis_{part}": 1 for part in PARTS}, "assemble_report": 1, "explorer": 1}


def _snakemake(workdir: Path, *args, check=True, env=None):
    proc = subprocess.run(SNAKEMAKE + ["--configfile", "tiny.yaml", "--cores", "2", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=900, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def _planned_jobs(workdir: Path) -> dict[str, int]:
    """Rule -> job count of a dry run (Snakemake's job stats table)."""
    proc = _snakemake(workdir, "-n", "--quiet", "rules")
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    jobs = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            jobs[parts[0]] = int(parts[1])
    assert jobs, text
    return jobs


def _set_config(workdir: Path, **changes) -> None:
    path = workdir / "tiny.yaml"
    config = yaml.safe_load(path.read_text())
    config.update(changes)
    path.write_text(yaml.safe_dump(config))


def _clone(src: Path, dst: Path) -> Path:
    """A finished run's whole working directory (results, resources, Snakemake's metadata), times kept."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _mtimes(root: Path, pattern: str = "*") -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in root.rglob(pattern) if p.is_file() and "logs" not in p.parts}


@pytest.fixture(scope="module")
def finished_run(workflow_run):
    """The session's WORKFLOW_TINY run (conftest.py): read-only here; tests that change files clone it."""
    return workflow_run


def test_each_archive_file_is_decompressed_once_for_all_datasets(finished_run):
    reads = (finished_run / "archive_reads.log").read_text().split()
    files = [Path(r) for r in reads]
    assert len(files) == len(set(files)), "an archive file was decompressed more than once"
    expected = {("NATS-tss-v1_0-3ffb9-full", f"{i:06d}.pickle.pbz2") for i in SELECTED["tss"]}
    expected |= {("NATS-sss-v1_0-50262-full", f"{i:06d}.pickle.pbz2") for i in SELECTED["sss"]}
    assert {(f.parent.name, f.name) for f in files} == expected
    for space in ("tss", "sss"):
        for manifest in (finished_run / "results" / "chunks" / "infer").glob(f"{space}_*/chunk*.json"):
            summary = json.loads(manifest.read_text())
            assert summary["archive_files_read"] == len(summary["indices"])
            assert summary["computed"] == len(summary["indices"]) * len(DATASETS)


def test_the_logits_store_holds_every_network_and_labels_once(finished_run):
    results = finished_run / "results"
    for space, hp in (("tss", "200"), ("sss", "90")):
        for dataset in DATASETS:
            labels = store.read_labels(layout.labels_path(results, dataset))
            for index in SELECTED[space]:
                stored = store.read_network_logits(layout.logits_path(results, space, hp, dataset, index))
                (seed,) = stored.seeds
                k = {"cifar10": 10, "cifar100": 100, "ImageNet16-120": 120}[dataset]
                assert seed.sets["test"].shape == (len(labels.labels), k) and seed.sets["test"].dtype == np.float32
                ood = {"test", "ood_gaussian_noise", "ood_svhn"} if dataset == "cifar10" else {"test"}
                assert set(seed.sets) == ood
                assert stored.meta["labels_sha256"] == labels.meta["labels_sha256"]
    assert sorted(p.name for p in (results / "logits" / "labels").iterdir()) == [
        f"dataset={d}.parquet" for d in sorted(DATASETS)]
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "logits", "--results", str(results)],
                          capture_output=True, text=True, check=True)
    assert f"total: {N_STORED} files" in proc.stdout and "ImageNet16-120" in proc.stdout


def test_every_shard_exists_with_the_spec_metric_names_and_its_logits(finished_run):
    results = finished_run / "results"
    names = set(metrics.metric_names(TINY["bins"]))
    for space, hp in (("tss", "200"), ("sss", "90")):
        selected = json.loads((results / "population" / f"{space}.json").read_text())["selected"]
        assert selected == SELECTED[space]
        for dataset in DATASETS:
            for index in selected:
                shard = pq.read_table(results / "shards" / f"space={space}" / f"hp={hp}" / f"dataset={dataset}" /
                                      f"arch={index:06d}.parquet").to_pandas()
                ood = {"ood_auroc_gaussian_noise", "ood_auroc_svhn"} if dataset == "cifar10" else set()
                assert set(shard["stage"]) == set(STAGES)
                for stage, rows in shard.groupby("stage"):
                    got = {f"{m}_{int(b)}" if not pd.isna(b) else m for m, b in zip(rows["metric"], rows["bins"])}
                    searched = {"search_worse_than_identity"} if stage in ("ms", "dir") else set()  # the lambda, mu search's flag
                    assert {g for g in got if not g.startswith("fit_")} == names | ood | searched, (space, dataset, index, stage)
                    fitted = {g for g in got if g.startswith("fit_")}
                    assert (not fitted) if stage == "pre" else {"fit_converged", "fit_iterations"} <= fitted
                assert (shard["arch_index"] == index).all() and shard["config_hash"].nunique() == 1
                assert shard["temperature"].between(0.05, 20).all()
                # Provenance: which stored logits it measured.
                logits_file = results / shard["logits_file"].iloc[0]
                assert logits_file == layout.logits_path(results, space, hp, dataset, index)
                assert shard["logits_key"].iloc[0] == store.stored_key(logits_file)


def test_tables_count_networks_and_expand_tss(finished_run):
    from calibench.results.provenance import provenance_summary

    def table_name(space, table):
        return f"{space}_{table['hp'].iloc[0]}_{dataset}"

    results = finished_run / "results"
    for dataset in DATASETS:
        tss = pd.read_parquet(results / "tables" / f"tss_200_{dataset}.parquet")
        assert list(tss["arch_index"]) == [0, 1, 2]  # three indices, two measured networks
        assert list(tss["measured_by"]) == [0, 0, 2]
        row0, row1 = tss.iloc[0], tss.iloc[1]
        assert row0["pre_ece_15"] == row1["pre_ece_15"] and row0["arch_str"] != row1["arch_str"]
        sss = pd.read_parquet(results / "tables" / f"sss_90_{dataset}.parquet")
        assert len(sss) == 4 and (sss["arch_index"] == sss["measured_by"]).all()
        # provenance counts the table's rows, the TSS isomorph copy included (issue 25 item 7)
        tss_path = results / "tables" / f"tss_200_{dataset}.parquet"
        assert provenance_summary(tss_path).splitlines()[1].startswith(
            "  3 rows (1 of them copies of an isomorphic TSS cell's measurement); ")
        for col in ("accuracy", "recorded_accuracy", "temperature", "pre_ece_15", "post_cwce_em_50", "pre_kdece",
                    "logits_key", "vs_ece_15", "ms_nll", "dir_accuracy", "iso_cwce_15", "hist_ace_50", "spline_ksce",
                    "post_fit_temperature", "ms_fit_lambda", "dir_fit_mu", "vs_fit_converged"):
            assert col in tss.columns and col in sss.columns, col
        np.testing.assert_allclose(sss["temperature"], sss["post_fit_temperature"])
        for space, table in (("tss", tss), ("sss", sss)):  # ODIR lambda, mu: searched once per table, recorded
            search = json.loads((results / "recalibration" / f"odir_{space}_{table['hp'].iloc[0]}_{dataset}.json")
                                .read_text())
            for stage in ("ms", "dir"):
                chosen = search["chosen"][stage]
                assert {chosen["lambda"], chosen["mu"]} <= {1e1, 1e3}
                # always the grid's best pair by CV NLL; flagged (JSON, table, report) where worse than identity
                mean_nll = np.array(search["grid"][stage]["mean_nll"])
                grid = search["grid"][stage]["values"]
                assert chosen["cv_nll"] == mean_nll[grid.index(chosen["lambda"]), grid.index(chosen["mu"])]
                assert chosen["cv_nll"] == np.nanmin(mean_nll)
                worse = chosen[f"{stage}_search_worse_than_identity"]
                assert worse == int(chosen["cv_nll"] > chosen["identity_cv_nll"])
                assert (table[f"{stage}_search_worse_than_identity"] == worse).all()
                report = (results / "report.html").read_text()
                told = f"{table_name(space, table)}, {stage}: the grid&#x27;s best pair" in report
                assert told == bool(worse) and (chosen["reason"] is None) == (not worse)
                assert (table[f"{stage}_fit_lambda"] == search["chosen"][stage]["lambda"]).all()
                assert (table[f"{stage}_fit_mu"] == search["chosen"][stage]["mu"]).all()
        for stage in STAGES:  # every stage measured every network (or says why not in the failures table)
            failures = pd.read_parquet(results / "failures" / f"sss_90_{dataset}.parquet")
            failed = set(failures.loc[failures["stage"] == stage, "arch_index"])
            ok = sss[~sss["arch_index"].isin(failed)]
            assert ok[f"{stage}_ece_15"].between(0, 1).all() and ok[f"{stage}_accuracy"].between(0, 1).all(), stage
        n = len(store.read_labels(layout.labels_path(results, dataset)).labels)
        np.testing.assert_allclose(sss["accuracy"], sss["recorded_accuracy"], atol=1.5 / n)


def test_kendall_matrices_are_symmetric_with_unit_diagonal(finished_run):
    kendall = pd.read_parquet(finished_run / "results" / "analysis" / "kendall.parquet")
    assert set(kendall["figure"]) == {"datasets", "metrics", "pre_post"}
    square = kendall[kendall["figure"] != "pre_post"]
    assert set(square[square["figure"] == "metrics"]["stage"].dropna()) == set(STAGES[1:])  # question 3
    for _, m in square.groupby(["figure", "metric", "space", "dataset", "population", "stage"], dropna=False):
        grid = m.pivot(index="row", columns="col", values="tau")
        grid = grid.loc[grid.columns]
        values = grid.to_numpy()
        np.testing.assert_allclose(np.diag(values), 1.0)
        finite = np.isfinite(values) & np.isfinite(values.T)
        np.testing.assert_allclose(values[finite], values.T[finite], atol=1e-12)


def test_hcs_equals_the_formula_on_the_table_columns(finished_run):
    results = finished_run / "results"
    ranking = pd.read_parquet(results / "analysis" / "hcs.parquet")
    table = pd.read_parquet(results / "tables" / "sss_90_cifar100.parquet")
    merged = ranking[(ranking["space"] == "sss") & (ranking["dataset"] == "cifar100")].merge(
        table[["arch_index", "accuracy", "pre_ece_15"]], on="arch_index", suffixes=("", "_table"))
    assert len(merged) == 4
    for beta in (1, 2):
        a, e = merged["accuracy_table"], merged["pre_ece_15_table"]
        expected = (1 + beta) * a * (1 - e) / (beta * a + (1 - e))
        np.testing.assert_allclose(merged[f"hcs_{beta}"], expected, rtol=1e-12)
    assert hcs(0.9, 0.1, 1) == pytest.approx(0.9)  # equal accuracy and 1 - ECE give that value


def test_report_and_plots_exist(finished_run):
    results = finished_run / "results"
    report = (results / "report.html").read_text()
    assert "NOT NATS-Bench results" in report
    images = [p for p in (results / "plots").rglob("*.png")]
    assert len(images) >= 10
    for image in images:
        assert image.read_bytes()[:4] == b"\x89PNG"
        assert image.relative_to(results).as_posix() in report
    for job_log in ("logs/analysis/kendall.log", "logs/report.log", "logs/population/tss.log", "logs/labels/cifar10.log"):
        assert (results / job_log).is_file()
    assert len(pd.read_csv(results / "analysis" / "top_hcs.csv")) > 0
    # question 4 with bootstrap intervals (analysis.bootstrap of config/config.yaml), one line each
    q4 = pd.read_csv(results / "analysis" / "question4.csv")
    assert len(q4) == 2 * len(DATASETS) * (len(STAGES) - 1)
    assert ((q4["lo"] <= q4["tau"] + 1e-12) & (q4["tau"] <= q4["hi"] + 1e-12)).all()
    # ... but the mini benchmark's few networks per table are below analysis.min_networks (30): no
    # interval, no "differs from 0", and no claim decided on them (issue 25)
    lines = re.findall(r"pre/spline ECE at 15 bins \([ts]ss hp \d+, [\w-]+\): tau -?[\d.]+, too few networks to "
                       r"decide \(n = (\d+)\)", report)
    assert len(lines) == 2 * len(DATASETS) and all(int(n) < 30 for n in lines)
    assert "differs from 0" not in report
    claims = pd.read_csv(results / "analysis" / "claims.csv").set_index("question")
    assert claims["verdict"].isin(["undecided (too few networks)", "not tested (no data)"]).all(), claims
    assert (claims["tested"] == 0).all() and (claims["verdict"] == "undecided (too few networks)").sum() >= 5
    # NAS: budget 100 reaches every table's few architectures: the optimum, once per objective
    nas = pd.read_csv(results / "analysis" / "nas.csv", dtype={"hp": str})
    assert nas["exhaustive"].all() and (nas["algorithm"] == "exhaustive").all()
    assert len(nas) == 4 * nas.groupby(["space", "hp", "dataset"]).ngroups == 4 * 2 * len(DATASETS)
    for (space, hp, dataset), part in nas[nas["objective"] == "accuracy"].groupby(["space", "hp", "dataset"]):
        table = pd.read_parquet(results / "tables" / f"{space}_{hp}_{dataset}.parquet")
        measured = table[table["accuracy"].notna()]
        best = measured.groupby("arch_str")["accuracy"].mean().max()
        assert part["accuracy_mean"].iloc[0] == pytest.approx(best, abs=1e-12)
        assert part["architectures"].iloc[0] == measured["arch_str"].nunique()
    assert report.count("Exhaustive: the budget (100 distinct architectures) reaches all") == 2 * len(DATASETS)
    # one section per question, with findings computed from the tables (analysis/findings.csv)
    found = pd.read_csv(results / "analysis" / "findings.csv")
    assert {"q1", "q3", "q4", "q5", "q6", "q7", "nas"} <= set(found["question"])
    assert all(f"<section id='{q}'>" in report for q in set(found["question"]))
    # every question in the contents; q2 (no robustness table in this config) says why it is empty
    nav = re.search(r"<nav>(.*?)</nav>", report, re.S).group(1)
    assert all(f"href='#q{i}'" in nav for i in range(1, 8))
    assert "Question 2: does calibration go with robustness?</a> (no content in this run)" in nav
    assert "No content in this run: it needs a <code>robustness:</code> table in the config" in report
    # the demo banner names the stages flagged underdetermined in some table, and only those
    from calibench.report.assemble import underdetermined_where

    flagged = underdetermined_where(sorted((results / "tables").glob("*.parquet")))
    assert {"vs", "ms", "dir"} <= set(flagged)  # the mini benchmark: N_val < 10 K everywhere
    banner = re.search(r"<p class='warn'>(.*?)</p>", report, re.S).group(1)
    assert banner.count("<code>") == len(flagged) + 1 and all(f"<code>{s}</code>" in banner for s in flagged)
    assert "<code>vs</code>, <code>ms</code>, <code>dir</code>" in banner and "on every table" in banner
    assert "describe fits on too little data" in banner
    # the best and the worst network by HCS of each table, pre and post
    assert {p.name for p in (results / "plots").rglob("reliability_*.png")} == {
        f"reliability_{space}_{hp}_{d}.png" for space, hp in (("tss", "200"), ("sss", "90")) for d in DATASETS}


def test_report_renders_in_a_headless_browser(finished_run, tmp_path):
    """The standalone report in headless Chromium: every figure file exists and decodes in
    the browser, the full-page screenshot is not blank and nothing sticks out past a
    1400 px window (skips, saying why, where no headless browser is installed)."""
    from calibench.report.screenshot import BrowserNotFound, check_rendered, find_browser

    try:
        find_browser()
    except BrowserNotFound as exc:
        pytest.skip(str(exc))
    result = check_rendered(finished_run / "results" / "report.html", tmp_path / "report.png", width=1400)
    assert result.images == len(list((finished_run / "results" / "plots").rglob("*.png")))
    assert result.page_height > 3000 and result.colours > 1000
    assert not result.warnings, result.warnings


def test_snakemake_report_holds_every_figure(finished_run, tmp_path):
    import zipfile

    out = tmp_path / "report.zip"
    _snakemake(finished_run, "--report", str(out))
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
    figures = {p.name for p in (finished_run / "results" / "plots").rglob("*.png")}
    assert figures and all(any(n.endswith("/" + f) for n in names) for f in figures), (sorted(figures), names[:40])
    assert any(n.endswith("report.html") for n in names)


def test_every_job_records_its_time_and_peak_memory(finished_run):
    results = finished_run / "results"
    for stage in ("infer", "measure"):
        chunks = sorted((results / "chunks" / stage).rglob("chunk*.json"))
        records = sorted((results / "benchmarks" / stage).glob("*.tsv"))
        assert len(records) == len(chunks) > 0
        for record in records:
            row = pd.read_csv(record, sep="\t").iloc[0]
            assert row["s"] > 0 and 50 < row["max_rss"] < 8000, (record, row.to_dict())  # MB: torch alone is ~300


def test_export_import_and_nas_commands(finished_run, tmp_path, caplog):
    """The finished run's tables out in the published layout, back in, and NAS on them."""
    import logging

    from calibench.run.cli import main
    from calibench.results.query import run_query

    out, imported = tmp_path / "tao", tmp_path / "imported"
    caplog.set_level(logging.INFO, logger="calibench.results.interop")
    assert main(["export", "--format", "tao2024", "--out", str(out), "--results", str(finished_run / "results")]) == 0
    # the columns with no place in the layout: counted, not every name (--verbose names them)
    assert "columns with no place in the tao2024 layout left out" in caplog.text
    assert "vs_ece_15" not in caplog.text
    caplog.clear()
    caplog.handler.setLevel(logging.DEBUG)  # the logger stays at INFO: --verbose must lower it
    interop_log = logging.getLogger("calibench.results.interop")
    try:
        assert main(["export", "--format", "tao2024", "--verbose", "--out", str(tmp_path / "tao_v"),
                     "--results", str(finished_run / "results")]) == 0
    finally:
        interop_log.setLevel(logging.INFO)
    assert "vs_ece_15" in caplog.text
    assert all((tmp_path / "tao_v" / p.name).read_bytes() == p.read_bytes() for p in out.glob("*.csv"))
    assert sorted(p.name for p in out.glob("*.csv")) == sorted(
        f"{name}_{space}.csv" for space in ("tss", "sss") for name in ("cifar10", "cifar100", "ImageNet"))
    assert main(["import", "--format", "tao2024", str(out), "--results", str(imported)]) == 0
    for table in (finished_run / "results" / "tables").glob("*.parquet"):
        ours, back = pd.read_parquet(table), pd.read_parquet(imported / "tables" / table.name)
        # the layout's config is the NATS-Bench index: the mini benchmark's rows come back in its order
        # each measurement once: the TSS isomorph copy is not exported (--expand-isomorphs writes it)
        ours = ours[ours["arch_index"] == ours["measured_by"]]
        ours = ours.sort_values("nats_index", kind="stable").reset_index(drop=True)
        assert back["arch_index"].tolist() == back["nats_index"].tolist() == ours["nats_index"].tolist()
        np.testing.assert_allclose(back["pre_ece_15"], ours["pre_ece_15"], rtol=0, atol=1e-12)
        assert back["arch_str"].tolist() == ours["arch_str"].tolist()
    df = run_query("SELECT count(*) AS n FROM networks", results=imported)
    assert df["n"][0] == 3 * (2 + 4)
    table = imported / "tables" / "sss_90_cifar10.parquet"
    assert main(["nas", str(table), "--budget", "3", "--repeats", "4", "--out", str(tmp_path / "nas")]) == 0
    nas = pd.read_csv(tmp_path / "nas" / "nas_sss_90_cifar10.csv")
    assert len(nas) == 3 * 4 and set(nas["algorithm"]) == {"evolution", "local", "random"}
    assert (tmp_path / "nas" / "nas_sss_90_cifar10.md").read_text().count("\n") >= 12
    assert main(["import", "--format", "tao2024", str(tmp_path / "missing"), "--results", str(imported)]) == 2


def test_query_views(finished_run):
    from calibench.results.query import run_query

    df = run_query("SELECT space, dataset, count(*) AS n, max(hcs_1) AS best FROM networks GROUP BY ALL ORDER BY ALL",
                   results=finished_run / "results")
    assert list(df["n"]) == [4, 4, 4, 2, 2, 2]  # measurements: TSS's third cell is an isomorph copy
    every = run_query("SELECT space, count(*) AS n, sum(is_copy::INT) AS copies FROM networks_all GROUP BY ALL "
                      "ORDER BY ALL", results=finished_run / "results")
    assert list(every["n"]) == [12, 9] and list(every["copies"]) == [0, 3]
    long = run_query("SELECT count(DISTINCT metric) AS m FROM metrics WHERE bins IS NULL AND metric NOT LIKE 'fit_%'",
                     results=finished_run / "results")
    assert long["m"][0] == len(metrics.UNBINNED_METRICS) + 2 + 1  # the two OoD AUROCs (CIFAR-10), the search's flag
    # the fit store (issue 35): one row per measured network, seed and fitted stage; its summaries are the tables'
    fits = run_query("SELECT f.space, f.dataset, f.stage, count(*) AS n, max(abs(f.info_temperature - m.temperature)) "
                     "AS gap FROM fits f LEFT JOIN networks m USING (space, hp, dataset, arch_index, seed) "
                     "GROUP BY ALL ORDER BY ALL", results=finished_run / "results")
    assert set(fits["stage"]) == {"post", "vs", "ms", "dir", "iso", "hist", "spline"}
    assert list(fits.groupby(["space", "dataset"])["n"].max()) == [4, 4, 4, 2, 2, 2]  # as the networks view
    assert (fits["n"] == fits.groupby(["space", "dataset"])["n"].transform("max")).all()
    assert fits.loc[fits["stage"] == "post", "gap"].max() == 0.0  # the stored temperature is the table's


def test_snakemake_lint_passes():
    proc = subprocess.run(SNAKEMAKE + ["--lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "good condition" in proc.stdout + proc.stderr


def test_provenance_command_on_a_finished_run(finished_run):
    from calibench import __version__

    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "provenance", "results/tables/sss_90_cifar10.parquet"],
                          cwd=finished_run, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "4 rows; 1 distinct provenance\n" in proc.stdout  # one calibench measured every row (4 SSS networks)
    assert f"calibench_version: {__version__}" in proc.stdout and "device: cpu" in proc.stdout
    import hashlib

    from calibench.store import logits as store

    sha = hashlib.sha256((finished_run / "tiny.yaml").read_bytes()).hexdigest()
    assert "4 rows under config " in proc.stdout and f"tiny.yaml (sha256 {sha[:16]})" in proc.stdout
    # each row: size and mtime of the archive file its logits came from
    table = pd.read_parquet(finished_run / "results/tables/sss_90_cifar10.parquet")
    for index, size, mtime in zip(table["arch_index"], table["source_bytes"], table["source_mtime"]):
        source = store.read_network_logits(layout.logits_path(finished_run / "results", "sss", "90", "cifar10",
                                                             int(index))).meta["networks"][0]["source"]
        stat = (finished_run / source).stat()
        assert source.endswith(".pickle.pbz2") and size == stat.st_size
        assert pd.Timestamp(mtime) == pd.Timestamp(int(stat.st_mtime), unit="s", tz="UTC")


def test_a_comment_in_the_config_file_reruns_nothing(tmp_path, finished_run):
    """The config file's hash reaches the shards' provenance outside the rules' params."""
    workdir = _clone(finished_run, tmp_path / "comment")
    with open(workdir / "tiny.yaml", "a") as f:
        f.write("# a note to self\n")
    assert _planned_jobs(workdir) == {}
