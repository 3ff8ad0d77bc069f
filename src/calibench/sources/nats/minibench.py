"""The embedded mini benchmark: small NATS-format archives and datasets, made here.

NOT NATS-Bench results. The real archives (~1 TB) cannot be fetched where this
project is developed and tested, so the default run and the tests use a mini
benchmark written in exactly the real on-disk formats (docs/nats-bench.md):

* ``NATS-tss-v1_0-3ffb9-full/`` and ``NATS-sss-v1_0-50262-full/``: ``meta.pickle.pbz2``
  plus one ``{index:06d}.pickle.pbz2`` per architecture, readable by
  ``nats_bench.create(dir, space, fast_mode=True)``. The architectures are real
  members of each space (TSS cells, SSS channel strings), re-indexed 0..n-1 in a
  mini meta; the weights are those of real NATS network definitions. Each has a known
  NATS-Bench index (:mod:`calibench.sources.nats.indices`: TSS cells are drawn from a table
  of 64 published cells, SSS indices are computed), which the population records
  (``nats_index``) and joins by index use.
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

A second TSS schedule (``MiniBenchSpec(tss_hp12_weights=True)``, ``calibench make-minibench
--tss-hp12-weights``, config ``minibench.tss_hp12_weights: true``), for the comparison of
training schedules (Tao et al.'s question 6, Fig. 6c: 12 against 200 epochs): the TSS hp 12
records also keep their weights. NOT a 12-epoch training, and NOT NATS-Bench results: the
hp 12 network of an (architecture, dataset) is the hp 200 one (the same random body and
batch-norm statistics) with its own classifier head, fitted like every head (above) but
with the budget of a 12-epoch schedule (about a quarter of hp 200's L-BFGS iterations) and
its own weight decay, so its accuracy and calibration differ from hp 200's as a less
fitted network's do. These heads are fitted in every build anyway (their accuracies fill
the hp 12 records); the option only keeps their state dicts, so the build stays
deterministic and hp 200's records are the same (decoded) with and without it.

Real-size archives (``MiniBenchSpec(real_size=True)``, ``calibench make-minibench
--real-size``), for loading benchmarks: each architecture file is shaped like a real
``-full`` file: every hp (TSS 12, 200; SSS 01, 12, 90), every dataset including
``cifar10-valid`` (which uses the CIFAR-10 images), the real seeds (TSS hp 200: 777, 888,
999; TSS hp 12: 111, and 777 for cifar10-valid; SSS hp 90: 777; SSS hp 12: 777, 888,
999), weights wherever the real files keep them (17 state dicts per TSS file, 16 per SSS
file; SSS hp 01 has none) and training curves for every epoch. Architectures are chosen
so the mean compressed file size is near the real archives' (about 27.5 MB TSS, 17.4 MB
SSS). What the state dicts are: the default schedule's first seed (TSS hp 200 / SSS hp 90,
seed 777) holds the network described above (calibrated body, fitted head); every other
stored state dict is a separately seeded random initialisation of the same architecture
with randomised batch-norm affine parameters and running statistics and a random
classifier, so each has its own float entropy as trained weights do. It is not fitted:
its record's accuracy (and, standing in for the training figures, its loss) is that
network's real, near-chance, accuracy on the mini test set. Every state dict loads with ``strict=True`` into :func:`calibench.sources.nats.networks.build_network`.
"""

from __future__ import annotations

import bz2
import collections
import hashlib
import pickle
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from calibench.inference import data as data_io
from calibench.inference.data import IMAGE_SIZE, NUM_CLASSES
from calibench.atomic import atomic_write
from calibench.sources.nats.archive import arch_file
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, SSS_GENOTYPE
from calibench.sources.nats.indices import TSS_KNOWN
from calibench.sources.nats.minibench_images import class_patterns, synthetic_images
from calibench.sources.nats.networks import build_network, count_parameters, inference_network, multiply_adds

