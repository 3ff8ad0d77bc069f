rule evaluate:
    """One chunk of one (space, hp, dataset): a parquet shard per architecture, then the
    manifest. Shards already valid are skipped, so a killed job resumes where it stopped."""
    input:
        population=f"{RESULTS}/population/{{space}}.json",
    output:
        f"{RESULTS}/chunks/{{space}}_{{hp}}_{{dataset}}/chunk{{chunk}}.json",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/evaluate/{{space}}_{{hp}}_{{dataset}}_chunk{{chunk}}.log",
    benchmark:  # wall time and peak memory (max_rss, MB) per job: size cluster requests from these
        f"{RESULTS}/benchmarks/evaluate/{{space}}_{{hp}}_{{dataset}}_chunk{{chunk}}.tsv"
    resources:
        runtime=evaluate_runtime,
        gpu=EVALUATE_GPUS,
    params:
        settings=SETTINGS,
        results=results_of(2),
        python=PYTHON,
    shell:
        "{params.python} -m calibench.cli evaluate-chunk --settings {params.settings:q} --space {wildcards.space} "
        "--hp {wildcards.hp} --dataset {wildcards.dataset} --chunk {wildcards.chunk} "
        "--results {params.results} --manifest {output} > {log} 2>&1"
