"""A population given as logits on disk: no inference, the models' logits are imported into
the logits store (keyed by each file's content) and measured like any network's.

Two layouts (docs/populations.md, "Your own population"):

* **npz** (three lines of numpy per model)::

      {path}/models.csv                 columns: model, then any metadata (family, loss, params, flops, ...)
      {path}/{dataset}/{model}.npz      logits (N, K) float32 or float64, labels (N,) int,
                                        optional ood_{name} (Q, K): an OoD set (AUROC against the test set)

  written, for one model, with ``numpy.savez(f"{path}/cifar10/{name}.npz", logits=z, labels=y)``.
  Every model of a dataset is evaluated on the same test set: the labels most models carry
  are the dataset's, and a model whose labels differ is a failure naming its file.
* **store**: a calibench logits store (``results/logits/``, :mod:`calibench.store.logits`) or a
  results directory holding one; ``space`` / ``hp`` options pick one tree when it holds
  several. Its files' keys enter ours, so a changed store file is imported again.

One model's bad file (missing, unreadable, no ``labels``, N of logits and labels differ,
non-finite logits, labels out of range) is a failure naming the file and the reason,
recorded in the manifest and the failures table; the others go on. A ``models.csv`` that
cannot be used (no ``model`` column, duplicate names, a metadata column that clashes with a
result column) stops the population's job with a message naming the file and column.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from calibench import integrity
from calibench import layout as paths  # (``layout`` below is this module's reading of a folder's layout)
from calibench.store import logits as store
from calibench.layout import labels_path, population_path
from calibench.vocabulary import ROW_COLUMNS, STAGES, TABLE_EXTRA_COLUMNS
from calibench.config.settings import INFERENCE_VERSION
from calibench.sources import SourceError

log = logging.getLogger(__name__)

MODELS_CSV = "models.csv"
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# Metadata columns that would shadow a result column (params and flops feed the provenance).
RESERVED = (set(ROW_COLUMNS) | set(TABLE_EXTRA_COLUMNS)) - {"params", "flops"}
STAGE_PREFIXES = tuple(f"{s}_" for s in (*STAGES, "hcs"))


# ---------------------------------------------------------------- the directory

def _dataset_folders() -> list[str]:
    """Globs of a logits store's dataset folders: ``space=*/dataset=*`` (a population) and
    ``space=*/hp=*/dataset=*`` (a NATS-Bench space and schedule)."""
    return [str(paths.partition("*", hp) / paths.dataset_partition("*")) for hp in ("", "*")]


def layout(path: str | Path) -> tuple[str, Path]:
    """(``"npz"`` or ``"store"``, the directory to read); SourceError naming the path otherwise."""
    root = Path(path)
    if not root.is_dir():
        raise SourceError(f"{root}: no such directory (a logits population's path)")
    if (root / MODELS_CSV).is_file():
        return "npz", root
    for candidate in (root, root / "logits"):
        if any(any(candidate.glob(pattern)) for pattern in _dataset_folders()):
            return "store", candidate
    raise SourceError(f"{root}: neither a {MODELS_CSV} (npz layout) nor a calibench logits store "
                      f"({paths.partition('*', '')}/...)")


def read_models_csv(path: str | Path):
    """The models and their metadata; SourceError naming the file and the column or row."""
    import pandas as pd

    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"model": str}, keep_default_na=True)
    except Exception as exc:
        raise SourceError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc
    if "model" not in df.columns:
        raise SourceError(f"{path}: no 'model' column (columns: {', '.join(map(str, df.columns))})")
    if df.empty:
        raise SourceError(f"{path}: lists no model (a header only); one row per model, its name under 'model'")
    names = df["model"]
    if names.isna().any():
        raise SourceError(f"{path}: row(s) {', '.join(str(i + 2) for i in np.flatnonzero(names.isna()))} have no model name")
    bad = [n for n in names if not MODEL_NAME.fullmatch(n)]
    if bad:
        raise SourceError(f"{path}: model name(s) {bad[:5]} are not file names (letters, digits, . _ + -)")
    dup = sorted(n for n, c in Counter(names).items() if c > 1)
    if dup:
        raise SourceError(f"{path}: model name(s) listed twice: {', '.join(dup[:10])}")
    clash = [c for c in df.columns if c != "model" and (c in RESERVED or str(c).startswith(STAGE_PREFIXES))]
    if clash:
        raise SourceError(f"{path}: column(s) {', '.join(clash)} would shadow result columns; rename them")
    for col in ("params", "flops"):
        if col in df.columns and not pd.api.types.is_numeric_dtype(df[col]):
            raise SourceError(f"{path}: column {col!r} must be numeric")
    return df.reset_index(drop=True)


def _metadata(df) -> dict[str, list]:
    """models.csv's metadata columns as JSON-able lists (NaN -> null), params/flops excluded."""
    out = {}
    for col in df.columns:
        if col in ("model", "params", "flops"):
            continue
        values = df[col].astype(object).where(df[col].notna(), None).tolist()
        out[str(col)] = [v.item() if isinstance(v, np.generic) else v for v in values]
    return out