TSS_DIR = "NATS-tss-v1_0-3ffb9-full"
SSS_DIR = "NATS-sss-v1_0-50262-full"
DATASET_DIR = "datasets"
# hp -> (epochs, seeds), as in the real archives. Weights are stored for the default
# schedules only (TSS 200, SSS 90; also TSS 12 with ``tss_hp12_weights``): compressing
# weights is most of the build time, and the other schedules' records keep
# ``net_state_dict = None`` like the real SSS hp 01 (calibench.config.settings.MINIBENCH_WEIGHTED_HPS).
SCHEDULES = {
    "tss": {"12": (12, (111,)), "200": (200, (777,))},
    "sss": {"01": (1, (777,)), "12": (12, (777,)), "90": (90, (777,))},
}
BN_IMAGES = 100  # training images that set the batch-norm statistics
WEIGHTLESS = {("tss", "12"), ("sss", "01"), ("sss", "12")}
EVAL_NAMES = {"cifar10": ["ori-test"], "cifar100": ["ori-test", "x-valid", "x-test"],
              "ImageNet16-120": ["ori-test", "x-valid", "x-test"], "cifar10-valid": ["x-valid", "ori-test"]}

# Real-size archives: the real -full files' hps, datasets and seeds (docs/nats-bench.md).
REAL_DATASETS = ("cifar10-valid", "cifar10", "cifar100", "ImageNet16-120")
REAL_SCHEDULES = {  # hp -> (epochs, {dataset: seeds})
    "tss": {"12": (12, {"cifar10-valid": (111, 777), "cifar10": (111,), "cifar100": (111,), "ImageNet16-120": (111,)}),
            "200": (200, {d: (777, 888, 999) for d in REAL_DATASETS})},
    "sss": {"01": (1, {d: (777,) for d in REAL_DATASETS}),
            "12": (12, {d: (777, 888, 999) for d in REAL_DATASETS}),
            "90": (90, {d: (777,) for d in REAL_DATASETS})},
}
REAL_WEIGHTLESS = {("sss", "01")}
PRIMARY = {"tss": ("200", 777), "sss": ("90", 777)}  # the schedule and seed whose network is fitted
# Mean compressed size of a real -full file (430 GB / 15,625 TSS; 570 GB / 32,768 SSS), and the
# bz2-compressed bytes per parameter of a state dict of random-init float32 weights (measured:
# 3.66 TSS, 3.74 SSS): the architectures of a real-size archive are chosen so that their mean
# parameter count gives that mean file size.
REAL_MEAN_FILE_BYTES = {"tss": 27.5e6, "sss": 17.4e6}
BZ2_BYTES_PER_PARAM = {"tss": 3.66, "sss": 3.74}
REAL_STATE_DICTS = {"tss": 17, "sss": 16}


@dataclass(frozen=True)
class MiniBenchSpec:
    """Sizes of a mini benchmark; the defaults build in well under a minute on 2 cores."""

    n_tss: int = 6
    n_sss: int = 6
    # Test images: one number for every dataset, or {dataset: number} naming each of the three
    # (ImageNet16-120's file adds 10 % distractors; SVHN has half CIFAR-10's).
    n_test: int | Mapping[str, int] = 300
    n_train: int = 100  # training split for the heads (at least 3 images per class)
    seed: int = 0
    second_seed: bool = False  # also store TSS hp-200 seed 888, to exercise multi-seed runs
    real_size: bool = False  # archive files shaped and sized like the real -full files (module docstring)
    tss_hp12_weights: bool = False  # also keep the TSS hp 12 state dicts (module docstring: not real results)

    def __post_init__(self):
        if isinstance(self.n_test, Mapping):
            if set(self.n_test) != set(NUM_CLASSES):
                raise ValueError(f"n_test: a mapping needs exactly the datasets {sorted(NUM_CLASSES)}, "
                                 f"got {sorted(self.n_test)}")
            object.__setattr__(self, "n_test", {d: int(self.n_test[d]) for d in NUM_CLASSES})  # in a fixed order

    def __hash__(self):  # a mapping n_test is not hashable by itself
        return hash(tuple((f, tuple(v.items()) if isinstance(v, dict) else v) for f, v in vars(self).items()))

    def test_size(self, dataset: str) -> int:
        """Test images of ``dataset`` (before ImageNet16-120's distractors)."""
        return self.n_test[dataset] if isinstance(self.n_test, Mapping) else self.n_test

    def describe(self) -> str:
        """The dataclass repr, without the options added later when they are off (so default
        READMEs stay as they were)."""
        text = repr(self)
        for name in ("real_size", "tss_hp12_weights"):
            if not getattr(self, name):
                text = text.replace(f", {name}=False", "")
        return text


