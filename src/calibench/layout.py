"""Where everything lives under a results directory: defined here once (the names: calibench.vocabulary).

The Snakefile, the jobs, the queries, the repair check, the interop commands and the CLI all
build their paths with these functions (docs/architecture.md, "every results path, once"). Each
takes the results directory first; passing Snakemake wildcards as strings (``"{target}"``,
``"{chunk}"``) gives the rules' patterns, so rules and code cannot disagree.

```
{results}/
  population/{space}.json                                   members and chunks of a population
  logits/space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet   the logits store
  logits/labels/dataset={dataset}.parquet                   NATS-Bench's labels (shared by its spaces)
  logits/labels/space={space}/dataset={dataset}.parquet     a population's own labels
  chunks/infer/{target}/chunk{chunk:05d}.json               inference manifests
  chunks/measure/{target}_{dataset}/chunk{chunk:05d}.json   measurement manifests
  recalibration/odir_{target}_{dataset}.json                the ms/dir lambda, mu search
  recalibration/searches/{target}_{dataset}_{key}.json      each search kept by its inputs' key
  fits/space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet     the fit store
  shards/space={space}/hp={hp}/dataset={dataset}/arch={index:06d}.parquet   one per network
  tables/{target}_{dataset}.parquet                         the wide result tables
  failures/{target}_{dataset}.parquet                       what failed, per table
  analysis/{part}/...  plots/{part}/...                     the analysis parts
  reliability/{target}_{dataset}_arch{index:06d}.png        `calibench reliability`'s diagrams
  report.html, report.html.sha256                           the report (and its SHA-256)
  explorer/index.html, explorer/data/, explorer/SHA256SUMS  `calibench explore`'s page, its data, their SHA-256
  logs/, benchmarks/                                        one per job
```

`calibench compare RUN_A RUN_B` writes outside both runs (they may be read-only), into
``--out`` or ``./compare-{A}-vs-{B}/`` (:func:`compare_dir`): ``compare.csv``, ``compare.html``.

A ``"*"`` for any part gives a glob pattern; :func:`matching` lists the files it matches.
No imports beyond the standard library: the Snakefile reads this at every parse.
"""

from __future__ import annotations

import re
from pathlib import Path


def _chunk(chunk: int | str) -> str:
    return f"chunk{chunk}" if isinstance(chunk, str) else f"chunk{int(chunk):05d}"


def target_name(space: str, hp: str) -> str:
    """A table family: ``tss_200`` (a NATS-Bench space and schedule) or a population's name;
    it names the family's result tables, chunks and logs."""
    return f"{space}_{hp}" if hp else space


def split_target(target: str) -> tuple[str, str]:
    """:func:`target_name` undone: ``tss_200`` -> (tss, 200); ``zoo`` -> (zoo, "")."""
    found = re.fullmatch(r"(tss|sss)_([0-9]+)", target)
    return (found[1], found[2]) if found else (target, "")


def partition(space: str, hp: str) -> Path:
    """``space=tss/hp=200`` (a NATS-Bench space and schedule), ``space=zoo`` (a population)."""
    return Path(f"space={space}") / f"hp={hp}" if hp else Path(f"space={space}")


def member_file(index: int | str) -> str:
    return f"arch={index}.parquet" if isinstance(index, str) else f"arch={int(index):06d}.parquet"


MEMBER_GLOB = member_file("*")


def member_index(path: str | Path) -> int:
    """The index of a member file (``arch=000123.parquet`` -> 123); ValueError naming the file."""
    name = Path(path).name
    match = re.fullmatch(r"arch=(\d+)\.parquet", name)
    if match is None:
        raise ValueError(f"{path}: not a member file (expected {member_file(0)})")
    return int(match.group(1))


def partition_of(name: str | Path) -> tuple[str, str] | None:
    """``("dataset", "cifar10")`` of a partition's folder or file name (``dataset=cifar10``,
    ``dataset=cifar10.parquet``, ``space=zoo``, ``hp=200``); None for any other name."""
    key, sep, value = Path(name).name.removesuffix(".parquet").partition("=")
    return (key, value) if sep and key in ("space", "hp", "dataset") else None