def _store_tree(root: Path, settings: Mapping) -> Path:
    """The one ``space=…[/hp=…]`` tree of a store the settings pick."""
    trees = sorted({p.parent for pattern in _dataset_folders() for p in root.glob(pattern)})
    if settings.get("space"):
        trees = [t for t in trees if paths.partition(settings["space"], "").name in t.parts]
    if settings.get("hp"):
        trees = [t for t in trees if t.name == paths.partition("", settings["hp"]).name]
    if len(trees) != 1:
        found = ", ".join(str(t.relative_to(root)) for t in trees) or "none"
        raise SourceError(f"{root}: {len(trees)} logits trees match (found: {found}); give the population's "
                          "space (and hp) options")
    return trees[0]


def _store_members(tree: Path, datasets) -> tuple[list[str], dict[str, list], list[int]]:
    """Names, metadata and original indices of a store tree's networks (from the footers)."""
    found: dict[int, dict] = {}
    for dataset in datasets:
        for path in sorted((tree / paths.dataset_partition(dataset)).glob(paths.MEMBER_GLOB)):
            index = paths.member_index(path)
            if index in found:
                continue
            try:
                meta = store._metadata(path)
            except (OSError, store.StoreError, ValueError) as exc:
                log.warning("%s: %s; its name is taken from the file", path, exc)
                meta = {}
            found[index] = meta
    order = sorted(found)
    names = [found[i].get("arch_str") or f"arch{i:06d}" for i in order]
    return names, {"source_index": order}, order


# ---------------------------------------------------------------- the jobs

def by_index(values: Sequence, rows: Sequence[int], size: int) -> list:
    """``values`` (one per listed model) placed at the models' indices; None at the others."""
    out = [None] * size
    for value, i in zip(values, rows):
        out[i] = value
    return out


def write_population(settings: Mapping, space: str, out: str | Path) -> dict:
    """Every model of the directory and its chunks: a models.csv's models by their stable
    indices (:mod:`calibench.sources.indices`; models.csv order on a first build), a store's
    by its own."""
    from calibench.integrity import write_json
    from calibench.sources import indices
    from calibench.sources.nats.population import chunks

    kind, root = layout(settings["path"])
    if kind == "npz":
        df = read_models_csv(root / MODELS_CSV)
        names = df["model"].tolist()
        arch_strs, selected, index = indices.assign(
            names, paths.population_indices_path(Path(out).parent.parent, space))
        rows = [index[n] for n in names]
        metadata = {c: by_index(v, rows, len(arch_strs)) for c, v in _metadata(df).items()}
        numbers = {c: by_index([None if v != v else float(v) for v in df[c]], rows, len(arch_strs))
                   for c in ("params", "flops") if c in df.columns}
        identity = store.file_sha256(root / MODELS_CSV)
        missing = [f"{d}/{n}.npz" for d in settings["datasets"] for n in names if not (root / d / f"{n}.npz").is_file()]
        for m in missing[:20]:
            log.warning("%s names model %s, but %s is missing: it will be recorded as a failure", root / MODELS_CSV,
                        m.split("/")[1][:-4], root / m)
    else:
        tree = _store_tree(root, settings)
        names, metadata, _ = _store_members(tree, settings["datasets"])
        numbers = {}
        identity = hashlib.sha256(json.dumps(names).encode()).hexdigest()
        arch_strs, selected = names, list(range(len(names)))
    doc = {"space": space, "source": "logits", "layout": kind, "path": str(root), "meta_sha256": identity,
           "arch_strs": arch_strs, "representatives": None, "metadata": metadata, "numbers": numbers,
           "selected": selected, "chunks": chunks(selected, int(settings["chunk_size"]))}
    if not names:
        raise SourceError(f"{root}: no models")
    write_json(doc, out)
    log.info("%s: %d models from %s (%s layout), %d chunks, metadata columns: %s", space, len(names), root, kind,
             len(doc["chunks"]), ", ".join(metadata) or "none")
    return doc


