"""Which configuration values each stage's outputs depend on (docs/architecture.md, "The
workflow": every stage's outputs carry a key made from exactly the settings that change them).

The workflow hands each rule exactly its stage's settings as ``params``, so Snakemake's
``params`` rerun trigger reruns exactly the jobs a config change affects; the jobs hash
the same settings into the keys stored with their outputs. Runtime settings (device,
batch size, loaders, grouping) change no number and are passed outside ``params``.
Pure Python: the Snakefile imports this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from calibench import layout
from calibench.user_code import module_sha256
from calibench.config.check import schema_default
from calibench.layout import split_target, target_name  # noqa: F401 (split_target: for callers)
from calibench.vocabulary import MCE_GAPS, NATS_SPACES, ODIR_STAGES, PRE_SAMPLES, SEARCH_FLAG

# Bump when inference changes the logits it produces (network forms, data pipeline):
# every stored logits file's key changes with it (calibench.store.logits), and so do the
# inference jobs' params, so old logits are recomputed.
INFERENCE_VERSION = 1


# The training schedules (hp) whose weights the embedded mini benchmark stores
# (calibench.sources.nats.minibench.WEIGHTLESS is the complement; tests/test_schedules.py checks the two
# agree): TSS hp 12 only with ``minibench.tss_hp12_weights``, every schedule of a real-size
# mini benchmark. Kept here so the Snakefile can check a config without importing torch.
MINIBENCH_WEIGHTED_HPS = {"tss": ("200",), "sss": ("90",)}


def hps(config: Mapping, space: str) -> list[str]:
    """The training schedules configured for ``space``: ``hp.<space>`` is one string or a
    list of them (one result table per (space, hp, dataset)); in the given order."""
    try:
        value = config["hp"][space]
    except KeyError:
        raise ValueError(f"hp: no training schedule given for space {space!r} (e.g. hp: {{{space}: ...}})") from None
    values = [value] if isinstance(value, (str, int)) else list(value)
    if not values:
        raise ValueError(f"hp.{space}: an empty list; give one schedule or several")
    return [str(v) for v in values]


def check_hps(config: Mapping) -> None:
    """What the schema cannot see: a schedule the mini benchmark the run builds holds no
    weights for. Raises ``ValueError`` naming the hp and the setting; silent otherwise
    (archives given by path are checked when read: ``calibench.sources.nats.archive``)."""
    mini = config.get("minibench") or {}
    if not mini.get("build") or mini.get("real_size"):
        return
    for space in config["spaces"]:
        weighted = set(MINIBENCH_WEIGHTED_HPS[space])
        if space == "tss" and mini.get("tss_hp12_weights"):
            weighted.add("12")
        for hp in hps(config, space):
            if hp not in weighted:
                hint = ("set minibench.tss_hp12_weights: true (a stand-in schedule, not NATS-Bench results) or "
                        "drop it" if (space, hp) == ("tss", "12") else "drop it")
                raise ValueError(
                    f"hp.{space}: the mini benchmark (minibench.build: true) stores no weights for {space} hp {hp} "
                    f"(it has weights for hp {', '.join(sorted(weighted, key=int))}); {hint}")


# ---------------------------------------------------------------- populations

# A population's name and a user dataset's name: no underscore, so that a target name
# ``{population}_{dataset}`` (and NATS-Bench's ``{space}_{hp}_{dataset}``) splits one way only.
NAME_PATTERN = r"[A-Za-z][A-Za-z0-9-]*"


def populations(config: Mapping) -> dict[str, dict]:
    """The populations beyond NATS-Bench (config ``populations``), by name: each a dict with
    ``source`` (``logits`` or ``torch``) and that source's options. Raises ``ValueError``
    naming the key for what the schema cannot see."""
    found = {str(name): dict(spec or {}) for name, spec in (config.get("populations") or {}).items()}
    for name, spec in found.items():
        if not re.fullmatch(NAME_PATTERN, name) or name in NATS_SPACES:
            raise ValueError(f"populations.{name}: a population's name is a letter then letters, digits or '-' "
                             f"(no '_'), and not {' or '.join(NATS_SPACES)}")
        if spec.get("source") not in ("logits", "torch"):
            raise ValueError(f"populations.{name}.source: 'logits' or 'torch', got {spec.get('source')!r}")
        for dataset in population_datasets(config, name):
            if not re.fullmatch(NAME_PATTERN, dataset):
                raise ValueError(f"populations.{name}: dataset name {dataset!r}: a letter then letters, digits or '-'")
    return found


def population_datasets(config: Mapping, space: str) -> list[str]:
    """The datasets of a NATS space (config ``datasets``) or of a population: its ``datasets``
    (and, for a torch source, the names of its own ``data``); a logits directory without a
    ``datasets`` list: the subdirectories holding ``.npz`` files, or the store's datasets."""
    if space in NATS_SPACES:
        return list(config["datasets"])
    spec = (config.get("populations") or {})[space] or {}
    if spec.get("datasets") is not None or spec.get("source") == "torch":
        named = [str(d) for d in (spec.get("datasets") or [])]
        root = Path(str(spec.get("path", "")))
        if spec.get("source") == "logits" and (root / "models.csv").is_file():
            # a dataset with no files would stop every chunk's import (each reads every dataset's labels)
            missing = [d for d in named if not (root / d).is_dir() or not any((root / d).glob("*.npz"))]
            if missing:
                raise ValueError(f"populations.{space}.datasets: no .npz files in {root / missing[0]}"
                                 + (f" (nor for {', '.join(missing[1:])})" if len(missing) > 1 else "")
                                 + "; remove it from the list or add its files")
        return named + [str(d) for d in (spec.get("data") or {})]
    root = Path(spec["path"])
    if not root.is_dir():
        raise ValueError(f"populations.{space}.path: {root} is not a directory")
    if not (root / "models.csv").is_file():  # a logits store, or a results directory holding one
        space_of, hp_of = str(spec.get("space") or "*"), str(spec.get("hp") or "*")
        trees = [layout.logits_path("", space_of, hp, "*", 0).parent.relative_to(layout.logits_dir(""))
                 for hp in (hp_of, "")]  # space=*/hp=*/dataset=* and space=*/dataset=*
        store = [p for base in (root, layout.logits_dir(root)) for tree in trees for p in base.glob(str(tree))]
        if store:
            return sorted({p.name.split("=", 1)[1] for p in store})
    return sorted(d.name for d in root.iterdir() if d.is_dir() and any(d.glob("*.npz")))


