import json
import sys
from pathlib import Path

from calibench import settings as stage

RESULTS = config["results"]
PYTHON = sys.executable
KEEP_LOGITS = bool(config["keep_logits"])
# Each rule's params carry exactly the settings its outputs depend on (calibench.settings),
# so the profiles' `params` rerun trigger reruns exactly the jobs a config change affects.
# Runtime options (device, batch size, loaders, grouping) change no number: they reach the
# jobs as plain flags, outside params.
RUNTIME = (
    f"--device {config['device']} --batch-size {config['batch_size']} "
    f"--loader-workers {config['loader_workers']} --measure-group {config['measure_group']}"
)


wildcard_constraints:
    space="tss|sss",
    hp="[0-9]+",
    dataset="cifar10|cifar100|ImageNet16-120",
    chunk="[0-9]+",


def results_of(levels):
    """The results directory, inferred from a job's first output ``levels`` folders deep."""
    return lambda wildcards, output: str(Path(output[0]).parents[levels])


# hp.<space> is one training schedule or a list of them (question 6 compares them):
# one result table per (space, hp, dataset). A schedule the mini benchmark being built
# holds no weights for stops the run here, before any job.
stage.check_hps(config)


def hps_of(space):
    return stage.hps(config, space)


def all_tables():
    return [
        f"{RESULTS}/tables/{space}_{hp}_{dataset}.parquet"
        for space in config["spaces"]
        for hp in hps_of(space)
        for dataset in config["datasets"]
    ]


def meta_file(space):
    return f"{config['archives'][space]}/meta.pickle.pbz2"


def stage_json(settings):
    return stage.as_json(settings)


def n_chunks(space):
    """Chunks of a space: known once its population is written (the checkpoint)."""
    population = checkpoints.population.get(space=space).output[0]
    with open(population) as f:
        return len(json.load(f)["chunks"])


def measure_manifests(wildcards):
    """The measurement jobs of one (space, hp, dataset)."""
    return [
        f"{RESULTS}/chunks/measure/{wildcards.space}_{wildcards.hp}_{wildcards.dataset}/chunk{i:05d}.json"
        for i in range(n_chunks(wildcards.space))
    ]


def maybe_temp(path):
    """Logits are kept for later measurements unless keep_logits: false makes them temporary."""
    return path if KEEP_LOGITS else temp(path)


# Budget per network for the SLURM runtime of an inference job (minutes): measured GPU
# inference is well under this; weight loading of real -full archives (about 27 MB of bz2
# per TSS file, once for every dataset) dominates. See BENCHMARKS.md.
SECONDS_PER_NETWORK = 10


def infer_runtime(wildcards):
    seeds = 1 if config["seeds"] == "first" else len(config["seeds"])
    networks = config["chunk_size"] * seeds * len(config["datasets"])
    return 10 + int(networks * SECONDS_PER_NETWORK / 60 + 1)


# GPUs an inference job asks for (resource `gpu`, scope local): one unless the config runs
# on the CPU on purpose. Declared here, not in a profile, so that a user's own
# --set-resources for memory or CPUs cannot drop it. Measurement jobs need no GPU.
INFER_GPUS = 0 if config["device"] == "cpu" else 1


def odir_manifests(wildcards):
    """Inference manifests of the chunks that hold the search's seeded sample of networks."""
    population = checkpoints.population.get(space=wildcards.space).output[0]
    with open(population) as f:
        doc = json.load(f)
    search = stage.odir_search_settings(config)
    sample = set(stage.search_sample(doc["selected"], search["networks"], search["seed"]))
    chunks = [i for i, chunk in enumerate(doc["chunks"]) if sample & set(chunk)]
    return [f"{RESULTS}/chunks/infer/{wildcards.space}_{wildcards.hp}/chunk{i:05d}.json" for i in chunks]


def odir_input(wildcards):
    """The lambda, mu search's result, where the config leaves it to the search."""
    if not stage.odir_searched_stages(config):
        return {}
    return {"odir": f"{RESULTS}/recalibration/odir_{wildcards.space}_{wildcards.hp}_{wildcards.dataset}.json"}
