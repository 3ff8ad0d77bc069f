# The analysis as parts (calibench.analysis.parts): each part is its own job with declared
# outputs under {RESULTS}/analysis/ (its tables and its manifest, analysis/parts/{part}.json:
# figures and report blocks) and its figures as a directory, {RESULTS}/plots/{part}/. Each
# part's params carry exactly the settings its outputs depend on
# (calibench.config.settings.analysis_part_settings), so a config change reruns exactly the
# parts it affects, and then the report. One failing part fails alone: the others complete
# (keep-going, the profiles' default); the report, which needs them all, does not run, so
# the last good report.html stays. Parts a config does not call for (NATS-Bench only,
# schedules, robustness) are not in the DAG; the report assembles the parts the config has.

ANALYSIS = f"{RESULTS}/analysis"
ANALYSIS_PARTS = stage.analysis_parts(config)


def part_settings(part):
    return stage_json(stage.analysis_part_settings(config, part))


def part_plots(part, name):
    return report(directory(f"{RESULTS}/plots/{part}"), patterns=["{name}.png"], caption="../report/figures.rst",
                  category="Figures", subcategory=name)


def part_shell(part):
    return ("{params.python} -m calibench analysis-part --part " + part + " --settings {params.settings:q} "
            "--results {params.results} --tables {input.tables} > {log} 2>&1")