def targets(config: Mapping) -> dict[str, tuple[str, str]]:
    """Every configured target: its name -> (space or population, hp; "" outside NATS-Bench)."""
    out = {target_name(space, hp): (space, hp) for space in config.get("spaces", []) for hp in hps(config, space)}
    out.update({name: (name, "") for name in populations(config)})
    return out


def _callable_fingerprint(spec: str, python_path) -> dict:
    """A ``package.module:function`` and the SHA-256 of its module's file, found without importing it."""
    return {"callable": str(spec), "module_sha256": module_sha256(str(spec).split(":", 1)[0], python_path)}


def _own_data_fingerprint(spec: str, python_path) -> dict:
    if ":" in str(spec):
        return _callable_fingerprint(spec, python_path)
    path = Path(spec)
    return {"file": str(spec), "sha256": hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None}


def _torch_specs(spec: Mapping) -> list[str]:
    models = spec.get("models")
    return [models] if isinstance(models, str) else list(models or [])


def _store_tree_keys(spec: Mapping) -> dict:
    """A logits store's ``space`` and ``hp`` (the tree it reads) where given: absent otherwise, so
    a population without them keeps its params."""
    return {k: str(spec[k]) for k in ("space", "hp") if spec.get(k) not in (None, "")}


def population_settings(config: Mapping, space: str) -> dict:
    """The architectures of one space (or the members of one population) and their chunks."""
    if space in NATS_SPACES:
        return {"archive": config["archives"][space], "population": config["population"][space],
                "chunk_size": config["chunk_size"]}
    spec = populations(config)[space]
    chunk_size = int(spec.get("chunk_size", config["chunk_size"]))
    if spec["source"] == "logits":
        return {"source": "logits", "path": str(spec["path"]), "datasets": population_datasets(config, space),
                "chunk_size": chunk_size, **_store_tree_keys(spec)}
    return {"source": "torch", "models": [_callable_fingerprint(s, spec.get("python_path"))
                                          for s in _torch_specs(spec)],
            "python_path": [str(p) for p in spec.get("python_path") or []], "chunk_size": chunk_size}


