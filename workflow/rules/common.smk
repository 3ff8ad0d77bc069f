import json
import sys
from pathlib import Path

RESULTS = config["results"]
PYTHON = sys.executable
# Every job receives the validated configuration as JSON: config overrides reach the jobs.
SETTINGS = json.dumps(config, sort_keys=True)


wildcard_constraints:
    space="tss|sss",
    hp="[0-9]+",
    dataset="cifar10|cifar100|ImageNet16-120",
    chunk="[0-9]+",


def results_of(levels):
    """The results directory, inferred from a job's first output ``levels`` folders deep."""
    return lambda wildcards, output: str(Path(output[0]).parents[levels])


def hp_of(space):
    return config["hp"][space]


def all_tables():
    return [
        f"{RESULTS}/tables/{space}_{hp_of(space)}_{dataset}.parquet"
        for space in config["spaces"]
        for dataset in config["datasets"]
    ]


def meta_file(space):
    return f"{config['archives'][space]}/meta.pickle.pbz2"


def chunk_manifests(wildcards):
    """The evaluate jobs of one (space, hp, dataset): known once the population is written."""
    population = checkpoints.population.get(space=wildcards.space).output[0]
    with open(population) as f:
        n_chunks = len(json.load(f)["chunks"])
    return [
        f"{RESULTS}/chunks/{wildcards.space}_{wildcards.hp}_{wildcards.dataset}/chunk{i:05d}.json"
        for i in range(n_chunks)
    ]


# Budget per network for the SLURM runtime of an evaluate job (minutes): measured GPU
# inference plus metrics is well under this; weight loading of real -full archives
# (about 27 MB of bz2 per TSS file) dominates. See BENCHMARKS.md.
SECONDS_PER_NETWORK = 10


def evaluate_runtime(wildcards):
    seeds = 1 if config["seeds"] == "first" else len(config["seeds"])
    return 10 + int(config["chunk_size"] * seeds * SECONDS_PER_NETWORK / 60 + 1)


# GPUs an evaluate job asks for (resource `gpu`, scope local): one unless the config runs
# on the CPU on purpose. Declared here, not in a profile, so that a user's own
# --set-resources for memory or CPUs cannot drop it.
EVALUATE_GPUS = 0 if config["device"] == "cpu" else 1
