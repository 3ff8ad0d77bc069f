"""The GPU path through the workflow's own jobs (issue 32): what ``calibench run`` costs per
network on a GPU, measured by calling the job functions the Snakemake rules call, in process,
on a results directory laid out exactly as the workflow lays it out.

What runs, per space (TSS hp 200, SSS hp 90), as the rules run it:

1. ``population`` (:func:`calibench.sources.nats.jobs.write_population`) and ``labels``
   (:func:`calibench.sources.nats.jobs.write_labels`) into ``results/``;
2. ``infer`` (:func:`calibench.sources.nats.jobs.infer_chunk`): every chunk, every dataset,
   archive files read by the job's own loader processes, logits into the store;
3. ``odir_search`` (:func:`calibench.measure.jobs.odir_search_job`) per dataset: the ms/dir
   lambda, mu search on the stored logits (settings of ``config/nats.yaml``: 6 x 6 grid,
   5 folds, a sample of 64 networks);
4. ``measure`` (:func:`calibench.measure.jobs.measure_chunk_job`) per dataset and chunk,
   with the search's result: every stage, every metric, a shard per network.

Inputs: NATS-format ``-full`` archives (``meta.pickle.pbz2`` + one ``{index:06d}.pickle.pbz2``
per architecture, written with the mini benchmark's writers and records) of real architectures
at real shapes, one state dict per dataset at the schedule read (the real files hold 16-17):
each network is built as the mini benchmark builds its own (a seeded RANDOM body whose
batch-norm statistics are estimated on a synthetic training split, and a linear head fitted
on it: :mod:`calibench.sources.nats.minibench`), so activations and logits have a trained
network's scale and the heads over-fit to varying degrees. SYNTHETIC evaluation sets (the mini
benchmark's class patterns) in the real file formats at the real sizes: CIFAR-10 10,000 test
images (+ 10,000 Gaussian-noise OoD made by the job, + 26,032 SVHN), CIFAR-100 10,000,
ImageNet16-120 6,000 at 16x16 (``--n-test`` scales them all). The networks include the
extremes of each space: SSS 64:64:64:64:64 and 8:8:8:8:8; TSS cells of all ``nor_conv_3x3``,
all ``none``, all ``skip_connect``, all ``nor_conv_1x1`` and all ``avg_pool_3x3``; the rest are
seeded random distinct members (distinct TSS isomorphism classes). Inputs are cached under
``--workdir`` between runs; ``results/`` is made afresh each run.

Inference time does not depend on the weights; the iterations of vs, ms, dir and of the
search do, and these are not trained NATS networks: their fits may take more or fewer
iterations than the real population's. Said again with the projection.

Measured (printed, and written as JSON with ``--out``, rewritten after every phase, so a
run cut off by a time limit leaves what it measured):

* inference per network per (space, dataset): the job's wall time, split by dataset from
  the times between the results the job's producer hands to the store (with
  ``networks_per_pass`` > 1 a whole pass's time falls on its first network; the sums per
  dataset hold); the job's loading of its evaluation sets onto the device is its set-up,
  reported apart;
* the search's wall time per (space, dataset), and per network x fold x grid pair x stage;
* measurement per network per (space, dataset) (the job's wall time) and per stage: the
  time inside each stage's call in the job (``measure_stages_batch``'s ``_stage_outputs``:
  fit, metrics on the test part, OoD AUROC), and of its fit alone (``fit_stage``), each
  synchronised;
* peak GPU memory (``torch.cuda.max_memory_allocated``) per phase;
* GPU-busy fraction per phase: NVML's utilisation (the share of time a kernel ran), sampled
  every 100 ms in a thread (pynvml, else ``nvidia-smi``);
* host synchronisations per L-BFGS iteration of ms and dir: a separate fit of the same
  stored logits with ``torch.cuda.set_sync_debug_mode("warn")``, warnings counted (CUDA only);
* the projection for all 117,702 networks on one GPU (6,466 TSS + 32,768 SSS, x 3 datasets:
  inference, all eight stages, six searches).

Usage:
  python bench/bench_gpu_workflow.py [--device auto] [--networks 64] [--n-test 10000]
      [--datasets cifar10,cifar100,ImageNet16-120] [--stages pre,post,...] [--runtime KEY=VALUE ...]
      [--out result.json] [--time-limit SECONDS] [--also-infer networks_per_pass=1]
  python bench/bench_gpu_workflow.py --cpu-smoke      # the CPU check: 3 networks, small sets (~1 min)
  bash bench/gpu_check.sh                             # what a session with a GPU runs first
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import hashlib
import inspect
import json
import logging
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # a checkout without `pip install -e .` (the GPU machine)
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

POPULATION = {"tss": 6466, "sss": 32768}  # unique TSS classes; every SSS network
HP = {"tss": "200", "sss": "90"}
VARIANT_SETTINGS = ("precision",)  # --also-infer keys that are configuration settings, not runtime keys
ALL_DATASETS = ("cifar10", "cifar100", "ImageNet16-120")
ALL_STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
REAL_N = {"cifar10": 10_000, "cifar100": 10_000, "ImageNet16-120": 6_000}
REAL_SVHN = 26_032
REAL_CHUNK = 200  # config/nats.yaml chunk_size: networks per job in the real run
SEED = 777
# What the workflow hands its jobs as runtime flags (workflow/rules/common.smk, RUNTIME), where the config has them
RUNTIME_KEYS = ("device", "batch_size", "loader_workers", "measure_group", "networks_per_pass")
TRAIN_PER_CLASS, TRAIN_MIN = 3, 200  # the heads' training split: the mini benchmark's minimum of 3 per class

log = logging.getLogger("bench_gpu_workflow")


class Interrupted(BaseException):
    """SIGTERM (``timeout``): not an Exception, so no job's error handling swallows it."""


# ---------------------------------------------------------------- architectures

def tss_cell(ops: list[str]) -> str:
    """A TSS arch string from its six edge ops (node 1 <- 0; node 2 <- 0, 1; node 3 <- 0, 1, 2)."""
    return f"|{ops[0]}~0|+|{ops[1]}~0|{ops[2]}~1|+|{ops[3]}~0|{ops[4]}~1|{ops[5]}~2|"


def tss_archs(n: int, seed: int = 0) -> list[str]:
    """The extremes first (every edge ``nor_conv_3x3``, ``none``, ``skip_connect``, ``nor_conv_1x1``,
    ``avg_pool_3x3``), then seeded random cells of distinct isomorphism classes."""
    from calibench.sources.nats.archstr import TSS_OPS
    from calibench.sources.nats.population import tss_canonical_form

    out, seen = [], set()
    for op in ("nor_conv_3x3", "none", "skip_connect", "nor_conv_1x1", "avg_pool_3x3"):
        arch = tss_cell([op] * 6)
        out.append(arch)
        seen.add(tss_canonical_form(arch))
    rng = random.Random(seed)
    while len(out) < n:
        arch = tss_cell([rng.choice(TSS_OPS) for _ in range(6)])
        form = tss_canonical_form(arch)
        if form not in seen:
            seen.add(form)
            out.append(arch)
    return out[:n]