def ood_settings(ood: Mapping) -> dict:
    """The ``ood`` section as inference's params carry it: without ``svhn_subset`` and its seed
    while the subset is off (null), so runs finished before the setting existed keep their
    params and plan nothing."""
    ood = dict(ood)
    if ood.get("svhn_subset") is None:
        ood.pop("svhn_subset", None)
        ood.pop("svhn_subset_seed", None)
    return ood


def inference_settings(config: Mapping, space: str) -> dict:
    """What an inference job's logits depend on: the space's archive, seeds, datasets and
    evaluation data, and the inference code's version. A logits population: its directory
    (each file's content enters each logits key); a torch population: its callables (and
    their modules' content), transform, evaluation data and the user's ``version``."""
    if space in NATS_SPACES:
        # precision enters only where it is not float32, so runs from before the setting keep their params
        precision = config.get("precision", schema_default("precision"))
        return {"archive": config["archives"][space], "seeds": config["seeds"], "datasets": list(config["datasets"]),
                "datasets_root": config["datasets_root"], "ood": ood_settings(config["ood"]),
                "inference_version": INFERENCE_VERSION, **({"precision": precision} if precision != "float32" else {})}
    spec = populations(config)[space]
    if spec["source"] == "logits":
        return {"source": "logits", "path": str(spec["path"]), "datasets": population_datasets(config, space),
                "inference_version": INFERENCE_VERSION, **_store_tree_keys(spec)}
    python_path = spec.get("python_path")
    return {"source": "torch", "models": [_callable_fingerprint(s, python_path) for s in _torch_specs(spec)],
            "transform": _callable_fingerprint(spec["transform"], python_path) if spec.get("transform") else None,
            "python_path": [str(p) for p in python_path or []], "datasets": [str(d) for d in spec.get("datasets") or []],
            "data": {str(k): _own_data_fingerprint(v, python_path) for k, v in (spec.get("data") or {}).items()},
            "datasets_root": config["datasets_root"], "ood": ood_settings(config["ood"]), "version": spec.get("version"),
            "inference_version": INFERENCE_VERSION}


# The input paths a workflow's jobs read (archives, datasets, the SVHN file, logits
# directories): set by the Snakefile for its jobs, outside their params, so that a moved
# input reruns nothing (what a path holds enters the logits keys by name and content).
PATHS_ENV = "CALIBENCH_INPUT_PATHS"


def input_paths(config: Mapping) -> dict:
    """Where the config's inputs are: what :func:`fill_paths` puts back into a job's settings."""
    return {"archives": dict(config["archives"]), "datasets_root": config["datasets_root"],
            "svhn": (config.get("ood") or {}).get("svhn"),
            "populations": {name: str(spec["path"]) for name, spec in populations(config).items()
                            if spec["source"] == "logits"}}


def as_params(settings: Mapping) -> dict:
    """A job's settings as its rule's params carry them: each input path by its name only
    (``archive``, ``datasets_root``, ``ood.svhn``, a logits population's ``path``)."""
    out = json.loads(json.dumps(settings))
    for key in ("archive", "datasets_root", "path"):
        if out.get(key) is not None:
            out[key] = Path(str(out[key])).name
    if isinstance(out.get("ood"), dict) and out["ood"].get("svhn"):
        out["ood"]["svhn"] = Path(str(out["ood"]["svhn"])).name
    return out


