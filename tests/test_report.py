"""calibench.report (findings, claims, page): every finding equals a direct computation on the tables, and the report
has one section per question with its findings and figures."""

from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from calibench.analysis import tables as at
from calibench.report.assemble import run_analysis
from calibench.report import claims as rc
from calibench.report import page as report
from calibench.report.findings import FINDING_COLUMNS
from calibench.analysis import stats
from test_analysis_methods import BINS, population, settings, _write


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One analysis over a small population of all eight stages, with a CIFAR-10-C AUROC
    column on CIFAR-10 and NAS at 4 repeats."""
    rng = np.random.default_rng(21)
    tables = population(rng, list(at.STAGES), n=40)
    for (space, dataset), t in tables.items():
        if dataset == "cifar10":
            t["pre_ood_auroc_gaussian_noise"] = rng.uniform(0.5, 0.9, len(t))
        t["accuracy"] = np.where(np.arange(len(t)) % 3 == 0, rng.uniform(0.905, 0.99, len(t)), t["accuracy"])
        if space == "sss":  # Fig. 9's networks 8:8:8:8:8 ... 64:64:64:64:64
            t.loc[:7, "arch_str"] = [":".join([str(w)] * 5) for w in range(8, 65, 8)]
    tmp = tmp_path_factory.mktemp("report")
    conf = settings(demo=True, top_k=(10,))
    conf["analysis"]["bootstrap"] = {"resamples": 50, "seed": 1, "level": 0.9}
    conf["analysis"]["nas"] = {"repeats": 4, "budget": 20}
    paths = _write(tables, tmp / "tables")
    out = run_analysis(conf, paths, tmp / "results")
    return {"out": out, "results": tmp / "results", "df": at.load_tables(paths), "conf": conf}


def _nets(df):
    nets = at.measured(df)
    first = nets.groupby(["space", "hp", "dataset", "arch_index"])["seed"].transform("min") == nets["seed"]
    return nets[first]


def _scipy(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = ~(np.isnan(x) | np.isnan(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(kendalltau(x[keep], y[keep]).statistic)


def test_findings_file_and_every_question_present(run):
    found = pd.read_csv(run["out"]["findings"], dtype={"hp": str})
    assert list(found.columns) == FINDING_COLUMNS
    assert {"q1", "q3", "q4", "q5", "q6", "q7", "nas"} <= set(found["question"])
    taus = found.dropna(subset=["value"])
    ok = taus["lo"].notna()
    assert ((taus.loc[ok, "lo"] <= taus.loc[ok, "value"] + 1e-12) & (taus.loc[ok, "value"] <= taus.loc[ok, "hi"] + 1e-12)).all()


def test_question_5_and_6_taus_equal_direct_computations(run):
    found = pd.read_csv(run["out"]["findings"], dtype={"hp": str})
    nets = _nets(run["df"])
    level = run["conf"]["analysis"]["bootstrap"]["level"]
    checked = 0
    for r in found[found["question"] == "q5"].itertuples():
        part = nets[(nets["space"] == r.space) & (nets["hp"] == r.hp) & (nets["dataset"] == r.dataset)]
        if "accuracy > 90 %" in r.text:
            part = part[part["accuracy"] > 0.9]
        assert r.value == pytest.approx(_scipy(part["accuracy"], part["pre_ece_15"]), abs=1e-12)
        if len(part) < 30:  # the schema's analysis.min_networks: tau without interval
            assert r.text.endswith(f", too few networks to decide (n = {len(part)})") and "accuracy > 90 %" in r.text
            assert np.isnan(r.lo) and np.isnan(r.hi) and pd.isna(r.interval)
            checked += 1
            continue
        want = stats.kendall_jackknife(part["accuracy"], part["pre_ece_15"], level)
        assert (r.value, r.lo, r.hi) == pytest.approx(want, abs=1e-12) and r.interval == "jackknife"
        assert f"{len(part)} networks" in r.text
        checked += 1
    for r in found[found["question"] == "q6"].itertuples():
        stage = r.text.split(" ", 1)[0]
        part = nets[(nets["space"] == r.space) & (nets["hp"] == r.hp) & (nets["dataset"] == r.dataset)]
        a, z = part[f"{stage}_ece_{min(BINS)}"], part[f"{stage}_ece_{max(BINS)}"]
        assert r.value == pytest.approx(_scipy(a, z), abs=1e-12)
        assert f"median {a.median():.3f} → {z.median():.3f}" in r.text
        checked += 1
    assert checked >= 8 * 2


def test_question_1_3_4_findings_are_the_kendall_table_rows(run):
    found = pd.read_csv(run["out"]["findings"], dtype={"hp": str})
    kendall = pd.read_parquet(run["results"] / "analysis" / "kendall.parquet")
    q4 = found[found["question"] == "q4"]
    assert len(q4) == 2 * 2 * 7  # spaces x datasets x methods
    for r in q4.itertuples():
        stage = re.match(r"pre/(\w+) ECE", r.text).group(1)
        k = kendall[(kendall["figure"] == "pre_post") & (kendall["population"] == "all") & (kendall["space"] == r.space)
                    & (kendall["dataset"] == r.dataset) & (kendall["row"] == "pre_ece_15")
                    & (kendall["col"] == f"{stage}_ece_15")].iloc[0]
        assert (r.value, r.lo, r.hi) == pytest.approx((k["tau"], k["lo"], k["hi"]), abs=1e-12)
        assert r.interval == "bootstrap"
    nets = _nets(run["df"])
    for r in found[found["question"] == "q3"].itertuples():
        named = re.search(r"agrees (?:most|least) with ([^()]+?)(?: \(tied\))? \(", r.text).group(1)
        part = nets[(nets["space"] == r.space) & (nets["dataset"] == r.dataset)]
        for other in named.split(", "):  # every metric of a tie
            assert r.value == pytest.approx(_scipy(part["pre_ece_15"], part[other]), abs=1e-12)
    q3 = found[found["question"] == "q3"]
    for (space, dataset), pair in q3.groupby(["space", "dataset"]):
        most, least = pair.iloc[0], pair.iloc[1]
        assert "most" in most["text"] and "least" in least["text"] and most["value"] >= least["value"]
    for r in found[found["question"] == "q1"].itertuples():
        a, b = re.search(r", (\S+) vs (\S+):", r.text).groups()
        metric = "pre_ece_15" if r.text.startswith("pre") else "post_ece_15"
        part = nets[nets["space"] == r.space]
        wide = part.pivot_table(index="arch_index", columns="dataset", values=metric)
        assert r.value == pytest.approx(_scipy(wide[a], wide[b]), abs=1e-12)


def test_nas_findings_and_table_follow_nas_table(run):
    from calibench.analysis.nats import nas

    result = pd.read_csv(run["out"]["nas"], dtype={"hp": str})
    assert set(result["algorithm"]) == set(nas.ALGORITHMS) and (result["repeats"] == 4).all()
    df = run["df"]
    part = df[(df["space"] == "tss") & (df["dataset"] == "cifar10")]
    want = nas.nas_table(part, repeats=4, budget=20)
    got = result[(result["space"] == "tss") & (result["dataset"] == "cifar10")].reset_index(drop=True)
    np.testing.assert_allclose(got["accuracy_mean"], want["accuracy_mean"], rtol=0, atol=1e-12)
    html = run["out"]["report"].read_text()
    assert "tss hp 200, cifar10" in html and "hit rate" in html


def test_report_sections_hold_their_figures_and_findings(run):
    html = run["out"]["report"].read_text()
    ids = re.findall(r"<section id='(\w+)'>", html)
    assert ids[:8] == ["failures", "q1", "q2", "q3", "q4", "q5", "q6", "q7"] and {"nas", "methods"} <= set(ids)
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S).group(1)
    assert re.findall(r"href='#(\w+)'", nav) == ids
    sections = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", html, re.S))
    assert "Every selected network was measured" in sections["failures"]
    assert "No content in this run: it needs a <code>robustness:</code>" in sections["q2"]  # no robustness table
    assert all("<p class='empty'>" not in sections[q] for q in ("q1", "q3", "q4", "q5", "q6", "q7"))
    plots = sorted((run["results"] / "plots").rglob("*.png"))
    assert plots
    for plot in plots:
        where = report.plot_section(plot)
        rel = plot.relative_to(run["results"]).as_posix()
        assert html.count(f"{rel}'") == 1, plot.name
        assert rel in sections.get(where, ""), (plot.name, where)
    assert "ece_vs_accuracy_tss_200.png" in sections["q5"] and "kendall_pre_post_ece_sss_90_cifar10.png" in sections["q4"]
    found = pd.read_csv(run["out"]["findings"], dtype={"hp": str})
    for r in found.itertuples():
        from html import escape
        assert escape(r.text) in sections[r.question]


def test_plot_section_and_empty_report(tmp_path):
    assert report.plot_section("x/kendall_datasets_pre_ece_15_tss_200_all.png") == "q1"
    assert report.plot_section("reliability_tss_200_cifar10.png") == "reliability"
    assert report.plot_section("something_new.png") == "other"
    found = pd.DataFrame(columns=FINDING_COLUMNS)
    out = report.write_report(tmp_path, [], found, {"t.parquet": (3, 0), "u.parquet": (5, 2)}, minibench=True)
    text = out.read_text()
    assert "NOT NATS-Bench results" in text and "Underdetermined" not in text
    assert "t.parquet (3 networks measured), u.parquet (5 networks measured, 2 isomorph copies of them)" in text
    # every question keeps its place in the contents, with one line saying why it is empty
    questions = [sid for sid, _, _ in report.SECTIONS if sid.startswith("q")]
    assert re.findall(r"<section id='(\w+)'>", text) == questions == [f"q{i}" for i in range(1, 8)]
    nav = re.search(r"<nav>(.*?)</nav>", text, re.S).group(1)
    assert re.findall(r"href='#(\w+)'", nav) == questions and nav.count("(no content in this run)") == 7
    sections = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", text, re.S))
    assert "No content in this run: it needs a <code>robustness:</code> table in the config" in sections["q2"]
    assert f"No content in this run: {report.NO_CONTENT}" in sections["q3"]
    assert all(s.count("<p class='empty'>") == 1 for s in sections.values())


def test_a_partial_report_names_the_parts_it_leaves_out(tmp_path):
    """docs/analysis.md, "When a part fails": the banner, the parts in the page's head (read back
    by `calibench status`), no link to an explorer not updated, and empty questions that say a
    part left out may answer them."""
    found = pd.DataFrame(columns=FINDING_COLUMNS)
    left = {"hcs": "failed: ValueError: <planted> & more (log: results/logs/analysis/hcs.log)",
            "reliability": "not run: it reads the outputs of hcs, left out too"}
    page = report.write_report(tmp_path, [], found, {}, minibench=False, explorer=False, left_out=left,
                               explorer_left_out=True)
    text = page.read_text()
    banner = re.search(r"<div class='warn' id='partial'>(.*?)</div>", text, re.S).group(1)
    assert "<code>hcs</code>: failed: ValueError: &lt;planted&gt; &amp; more (log: results/logs/analysis/hcs.log)" in banner
    assert "<code>reliability</code>: not run: it reads the outputs of hcs" in banner
    assert "explorer reads a part left out" in banner and "explorer-link" not in text
    assert report.left_out_of(page) == ["hcs", "reliability"]
    sections = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", text, re.S))
    assert "or a part this report leaves out does (above)." in sections["q3"]
    whole = report.write_report(tmp_path, [], found, {}, minibench=False)
    assert report.left_out_of(whole) == [] and "id='partial'" not in whole.read_text()
    assert report.left_out_of(tmp_path / "none.html") == []


def test_demo_banner_names_the_underdetermined_stages(tmp_path):
    found = pd.DataFrame(columns=FINDING_COLUMNS)
    text = report.write_report(tmp_path, [], found, {}, minibench=True, underdetermined=["vs", "ms", "hist"]).read_text()
    banner = re.search(r"<p class='warn'>(.*?)</p>", text, re.S).group(1)
    assert "Underdetermined on it: <code>vs</code>, <code>ms</code>, <code>hist</code>" in banner
    assert "describe fits on too little data" in banner
    assert "<p class='warn'>" not in report.write_report(tmp_path, [], found, {}, minibench=False,
                                                         underdetermined=["vs"]).read_text()
    # stages flagged on the same tables are named together, with the tables
    where = {"vs": ["t_cifar100", "t_ImageNet16-120"], "dir": ["t_cifar100", "t_ImageNet16-120"],
             "iso": ["t_cifar10", "t_cifar100", "t_ImageNet16-120"]}
    banner = report.demo_banner(where, n_tables=3)
    assert ("Underdetermined on it: <code>vs</code>, <code>dir</code> on t_cifar100, t_ImageNet16-120; "
            "<code>iso</code> on every table (") in banner


def test_underdetermined_stages_read_from_the_tables_flags(tmp_path):
    from calibench.report.assemble import underdetermined_stages

    rows = {"arch_index": [0, 1, 2], "measured_by": [0, 1, 1]}
    pd.DataFrame({**rows, "vs_fit_underdetermined": [0, 0, 0], "dir_fit_underdetermined": [0, 1, 1]}).to_parquet(
        tmp_path / "a.parquet")
    pd.DataFrame({**rows, "iso_fit_underdetermined": [1, 0, 0], "ms_fit_underdetermined": [0, 0, 1]}).to_parquet(
        tmp_path / "b.parquet")  # ms: flagged only on an isomorph copy (row 2 measured by 1): not counted
    assert underdetermined_stages([tmp_path / "a.parquet", tmp_path / "b.parquet"]) == ["dir", "iso"]
    assert underdetermined_stages([tmp_path / "b.parquet"]) == ["iso"]


def test_tables_scroll_in_their_own_box():
    text = "<h3>x</h3><table border='1' class='dataframe'><tr><td>1</td></tr></table><p>y</p><table></table>"
    assert report.scrollable_tables(text) == (
        "<h3>x</h3><div class='scroll'><table border='1' class='dataframe'><tr><td>1</td></tr></table></div>"
        "<p>y</p><div class='scroll'><table></table></div>")
    assert "white-space:nowrap" in report.STYLE and "overflow-wrap" not in report.STYLE


def test_question_7_tables_plots_and_findings(run):
    from calibench.analysis.nats import architecture_figures as af

    analysis = run["results"] / "analysis"
    width = pd.read_parquet(analysis / "sss_width_progression.parquet")
    assert sorted(width["width"].unique()) == list(range(8, 65, 8)) and len(width) == 8 * 2
    kernel = pd.read_parquet(analysis / "tss_kernel_parameters.parquet")
    nets = _nets(run["df"])
    tss = nets[(nets["space"] == "tss") & (nets["dataset"] == "cifar10")]
    k = af.kernel_parameters(tss["arch_str"])
    pre = kernel[(kernel["stage"] == "pre") & (kernel["dataset"] == "cifar10")]
    assert pre.set_index("kernel_params")["n"].to_dict() == pd.Series(k).value_counts().to_dict()
    found = pd.read_csv(run["out"]["findings"], dtype={"hp": str})
    q7 = found[found["question"] == "q7"]
    line = q7[q7["text"].str.contains("cell kernel parameters") & (q7["dataset"] == "cifar10")].iloc[0]
    lo, hi = pre.loc[pre["kernel_params"].idxmin()], pre.loc[pre["kernel_params"].idxmax()]
    assert line["value"] == pytest.approx(hi["median"] - lo["median"], abs=1e-12)
    assert line["value"] == pytest.approx(tss["pre_ece_15"][k == k.max()].median() - tss["pre_ece_15"][k == k.min()].median(),
                                          abs=1e-12)
    line = q7[q7["text"].str.contains("at width 8 against")]
    assert len(line) == 2
    sss = nets[(nets["space"] == "sss") & (nets["dataset"] == line.iloc[0]["dataset"])].set_index("arch_str")
    assert line.iloc[0]["value"] == pytest.approx(sss.loc["64:64:64:64:64", "pre_ece_15"] - sss.loc["8:8:8:8:8", "pre_ece_15"],
                                                  abs=1e-12)
    names = {p.name for p in (run["results"] / "plots").rglob("*.png")}
    assert {"kernel_parameters_tss.png", "width_progression_sss.png"} <= names


def test_two_schedules_are_compared_in_question_6(tmp_path):
    """hp: {tss: ["12", "200"]}: the analysis writes hp_comparison.parquet (hp_compare's
    table), draws Fig. 6c in question 6 and states its findings there."""
    from calibench.analysis.nats import schedules as hp_compare

    rng = np.random.default_rng(4)
    tables = population(rng, ["pre", "post"], spaces=("tss",), datasets=("cifar10",), n=25, full=False)
    short = tables[("tss", "cifar10")].copy()
    short["hp"] = "12"
    for c in [c for c in short.columns if "_ece_" in c]:
        short[c] = short[c] * rng.uniform(0.8, 1.5, len(short))
    tables[("tss12", "cifar10")] = short
    conf = settings(demo=True, top_k=())
    conf["analysis"]["nas"] = {"repeats": 2, "budget": 10}
    paths = []
    for (space, dataset), t in tables.items():
        path = tmp_path / "tables" / f"tss_{t['hp'].iloc[0]}_{dataset}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        t.to_parquet(path, index=False)
        paths.append(path)
    out = run_analysis(conf, paths, tmp_path / "results")
    got = pd.read_parquet(out["hp_comparison"])
    want = hp_compare.compare_hps(at.load_tables(paths), level=0.95)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)
    assert len(got) > 0
    html = out["report"].read_text()
    q6 = re.search(r"<section id='q6'>(.*?)</section>", html, re.S).group(1)
    assert "plots/schedules/hp_comparison.png" in q6
    found = pd.read_csv(out["findings"], dtype={"hp": str})
    extra = hp_compare.findings(want, BINS, min_networks=30)  # the schema's analysis.min_networks
    assert len(extra) > 0 and set(extra["text"]) <= set(found.loc[found["question"] == "q6", "text"])
    # at most 25 networks a table, fewer than the schema's 30: tau without interval, no decision
    ns = extra["text"].str.extract(r"of (\d+) architectures\); tau [-\d.]+, too few networks to decide \(n = (\d+)\)$")
    assert ns.notna().all().all() and (ns[0] == ns[1]).all() and (ns[0].astype(int) <= 25).all(), extra["text"]
    assert extra["lo"].isna().all() and extra["interval"].isna().all()


def test_the_papers_claims_are_tested_from_the_tables(run):
    """claims.csv: each claim's verdict follows from its per-table outcomes, and the
    outcomes from direct computations (question 1 from the Kendall table's intervals of
    positive width on at least analysis.min_networks networks, question 6 from scipy's
    Wilcoxon signed-rank test of the per-network relative changes)."""
    from scipy.stats import wilcoxon

    claims = pd.read_csv(run["out"]["claims"])
    assert set(claims["question"]) == {"q1", "q3", "q4", "q5", "q6", "q7"}
    assert set(claims["claim"]) == {c for c, _ in rc.CLAIMS.values()}
    for r in claims.itertuples():
        undecided = str(r.evidence).count(": undecided")
        few = str(r.evidence).count("too few networks to decide")
        assert r.verdict == rc._verdict(r.held, r.tested, undecided, few)
    assert rc._verdict(1, 1, 5) == "holds in 1 of 6 (5 undecided)" and rc._verdict(2, 2) == "holds"
    assert rc._verdict(0, 3) == "does not hold" and rc._verdict(0, 0, 2) == "undecided at this level"
    assert rc._verdict(0, 0, 0, 4) == "undecided (too few networks)"
    kendall = pd.read_parquet(run["results"] / "analysis" / "kendall.parquet")
    q1 = kendall[(kendall["figure"] == "datasets") & (kendall["population"] == "all")
                 & (kendall["metric"] == "pre_ece_15") & (kendall["row"] < kendall["col"])]
    assert (q1["n"] >= 30).all()  # 40 networks a table, the schema's minimum 30: every pair decides
    wide_enough = q1["hi"] - q1["lo"] > 1e-9
    row = claims[claims["question"] == "q1"].iloc[0]
    assert row["held"] == int(((q1["hi"] < 0.5) & wide_enough).sum())
    assert row["tested"] == int((((q1["hi"] < 0.5) | (q1["lo"] > 0.5)) & wide_enough).sum())
    nets = _nets(run["df"])
    held = tested = 0
    for _, part in nets.groupby(["space", "hp", "dataset"]):
        change = {s: part[f"{s}_ece_{max(BINS)}"] / part[f"{s}_ece_{min(BINS)}"] - 1 for s in ("pre", "post")}
        d = (change["post"] - change["pre"]).to_numpy()
        d = d[np.isfinite(d)]
        test = wilcoxon(d)
        assert f"W = {test.statistic:.1f}, p = {test.pvalue:.3g}, n = {len(d)}" in claims.loc[
            claims["question"] == "q6", "evidence"].iloc[0]
        if test.pvalue < 1 - 0.9:  # the fixture's level
            tested += 1
            held += bool(np.median(d) > 0)
    q6 = claims[claims["question"] == "q6"].iloc[0]
    assert (q6["held"], q6["tested"]) == (held, tested)
    wide = claims[claims["claim"].str.startswith("Wider")].iloc[0]
    # question 7 on every SSS network of cifar100 (the fixture's complex dataset): channels against ECE
    from calibench.analysis.stats import kendall_jackknife

    sss = nets[(nets["space"] == "sss") & (nets["dataset"] == "cifar100")]
    widths = [sum(int(c) for c in a.split(":")) for a in sss["arch_str"]]
    tau, lo, hi = kendall_jackknife(widths, sss["pre_ece_15"], 0.9)
    assert len(sss) >= 30 and f"tau {tau:.2f} [{lo:.2f}, {hi:.2f}] (jackknife), {len(sss)} networks" in wide["evidence"]
    decided = not lo <= 0 <= hi
    assert (wide["tested"], wide["held"]) == (int(decided), int(decided and lo > 0))
    html = run["out"]["report"].read_text()
    sections = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", html, re.S))
    assert "Tao et al.: “The calibration property" in sections["q1"] and "Wider model" in sections["q7"]


def test_odir_searches_worse_than_identity_are_told_in_the_methods_section(tmp_path):
    import json

    from calibench.report.assemble import odir_flags

    (tmp_path / "recalibration").mkdir()
    reason = "the grid's best pair (lambda=1000, mu=10; CV NLL 2.4) is worse than no recalibration (CV NLL 1.0) ..."
    doc = {"chosen": {"ms": {"lambda": 1e3, "mu": 1e1, "reason": reason, "ms_search_worse_than_identity": 1},
                      "dir": {"lambda": 1e1, "mu": 1e3, "reason": None, "dir_search_worse_than_identity": 0}}}
    (tmp_path / "recalibration" / "odir_tss_200_cifar10.json").write_text(json.dumps(doc))
    tables = [tmp_path / "tables" / "tss_200_cifar10.parquet", tmp_path / "tables" / "sss_90_cifar10.parquet"]
    text = odir_flags(tmp_path, tables)
    assert text.count("<li>") == 1 and "<li>tss_200_cifar10, ms: the grid&#x27;s best pair (lambda=1000" in text
    assert "1 λ, μ search(es)" in text and "dir" not in text.split("<ul>")[1]
    assert "{stage}_search_worse_than_identity</code> = 1" in text
    assert odir_flags(tmp_path, tables[1:]) == ""


def test_question_7_findings_name_their_networks_ties_and_too_few():
    """Issue 34: every question-7 finding names its n and reads "too few networks" below
    min_networks; a tie for the most frequent operation names each tied operation; "top
    networks" that are the whole table say so."""
    from calibench.analysis.nats import architecture
    from calibench.analysis.nats.architecture import edge_op_frequency
    from calibench.report.findings import _q7

    strings = ["|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|none~1|avg_pool_3x3~2|",
               "|nor_conv_1x1~0|+|none~0|skip_connect~1|+|none~0|none~1|avg_pool_3x3~2|",
               "|nor_conv_3x3~0|+|skip_connect~0|skip_connect~1|+|none~0|none~1|nor_conv_3x3~2|"]
    hcs = pd.DataFrame({"space": "tss", "hp": "200", "dataset": "cifar10", "arch_index": [0, 1, 2],
                        "arch_str": strings, "hcs_1": [0.5, 0.7, 0.6]})
    whole = edge_op_frequency(hcs, 50, 1)  # 3 networks, top 50: the whole table
    (row,) = _q7(pd.DataFrame(), whole, [], min_networks=10)
    assert "all 3 networks of the table (it holds no more than the top 3)" in row["text"], row["text"]
    assert row["text"].endswith(" — too few networks to decide (n = 3)"), row["text"]
    assert "1<-0: nor_conv_3x3 (2/3)" in row["text"] and "2<-0: none (2/3)" in row["text"], row["text"]
    top2 = edge_op_frequency(hcs, 2, 1)  # networks 1 and 2: every edge but two disagrees
    (row,) = _q7(pd.DataFrame(), top2, [], min_networks=2)
    assert "the top 2 networks by HCS" in row["text"] and "too few" not in row["text"], row["text"]
    assert "1<-0: nor_conv_1x1, nor_conv_3x3 (1/2, tied)" in row["text"], row["text"]
    brackets = pd.DataFrame({"hp": "90", "dataset": "cifar10", "bracket": ["[40, 80)", "[200, 240)"],
                             "networks": [1, 3], "accuracy": [0.5, 0.6], "pre_ece_15": [0.1, 0.2]})
    (row,) = _q7(brackets, pd.DataFrame(), [], min_networks=5)
    assert "(1 networks) against" in row["text"] and row["text"].endswith("too few networks to decide (n = 1)")
    kernel = pd.DataFrame({"hp": "200", "dataset": "cifar10", "stage": "pre", "kernel_params": [0, 9],
                           "median": [0.1, 0.2], "n": [1, 3]})
    width = pd.DataFrame(columns=["hp", "dataset", "width", "accuracy", "pre_ece_15"])
    (row,) = architecture.findings(kernel, width, [15], min_networks=4)
    assert "(1 networks) against 0.200 at 9 (3)" in row["text"] and row["text"].endswith("(n = 1)"), row["text"]


