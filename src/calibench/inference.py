"""Logits of many NATS networks on their evaluation sets (the inference job's engine).

For a chunk of architectures of one (space, hp): weights come from the archive
(prefetched in the background, each file read once for every dataset), each network
is built, loaded with ``strict=True``, converted to its inference form and run over
each dataset's evaluation set (held once on the device) and, for CIFAR-10, the OoD
sets. One broken architecture (missing or corrupt file, state-dict mismatch,
non-finite logits) becomes a :class:`Failure` naming its index, file and reason; the
rest go on. The logits go to the logits store (:mod:`calibench.logits`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import data as data_io
from .archive import ArchiveEntry, ArchiveError, NatsArchive, prefetch
from .networks import build_network, inference_network

log = logging.getLogger(__name__)

OOD_GAUSSIAN = "gaussian_noise"
OOD_SVHN = "svhn"


GPU_ALLOCATION_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")


def allocated_gpus() -> str | None:
    """The GPUs the batch system gave this job, if it says (SLURM), else None."""
    for name in GPU_ALLOCATION_VARIABLES:
        value = os.environ.get(name, "").strip()
        if not value or (name == "SLURM_GPUS_ON_NODE" and value == "0"):  # a count; the others list GPU ids
            continue
        return f"{name}={value}"
    return None


class DeviceError(RuntimeError):
    """The configured device cannot be used on this machine (a configuration problem, not a bug)."""


def resolve_device(device: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU, unless the job was given GPUs that CUDA cannot
    see (then an error rather than a 100x slower CPU run). An explicit ``cuda`` without a GPU
    is an error; ``cpu`` is the config's way to run on the CPU anyway."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        allocation = allocated_gpus()
        if allocation:
            raise DeviceError(
                f"this job was allocated GPUs ({allocation}, CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}) but torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); install a CUDA build of torch, "
                "or set device: cpu in the config to run on the CPU on purpose"
            )
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"device {device!r} requested but no CUDA device is visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); "
            "set device: cpu in the config to run on the CPU instead"
        )
    return dev


def loader_workers(setting: int | str, device: torch.device) -> int:
    """Archive loaders running ahead of compute (config ``loader_workers``; see
    :func:`calibench.archive.prefetch`). ``auto``: on CUDA every CPU of the job but one, at
    most 8, since one loader reads a real TSS archive in about 2 s, far slower than a GPU
    evaluates it; on the CPU one, so that loading does not take cores from inference."""
    if setting != "auto":
        return int(setting)
    if device.type != "cuda":
        return 1
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK", "0")) or len(os.sched_getaffinity(0))
    return max(1, min(8, cpus - 1))


@dataclass
class EvalData:
    """An evaluation set, normalised and resident on the device, with its OoD sets."""

    dataset: str
    images: torch.Tensor  # (N, 3, H, W) float32, normalised, channels-last
    labels: torch.Tensor  # (N,) int64, on the device
    source: str
    ood: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> normalised images

    @property
    def n(self) -> int:
        return self.images.shape[0]


def _to_device(images_uint8: np.ndarray, dataset: str, device: torch.device) -> torch.Tensor:
    x = data_io.normalize(images_uint8, dataset, device=device)
    return x.contiguous(memory_format=torch.channels_last)


def load_eval_data(
    dataset: str,
    root: str | Path,
    device: torch.device | str = "cpu",
    ood: Sequence[str] = (OOD_GAUSSIAN,),
    svhn_path: str | Path | None = None,
    noise_severity: int = 5,
    noise_seed: int = 0,
) -> EvalData:
    """Read the test set once; OoD sets (CIFAR-10 only): Gaussian-noise CIFAR-10-C and SVHN."""
    device = torch.device(device)
    eval_set = data_io.load_eval_set(dataset, root)
    out = EvalData(
        dataset=dataset,
        images=_to_device(eval_set.images, dataset, device),
        labels=torch.from_numpy(eval_set.labels).to(device),
        source=str(eval_set.source),
    )
    if dataset == "cifar10":
        if OOD_GAUSSIAN in ood:
            noisy = data_io.gaussian_noise(eval_set.images, severity=noise_severity, seed=noise_seed)
            out.ood[OOD_GAUSSIAN] = _to_device(noisy, dataset, device)
        if OOD_SVHN in ood and svhn_path is not None:
            out.ood[OOD_SVHN] = _to_device(data_io.load_svhn_test(svhn_path).images, dataset, device)
    return out


@dataclass(frozen=True)
class NetworkLogits:
    """One network's float32 logits on the evaluation set (and OoD sets), on the CPU."""

    entry: ArchiveEntry
    logits: torch.Tensor  # (N, K)
    ood_logits: dict[str, torch.Tensor]


@dataclass(frozen=True)
class Failure:
    """An architecture (or one seed of it) that produced no logits on ``dataset``, and why."""

    index: int
    source: str
    reason: str
    seed: int | None = None
    dataset: str | None = None


@torch.inference_mode()
def _run(net: torch.nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([net(batch).float() for batch in images.split(batch_size)]).cpu()


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
    logits = _run(fast, eval_data.images, batch_size)
    if logits.shape != (eval_data.n, entry.num_classes):
        raise ValueError(f"logits of shape {tuple(logits.shape)}, expected {(eval_data.n, entry.num_classes)}")
    bad = ~torch.isfinite(logits)
    if bool(bad.any()):
        raise ValueError(f"non-finite logits for {int(bad.any(dim=1).sum())} of {eval_data.n} images")
    ood = {name: _run(fast, images, batch_size) for name, images in eval_data.ood.items()}
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
