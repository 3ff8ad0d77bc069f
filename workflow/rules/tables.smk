rule table:
    """The wide result table of one (space, hp, dataset): one row per network."""
    input:
        chunk_manifests,
    output:
        f"{RESULTS}/tables/{{space}}_{{hp}}_{{dataset}}.parquet",
    log:
        f"{RESULTS}/logs/tables/{{space}}_{{hp}}_{{dataset}}.log",
    params:
        settings=SETTINGS,
        results=RESULTS,
    shell:
        "{PYTHON} -m calibench.cli build-table --settings {params.settings:q} --space {wildcards.space} "
        "--hp {wildcards.hp} --dataset {wildcards.dataset} --results {params.results} --out {output} "
        "--manifests {input} > {log} 2>&1"
