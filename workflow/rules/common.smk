import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake_interface_executor_plugins.settings import DeploymentMethod

from calibench import integrity, layout
from calibench.runtime import conda_jobs_environment
from calibench.analysis import registry
from calibench.results import provenance
from calibench.config import settings as stage
from calibench.config.inputs import check_inputs

RESULTS = config["results"]
# Every path under RESULTS comes from calibench.layout (the jobs, queries and repair check use
# the same functions); Snakemake wildcards passed as strings ("{target}") give the patterns.


def results_path(path_of, *parts, **named):
    """``path_of(RESULTS, *parts)``, a function of calibench.layout, as the string a rule declares."""
    return str(path_of(RESULTS, *parts, **named))


def log_file(name):
    """``{RESULTS}/logs/{name}.log``."""
    return results_path(layout.log_path, name)


def benchmark_file(name):
    """``{RESULTS}/benchmarks/{name}.tsv``."""
    return results_path(layout.benchmark_path, name)

# Every job records the config files and the effective config it ran under (shard provenance);
# an environment variable, not a param, so a new comment in a config file reruns nothing.
os.environ[provenance.CONFIG_ENV] = json.dumps(provenance.config_record(CONFIG_FILES, config))
# Input paths reach the jobs here, outside their params (which name each input by its name):
# a moved archive or dataset directory reruns nothing (calibench.config.settings.as_params).
try:  # a population path that is not a directory, named in one line
    os.environ[stage.PATHS_ENV] = json.dumps(stage.input_paths(config))
except ValueError as exc:
    raise WorkflowError(str(exc)) from None
# The jobs run `"$CALIBENCH_PYTHON" -m calibench`: this interpreter (the driving Snakemake's; a
# cluster job's Snakemake, which parses this file too, runs the same), through the environment
# and not params, so a finished run called through another entry point or venv plans nothing.
# Each job computes in the threads Snakemake grants it (OMP_NUM_THREADS={threads}).
# (Set here, not required of the user: so not an `envvars:` directive.)
# Under `--sdm conda` each job runs in the environment of workflow/envs/calibench.yaml instead:
# its `python`, with this checkout's calibench on PYTHONPATH (docs/cluster.md, "Software
# environments").
PYTHON_ENV = "CALIBENCH_PYTHON"
JOBS_USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
if JOBS_USE_CONDA:
    try:
        logger.info(f"--sdm conda: jobs run calibench from {conda_jobs_environment(PYTHON_ENV)} in the environment "
                    "of workflow/envs/calibench.yaml")
    except ValueError as exc:
        raise WorkflowError(str(exc)) from None
else:
    os.environ[PYTHON_ENV] = sys.executable
KEEP_LOGITS = bool(config["keep_logits"])
# Each rule's params carry exactly the settings its outputs depend on (calibench.config.settings),
# so the profiles' `params` rerun trigger reruns exactly the jobs a config change affects.
# Runtime options (device, batch size, loaders, grouping) change no number: they reach the
# jobs as plain flags, outside params.
DEVICE = config["device"]
RUNTIME = (
    f"--device {config['device']} --batch-size {config['batch_size']} "
    f"--loader-workers {config['loader_workers']} --measure-group {config['measure_group']} "
    f"--networks-per-pass {config['networks_per_pass']}"
)
# Parsing only reads (docs/running.md, "When something goes wrong"): the driving Snakemake lists
# the files that fail their content check and the chunks whose files were deleted or changed
# since they ran (calibench.run.repair), and a live run holding these results; `calibench run`
# (or `calibench repair`, before a plain `snakemake`) sets them aside so that Snakemake rebuilds
# them. A job never builds on a damaged file: each checks what it reads (calibench.integrity).
if not (workflow.remote_exec or workflow.subprocess_exec):
    from calibench.run import repair, runlock

    _live = runlock.live_run(Path.cwd(), RESULTS)
    if _live is not None:  # Snakemake alone would suggest --unlock, which breaks the live run
        print(f"calibench: {_live}", file=sys.stderr)
    _damaged = repair.damaged_outputs(RESULTS, logits=KEEP_LOGITS)
    _changed = repair.changed_chunks(RESULTS, logits=KEEP_LOGITS)
    for _path, _cause, _ in _damaged:
        print(f"calibench: {repair.describe_damaged(_path, _cause, planning=True)}", file=sys.stderr)
    for _manifest, _reasons in _changed:
        print(f"calibench: {repair.describe(_manifest, _reasons, planning=True)}", file=sys.stderr)
    if _damaged or _changed:
        print(f"calibench: {repair.REPAIR_HINT}", file=sys.stderr)