def fill_paths(settings: Mapping, space: str | None, paths: Mapping | None = None) -> dict:
    """The settings a job was handed (:func:`as_params`) with the input paths put back, from
    ``paths`` or else :data:`PATHS_ENV`; unchanged outside a workflow (no paths handed)."""
    import os

    if paths is None:
        paths = json.loads(os.environ.get(PATHS_ENV) or "null")
    if not paths:
        return dict(settings)
    out = json.loads(json.dumps(settings))
    if "archive" in out and space in paths["archives"]:
        out["archive"] = paths["archives"][space]
    if "datasets_root" in out:
        out["datasets_root"] = paths["datasets_root"]
    if isinstance(out.get("ood"), dict) and "svhn" in out["ood"]:
        out["ood"]["svhn"] = paths["svhn"]
    if "path" in out and space in paths["populations"]:
        out["path"] = paths["populations"][space]
    return out


def labels_settings(config: Mapping, space: str | None = None) -> dict:
    """What one dataset's labels depend on: the evaluation data (NATS-Bench: the datasets
    root; a population: its source's settings)."""
    if space is None or space in NATS_SPACES:
        return {"datasets_root": config["datasets_root"]}
    return inference_settings(config, space)


def recalibration_settings(config: Mapping) -> dict:
    """The options of the configured post-hoc methods that change their numbers
    (docs/recalibration.md); a method that does not run contributes nothing. ``ms`` / ``dir``
    lambda and mu are ``None`` where the search chooses them (:func:`odir_search_settings`);
    an option the config leaves out takes the schema's default."""
    stages = list(config["stages"])
    rec = {**schema_default("recalibration"), **config.get("recalibration", {})}
    out: dict = {}
    if any(s in stages for s in ("vs", *ODIR_STAGES)):
        out["max_iterations"] = int(rec["max_iterations"])
        out["tolerance"] = float(rec["tolerance"])
    odir = config.get("recalibration", {}).get("odir", {})
    for s in ODIR_STAGES:
        if s in stages:
            given = odir.get(s) or {}
            out[s] = {"lambda": given.get("lambda"), "mu": given.get("mu")}
    if "hist" in stages:
        out["hist_bins"] = int(rec["hist_bins"])
    if "spline" in stages:
        out["spline_knots"] = int(rec["spline_knots"])
    return out


# The version of the fits' rules of docs/recalibration.md ("Common rules": convergence by
# gradient or by a flat objective, the underdetermined flags); in the keys of shards and of
# the lambda, mu search, so that those made under earlier rules are made again. 3: the
# spline's factor N/(N-1) and the search's fallback when its best pair is worse than identity.
# 4: the search always takes its best pair and flags one worse than identity (no fallback).
FIT_RULES = 4


def measurement_settings(config: Mapping) -> dict:
    """What a shard's numbers depend on besides its logits (and the searched ODIR lambda, mu):
    bin counts, TACE threshold, the split and temperature fit, the stages and their methods'
    options, the reliability-diagram bins its metadata holds and the fits' rules (both
    fixed; in the key so that shards written before them are measured again). ``pre_samples``
    and ``mce`` only where they are not the default (:data:`LEFT_OUT_AT_DEFAULT`), so that runs
    without them keep their keys."""
    return {"bins": sorted(config["bins"]), "tace_threshold": config["tace_threshold"],
            "temperature": dict(config["temperature"]), "stages": list(config["stages"]),
            "recalibration": recalibration_settings(config), "reliability_bins": 15, "fit_rules": FIT_RULES,
            **{key: config[key] for key, default in LEFT_OUT_AT_DEFAULT.items() if config.get(key, default) != default}}


# settings :func:`measurement_settings` leaves out at their default, with that default
LEFT_OUT_AT_DEFAULT = {"pre_samples": PRE_SAMPLES[0], "mce": MCE_GAPS[0]}


