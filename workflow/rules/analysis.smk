rule analysis:
    """Kendall matrices, HCS rankings, edge-operation and size-bracket summaries, the
    methods' summary and win shares, plots, report."""
    input:
        tables=all_tables(),
        robustness=[config["robustness"]["path"]] if (config.get("robustness") or {}).get("path") else [],
    output:
        report=report(f"{RESULTS}/report.html", caption="../report/report_html.rst", category="Report"),
        plots=report(directory(f"{RESULTS}/plots"), patterns=["{name}.png"], caption="../report/figures.rst",
                     category="Figures"),
        kendall=f"{RESULTS}/analysis/kendall.parquet",
        hcs=f"{RESULTS}/analysis/hcs.parquet",
        methods=f"{RESULTS}/analysis/methods_summary.parquet",
        wins=f"{RESULTS}/analysis/method_wins.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/analysis.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis.tsv"
    params:
        settings=stage_json(stage.analysis_settings(config)),
        results=results_of(0),
        python=PYTHON,
    shell:
        "{params.python} -m calibench analyze --settings {params.settings:q} --results {params.results} "
        "--tables {input.tables} > {log} 2>&1"