# A target is one table family: a NATS-Bench space and schedule (tss_200) or a population
# beyond NATS-Bench (its name). Every rule below serves both; the sources differ only in
# how a population's members and logits are found (calibench.sources).
try:  # what the schema cannot see, named in one line
    stage.check_hps(config)
    stage.explorer_bins(config)
except ValueError as exc:
    raise WorkflowError(str(exc)) from None
TARGETS = stage.targets(config)


def _check_inputs():
    """Every path and column the config names, by its key, before any job
    (calibench.config.inputs): on a fresh run a missing one stops the run in one line; once a
    space's population is written (its logits store is what later runs read) the missing ones
    are said in one line, and only networks not yet stored would need them."""
    found = check_inputs(config, RESULTS)
    if found.stop:
        raise WorkflowError("; ".join(found.stop) + ("; point it at your copy (config/nats.yaml) or build the mini "
                                                     "benchmark" if any(s.startswith("archives.") for s in found.stop)
                                                     else ""))
    if found.notes:
        print(f"calibench: not found: {'; '.join(found.notes)}; networks already in the logits store need none "
              "(any other fails, naming the file)", file=sys.stderr)


_check_inputs()
POPULATIONS = stage.populations(config)
DATASETS = {space: stage.population_datasets(config, space) for space, _ in TARGETS.values()}


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True)) or "(?!)"


wildcard_constraints:
    space=_alternatives(["tss", "sss", *POPULATIONS]),
    target=_alternatives(TARGETS),
    dataset=_alternatives([d for ds in DATASETS.values() for d in ds]),
    chunk="[0-9]+",


# hp.<space> is one training schedule or a list of them (question 6 compares them): one
# result table per (space, hp, dataset), and per (population, dataset) beyond NATS-Bench. A
# schedule the mini benchmark being built holds no weights for stopped the run above.
def results_of(pattern):
    """The results directory as a prefix of a job's first output, declared as ``pattern`` (a
    :func:`results_path`): as many folders up as calibench.layout put the pattern under it, so
    that an output a storage plugin maps elsewhere gives its own prefix (Snakemake's lint)."""
    depth = len(Path(pattern).relative_to(RESULTS).parts)
    return lambda wildcards, output: str(Path(output[0]).parents[depth - 1])


def all_tables():
    return [results_path(layout.table_path, target, dataset) for target, (space, _) in TARGETS.items()
            for dataset in DATASETS[space]]


def space_of(wildcards):
    return TARGETS[wildcards.target][0]


def hp_of(wildcards):
    return TARGETS[wildcards.target][1]


def population_input(wildcards):
    """What a population's members are read from: a NATS archive's meta, a logits directory's
    models.csv; a torch population's callables enter through its settings (module hashes)."""
    if wildcards.space in ("tss", "sss"):
        # Only the mini benchmark is an input (built first where this run builds it; ancient, so a
        # copy with new mtimes reruns nothing). A user's archive is read from where the config says
        # (CALIBENCH_INPUT_PATHS), by its name in params: pointing the config elsewhere reruns nothing.
        meta = f"{config['archives'][wildcards.space]}/meta.pickle.pbz2"
        return [ancient(meta)] if stage.under_minibench(config, meta) else []
    spec = POPULATIONS[wildcards.space]
    if spec["source"] == "logits" and Path(spec["path"], "models.csv").is_file():
        return [str(Path(spec["path"], "models.csv"))]
    return []


