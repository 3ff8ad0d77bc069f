"""Logits of a chunk of NATS networks (the NATS source's side of the inference engine).

For a chunk of architectures of one (space, hp): weights come from the archive
(prefetched in the background, each file read once for every dataset), each network
is built, loaded with ``strict=True``, converted to its inference form and run over
each dataset's evaluation set (held once on the device) and, for CIFAR-10, the OoD
sets (:func:`calibench.inference.engine.module_logits`). One broken architecture (missing or
corrupt file, state-dict mismatch, non-finite logits) becomes a
:class:`~calibench.inference.engine.Failure` naming its index, file and reason; the rest go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from calibench.inference.engine import EvalData, Failure, module_logits
from calibench.sources.nats.archive import ArchiveEntry, ArchiveError, NatsArchive, prefetch
from calibench.sources.nats.networks import build_network, inference_network

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetworkLogits:
    """One network's float32 logits on the evaluation set (and OoD sets), on the CPU."""

    entry: ArchiveEntry
    logits: torch.Tensor  # (N, K)
    ood_logits: dict[str, torch.Tensor]


def network_logits(
    entry: ArchiveEntry, eval_data: EvalData, device: torch.device, batch_size: int = 1000
) -> NetworkLogits:
    """Build, load (strict), convert and run one network; ValueError with the reason if it fails."""
    net = build_network(entry.space, entry.arch_str, entry.num_classes)
    try:
        net.load_state_dict(entry.state_dict, strict=True)
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()
        raise ValueError(f"state dict does not fit {entry.space} {entry.arch_str}: {' '.join(first_line[:3])}") from exc
    fast = inference_network(net).to(device)  # its convolutions are channels-last already
    logits, ood = module_logits(fast, eval_data, entry.num_classes, batch_size)
    return NetworkLogits(entry, logits, ood)


def chunk_logits(
    archive: NatsArchive,
    todo: Mapping[int, Sequence[str]],
    eval_sets: Mapping[str, EvalData],
    device: torch.device,
    seeds: Sequence[int] | None = None,
    batch_size: int = 1000,
    prefetch_depth: int = 4,
    loader_workers: int = 1,
) -> Iterator[tuple[int, str, list[NetworkLogits] | Failure]]:
    """Logits of a chunk: ``todo`` maps each architecture index to the datasets it still needs.

    Each architecture file is read once for all of its datasets (issue 9). Yields, in
    order, ``(index, dataset, logits of every seed)`` or ``(index, dataset, Failure)``: a
    dataset's seeds succeed or fail together, so a stored file always holds them all.
    """
    datasets = [d for d in eval_sets if any(d in needed for needed in todo.values())]
    for index, loaded in prefetch(archive, list(todo), datasets, seeds, prefetch_depth, loader_workers):
        if isinstance(loaded, ArchiveError):
            log.warning("skipping %s", loaded)
            for dataset in todo[index]:
                yield index, dataset, Failure(index, loaded.path, loaded.reason, dataset=dataset)
            continue
        for dataset in todo[index]:
            entries = [e for e in loaded if e.dataset == dataset]
            results: list[NetworkLogits] = []
            for entry in entries:
                try:
                    results.append(network_logits(entry, eval_sets[dataset], device, batch_size))
                except (ValueError, RuntimeError) as exc:
                    log.warning("skipping architecture %d %s seed %d (%s): %s", index, dataset, entry.seed,
                                entry.source, exc)
                    yield index, dataset, Failure(index, entry.source, str(exc), entry.seed, dataset)
                    break
            else:
                if entries:
                    yield index, dataset, results
                else:
                    yield index, dataset, Failure(index, str(archive.archive_dir), "no entries loaded", dataset=dataset)