def write_pbz2(path: Path, obj) -> None:
    """bz2-compressed pickle (protocol 4), as NATS-Bench archives are written; atomic."""
    payload = bz2.compress(pickle.dumps(obj, protocol=4))
    atomic_write(path, lambda f: f.write(payload))


# ---------------------------------------------------------------- synthetic images

@dataclass
class _DatasetSplits:
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray  # 0-based, after ImageNet16 filtering


def _make_dataset(rng: np.random.Generator, dataset: str, spec: MiniBenchSpec) -> _DatasetSplits:
    k, size = NUM_CLASSES[dataset], IMAGE_SIZE[dataset]
    patterns = class_patterns(rng, k, size)
    noise = {"cifar10": 0.25, "cifar100": 0.12, "ImageNet16-120": 0.12}[dataset]
    train_labels = np.arange(max(spec.n_train, 3 * k)) % k  # at least 3 images per class
    rng.shuffle(train_labels)
    test_labels = rng.integers(0, k, size=spec.test_size(dataset))
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
    # A small SVHN-format OoD set: other patterns, same 32x32 format; half CIFAR-10's test size.
    svhn_labels = rng.integers(0, 10, size=len(splits["cifar10"].test_labels) // 2)
    svhn = synthetic_images(rng, class_patterns(rng, 10, 32), svhn_labels, 0.2)
    data_io.write_svhn_test(root / "svhn" / "test_32x32.mat", svhn, svhn_labels)


# ---------------------------------------------------------------- architectures

def _tss_cells(n: int) -> tuple[list[str], list[str]]:
    """The isomorphic pair and the other cells of :data:`TSS_KNOWN` (the mini benchmark's TSS
    cells, each of known NATS-Bench index); ValueError if ``n`` is more than it holds."""
    if n > len(TSS_KNOWN):
        raise ValueError(f"n_tss = {n}: the mini benchmark draws its TSS cells from the {len(TSS_KNOWN)} cells of "
                         "known NATS-Bench index (calibench.sources.nats.indices.TSS_KNOWN)")
    cells = [arch for _, arch in TSS_KNOWN]
    return cells[:2], cells[2:]


def sample_tss_archs(rng: random.Random, n: int) -> list[str]:
    """n distinct TSS cells of known NATS-Bench index (:data:`TSS_KNOWN`, at most 64). The
    first two are its isomorphic pair (node 2 is conv3x3 of the input either way, since node
    1 = skip of the input), so representative expansion is exercised; the others a random
    choice of the rest."""
    pair, rest = _tss_cells(n)
    return (pair + rng.sample(rest, max(0, n - len(pair))))[:n]


def sample_sss_archs(rng: random.Random, n: int) -> list[str]:
    archs = ["8:8:8:8:8"]
    while len(archs) < n:
        s = ":".join(str(rng.choice(SSS_CHANNEL_CHOICES)) for _ in range(5))
        if s not in archs:
            archs.append(s)
    return archs[:n]


def sample_real_size_archs(space: str, rng: random.Random, n: int) -> list[str]:
    """n distinct architectures whose mean size makes real-size archive files of the real mean size.

    TSS starts with the same isomorphic pair as :func:`sample_tss_archs`; then each next
    architecture is, of 16 random candidates (TSS: unused cells of :data:`TSS_KNOWN`), the
    one that brings the running mean of parameter counts closest to the target
    (``REAL_MEAN_FILE_BYTES`` over the state dicts per file and ``BZ2_BYTES_PER_PARAM``)."""
    target = REAL_MEAN_FILE_BYTES[space] / REAL_STATE_DICTS[space] / BZ2_BYTES_PER_PARAM[space]
    archs = sample_tss_archs(rng, 2)[:n] if space == "tss" else []
    pool = _tss_cells(n)[1] if space == "tss" else []
    sizes = [_parameters(space, a) for a in archs]
    while len(archs) < n:
        if space == "tss":
            unused = [c for c in pool if c not in archs]
            candidates = rng.sample(unused, min(16, len(unused)))
        else:
            candidates = [":".join(str(rng.choice(SSS_CHANNEL_CHOICES)) for _ in range(5)) for _ in range(16)]
        candidates = [c for c in dict.fromkeys(candidates) if c not in archs]
        if not candidates:
            continue
        best = min(candidates, key=lambda c: abs((sum(sizes) + _parameters(space, c)) / (len(sizes) + 1) - target))
        archs.append(best)
        sizes.append(_parameters(space, best))
    return archs


def _parameters(space: str, arch_str: str) -> int:
    """Parameters of the network (classifier at 100 classes), as counted for the size target."""
    return round(count_parameters(build_network(space, arch_str, 100)) * 1e6)


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
                   loss: float, arch_config: dict, params: float, flops: float, curves: bool = False) -> dict:
    """One ``all_results[(dataset, seed)]`` entry, with the keys of a real archive.

    ``curves``: every epoch has a value, as in the real files (a linear ramp to the final
    value, which is exact); otherwise only the last epoch."""
    last = hp_epochs - 1
    names = EVAL_NAMES[dataset]
    if not curves:
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
    epochs = range(hp_epochs)

    def at(final: float, e: int) -> float:
        return final if e == last else final * (e + 1) / hp_epochs

    def ramp(final: float) -> dict:
        return {e: at(final, e) for e in epochs}

    return {
        "name": dataset,
        "train_acc1es": ramp(100.0 * train_accuracy),
        "train_acc5es": ramp(100.0 * min(1.0, 2 * train_accuracy)),
        "train_losses": {e: loss * hp_epochs / (e + 1) for e in epochs},
        "train_times": collections.OrderedDict((e, 10.0) for e in epochs),
        "arch_config": arch_config,
        "params": float(params),
        "flop": float(flops),
        "seed": f"{seed:04d}",
        "epochs": hp_epochs,
        "latency": [0.0],
        "eval_names": list(names),
        "eval_acc1es": {f"{name}@{e}": at(100.0 * accuracy, e) for name in names for e in epochs},
        "eval_times": {f"{name}@{e}": 1.0 for name in names for e in epochs},
        "eval_losses": {f"{name}@{e}": loss * hp_epochs / (e + 1) for name in names for e in epochs},
        "net_state_dict": state_dict,
    }


