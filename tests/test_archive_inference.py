"""Archive reading and the inference engine, on the mini benchmark (real formats)."""

import bz2
import os
import pickle
import shutil

import pytest
import torch

from calibench.inference import engine as inference
from calibench.sources.nats import stream
from calibench.sources.nats.archive import ArchiveError, NatsArchive, prefetch
from calibench.sources.nats.minibench import SSS_DIR, TSS_DIR
from conftest import cuda_sleep_cycles


@pytest.fixture(scope="module")
def cifar10(tiny_minibench):
    return inference.load_eval_data(
        "cifar10", tiny_minibench / "datasets", ood=("gaussian_noise", "svhn"),
        svhn_path=tiny_minibench / "datasets" / "svhn" / "test_32x32.mat",
    )


def test_entry_fields(tiny_minibench):
    archive = NatsArchive(tiny_minibench / TSS_DIR, "tss")
    (entry,) = archive.load(1, "cifar100")
    assert entry.seed == 777 and entry.hp == "200" and entry.num_classes == 100
    assert entry.arch_str == archive.meta_archs[1] == archive.api.meta_archs[1]
    assert 0.0 <= entry.recorded_accuracy <= 1.0 and entry.params > 0 and entry.flops > 0
    assert entry.source.endswith("000001.pickle.pbz2")
    assert [e.seed for e in archive.load(1, "cifar100", seeds=[888, 777])] == [777, 888]
    assert archive.seeds(1, "cifar100") == [777, 888]
    both = archive.load(1, ["ImageNet16-120", "cifar10"], seeds=[777, 888])  # dataset order as given, then seed
    assert [(e.dataset, e.seed, e.num_classes) for e in both] == [
        ("ImageNet16-120", 777, 120), ("ImageNet16-120", 888, 120), ("cifar10", 777, 10), ("cifar10", 888, 10)]


def test_bad_requests(tiny_minibench):
    with pytest.raises(ValueError, match="hp"):
        NatsArchive(tiny_minibench / TSS_DIR, "tss", hp="90")
    with pytest.raises(FileNotFoundError, match="archive directory"):
        NatsArchive(tiny_minibench / "nowhere", "tss")
    archive = NatsArchive(tiny_minibench / SSS_DIR, "sss", hp="90")
    with pytest.raises(ArchiveError, match="seed 888 not recorded"):
        archive.load(0, "cifar10", seeds=[888])
    with pytest.raises(ArchiveError, match=r"architecture 7 .* index outside \[0, 3\)"):
        archive.load(7, "cifar10")
    with pytest.raises(ValueError, match="unknown dataset"):
        archive.load(0, ["cifar10", "cifar10-valid"])
    with pytest.raises(ValueError, match="twice"):
        archive.load(0, ["cifar10", "cifar10"])
    with pytest.raises(ValueError, match="at least one"):
        archive.load(0, [])


def _chunk(archive, indices, eval_sets, **kw):
    """chunk_logits over ``indices`` for every dataset of ``eval_sets``: [(index, dataset, out)]."""
    todo = {i: list(eval_sets) for i in indices}
    return list(stream.chunk_logits(archive, todo, eval_sets, torch.device("cpu"), **kw))


def test_logits_reproduce_the_recorded_accuracy(tiny_minibench, cifar10):
    archive = NatsArchive(tiny_minibench / SSS_DIR, "sss")
    out = _chunk(archive, [0, 1, 2], {"cifar10": cifar10})
    assert [(i, d) for i, d, _ in out] == [(0, "cifar10"), (1, "cifar10"), (2, "cifar10")]
    results = [r for _, _, (r,) in out]
    for r in results:
        assert r.logits.shape == (120, 10) and r.logits.dtype == torch.float32
        accuracy = (r.logits.argmax(1) == cifar10.labels).double().mean().item()
        assert accuracy == pytest.approx(r.entry.recorded_accuracy, abs=1.5 / 120)
        assert set(r.ood_logits) == {"gaussian_noise", "svhn"}
        assert r.ood_logits["gaussian_noise"].shape == (120, 10)


