"""The analysis, part by part (``calibench.analysis.parts``), on full-size result tables: wall
time and peak memory of each part's process, and the total.

Synthesises the six wide tables of a real NATS-Bench run (config/nats.yaml) the way
``calibench.results.tables.build_table`` writes them, under ``{dir}/results/tables/``:

* TSS: all 15,625 architectures (strings ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``
  enumerated over the 5 operations in product order, edge 1<-0 slowest), measured once
  per isomorphism class (``population.tss_representatives``: 6,466 classes) and
  expanded to every member, ``measured_by`` naming the class representative, as
  ``build_table`` does; SSS: all 32,768 channel strings ``c1:c2:c3:c4:c5``; each on
  cifar10, cifar100 and ImageNet16-120: 145,179 rows, 117,702 measured networks.
* Columns: the keys and provenance of ``tables.FIRST`` / ``tables.PROVENANCE`` (with the
  dtypes the build gives), then ``{stage}_{name}`` for every configured stage, where the
  names per stage are those a measurement job produces: they are taken from
  ``calibration.measure_stages_batch`` run once on tiny random logits with the config's
  bins, stages, recalibration options and OoD sets (the suite at every bin count, the
  unbinned metrics, ``ood_auroc_*`` on CIFAR-10 only, the ``fit_*`` parameters).
* Values: a latent quality per network (TSS: the convolutions on live paths of its
  canonical cell, 0 for cells whose output does not see the input; SSS: total channels)
  shared across datasets; accuracy on the whole evaluation set (10,000 / 10,000 / 6,000
  images) and per stage on the 80 % test part, as counts over those images (ties);
  calibration errors correlated with accuracy, growing with the bin count; temperature
  scaling keeps the accuracy; a few failed fits (vs, ms, dir, spline: every metric of the
  stage NaN, ``fit_converged`` 0), a few +inf NLLs (iso, hist, spline); ODIR lambda, mu
  one value per table; the schema metadata ``build_table`` writes (stages, the constant
  ``fit_*``).
* For the best and worst network by HCS of every table (what the reliability part
  draws) a shard with its reliability bins, as measurement
  jobs write them.

Then runs every analysis part of the config (``calibench.analysis.registry``: kendall, overview,
hcs, methods, reliability, groups, nas, architecture, and schedules or robustness where
configured) and the report, each in its own fresh process with its settings
(``registry.config_part_settings``), in the order of the workflow's jobs, as its
Snakemake job runs it (``calibench.analysis.parts.run_part``,
``calibench.report.assemble.write``). Per part: wall time of the process (imports
included), the run time, and the peak RSS of that process alone (``os.wait4``'s rusage);
then the total over the parts (what one core running the jobs one after the other takes)
and the largest peak. Inside the Kendall part, the pairs computed per interval kind
(bootstrap, jackknife) and their time. ``--profile`` adds each part's cProfile top
functions (slower; saved as ``{dir}/{part}.prof``); ``--parts`` runs only the parts named.

    python bench/bench_analysis.py                          # full size, the config's 1,000 resamples
    python bench/bench_analysis.py --resamples 0            # jackknife intervals only
    python bench/bench_analysis.py --scale 0.02 --resamples 20   # a quick check (2 % of the rows)
    python bench/bench_analysis.py --scale 0.05 --profile --parts kendall

The data directory (``--dir``, default ``/tmp/calibench-bench-analysis-s{scale}``) is
reused when it holds tables of the same configuration; the analysis writes its outputs
(``analysis/``, ``plots/``, ``report.html``) next to them in ``{dir}/results``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = 2  # bump when the synthetic tables change: a directory of another version is rebuilt
N_EVAL = {"cifar10": 10_000, "cifar100": 10_000, "ImageNet16-120": 6_000}  # evaluation images
TOP = {("tss", "cifar10"): 0.944, ("tss", "cifar100"): 0.735, ("tss", "ImageNet16-120"): 0.470,
       ("sss", "cifar10"): 0.935, ("sss", "cifar100"): 0.705, ("sss", "ImageNet16-120"): 0.455}
MISCALIBRATION = {"cifar10": 0.035, "cifar100": 0.10, "ImageNet16-120": 0.075}  # typical pre ECE
FAILED = {"vs": 1e-3, "ms": 3e-3, "dir": 3e-3, "spline": 3e-4}  # share of networks whose fit fails
INFINITE_NLL = {"iso": 3e-3, "hist": 6e-3, "spline": 1e-3}  # share with an NLL of +inf
ODIR = {"ms": (1e-3, 1e-1), "dir": (1e-1, 1e-3)}  # (lambda, mu) the search would choose
SEED = 777


# ---------------------------------------------------------------- configuration

def load_config(path: Path) -> dict:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f)


def ood_sets(config: dict) -> list[str]:
    """The OoD sets CIFAR-10 networks are measured on (SVHN only with a file configured)."""
    ood = config.get("ood") or {}
    return [s for s in ood.get("sets", []) if s != "svhn" or ood.get("svhn")]


def probe_names(config: dict) -> dict[str, list[str]]:
    """Per stage, the value names a measurement job stores for a CIFAR-10 network (with the
    OoD AUROCs), in the job's order: ``measure_stages_batch`` on 2 tiny random networks."""
    import torch

    from calibench.measure.stages import measure_stages_batch
    from calibench.config.settings import recalibration_settings

    options = recalibration_settings(config)
    for stage in ("ms", "dir"):
        if stage in options:
            lam, mu = ODIR[stage]
            options[stage] = {"lambda": options[stage]["lambda"] or lam, "mu": options[stage]["mu"] or mu}
    g = torch.Generator().manual_seed(0)
    m, n, k = 2, 120, 4
    logits = torch.randn(m, n, k, generator=g, dtype=torch.float64) * 2
    labels = torch.arange(n) % k
    ood = {s: torch.randn(m, 30, k, generator=g) for s in ood_sets(config)}
    temp = config["temperature"]
    out = measure_stages_batch(logits, labels, bins=config["bins"], val_fraction=temp["val_fraction"],
                               seed=temp["seed"], method=temp["method"], tace_threshold=config["tace_threshold"],
                               stages=config["stages"], recalibration={"temperature": temp, **options},
                               ood_logits=ood)
    return {stage: list(out[stage]) for stage in config["stages"]}


