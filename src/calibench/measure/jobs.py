"""The measurement jobs, each a function the Snakemake rules call through the CLI.

* :func:`odir_search_job`: the ms/dir lambda, mu of one (space, hp, dataset) from the store.
* :func:`measure_chunk_job`: one chunk of one (space, hp, dataset): stored logits ->
  every post-hoc stage -> metrics -> one shard per network; valid shards are skipped.
  Never opens an archive or runs a model.

A population's members (:func:`calibench.sources.write_population`) and labels
(:func:`calibench.sources.write_labels`) come from its source. Tables are built from the
shards by :mod:`calibench.results.tables`.

Every output carries a key made from exactly what changes it (:mod:`calibench.config.settings`):
a logits file its logits key, a shard the measurement settings plus its logits' key. A
killed job resumes where it stopped: rerunning it skips every output whose key matches.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from calibench import integrity, layout, vocabulary
from calibench.config.check import schema_default
from calibench.store import fits as fit_store
from calibench.store import logits as store
from calibench.results import provenance as prov
from calibench.results import shards
from calibench.inference.jobs import progress_bar
from calibench.results.kept import KeptRows, kept_plan, kept_rows_of, merged_reliability, merged_stages, stage_keys

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- measurement

@dataclass(frozen=True)
class StoredNetwork:
    """One (architecture, seed) read back from the store, ready to measure."""

    index: int
    arch_str: str
    seed: int
    params: float
    flops: float
    recorded_accuracy: float
    logits: torch.Tensor  # (N, K) float32 (float64 where a logits population gave it)
    ood_logits: dict[str, torch.Tensor]
    logits_key: str
    logits_file: str
    written_by: str | None = None  # the calibench version that wrote the logits
    source: Mapping = field(default_factory=dict)  # source_bytes, source_mtime of the file they came from
    fits: Mapping = field(default_factory=dict)  # stage -> its stored fit whose key matches (issue 35)


def _stackable(network: StoredNetwork) -> tuple:
    """What networks measured in one batch share: dtype and shape of their logits and OoD sets
    (always so for a NATS space; a logits population's models may differ)."""
    return (network.logits.dtype, tuple(network.logits.shape),
            tuple((name, tuple(v.shape)) for name, v in sorted(network.ood_logits.items())))


# Device memory one network takes in :func:`measure_stages_batch`, in float64 elements: about
# MEMORY_PER_LOGIT per stored logit (the logits, their softmax, recalibrated copies, the metric
# suite's sorted rows) plus MEMORY_PER_PARAMETER per ms/dir parameter (K^2 + K: the L-BFGS
# history of 20 pairs, S, Y and P Y, and the iterate's work arrays).
MEMORY_PER_LOGIT = 24
MEMORY_PER_PARAMETER = 80
AUTO_GROUP_CPU = 8  # the CPU's batch (the schema's default before auto): batching barely pays there
AUTO_GROUP_MAX = 256
AUTO_MEMORY_SHARE = 0.5  # of the device's free memory; the rest for the allocator's fragmentation


def group_size_for(setting, device: torch.device, n_logits: int, n_classes: int,
                   free_bytes: int | None = None) -> int:
    """Networks measured in one batched call (config ``measure_group``): an integer as given;
    ``auto``: on the CPU :data:`AUTO_GROUP_CPU`; on CUDA as many as fit in half the device's
    free memory at :data:`MEMORY_PER_LOGIT` float64 per stored logit (``n_logits`` = evaluation
    and OoD samples) and :data:`MEMORY_PER_PARAMETER` per ms/dir parameter, between 1 and
    :data:`AUTO_GROUP_MAX`. ``free_bytes``: the device's free memory (default: asked of CUDA)."""
    if setting != "auto":
        return max(1, int(setting))
    if device.type != "cuda":
        return AUTO_GROUP_CPU
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    per_network = 8 * (MEMORY_PER_LOGIT * n_logits * n_classes + MEMORY_PER_PARAMETER * (n_classes ** 2 + n_classes))
    return int(min(AUTO_GROUP_MAX, max(1, AUTO_MEMORY_SHARE * free_bytes // per_network)))


def search_chunk_for(device: torch.device, n_train: int, n_classes: int,
                     free_bytes: int | None = None) -> int | None:
    """(network, fold) fits per batched call of the lambda, mu search
    (:func:`calibench.recalibration.odir_search.search_odir`'s ``chunk``): None on the CPU (its
    own batch); on CUDA as many as fit in :data:`AUTO_MEMORY_SHARE` of the free memory at the
    measurement's sizes (:func:`group_size_for`) for fits of ``n_train`` samples, so that a
    larger ``recalibration.odir.networks`` runs in several calls instead of running out of memory
    (the default 64 networks x 5 folds at CIFAR-100's size, 35 MB a fit, fit in one call on a
    card with 24 GB free)."""
    if device.type != "cuda":
        return None
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    per_fit = 8 * (MEMORY_PER_LOGIT * n_train * n_classes + MEMORY_PER_PARAMETER * (n_classes ** 2 + n_classes))
    return int(max(1, AUTO_MEMORY_SHARE * free_bytes // per_fit))


def device_name(device: torch.device) -> str:
    """What a shard records as its measuring device: ``cpu``, or ``cuda:0 (NVIDIA H100 80GB HBM3)``."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def _measure_group(group: list[StoredNetwork], labels: torch.Tensor, settings: Mapping, space: str, hp: str,
                   dataset: str, shard_keys: Mapping[int, str], new_bins: Mapping[str, tuple] | None = None):
    """Metrics of every stage for a group of networks at once, on the device of ``labels``;
    returns one (provenance, stages, stage failures, reliability bins, fits made) per network.
    ``new_bins``: the stages whose rows are kept, with the bin counts to add
    (:func:`calibench.measure.stages.measure_stages_batch`): they give only those."""
    from calibench.measure.stages import measure_stages_batch

    temp = settings["temperature"]
    device = labels.device
    logits = torch.stack([r.logits for r in group]).to(device, non_blocking=True)
    ood = {name: torch.stack([r.ood_logits[name] for r in group]).to(device, non_blocking=True)
           for name in group[0].ood_logits}
    stages = list(settings["stages"])
    out = measure_stages_batch(
        logits, labels, bins=settings["bins"], val_fraction=temp["val_fraction"], seed=temp["seed"],
        method=temp["method"], tace_threshold=settings["tace_threshold"], stages=stages,
        recalibration={"temperature": temp, **settings.get("recalibration", {})}, ood_logits=ood,
        pre_samples=settings.get("pre_samples", vocabulary.PRE_SAMPLES[0]),
        mce=settings.get("mce", vocabulary.MCE_GAPS[0]),
        stored_fits={stage: [r.fits.get(stage) for r in group] for stage in stages}, new_bins=new_bins,
    )
    measured = [s for s in stages if s in out]
    temperature = out.get("temperature")
    results = []
    for i, r in enumerate(group):
        provenance = {
            "space": space, "hp": hp, "dataset": dataset, "arch_index": r.index, "arch_str": r.arch_str,
            "seed": r.seed, "params": r.params, "flops": r.flops,
            "temperature": float(temperature[i]) if temperature is not None else float("nan"),
            "accuracy": float(out["accuracy_full"][i]), "recorded_accuracy": r.recorded_accuracy,
            "n_eval": int(labels.shape[0]), "config_hash": shard_keys[r.index], "logits_key": r.logits_key,
            "logits_file": r.logits_file, **r.source,
        }
        per_stage = {stage: {k: v[i] for k, v in out[stage].items()} for stage in measured}
        failed = {stage: out["failures"][stage][i] for stage in measured if out["failures"][stage][i] is not None}
        reliability = {stage: {k: v[i] for k, v in out["reliability"][stage].items()} for stage in measured
                       if (new_bins or {}).get(stage) is None}
        made = {stage: out["fits"][stage][i] for stage in measured if i in out["fits"][stage]}
        results.append((provenance, per_stage, failed, reliability, made))
    return results


def _measure_isolating(group: list[StoredNetwork], labels: torch.Tensor, settings: Mapping, space: str, hp: str,
                       dataset: str, shard_keys: Mapping[int, str], failures: list[dict],
                       new_bins: Mapping[str, tuple] | None = None):
    """:func:`_measure_group`, and where the batch raises (logits that cannot be measured, e.g.
    non-finite values in a damaged store file), each network on its own: one that still raises
    becomes a failure row naming its file and the reason, and the others are measured."""
    try:
        return _measure_group(group, labels, settings, space, hp, dataset, shard_keys, new_bins)
    except (ValueError, RuntimeError) as exc:
        if len({n.index for n in group}) == 1:
            network = group[0]
            log.warning("architecture %d: not measured (%s): %s", network.index, network.logits_file, exc)
            failures.append({"space": space, "hp": hp, "dataset": dataset, "arch_index": network.index, "seed": None,
                             "source": network.logits_file, "reason": f"not measurable: {exc}",
                             "stage": "measurement"})
            return []
    out = []
    for index in dict.fromkeys(n.index for n in group):
        out += _measure_isolating([n for n in group if n.index == index], labels, settings, space, hp, dataset,
                                  shard_keys, failures, new_bins)
    return out


def resolve_odir(settings: Mapping, odir_file: str | Path | None) -> dict:
    """The measurement settings with the ODIR lambda, mu that the config leaves open filled in
    from the search's result (they enter the shard key like any setting)."""
    settings = json.loads(json.dumps(settings))
    rec = settings.get("recalibration", {})
    open_stages = [s for s in ("ms", "dir") if s in rec and (rec[s]["lambda"] is None or rec[s]["mu"] is None)]
    if not open_stages:
        return settings
    if odir_file is None:
        raise ValueError(f"stages {open_stages}: lambda, mu are left to the search (config recalibration.odir), "
                         "but no search result was given (--odir)")
    found = integrity.read_json(odir_file)
    for stage in open_stages:
        if stage not in found.get("chosen", {}):
            raise ValueError(f"{odir_file}: no lambda, mu chosen for stage {stage}")
        chosen = found["chosen"][stage]
        for name in ("lambda", "mu"):
            if rec[stage][name] is None:
                rec[stage][name] = float(chosen[name])
        # measured as the stage's {stage}_search_worse_than_identity (docs/recalibration.md)
        rec[stage][vocabulary.SEARCH_FLAG] = int(chosen.get(f"{stage}_{vocabulary.SEARCH_FLAG}", 0))
    return settings


def odir_search_job(settings: Mapping, space: str, hp: str, dataset: str, results: str | Path,
                    infer_manifests: list[str | Path], labels_file: str | Path, out: str | Path,
                    device: str = "cpu") -> dict:
    """The ODIR lambda, mu of one (space, hp, dataset), once (docs/recalibration.md, "Choosing
    lambda and mu"): cross-validated NLL on the validation parts of a seeded sample of the
    population's networks, read from the logits store, fitted on ``device`` (config ``device``:
    ``auto`` takes CUDA where the job has a GPU). ``settings``:
    :func:`calibench.config.settings.odir_search_settings`."""
    from calibench.inference.engine import resolve_device
    from calibench.measure.stages import split_indices
    from calibench.recalibration.odir_search import search_odir
    from calibench.config.settings import population_search_sample

    results = Path(results)
    doc = integrity.read_json(layout.population_path(results, space))
    sample = set(population_search_sample(doc, settings["networks"], settings["seed"]))
    keys: dict[int, str] = {}
    for m in infer_manifests:
        keys.update({int(i): k for i, k in integrity.read_json(m)["datasets"].get(dataset, {}).items()})
    labels_read = store.read_labels(labels_file)
    search_key = store.digest({"search": dict(settings), "labels": store.labels_sha256(labels_read.labels),
                               "logits": {str(i): keys[i] for i in sorted(sample) if i in keys}})
    kept = layout.odir_search_store(results, layout.target_name(space, hp), dataset, search_key)
    reused = _kept_search(kept, search_key)
    if reused is not None:
        integrity.write_json(reused, out)
        return reused
    networks, logits = [], []
    for index in sorted(sample):
        if index not in keys:
            log.warning("architecture %d: no logits (failed inference); left out of the search", index)
            continue
        try:
            stored = _read_stored(results, space, hp, dataset, index, keys[index], labels_read)
        except (store.StoreError, OSError, KeyError, ValueError) as exc:
            log.warning("architecture %d: %s; left out of the search", index, exc)
            continue
        networks.append(index)
        logits.append(stored[0].logits)  # the first stored seed
    if not networks:
        raise RuntimeError(f"{space} hp={hp} {dataset}: none of the {len(sample)} sampled networks has logits")
    dev = resolve_device(device)
    val_idx, _ = split_indices(len(labels_read.labels), settings["split"]["val_fraction"], settings["split"]["seed"])
    z_val = torch.stack(logits)[:, torch.from_numpy(val_idx)].to(dev, torch.float64)
    y_val = torch.from_numpy(labels_read.labels).long()[torch.from_numpy(val_idx)].to(dev)
    # the largest fold's training part: what each fit holds on the device
    chunk = search_chunk_for(dev, len(val_idx) - len(val_idx) // settings["folds"], z_val.shape[-1])
    log.info("%s hp=%s %s: searching on %s%s", space, hp, dataset, device_name(dev),
             f" ({chunk} network x fold fits a call at most)" if chunk is not None else "")
    chosen, grids = {}, {}
    start = time.perf_counter()
    for stage in settings["stages"]:
        t0 = time.perf_counter()
        found = search_odir(z_val, y_val, stage, grid=tuple(settings["grid"]), folds=settings["folds"],
                            seed=settings["seed"], max_iterations=settings["max_iterations"],
                            tolerance=settings["tolerance"], chunk=chunk)
        chosen[stage] = {"lambda": float(found["lambda"]), "mu": float(found["mu"]), "cv_nll": found["nll"],
                         "identity_cv_nll": found["identity_nll"], "reason": found["reason"],
                         f"{stage}_{vocabulary.SEARCH_FLAG}": int(found["worse_than_identity"])}
        if found["worse_than_identity"]:
            log.warning("%s hp=%s %s %s: %s", space, hp, dataset, stage, found["reason"])
        grids[stage] = {"values": list(found["grid"]), "mean_nll": np.asarray(found["mean_nll"]).tolist(),
                        "not_converged": np.asarray(found["not_converged"]).tolist(),
                        "iterations": np.asarray(found["iterations"]).tolist()}
        log.info("%s hp=%s %s %s: lambda=%g mu=%g (mean CV NLL %.6f) from %d networks in %.1f s", space, hp,
                 dataset, stage, found["lambda"], found["mu"], found["nll"], len(networks), time.perf_counter() - t0)
    summary = {"space": space, "hp": hp, "dataset": dataset, "settings": dict(settings), "networks": networks,
               "n_val": int(len(val_idx)), "chosen": chosen, "grid": grids, "device": device_name(dev),
               "seconds": round(time.perf_counter() - start, 3), "key": search_key}
    integrity.write_json(summary, kept)
    integrity.write_json(summary, out)
    return summary


def _kept_search(path: Path, key: str) -> dict | None:
    """The search kept under ``key`` (:func:`calibench.layout.odir_search_store`), or None: none
    kept, or one that fails its check (set aside, and the search runs again)."""
    if not path.is_file():
        return None
    try:
        doc = integrity.read_json(path)
        if doc.get("key") != key:
            raise integrity.DamagedFile(path, f"holds the search of key {doc.get('key')!r}, not {key!r}")
    except (integrity.DamagedFile, ValueError, OSError) as exc:
        aside = integrity.set_aside(path)
        log.warning("%s; set aside as %s, the search runs again", exc, aside.name)
        return None
    log.info("%s hp=%s %s: the same settings, labels and sampled logits as the search kept in %s: its lambda, mu "
             "are read back, nothing is fitted", doc["space"], doc["hp"], doc["dataset"], path)
    return doc


def _with_stored_fits(results: Path, space: str, hp: str, dataset: str, index: int, networks: list[StoredNetwork],
                      keys: Mapping[str, str], problems: list[dict]) -> list[StoredNetwork]:
    """``networks`` (the seeds of one architecture) with their stored fits whose keys match; a
    fit-store file that fails its check or cannot be read is set aside, named in ``problems``, and
    every fit in it is made again."""
    from dataclasses import replace

    path = layout.fits_path(results, space, hp, dataset, index)
    valid, problem = fit_store.read_valid_fits(path, {n.seed: keys for n in networks})
    if problem is not None:
        aside = integrity.set_aside(path) if path.exists() else None
        log.warning("%s: %s: its fits are made again%s", path, problem, f" (set aside as {aside.name})" if aside else "")
        problems.append({"file": str(path.relative_to(results)), "problem": problem})
    return [replace(n, fits=valid.get(n.seed, {})) for n in networks]


def shard_key(settings: Mapping, logits_key: str) -> str:
    """A shard's validity key: the measurement settings plus the key of the logits it measured."""
    return store.digest({"measurement": dict(settings), "logits": logits_key})


def _read_stored(results: Path, space: str, hp: str, dataset: str, index: int, expected_key: str,
                 labels: store.Labels) -> list[StoredNetwork]:
    path = layout.logits_path(results, space, hp, dataset, index)
    if not path.is_file():
        raise store.StoreError(path, "logits file missing (deleted under keep_logits: false, or moved); rerun its "
                                     "inference: snakemake --forcerun infer (or delete "
                                     f"{layout.infer_manifest(results, '*', 0).parent.parent})")
    stored = store.read_network_logits(path)
    if stored.key != expected_key:
        raise store.StoreError(path, f"written for logits key {stored.key}, but its inference job recorded "
                                     f"{expected_key}; rerun its inference")
    if stored.meta["labels_sha256"] != labels.meta["labels_sha256"]:
        raise store.StoreError(path, f"computed on another {dataset} evaluation set than {labels.meta['source']}")
    relative = str(path.relative_to(results))
    stats = {n["seed"]: {k: n[k] for k in shards.OPTIONAL_COLUMNS if k in n} for n in stored.meta["networks"]}
    return [StoredNetwork(index, stored.meta["arch_str"], s.seed, s.params, s.flops, s.recorded_accuracy,
                          torch.from_numpy(s.sets[store.TEST_SET]),
                          {name[len("ood_"):]: torch.from_numpy(v) for name, v in s.sets.items() if name != store.TEST_SET},
                          stored.key, relative, stored.meta.get("calibench_version"), stats.get(s.seed, {}))
            for s in stored.seeds]


def measure_chunk_job(settings: Mapping, runtime: Mapping, space: str, hp: str, dataset: str, chunk: int,
                      results: str | Path, infer_manifest: str | Path, labels_file: str | Path, manifest: str | Path,
                      keep_logits: bool = True, progress: bool = True, odir_file: str | Path | None = None) -> dict:
    """Measure one chunk of one dataset from the logits store; a shard per network, then the
    manifest. ``settings``: :func:`calibench.config.settings.measurement_settings`; ``odir_file``:
    the lambda, mu search's result where the config leaves them to it. ``runtime``: ``device``
    (config ``device``; ``auto`` takes CUDA where the job has a GPU) and ``measure_group``
    (:func:`group_size_for`)."""
    from calibench.inference.engine import resolve_device
    from calibench.runtime import keep_freed_memory

    keep_freed_memory()
    settings = resolve_odir(settings, odir_file)
    results = Path(results)
    inferred = integrity.read_json(infer_manifest)
    indices = inferred["indices"]
    logits_keys = {int(i): k for i, k in inferred["datasets"].get(dataset, {}).items()}
    failures = [dict(f) for f in inferred["failures"] if f["dataset"] == dataset]  # carried into the table
    keys = {i: shard_key(settings, k) for i, k in logits_keys.items()}
    todo = []
    other_settings = set()  # shards made with other settings: what of them holds is kept (issue 35)
    for i in indices:
        problem = shards.shard_problem(layout.shard_path(results, space, hp, dataset, i), keys[i]) if i in keys else None
        if problem is not None:
            todo.append(i)
            if problem == "made with other settings":
                other_settings.add(i)
            if problem.startswith(("damaged", "unreadable")):
                log.warning("%s: %s: measured again", layout.shard_path(results, space, hp, dataset, i), problem)
    fit_problems: list[dict] = []  # fit-store files missing or failing their check (set aside, fitted again)
    has_fits = any(s != "pre" for s in settings["stages"])  # stages with a map in the fit store
    if has_fits and len(todo) < len(keys):
        for i in sorted(set(keys) - set(todo)):  # valid shards: their fits must be in the store too
            path = layout.fits_path(results, space, hp, dataset, i)
            cause = "missing" if not path.is_file() else integrity.check(path)
            if cause is not None:
                if cause != "missing":
                    aside = integrity.set_aside(path)
                    cause = f"{cause}; set aside as {aside.name}"
                log.warning("%s: %s: the chunk is measured again, its fits made again", path, cause)
                fit_problems.append({"file": str(path.relative_to(results)), "problem": cause})
        if fit_problems:  # all of it, in the batches its fits were made in (their last bits depend on the batch)
            todo = [i for i in indices if i in keys]
    skipped = len(keys) - len(todo)
    log.info("%s hp=%s %s chunk %d: %d architectures, %d already measured (skipped), %d to measure, %d without "
             "logits (failed inference)", space, hp, dataset, chunk, len(indices), skipped, len(todo),
             len(indices) - len(keys))
    measured: set[int] = set()
    stage_failures: list[dict] = []  # a stage of a network is NaN (its fit failed); the shard stands
    fit_counts: dict[str, dict[str, int]] = {"made": {}, "reused": {}}  # per stage: fitted now, re-applied
    # per stage, networks measured whole, only at new bin counts, or kept as they were
    stage_counts: dict[str, dict[str, int]] = {"whole": {}, "new_bins": {}, "kept": {}}
    kept_rows: dict[int, KeptRows] = {}
    fits_changed: set[int] = set()
    start = time.perf_counter()
    if todo:
        device = resolve_device(runtime.get("device", "cpu"))
        labels_read = store.read_labels(labels_file)
        labels = torch.from_numpy(labels_read.labels).to(device)
        group_setting = runtime.get("measure_group", schema_default("measure_group"))
        group_size = None  # sized from the first network's logits (their N and K), once
        measured_on = device_name(device)
        pending: list[StoredNetwork] = []
        labels_sha = labels_read.meta["labels_sha256"]

        def flush():
            written = {n.index: n.written_by for n in pending}
            by_index: dict[int, list] = {}
            reliability: dict[int, dict] = {}
            fits_of: dict[int, dict] = {}
            for n in pending:  # what is kept of the store; the fits made now replace theirs below
                fits_of.setdefault(n.index, {})[n.seed] = dict(n.fits)
            plan = kept_plan(pending, kept_rows, settings)
            for provenance, stages, failed, rel, made in _measure_isolating(pending, labels, settings, space, hp,
                                                                            dataset, keys, failures, plan):
                index, seed = provenance["arch_index"], provenance["seed"]
                if plan:
                    kept = kept_rows[index]
                    stages = merged_stages(kept, seed, plan, stages, settings)
                    rel = merged_reliability(kept, seed, plan, rel, settings)
                    if "post" in plan:
                        provenance["temperature"] = kept.temperature[seed]
                    stage_failures.extend(f for f in kept.stage_failures
                                          if f["seed"] == seed and f["stage"] in plan and not plan[f["stage"]])
                for stage in settings["stages"]:
                    how = "whole" if stage not in plan else "new_bins" if plan[stage] else "kept"
                    stage_counts[how][stage] = stage_counts[how].get(stage, 0) + 1
                by_index.setdefault(index, []).append(shards.shard_table(provenance, stages))
                reliability.setdefault(index, {})[seed] = rel
                expected = fit_store.fit_keys(settings, provenance["logits_key"], labels_sha)
                for stage in set(expected) - set(made):
                    if plan.get(stage, True):  # re-applied (a kept stage with no new bins is not)
                        fit_counts["reused"][stage] = fit_counts["reused"].get(stage, 0) + 1
                for stage, (params, info, why) in made.items():
                    fits_of[provenance["arch_index"]][provenance["seed"]][stage] = fit_store.StageFit(
                        expected[stage], params, info, why)
                    fit_counts["made"][stage] = fit_counts["made"].get(stage, 0) + 1
                if made:
                    fits_changed.add(provenance["arch_index"])
                for stage, reason in failed.items():  # the network keeps its shard; this stage is NaN
                    log.warning("architecture %d seed %d: stage %s is NaN: %s", provenance["arch_index"],
                                provenance["seed"], stage, reason)
                    stage_failures.append({"space": space, "hp": hp, "dataset": dataset,
                                           "arch_index": provenance["arch_index"], "seed": provenance["seed"],
                                           "source": provenance["logits_file"], "reason": reason, "stage": stage})
            for index in sorted(fits_changed & set(by_index)):  # before the shards: a shard never lacks its fits
                fit_store.write_network_fits(layout.fits_path(results, space, hp, dataset, index), index,
                                             fits_of[index], space=space, hp=hp, dataset=dataset)
            fits_changed.clear()
            for index, tables in by_index.items():
                own = [f for f in stage_failures if f["arch_index"] == index]
                table = shards.with_stage_failures(pa.concat_tables(tables), own)
                table = shards.with_reliability(table, reliability[index])
                table = shards.with_measured(table, settings["bins"], stage_keys(settings, logits_keys[index]))
                metadata = dict(table.schema.metadata or {})
                measured_with = prov.measurement(measured_on, {"calibench_version": written.get(index)})
                metadata[prov.PROVENANCE_KEY] = prov.dumps(measured_with)
                table = table.replace_schema_metadata(metadata)
                shards.write_atomic_parquet(table, layout.shard_path(results, space, hp, dataset, index))
                measured.add(index)
            pending.clear()

        for index in progress_bar(todo, progress, desc=f"{space}/{hp}/{dataset} chunk {chunk}", unit="net"):
            try:
                networks = _read_stored(results, space, hp, dataset, index, logits_keys[index], labels_read)
                networks = _with_stored_fits(results, space, hp, dataset, index, networks,
                                             fit_store.fit_keys(settings, logits_keys[index], labels_sha), fit_problems)
                if index in other_settings:
                    kept = kept_rows_of(layout.shard_path(results, space, hp, dataset, index), settings,
                                      stage_keys(settings, logits_keys[index]), [n.seed for n in networks])
                    if kept is not None:
                        kept_rows[index] = kept
            except (store.StoreError, OSError, KeyError, ValueError) as exc:
                source = layout.logits_path(results, space, hp, dataset, index)
                if isinstance(exc, integrity.DamagedFile):  # set aside: the repair check sees it gone
                    aside = integrity.set_aside(source)
                    exc = f"{exc}; set aside as {aside.name}: the next run computes it again"
                log.warning("architecture %d: %s", index, exc)
                failures.append({"space": space, "hp": hp, "dataset": dataset, "arch_index": index, "seed": None,
                                 "source": str(source), "reason": str(exc), "stage": "measurement",
                                 **integrity.failed_source(source)})
                continue
            if group_size is None:
                first = networks[0]
                n_logits = first.logits.shape[0] + sum(v.shape[0] for v in first.ood_logits.values())
                group_size = group_size_for(group_setting, device, n_logits, first.logits.shape[-1])
                log.info("measuring on %s, %d network(s) per batched call (measure_group %s)", measured_on,
                         group_size, group_setting)
            if pending and (len(pending) + len(networks) > group_size or _stackable(pending[0]) != _stackable(networks[0])):
                flush()
            pending.extend(networks)
        if pending:
            flush()
    for index in set(keys) - set(todo):  # valid shards kept from an earlier run: their NaN stages' reasons
        stage_failures += shards.read_stage_failures(layout.shard_path(results, space, hp, dataset, index))
    computed = len(measured)
    removed = 0
    if not keep_logits:  # the logits of every valid shard (found valid, or just written) have served
        for index in (set(keys) - set(todo)) | measured:
            path = layout.logits_path(results, space, hp, dataset, index)
            if path.is_file():
                path.unlink()
                removed += 1
    failed = sorted({f["arch_index"] for f in failures})
    summary = {"space": space, "hp": hp, "dataset": dataset, "chunk": chunk, "indices": indices,
               "skipped": skipped, "computed": computed, "failed": failed, "failures": failures + stage_failures,
               "shards": {str(i): k for i, k in keys.items() if i not in failed},
               "files": {str(i): integrity.written_state(layout.shard_path(results, space, hp, dataset, i))
                         for i in keys if i not in failed},
               "fit_files": {str(i): integrity.written_state(layout.fits_path(results, space, hp, dataset, i))
                             for i in keys if i not in failed and has_fits},
               "logits_removed": removed, "odir": Path(odir_file).name if odir_file else None,
               "fits": fit_counts, "fit_problems": fit_problems, "stages_measured": stage_counts,
               "settings": settings,  # the measurement settings, searched lambda, mu filled in: what a table records
               "seconds": round(time.perf_counter() - start, 3)}
    log.info("chunk %d done: %d measured, %d skipped, %d failed in %.1f s%s; fits made %s, re-applied from the fit "
             "store %s", chunk, computed, skipped, len(failed), summary["seconds"],
             f"; {removed} logits files removed (keep_logits: false)" if removed else "",
             sum(fit_counts["made"].values()), sum(fit_counts["reused"].values()))
    integrity.write_json(summary, manifest)
    return summary
