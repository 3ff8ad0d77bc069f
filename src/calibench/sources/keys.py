"""What identifies the evaluation data a source's logits come from: the parts of a logits key
(the store's :func:`calibench.store.logits.digest`) that every source shares."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from calibench.config.check import schema_default
from calibench.inference.data import EVAL_FILES, MEAN_STD, svhn_subset_rows, svhn_test_size
from calibench.store.logits import file_sha256


def eval_set_fields(dataset: str, datasets_root: str | Path) -> dict:
    """What identifies an evaluation set: its file's content and NATS-Bench's normalisation
    for it (not its path: moving the datasets keeps the logits valid)."""
    path = Path(datasets_root) / EVAL_FILES[dataset]
    if not path.is_file():
        raise FileNotFoundError(f"{dataset} evaluation set not found: {path} (datasets_root: {datasets_root})")
    return {"dataset": dataset, "file": EVAL_FILES[dataset], "sha256": file_sha256(path),
            "mean_std": MEAN_STD[dataset]}


def ood_fields(dataset: str, ood: Mapping) -> dict | None:
    """The OoD settings a dataset's logits depend on (CIFAR-10 only; None elsewhere).

    ``ood.svhn_subset`` enters only when it selects fewer images than the SVHN file holds, as
    ``svhn_subset``: the count, the file's size, the seed and the SHA-256 of the rows drawn
    (:func:`svhn_subset_record`), so null (and a subset of every image) keeps the key that
    logits stored before the setting existed carry."""
    if dataset != "cifar10":
        return None
    sets = sorted(ood.get("sets", []))
    if "svhn" in sets and not ood.get("svhn"):
        sets.remove("svhn")  # no SVHN file configured: the set is not evaluated
    fields = {"sets": sets, "noise_severity": int(ood.get("noise_severity", 5)), "noise_seed": 0,
              "svhn_sha256": file_sha256(ood["svhn"]) if "svhn" in sets else None}
    subset = svhn_subset_record(ood) if "svhn" in sets else None
    if subset is not None:
        fields["svhn_subset"] = subset
    return fields


def _ood_setting(ood: Mapping, key: str):
    return ood[key] if key in ood else schema_default("ood", key)


def svhn_subset_record(ood: Mapping) -> dict | None:
    """Which SVHN images ``ood.svhn_subset`` selects, as the logits key (and so every CIFAR-10
    logits file's ``key_fields``) records it: ``{"n", "of", "seed", "rows_sha256"}``, the
    rows being :func:`calibench.inference.data.svhn_subset_rows` ``(of, n, seed)`` as
    little-endian int64; None for every image. A subset larger than the file is a ValueError
    naming the file and both sizes."""
    subset = _ood_setting(ood, "svhn_subset")
    if subset is None or not ood.get("svhn"):
        return None
    seed = int(_ood_setting(ood, "svhn_subset_seed"))
    total = svhn_test_size(ood["svhn"])
    rows = svhn_subset_rows(total, subset, seed, ood["svhn"])
    if rows is None:
        return None
    return {"n": int(len(rows)), "of": total, "seed": seed,
            "rows_sha256": hashlib.sha256(rows.astype("<i8").tobytes()).hexdigest()}