def table_config(config: dict, scale: float) -> dict:
    """What the synthetic tables depend on (a directory holding another is rebuilt)."""
    from calibench import __version__

    return {"generator": GENERATOR, "calibench": __version__, "scale": scale, "spaces": list(config["spaces"]),
            "hp": {s: str(config["hp"][s]) for s in config["spaces"]}, "datasets": list(config["datasets"]),
            "bins": list(config["bins"]), "stages": list(config["stages"]), "ood": ood_sets(config),
            "population": {s: config["population"][s] for s in config["spaces"]},
            "val_fraction": config["temperature"]["val_fraction"]}


# ---------------------------------------------------------------- populations

def tss_population(scale: float, rng: np.random.Generator) -> dict:
    """Every TSS string in product order, the class representative of each, the measured
    representatives (all, or a seeded ``scale`` share of the classes) and each network's
    quality (0: the output does not see the input)."""
    from calibench.sources.nats.archstr import TSS_OPS
    from calibench.sources.nats.population import tss_canonical_form, tss_representatives

    arch_strs = [f"|{a}~0|+|{b}~0|{c}~1|+|{d}~0|{e}~1|{f}~2|" for a, b, c, d, e, f in
                 itertools.product(TSS_OPS, repeat=6)]
    reps = np.array(tss_representatives(arch_strs), np.int64)
    classes = np.unique(reps)
    if scale < 1:
        classes = np.sort(rng.choice(classes, max(2, round(scale * len(classes))), replace=False))
    quality = np.zeros(len(classes))
    params, flops = np.zeros(len(classes)), np.zeros(len(classes))
    for j, i in enumerate(classes):
        key = tss_canonical_form(arch_strs[i])
        if "0" in key:  # the input reaches the output
            paths = 0.9 * key.count("@nor_conv_3x3") + 0.4 * key.count("@nor_conv_1x1") + 0.15 * key.count("@avg")
            quality[j] = 0.45 + 0.55 * (1 - np.exp(-paths)) + rng.normal(0, 0.02)
        ops = arch_strs[i].count("nor_conv_3x3"), arch_strs[i].count("nor_conv_1x1")
        params[j] = 0.0734 + 0.24 * ops[0] + 0.028 * ops[1]
        flops[j] = 7.8 + 36.0 * ops[0] + 4.1 * ops[1]
    members = np.flatnonzero(np.isin(reps, classes))  # rows: every member of a measured class, by index
    return {"arch_strs": arch_strs, "measured": classes, "quality": np.clip(quality, 0, 1), "params": params,
            "flops": flops, "rows": members, "measured_by": reps[members],
            "row_of": np.searchsorted(classes, reps[members])}  # per row: its measured network


def sss_population(scale: float, rng: np.random.Generator) -> dict:
    from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES

    channels = np.array(list(itertools.product(SSS_CHANNEL_CHOICES, repeat=5)), np.int64)
    arch_strs = [":".join(map(str, c)) for c in channels]
    measured = np.arange(len(arch_strs))
    if scale < 1:
        measured = np.sort(rng.choice(measured, max(2, round(scale * len(measured))), replace=False))
    c = channels[measured]
    total = c.sum(axis=1)
    quality = 0.80 + 0.20 * np.sqrt((total - 40) / 280) + rng.normal(0, 0.01, len(measured))
    params = (9 * 5 * (c[:, :-1] * c[:, 1:]).sum(axis=1) + 27 * c[:, 0] + 100 * c[:, -1]) / 1e6
    return {"arch_strs": arch_strs, "measured": measured, "quality": np.clip(quality, 0, 1), "params": params,
            "flops": params * 61.0, "rows": measured, "measured_by": measured, "row_of": np.arange(len(measured))}


