MEASURE_MANIFEST = results_path(layout.measure_manifest, "{target}", "{dataset}", "{chunk}")


rule measure:
    """One chunk of one (space, hp, dataset) from the logits store: every configured post-hoc
    method fitted on the validation part, every metric of every stage on the test part, a
    parquet shard per network, then the chunk's manifest. Never opens an archive. Shards
    already valid are skipped."""
    input:
        unpack(odir_input),
        logits=results_path(layout.infer_manifest, "{target}", "{chunk}"),
        labels=labels_file,
    output:
        MEASURE_MANIFEST,
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("measure/{target}_{dataset}_chunk{chunk}"),
    benchmark:
        benchmark_file("measure/{target}_{dataset}_chunk{chunk}")
    resources:
        **gpu_resources(job_gpus),
    params:
        settings=stage_json(stage.measurement_settings(config)),
        results=results_of(MEASURE_MANIFEST),
        odir=lambda wildcards, input: f"--odir {input.odir}" if "odir" in input.keys() else "",
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench measure-chunk --settings {params.settings:q} --target {wildcards.target} "
        "--dataset {wildcards.dataset} --chunk {wildcards.chunk} --results {params.results} "
        "--logits-manifest {input.logits} --labels {input.labels} --manifest {output} {params.odir} "
        f"--keep-logits {KEEP_LOGITS} {RUNTIME} > {{log}} 2>&1"