def _rewrite(path, change):
    with bz2.open(path, "rb") as f:
        record = pickle.load(f)
    change(record)
    with bz2.open(path, "wb") as f:
        pickle.dump(record, f, protocol=4)


def test_broken_architectures_are_reported_and_the_rest_go_on(tiny_minibench, cifar10, tmp_path):
    broken = tmp_path / TSS_DIR
    shutil.copytree(tiny_minibench / TSS_DIR, broken)
    (broken / "000000.pickle.pbz2").unlink()  # missing file
    tss_files = sorted(broken.glob("0*.pickle.pbz2"))
    assert len(tss_files) == 2

    def wrong_shape(record):
        sd = record["200"]["all_results"][("cifar10", 777)]["net_state_dict"]
        sd["classifier.weight"] = torch.zeros(7, 64)

    _rewrite(broken / "000001.pickle.pbz2", wrong_shape)
    archive = NatsArchive(broken, "tss")
    results = [out for _, _, out in _chunk(archive, [0, 1, 2], {"cifar10": cifar10})]
    assert [type(r).__name__ for r in results] == ["Failure", "Failure", "list"]
    assert results[0].index == 0 and "file missing" in results[0].reason and results[0].dataset == "cifar10"
    assert results[0].source.endswith("000000.pickle.pbz2")
    assert results[1].index == 1 and "state dict does not fit" in results[1].reason and results[1].seed == 777
    assert results[2][0].entry.index == 2

    (broken / "000002.pickle.pbz2").write_bytes(b"BZh91AY&SY corrupted")
    ((_, _, failure),) = _chunk(archive, [2], {"cifar10": cifar10})
    assert failure.index == 2 and "cannot read" in failure.reason


def test_nan_logits_are_a_failure(tiny_minibench, cifar10, tmp_path):
    broken = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, broken)

    def nan_weights(record):
        sd = record["90"]["all_results"][("cifar10", 777)]["net_state_dict"]
        sd["classifier.bias"] = torch.full_like(sd["classifier.bias"], float("nan"))

    _rewrite(broken / "000001.pickle.pbz2", nan_weights)
    results = [out for _, _, out in _chunk(NatsArchive(broken, "sss"), [0, 1, 2], {"cifar10": cifar10})]
    assert [type(r).__name__ for r in results] == ["list", "Failure", "list"]
    assert "non-finite logits" in results[1].reason


def test_the_next_network_is_enqueued_before_the_last_ones_logits_come_back(tiny_minibench, cifar10, tmp_path,
                                                                            monkeypatch):
    """One network ahead (issue 32, item 2): network i+1 is built and its passes enqueued before
    network i's logits are brought back (what lets a GPU work while the host prepares), with the
    results of one network at a time: each (index, dataset) in order, a failing seed naming the
    failure and the seeds after it not kept, and logits bit-equal to module_logits one by one."""
    broken = tmp_path / TSS_DIR
    shutil.copytree(tiny_minibench / TSS_DIR, broken)

    def first_seed_nan(record):  # architecture 2 at hp 200 has seeds 777 and 888: 777 gives NaN logits
        sd = record["200"]["all_results"][("cifar10", 777)]["net_state_dict"]
        sd["classifier.bias"] = torch.full_like(sd["classifier.bias"], float("nan"))

    _rewrite(broken / "000002.pickle.pbz2", first_seed_nan)
    calls = []
    launch, finish = stream._launch, stream.finish_logits
    monkeypatch.setattr(stream, "_launch", lambda entry, *a: calls.append(("launch", entry.index, entry.seed))
                        or launch(entry, *a))
    monkeypatch.setattr(stream, "finish_logits", lambda launched, data, k: calls.append(("finish",)) or
                        finish(launched, data, k))
    archive = NatsArchive(broken, "tss")
    out = list(stream.chunk_logits(archive, {0: ["cifar10"], 1: ["cifar10"], 2: ["cifar10"]}, {"cifar10": cifar10},
                                   torch.device("cpu"), seeds=[777, 888]))
    assert [(i, d) for i, d, _ in out] == [(0, "cifar10"), (1, "cifar10"), (2, "cifar10")]
    launches = [c for c in calls if c[0] == "launch"]
    assert launches == [("launch", i, seed) for i in (0, 1) for seed in (777, 888)] + [("launch", 2, 777),
                                                                                       ("launch", 2, 888)]
    # each finish comes after the next network's launch: launch, launch, finish, launch, finish, ...
    assert [c[0] for c in calls] == ["launch", "launch"] + ["finish", "launch"] * 4 + ["finish"]
    failure = out[2][2]
    assert type(failure).__name__ == "Failure" and failure.seed == 777 and "non-finite logits" in failure.reason
    for index, _, results in out[:2]:  # bit-equal to one network at a time
        assert [r.entry.seed for r in results] == [777, 888]
        for r in results:
            alone = stream.network_logits(r.entry, cifar10, torch.device("cpu"))
            assert torch.equal(alone.logits, r.logits)
            assert all(torch.equal(alone.ood_logits[n], r.ood_logits[n]) for n in r.ood_logits)