# ---------------------------------------------------------------- values of one table

def _counts(p: np.ndarray, n: int) -> np.ndarray:
    """A fraction as a count over ``n`` images (accuracies are such: ties)."""
    return np.round(np.clip(p, 0, 1) * n) / n


def _fit_values(rng, stage: str, name: str, n: int, net: dict) -> np.ndarray:
    base = name[len("fit_"):]
    failed = net["failed"].get(stage, np.zeros(n, bool))
    if base == "converged":  # iso, hist, spline record 1 even where they fail (non-finite maps)
        v = np.ones(n)
        if stage in ("post", "vs", "ms", "dir"):
            v[failed] = 0.0
    elif base == "iterations":
        if stage in ("iso", "hist", "spline"):
            v = np.zeros(n)
        else:
            hi = {"post": 30, "vs": 400}.get(stage, 1000)
            v = rng.integers(4 if stage == "post" else 20, hi, n).astype(float)
            v[failed] = net["max_iterations"]
    elif base == "temperature":
        v = net["temperature"]
    elif base in ("lambda", "mu"):
        v = np.full(n, ODIR.get(stage, (1e-3, 1e-3))[base == "mu"])
    elif base == "absent_classes":
        v = np.zeros(n)
    elif base == "gradient_norm":
        v = 10 ** rng.uniform(-9, -6.1, n)
        v[failed] = 10 ** rng.uniform(-5, -3, int(failed.sum()))
    elif base == "empty_bins":
        v = np.clip(rng.beta(2, 8, n) * (1 + net["k"] / 60), 0, 1)
    elif base == "knots":
        v = rng.uniform(10, 40, n) * (net["n_val"] / 2000) / np.sqrt(net["k"] / 10)
    elif base in ("mean_shift", "w_mean", "w_diag_mean"):
        v = rng.normal(0 if base == "mean_shift" else 1 / net["temperature"], 0.01, n)
    elif base == "objective":
        v = net["nll"] * rng.uniform(0.85, 1.0, n)
    else:  # norms and other magnitudes
        v = rng.lognormal(0.0, 0.5, n)
    return v


def stage_values(rng, stage: str, names: list[str], net: dict, e: np.ndarray, acc: np.ndarray) -> dict:
    """Every value of one stage for the measured networks: ``e`` its miscalibration, ``acc``
    its accuracy on the test part."""
    from calibench.results.shards import split_metric_name

    n, k, n_test = len(e), net["k"], net["n_test"]
    u = lambda lo, hi: rng.uniform(lo, hi, n)  # noqa: E731
    spread = np.sqrt(np.clip(acc * (1 - acc), 1e-4, None))
    out = {}
    for name in names:
        if name.startswith("fit_"):
            continue
        metric, bins = split_metric_name(name)
        if bins is not None:
            bias = 0.35 * np.sqrt(bins / n_test) * spread  # the finite-sample part grows with the bins
            ece = np.sqrt(e ** 2 + bias ** 2)
            v = {"ece": ece * u(0.97, 1.03), "ece_em": ece * u(0.93, 1.05),
                 "mce": np.clip(ece * (2.5 + np.sqrt(bins) / 3) * u(0.7, 1.3), 0, 1),
                 "cwce": ece * 1.6 / np.sqrt(k) * u(0.9, 1.1), "cwce_em": ece * 1.5 / np.sqrt(k) * u(0.9, 1.05),
                 "ace": ece * 1.8 / np.sqrt(k) * u(0.95, 1.3), "tace": ece * 1.7 / np.sqrt(k) * u(0.9, 1.3)}.get(metric)
        elif metric == "accuracy":
            v = acc
        elif metric == "nll":
            v = (1 - acc) * (3 + 30 * e) * u(0.95, 1.05) + 0.02
        elif metric.startswith("ood_auroc_"):
            v = np.clip(0.55 + 0.35 * net["quality"] + rng.normal(0, 0.04, n) + (0.02 if stage != "pre" else 0), 0, 1)
        else:
            v = {"ksce": e * u(0.8, 1.0), "ks_top2": e * u(0.5, 0.7), "ks_within_top2": e * u(0.6, 0.8),
                 "kdece": np.sqrt(e ** 2 + 1e-4) * u(0.95, 1.1), "mmce": e * u(0.7, 0.9),
                 "brier": np.clip((1 - acc) * (1.2 + 2 * e) * u(0.95, 1.05), 0, 2),
                 "mean_conf_correct": np.clip(0.75 + 0.2 * acc + 0.5 * e, 0, 1),
                 "mean_conf_incorrect": np.clip(0.35 + 0.3 * acc + e, 0, 1)}.get(metric)
        out[name] = rng.lognormal(-3, 0.5, n) if v is None else v  # a name this script does not know: small > 0
    if "nll" in out and stage in INFINITE_NLL:
        out["nll"] = np.where(rng.random(n) < INFINITE_NLL[stage], np.inf, out["nll"])
    failed = net["failed"].get(stage)
    if failed is not None:
        for name in out:
            out[name] = np.where(failed, np.nan, out[name])
    net["nll"] = out.get("nll", np.ones(n))
    for name in names:
        if name.startswith("fit_"):
            out[name] = _fit_values(rng, stage, name, n, net)
    return out


