rule labels:
    """One evaluation set's labels, once per dataset, into the logits store (NATS-Bench's,
    shared by its spaces)."""
    output:
        maybe_temp(results_path(layout.labels_path, "{dataset}")),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("labels/{dataset}"),
    params:
        settings=stage_json(stage.as_params(stage.labels_settings(config))),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench labels --settings {params.settings:q} --dataset {wildcards.dataset} "
        "--out {output} > {log} 2>&1"


rule population_labels:
    """A population's labels of one dataset (from its logits files or its evaluation data)."""
    input:
        labels_input,
    output:
        maybe_temp(results_path(layout.labels_path, "{dataset}", space="{space}")),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("labels/{space}_{dataset}"),
    params:
        settings=lambda wildcards: stage_json(stage.as_params(stage.labels_settings(config, wildcards.space))),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench labels --settings {params.settings:q} --space {wildcards.space} "
        "--dataset {wildcards.dataset} --out {output} > {log} 2>&1"


INFER_MANIFEST = results_path(layout.infer_manifest, "{target}", "{chunk}")


rule infer:
    """One chunk of one (space, hp) or population: each archive file decompressed once, every
    configured dataset and seed run, float32 logits into the store (results/logits/), then
    the chunk's manifest (a logits population's files are imported, a torch population's
    models run). Logits already stored with the current key are skipped, so a killed job
    resumes where it stopped and an unchanged chunk opens no archive."""
    input:
        population=lambda wildcards: results_path(layout.population_path, space_of(wildcards)),
        files=chunk_files,
    output:
        maybe_temp(INFER_MANIFEST),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("infer/{target}_chunk{chunk}"),
    benchmark:  # wall time and peak memory (max_rss, MB) per job: size cluster requests from these
        benchmark_file("infer/{target}_chunk{chunk}")
    resources:
        runtime=infer_runtime,
        **gpu_resources(infer_gpus),
    params:
        settings=lambda wildcards: stage_json(stage.as_params(stage.inference_settings(config, space_of(wildcards)))),
        results=results_of(INFER_MANIFEST),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench infer-chunk --settings {params.settings:q} --target {wildcards.target} "
        "--chunk {wildcards.chunk} --results {params.results} --manifest {output} "
        f"{RUNTIME} > {{log}} 2>&1"
