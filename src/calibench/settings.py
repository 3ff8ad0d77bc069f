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


def measurement_settings(config: Mapping) -> dict:
    """What a shard's numbers depend on besides its logits: bin counts, TACE threshold, the
    temperature fit (method, validation fraction, split seed)."""
    return {"bins": list(config["bins"]), "tace_threshold": config["tace_threshold"],
            "temperature": dict(config["temperature"])}


def analysis_settings(config: Mapping) -> dict:
    """What the analysis and the report depend on besides the tables."""
    return {"analysis": dict(config["analysis"]), "bins": list(config["bins"]),
            "demo": bool(config["minibench"]["build"])}


def as_json(settings: Mapping) -> str:
    """Stable text for ``params`` (sorted keys): equal settings give equal strings."""
    return json.dumps(settings, sort_keys=True)
