"""A population of torch models named by Python callables, run through the same inference
engine as NATS-Bench's networks (batched, on the configured device, failures recorded per
model).

Config (docs/populations.md, "Your own population")::

    populations:
      zoo:
        source: torch
        models: mypackage.zoo:build          # or a list of such callables
        python_path: [path/to/code]          # optional: put on sys.path first
        transform: mypackage.zoo:preprocess  # optional: uint8 (B, C, H, W) tensor -> model input
        datasets: [cifar10, cifar100]        # the standard test sets under datasets_root
        data: {mine: mypackage.zoo:my_test_set}   # and/or own (images, labels): a callable or an .npz
        version: "1"                         # optional: change it when weights change outside the code

A ``models`` callable returns a ``torch.nn.Module``, a list of them, a list of ``(name,
module)`` pairs or a dict ``{name: module}``; or a pair ``(that, transform)``. Without a
transform, the standard datasets get NATS-Bench's normalisation (as its networks do) and
own data is scaled to [0, 1] if it is uint8. A model that raises, returns the wrong shape
(e.g. the wrong number of classes) or non-finite logits is a failure naming it; the others go
on. A callable that cannot be imported stops the population's job with a message naming
the config key and the callable.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from calibench import integrity
from calibench.config.check import schema_default
from calibench.store import logits as store
from calibench.sources import SourceError, keys
from calibench.user_code import on_path

log = logging.getLogger(__name__)

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def resolve(spec: str, key: str, python_path: Sequence[str] = ()) -> Callable:
    """The callable ``package.module:function`` names; SourceError naming ``key`` and ``spec``."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise SourceError(f"{key}: {spec!r} is not 'package.module:function'")
    module_name, attr = spec.split(":")
    with on_path(python_path):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise SourceError(f"{key}: cannot import {module_name!r} for {spec!r} ({type(exc).__name__}: {exc}); "
                              f"python_path: {list(python_path) or 'none'}") from exc
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SourceError(f"{key}: module {module_name!r} has no {attr!r} (for {spec!r})")
        target = getattr(target, part)
    if not callable(target):
        raise SourceError(f"{key}: {spec!r} is not callable")
    return target


def _named(returned, spec: str) -> tuple[list[tuple[str, object]], Callable | None]:
    """A models callable's return value as (name, module) pairs, and its transform if it gave one."""
    import torch

    transform = None
    if isinstance(returned, tuple) and len(returned) == 2 and callable(returned[1]) and not isinstance(returned[1], torch.nn.Module):
        returned, transform = returned
    base = spec.split(":")[1].split(".")[-1]
    if isinstance(returned, torch.nn.Module):
        pairs = [(base, returned)]
    elif isinstance(returned, Mapping):
        pairs = [(str(k), v) for k, v in returned.items()]
    elif isinstance(returned, Sequence):
        pairs = [(str(m[0]), m[1]) if isinstance(m, tuple) else (f"{base}-{i}", m) for i, m in enumerate(returned)]
    else:
        raise SourceError(f"{spec}: returned {type(returned).__name__}; expected a torch.nn.Module, a list of them, "
                          "(name, module) pairs or a dict")
    for name, model in pairs:
        if not MODEL_NAME.fullmatch(name):
            raise SourceError(f"{spec}: model name {name!r}: letters, digits, . _ + - only")
        if not isinstance(model, torch.nn.Module):
            raise SourceError(f"{spec}: model {name!r} is a {type(model).__name__}, not a torch.nn.Module")
    return pairs, transform


def load_models(settings: Mapping) -> tuple[list[tuple[str, object]], dict[str, Callable | None], dict[str, str]]:
    """Every model of the population: (name, module) pairs in config order, the transform each
    model's callable gave (by name) and the callable each came from; SourceError on a
    callable that cannot be imported or called, or a name given twice."""
    python_path = settings.get("python_path") or []
    pairs, transforms, origin = [], {}, {}
    for i, entry in enumerate(settings["models"]):
        spec = entry["callable"]
        fn = resolve(spec, f"models[{i}]", python_path)
        with on_path(python_path):
            try:
                returned = fn()
            except Exception as exc:
                raise SourceError(f"models[{i}]: {spec} raised {type(exc).__name__}: {exc}") from exc
        found, transform = _named(returned, spec)
        for name, model in found:
            if name in origin:
                raise SourceError(f"models[{i}]: {spec} gives model {name!r}, already given by {origin[name]}")
            origin[name] = spec
            transforms[name] = transform
            pairs.append((name, model))
    if not pairs:
        raise SourceError("models: the callables gave no model")
    return pairs, transforms, origin


def _count_parameters(model) -> float:
    return float(sum(p.numel() for p in model.parameters()))