def sss_archs(n: int, seed: int = 0) -> list[str]:
    """8:8:8:8:8 and 64:64:64:64:64 first, then seeded random distinct channel strings."""
    from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES

    out = ["64:64:64:64:64", "8:8:8:8:8"]
    rng = random.Random(seed)
    while len(out) < n:
        arch = ":".join(str(rng.choice(SSS_CHANNEL_CHOICES)) for _ in range(5))
        if arch not in out:
            out.append(arch)
    return out[:n]


# ---------------------------------------------------------------- inputs: archives and datasets

def _arch_payload(space: str, index: int, arch: str, datasets: tuple[str, ...], train_dir: str) -> tuple[int, dict]:
    """One architecture file's content: the schedule the run reads (TSS 200, SSS 90), one seed,
    one state dict per dataset, records with the keys of a real archive. Each network is the
    mini benchmark's (:mod:`calibench.sources.nats.minibench`): a seeded random body whose
    batch-norm statistics are estimated on a synthetic training split (so activations keep
    a trained network's scale), and a linear head fitted on that split with a seeded weight
    decay and iteration budget (so logits are sharp and over-confident to varying degrees,
    as trained networks' are; accuracy is above chance on the synthetic images)."""
    torch.set_num_threads(1)
    from calibench.inference import data as data_io
    from calibench.inference.data import IMAGE_SIZE, NUM_CLASSES
    from calibench.sources.nats.archstr import SSS_GENOTYPE
    from calibench.sources.nats.minibench import (BN_IMAGES, _calibrate_batch_norm, _features, _fitted_head_record,
                                                  _result_record, _stable_seed)
    from calibench.sources.nats.networks import build_network, count_parameters, multiply_adds

    hp = HP[space]
    records = {}
    for dataset in datasets:
        k = NUM_CLASSES[dataset]
        train = np.load(Path(train_dir) / f"train_{dataset}.npz")
        x = data_io.normalize(train["images"], dataset)
        y = torch.from_numpy(train["labels"]).long()
        torch.manual_seed(_stable_seed("bench_gpu_workflow", space, arch, dataset))
        net = build_network(space, arch, k)
        _calibrate_batch_norm(net, x[:BN_IMAGES])
        features = _features(net, x)
        state_dict, accuracy, train_accuracy, loss = _fitted_head_record(
            net, features, features, y, y, int(hp), _stable_seed("bench_gpu_workflow head", space, arch, dataset),
            keep_weights=True)
        if space == "tss":
            config = {"channel": 16, "num_cells": 5, "arch_str": arch, "class_num": k}
        else:
            config = {"name": "infer.shape.tiny", "channels": arch, "arch_str": arch, "genotype": SSS_GENOTYPE,
                      "class_num": k}
        records[(dataset, SEED)] = _result_record(
            dataset, int(hp), SEED, state_dict, accuracy, train_accuracy, loss, config, count_parameters(net),
            multiply_adds(net, IMAGE_SIZE[dataset]) / 1e6)
    return index, {hp: {"arch_index": index, "arch_str": arch, "all_results": records,
                        "dataset_seed": {d: [SEED] for d in datasets}, "clear_net_done": False}}


def _write_arch_file(directory: str, space: str, index: int, arch: str, datasets: tuple[str, ...],
                     train_dir: str) -> int:
    from calibench.sources.nats.archive import arch_file
    from calibench.sources.nats.minibench import write_pbz2

    _, content = _arch_payload(space, index, arch, datasets, train_dir)
    write_pbz2(arch_file(directory, index), content)
    return index


def build_archive(directory: Path, space: str, archs: list[str], datasets: tuple[str, ...], workers: int,
                  train_dir: Path) -> float:
    """A ``-full`` archive directory (cached: a marker names what it holds); returns seconds spent."""
    from calibench.sources.nats.minibench import write_pbz2

    marker = directory / ".bench-complete"
    train_key = (train_dir / ".bench-complete").read_text()
    want = hashlib.sha256(json.dumps([space, archs, list(datasets), train_key, 2]).encode()).hexdigest()
    if marker.is_file() and marker.read_text() == want:
        return 0.0
    start = time.perf_counter()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            list(pool.map(_write_arch_file, [str(directory)] * len(archs), [space] * len(archs), range(len(archs)),
                          archs, [datasets] * len(archs), [str(train_dir)] * len(archs)))
        except BaseException:  # Interrupted (a `timeout`): no worker goes on writing into the directory
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    else:
        for i, arch in enumerate(archs):
            _write_arch_file(str(directory), space, i, arch, datasets, str(train_dir))
    write_pbz2(directory / "meta.pickle.pbz2", {"meta_archs": list(archs), "total_archs": len(archs),
                                                "arch2infos": None, "evaluated_indexes": set()})
    marker.write_text(want)
    return time.perf_counter() - start


def build_datasets(root: Path, sizes: dict[str, int], svhn: int) -> float:
    """Synthetic evaluation sets in the real file formats (the mini benchmark's images:
    per-class smooth patterns, shifted and noised), and a training split of each dataset
    (``train_{dataset}.npz``, the same patterns: what the heads are fitted on); cached by sizes."""
    from calibench.inference import data as data_io
    from calibench.sources.nats.minibench_images import class_patterns as _class_patterns, synthetic_images

    marker = root / ".bench-complete"
    want = json.dumps([sizes, svhn, TRAIN_PER_CLASS, 2], sort_keys=True)
    if marker.is_file() and marker.read_text() == want:
        return 0.0
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    for dataset, n in sizes.items():
        k, size = data_io.NUM_CLASSES[dataset], data_io.IMAGE_SIZE[dataset]
        patterns = _class_patterns(rng, k, size)
        labels = rng.integers(0, k, size=n)
        images = synthetic_images(rng, patterns, labels, 0.15)
        train_labels = np.arange(max(TRAIN_MIN, TRAIN_PER_CLASS * k)) % k
        rng.shuffle(train_labels)
        root.mkdir(parents=True, exist_ok=True)
        np.savez(root / f"train_{dataset}.npz", images=synthetic_images(rng, patterns, train_labels, 0.15),
                 labels=train_labels)
        if dataset == "cifar10":
            data_io.write_cifar10_test(root, images, labels)
        elif dataset == "cifar100":
            data_io.write_cifar100_test(root, images, labels)
        else:  # 1-based labels over 1,000 classes; the reader keeps 1..120 (10 % distractors here)
            extra = n // 10
            images = np.concatenate([images, rng.integers(0, 256, size=(extra, 3, 16, 16), dtype=np.uint8)])
            labels = np.concatenate([labels + 1, rng.integers(121, 1001, size=extra)])
            order = rng.permutation(len(labels))
            data_io.write_imagenet16_val(root, images[order], labels[order])
    svhn_labels = rng.integers(0, 10, size=svhn)
    data_io.write_svhn_test(root / "svhn" / "test_32x32.mat",
                            synthetic_images(rng, _class_patterns(rng, 10, 32), svhn_labels, 0.2), svhn_labels)
    marker.write_text(want)
    return time.perf_counter() - start


