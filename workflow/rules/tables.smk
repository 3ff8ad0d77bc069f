rule table:
    """The wide result table of one (space, hp, dataset): one row per network."""
    input:
        chunk_manifests,
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
        settings=SETTINGS,
        results=results_of(1),
        python=PYTHON,
    shell:
        "{params.python} -m calibench.cli build-table --settings {params.settings:q} --space {wildcards.space} "
        "--hp {wildcards.hp} --dataset {wildcards.dataset} --results {params.results} --out {output.table} "
        "--manifests {input} > {log} 2>&1"