rule analysis_kendall:
    """Kendall tau-b matrices with intervals (questions 1, 3, 4) and their heatmaps."""
    input:
        tables=all_tables(),
    output:
        manifest=f"{ANALYSIS}/parts/kendall.json",
        kendall=f"{ANALYSIS}/kendall.parquet",
        question4=f"{ANALYSIS}/question4.csv",
        plots=part_plots("kendall", "Kendall tau"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/kendall.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/kendall.tsv"
    params:
        settings=part_settings("kendall"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("kendall")


rule analysis_overview:
    """ECE by bin count (Fig. 6) and ECE against accuracy (Fig. 5) of every table family."""
    input:
        tables=all_tables(),
    output:
        manifest=f"{ANALYSIS}/parts/overview.json",
        plots=part_plots("overview", "ECE by bin count and against accuracy"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/overview.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/overview.tsv"
    params:
        settings=part_settings("overview"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("overview")


rule analysis_hcs:
    """HCS_beta rankings, the top n per table, HCS against accuracy."""
    input:
        tables=all_tables(),
    output:
        manifest=f"{ANALYSIS}/parts/hcs.json",
        hcs=f"{ANALYSIS}/hcs.parquet",
        top=f"{ANALYSIS}/top_hcs.csv",
        plots=part_plots("hcs", "HCS"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/hcs.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/hcs.tsv"
    params:
        settings=part_settings("hcs"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("hcs")


rule analysis_methods:
    """The post-hoc methods: distribution of each metric per stage, wins and margins, plots."""
    input:
        tables=all_tables(),
    output:
        manifest=f"{ANALYSIS}/parts/methods.json",
        summary=f"{ANALYSIS}/methods_summary.parquet",
        summary_csv=f"{ANALYSIS}/methods_summary.csv",
        wins=f"{ANALYSIS}/method_wins.parquet",
        plots=part_plots("methods", "Post-hoc methods"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/methods.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/methods.tsv"
    params:
        settings=part_settings("methods"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("methods")


rule analysis_reliability:
    """Reliability diagrams of the best and worst network by HCS of every table (from the shards)."""
    input:
        tables=all_tables(),
        hcs=f"{ANALYSIS}/hcs.parquet",
    output:
        manifest=f"{ANALYSIS}/parts/reliability.json",
        plots=part_plots("reliability", "Reliability diagrams"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/reliability.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/reliability.tsv"
    params:
        settings=part_settings("reliability"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("reliability")


rule analysis_groups:
    """Populations beyond NATS-Bench by a metadata column (empty outputs without groups)."""
    input:
        tables=all_tables(),
    output:
        manifest=f"{ANALYSIS}/parts/groups.json",
        groups=f"{ANALYSIS}/groups.csv",
        kendall=f"{ANALYSIS}/kendall_groups.parquet",
        plots=part_plots("groups", "Populations by group"),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis/groups.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/groups.tsv"
    params:
        settings=part_settings("groups"),
        results=results_of(2),
        python=PYTHON,
    shell:
        part_shell("groups")


if "nas" in ANALYSIS_PARTS:

    rule analysis_nas:
        """NATS-Bench: architecture search by accuracy and HCS over every table (Table 1)."""
        input:
            tables=all_tables(),
        output:
            manifest=f"{ANALYSIS}/parts/nas.json",
            nas=f"{ANALYSIS}/nas.csv",
            plots=part_plots("nas", "NAS"),
        conda:
            "../../environment.yml"
        log:
            f"{RESULTS}/logs/analysis/nas.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/nas.tsv"
        params:
            settings=part_settings("nas"),
            results=results_of(2),
            python=PYTHON,
        shell:
            part_shell("nas")


if "architecture" in ANALYSIS_PARTS:

    rule analysis_architecture:
        """NATS-Bench: TSS edge operations and kernel parameters, SSS sizes and widths (Figs. 7-10)."""
        input:
            tables=all_tables(),
        output:
            manifest=f"{ANALYSIS}/parts/architecture.json",
            edges=f"{ANALYSIS}/tss_edge_ops.parquet",
            brackets=f"{ANALYSIS}/sss_size_brackets.parquet",
            kernel=f"{ANALYSIS}/tss_kernel_parameters.parquet",
            width=f"{ANALYSIS}/sss_width_progression.parquet",
            plots=part_plots("architecture", "Architectures"),
        conda:
            "../../environment.yml"
        log:
            f"{RESULTS}/logs/analysis/architecture.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/architecture.tsv"
        params:
            settings=part_settings("architecture"),
            results=results_of(2),
            python=PYTHON,
        shell:
            part_shell("architecture")


if "schedules" in ANALYSIS_PARTS:

    rule analysis_schedules:
        """NATS-Bench: the same architectures under two or more training schedules (Fig. 6c)."""
        input:
            tables=all_tables(),
        output:
            manifest=f"{ANALYSIS}/parts/schedules.json",
            comparison=f"{ANALYSIS}/hp_comparison.parquet",
            comparison_csv=f"{ANALYSIS}/hp_comparison.csv",
            plots=part_plots("schedules", "Training schedules"),
        conda:
            "../../environment.yml"
        log:
            f"{RESULTS}/logs/analysis/schedules.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/schedules.tsv"
        params:
            settings=part_settings("schedules"),
            results=results_of(2),
            python=PYTHON,
        shell:
            part_shell("schedules")


if "robustness" in ANALYSIS_PARTS:

    rule analysis_robustness:
        """NATS-Bench TSS: calibration against an external robustness table (question 2, Fig. 3)."""
        input:
            tables=all_tables(),
            robustness=config["robustness"]["path"],
        output:
            manifest=f"{ANALYSIS}/parts/robustness.json",
            kendall=f"{ANALYSIS}/robustness_kendall.parquet",
            plots=part_plots("robustness", "Robustness"),
        conda:
            "../../environment.yml"
        log:
            f"{RESULTS}/logs/analysis/robustness.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/robustness.tsv"
        params:
            settings=part_settings("robustness"),
            results=results_of(2),
            python=PYTHON,
        shell:
            part_shell("robustness")


def analysis_part_outputs(wildcards):
    """Every output of the parts this config has: the report waits for all of them."""
    return [path for part in ANALYSIS_PARTS for path in getattr(rules, f"analysis_{part}").output]


rule assemble_report:
    """report.html, analysis/findings.csv and analysis/claims.csv from the parts' outputs and the tables."""
    input:
        tables=all_tables(),
        parts=analysis_part_outputs,
    output:
        report=report(f"{RESULTS}/report.html", caption="../report/report_html.rst", category="Report"),
        findings=f"{ANALYSIS}/findings.csv",
        claims=f"{ANALYSIS}/claims.csv",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    params:
        settings=part_settings("report"),
        results=results_of(0),
        python=PYTHON,
    shell:
        "{params.python} -m calibench report --settings {params.settings:q} --results {params.results} "
        "--tables {input.tables} > {log} 2>&1"