def weightless(space: str, hp: str, spec: MiniBenchSpec) -> bool:
    """Whether a (non-real-size) mini benchmark built from ``spec`` keeps no weights for ``hp``."""
    if (space, hp) == ("tss", "12") and spec.tss_hp12_weights:
        return False
    return (space, hp) in WEIGHTLESS


def _schedules(space: str, spec: MiniBenchSpec) -> dict[str, tuple[int, tuple[int, ...]]]:
    schedules = dict(SCHEDULES[space])
    if space == "tss" and spec.second_seed:
        schedules["200"] = (200, (777, 888))
    return schedules


def _prepared_network(space: str, arch_str: str, dataset: str, data_name: str, split: "_DatasetSplits",
                      spec: MiniBenchSpec):
    """A network of one record: seeded from ``dataset`` (the record's name), batch norm set
    and features taken on ``data_name``'s images; with the normalised test images, its
    arch config, params and FLOPs."""
    k = NUM_CLASSES[data_name]
    torch.manual_seed(_stable_seed(spec.seed, space, arch_str, dataset))
    net = build_network(space, arch_str, k)
    train_x = data_io.normalize(split.train_images, data_name)
    test_x = data_io.normalize(split.test_images, data_name)
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
    flops = multiply_adds(net, IMAGE_SIZE[data_name]) / 1e6
    return net, test_x, train_features, test_features, train_y, test_y, arch_config, params, flops


def _fitted_head_record(net, train_features, test_features, train_y, test_y, epochs: int, seed: int,
                        keep_weights: bool):
    """Fit ``net``'s classifier head (weight decay and iteration budget drawn from ``seed``,
    the budget growing with ``epochs``); returns its state dict (None without weights),
    test accuracy, training accuracy and training loss."""
    gen = torch.Generator().manual_seed(seed)
    weight_decay = float(10 ** (-5 + 4 * torch.rand(1, generator=gen)))
    iterations = max(3, int(epochs ** 0.5 * 4 * float(0.5 + torch.rand(1, generator=gen))))
    w, b = _fit_head(train_features, train_y, net.classifier.out_features, weight_decay, iterations, gen)
    state_dict = None
    if keep_weights:
        net.classifier.weight.data.copy_(w)
        net.classifier.bias.data.copy_(b)
        state_dict = {key: v.detach().clone() for key, v in net.state_dict().items()}
    with torch.no_grad():
        logits_test = test_features @ w.T + b
        logits_train = train_features @ w.T + b
    accuracy = float((logits_test.argmax(1) == test_y).double().mean())
    train_accuracy = float((logits_train.argmax(1) == train_y).double().mean())
    loss = float(torch.nn.functional.cross_entropy(logits_train, train_y))
    return state_dict, accuracy, train_accuracy, loss