def test_question_2_and_3_findings_name_every_metric_of_a_tie():
    """A tie at the most (or least) agreeing metric names each tied metric: naming one would be
    a ranking the data do not support. Without a tie, one name as before."""
    from calibench.report.findings import _q2, _q3

    taus = {"pre_ksce": 1.0, "pre_kdece": 1.0, "pre_ece_em_15": 1.0, "pre_mce_15": -0.4, "pre_nll": -0.4,
            "pre_brier": 0.2}
    kendall = pd.DataFrame([{"figure": "metrics", "population": "all", "stage": None, "space": "tss", "hp": "200",
                             "dataset": "cifar10", "row": "pre_ece_15", "col": col, "tau": tau, "lo": tau - 0.1,
                             "hi": tau, "interval": "bootstrap", "n": 40} for col, tau in taus.items()])
    most, least = _q3(kendall, 15, 30)
    assert "agrees most with pre_ece_em_15, pre_kdece, pre_ksce (tied) (" in most["text"], most["text"]
    assert "the interval of pre_ece_em_15 not widened" in most["text"] and most["value"] == 1.0, most["text"]
    assert "agrees least with pre_mce_15, pre_nll (tied) (" in least["text"], least["text"]
    single = kendall[kendall["col"] != "pre_nll"]
    _, least = _q3(single, 15, 30)
    assert "agrees least with pre_mce_15 (tss" in least["text"] and "its interval not widened" in least["text"]
    robustness = pd.DataFrame([{"kind": "robustness", "population": "all", "metric": "pre_ece_15", "space": "tss",
                                "hp": "200", "dataset": "cifar10", "robustness": name, "tau": tau, "lo": tau - 0.1,
                                "hi": min(tau + 0.1, 1.0), "n": 40}
                               for name, tau in (("gaussian_noise", -0.5), ("fog", 0.5), ("blur", 0.3))])
    (row,) = _q2(robustness, 30)
    assert "strongest column fog, gaussian_noise (tied) (" in row["text"] and "the interval of fog" in row["text"]
    (row,) = _q2(robustness[robustness["robustness"] != "fog"], 30)
    assert "strongest column gaussian_noise (median" in row["text"] and row["value"] == -0.5, row["text"]


