"""The inference engine, for every population source: the device, the evaluation sets
held once on it, and one model's checked logits (:func:`module_logits`).

A source (:mod:`calibench.sources`) supplies the models: NATS-Bench networks from their
archives (:mod:`calibench.sources.nats.stream`), a user's torch models
(:mod:`calibench.sources.torch_models`). A model that fails (wrong output shape,
non-finite logits, an exception) becomes a :class:`Failure` naming it and the reason;
the rest go on. The logits go to the logits store (:mod:`calibench.store.logits`).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from calibench.inference import data as data_io

log = logging.getLogger(__name__)

OOD_GAUSSIAN = "gaussian_noise"
OOD_SVHN = "svhn"


MAX_AUTO_LOADERS = 16  # a GPU node's cores, less one for the job itself
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


def full_float32() -> None:
    """Convolutions and matrix products in full float32 on CUDA. PyTorch's default lets cuDNN
    run float32 convolutions in TF32 (10-bit mantissa): on an H200 that put NATS logits
    1.7e-4 to 3.4e-4 (relative to the largest logit) from a float64 reference, against 2e-7
    in float32, beyond the 1e-4 agreement the logits are held to (BENCHMARKS.md, "GPU")."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def resolve_device(device: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU, unless the job was given GPUs that CUDA cannot
    see (then an error rather than a 100x slower CPU run). An explicit ``cuda`` without a GPU
    is an error; ``cpu`` is the config's way to run on the CPU anyway. On CUDA, computes in
    full float32 (:func:`full_float32`)."""
    if device == "auto":
        if torch.cuda.is_available():
            full_float32()
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
    if dev.type == "cuda":
        full_float32()
    return dev


def loader_workers(setting: int | str, device: torch.device) -> int:
    """Archive loaders running ahead of compute (config ``loader_workers``; see
    :func:`calibench.sources.nats.archive.prefetch`). ``auto``: on CUDA every CPU of the job but one, at
    most :data:`MAX_AUTO_LOADERS`, since one loader reads a real TSS archive in about 2 s, far slower
    than a GPU evaluates it (a pass is 14.5 core-hours of bz2: BENCHMARKS.md); on the CPU one, so
    that loading does not take cores from inference."""
    if setting != "auto":
        return int(setting)
    if device.type != "cuda":
        return 1
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK", "0")) or len(os.sched_getaffinity(0))
    return max(1, min(MAX_AUTO_LOADERS, cpus - 1))


@dataclass
class EvalData:
    """An evaluation set, normalised and resident on the device, with its OoD sets."""

    dataset: str
    images: torch.Tensor  # (N, 3, H, W) float32, normalised, in the device's activation_format
    labels: torch.Tensor  # (N,) int64, on the device
    source: str
    ood: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> normalised images

    @property
    def n(self) -> int:
        return self.images.shape[0]


def activation_format(device: torch.device | str) -> torch.memory_format:
    """The layout of images, weights and activations of the forward pass on ``device``:
    channels-last on the CPU (faster there, BENCHMARKS.md "Inference"), NCHW on CUDA, where
    cuDNN's float32 channels-last convolutions of 8 to 64 channels ran 1.1x to 9.5x slower than
    NCHW on an H200 (the TSS all-3x3 cell 4,282 against 40,574 images/s; BENCHMARKS.md, "GPU
    session 2026-11-27")."""
    return torch.contiguous_format if torch.device(device).type == "cuda" else torch.channels_last


def _to_device(images_uint8: np.ndarray, dataset: str, device: torch.device) -> torch.Tensor:
    x = data_io.normalize(images_uint8, dataset, device=device)
    return x.contiguous(memory_format=activation_format(device))


def load_eval_data(
    dataset: str,
    root: str | Path,
    device: torch.device | str = "cpu",
    ood: Sequence[str] = (OOD_GAUSSIAN,),
    svhn_path: str | Path | None = None,
    noise_severity: int = 5,
    noise_seed: int = 0,
    svhn_subset: int | None = None,
    svhn_subset_seed: int = 0,
) -> EvalData:
    """Read the test set once; OoD sets (CIFAR-10 only): Gaussian-noise CIFAR-10-C and SVHN, all
    of it or the seeded subset ``svhn_subset`` (:func:`calibench.inference.data.svhn_subset_rows`)."""
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
            svhn = data_io.load_svhn_test(svhn_path, subset=svhn_subset, seed=svhn_subset_seed)
            out.ood[OOD_SVHN] = _to_device(svhn.images, dataset, device)
    return out


def ood_options(ood: Mapping) -> dict:
    """The keyword arguments of :func:`load_eval_data` that the config's ``ood`` section gives
    (the schema's defaults for the keys it leaves out)."""
    from calibench.config.check import schema_default

    def get(key):
        return ood[key] if key in ood else schema_default("ood", key)

    return {"ood": tuple(ood["sets"]), "svhn_path": ood.get("svhn"), "noise_severity": ood["noise_severity"],
            "svhn_subset": get("svhn_subset"), "svhn_subset_seed": get("svhn_subset_seed")}


@dataclass(frozen=True)
class Failure:
    """A network (or one seed of it) that produced no logits on ``dataset``, and why."""

    index: int
    source: str
    reason: str
    seed: int | None = None
    dataset: str | None = None


@torch.inference_mode()
def _run(net: torch.nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([net(batch).float() for batch in images.split(batch_size)])


@dataclass(frozen=True)
class Launched:
    """Passes enqueued on a device (:func:`launch_logits`): their logits and OoD logits, and on
    CUDA the event recorded after their copies to (pinned) host memory were enqueued."""

    logits: torch.Tensor
    ood: dict[str, torch.Tensor]
    copied: torch.cuda.Event | None = None

    def host(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits and OoD logits on the CPU, once their copies are done (an error of the
        device's work surfaces here, as a RuntimeError). On CUDA they are copied out of the
        pinned buffers, which then go back to PyTorch's pinned-memory cache for the next
        network: allocating pinned memory anew is a point where CUDA may wait for the device."""
        if self.copied is None:
            return self.logits.cpu(), {name: v.cpu() for name, v in self.ood.items()}
        self.copied.synchronize()
        return self.logits.clone(), {name: v.clone() for name, v in self.ood.items()}


def enqueue_to_host(logits: torch.Tensor, ood: dict[str, torch.Tensor]) -> Launched:
    """``logits`` and ``ood`` as :class:`Launched`: on CUDA their copies to pinned host memory
    enqueued now, right behind the passes that make them (on their device's stream), so that
    waiting for them (:meth:`Launched.host`) does not wait for work enqueued later (a plain
    ``.cpu()`` then would queue behind it); elsewhere as they are."""
    if logits.device.type != "cuda":
        return Launched(logits, ood)
    host, host_ood = _to_host_async(logits), {name: _to_host_async(v) for name, v in ood.items()}
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(logits.device))
    return Launched(host, host_ood, copied)


def module_to_device(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``module`` on ``device``. On CUDA its weights are packed, per dtype, into one pinned
    buffer and sent in one non-blocking copy; each parameter and buffer becomes a view of the
    copy, contiguous. A plain ``.to`` would wait for every kernel already enqueued (PyTorch
    synchronises the stream after a copy from pageable memory), making the host wait for the
    last network before it could enqueue the next; one buffer per network also keeps the
    pinned-memory cache's blocks few and reusable, and the copies to one."""
    device = torch.device(device)
    if device.type != "cuda":
        return module.to(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    moving = [t for t in itertools.chain(module.parameters(), module.buffers()) if t.device != device]
    placed = packed_copies(moving, device, pin_memory=True)
    return module._apply(lambda t: placed.get(id(t), t))


def packed_copies(tensors: Sequence[torch.Tensor], device: torch.device, pin_memory: bool = False
                  ) -> dict[int, torch.Tensor]:
    """Copies of ``tensors`` on ``device``, keyed by ``id`` of the original (a tensor given twice
    is copied once): per dtype, one host buffer (``pin_memory``: page-locked) holding them all,
    sent in one non-blocking copy; each copy a contiguous view of it."""
    by_dtype: dict[torch.dtype, dict[int, torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, {}).setdefault(id(t), t)
    placed: dict[int, torch.Tensor] = {}
    for dtype, unique in by_dtype.items():
        originals = list(unique.values())
        sizes = [t.numel() for t in originals]
        host = torch.empty(sum(sizes), dtype=dtype, pin_memory=pin_memory)
        torch.cat([t.detach().reshape(-1) for t in originals], out=host)
        flat = host.to(device, non_blocking=True)
        for t, piece in zip(originals, flat.split(sizes)):
            placed[id(t)] = piece.view(t.shape)
    return placed


def _to_host_async(t: torch.Tensor) -> torch.Tensor:
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


def launch_logits(net: torch.nn.Module, eval_data: EvalData, batch_size: int = 1000) -> Launched:
    """One model's passes over the evaluation set and its OoD sets, enqueued on the data's
    device with the copies of their float32 logits to the host (:func:`enqueue_to_host`): the
    host does not wait; :func:`finish_logits` waits for this model's copies only."""
    return enqueue_to_host(_run(net, eval_data.images, batch_size),
                           {name: _run(net, images, batch_size) for name, images in eval_data.ood.items()})


def finish_logits(launched: Launched, eval_data: EvalData, num_classes: int
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`launch_logits`' output on the CPU, once its copies are done; ValueError naming the
    problem if the logits are not ``(N, num_classes)`` or not finite."""
    logits, ood = launched.host()
    if logits.ndim == 2 and logits.shape[0] == eval_data.n and logits.shape[1] != num_classes:
        raise ValueError(f"the output has {logits.shape[1]} classes, {eval_data.dataset} has {num_classes} "
                         f"(logits of shape {tuple(logits.shape)})")
    if logits.shape != (eval_data.n, num_classes):
        raise ValueError(f"logits of shape {tuple(logits.shape)}, expected {(eval_data.n, num_classes)}")
    bad = ~torch.isfinite(logits)
    if bool(bad.any()):
        raise ValueError(f"non-finite logits for {int(bad.any(dim=1).sum())} of {eval_data.n} images")
    return logits, ood


def module_logits(net: torch.nn.Module, eval_data: EvalData, num_classes: int, batch_size: int = 1000
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One model's float32 logits on the evaluation set and its OoD sets, on the CPU; ValueError
    naming the problem if the output is not ``(N, num_classes)`` or not finite. ``net`` is on
    the evaluation data's device, in eval mode."""
    return finish_logits(launch_logits(net, eval_data, batch_size), eval_data, num_classes)
