MINI = config["minibench"]

if MINI["build"]:
    # make-minibench --n-test: one number, or cifar10=500,cifar100=300,... (a mapping in the config)
    N_TEST = (",".join(f"{d}={n}" for d, n in MINI["n_test"].items()) if isinstance(MINI.get("n_test"), dict)
              else MINI.get("n_test"))

    rule minibench:
        """The embedded mini benchmark (synthetic; NOT NATS-Bench results)."""
        threads: 2  # alone at the start of a run
        output:
            f"{MINI['dir']}/NATS-tss-v1_0-3ffb9-full/meta.pickle.pbz2",
            f"{MINI['dir']}/NATS-sss-v1_0-50262-full/meta.pickle.pbz2",
            f"{MINI['dir']}/README.txt",
        conda:
            "../envs/calibench.yaml"
        log:
            log_file("minibench"),
        params:
            out=lambda wildcards, output: str(Path(output[2]).parent),
            # a size left out of the config: make-minibench's own default
            spec=" ".join(f"--{key.replace('_', '-')} {N_TEST if key == 'n_test' else MINI[key]}"
                          for key in ("n_tss", "n_sss", "n_test", "n_train", "seed") if key in MINI)
            + (" --real-size" if MINI["real_size"] else "") + (" --tss-hp12-weights" if MINI["tss_hp12_weights"] else ""),
        shell:
            "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench make-minibench {params.out} {params.spec} "
            "--workers {threads} --quiet > {log} 2>&1"