def measured_values(space: str, dataset: str, pop: dict, names: dict, config: dict, rng) -> tuple[dict, dict]:
    """Provenance and ``{column: values}`` of the measured networks of one table."""
    from calibench.inference.data import NUM_CLASSES

    n = len(pop["measured"])
    k, n_eval = NUM_CLASSES[dataset], N_EVAL[dataset]
    n_test = n_eval - int(np.floor(config["temperature"]["val_fraction"] * n_eval))
    chance = 1.0 / k
    alive = pop["quality"] > 0
    g = np.where(alive, np.clip(pop["quality"] + rng.normal(0, 0.015, n), 0, 1), 0.0)
    acc_full = _counts(chance + (TOP[(space, dataset)] - chance) * g, n_eval)
    acc_test = np.where(alive, _counts(acc_full + rng.normal(0, 0.5, n) * np.sqrt(acc_full * (1 - acc_full) / n_test),
                                       n_test), acc_full)
    e_pre = np.where(alive, MISCALIBRATION[dataset] * (1.2 if space == "tss" else 1.0) * (0.3 + g)
                     * rng.lognormal(0, 0.3, n), 0.01 * rng.uniform(0.2, 1, n))
    e_post = 0.15 * e_pre + 0.012 * rng.lognormal(0, 0.4, n)
    temperature = 1.0 + 12 * e_pre * rng.uniform(0.8, 1.2, n)
    factor = {"vs": (0.85, 1.1, 0.0), "ms": (0.9, 1.4, 0.003), "dir": (0.9, 1.35, 0.002), "iso": (0.9, 1.3, 0.004),
              "hist": (1.0, 1.5, 0.006), "spline": (0.8, 1.1, 0.0)}
    net = {"k": k, "n_test": n_test, "n_val": n_eval - n_test, "quality": g, "temperature": temperature,
           "max_iterations": float(config.get("recalibration", {}).get("max_iterations", 1000)),
           "failed": {s: rng.random(n) < p for s, p in FAILED.items()}}
    columns = {}
    for stage in config["stages"]:
        if stage == "pre":
            e, acc = e_pre, acc_test
        elif stage == "post":
            e, acc = e_post, acc_test  # temperature scaling keeps the arg-max
        else:
            lo, hi, add = factor.get(stage, (0.9, 1.2, 0.0))
            e = e_post * rng.uniform(lo, hi, n) + add * (k > 10)
            acc = np.where(alive, _counts(acc_test + rng.normal(-0.001, 0.003, n), n_test), acc_test)
        stage_names = [m for m in names[stage] if dataset == "cifar10" or not m.startswith("ood_auroc_")]
        for name, v in stage_values(rng, stage, stage_names, net, e, acc).items():
            columns[f"{stage}_{name}"] = v
    hexes = rng.integers(0, 16 ** 8, (n, 4))
    provenance = {
        "params": pop["params"] + (0.0058 if k == 100 else 0.0070 if k == 120 else 0.0),
        "flops": pop["flops"] / (4.0 if dataset == "ImageNet16-120" else 1.0),
        "temperature": temperature if "post" in config["stages"] else np.full(n, np.nan),
        "accuracy": acc_full,
        "recorded_accuracy": np.round(np.clip(acc_full + rng.normal(0, 0.003, n), 0, 1) * 100, 2) / 100,
        "config_hash": [f"{a:08x}{b:08x}" for a, b in hexes[:, :2]],
        "logits_key": [f"{a:08x}{b:08x}" for a, b in hexes[:, 2:]],
        # the archive file each network's logits came from: ~27 MB (TSS) / ~6 MB (SSS) of bz2
        "source_bytes": rng.integers(20_000_000, 34_000_000, n) if space == "tss" else rng.integers(4_000_000, 8_000_000, n),
        "source_mtime": [f"2021-0{1 + int(m)}-1{int(m)}T08:00:00+00:00" for m in rng.integers(0, 9, n)],
    }
    return provenance, columns