def test_prefetch_keeps_order_with_several_workers(tiny_minibench):
    archive = NatsArchive(tiny_minibench / SSS_DIR, "sss")
    loaded = list(prefetch(archive, [2, 0, 1, 2], ["cifar100", "cifar10"], depth=2, workers=2))
    assert [index for index, _ in loaded] == [2, 0, 1, 2]
    assert all([e.dataset for e in entries] == ["cifar100", "cifar10"] for _, entries in loaded)


def test_worker_processes_load_what_the_thread_loads_errors_included(tiny_minibench, tmp_path):
    broken = tmp_path / SSS_DIR
    shutil.copytree(tiny_minibench / SSS_DIR, broken)
    (broken / "000001.pickle.pbz2").write_bytes(b"BZh91AY&SY corrupted")
    archive = NatsArchive(broken, "sss")
    datasets = ["cifar10", "ImageNet16-120", "cifar100"]
    by_thread = list(prefetch(archive, [0, 1, 2], datasets, workers=1))
    by_processes = list(prefetch(archive, [0, 1, 2], datasets, workers=2))
    assert [i for i, _ in by_processes] == [0, 1, 2]
    for (_, a), (_, b) in zip(by_thread, by_processes):
        assert type(a) is type(b)
        if isinstance(a, ArchiveError):  # index, file and reason survive the process boundary
            assert (b.index, b.path, b.reason) == (a.index, a.path, a.reason) and b.index == 1
            continue
        assert [x.dataset for x in a] == [y.dataset for y in b] == datasets
        for x, y in zip(a, b):
            assert (x.index, x.arch_str, x.seed, x.recorded_accuracy) == (y.index, y.arch_str, y.seed, y.recorded_accuracy)
            assert x.state_dict.keys() == y.state_dict.keys()
            for key, tensor in x.state_dict.items():
                assert isinstance(y.state_dict[key], torch.Tensor) and torch.equal(tensor, y.state_dict[key]), key