def write_population(settings: Mapping, space: str, out: str | Path) -> dict:
    """The models the callables give (instantiated once to learn their names and sizes), by their
    stable indices (:mod:`calibench.sources.indices`; the callables' order on a first build)."""
    from calibench import layout
    from calibench.integrity import write_json
    from calibench.sources import indices
    from calibench.sources.logits_dir import by_index
    from calibench.sources.nats.population import chunks

    pairs, _, origin = load_models(settings)
    names = [n for n, _ in pairs]
    arch_strs, selected, index = indices.assign(names, layout.population_indices_path(Path(out).parent.parent, space))
    rows = [index[n] for n in names]
    doc = {"space": space, "source": "torch", "meta_sha256": store.digest({"models": settings["models"], "names": names}),
           "arch_strs": arch_strs, "representatives": None,
           "metadata": {"callable": by_index([origin[n] for n in names], rows, len(arch_strs))},
           "numbers": {"params": by_index([_count_parameters(m) for _, m in pairs], rows, len(arch_strs))},
           "selected": selected, "chunks": chunks(selected, int(settings["chunk_size"]))}
    write_json(doc, out)
    log.info("%s: %d models from %s, %d chunks", space, len(names),
             ", ".join(m["callable"] for m in settings["models"]), len(doc["chunks"]))
    return doc


# ---------------------------------------------------------------- evaluation data

def own_data(spec: str, key: str, python_path: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray, int | None]:
    """A user's test set: ``images`` (N, C, H, W), ``labels`` (N,) and the class count (None where
    not given: the largest label + 1) from an ``.npz`` file (``images``, ``labels``, optional
    ``classes``) or a callable returning ``(images, labels)`` or ``(images, labels, classes)``;
    SourceError naming ``key`` if unusable."""
    classes = None
    if ":" in spec and not Path(spec).is_file():
        with on_path(python_path):
            try:
                returned = tuple(resolve(spec, key, python_path)())
                images, labels = returned[:2]
                classes = returned[2] if len(returned) == 3 else None
                if len(returned) not in (2, 3):
                    raise ValueError(f"returned {len(returned)} values")
            except SourceError:
                raise
            except Exception as exc:
                raise SourceError(f"{key}: {spec} raised or returned no (images, labels[, classes]) "
                                  f"({type(exc).__name__}: {exc})") from exc
        source = spec
    else:
        path = Path(spec)
        if not path.is_file():
            raise SourceError(f"{key}: {path}: no such file")
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("images", "labels") if k not in f.files]
            if missing:
                raise SourceError(f"{key}: {path}: no {missing[0]!r} array (it has: {', '.join(f.files)})")
            images, labels = f["images"], f["labels"]
            classes = f["classes"] if "classes" in f.files else None
        source = str(path)
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim < 2 or labels.ndim != 1 or len(images) != len(labels) or not np.issubdtype(labels.dtype, np.integer):
        raise SourceError(f"{key}: {source}: expected images (N, ...) and integer labels (N,), got "
                          f"{images.dtype} {images.shape} and {labels.dtype} {labels.shape}")
    if classes is not None:
        value = np.asarray(classes)
        if value.ndim != 0 or not np.issubdtype(value.dtype, np.integer) or (len(labels) and value <= labels.max()):
            raise SourceError(f"{key}: {source}: classes must be one integer above every label (largest "
                              f"{int(labels.max()) if len(labels) else None}), got {classes!r}")
        classes = int(value)
    return images, labels.astype(np.int64), classes


def _dataset_classes(dataset: str, labels: np.ndarray, given: int | None = None) -> int:
    """The class count a model's output must have: a standard dataset's, the own data's ``classes``,
    else its largest label + 1."""
    from calibench.inference.data import NUM_CLASSES

    if dataset in NUM_CLASSES:
        return NUM_CLASSES[dataset]
    return int(given) if given is not None else int(labels.max()) + 1


def _eval_fields(settings: Mapping, dataset: str) -> dict:
    if dataset in settings.get("data", {}):
        return {"own": settings["data"][dataset]}
    return keys.eval_set_fields(dataset, settings["datasets_root"])


def write_labels(settings: Mapping, space: str, dataset: str, out: str | Path) -> Path:
    """A dataset's labels: the standard test set's, or the user's own data's."""
    if dataset in settings.get("data", {}):
        _, labels, classes = own_data(settings["data"][dataset]["callable"] if "callable" in settings["data"][dataset]
                                      else settings["data"][dataset]["file"], f"populations.{space}.data.{dataset}",
                                      settings.get("python_path") or [])
        source = json.dumps(settings["data"][dataset])
        return store.write_labels(out, labels, dataset=dataset, key=store.digest(_eval_fields(settings, dataset)),
                                  source=source, classes=_dataset_classes(dataset, labels, classes))
    else:
        from calibench.inference.data import load_eval_set

        eval_set = load_eval_set(dataset, settings["datasets_root"])
        labels, source = eval_set.labels, str(eval_set.source)
    return store.write_labels(out, labels, dataset=dataset, key=store.digest(_eval_fields(settings, dataset)),
                              source=source)