def stage_fit_settings(settings: Mapping, stage: str) -> dict:
    """What a fit of ``stage`` depends on besides the network's logits and labels (the key of
    its entry in the fit store, :mod:`calibench.store.fits`): the split, the fits' rules and
    the stage's own options, from :func:`measurement_settings` with the searched lambda, mu
    filled in. Bins, metrics and the other stages' options are not in it: changing them
    re-applies the stored map."""
    temperature = settings["temperature"]
    rec = settings.get("recalibration", {})
    out = {"stage": stage, "split": {"val_fraction": temperature["val_fraction"], "seed": temperature["seed"]},
           "fit_rules": settings.get("fit_rules")}
    if stage == "post":
        out["method"] = temperature["method"]
    if stage in ("vs", *ODIR_STAGES):
        out["max_iterations"], out["tolerance"] = rec.get("max_iterations"), rec.get("tolerance")
    if stage in ODIR_STAGES:
        out["lambda"], out["mu"] = rec[stage]["lambda"], rec[stage]["mu"]
    if stage == "hist":
        out["hist_bins"] = rec.get("hist_bins")
    if stage == "spline":
        out["spline_knots"] = rec.get("spline_knots")
    return out


def stage_measurement_settings(settings: Mapping, stage: str) -> dict:
    """What a stage's rows of a shard depend on besides its logits and the bin counts: its fit's
    settings (:func:`stage_fit_settings`), the TACE threshold, the reliability-diagram bins, for
    ms and dir the search's flag, for pre its samples where not the test part, the MCE's gap where
    not the default. Rows whose stage keeps these are kept when only ``bins`` or another stage
    changes; the new bin counts alone are measured (issue 35)."""
    rec = settings.get("recalibration", {})
    samples = {"samples": settings["pre_samples"]} if stage == "pre" and "pre_samples" in settings else {}
    mce = {"mce": settings["mce"]} if "mce" in settings else {}
    return {"fit": stage_fit_settings(settings, stage), "tace_threshold": settings["tace_threshold"],
            "reliability_bins": settings.get("reliability_bins"),
            "search_flag": (rec.get(stage) or {}).get(SEARCH_FLAG) if stage in ODIR_STAGES else None, **samples, **mce}


def odir_searched_stages(config: Mapping) -> list[str]:
    """The ODIR stages (ms, dir) that run and whose lambda or mu the config leaves to the search."""
    rec = recalibration_settings(config)
    return [s for s in ODIR_STAGES if s in rec and (rec[s]["lambda"] is None or rec[s]["mu"] is None)]


def odir_search_settings(config: Mapping) -> dict:
    """What the lambda, mu search of one (space, hp, dataset) depends on besides the logits:
    the searched stages, the sample, folds and grid, the split (validation parts), the fit's
    iteration limits and rules (docs/recalibration.md, "Choosing lambda and mu"); what the config
    leaves out takes the schema's default."""
    search = {**schema_default("recalibration", "odir", "search"),
              **config.get("recalibration", {}).get("odir", {}).get("search", {})}
    rec = {**schema_default("recalibration"), **recalibration_settings(config)}
    return {"stages": odir_searched_stages(config),
            "networks": int(search["networks"]), "folds": int(search["folds"]), "seed": int(search["seed"]),
            "grid": [float(g) for g in search["grid"]],
            "split": {"val_fraction": config["temperature"]["val_fraction"], "seed": config["temperature"]["seed"]},
            "max_iterations": min(int(rec["max_iterations"]), int(search["max_iterations"])),
            "tolerance": rec["tolerance"], "fit_rules": FIT_RULES}


def search_sample(selected: list[int], networks: int, seed: int, stable: bool = False) -> list[int]:
    """The seeded sample of a population's networks the lambda, mu search fits (sorted):
    ``RandomState(seed).choice`` over the sorted indices; ``stable``, the ``networks`` indices
    with the smallest seeded hash (:func:`_sample_rank`), so that adding or removing a network
    changes the sample only where that network is, or enters, it (docs/recalibration.md,
    "Choosing lambda and mu")."""
    import numpy as np

    selected = sorted(int(i) for i in selected)
    if len(selected) <= networks:
        return selected
    if stable:
        return sorted(sorted(selected, key=lambda i: (_sample_rank(seed, i), i))[:networks])
    chosen = np.random.RandomState(seed).choice(len(selected), size=networks, replace=False)
    return sorted(selected[i] for i in chosen)


