# The analysis as parts (calibench.analysis.parts): each part is its own job with declared
# outputs under {RESULTS}/analysis/ (its tables and its manifest, analysis/parts/{part}.json:
# figures and report blocks) and its figures as a directory, {RESULTS}/plots/{part}/. Each
# part's params carry exactly the settings its outputs depend on
# (calibench.config.settings.analysis_part_settings), so a config change reruns exactly the
# parts it affects, and then the report. One failing part fails alone: the others complete
# (keep-going, the profiles' default); the report, which needs them all, does not run, so
# the last good report.html stays. Parts a config does not call for (NATS-Bench only,
# schedules, robustness) are not in the DAG; the report assembles the parts the config has.

rule analysis_kendall:
    """Kendall tau-b matrices with intervals (questions 1, 3, 4) and their heatmaps; two threads
    (the intervals of a matrix are independent of the others')."""
    input:
        tables=all_tables(),
    output:
        manifest=results_path(layout.part_manifest, "kendall"),
        kendall=part_file("kendall.parquet"),
        question4=part_file("question4.csv"),
        plots=part_plots("kendall", "Kendall tau"),
    threads: 2
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/kendall"),
    benchmark:
        benchmark_file("analysis/kendall")
    params:
        settings=part_settings("kendall"),
        results=results_of(2),
    shell:
        part_shell("kendall")


rule analysis_overview:
    """ECE by bin count (Fig. 6) and ECE against accuracy (Fig. 5) of every table family."""
    input:
        tables=all_tables(),
    output:
        manifest=results_path(layout.part_manifest, "overview"),
        plots=part_plots("overview", "ECE by bin count and against accuracy"),
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/overview"),
    benchmark:
        benchmark_file("analysis/overview")
    params:
        settings=part_settings("overview"),
        results=results_of(2),
    shell:
        part_shell("overview")


rule analysis_hcs:
    """HCS_beta rankings, the top n per table, HCS against accuracy."""
    input:
        tables=all_tables(),
    output:
        manifest=results_path(layout.part_manifest, "hcs"),
        hcs=part_file("hcs.parquet"),
        top=part_file("top_hcs.csv"),
        plots=part_plots("hcs", "HCS"),
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/hcs"),
    benchmark:
        benchmark_file("analysis/hcs")
    params:
        settings=part_settings("hcs"),
        results=results_of(2),
    shell:
        part_shell("hcs")


rule analysis_methods:
    """The post-hoc methods: distribution of each metric per stage, wins and margins, plots."""
    input:
        tables=all_tables(),
    output:
        manifest=results_path(layout.part_manifest, "methods"),
        summary=part_file("methods_summary.parquet"),
        summary_csv=part_file("methods_summary.csv"),
        wins=part_file("method_wins.parquet"),
        plots=part_plots("methods", "Post-hoc methods"),
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/methods"),
    benchmark:
        benchmark_file("analysis/methods")
    params:
        settings=part_settings("methods"),
        results=results_of(2),
    shell:
        part_shell("methods")


rule analysis_reliability:
    """Reliability diagrams of the best and worst network by HCS of every table (from the shards)."""
    input:
        tables=all_tables(),
        hcs=part_file("hcs.parquet"),
    output:
        manifest=results_path(layout.part_manifest, "reliability"),
        plots=part_plots("reliability", "Reliability diagrams"),
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/reliability"),
    benchmark:
        benchmark_file("analysis/reliability")
    params:
        settings=part_settings("reliability"),
        results=results_of(2),
    shell:
        part_shell("reliability")


rule analysis_groups:
    """Populations beyond NATS-Bench by a metadata column (empty outputs without groups)."""
    input:
        tables=all_tables(),
    output:
        manifest=results_path(layout.part_manifest, "groups"),
        groups=part_file("groups.csv"),
        kendall=part_file("kendall_groups.parquet"),
        plots=part_plots("groups", "Populations by group"),
    conda:
        "../../environment.yml"
    log:
        log_file("analysis/groups"),
    benchmark:
        benchmark_file("analysis/groups")
    params:
        settings=part_settings("groups"),
        results=results_of(2),
    shell:
        part_shell("groups")


if "nas" in ANALYSIS_PARTS:

    rule analysis_nas:
        """NATS-Bench: architecture search by accuracy and HCS over every table (Table 1)."""
        input:
            tables=all_tables(),
        output:
            manifest=results_path(layout.part_manifest, "nas"),
            nas=part_file("nas.csv"),
            plots=part_plots("nas", "NAS"),
        conda:
            "../../environment.yml"
        log:
            log_file("analysis/nas"),
        benchmark:
            benchmark_file("analysis/nas")
        params:
            settings=part_settings("nas"),
            results=results_of(2),
        shell:
            part_shell("nas")


if "architecture" in ANALYSIS_PARTS:

    rule analysis_architecture:
        """NATS-Bench: TSS edge operations and kernel parameters, SSS sizes and widths (Figs. 7-10)."""
        input:
            tables=all_tables(),
        output:
            manifest=results_path(layout.part_manifest, "architecture"),
            edges=part_file("tss_edge_ops.parquet"),
            brackets=part_file("sss_size_brackets.parquet"),
            kernel=part_file("tss_kernel_parameters.parquet"),
            width=part_file("sss_width_progression.parquet"),
            plots=part_plots("architecture", "Architectures"),
        conda:
            "../../environment.yml"
        log:
            log_file("analysis/architecture"),
        benchmark:
            benchmark_file("analysis/architecture")
        params:
            settings=part_settings("architecture"),
            results=results_of(2),
        shell:
            part_shell("architecture")


if "schedules" in ANALYSIS_PARTS:

    rule analysis_schedules:
        """NATS-Bench: the same architectures under two or more training schedules (Fig. 6c)."""
        input:
            tables=all_tables(),
        output:
            manifest=results_path(layout.part_manifest, "schedules"),
            comparison=part_file("hp_comparison.parquet"),
            comparison_csv=part_file("hp_comparison.csv"),
            plots=part_plots("schedules", "Training schedules"),
        conda:
            "../../environment.yml"
        log:
            log_file("analysis/schedules"),
        benchmark:
            benchmark_file("analysis/schedules")
        params:
            settings=part_settings("schedules"),
            results=results_of(2),
        shell:
            part_shell("schedules")


if "robustness" in ANALYSIS_PARTS:

    rule analysis_robustness:
        """NATS-Bench TSS: calibration against an external robustness table (question 2, Fig. 3)."""
        input:
            tables=all_tables(),
            robustness=config["robustness"]["path"],
        output:
            manifest=results_path(layout.part_manifest, "robustness"),
            kendall=part_file("robustness_kendall.parquet"),
            plots=part_plots("robustness", "Robustness"),
        conda:
            "../../environment.yml"
        log:
            log_file("analysis/robustness"),
        benchmark:
            benchmark_file("analysis/robustness")
        params:
            settings=part_settings("robustness"),
            results=results_of(2),
        shell:
            part_shell("robustness")


rule assemble_report:
    """report.html, analysis/findings.csv and analysis/claims.csv from the parts' outputs and the tables."""
    input:
        tables=all_tables(),
        parts=analysis_part_outputs,
    output:
        report=report(results_path(layout.report_path), caption="../report/report_html.rst", category="Report"),
        findings=part_file("findings.csv"),
        claims=part_file("claims.csv"),
    conda:
        "../../environment.yml"
    log:
        log_file("report"),
    benchmark:
        benchmark_file("report")
    params:
        settings=part_settings("report"),
        results=results_of(0),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench report --settings {params.settings:q} --results {params.results} "
        "--tables {input.tables} > {log} 2>&1"
