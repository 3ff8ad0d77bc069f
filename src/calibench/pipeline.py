"""The workflow's jobs, each a function the Snakemake rules call through the CLI.

* :func:`write_population`: the architectures to evaluate and their chunks (from the meta).
* :func:`evaluate_chunk_job`: logits -> temperature fit -> metrics -> one shard per network;
  valid shards are skipped, so a killed job resumes where it stopped.
* :func:`build_table`: the shards of one (space, hp, dataset) as one wide table, TSS
  rows expanded from class representatives to every member index.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import torch

from . import population as pop
from . import shards
from .atomic import atomic_write
from .archive import NatsArchive
from .calibration import measure_stages_batch
from .inference import (Failure, NetworkLogits, evaluate_chunk, load_eval_data, loader_workers, resolve_device,
                        write_logits)
from .metrics.scores import auroc

log = logging.getLogger(__name__)

# Settings that change the numbers in a shard (their hash is stored in every shard).
MEASUREMENT_KEYS = ("bins", "temperature", "tace_threshold", "seeds", "ood", "datasets_root")


def write_json_atomic(obj, path: str | Path) -> Path:
    payload = json.dumps(obj, indent=1).encode()
    return atomic_write(path, lambda f: f.write(payload))


def population_path(results: str | Path, space: str) -> Path:
    return Path(results) / "population" / f"{space}.json"


def write_population(settings: Mapping, space: str, out: str | Path) -> dict:
    """Selected indices, chunks, every arch string and class representative of one space."""
    arch_strs = pop.read_meta(settings["archives"][space])
    representatives = pop.representatives(space, arch_strs)
    selected = pop.select(space, arch_strs, settings["population"][space], reps=representatives)
    doc = {
        "space": space,
        "archive": str(settings["archives"][space]),
        "arch_strs": arch_strs,
        "representatives": representatives,
        "selected": selected,
        "chunks": pop.chunks(selected, int(settings["chunk_size"])),
    }
    write_json_atomic(doc, out)
    log.info("%s: %d of %d architectures selected, %d chunks", space, len(selected), len(arch_strs), len(doc["chunks"]))
    return doc


def measurement_hash(settings: Mapping, space: str, hp: str, dataset: str) -> str:
    relevant = {k: settings.get(k) for k in MEASUREMENT_KEYS}
    relevant.update(space=space, hp=hp, dataset=dataset, archive=str(settings["archives"][space]))
    return shards.config_hash(relevant)


def _seeds(settings: Mapping):
    seeds = settings.get("seeds", "first")
    return None if seeds == "first" else [int(s) for s in seeds]


def _ood_auroc(id_logits: torch.Tensor, ood_logits: torch.Tensor) -> torch.Tensor:
    """Per network, AUROC of max-softmax scores: (M, N, K) and (M, Q, K) -> (M,)."""
    id_scores = torch.softmax(id_logits.double(), -1).amax(-1)
    ood_scores = torch.softmax(ood_logits.double(), -1).amax(-1)
    return auroc(id_scores, ood_scores)


def _measure_group(group: list[NetworkLogits], labels: torch.Tensor, settings: Mapping, meta: Mapping):
    """Metrics for a group of networks at once; returns one (provenance, stages) per network."""
    temp = settings["temperature"]
    logits = torch.stack([r.logits for r in group])
    out = measure_stages_batch(
        logits, labels.cpu(), bins=settings["bins"], val_fraction=temp["val_fraction"], seed=temp["seed"],
        method=temp["method"], tace_threshold=settings["tace_threshold"],
    )
    stages = {stage: dict(out[stage]) for stage in ("pre", "post")}  # new keys below; the arrays are not modified
    temperature = torch.from_numpy(out["temperature"])
    for name in group[0].ood_logits:
        ood = torch.stack([r.ood_logits[name] for r in group])
        stages["pre"][f"ood_auroc_{name}"] = _ood_auroc(logits, ood).numpy()
        scale = temperature[:, None, None].float()
        stages["post"][f"ood_auroc_{name}"] = _ood_auroc(logits / scale, ood / scale).numpy()
    results = []
    for i, r in enumerate(group):
        e = r.entry
        provenance = {
            "space": e.space, "hp": e.hp, "dataset": e.dataset, "arch_index": e.index, "arch_str": e.arch_str,
            "seed": e.seed, "params": e.params, "flops": e.flops, "temperature": float(out["temperature"][i]),
            "accuracy": float(out["accuracy_full"][i]), "recorded_accuracy": e.recorded_accuracy,
            "n_eval": int(labels.shape[0]), "config_hash": meta["config_hash"],
        }
        per_stage = {stage: {k: v[i] for k, v in values.items()} for stage, values in stages.items()}
        results.append((provenance, per_stage))
    return results


def evaluate_chunk_job(settings: Mapping, space: str, hp: str, dataset: str, chunk: int, results: str | Path,
                       manifest: str | Path, progress: bool = True) -> dict:
    """Evaluate one chunk; write a shard per network, then the chunk's manifest (the job's output)."""
    results = Path(results)
    doc = json.loads(population_path(results, space).read_text())
    indices = doc["chunks"][chunk]
    digest = measurement_hash(settings, space, hp, dataset)
    todo = [i for i in indices if not shards.is_valid_shard(shards.shard_path(results, space, hp, dataset, i), digest)]
    skipped = len(indices) - len(todo)
    if os.environ.get("SLURM_JOB_ID"):
        log.info("SLURM job %s (array task %s) on %s, GPUs allocated: %s", os.environ["SLURM_JOB_ID"],
                 os.environ.get("SLURM_ARRAY_TASK_ID", "-"), os.environ.get("SLURMD_NODENAME", "?"),
                 os.environ.get("CUDA_VISIBLE_DEVICES", "none"))
    log.info("%s hp=%s %s chunk %d: %d architectures, %d already measured (skipped), %d to compute",
             space, hp, dataset, chunk, len(indices), skipped, len(todo))
    failures: list[dict] = []
    computed = 0
    start = time.perf_counter()
    if todo:
        device = resolve_device(settings["device"])
        ood = settings["ood"]
        eval_data = load_eval_data(
            dataset, settings["datasets_root"], device=device, ood=tuple(ood["sets"]), svhn_path=ood.get("svhn"),
            noise_severity=ood["noise_severity"],
        )
        archive = NatsArchive(settings["archives"][space], space, hp)
        meta = {"config_hash": digest}
        group_size = max(1, int(settings.get("measure_group", 8)))
        pending: list[NetworkLogits] = []

        def flush():
            nonlocal computed
            by_index: dict[int, list] = {}
            for provenance, stages in _measure_group(pending, eval_data.labels, settings, meta):
                by_index.setdefault(provenance["arch_index"], []).append(
                    shards.shard_table(provenance, stages))
            for index, tables in by_index.items():
                shards.write_atomic_parquet(pa.concat_tables(tables), shards.shard_path(results, space, hp, dataset, index))
                computed += 1
            if settings.get("keep_logits"):
                for r in pending:
                    path = results / "logits" / f"space={space}" / f"hp={hp}" / f"dataset={dataset}" / \
                        f"arch={r.entry.index:06d}_seed={r.entry.seed}.npz"
                    write_logits(path, r, eval_data.labels)
            pending.clear()

        workers = loader_workers(settings.get("loader_workers", "auto"), device)
        log.info("device %s, %d archive loader(s)", device, workers)
        stream = evaluate_chunk(archive, todo, eval_data, device, _seeds(settings), int(settings.get("batch_size", 1000)),
                                prefetch_depth=max(4, 2 * workers), loader_workers=workers)
        if progress:
            from tqdm import tqdm

            stream = tqdm(stream, desc=f"{space}/{hp}/{dataset} chunk {chunk}", unit="net", mininterval=5)
        for item in stream:
            if isinstance(item, Failure):
                failures.append({"space": space, "hp": hp, "dataset": dataset, "arch_index": item.index,
                                 "seed": item.seed, "source": item.source, "reason": item.reason, "config_hash": digest})
                continue
            if pending and len(pending) >= group_size and pending[-1].entry.index != item.entry.index:
                flush()
            pending.append(item)
        if pending:
            flush()
    failed = sorted({f["arch_index"] for f in failures})
    summary = {"space": space, "hp": hp, "dataset": dataset, "chunk": chunk, "indices": indices,
               "skipped": skipped, "computed": computed, "failed": failed, "failures": failures,
               "config_hash": digest, "seconds": round(time.perf_counter() - start, 3)}
    for f in failures:
        log.warning("architecture %d failed (%s): %s", f["arch_index"], f["source"], f["reason"])
    log.info("chunk %d done: %d computed, %d skipped, %d failed in %.1f s",
             chunk, computed, skipped, len(failed), summary["seconds"])
    write_json_atomic(summary, manifest)
    return summary


def wide_table(long: pd.DataFrame) -> pd.DataFrame:
    """Long shards -> one row per (arch_index, seed): ``{stage}_{metric}[_{bins}]`` columns."""
    if long.empty:
        return pd.DataFrame()
    long = long.copy()
    long["column"] = [f"{s}_{m}" if pd.isna(b) else f"{s}_{m}_{int(b)}"
                      for s, m, b in zip(long["stage"], long["metric"], long["bins"])]
    order = list(pd.unique(long["column"]))  # the shards' order: metric by metric, bins as configured
    keys = ["space", "hp", "dataset", "arch_index", "seed"]
    provenance = ["arch_str", "params", "flops", "temperature", "accuracy", "recorded_accuracy", "n_eval",
                  "config_hash", "calibench_version"]
    values = long.pivot_table(index=keys, columns="column", values="value", aggfunc="first", dropna=False)[order]
    info = long.groupby(keys)[provenance].first()
    wide = info.join(values).reset_index()
    return wide


def build_table(settings: Mapping, space: str, hp: str, dataset: str, results: str | Path, out: str | Path,
                manifests: list[str | Path]) -> pd.DataFrame:
    """The wide result table of one (space, hp, dataset); reports how many networks are missing."""
    results = Path(results)
    doc = json.loads(population_path(results, space).read_text())
    digest = measurement_hash(settings, space, hp, dataset)
    long = shards.read_shards(results, space, hp, dataset).to_pandas()
    long = long[long["arch_index"].isin(doc["selected"]) & (long["config_hash"] == digest)]
    wide = wide_table(long)
    failed = []
    for m in manifests:
        failed += json.loads(Path(m).read_text())["failures"]
    measured = set(wide["arch_index"]) if not wide.empty else set()
    missing = sorted(set(doc["selected"]) - measured)
    if missing:
        log.warning("%s hp=%s %s: %d of %d selected architectures have no shard (failed: %d)",
                    space, hp, dataset, len(missing), len(doc["selected"]), len({f['arch_index'] for f in failed}))
    if space == "tss" and not wide.empty:
        reps = doc["representatives"]
        members = pd.DataFrame({"arch_index": range(len(reps)), "measured_by": reps})
        members = members[members["measured_by"].isin(measured)]
        wide = wide.rename(columns={"arch_index": "measured_by"}).merge(members, on="measured_by")
        wide["arch_str"] = [doc["arch_strs"][i] for i in wide["arch_index"]]
    elif not wide.empty:
        wide["measured_by"] = wide["arch_index"]
    if not wide.empty:
        first = ["space", "hp", "dataset", "arch_index", "measured_by", "seed"]
        wide = wide[first + [c for c in wide.columns if c not in first]].sort_values(["arch_index", "seed"])
    atomic_write(out, lambda f: wide.to_parquet(f, index=False))
    fail_out = results / "failures" / f"{space}_{hp}_{dataset}.parquet"
    shards.write_atomic_parquet(shards.failures_table(failed), fail_out)  # creates the directory
    log.info("%s: %d rows (%d measured networks, %d missing, %d failed)", out, len(wide), len(measured),
             len(missing), len(failed))
    return wide
