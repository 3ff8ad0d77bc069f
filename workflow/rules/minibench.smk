MINI = config["minibench"]

if MINI["build"]:

    rule minibench:
        """The embedded mini benchmark (synthetic; NOT NATS-Bench results)."""
        output:
            f"{MINI['dir']}/NATS-tss-v1_0-3ffb9-full/meta.pickle.pbz2",
            f"{MINI['dir']}/NATS-sss-v1_0-50262-full/meta.pickle.pbz2",
            f"{MINI['dir']}/README.txt",
        log:
            f"{RESULTS}/logs/minibench.log",
        params:
            out=MINI["dir"],
            spec=f"--n-tss {MINI['n_tss']} --n-sss {MINI['n_sss']} --n-test {MINI['n_test']} "
            f"--n-train {MINI['n_train']} --seed {MINI['seed']}",
        shell:
            "{PYTHON} -m calibench.cli make-minibench {params.out} {params.spec} --quiet > {log} 2>&1"
