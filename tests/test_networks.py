"""NATS-Bench networks against xautodl and the sample archives (docs/nats-bench.md, "Networks")."""

import bz2
import functools
import pickle
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from calibench.sources.nats.archstr import SSS_GENOTYPE
from calibench.sources.nats.networks import (
    build_network, count_parameters, inference_network, multiply_adds, randomise_,
)

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nats-bench-samples"
ARCHIVES = {"tss": SAMPLES / "NATS-tss-v1_0-3ffb9-simple", "sss": SAMPLES / "NATS-sss-v1_0-50262-simple"}

# TSS indices: 0, 11, 284 (per-arch fixtures) and cells chosen for their `none` edges and ops.
TSS_INDICES = {
    0: "pool, 1x1, skips",
    11: "node 3 <- none, conv, pool",
    284: "only skips and one 1x1",
    1651: "all none: every cell outputs zeros",
    15112: "node 3 all none: zero cell output, live inner nodes",
    9497: "node 1 zero, feeding 1x1 (bias only) and skip",
    14485: "nodes 1, 2 zero: cell output is a conv bias (a constant)",
    1462: "all nor_conv_3x3",
    7581: "all avg_pool_3x3",
    5917: "node 1 unused",
}
SSS_INDICES = [0, 11, 284, 32767, *random.Random(0).sample(range(32768), 4)]
CLASSES = (10, 100, 120)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Small batches: one thread is as fast, and immune to other processes on the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def _meta(space: str) -> list[str]:
    path = ARCHIVES[space] / "meta.pickle.pbz2"
    if not path.is_file():
        pytest.skip(f"{path} not found (shared/ fixtures absent)")
    with bz2.open(path) as f:
        return pickle.load(f)["meta_archs"]


@pytest.fixture(scope="module")
def xautodl():
    models = pytest.importorskip("xautodl.models")
    config_utils = pytest.importorskip("xautodl.config_utils")

    def reference(space: str, arch: str, num_classes: int) -> nn.Module:
        if space == "tss":
            genotype = models.CellStructure.str2structure(arch)
            cfg = {"name": "infer.tiny", "C": 16, "N": 5, "genotype": genotype, "num_classes": num_classes}
        else:
            cfg = {"name": "infer.shape.tiny", "channels": arch, "genotype": SSS_GENOTYPE, "num_classes": num_classes}
        return models.get_cell_based_tiny_net(config_utils.dict2config(cfg, None))

    return reference


def _cases(space: str, indices) -> list:
    return [pytest.param(space, i, CLASSES[n % 3], id=f"{space}-{i}-{CLASSES[n % 3]}") for n, i in enumerate(indices)]


@pytest.mark.parametrize("space, index, num_classes", _cases("tss", TSS_INDICES) + _cases("sss", SSS_INDICES))
def test_matches_xautodl(xautodl, space, index, num_classes):
    arch = _meta(space)[index]
    ref = randomise_(xautodl(space, arch, num_classes), seed=index, stats_batch=16)
    ours = build_network(space, arch, num_classes)
    ref_sd, ours_sd = ref.state_dict(), ours.state_dict()
    assert list(ours_sd) == list(ref_sd)
    assert {k: v.shape for k, v in ours_sd.items()} == {k: v.shape for k, v in ref_sd.items()}
    ours.load_state_dict(ref_sd, strict=True)
    ours.eval()
    assert count_parameters(ours) == sum(p.numel() for p in ref.parameters()) / 1e6
    fast = inference_network(ours)
    assert not fast.training
    g = torch.Generator().manual_seed(index)
    with torch.no_grad():
        for size in (32, 16):  # CIFAR, ImageNet16-120
            x = torch.randn(5, 3, size, size, generator=g)
            ref_features, ref_logits = ref(x)
            features, logits = ours(x)
            torch.testing.assert_close(features, ref_features, rtol=0, atol=1e-5)
            torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-5)
            fast_logits = fast(x)
            assert fast_logits.shape == (5, num_classes)
            torch.testing.assert_close(fast_logits, ref_logits, rtol=0, atol=1e-4)


def test_inference_form_sub_batches_and_single_images():
    arch = "|nor_conv_3x3~0|+|avg_pool_3x3~0|skip_connect~1|+|nor_conv_1x1~0|none~1|skip_connect~2|"
    net = build_network("tss", arch, 10)
    randomise_(net, seed=1, stats_batch=16)
    fast = inference_network(net)
    x = torch.randn(7, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = net(x)[1]
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=1e-4)
        fast.chunk_bytes = 1  # one image per sub-batch
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=1e-4)
        torch.testing.assert_close(fast(x[:1]), expected[:1], rtol=0, atol=1e-4)
    with pytest.raises(TypeError):
        inference_network(nn.Linear(2, 2))