# ---------------------------------------------------------------- GPU observation

class BusySampler:
    """The GPU's utilisation (NVML: the share of the last sample period in which a kernel ran),
    sampled every ``period`` s in a thread; :meth:`mean` over a time window. pynvml, else
    ``nvidia-smi``; where neither answers, no samples (reported n/a)."""

    def __init__(self, period: float = 0.1):
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self.source = None
        self._stop = threading.Event()
        self._thread = None
        self._proc = None

    def start(self) -> "BusySampler":
        try:
            index = torch.cuda.current_device()
        except Exception:  # noqa: BLE001
            index = 0
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetUtilizationRates(handle)
            self.source = "nvml"

            def loop():
                while not self._stop.wait(self.period):
                    with contextlib.suppress(Exception):
                        self.samples.append((time.perf_counter(), pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100))

            self._thread = threading.Thread(target=loop, daemon=True, name="busy-sampler")
            self._thread.start()
            return self
        except Exception:  # noqa: BLE001 - no NVML: try nvidia-smi
            pass
        if shutil.which("nvidia-smi"):
            try:
                self._proc = subprocess.Popen(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                     f"--loop-ms={int(self.period * 1000)}", f"--id={index}"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self.source = "nvidia-smi"

                def read():
                    for line in self._proc.stdout:
                        with contextlib.suppress(ValueError):
                            self.samples.append((time.perf_counter(), float(line.strip()) / 100))

                self._thread = threading.Thread(target=read, daemon=True, name="busy-sampler")
                self._thread.start()
            except OSError:
                self.source = None
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=5)

    def mean(self, start: float, end: float) -> float | None:
        inside = [v for t, v in self.samples if start <= t <= end]
        return round(statistics.fmean(inside), 3) if inside else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def patched(module, name: str, make_wrapper):
    """``module.name`` replaced by ``make_wrapper(original)`` for the block; untouched (and
    nothing timed) where the module has no such name (the code changed under us)."""
    original = getattr(module, name, None)
    if original is None:
        log.warning("%s.%s not found: its split is not measured", module.__name__, name)
        yield False
        return
    setattr(module, name, make_wrapper(original))
    try:
        yield True
    finally:
        setattr(module, name, original)


def timed_into(add):
    """A wrapper maker for :func:`patched`: each call's seconds handed to ``add``."""
    def make(original):
        @functools.wraps(original)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                add(time.perf_counter() - start)

        return timed

    return make