def labels_file(wildcards):
    """NATS-Bench's labels are shared by its spaces; a population has its own."""
    if hp_of(wildcards):
        return results_path(layout.labels_path, wildcards.dataset)
    return results_path(layout.labels_path, wildcards.dataset, space=space_of(wildcards))


def eval_data_input(space):
    """A torch population evaluated on the mini benchmark's datasets waits for the rule that builds them."""
    spec = POPULATIONS.get(space) or {}
    if spec.get("source") == "torch" and spec.get("datasets") and \
            stage.under_minibench(config, config["datasets_root"], built=True):
        return [f"{config['minibench']['dir']}/README.txt"]
    return []


def labels_input(wildcards):
    """A logits population's labels come from its files: they are the job's input."""
    spec = POPULATIONS[wildcards.space]
    if spec["source"] == "logits":
        return sorted(str(p) for p in Path(spec["path"], wildcards.dataset).glob("*.npz"))
    return eval_data_input(wildcards.space)


def chunk_files(wildcards):
    """A logits population's labels (its files are checked against them) and its files of one
    chunk (a changed file reruns its chunk); a torch population's evaluation data."""
    space = space_of(wildcards)
    spec = POPULATIONS.get(space)
    if not spec or spec["source"] != "logits":
        return eval_data_input(space)
    labels = [results_path(layout.labels_path, d, space=space) for d in DATASETS[space]]
    if not Path(spec["path"], "models.csv").is_file():
        return labels
    population = checkpoints.population.get(space=space).output[0]
    doc = integrity.read_json(population)
    names = [doc["arch_strs"][i] for i in doc["chunks"][int(wildcards.chunk)]]
    return labels + [str(p) for d in DATASETS[space] for n in names if (p := Path(spec["path"], d, f"{n}.npz")).is_file()]


def stage_json(settings):
    return stage.as_json(settings)


def n_chunks(space):
    """Chunks of a space: known once its population is written (the checkpoint)."""
    population = checkpoints.population.get(space=space).output[0]
    return len(integrity.read_json(population)["chunks"])


def measure_manifests(wildcards):
    """The measurement jobs of one (space, hp, dataset)."""
    return [
        results_path(layout.measure_manifest, wildcards.target, wildcards.dataset, i)
        for i in range(n_chunks(space_of(wildcards)))
    ]


def maybe_temp(path):
    """Logits are kept for later measurements unless keep_logits: false makes them temporary."""
    return path if KEEP_LOGITS else temp(path)


# Budget per network for the SLURM runtime of an inference job (minutes): measured GPU
# inference is well under this; weight loading of real -full archives (about 27 MB of bz2
# per TSS file, once for every dataset) dominates. See BENCHMARKS.md.
SECONDS_PER_NETWORK = 10


def infer_runtime(wildcards):
    space = space_of(wildcards)
    seeds = 1 if config["seeds"] == "first" or space not in ("tss", "sss") else len(config["seeds"])
    networks = config["chunk_size"] * seeds * len(DATASETS[space])
    return 10 + int(networks * SECONDS_PER_NETWORK / 60 + 1)


# GPUs an inference job asks for (resource `gpu`, scope local): one unless the config runs
# on the CPU on purpose. Declared here, not in a profile, so that a user's own
# --set-resources for memory or CPUs cannot drop it. Measurement jobs need no GPU.
INFER_GPUS = 0 if config["device"] == "cpu" else 1


def infer_gpus(wildcards):
    """A logits population imports files: its jobs need no GPU."""
    spec = POPULATIONS.get(space_of(wildcards)) or {}
    return 0 if spec.get("source") == "logits" else INFER_GPUS


def job_gpus(wildcards):
    """GPUs of a measurement or lambda, mu search job: one unless the config runs on the CPU."""
    return INFER_GPUS