def test_question_4_table_is_the_reports_and_says_too_few_below_min_networks(run, tmp_path):
    """The Q4 table (pre against post-method ECE taus) gives tau alone, "too few", below
    analysis.min_networks, with its interval from there on; the report makes it (the kendall
    part's intervals do not depend on min_networks) and leaves out the one an older kendall
    part's manifest may hold."""
    from calibench import integrity
    from calibench.analysis import registry
    from calibench.analysis.kendall import q4_block
    from calibench.layout import part_manifest
    from calibench.report.assemble import write

    rows = [{"figure": "pre_post", "population": "all", "row": "pre_ece_15", "col": f"{s}_ece_15", "stage": s,
             "space": "tss", "hp": "200", "dataset": d, "tau": 0.8, "lo": 0.7, "hi": 0.9, "n": n}
            for s in ("post", "vs") for d, n in (("cifar10", 5), ("cifar100", 40))]
    html = q4_block(pd.DataFrame(rows), [15], min_networks=30)
    assert html.count("<td>0.800 (too few)</td>") == 2 and html.count("<td>0.800 [0.70, 0.90]</td>") == 2, html
    assert "on fewer than 30 networks" in html
    assert "(too few)" not in q4_block(pd.DataFrame(rows), [15], min_networks=5)

    page = run["out"]["report"].read_text()
    assert page.count("Question 4: does a method affect all networks uniformly?") == 1
    assert "(too few)" not in page  # 40 networks a table, min_networks 30
    assert integrity.read_json(part_manifest(run["results"], "kendall"))["blocks"] == []
    results = shutil.copytree(run["results"], tmp_path / "results")
    manifest = part_manifest(results, "kendall")
    doc = integrity.read_json(manifest)
    doc["blocks"] = [{"section": "methods", "order": 20, "html": "<h3>an older kendall part's Q4 table</h3>"}]
    integrity.write_json(doc, manifest)
    tables = sorted(str(p) for p in (run["results"].parent / "tables").glob("*.parquet"))
    parts = [p.name for p in registry.parts_of_tables(run["conf"], list(at.table_stages(tables)))]
    conf = {**run["conf"], "analysis": {**run["conf"]["analysis"], "min_networks": 50}}
    page = write({**registry.report_settings(conf), "parts": parts}, tables, results)["report"].read_text()
    assert "an older kendall part" not in page and page.count("Question 4: does a method") == 1
    assert page.count("(too few)</td>") == 2 * 2 * 7  # spaces x datasets x methods, 40 networks each