class Phase:
    """Wall time, peak GPU memory and busy fraction of one job call."""

    def __init__(self, device: torch.device, sampler: BusySampler | None):
        self.device, self.sampler = device, sampler

    def __enter__(self):
        if self.device.type == "cuda":
            sync(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync(self.device)
        self.end = time.perf_counter()
        self.seconds = self.end - self.start
        self.peak_bytes = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None
        self.busy = self.sampler.mean(self.start, self.end) if self.sampler else None
        return False

    def record(self) -> dict:
        return {"seconds": round(self.seconds, 3),
                "peak_gpu_memory_gib": None if self.peak_bytes is None else round(self.peak_bytes / 2**30, 3),
                "gpu_busy_fraction": self.busy}


# ---------------------------------------------------------------- the jobs, timed

def timed_inference(settings, runtime, space, hp, chunk, results, manifest, device) -> tuple[dict, list, float]:
    """infer_chunk as the rule calls it; with the time between consecutive results that its
    producer hands to the store (index, dataset, seconds since the previous one) and the
    seconds its evaluation sets took to load onto the device (``load_eval_data``)."""
    import calibench.sources.nats.jobs as nats_jobs

    events: list[tuple[int, str, float]] = []

    def wrap(original):
        signature = inspect.signature(original)

        @functools.wraps(original)
        def store_chunk_logits(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            produce = bound.arguments["produce"]

            def timed_produce(todo):
                last = time.perf_counter()
                for item in produce(todo):
                    now = time.perf_counter()
                    events.append((int(item[0]), str(item[1]), now - last))
                    last = now
                    yield item

            bound.arguments["produce"] = timed_produce
            return original(*bound.args, **bound.kwargs)

        return store_chunk_logits

    import calibench.inference.engine as engine
    import calibench.sources.nats.stacked as stacked
    import calibench.sources.nats.stream as stream

    loading = []  # seconds the evaluation sets took onto the device
    # Where the main process's time goes: building and loading each network, folding it into its
    # inference form (the one-network path), enqueuing its forward passes (engine._run: on a GPU
    # the host does not wait), bringing its logits to the host (finish_logits: the wait for the
    # device, which the next network's preparation now overlaps), and the stacked passes
    # (stacked._run: enqueued; stream._collect_bucket: the wait for a bucket's logits, which the
    # next bucket's preparation overlaps, and the checks; a lone network's wait is in to_host too)
    split = {"build_load": 0.0, "fold": 0.0, "enqueue": 0.0, "to_host": 0.0, "stacked_enqueue": 0.0,
             "stacked_to_host": 0.0}

    def add_to(key):
        return lambda seconds: split.__setitem__(key, split[key] + seconds)

    with patched(nats_jobs, "store_chunk_logits", wrap), \
            patched(engine, "load_eval_data", timed_into(loading.append)), \
            patched(stream, "load_network", timed_into(add_to("build_load"))), \
            patched(stream, "inference_network", timed_into(add_to("fold"))), \
            patched(engine, "_run", timed_into(add_to("enqueue"))), \
            patched(stream, "finish_logits", timed_into(add_to("to_host"))), \
            patched(stacked, "_run", timed_into(add_to("stacked_enqueue"))), \
            patched(stream, "_collect_bucket", timed_into(add_to("stacked_to_host"))):
        summary = nats_jobs.infer_chunk(settings, runtime, space, hp, chunk, results, manifest, progress=False)
    summary = {**summary, "main_process_split_seconds": {k: round(v, 3) for k, v in split.items()}}
    return summary, events, sum(loading)


class StageTimer:
    """Inside measure_chunk_job: each stage's call (fit + metrics on the test part, the OoD
    AUROC) and each fit, synchronised, summed per stage."""

    def __init__(self, device: torch.device):
        self.device = device
        self.stage: dict[str, float] = {}
        self.fit: dict[str, float] = {}
        self.networks: dict[str, int] = {}

    @contextlib.contextmanager
    def active(self):
        import calibench.measure.stages as stages_module

        def wrap_stage(original):
            @functools.wraps(original)
            def _stage_outputs(stage, z, *args, **kwargs):
                sync(self.device)
                start = time.perf_counter()
                try:
                    return original(stage, z, *args, **kwargs)
                finally:
                    sync(self.device)
                    self.stage[stage] = self.stage.get(stage, 0.0) + time.perf_counter() - start
                    self.networks[stage] = self.networks.get(stage, 0) + int(z.shape[0])

            return _stage_outputs

        def wrap_fit(original):
            @functools.wraps(original)
            def fit_stage(stage, *args, **kwargs):
                sync(self.device)
                start = time.perf_counter()
                try:
                    return original(stage, *args, **kwargs)
                finally:
                    sync(self.device)
                    self.fit[stage] = self.fit.get(stage, 0.0) + time.perf_counter() - start

            return fit_stage

        with patched(stages_module, "_stage_outputs", wrap_stage), patched(stages_module, "fit_stage", wrap_fit):
            yield self


def sync_count(results, space, hp, dataset, manifest, labels_file, settings, device, networks: int,
               count: bool | None = None) -> dict:
    """Host synchronisations per L-BFGS iteration of ms and dir: the job's fit (fit_stage, the
    job's options and λ, μ) of the first ``networks`` stored networks' validation parts, again,
    under ``torch.cuda.set_sync_debug_mode("warn")``; every warning it raises counted."""
    count = device.type == "cuda" if count is None else count
    from calibench.measure.jobs import _read_stored
    from calibench.measure.stages import split_indices
    from calibench.recalibration import fit_stage
    from calibench.store import logits as store

    keys = {int(i): k for i, k in json.loads(Path(manifest).read_text())["datasets"][dataset].items()}
    labels = store.read_labels(labels_file)
    z = torch.stack([_read_stored(results, space, hp, dataset, i, keys[i], labels)[0].logits
                     for i in sorted(keys)[:networks]]).to(device, torch.float64)
    y = torch.from_numpy(labels.labels).long().to(device)
    temp = settings["temperature"]
    val_idx, _ = split_indices(len(labels.labels), temp["val_fraction"], temp["seed"])
    val = torch.from_numpy(val_idx).to(device)
    options = {"temperature": temp, **settings.get("recalibration", {})}
    out = {}
    for stage in ("ms", "dir"):
        if stage not in settings["stages"]:
            continue
        fit_stage(stage, z[:, val], y[val], options)  # warm: kernels, allocator
        sync(device)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if count:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                fitted = fit_stage(stage, z[:, val], y[val], options)
            finally:
                if count:
                    torch.cuda.set_sync_debug_mode(0)
        sync(device)
        seconds = time.perf_counter() - start
        syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
        its = fitted.info.get("iterations", np.zeros(1))
        its = its.detach().cpu().numpy() if isinstance(its, torch.Tensor) else np.asarray(its, dtype=float)
        iterations = int(np.nanmax(its)) if its.size else 0
        out[stage] = {"syncs": syncs, "iterations": iterations, "networks": int(z.shape[0]),
                      "seconds_with_sync_debug": round(seconds, 3),
                      "per_iteration": round(syncs / iterations, 3) if iterations and syncs else None,
                      "note": None if syncs else "no sync warning captured: not counted"}
    return out


# ---------------------------------------------------------------- the run

def parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None, "null": None}.get(text.lower(), text)


def device_record(device: torch.device) -> dict:
    out = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "python": platform.python_version(), "cpu_threads": torch.get_num_threads(),
           "cpus": len(os.sched_getaffinity(0))}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update({"name": torch.cuda.get_device_name(device), "memory_gib": round(props.total_memory / 2**30, 1),
                    "multiprocessors": props.multi_processor_count})
        with contextlib.suppress(Exception):
            out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
    else:
        out["name"] = platform.processor() or platform.machine()
    return out