def _eval_data(settings: Mapping, space: str, dataset: str, device, transform: Callable | None):
    """The evaluation set (and CIFAR-10's OoD sets) on the device, through ``transform`` if given,
    and the class count the user's own data gives (None otherwise)."""
    import torch

    from calibench.inference.engine import EvalData, load_eval_data, ood_options

    ood = settings["ood"]
    if dataset not in settings.get("data", {}):
        if transform is None:
            return load_eval_data(dataset, settings["datasets_root"], device=device, **ood_options(ood)), None
        raw = load_eval_data(dataset, settings["datasets_root"], device="cpu", ood=())  # labels and source
        from calibench.inference.data import gaussian_noise, load_eval_set, load_svhn_test

        images = load_eval_set(dataset, settings["datasets_root"]).images
        sets = {}
        if dataset == "cifar10":
            if "gaussian_noise" in ood["sets"]:
                sets["gaussian_noise"] = gaussian_noise(images, severity=ood["noise_severity"], seed=0)
            if "svhn" in ood["sets"] and ood.get("svhn"):
                options = ood_options(ood)
                sets["svhn"] = load_svhn_test(ood["svhn"], subset=options["svhn_subset"],
                                              seed=options["svhn_subset_seed"]).images
        return EvalData(dataset, torch.as_tensor(transform(torch.from_numpy(images))).to(device), raw.labels.to(device),
                        raw.source, {k: torch.as_tensor(transform(torch.from_numpy(v))).to(device)
                                     for k, v in sets.items()}), None
    entry = settings["data"][dataset]
    images, labels, classes = own_data(entry.get("callable") or entry.get("file"),
                                       f"populations.{space}.data.{dataset}", settings.get("python_path") or [])
    x = torch.from_numpy(np.ascontiguousarray(images))
    if transform is not None:
        x = torch.as_tensor(transform(x))
    elif x.dtype == torch.uint8:
        x = x.float() / 255.0
    return EvalData(dataset, x.float().to(device), torch.from_numpy(labels).to(device), json.dumps(entry)), classes


def infer_chunk(settings: Mapping, runtime: Mapping, space: str, hp: str, chunk: int, results: str | Path,
                manifest: str | Path, progress: bool = True) -> dict:
    """Logits of one chunk's models on every dataset of the population into the store."""
    from calibench.inference.jobs import store_chunk_logits
    from calibench.layout import population_path

    results = Path(results)
    doc = integrity.read_json(population_path(results, space))
    indices = doc["chunks"][chunk]
    names = doc["arch_strs"]
    datasets = [*settings.get("datasets", []), *settings.get("data", {})]
    origin = doc["metadata"]["callable"]
    fields = {(i, d): {"source": "torch", "model": names[i], "callable": next(m for m in settings["models"]
                                                                              if m["callable"] == origin[i]),
                       "transform": settings.get("transform"), "eval_set": _eval_fields(settings, d),
                       "ood": keys.ood_fields(d, settings["ood"]) if d not in settings.get("data", {}) else None,
                       "version": settings.get("version"), "inference_version": settings["inference_version"]}
              for i in indices for d in datasets}
    labels: dict[str, np.ndarray] = {}

    def produce(todo):
        from calibench.inference.engine import module_logits, resolve_device

        device = resolve_device(runtime.get("device", "auto"))
        pairs, transforms, _ = load_models(settings)
        models = dict(pairs)
        default = (resolve(settings["transform"]["callable"], "transform", settings.get("python_path") or [])
                   if settings.get("transform") else None)
        cache: dict = {}
        batch_size = int(runtime.get("batch_size", schema_default("batch_size")))
        for index, needed in todo.items():
            name = names[index]
            for dataset in needed:
                if name not in models:
                    yield index, dataset, {"seed": None, "source": origin[index],
                                           "reason": f"model {name!r}: no longer given by {origin[index]}; rerun the "
                                                     "population job"}
                    continue
                transform = transforms.get(name) or default
                key = (dataset, id(transform))
                if key not in cache:
                    cache[key] = _eval_data(settings, space, dataset, device, transform)
                    labels.setdefault(dataset, cache[key][0].labels.cpu().numpy())
                data, given = cache[key]
                classes = _dataset_classes(dataset, labels[dataset], given)
                try:
                    net = models[name].eval().to(device)
                    logits, ood = module_logits(net, data, classes, batch_size)
                except Exception as exc:  # the user's code: any exception is this model's failure
                    reason = f"model {name!r} ({origin[index]}) on {dataset}: {type(exc).__name__}: {exc}"
                    yield index, dataset, {"seed": None, "source": origin[index], "reason": reason}
                    continue
                finally:
                    models[name].to("cpu")
                yield index, dataset, [store.SeedLogits(0, float(doc["numbers"]["params"][index]), float("nan"),
                                                        float("nan"), origin[index],
                                                        {store.TEST_SET: logits.numpy(),
                                                         **{f"ood_{k}": v.numpy() for k, v in ood.items()}})]

    def labels_of(dataset: str) -> np.ndarray:
        return labels[dataset]

    return store_chunk_logits(space, hp, chunk, results, manifest, indices, datasets, fields, names, labels_of,
                              produce, progress, what="models")