def build(space: str, hp: str, dataset: str, pop: dict, names: dict, config: dict, rng):
    """The wide table (as ``tables.build_table`` leaves it) and its schema metadata."""
    import pandas as pd
    import pyarrow as pa

    from calibench import __version__
    from calibench.results.tables import FIRST

    provenance, columns = measured_values(space, dataset, pop, names, config, rng)
    take = pop["row_of"]  # TSS: every member repeats its class representative's values
    rows = len(take)
    head = {
        "space": pa.array([space] * rows, pa.string()).to_pandas(),
        "hp": pa.array([hp] * rows, pa.string()).to_pandas(),
        "dataset": pa.array([dataset] * rows, pa.string()).to_pandas(),
        # build_table: TSS arch_index is the member index (int64), SSS the shard's int32
        "arch_index": pd.Series(pop["rows"], dtype="int64" if space == "tss" else "int32"),
        "measured_by": pd.Series(pop["measured_by"], dtype="int32"),
        "seed": pd.Series(np.full(rows, SEED), dtype="int32"),
        "arch_str": pa.array([pop["arch_strs"][i] for i in pop["rows"]], pa.string()).to_pandas(),
        "params": pd.Series(provenance["params"][take]),
        "flops": pd.Series(provenance["flops"][take]),
        "temperature": pd.Series(provenance["temperature"][take]),
        "accuracy": pd.Series(provenance["accuracy"][take]),
        "recorded_accuracy": pd.Series(provenance["recorded_accuracy"][take]),
        "n_eval": pd.Series(np.full(rows, N_EVAL[dataset]), dtype="int32"),
        "config_hash": pa.array([provenance["config_hash"][j] for j in take], pa.string()).to_pandas(),
        "logits_key": pa.array([provenance["logits_key"][j] for j in take], pa.string()).to_pandas(),
        "source_bytes": pd.Series(provenance["source_bytes"][take], dtype="int64"),
        "source_mtime": pa.array([provenance["source_mtime"][j] for j in take], pa.string()).to_pandas(),
        "calibench_version": pa.array([__version__] * rows, pa.string()).to_pandas(),
    }
    assert list(head)[:len(FIRST)] == FIRST
    names_ = list(columns)
    matrix = np.empty((rows, len(names_)), order="F")
    for j, name in enumerate(names_):
        matrix[:, j] = np.asarray(columns[name], float)[take]
    values = pd.DataFrame(matrix, columns=pd.Index(names_, dtype=object), copy=False)
    wide = pd.concat([pd.DataFrame(head), values], axis=1)
    stages, constants = [], {}
    for name in names_:
        stage, _, metric = name.partition("_")
        if stage not in stages:
            stages.append(stage)
        if metric.startswith("fit_"):
            v = np.asarray(columns[name], float)
            v = v[~np.isnan(v)]
            if len(v) and np.isfinite(v[0]) and (v == v[0]).all():
                constants.setdefault(stage, {})[metric] = float(v[0])
    return wide, {"stages": stages, "constants": constants}


def write_table(wide, meta: dict, path: Path) -> None:
    """As the table build writes a table (``tables._write_parquet``: sealed), atomically."""
    from calibench.atomic import atomic_write
    from calibench.results.tables import _write_parquet

    atomic_write(path, lambda f: _write_parquet(wide, f, meta))