def test_one_read_per_architecture_serves_every_dataset_and_seed(tiny_minibench, cifar10, tmp_path, monkeypatch):
    """Each archive file is decompressed once for all datasets; only the datasets asked for run."""
    read_log = tmp_path / "reads.log"
    monkeypatch.setenv("CALIBENCH_READ_LOG", str(read_log))
    cifar100 = inference.load_eval_data("cifar100", tiny_minibench / "datasets")
    archive = NatsArchive(tiny_minibench / TSS_DIR, "tss")
    todo = {0: ["cifar10", "cifar100"], 1: ["cifar100"]}
    out = list(stream.chunk_logits(archive, todo, {"cifar10": cifar10, "cifar100": cifar100},
                                      torch.device("cpu"), seeds=[777, 888]))
    assert [(i, d) for i, d, _ in out] == [(0, "cifar10"), (0, "cifar100"), (1, "cifar100")]
    for index, dataset, results in out:
        assert [(r.entry.index, r.entry.dataset, r.entry.seed) for r in results] == [(index, dataset, 777),
                                                                                     (index, dataset, 888)]
        k = 10 if dataset == "cifar10" else 100
        assert all(r.logits.shape == (120, k) for r in results)
        assert set(results[0].ood_logits) == ({"gaussian_noise", "svhn"} if dataset == "cifar10" else set())
    assert not torch.equal(out[1][2][0].logits, out[1][2][1].logits)  # two trained seeds, two networks
    reads = read_log.read_text().split()
    assert [os.path.basename(r) for r in reads] == ["000000.pickle.pbz2", "000001.pickle.pbz2"]


def test_device_resolution():
    assert inference.resolve_device("cpu").type == "cpu"
    assert inference.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device is visible"):
            inference.resolve_device("cuda")