def _records(space: str, index: int):
    path = ARCHIVES[space] / f"{index:06d}.pickle.pbz2"
    if not path.is_file():
        pytest.skip(f"{path} not found (shared/ fixtures absent)")
    with bz2.open(path) as f:
        archive = pickle.load(f)
    for hp, info in archive.items():
        for (dataset, seed), result in info["all_results"].items():
            if dataset in ("cifar10", "cifar100", "ImageNet16-120"):
                yield info["arch_str"], result["arch_config"]["class_num"], result["params"], result["flop"], dataset


@pytest.mark.parametrize("space", ["tss", "sss"])
@pytest.mark.parametrize("index", [0, 11, 284])
def test_parameter_counts_match_the_archive(space, index):
    counts = {}
    for arch, num_classes, params, _, _ in _records(space, index):
        if (arch, num_classes) not in counts:
            counts[arch, num_classes] = count_parameters(build_network(space, arch, num_classes))
        assert counts[arch, num_classes] == pytest.approx(params, abs=1e-7)  # params are exact to 1e-6
    assert {k for _, k in counts} == set(CLASSES)


@pytest.mark.parametrize(
    "space, arch",
    [
        ("tss", "8:16:24:32:40"),
        ("tss", "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|"),
        ("tss", "|conv_5x5~0|+|none~0|none~1|+|none~0|none~1|none~2|"),
        ("tss", "|none~1|+|none~0|none~1|+|none~0|none~1|none~2|"),
        ("sss", "8:16:24:32"),
        ("sss", "8:16:24:32:12"),
        ("sss", SSS_GENOTYPE),
        ("nas201", "8:16:24:32:40"),
    ],
)
def test_bad_architecture_raises(space, arch):
    with pytest.raises(ValueError, match="nas201" if space == "nas201" else "architecture"):
        build_network(space, arch, 10)


@pytest.mark.parametrize("space", ["tss", "sss"])
@pytest.mark.parametrize("index", [0, 284])
def test_multiply_adds_match_the_recorded_flops(space, index):
    for arch, num_classes, _, flop, dataset in _records(space, index):
        ours = multiply_adds(build_network(space, arch, num_classes), 16 if dataset == "ImageNet16-120" else 32) / 1e6
        # NATS-Bench also counts the classifier's bias additions (one per class); it records 5 decimals.
        assert flop == pytest.approx(ours + num_classes / 1e6, abs=1e-5), (arch, dataset)


@pytest.mark.parametrize("space, arch", [
    ("tss", "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|"),
    ("tss", "|avg_pool_3x3~0|+|none~0|avg_pool_3x3~1|+|nor_conv_1x1~0|skip_connect~1|none~2|"),
    ("tss", "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"),  # every cell outputs zeros
    ("sss", "8:8:8:8:8"), ("sss", "64:64:64:64:64"), ("sss", "24:16:8:40:40"),
])
def test_the_nchw_form_cuda_runs_gives_the_channels_last_logits(space, arch):
    """CUDA runs the inference form in NCHW (engine.activation_format): same logits as the CPU's
    channels-last form within float32 summation order, and NCHW throughout (no layout copies)."""
    net = build_network(space, arch, 100)
    randomise_(net, seed=3, stats_batch=16)
    channels_last, nchw = inference_network(net), inference_network(net, torch.contiguous_format)
    assert all(m.weight.stride() == torch.empty(m.weight.shape).stride()  # NCHW strides, 1x1 weights too
               for m in nchw.modules() if isinstance(m, nn.Conv2d))
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last)
               for m in channels_last.modules() if isinstance(m, nn.Conv2d) and m.weight.shape[1] > 1)
    x = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    layouts = []
    hooks = [cell.register_forward_hook(lambda _m, _i, out: layouts.append(out.is_contiguous()))
             for cell in nchw.cells]
    with torch.no_grad():
        want = channels_last(x.contiguous(memory_format=torch.channels_last))
        got = nchw(x)
    for hook in hooks:
        hook.remove()
    assert layouts == [True] * len(nchw.cells)
    # float32 summation order through 17 layers: the two forms' kernels sum in different orders, by as
    # much as 2.9e-6 of the largest logit on some CPUs (all-3x3 TSS on an AMD EPYC), below 1e-6 on others
    assert float((got - want).abs().max()) <= 1e-5 * max(float(want.abs().max()), 1e-30)
    with pytest.raises(ValueError, match="memory_format"):
        inference_network(net, torch.preserve_format)