def write_reliability_shards(wide, results: Path, beta: float, stages: list[str], rng) -> int:
    """Shards (with reliability bins) of the best and worst measured network by HCS_beta, the
    two the reliability part reads per table."""
    from calibench import layout
    from calibench.results import shards
    from calibench.metrics.scores import hcs
    from calibench.metrics.reliability import RELIABILITY_BINS

    nets = wide[wide["arch_index"] == wide["measured_by"]]
    score = hcs(nets["accuracy"], nets["pre_ece_15"], beta)
    ok = ~np.isnan(score)
    chosen = nets[ok & ((score == np.nanmax(score)) | (score == np.nanmin(score)))]
    value_columns = [c for c in wide.columns if c.partition("_")[0] in stages and c not in ("arch_str",)]
    edges = np.linspace(0, 1, RELIABILITY_BINS + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    for row in chosen.to_dict("records"):
        n_test = int(row["n_eval"] - np.floor(0.2 * row["n_eval"]))
        per_stage = {s: {} for s in stages}
        for c in value_columns:
            stage, _, name = c.partition("_")
            per_stage[stage][name] = row[c]
        rel = {}
        for s in stages:
            weights = np.exp(4 * mids * max(row["accuracy"], 0.1)) * rng.uniform(0.5, 1.5, RELIABILITY_BINS)
            count = np.floor(weights / weights.sum() * n_test)
            count[-1] += n_test - count.sum()
            conf = mids + rng.uniform(-0.02, 0.02, RELIABILITY_BINS)
            gap = row.get(f"{s}_ece_15", 0.05)
            acc = np.clip(conf - (0.05 if gap != gap else gap) * rng.uniform(0.5, 1.5, RELIABILITY_BINS), 0, 1)
            empty = count == 0
            rel[s] = {"count": count, "confidence": np.where(empty, np.nan, conf),
                      "accuracy": np.where(empty, np.nan, acc)}
        index = int(row["measured_by"])
        provenance = {"space": row["space"], "hp": row["hp"], "dataset": row["dataset"], "arch_index": index,
                      "arch_str": row["arch_str"], "seed": int(row["seed"]), "params": row["params"],
                      "flops": row["flops"], "temperature": row["temperature"], "accuracy": row["accuracy"],
                      "recorded_accuracy": row["recorded_accuracy"], "n_eval": int(row["n_eval"]),
                      "config_hash": row["config_hash"], "logits_key": row["logits_key"],
                      "source_bytes": int(row["source_bytes"]), "source_mtime": row["source_mtime"],
                      "logits_file": f"logits/space={row['space']}/hp={row['hp']}/dataset={row['dataset']}/"
                                     f"arch={index:06d}.parquet"}
        table = shards.with_reliability(shards.shard_table(provenance, per_stage), {int(row["seed"]): rel})
        shards.write_atomic_parquet(table, layout.shard_path(results, row["space"], row["hp"], row["dataset"], index))
    return len(chosen)


def prepare(directory: Path, config: dict, scale: float) -> dict:
    """The six tables under ``directory/results/tables`` (kept if ``bench.json`` says they
    are of this configuration)."""
    results = directory / "results"
    want = table_config(config, scale)
    marker = directory / "bench.json"
    if marker.is_file():
        info = json.loads(marker.read_text())
        if info["config"] == want and all(Path(t).is_file() for t in info["tables"]):
            return {**info, "reused": True}
        shutil.rmtree(results, ignore_errors=True)  # this script's own directory, of another configuration
        marker.unlink()
    elif directory.exists() and any(directory.iterdir()):
        sys.exit(f"{directory} is not empty and holds no bench.json of this script; pass another --dir")
    start = time.perf_counter()
    names = probe_names(config)
    probe_s = time.perf_counter() - start
    rng = np.random.default_rng(SEED)
    betas = config["analysis"]["hcs_betas"]
    tables, rows, columns, shard_count = [], {}, {}, 0
    for space in config["spaces"]:
        pop = (tss_population if space == "tss" else sss_population)(scale, rng)
        for dataset in config["datasets"]:
            hp = str(config["hp"][space])
            wide, meta = build(space, hp, dataset, pop, names, config, rng)
            path = results / "tables" / f"{space}_{hp}_{dataset}.parquet"
            write_table(wide, meta, path)
            shard_count += write_reliability_shards(wide, results, betas[0], meta["stages"], rng)
            tables.append(str(path))
            rows[path.name] = [len(wide), int((wide["arch_index"] == wide["measured_by"]).sum())]
            columns[path.name] = wide.shape[1]
            del wide
    info = {"config": want, "tables": tables, "rows": rows, "columns": columns, "reliability_shards": shard_count,
            "bytes": sum(Path(t).stat().st_size for t in tables), "probe_s": round(probe_s, 1),
            "write_s": round(time.perf_counter() - start - probe_s, 1),
            "names_per_stage": {s: len(v) for s, v in names.items()}}
    marker.write_text(json.dumps(info, indent=1))
    return {**info, "reused": False}


# ---------------------------------------------------------------- one part (child process)

def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _count_pairs(stats) -> tuple[dict, list]:
    """Count the Kendall interval pairs (``stats._Table.pair``) by kind, and the time spent
    drawing bootstrap resamples, where the stats module has those internals."""
    import inspect

    pairs: dict[str, list] = {}  # interval kind -> [seconds, pairs]
    drawing = [0.0, 0]  # drawing the bootstrap resamples of a table: [seconds, tables]
    table = getattr(stats, "_Table", None)
    if table is None or not callable(getattr(table, "pair", None)):
        return pairs, drawing
    pair = table.pair
    signature = inspect.signature(pair)

    def counted_pair(*args, **kwargs):
        t = time.perf_counter()
        try:
            return pair(*args, **kwargs)
        finally:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a_, b_ = bound.arguments.get("a"), bound.arguments.get("b")
            kind = "diagonal" if a_ == b_ and bound.arguments.get("diagonal", True) else \
                str(bound.arguments.get("interval"))
            p = pairs.setdefault(kind, [0.0, 0])
            p[0] += time.perf_counter() - t
            p[1] += 1

    table.pair = counted_pair
    counts = getattr(table, "counts", None)
    if isinstance(counts, property):
        def drawn(self):
            t = time.perf_counter()
            fresh = getattr(self, "_counts", None) is None
            out = counts.fget(self)
            if fresh:
                drawing[0] += time.perf_counter() - t
                drawing[1] += 1
            return out

        table.counts = property(drawn)
    return pairs, drawing


def child(spec_path: str) -> None:
    """Runs one part (or the report) as its Snakemake job does, timed; writes the figures as JSON."""
    start = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    if spec["part"] == "report":  # what the job imports, and no more
        from calibench.report.assemble import write
    else:
        from calibench.analysis import parts, registry

        registry.import_module(registry.find(spec["part"], spec["settings"]), spec["settings"])
    imported = time.perf_counter()
    pairs, drawing = ({}, [0.0, 0])
    if spec["part"] == "kendall":
        from calibench.analysis import stats

        pairs, drawing = _count_pairs(stats)
    profiler = None
    if spec["profile"]:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t = time.perf_counter()
    if spec["part"] == "report":
        write(spec["settings"], spec["tables"], spec["results"])
    else:
        parts.run_part(spec["part"], spec["settings"], spec["tables"], spec["results"], threads=spec["threads"])
    run = time.perf_counter() - t
    if profiler:
        import pstats

        profiler.disable()
        profiler.dump_stats(spec["profile"])
        print(f"\n---- cProfile of {spec['part']}, top 20 by cumulative time ----")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(20)
    Path(spec["out"]).write_text(json.dumps({"import_s": imported - start, "run_s": run, "peak_rss_mb": _peak_mb(),
                                             "pairs": pairs, "drawing": drawing}))


def run_child(directory: Path, part: str, settings: dict, tables: list[str], results: Path,
              profile: bool, threads: int = 1) -> dict:
    """One part in its own process: wall time, and its peak RSS from ``wait4`` (that process alone)."""
    spec = {"part": part, "settings": settings, "tables": tables, "results": str(results), "threads": threads,
            "out": str(directory / f"child_{part}.json"),
            "profile": str(directory / f"{part}.prof") if profile else None}
    spec_path = directory / f"child_{part}_spec.json"
    spec_path.write_text(json.dumps(spec))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"part {part} failed (exit {proc.returncode}); its traceback is above")
    return {**json.loads(Path(spec["out"]).read_text()), "wall_s": wall, "max_rss_mb": usage.ru_maxrss / 1024}