def _sample_rank(seed: int, index: int) -> int:
    import hashlib

    return int.from_bytes(hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest(), "big")


def population_search_sample(doc: Mapping, networks: int, seed: int) -> list[int]:
    """:func:`search_sample` of a population document (``results/population/{space}.json``):
    stable for a population of one's own (its models are edited, their indices kept,
    docs/populations.md), the choice over the members for NATS-Bench (whose members are fixed
    by the config)."""
    return search_sample(doc["selected"], networks, seed, stable=doc.get("source") is not None)


def under_minibench(config: Mapping, path: str | Path, built: bool = False) -> bool:
    """Whether ``path`` lies in the mini benchmark's directory (config ``minibench.dir``);
    with ``built``, only where this run builds it (``minibench.build``)."""
    mini = config["minibench"]
    if built and not mini["build"]:
        return False
    return Path(path).resolve().is_relative_to(Path(mini["dir"]).resolve())


def is_demo(config: Mapping) -> bool:
    """Whether the NATS-Bench spaces are read from the mini benchmark (its archives under its
    directory), built by this run or before it: the report then says its numbers are a demo."""
    spaces = [s for s in config.get("spaces") or [] if s in ("tss", "sss")]
    return bool(spaces) and all(under_minibench(config, config["archives"][s]) for s in spaces)


def analysis_settings(config: Mapping) -> dict:
    """What the analysis and the report depend on besides the tables; each part's rule takes its
    share of it (calibench.analysis.registry)."""
    out = {"analysis": dict(config["analysis"]), "bins": sorted(config["bins"]),
           "demo": is_demo(config),
           # the schema's defaults for what a robustness section leaves out (filled by the workflow too)
           "robustness": {**schema_default("robustness"), **config["robustness"]} if config.get("robustness") else {}}
    groups = {name: list(spec.get("group_by") or []) for name, spec in populations(config).items()}
    if any(groups.values()):  # metadata columns to compare a population's models by
        out["groups"] = {name: columns for name, columns in groups.items() if columns}
    return out


EXPLORER_BINS = (5, 15, 100, 500)  # explorer_bins: auto; the full population's page fits 100 MB (docs/tools.md)


def auto_explorer_bins(measured: Sequence[int]) -> list[int] | str:
    """``explorer_bins: auto`` for a run or table measuring ``measured``: those of
    :data:`EXPLORER_BINS` it measures, or ``"all"`` if none of them."""
    return sorted(int(b) for b in measured if int(b) in EXPLORER_BINS) or "all"


def explorer_bins(config: Mapping) -> list[int] | str:
    """The bin counts whose binned metrics the explorer holds (``explorer_bins``): ``auto``,
    those of :data:`EXPLORER_BINS` the run measures (``bins``), or ``"all"`` if it measures none
    of them; ``all``; or a list, where a bin count the run does not measure is a ``ValueError``
    naming the key (it would show nothing)."""
    measured = [int(b) for b in config["bins"]]
    asked = config.get("explorer_bins", schema_default("explorer_bins"))
    if asked == "auto":
        return auto_explorer_bins(measured)
    if asked == "all":
        return "all"
    missing = [b for b in asked if b not in measured]
    if missing:
        raise ValueError(f"explorer_bins: {missing} not among the bin counts the run measures (bins: {measured}); "
                         "drop them, or write all")
    return sorted(int(b) for b in asked)


def explorer_settings(config: Mapping) -> dict:
    """What ``calibench explore``'s files depend on besides the tables and the analysis files:
    the demo banner, the fewest networks a Kendall cell decides on (``analysis.min_networks``)
    and the bin counts of its binned metrics (:func:`explorer_bins`)."""
    analysis = config.get("analysis") or {}
    return {"demo": is_demo(config), "bins": explorer_bins(config),
            "min_networks": int(analysis.get("min_networks", schema_default("analysis", "min_networks")))}


def as_json(settings: Mapping) -> str:
    """Stable text for ``params`` (sorted keys): equal settings give equal strings."""
    return json.dumps(settings, sort_keys=True)
