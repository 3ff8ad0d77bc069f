"""The NATS-Bench source's jobs: a space's population from its archive's meta, the labels of
its evaluation sets, and one chunk's logits from the archive (each file decompressed at
most once, and only if some dataset's logits of that architecture are missing or stale).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from calibench import integrity
from calibench.config.check import schema_default
from calibench.config.settings import INFERENCE_VERSION
from calibench.sources import keys
from calibench.sources.errors import SourceError
from calibench.store import logits as store
from calibench.integrity import write_json
from calibench.inference.jobs import store_chunk_logits
from calibench.inference.precision_modes import precision_fields
from calibench.layout import population_path
from calibench.sources.nats import population as pop
from calibench.sources.nats.indices import nats_indices

log = logging.getLogger(__name__)


def key_fields(settings: Mapping, space: str, hp: str, dataset: str, index: int, arch_str: str,
               meta_sha256: str) -> dict:
    """Exactly what changes one network's logits on one dataset (issue 9): the archive (its
    release name and the SHA-256 of its meta file, recorded in the population) and the
    architecture, hp, seed selection, the evaluation set's content and normalisation, OoD
    settings, the inference code's version and a precision other than float32. Paths, device,
    batch size, loaders and networks per pass do not enter. ``settings``: :func:`calibench.config.settings.inference_settings`."""
    return {
        "archive": {"name": Path(settings["archive"]).name, "meta_sha256": meta_sha256}, "space": space,
        "hp": str(hp), "arch_index": int(index), "arch_str": arch_str, "seeds": settings.get("seeds", "first"),
        "eval_set": keys.eval_set_fields(dataset, settings["datasets_root"]), "ood": keys.ood_fields(dataset, settings["ood"]),
        "inference_version": INFERENCE_VERSION, **precision_fields(settings.get("precision", "float32")),
    }


def logits_key(settings: Mapping, space: str, hp: str, dataset: str, index: int, arch_str: str,
               meta_sha256: str) -> str:
    return store.digest(key_fields(settings, space, hp, dataset, index, arch_str, meta_sha256))


def write_population(settings: Mapping, space: str, out: str | Path) -> dict:
    """Selected indices, chunks, every arch string, class representative and NATS-Bench index
    of one space (``settings``: :func:`calibench.config.settings.population_settings`)."""
    arch_strs = pop.read_meta(settings["archive"])
    meta_sha256 = store.file_sha256(Path(settings["archive"]) / "meta.pickle.pbz2")
    representatives = pop.representatives(space, arch_strs)
    try:  # the config check refused these before any job (pop.check_selections); an archive changed since
        selected = pop.select(space, arch_strs, settings["population"], reps=representatives)
    except ValueError as exc:
        raise SourceError(f"{exc} ({len(arch_strs)} architectures in {settings['archive']})") from None
    if not selected:
        raise SourceError(f"population.{space}: selects no architecture of {settings['archive']}")
    doc = {
        "space": space,
        "archive": str(settings["archive"]),
        "meta_sha256": meta_sha256,  # the archive's identity in every logits key (calibench.store.logits)
        "arch_strs": arch_strs,
        "representatives": representatives,
        # each member's NATS-Bench index (None where unknown): joins by index use it
        "nats_index": nats_indices(space, arch_strs),
        "selected": selected,
        "chunks": pop.chunks(selected, int(settings["chunk_size"])),
    }
    write_json(doc, out)
    log.info("%s: %d of %d architectures selected, %d chunks", space, len(selected), len(arch_strs), len(doc["chunks"]))
    return doc


def write_labels(settings: Mapping, dataset: str, out: str | Path) -> Path:
    """The labels of one evaluation set, once per dataset (``settings``: datasets_root)."""
    from calibench.inference.data import load_eval_set

    eval_set = load_eval_set(dataset, settings["datasets_root"])
    key = store.digest(keys.eval_set_fields(dataset, settings["datasets_root"]))
    path = store.write_labels(out, eval_set.labels, dataset=dataset, key=key, source=str(eval_set.source))
    log.info("%s: %d labels from %s", path, len(eval_set.labels), eval_set.source)
    return path


def _seeds(settings: Mapping):
    seeds = settings.get("seeds", "first")
    return None if seeds == "first" else [int(s) for s in seeds]


def infer_chunk(settings: Mapping, runtime: Mapping, space: str, hp: str, chunk: int, results: str | Path,
                manifest: str | Path, progress: bool = True) -> dict:
    """Logits of one chunk on every configured dataset into the store, then the manifest.

    ``settings``: :func:`calibench.config.settings.inference_settings`; ``runtime``: device,
    batch_size, loader_workers, networks_per_pass (none of them enters a logits key).
    """
    results = Path(results)
    doc = integrity.read_json(population_path(results, space))
    indices = doc["chunks"][chunk]
    arch_strs = doc["arch_strs"]
    datasets = list(settings["datasets"])
    fields = {(i, d): key_fields(settings, space, hp, d, i, arch_strs[i], doc["meta_sha256"])
              for i in indices for d in datasets}
    eval_sets = {}

    def produce(todo):
        from calibench.inference.engine import load_eval_data, loader_workers, ood_options, resolve_device
        from calibench.sources.nats.archive import NatsArchive
        from calibench.sources.nats.stacked import resolve_networks_per_pass
        from calibench.sources.nats.stream import chunk_logits

        device = resolve_device(runtime.get("device", "auto"))
        ood = settings["ood"]
        needed = [d for d in datasets if any(d in v for v in todo.values())]
        eval_sets.update({d: load_eval_data(d, settings["datasets_root"], device=device, **ood_options(ood))
                          for d in needed})
        archive = NatsArchive(settings["archive"], space, hp)
        workers = loader_workers(runtime.get("loader_workers", schema_default("loader_workers")), device)
        per_pass = resolve_networks_per_pass(runtime.get("networks_per_pass", schema_default("networks_per_pass")), device,
                                             space)
        log.info("device %s, %d archive loader(s), %d network(s) per pass, datasets %s", device, workers, per_pass,
                 ", ".join(needed))
        batch_size = int(runtime.get("batch_size", schema_default("batch_size")))
        stream = chunk_logits(archive, todo, eval_sets, device, _seeds(settings), batch_size,
                              prefetch_depth=max(4, 2 * workers), loader_workers=workers, networks_per_pass=per_pass,
                              precision=settings.get("precision", "float32"))
        for index, dataset, out in stream:
            if not isinstance(out, list):
                yield index, dataset, {"seed": out.seed, "source": out.source, "reason": out.reason}
                continue
            yield index, dataset, [
                store.SeedLogits(r.entry.seed, r.entry.params, r.entry.flops, r.entry.recorded_accuracy, r.entry.source,
                                 {store.TEST_SET: r.logits.numpy(), **{f"ood_{k}": v.numpy() for k, v in r.ood_logits.items()}})
                for r in out]

    return store_chunk_logits(space, hp, chunk, results, manifest, indices, datasets, fields, arch_strs,
                              lambda d: eval_sets[d].labels.cpu().numpy(), produce, progress, what="architectures")