def dataset_partition(dataset: str) -> str:
    """``dataset=cifar10``: the folder of one dataset's member files under a partition."""
    return f"dataset={dataset}"


# ---------------------------------------------------------------- upstream: populations, logits

def population_path(results: str | Path, space: str) -> Path:
    return Path(results) / "population" / f"{space}.json"


def population_indices_path(results: str | Path, space: str) -> Path:
    """A population of one's own: each model's index, kept across edits of its list."""
    return Path(results) / "population" / "indices" / f"{space}.json"


def logits_dir(results: str | Path) -> Path:
    return Path(results) / "logits"


def logits_path(results: str | Path, space: str, hp: str, dataset: str, index: int | str) -> Path:
    return logits_dir(results) / partition(space, hp) / dataset_partition(dataset) / member_file(index)


def fits_dir(results: str | Path) -> Path:
    return Path(results) / "fits"


def fits_path(results: str | Path, space: str, hp: str, dataset: str, index: int | str) -> Path:
    """One network's fitted recalibration maps, every seed and stage (the fit store)."""
    return fits_dir(results) / partition(space, hp) / dataset_partition(dataset) / member_file(index)


def labels_path(results: str | Path, dataset: str, space: str | None = None) -> Path:
    """NATS-Bench's labels are shared by its spaces (``space`` None); a population has its own."""
    return store_labels_path(logits_dir(results), dataset, space)


def store_labels_path(store: str | Path, dataset: str, space: str | None = None) -> Path:
    """:func:`labels_path` inside a logits store folder ``store`` (``results/logits``)."""
    base = Path(store) / "labels"
    return (base / f"space={space}" if space else base) / f"{dataset_partition(dataset)}.parquet"


def chunks_dir(results: str | Path) -> Path:
    return Path(results) / "chunks"


def infer_manifest(results: str | Path, target: str, chunk: int | str) -> Path:
    return chunks_dir(results) / "infer" / target / f"{_chunk(chunk)}.json"


# ---------------------------------------------------------------- measurement: odir, shards

def measure_manifest_dir(results: str | Path, target: str, dataset: str) -> Path:
    return chunks_dir(results) / "measure" / f"{target}_{dataset}"


def measure_manifest(results: str | Path, target: str, dataset: str, chunk: int | str) -> Path:
    return measure_manifest_dir(results, target, dataset) / f"{_chunk(chunk)}.json"


def odir_path(results: str | Path, target: str, dataset: str) -> Path:
    return Path(results) / "recalibration" / f"odir_{target}_{dataset}.json"


def odir_search_store(results: str | Path, target: str, dataset: str, key: str) -> Path:
    """A search's result kept under the key of its inputs (settings, labels, the sample's logits):
    a rerun with the same inputs reads it instead of fitting again."""
    return Path(results) / "recalibration" / "searches" / f"{target}_{dataset}_{key}.json"


def odir_key(path: str | Path) -> tuple[str, str]:
    """(target, dataset) of an :func:`odir_path` file."""
    target, _, dataset = Path(path).stem.removeprefix("odir_").rpartition("_")
    return target, dataset


def shards_dir(results: str | Path) -> Path:
    return Path(results) / "shards"


def shard_dir(results: str | Path, space: str, hp: str, dataset: str) -> Path:
    return shards_dir(results) / partition(space, hp) / dataset_partition(dataset)


def shard_path(results: str | Path, space: str, hp: str, dataset: str, index: int | str) -> Path:
    return shard_dir(results, space, hp, dataset) / member_file(index)


# ---------------------------------------------------------------- results: tables, failures

def tables_dir(results: str | Path) -> Path:
    return Path(results) / "tables"


def table_path(results: str | Path, target: str, dataset: str) -> Path:
    return tables_dir(results) / f"{target}_{dataset}.parquet"


def result_tables(results: str | Path) -> list[Path]:
    """Every result table under ``results``, sorted."""
    return sorted(tables_dir(results).glob("*.parquet"))


def failures_dir(results: str | Path) -> Path:
    return Path(results) / "failures"


def failures_path(results: str | Path, target: str, dataset: str) -> Path:
    return failures_dir(results) / f"{target}_{dataset}.parquet"


