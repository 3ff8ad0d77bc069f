"""Many NATS networks per forward pass (calibench.sources.nats.stacked; issue 32, item 2): each
network's logits in a bucket against the same network alone (today's path), the bucketing's
properties, and chunk_logits with networks_per_pass > 1 against 1 (order, logits, failures)."""

import functools
import inspect
import itertools
import math
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from calibench.inference import engine as inference
from calibench.sources.nats import stacked, stream
from calibench.sources.nats.archive import ArchiveEntry, ArchiveError, check_datasets
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES
from calibench.sources.nats.networks import build_network, inference_network, multiply_adds, randomise_
from calibench.sources.nats.stacked import (
    StackedNetwork, bucket_entries, resolve_networks_per_pass, sss_buckets, sss_multiply_adds, stacked_logits,
)
from conftest import cuda_sleep_cycles

TOLERANCE = 1e-6  # |stacked - alone| relative to the largest |logit|, float32


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _randomised(space: str, arch: str, num_classes: int, seed: int) -> nn.Module:
    return randomise_(build_network(space, arch, num_classes), seed)


def _images(n: int = 12, seed: int = 0) -> torch.Tensor:
    x = torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    return x.contiguous(memory_format=torch.channels_last)


def _assert_each_equals_alone(nets, x):
    with torch.inference_mode():
        together = StackedNetwork(nets)(x)
        assert together.shape == (len(nets), x.shape[0], nets[0].classifier.out_features)
        for m, net in enumerate(nets):
            alone = inference_network(net)(x)
            error = float((together[m] - alone).abs().max() / alone.abs().max())
            assert error <= TOLERANCE, (m, error)


SSS_BUCKET = [
    "8:8:8:8:8",  # narrowest: padded everywhere
    "64:64:64:64:64",  # widest: every position sets the padded width
    "16:16:16:16:16",  # identity skips where the bucket needs projections (exact 1x1 identity convs)
    "16:32:16:64:16",  # projections at both later cells
    "24:16:8:40:40",  # mixed: narrowing projection, identity in the last cell
    "8:16:16:64:64",
]


def test_sss_networks_of_every_width_in_one_bucket_give_their_own_logits():
    nets = [_randomised("sss", arch, 10, seed) for seed, arch in enumerate(SSS_BUCKET)]
    _assert_each_equals_alone(nets, _images())


def test_an_identity_skip_padded_to_a_projection_is_exact():
    """Same padded input and output width (16 -> 16), one network projecting 16 -> 8, the other an Identity."""
    nets = [_randomised("sss", "8:16:16:8:8", 100, 1), _randomised("sss", "8:16:8:8:8", 100, 2)]
    stack = StackedNetwork(nets)
    cell = stack.cells[2]
    skip = next(e for node in cell.nodes for e in node.edges if e.conv is not None and not e.relu)
    w = skip.conv.weight.view(2, 16, 16)
    assert torch.equal(w[0], torch.eye(16))  # the Identity network's block: exactly the identity
    assert torch.count_nonzero(w[1, 8:]) == 0  # the narrow network's padded output rows: zero
    _assert_each_equals_alone(nets, _images(8))


TSS_CELLS = {
    "none edges, pool, skip": "|nor_conv_3x3~0|+|none~0|nor_conv_1x1~1|+|skip_connect~0|avg_pool_3x3~1|none~2|",
    "node 1 zero, feeding a 1x1 (bias only) and a skip": "|none~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|none~0|skip_connect~1|avg_pool_3x3~2|",
    "all none: every cell outputs zeros": "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|",
    "node 1 unused": "|nor_conv_3x3~0|+|nor_conv_3x3~0|none~1|+|skip_connect~0|none~1|nor_conv_3x3~2|",
}


@pytest.mark.parametrize("cell", list(TSS_CELLS.values()), ids=list(TSS_CELLS))
def test_tss_seeds_of_one_cell_stack_exactly(cell):
    nets = [_randomised("tss", cell, 120, seed) for seed in (777, 888, 999)]
    _assert_each_equals_alone(nets, _images(8))


def test_networks_that_cannot_stack_are_refused():
    with pytest.raises(ValueError, match="class counts"):
        StackedNetwork([_randomised("sss", "8:8:8:8:8", 10, 0), _randomised("sss", "8:8:8:8:8", 100, 0)])
    a, b = TSS_CELLS["none edges, pool, skip"], TSS_CELLS["node 1 unused"]
    with pytest.raises(ValueError, match="genotypes"):
        StackedNetwork([_randomised("tss", a, 10, 0), _randomised("tss", b, 10, 0)])


