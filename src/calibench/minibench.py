"""The embedded mini benchmark: small NATS-format archives and datasets, made here.

NOT NATS-Bench results. The real archives (~1 TB) cannot be fetched where this
project is developed and tested, so the default run and the tests use a mini
benchmark written in exactly the real on-disk formats (nats-bench-facts.md):

* ``NATS-tss-v1_0-3ffb9-full/`` and ``NATS-sss-v1_0-50262-full/``: ``meta.pickle.pbz2``
  plus one ``{index:06d}.pickle.pbz2`` per architecture, readable by
  ``nats_bench.create(dir, space, fast_mode=True)``. The architectures are real
  members of each space (TSS cells, SSS channel strings), re-indexed 0..n-1 in a
  mini meta; the weights are those of real NATS network definitions.
* ``datasets/``: CIFAR-10 ``test_batch``, CIFAR-100 ``test``, ImageNet16-120
  ``val_data`` and an SVHN ``test_32x32.mat``, in their real formats, holding
  synthetic images: per-class smooth colour patterns, shifted and noised.

How the networks get honest, varied accuracy and calibration: each body keeps its
random initialisation (batch-norm statistics estimated on a small synthetic
training split), and its linear classifier is fitted on that split by L-BFGS with
an architecture- and seed-dependent weight decay and iteration budget. Small
training splits make heads over-fit to different degrees, so accuracy and
over-confidence differ across architectures. The "recorded" accuracy stored in the
archive is each network's real accuracy on the mini test set; only final-epoch
values are stored in the training-curve fields.
"""

from __future__ import annotations

import bz2
import collections
import hashlib
import pickle
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import data as data_io
from .data import IMAGE_SIZE, NUM_CLASSES
from .atomic import atomic_write
from .archive import arch_file
from .archstr import SSS_CHANNEL_CHOICES, SSS_GENOTYPE, TSS_OPS, format_tss
from .networks import build_network, count_parameters, inference_network, multiply_adds

TSS_DIR = "NATS-tss-v1_0-3ffb9-full"
SSS_DIR = "NATS-sss-v1_0-50262-full"
DATASET_DIR = "datasets"
# hp -> (epochs, seeds), as in the real archives. Weights are stored for the default
# schedules only (TSS 200, SSS 90): compressing weights is most of the build time, and
# the other schedules' records keep ``net_state_dict = None`` like the real SSS hp 01.
SCHEDULES = {
    "tss": {"12": (12, (111,)), "200": (200, (777,))},
    "sss": {"01": (1, (777,)), "12": (12, (777,)), "90": (90, (777,))},
}
BN_IMAGES = 100  # training images that set the batch-norm statistics
WEIGHTLESS = {("tss", "12"), ("sss", "01"), ("sss", "12")}
EVAL_NAMES = {"cifar10": ["ori-test"], "cifar100": ["ori-test", "x-valid", "x-test"],
              "ImageNet16-120": ["ori-test", "x-valid", "x-test"]}


@dataclass(frozen=True)
class MiniBenchSpec:
    """Sizes of a mini benchmark; the defaults build in well under a minute on 2 cores."""

    n_tss: int = 6
    n_sss: int = 6
    n_test: int = 300  # test images per dataset (ImageNet16-120's file adds 10 % distractors)
    n_train: int = 100  # training split for the heads (at least 3 images per class)
    seed: int = 0
    second_seed: bool = False  # also store TSS hp-200 seed 888, to exercise multi-seed runs


def write_pbz2(path: Path, obj) -> None:
    """bz2-compressed pickle (protocol 4), as NATS-Bench archives are written; atomic."""
    payload = bz2.compress(pickle.dumps(obj, protocol=4))
    atomic_write(path, lambda f: f.write(payload))


# ---------------------------------------------------------------- synthetic images

