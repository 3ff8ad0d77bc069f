"""Which configuration values each stage's outputs depend on (architecture.md: "every
stage's outputs carry a key made from exactly the settings that change them").

The workflow hands each rule exactly its stage's settings as ``params``, so Snakemake's
``params`` rerun trigger reruns exactly the jobs a config change affects; the jobs hash
the same settings into the keys stored with their outputs. Runtime settings (device,
batch size, loaders, grouping) change no number and are passed outside ``params``.
Pure Python: the Snakefile imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# Bump when inference changes the logits it produces (network forms, data pipeline):
# every stored logits file's key changes with it (calibench.logits), and so do the
# inference jobs' params, so old logits are recomputed.
INFERENCE_VERSION = 1

# Post-hoc stages that need the ODIR lambda, mu (recalibration-spec.md), and the search grid.
ODIR_STAGES = ("ms", "dir")
DEFAULT_ODIR_GRID = (1e-7, 1e-5, 1e-3, 1e-1, 1e1, 1e3)


# The training schedules (hp) whose weights the embedded mini benchmark stores
# (calibench.sources.nats.minibench.WEIGHTLESS is the complement; tests/test_hp_compare.py checks the two
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


def population_settings(config: Mapping, space: str) -> dict:
    """The architectures of one space and their chunks."""
    return {"archive": config["archives"][space], "population": config["population"][space],
            "chunk_size": config["chunk_size"]}


def inference_settings(config: Mapping, space: str) -> dict:
    """What an inference job's logits depend on: the space's archive, seeds, datasets and
    evaluation data, and the inference code's version."""
    return {"archive": config["archives"][space], "seeds": config["seeds"], "datasets": list(config["datasets"]),
            "datasets_root": config["datasets_root"], "ood": dict(config["ood"]),
            "inference_version": INFERENCE_VERSION}


def labels_settings(config: Mapping) -> dict:
    return {"datasets_root": config["datasets_root"]}


def recalibration_settings(config: Mapping) -> dict:
    """The options of the configured post-hoc methods that change their numbers
    (recalibration-spec.md); a method that does not run contributes nothing. ``ms`` / ``dir``
    lambda and mu are ``None`` where the search chooses them (:func:`odir_search_settings`)."""
    stages = list(config["stages"])
    rec = config.get("recalibration", {})
    out: dict = {}
    if any(s in stages for s in ("vs", "ms", "dir")):
        out["max_iterations"] = int(rec.get("max_iterations", 1000))
        out["tolerance"] = float(rec.get("tolerance", 1e-6))
    odir = rec.get("odir", {})
    for s in ODIR_STAGES:
        if s in stages:
            given = odir.get(s) or {}
            out[s] = {"lambda": given.get("lambda"), "mu": given.get("mu")}
    if "hist" in stages:
        out["hist_bins"] = int(rec.get("hist_bins", 15))
    if "spline" in stages:
        out["spline_knots"] = int(rec.get("spline_knots", 6))
    return out


def measurement_settings(config: Mapping) -> dict:
    """What a shard's numbers depend on besides its logits (and the searched ODIR lambda, mu):
    bin counts, TACE threshold, the split and temperature fit, the stages and their methods'
    options, and the reliability-diagram bins its metadata holds (fixed; in the key so that
    shards written before they existed are measured again)."""
    return {"bins": list(config["bins"]), "tace_threshold": config["tace_threshold"],
            "temperature": dict(config["temperature"]), "stages": list(config["stages"]),
            "recalibration": recalibration_settings(config), "reliability_bins": 15}


def odir_searched_stages(config: Mapping) -> list[str]:
    """The ODIR stages (ms, dir) that run and whose lambda or mu the config leaves to the search."""
    rec = recalibration_settings(config)
    return [s for s in ODIR_STAGES if s in rec and (rec[s]["lambda"] is None or rec[s]["mu"] is None)]


def odir_search_settings(config: Mapping) -> dict:
    """What the lambda, mu search of one (space, hp, dataset) depends on besides the logits:
    the searched stages, the sample, folds and grid, the split (validation parts) and the
    fit's iteration limits (recalibration-spec.md, "Choosing lambda and mu")."""
    search = dict(config.get("recalibration", {}).get("odir", {}).get("search", {}))
    rec = recalibration_settings(config)
    return {"stages": odir_searched_stages(config),
            "networks": int(search.get("networks", 64)), "folds": int(search.get("folds", 5)),
            "seed": int(search.get("seed", 0)),
            "grid": [float(g) for g in search.get("grid", DEFAULT_ODIR_GRID)],
            "split": {"val_fraction": config["temperature"]["val_fraction"], "seed": config["temperature"]["seed"]},
            "max_iterations": rec.get("max_iterations", 1000), "tolerance": rec.get("tolerance", 1e-6)}


def search_sample(selected: list[int], networks: int, seed: int) -> list[int]:
    """The seeded sample of a population's networks the lambda, mu search fits (sorted)."""
    import numpy as np

    selected = sorted(int(i) for i in selected)
    if len(selected) <= networks:
        return selected
    chosen = np.random.RandomState(seed).choice(len(selected), size=networks, replace=False)
    return sorted(selected[i] for i in chosen)


def analysis_settings(config: Mapping) -> dict:
    """What the analysis and the report depend on besides the tables."""
    return {"analysis": dict(config["analysis"]), "bins": list(config["bins"]),
            "demo": bool(config["minibench"]["build"]), "robustness": dict(config.get("robustness") or {})}


def as_json(settings: Mapping) -> str:
    """Stable text for ``params`` (sorted keys): equal settings give equal strings."""
    return json.dumps(settings, sort_keys=True)