def test_sub_batches_and_ood_sets_give_the_logits_of_one_pass():
    nets = [_randomised("sss", arch, 10, seed) for seed, arch in enumerate(["8:8:8:8:8", "16:32:16:64:16"])]
    stack, x = StackedNetwork(nets), _images(10)
    logits, ood = stacked_logits(stack, x, {"noise": x[:7]}, batch_size=4)
    with torch.inference_mode():
        whole = stack(x)
    assert logits.shape == (2, 10, 10) and ood["noise"].shape == (2, 7, 10)
    torch.testing.assert_close(logits, whole, rtol=0, atol=1e-5)
    torch.testing.assert_close(ood["noise"], whole[:, :7], rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- #
# Buckets
# --------------------------------------------------------------------------- #


def _random_configs(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    return [tuple(rng.choice(SSS_CHANNEL_CHOICES) for _ in range(5)) for _ in range(n)]


def test_sss_multiply_adds_is_the_networks_less_its_classifier():
    for arch in ("8:8:8:8:8", "64:64:64:64:64", "16:32:16:64:16", "64:8:48:8:24"):
        widths = tuple(int(c) for c in arch.split(":"))
        assert sss_multiply_adds(widths) == multiply_adds(build_network("sss", arch, 10), 32) - widths[-1] * 10


@pytest.mark.parametrize("max_size, max_overhead", [(1, 0.25), (4, 0.0), (8, 0.25), (64, 0.25), (64, 1.0)])
def test_sss_buckets_partition_within_both_limits(max_size, max_overhead):
    rng = random.Random(max_size)
    configs = _random_configs(rng, 150) + [(8,) * 5] * 5 + [(64,) * 5] * 3
    buckets = sss_buckets(configs, max_size, max_overhead)
    assert sorted(i for b in buckets for i in b) == list(range(len(configs)))
    assert all(b == sorted(b) for b in buckets) and [b[0] for b in buckets] == sorted(b[0] for b in buckets)
    for b in buckets:
        assert 1 <= len(b) <= max_size
        members = [configs[i] for i in b]
        padded = [max(col) for col in zip(*members)]
        own = sum(sss_multiply_adds(c) for c in members)
        assert len(b) * sss_multiply_adds(padded) <= (1 + max_overhead) * own * (1 + 1e-12) + 1e-9 * own
        if max_overhead == 0:
            assert len(set(members)) == 1
    if max_size == 1:
        assert len(buckets) == len(configs)
    # the same networks in another order: the same buckets of configurations
    perm = list(range(len(configs)))
    rng.shuffle(perm)
    shuffled = sss_buckets([configs[i] for i in perm], max_size, max_overhead)
    as_configs = lambda bs, cs: sorted(sorted(cs[i] for i in b) for b in bs)  # noqa: E731
    assert as_configs(shuffled, [configs[i] for i in perm]) == as_configs(buckets, configs)


def test_identical_sss_networks_fill_buckets_and_similar_ones_share():
    assert [len(b) for b in sss_buckets([(24, 16, 40, 8, 64)] * 10, 4)] == [4, 4, 2]
    # a chunk of consecutive NATS-Bench indices (c1..c3 fixed, c4, c5 varying): few buckets
    chunk = [(32, 48, 16, c4, c5) for c4, c5 in itertools.product(SSS_CHANNEL_CHOICES, repeat=2)]
    buckets = sss_buckets(chunk, 64)
    assert len(buckets) <= 4


def test_bucket_entries_never_mix_datasets_spaces_or_tss_cells():
    rng = random.Random(3)
    cells = list(TSS_CELLS.values())
    keys = []
    for _ in range(60):
        dataset = rng.choice(["cifar10", "cifar100", "ImageNet16-120"])
        if rng.random() < 0.5:
            keys.append(("tss", dataset, rng.choice(cells)))
        else:
            keys.append(("sss", dataset, ":".join(str(rng.choice(SSS_CHANNEL_CHOICES[:3])) for _ in range(5))))
    buckets = bucket_entries(keys, 5, max_overhead=math.inf)
    assert sorted(i for b in buckets for i in b) == list(range(len(keys)))
    for b in buckets:
        assert len(b) <= 5 and b == sorted(b)
        assert len({keys[i][:2] for i in b}) == 1
        if keys[b[0]][0] == "tss":
            assert len({keys[i][2] for i in b}) == 1
    # with no overhead limit, a dataset's SSS networks fill their buckets
    sss = [k for k in keys if k[0] == "sss"]
    n_sss = sum(1 for b in buckets if keys[b[0]][0] == "sss")
    assert n_sss == sum(math.ceil(sum(1 for k in sss if k[1] == d) / 5) for d in {k[1] for k in sss})


def test_networks_per_pass_setting():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_networks_per_pass("auto", cpu) == 1
    assert resolve_networks_per_pass("auto", cuda) == stacked.CUDA_NETWORKS_PER_PASS == 64
    # SSS's stacked passes (grouped convolutions) measured 3-4x slower per network on CUDA
    assert resolve_networks_per_pass("auto", cuda, "tss") == 64
    assert resolve_networks_per_pass("auto", cuda, "sss") == 1
    assert resolve_networks_per_pass("auto", cpu, "tss") == 1
    assert resolve_networks_per_pass(8, cuda, "sss") == 8  # a number is taken as given
    assert resolve_networks_per_pass(8, cpu) == 8 and resolve_networks_per_pass("16", cuda) == 16
    for bad in (0, -2, "x", 1.5, "2.0", None):
        with pytest.raises(ValueError, match="networks_per_pass"):
            resolve_networks_per_pass(bad, cpu)


# --------------------------------------------------------------------------- #
# chunk_logits
# --------------------------------------------------------------------------- #


SSS_CHUNK = ["16:16:16:16:16", "8:8:8:8:8", "16:16:16:8:16", "16:16:16:16:8", "16:16:16:8:8"]
TSS_CHUNK = list(TSS_CELLS.values())[:3]
CLASSES = {"cifar10": 10, "cifar100": 100}


@functools.cache
def _state_dict(space: str, arch: str, num_classes: int, seed: int) -> dict:
    return _randomised(space, arch, num_classes, seed).state_dict()


class FakeArchive:
    """What chunk_logits reads of an archive (``load``, ``archive_dir``), with random weights and
    no files: ``broken`` maps (index, dataset, seed) to "nan" (NaN classifier bias) or "shape"
    (a classifier of the wrong shape); ``missing`` indices raise ArchiveError."""

    def __init__(self, space: str, archs: list[str], broken: dict | None = None, missing: tuple = ()):
        self.space, self.archs, self.broken, self.missing = space, archs, broken or {}, missing
        self.archive_dir = Path("/nowhere/fake-archive")

    def load(self, index, datasets, seeds=None):
        path = self.archive_dir / f"{index:06d}.pickle.pbz2"
        if index in self.missing:
            raise ArchiveError(index, path, "file missing")
        entries = []
        for dataset in check_datasets(datasets):
            for seed in seeds or [777]:
                k = CLASSES[dataset]
                sd = dict(_state_dict(self.space, self.archs[index], k, 1000 * seed + index))
                fault = self.broken.get((index, dataset, seed))
                if fault == "nan":
                    sd["classifier.bias"] = torch.full_like(sd["classifier.bias"], float("nan"))
                elif fault == "shape":
                    sd["classifier.weight"] = torch.zeros(7, sd["classifier.weight"].shape[1])
                entries.append(ArchiveEntry(index, self.archs[index], self.space, "90", dataset, seed, k, 0.1, 1.0,
                                            0.5, str(path), sd))
        return entries


@pytest.fixture(scope="module")
def eval_sets():
    def data(dataset: str, n: int, ood: dict) -> inference.EvalData:
        return inference.EvalData(dataset, _images(n, seed=n), torch.zeros(n, dtype=torch.long), "synthetic", ood)

    return {"cifar10": data("cifar10", 16, {"gaussian_noise": _images(12, seed=1)}), "cifar100": data("cifar100", 10, {})}


@pytest.fixture
def stacking(monkeypatch):
    """The sizes of the stacked passes run."""
    passes = []
    original = stream.launch_stacked

    def counted(net, *args, **kwargs):
        passes.append(net.num_networks)
        return original(net, *args, **kwargs)

    monkeypatch.setattr(stream, "launch_stacked", counted)
    return passes


def _chunk(archive, eval_sets, per_pass, seeds=None, todo=None):
    todo = todo or {i: list(eval_sets) for i in range(len(archive.archs))}
    return list(stream.chunk_logits(archive, todo, eval_sets, torch.device("cpu"), seeds=seeds, batch_size=8,
                                    networks_per_pass=per_pass))


def _assert_same(out, ref):
    assert [(i, d, type(o).__name__) for i, d, o in out] == [(i, d, type(o).__name__) for i, d, o in ref]
    for (_, _, got), (_, _, want) in zip(out, ref):
        if not isinstance(want, list):
            assert (got.index, got.seed, got.source, got.reason, got.dataset) == (
                want.index, want.seed, want.source, want.reason, want.dataset)
            continue
        assert [r.entry.seed for r in got] == [r.entry.seed for r in want]
        for g, w in zip(got, want):
            scale = w.logits.abs().max()
            assert float((g.logits - w.logits).abs().max() / scale) <= TOLERANCE
            assert set(g.ood_logits) == set(w.ood_logits)
            for name in w.ood_logits:
                assert g.ood_logits[name].shape == w.ood_logits[name].shape
                assert float((g.ood_logits[name] - w.ood_logits[name]).abs().max() / scale) <= TOLERANCE


@pytest.mark.parametrize("space, archs, seeds", [("sss", SSS_CHUNK, None), ("tss", TSS_CHUNK, [777, 888])])
def test_chunk_logits_with_many_networks_per_pass_match_one_by_one(eval_sets, stacking, space, archs, seeds):
    archive = FakeArchive(space, archs + archs[:1], missing=(1,))
    todo = {4 if space == "sss" else 2: ["cifar100", "cifar10"], 0: ["cifar10"], 1: ["cifar10", "cifar100"],
            3: ["cifar100"]}  # order as given; 1 cannot be read
    if space == "tss":
        todo[3] = ["cifar100", "cifar10"]
    expected = [(i, d) for i, ds in todo.items() for d in ds]
    ref = _chunk(archive, eval_sets, 1, seeds, todo)
    assert not stacking
    for per_pass in (8, 2):  # one window; windows of two
        out = _chunk(archive, eval_sets, per_pass, seeds, todo)
        assert [(i, d) for i, d, _ in out] == expected
        assert [o.reason for i, _, o in out if i == 1] == ["file missing"] * len(todo[1])
        _assert_same(out, ref)
    assert stacking and max(stacking) > 1


def test_each_bucket_is_enqueued_before_the_one_before_it_is_collected(eval_sets, monkeypatch):
    """One bucket ahead (as one network ahead): bucket b + 1 is built and enqueued before bucket
    b's logits are brought back, so on a GPU the host's work on one overlaps the device's on the
    other; the results are those of one network at a time."""
    archive = FakeArchive("tss", TSS_CHUNK)
    ref = _chunk(archive, eval_sets, 1, [777, 888])
    calls = []
    launch, collect = stream._launch_bucket, stream._collect_bucket
    monkeypatch.setattr(stream, "_launch_bucket", lambda members, *a: calls.append(("launch", len(members)))
                        or launch(members, *a))
    monkeypatch.setattr(stream, "_collect_bucket", lambda members, *a: calls.append(("collect", len(members)))
                        or collect(members, *a))
    out = _chunk(archive, eval_sets, 8, [777, 888])
    buckets = sum(c[0] == "launch" for c in calls)
    assert buckets >= 3 and [c[1] for c in calls if c[0] == "launch"] == [c[1] for c in calls if c[0] == "collect"]
    assert [c[0] for c in calls] == ["launch"] + ["launch", "collect"] * (buckets - 1) + ["collect"]
    _assert_same(out, ref)


def test_a_broken_network_in_a_bucket_fails_alone(eval_sets, stacking):
    archive = FakeArchive("sss", SSS_CHUNK, broken={(2, "cifar10", 777): "nan", (3, "cifar100", 777): "shape"})
    ref = _chunk(archive, eval_sets, 1)
    out = _chunk(archive, eval_sets, 8)
    failed = [(i, d, o.seed) for i, d, o in out if not isinstance(o, list)]
    assert failed == [(2, "cifar10", 777), (3, "cifar100", 777)]
    assert "non-finite logits" in out[4][2].reason and "state dict does not fit" in out[7][2].reason
    assert stacking == [4, 3]  # the NaN network ran with three good ones (16:16:16:*:*), the misfit was left out
    _assert_same(out, ref)

    # TSS: a NaN first seed among stacked seeds; a second seed whose state dict does not fit
    archive = FakeArchive("tss", TSS_CHUNK, broken={(0, "cifar10", 777): "nan", (2, "cifar100", 888): "shape"})
    ref = _chunk(archive, eval_sets, 1, [777, 888])
    out = _chunk(archive, eval_sets, 8, [777, 888])
    failed = [(i, d, o.seed, o.reason.split(":")[0]) for i, d, o in out if not isinstance(o, list)]
    assert [f[:3] for f in failed] == [(0, "cifar10", 777), (2, "cifar100", 888)]
    _assert_same(out, ref)


def test_a_failing_pass_runs_its_networks_one_by_one(eval_sets, stacking, monkeypatch):
    archive = FakeArchive("sss", SSS_CHUNK)
    ref = _chunk(archive, eval_sets, 1)

    def out_of_memory(self, x):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(StackedNetwork, "forward", out_of_memory)
    out = _chunk(archive, eval_sets, 8)
    assert stacking  # stacked passes were tried
    _assert_same(out, ref)
    for (_, _, got), (_, _, want) in zip(out, ref):  # one by one: bit-equal
        assert all(torch.equal(g.logits, w.logits) for g, w in zip(got, want))


def test_networks_per_pass_auto_on_the_cpu_is_todays_path_bit_for_bit(eval_sets, stacking):
    archive = FakeArchive("sss", SSS_CHUNK)
    out = _chunk(archive, eval_sets, "auto")
    assert not stacking
    for index, dataset, (got,) in out:
        (entry,) = archive.load(index, dataset)
        want = stream.network_logits(entry, eval_sets[dataset], torch.device("cpu"), 8)
        assert torch.equal(got.logits, want.logits)
        assert all(torch.equal(got.ood_logits[k], want.ood_logits[k]) for k in want.ood_logits)


def test_networks_per_pass_enters_no_inference_setting_or_logits_key():
    from calibench.config import settings
    from calibench.sources.nats.jobs import key_fields

    config = {"archives": {"sss": "/a/NATS-sss-v1_0-50262-full"}, "seeds": "first", "datasets": ["cifar10"],
              "datasets_root": "/d", "ood": {"sets": ["gaussian_noise"], "noise_severity": 5}}
    plain = settings.inference_settings(config, "sss")
    for per_pass in (1, 64, "auto"):
        assert settings.inference_settings({**config, "networks_per_pass": per_pass}, "sss") == plain
    assert "runtime" not in inspect.signature(key_fields).parameters  # the key is made of these settings alone


def test_in_nchw_as_cuda_runs_them_each_network_still_gives_its_own_logits():
    """CUDA stacks in NCHW (engine.activation_format): each network against itself alone in NCHW."""
    assert inference.activation_format(torch.device("cuda")) == torch.contiguous_format
    assert inference.activation_format("cpu") == torch.channels_last
    nets = [_randomised("sss", arch, 10, seed) for seed, arch in enumerate(SSS_BUCKET)]
    nets.append(_randomised("sss", "64:64:64:64:64", 10, 9))
    x = _images().contiguous()
    with torch.inference_mode():
        stack = StackedNetwork(nets, channels_last=False)
        assert all(m.weight.stride() == torch.empty(m.weight.shape).stride()  # NCHW strides, 1x1 weights too
                   for m in stack.modules() if isinstance(m, nn.Conv2d))
        together = stack(x)
        for m, net in enumerate(nets):
            alone = inference_network(net, torch.contiguous_format)(x)
            error = float((together[m] - alone).abs().max() / alone.abs().max())
            assert error <= TOLERANCE, (m, error)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_stacked_bucket_is_collected_without_waiting_for_work_enqueued_after_it():
    """One bucket ahead on a GPU: the stack's weights reach the device and its logits come back
    without waiting for kernels enqueued before or after them (a one-second GPU sleep each)."""
    import time

    device = inference.resolve_device("cuda")
    one_second = cuda_sleep_cycles(1.0)
    nets = [_randomised("sss", arch, 10, seed) for seed, arch in enumerate(SSS_BUCKET)]
    x = _images(3000).contiguous().to(device)

    def bucket():
        stack = inference.module_to_device(StackedNetwork(nets, channels_last=False), device)
        return stacked.launch_stacked(stack, x, {"noise": x[:500]}, batch_size=1000)

    bucket().host()  # first use: cuDNN's handles, the pinned memory pool
    torch.cuda._sleep(one_second)  # the bucket before
    t0 = time.perf_counter()
    launched = bucket()
    enqueued = time.perf_counter() - t0
    torch.cuda._sleep(one_second)  # the next bucket's work
    logits, ood = launched.host()
    both = time.perf_counter() - t0
    torch.cuda.synchronize()
    # waiting for the next bucket's sleep too would take both past 2 s
    assert enqueued < 0.5 and both < 1.6, (enqueued, both)
    for m, net in enumerate(nets):
        with torch.inference_mode():
            alone = inference_network(net, torch.contiguous_format).to(device)(x).cpu()
        assert float((logits[m] - alone).abs().max() / alone.abs().max()) <= TOLERANCE
        assert ood["noise"].shape == (len(nets), 500, 10)