# SLURM partitions, set once by the user in the environment (docs/cluster.md, "Running on a cluster"):
# a job that asks for a GPU goes to CALIBENCH_SLURM_GPU_PARTITION, one of the same rules that
# asks for none (device: cpu, a logits population's import) to CALIBENCH_SLURM_CPU_PARTITION
# (the profile gives that one to every other rule), an unset one to the cluster's default.
# Resources, not params: a partition changes no output and reruns nothing. With neither set,
# the rules declare no partition, so a --default-resources slurm_partition applies as before.
GPU_PARTITION_ENV, CPU_PARTITION_ENV = "CALIBENCH_SLURM_GPU_PARTITION", "CALIBENCH_SLURM_CPU_PARTITION"


def gpu_resources(gpus_of):
    """A GPU rule's resources: ``gpu`` (scoped local, so grouped jobs share their job's GPU) and,
    where the environment names partitions, the ``slurm_partition`` that fits the job's GPUs."""
    gpu_partition, cpu_partition = os.environ.get(GPU_PARTITION_ENV), os.environ.get(CPU_PARTITION_ENV)
    if not (gpu_partition or cpu_partition):
        return {"gpu": gpus_of}
    return {"gpu": gpus_of,
            "slurm_partition": lambda wildcards: (gpu_partition if gpus_of(wildcards) else cpu_partition) or None}


def odir_manifests(wildcards):
    """Inference manifests of the chunks that hold the search's seeded sample of networks."""
    population = checkpoints.population.get(space=space_of(wildcards)).output[0]
    doc = integrity.read_json(population)
    search = stage.odir_search_settings(config)
    sample = set(stage.population_search_sample(doc, search["networks"], search["seed"]))
    chunks = [i for i, chunk in enumerate(doc["chunks"]) if sample & set(chunk)]
    return [results_path(layout.infer_manifest, wildcards.target, i) for i in chunks]


def odir_input(wildcards):
    """The lambda, mu search's result, where the config leaves it to the search."""
    if not stage.odir_searched_stages(config):
        return {}
    return {"odir": results_path(layout.odir_path, wildcards.target, wildcards.dataset)}


# The analysis parts this config has, (spec, part): spec names an extra part's code, None a
# built-in one (workflow/rules/analysis.smk, calibench.analysis.registry).
try:
    ANALYSIS_PARTS = registry.config_parts(config)
except ValueError as exc:  # a part the config names that does not exist or cannot be loaded
    raise WorkflowError(str(exc))


def part_settings(part, spec):
    """An analysis part's params: exactly the settings its outputs depend on (an extra part's: its code too)."""
    return stage_json(registry.config_part_settings(config, part, spec))


def part_inputs(part):
    """Files an analysis part reads besides the tables: other parts' outputs, files the config names."""
    out = {f"{other}_{key}": part_file(registry.BUILTIN_BY_NAME[other].outputs[key]) for other, key in part.reads}
    for dotted in part.inputs:
        value = config
        for key in dotted.split("."):
            value = (value or {}).get(key)
        out[dotted.replace(".", "_")] = value
    return out


def part_file(name):
    """``{RESULTS}/analysis/{name}``: a table an analysis part writes."""
    return results_path(layout.analysis_path, name)


def part_plots(part, title):
    """An analysis part's figures, ``{RESULTS}/plots/{part}/``, one subcategory of Snakemake's report."""
    return report(directory(results_path(layout.part_plots_dir, part)), patterns=["{name}.png"],
                  caption="../report/figures.rst", category="Figures", subcategory=title)


# The job of one analysis part (its threads: what the rule grants it), named by its manifest
# (analysis/parts/{part}.json), not by the loop's variable: a rule's shell command is formatted
# when its job runs, after the loop. Not a param either: the params stay exactly the part's settings.
PART_SHELL = ("OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench analysis-part --manifest {output.manifest} "
              "--settings {params.settings:q} --results {params.results} --threads {threads} --tables {input.tables} "
              "> {log} 2>&1")


def analysis_part_outputs(wildcards):
    """Every output of the analysis parts this config has: the report waits for all of them."""
    return [path for _, part in ANALYSIS_PARTS for path in getattr(rules, registry.rule_name(part.name)).output]