def _npz_path(root: Path, dataset: str, name: str) -> Path:
    return root / dataset / f"{name}.npz"


def read_npz(path: str | Path, num_labels: int | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(logits (N, K), labels (N,) int64, {ood name: (Q, K)}) of one model's file, checked;
    SourceError naming the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as exc:
        raise SourceError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc
    for key in ("logits", "labels"):
        if key not in arrays:
            raise SourceError(f"{path}: no {key!r} array (it has: {', '.join(arrays) or 'nothing'})")
    z, y = arrays["logits"], arrays["labels"]
    if z.ndim != 2 or z.shape[1] < 2 or z.dtype not in (np.float32, np.float64):
        raise SourceError(f"{path}: 'logits' must be float32 or float64 of shape (N, K >= 2), got {z.dtype} {z.shape}")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise SourceError(f"{path}: 'labels' must be integers of shape (N,), got {y.dtype} {y.shape}")
    if len(y) != len(z):
        raise SourceError(f"{path}: {len(z)} rows of logits but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() >= z.shape[1]):
        raise SourceError(f"{path}: labels outside [0, {z.shape[1]}), the classes of its {z.shape[1]} logit columns "
                          f"(labels: min {y.min()}, max {y.max()}; too few columns, or labels counted from 1?)")
    bad = ~np.isfinite(z).all(axis=1)
    if bad.any():
        raise SourceError(f"{path}: non-finite logits in {int(bad.sum())} of {len(z)} rows (first: row {int(np.argmax(bad))})")
    ood = {}
    for key, value in arrays.items():
        if key.startswith("ood_"):
            if value.ndim != 2 or value.shape[1] != z.shape[1] or value.dtype != z.dtype:
                raise SourceError(f"{path}: {key!r} must be {z.dtype} of shape (Q, {z.shape[1]}), got "
                                  f"{value.dtype} {value.shape}")
            if not np.isfinite(value).all():
                raise SourceError(f"{path}: {key!r} has non-finite logits")
            ood[key[len("ood_"):]] = value
    return z, y.astype(np.int64), ood


def _npz_columns(path: Path) -> int | None:
    """The column count of a file's ``logits`` array, from its header alone; None if unreadable."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf, zf.open("logits.npy") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape = read(fh)[0]
    except Exception:  # the model's own import reports it
        return None
    return int(shape[1]) if len(shape) == 2 else None


def write_labels(settings: Mapping, space: str, dataset: str, out: str | Path) -> Path:
    """A dataset's labels: those most of the population's files carry (npz), with the logit
    column count most of those files have (``classes``: a model with another is a failure of
    that model), or the store's."""
    kind, root = layout(settings["path"])
    if kind == "store":
        own = paths.store_labels_path(root, dataset, settings.get("space") or None)
        source = own if settings.get("space") and own.is_file() else paths.store_labels_path(root, dataset)
        labels = store.read_labels(source)
        return store.write_labels(out, labels.labels, dataset=dataset, key=labels.meta["key"], source=str(source))
    names = read_models_csv(root / MODELS_CSV)["model"].tolist()
    seen: dict[str, tuple[np.ndarray, str]] = {}
    votes: Counter = Counter()
    columns: dict[str, Counter] = {}
    for name in names:
        path = _npz_path(root, dataset, name)
        try:
            with np.load(path, allow_pickle=False) as f:
                y = np.asarray(f["labels"]).astype(np.int64)
        except Exception as exc:  # the model's own import reports it
            log.warning("%s: no usable labels (%s: %s)", path, type(exc).__name__, exc)
            continue
        sha = store.labels_sha256(y)
        seen.setdefault(sha, (y, str(path)))
        votes[sha] += 1
        columns.setdefault(sha, Counter())[_npz_columns(path)] += 1
    if not votes:
        raise SourceError(f"{root / dataset}: no model file of dataset {dataset} has usable labels")
    sha, count = votes.most_common(1)[0]
    if len(votes) > 1:
        log.warning("%s: %d different label arrays; those of %d of %d files are the dataset's (first: %s)",
                    root / dataset, len(votes), count, sum(votes.values()), seen[sha][1])
    y, first = seen[sha]
    counts = Counter({k: v for k, v in columns[sha].items() if k is not None})
    classes = counts.most_common(1)[0][0] if counts else None
    if len(counts) > 1:
        log.warning("%s: the files with the dataset's labels have %s logit columns; %d of them have %d, the "
                    "dataset's class count (a file with another is a failure of its model)", root / dataset,
                    " or ".join(str(k) for k in sorted(counts)), counts[classes], classes)
    return store.write_labels(out, y, dataset=dataset, key=sha[:16], source=first, classes=classes)


def infer_chunk(settings: Mapping, runtime: Mapping, space: str, hp: str, chunk: int, results: str | Path,
                manifest: str | Path, progress: bool = True) -> dict:
    """Import one chunk's logits into the store (no inference); each model's file content is
    its key, so an unchanged file is never read twice."""
    from calibench.inference.jobs import store_chunk_logits

    results = Path(results)
    doc = integrity.read_json(population_path(results, space))
    indices = doc["chunks"][chunk]
    names = doc["arch_strs"]
    datasets = list(settings["datasets"])
    kind, root = layout(settings["path"])
    tree = _store_tree(root, settings) if kind == "store" else None
    source_index = doc["metadata"].get("source_index") if kind == "store" else None

    def file_of(index: int, dataset: str) -> Path:
        if kind == "npz":
            return _npz_path(root, dataset, names[index])
        return tree / paths.dataset_partition(dataset) / paths.member_file(int(source_index[index]))

    def identity(path: Path) -> str | None:
        if not path.is_file():
            return None
        return store.file_sha256(path) if kind == "npz" else store.stored_key(path)

    fields = {(i, d): {"source": "logits", "model": names[i], "dataset": d, "file": file_of(i, d).name,
                       "content": identity(file_of(i, d)), "inference_version": INFERENCE_VERSION}
              for i in indices for d in datasets}
    labels_files = {d: labels_path(results, d, space=space) for d in datasets}
    labels = {}

    def labels_of(dataset: str) -> np.ndarray:
        if dataset not in labels:
            labels[dataset] = store.read_labels(labels_files[dataset])
        return labels[dataset].labels

    def classes_of(dataset: str) -> int | None:
        labels_of(dataset)
        return labels[dataset].meta.get("classes")

    numbers = doc.get("numbers") or {}

    def number(col: str, index: int) -> float:
        value = numbers.get(col, [None] * len(names))[index]
        return float("nan") if value is None else float(value)

    def produce(todo):
        for index, needed in todo.items():
            for dataset in needed:
                path = file_of(index, dataset)
                expected = labels_of(dataset)  # missing: the job's own problem, not this model's (it stops)
                try:
                    if kind == "npz":
                        z, y, ood = read_npz(path)
                        classes = classes_of(dataset)
                        if classes is not None and z.shape[1] != classes:
                            raise SourceError(f"{path}: {z.shape[1]} logit columns, but the {dataset} models have "
                                              f"{classes} (the class count most of its files have)")
                        if store.labels_sha256(y) != store.labels_sha256(expected):
                            raise SourceError(f"{path}: its labels differ from the dataset's ({len(y)} vs "
                                              f"{len(expected)} labels, {int((y != expected).sum()) if len(y) == len(expected) else 'all'} "
                                              "differ); every model of a dataset must be evaluated on the same test set")
                        seeds = [store.SeedLogits(0, number("params", index), number("flops", index), float("nan"),
                                                  str(path), {store.TEST_SET: z, **{f"ood_{k}": v for k, v in ood.items()}})]
                    else:
                        stored = store.read_network_logits(path)
                        if stored.meta["labels_sha256"] != store.labels_sha256(expected):
                            raise SourceError(f"{path}: computed on another {dataset} test set than the store's labels")
                        seeds = stored.seeds
                except (SourceError, store.StoreError, OSError, KeyError, ValueError) as exc:
                    yield index, dataset, {"seed": None, "source": str(path), "reason": f"model {names[index]}: {exc}"}
                    continue
                yield index, dataset, seeds

    return store_chunk_logits(space, hp, chunk, results, manifest, indices, datasets, fields, names, labels_of,
                              produce, progress, what="models")