def test_a_nas_finding_names_its_repeats_and_the_welch_interval_of_the_difference():
    """The NAS finding of a search that did not reach every architecture names its repeats and
    architectures, and gives the difference of the mean accuracies with Welch's t interval,
    as scipy's ttest_ind(equal_var=False) gives it from the runs themselves."""
    from scipy.stats import ttest_ind

    from calibench.report.findings import _nas

    rng = np.random.default_rng(8)
    by_hcs, by_acc = rng.uniform(0.80, 0.90, 6), rng.uniform(0.82, 0.93, 6)
    want = ttest_ind(by_hcs, by_acc, equal_var=False).confidence_interval(0.9)
    assert stats.welch_interval(by_hcs.mean(), by_hcs.std(ddof=1), by_acc.mean(), by_acc.std(ddof=1), 6, 0.9) == \
        pytest.approx((want.low, want.high), rel=1e-12)
    nas = pd.DataFrame([{"space": "tss", "hp": "200", "dataset": "cifar10", "algorithm": "evolution",
                         "objective": objective, "budget": 20, "repeats": 6, "architectures": 500,
                         "accuracy_mean": runs.mean(), "accuracy_sd": runs.std(ddof=1), "exhaustive": False}
                        for objective, runs in (("hcs_1", by_hcs), ("accuracy", by_acc))])
    (row,) = _nas(nas, 0.9)
    assert "the mean of 6 searches each, over 500 architectures" in row["text"], row["text"]
    assert f"[{100 * want.low:+.2f}, {100 * want.high:+.2f}] points at 90% (Welch t)" in row["text"], row["text"]
    assert (row["lo"], row["hi"], row["interval"]) == (pytest.approx(want.low), pytest.approx(want.high), "welch")
    (row,) = _nas(nas.assign(repeats=1, accuracy_sd=np.nan), 0.9)  # one search each: no interval
    assert "Welch" not in row["text"] and np.isnan(row["lo"]) and row["interval"] is None
    same = stats.welch_interval(0.8, 0.0, 0.7, 0.0, 4, 0.95)  # every search found the same architecture
    assert same == pytest.approx((0.1, 0.1))
