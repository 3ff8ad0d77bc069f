"""Population sources: where the networks of a population and their logits come from.

Everything after the logits store (recalibration, metrics, shards, tables, analysis,
report, queries) is shared by every source. A source supplies three things for a
population: its members and their chunks (the population document), each member's
logits on each dataset into the store (the inference job), and each dataset's labels.

* ``nats`` (:mod:`calibench.sources.nats`): NATS-Bench TSS and SSS from their archives.
* ``logits`` (:mod:`calibench.sources.logits_dir`): a directory of per-model logits.
* ``torch`` (:mod:`calibench.sources.torch_models`): torch models named by callables.
"""

from __future__ import annotations


from collections.abc import Mapping
from importlib import import_module
from pathlib import Path

from calibench.sources.errors import SourceError  # noqa: E402  (re-exported)

MODULES = {"nats": ".nats.jobs", "logits": ".logits_dir", "torch": ".torch_models"}




def source_module(settings: Mapping):
    """The module of the source a stage's ``settings`` name (NATS-Bench's carry no ``source``)."""
    return import_module(MODULES[settings.get("source", "nats")], __name__)


def check_populations(config: Mapping, files=()) -> None:
    """Before any job: :class:`calibench.config.check.ConfigError` naming the key, the value and
    the config file of each NATS-Bench ``population`` entry that selects no network, or one the
    space's archive does not hold (its size from the archive's meta or the mini benchmark's
    ``minibench.n_<space>``: :func:`calibench.sources.nats.population.check_selections`)."""
    from calibench.config.check import refuse
    from calibench.sources.nats.population import check_selections

    refuse(check_selections(config), files)


def write_population(settings: Mapping, space: str, out: str | Path) -> dict:
    """The members of a population and their chunks (the workflow's checkpoint)."""
    return source_module(settings).write_population(settings, space, out)


def write_labels(settings: Mapping, dataset: str, out: str | Path, space: str | None = None) -> Path:
    """One dataset's labels into the logits store."""
    module = source_module(settings)
    if settings.get("source", "nats") == "nats":
        return module.write_labels(settings, dataset, out)
    return module.write_labels(settings, space, dataset, out)


def infer_chunk(settings: Mapping, runtime: Mapping, space: str, hp: str, chunk: int, results: str | Path,
                manifest: str | Path, progress: bool = True) -> dict:
    """One chunk's logits on every dataset of the population into the store, then its manifest."""
    return source_module(settings).infer_chunk(settings, runtime, space, hp, chunk, results, manifest, progress)


def make_minibench(out: str | Path, sizes: Mapping, progress: bool = True, workers: int = 1) -> Path:
    """The embedded mini benchmark (:mod:`calibench.sources.nats.minibench`): NATS-Bench's
    on-disk formats, synthetic data. ``sizes``: fields of its ``MiniBenchSpec``; ``workers``:
    architecture files built at once (the same files)."""
    from calibench.sources.nats.minibench import MiniBenchSpec, build_minibench

    return build_minibench(out, MiniBenchSpec(**sizes), progress=progress, workers=workers)
