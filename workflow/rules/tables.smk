rule table:
    """The wide result table of one (space, hp, dataset): one row per network, from the
    shards its measurement manifests name."""
    input:
        population=f"{RESULTS}/population/{{space}}.json",
        manifests=measure_manifests,
    output:
        table=f"{RESULTS}/tables/{{space}}_{{hp}}_{{dataset}}.parquet",
        failures=f"{RESULTS}/failures/{{space}}_{{hp}}_{{dataset}}.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/tables/{{space}}_{{hp}}_{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tables/{{space}}_{{hp}}_{{dataset}}.tsv"
    params:
        results=results_of(1),
        python=PYTHON,
    shell:
        "{params.python} -m calibench.cli build-table --space {wildcards.space} --hp {wildcards.hp} "
        "--dataset {wildcards.dataset} --results {params.results} --out {output.table} "
        "--failures {output.failures} --manifests {input.manifests} > {log} 2>&1"