def _class_patterns(rng: np.random.Generator, num_classes: int, size: int) -> np.ndarray:
    """One smooth colour pattern per class: a few random 2-D waves per channel, in [0, 1]."""
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    waves = 4
    fy, fx = rng.uniform(0.5, 3.0, size=(2, num_classes, 3, waves))
    phase = rng.uniform(0, 2 * np.pi, size=(num_classes, 3, waves))
    amp = rng.uniform(0.3, 1.0, size=(num_classes, 3, waves))
    arg = 2 * np.pi * (fy[..., None, None] * yy + fx[..., None, None] * xx) + phase[..., None, None]
    pattern = (amp[..., None, None] * np.sin(arg)).sum(axis=2)
    pattern -= pattern.min(axis=(1, 2, 3), keepdims=True)
    pattern /= pattern.max(axis=(1, 2, 3), keepdims=True)
    colour = rng.uniform(0.0, 1.0, size=(num_classes, 3, 1, 1))  # each class also has its own tint
    return 0.5 * pattern + 0.5 * colour  # (C, 3, H, W) in [0, 1]


def synthetic_images(rng: np.random.Generator, patterns: np.ndarray, labels: np.ndarray, noise: float) -> np.ndarray:
    """uint8 images (N, 3, H, W): each label's pattern, randomly shifted, contrast-jittered and noised."""
    n = len(labels)
    size = patterns.shape[-1]
    images = patterns[labels]
    shift = rng.integers(-size // 8, size // 8 + 1, size=(n, 2))
    rows = (np.arange(size)[None, :] - shift[:, :1]) % size
    cols = (np.arange(size)[None, :] - shift[:, 1:]) % size
    images = images[np.arange(n)[:, None, None, None], np.arange(3)[None, :, None, None],
                     rows[:, None, :, None], cols[:, None, None, :]]
    contrast = rng.uniform(0.5, 1.0, size=(n, 1, 1, 1))
    offset = rng.uniform(0.0, 0.5, size=(n, 1, 1, 1)) * (1 - contrast)
    images = images * contrast + offset + rng.normal(0, noise, size=images.shape)
    return (np.clip(images, 0, 1) * 255).round().astype(np.uint8)


@dataclass
class _DatasetSplits:
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray  # 0-based, after ImageNet16 filtering


def _make_dataset(rng: np.random.Generator, dataset: str, spec: MiniBenchSpec) -> _DatasetSplits:
    k, size = NUM_CLASSES[dataset], IMAGE_SIZE[dataset]
    patterns = _class_patterns(rng, k, size)
    noise = {"cifar10": 0.25, "cifar100": 0.12, "ImageNet16-120": 0.12}[dataset]
    train_labels = np.arange(max(spec.n_train, 3 * k)) % k  # at least 3 images per class
    rng.shuffle(train_labels)
    test_labels = rng.integers(0, k, size=spec.n_test)
    return _DatasetSplits(
        synthetic_images(rng, patterns, train_labels, noise),
        train_labels,
        synthetic_images(rng, patterns, test_labels, noise),
        test_labels,
    )


def _write_datasets(root: Path, rng: np.random.Generator, splits: dict[str, _DatasetSplits]) -> None:
    data_io.write_cifar10_test(root, splits["cifar10"].test_images, splits["cifar10"].test_labels)
    data_io.write_cifar100_test(root, splits["cifar100"].test_images, splits["cifar100"].test_labels)
    # ImageNet16 val_data is 1-based over 1,000 classes; the reader keeps 1..120.
    inet = splits["ImageNet16-120"]
    n_other = len(inet.test_labels) // 10
    other_images = rng.integers(0, 256, size=(n_other, 3, 16, 16), dtype=np.uint8)
    other_labels = rng.integers(121, 1001, size=n_other)
    order = rng.permutation(len(inet.test_labels) + n_other)
    images = np.concatenate([inet.test_images, other_images])[order]
    labels = np.concatenate([inet.test_labels + 1, other_labels])[order]
    data_io.write_imagenet16_val(root, images, labels)
    # A small SVHN-format OoD set: other patterns, same 32x32 format.
    svhn_labels = rng.integers(0, 10, size=len(splits["cifar10"].test_labels) // 2)
    svhn = synthetic_images(rng, _class_patterns(rng, 10, 32), svhn_labels, 0.2)
    data_io.write_svhn_test(root / "svhn" / "test_32x32.mat", svhn, svhn_labels)


# ---------------------------------------------------------------- architectures

def sample_tss_archs(rng: random.Random, n: int) -> list[str]:
    """n distinct TSS cells. The first two are isomorphic (node 2 is conv3x3 of the input
    either way, since node 1 = skip of the input), so representative expansion is exercised."""
    a = (("skip_connect", 0),), (("none", 0), ("nor_conv_3x3", 1)), (("none", 0), ("none", 1), ("nor_conv_3x3", 2))
    b = (("skip_connect", 0),), (("nor_conv_3x3", 0), ("none", 1)), (("none", 0), ("none", 1), ("nor_conv_3x3", 2))
    archs = [format_tss(a), format_tss(b)]
    while len(archs) < n:
        ops = [rng.choice(TSS_OPS) for _ in range(6)]
        cell = ((ops[0], 0),), ((ops[1], 0), (ops[2], 1)), ((ops[3], 0), (ops[4], 1), (ops[5], 2))
        s = format_tss(cell)
        if s not in archs:
            archs.append(s)
    return archs[:n]


def sample_sss_archs(rng: random.Random, n: int) -> list[str]:
    archs = ["8:8:8:8:8"]
    while len(archs) < n:
        s = ":".join(str(rng.choice(SSS_CHANNEL_CHOICES)) for _ in range(5))
        if s not in archs:
            archs.append(s)
    return archs[:n]


# ---------------------------------------------------------------- networks

def _calibrate_batch_norm(net: torch.nn.Module, images: torch.Tensor) -> None:
    """Estimate every BN layer's running statistics on ``images`` (cumulative average)."""
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    net.train()
    with torch.no_grad():
        for batch in images.split(256):
            net(batch)
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.1
    net.eval()


def _features(net: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Pooled features (the classifier's input), through the fast inference form."""
    fast = inference_network(net)
    captured = []
    hook = fast.classifier.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    with torch.inference_mode():
        fast(images)
    hook.remove()
    return torch.cat(captured).clone()


def _fit_head(features: torch.Tensor, labels: torch.Tensor, num_classes: int, weight_decay: float,
              iterations: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    d = features.shape[1]
    weight = (torch.randn(num_classes, d, generator=generator) * 0.01).requires_grad_()
    bias = torch.zeros(num_classes, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=iterations, history_size=20,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(features @ weight.T + bias, labels) + weight_decay * (weight**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return weight.detach(), bias.detach()


def _stable_seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


def _result_record(dataset: str, hp_epochs: int, seed: int, state_dict, accuracy: float, train_accuracy: float,
                   loss: float, arch_config: dict, params: float, flops: float) -> dict:
    """One ``all_results[(dataset, seed)]`` entry, with the keys of a real archive."""
    last = hp_epochs - 1
    names = EVAL_NAMES[dataset]
    return {
        "name": dataset,
        "train_acc1es": {last: 100.0 * train_accuracy},
        "train_acc5es": None,
        "train_losses": {last: loss},
        "train_times": {last: 0.0},
        "arch_config": arch_config,
        "params": float(params),
        "flop": float(flops),
        "seed": f"{seed:04d}",
        "epochs": hp_epochs,
        "latency": [0.0],
        "eval_names": list(names),
        "eval_acc1es": {f"{name}@{last}": 100.0 * accuracy for name in names},
        "eval_times": {f"{name}@{last}": 0.0 for name in names},
        "eval_losses": {f"{name}@{last}": 0.0 for name in names},
        "net_state_dict": state_dict,
    }


def _schedules(space: str, spec: MiniBenchSpec) -> dict[str, tuple[int, tuple[int, ...]]]:
    schedules = dict(SCHEDULES[space])
    if space == "tss" and spec.second_seed:
        schedules["200"] = (200, (777, 888))
    return schedules


def _build_arch_file(space: str, index: int, arch_str: str, splits: dict[str, _DatasetSplits], spec: MiniBenchSpec):
    per_hp = collections.OrderedDict()
    schedules = _schedules(space, spec)
    records = {hp: {} for hp in schedules}
    for dataset, split in splits.items():
        k = NUM_CLASSES[dataset]
        torch.manual_seed(_stable_seed(spec.seed, space, arch_str, dataset))
        net = build_network(space, arch_str, k)
        train_x = data_io.normalize(split.train_images, dataset)
        test_x = data_io.normalize(split.test_images, dataset)
        _calibrate_batch_norm(net, train_x[:BN_IMAGES])
        train_features, test_features = _features(net, train_x), _features(net, test_x)
        train_y = torch.from_numpy(split.train_labels)
        test_y = torch.from_numpy(split.test_labels)
        if space == "tss":
            arch_config = {"channel": 16, "num_cells": 5, "arch_str": arch_str, "class_num": k}
        else:
            arch_config = {"name": "infer.shape.tiny", "channels": arch_str, "arch_str": arch_str,
                           "genotype": SSS_GENOTYPE, "class_num": k}
        params = count_parameters(net)
        flops = multiply_adds(net, IMAGE_SIZE[dataset]) / 1e6
        for hp, (epochs, seeds) in schedules.items():
            for seed in seeds:
                gen = torch.Generator().manual_seed(_stable_seed(spec.seed, space, arch_str, dataset, hp, seed))
                weight_decay = float(10 ** (-5 + 4 * torch.rand(1, generator=gen)))
                iterations = max(3, int(epochs ** 0.5 * 4 * float(0.5 + torch.rand(1, generator=gen))))
                w, b = _fit_head(train_features, train_y, k, weight_decay, iterations, gen)
                state_dict = None
                if (space, hp) not in WEIGHTLESS:
                    net.classifier.weight.data.copy_(w)
                    net.classifier.bias.data.copy_(b)
                    state_dict = {key: v.detach().clone() for key, v in net.state_dict().items()}
                with torch.no_grad():
                    logits_test = test_features @ w.T + b
                    logits_train = train_features @ w.T + b
                accuracy = float((logits_test.argmax(1) == test_y).double().mean())
                train_accuracy = float((logits_train.argmax(1) == train_y).double().mean())
                loss = float(torch.nn.functional.cross_entropy(logits_train, train_y))
                records[hp][(dataset, seed)] = _result_record(
                    dataset, epochs, seed, state_dict, accuracy, train_accuracy, loss, arch_config, params, flops)
    for hp, (_, seeds) in schedules.items():
        per_hp[hp] = {
            "arch_index": index,
            "arch_str": arch_str,
            "all_results": records[hp],
            "dataset_seed": {dataset: list(seeds) for dataset in splits},
            "clear_net_done": (space, hp) in WEIGHTLESS,
        }
    return per_hp


def build_minibench(out: str | Path, spec: MiniBenchSpec = MiniBenchSpec(), progress: bool = False) -> Path:
    """Write the mini benchmark under ``out``; deterministic for a given ``spec``."""
    out = Path(out)
    rng = np.random.default_rng(spec.seed)
    py_rng = random.Random(spec.seed)
    splits = {dataset: _make_dataset(rng, dataset, spec) for dataset in NUM_CLASSES}
    _write_datasets(out / DATASET_DIR, rng, splits)
    archs = {"tss": sample_tss_archs(py_rng, spec.n_tss), "sss": sample_sss_archs(py_rng, spec.n_sss)}
    jobs = [(space, i, a) for space in ("tss", "sss") for i, a in enumerate(archs[space])]
    iterator = jobs
    if progress:
        from tqdm import tqdm

        iterator = tqdm(jobs, desc="mini benchmark networks", unit="arch")
    for space, index, arch_str in iterator:
        directory = out / (TSS_DIR if space == "tss" else SSS_DIR)
        write_pbz2(arch_file(directory, index), _build_arch_file(space, index, arch_str, splits, spec))
    for space, directory in (("tss", TSS_DIR), ("sss", SSS_DIR)):
        meta = {"meta_archs": archs[space], "total_archs": len(archs[space]), "arch2infos": None,
                "evaluated_indexes": set()}
        write_pbz2(out / directory / "meta.pickle.pbz2", meta)
    (out / "README.txt").write_text(
        "calibench mini benchmark: synthetic data and randomly initialised NATS networks with fitted\n"
        "classifier heads, written in NATS-Bench's on-disk formats. These are NOT NATS-Bench results.\n"
        f"spec: {spec}\n"
    )
    return out