# ---------------------------------------------------------------- main

def machine_line() -> str:
    import matplotlib
    import pandas as pd
    import pyarrow
    import scipy
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores "
            f"({cores} usable), torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, "
            f"pandas {pd.__version__}, scipy {scipy.__version__}, pyarrow {pyarrow.__version__}, "
            f"matplotlib {matplotlib.__version__}, python {platform.python_version()}")


def load_line(when: str) -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"load average {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared machine: other work slows "
            f"every figure)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "nats.yaml")
    ap.add_argument("--scale", type=float, default=1.0, help="share of each table's networks (0 < F <= 1)")
    ap.add_argument("--resamples", type=int, default=None,
                    help="bootstrap resamples (default: the config's analysis.bootstrap.resamples; 0: jackknife only)")
    ap.add_argument("--dir", type=Path, default=None, help="data directory (reused if it holds the same tables)")
    ap.add_argument("--parts", nargs="+", default=None, help="only these parts (default: every part, then the report)")
    ap.add_argument("--profile", action="store_true", help="cProfile each part (slower); top functions printed")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads of the parts that use them (kendall; its rule's threads: 2, as with --cores 2)")
    ap.add_argument("--compare-intervals", action="store_true",
                    help="after the run: jackknife against bootstrap interval widths on the bootstrapped taus")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    if not 0 < args.scale <= 1:
        ap.error("--scale must lie in (0, 1]")
    config = load_config(args.config)
    directory = args.dir or Path("/tmp") / f"calibench-bench-analysis-s{args.scale:g}"
    print(machine_line())
    info = prepare(directory, config, args.scale)
    total = sum(r[0] for r in info["rows"].values())
    nets = sum(r[1] for r in info["rows"].values())
    print(f"tables: {len(info['tables'])} in {directory / 'results' / 'tables'}, {total:,} rows ({nets:,} measured "
          f"networks), {min(info['columns'].values())}-{max(info['columns'].values())} columns, "
          f"{info['bytes'] / 1e6:,.0f} MB; {info['reliability_shards']} reliability shards"
          + (" (reused)" if info["reused"] else f"; written in {info['write_s']} s (+ {info['probe_s']} s probing "
                                                 f"the column names)"))
    for name, (rows, measured) in info["rows"].items():
        print(f"  {name}: {rows:,} rows, {measured:,} measured, {info['columns'][name]} columns")

    from calibench.analysis import registry

    def settings_of(part: str) -> dict:
        if part == "report":
            return registry.config_report_settings(config)
        return registry.config_part_settings(config, registry.find(part))

    if args.resamples is not None:
        config["analysis"]["bootstrap"] = {**(config["analysis"].get("bootstrap") or {}), "resamples": args.resamples}
    parts = [*(p.name for p in registry.parts_of_config(config)), "report"]
    if args.parts:
        unknown = sorted(set(args.parts) - set(parts))
        if unknown:
            ap.error(f"--parts {unknown}: this config's parts are {parts}")
        parts = [p for p in parts if p in args.parts]
    results = directory / "results"
    for stale in ("analysis", "plots"):  # a failed run must not leave the last one's outputs looking new
        if not args.parts:
            shutil.rmtree(results / stale, ignore_errors=True)
    if not args.parts:
        (results / "report.html").unlink(missing_ok=True)
    boot = config["analysis"].get("bootstrap")
    print(f"settings: bootstrap {boot}, top_k {config['analysis']['top_k']}, betas {config['analysis']['hcs_betas']}, "
          f"bins {config['bins']}" + (", cProfile on" if args.profile else ""))
    print(f"parts, each its own process (as its Snakemake job): {', '.join(parts)}")
    print(load_line("before the run"), flush=True)
    figures = {}
    for part in parts:
        r = run_child(directory, part, settings_of(part), info["tables"], results, args.profile,
                      args.threads)
        figures[part] = r
        print(f"  {part:13s} {r['wall_s']:7.1f} s (run {r['run_s']:6.1f} s, imports {r['import_s']:4.1f} s)  "
              f"peak RSS {r['max_rss_mb']:7,.0f} MB", flush=True)
        if r["pairs"]:
            line = ", ".join(f"{kind} {n:,} pairs {s:.1f} s ({1e3 * s / max(n, 1):.1f} ms/pair)"
                             for kind, (s, n) in sorted(r["pairs"].items(), key=lambda kv: -kv[1][0]))
            print(f"    Kendall interval pairs (stats._Table.pair): {line}; drawing resamples {r['drawing'][0]:.1f} s "
                  f"for {r['drawing'][1]} tables (inside the bootstrap pairs)")
    wall = sum(r["wall_s"] for r in figures.values())
    peak = max(figures.items(), key=lambda kv: kv[1]["max_rss_mb"])
    print(f"total: {wall:.1f} s over {len(figures)} processes ({sum(r['import_s'] for r in figures.values()):.1f} s "
          f"of it imports); largest peak RSS {peak[1]['max_rss_mb']:,.0f} MB ({peak[0]})")
    (directory / "parts.json").write_text(json.dumps(figures, indent=1))
    import pandas as pd

    if (results / "analysis" / "kendall.parquet").is_file():
        kendall = pd.read_parquet(results / "analysis" / "kendall.parquet")
        kinds = "; ".join(f"{col}: " + ", ".join(f"{k} {v:,}" for k, v in
                                                 kendall[col].fillna("none").value_counts().items())
                          for col in ("figure", "interval") if col in kendall.columns)
        print(f"Kendall rows: {len(kendall):,} ({kinds})")
    plots = sorted((results / "plots").rglob("*.png"))
    report = results / "report.html"
    print(f"outputs: {len(plots)} plots" + (f", {report} ({report.stat().st_size / 1e3:,.0f} kB)" if report.is_file()
                                           else ""))
    print(load_line("after"))
    if args.compare_intervals:
        compare_intervals(results, pd.read_parquet(results / "analysis" / "kendall.parquet"))


def compare_intervals(results: Path, kendall) -> None:
    """The jackknife interval (stats.kendall_jackknife) of every bootstrapped question-4 tau of
    population all, recomputed on the same columns: its width over the bootstrap's, and the
    shift of its centre in bootstrap widths."""
    import pandas as pd

    from calibench.analysis import stats
    from calibench.analysis.tables import load_tables, measured

    boot = kendall[(kendall["interval"] == "bootstrap") & (kendall["population"] == "all")
                   & (kendall["figure"] == "pre_post")]
    wanted = {"space", "hp", "dataset", "arch_index", "measured_by", *boot["row"], *boot["col"]}
    nets = measured(load_tables(sorted((results / "tables").glob("*.parquet")), wanted))
    ratio, shift = [], []
    for r in boot.itertuples():
        part = nets[(nets["space"] == r.space) & (nets["dataset"] == r.dataset)]
        _, lo, hi = stats.kendall_jackknife(part[r.row].to_numpy(float), part[r.col].to_numpy(float))
        ratio.append((hi - lo) / (r.hi - r.lo))
        shift.append(abs((lo + hi) / 2 - (r.lo + r.hi) / 2) / (r.hi - r.lo))
    if ratio:
        q = pd.Series(ratio).quantile([0, 0.5, 1]).to_numpy()
        print(f"jackknife against bootstrap on {len(ratio)} taus: width ratio min {q[0]:.3f}, median {q[1]:.3f}, "
              f"max {q[2]:.3f}; centre shift at most {max(shift):.3f} bootstrap widths")


if __name__ == "__main__":
    main()
