# `calibench explore` as a job: the run's interactive explorer, after the tables (and the Kendall
# and HCS parts, whose matrices and scores it shows); the report links to it.


rule explorer:
    """results/explorer/: an offline page over the tables (scatter, reliability, Kendall, methods)."""
    input:
        tables=all_tables(),
        kendall=part_file("kendall.parquet"),
        hcs=part_file("hcs.parquet"),
    output:
        # not a report() output: the page needs its folder (plotly.js, data/), which Snakemake's report would not pack
        page=results_path(layout.explorer_page),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("explorer"),
    benchmark:
        benchmark_file("explorer")
    params:
        settings=lambda wildcards: stage_json(stage.explorer_settings(config)),
        results=results_of(results_path(layout.explorer_page)),
    shell:
        "\"$CALIBENCH_PYTHON\" -m calibench explore --settings {params.settings:q} --results {params.results} "
        "--threads {threads} {input.tables} > {log} 2>&1"
