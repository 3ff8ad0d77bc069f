rule table:
    """The wide result table of one (space, hp, dataset): one row per network, from the
    shards its measurement manifests name."""
    input:
        population=lambda wildcards: f"{RESULTS}/population/{space_of(wildcards)}.json",
        manifests=measure_manifests,
    output:
        table=f"{RESULTS}/tables/{{target}}_{{dataset}}.parquet",
        failures=f"{RESULTS}/failures/{{target}}_{{dataset}}.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/tables/{{target}}_{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tables/{{target}}_{{dataset}}.tsv"
    params:
        results=results_of(1),
        python=PYTHON,
    shell:
        "{params.python} -m calibench build-table --target {wildcards.target} "
        "--dataset {wildcards.dataset} --results {params.results} --out {output.table} "
        "--failures {output.failures} --manifests {input.manifests} > {log} 2>&1"