def test_a_gpu_job_without_cuda_fails_clearly(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(RuntimeError, match=r"allocated GPUs \(SLURM_JOB_GPUS=0.*set device: cpu"):
        inference.resolve_device("auto")
    assert inference.resolve_device("cpu").type == "cpu"  # the config's explicit fallback
    monkeypatch.delenv("SLURM_JOB_GPUS")
    assert inference.resolve_device("auto").type == "cpu"


def test_loaders_follow_the_job_cpus_on_cuda_only(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert inference.loader_workers(3, cpu) == 3  # explicit: as configured
    assert inference.loader_workers("auto", cpu) == 1  # loading must not take cores from CPU inference
    for cpus, threads in (("1", 1), ("4", 3), ("12", 11), ("32", inference.MAX_AUTO_LOADERS)):
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", cpus)
        assert inference.loader_workers("auto", cuda) == threads
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert inference.loader_workers("auto", cuda) == max(1, min(16, len(os.sched_getaffinity(0)) - 1))


def test_a_cuda_device_computes_in_full_float32(monkeypatch):
    """cuDNN's TF32 convolutions (PyTorch's default) put logits 3e-4 from float64 on an H200
    (BENCHMARKS.md, "GPU"); a job that resolves a CUDA device turns them off."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        for device in ("cuda", "auto"):
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
            assert inference.resolve_device(device).type == "cuda"
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_logits_agree_with_float64_within_1e_4():
    from calibench.sources.nats.minibench import sample_sss_archs, sample_tss_archs
    from calibench.sources.nats.networks import build_network, inference_network
    import random

    device = inference.resolve_device("cuda")
    x = torch.randn(128, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    for space, sampler in (("tss", sample_tss_archs), ("sss", sample_sss_archs)):
        for arch in sampler(random.Random(4), 3):
            net = build_network(space, arch, 100)
            for m in net.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_var.uniform_(0.5, 2.0)
            net.eval()
            with torch.inference_mode():
                want = inference_network(net).double()(x.double().contiguous(memory_format=torch.channels_last))
                got = inference_network(net).to(device)(x.to(device).contiguous(memory_format=torch.channels_last))
            error = float((got.cpu().double() - want).abs().max() / want.abs().max())
            assert error < 1e-5, f"{space} {arch}: {error:.1e}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_the_host_waits_neither_to_move_a_network_nor_for_work_enqueued_after_it():
    """One network ahead only overlaps host and GPU if neither the weights' copy to the device
    nor bringing network i's logits back waits for kernels enqueued later (issue 32, item 2): a
    plain ``.to(device)`` synchronises the stream and a plain ``.cpu()`` queues behind network
    i+1. A one-second GPU sleep enqueued before each step must still be running when it returns."""
    import copy
    import random
    import time

    from calibench.inference.engine import EvalData, finish_logits, launch_logits, module_to_device
    from calibench.sources.nats.minibench import sample_sss_archs
    from calibench.sources.nats.networks import build_network, inference_network

    device = inference.resolve_device("cuda")
    one_second = cuda_sleep_cycles(1.0)
    net = inference_network(build_network("sss", sample_sss_archs(random.Random(5), 1)[0], 10).eval(),
                            inference.activation_format(device))
    images = torch.randn(3000, 3, 32, 32, generator=torch.Generator().manual_seed(5)).to(device)
    data = EvalData("cifar10", images, torch.zeros(3000, dtype=torch.int64, device=device), "random",
                    {"gaussian_noise": images[:500].flip(0)})

    finish_logits(launch_logits(module_to_device(copy.deepcopy(net), device), data, 1000), data, 10)  # first use
    torch.cuda._sleep(one_second)
    t0 = time.perf_counter()
    net = module_to_device(net, device)
    moved = time.perf_counter() - t0
    torch.cuda.synchronize()
    assert moved < 0.5, f"moving the network waited {moved:.2f} s for the kernels before it"

    launched = launch_logits(net, data, batch_size=1000)
    torch.cuda._sleep(one_second)  # the next network's work
    t0 = time.perf_counter()
    logits, ood = finish_logits(launched, data, 10)
    waited = time.perf_counter() - t0
    torch.cuda.synchronize()
    assert waited < 0.5, f"collecting the logits waited {waited:.2f} s for work enqueued after them"
    with torch.inference_mode():
        assert torch.equal(logits, torch.cat([net(b) for b in images.split(1000)]).cpu())
        assert torch.equal(ood["gaussian_noise"], torch.cat([net(b) for b in images[:500].flip(0).split(1000)]).cpu())


def test_packed_copies_hold_every_tensor_once_in_one_buffer_per_dtype():
    """How a network's weights reach a GPU (engine.module_to_device): per dtype one buffer and
    one copy, each tensor a contiguous view of it with its own values; a tensor named twice
    (a shared parameter) copied once. On the CPU the buffer is not pinned and the copy is the
    buffer itself, so the packing is checked here; the CUDA test checks the logits."""
    import random

    from calibench.inference.engine import packed_copies
    from calibench.sources.nats.minibench import sample_sss_archs
    from calibench.sources.nats.networks import build_network, inference_network

    g = torch.Generator().manual_seed(7)
    conv = torch.randn(4, 3, 3, 3, generator=g).contiguous(memory_format=torch.channels_last)
    wide = torch.randn(7, generator=g, dtype=torch.float64)
    counts = torch.arange(5)
    bias = torch.randn(2, 2, generator=g)
    placed = packed_copies([conv, wide, counts, conv, bias], torch.device("cpu"))
    assert len(placed) == 4
    for t in (conv, wide, counts, bias):
        copy = placed[id(t)]
        assert copy.dtype == t.dtype and copy.is_contiguous() and torch.equal(copy, t) and copy is not t
    storage = {n: placed[id(t)].untyped_storage().data_ptr() for n, t in (("conv", conv), ("bias", bias),
                                                                        ("wide", wide), ("counts", counts))}
    assert storage["conv"] == storage["bias"] and len(set(storage.values())) == 3

    net = inference_network(build_network("sss", sample_sss_archs(random.Random(3), 1)[0], 10).eval())
    x = torch.randn(6, 3, 32, 32, generator=g).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        want = net(x)
        tensors = list(net.parameters()) + list(net.buffers())
        placed = packed_copies(tensors, torch.device("cpu"))
        net._apply(lambda t: placed.get(id(t), t))  # as module_to_device does on CUDA
        assert all(placed[id(t)].data_ptr() == t.data_ptr() for t in net.parameters())
        assert float((net(x) - want).abs().max() / want.abs().max()) <= 1e-6  # contiguous weights now: another conv path
