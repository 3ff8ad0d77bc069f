ODIR_RESULT = results_path(layout.odir_path, "{target}", "{dataset}")


rule odir_search:
    """The ODIR lambda, mu of matrix scaling and Dirichlet calibration, once per (space, hp,
    dataset): 5-fold cross-validated NLL on the validation parts of a seeded sample of the
    population's networks, from the logits store (docs/recalibration.md). Runs only for the
    stages whose lambda, mu the config leaves null."""
    # one thread: the fits are per-network matrix-vector products that a second thread barely
    # speeds up (112 % CPU with two), so two searches side by side finish sooner
    input:
        logits=odir_manifests,
        labels=labels_file,
    output:
        ODIR_RESULT,
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("odir_search/{target}_{dataset}"),
    benchmark:
        benchmark_file("odir_search/{target}_{dataset}")
    resources:
        **gpu_resources(job_gpus),
    params:
        settings=stage_json(stage.odir_search_settings(config)),
        results=results_of(ODIR_RESULT),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench odir-search --settings {params.settings:q} --target {wildcards.target} "
        "--dataset {wildcards.dataset} --results {params.results} --out {output} "
        "--logits-manifests {input.logits} --labels {input.labels} "
        f"--device {DEVICE} > {{log}} 2>&1"
