"""The analysis as parts (calibench.analysis.parts, workflow/rules/analysis.smk): each part is its
own job with declared outputs, a changed setting reruns only the parts that depend on it and
the report, a failing part fails alone and leaves the last good report, and the report holds
every part's figures. One finished run of the tiny workflow (with a robustness table, so that
question 2 is a part too) serves every test; a test that changes files works on a copy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from test_workflow import TINY, _clone, _planned_jobs, _set_config, _snakemake

PARTS = ("kendall", "overview", "hcs", "methods", "reliability", "groups", "nas", "architecture", "robustness")
# keyed by NATS-Bench index (the default), which the mini benchmark's population records (nats_index)
ROBUSTNESS = {"path": "robustness.csv", "key": "arch_index"}


def _robustness_table(run: Path) -> pd.DataFrame:
    """Per TSS architecture of the tiny mini benchmark (its three cells, by NATS-Bench index):
    two robustness columns."""
    import json

    nats = json.loads((run / "results" / "population" / "tss.json").read_text())["nats_index"]
    return pd.DataFrame({"arch_index": nats, "clean_acc": [71.0, 71.0, 64.5], "pgd_Linf_acc8_0": [3.5, 3.5, 9.0]})


@pytest.fixture(scope="module")
def parts_run(workflow_run, tmp_path_factory):
    """The session's finished tiny run (conftest.py), copied, with a robustness table added:
    only the robustness part and the report run here."""
    workdir = _clone(workflow_run, tmp_path_factory.mktemp("parts") / "run")
    _robustness_table(workdir).to_csv(workdir / ROBUSTNESS["path"], index=False)
    _set_config(workdir, robustness=ROBUSTNESS)
    assert _planned_jobs(workdir) == {"analysis_robustness": 1, "assemble_report": 1, "all": 1}
    _snakemake(workdir)
    return workdir


def _files(results: Path) -> dict[Path, tuple[int, bytes]]:
    """Every file under ``results`` but the logs and hidden files (Snakemake's time stamps of
    directory outputs, the run lock): (mtime, bytes)."""
    return {p.relative_to(results): (p.stat().st_mtime_ns, p.read_bytes()) for p in results.rglob("*")
            if p.is_file() and "logs" not in p.relative_to(results).parts and not p.name.startswith(".")}


def test_every_part_is_its_own_job_with_its_outputs(parts_run):
    results = parts_run / "results"
    for part in PARTS:
        manifest = json.loads((results / "analysis" / "parts" / f"{part}.json").read_text())
        assert manifest["part"] == part
        assert (results / "logs" / "analysis" / f"{part}.log").is_file()
        record = pd.read_csv(results / "benchmarks" / "analysis" / f"{part}.tsv", sep="\t").iloc[0]
        # a number each (Snakemake samples memory after a start-up delay: a part that ends within it, as
        # `groups` does in 0.4 s, records max_rss 0)
        assert record["s"] > 0 and record["max_rss"] >= 0  # NaN (no sample) fails too
        assert (results / "plots" / part).is_dir()
    assert not (results / "analysis" / "parts" / "schedules.json").exists()  # one schedule per space: no part
    for name in ("kendall.parquet", "question4.csv", "hcs.parquet", "top_hcs.csv", "methods_summary.parquet",
                 "method_wins.parquet", "groups.csv", "kendall_groups.parquet", "nas.csv", "tss_edge_ops.parquet",
                 "sss_width_progression.parquet", "method_gains.parquet", "robustness_kendall.parquet", "findings.csv",
                 "claims.csv"):
        assert (results / "analysis" / name).is_file(), name
    # the method gains of a mini benchmark: every method of both spaces, nothing decided, and why
    gains = pd.read_parquet(results / "analysis" / "method_gains.parquet")
    assert set(gains["space"]) == {"tss", "sss"} and set(gains["stage"]) >= {"post", "iso"}
    assert (gains["verdict"] == "undecided").all() and gains["coef"].isna().all()
    assert gains["note"].str.startswith("too few networks to decide (n = ").all(), gains["note"].unique()
    assert pd.read_csv(results / "analysis" / "groups.csv").empty  # no population grouped: empty, with columns
    found = pd.read_csv(results / "analysis" / "findings.csv")
    assert {"q1", "q2", "q3", "q4", "q5", "q6", "q7", "nas"} <= set(found["question"])
    said = found[found["text"].str.contains("from each method by architecture", regex=False)]
    assert len(said) == 6 and (said["question"] == "q7").all()  # a finding per table: nothing decided, and why
    assert said["text"].str.contains("no feature decides for any method — too few networks to decide (n = ",
                                     regex=False).all(), said["text"].tolist()


def test_the_report_holds_every_parts_figures(parts_run):
    results = parts_run / "results"
    report = (results / "report.html").read_text()
    shown = re.findall(r"<img src='([^']+)'", report)
    assert len(shown) == len(set(shown))
    listed = set()
    for part in PARTS:
        manifest = json.loads((results / "analysis" / "parts" / f"{part}.json").read_text())
        paths = [p["path"] for p in manifest["plots"]]
        assert all(p.startswith(f"plots/{part}/") for p in paths), paths
        if part not in ("groups", "nas"):  # no groups configured; NAS has tables, no figure
            assert paths, part
        listed |= set(paths)
    on_disk = {p.relative_to(results).as_posix() for p in (results / "plots").rglob("*.png")}
    assert set(shown) == listed == on_disk
    sections = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", report, re.S))
    assert "plots/robustness/robustness_kendall.png" in sections["q2"]
    assert "plots/kendall/kendall_datasets_tss_200.png" in sections["q1"]
    assert "Top networks by HCS" in sections["nas"] and "hit rate" in sections["nas"]
    assert "Question 4: does a method affect all networks uniformly?" in sections["methods"]


def test_a_nas_setting_reruns_only_the_nas_part_and_the_report(tmp_path, parts_run):
    workdir = _clone(parts_run, tmp_path / "nas")
    results = workdir / "results"
    assert _planned_jobs(workdir) == {}
    before = _files(results)
    _set_config(workdir, analysis={**TINY["analysis"], "nas": {"repeats": 3, "budget": 2, "seed": 0}})
    assert _planned_jobs(workdir) == {"analysis_nas": 1, "assemble_report": 1, "all": 1}
    _snakemake(workdir)
    after = _files(results)
    changed = {p for p in after if before.get(p, (None,))[0] != after[p][0]}
    assert changed == {Path("analysis/nas.csv"), Path("analysis/parts/nas.json"), Path("benchmarks/analysis/nas.tsv"),
                       Path("report.html"), Path("analysis/findings.csv"), Path("analysis/claims.csv"),
                       Path("benchmarks/report.tsv"), Path("report.html.sha256")}
    assert set(after) == set(before)
    nas = pd.read_csv(results / "analysis" / "nas.csv")
    assert (nas["repeats"] == 3).all() and (nas["budget"] == 2).all()
    assert _planned_jobs(workdir) == {}
    # analysis.min_networks is the report's, the explorer's (its Kendall tab marks cells on fewer), the
    # method gains' (the architecture part) and the methods table's (its paired tests): only they rerun
    # (planned, not run)
    _set_config(workdir, analysis={**TINY["analysis"], "nas": {"repeats": 3, "budget": 2, "seed": 0},
                                   "min_networks": 3})
    assert _planned_jobs(workdir) == {"analysis_architecture": 1, "analysis_methods": 1, "assemble_report": 1,
                                      "explorer": 1, "all": 1}


def test_a_bad_robustness_file_fails_only_its_part(tmp_path, parts_run):
    workdir = _clone(parts_run, tmp_path / "robustness")
    results = workdir / "results"
    before = _files(results)
    bad = _robustness_table(workdir)
    bad.loc[2, "arch_index"] = 99999  # no TSS architecture
    bad.to_csv(workdir / ROBUSTNESS["path"], index=False)
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml",
                           "--cores", "2"], cwd=workdir, capture_output=True, text=True, timeout=900)
    told = proc.stdout + proc.stderr
    assert proc.returncode != 0, told[-3000:]
    assert "running once more" not in told, told[-3000:]  # a failed part is not a repair: not run twice
    log = (results / "logs" / "analysis" / "robustness.log").read_text()
    for text in (log, told):  # the job's log, and what `calibench run` says on the terminal
        assert "robustness.csv" in text and "key arch_index" in text and "99999" in text, text[-3000:]
    # The failed part's outputs are gone (Snakemake removes them); the report is written again
    # from the other parts (docs/analysis.md, "When a part fails"), which stay as they were, and
    # says what it leaves out and why; nothing else is touched.
    robustness = {Path("analysis/parts/robustness.json"), Path("analysis/robustness_kendall.parquet"),
                  Path("plots/robustness/robustness_kendall.png")}
    after = _files(results)
    assert not robustness & set(after)
    assert set(before) - set(after) == robustness
    report = {Path("report.html"), Path("report.html.sha256"), Path("analysis/findings.csv"), Path("analysis/claims.csv")}
    assert {p for p in after if after[p] != before[p]} == report
    assert "report written without robustness (failed), every other part up to date" in told, told[-3000:]
    page = (results / "report.html").read_text()
    banner = re.search(r"<div class='warn' id='partial'>(.*?)</div>", page, re.S).group(1)
    assert "<code>robustness</code>: failed: " in banner and "99999" in banner and "robustness.log" in banner
    assert "robustness_kendall" not in page and "kendall_datasets_" in page and "explorer-link" in page
    findings = pd.read_csv(results / "analysis" / "findings.csv")
    assert "q2" not in set(findings["question"])
    assert set(findings["question"]) == set(pd.read_csv(parts_run / "results" / "analysis" / "findings.csv")["question"]) - {"q2"}
    check = subprocess.run(["sha256sum", "-c", "--quiet", "report.html.sha256"], cwd=results, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    status = subprocess.run([sys.executable, "-m", "calibench", "status", "--configfile", "tiny.yaml"], cwd=workdir,
                            capture_output=True, text=True, timeout=300)
    assert "the report there is partial, written without robustness" in status.stdout, status.stdout + status.stderr
    # Repaired, the part and the report run again; the other parts stay as they are.
    _robustness_table(workdir).to_csv(workdir / ROBUSTNESS["path"], index=False)
    assert _planned_jobs(workdir) == {"analysis_robustness": 1, "assemble_report": 1, "all": 1}


def _args(**kw):
    import argparse

    return argparse.Namespace(configfile="tiny.yaml", space=None, dataset=None, **kw)


def test_a_report_without_a_failed_part_leaves_out_what_reads_it(parts_run, tmp_path, monkeypatch):
    """A failed hcs part (its outputs removed, as Snakemake does, its log and Snakemake's saying
    so, here killed by SIGKILL, e.g. out of memory): the reliability part, which reads hcs's ranking, and the explorer wait for it; the
    report of the others names both parts, links no explorer, and its content check holds."""
    from calibench.run.partial_report import write_partial_report
    from calibench.run.targets import _config_and_targets

    workdir = _clone(parts_run, tmp_path / "hcs")
    results = workdir / "results"
    for name in ("analysis/parts/hcs.json", "analysis/hcs.parquet", "analysis/top_hcs.csv"):
        (results / name).unlink()
    for png in (results / "plots" / "hcs").iterdir():
        png.unlink()
    (results / "plots" / "hcs").rmdir()
    (results / "logs" / "analysis" / "hcs.log").write_text("Traceback ...\nValueError: planted in hcs\n")
    log = results / "logs" / "snakemake" / "run-planted.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("subprocess.CalledProcessError: Command 'set -euo pipefail; ...' returned non-zero exit status "
                   "137.\nError in rule analysis_hcs:\n    log: results/logs/analysis/hcs.log (check log file(s) for "
                   "error details)\n")
    monkeypatch.chdir(workdir)
    config, targets = _config_and_targets(_args())
    said = write_partial_report(config, "tiny.yaml", targets, log)
    assert len(said) == 1 and "report written without hcs (failed), reliability (not run)" in said[0], said
    page = (results / "report.html").read_text()
    banner = re.search(r"<div class='warn' id='partial'>(.*?)</div>", page, re.S).group(1)
    assert ("<code>hcs</code>: failed: killed by SIGKILL (exit status 137): out of memory (the kernel&#x27;s OOM "
            "killer), or kill -9; its log ends: ValueError: planted in hcs (log: results/logs/analysis/hcs.log)") in banner
    assert "<code>reliability</code>: not run: it reads the outputs of hcs, left out too" in banner
    assert "explorer reads a part left out" in banner and "explorer-link" not in page
    assert "plots/hcs/" not in page and "plots/reliability/" not in page and "plots/kendall/" in page
    sums = (results / "report.html.sha256").read_text()
    assert "parts/kendall.json" in sums and "parts/hcs.json" not in sums and "parts/reliability.json" not in sums
    check = subprocess.run(["sha256sum", "-c", "--quiet", "report.html.sha256"], cwd=results, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # the next run plans the failed part, what waits for it, and the whole report
    assert _planned_jobs(workdir) == {"analysis_hcs": 1, "analysis_reliability": 1, "assemble_report": 1,
                                      "explorer": 1, "all": 1}


def test_no_report_of_parts_while_a_table_is_still_to_be_built(parts_run, tmp_path, monkeypatch):
    """Where a job before the analysis is still to run (here a table's rule), no report is
    assembled from the parts: they would describe tables a later job changes."""
    from calibench.run.partial_report import left_out_parts, write_partial_report
    from calibench.run.targets import _config_and_targets

    workdir = _clone(parts_run, tmp_path / "table")
    results = workdir / "results"
    table = next((results / "tables").glob("*.parquet"))
    table.unlink()  # as if its job failed
    before = _files(results)
    log = results / "logs" / "snakemake" / "run-planted.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("Error in rule analysis_kendall:\n")
    monkeypatch.chdir(workdir)
    config, targets = _config_and_targets(_args())
    said = write_partial_report(config, "tiny.yaml", targets, log)
    assert said == ["calibench: results/report.html not written: jobs it needs did not complete (table)"], said
    assert _files(results) == before
    # why each part is left out, from the plan and the failed rules
    reads = {"kendall": [], "hcs": [], "reliability": ["hcs"], "nas": ["hcs"], "methods": []}
    pending = {"analysis_hcs", "analysis_reliability", "analysis_nas", "analysis_methods", "assemble_report"}
    assert left_out_parts(reads, pending, {"hcs": "ValueError: x", "methods": "killed"}) == {
        "hcs": "failed: ValueError: x", "reliability": "not run: it reads the outputs of hcs, left out too",
        "nas": "not run: it reads the outputs of hcs, left out too", "methods": "failed: killed"}
    assert left_out_parts(reads, {"analysis_nas", "assemble_report"}, {}) == {
        "nas": "not run in this run (Snakemake stopped before it)"}


def test_a_deleted_part_manifest_is_made_again_with_the_report(parts_run, tmp_path):
    """Snakemake plans nothing for a missing output whose consumers are up to date; the repair
    check sets the report aside (planning says so and moves nothing; `calibench repair` moves it),
    and the run makes the part and the report again (issue 33). Nothing else runs."""
    workdir = _clone(parts_run, tmp_path / "lost")
    results = workdir / "results"
    (results / "analysis" / "parts" / "nas.json").unlink()
    plan = _snakemake(workdir, "-n")
    said = plan.stdout + plan.stderr
    assert "results/analysis/parts/nas.json: deleted since it was written: a run would make it again" in said, said
    assert (results / "report.html").is_file() and not (results / "analysis" / "parts" / "nas.json").exists()
    before = _files(results)
    repaired = subprocess.run([sys.executable, "-m", "calibench", "repair", "--configfile", "tiny.yaml"], cwd=workdir,
                              capture_output=True, text=True, timeout=300)  # before a plain Snakemake run
    assert "results/analysis/parts/nas.json: deleted since it was written: the next run makes it again" in repaired.stderr
    _snakemake(workdir)
    after = _files(results)
    assert json.loads((results / "analysis" / "parts" / "nas.json").read_text())["part"] == "nas"
    changed = {p for p in after if before.get(p, (None,))[0] != after[p][0]}
    assert {Path("analysis/parts/nas.json"), Path("report.html")} <= changed
    assert not {p for p in changed if p.parts[0] == "analysis" and p.name.endswith(".json")} - {
        Path("analysis/parts/nas.json")}  # no other part ran
    check = subprocess.run(["sha256sum", "-c", "--quiet", "report.html.sha256"], cwd=results,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _planned_jobs(workdir) == {}


# ---------------------------------------------------------------- the registry (calibench.analysis.registry)

# The outputs of the ten hand-written rules the registry replaced (workflow/rules/analysis.smk before
# issue 36), besides each part's manifest and figure folder.
HAND_WRITTEN = {"kendall": ["kendall.parquet", "question4.csv"], "overview": [], "hcs": ["hcs.parquet", "top_hcs.csv"],
                "methods": ["methods_summary.parquet", "methods_summary.csv", "method_wins.parquet"],
                "reliability": [], "groups": ["groups.csv", "kendall_groups.parquet"], "nas": ["nas.csv"],
                "architecture": ["tss_edge_ops.parquet", "sss_size_brackets.parquet", "tss_kernel_parameters.parquet",
                                 "sss_width_progression.parquet",
                                 "method_gains.parquet"],  # added since, with the part's method gains
                "robustness": ["robustness_kendall.parquet"]}


def _planned_outputs(workdir: Path) -> dict[str, list[str]]:
    """rule -> its outputs, from a dry run that plans every analysis job again."""
    rules = [f"analysis_{p}" for p in HAND_WRITTEN]
    text = _snakemake(workdir, "-n", "--forcerun", *rules).stdout
    return {rule: [o.strip() for o in outputs.split(",")]
            for rule, outputs in re.findall(r"^rule (analysis_\w+):\n\s+input: .*\n\s+output: (.*)$", text, flags=re.M)}


def test_the_rules_made_from_the_registry_have_the_hand_written_rules_outputs(parts_run):
    planned = _planned_outputs(parts_run)
    assert set(planned) == {f"analysis_{p}" for p in HAND_WRITTEN}
    for part, names in HAND_WRITTEN.items():
        assert planned[f"analysis_{part}"] == [f"results/analysis/parts/{part}.json",
                                               *(f"results/analysis/{n}" for n in names), f"results/plots/{part}"]


TOY_PART = '''
from pathlib import Path

from calibench.analysis.registry import Part

VERSION = 1


def run(settings, tables, results, plots):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from calibench.analysis.tables import load_tables

    df = load_tables(tables, {"space", "hp", "dataset", "arch_index", "accuracy"})
    counts = df.groupby("dataset").size().rename("networks").reset_index()
    counts["version"] = VERSION
    counts["bins"] = len(settings["bins"])
    counts.to_csv(Path(results) / "analysis" / "toy_counts.csv", index=False)
    fig, ax = plt.subplots()
    ax.bar(counts["dataset"], counts["networks"])
    path = Path(plots) / "toy_networks.png"
    fig.savefig(path)
    plt.close(fig)
    return {"plots": [("Toy: networks per dataset", path)],
            "blocks": [("methods", 99, f"<p id='toy-block'>toy part v{VERSION}: {len(df)} rows</p>")]}


TOY = Part(name="toy", module="toy_parts", title="Toy", doc="Networks per dataset",
           settings=lambda s: {"bins": s["bins"]}, outputs={"counts": "toy_counts.csv"})
NOT_A_PART = 3
'''


def test_a_part_added_to_the_config_is_a_rule_in_the_plan_status_and_report(parts_run, tmp_path):
    """A user's own part (analysis.extra_parts) runs like a built-in one: a rule, in a dry run and
    `calibench status`, in the report; its code's edits rerun it and the report only;
    analysis.parts chooses among all parts; a bad entry stops the run in one line."""
    workdir = _clone(parts_run, tmp_path / "toy")
    results = workdir / "results"
    (workdir / "code").mkdir()
    (workdir / "code" / "toy_parts.py").write_text(TOY_PART)
    analysis = {**TINY["analysis"], "extra_parts": ["toy_parts:TOY"], "python_path": ["code"]}
    _set_config(workdir, analysis=analysis)
    assert _planned_jobs(workdir) == {"analysis_toy": 1, "assemble_report": 1, "all": 1}
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml"],
                            cwd=workdir, capture_output=True, text=True, timeout=300)
    assert "to run    results/analysis/parts/toy.json  (analysis_toy: missing)" in status.stdout, status.stdout
    before = _files(results)
    _snakemake(workdir)
    counts = pd.read_csv(results / "analysis" / "toy_counts.csv")
    tables = sorted((results / "tables").glob("*.parquet"))
    assert counts["networks"].sum() == sum(len(pd.read_parquet(t)) for t in tables) and (counts["bins"] == 3).all()
    manifest = json.loads((results / "analysis" / "parts" / "toy.json").read_text())
    assert set(manifest["files"]) == {"analysis/toy_counts.csv", "plots/toy/toy_networks.png"}
    report = (results / "report.html").read_text()
    assert "<p id='toy-block'>toy part v1:" in report and "plots/toy/toy_networks.png" in report
    changed = {p for p, v in _files(results).items() if before.get(p) != v}
    assert {p.parts[0] for p in changed} <= {"analysis", "plots", "benchmarks", "report.html", "report.html.sha256"}
    assert not any(p.name.startswith(("kendall", "hcs", "nas")) for p in changed)  # no built-in part ran
    assert _planned_jobs(workdir) == {}

    # an edit of the part's code reruns the part and the report
    (workdir / "code" / "toy_parts.py").write_text(TOY_PART.replace("VERSION = 1", "VERSION = 2"))
    assert _planned_jobs(workdir) == {"analysis_toy": 1, "assemble_report": 1, "all": 1}
    # analysis.parts chooses: the report assembles the chosen ones, no built-in part reruns
    _set_config(workdir, analysis={**analysis, "parts": ["kendall", "hcs", "reliability", "toy"]})
    assert _planned_jobs(workdir) == {"analysis_toy": 1, "assemble_report": 1, "all": 1}
    _snakemake(workdir)
    report = (results / "report.html").read_text()
    assert "toy part v2:" in report and "plots/toy/" in report and "plots/kendall/" in report
    assert "plots/nas/" not in report and "plots/methods/" not in report

    run = [sys.executable, "-m", "calibench", "run", "--configfile", "tiny.yaml", "--", "-n"]
    for entry, words in ((["toy_parts:NOT_A_PART"], "is not a calibench.analysis.registry.Part (found int)"),
                         (["no_such_module:TOY"], "cannot load 'no_such_module:TOY'")):
        _set_config(workdir, analysis={**analysis, "extra_parts": entry})
        proc = subprocess.run(run, cwd=workdir, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and proc.stderr.startswith("calibench: analysis.extra_parts: ") \
            and words in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
        plain = _snakemake(workdir, "-n", check=False)  # Snakemake itself stops on it too
        assert plain.returncode != 0 and words in plain.stdout + plain.stderr
    _set_config(workdir, analysis={**analysis, "parts": ["kendall", "nope"]})
    proc = subprocess.run(run, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "calibench: analysis.parts: unknown part(s) 'nope'; parts: kendall, overview, hcs, methods, reliability, "
        "groups, nas, architecture, schedules, robustness, toy"), proc.stderr


def test_an_explorer_turned_off_is_said_to_be_no_longer_updated(parts_run, tmp_path):
    """explorer: false reruns the report alone and writes no explorer; `calibench status` names
    the one written before as no longer updated (it is not deleted)."""
    workdir = _clone(parts_run, tmp_path / "off")
    page = workdir / "results" / "explorer" / "index.html"
    assert page.is_file()
    _set_config(workdir, explorer=False)
    assert _planned_jobs(workdir) == {"assemble_report": 1, "all": 1}
    status = subprocess.run([sys.executable, "-m", "calibench.run.cli", "status", "--configfile", "tiny.yaml"],
                            cwd=workdir, capture_output=True, text=True, timeout=300)
    assert status.returncode == 0 and "not kept  results/explorer/index.html  (explorer: false, so no run updates it" \
        in status.stdout, status.stdout + status.stderr
    assert page.is_file()