def _build_arch_file(space: str, index: int, arch_str: str, splits: dict[str, _DatasetSplits], spec: MiniBenchSpec):
    per_hp = collections.OrderedDict()
    schedules = _schedules(space, spec)
    records = {hp: {} for hp in schedules}
    for dataset, split in splits.items():
        net, _, train_features, test_features, train_y, test_y, arch_config, params, flops = _prepared_network(
            space, arch_str, dataset, dataset, split, spec)
        for hp, (epochs, seeds) in schedules.items():
            for seed in seeds:
                state_dict, accuracy, train_accuracy, loss = _fitted_head_record(
                    net, train_features, test_features, train_y, test_y, epochs,
                    _stable_seed(spec.seed, space, arch_str, dataset, hp, seed),
                    keep_weights=not weightless(space, hp, spec))
                records[hp][(dataset, seed)] = _result_record(
                    dataset, epochs, seed, state_dict, accuracy, train_accuracy, loss, arch_config, params, flops)
    for hp, (_, seeds) in schedules.items():
        per_hp[hp] = {
            "arch_index": index,
            "arch_str": arch_str,
            "all_results": records[hp],
            "dataset_seed": {dataset: list(seeds) for dataset in splits},
            "clear_net_done": weightless(space, hp, spec),
        }
    return per_hp


def _random_state_dict(space: str, arch_str: str, num_classes: int, seed: int) -> tuple[torch.nn.Module, dict]:
    """A seeded random initialisation with randomised batch-norm parameters and statistics:
    the float entropy of trained weights, without training (real-size archives' extra state dicts)."""
    torch.manual_seed(seed)
    net = build_network(space, arch_str, num_classes)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(int(torch.randint(1, 100_000, ())))
    net.eval()
    return net, {key: v.detach().clone() for key, v in net.state_dict().items()}


