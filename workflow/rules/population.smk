checkpoint population:
    """Selected architectures of one space (or the members of one population) and their
    chunks, from the archive's meta (or the population's source)."""
    input:
        population_input,
    output:
        results_path(layout.population_path, "{space}"),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("population/{space}"),
    params:
        settings=lambda wildcards: stage_json(stage.as_params(stage.population_settings(config, wildcards.space))),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench population --settings {params.settings:q} --space {wildcards.space} "
        "--out {output} > {log} 2>&1"