# ---------------------------------------------------------------- analysis, report

def analysis_dir(results: str | Path) -> Path:
    return Path(results) / "analysis"


def plots_dir(results: str | Path) -> Path:
    return Path(results) / "plots"


def analysis_path(results: str | Path, name: str) -> Path:
    """A file of the analysis parts: ``analysis/{name}`` (``kendall.parquet``, ``findings.csv``...)."""
    return analysis_dir(results) / name


def findings_path(results: str | Path) -> Path:
    """The report's findings, one sentence and its number each: ``analysis/findings.csv``."""
    return analysis_path(results, "findings.csv")


def claims_path(results: str | Path) -> Path:
    """The paper's claims put to a test on the tables: ``analysis/claims.csv``."""
    return analysis_path(results, "claims.csv")


def part_manifest(results: str | Path, part: str) -> Path:
    """What an analysis part made (its figures, its report blocks): ``analysis/parts/{part}.json``."""
    return analysis_dir(results) / "parts" / f"{part}.json"


def part_of_manifest(path: str | Path) -> str:
    """The part whose manifest (:func:`part_manifest`) ``path`` is."""
    path = Path(path)
    if path.suffix != ".json" or path.parent.name != "parts":
        raise ValueError(f"{path}: not an analysis part's manifest (analysis/parts/{{part}}.json)")
    return path.stem


def part_plots_dir(results: str | Path, part: str) -> Path:
    """An analysis part's figures: ``plots/{part}/``."""
    return plots_dir(results) / part


def report_path(results: str | Path) -> Path:
    return Path(results) / "report.html"


def report_sums(results: str | Path) -> Path:
    """The report's SHA-256 (``sha256sum -c`` format): ``report.html.sha256``."""
    return Path(results) / "report.html.sha256"


def explorer_sums(results: str | Path) -> Path:
    """The SHA-256 of every file of the explorer: ``explorer/SHA256SUMS``."""
    return explorer_dir(results) / "SHA256SUMS"


def explorer_dir(results: str | Path) -> Path:
    """``calibench explore``'s page and its data: ``explorer/index.html``, ``explorer/data/``."""
    return Path(results) / "explorer"


def explorer_page(results: str | Path) -> Path:
    return explorer_dir(results) / "index.html"


def reliability_path(results: str | Path, target: str, dataset: str, index: int) -> Path:
    """One network's reliability diagram (``calibench reliability``)."""
    return Path(results) / "reliability" / f"{target}_{dataset}_arch{int(index):06d}.png"


# ---------------------------------------------------------------- comparisons (calibench compare)

def compare_dir(name_a: str, name_b: str) -> Path:
    """``calibench compare``'s default output folder, in the working directory (issue 26)."""
    safe = [re.sub(r"[^A-Za-z0-9._+-]+", "_", n) or "run" for n in (name_a, name_b)]
    return Path(f"compare-{safe[0]}-vs-{safe[1]}")


def compare_csv(out: str | Path) -> Path:
    """One row per table x column of a comparison."""
    return Path(out) / "compare.csv"


def compare_page(out: str | Path) -> Path:
    """The comparison's HTML page (its figure embedded)."""
    return Path(out) / "compare.html"


# ---------------------------------------------------------------- every job

def log_path(results: str | Path, name: str) -> Path:
    """``logs/{name}.log``; ``name`` may hold folders (``measure/tss_200_cifar10_chunk00000``)."""
    return Path(results) / "logs" / f"{name}.log"


def benchmark_path(results: str | Path, name: str) -> Path:
    return Path(results) / "benchmarks" / f"{name}.tsv"


# ---------------------------------------------------------------- patterns

def matching(pattern: str | Path) -> list[Path]:
    """The files a path of these functions matches where some parts are ``"*"``, sorted:
    ``matching(measure_manifest(results, "*", "*", "*"))`` lists every measurement manifest."""
    parts = Path(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    base = Path(*parts[:fixed]) if fixed else Path()
    if fixed == len(parts):
        return [base] if base.exists() else []
    return sorted(base.glob(str(Path(*parts[fixed:]))))