def _evaluate(net: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of ``net`` (its fast inference form) on ``images``."""
    with torch.inference_mode():
        logits = inference_network(net)(images)
        return (float((logits.argmax(1) == labels).double().mean()),
                float(torch.nn.functional.cross_entropy(logits.double(), labels)))


def _build_real_size_arch_file(space: str, index: int, arch_str: str, splits: dict[str, _DatasetSplits],
                               spec: MiniBenchSpec):
    """A real-size architecture file (module docstring): every hp, dataset and seed of the real files."""
    schedules = REAL_SCHEDULES[space]
    primary_hp, primary_seed = PRIMARY[space]
    records = {hp: {} for hp in schedules}
    for dataset in REAL_DATASETS:
        data_name = "cifar10" if dataset == "cifar10-valid" else dataset  # cifar10-valid: the CIFAR-10 images
        split = splits[data_name]
        k = NUM_CLASSES[data_name]
        net, test_x, train_features, test_features, train_y, test_y, arch_config, params, flops = _prepared_network(
            space, arch_str, dataset, data_name, split, spec)
        for hp, (epochs, seeds_of) in schedules.items():
            for seed in seeds_of[dataset]:
                if (hp, seed) == (primary_hp, primary_seed) or (space, hp) in REAL_WEIGHTLESS:
                    state_dict, accuracy, train_accuracy, loss = _fitted_head_record(
                        net, train_features, test_features, train_y, test_y, epochs,
                        _stable_seed(spec.seed, space, arch_str, dataset, hp, seed),
                        keep_weights=(space, hp) not in REAL_WEIGHTLESS)
                else:  # a separately seeded, unfitted network: its own weights, its own (real) accuracy
                    other, state_dict = _random_state_dict(
                        space, arch_str, k, _stable_seed(spec.seed, space, arch_str, dataset, hp, seed, "weights"))
                    accuracy, loss = _evaluate(other, test_x, test_y)
                    train_accuracy = accuracy  # not trained: its "training" figures are its test figures
                records[hp][(dataset, seed)] = _result_record(
                    dataset, epochs, seed, state_dict, accuracy, train_accuracy, loss, arch_config, params, flops,
                    curves=True)
    per_hp = collections.OrderedDict()
    for hp, (_, seeds_of) in schedules.items():
        per_hp[hp] = {
            "arch_index": index,
            "arch_str": arch_str,
            "all_results": records[hp],
            "dataset_seed": {dataset: list(seeds_of[dataset]) for dataset in REAL_DATASETS},
            "clear_net_done": (space, hp) in REAL_WEIGHTLESS,
        }
    return per_hp


def _write_arch_file(path: Path, space: str, index: int, arch_str: str, splits: dict, spec: MiniBenchSpec) -> None:
    build_file = _build_real_size_arch_file if spec.real_size else _build_arch_file
    write_pbz2(path, build_file(space, index, arch_str, splits, spec))


def _one_thread() -> None:
    torch.set_num_threads(1)


def build_minibench(out: str | Path, spec: MiniBenchSpec = MiniBenchSpec(), progress: bool = False,
                    archs: dict[str, Sequence[str]] | None = None, workers: int = 1) -> Path:
    """Write the mini benchmark under ``out``; deterministic for a given ``spec``.

    ``archs``: explicit architecture strings per space (e.g. small networks for a fast
    real-shaped archive in tests), instead of ``spec.n_tss`` / ``spec.n_sss`` sampled ones.
    ``workers``: architecture files built at once, each in its own process of one thread
    (every network is seeded on its own, and its numbers do not depend on torch's thread
    count: the same files as one process writes; tests/test_minibench.py)."""
    out = Path(out)
    rng = np.random.default_rng(spec.seed)
    py_rng = random.Random(spec.seed)
    splits = {dataset: _make_dataset(rng, dataset, spec) for dataset in NUM_CLASSES}
    _write_datasets(out / DATASET_DIR, rng, splits)
    explicit = archs is not None
    if explicit:
        archs = {space: list(archs.get(space, ())) for space in ("tss", "sss")}
    elif spec.real_size:
        archs = {"tss": sample_real_size_archs("tss", py_rng, spec.n_tss),
                 "sss": sample_real_size_archs("sss", py_rng, spec.n_sss)}
    else:
        archs = {"tss": sample_tss_archs(py_rng, spec.n_tss), "sss": sample_sss_archs(py_rng, spec.n_sss)}
    jobs = [(arch_file(out / (TSS_DIR if space == "tss" else SSS_DIR), i), space, i, a)
            for space in ("tss", "sss") for i, a in enumerate(archs[space])]
    from tqdm import tqdm

    with tqdm(total=len(jobs), desc="mini benchmark networks", unit="arch", disable=not progress) as bar:
        if workers > 1 and len(jobs) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the parent has started torch's thread pools, which a forked child must not inherit
            with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"),
                                     initializer=_one_thread) as pool:
                for future in [pool.submit(_write_arch_file, *job, splits, spec) for job in jobs]:
                    future.result()
                    bar.update()
        else:
            for job in jobs:
                _write_arch_file(*job, splits, spec)
                bar.update()
    for space, directory in (("tss", TSS_DIR), ("sss", SSS_DIR)):
        meta = {"meta_archs": archs[space], "total_archs": len(archs[space]), "arch2infos": None,
                "evaluated_indexes": set()}
        write_pbz2(out / directory / "meta.pickle.pbz2", meta)
    (out / "README.txt").write_text(
        "calibench mini benchmark: synthetic data and randomly initialised NATS networks with fitted\n"
        "classifier heads, written in NATS-Bench's on-disk formats. These are NOT NATS-Bench results.\n"
        f"spec: {spec.describe()}\n"
        + ("real size: every hp, dataset and seed of the real -full files; only the default schedule's first seed\n"
           "holds a fitted network, the other state dicts are seeded random initialisations (see calibench.sources.nats.minibench).\n"
           if spec.real_size else "")
        + ("tss hp 12 weights: the hp 200 network with a head fitted on a 12-epoch budget, a stand-in for a\n"
           "shorter schedule, not a 12-epoch training (see calibench.sources.nats.minibench).\n"
           if spec.tss_hp12_weights and not spec.real_size else "")
        + (f"architectures given explicitly: {archs}\n" if explicit else "")
    )
    return out