def make_config(args, workdir: Path) -> dict:
    import yaml

    config = yaml.safe_load((ROOT / "config" / "nats.yaml").read_text())
    config["archives"] = {s: str(workdir / "archives" / d) for s, d in
                          (("tss", "NATS-tss-v1_0-3ffb9-full"), ("sss", "NATS-sss-v1_0-50262-full"))}
    config["datasets_root"] = str(workdir / "datasets")
    config["ood"]["svhn"] = str(workdir / "datasets" / "svhn" / "test_32x32.mat")
    config["datasets"] = list(args.datasets)
    config["stages"] = list(args.stages)
    config["chunk_size"] = args.chunk_size
    config["batch_size"] = args.batch_size
    config["measure_group"] = args.measure_group
    config["device"] = args.device
    if args.precision:
        config["precision"] = args.precision
    search = config["recalibration"]["odir"]["search"]
    search["networks"] = args.search_networks
    if args.search_folds:
        search["folds"] = args.search_folds
    if args.search_grid:
        search["grid"] = [float(v) for v in args.search_grid.split(",")]
    if args.search_max_iterations:
        search["max_iterations"] = args.search_max_iterations
    if args.max_iterations:
        config["recalibration"]["max_iterations"] = args.max_iterations
    if args.odir != "searched":
        lam, mu = (float(v) for v in args.odir.split(","))
        for stage in ("ms", "dir"):
            config["recalibration"]["odir"][stage] = {"lambda": lam, "mu": mu}
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (the config's device)")
    parser.add_argument("--networks", type=int, default=64, help="networks per space (default 64)")
    parser.add_argument("--n-test", type=int, default=10_000,
                        help="CIFAR test images (10,000 real); ImageNet16-120 gets 0.6x, SVHN 2.6032x")
    parser.add_argument("--datasets", default=",".join(ALL_DATASETS))
    parser.add_argument("--stages", default=",".join(ALL_STAGES))
    parser.add_argument("--spaces", default="tss,sss")
    parser.add_argument("--chunk-size", type=int, default=REAL_CHUNK, help="networks per job (config chunk_size)")
    parser.add_argument("--batch-size", type=int, default=2500, help="images per forward pass (config batch_size)")
    parser.add_argument("--measure-group", default="auto", help="config measure_group")
    parser.add_argument("--loader-workers", default="auto", help="config loader_workers")
    parser.add_argument("--precision", default=None, help="config precision (float32 when not given)")
    parser.add_argument("--runtime", action="append", default=[], metavar="KEY=VALUE",
                        help="any other runtime key handed to the jobs (e.g. networks_per_pass=8); repeatable")
    parser.add_argument("--search-networks", type=int, default=64, help="the search's sample (config: 64)")
    parser.add_argument("--search-folds", type=int, default=None, help="default: config/nats.yaml's 5")
    parser.add_argument("--search-grid", default=None, help="comma-separated; default: config/nats.yaml's 6 values")
    parser.add_argument("--search-max-iterations", type=int, default=None)
    parser.add_argument("--max-iterations", type=int, default=None,
                        help="config recalibration.max_iterations (vs, ms, dir); default config/nats.yaml's 2000")
    parser.add_argument("--odir", default="searched", help="'searched' (the workflow) or LAMBDA,MU for ms and dir")
    parser.add_argument("--also-infer", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="after everything, the inference jobs again with these runtime keys (or precision) "
                             "changed (e.g. networks_per_pass=1, precision=tf32x3), reported apart; repeatable")
    parser.add_argument("--sync-networks", type=int, default=8, help="networks in the sync-counting fit")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "bench_gpu_workflow",
                        help="archives and datasets (cached between runs) and the results directory")
    parser.add_argument("--build-workers", type=int, default=max(1, min(16, len(os.sched_getaffinity(0)))))
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds: start no new job after this (what was measured is kept)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="the CPU check: --device cpu, 3 networks, 200 test images, a 2 x 2 search grid, 2 folds, "
                             "fits limited to 300 iterations (search 100)")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.device = "cpu"
        args.networks = min(args.networks, 3)
        args.n_test = min(args.n_test, 200)
        args.search_grid = args.search_grid or "10,1000"
        args.search_folds = args.search_folds or 2
        args.search_max_iterations = args.search_max_iterations or 100
        args.max_iterations = args.max_iterations or 300
        args.batch_size = min(args.batch_size, 1000)
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.stages = [s for s in args.stages.split(",") if s]
    spaces = [s for s in args.spaces.split(",") if s]
    bad = [d for d in args.datasets if d not in ALL_DATASETS] + [s for s in args.stages if s not in ALL_STAGES]
    bad += [s for s in spaces if s not in HP]
    if bad or "pre" not in args.stages:
        parser.error(f"unknown dataset, stage or space {bad}" if bad else "stages: pre is required")
    runtime_extra = {}
    for item in args.runtime:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--runtime {item!r}: expected KEY=VALUE")
        runtime_extra[key] = parse_value(value)

    try:
        import nats_bench  # noqa: F401 - the archive reader of the infer jobs
    except ImportError:
        print("nats_bench is not importable: the infer jobs read archives through it (pip install nats_bench==1.8; "
              "on the GPU machine carry it, see bench/gpu_check.sh)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from calibench import layout, vocabulary
    from calibench.config import settings as stage
    from calibench.inference.engine import resolve_device
    from calibench.measure.jobs import measure_chunk_job, odir_search_job
    from calibench.sources.nats.jobs import write_labels, write_population

    started = time.perf_counter()
    deadline = None if args.time_limit is None else started + args.time_limit
    device = resolve_device(args.device)
    cuda_init = None
    if device.type == "cuda":
        t0 = time.perf_counter()
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
        cuda_init = round(time.perf_counter() - t0, 3)
    workdir = args.workdir.resolve()
    config = make_config(args, workdir)
    # the workflow's runtime flags (common.smk RUNTIME) from config/nats.yaml, as given here, plus --runtime
    runtime = {k: config[k] for k in RUNTIME_KEYS if k in config}
    runtime.update({"device": args.device, "batch_size": args.batch_size,
                    "loader_workers": parse_value(args.loader_workers), "measure_group": parse_value(args.measure_group),
                    **runtime_extra})
    sizes = {d: max(20, round(REAL_N[d] * args.n_test / 10_000)) for d in ALL_DATASETS}
    svhn = max(20, round(REAL_SVHN * args.n_test / 10_000))
    doc: dict = {
        "what": "bench/bench_gpu_workflow.py: the workflow's own jobs on format-faithful NATS archives of real "
                "architectures with RANDOM bodies and heads fitted on synthetic images, and SYNTHETIC evaluation "
                "sets at the given sizes (timings only: not NATS-Bench results)",
        "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
        "device": device_record(device), "cuda_init_seconds": cuda_init,
        "settings": {"device": args.device, "measure_group": runtime["measure_group"], "batch_size": args.batch_size,
                     "precision": config.get("precision", "float32"), "loader_workers": runtime["loader_workers"],
                     "networks_per_pass": runtime.get("networks_per_pass"),
                     "chunk_size": args.chunk_size, "runtime": runtime, "networks_per_space": args.networks,
                     "datasets": args.datasets, "stages": args.stages, "eval_images": sizes, "svhn_images": svhn,
                     "gaussian_noise_images": sizes["cifar10"],
                     "odir": args.odir, "search": config["recalibration"]["odir"]["search"],
                     "max_iterations": config["recalibration"]["max_iterations"]},
        "build": {}, "inference": {}, "search": {}, "measurement": {}, "syncs_per_lbfgs_iteration": {},
        "inference_variants": {}, "skipped": [],
    }
    print(f"device {doc['device'].get('name')} ({device}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {doc['device']['cudnn']}; runtime {runtime}; precision {doc['settings']['precision']}", flush=True)

    def save():
        doc["projection"] = projection(doc, spaces, args)  # so that a run killed later leaves one
        doc["overall"] = overall(doc)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.out.with_suffix(args.out.suffix + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1, default=str))
            tmp.replace(args.out)

    def failed(what: str, exc: BaseException, errors: list) -> None:
        import traceback

        traceback.print_exc()
        print(f"  FAILED: {what}: {type(exc).__name__}: {exc}", flush=True)
        errors.append(f"{what}: {type(exc).__name__}: {exc}")
        save()

    def time_left(what: str) -> bool:
        if deadline is not None and time.perf_counter() > deadline:
            doc["skipped"].append(what)
            print(f"  (time limit: {what} not run)", flush=True)
            save()
            return False
        return True

    def on_signal(signum, frame):
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)  # from here: a `timeout` during the build still leaves the JSON
    # inputs
    try:
        t = build_datasets(workdir / "datasets", {d: sizes[d] for d in ALL_DATASETS}, svhn)
        doc["build"]["datasets_seconds"] = round(t, 1)
        archs = {"tss": tss_archs(args.networks), "sss": sss_archs(args.networks)}
        for space in spaces:
            t = build_archive(Path(config["archives"][space]), space, archs[space], tuple(args.datasets),
                              args.build_workers, workdir / "datasets")
            doc["build"][f"{space}_archive_seconds"] = round(t, 1)
    except Interrupted as exc:
        doc["interrupted"] = f"{exc}, while building the inputs"
        save()
        print(f"\nINTERRUPTED ({exc}) while building the inputs: nothing measured", flush=True)
        return 1
    print(f"inputs ready (built in {sum(doc['build'].values()):.1f} s; cached under {workdir})", flush=True)

    results = workdir / "results"
    if results.exists():
        shutil.rmtree(results)
    sampler = BusySampler().start() if device.type == "cuda" else None
    doc["gpu_busy_source"] = sampler.source if sampler else None
    try:
        def infer_all(into: Path, run_runtime: dict, record: dict, label: str, run_config: dict | None = None) -> dict:
            """The population and infer jobs of every space into ``into`` (``run_config``: the
            configuration, default the run's); records per target."""
            run_config = config if run_config is None else run_config
            for dataset in args.datasets:
                write_labels(stage.labels_settings(config), dataset, layout.labels_path(into, dataset))
            pops = {}
            for space in spaces:
                hp = HP[space]
                target = layout.target_name(space, hp)
                pop = write_population(stage.population_settings(config, space), space,
                                       layout.population_path(into, space))
                pops[space] = pop
                settings = stage.inference_settings(run_config, space)
                for chunk in range(len(pop["chunks"])):
                    if not time_left(f"infer{label} {target} chunk {chunk}"):
                        break
                    manifest = layout.infer_manifest(into, target, chunk)
                    used = run_runtime
                    try:
                        with Phase(device, sampler) as phase:
                            summary, events, eval_load = timed_inference(settings, used, space, hp, chunk, into,
                                                                         manifest, device)
                    except Exception as exc:  # noqa: BLE001 - unattended: say it, go on with what can run
                        failed(f"infer{label} {target} chunk {chunk}", exc, doc.setdefault("errors", []))
                        if run_runtime.get("networks_per_pass") in (1, "1"):
                            continue
                        used = {**run_runtime, "networks_per_pass": 1}  # the one-network path, so the rest can run
                        # what the failed job stored would be skipped (resumption): timed from scratch
                        shutil.rmtree(layout.logits_path(into, space, hp, "x", 0).parents[1], ignore_errors=True)
                        print(f"  infer{label} {target} chunk {chunk}: again with networks_per_pass=1", flush=True)
                        try:
                            with Phase(device, sampler) as phase:
                                summary, events, eval_load = timed_inference(settings, used, space, hp, chunk, into,
                                                                             manifest, device)
                        except Exception as exc2:  # noqa: BLE001
                            failed(f"infer{label} {target} chunk {chunk} (networks_per_pass=1)", exc2,
                                   doc["errors"])
                            continue
                    n = len(pop["chunks"][chunk])
                    rec = {**phase.record(), "networks": n, "computed": summary["computed"],
                           "failures": [f"{f['arch_index']} {f['dataset']}: {f['reason']}" for f in summary["failures"]],
                           "per_network_seconds": round(phase.seconds / n, 4),
                           "setup_seconds": round(eval_load, 3),  # evaluation sets read, normalised, to the device
                           "steady_per_network_seconds": round((phase.seconds - eval_load) / n, 4),
                           # the main process per network: build and load, fold, forward passes to the
                           # logits on the host (the rest: waits for the loaders, checks, hand-offs)
                           "main_process_per_network_seconds": {
                               k: round(v / n, 4) for k, v in summary["main_process_split_seconds"].items()},
                           **({"runtime_fallback": used} if used is not run_runtime else {})}
                    if events:  # split by dataset: the time between results, the set-up taken off the first
                        per = {}
                        for j, (_, d, gap) in enumerate(events):
                            per.setdefault(d, []).append(max(0.0, gap - eval_load) if j == 0 else gap)
                        rec["per_dataset"] = {d: {"per_network_seconds": round(sum(g) / n, 4), "results": len(g),
                                                  "median_gap_seconds": round(statistics.median(g), 4)}
                                              for d, g in per.items()}
                    record.setdefault(target, []).append(rec)
                    print(f"infer{label} {target} chunk {chunk}: {n} networks in {phase.seconds:.1f} s "
                          f"({phase.seconds / n * 1e3:.0f} ms per network; eval sets to the device "
                          f"{rec['setup_seconds']:.1f} s); per network "
                          + ", ".join(f"{d} {v['per_network_seconds'] * 1e3:.0f} ms"
                                      for d, v in rec.get("per_dataset", {}).items())
                          + "; main process per network: " + ", ".join(
                              f"{k} {v * 1e3:.0f} ms" for k, v in rec["main_process_per_network_seconds"].items())
                          + f"; peak {rec['peak_gpu_memory_gib']} GiB, busy {rec['gpu_busy_fraction']}"
                          + (f"; FAILURES {rec['failures'][:3]}" if rec["failures"] else ""), flush=True)
                    save()
            return pops

        # 1. inference, every space first (the store the rest reads)
        populations = infer_all(results, runtime, doc["inference"], "")

        # 2. per (dataset, space): the search, then the measurement with its result (datasets
        # outer, so that a run cut off by --time-limit has both spaces of the first datasets)
        searched = stage.odir_searched_stages(config)
        settings = stage.measurement_settings(config)
        measured = []
        for dataset in args.datasets:
            for space in spaces:
                hp = HP[space]
                target = layout.target_name(space, hp)
                pop = populations[space]
                manifests = [layout.infer_manifest(results, target, c) for c in range(len(pop["chunks"]))]
                manifests = [m for m in manifests if m.is_file()]
                if not manifests:
                    continue
                labels_file = layout.labels_path(results, dataset)
                odir_file = None
                key = f"{target}_{dataset}"
                if searched:
                    if not time_left(f"odir_search {key}"):
                        continue
                    odir_file = layout.odir_path(results, target, dataset)
                    search_settings = stage.odir_search_settings(config)
                    try:
                        with Phase(device, sampler) as phase:
                            found = odir_search_job(search_settings, space, hp, dataset, results, manifests,
                                                    labels_file, odir_file, device=args.device)
                    except Exception as exc:  # noqa: BLE001
                        failed(f"odir_search {key}", exc, doc.setdefault("errors", []))
                        continue
                    pairs = len(search_settings["grid"]) ** 2
                    fits = len(found["networks"]) * search_settings["folds"] * pairs * len(searched)
                    doc["search"][key] = {
                        **phase.record(), "networks": len(found["networks"]), "folds": search_settings["folds"],
                        "grid_pairs": pairs, "stages": searched, "n_val": found["n_val"],
                        "per_network_fold_pair_stage_ms": round(phase.seconds / fits * 1e3, 4),
                        "chosen": {s: (v["lambda"], v["mu"], bool(v[f"{s}_{vocabulary.SEARCH_FLAG}"]))
                                   for s, v in found["chosen"].items()},
                        "iterations_max": {s: int(np.nanmax(np.asarray(g["iterations"], dtype=float)))
                                           for s, g in found["grid"].items()},
                    }
                    rec = doc["search"][key]
                    print(f"odir_search {key}: {phase.seconds:.1f} s ({rec['networks']} networks x {rec['folds']} folds "
                          f"x {pairs} pairs x {len(searched)} stages: {rec['per_network_fold_pair_stage_ms']:.3f} ms "
                          f"each); chosen " + ", ".join(f"{s} lambda={v[0]:g} mu={v[1]:g}" + (" (worse than identity)" if v[2] else "")
                                                        for s, v in rec["chosen"].items())
                          + f"; most iterations {rec['iterations_max']}; peak {rec['peak_gpu_memory_gib']} GiB, "
                          f"busy {rec['gpu_busy_fraction']}", flush=True)
                    save()
                for chunk, manifest in enumerate(manifests):
                    if not time_left(f"measure {key} chunk {chunk}"):
                        break
                    timer = StageTimer(device)
                    try:
                        with timer.active(), Phase(device, sampler) as phase:
                            summary = measure_chunk_job(settings, runtime, space, hp, dataset, chunk, results,
                                                        manifest, labels_file,
                                                        layout.measure_manifest(results, target, dataset, chunk),
                                                        keep_logits=True, progress=False, odir_file=odir_file)
                    except Exception as exc:  # noqa: BLE001
                        failed(f"measure {key} chunk {chunk}", exc, doc.setdefault("errors", []))
                        continue
                    n = len(pop["chunks"][chunk])
                    rec = {**phase.record(), "networks": n, "computed": summary["computed"],
                           "per_network_seconds": round(phase.seconds / n, 4),
                           "stage_failures": len([f for f in summary["failures"] if f.get("stage") in ALL_STAGES]),
                           "per_stage_per_network_ms": {s: round(v / max(1, timer.networks.get(s, 0)) * 1e3, 3)
                                                        for s, v in timer.stage.items()},
                           "fit_per_network_ms": {s: round(v / max(1, timer.networks.get(s, 0)) * 1e3, 3)
                                                  for s, v in timer.fit.items()}}
                    doc["measurement"].setdefault(key, []).append(rec)
                    print(f"measure {key} chunk {chunk}: {n} networks in {phase.seconds:.1f} s "
                          f"({phase.seconds / n * 1e3:.0f} ms per network); per stage (ms per network) "
                          + " ".join(f"{s} {v:.1f}" for s, v in rec["per_stage_per_network_ms"].items())
                          + f"; peak {rec['peak_gpu_memory_gib']} GiB, busy {rec['gpu_busy_fraction']}"
                          + (f"; {rec['stage_failures']} stage(s) NaN" if rec["stage_failures"] else ""), flush=True)
                    save()
                measured.append((key, space, hp, dataset, manifests[0], labels_file, odir_file))

        # 3. host synchronisations per L-BFGS iteration of ms and dir (CUDA), last: not a job
        if device.type == "cuda" and ({"ms", "dir"} & set(args.stages)):
            from calibench.measure.jobs import resolve_odir

            for key, space, hp, dataset, manifest, labels_file, odir_file in measured:
                if not time_left(f"sync count {key}"):
                    break
                try:
                    found = sync_count(results, space, hp, dataset, manifest, labels_file,
                                       resolve_odir(settings, odir_file), device, args.sync_networks)
                except Exception as exc:  # noqa: BLE001 - a figure missing, not the benchmark
                    found = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"host syncs per L-BFGS iteration {key}: not counted ({found['error']})", flush=True)
                else:
                    print(f"host syncs per L-BFGS iteration {key}: "
                          + ", ".join(f"{s} {v['per_iteration']} ({v['syncs']} in {v['iterations']} iterations, "
                                      f"{v['networks']} networks)" for s, v in found.items()), flush=True)
                doc["syncs_per_lbfgs_iteration"][key] = found
                save()

        # 4. inference again under other runtime settings (--also-infer), if time is left
        for i, variant in enumerate(args.also_infer):
            extra = dict(item.partition("=")[::2] for item in variant.split(","))
            extra = {k: parse_value(v) for k, v in extra.items()}
            # precision is a setting of the logits (it enters their key), the rest runtime only
            settings_extra = {k: extra.pop(k) for k in [k for k in extra if k in VARIANT_SETTINGS]}
            into = workdir / f"results_variant{i}"
            if into.exists():
                shutil.rmtree(into)
            label = f" [{variant}]"
            doc["inference_variants"][variant] = {}
            infer_all(into, {**runtime, **extra}, doc["inference_variants"][variant], label,
                      {**config, **settings_extra})
            shutil.rmtree(into, ignore_errors=True)
    except Interrupted as exc:  # `timeout` (gpu_check.sh) or a kill: summarise what was measured
        doc["interrupted"] = str(exc)
        print(f"\nINTERRUPTED ({exc}): the figures below are what was measured before", flush=True)
    finally:
        if sampler:
            sampler.stop()
    if device.type != "cuda":
        print("host syncs per L-BFGS iteration: n/a (CPU)")
    doc["projection"] = projection(doc, spaces, args)
    doc["overall"] = overall(doc)
    doc["total_seconds"] = round(time.perf_counter() - started, 1)
    save()
    print(summary_table(doc, spaces, args.datasets))
    print(f"\n{doc['projection']['line']}")
    for note in doc["projection"]["notes"]:
        print(f"  {note}")
    print(f"(benchmark wall time {doc['total_seconds']:.0f} s)")
    return 0


