TABLE = results_path(layout.table_path, "{target}", "{dataset}")


rule table:
    """The wide result table of one (space, hp, dataset): one row per network, from the
    shards its measurement manifests name."""
    input:
        population=lambda wildcards: results_path(layout.population_path, space_of(wildcards)),
        manifests=measure_manifests,
    output:
        table=TABLE,
        failures=results_path(layout.failures_path, "{target}", "{dataset}"),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("tables/{target}_{dataset}"),
    benchmark:
        benchmark_file("tables/{target}_{dataset}")
    params:
        results=results_of(TABLE),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench build-table --target {wildcards.target} "
        "--dataset {wildcards.dataset} --results {params.results} --out {output.table} "
        "--failures {output.failures} --manifests {input.manifests} > {log} 2>&1"
