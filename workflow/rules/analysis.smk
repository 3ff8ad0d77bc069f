rule analysis:
    """Kendall matrices, HCS rankings, edge-operation and size-bracket summaries, plots, report."""
    input:
        all_tables(),
    output:
        report=f"{RESULTS}/report.html",
        kendall=f"{RESULTS}/analysis/kendall.parquet",
        hcs=f"{RESULTS}/analysis/hcs.parquet",
    log:
        f"{RESULTS}/logs/analysis.log",
    params:
        settings=SETTINGS,
        results=RESULTS,
    shell:
        "{PYTHON} -m calibench.cli analyze --settings {params.settings:q} --results {params.results} "
        "--tables {input} > {log} 2>&1"