def _phases(doc: dict) -> list[dict]:
    out = [r for runs in doc["inference"].values() for r in runs]
    out += [r for runs in doc["measurement"].values() for r in runs]
    return out + list(doc["search"].values())


def overall(doc: dict) -> dict:
    """Peak GPU memory over every job, and the GPU-busy fraction weighted by each job's time."""
    phases = _phases(doc)
    peaks = [p["peak_gpu_memory_gib"] for p in phases if p.get("peak_gpu_memory_gib") is not None]
    busy = [(p["gpu_busy_fraction"], p["seconds"]) for p in phases if p.get("gpu_busy_fraction") is not None]
    return {"peak_gpu_memory_gib": max(peaks) if peaks else None,
            "gpu_busy_fraction": round(sum(b * t for b, t in busy) / sum(t for _, t in busy), 3) if busy else None,
            "job_seconds": round(sum(p["seconds"] for p in phases), 1)}


def summary_table(doc: dict, spaces: list[str], datasets: list[str]) -> str:
    """One line per (space, dataset): inference, search and measurement per network, the
    costliest stages, peak memory and busy fraction of the measurement."""
    lines = ["", f"summary ({doc['device'].get('name')}): infer, measure in ms per network (measure: the job's wall "
                 "time); search s: the job's wall time; ms/fit: search ms per network x fold x grid pair x stage",
             f"{'space/dataset':28s} {'infer':>8s} {'measure':>8s} {'search s':>9s} {'ms/fit':>7s}  stages (ms per network)"]
    for space in spaces:
        target = f"{space}_{HP[space]}"
        runs = doc["inference"].get(target) or []
        for dataset in datasets:
            key = f"{target}_{dataset}"
            infer = [r["per_dataset"][dataset]["per_network_seconds"] for r in runs if dataset in r.get("per_dataset", {})]
            meas = doc["measurement"].get(key) or []
            per = sum(r["seconds"] for r in meas) / max(1, sum(r["networks"] for r in meas)) if meas else None
            stages = meas[0]["per_stage_per_network_ms"] if meas else {}
            found = doc["search"].get(key)
            cells = [f"{statistics.fmean(infer) * 1e3:.0f}" if infer else "-",
                     f"{per * 1e3:.0f}" if per is not None else "-",
                     f"{found['seconds']:.1f}" if found else "-",
                     f"{found['per_network_fold_pair_stage_ms']:.3f}" if found else "-"]
            lines.append(f"{key:28s} {cells[0]:>8s} {cells[1]:>8s} {cells[2]:>9s} {cells[3]:>7s}  "
                         + " ".join(f"{s} {v:.1f}" for s, v in stages.items()))
    for variant, records in doc.get("inference_variants", {}).items():
        for target, runs in records.items():
            main = doc["inference"].get(target) or []
            mine = sum(r["steady_per_network_seconds"] for r in runs) / len(runs)
            base = sum(r["steady_per_network_seconds"] for r in main) / len(main) if main else None
            lines.append(f"inference with {variant}, {target}: {mine * 1e3:.0f} ms per network"
                         + (f" (main run {base * 1e3:.0f} ms: x{mine / base:.2f})" if base else "") + "; "
                         + ", ".join(f"{d} {v['per_network_seconds'] * 1e3:.0f}"
                                     for d, v in runs[0].get("per_dataset", {}).items()))
    o = doc.get("overall") or {}
    syncs = {k: {s: v.get("per_iteration") for s, v in d.items() if isinstance(v, dict)}
             for k, d in doc["syncs_per_lbfgs_iteration"].items()}
    lines.append(f"peak GPU memory {o.get('peak_gpu_memory_gib')} GiB; GPU busy {o.get('gpu_busy_fraction')} "
                 f"(time-weighted over the jobs, {doc.get('gpu_busy_source')}); host syncs per L-BFGS iteration "
                 + (", ".join(f"{k} {v}" for k, v in syncs.items()) if syncs else "n/a"))
    if doc["skipped"]:
        lines.append(f"not run (time limit): {', '.join(doc['skipped'])}")
    for error in doc.get("errors", []):
        lines.append(f"ERROR: {error}")
    return "\n".join(lines)


def projection(doc: dict, spaces: list[str], args) -> dict:
    """GPU hours for 117,702 networks from the per-network figures: inference at the steady
    per-network rate plus each job's set-up over a 200-network chunk; measurement at the job's
    per-network wall time; the six searches at their wall time, scaled to 64 networks, the
    real grid and folds where the run used fewer."""
    notes = []
    hours = {"inference": 0.0, "measurement": 0.0, "searches": 0.0}
    complete = True
    scales, unscaled = [], 0.0
    for space in ("tss", "sss"):
        target = f"{space}_{HP[space]}"
        runs = doc["inference"].get(target) or []
        if not runs:
            complete = False
            notes.append(f"{space}: no inference measured")
        else:
            n = sum(r["networks"] for r in runs)
            steady = sum(r.get("steady_per_network_seconds", r["per_network_seconds"]) * r["networks"] for r in runs) / n
            # the slowest evaluation-set loading seen (a later job in this process can find the files cached)
            setup = max(r.get("setup_seconds", 0.0) for recs in doc["inference"].values() for r in recs)
            scale = len(ALL_DATASETS) / len(args.datasets)
            if scale != 1:
                notes.append(f"{space}: inference measured on {args.datasets} only; scaled by {scale:.2f} (rough)")
            hours["inference"] += POPULATION[space] * (steady + setup / REAL_CHUNK) * scale / 3600
        for dataset in ALL_DATASETS:
            key = f"{target}_{dataset}"
            runs = doc["measurement"].get(key) or []
            if not runs:
                complete = False
                notes.append(f"{key}: no measurement")
            else:
                per = sum(r["seconds"] for r in runs) / sum(r["networks"] for r in runs)
                hours["measurement"] += POPULATION[space] * per / 3600
            found = doc["search"].get(key)
            if found is None:
                if args.odir != "searched":
                    notes.append(f"{key}: no search (lambda, mu given: --odir {args.odir})")
                    complete = False
                elif "ms" in args.stages or "dir" in args.stages:
                    complete = False
                    notes.append(f"{key}: no search")
                continue
            scale = (64 / found["networks"]) * (5 / found["folds"]) * (36 / found["grid_pairs"]) * (
                2 / len(found["stages"]))
            scales.append(scale)
            hours["searches"] += found["seconds"] * scale / 3600
            unscaled += found["seconds"] / 3600
    if any(x != 1 for x in scales):
        notes.append(f"searches scaled linearly to 64 networks x 5 folds x 36 pairs x 2 stages (x{min(scales):.1f} to "
                     f"x{max(scales):.1f}): an upper bound, since the fits are batched over networks x folds; as "
                     f"measured, unscaled: {unscaled:.3f} h")
    if len(args.stages) < len(ALL_STAGES):
        complete = False
        notes.append(f"stages {args.stages} only: the other stages' measurement is missing")
    name = doc["device"].get("name", "?")
    total = sum(hours.values())
    line = (f"Whole population, one {name}: {total:.1f} GPU-hours (inference {hours['inference']:.1f} h, "
            f"measurement {hours['measurement']:.1f} h, searches {hours['searches']:.2f} h), {doc['date']}")
    if not complete:
        line += f"  [PARTIAL: {sum('no ' in n or ' only' in n for n in notes)} part(s) missing or scaled; see below]"
    notes.append("assumes: 6,466 TSS + 32,768 SSS networks x 3 datasets on one GPU, jobs back to back (no CPU "
                 "job overlapping); inference at the job's per-network time without its evaluation-set loading, plus "
                 "that loading once per 200-network chunk (config/nats.yaml), each job process's CUDA start-up not "
                 "counted; measurement at the job's wall time per network; the six searches at their wall time. "
                 "Networks: real architectures, random bodies with heads fitted on synthetic images (not trained "
                 "NATS weights): inference time does not depend on the weights, but the iterations of vs/ms/dir "
                 "and of the search do. Archive files hold one state dict per dataset (real -full files 16-17, "
                 "read by loader processes overlapping the GPU: BENCHMARKS.md 'Archive loading')")
    if doc["settings"]["eval_images"]["cifar10"] != REAL_N["cifar10"]:
        notes.append("EVALUATION SETS SCALED (--n-test): not a projection of the real sizes")
    return {"hours": {k: round(v, 3) for k, v in hours.items()}, "total_hours": round(total, 3),
            "complete": complete, "line": line, "notes": notes}


if __name__ == "__main__":
    sys.exit(main())
